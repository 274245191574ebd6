"""python_pkg.py: the `cellc` Python package (python/cellc, docs/python.md), run from the checkout
(PYTHONPATH=python) with a cache of its own. Checks: gru and lru loaded from the stdlib agree with
their PyTorch transcriptions (tests/torch/cells.py, float64 autograd) on outputs, final states and
every gradient (x, h0, each param) within 1e-4 relative, for several T and B and with
batch_first; carrying finals on equals one long call; two loaded layers and a head trained by
Adam for 100 steps give the float64 PyTorch model's losses within 1e-5; the params start at exactly `cellc run
--seed S`'s values and the module reproduces that run's y, finals and gradients (also for a drawn
and a learned initial state); float64 for every stdlib cell: the initial values, y, finals, gates
and gradients equal the float64 interpreter's (1e-12) and gradcheck passes; gates=True in float32
equal cellc run's gate.*; lengths on the torch-ops step; the cache: a second load, in the process or in a new one, compiles
nothing and draws nothing, a changed cell, dim or option compiles again, concurrent first loads
leave one whole entry; and the errors (a bad dtype, a wrong x, an unknown dim or option, a bad cell).
Ends with "N passed, M failed"."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "torch"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
CACHE = tempfile.mkdtemp(prefix="cellc-pycache-")
os.environ["CELLC_CACHE"] = CACHE
os.environ.setdefault("CELLC_BIN", os.path.join(ROOT, "bin", "cellc"))
CELLC = os.environ["CELLC_BIN"]

import torch  # noqa: E402

import cellc  # noqa: E402
import cells  # noqa: E402
from cellc import _safetensors  # noqa: E402
from clitest import check, finish, stdlib_cells  # noqa: E402

D, H = 5, 7
torch.manual_seed(3)


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-6))


def entries():
    return sorted(e for e in os.listdir(CACHE))


def against_reference(name, m, T, B, batch_first=False):
    """Module m (cell name) on random x, h0 against cells.run in float64: the worst relative error."""
    pspec, sspec = cells.shapes(name, H, D)
    x = torch.randn(T, B, D, dtype=torch.float32)
    h0 = {k: (0.5 * torch.randn((B,) + shp)).requires_grad_() for k, (shp, _) in sspec.items()}
    xin = (x.transpose(0, 1).contiguous() if batch_first else x).requires_grad_()
    y, finals = m(xin, h0)
    if batch_first:
        y = y.transpose(0, 1)
    dy = torch.randn_like(y)
    dfin = {k: torch.randn_like(v) for k, v in finals.items()}
    m.zero_grad()
    ((y * dy).sum() + sum((finals[k] * dfin[k]).sum() for k in finals)).backward()
    ref_p = {n: p.detach().double().clone().requires_grad_() for n, p in m.named_parameters()}
    xr = x.detach().double().requires_grad_()
    h0r = {k: v.detach().double().requires_grad_() for k, v in h0.items()}
    yr, fr, _ = cells.run(name, ref_p, xr, h0r)
    ((yr * dy.double()).sum() + sum((fr[k] * dfin[k].double()).sum() for k in fr)).backward()
    gx = xin.grad.transpose(0, 1) if batch_first else xin.grad
    errs = {"y": rel(y, yr), "grad.x": rel(gx, xr.grad)}
    for k in finals:
        errs["final." + k] = rel(finals[k], fr[k])
        errs["grad.h0." + k] = rel(h0[k].grad, h0r[k].grad)
    for n, p in m.named_parameters():
        errs["grad." + n] = rel(p.grad, ref_p[n].grad)
    worst = max(errs, key=errs.get)
    return errs[worst], worst, errs


# ---- outputs and gradients against the PyTorch transcriptions
mods = {}
for name in ("gru", "lru"):
    m = cellc.load(name, D=D, H=H, seed=4)
    mods[name] = m
    pspec, _ = cells.shapes(name, H, D)
    check("%s: the params are nn.Parameters named as in the cell" % name,
          sorted(n for n, _ in m.named_parameters()) == sorted(pspec), str(list(m.state_dict())))
    for T, B, bf in ((6, 3, False), (1, 1, False), (37, 5, False), (9, 2, True)):
        e, at, errs = against_reference(name, cellc.load(name, D=D, H=H, seed=4, batch_first=True) if bf else m,
                                        T, B, bf)
        check("%s T=%d B=%d%s: outputs, finals and every gradient match PyTorch (max rel err %.2e at %s)"
              % (name, T, B, " batch_first" if bf else "", e, at), e < 1e-4, str(errs))

# batch_first is the same computation, transposed
g = mods["gru"]
gb = cellc.load("gru", D=D, H=H, seed=4, batch_first=True)
x = torch.randn(8, 3, D)
y1, f1 = g(x)
y2, f2 = gb(x.transpose(0, 1))
check("batch_first: y is [B, T, O] and equals the [T, B] module's, transposed",
      tuple(y2.shape) == (3, 8, H) and torch.equal(y2.transpose(0, 1), y1) and torch.equal(f1["h"], f2["h"]))

# carrying the finals on equals one call over the whole sequence
for name, m in mods.items():
    x = torch.randn(10, 2, D)
    y, f = m(x)
    ya, fa = m(x[:4])
    yb, fb = m(x[4:], fa)
    e = max(rel(torch.cat([ya, yb]), y), max(rel(fb[k], f[k]) for k in f))
    check("%s: two calls carrying finals on equal one call (rel err %.1e)" % (name, e), e < 1e-5)
check("gru: h0 may be the one state's tensor", torch.equal(g(x, f1["h"][:2])[0], g(x, {"h": f1["h"][:2]})[0]))

# lengths: each sequence as if run alone to its length; y past it zeros
x = torch.randn(7, 3, D)
lens = [4, 7, 2]
y, f = g(x, lengths=torch.tensor(lens))
e = 0.0
for b, n in enumerate(lens):
    yb, fb = g(x[:n, b:b + 1])
    e = max(e, rel(y[:n, b:b + 1], yb), rel(f["h"][b:b + 1], fb["h"]), float(y[n:, b].abs().max()) if n < 7 else 0.0)
check("gru with lengths: each sequence as run alone, zeros past its length (rel err %.1e)" % e, e < 1e-6)


# ---- two loaded layers (gru, then lru) and a linear head trained by Adam in a plain PyTorch loop,
# against the same model in float64 PyTorch (tests/torch/cells.py) from the same initial values
torch.manual_seed(5)
T, B, H1, H2 = 12, 4, H, 4
l1, l2 = cellc.load("gru", D=D, H=H1, seed=1), cellc.load("lru", D=H1, H=H2, seed=2)  # gru: compiled above
head = torch.nn.Linear(H1, 2)  # lru's output is its input's size
xs, target = torch.randn(T, B, D), torch.randn(T, B, 2)
layers = (("gru", l1, {"h": (B, H1)}), ("lru", l2, {"h": (B, H2, 2)}))
ref = [{n: p.detach().double().clone().requires_grad_() for n, p in m.named_parameters()} for _, m, _ in layers]
ref_head = {n: p.detach().double().clone().requires_grad_() for n, p in head.named_parameters()}


def model_ref(x):
    for (name, _, states), p in zip(layers, ref):
        x, _, _ = cells.run(name, p, x, {k: torch.zeros(shp, dtype=torch.float64) for k, shp in states.items()})
    return x @ ref_head["weight"].T + ref_head["bias"]


opt = torch.optim.Adam(list(l1.parameters()) + list(l2.parameters()) + list(head.parameters()), lr=1e-2)
opt_ref = torch.optim.Adam([p for d in ref for p in d.values()] + list(ref_head.values()), lr=1e-2)
worst, losses = 0.0, []
for step in range(100):
    opt.zero_grad()
    loss = ((head(l2(l1(xs)[0])[0]) - target) ** 2).mean()
    loss.backward()
    opt.step()
    opt_ref.zero_grad()
    loss_ref = ((model_ref(xs.double()) - target.double()) ** 2).mean()
    loss_ref.backward()
    opt_ref.step()
    losses.append((float(loss), float(loss_ref)))
    worst = max(worst, abs(float(loss) - float(loss_ref)))
check("two cellc.load layers train in a PyTorch loop: 100 Adam steps' losses match float64 PyTorch within "
      "1e-5 (worst %.1e; loss %.3f -> %.3f)" % (worst, losses[0][1], losses[-1][1]),
      worst < 1e-5 and losses[-1][1] < 0.5 * losses[0][1], str(losses[::10]))


# ---- initial values and the whole run against `cellc run --seed S` (the default cpu back end)
def against_run(label, path, cell, seed):
    tmp = tempfile.mkdtemp(prefix="cellc-pyrun-")
    try:
        out = os.path.join(tmp, "run.safetensors")
        file = path if os.sep in path else os.path.join(ROOT, "stdlib", path + ".cell")  # a stdlib name
        args = [CELLC, "run", file, "--dims", "D=3,H=4", "--T", "5", "--B", "2", "--seed", str(seed), "--out", out]
        if cell:
            args += ["--cell", cell]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode != 0:
            check("%s: cellc run" % label, False, p.stderr)
            return
        r, _ = _safetensors.read(out)
    finally:
        shutil.rmtree(tmp)
    m = cellc.load(path, cell=cell, D=3, H=4, seed=seed)
    st = dict(m.named_parameters())
    st.update(dict(m.named_buffers()))
    runs = {k[len("param."):].replace(".", "_"): v for k, v in r.items() if k.startswith(("param.", "buffer."))}
    same = set(runs) == {k for k in st if not k.startswith("_initial_")} and all(torch.equal(st[k], v) for k, v in runs.items())
    check("%s: every initial value equals cellc run --seed %d's, bit for bit" % (label, seed), same,
          str({k: (k in st and torch.equal(st[k], v)) for k, v in runs.items()}))
    y, f = m(r["x"])
    m.zero_grad()
    (y * r["dy"]).sum().backward()
    errs = {"y": rel(y, r["y"])}
    for k, v in f.items():
        errs["final." + k] = rel(v, r["final." + k])
    for k, v in runs.items():
        if st[k].requires_grad:
            errs["grad." + k] = rel(st[k].grad, r["grad.param." + k.replace("_init", ".init")])
    worst = max(errs, key=errs.get)
    check("%s: from its initial states, y, finals and gradients equal cellc run's (max rel err %.1e at %s)"
          % (label, errs[worst], worst), errs[worst] < 1e-5, str(errs))
    return m


against_run("gru", "gru", None, 9)
against_run("lru", os.path.join(ROOT, "stdlib", "lru.cell"), None, 123)
ds = against_run("a drawn initial state", os.path.join(ROOT, "tests", "cells", "learned_gate.cell"), "drawn_state", 5)
check("a drawn initial state is a nonzero row, the same for every sequence",
      ds is not None and ds.initial_states(3)["h"].abs().sum() > 0 and torch.equal(ds.initial_states(3)["h"][0], ds.initial_states(3)["h"][2]))
ls = against_run("a learned initial state", os.path.join(ROOT, "tests", "cells", "learned_gate.cell"), "learned_scan", 6)
check("a learned initial state is the param h_init", ls is not None and "h_init" in dict(ls.named_parameters()))
a, b = cellc.load("gru", D=D, H=H, seed=1), cellc.load("gru", D=D, H=H, seed=2)
check("another seed, other initial values", not torch.equal(a.Wxz, b.Wxz))

# ---- float64 for every stdlib cell (stdlib/cells.list, H, D = 3, 2): the initial values are cellc run
# --precision f64's; from them, y, finals, the gates and every gradient equal the float64 interpreter's
# within 1e-12; torch.autograd.gradcheck passes
def cellc_run(c, seed, T, B, precision, backend="interp", extra=()):
    """cellc run of stdlib case c at H, D = 3, 2: ({name: tensor}, "") or (None, its stderr)."""
    tmp = tempfile.mkdtemp(prefix="cellc-pyrun-")
    try:
        out = os.path.join(tmp, "run.safetensors")
        args = [CELLC, "run", os.path.join(ROOT, c.file), "--dims", c.dims(3, 2), "--T", str(T), "--B", str(B),
                "--seed", str(seed), "--backend", backend, "--precision", precision, "--out", out]
        for k, v in c.opts.items():
            args += ["--set", "%s=%s" % (k, str(v).lower())]
        if c.mode == "sequential":
            args += ["--mode", "sequential"]
        p = subprocess.run(args + list(extra), capture_output=True, text=True)
        if p.returncode != 0:
            return None, p.stderr
        return _safetensors.read(out)[0], ""
    finally:
        shutil.rmtree(tmp)


def dimargs(c):
    """cellc.load's keywords for stdlib case c at H, D = 3, 2."""
    d = {k: int(v) for k, v in (kv.split("=") for kv in c.dims(3, 2).split(","))}
    d.update(c.opts)
    return d


