"""The chunkwise-parallel training algorithm of matrix-state cells in PyTorch (issue 31's peer),
written from the papers' equations:
  Yang, Wang, Shen, Panda and Kim 2024, "Gated linear attention transformers with hardware-efficient
  training", section 4 (the chunkwise form, log-space cumulative decays, secondary chunking);
  Dao and Gu 2024, "Transformers are SSMs" (SSD: a scalar decay per head, the masked segment sums);
  HGRN2 (Qin et al. 2024) is GLA's form with k = 1 - f and log decay log f.
The core, per head, with S_0 given:
  S_t = diag(a_t) S_{t-1} + outer(k_t, v_t);  o_t = transpose(S_t) @ q_t
with a_t = exp(g_t) per key channel (g [.., T, K]) or one per head (g [.., T]). Forward in PyTorch
ops, backward by autograd.

The chunked form, chunk length L, b_t = g_1 + ... + g_t (inclusive, from the chunk's start):
  o_t  = S_0^T (q_t * exp(b_t)) + sum_{s <= t} v_s * sum_c q_tc k_sc exp(b_tc - b_sc)
  S_L  = diag(exp(b_L)) S_0 + sum_s outer(k_s * exp(b_L - b_s), v_s)
Every exponent is <= 0, so nothing overflows however strong the decays; the intra-chunk term for
per-key decays is cut into sub-chunks of length c (the paper's secondary chunking): a query
sub-chunk i against an earlier key sub-chunk j < i through the cumulative decay r_i at the start
of sub-chunk i, exp(b_t - b_s) = exp(b_t - r_i) exp(r_i - b_s), both factors <= 1, a product of
GEMMs; the diagonal sub-blocks in the (t, s, k) log-space form over the pairs s <= t. With a scalar decay per head
the whole L x L mask is one (t, s) matrix (SSD). The states at chunk boundaries pass sequentially.

Gated DeltaNet's delta rule (Yang, Kautz and Hatamizadeh 2025, section 3.3), a scalar decay per
head, has its own core, delta_chunked: the UT / WY form of the chunk's product of Householder-like
factors, one unit lower triangular solve per chunk (its docstring gives the equations).

  python3 bench/torch_chunked.py CELL DIMS T B THREADS REPS [core|cell]
CELL: gla | hgrn2 | mamba2 | gated_deltanet; DIMS: NH=4,K=64,V=64,D=256 (mamba2: NH=..,P=..,N=..,D=..).
Prints one JSON line: forward + backward seconds per batch (the best of REPS after a warm-up).
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

CHUNK = 64
SUB = 16
EPS_NORM = 1e-5


def _pad(x, Tp, dim=2):
    T = x.shape[dim]
    if T == Tp:
        return x
    shape = list(x.shape)
    shape[dim] = Tp - T
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _state_passing(U, decay_last, S0):
    """S_{n+1} = decay_last[n] (broadcast over V) * S_n + U[n]; returns the state at the start of
    every chunk [.., N, K, V] and the final state. U [.., N, K, V]; decay_last [.., N, K, 1]."""
    states = []
    S = S0
    for n in range(U.shape[-3]):
        states.append(S)
        S = decay_last[..., n, :, :] * S + U[..., n, :, :]
    return torch.stack(states, dim=-3), S


def chunked(q, k, v, g, S0, L=CHUNK, c=SUB):
    """The chunked form. q, k [B, H, T, K]; v [B, H, T, V]; g [B, H, T, K] (per key) or [B, H, T]
    (per head), log decays <= 0; S0 [B, H, K, V]. Returns o [B, H, T, V] and S_T."""
    Bs, H, T, K = q.shape
    V = v.shape[-1]
    scalar = g.dim() == 3
    N = (T + L - 1) // L
    Tp = N * L
    # padding: k = v = 0 adds nothing to the state, g = 0 (decay 1) keeps it
    q, k, v = (_pad(t, Tp).reshape(Bs, H, N, L, t.shape[-1]) for t in (q, k, v))
    if scalar:
        g = _pad(g.unsqueeze(-1), Tp).reshape(Bs, H, N, L)
    else:
        g = _pad(g, Tp).reshape(Bs, H, N, L, K)
    b = torch.cumsum(g, dim=3)                        # [.., N, L(, K)]
    blast = b[:, :, :, -1:]                           # [.., N, 1(, K)]
    tri = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    if scalar:
        seg = b.unsqueeze(-1) - b.unsqueeze(-2)       # [.., N, t, s]: b_t - b_s
        Dm = torch.exp(seg.masked_fill(~tri, -math.inf))
        A = (q @ k.transpose(-1, -2)) * Dm
        qe = q * torch.exp(b).unsqueeze(-1)
        ke = k * torch.exp(blast - b).unsqueeze(-1)
        dl = torch.exp(blast).unsqueeze(-1)                                                 # [.., N, 1, 1]
    else:
        n = L // c
        qs, ks, bs = (t.reshape(Bs, H, N, n, c, K) for t in (q, k, b))
        # r_i: the cumulative decay at the start of sub-chunk i (0 for the first)
        r = torch.cat([b.new_zeros(Bs, H, N, 1, 1, K), bs[:, :, :, :-1, -1:, :]], dim=3)   # [.., n, 1, K]
        qt = qs * torch.exp(bs - r)                                                        # [.., i, t, K]
        lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-1)               # j < i
        ex = (r.unsqueeze(4) - bs.unsqueeze(3))                                             # [.., i, j, s, K]
        ex = ex.masked_fill(~lower.view(n, n, 1, 1), -math.inf)
        kt = ks.unsqueeze(3) * torch.exp(ex)                                                # [.., i, j, s, K]
        Aoff = torch.einsum("...itk,...ijsk->...itjs", qt, kt)                              # [.., i, t, j, s]
        # the diagonal sub-blocks: (t, s, k) in log space, masked s <= t
        # the diagonal sub-blocks: the (t, s, k) log-space form over the pairs s <= t only
        ti, si = torch.tril_indices(c, c, device=q.device)
        dd = bs[..., ti, :] - bs[..., si, :]                                               # [.., i, pair, K]
        pairs = (qs[..., ti, :] * torch.exp(dd) * ks[..., si, :]).sum(-1)                 # [.., i, pair]
        Adiag = pairs.new_zeros(Bs, H, N, n, c * c).index_copy(-1, ti * c + si, pairs).view(Bs, H, N, n, c, c)
        eye = torch.eye(n, dtype=q.dtype, device=q.device).view(n, 1, n, 1)
        A = (Aoff + Adiag.unsqueeze(-2) * eye).reshape(Bs, H, N, L, L)
        qe = q * torch.exp(b)
        ke = k * torch.exp(blast - b)
        dl = torch.exp(blast).transpose(-1, -2)                                             # [.., N, K, 1]
    U = ke.transpose(-1, -2) @ v                                                            # [.., N, K, V]
    starts, final = _state_passing(U, dl, S0)
    o = A @ v + qe @ starts                                                                 # [.., N, L, V]
    return o.reshape(Bs, H, Tp, V)[:, :, :T], final


def delta_chunked(q, k, v, beta, g, S0, L=CHUNK):
    """The gated delta rule in chunks (Gated DeltaNet, Yang, Kautz and Hatamizadeh 2025, section
    3.3: the UT / WY representation of the product of the Householder-like factors, with the
    gate's cumulative log decays inside each chunk), per head, the state S [K, V] (the stdlib
    cell's [V, K] transposed):
      S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T;  o_t = S_t^T q_t
    q, k [B, H, T, K]; v [B, H, T, V]; beta [B, H, T]; g = log a [B, H, T] (<= 0); S0 [B, H, K, V].
    Written S_t = a_t S_{t-1} + k_t w_t^T, the step's write w_t = beta_t (v_t - a_t S_{t-1}^T k_t);
    inside a chunk from S_0, with b_t the cumulative log decay from its start (inclusive),
    S_{t-1}^T k_t expands over the chunk's earlier writes and the w solve one unit lower
    triangular system:
      (I + A) w = beta v - beta e^b K S_0,   A_ts = beta_t e^{b_t - b_s} (k_t . k_s)  (s < t)
    so w = U - W S_0 with U = (I + A)^-1 diag(beta) V and W = (I + A)^-1 diag(beta e^b) K (both from
    the chunk alone: all chunks at once), and
      o_t = e^{b_t} S_0^T q_t + sum_{s <= t} e^{b_t - b_s} (q_t . k_s) w_s
      S_L = e^{b_L} S_0 + sum_s e^{b_L - b_s} k_s w_s^T
    Every exponent is <= 0. What needs the chunk's S_0 (w = U - W S_0 and the next boundary state)
    runs in a loop over the chunks. Returns o [B, H, T, V] and S_T."""
    Bs, H, T, K = q.shape
    V = v.shape[-1]
    N = (T + L - 1) // L
    Tp = N * L
    # padding: beta = 0 writes and erases nothing, g = 0 (decay 1) keeps the state
    q, k, v = (_pad(t, Tp).reshape(Bs, H, N, L, t.shape[-1]) for t in (q, k, v))
    beta, g = (_pad(t.unsqueeze(-1), Tp).reshape(Bs, H, N, L) for t in (beta, g))
    b = torch.cumsum(g, dim=3)                                            # [.., N, L]
    blast = b[..., -1:]                                                   # [.., N, 1]
    seg = b.unsqueeze(-1) - b.unsqueeze(-2)                               # [.., N, t, s]: b_t - b_s
    strict = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    A = beta.unsqueeze(-1) * (k @ k.transpose(-1, -2)) * torch.exp(seg.masked_fill(~strict, -math.inf))
    eye = torch.eye(L, dtype=q.dtype, device=q.device)
    rhs = torch.cat([v * beta.unsqueeze(-1), k * (beta * torch.exp(b)).unsqueeze(-1)], dim=-1)
    UW = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    U, W = UW[..., :V], UW[..., V:]                                       # [.., N, L, V], [.., N, L, K]
    Aqk = (q @ k.transpose(-1, -2)) * torch.exp(seg.masked_fill(~causal, -math.inf))
    qe = q * torch.exp(b).unsqueeze(-1)
    ke = k * torch.exp(blast - b).unsqueeze(-1)
    dl = torch.exp(blast).unsqueeze(-1)                                   # [.., N, 1, 1]
    S = S0
    starts, ws = [], []
    for n in range(N):
        starts.append(S)
        w = U[:, :, n] - W[:, :, n] @ S
        ws.append(w)
        S = dl[:, :, n] * S + ke[:, :, n].transpose(-1, -2) @ w
    o = qe @ torch.stack(starts, dim=2) + Aqk @ torch.stack(ws, dim=2)   # [.., N, L, V]
    return o.reshape(Bs, H, Tp, V)[:, :, :T], S


def delta_recurrent(q, k, v, beta, g, S0):
    """The gated delta rule step by step, the reference: same arguments and results as delta_chunked."""
    a = torch.exp(g)
    S = S0
    outs = []
    for t in range(q.shape[2]):
        kt, bt = k[:, :, t].unsqueeze(-1), beta[:, :, t].view(S.shape[0], S.shape[1], 1, 1)
        S = a[:, :, t].view(S.shape[0], S.shape[1], 1, 1) * (S - bt * kt * (kt.transpose(-1, -2) @ S)) \
            + bt * kt * v[:, :, t].unsqueeze(-2)
        outs.append((S * q[:, :, t].unsqueeze(-1)).sum(-2))
    return torch.stack(outs, dim=2), S


def recurrent(q, k, v, g, S0):
    """The plain step-by-step recurrence, the reference: same arguments and results as chunked."""
    a = torch.exp(g)
    S = S0
    outs = []
    for t in range(q.shape[2]):
        at = a[:, :, t].unsqueeze(-1) if g.dim() == 4 else a[:, :, t].view(a.shape[0], a.shape[1], 1, 1)
        S = at * S + k[:, :, t].unsqueeze(-1) * v[:, :, t].unsqueeze(-2)
        outs.append((S * q[:, :, t].unsqueeze(-1)).sum(-2))
    return torch.stack(outs, dim=2), S


# ---- the stdlib cells around the core (stdlib/gla.cell, hgrn2.cell, mamba2.cell), all tokens at
# once: x [B, T, D] -> y [B, T, D]; the state in the cell's layout

def _rms(v):
    return v * torch.rsqrt((v * v).mean(dim=-1, keepdim=True) + EPS_NORM)


def _heads(v, NH):
    """[B, T, NH * n] -> [B, NH, T, n]"""
    return v.reshape(v.shape[0], v.shape[1], NH, -1).transpose(1, 2)


def _lin(o, i, dtype):
    return (torch.randn(o, i, dtype=dtype) / i ** 0.5).requires_grad_()


def _vec(n, dtype, scale=0.1):
    return (torch.randn(n, dtype=dtype) * scale).requires_grad_()


def _conv(u, Kw):
    """causal depthwise, width 4, column 0 the current step: sum_j Kw[:, j] u[t - j] (zeros before
    the sequence): u [B, T, C], Kw [C, 4]"""
    up = F.pad(u, (0, 0, 3, 0))
    T = u.shape[1]
    return sum(Kw[:, j] * up[:, 3 - j:3 - j + T] for j in range(4))


def make_cell(cell, d, dtype=torch.float32):
    """params and f(params, x, S0) -> (y, S_T) of a stdlib cell with the chunked core. S0 is in the
    cell's layout: gla, hgrn2 [B, NH, K, V]; mamba2 [B, NH, P, N]; gated_deltanet [B, NH, V, K]."""
    D, NH = d["D"], d["NH"]
    if cell == "gla":
        K, V, R = d["K"], d["V"], d.get("R", 16)
        p = dict(Wq=_lin(NH * K, D, dtype), Wk=_lin(NH * K, D, dtype), Wv=_lin(NH * V, D, dtype),
                 Wa1=_lin(R, D, dtype), Wa2=_lin(NH * K, R, dtype), ba=_vec(NH * K, dtype),
                 Wr=_lin(NH * V, D, dtype), br=_vec(NH * V, dtype), Wo=_lin(D, NH * V, dtype))
        tau = 16.0

        def f(p, x, S0, core=chunked):
            q = _heads(x @ p["Wq"].T, NH) / math.sqrt(K)
            k = _heads(x @ p["Wk"].T, NH)
            v = _heads(x @ p["Wv"].T, NH)
            g = _heads(F.logsigmoid((x @ p["Wa1"].T) @ p["Wa2"].T + p["ba"]) / tau, NH)
            o, S = core(q, k, v, g, S0)
            o = _rms(o).transpose(1, 2).reshape(x.shape[0], x.shape[1], NH * V)
            r = F.silu(x @ p["Wr"].T + p["br"])
            return (r * o) @ p["Wo"].T, S
        return p, f, (NH, K, V)
    if cell == "hgrn2":
        K, V = d["K"], d["V"]
        p = dict(Wf=_lin(NH * K, D, dtype), Wq=_lin(NH * K, D, dtype), Wi=_lin(NH * V, D, dtype),
                 Wo=_lin(D, NH * V, dtype))

        def f(p, x, S0, core=chunked):
            a = _heads(x @ p["Wf"].T, NH)
            g = F.logsigmoid(a)                   # log f (lb = 0)
            k = torch.sigmoid(-a)                 # 1 - f
            q = F.silu(_heads(x @ p["Wq"].T, NH))
            v = _heads(x @ p["Wi"].T, NH)
            o, S = core(q, k, v, g, S0)
            o = o.transpose(1, 2).reshape(x.shape[0], x.shape[1], NH * V) / math.sqrt(K)
            return _rms(o) @ p["Wo"].T, S
        return p, f, (NH, K, V)
    if cell == "mamba2":
        P, N = d["P"], d["N"]
        C = NH * P
        p = dict(Wz=_lin(C, D, dtype), Wx=_lin(C, D, dtype), WB=_lin(N, D, dtype), WC=_lin(N, D, dtype),
                 Wdt=_lin(NH, D, dtype), Kx=_lin(C, 4, dtype), bx=_vec(C, dtype), KB=_lin(N, 4, dtype),
                 bB=_vec(N, dtype), KC=_lin(N, 4, dtype), bC=_vec(N, dtype), dt_bias=_vec(NH, dtype, 1.0),
                 A_log=(torch.rand(NH, dtype=dtype) * 2.7).requires_grad_(), Dskip=_vec(NH, dtype, 1.0),
                 norm_w=_vec(C, dtype, 1.0), Wo=_lin(D, C, dtype))

        def f(p, x, S0, core=chunked):
            Bs, T = x.shape[0], x.shape[1]
            u = F.silu(_conv(x @ p["Wx"].T, p["Kx"]) + p["bx"])                   # [B, T, C]
            bb = F.silu(_conv(x @ p["WB"].T, p["KB"]) + p["bB"])                   # [B, T, N]
            cc = F.silu(_conv(x @ p["WC"].T, p["KC"]) + p["bC"])
            dt = F.softplus(x @ p["Wdt"].T + p["dt_bias"])                        # [B, T, NH]
            g = (-dt * torch.exp(p["A_log"])).transpose(1, 2)                     # [B, NH, T]
            uh = _heads(u, NH)                                                     # [B, NH, T, P]
            # the cell's S [P, N] transposed: key b (shared by the heads), value dt u, query c
            kk = bb.unsqueeze(1).expand(Bs, NH, T, N)
            qq = cc.unsqueeze(1).expand(Bs, NH, T, N)
            o, S = core(qq, kk, uh * dt.transpose(1, 2).unsqueeze(-1), g, S0.transpose(-1, -2))
            y = (o + p["Dskip"].view(1, NH, 1, 1) * uh).transpose(1, 2).reshape(Bs, T, C)
            z = x @ p["Wz"].T
            return (_rms(y * F.silu(z)) * p["norm_w"]) @ p["Wo"].T, S.transpose(-1, -2)
        return p, f, (NH, P, N)
    if cell == "gated_deltanet":
        K, V = d["K"], d["V"]
        nk, nv = NH * K, NH * V
        p = dict(Wq=_lin(nk, D, dtype), Wk=_lin(nk, D, dtype), Wv=_lin(nv, D, dtype),
                 Kc=_lin(2 * nk + nv, 4, dtype), Wb=_lin(NH, D, dtype), Wa=_lin(NH, D, dtype),
                 A_log=(torch.rand(NH, dtype=dtype) * 2.7).requires_grad_(), dt_bias=_vec(NH, dtype, 1.0),
                 Wg=_lin(nv, D, dtype), Wo=_lin(D, nv, dtype))

        def l2n(u):
            return u / torch.sqrt((u * u).sum(dim=-1, keepdim=True) + 1e-6)

        def f(p, x, S0, core=delta_chunked):
            Bs, T = x.shape[0], x.shape[1]
            u = torch.cat([x @ p["Wq"].T, x @ p["Wk"].T, x @ p["Wv"].T], dim=-1)
            c = F.silu(_conv(u, p["Kc"]))                                        # [B, T, 2 nk + nv]
            q = l2n(_heads(c[..., :nk], NH)) / math.sqrt(K)                      # [B, NH, T, K]
            k = l2n(_heads(c[..., nk:2 * nk], NH))
            v = _heads(c[..., 2 * nk:], NH)                                      # [B, NH, T, V]
            beta = torch.sigmoid(x @ p["Wb"].T).transpose(1, 2)                  # [B, NH, T]
            g = (-torch.exp(p["A_log"]) * F.softplus(x @ p["Wa"].T + p["dt_bias"])).transpose(1, 2)
            o, S = core(q, k, v, beta, g, S0.transpose(-1, -2))                  # the core's S: [K, V]
            o = _rms(o).transpose(1, 2).reshape(Bs, T, nv)
            return (o * F.silu(x @ p["Wg"].T)) @ p["Wo"].T, S.transpose(-1, -2)
        return p, f, (NH, V, K)
    raise SystemExit(f"torch_chunked: no cell '{cell}'")


def core_shapes(cell, d):
    """the core's (H, K, V, scalar decay) at a cell's dims"""
    if cell == "mamba2":
        return d["NH"], d["N"], d["P"], True
    return d["NH"], d["K"], d["V"], False


def main():
    cell, dims, T, B, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5]), int(sys.argv[6])
    what = sys.argv[7] if len(sys.argv) > 7 else "cell"
    d = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in dims.split(",")}
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if what == "core" and cell == "gated_deltanet":
        H, K, V = d["NH"], d["K"], d["V"]
        q = torch.randn(B, H, T, K).requires_grad_()
        k = F.normalize(torch.randn(B, H, T, K), dim=-1).requires_grad_()   # the cell's l2norm'd keys
        v = torch.randn(B, H, T, V).requires_grad_()
        beta = torch.sigmoid(torch.randn(B, H, T)).requires_grad_()
        g = (F.logsigmoid(torch.randn(B, H, T)) / 16).requires_grad_()
        S0 = (0.1 * torch.randn(B, H, K, V)).requires_grad_()
        do, dS = torch.randn(B, H, T, V), 0.1 * torch.randn(B, H, K, V)

        def once():
            o, S = delta_chunked(q, k, v, beta, g, S0)
            torch.autograd.backward([o, S], [do, dS])
    elif what == "core":
        H, K, V, scalar = core_shapes(cell, d)
        q = torch.randn(B, H, T, K).requires_grad_()
        k = torch.randn(B, H, T, K).requires_grad_()
        v = torch.randn(B, H, T, V).requires_grad_()
        gshape = (B, H, T) if scalar else (B, H, T, K)
        g = (F.logsigmoid(torch.randn(gshape)) / 16).requires_grad_()
        S0 = (0.1 * torch.randn(B, H, K, V)).requires_grad_()
        do, dS = torch.randn(B, H, T, V), 0.1 * torch.randn(B, H, K, V)

        def once():
            o, S = chunked(q, k, v, g, S0)
            torch.autograd.backward([o, S], [do, dS])
    else:
        p, f, sh = make_cell(cell, d)
        x = torch.randn(B, T, d["D"]).requires_grad_()
        S0 = (0.1 * torch.randn(B, *sh)).requires_grad_()
        dy, dS = torch.randn(B, T, d["D"]), 0.1 * torch.randn(B, *sh)

        def once():
            y, S = f(p, x, S0)
            torch.autograd.backward([y, S], [dy, dS])
    once()  # warm up: allocations, page faults
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        once()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps(dict(kind="torch", what=what, cell=cell, dims=dims, T=T, B=B, threads=threads, total_s=best)))


if __name__ == "__main__":
    main()
