"""export_cli.py: `cellc export` (tests/suite_export.sh). Per model shape (GRU, LSTM, LRU and Mamba,
one or two layers, stacked or residual with norms and mixers, a text task and regression tasks;
and every stdlib cell as one layer on ar2):
train a few steps, `cellc eval` the checkpoint, export it --to torch and --to c, and check that
the test loss of each export over the very batches eval evaluates (build/eval_dump) equals eval's
within 1e-5, and that the C library's step-by-step outputs equal its whole-sequence ones (bit for
bit, tests/export_drv.c). Then the errors: a missing or broken run directory, bad usage."""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run  # noqa: E402

CELLC = os.path.abspath("bin/cellc")
EVAL_DUMP = os.path.abspath("build/eval_dump")
sys.path.insert(0, os.path.abspath("python"))

TEXT = """[task]
name = text
path = docs/language.md
context = 24
[model]
layers = %(layers)d
width = 16
hidden = 16
%(model)s
[train]
steps = 12
batch = 4
lr = 3e-3
[eval]
every = 12
batches = 2
"""

REGRESSION = """[task]
name = %(task)s
length = %(length)d
[model]
layers = %(layers)d
width = 12
%(model)s
[train]
steps = 12
batch = 8
lr = 3e-3
[eval]
every = 12
batches = 3
"""

CASES = [
    # name, cell, template, values
    ("gru_text_2", "stdlib/gru.cell", TEXT, {"layers": 2, "model": ""}),
    ("lstm_text_residual", "stdlib/lstm.cell", TEXT, {"layers": 2, "model": "block = residual\nnorm = layer\nmixer = glu"}),
    ("lru_text_1", "stdlib/lru.cell", TEXT, {"layers": 1, "model": "block = residual\nnorm = rms\nmixer = mlp"}),
    ("gru_adding_1", "stdlib/gru.cell", REGRESSION, {"task": "adding", "length": 20, "layers": 1, "model": "hidden = 12"}),
    ("mamba_sinmix_2", "stdlib/mamba.cell", REGRESSION,
     {"task": "sinmix", "length": 16, "layers": 2, "model": "dims.E = 24\ndims.N = 4\ndims.R = 2\nblock = residual\nnorm = batch\nreadout = mean"}),
    ("lru_ar2_2", "stdlib/lru.cell", REGRESSION, {"task": "ar2", "length": 16, "layers": 2, "model": "hidden = 12"}),
]


def read_sft(path):
    import json
    import struct
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt).reshape(t["shape"])
    return out, head.get("__metadata__", {})


def test_loss(batches, meta, outputs_of, classify):
    """The mean loss over the eval batches, as run_evaluate sums it, from outputs_of(i, x)."""
    rows = [int(r) for r in meta["rows"].split(",")]
    total, counted = 0.0, 0
    for i, valid in enumerate(rows):
        x = batches["x.%d" % i]
        out = np.asarray(outputs_of(i, x), dtype=np.float64)
        if classify:
            cls = batches["cls.%d" % i].astype(np.int64)
            z = out.reshape(-1, out.shape[-1])
            c = cls.reshape(-1)
            bidx = (np.arange(c.size) % x.shape[1]) if cls.ndim == 2 else np.arange(c.size)
            on = (c >= 0) & (bidx < valid)
            zmax = z.max(-1, keepdims=True)
            lse = np.log(np.exp(z - zmax).sum(-1)) + zmax[:, 0]
            total += float((lse - z[np.arange(c.size), np.where(on, c, 0)])[on].sum())
            counted += int(on.sum())
        else:
            y = batches["y.%d" % i].astype(np.float64)
            z, yy = out.reshape(-1, out.shape[-1]), y.reshape(-1, y.shape[-1])
            bidx = np.arange(z.shape[0]) % x.shape[1]
            on = bidx < valid
            if y.ndim == 3 and ("mask.%d" % i) in batches:
                on &= batches["mask.%d" % i].reshape(-1) > 0
            total += float(((z - yy) ** 2)[on].sum())
            counted += int(on.sum()) * z.shape[1]
    return total / counted


