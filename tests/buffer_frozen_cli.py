"""Buffers and frozen params end to end (language spec section 9): `cellc run`'s files (buffer.NAME,
no gradient for either) on every back end against the float64 interpreter and a PyTorch autograd
transcription, a buffer given through --inputs; `cellc train`: both bit-identical after training
while the other params move, model.unfreeze, its located errors, a checkpoint that resumes exactly;
`cellc emit`'s P.json and PyTorch module. Ends with "N passed, M failed"."""
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import numpy as np  # noqa: E402
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
CELL = "tests/cells/buffer_frozen.cell"
H, D, T, B = 5, 3, 7, 2
tmp = tempfile.mkdtemp()


def cellc(*args, timeout=300):
    return run([CELLC, *args], timeout)


def path(name):
    return os.path.join(tmp, name)


def libm_log1(n):
    """s4d_real's values, log(j + 1), from the C library's log as cellc takes them (numpy's may differ
    in the last bit)."""
    return np.array([math.log(j + 1.0) for j in range(n)])


# ---- cellc run: the file's names ----
ref = path("ref.st")
r = cellc("run", CELL, "--backend", "interp", "--precision", "f64", "--dims", f"H={H},D={D}", "--T", str(T),
          "--B", str(B), "--seed", "3", "--out", ref)
check("run interp f64 succeeds", r.rc == 0, r.why())
R = sft.load(ref)
check("run: buffers are buffer.NAME, the frozen param param.NAME",
      all(k in R for k in ("buffer.pos", "buffer.P", "param.A_log", "param.W", "param.b")), sorted(R))
check("run: no gradient for a buffer or a frozen param, one for the others",
      not any(k.startswith("grad.") and k.split(".")[-1] in ("pos", "P", "A_log") for k in R)
      and "grad.param.W" in R and "grad.param.b" in R, sorted(R))
check("run: no param.NAME for a buffer", "param.pos" not in R and "param.P" not in R, sorted(R))
check("run: the buffer and the frozen param hold their initializers' values",
      np.array_equal(R["buffer.pos"], 0.5 + 0.25 * np.arange(H))
      and np.array_equal(R["param.A_log"], libm_log1(H)), f"{R['buffer.pos']} {R['param.A_log']}")


# ---- the same cell in PyTorch (float64 autograd): y and every gradient ----
def torch_reference(t):
    import torch
    g = {k: torch.tensor(v, dtype=torch.float64) for k, v in t.items()}
    x = g["x"].clone().requires_grad_(True)
    h = g["h0.h"].clone().requires_grad_(True)
    W = g["param.W"].clone().requires_grad_(True)
    b = g["param.b"].clone().requires_grad_(True)
    A_log, pos, P = g["param.A_log"], g["buffer.pos"], g["buffer.P"]
    a = torch.exp(-0.3 * torch.exp(A_log))
    hs, ys = h, []
    for s in range(x.shape[0]):
        u = x[s] @ W.T + b + pos * torch.tanh(A_log * (x[s] @ P.T))
        hs = a * hs + (1 - a) * torch.tanh(u)
        ys.append(hs)
    y = torch.stack(ys)
    loss = (y * g["dy"]).sum() + (hs * g["dfinal.h"]).sum()
    loss.backward()
    return {"y": y.detach().numpy(), "final.h": hs.detach().numpy(), "grad.x": x.grad.numpy(),
            "grad.h0.h": h.grad.numpy(), "grad.param.W": W.grad.numpy(), "grad.param.b": b.grad.numpy()}


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1e-30, float(np.max(np.abs(b)))))


try:
    want = torch_reference(R)
    worst = max(rel(R[k], v) for k, v in want.items())
    check("run interp f64 against PyTorch autograd (float64): y, final, dx, dh0, dW, db within 1e-9",
          worst < 1e-9, f"worst relative error {worst}")
except ImportError as e:
    check("PyTorch is importable for the reference", False, str(e))

# ---- every back end against the float64 interpreter, on the same inputs (the reference file) ----
for be, prec, mode in (("interp", "f32", "auto"), ("cpu", "f32", "auto"), ("cpu", "f32", "sequential"),
                       ("cuda-emu", "f32", "auto"), ("cuda-emu", "f32", "sequential")):
    out = path(f"{be}-{mode}.st")
    r = cellc("run", CELL, "--backend", be, "--precision", prec, "--mode", mode, "--dims", f"H={H},D={D}",
              "--inputs", ref, "--out", out)
    if r.rc != 0:
        check(f"run {be} {mode} succeeds", False, r.why())
        continue
    S = sft.load(out)
    same_names = sorted(S) == sorted(R)
    worst = max(rel(S[k], R[k]) for k in R if k.startswith(("y", "final.", "grad.")))
    check(f"run {be} {mode}: the same tensors as the interpreter's, within 1e-4 of float64", same_names and worst < 1e-4,
          f"names equal {same_names}, worst {worst}")
    check(f"run {be} {mode}: the buffers and the frozen param written as given",
          all(np.array_equal(S[k], R[k].astype(np.float32)) for k in ("buffer.pos", "buffer.P", "param.A_log")))

