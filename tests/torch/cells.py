# Role: the independent PyTorch reference (float64, autograd) of every standard-library cell,
# transcribed by hand from the equations in stdlib/*.cell and seeds.md section 1 (not generated
# from the .cell files). parity.py compares `cellc run` against it; selftest.py checks it.
#
# Calling convention of every reference (also what a plug-in reference for a new cell must
# follow, see parity.py --ref):
#     y, finals, gates = cell(params, x, h0, opts)
#   params: {name: tensor}            param shapes; a complex param is real with a trailing 2 (re, im)
#   x:      [T, B, D] tensor
#   h0:     {state: [B, ...] tensor}  a complex state also with a trailing 2
#   opts:   {option: value}           missing options take the cell's defaults
#   returns y [T, B, O], finals {state: [B, ...]} (complex as trailing 2), gates {gate: [T, B, ...]}
# Matrix products are W @ v per batch row, W being [out, in] (so v @ W.T for a batch).
import math

import torch

EPS_NORM = 1e-5


# ---------------------------------------------------------------- helpers
def as_complex(t):
    """A real tensor [..., 2] holding (re, im) -> a complex tensor [...]."""
    if t.is_complex():
        return t
    if t.shape[-1] != 2:
        raise ValueError("a complex tensor needs a trailing dimension of 2, got shape %s" % (tuple(t.shape),))
    return torch.complex(t[..., 0], t[..., 1])


def as_real_view(z):
    """A complex tensor [...] -> a real tensor [..., 2] holding (re, im); real tensors pass through."""
    if z.is_complex():
        return torch.stack([z.real, z.imag], dim=-1)
    return z


def mv(W, v):
    """W @ v for every batch row of v: W [out, in], v [B, in] -> [B, out]."""
    if W.is_complex() or v.is_complex():
        ct = torch.complex128 if (W.dtype == torch.float64 or v.dtype in (torch.float64, torch.complex128)) \
            else torch.complex64
        W, v = W.to(ct), v.to(ct)
    return v @ W.transpose(0, 1)


def silu(a):
    return a * torch.sigmoid(a)


def layernorm(v):
    """(v - mean(v)) / sqrt(var(v) + 1e-5) over the last axis, biased variance, no affine part."""
    m = v.mean(dim=-1, keepdim=True)
    var = ((v - m) * (v - m)).mean(dim=-1, keepdim=True)
    return (v - m) / torch.sqrt(var + EPS_NORM)


def rmsnorm(v):
    return v / torch.sqrt((v * v).mean(dim=-1, keepdim=True) + EPS_NORM)


def cis(t):
    """exp(i t) for a real t."""
    return torch.complex(torch.cos(t), torch.sin(t))


def cplx(a, b):
    """complex(a, b) = a + i b."""
    return torch.complex(a, b)


# ---------------------------------------------------------------- one step of each cell
# step(p, x_t, s, o) -> (new states {name: tensor}, output [B, O], gates {name: [B, ...]})
# p: params (complex ones already complex), x_t [B, D], s: previous states (complex ones complex)

def elman_step(p, x, s, o):
    h = torch.tanh(mv(p["Wx"], x) + mv(p["Wh"], s["h"]) + p["b"])
    return {"h": h}, h, {}


def gru_step(p, x, s, o):
    h = s["h"]
    z = torch.sigmoid(mv(p["Wxz"], x) + mv(p["Whz"], h) + p["bz"])
    r = torch.sigmoid(mv(p["Wxr"], x) + mv(p["Whr"], h) + p["br"])
    n = torch.tanh(mv(p["Wxh"], x) + mv(p["Whh"], r * h) + p["bh"])
    hn = z * h + (1 - z) * n
    return {"h": hn}, hn, {"z": z, "r": r}


def lstm_step(p, x, s, o):
    h, c = s["h"], s["c"]
    i = torch.sigmoid(mv(p["Wxi"], x) + mv(p["Whi"], h) + p["bi"])
    f = torch.sigmoid(mv(p["Wxf"], x) + mv(p["Whf"], h) + p["bf"])
    og = torch.sigmoid(mv(p["Wxo"], x) + mv(p["Who"], h) + p["bo"])
    g = torch.tanh(mv(p["Wxc"], x) + mv(p["Whc"], h) + p["bc"])
    cn = f * c + i * g
    hn = og * torch.tanh(cn)          # uses the new c
    return {"c": cn, "h": hn}, hn, {"i": i, "f": f, "o": og}


def mgu_step(p, x, s, o):
    h = s["h"]
    if o["see_h"]:
        z = torch.sigmoid(mv(p["Wzx"], x) + mv(p["Wzh"], h) + p["bz"])
    else:
        z = torch.sigmoid(mv(p["Wzx"], x) + p["bz"])
    xt = mv(p["Wix"], x) + p["bh"]
    hn = z * h + (1 - z) * xt
    return {"h": hn}, hn, {"z": z}


