# Role: the PyTorch autograd reference for prev and conv (language spec section 9, "Time"): the
# cells tests/cells/qrnn_conv.cell (width-2 convolutions, a gate), tests/cells/rglru_conv.cell
# (a width-4 convolution and prev(u, 1) in the output) and tests/cells/prev_shapes.cell (prev of
# a scalar, a vector and a matrix), written here from their equations, not
# from cellc's lowering. Per cell and configuration (T = 1, 2, 9; B = 3; nonzero histories hist.*,
# h0 and dfinal of every state, histories included), `bin/cellc run --backend interp --precision
# f64 --inputs IN` is compared tensor by tensor with the float64 reference, in scan and in sequential
# mode; and so are the cpu and cuda-emu back ends in float32 (relative error < 2e-4):
#   L = sum(y * dy) + sum over states (histories too) of sum(final * dfinal),
#   y, gate.*, final.*, final.hist.* and every gradient (grad.param.*, grad.x, grad.h0.*,
#   grad.hist.*), max|a - b| / max(max|b|, 1e-300) < 1e-9.
# A history hist.NAME is [B, K, size], oldest step first: NAME at steps -K .. -1. conv(v, W)[c] =
# sum_j W[c, j] v[t - j][c]: W[c, 0] multiplies the current step (torch's Conv1d weight flipped).
# Also: a run of T = 9 equals two runs of 4 and 5 steps where the second takes the first's
# final.hist.* as its hist.* and final.* as its h0.* (interp, cpu, cuda-emu).
# Ends with "N passed, M failed"; exit status 1 if any failed.
#   python3 tests/torch/time_cells.py [--cellc bin/cellc] [--keep DIR]
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sft  # noqa: E402
import torch  # noqa: E402

torch.set_default_dtype(torch.float64)
ROOT = os.path.dirname(os.path.dirname(HERE))


def causal(hist, seq, K, t):
    """The value at steps t, t-1, .., t-K+1 (a list, lag 0 first) from hist [B, Kh, C] and seq [T, B, C]."""
    full = torch.cat([hist.transpose(0, 1), seq], 0)   # [Kh + T, B, C]
    kh = hist.shape[1]
    return [full[kh + t - j] for j in range(K)]


def conv(hist, seq, W, t):
    vals = causal(hist, seq, W.shape[1], t)
    return sum(W[:, j] * vals[j] for j in range(W.shape[1]))


def last_steps(hist, seq, K):
    full = torch.cat([hist.transpose(0, 1), seq], 0)
    return full[-K:].transpose(0, 1)                   # [B, K, C], oldest first


def qrnn_conv(p, x, h0, hist):
    uz, uf, uo = (x @ p[n].T for n in ("Wz", "Wf", "Wo"))
    c = h0["c"]
    ys, gates = [], []
    for t in range(x.shape[0]):
        z = torch.tanh(conv(hist["uz"], uz, p["Kz"], t))
        f = torch.sigmoid(conv(hist["uf"], uf, p["Kf"], t))
        o = torch.sigmoid(conv(hist["uo"], uo, p["Ko"], t))
        c = f * c + (1 - f) * z
        ys.append(o * c)
        gates.append(o)
    finals = {"c": c}
    for n, u in (("uz", uz), ("uf", uf), ("uo", uo)):
        finals["hist." + n] = last_steps(hist[n], u, 1)
    return torch.stack(ys), finals, {"o": torch.stack(gates)}


def rglru_conv(p, x, h0, hist):
    u = x @ p["Wu"].T
    h = h0["h"]
    ys = []
    for t in range(x.shape[0]):
        v = conv(hist["u"], u, p["Kc"], t)
        r = torch.sigmoid(v @ p["Wa"].T)
        i = torch.sigmoid(v @ p["Wi"].T)
        a = torch.exp(-8 * r * torch.nn.functional.softplus(-p["lam"]))
        h = a * h + torch.sqrt(1 - a * a) * (i * v)
        ys.append(h + 0.5 * causal(hist["u"], u, 2, t)[1])
    return torch.stack(ys), {"h": h, "hist.u": last_steps(hist["u"], u, 3)}, {}


