# Role: checks of the PyTorch oracle itself, needing no cellc: the safetensors reader/writer
# (sft.py), the reference cells (cells.py: autograd gradcheck, complex arithmetic against a
# hand-expanded real version, agreement with torch.nn.RNN/LSTM and with closed-form linear scans),
# and parity.py's own wiring (against fake_cellc.py: a correct fake passes, injected faults fail).
# Prints one PASS/FAIL line per check and ends with "N passed, M failed"; exit 1 if any failed.
import os
import struct
import sys
import tempfile
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import cells  # noqa: E402
sys.path.insert(0, os.path.dirname(HERE))
import clitest  # noqa: E402  (stdlib/cells.list)
import sft  # noqa: E402

torch.set_default_dtype(torch.float64)
COUNTS = [0, 0]


def check(name, fn):
    try:
        r = fn()
        ok, detail = (r if isinstance(r, tuple) else (bool(r), ""))
    except Exception as e:
        ok, detail = False, "%s: %s\n    %s" % (type(e).__name__, e,
                                                "\n    ".join(traceback.format_exc().strip().splitlines()[-5:]))
    COUNTS[0 if ok else 1] += 1
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


# ---------------------------------------------------------------- sft.py
def sft_checks():
    rng = np.random.RandomState(0)

    def roundtrip():
        t = {"b.f64": rng.normal(size=(3, 4, 2)), "a.f32": rng.normal(size=(5,)).astype(np.float32),
             "c.scalar": np.array(2.5), "d.empty": np.zeros((0, 3)), "e.i64": np.arange(6, dtype=np.int64).reshape(2, 3),
             "f.u8": np.arange(7, dtype=np.uint8), "g.f32odd": rng.normal(size=(3,)).astype(np.float32)}
        meta = {"cell": "mgu", "dims": "H=5,D=4", "note": "unicode \u00e9"}
        buf = sft.dumps(t, meta)
        back, m = sft.parse(buf)
        if m != meta:
            return False, "metadata %r != %r" % (m, meta)
        for k, v in t.items():
            if back[k].dtype != v.dtype or back[k].shape != v.shape or not np.array_equal(back[k], v):
                return False, "tensor %s differs (%s %s vs %s %s)" % (k, back[k].dtype, back[k].shape, v.dtype, v.shape)
        if set(back) != set(t):
            return False, "names %s" % sorted(back)
        return True, "F32 F64 I64 U8, scalar, empty, metadata"
    check("sft roundtrip", roundtrip)

    def file_roundtrip():
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "a.safetensors")
            t = {"x": rng.normal(size=(2, 3)), "y": rng.normal(size=(4,)).astype(np.float32)}
            sft.write(p, t)
            back, m = sft.read(p)
            return (m is None and all(np.array_equal(back[k], t[k]) and back[k].dtype == t[k].dtype for k in t)
                    and os.listdir(d) == ["a.safetensors"]), "no metadata, no temporary left"
    check("sft file roundtrip", file_roundtrip)

    def layout():
        t = {"zz": np.ones(3, np.float32), "aa": np.ones(3, np.float32), "mm": np.ones(2), "bb": np.ones(1)}
        buf = sft.dumps(t, {"k": "v"})
        (n,) = struct.unpack("<Q", buf[:8])
        hdr = buf[8:8 + n].decode()
        import json
        h = json.loads(hdr)
        order = [k for k in h if k != "__metadata__"]
        offs = [h[k]["data_offsets"] for k in order]
        ok = (n % 8 == 0 and hdr.startswith("{") and list(h)[0] == "__metadata__"
              and order == ["bb", "mm", "aa", "zz"]              # F64 first (aligned), then F32, each by name
              and all(offs[i][1] == offs[i + 1][0] for i in range(len(offs) - 1)) and offs[0][0] == 0
              and offs[-1][1] == len(buf) - 8 - n and all(o[0] % 8 == 0 for o in offs[:2])
              and hdr.rstrip(" ") == hdr.rstrip(" ").strip() and len(hdr) - len(hdr.rstrip(" ")) < 8)
        return ok, "header %d bytes, order %s" % (n, order)
    check("sft layout", layout)

    def known_bytes():  # the format's reference example: {"test": zeros((2, 2), int32)}
        hdr = b'{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}'
        want = struct.pack("<Q", 64) + hdr + b" " * 4 + b"\0" * 16
        got = sft.dumps({"test": np.zeros((2, 2), np.int32)})
        return got == want, ""
    check("sft known bytes", known_bytes)

    def f32_exact():
        a = np.array([1.0 / 3, 1e-38, -2.5e30, np.pi], np.float32)
        back = sft.parse(sft.dumps({"a": a}))[0]["a"]
        return back.dtype == np.float32 and back.tobytes() == a.tobytes(), ""
    check("sft f32 bit-exact", f32_exact)

    def rejects():
        good = sft.dumps({"a": np.ones(4), "b": np.ones(2, np.float32)})
        (n,) = struct.unpack("<Q", good[:8])
        bad = {
            "truncated": good[:-3],
            "short": good[:5],
            "huge header length": struct.pack("<Q", 10 ** 12) + good[8:],
            "not json": struct.pack("<Q", 8) + b"{nope!!}",
            "trailing bytes": good + b"\0\0\0\0",
            "bad offsets": good.replace(b'"data_offsets":[0,32]', b'"data_offsets":[0,24]'),
            "bad dtype": good.replace(b'"F32"', b'"Q32"'),
        }
        wrong = []
        for what, buf in bad.items():
            try:
                sft.parse(buf)
                wrong.append(what)
            except sft.SafetensorsError:
                pass
        return not wrong, ("accepted: " + ", ".join(wrong)) if wrong else "%d malformed files rejected" % len(bad)
    check("sft rejects malformed", rejects)


