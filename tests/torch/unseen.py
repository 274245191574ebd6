# Role: PyTorch references (float64, autograd) of the cells in tests/cells/unseen/, written from
# the language spec's meaning of each built-in with torch's own operations, so that a cell every
# back end agrees on is also checked against what the spec says it means (conv's tap order,
# matmul's broadcasting, axes that skip the batch, groupnorm's groups, complex products).
# Each reference: y, finals = ref(p, x, h0, hist) with p the params and buffers by name, x
# [T, B, D], h0 the initial states by name ([B, ...], complex ones as complex tensors), hist the
# histories by value name ([B, K, ...], oldest first); finals holds the states and "hist.NAME".
import math

import torch

F = torch.nn.functional


def rows(W, v):
    """W @ v for a batch of vectors v [B, I]."""
    return v @ W.T


class Past:
    """A value's history for prev and conv: the run's K steps before t = 0, then each step's."""

    def __init__(self, hist):
        self.seq = list(hist.unbind(1))
        self.k = len(self.seq)

    def push(self, v):
        self.seq.append(v)

    def prev(self, j):  # after push of step t: index k + t - j
        return self.seq[len(self.seq) - 1 - j]

    def final(self):
        return torch.stack(self.seq[len(self.seq) - self.k:], 1)


def conv(past, W):
    """sum_j W[:, j] * prev(v, j), with W[:, 0] on the current step (spec section 9)."""
    return sum(W[:, j] * past.prev(j) for j in range(W.shape[1]))


def rmsnorm(v, dim):
    return v / torch.sqrt((v * v).mean(dim, keepdim=True) + 1e-5)


def layernorm(v, dim):
    mu = v.mean(dim, keepdim=True)
    return (v - mu) / torch.sqrt(((v - mu) ** 2).mean(dim, keepdim=True) + 1e-5)


def gla_heads(p, x, h0, hist):
    S = h0["S"]
    B, NH, K, V = S.shape
    ys = []
    for xt in x:
        q = rows(p["Wq"], xt).reshape(B, NH, K) / math.sqrt(K)
        k = rows(p["Wk"], xt).reshape(B, NH, K)
        v = rows(p["Wv"], xt).reshape(B, NH, V)
        a = torch.sigmoid(rows(p["Wa"], xt) + p["ba"]).reshape(B, NH, K)
        S = a.unsqueeze(3) * S + k.unsqueeze(3) * v.unsqueeze(2)
        o = torch.matmul(S.transpose(-1, -2), q.unsqueeze(3))
        ys.append(rows(p["Wo"], o.reshape(B, NH * V)))
    return torch.stack(ys), {"S": S}


def delta_rule(p, x, h0, hist):
    S = h0["S"]
    B, NH, V, K = S.shape
    ys = []
    for xt in x:
        k = rmsnorm(rows(p["Wk"], xt).reshape(B, NH, K), -1)
        v = rows(p["Wv"], xt).reshape(B, NH, V)
        q = rows(p["Wq"], xt).reshape(B, NH, K)
        beta = torch.sigmoid(rows(p["Wb"], xt))[:, :, None, None]
        a = torch.sigmoid(rows(p["Wa"], xt) + 2)[:, :, None, None]
        S = a * (S - beta * torch.matmul(torch.matmul(S, k.unsqueeze(3)), k.unsqueeze(2))) + beta * v.unsqueeze(3) * k.unsqueeze(2)
        ys.append(torch.matmul(S, q.unsqueeze(3)).reshape(B, -1))
    return torch.stack(ys), {"S": S}


def block_rnn(p, x, h0, hist):
    h = h0["h"]
    B, NH, P = h.shape
    ys = []
    for xt in x:
        u = rows(p["W"], xt).reshape(B, NH, P)
        h = torch.tanh(u + torch.matmul(p["R"], h.unsqueeze(3)).sum(3) + p["b"])
        ys.append(h.reshape(B, -1))
    return torch.stack(ys), {"h": h}


def linear_heads(p, x, h0, hist):
    h = h0["h"]  # the learned h.init, repeated over the batch (compare() sums its gradient)
    B, NH, P = h.shape
    ys = []
    for xt in x:
        h = 0.5 * torch.matmul(p["R"], h.unsqueeze(3)).sum(3) + rows(p["W"], xt).reshape(B, NH, P)
        ys.append(h.reshape(B, -1))
    return torch.stack(ys), {"h": h}