# ---- a buffer given through --inputs is used; param.NAME for a buffer is refused ----
given = path("given.st")
sft.write(given, {"buffer.pos": np.full(H, 2.0), "x": R["x"], "dy": R["dy"]})
out = path("given-out.st")
r = cellc("run", CELL, "--backend", "interp", "--precision", "f64", "--dims", f"H={H},D={D}", "--seed", "3",
          "--inputs", given, "--out", out)
if r.rc == 0:
    G = sft.load(out)
    check("--inputs buffer.pos: used (y changes) and written back as given",
          np.array_equal(G["buffer.pos"], np.full(H, 2.0)) and not np.allclose(G["y"], R["y"]))
else:
    check("--inputs buffer.pos is accepted", False, r.why())
bad = path("bad.st")
sft.write(bad, {"param.pos": np.zeros(H)})
r = cellc("run", CELL, "--dims", f"H={H},D={D}", "--inputs", bad, "--out", path("bad-out.st"))
check("--inputs param.pos for a buffer: refused, suggesting buffer.pos",
      r.rc == 1 and "unexpected tensor 'param.pos'" in r.err and "buffer.pos" in r.err, r.why())
bad = path("badgrad.st")
sft.write(bad, {"grad.param.A_log": np.zeros(H)})
r = cellc("run", CELL, "--dims", f"H={H},D={D}", "--inputs", bad, "--out", path("bad-out.st"))
check("--inputs grad.param.A_log: refused (a frozen param has no gradient)",
      r.rc == 1 and "unexpected tensor 'grad.param.A_log'" in r.err, r.why())

# ---- cellc train: buffers and frozen params do not move; model.unfreeze ----
CFG = "examples/adding.cfg"
TRAIN = ("--set", "model.hidden=4", "--set", "task.length=12", "--set", "train.optimizer=adamw",
         "--set", "train.weight_decay=0.5", "--set", "train.lr=0.05", "--set", "train.clip=1",
         "--set", "eval.every=2", "--set", "log.every=1", "--progress", "none")


def train(name, steps, *extra):
    d = path(name)
    r = cellc("train", CELL, CFG, "--out", d, "--set", f"train.steps={steps}", *TRAIN, *extra)
    ok = r.rc == 0 and os.path.exists(os.path.join(d, "checkpoint.safetensors"))
    check(f"train {name} ({steps} steps) succeeds", ok, r.why())
    return sft.load(os.path.join(d, "checkpoint.safetensors")) if ok else None


one, five = train("one", 1), train("five", 5)
if one and five:
    f32 = np.float32
    check("train: the buffers and the frozen param hold their initial values after 5 steps, bit for bit",
          np.array_equal(five["layer.0.A_log"], libm_log1(4).astype(f32))
          and np.array_equal(five["layer.0.pos"], (0.5 + 0.25 * np.arange(4)).astype(f32))
          and np.array_equal(five["layer.0.P"], one["layer.0.P"]),
          f"{five['layer.0.A_log']} {five['layer.0.pos']}")
    check("train: the other params move (W, b)", not np.array_equal(five["layer.0.W"], one["layer.0.W"])
          and not np.array_equal(five["layer.0.b"], one["layer.0.b"]))
    check("train: no optimizer moments for a buffer or a frozen param, moments for the others",
          not any(k.startswith("optim.") and k.split(".")[-1] in ("A_log", "pos", "P") for k in five)
          and "optim.m.layer.0.W" in five, sorted(k for k in five if k.startswith("optim.")))
unf = train("unfrozen", 5, "--set", "model.unfreeze=A_log")
if unf and five:
    check("train model.unfreeze=A_log: A_log moves, the buffers do not",
          not np.array_equal(unf["layer.0.A_log"], five["layer.0.A_log"])
          and np.array_equal(unf["layer.0.pos"], five["layer.0.pos"]) and np.array_equal(unf["layer.0.P"], five["layer.0.P"])
          and "optim.m.layer.0.A_log" in unf)

# the dry run lists them as not learned
r = cellc("train", CELL, CFG, "--dry-run", *TRAIN)
check("train --dry-run: the frozen param and the buffers marked, not counted as learned",
      r.rc == 0 and "(frozen, not learned)" in r.out and r.out.count("(buffer, not learned)") == 2, r.why())

# located errors of model.unfreeze
cfgfile = path("u.cfg")
with open(CFG) as f:
    text = f.read()
with open(cfgfile, "w") as f:
    f.write(text.replace("readout = last", "readout = last\nunfreeze = Alog"))
line = text.replace("readout = last", "readout = last\nunfreeze = Alog").splitlines().index("unfreeze = Alog") + 1
r = cellc("train", CELL, cfgfile, "--dry-run")
check("task.cfg [model] unfreeze = Alog: a located error naming A_log",
      r.rc == 1 and f"u.cfg:{line}:12: error: cell 'buffer_frozen' has no frozen param 'Alog'" in r.err
      and "did you mean 'A_log'" in r.err, r.why())