def load_case(c, **kw):
    """cellc.load of stdlib case c at H, D = 3, 2 (one cache entry per case, whatever the dtype)."""
    return cellc.load(os.path.join(ROOT, c.file), mode="sequential" if c.mode == "sequential" else None,
                      **dimargs(c), **kw)


def state_key(k):
    """A run's tensor name (after its prefix) as the module names it (h.init -> h_init, hist.u -> hist_u)."""
    return k.replace(".", "_")


for c in stdlib_cells():
    r, err = cellc_run(c, 7, 4, 2, "f64")
    if r is None:
        check("%s: cellc run f64" % c.name, False, err)
        continue
    m = load_case(c, seed=7, dtype=torch.float64)
    st = dict(m.named_parameters())
    st.update(dict(m.named_buffers()))
    runs = {state_key(k.split(".", 1)[1]): v for k, v in r.items() if k.startswith(("param.", "buffer."))}
    same = (all(k in st and torch.equal(st[k], v) for k, v in runs.items())
            and len(runs) == len([k for k in st if not k.startswith("_initial_")]))
    check("%s float64: every initial value equals cellc run --precision f64 --seed 7's, bit for bit" % c.name, same,
          str({k: (k in st and torch.equal(st[k], v)) for k, v in runs.items()}))
    x = r["x"].requires_grad_()
    y, f, gts = m(x, gates=True)
    m.zero_grad()
    (y * r["dy"]).sum().backward()
    errs = {"y": float((y - r["y"]).abs().max()), "grad.x": float((x.grad - r["grad.x"]).abs().max())}
    fins = {state_key(k[len("final."):]): v for k, v in r.items() if k.startswith("final.")}
    for k, v in f.items():
        errs["final." + k] = float((v.reshape(fins[k].shape) - fins[k]).abs().max())
    for k, v in runs.items():
        if st[k].requires_grad:
            errs["grad." + k] = float((st[k].grad - r["grad.param." + k.replace("_init", ".init")]).abs().max())
    rg = {k[len("gate."):]: v for k, v in r.items() if k.startswith("gate.")}
    gate_ok = set(rg) == set(gts)
    for k, v in gts.items():
        errs["gate." + k] = float((v - rg[k]).abs().max()) if k in rg else 1.0
    worst = max(errs, key=errs.get)
    check("%s float64: y, finals, gates and every gradient equal cellc run --backend interp --precision f64's "
          "within 1e-12 (worst %.1e at %s)" % (c.name, errs[worst], worst), gate_ok and errs[worst] < 1e-12, str(errs))
    # gradcheck: x, every state's h0 and every trainable param, at T, B = 3, 2
    names = [n for n, p in m.named_parameters() if p.requires_grad]
    h0 = {k: (v.detach().clone() + 0.3 * torch.randn(v.shape, dtype=torch.float64)).requires_grad_()
          for k, v in m.initial_states(2).items()}
    xs = torch.randn(3, 2, m.input_size, dtype=torch.float64, requires_grad=True)
    base = dict(m.named_parameters())

    def fn(xs, *rest):
        hh = dict(zip(h0, rest[:len(h0)]))
        ps = dict(zip(names, rest[len(h0):]))
        y, fin = torch.nn.utils.stateless.functional_call(m, ps, (xs, hh))
        return (y,) + tuple(fin.values())
    try:
        ok = torch.autograd.gradcheck(fn, (xs, *h0.values(), *[base[n] for n in names]), eps=1e-6, atol=1e-7,
                                      rtol=1e-5)
        msg = ""
    except Exception as e:  # noqa: BLE001 - gradcheck's report is the failure's detail
        ok, msg = False, str(e)[:2000]
    check("%s float64: torch.autograd.gradcheck of y and finals in x, h0 and every param" % c.name, ok, msg)