def selective_ssm(p, x, h0, hist):
    h = h0["h"]
    pu = Past(hist["u"])
    ys = []
    for xt in x:
        u = rows(p["Win"], xt)
        pu.push(u)
        c = F.silu(conv(pu, p["cw"]) + p["cb"])
        dt = F.softplus(rows(p["Wdt"], c) + p["bdt"])
        Bv, Cv = rows(p["WB"], c), rows(p["WC"], c)
        A = -torch.exp(p["A_log"])
        h = torch.exp(dt.unsqueeze(2) * A) * h + (dt * c).unsqueeze(2) * Bv.unsqueeze(1)
        yv = (h * Cv.unsqueeze(1)).sum(2) + p["Dskip"] * c
        ys.append(rows(p["Wout"], yv * F.silu(rows(p["Wz"], xt))))
    return torch.stack(ys), {"h": h, "hist.u": pu.final()}


def mamba2_heads(p, x, h0, hist):
    S = h0["S"]
    B, NH, P, N = S.shape
    ys = []
    for xt in x:
        u = rows(p["Wx"], xt).reshape(B, NH, P)
        dt = F.softplus(rows(p["Wdt"], xt) + p["dt_bias"])
        a = torch.exp(-dt * torch.exp(p["A_log"]))
        Bv, Cv = rows(p["WB"], xt), rows(p["WC"], xt)
        S = a[:, :, None, None] * S + (dt.unsqueeze(2) * u).unsqueeze(3) * Bv.reshape(B, 1, 1, N)
        yv = torch.matmul(S, Cv[:, None, :, None]).reshape(B, NH, P) + p["Dskip"].unsqueeze(1) * u
        ys.append(rows(p["Wo"], rmsnorm(yv, -1).reshape(B, -1)))
    return torch.stack(ys), {"S": S}


def mlstm_stab(p, x, h0, hist):
    C, n, m = h0["C"], h0["n"], h0["m"]
    B, NH, V, K = C.shape
    ys = []
    for xt in x:
        q = rows(p["Wq"], xt).reshape(B, NH, K)
        k = rows(p["Wk"], xt).reshape(B, NH, K) / math.sqrt(K)
        v = rows(p["Wv"], xt).reshape(B, NH, V)
        it = rows(p["Wi"], xt)
        lf = F.logsigmoid(rows(p["Wf"], xt) + p["bf"])
        mn = torch.maximum(lf + m, it)
        ig, fg = torch.exp(it - mn), torch.exp(lf + m - mn)
        C = fg[:, :, None, None] * C + ig[:, :, None, None] * v.unsqueeze(3) * k.unsqueeze(2)
        n = fg.unsqueeze(2) * n + ig.unsqueeze(2) * k
        m = mn
        num = (C * q.unsqueeze(2)).sum(-1)
        den = torch.maximum((n * q).sum(-1).abs(), torch.exp(-m))
        ys.append(torch.sigmoid(rows(p["Wo"], xt)) * (num / den.unsqueeze(2)).reshape(B, -1))
    return torch.stack(ys), {"C": C, "n": n, "m": m}


def where_ops(p, x, h0, hist):
    h = h0["h"]
    ys = []
    for xt in x:
        u, w = rows(p["W"], xt), rows(p["U"], xt)
        a1 = torch.where(u < w, u, w)
        a2 = torch.where(u <= 0.1, torch.erf(u), torch.pow(w.abs() + 0.5, p["p"]))
        a3 = torch.where(u > w, torch.expm1(0.3 * w), torch.log1p(torch.sigmoid(u)))
        a4 = torch.where(w >= -0.2, torch.clamp(u, -0.5, 0.5), torch.minimum(torch.maximum(w, u), torch.ones_like(u)))
        g = torch.sigmoid(a1 + a3)
        h = torch.where(xt[:, 0:1] > 0, g * h, h) + a2 * a4
        ys.append(h)
    return torch.stack(ys), {"h": h}


def softmax_axes(p, x, h0, hist):
    h = h0["h"]
    A, Bd, Cd = 2, 2, 3  # the suite's dims A=2, B=2, C=3
    Bt = x.shape[1]
    ys = []
    for xt in x:
        t = rows(p["W"], xt).reshape(Bt, A, Bd, Cd)
        s0, s1 = torch.softmax(t, 1), torch.softmax(t, 2)
        s2, s3 = torch.softmax(t, -1), torch.softmax(t, -3)
        n1 = layernorm(t, 2) * p["g"]
        n2 = rmsnorm(t, -2)
        gn = F.group_norm(t.reshape(Bt * A, Bd * Cd, 1), Bd, eps=1e-5).reshape(Bt, A, Bd, Cd)
        z = s0 + 2 * s1 - s2 + 0.5 * s3 + n1 * n2 + gn
        h = 0.9 * h + z.reshape(Bt, -1)
        ys.append(h)
    return torch.stack(ys), {"h": h}


