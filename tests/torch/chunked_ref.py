# Role: checks bench/torch_chunked.py, the PyTorch chunkwise-parallel peer of issue 31's bench,
# against plain step-by-step recurrences, so that the bench times a correct algorithm:
#  - the core S_t = a_t * S_{t-1} + outer(k_t, v_t), o_t = S_t^T q_t, per-key decays (GLA, HGRN2)
#    and a scalar decay per head (mamba2/SSD), float64, chunk 64 (sub-chunks of 16), at
#    T = 1, 63, 64, 65, 300: the outputs, the final state and the gradients of q, k, v, the log
#    decays and S_0 under L = sum(o * do) + sum(S_T * dS), max|a - b| / max|b| < 1e-9;
#  - float32, T = 300 mild decays and T = 130 strong ones (log decay -8 per step: exp(+-512) over
#    a chunk, which the textbook q * exp(b), k * exp(-b) form overflows): everything finite and
#    within 2e-5 of the float64 recurrence (the log decays' gradient under strong decays 2e-3);
#  - Gated DeltaNet's delta rule S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T in
#    chunks (delta_chunked, the UT / WY form) against its step-by-step recurrence, the same
#    lengths, tolerances and strong decays, with the gradient of beta besides (k of unit norm,
#    beta in (0, 1), as the cell makes them);
#  - the whole cells (gla, hgrn2, mamba2, gated_deltanet as the bench runs them: the stdlib
#    cell's projections around the chunked core) against tests/torch/cells.py's step-by-step reference of the stdlib
#    cell (the one parity.py checks cellc against), float64, T = 65 and 130: outputs, final state
#    and the gradients of every param, x and S_0.
# Ends with "N passed, M failed"; exit status 1 if any failed.
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cells  # noqa: E402
import torch_chunked as tc  # noqa: E402

torch.set_num_threads(1)
passed = failed = 0


def check(name, got, want, tol):
    global passed, failed
    scale = max(want.abs().max().item(), 1e-300)
    err = (got - want).abs().max().item() / scale if got.shape == want.shape else float("inf")
    ok = got.shape == want.shape and bool(torch.isfinite(got).all()) and err < tol
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: shape {tuple(got.shape)} vs {tuple(want.shape)}, rel err {err:.3g} (tol {tol:g})")
    return ok


def core_inputs(B, H, T, K, V, scalar, dtype, strong=False, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=gen, dtype=dtype)
    gshape = (B, H, T) if scalar else (B, H, T, K)
    # mixed decays: most mild, some near 0 (log decay down to about -9); strong: -8 every step
    g = torch.full(gshape, -8.0, dtype=dtype) if strong else F.logsigmoid(3 * r(*gshape))
    return [r(B, H, T, K), r(B, H, T, K), r(B, H, T, V), g, 0.5 * r(B, H, K, V)], \
        [r(B, H, T, V), r(B, H, K, V)]


def grads(fn, ins, cot):
    ins = [t.detach().clone().requires_grad_() for t in ins]
    o, S = fn(*ins)
    gs = torch.autograd.grad([o, S], ins, cot)
    return [o.detach(), S.detach()] + list(gs)


NAMES = ["o", "S_T", "dq", "dk", "dv", "dg", "dS0"]


def test_core():
    B, H, K, V = 2, 2, 8, 6
    for scalar in (False, True):
        kind = "scalar" if scalar else "per-key"
        for T in (1, 63, 64, 65, 300):
            ins, cot = core_inputs(B, H, T, K, V, scalar, torch.float64, seed=T)
            got = grads(tc.chunked, ins, cot)
            want = grads(tc.recurrent, ins, cot)
            for n, a, b in zip(NAMES, got, want):
                check(f"core {kind} T={T} {n}", a, b, 1e-9)
        # float32: mild decays, and decays that overflow exp(-b) over a chunk: finite and right.
        # The log decays' gradient is a reverse cumulative sum of differences of O(|q| |k|) terms
        # that cancel where strong decays make the true gradient small: float32 keeps ~3e-4 of it
        # there (the step-by-step form, which never forms those terms, 1e-7).
        for strong, T in ((False, 300), (True, 130)):
            ins, cot = core_inputs(B, H, T, K, V, scalar, torch.float64, strong=strong, seed=7)
            want = grads(tc.recurrent, ins, cot)
            got = grads(tc.chunked, [t.float() for t in ins], [t.float() for t in cot])
            for n, a, b in zip(NAMES, got, want):
                tol = 2e-3 if strong and n == "dg" else 2e-5
                check(f"core {kind} float32 {'strong' if strong else 'mild'} decays T={T} {n}", a.double(), b, tol)