# ---- gates=True on the float32 module: cellc run's gate.<name> (the cpu back end), and the same y
for name in ("gru", "lstm", "gated_deltanet"):
    c = next(c for c in stdlib_cells() if c.name == name)
    r, err = cellc_run(c, 3, 5, 2, "f32", "cpu")
    m = load_case(c, seed=3)
    y0, f0 = m(r["x"])
    y, f, gts = m(r["x"], gates=True)
    rg = {k[len("gate."):]: v for k, v in r.items() if k.startswith("gate.")}
    e = max([rel(gts[k], rg[k]) for k in rg if k in gts] + [rel(y, y0)] + [rel(f[k], f0[k]) for k in f])
    check("%s float32 gates=True: {%s} equal cellc run's gate.* and y, finals the kernels' (max rel err %.1e)"
          % (name, ", ".join(sorted(gts)), e), r is not None and set(gts) == set(rg) and len(gts) > 0 and e < 1e-5, err)
    mb = load_case(c, seed=3, batch_first=True)
    _, _, gb = mb(r["x"].transpose(0, 1), gates=True)
    check("%s gates with batch_first are [B, T, ...]" % name,
          all(torch.allclose(gb[k].transpose(0, 1), gts[k], atol=1e-6) for k in gts))

# lengths on the torch-ops step (float64, and gates=True): each sequence as if run alone to its
# length; y and the gates past it zeros; x past it is never read (NaN there reaches no gradient)
for name in ("gru", "lru", "lstm"):
    c = next(c for c in stdlib_cells() if c.name == name)
    for dt in (torch.float64, torch.float32):
        m = load_case(c, seed=2, dtype=dt)
        x = torch.randn(7, 3, m.input_size, dtype=dt)
        lens = [4, 7, 2]
        x[5:, 2] = float("nan")
        xr = x.clone().requires_grad_()
        y, f, gts = m(xr, lengths=torch.tensor(lens), gates=True)
        m.zero_grad()
        (y.sum() + sum(v.sum() for v in f.values())).backward()
        e = 0.0
        for b, n in enumerate(lens):
            yb, fb, gb = m(x[:n, b:b + 1], gates=True)
            e = max([e, rel(y[:n, b:b + 1], yb)] + [rel(f[k][b:b + 1], fb[k]) for k in f]
                    + [rel(gts[k][:n, b:b + 1], gb[k]) for k in gts])
            if n < 7:
                e = max([e, float(y[n:, b].abs().max())] + [float(gts[k][n:, b].abs().max()) for k in gts])
        finite = bool(torch.isfinite(xr.grad).all()) and all(
            bool(torch.isfinite(p.grad).all()) for p in m.parameters() if p.grad is not None)
        check("%s %s gates=True with lengths: each sequence as run alone, zeros past its length (err %.1e); "
              "NaN padding reaches no gradient" % (name, str(dt)[6:], e),
              e < (1e-12 if dt == torch.float64 else 1e-6) and finite and float(xr.grad[2:, 2].abs().max()) == 0.0, str(e))