# ---------------------------------------------------------------- reference cells
def rand_inputs(name, H, D, T, B, opts, seed, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    pshapes, sshapes = cells.shapes(name, H, D, opts)
    params = {k: scale * torch.randn(s, generator=g) for k, (s, c) in pshapes.items()}
    x = torch.randn(T, B, D, generator=g)
    h0 = {k: 0.5 * torch.randn((B,) + s, generator=g) for k, (s, c) in sshapes.items()}
    return params, x, h0


def grad_configs():
    """Every stdlib cell (stdlib/cells.list) at its defaults, then with the list's option where it
    gives one: (cell, opts)."""
    out = []
    for c in clitest.stdlib_cells():
        if (c.cell, {}) not in out:
            out.append((c.cell, {}))
        if c.opts:
            out.append((c.cell, c.opts))
    return out


GRAD_CONFIGS = grad_configs()


def gradchecks():
    for name, opts in GRAD_CONFIGS:
        H, D = 3, 2
        label = "%s%s" % (name, "".join("[%s=%s]" % kv for kv in opts.items()))

        def one(name=name, opts=opts, H=H, D=D):
            params, x, h0 = rand_inputs(name, H, D, 3, 2, opts, seed=7)
            pk, sk = sorted(params), sorted(h0)
            leaves = [params[k] for k in pk] + [x] + [h0[k] for k in sk]
            leaves = [v.clone().requires_grad_(True) for v in leaves]

            def f(*vs):
                p = dict(zip(pk, vs[:len(pk)]))
                y, fin, gates = cells.run(name, p, vs[len(pk)], dict(zip(sk, vs[len(pk) + 1:])), opts)
                return (y,) + tuple(fin[k] for k in sorted(fin)) + tuple(gates[k] for k in sorted(gates))
            ok = torch.autograd.gradcheck(f, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-6, raise_exception=True)
            return ok, "%d inputs, %d elements" % (len(leaves), sum(v.numel() for v in leaves))
        check("gradcheck " + label, one)

    def structure():
        bad = []
        for name, opts in GRAD_CONFIGS:
            H, D = 5, 4
            params, x, h0 = rand_inputs(name, H, D, 4, 3, opts, seed=1)
            y, fin, gates = cells.REFS[name](params, x, h0, opts)
            o = cells.options(name, opts)
            sp = cells.SPECS[name]
            _, sshapes = cells.shapes(name, H, D, o)
            if tuple(y.shape) != (4, 3, sp.out(H, D)):
                bad.append("%s y %s" % (name, tuple(y.shape)))
            if sorted(fin) != sorted(sshapes) or any(tuple(fin[k].shape) != (3,) + sshapes[k][0] for k in fin):
                bad.append("%s finals" % name)
            if sorted(gates) != sorted(sp.gates(o)):
                bad.append("%s gates %s" % (name, sorted(gates)))
        return not bad, "; ".join(bad)
    check("reference shapes (y, finals, gates)", structure)

    def scalar_gate_shape():
        params, x, h0 = rand_inputs("scalar_gate", 5, 4, 3, 2, {}, seed=2)
        _, _, gates = cells.scalar_gate(params, x, h0)
        return tuple(gates["g"].shape) == (3, 2, 1), "gate.g %s" % (tuple(gates["g"].shape),)
    check("scalar_gate gate is [T, B, 1]", scalar_gate_shape)


def sig(a):
    return 1 / (1 + torch.exp(-a))


def lru_real_step(p, x, h):
    """One LRU step in real arithmetic only (h [B, H, 2], complex params [.., 2])."""
    r = torch.exp(-torch.exp(p["nu_log"]))
    th = torch.exp(p["theta_log"])
    lr, li = r * torch.cos(th), r * torch.sin(th)
    gam = torch.exp(p["gamma_log"])
    Br, Bi, Cr, Ci = p["B"][..., 0], p["B"][..., 1], p["C"][..., 0], p["C"][..., 1]
    hr, hi = h[..., 0], h[..., 1]
    ur, ui = x @ Br.T, x @ Bi.T
    nr = lr * hr - li * hi + gam * ur
    ni = lr * hi + li * hr + gam * ui
    y = nr @ Cr.T - ni @ Ci.T + p["Dskip"] * x
    return y, torch.stack([nr, ni], -1)


def hgru_real_step(p, x, h, lb):
    mu = sig(x @ p["Wf"].T + p["bf"])
    lam = lb + (1 - lb) * mu
    a, b = x @ p["Wr"].T + p["br"], x @ p["Wi"].T + p["bi"]
    cr, ci = a * sig(a), b * sig(b)
    c, s = torch.cos(p["theta"]), torch.sin(p["theta"])
    hr, hi = h[..., 0], h[..., 1]
    nr = lam * (c * hr - s * hi) + (1 - lam) * cr
    ni = lam * (c * hi + s * hr) + (1 - lam) * ci
    g = sig(x @ p["Wg"].T + p["bg"])
    v = g * torch.cat([nr, ni], -1)
    n = v.shape[-1]
    m = v.sum(-1, keepdim=True) / n
    var = ((v - m) ** 2).sum(-1, keepdim=True) / n
    o = (v - m) / torch.sqrt(var + 1e-5)
    return o @ p["Wo"].T + p["bo"], torch.stack([nr, ni], -1), mu


def complex_checks():
    def compare(name, opts, real_step):
        H, D = (4, 3)
        params, x, h0 = rand_inputs(name, H, D, 1, 2, opts, seed=5, scale=0.7)
        pk = sorted(params)
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        xl, hl = x.clone().requires_grad_(True), h0["h"].clone().requires_grad_(True)
        y, fin, gates = cells.run(name, leaves, xl, {"h": hl}, opts)
        outs = real_step(leaves, xl[0], hl)
        y2, f2 = outs[0], outs[1]
        g = torch.Generator().manual_seed(9)
        wy, wf = torch.randn(y2.shape, generator=g), torch.randn(f2.shape, generator=g)
        L1 = (y[0] * wy).sum() + (fin["h"] * wf).sum()
        L2 = (y2 * wy).sum() + (f2 * wf).sum()
        vs = [leaves[k] for k in pk] + [xl, hl]
        g1 = torch.autograd.grad(L1, vs)
        g2 = torch.autograd.grad(L2, vs)
        errs = [float((y[0] - y2).abs().max()), float((fin["h"] - f2).abs().max())]
        errs += [float((a - b).abs().max()) for a, b in zip(g1, g2)]
        if len(outs) > 2:
            errs.append(float((gates["mu"][0] - outs[2]).abs().max()))
        return max(errs) < 1e-12, "max abs diff %.2g (y, final, %d gradients)" % (max(errs), len(g1))
    check("lru complex vs real arithmetic (one step)", lambda: compare("lru", {}, lru_real_step))
    check("hgru complex vs real arithmetic (one step)",
          lambda: compare("hgru", {}, lambda p, x, h: hgru_real_step(p, x, h, 0.0)))
    check("hgru[lb=0.25] complex vs real arithmetic (one step)",
          lambda: compare("hgru", {"lb": 0.25}, lambda p, x, h: hgru_real_step(p, x, h, 0.25)))

    def real_view_grads():
        # the gradient of a complex param, as its real view, is (dL/dre, dL/dim): finite differences
        params, x, h0 = rand_inputs("lru", 3, 2, 2, 1, {}, seed=3)
        B = params["B"].clone().requires_grad_(True)

        def L(Bv):
            p = dict(params, B=Bv)
            y, fin, _ = cells.lru(p, x, h0)
            return (y * y).sum() + (fin["h"] ** 3).sum()
        g, = torch.autograd.grad(L(B), [B])
        e = torch.zeros_like(B)
        e[1, 0, 1] = 1e-6
        fd = (L(params["B"] + e) - L(params["B"] - e)) / 2e-6
        e[1, 0, 1] = 0
        e[2, 1, 0] = 1e-6
        fd2 = (L(params["B"] + e) - L(params["B"] - e)) / 2e-6
        d = max(abs(float(fd) - float(g[1, 0, 1])), abs(float(fd2) - float(g[2, 1, 0])))
        return d < 1e-7, "d/d im B[1,0] and d/d re B[2,1]: |autograd - fd| %.2g" % d
    check("complex param gradient is (dL/dre, dL/dim)", real_view_grads)


def independent_checks():
    def vs_nn_rnn():
        H, D, T, B = 5, 4, 6, 3
        rnn = torch.nn.RNN(D, H, nonlinearity="tanh").double()
        x = torch.randn(T, B, D)
        h0 = torch.randn(1, B, H)
        y_ref, hT = rnn(x, h0)
        p = {"Wx": rnn.weight_ih_l0, "Wh": rnn.weight_hh_l0, "b": rnn.bias_ih_l0 + rnn.bias_hh_l0}
        y, fin, _ = cells.elman(p, x, {"h": h0[0]})
        d = max(float((y - y_ref).abs().max()), float((fin["h"] - hT[0]).abs().max()))
        return d < 1e-13, "max abs diff %.2g" % d
    check("elman = torch.nn.RNN(tanh)", vs_nn_rnn)

    def vs_nn_lstm():
        H, D, T, B = 5, 4, 6, 3
        m = torch.nn.LSTM(D, H).double()
        x = torch.randn(T, B, D)
        h0, c0 = torch.randn(1, B, H), torch.randn(1, B, H)
        y_ref, (hT, cT) = m(x, (h0, c0))
        Wi, Wh, b = m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0 + m.bias_hh_l0
        p = {}
        for k, gname in enumerate("ifco"):          # PyTorch's order: input, forget, cell (g), output
            p["Wx" + gname] = Wi[k * H:(k + 1) * H]
            p["Wh" + gname] = Wh[k * H:(k + 1) * H]
            p["b" + gname] = b[k * H:(k + 1) * H]
        y, fin, _ = cells.lstm(p, x, {"h": h0[0], "c": c0[0]})
        d = max(float((y - y_ref).abs().max()), float((fin["h"] - hT[0]).abs().max()),
                float((fin["c"] - cT[0]).abs().max()))
        return d < 1e-13, "max abs diff %.2g" % d
    check("lstm = torch.nn.LSTM", vs_nn_lstm)

    def closed_form(name):
        # a diagonal-linear cell h_t = a_t h_{t-1} + b_t: h_T = (prod a) h0 + sum_k (prod_{j>k} a_j) b_k
        params, x, h0 = rand_inputs(name, 5, 4, 6, 3, {}, seed=4)
        y, fin, gates = cells.REFS[name](params, x, h0)
        z = gates["z"]
        if name == "mgu":
            a, b = z, (1 - z) * (x @ params["Wix"].T + params["bh"])
        else:
            a, b = 1 - z, z * (x @ params["Wh"].T)
        T = x.shape[0]
        cum = torch.ones_like(a[0])
        hT = torch.zeros_like(b[0])
        for k in range(T - 1, -1, -1):
            hT = hT + cum * b[k]
            cum = cum * a[k]
        hT = hT + cum * h0["h"]
        d = max(float((fin["h"] - hT).abs().max()), float((y[-1] - hT).abs().max()))
        return d < 1e-13, "max abs diff %.2g" % d
    check("mgu (see_h=false) = closed-form linear recurrence", lambda: closed_form("mgu"))
    check("mingru = closed-form linear recurrence", lambda: closed_form("mingru"))

    def norm():
        v = torch.randn(4, 7) * 3 + 1
        d = float((cells.layernorm(v) - torch.nn.functional.layer_norm(v, (7,), eps=1e-5)).abs().max())
        r = v / torch.sqrt((v ** 2).mean(-1, keepdim=True) + 1e-5)
        d2 = float((cells.rmsnorm(v) - r).abs().max())
        return max(d, d2) < 1e-13, "layernorm vs F.layer_norm %.2g, rmsnorm %.2g" % (d, d2)
    check("layernorm = F.layer_norm(eps=1e-5), rmsnorm", norm)

    def leaky_alpha_one():
        params, x, h0 = rand_inputs("leaky", 5, 4, 3, 2, {}, seed=6)
        y, _, _ = cells.leaky(params, x, h0, {"alpha": 1.0})
        p = {"Wx": params["Wi"], "Wh": params["Wr"], "b": torch.zeros(5)}
        y2, _, _ = cells.elman(p, x, h0)
        return float((y - y2).abs().max()) < 1e-15, ""
    check("leaky(alpha=1) = elman without bias", leaky_alpha_one)


# ---------------------------------------------------------------- parity.py wiring
def harness_checks():
    # parity.py runs in this process with its cellc runs answered by fake_cellc.run (same torch)
    import contextlib
    import io
    import fake_cellc
    import parity

    def run(faults, *extra):
        real = parity.run_cellc

        def fake(args, cmd):
            if not os.path.exists(args.cellc):
                return real(args, cmd)
            rc, err = fake_cellc.run(cmd[1:], faults)
            return None if rc == 0 else "exit status %d\n    command: %s\n    stderr: %s" % (rc, " ".join(cmd), err)
        parity.run_cellc = fake
        buf = io.StringIO()
        cwd = os.getcwd()
        try:
            os.chdir(ROOT)
            with contextlib.redirect_stdout(buf):
                rc = parity.main(["--cellc", os.path.join(HERE, "fake_cellc.py"), "--quiet", "-j", "1"] + list(extra))
        finally:
            parity.run_cellc = real
            os.chdir(cwd)
        out = buf.getvalue()
        return rc, out, out.strip().splitlines()[-1] if out.strip() else ""

    def clean():
        rc, out, last = run("", "--only", "mgu,leaky")
        return rc == 0 and last.endswith(" 0 failed"), last + ("" if rc == 0 else "\n" + out[-2000:])
    check("parity passes a correct cellc (fake; mgu, leaky)", clean)

    def faults():
        rc, out, last = run("perturb=grad.param.Wz,drop=gate.z,extra=junk,mode=sequential", "--only", "mingru")
        fails = [ln.split()[2] for ln in out.splitlines() if ln.startswith("FAIL")]
        want = {"names", "metadata", "grad.param.Wz", "gate.z"}   # metadata: 3 auto configs, not the forced one
        return rc == 1 and set(fails) == want and len(fails) == 4 + 3 + 4 + 4, "%s; failing: %s" % (last, sorted(set(fails)))
    check("parity catches a 1e-6 error, a missing and an extra tensor, a wrong mode", faults)

    def no_meta_exit():
        rc, out, last = run("meta=none", "--only", "elman")
        rc2, out2, last2 = run("exit=3", "--only", "elman")
        ok = (rc == 1 and last == "%d passed, 3 failed" % (int(last.split()[0])) and
              all(ln.split()[2] == "metadata" for ln in out.splitlines() if ln.startswith("FAIL")) and
              rc2 == 1 and last2 == "0 passed, 3 failed" and "injected failure" in out2)
        return ok, "%s / %s" % (last, last2)
    check("parity catches a missing __metadata__ and a failing cellc", no_meta_exit)

    def missing():
        rc, out, last = run("", "--only", "elman", "--cellc", os.path.join(ROOT, "no", "such", "cellc"))
        return rc == 1 and last == "0 passed, 3 failed" and "command:" in out, last
    check("parity counts a missing cellc as failures", missing)

    def plugin():
        rc, out, last = run("", "--cell-file", "stdlib/hgru.cell", "--ref",
                            os.path.join(HERE, "cells.py") + ":hgru", "--dims", "D=3", "--set", "lb=0.25")
        return rc == 0 and last.endswith(" 0 failed"), last + ("" if rc == 0 else "\n" + out[-2000:])
    check("parity --cell-file/--ref (fake, hgru)", plugin)


def main():
    sft_checks()
    gradchecks()
    complex_checks()
    independent_checks()
    if "--no-harness" not in sys.argv:
        harness_checks()
    print("%d passed, %d failed" % tuple(COUNTS))
    return 1 if COUNTS[1] else 0


if __name__ == "__main__":
    sys.exit(main())