DELTA_NAMES = ["o", "S_T", "dq", "dk", "dv", "dbeta", "dg", "dS0"]


def delta_inputs(B, H, T, K, V, dtype, strong=False, seed=0):
    """the gated delta rule's inputs as the cell makes them: k of unit norm, beta in (0, 1), so that
    each step's factor I - beta k k^T is a contraction (other k, beta make the recurrence itself
    grow without bound)"""
    gen = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=gen, dtype=dtype)
    g = torch.full((B, H, T), -8.0, dtype=dtype) if strong else F.logsigmoid(3 * r(B, H, T))
    k = F.normalize(r(B, H, T, K), dim=-1)
    return [r(B, H, T, K), k, r(B, H, T, V), torch.sigmoid(2 * r(B, H, T)), g, 0.5 * r(B, H, K, V)], \
        [r(B, H, T, V), r(B, H, K, V)]


def test_delta_core():
    """tc.delta_chunked (the UT / WY form) against the step-by-step delta rule"""
    B, H, K, V = 2, 2, 8, 6
    for T in (1, 63, 64, 65, 300):
        ins, cot = delta_inputs(B, H, T, K, V, torch.float64, seed=T)
        got = grads(tc.delta_chunked, ins, cot)
        want = grads(tc.delta_recurrent, ins, cot)
        for n, a, b in zip(DELTA_NAMES, got, want):
            check(f"delta core T={T} {n}", a, b, 1e-9)
    # float32: mild decays, and log decays of -8 a step (e^{-512} over a chunk): finite and right;
    # the log decays' gradient under strong decays as test_core's (2.4e-4 here, SSD's 2.2e-4)
    for strong, T in ((False, 300), (True, 130)):
        ins, cot = delta_inputs(B, H, T, K, V, torch.float64, strong=strong, seed=7)
        want = grads(tc.delta_recurrent, ins, cot)
        got = grads(tc.delta_chunked, [t.float() for t in ins], [t.float() for t in cot])
        for n, a, b in zip(DELTA_NAMES, got, want):
            tol = 2e-3 if strong and n == "dg" else 2e-5
            check(f"delta core float32 {'strong' if strong else 'mild'} decays T={T} {n}", a.double(), b, tol)


def cell_case(name, T, B=3, D=5, H=4):
    """the chunked whole cell against cells.py's step-by-step reference of the stdlib cell"""
    torch.manual_seed(T)
    if name == "mamba2":
        NH, P, N = cells.MAMBA2_NH, H, cells.MAMBA2_N
        d = dict(D=D, NH=NH, P=P, N=N)
    else:
        d = dict(D=D, NH=2, K=H, V=H + 1, R=3)
    p, f, sh = tc.make_cell(name, d, torch.float64)
    p = {k: (0.5 * torch.randn_like(v)).requires_grad_() for k, v in p.items()}
    x = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    S0 = (0.5 * torch.randn(B, *sh, dtype=torch.float64)).requires_grad_()
    dy, dS = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, *sh, dtype=torch.float64)
    leaves = [x, S0] + list(p.values())
    y, S = f(p, x, S0)
    got = [y.detach(), S.detach()] + list(torch.autograd.grad([y, S], leaves, [dy, dS]))
    h0 = {"S": S0}
    if name == "mamba2":
        for hn, n in (("hist.ux", NH * P), ("hist.uB", N), ("hist.uC", N)):
            h0[hn] = torch.zeros(B, 3, n, dtype=torch.float64)
    if name == "gated_deltanet":
        h0["hist.u"] = torch.zeros(B, 3, d["NH"] * (2 * d["K"] + d["V"]), dtype=torch.float64)
    yr, fin, _ = cells.run(name, p, x.transpose(0, 1), h0)
    yr = yr.transpose(0, 1)
    want = [yr.detach(), fin["S"].detach()] + list(torch.autograd.grad([yr, fin["S"]], leaves, [dy, dS]))
    for n, a, b in zip(["y", "S_T", "dx", "dS0"] + ["d" + k for k in p], got, want):
        check(f"cell {name} T={T} {n}", a, b, 1e-9)


def main():
    test_core()
    test_delta_core()
    for name in ("gla", "hgrn2", "mamba2", "gated_deltanet"):
        for T in (65, 130):
            cell_case(name, T)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
