"""mnist1d_suite.py: cellc's MNIST-1D (runtime/tasks/mnist1d.c) against the source's dataset.
Dumps the splits that `cellc train examples/mnist1d.cfg` trains on (build/task_dump), checks the
dump, compares its statistics with an independent construction of the reference dataset
(tests/torch/mnist1d.py), and trains the source's baselines on it with PyTorch: each must land
near the source's published accuracy (logistic regression 32%, MLP 68%, CNN 94%, GRU 91%), so
that a generator easier (or harder) than the reference fails here. About 2 minutes on one core.

    mnist1d_suite.py [--gru-steps N]     (from the repository root; TASK_DUMP=build/task_dump)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch"))
sys.path.insert(0, HERE)
import mnist1d  # noqa: E402
import sft  # noqa: E402
import torch  # noqa: E402
from clitest import check, finish  # noqa: E402

DUMP = os.environ.get("TASK_DUMP", "build/task_dump")
CFG = "examples/mnist1d.cfg"

# The source's accuracies (percent) and the band each baseline must fall in here. The bands
# are about 10 points wide around the published number: a run's seed moves these by 1-3
# points, and an easier generator moves the linear and MLP baselines by far more.
BASELINES = [  # model, source, low, high
    ("logistic", 32, 22, 45),
    ("mlp", 68, 55, 80),
    ("cnn", 94, 85, 97.5),
    ("gru", 91, 80, 95.5),
]


def dump(path, *sets):
    args = [DUMP, CFG, path] + [a for s in sets for a in ("--set", s)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def check_dump(tmp):
    path = os.path.join(tmp, "a.safetensors")
    p = dump(path)
    check("task_dump writes the splits", p.returncode == 0 and os.path.exists(path), p.stderr)
    if p.returncode:
        return None
    with open(path, "rb") as f:
        t, meta = sft.parse(f.read())
    sizes = {"train": 3600, "valid": 400, "test": 1000}
    ok = all(t["x_" + s].shape == (n, 40, 1) and t["x_" + s].dtype == np.float32 and t["y_" + s].shape == (n,)
             for s, n in sizes.items())
    check("dump shapes [N, 40, 1] and labels [N]", ok, str({k: v.shape for k, v in t.items()}))
    balanced = all((np.bincount(t["y_" + s], minlength=10) == n // 10).all() for s, n in sizes.items())
    check("dump classes balanced in every split", balanced)
    check("dump metadata names the task and seed", meta.get("task") == "mnist1d" and meta.get("seed") == "1", str(meta))
    again = os.path.join(tmp, "b.safetensors")
    dump(again)
    other = os.path.join(tmp, "c.safetensors")
    dump(other, "train.seed=2")
    same = open(path, "rb").read() == open(again, "rb").read()
    differs = open(path, "rb").read() != open(other, "rb").read()
    check("dump deterministic per seed, different across seeds", same and differs)
    return path


def check_errors(tmp):
    p = subprocess.run([DUMP, "examples/small/adding.cfg", os.path.join(tmp, "x.safetensors")],
                       capture_output=True, text=True, timeout=60)
    check("task_dump refuses a generated task (exit 1)", p.returncode == 1 and "no fixed splits" in p.stderr,
          p.stderr)
    p = subprocess.run([DUMP, CFG], capture_output=True, text=True, timeout=60)
    check("task_dump usage error (exit 2)", p.returncode == 2 and "usage" in p.stderr, p.stderr)


def class_stats(x, y):
    return np.stack([x[y == c].mean(0) for c in range(10)]), np.stack([x[y == c].std(0) for c in range(10)])


def check_statistics(data, ref):
    """Per-class mean and spread curves, and the value quantiles, of cellc's data and the reference
    construction. Two reference datasets of different seeds differ by up to about 0.25 in the
    class means, 0.15 in the class spreads and 0.04 in the quantiles."""
    xa, ya = np.concatenate([data[0], data[2]]), np.concatenate([data[1], data[3]])
    xb, yb = np.concatenate([ref[0], ref[2]]), np.concatenate([ref[1], ref[3]])
    (ma, sa), (mb, sb) = class_stats(xa, ya), class_stats(xb, yb)
    dm, ds = np.abs(ma - mb).max(), np.abs(sa - sb).max()
    q = [0.01, 0.1, 0.5, 0.9, 0.99]
    dq = np.abs(np.quantile(xa, q) - np.quantile(xb, q)).max()
    check(f"class mean curves near the reference's (max diff {dm:.3f} < 0.4)", dm < 0.4)
    check(f"class spread curves near the reference's (max diff {ds:.3f} < 0.25)", ds < 0.25)
    check(f"value quantiles near the reference's (max diff {dq:.3f} < 0.1)", dq < 0.1)


def check_baselines(data, gru_steps):
    torch.set_num_threads(1)
    for name, source, low, high in BASELINES:
        torch.manual_seed(0)
        acc = mnist1d.train(mnist1d.MODELS[name](), *data, gru_steps if name == "gru" else 8000)
        print(f"  {name}: {acc:.1f}% (source: about {source}%)", flush=True)
        check(f"{name} baseline {acc:.1f}% in [{low}, {high}] (source {source}%)", low <= acc <= high)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gru-steps", type=int, default=4000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = check_dump(tmp)
        check_errors(tmp)
        if path:
            data = mnist1d.dumped_dataset(path)
            check_statistics(data, mnist1d.reference_dataset())
            check_baselines(data, a.gru_steps)
    finish()


if __name__ == "__main__":
    main()