def leaky_step(p, x, s, o):
    a = o["alpha"]
    h = s["h"]
    hn = a * torch.tanh(mv(p["Wr"], h) + mv(p["Wi"], x)) + (1 - a) * h
    return {"h": hn}, hn, {}


def _gated_tanh_step(p, x, s, o):
    h = s["h"]
    g = torch.sigmoid(mv(p["Wrg"], h) + mv(p["Wig"], x))      # [B, 1] (scalar) or [B, H] (multi)
    hn = g * torch.tanh(mv(p["Wr"], h) + mv(p["Wi"], x)) + (1 - g) * h
    return {"h": hn}, hn, {"g": g}


scalar_gate_step = _gated_tanh_step
multi_gate_step = _gated_tanh_step


def lru_step(p, x, s, o):
    lam = torch.exp(cplx(-torch.exp(p["nu_log"]), torch.exp(p["theta_log"])))
    hn = lam * s["h"] + torch.exp(p["gamma_log"]) * mv(p["B"], x)
    y = mv(p["C"], hn).real + p["Dskip"] * x
    return {"h": hn}, y, {}


def hgru_step(p, x, s, o):
    lb = o["lb"]
    mu = torch.sigmoid(mv(p["Wf"], x) + p["bf"])
    lam = lb + (1 - lb) * mu
    c = cplx(silu(mv(p["Wr"], x) + p["br"]), silu(mv(p["Wi"], x) + p["bi"]))
    hn = lam * cis(p["theta"]) * s["h"] + (1 - lam) * c
    g = torch.sigmoid(mv(p["Wg"], x) + p["bg"])
    on = layernorm(g * torch.cat([hn.real, hn.imag], dim=-1))
    y = mv(p["Wo"], on) + p["bo"]
    return {"h": hn}, y, {"mu": mu}


def mingru_step(p, x, s, o):
    z = torch.sigmoid(mv(p["Wz"], x))
    ht = mv(p["Wh"], x)
    hn = (1 - z) * s["h"] + z * ht
    return {"h": hn}, hn, {"z": z}


# ---------------------------------------------------------------- version 2: heads and matrix states
# Written from the sources' equations (see each stdlib/*.cell); shapes per batch row as in the
# cell, with the batch in front: S [B, NH, K, V] and so on. Sizes come from the states.
def _heads(v, NH):
    """[B, NH * n] -> [B, NH, n] (the cell's reshape(v, [NH, n]), row-major)."""
    return v.reshape(v.shape[0], NH, -1)


def _rms_last(v):
    return v / torch.sqrt((v * v).mean(dim=-1, keepdim=True) + EPS_NORM)


def _max(a, b):
    """max(a, b) as the cell's: on a tie the gradient goes to a."""
    return torch.where(a >= b, a, b)


def _rowmv(M, v):
    """per head M[NH, P, P] @ v[B, NH, P] -> [B, NH, P]"""
    return torch.matmul(M, v.unsqueeze(-1)).squeeze(-1)


def gla_step(p, x, s, o):
    B, NH, K, V = s["S"].shape
    q = _heads(mv(p["Wq"], x), NH) / math.sqrt(K)
    k = _heads(mv(p["Wk"], x), NH)
    v = _heads(mv(p["Wv"], x), NH)
    alpha = torch.exp(torch.nn.functional.logsigmoid(_heads(mv(p["Wa2"], mv(p["Wa1"], x)) + p["ba"], NH)) / o["tau"])
    S = alpha.unsqueeze(-1) * s["S"] + k.unsqueeze(-1) * v.unsqueeze(-2)
    out = torch.matmul(S.transpose(-1, -2), q.unsqueeze(-1)).squeeze(-1)          # [B, NH, V]
    r = silu(mv(p["Wr"], x) + p["br"])
    y = mv(p["Wo"], r * _rms_last(out).reshape(B, NH * V))
    return {"S": S}, y, {"alpha": alpha}


def hgrn2_step(p, x, s, o):
    B, NH, K, V = s["S"].shape
    lb = o["lb"]
    f = lb + (1 - lb) * torch.sigmoid(_heads(mv(p["Wf"], x), NH))
    q = silu(_heads(mv(p["Wq"], x), NH))
    i = _heads(mv(p["Wi"], x), NH)
    S = f.unsqueeze(-1) * s["S"] + (1 - f).unsqueeze(-1) * i.unsqueeze(-2)
    out = torch.matmul(S.transpose(-1, -2), q.unsqueeze(-1)).squeeze(-1) / math.sqrt(K)
    y = mv(p["Wo"], _rms_last(out.reshape(B, NH * V)))        # one norm over all heads
    return {"S": S}, y, {"f": f}