# lengths against cellc run --lengths: float64 (the torch-ops path, with the gates) against the float64
# interpreter within 1e-12, float32 (the emitted kernels' P_forward_ex) against the cpu back end
for name in ("gru", "lru", "lstm", "mamba2"):
    c = next(c for c in stdlib_cells() if c.name == name)
    lens = [5, 2, 4]
    for dt, prec, backend, tol in ((torch.float64, "f64", "interp", 1e-12), (torch.float32, "f32", "cpu", 1e-5)):
        r, err = cellc_run(c, 4, 5, 3, prec, backend, ["--lengths", ",".join(map(str, lens))])
        if r is None:
            check("%s: cellc run --lengths" % name, False, err)
            continue
        m = load_case(c, seed=4, dtype=dt)
        x = r["x"].clone().requires_grad_()
        out = m(x, lengths=lens, gates=dt == torch.float64)
        m.zero_grad()
        (out[0] * r["dy"]).sum().backward()
        errs = {"y": rel(out[0], r["y"]), "grad.x": rel(x.grad, r["grad.x"])}
        fins = {state_key(k[len("final."):]): v for k, v in r.items() if k.startswith("final.")}
        errs.update({"final." + k: rel(v.reshape(fins[k].shape), fins[k]) for k, v in out[1].items()})
        for n, p in m.named_parameters():
            if p.requires_grad:
                errs["grad." + n] = rel(p.grad, r["grad.param." + n.replace("_init", ".init")])
        if dt == torch.float64:
            errs.update({"gate." + k: rel(v, r["gate." + k]) for k, v in out[2].items()})
        worst = max(errs, key=errs.get)
        check("%s %s with lengths %s: y, finals%s and every gradient equal cellc run --backend %s --precision %s "
              "--lengths's (max rel err %.1e at %s)" % (name, prec, lens, ", gates" if dt == torch.float64 else "",
                                                        backend, prec, errs[worst], worst), errs[worst] < tol, str(errs))