def prev_shapes(p, x, h0, hist):
    u = x @ p["W"].T
    v = torch.tanh(x @ p["V"].T)
    M = u[..., :, None] * v[..., None, :]
    s = u.sum(-1)
    h = h0["h"]
    ys = []
    for t in range(x.shape[0]):
        h = (torch.sigmoid(causal(hist["s"], s, 2, t)[1])[:, None] * h + causal(hist["M"], M, 3, t)[2].sum(-1) * 0.3
             + causal(hist["u"], u, 2, t)[1])
        ys.append(h)
    finals = {"h": h, "hist.u": last_steps(hist["u"], u, 1), "hist.M": last_steps(hist["M"], M, 2),
              "hist.s": last_steps(hist["s"], s, 1)}
    return torch.stack(ys), finals, {}


CELLS = {
    "qrnn_conv": (qrnn_conv, {"Wz": "HD", "Wf": "HD", "Wo": "HD", "Kz": "H2", "Kf": "H2", "Ko": "H2"},
                  {"c": 1}, {"uz": (1, "H"), "uf": (1, "H"), "uo": (1, "H")}),
    "rglru_conv": (rglru_conv, {"Wu": "HD", "Kc": "H4", "Wa": "HH", "Wi": "HH", "lam": "H"}, {"h": 1}, {"u": (3, "H")}),
    "prev_shapes": (prev_shapes, {"W": "HD", "V": "HD"}, {"h": 1}, {"u": (1, "H"), "M": (2, "HH"), "s": (1, "")}),
}


def shape_of(code, H, D):
    return tuple({"H": H, "D": D}.get(ch, None) or int(ch) for ch in code)


def check(args, name, T, B, H, D, seed, results, backend="interp", mode="scan"):
    ref, pshapes, states, hists = CELLS[name]
    rng = np.random.RandomState(seed)
    inp = {"x": rng.normal(size=(T, B, D))}
    for n, code in pshapes.items():
        inp["param." + n] = 0.6 * rng.normal(size=shape_of(code, H, D))
        if n == "lam":
            inp["param." + n] = rng.uniform(1, 3, size=(H,))
    for s in states:
        inp["h0." + s] = rng.uniform(-0.9, 0.9, size=(B, H))
        inp["dfinal." + s] = rng.normal(size=(B, H))
    for n, (K, code) in hists.items():
        inp["hist." + n] = rng.normal(size=(B, K) + shape_of(code, H, D))
        inp["dfinal.hist." + n] = rng.normal(size=(B, K) + shape_of(code, H, D))
    inp["dy"] = rng.normal(size=(T, B, H))
    label = "%s T=%d B=%d %s %s" % (name, T, B, backend, mode)
    f64 = backend == "interp"
    tol = 1e-9 if f64 else 2e-4
    d = tempfile.mkdtemp(dir=args.work)
    ip, op = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
    sft.write(ip, inp)
    cmd = [args.cellc, "run", os.path.join(ROOT, "tests/cells/%s.cell" % name), "--backend", backend, "--precision",
           "f64" if f64 else "f32", "--mode", mode, "--dims", "H=%d,D=%d" % (H, D), "--T", str(T), "--B", str(B), "--inputs", ip, "--out", op]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        results.append((False, "%s: run: %s" % (label, p.stderr.decode()[:2000])))
        return
    results.append((True, "%s: run" % label))
    out = sft.load(op)
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in inp.items() if not k.startswith("d")}
    params = {k[6:]: v for k, v in leaves.items() if k.startswith("param.")}
    h0 = {k[3:]: v for k, v in leaves.items() if k.startswith("h0.")}
    hist = {k[5:]: v for k, v in leaves.items() if k.startswith("hist.")}
    y, finals, gates = ref(params, leaves["x"], h0, hist)
    L = (y * torch.tensor(inp["dy"])).sum()
    for s, f in finals.items():
        L = L + (f * torch.tensor(inp["dfinal." + s])).sum()
    L.backward()
    want = {"y": y, **{"final." + s: f for s, f in finals.items()}, **{"gate." + g: v for g, v in gates.items()}}
    for k, v in leaves.items():
        want["grad." + k] = v.grad
    for k, w in sorted(want.items()):
        if k not in out:
            results.append((False, "%s: %s missing from the output" % (label, k)))
            continue
        w = w.detach().numpy()
        got = out[k]
        if got.shape != w.shape:
            results.append((False, "%s: %s is %s, want %s" % (label, k, got.shape, w.shape)))
            continue
        err = np.max(np.abs(got - w)) / max(np.max(np.abs(w)), 1e-300)
        results.append((err < tol, "%s: %s relative error %.2e" % (label, k, err)))