def mlstm_step(p, x, s, o):
    B, NH, V, K = s["C"].shape
    q = _heads(mv(p["Wq"], x), NH)
    k = _heads(mv(p["Wk"], x), NH) / math.sqrt(K)
    v = _heads(mv(p["Wv"], x), NH)
    it = mv(p["Wi"], x) + p["bi"]                                   # [B, NH]
    lf = torch.nn.functional.logsigmoid(mv(p["Wf"], x) + p["bf"])
    m = _max(lf + s["m"], it)
    i = torch.exp(it - m)
    f = torch.exp(lf + s["m"] - m)
    C = f[..., None, None] * s["C"] + i[..., None, None] * (v.unsqueeze(-1) * k.unsqueeze(-2))
    n = f[..., None] * s["n"] + i[..., None] * k
    num = torch.matmul(C, q.unsqueeze(-1)).squeeze(-1)              # [B, NH, V]
    den = _max(torch.abs((n * q).sum(dim=-1)), torch.exp(-m))
    og = torch.sigmoid(mv(p["Wo"], x) + p["bo"])
    y = og * (num / den.unsqueeze(-1)).reshape(B, NH * V)
    return {"C": C, "n": n, "m": m}, y, {"i": i, "f": f}


def slstm_step(p, x, s, o):
    B, NH, P = s["h"].shape
    h = s["h"]

    def pre(g):
        return _heads(mv(p["W" + g], x), NH) + _rowmv(p["R" + g], h) + p["b" + g]
    zt, it, ft, ot = pre("z"), pre("i"), pre("f"), pre("o")
    lf = torch.nn.functional.logsigmoid(ft)
    m = _max(lf + s["m"], it)
    i = torch.exp(it - m)
    f = torch.exp(lf + s["m"] - m)
    c = f * s["c"] + i * torch.tanh(zt)
    n = f * s["n"] + i
    hn = torch.sigmoid(ot) * c / n
    return {"c": c, "n": n, "m": m, "h": hn}, hn.reshape(B, NH * P), {"i": i, "f": f}


def gated_deltanet_step(p, x, s, o):
    # Yang, Kautz and Hatamizadeh 2025: q, k, v each through a short causal depthwise convolution
    # (width 4, no bias; Kc[:, 0] multiplies the current step; Kc's rows: q's, k's, v's channels)
    # and SiLU; q, k L2-normalized per head
    B, NH, V, K = s["S"].shape
    nk, nv = NH * K, NH * V
    u = torch.cat([mv(p["Wq"], x), mv(p["Wk"], x), mv(p["Wv"], x)], -1)
    c = silu(_dwconv(s["hist.u"], u, p["Kc"]))
    qs, ks = _heads(c[:, :nk], NH), _heads(c[:, nk:2 * nk], NH)
    q = qs / torch.sqrt((qs * qs).sum(dim=-1, keepdim=True) + 1e-6) / math.sqrt(K)
    k = ks / torch.sqrt((ks * ks).sum(dim=-1, keepdim=True) + 1e-6)
    v = _heads(c[:, 2 * nk:2 * nk + nv], NH)
    beta = torch.sigmoid(mv(p["Wb"], x))                            # [B, NH]
    alpha = torch.exp(-torch.exp(p["A_log"]) * torch.nn.functional.softplus(mv(p["Wa"], x) + p["dt_bias"]))
    a3, b3 = alpha[..., None, None], beta[..., None, None]
    S0 = s["S"]
    # S (I - beta k k^T) = S - beta (S k) k^T
    S = a3 * (S0 - b3 * torch.matmul(torch.matmul(S0, k.unsqueeze(-1)), k.unsqueeze(-2))) \
        + b3 * (v.unsqueeze(-1) * k.unsqueeze(-2))
    out = torch.matmul(S, q.unsqueeze(-1)).squeeze(-1)              # [B, NH, V]
    g = silu(_heads(mv(p["Wg"], x), NH))
    y = mv(p["Wo"], (_rms_last(out) * g).reshape(B, NH * V))
    return {"S": S, "hist.u": _shift(s["hist.u"], u)}, y, {"beta": beta, "alpha": alpha}


