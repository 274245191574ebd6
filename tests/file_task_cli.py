"""file_task_cli.py: `task.name = file` end to end (docs/training.md "Your own data"): datasets the
user brings, as safetensors per split, one safetensors file of every split, and JSON lines; what
the data decide (loss, readout, vocab, classes: read from `cellc train --dry-run`'s table); short
training runs with lengths, bucketing and bidirectional layers; and bad files, each refused with
exit status 1 and a message naming the file, the tensor and the expected shape, leaving an
earlier run in --out as it was; examples/make_dataset.py's data trains examples/file_bidir.cfg's
bidirectional GRU. Ends with "N passed, M failed".

    file_task_cli.py [--cellc bin/cellc]        (from the repository root, /usr/bin/python3)"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import sft  # noqa: E402

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}" + (f"\n    {detail}" if detail else ""))


CELLC = "bin/cellc"


def train(work, task, extra=(), model="", steps=20, out=None, dry=False, sets=()):
    cfg = os.path.join(work, "t.cfg")
    with open(cfg, "w") as f:
        f.write(f"""[task]
name = file
{task}
[model]
layers = 1
width = 8
hidden = 8
{model}
[train]
steps = {steps}
batch = 4
optimizer = adam
lr = 1e-2
[eval]
every = {steps}
[log]
every = 5
""")
    cmd = [CELLC, "train", "stdlib/gru.cell", cfg, "--progress", "none"]
    cmd += ["--dry-run"] if dry else ["--out", out or os.path.join(work, "run"), "--force"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=120)


def shape_of(table, name):
    for line in table.splitlines():
        parts = line.split()
        if parts and parts[0] == name:
            return line[len(parts[0]):].split("]")[0].strip() + "]"
    return None


def main():
    global CELLC
    ap = argparse.ArgumentParser()
    ap.add_argument("--cellc", default="bin/cellc")
    CELLC = ap.parse_args().cellc
    work = tempfile.mkdtemp(prefix="file_task.")
    rng = np.random.default_rng(5)
    try:
        p = lambda n: os.path.join(work, n)  # noqa: E731
        N, T, D = 24, 7, 3
        lengths = rng.integers(1, T + 1, size=N)
        x = rng.standard_normal((N, T, D)).astype(np.float32)
        for i in range(N):
            x[i, lengths[i]:] = np.nan  # padding: never read
        y = rng.integers(0, 4, size=N)
        x0 = np.nan_to_num(x)  # for files without lengths
        tok = rng.integers(0, 11, size=(N, T)).astype(np.int32)
        tags = rng.integers(0, 5, size=(N, T)).astype(np.int64)

        # ---- good data: what the data decide ----
        sft.write(p("a.safetensors"), {"x": x, "y": y.astype(np.int64), "lengths": lengths})
        r = train(work, f"train = {p('a.safetensors')}", dry=True)
        check("float x, integer y per sequence: linear encoder of D inputs, a head of max(y) + 1 classes",
              r.returncode == 0 and shape_of(r.stdout, "encoder.weight") == "[8, 3]" and
              shape_of(r.stdout, "head.weight") == f"[{y.max() + 1}, 8]", r.stdout + r.stderr)
        r = train(work, f"train = {p('a.safetensors')}")
        check("trains with lengths, valid and test carved from train (exit 0, accuracy reported)",
              r.returncode == 0 and "accuracy=" in r.stdout, r.stdout + r.stderr)
        for extra in (["--set", "model.bidirectional=true"], ["--set", "model.bidirectional=true", "--set", "model.join=sum",
                      "--set", "model.readout=mean"], ["--set", "train.bucket=true"]):
            r = train(work, f"train = {p('a.safetensors')}", extra=extra)
            check(f"trains with {' '.join(extra[1::2])}", r.returncode == 0 and "final:" in r.stdout, r.stdout + r.stderr)
        sft.write(p("tok.safetensors"), {"x": tok, "y": tags, "lengths": lengths.astype(np.int32)})
        r = train(work, f"train = {p('tok.safetensors')}", dry=True)
        check("integer x: an embedding of max + 1 tokens; per-step classes",
              r.returncode == 0 and shape_of(r.stdout, "embed.weight") == f"[{tok.max() + 1}, 8]" and
              shape_of(r.stdout, "head.weight") == f"[{tags.max() + 1}, 8]", r.stdout + r.stderr)
        r = train(work, f"train = {p('tok.safetensors')}\nvocab = 40", dry=True)
        check("vocab set: the embedding's size", r.returncode == 0 and shape_of(r.stdout, "embed.weight") == "[40, 8]",
              r.stdout + r.stderr)
        r = train(work, f"train = {p('tok.safetensors')}", extra=["--set", "model.bidirectional=true"])
        check("per-step classes train bidirectional (readout all)", r.returncode == 0 and "final:" in r.stdout,
              r.stdout + r.stderr)
        yreg = rng.standard_normal((N, 2)).astype(np.float32)
        one = {}
        for s, sl in (("train", slice(0, 16)), ("valid", slice(16, 20)), ("test", slice(20, 24))):
            one[f"{s}.x"], one[f"{s}.y"], one[f"{s}.lengths"] = x[sl], yreg[sl], lengths[sl]
        sft.write(p("one.safetensors"), one)
        r = train(work, f"path = {p('one.safetensors')}", dry=True)
        check("one file of every split, float y [N, O]: a head of O outputs", r.returncode == 0 and
              shape_of(r.stdout, "head.weight") == "[2, 8]", r.stdout + r.stderr)
        r = train(work, f"path = {p('one.safetensors')}")
        check("float targets: MSE (no accuracy)", r.returncode == 0 and "final:" in r.stdout and
              "accuracy=nan" in r.stdout.split("final:")[1], r.stdout + r.stderr)
        with open(p("a.jsonl"), "w") as f:
            for i in range(N):
                n = int(lengths[i])
                f.write(json.dumps({"x": tok[i, :n].tolist(), "y": tags[i, :n].tolist()}) + "\n")
        r = train(work, f"train = {p('a.jsonl')}\nformat = jsonl", dry=True)
        check("jsonl token lists, a class per step: embedding of max + 1, T = the longest",
              r.returncode == 0 and shape_of(r.stdout, "embed.weight") == f"[{tok.max() + 1}, 8]" and
              f"T={lengths.max()}" in r.stdout, r.stdout + r.stderr)
        r = train(work, f"train = {p('a.jsonl')}\nformat = jsonl")
        check("jsonl trains", r.returncode == 0 and "final:" in r.stdout, r.stdout + r.stderr)
        with open(p("b.jsonl"), "w") as f:
            for i in range(N):
                n = int(lengths[i])
                f.write(json.dumps({"y": float(yreg[i, 0]), "x": x[i, :n].tolist()}) + "\n")
        r = train(work, f"train = {p('b.jsonl')}\nformat = jsonl", dry=True)
        check("jsonl steps of D values, a float per sequence: linear encoder of D, one output",
              r.returncode == 0 and shape_of(r.stdout, "encoder.weight") == "[8, 3]" and
              shape_of(r.stdout, "head.weight") == "[1, 8]", r.stdout + r.stderr)

        sft.write(p("long.safetensors"), {"x": np.concatenate([x0, x0], 1), "y": y})
        r = train(work, f"train = {p('long.safetensors')}\nvalid = {p('a.safetensors')}", dry=True)
        check("splits of different T: the model's T is the longest", r.returncode == 0 and f"T={2 * T}" in r.stdout,
              r.stdout + r.stderr)
        r = train(work, f"train = {p('a.safetensors')}\nvalid = {p('long.safetensors')}")
        check("a shorter train split is padded (it has lengths)", r.returncode == 0 and "final:" in r.stdout,
              r.stdout + r.stderr)

        # the example: examples/make_dataset.py's sequences train a bidirectional GRU (file_bidir.cfg)
        w = p("waves")
        r = subprocess.run([sys.executable, "examples/make_dataset.py", w, "--n", "400", "--seed", "2"], capture_output=True,
                           text=True)
        check("examples/make_dataset.py writes the splits", r.returncode == 0 and
              sorted(os.listdir(w)) == ["test.safetensors", "train.safetensors", "valid.safetensors"], r.stdout + r.stderr)
        d = sft.load(os.path.join(w, "train.safetensors"))
        check("... x F32 [N, T, 2] of variable lengths, y classes, lengths", d["x"].dtype == np.float32 and
              d["x"].shape == (400, 60, 2) and d["y"].dtype == np.int64 and len(set(d["lengths"].tolist())) > 10, "")
        r = subprocess.run([CELLC, "train", "stdlib/gru.cell", "examples/file_bidir.cfg", "--out", p("ex"), "--progress", "none",
                            "--set", f"task.train={w}/train.safetensors", "--set", f"task.valid={w}/valid.safetensors",
                            "--set", f"task.test={w}/test.safetensors", "--set", "train.steps=200", "--set", "eval.every=100"],
                           capture_output=True, text=True, timeout=300)
        acc = float(r.stdout.split("accuracy=")[-1]) if "final:" in r.stdout else 0
        check(f"examples/file_bidir.cfg trains a bidirectional GRU on them: test accuracy {acc:.3f} >= 0.9",
              r.returncode == 0 and acc >= 0.9, r.stdout + r.stderr)

        # ---- bad data: exit 1, the file, the tensor, the expected shape; an earlier run kept ----
        keep = p("keep")
        r = train(work, f"train = {p('a.safetensors')}", out=keep)
        ck = os.path.join(keep, "checkpoint.safetensors")
        digest = hashlib.sha256(open(ck, "rb").read()).hexdigest() if r.returncode == 0 else None

        def bad(name, tensors, words, task=None, fname="bad.safetensors"):
            path = p(fname)
            if isinstance(tensors, str):
                with open(path, "w") as f:
                    f.write(tensors)
            else:
                sft.write(path, tensors)
            r = train(work, task or f"train = {path}", out=keep)
            msg = r.stderr
            ok = r.returncode == 1 and path in msg and all(w in msg for w in words)
            kept = digest and os.path.exists(ck) and hashlib.sha256(open(ck, "rb").read()).hexdigest() == digest
            check(f"bad file: {name} (exit 1, names {', '.join(repr(w) for w in words)}; the run in --out kept)",
                  ok and kept and "Traceback" not in msg, f"exit {r.returncode}: {msg.strip()}")

        bad("x of F64", {"x": x.astype(np.float64), "y": y}, ["'x'", "F64 [24, 7, 3]", "F32 [N, T, D]"])
        bad("x of 2 dims F32", {"x": x[:, :, 0], "y": y}, ["'x'", "F32 [24, 7]", "[N, T] (token ids)"])
        bad("y of another N (ragged)", {"x": x, "y": y[:20]}, ["'y'", "N = 24"])
        bad("y per step of another T", {"x": tok, "y": tags[:, :5]}, ["'y'", "T = 7", "[N, T]"])
        bad("y of strings' dtype (bool)", {"x": x, "y": y.astype(np.bool_)}, ["'y'"])
        bad("lengths above T", {"x": x, "y": y, "lengths": np.full(N, T + 1)}, ["'lengths'", "1..T = 7"])
        bad("lengths below 1", {"x": x, "y": y, "lengths": np.zeros(N, np.int64)}, ["'lengths'", "is not in 1..T"])
        bad("lengths of another N", {"x": x, "y": y, "lengths": lengths[:3]}, ["'lengths'", "[24]"])
        bad("lengths of floats", {"x": x, "y": y, "lengths": lengths.astype(np.float32)}, ["'lengths'", "integer"])
        xn = x.copy()
        xn[3, 0, 1] = np.nan
        bad("NaN in x within a length", {"x": xn, "y": y, "lengths": lengths}, ["'x'", "NaN", "[3, 0, 1]"])
        xi = x.copy()
        xi[2, 0, 0] = np.inf
        bad("an infinity in x", {"x": xi, "y": y, "lengths": lengths}, ["'x'", "infinity"])
        yf = yreg.copy()
        yf[1, 1] = np.nan
        bad("NaN in float y", {"x": x0, "y": yf}, ["'y'", "NaN"])
        bad("no y", {"x": x}, ["'y'"])
        bad("no x", {"y": y}, ["'x'", "F32 [N, T, D]"])
        bad("negative class", {"x": x0, "y": -y - 1}, ["'y'", "class"])
        bad("negative token", {"x": -tok - 1, "y": y}, ["'x'", "token id"])
        bad("not a safetensors file", "hello", [])
        sft.write(p("v.safetensors"), {"x": x0[:, :, :2].copy(), "y": y})
        bad("valid split of another D", {"x": x0, "y": y}, ["valid split", p("v.safetensors")],
            task=f"train = {p('bad.safetensors')}\nvalid = {p('v.safetensors')}")
        bad("one file without train.x", {"valid.x": x, "valid.y": y}, ["'train.x'"], task=f"path = {p('bad.safetensors')}")
        bad("token above a set vocab", {"x": tok, "y": y}, ["'x'", "vocab = 5"], task=f"train = {p('bad.safetensors')}\nvocab = 5")
        bad("jsonl: ragged steps", '{"x": [[1, 2], [3]], "y": 1}\n', ["line 1", "different sizes"],
            task=f"train = {p('bad.jsonl')}\nformat = jsonl", fname="bad.jsonl")
        bad("jsonl: no y", '{"x": [1, 2]}\n', ["line 1", "no \"y\""], task=f"train = {p('bad.jsonl')}\nformat = jsonl",
            fname="bad.jsonl")
        bad("jsonl: a token that is no integer", '{"x": [1, 2], "y": 0}\n{"x": [1.5], "y": 1}\n', ["line 2", "token id"],
            task=f"train = {p('bad.jsonl')}\nformat = jsonl", fname="bad.jsonl")
        bad("jsonl: a line of another kind", '{"x": [1, 2], "y": 0}\n{"x": [[1.5]], "y": 1}\n', ["line 2", "kind"],
            task=f"train = {p('bad.jsonl')}\nformat = jsonl", fname="bad.jsonl")
        bad("jsonl: NaN", '{"x": [[1, 2]], "y": 0}\n{"x": [[NaN, 1]], "y": 1}\n', ["line 2"],
            task=f"train = {p('bad.jsonl')}\nformat = jsonl", fname="bad.jsonl")
        bad("jsonl: an empty y", '{"x": [1, 2], "y": []}\n', ["line 1", "empty"],
            task=f"train = {p('bad.jsonl')}\nformat = jsonl", fname="bad.jsonl")
        bad("jsonl: an empty file", '\n\n', ["holds no lines"], task=f"train = {p('bad.jsonl')}\nformat = jsonl",
            fname="bad.jsonl")
        r = train(work, f"train = {p('missing.safetensors')}", out=keep)
        check("a missing file: exit 1 naming it", r.returncode == 1 and p("missing.safetensors") in r.stderr, r.stderr)
        r = train(work, f"train = {p('a.safetensors')}", out=keep, model="block = residual\nbidirectional = true")
        check("bidirectional residual blocks refused (exit 1, names the key)",
              r.returncode == 1 and "bidirectional" in r.stderr and "block = stack" in r.stderr, r.stderr)
        r = train(work, f"train = {p('a.safetensors')}", out=keep, model="block = residual\nnorm = batch")
        check("batch norm refused with lengths (exit 1, located at model.norm)",
              r.returncode == 1 and "batch norm" in r.stderr and "norm = batch" in r.stderr, r.stderr)
        r = train(work, f"train = {p('a.safetensors')}", model="block = residual\nnorm = layer\nmixer = glu")
        check("residual blocks with layer norm and a mixer train with lengths", r.returncode == 0 and "final:" in r.stdout,
              r.stdout + r.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