# ---- the cache
before = dict(cellc.stats)
n_entries = len(entries())
again = cellc.load("lru", D=D, H=H, seed=4)
check("a second load in the process compiles nothing and draws nothing", cellc.stats == before, str(cellc.stats))
check("... and equals the first", all(torch.equal(p, q) for p, q in zip(again.parameters(), mods["lru"].parameters())))
lib = [os.path.join(CACHE, e, "libP.so") for e in entries()]
mtimes = [os.stat(p).st_mtime_ns for p in lib]
code = ("import cellc, torch; m = cellc.load('lru', D=%d, H=%d, seed=4); print(cellc.stats['compiles'], "
        "cellc.stats['inits'], float(m(torch.ones(3, 2, %d))[0].sum()))" % (D, H, D))
env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
out = p.stdout.split()
check("a new process loads from the cache: nothing compiled, nothing drawn, no file rewritten",
      p.returncode == 0 and out[:2] == ["0", "0"] and len(entries()) == n_entries
      and [os.stat(q).st_mtime_ns for q in lib] == mtimes, p.stdout + p.stderr)
check("... and computes what this process does",
      p.returncode == 0 and abs(float(out[2]) - float(mods["lru"](torch.ones(3, 2, D))[0].sum())) == 0.0, p.stdout)

