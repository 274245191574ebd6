# Role: PyTorch references (float64, autograd through parity.py) of the version-2 tensor cells in
# tests/cells/tensor_*.cell, written from their equations with torch's own operations (matmul,
# transpose, reshape, softmax, ...), so they check cellc's meaning of those built-ins against
# PyTorch's. Convention as cells.py: y, finals, gates = ref(params, x, h0, opts).
import math

import torch


def gla(params, x, h0, opts=None):
    """tests/cells/tensor_gla.cell: S = unsqueeze(a, 2) * S + outer(k, v) per head, read out as
    transpose(S) @ unsqueeze(q, 2), flattened."""
    S = h0["S"]
    B, NH, K, V = S.shape
    ys = []
    for t in range(x.shape[0]):
        xt = x[t]
        q = (xt @ params["Wq"].T).reshape(B, NH, K)
        k = (xt @ params["Wk"].T).reshape(B, NH, K)
        v = (xt @ params["Wv"].T).reshape(B, NH, V)
        a = torch.sigmoid((xt @ params["Wa"].T).reshape(B, NH, K))
        S = a.unsqueeze(3) * S + k.unsqueeze(3) * v.unsqueeze(2)
        ys.append(torch.matmul(S.transpose(-1, -2), q.unsqueeze(3)).reshape(B, NH * V))
    return torch.stack(ys), {"S": S}, {}


def ops(params, x, h0, opts=None):
    """tests/cells/tensor_ops.cell: softmax, amax, amin, mean and sum over axes, layernorm and
    rmsnorm over an axis, groupnorm, slice along an axis, eye, a batched matmul by a param, a dim
    as a number (1 / sqrt(D))."""
    h = h0["h"]
    B = x.shape[1]
    R = params["R"]                                  # [2, 3, 3]
    ys = []
    for t in range(x.shape[0]):
        u = (x[t] @ params["W"].T).reshape(B, 2, 3)  # per row [2, 3]
        s = torch.softmax(u, dim=-1)
        m = torch.amax(u, dim=2) - torch.amin(u, dim=2)  # per row axis 1: [B, 2]
        e = torch.eye(3, dtype=x.dtype)
        r = torch.matmul(R + e, u.unsqueeze(3)).reshape(B, 2, 3)
        ln = torch.nn.functional.layer_norm(u, (3,), eps=1e-5)
        rms = u / torch.sqrt((u * u).mean(dim=2, keepdim=True) + 1e-5)
        g = torch.nn.functional.group_norm(u.reshape(B, 6, 1), 2, eps=1e-5).reshape(B, 6)
        sl = u[:, :, 1:3]                            # slice(u, 1, 2, 2)
        h = torch.tanh(h + s.sum(dim=1) + r.mean(dim=1) + m.sum(dim=1, keepdim=True)
                       + ln.sum(dim=1) * rms.sum(dim=1) + g[:, 0:3] + sl.sum(dim=2).sum(dim=1, keepdim=True) / math.sqrt(x.shape[2]))
        ys.append(h)
    return torch.stack(ys), {"h": h}, {}