def rwkv6_step(p, x, s, o):
    # Peng et al. 2024 (Finch): the data-dependent token shift (ddlerp of x_t and x_{t-1}), then
    # the per-head WKV with the decay w and the bonus u on the current token
    B, NH, K, V = s["S"].shape
    xx = _lag(s["hist.x"], x, 1) - x
    xxx = x + xx * p["mu_x"]

    def ddlerp(n):
        return x + xx * (p["mu_" + n] + mv(p["B" + n], torch.tanh(mv(p["A" + n], xxx))))
    xw, xk, xv, xr, xg = (ddlerp(n) for n in "wkvrg")
    r = _heads(mv(p["Wr"], xr), NH)
    k = _heads(mv(p["Wk"], xk), NH)
    v = _heads(mv(p["Wv"], xv), NH)
    w = torch.exp(-torch.exp(_heads(p["w0"] + mv(p["Wd2"], torch.tanh(mv(p["Wd1"], xw))), NH)))
    # the readout of the previous state plus the bonus u on the current token
    out = torch.matmul(s["S"].transpose(-1, -2), r.unsqueeze(-1)).squeeze(-1) \
        + (r * p["u"].reshape(NH, K) * k).sum(dim=-1, keepdim=True) * v
    S = w.unsqueeze(-1) * s["S"] + k.unsqueeze(-1) * v.unsqueeze(-2)
    # the source's GroupNorm(NH, eps = 1e-5 * 8^2) with its affine part
    on = torch.nn.functional.group_norm(out.reshape(B, NH * V), NH, p["ln_w"], p["ln_b"], eps=EPS_NORM * 64)
    y = mv(p["Wo"], on * silu(mv(p["Wg"], xg)))
    return {"S": S, "hist.x": _shift(s["hist.x"], x)}, y, {"w": w}


# ---------------------------------------------------------------- what each cell declares
class Spec:
    """params(H, D, opts) -> {name: (shape, is_complex)}; states(H, D) -> {name: (shape, is_complex)};
    gates(opts) -> [names]; out(H, D) -> O; mode(opts) -> 'scan' | 'sequential' (the compiler's
    expected classification); defaults: the options' defaults; H_default: 'D' when H = D by default.
    A version-2 cell with heads has dims other than H: dims(H, D) -> {dim: size} maps a test's
    (H, D) to them (what `cellc --dims` gets), H_of(h0) gives H back from the initial states."""

    def __init__(self, step, params, states, gates, out, mode, defaults=None, H_default=None, dims=None, H_of=None):
        self.step, self.params, self.states, self.gates, self.out, self.mode = step, params, states, gates, out, mode
        self.defaults = defaults or {}
        self.H_default = H_default
        self.dims = dims or (lambda H, D: {"H": H, "D": D})
        self.H_of = H_of or (lambda h0: next(iter(h0.values())).shape[1])


def _rs(shape):
    return (tuple(shape), False)


SPECS = {
    "elman": Spec(elman_step,
                  lambda H, D, o: {"Wx": _rs([H, D]), "Wh": _rs([H, H]), "b": _rs([H])},
                  lambda H, D: {"h": _rs([H])}, lambda o: [], lambda H, D: H, lambda o: "sequential"),
    "gru": Spec(gru_step,
                lambda H, D, o: {"Wxz": _rs([H, D]), "Whz": _rs([H, H]), "bz": _rs([H]),
                                 "Wxr": _rs([H, D]), "Whr": _rs([H, H]), "br": _rs([H]),
                                 "Wxh": _rs([H, D]), "Whh": _rs([H, H]), "bh": _rs([H])},
                lambda H, D: {"h": _rs([H])}, lambda o: ["z", "r"], lambda H, D: H, lambda o: "sequential"),
    "lstm": Spec(lstm_step,
                 lambda H, D, o: {n: _rs(s) for k in "ifoc" for n, s in
                                  (("Wx" + k, [H, D]), ("Wh" + k, [H, H]), ("b" + k, [H]))},
                 lambda H, D: {"c": _rs([H]), "h": _rs([H])}, lambda o: ["i", "f", "o"], lambda H, D: H,
                 lambda o: "sequential"),
    "mgu": Spec(mgu_step,
                lambda H, D, o: dict({"Wzx": _rs([H, D]), "bz": _rs([H]), "Wix": _rs([H, D]), "bh": _rs([H])},
                                     **({"Wzh": _rs([H, H])} if o["see_h"] else {})),
                lambda H, D: {"h": _rs([H])}, lambda o: ["z"], lambda H, D: H,
                lambda o: "sequential" if o["see_h"] else "scan", defaults={"see_h": False}),
    "leaky": Spec(leaky_step,
                  lambda H, D, o: {"Wr": _rs([H, H]), "Wi": _rs([H, D])},
                  lambda H, D: {"h": _rs([H])}, lambda o: [], lambda H, D: H, lambda o: "sequential",
                  defaults={"alpha": 0.5}),
    "scalar_gate": Spec(scalar_gate_step,
                        lambda H, D, o: {"Wrg": _rs([1, H]), "Wig": _rs([1, D]), "Wr": _rs([H, H]),
                                         "Wi": _rs([H, D])},
                        lambda H, D: {"h": _rs([H])}, lambda o: ["g"], lambda H, D: H, lambda o: "sequential"),
    "multi_gate": Spec(multi_gate_step,
                       lambda H, D, o: {"Wrg": _rs([H, H]), "Wig": _rs([H, D]), "Wr": _rs([H, H]),
                                        "Wi": _rs([H, D])},
                       lambda H, D: {"h": _rs([H])}, lambda o: ["g"], lambda H, D: H, lambda o: "sequential"),
    "lru": Spec(lru_step,
                lambda H, D, o: {"nu_log": _rs([H]), "theta_log": _rs([H]), "gamma_log": _rs([H]),
                                 "B": ((H, D), True), "C": ((D, H), True), "Dskip": _rs([D])},
                lambda H, D: {"h": ((H,), True)}, lambda o: [], lambda H, D: D, lambda o: "scan",
                defaults={"r_min": 0.9, "r_max": 0.999, "max_phase": 2 * math.pi}),
    "hgru": Spec(hgru_step,
                 lambda H, D, o: {"Wf": _rs([H, D]), "bf": _rs([H]), "Wr": _rs([H, D]), "br": _rs([H]),
                                  "Wi": _rs([H, D]), "bi": _rs([H]), "theta": _rs([H]),
                                  "Wg": _rs([2 * H, D]), "bg": _rs([2 * H]), "Wo": _rs([D, 2 * H]),
                                  "bo": _rs([D])},
                 lambda H, D: {"h": ((H,), True)}, lambda o: ["mu"], lambda H, D: D, lambda o: "scan",
                 defaults={"lb": 0.0}, H_default="D"),
    "mingru": Spec(mingru_step,
                   lambda H, D, o: {"Wz": _rs([H, D]), "Wh": _rs([H, D])},
                   lambda H, D: {"h": _rs([H])}, lambda o: ["z"], lambda H, D: H, lambda o: "scan"),
}