def load_module(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case(tmp, name, cell, template, values):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    cfg = os.path.join(d, "task.cfg")
    with open(cfg, "w") as f:
        f.write(template % values)
    rd = os.path.join(d, "run")
    r = run([CELLC, "train", cell, cfg, "--out", rd, "--progress", "none"], 300)
    if r.rc != 0:
        check(name + ": train", False, r.why())
        return
    r = run([CELLC, "eval", cell, os.path.join(rd, "config.cfg"), "--checkpoint", os.path.join(rd, "checkpoint.safetensors")], 300)
    want = float(r.last().split("loss=")[1].split()[0]) if r.rc == 0 else None
    check(name + ": eval", r.rc == 0, r.why())
    dump = os.path.join(d, "eval.safetensors")
    r = run([EVAL_DUMP, os.path.join(rd, "config.cfg"), dump], 60)
    check(name + ": eval_dump", r.rc == 0, r.why())
    if r.rc or want is None:
        return
    batches, meta = read_sft(dump)
    # the same full precision as eval's final line prints (%.6g): compare with the metrics' record
    import json
    with open(os.path.join(rd, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    want = [x for x in recs if x["split"] == "test"][-1]["loss"]
    classify = "cls.0" in batches

    r = run([CELLC, "export", rd, "--to", "torch"], 120)
    check(name + ": export --to torch", r.rc == 0 and os.path.exists(os.path.join(rd, "export-torch", "model.py")), r.why())
    if r.rc == 0:
        mod = load_module(os.path.join(rd, "export-torch", "model.py"), "model_" + name)
        m = mod.Model()
        with torch.no_grad():
            got = test_loss(batches, meta, lambda i, x: m(torch.from_numpy(x.astype(np.int64) if x.dtype == np.int32 else x.copy())).numpy(), classify)
        check(name + ": torch test loss = eval's within 1e-5", abs(got - want) <= 1e-5, "torch %.9g eval %.9g" % (got, want))

    out = os.path.join(d, "c")
    r = run([CELLC, "export", rd, "--to", "c", "--out", out], 120)
    check(name + ": export --to c", r.rc == 0, r.why())
    if r.rc:
        return
    drv = os.path.join(d, "drv")
    r = run(["cc", "-O2", "-march=native", "-Wall", "-Wextra", "-Werror", "-I" + out, "-o", drv, "tests/export_drv.c", os.path.join(out, "model.c"), "-lm"], 120)
    check(name + ": the C library compiles", r.rc == 0, r.why())
    if r.rc:
        return
    # a library others build: it must not need more than C99 (the aligned allocation included)
    r = run(["cc", "-std=c99", "-pedantic", "-O0", "-Wall", "-Wextra", "-Werror", "-I" + out, "-c", "-o", os.path.join(d, "model.o"), os.path.join(out, "model.c")], 120)
    check(name + ": the C library compiles as C99", r.rc == 0, r.why())
    outs, ok = [], True
    for i in range(int(meta["batches"])):
        x = batches["x.%d" % i]
        xin, yout = os.path.join(d, "x.bin"), os.path.join(d, "y.bin")
        x.tofile(xin)
        rr = run([drv, os.path.join(out, "weights.bin"), str(x.shape[0]), str(x.shape[1]), xin, yout], 120)
        ok = ok and rr.rc == 0
        if rr.rc:
            check(name + ": C step by step = whole sequence", False, rr.why())
            return
        outs.append(np.fromfile(yout, dtype=np.float32))
    check(name + ": C step by step = whole sequence", ok)

    def c_out(i, x):
        o = outs[i]
        return o.reshape(x.shape[0], x.shape[1], -1) if o.size % (x.shape[0] * x.shape[1]) == 0 and "cls.%d" % i in batches and batches["cls.%d" % i].ndim == 2 else o.reshape(x.shape[1], -1)
    if batches.get("y.0") is not None and batches["y.0"].ndim == 3:
        c_out = lambda i, x: outs[i].reshape(x.shape[0], x.shape[1], -1)  # noqa: E731
    got = test_loss(batches, meta, c_out, classify)
    check(name + ": C test loss = eval's within 1e-5", abs(got - want) <= 1e-5, "C %.9g eval %.9g" % (got, want))


def stdlib_cases():
    """Every stdlib cell (stdlib/cells.list, its options and dims) as one layer on ar2."""
    from clitest import stdlib_cells
    out = []
    for c in stdlib_cells():
        text = open(c.file).read()
        lines = ["hidden = 8"] if "dim H" in text or "H=%H" in c.dims(8, 8) else []
        for kv in c.dims(8, 8).split(","):
            k, v = kv.split("=")
            if k not in ("D", "H"):
                lines.append("dims.%s = %s" % (k, v))
        for k, v in c.opts.items():
            lines.append("option.%s = %s" % (k, str(v).lower()))
        out.append(("stdlib_" + c.name, c.file, STDLIB, {"model": "\n".join(lines)}))
    return out


STDLIB = """[task]
name = ar2
length = 10
[model]
layers = 1
width = 8
%(model)s
[train]
steps = 6
batch = 8
lr = 3e-3
[eval]
every = 6
batches = 2
"""


def errors(tmp):
    r = run([CELLC, "export", os.path.join(tmp, "nope"), "--to", "c"], 30)
    check("export: a missing run directory is status 1, named", r.rc == 1 and "no such directory" in r.err, r.why())
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    r = run([CELLC, "export", empty, "--to", "torch"], 30)
    check("export: a directory without a run is status 1", r.rc == 1 and "not a run directory" in r.err, r.why())
    broken = os.path.join(tmp, "broken")
    os.makedirs(broken)
    with open(os.path.join(broken, "config.cfg"), "w") as f:
        f.write("[task]\nname = adding\n")
    with open(os.path.join(broken, "checkpoint.safetensors"), "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    r = run([CELLC, "export", broken, "--to", "torch"], 30)
    check("export: a broken checkpoint is status 1", r.rc == 1 and "checkpoint.safetensors" in r.err, r.why())
    r = run([CELLC, "export", empty], 30)
    check("export: no --to is status 2", r.rc == 2 and "--to" in r.err, r.why())
    r = run([CELLC, "export", empty, "--to", "onnx"], 30)
    check("export: an unknown --to is status 2", r.rc == 2 and "onnx" in r.err, r.why())
    r = run([CELLC, "export", "--to", "c"], 30)
    check("export: no RUN_DIR is status 2", r.rc == 2, r.why())
    r = run([CELLC, "export", empty, "--to", "c", "--bogus"], 30)
    check("export: an unknown flag is status 2", r.rc == 2 and "--bogus" in r.err, r.why())


def main():
    only = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="cellc-export-")
    try:
        for name, cell, template, values in CASES + stdlib_cases():
            if not only or name in only:
                case(tmp, name, cell, template, values)
        errors(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