work = tempfile.mkdtemp(prefix="cellc-pycell-")
src = os.path.join(work, "mygru.cell")
shutil.copy(os.path.join(ROOT, "stdlib", "gru.cell"), src)
c0 = cellc.stats["compiles"]
m1 = cellc.load(src, D=2, H=6)  # dims no load above used: the same cell's entry would be shared
m1b = cellc.load(src, D=2, H=6)
check("a cell file of one's own compiles once", cellc.stats["compiles"] == c0 + 1, str(cellc.stats))
with open(src) as f:
    text = f.read()
with open(src, "w") as f:
    f.write(text.replace("h = z * h + (1 - z) * n", "h = (1 - z) * h + z * n"))
m2 = cellc.load(src, D=2, H=6)
m2.load_state_dict(m1.state_dict())
x = torch.randn(4, 2, 2)
check("a changed cell compiles again and computes the new cell",
      cellc.stats["compiles"] == c0 + 2 and not torch.allclose(m1(x)[0], m2(x)[0]), str(cellc.stats))
check("... the old module still computes the old cell", torch.equal(m1(x)[0], m1b(x)[0]))
cellc.load(src, D=2, H=5)
check("another dim compiles again", cellc.stats["compiles"] == c0 + 3, str(cellc.stats))
cellc.load("lru", D=3, H=4, r_min=0.5)
cellc.load("lru", D=3, H=4, r_min=0.5, mode="sequential")
check("another option, another mode: each compiles again", cellc.stats["compiles"] == c0 + 5, str(cellc.stats))
check("no temporary files are left in the cache", not [e for e in entries() if e.startswith(".")], str(entries()))