# Version-2 cells in the tests: NH = 2 heads, K = H, V = H + 1 (unequal, so that a transposed state
# or readout fails), the low ranks R = 3 (RWKV-6's token-shift rank M = 2); sLSTM: P = H units per head.
def _hd(H, D):
    return {"NH": 2, "K": H, "V": H + 1, "D": D}


def _hdr(H, D):
    return dict(_hd(H, D), R=3)


def _K_of(name):
    return lambda h0: h0[name].shape[-1]


SPECS.update({
    "gla": Spec(gla_step,
                lambda H, D, o: {"Wq": _rs([2 * H, D]), "Wk": _rs([2 * H, D]), "Wv": _rs([2 * (H + 1), D]),
                                 "Wa1": _rs([3, D]), "Wa2": _rs([2 * H, 3]), "ba": _rs([2 * H]),
                                 "Wr": _rs([2 * (H + 1), D]), "br": _rs([2 * (H + 1)]), "Wo": _rs([D, 2 * (H + 1)])},
                lambda H, D: {"S": _rs([2, H, H + 1])}, lambda o: ["alpha"], lambda H, D: D, lambda o: "scan",
                defaults={"tau": 16.0}, dims=_hdr, H_of=lambda h0: h0["S"].shape[2]),
    "hgrn2": Spec(hgrn2_step,
                  lambda H, D, o: {"Wf": _rs([2 * H, D]), "Wq": _rs([2 * H, D]), "Wi": _rs([2 * (H + 1), D]),
                                   "Wo": _rs([D, 2 * (H + 1)])},
                  lambda H, D: {"S": _rs([2, H, H + 1])}, lambda o: ["f"], lambda H, D: D, lambda o: "scan",
                  defaults={"lb": 0.0}, dims=_hd, H_of=lambda h0: h0["S"].shape[2]),
    "mlstm": Spec(mlstm_step,
                  lambda H, D, o: {"Wq": _rs([2 * H, D]), "Wk": _rs([2 * H, D]), "Wv": _rs([2 * (H + 1), D]),
                                   "Wi": _rs([2, D]), "bi": _rs([2]), "Wf": _rs([2, D]), "bf": _rs([2]),
                                   "Wo": _rs([2 * (H + 1), D]), "bo": _rs([2 * (H + 1)])},
                  lambda H, D: {"C": _rs([2, H + 1, H]), "n": _rs([2, H]), "m": _rs([2])},
                  lambda o: ["i", "f"], lambda H, D: 2 * (H + 1), lambda o: "sequential",
                  dims=_hd, H_of=_K_of("n")),
    "slstm": Spec(slstm_step,
                  lambda H, D, o: dict({"W" + g: _rs([2 * H, D]) for g in "zifo"},
                                       **{"R" + g: _rs([2, H, H]) for g in "zifo"},
                                       **{"b" + g: _rs([2, H]) for g in "zifo"}),
                  lambda H, D: {n: _rs([2, H]) for n in "cnmh"}, lambda o: ["i", "f"], lambda H, D: 2 * H,
                  lambda o: "sequential", dims=lambda H, D: {"NH": 2, "P": H, "D": D}, H_of=_K_of("h")),
    "gated_deltanet": Spec(gated_deltanet_step,
                           lambda H, D, o: {"Wq": _rs([2 * H, D]), "Wk": _rs([2 * H, D]),
                                            "Wv": _rs([2 * (H + 1), D]), "Kc": _rs([4 * H + 2 * (H + 1), 4]),
                                            "Wb": _rs([2, D]), "Wa": _rs([2, D]),
                                            "A_log": _rs([2]), "dt_bias": _rs([2]), "Wg": _rs([2 * (H + 1), D]),
                                            "Wo": _rs([D, 2 * (H + 1)])},
                           lambda H, D: {"S": _rs([2, H + 1, H]), "hist.u": _rs([3, 4 * H + 2 * (H + 1)])},
                           lambda o: ["beta", "alpha"], lambda H, D: D,
                           lambda o: "sequential", dims=_hd, H_of=_K_of("S")),
    "rwkv6": Spec(rwkv6_step,
                  lambda H, D, o: dict({"mu_" + n: _rs([D]) for n in "xwkvrg"},
                                       **{"A" + n: _rs([2, D]) for n in "wkvrg"},
                                       **{"B" + n: _rs([D, 2]) for n in "wkvrg"},
                                       **{"Wr": _rs([2 * H, D]), "Wk": _rs([2 * H, D]), "Wv": _rs([2 * (H + 1), D]),
                                          "Wg": _rs([2 * (H + 1), D]), "w0": _rs([2 * H]), "Wd1": _rs([3, D]),
                                          "Wd2": _rs([2 * H, 3]), "u": _rs([2 * H]), "ln_w": _rs([2 * (H + 1)]),
                                          "ln_b": _rs([2 * (H + 1)]), "Wo": _rs([D, 2 * (H + 1)])}),
                  lambda H, D: {"S": _rs([2, H, H + 1]), "hist.x": _rs([1, D])}, lambda o: ["w"], lambda H, D: D,
                  lambda o: "sequential", dims=lambda H, D: dict(_hdr(H, D), M=2), H_of=lambda h0: h0["S"].shape[2]),
})


