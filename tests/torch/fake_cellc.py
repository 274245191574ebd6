#!/usr/bin/python3
# Role: a stand-in for `cellc run` built on the reference of cells.py, used only by selftest.py
# to test parity.py's own wiring without the real compiler: a correct fake must pass every check,
# and the injected faults must be caught. selftest.py calls run() in-process (importing torch once
# per process is slow); as a program it takes the faults from the environment:
#   FAKE_CELLC_FAULTS="perturb=NAME,drop=NAME,extra=NAME,mode=scan|sequential,exit=N,meta=none"
#   (perturb: multiply tensor NAME by 1 + 1e-6; drop: leave it out; extra: add a tensor NAME;
#    mode: record this mode; exit: fail with status N; meta=none: no __metadata__)
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sft  # noqa: E402


def main():
    rc, err = run(sys.argv[1:], os.environ.get("FAKE_CELLC_FAULTS", ""))
    sys.stderr.write(err)
    return rc


def run(argv, faults=""):
    """Returns (exit status, stderr text)."""
    if not argv or argv[0] != "run":
        return 2, "usage: fake_cellc.py run FILE.cell [options]\n"
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--cell")
    ap.add_argument("--dims", default="")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--T", type=int, default=16)
    ap.add_argument("--B", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--inputs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--precision", default="f32")
    a = ap.parse_args(argv[1:])
    faults = dict(kv.split("=", 1) for kv in faults.split(",") if kv)
    if "exit" in faults:
        return int(faults["exit"]), "fake_cellc: injected failure\n"

    import torch
    import cells
    name = a.cell or os.path.splitext(os.path.basename(a.file))[0]
    if name not in cells.SPECS:
        return 1, "%s: error: unknown cell %s\n" % (a.file, name)
    sp = cells.SPECS[name]
    opts = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        opts[k] = (v == "true") if v in ("true", "false") else float(v)
    o = cells.options(name, opts)
    dims = {k: int(v) for k, v in (kv.split("=", 1) for kv in a.dims.split(",") if kv)}
    D = dims["D"]
    H = dims.get("H", D if sp.H_default == "D" else None)
    pshapes, sshapes = cells.shapes(name, H, D, o)
    O = sp.out(H, D)
    inp = sft.read(a.inputs)[0] if a.inputs else {}
    rng = np.random.RandomState(a.seed)
    t = {}
    for k, (shp, _) in sorted(pshapes.items()):
        t["param." + k] = inp.get("param." + k, 0.4 * rng.normal(size=shp))
    t["x"] = inp.get("x", rng.normal(size=(a.T, a.B, D)))
    t["dy"] = inp.get("dy", rng.normal(size=(a.T, a.B, O)))
    for k, (shp, _) in sshapes.items():
        t["h0." + k] = inp.get("h0." + k, np.zeros((a.B,) + shp))
        t["dfinal." + k] = inp.get("dfinal." + k, np.zeros((a.B,) + shp))
    t = {k: np.asarray(v, dtype=np.float64) for k, v in t.items()}

    leaf = lambda v: torch.tensor(v, requires_grad=True)  # noqa: E731
    P = {k: leaf(t["param." + k]) for k in pshapes}
    x = leaf(t["x"])
    h0 = {k: leaf(t["h0." + k]) for k in sshapes}
    y, fin, gates = cells.run(name, P, x, h0, o)
    L = (y * torch.tensor(t["dy"])).sum() + sum((fin[k] * torch.tensor(t["dfinal." + k])).sum() for k in fin)
    names = list(P) + ["x"] + list(h0)
    leaves = list(P.values()) + [x] + list(h0.values())
    grads = torch.autograd.grad(L, leaves)
    t["y"] = y.detach().numpy()
    for k in fin:
        t["final." + k] = fin[k].detach().numpy()
    for n, g in zip(names, grads):
        t[("grad.param." + n) if n in P else ("grad.x" if n == "x" else "grad.h0." + n)] = g.numpy()
    for k, v in gates.items():
        t["gate." + k] = v.detach().numpy()

    if "perturb" in faults:
        t[faults["perturb"]] = t[faults["perturb"]] * (1 + 1e-6)
    if "drop" in faults:
        t.pop(faults["drop"], None)
    if "extra" in faults:
        t[faults["extra"]] = np.zeros(1)
    mode = faults.get("mode") or (sp.mode(o) if a.mode == "auto" else a.mode)
    meta = None if faults.get("meta") == "none" else {
        "cell": name, "dims": a.dims, "options": ",".join(a.set), "mode": mode, "backend": a.backend}
    sft.write(a.out, t, meta)
    return 0, ""


if __name__ == "__main__":
    sys.exit(main())
