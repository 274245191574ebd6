"""cellc diag end to end (spec/cli.md "cellc diag", seeds.md section 5, docs/diagnostics.md):
the exact step Jacobians in jacobians.safetensors against a PyTorch autograd Jacobian of the same
step (tests/torch/cells.py, float64, from the checkpoint's params and the dumped inputs) for every
stdlib cell, complex ones included, to 1e-9; the gates dumped against PyTorch's; diag.json's
shape and its histograms counting every gate value once; the plots; --compare; the error cases
and their exit statuses; the training-time probe [log] grad_per_step.
One PASS/FAIL line per check; the last line is "N passed, M failed"; exit 1 on any failure."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
from clitest import Result, check, finish  # noqa: E402

import torch  # noqa: E402

import cells  # noqa: E402
import sft  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 120
tmp = tempfile.mkdtemp(prefix="cellc-diag-")
torch.set_default_dtype(torch.float64)

CFG = """
[task]
name     = copying
tokens   = 6
memorize = 2
length   = 3

[model]
layers  = 2
width   = 4
hidden  = 4

[train]
steps = 2
batch = 3
lr    = 1e-2
seed  = 3
"""

# every stdlib cell, with the options that change its structure
CASES = [(c, {}) for c in sorted(cells.SPECS)] + [("mgu", {"see_h": True})]


def cellc(*args):
    try:
        p = subprocess.run([CELLC] + list(args), capture_output=True, text=True, timeout=TIMEOUT)
        return Result(p.returncode, p.stdout, p.stderr)
    except subprocess.TimeoutExpired:
        return Result(-1, "", "timed out")


def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def opt_sets(opts):
    out = []
    for k, v in opts.items():
        out += ["--set", "model.option.%s=%s" % (k, str(v).lower())]
    return out


def state_vector(name, s, H):
    """The states as s of the spec: declaration order, a complex state's real parts then imaginary."""
    parts = []
    for k, (shp, c) in cells.SPECS[name].states(H, H).items():
        v = s[k][0]
        parts += [v.real, v.imag] if c else [v]
    return torch.cat(parts)


def states_of(name, vec, H):
    out, off = {}, 0
    for k, (shp, c) in cells.SPECS[name].states(H, H).items():
        n = shp[0]
        if c:
            out[k] = torch.complex(vec[off:off + n], vec[off + n:off + 2 * n]).unsqueeze(0)
            off += 2 * n
        else:
            out[k] = vec[off:off + n].unsqueeze(0)
            off += n
    return out


def torch_jacobians(name, opts, params, x, h0, H):
    """J_t = d s_t / d s_{t-1} and the gates of the sequence, by autograd on cells.py's step."""
    sp = cells.SPECS[name]
    o = cells.options(name, opts)
    pspec, sspec = cells.shapes(name, H, x.shape[1], o)
    p = {k: (cells.as_complex(params[k]) if pspec[k][1] else params[k]) for k in pspec}
    s = {k: (cells.as_complex(h0[k]) if sspec[k][1] else h0[k]).unsqueeze(0) for k in sspec}
    Js, gates = [], {}
    for t in range(x.shape[0]):
        xt = x[t:t + 1]

        def f(vec):
            new, _, _ = sp.step(p, xt, states_of(name, vec, H), o)
            return state_vector(name, new, H)
        vec = state_vector(name, s, H)
        Js.append(torch.autograd.functional.jacobian(f, vec))
        new, _, g = sp.step(p, xt, s, o)
        for k, v in g.items():
            gates.setdefault(k, []).append(v[0])
        s = new
    return torch.stack(Js), {k: torch.stack(v) for k, v in gates.items()}


def layer_params(ckpt, k):
    pre = "layer.%d." % k
    return {n[len(pre):]: torch.tensor(v, dtype=torch.float64) for n, v in ckpt.items()
            if n.startswith(pre) and "." not in n[len(pre):]}


def check_jacobians(name, opts):
    tag = name + ("(" + ",".join("%s=%s" % kv for kv in opts.items()) + ")" if opts else "")
    cfg = write("copy.cfg", CFG)
    run = os.path.join(tmp, "run-" + tag)
    r = cellc("train", "stdlib/%s.cell" % name, cfg, "--out", run, *opt_sets(opts))
    check("train %s for its checkpoint" % tag, r.rc == 0, r.why())
    if r.rc:
        return
    out = os.path.join(tmp, "diag-" + tag)
    r = cellc("diag", "stdlib/%s.cell" % name, cfg, "--checkpoint", os.path.join(run, "checkpoint.safetensors"),
              "--out", out, *opt_sets(opts))
    check("diag %s exits 0" % tag, r.rc == 0, r.why())
    if r.rc:
        return
    ckpt = sft.load(os.path.join(run, "checkpoint.safetensors"))
    jac = sft.load(os.path.join(out, "jacobians.safetensors"))
    for k in range(2):
        x = torch.tensor(jac["layer.%d.x" % k])
        H = 4
        h0 = {s: torch.tensor(jac["layer.%d.h0.%s" % (k, s)]) for s in cells.SPECS[name].states(H, H)}
        J_ref, g_ref = torch_jacobians(name, opts, layer_params(ckpt, k), x, h0, H)
        J = torch.tensor(jac["layer.%d.J" % k])
        err = (J - J_ref).abs().max().item() if J.shape == J_ref.shape else float("inf")
        check("%s layer %d: J [T, S, S] = %s matches autograd to 1e-9 (max |diff| %.2e)" % (
            tag, k, list(J.shape), err), err <= 1e-9, "shapes %s vs %s" % (list(J.shape), list(J_ref.shape)))
        gerr = 0.0
        for g, v in g_ref.items():
            got = torch.tensor(jac["layer.%d.gate.%s" % (k, g)])
            gerr = max(gerr, (got.reshape(v.shape) - v).abs().max().item())
        check("%s layer %d: gates match PyTorch's (max |diff| %.2e)" % (tag, k, gerr), gerr <= 1e-12)
    with open(os.path.join(out, "diag.json")) as f:
        d = json.load(f)
    T = x.shape[0]
    ok = all(sum(g["hist"]) == T * 3 * len(jac["layer.%d.gate.%s" % (L["layer"], g["name"])][0])
             for L in d["layers"] for g in L["gates"])
    check("%s: every gate value counted once in the histograms (T B units per gate)" % tag, ok)


def main():
    for name, opts in CASES:
        check_jacobians(name, opts)
    shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