def options(name, opts=None):
    """The cell's options: its defaults overridden by opts."""
    o = dict(SPECS[name].defaults)
    o.update(opts or {})
    return o


def shapes(name, H, D, opts=None):
    """(params, states) of the named cell: {name: (shape incl. the trailing 2 of complex, is_complex)}."""
    sp = SPECS[name]
    o = options(name, opts)

    def full(d):
        return {k: (tuple(s) + ((2,) if c else ()), c) for k, (s, c) in d.items()}
    return full(sp.params(H, D, o)), full(sp.states(H, D))


# ---------------------------------------------------------------- the sequence runner
def run(name, params, x, h0, opts=None):
    """Run the named stdlib cell over x [T, B, D] from h0: returns (y, finals, gates) as documented above."""
    sp = SPECS[name]
    o = options(name, opts)
    H = sp.H_of(h0)
    D = x.shape[-1]
    pspec, sspec = shapes(name, H, D, o)
    missing = sorted(set(pspec) - set(params))
    if missing:
        raise KeyError("%s: missing params %s" % (name, ", ".join(missing)))
    p = {k: (as_complex(params[k]) if pspec[k][1] else params[k]) for k in pspec}
    for k, (shp, c) in pspec.items():
        if tuple(params[k].shape) != shp:
            raise ValueError("%s: param %s has shape %s, expected %s" % (name, k, tuple(params[k].shape), shp))
    for k, (shp, c) in sspec.items():
        if k not in h0 or tuple(h0[k].shape) != (x.shape[1],) + shp:
            raise ValueError("%s: initial state %s has shape %s, expected %s" % (
                name, k, tuple(h0[k].shape) if k in h0 else None, (x.shape[1],) + shp))
    s = {k: (as_complex(h0[k]) if sspec[k][1] else h0[k]) for k in sspec}
    ys, gs = [], {g: [] for g in sp.gates(o)}
    for t in range(x.shape[0]):
        new, y, gates = sp.step(p, x[t], s, o)
        if set(new) != set(s):
            raise RuntimeError("%s: step updated %s, expected %s" % (name, sorted(new), sorted(s)))
        if set(gates) != set(gs):
            raise RuntimeError("%s: step gates %s, expected %s" % (name, sorted(gates), sorted(gs)))
        s = new
        ys.append(y)
        for g, v in gates.items():
            gs[g].append(as_real_view(v))
    y = torch.stack(ys, 0)
    finals = {k: as_real_view(v) for k, v in s.items()}
    gates = {g: torch.stack(v, 0) for g, v in gs.items()}
    return y, finals, gates