for value, needle in (("pos", "'pos' is a buffer"), ("W", "param 'W' of cell 'buffer_frozen' is not frozen"),
                      ("A_log, nope", "no frozen param 'nope'")):
    r = cellc("train", CELL, CFG, "--dry-run", "--set", f"model.unfreeze={value}")
    check(f"--set model.unfreeze={value}: refused ({needle})",
          r.rc == 1 and f"--set model.unfreeze={value}" in r.err and needle in r.err, r.why())
r = cellc("train", CELL, CFG, "--dry-run", "--set", "model.unfreeze=A_log, A_log")
check("--set model.unfreeze=A_log, A_log: a name twice is accepted", r.rc == 0, r.why())

# a checkpoint round trip: 2 steps, then --resume to 4, equal to 4 steps in one go
full, part = path("rt-full"), path("rt-part")
a = cellc("train", CELL, CFG, "--out", full, "--set", "train.steps=4", *TRAIN)
b1 = cellc("train", CELL, CFG, "--out", part, "--set", "train.steps=2", *TRAIN)
b2 = cellc("train", CELL, CFG, "--out", part, "--resume", "--set", "train.steps=4", *TRAIN)
if a.rc == 0 and b1.rc == 0 and b2.rc == 0:
    A = sft.load(os.path.join(full, "checkpoint.safetensors"))
    Bk = sft.load(os.path.join(part, "checkpoint.safetensors"))
    check("checkpoint round trip: 2 steps + --resume to 4 equals 4 steps, every tensor bit for bit",
          sorted(A) == sorted(Bk) and all(np.array_equal(A[k], Bk[k]) for k in A) and a.last() == b2.last(),
          f"{a.last()} vs {b2.last()}")
    r = cellc("eval", CELL, CFG, "--checkpoint", os.path.join(full, "checkpoint.safetensors"), *TRAIN[:-2])
    check("eval of the checkpoint succeeds", r.rc == 0, r.why())
    r = cellc("train", CELL, CFG, "--out", part, "--resume", "--set", "train.steps=6", "--set", "model.unfreeze=A_log",
              *TRAIN)
    check("--resume with A_log unfrozen: refused, the checkpoint's cell trains differently",
          r.rc != 0 and "A_log" in r.err, r.why())
else:
    check("checkpoint round trip runs", False, a.why() + " | " + b1.why() + " | " + b2.why())

# ---- cellc emit: P.json marks them; the PyTorch module makes buffers buffers, frozen params fixed ----
em = path("emit")
r = cellc("emit", CELL, "--dims", f"H={H},D={D}", "--out", em, "--torch")
check("emit --torch succeeds", r.rc == 0, r.why())
if r.rc == 0:
    import json
    spec = json.load(open(os.path.join(em, "buffer_frozen.json")))
    marks = {p["name"]: (p.get("buffer", False), p.get("frozen", False)) for p in spec["params"]}
    check("emit: P.json marks the buffers and the frozen param",
          marks == {"W": (False, False), "b": (False, False), "A_log": (False, True), "pos": (True, False),
                    "P": (True, False)}, str(marks))
    code = f"""
import sys, numpy as np, torch
sys.path.insert(0, {em!r}); sys.path.insert(0, {os.path.join(os.getcwd(), "tests", "torch")!r})
import sft, buffer_frozen_torch as M
R = sft.load({ref!r})
m = M.Module()
assert sorted(n for n, _ in m.named_buffers()) == ["P", "pos"], list(m.named_buffers())
assert not m.A_log.requires_grad and m.W.requires_grad
sd = {{"W": R["param.W"], "b": R["param.b"], "A_log": R["param.A_log"], "pos": R["buffer.pos"], "P": R["buffer.P"]}}
m.load_state_dict({{k: torch.tensor(v, dtype=torch.float32) for k, v in sd.items()}})
x = torch.tensor(R["x"], dtype=torch.float32)
y, fin = m(x, {{"h": torch.tensor(R["h0.h"], dtype=torch.float32)}})
((y * torch.tensor(R["dy"], dtype=torch.float32)).sum() + (fin["h"] * torch.tensor(R["dfinal.h"], dtype=torch.float32)).sum()).backward()
def rel(a, b): return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
e = max(rel(y.detach().numpy(), R["y"]), rel(m.W.grad.numpy(), R["grad.param.W"]), rel(m.b.grad.numpy(), R["grad.param.b"]))
assert m.A_log.grad is None and e < 1e-4, (m.A_log.grad, e)
print("ok", e)
"""
    p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=300)
    check("emit: the PyTorch module: buffers registered as buffers, A_log not trainable, y and dW, db within 1e-4 "
          "of the interpreter's float64", p.returncode == 0 and p.stdout.startswith("ok"), p.stdout + p.stderr[-800:])

shutil.rmtree(tmp, ignore_errors=True)
finish()