def check_carry(args, name, results, backend):
    """final.hist.* (and final.*) given back as hist.* (h0.*): T = 9 in one call or as 4 + 5."""
    ref, pshapes, states, hists = CELLS[name]
    H, D, B, T = 5, 3, 2, 9
    rng = np.random.RandomState(11)
    inp = {"x": rng.normal(size=(T, B, D))}
    for n, code in pshapes.items():
        inp["param." + n] = 0.6 * rng.normal(size=shape_of(code, H, D))
    for n, (K, code) in hists.items():
        inp["hist." + n] = rng.normal(size=(B, K) + shape_of(code, H, D))
    f64 = backend == "interp"

    def run(tensors, tag):
        ip, op = os.path.join(args.work, "carry_%s_%s.in" % (name, tag)), os.path.join(args.work, "carry_%s_%s.out" % (name, tag))
        sft.write(ip, tensors)
        cmd = [args.cellc, "run", os.path.join(ROOT, "tests/cells/%s.cell" % name), "--backend", backend, "--precision",
               "f64" if f64 else "f32", "--dims", "H=%d,D=%d" % (H, D), "--inputs", ip, "--out", op]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return sft.load(op) if p.returncode == 0 else None

    whole = run(inp, "whole")
    first = run({k: (v[:4] if k == "x" else v) for k, v in inp.items()}, "first")
    label = "%s %s: hist.* and h0.* carried over two calls" % (name, backend)
    if whole is None or first is None:
        results.append((False, label + ": a run failed"))
        return
    second_in = {k: v for k, v in inp.items() if k.startswith("param.")}
    second_in["x"] = inp["x"][4:]
    for k, v in first.items():
        if k.startswith("final."):
            second_in[k[6:] if k.startswith("final.hist.") else "h0." + k[6:]] = v
    second = run(second_in, "second")
    if second is None:
        results.append((False, label + ": the second run failed"))
        return
    err = max(np.max(np.abs(np.concatenate([first["y"], second["y"]]) - whole["y"])),
              max(np.max(np.abs(second[k] - whole[k])) for k in whole if k.startswith("final.")))
    results.append((err < (1e-12 if f64 else 1e-5), "%s (max difference %.2e)" % (label, err)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cellc", default=os.path.join(ROOT, "bin/cellc"))
    ap.add_argument("--keep", default=None)
    args = ap.parse_args()
    args.work = args.keep or tempfile.mkdtemp()
    results = []
    for name in CELLS:
        for backend in ("interp", "cpu", "cuda-emu"):
            for mode in ("scan", "sequential"):
                for T, seed in ((1, 1), (2, 2), (9, 3)):
                    check(args, name, T, 3, 5, 3, seed, results, backend, mode)
            check_carry(args, name, results, backend)
    fails = [m for ok, m in results if not ok]
    for m in fails:
        print("FAIL", m)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    print("%d checks of %d cells" % (len(results), len(CELLS)))
    print("%d passed, %d failed" % (len(results) - len(fails), len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