def _make(name):
    def ref(params, x, h0, opts=None):
        return run(name, params, x, h0, opts)
    ref.__name__ = name
    ref.__doc__ = "Reference %s cell: y, finals, gates = %s(params, x, h0, opts)." % (name, name)
    return ref


elman = _make("elman")
gru = _make("gru")
lstm = _make("lstm")
mgu = _make("mgu")
leaky = _make("leaky")
scalar_gate = _make("scalar_gate")
multi_gate = _make("multi_gate")
lru = _make("lru")
hgru = _make("hgru")
mingru = _make("mingru")
gla = _make("gla")
hgrn2 = _make("hgrn2")
mlstm = _make("mlstm")
slstm = _make("slstm")
gated_deltanet = _make("gated_deltanet")
rwkv6 = _make("rwkv6")

REFS = {n: globals()[n] for n in SPECS}


# ---------------------------------------------------------------- cells with histories (prev, conv)
# A history hist.NAME is a state [B, K, C]: NAME at steps t-K .. t-1, oldest first. Each step
# reads it and hands on the last K steps, so these references run step by step like the others.
def _lag(hist, cur, k):
    """NAME at step t - k (k = 0: the current value) from its history [B, K, C]."""
    return cur if k == 0 else hist[:, hist.shape[1] - k]


def _shift(hist, cur):
    return torch.cat([hist[:, 1:], cur[:, None]], 1)


def _dwconv(hist, cur, W):
    """Depthwise causal convolution: sum_j W[:, j] * NAME[t - j]; W[:, 0] multiplies the current step."""
    return sum(W[:, j] * _lag(hist, cur, j) for j in range(W.shape[1]))


def qrnn_step(p, x, s, o):
    # Bradbury et al. 2017: a width-2 masked convolution, then fo-pooling
    xp = _lag(s["hist.x"], x, 1)
    z = torch.tanh(mv(p["Wz0"], x) + mv(p["Wz1"], xp) + p["bz"])
    f = torch.sigmoid(mv(p["Wf0"], x) + mv(p["Wf1"], xp) + p["bf"])
    og = torch.sigmoid(mv(p["Wo0"], x) + mv(p["Wo1"], xp) + p["bo"])
    c = f * s["c"] + (1 - f) * z
    return {"c": c, "hist.x": _shift(s["hist.x"], x)}, og * c, {"f": f, "o": og}


def rglru_step(p, x, s, o):
    # De et al. 2024 (Griffin): the recurrent block around the RG-LRU, c = 8
    gy = mv(p["Wy"], x) + p["by"]
    g = torch.nn.functional.gelu(gy, approximate="tanh")
    u = mv(p["Wx"], x) + p["bx"]
    v = _dwconv(s["hist.u"], u, p["Kc"]) + p["bc"]
    r = torch.sigmoid(mv(p["Wa"], v) + p["ba"])
    i = torch.sigmoid(mv(p["Wi"], v) + p["bi"])
    a = torch.sigmoid(-p["lam_neg"]) ** (8 * r)          # sigmoid(Lambda)^(c r), Lambda = -lam_neg
    h = a * s["h"] + torch.sqrt(1 - a * a) * (i * v)
    return {"h": h, "hist.u": _shift(s["hist.u"], u)}, mv(p["Wo"], h * g) + p["bo"], {"r": r, "i": i}


MAMBA2_NH, MAMBA2_N = 2, 3     # the tests' heads and state size; P plays H


def mamba2_step(p, x, s, o):
    # Dao and Gu 2024: SSD with a scalar decay per head, one group of B, C
    NH, P, N = s["S"].shape[1:]
    ux, uB, uC = mv(p["Wx"], x), mv(p["WB"], x), mv(p["WC"], x)
    u = silu(_dwconv(s["hist.ux"], ux, p["Kx"]) + p["bx"]).reshape(-1, NH, P)
    b = silu(_dwconv(s["hist.uB"], uB, p["KB"]) + p["bB"])
    c = silu(_dwconv(s["hist.uC"], uC, p["KC"]) + p["bC"])
    dt = torch.nn.functional.softplus(mv(p["Wdt"], x) + p["dt_bias"])          # [B, NH]
    A = -torch.exp(p["A_log"])
    S = torch.exp(dt * A)[:, :, None, None] * s["S"] + dt[:, :, None, None] * torch.einsum("bhp,bn->bhpn", u, b)
    y = torch.einsum("bhpn,bn->bhp", S, c) + p["Dskip"][None, :, None] * u
    y = y.reshape(y.shape[0], NH * P)
    out = mv(p["Wo"], rmsnorm(y * silu(mv(p["Wz"], x))) * p["norm_w"])
    new = {"S": S, "hist.ux": _shift(s["hist.ux"], ux), "hist.uB": _shift(s["hist.uB"], uB),
           "hist.uC": _shift(s["hist.uC"], uC)}
    return new, out, {}