def shapes_misc(p, x, h0, hist):
    h, S = h0["h"], h0["S"]
    B, M, H, _ = S.shape
    ys = []
    for xt in x:
        u = rows(p["W"], xt)
        a, b = u[:, :H], u[:, H:2 * H]
        m = rows(p["V"], xt).reshape(B, M, H)
        m2 = m.reshape(B, H, M).reshape(B, M, H)
        e = torch.eye(H, dtype=x.dtype) + 0.1 * p["Q"]
        o1 = a.unsqueeze(2) * b.unsqueeze(1)
        o2 = m.unsqueeze(3) * m2.unsqueeze(2)
        r = o1.sum(1) + o1.mean(2) + torch.amax(o2, 1).sum(1)
        h = 0.5 * h + torch.tanh(r)
        S = 0.8 * S + o2 * e
        rowsS = S[:, :, 1:H, :]
        ys.append(h * torch.amin(torch.amax(S, -1), 1) + rowsS.sum(2).sum(1) / math.sqrt(H * M))
    return torch.stack(ys), {"h": h, "S": S}


def prev_conv(p, x, h0, hist):
    h = h0["h"]
    pu, px, pf = Past(hist["u"]), Past(hist["x"]), Past(hist["f"])
    ys = []
    for xt in x:
        u = rows(p["W"], xt)
        f = torch.sigmoid(rows(p["U"], xt) + p["lam"])
        pu.push(u), px.push(xt), pf.push(f)
        v = conv(pu, p["cw"])
        h = pf.prev(1) * h + (1 - f) * torch.tanh(v + rows(p["W"], px.prev(2))) * (1 + p["pos"])
        ys.append(h)
    return torch.stack(ys), {"h": h, "hist.u": pu.final(), "hist.x": px.final(), "hist.f": pf.final()}


def complex_heads(p, x, h0, hist):
    S = h0["S"]
    B, NH, K, _ = S.shape
    ys = []
    for xt in x:
        k = rows(p["Wk"], xt).reshape(B, NH, K)
        q = rows(p["Wq"], xt).reshape(B, NH, K)
        lam = (torch.exp(-p["nu"]) * torch.polar(torch.ones_like(p["th"]), p["th"])).unsqueeze(2)
        gk = torch.sigmoid(k.unsqueeze(3) * q.unsqueeze(2))
        ck = torch.polar(torch.ones_like(k), k)
        S = lam * S + ck.unsqueeze(3) * q.unsqueeze(2) * gk
        o = torch.matmul(S.transpose(-1, -2), (p["C"] * q).unsqueeze(3))
        o2 = torch.matmul(p["Rc"], o)
        s = o2.sum(-1) + S[:, :, 1:K, :].mean(2) + (S * p["C"].unsqueeze(2)).sum(2) * q
        s = s.reshape(B, -1)
        ys.append(s.real + s.imag)
    return torch.stack(ys), {"S": S}


def amax_heads(p, x, h0, hist):
    h = h0["h"]
    B, NH, P = h.shape
    ys = []
    for xt in x:
        u = rows(p["W"], xt).reshape(B, NH, P)
        r = torch.matmul(h.unsqueeze(2), p["R"]).reshape(B, NH, P)
        mx, mn = torch.amax(r, -1), torch.amin(u, 2)
        h = torch.tanh(u + r - mx.unsqueeze(2) * p["s"] + mn.unsqueeze(-1)) + 0.1 * torch.pow(torch.sigmoid(h), 2)
        ys.append(h.reshape(B, -1) * h.mean(-1).sum(1, keepdim=True))
    return torch.stack(ys), {"h": h}


def conv_gate(p, x, h0, hist):
    h, S = h0["h"], h0["S"]
    B, H = h.shape
    pf = Past(hist["f"])
    ys = []
    for xt in x:
        f = torch.sigmoid(rows(p["W"], xt))
        pf.push(f)
        c = conv(pf, p["K1"] + 0.5 * p["K2"])
        h = f * h + c
        col = h.reshape(B, 1, H, 1)
        S = 0.5 * S + p["R"][:, 0:1, :] * col
        extra = torch.matmul(p["R"].transpose(-1, -2), c.reshape(B, 1, H, 1)).sum((1, 2, 3))
        ys.append(S.sum(-1).sum(1) + extra.unsqueeze(1))
    return torch.stack(ys), {"h": h, "S": S, "hist.f": pf.final()}


