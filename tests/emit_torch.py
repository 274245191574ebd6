"""emit_torch.py: `cellc emit --torch` (P_torch.py over libP.so) against the same cells written in
PyTorch (tests/torch/cells.py, float64 autograd): outputs, final states and the gradients of the
params, x and h0 of L = sum(y * dy) + sum(final * dfinal) agree within 1e-4 (relative) for several
stdlib cells (sequential and scan, real and complex); torch.autograd.gradcheck passes on the
Function at float32 tolerances; the Module with lengths as each sequence run alone; the Module's params are nn.Parameters named as in the cell; a bad
x raises. Ends with "N passed, M failed"."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch"))
sys.path.insert(0, HERE)
import cells  # noqa: E402
from clitest import check, finish, stdlib_cells  # noqa: E402

ROOT = os.path.dirname(HERE)
CELLC = os.environ.get("CELLC_BIN", os.path.join(ROOT, "bin", "cellc"))
D, H, T, B = 5, 7, 6, 3
# every stdlib cell of stdlib/cells.list at its defaults (the torch reference of tests/torch/cells.py)
CELLS = list(dict.fromkeys(c.cell for c in stdlib_cells()))


def load_module(cell, work):
    out = os.path.join(work, cell)
    p = subprocess.run([CELLC, "emit", os.path.join(ROOT, "stdlib", cell + ".cell"), "--dims", ",".join("%s=%d" % kv for kv in cells.SPECS[cell].dims(H, D).items()),
                        "--out", out, "--torch"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    spec = importlib.util.spec_from_file_location(cell + "_torch", os.path.join(out, cell + "_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-6))


def compare(cell, mod):
    torch.manual_seed(11)
    m = mod.Module()
    pspec, sspec = cells.shapes(cell, H, D)
    check("%s: the params are nn.Parameters named as in the cell" % cell,
          sorted(n for n, _ in m.named_parameters()) == sorted(pspec), str(list(m.state_dict())))
    with torch.no_grad():
        for n, prm in m.named_parameters():
            prm.copy_(torch.randn(prm.shape) * (0.5 if prm.dim() > 1 else 0.3))
    x = torch.randn(T, B, D, dtype=torch.float64, requires_grad=True)
    h0 = {k: (0.5 * torch.randn((B,) + shp, dtype=torch.float64)).requires_grad_() for k, (shp, _) in sspec.items()}
    # a history hist.NAME [B, K, C] is the module's state hist_NAME [B, K * C] (docs/emit.md)
    fld = {k: k.replace(".", "_") for k in sspec}
    y, finals = m(x, {fld[k]: v.reshape(B, -1) if k.startswith("hist.") else v for k, v in h0.items()})
    finals = {k: finals[fld[k]].reshape(h0[k].shape) for k in sspec}
    dy = torch.randn_like(y)
    dfin = {k: torch.randn_like(v) for k, v in finals.items()}
    loss = (y * dy).sum() + sum((finals[k] * dfin[k]).sum() for k in finals)
    loss.backward()
    ref_p = {n: prm.detach().double().clone().requires_grad_() for n, prm in m.named_parameters()}
    xr = x.detach().clone().requires_grad_()
    h0r = {k: v.detach().clone().requires_grad_() for k, v in h0.items()}
    yr, fr, _ = cells.run(cell, ref_p, xr, h0r)
    lr = (yr * dy).sum() + sum((fr[k] * dfin[k]).sum() for k in fr)
    lr.backward()
    errs = {"y": rel(y, yr), "grad.x": rel(x.grad, xr.grad)}
    for k in finals:
        errs["final." + k] = rel(finals[k], fr[k])
        errs["grad.h0." + k] = rel(h0[k].grad, h0r[k].grad)
    for n, prm in m.named_parameters():
        errs["grad." + n] = rel(prm.grad, ref_p[n].grad)
    worst = max(errs, key=errs.get)
    check("%s: outputs and gradients match the PyTorch cell (max rel err %.2e at %s)" % (cell, errs[worst], worst),
          errs[worst] < 1e-4, str(errs))


def gradcheck(cell, mod):
    torch.manual_seed(5)
    m = mod.Module()
    _, sspec = cells.shapes(cell, H, D)
    x = torch.randn(3, 2, D, dtype=torch.float64, requires_grad=True)
    h0s = [(0.5 * torch.randn((2,) + shp, dtype=torch.float64)).requires_grad_() for _, (shp, _) in sspec.items()]
    params = [p.detach().double().requires_grad_() for p in m.parameters()]

    def f(x, *rest):
        return mod.Function.apply(x, *rest)

    try:
        ok = torch.autograd.gradcheck(f, (x, *h0s, *params), eps=1e-2, atol=2e-3, rtol=2e-2, nondet_tol=1e-6)
        why = ""
    except Exception as e:  # gradcheck raises with the mismatching Jacobian
        ok, why = False, str(e)[:600]
    check("%s: torch.autograd.gradcheck of the Function (float32 inside: eps 1e-2, rtol 2e-2)" % cell, ok, why)


def reuse(mod):
    """The workspace pool: a second backward of a graph (retain_graph) after another forward took
    its workspace gives the same gradients as the first."""
    torch.manual_seed(3)
    m = mod.Module()
    x1, x2 = torch.randn(4, 2, D), torch.randn(4, 2, D)
    y1, _ = m(x1)
    y1.sum().backward(retain_graph=True)
    g1 = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    y2, _ = m(x2)  # takes the pooled workspace of the first forward
    m.zero_grad()
    y1.sum().backward()
    g2 = [p.grad.clone() for p in m.parameters()]
    check("a workspace taken over by another forward: the old graph's backward is still right",
          all(torch.equal(a, b) for a, b in zip(g1, g2)) and not torch.equal(y1, y2))


def train_noise(work):
    """--set train_noise=true: the module draws its seed from torch's generator; the same torch seed
    gives the same outputs, another gives others; gradients flow."""
    out = os.path.join(work, "noise")
    p = subprocess.run([CELLC, "emit", os.path.join(ROOT, "tests", "cells", "ops.cell"), "--dims", "D=%d,H=%d" % (D, H),
                        "--set", "use_gumbel=true", "--set", "train_noise=true", "--out", out, "--torch"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        check("emit --torch with train_noise", False, p.stderr)
        return
    spec = importlib.util.spec_from_file_location("ops_torch", os.path.join(out, "ops_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(1)
    m = mod.Module()
    x = torch.randn(5, 2, D)
    torch.manual_seed(9)
    y1, _ = m(x)
    torch.manual_seed(9)
    y2, _ = m(x)
    y3, _ = m(x)
    y1.sum().backward()
    ok = torch.equal(y1, y2) and not torch.equal(y1, y3) and all(p.grad is not None and torch.isfinite(p.grad).all()
                                                                  for p in m.parameters())
    check("train_noise: the seed follows torch's generator, gradients flow", ok)


_rel = rel


def lengths_case(cell, mod):
    """Module(x, lengths=L) (FunctionLengths, P_forward_ex and P_backward_ex with lengths) against
    each sequence run alone, truncated to its length: y (zeros past it), the final states and the
    gradients of x (zeros past it), h0 and every param; padding of x is never read (NaN there)."""
    def rel(a, b):  # a value that is not finite (NaN from the padding) fails
        return _rel(a, b) if bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all()) else float("inf")

    torch.manual_seed(4)
    m = mod.Module()
    L = [4, T, 1]
    x = torch.randn(T, B, D)
    for b, n in enumerate(L):
        x[n:, b] = float("nan")
    x.requires_grad_(True)
    h0 = {name: torch.randn((B,) + tuple(shape) + ((2,) if cplx else ()), requires_grad=True) for name, shape, cplx in mod.STATES}
    y, fin = m(x, h0, lengths=L)
    dy = torch.randn_like(y)
    df = {k: torch.randn_like(v) for k, v in fin.items()}
    ((y * dy).sum() + sum((fin[k] * df[k]).sum() for k in fin)).backward()
    got = [x.grad.clone()] + [h0[k].grad.clone() for k in h0] + [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    x2 = x.detach().clone().requires_grad_(True)
    h2 = {k: v.detach().clone().requires_grad_(True) for k, v in h0.items()}
    total, worst = 0, 0.0
    for b, n in enumerate(L):
        yb, fb = m(x2[:n, b:b + 1], {k: v[b:b + 1] for k, v in h2.items()})
        total = total + (yb * dy[:n, b:b + 1]).sum() + sum((fb[k] * df[k][b:b + 1]).sum() for k in fb)
        worst = max(worst, rel(y[:n, b:b + 1], yb), rel(y[n:, b], torch.zeros_like(y[n:, b])) if n < T else 0.0)
        worst = max([worst] + [rel(fin[k][b:b + 1], fb[k]) for k in fb])
    total.backward()
    x2.grad = torch.nan_to_num(x2.grad)  # the padding's gradient is never computed: zeros
    want = [x2.grad] + [h2[k].grad for k in h2] + [p.grad for p in m.parameters()]
    worst = max([worst] + [rel(a, b) for a, b in zip(got, want)])
    check("%s: Module with lengths as each sequence alone (max rel err %.1e)" % (cell, worst), worst < 1e-4)


def bad_input(mod):
    m = mod.Module()
    try:
        m(torch.randn(4, 2, D + 1))
        ok = False
    except ValueError as e:
        ok = "x must be" in str(e)
    check("a wrong x raises ValueError naming the expected shape", ok)
    try:
        m(torch.randn(0, 2, D))
        ok = False
    except RuntimeError as e:
        ok = "T and B" in str(e)
    check("T = 0 raises RuntimeError with the library's message", ok)


def example(work):
    """examples/emit/train_torch.py: the emitted module inside a small model, trained with Adam."""
    out = os.path.join(work, "example")
    p = subprocess.run([CELLC, "emit", os.path.join(ROOT, "stdlib", "gru.cell"), "--dims", "D=4,H=16", "--name", "gru",
                        "--out", out, "--torch"], capture_output=True, text=True)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "emit", "train_torch.py"), out],
                       capture_output=True, text=True)
    check("examples/emit/train_torch.py trains a model around P_torch.py (loss below half of the first)",
          p.returncode == 0 and r.returncode == 0 and "(learned)" in r.stdout, p.stderr + r.stdout[-500:] + r.stderr[-500:])


def main():
    work = tempfile.mkdtemp(prefix="cellc-emit-torch-")
    try:
        for cell in CELLS:
            mod = load_module(cell, work)
            compare(cell, mod)
            if cell in ("gru", "lru", "mingru"):
                gradcheck(cell, mod)
            if cell in ("gru", "lru", "mamba2", "qrnn"):
                lengths_case(cell, mod)
        gm = load_module("gru", work)
        reuse(gm)
        bad_input(gm)
        train_noise(work)
        example(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