def _u(shape):
    return _rs(shape)


SPECS["mamba2"] = Spec(
    mamba2_step,
    lambda H, D, o: {"Wz": _u([2 * H, D]), "Wx": _u([2 * H, D]), "WB": _u([3, D]), "WC": _u([3, D]),
                     "Wdt": _u([2, D]), "Kx": _u([2 * H, 4]), "bx": _u([2 * H]), "KB": _u([3, 4]), "bB": _u([3]),
                     "KC": _u([3, 4]), "bC": _u([3]), "dt_bias": _u([2]), "A_log": _u([2]), "Dskip": _u([2]),
                     "norm_w": _u([2 * H]), "Wo": _u([D, 2 * H])},
    lambda H, D: {"S": _u([MAMBA2_NH, H, MAMBA2_N]), "hist.ux": _u([3, MAMBA2_NH * H]),
                  "hist.uB": _u([3, MAMBA2_N]), "hist.uC": _u([3, MAMBA2_N])},
    lambda o: [], lambda H, D: D, lambda o: "scan",
    dims=lambda H, D: {"NH": MAMBA2_NH, "P": H, "N": MAMBA2_N, "D": D}, H_of=lambda h0: h0["S"].shape[2])
SPECS["rglru"] = Spec(
    rglru_step,
    lambda H, D, o: {"Wy": _u([H, D]), "by": _u([H]), "Wx": _u([H, D]), "bx": _u([H]), "Kc": _u([H, 4]),
                     "bc": _u([H]), "Wa": _u([H, H]), "ba": _u([H]), "Wi": _u([H, H]), "bi": _u([H]),
                     "lam_neg": _u([H]), "Wo": _u([D, H]), "bo": _u([D])},
    lambda H, D: {"h": _u([H]), "hist.u": _u([3, H])}, lambda o: ["r", "i"], lambda H, D: D, lambda o: "scan")
SPECS["qrnn"] = Spec(
    qrnn_step,
    lambda H, D, o: {n: _u([H, D]) for n in ("Wz0", "Wz1", "Wf0", "Wf1", "Wo0", "Wo1")} |
    {n: _u([H]) for n in ("bz", "bf", "bo")},
    lambda H, D: {"c": _u([H]), "hist.x": _u([1, D])}, lambda o: ["f", "o"], lambda H, D: H, lambda o: "scan")
mamba2 = REFS["mamba2"] = _make("mamba2")
rglru = REFS["rglru"] = _make("rglru")
qrnn = REFS["qrnn"] = _make("qrnn")


MAMBA_N, MAMBA_R = 3, 2        # the tests' state size and dt rank; E (the inner width) plays H


def mamba_step(p, x, s, o):
    # Gu and Dao 2023 (stdlib/mamba.cell): the Mamba block's selective SSM (S6); conv_w[e, j] multiplies
    # the input j steps back (a torch Conv1d weight flipped along its taps)
    u = mv(p["W_in"], x)                                                          # [B, E]
    c = silu(_dwconv(s["hist.u"], u, p["conv_w"]) + p["conv_b"])
    dt = torch.nn.functional.softplus(mv(p["W_dt"], mv(p["W_x"], c)) + p["b_dt"])  # [B, E]
    Bt, Ct = mv(p["W_B"], c), mv(p["W_C"], c)                                     # [B, N], shared by channels
    A = -torch.exp(p["A_log"])                                                    # [E, N]
    h = torch.exp(dt[:, :, None] * A) * s["h"] + (dt * c)[:, :, None] * Bt[:, None, :]
    y = torch.einsum("ben,bn->be", h, Ct) + p["Dskip"] * c
    return {"h": h, "hist.u": _shift(s["hist.u"], u)}, mv(p["W_out"], y * silu(mv(p["W_z"], x))), {}


SPECS["mamba"] = Spec(
    mamba_step,
    lambda H, D, o: {"W_in": _u([H, D]), "W_z": _u([H, D]), "conv_w": _u([H, 4]), "conv_b": _u([H]),
                     "W_x": _u([MAMBA_R, H]), "W_B": _u([MAMBA_N, H]), "W_C": _u([MAMBA_N, H]),
                     "W_dt": _u([H, MAMBA_R]), "b_dt": _u([H]), "A_log": _u([H, MAMBA_N]), "Dskip": _u([H]),
                     "W_out": _u([D, H])},
    lambda H, D: {"h": _u([H, MAMBA_N]), "hist.u": _u([3, H])},
    lambda o: [], lambda H, D: D, lambda o: "scan",
    dims=lambda H, D: {"E": H, "N": MAMBA_N, "R": MAMBA_R, "D": D}, H_of=lambda h0: h0["h"].shape[1])
mamba = REFS["mamba"] = _make("mamba")
