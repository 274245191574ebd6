"""PyTorch peers for `make bench`: nn.GRU / nn.LSTM, and the stdlib cells
written in PyTorch the way a researcher writes a cell: one step as a
function, a Python loop over time (gru and lstm too: loop peers for
bench/train_throughput.sh, whose nn peers are nn.GRU / nn.LSTM). Two loop
styles: `unbind` (x.unbind(0): the efficient idiom) and `index` (x[t]:
common, but each step's backward then materializes a full-size gradient of x,
so it is quadratic in T).

usage: torch_cells.py CELL H D T B STYLE REPS   (STYLE: nn | unbind | index)
Prints one JSON line: forward+backward seconds per batch (best of REPS).
CELLC_TORCH_DEVICE=cuda runs it on the GPU (`make bench-gpu`: nn.GRU/nn.LSTM through cuDNN)."""
import os
import json
import sys
import time

import torch

from blas_core import openblas_core  # noqa: E402


def lin(o, i):
    return (torch.randn(o, i) / i ** 0.5).requires_grad_()


def vec(n, scale=0.0):
    return (torch.randn(n) * scale).requires_grad_()


def make(cell, H, D):
    """params (a dict of leaf tensors), a step function (x_t, states) -> (y_t, states) and the
    initial states for a batch size. Also used by torch_train.py for its loop peers."""
    if cell == "mgu" or cell == "mgu_see_h":
        p = dict(Wzx=lin(H, D), bz=vec(H), Wix=lin(H, D), bh=vec(H))
        see_h = cell == "mgu_see_h"
        if see_h:
            p["Wzh"] = lin(H, H)

        def step(x, s):
            h = s[0]
            a = x @ p["Wzx"].T + p["bz"]
            if see_h:
                a = a + h @ p["Wzh"].T
            z = torch.sigmoid(a)
            h = z * h + (1 - z) * (x @ p["Wix"].T + p["bh"])
            return h, (h,)
        return p, step, lambda B: (torch.zeros(B, H),)
    if cell == "mingru":
        p = dict(Wz=lin(H, D), Wh=lin(H, D))

        def step(x, s):
            z = torch.sigmoid(x @ p["Wz"].T)
            h = (1 - z) * s[0] + z * (x @ p["Wh"].T)
            return h, (h,)
        return p, step, lambda B: (torch.zeros(B, H),)
    if cell == "lru":
        p = dict(nu=vec(H, 0.1), th=vec(H, 0.1), ga=vec(H, 0.1),
                 Bre=lin(H, D), Bim=lin(H, D), Cre=lin(D, H), Cim=lin(D, H), Dk=vec(D, 1.0))

        def step(x, s):
            h = s[0]
            lam = torch.exp(torch.complex(-torch.exp(p["nu"]), torch.exp(p["th"])))
            Bx = torch.complex(x @ p["Bre"].T, x @ p["Bim"].T)
            h = lam * h + torch.exp(p["ga"]) * Bx
            C = torch.complex(p["Cre"], p["Cim"])
            y = (h @ C.T).real + p["Dk"] * x
            return y, (h,)
        return p, step, lambda B: (torch.zeros(B, H, dtype=torch.complex64),)
    if cell == "hgru":
        p = dict(Wf=lin(H, D), bf=vec(H), Wr=lin(H, D), br=vec(H), Wi=lin(H, D), bi=vec(H),
                 th=vec(H, 1.0), Wg=lin(2 * H, D), bg=vec(2 * H), Wo=lin(D, 2 * H), bo=vec(D))
        lb = 0.0

        def step(x, s):
            h = s[0]
            lam = lb + (1 - lb) * torch.sigmoid(x @ p["Wf"].T + p["bf"])
            c = torch.complex(torch.nn.functional.silu(x @ p["Wr"].T + p["br"]),
                              torch.nn.functional.silu(x @ p["Wi"].T + p["bi"]))
            h = lam * torch.exp(torch.complex(torch.zeros_like(p["th"]), p["th"])) * h + (1 - lam) * c
            g = torch.sigmoid(x @ p["Wg"].T + p["bg"])
            o = torch.nn.functional.layer_norm(g * torch.cat([h.real, h.imag], -1), (2 * H,))
            return o @ p["Wo"].T + p["bo"], (h,)
        return p, step, lambda B: (torch.zeros(B, H, dtype=torch.complex64),)
    if cell == "gru":
        # stdlib/gru.cell: the reset gate before the recurrent product; the three gates stacked
        p = dict(Wx=lin(3 * H, D), Wzr=lin(2 * H, H), Wn=lin(H, H), b=vec(3 * H))

        def step(x, s):
            h = s[0]
            ax = x @ p["Wx"].T + p["b"]
            z, r = torch.sigmoid(ax[:, :2 * H] + h @ p["Wzr"].T).chunk(2, -1)
            n = torch.tanh(ax[:, 2 * H:] + (r * h) @ p["Wn"].T)
            h = z * h + (1 - z) * n
            return h, (h,)
        return p, step, lambda B: (torch.zeros(B, H),)
    if cell == "lstm":
        # stdlib/lstm.cell (no peepholes): two nonlinear states; the four gates stacked
        p = dict(Wx=lin(4 * H, D), Wh=lin(4 * H, H), b=vec(4 * H))

        def step(x, s):
            c, h = s
            i, f, o, g = (x @ p["Wx"].T + h @ p["Wh"].T + p["b"]).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            return h, (c, h)
        return p, step, lambda B: (torch.zeros(B, H), torch.zeros(B, H))
    raise SystemExit("unknown cell " + cell)


def run_loop(cell, H, D, T, B, style):
    p, step, init = make(cell, H, D)
    x = torch.randn(T, B, D, requires_grad=True)

    def once():
        s = init(B)
        ys = []
        xs = x.unbind(0) if style == "unbind" else None
        for t in range(T):
            y, s = step(xs[t] if xs is not None else x[t], s)
            ys.append(y)
        y = torch.stack(ys)
        y.backward(torch.ones_like(y))
    return once


def run_nn(cell, H, D, T, B):
    mod = torch.nn.GRU(D, H) if cell == "gru" else torch.nn.LSTM(D, H)
    x = torch.randn(T, B, D, requires_grad=True)

    def once():
        y, _ = mod(x)
        y.backward(torch.ones_like(y))
    return once


def main():
    cell, H, D, T, B, style, reps = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6], int(sys.argv[7])
    device = os.environ.get("CELLC_TORCH_DEVICE", "cpu")
    if device != "cpu":
        if hasattr(torch, "set_default_device"):
            torch.set_default_device(device)
        else:
            torch.set_default_tensor_type("torch.cuda.FloatTensor")
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.manual_seed(0)
    once = run_nn(cell, H, D, T, B) if style == "nn" else run_loop(cell, H, D, T, B, style)
    if device != "cpu":
        once()  # warm up: cuDNN plans, the caching allocator
    best = float("inf")
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        once()
        sync()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps(dict(cell=cell, H=H, D=D, T=T, B=B, style=style, device=device, threads=torch.get_num_threads(),
                          blas_core=openblas_core(), total_s=best)))


if __name__ == "__main__":
    main()
