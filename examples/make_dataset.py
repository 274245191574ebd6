#!/usr/bin/env python3
"""Writes a dataset for `task.name = file` (docs/training.md "Your own data") from NumPy arrays.

    python3 examples/make_dataset.py OUT_DIR [--n 2000] [--T 60] [--seed 1]

The data: variable-length real-valued sequences, sum of two noisy sines of random frequencies;
the class says whether the higher frequency comes in the first or the second half of the
sequence (the whole sequence matters). Each split is a
safetensors file holding
    x        F32 [N, T, D]   the sequences, padded with zeros after each one's length
    y        I64 [N]         a class per sequence (integers: cross-entropy, readout last)
    lengths  I64 [N]         each sequence's length, 1..T
written by save() below, which needs NumPy only (the `safetensors` package writes the same
files: safetensors.numpy.save_file({"x": x, "y": y, "lengths": lengths}, path)).
examples/file_bidir.cfg trains on OUT_DIR = data/waves."""
import argparse
import json
import os
import struct

import numpy as np

DTYPE_NAMES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<i4"): "I32",
               np.dtype("<i8"): "I64", np.dtype("<u2"): "U16", np.dtype("u1"): "U8"}


def save(tensors, path):
    """A safetensors file of the named NumPy arrays (little-endian, C order)."""
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        a = a.astype(a.dtype.newbyteorder("<"))
        blob = a.tobytes()
        header[name] = {"dtype": DTYPE_NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def make(n, T, rng):
    """n sequences of 2 channels and lengths T/3..T; the class: 1 when the first half is the faster."""
    lengths = rng.integers(T // 3, T + 1, size=n)
    x = np.zeros((n, T, 2), np.float32)
    y = rng.integers(0, 2, size=n)
    for i in range(n):
        L = lengths[i]
        half = L // 2
        slow, fast = rng.uniform(0.05, 0.1), rng.uniform(0.25, 0.4)
        f = np.where((np.arange(L) < half) == (y[i] == 1), fast, slow)
        phase = np.cumsum(2 * np.pi * f) + rng.uniform(0, 2 * np.pi)
        x[i, :L, 0] = np.sin(phase) + 0.1 * rng.standard_normal(L)
        x[i, :L, 1] = np.arange(L) / T  # where in the sequence: the second channel
    return x, y.astype(np.int64), lengths.astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=2000, help="train sequences (valid and test: n / 5 each)")
    ap.add_argument("--T", type=int, default=60, help="the longest sequence")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for split, n in (("train", a.n), ("valid", a.n // 5), ("test", a.n // 5)):
        x, y, lengths = make(n, a.T, rng)
        save({"x": x, "y": y, "lengths": lengths}, os.path.join(a.out, split + ".safetensors"))
    print(f"wrote {a.out}/{{train,valid,test}}.safetensors")


if __name__ == "__main__":
    main()