# concurrent first loads of one cell into an empty cache: every one succeeds, one entry remains
cache2 = tempfile.mkdtemp(prefix="cellc-pycache2-")
code = "import cellc, torch; m = cellc.load('elman', D=2, H=3, seed=8); print(float(m(torch.ones(2, 1, 2))[0].sum()))"
env2 = dict(env, CELLC_CACHE=cache2)
procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env2)
         for _ in range(3)]
res = [pr.communicate() + (pr.returncode,) for pr in procs]
left = os.listdir(cache2)
check("three concurrent first loads all succeed and agree",
      all(r[2] == 0 for r in res) and len({r[0] for r in res}) == 1, str(res))
check("... leaving one whole entry and no temporary files",
      len(left) == 1 and os.path.isfile(os.path.join(cache2, left[0], "P.json"))
      and not [f for f in os.listdir(os.path.join(cache2, left[0])) if f.startswith(".")], str(left))
shutil.rmtree(cache2)


# ---- make install: into a scratch PREFIX, then used from outside the checkout with only that PREFIX
prefix = tempfile.mkdtemp(prefix="cellc-pyprefix-")
mk = subprocess.run(["make", "-s", "install", "PREFIX=" + prefix], cwd=ROOT, capture_output=True, text=True)
site_dir = subprocess.run([sys.executable, os.path.join(ROOT, "mk", "python_site.py"), prefix],
                          capture_output=True, text=True).stdout.strip()
code = ("import cellc, torch; from cellc import _build; m = cellc.load('gru', D=%d, H=%d, seed=4); "
        "print(cellc.__file__); print(_build.cellc_binary()); print(float(m(torch.ones(3, 2, %d))[0].sum()))" % (D, H, D))
env3 = {k: v for k, v in os.environ.items() if k not in ("CELLC_BIN", "CELLC_STDLIB")}
env3["PYTHONPATH"] = site_dir
p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env3, cwd="/")
out = p.stdout.split("\n")
check("make install PREFIX=...: the package runs the installed cellc, from any directory",
      mk.returncode == 0 and p.returncode == 0 and out[0].startswith(site_dir + os.sep)
      and out[1] == os.path.join(prefix, "bin", "cellc"), mk.stderr + p.stdout + p.stderr)
check("... and computes what the checkout's package does",
      p.returncode == 0 and float(out[2]) == float(g(torch.ones(3, 2, D))[0].sum()), p.stdout)
shutil.rmtree(prefix)
default_site = subprocess.run([sys.executable, os.path.join(ROOT, "mk", "python_site.py"), "/usr/local"],
                              capture_output=True, text=True).stdout.strip()
