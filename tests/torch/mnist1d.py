# Role: the MNIST-1D baselines of the source (Greydanus, "Scaling down deep learning", the
# mnist1d project), trained with PyTorch on a split that cellc generated (build/task_dump) or on
# an independent NumPy construction of the reference dataset, so that the two can be compared.
#
#   mnist1d.py DUMP.safetensors|reference [--models logistic,mlp,cnn,gru,gru64] [--steps N]
#              [--cosine] [--clip C]
#
# Prints one line per model: "<model> test_accuracy <percent> (<seconds> s)".
#
# The reference construction (written here from its published description, not copied): ten
# 12-point templates, each whitened, shifted to start at 0 and divided by 6; per sample: append
# 36-60 zeros (a uniform integer), linearly resample to 72 points, scale by 1 + 0.4 (u - 0.5),
# rotate right by a uniform integer in [0, 48), fill the points that are exactly 0 with Gaussian
# noise of scale 0.25 smoothed by a Gaussian filter (sigma 2, radius 8, half-sample reflection),
# add i.i.d. noise of scale 0.02, subtract 0.75 (u - 0.5) times a ramp from -0.5 to 0.5, linearly
# resample to 40 points. 500 samples per class, shuffled, standardized with the mean and standard
# deviation of all of them, the first 4000 for training and the last 1000 for testing.
#
# The models and the training loop are the source's baselines: logistic regression; an MLP of
# 100 units with a residual second layer; a CNN of three convolutions (25 channels, kernels 5, 3,
# 3, stride 2) and a linear layer; a bidirectional GRU of 6 units whose 40 outputs all feed a
# linear classifier; Adam, lr 1e-2, batch 100 taken in order from the training set, no weight
# decay. gru64 is the model of examples/mnist1d.cfg (a linear encoder to 32, one forward GRU of 64
# units, the last step's state to a linear head), for comparison.
import argparse
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import sft  # noqa: E402

TEMPLATES = [
    [5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5], [5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5],
    [5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5], [5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5],
    [5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5], [5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5],
    [5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5], [5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5], [5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5],
]


def templates():
    t = np.asarray(TEMPLATES, dtype=np.float64)
    t = (t - t.mean(1, keepdims=True)) / t.std(1, keepdims=True)
    return (t - t[:, :1]) / 6.0


def resample(x, n):
    return np.interp(np.linspace(0, 1, n), np.linspace(0, 1, len(x)), x)


def smooth(x, sigma=2.0):
    r = int(4 * sigma + 0.5)
    w = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    w /= w.sum()
    padded = np.concatenate([x[:r][::-1], x, x[-r:][::-1]])  # half-sample reflection
    return np.convolve(padded, w, mode="valid")


def reference_sample(tpl, rng):
    pad = 36 + int(rng.random() * 25)
    x = resample(np.concatenate([tpl + 1e-8, np.zeros(pad)]), 72)
    x = x * (1 + 0.4 * (rng.random() - 0.5))
    x = np.roll(x, int(rng.integers(48)))
    noise = smooth(0.25 * rng.standard_normal(72))
    x = np.where(x != 0, x, noise)
    x = x + 0.02 * rng.standard_normal(72)
    x = x - 0.75 * (rng.random() - 0.5) * np.linspace(-0.5, 0.5, 72)
    return resample(x, 40)


def reference_dataset(seed=42):
    rng = np.random.default_rng(seed)
    tpl = templates()
    xs = np.stack([reference_sample(tpl[c], rng) for c in range(10) for _ in range(500)])
    ys = np.repeat(np.arange(10), 500)
    p = rng.permutation(len(ys))
    xs, ys = xs[p], ys[p]
    xs = (xs - xs.mean()) / xs.std()
    return xs[:4000], ys[:4000], xs[4000:], ys[4000:]


def dumped_dataset(path):
    with open(path, "rb") as f:
        t, _ = sft.parse(f.read())
    x = np.concatenate([t["x_train"], t["x_valid"]])[..., 0]
    y = np.concatenate([t["y_train"], t["y_valid"]])
    return x, y, t["x_test"][..., 0], t["y_test"]


class MLP(nn.Module):
    def __init__(self, h=100):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(40, h), nn.Linear(h, h), nn.Linear(h, 10)

    def forward(self, x):
        h = self.l1(x).relu()
        return self.l3(h + self.l2(h).relu())


class CNN(nn.Module):
    def __init__(self, c=25):
        super().__init__()
        self.c1 = nn.Conv1d(1, c, 5, stride=2, padding=1)
        self.c2 = nn.Conv1d(c, c, 3, stride=2, padding=1)
        self.c3 = nn.Conv1d(c, c, 3, stride=2, padding=1)
        self.out = nn.Linear(c * 5, 10)

    def forward(self, x):
        h = self.c3(self.c2(self.c1(x[:, None]).relu()).relu()).relu()
        return self.out(h.flatten(1))


class GRU(nn.Module):
    """bidirectional: the source's (6 units each way, all steps read); else examples/mnist1d.cfg's."""

    def __init__(self, hidden, bidirectional):
        super().__init__()
        self.bi = bidirectional
        self.enc = None if bidirectional else nn.Linear(1, 32)
        self.gru = nn.GRU(1 if bidirectional else 32, hidden, batch_first=True, bidirectional=bidirectional)
        self.out = nn.Linear(2 * hidden * 40 if bidirectional else hidden, 10)

    def forward(self, x):
        x = x[..., None]
        if self.bi:
            return self.out(self.gru(x)[0].flatten(1))
        return self.out(self.gru(self.enc(x))[0][:, -1])


MODELS = {
    "logistic": lambda: nn.Linear(40, 10), "mlp": MLP, "cnn": CNN,
    "gru": lambda: GRU(6, True), "gru64": lambda: GRU(64, False),
}


def train(model, x, y, xt, yt, steps, lr=1e-2, batch=100, cosine=False, clip=0.0):
    """The source's loop; cosine and clip as examples/mnist1d.cfg (lr to 0 by a cosine, the global
    gradient norm clipped), for the gru64 comparison."""
    x, y, xt, yt = (torch.as_tensor(np.asarray(v)) for v in (x, y, xt, yt))
    x, xt, y, yt = x.float(), xt.float(), y.long(), yt.long()
    opt = torch.optim.Adam(model.parameters(), lr)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(steps):
        if cosine:
            for g in opt.param_groups:
                g["lr"] = lr * (1 + np.cos(np.pi * step / steps)) / 2
        i = (step * batch) % len(x)
        loss = loss_fn(model(x[i:i + batch]), y[i:i + batch])
        opt.zero_grad()
        loss.backward()
        if clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    with torch.no_grad():
        return 100.0 * (model(xt).argmax(-1) == yt).float().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", help="a task_dump safetensors file, or 'reference'")
    ap.add_argument("--models", default="logistic,mlp,cnn,gru")
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cosine", action="store_true", help="lr from 1e-2 to 0 by a cosine")
    ap.add_argument("--clip", type=float, default=0.0, help="global gradient-norm clip (0: off)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = reference_dataset() if a.data == "reference" else dumped_dataset(a.data)
    for name in a.models.split(","):
        torch.manual_seed(a.seed)
        t0 = time.time()
        acc = train(MODELS[name](), *data, a.steps, cosine=a.cosine, clip=a.clip)
        print(f"{name} test_accuracy {acc:.1f} ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