def rwkv_like(p, x, h0, hist):
    S = h0["S"]
    B, NH, K, _ = S.shape
    ys = []
    for xt in x:
        r = rows(p["Wr"], xt).reshape(B, NH, K)
        k = rows(p["Wk"], xt).reshape(B, NH, K)
        v = rows(p["Wv"], xt).reshape(B, NH, K)
        w = torch.exp(-torch.exp(p["w0"] + rows(p["Ww"], xt).reshape(B, NH, K)))
        kv = k.unsqueeze(3) * v.unsqueeze(2)
        o = torch.matmul(r.unsqueeze(2), S + p["u"].unsqueeze(2) * kv).reshape(B, NH * K)
        S = w.unsqueeze(3) * S + kv
        ys.append(rows(p["Wo"], F.group_norm(o.reshape(B, NH * K, 1), NH, eps=1e-5).reshape(B, -1)))
    return torch.stack(ys), {"S": S}


def rglru_like(p, x, h0, hist):
    h = h0["h"]
    pb = Past(hist["xb"])
    ys = []
    for xt in x:
        pb.push(rows(p["Wx"], xt))
        v = conv(pb, p["Kc"])
        r, i = torch.sigmoid(rows(p["Wa"], v)), torch.sigmoid(rows(p["Wi"], v))
        loga = -8 * r * F.softplus(p["lam"])
        h = torch.exp(loga) * h + torch.sqrt(-torch.expm1(2 * loga)) * (i * v)
        ys.append(h * F.gelu(rows(p["Wy"], xt)))
    return torch.stack(ys), {"h": h, "hist.xb": pb.final()}


def roundtrip(p, x, h0, hist):
    S = h0["S"]
    B, NH, K, _ = S.shape
    ys = []
    for xt in x:
        k = rows(p["Wk"], xt).reshape(B, NH, K)
        S = p["g"] * S.reshape(B, -1).reshape(B, NH, K, K) + k.unsqueeze(3) * k.unsqueeze(2)
        ys.append(S.sum(2).reshape(B, -1))
    return torch.stack(ys), {"S": S}


REFS = {f.__name__: f for f in (gla_heads, delta_rule, block_rnn, linear_heads, selective_ssm, mamba2_heads,
                                mlstm_stab, where_ops, softmax_axes, shapes_misc, prev_conv, complex_heads,
                                amax_heads, conv_gate, rwkv_like, rglru_like, roundtrip)}


def compare(name, t, complex_names):
    """The reference of cell `name` on the tensors t of a float64 `cellc run` (numpy, as written):
    {tensor: relative error} for y, every final and every gradient the file holds."""
    leaves, p, h0, hist = {}, {}, {}, {}

    def leaf(key):
        v = torch.tensor(t[key], dtype=torch.float64, requires_grad=True)
        leaves[key] = v
        return torch.view_as_complex(v) if key in complex_names else v

    for key in t:
        if key.startswith(("param.", "buffer.")):
            p[key.split(".", 1)[1]] = leaf(key)
        elif key.startswith("h0."):
            h0[key[3:]] = leaf(key)
        elif key.startswith("hist."):
            hist[key[5:]] = leaf(key)
    x = leaf("x")
    y, finals = REFS[name](p, x, h0, hist)
    got = {"y": y}
    loss = (y * torch.tensor(t["dy"])).sum()
    for s, v in finals.items():
        v = torch.view_as_real(v) if v.is_complex() else v
        got["final." + s] = v
        loss = loss + (v * torch.tensor(t["dfinal." + s])).sum()
    loss.backward()
    for key, v in leaves.items():
        gname = "grad." + key
        if gname in t:
            got[gname] = v.grad if v.grad is not None else torch.zeros_like(v)
    for key in leaves:  # a learned initial state: the batch sum of its rows' gradients
        if key.startswith("h0.") and "param.%s.init" % key[3:] in leaves:
            got["grad.param.%s.init" % key[3:]] = leaves[key].grad.sum(0)
    errs = {}
    for key, v in got.items():
        ref = torch.tensor(t[key], dtype=torch.float64)
        v = v.detach()
        errs[key] = float((v - ref).abs().max() / max(float(ref.abs().max()), 1e-30)) if v.shape == ref.shape else float("inf")
    return errs