check("make install's default PREFIX puts the package where /usr/bin/python3 finds it (%s)" % default_site,
      default_site in sys.path, str(sys.path))


# ---- errors
def raises(kind, fn):
    try:
        fn()
    except kind as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the wrong kind is a failure, reported
        return None if kind is None else "wrong exception %r" % e
    return None


msg = raises(TypeError, lambda: cellc.load("gru", D=3, H=4, dtype=torch.float16))
check("dtype=float16 is a TypeError naming the two dtypes", msg is not None and "float64" in msg, str(msg))
msg = raises(NotImplementedError, lambda: cellc.load("gru", D=3, H=4, dtype=torch.float64, train_noise=True))
check("float64 with train_noise=True is refused (the torch-ops step draws no noise)",
      msg is not None and "noise" in msg, str(msg))
lg = os.path.join(ROOT, "tests", "cells", "learned_gate.cell")
noisy = cellc.load(lg, cell="learned_gate", D=3, H=4, train_noise=True)
msg = raises(NotImplementedError, lambda: noisy(torch.randn(3, 2, 3), gates=True))
noisy.eval()
ev = cellc.load(lg, cell="learned_gate", D=3, H=4)
xg = torch.randn(3, 2, 3)
check("gates=True of a train_noise cell is refused in training, and in eval() is the evaluation form's",
      msg is not None and "eval()" in msg and torch.allclose(noisy(xg, gates=True)[2]["z"], ev(xg, gates=True)[2]["z"]),
      str(msg))
m64 = cellc.load("gru", D=3, H=4, dtype=torch.float64)
m32 = cellc.load("gru", D=3, H=4).double()
m64.load_state_dict(m32.state_dict())
x64 = torch.randn(4, 2, 3, dtype=torch.float64)
check(".double() of a float32 module computes as the float64 module (the torch-ops path)",
      m32.dtype == torch.float64 and torch.equal(m32(x64)[0], m64(x64)[0]))
msg = raises(TypeError, lambda: m64(torch.randn(3, 2, 3)))
check("a float32 x into a float64 module is a TypeError", msg is not None and "float64" in msg, str(msg))
msg = raises(TypeError, lambda: cellc.load("gru", D=3, H=4, Q=2))
check("an unknown dim or option is a TypeError naming the cell's", msg is not None and "Q" in msg and "H" in msg, str(msg))
msg = raises(TypeError, lambda: g(torch.randn(3, 2, D, dtype=torch.float64)))
check("a float64 x is a TypeError", msg is not None and "float32" in msg, str(msg))
msg = raises(ValueError, lambda: g(torch.randn(3, 2, D + 1)))
check("an x of the wrong size is a ValueError naming the expected shape", msg is not None and str(D) in msg, str(msg))
msg = raises(ValueError, lambda: g(torch.randn(3, 2, D), {"h": torch.zeros(3, H)}))
check("an h0 of the wrong shape is a ValueError", msg is not None and "h" in msg, str(msg))
msg = raises(ValueError, lambda: g(torch.randn(3, 2, D), lengths=[3, 4]))
check("a length above T is a ValueError naming the range", msg is not None and "[1, 3]" in msg, str(msg))
bad = os.path.join(work, "bad.cell")
with open(bad, "w") as f:
    f.write("cell bad {\n  input x[D]\n  state h[D]\n  h = tanh(h + y)\n}\n")
msg = raises(cellc.CellcError, lambda: cellc.load(bad, D=3))
check("a cell with an error is a CellcError with cellc's located message", msg is not None and "bad.cell:" in msg, str(msg))
msg = raises(FileNotFoundError, lambda: cellc.load("no_such_cell", D=3))
check("an unknown name is FileNotFoundError", msg is not None, str(msg))

shutil.rmtree(work)
shutil.rmtree(CACHE)
finish()
