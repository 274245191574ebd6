"""`cellc train` in the chunked form (train.mode = chunked; docs/cli.md, docs/language.md "The
chunked form"): gla, hgrn2 and mamba2 on selective copying, 30 steps of adamw logged every step,
give each step's training loss equal to the same run in scan mode within 2e-5 (gated_deltanet, the
delta rule: in sequential mode) (float32 sums in
another order, compounding over the steps; 4e-7 seen) and equal final validation loss; so
do a gla model on sequences of their own lengths (a `file` task, variable lengths, stacked and
bidirectional); `cellc eval` of the chunked run's checkpoint gives the same loss in scan mode; auto
runs gla at heads of 16 x 16 chunked; train.mode = chunked on a cell without the form is a located
error (status 1). On cuda-emu, tiny gla and mamba2 models give 4 steps' losses of their scans there
within 2e-5 and their checkpoints' tensors within 2e-3 of each one's largest entry (the losses of
the first steps barely see the cell), so does gla bidirectional on sequences of their own lengths, the mamba2 checkpoint
evaluates there to the loss of the scan and of the cpu's chunked form, so does gated_deltanet (the
delta rule) against its sequential form there, and auto runs it and gla at 16 x 16 chunked.
Ends with "N passed, M failed"."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run, write_in  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp()

SC = """[task]
name     = selective_copying
tokens   = 10
memorize = 5
length   = 20
[model]
layers  = 2
width   = 16
encoder = embed
readout = all
dropout = 0.1
[train]
steps     = 30
batch     = 8
optimizer = adamw
lr        = 1e-2
clip      = 1.0
seed      = 2
[eval]
every   = 30
batches = 2
[log]
every = 1
"""

DIMS = {"gla": ["model.dims.NH=2", "model.dims.K=8", "model.dims.V=8"],
        "hgrn2": ["model.dims.NH=2", "model.dims.K=8", "model.dims.V=8"],
        "mamba2": ["model.dims.NH=2", "model.dims.P=8", "model.dims.N=8"],
        "gated_deltanet": ["model.dims.NH=2", "model.dims.K=8", "model.dims.V=8"]}


def train(name, cell, cfg, mode, sets):
    out = os.path.join(tmp, "%s-%s" % (name, mode))
    args = [CELLC, "train", "stdlib/%s.cell" % cell, cfg, "--out", out, "--progress", "none", "--force",
            "--set", "train.mode=" + mode, "--set", "model.chunk=6"]
    for s in sets:
        args += ["--set", s]
    r = run(args, 600)
    if r.rc != 0:
        return None, out, r.why()
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    return rows, out, r.out + r.err


def compare(name, cell, cfg, sets, other="scan", least=20, tensors=None, other_sets=()):
    a, out, why_a = train(name, cell, cfg, "chunked", sets)
    b, out_b, why_b = train(name + " (other)", cell, cfg, other, sets + list(other_sets))
    if a is None or b is None:
        check(name + ": both runs end with status 0", False, why_a if a is None else why_b)
        return out
    check(name + ": the chunked run says so", "(chunked)" in why_a, why_a[:300])
    ta = [r["loss"] for r in a if r["split"] == "train"]
    tb = [r["loss"] for r in b if r["split"] == "train"]
    rel = max(abs(x - y) / abs(y) for x, y in zip(ta, tb)) if ta and len(ta) == len(tb) else float("inf")
    check("%s: %d training losses equal step by step" % (name, len(ta)), rel <= 2e-5 and len(ta) >= least,
          "largest relative difference %g" % rel)
    va = [r["loss"] for r in a if r["split"] == "valid"]
    vb = [r["loss"] for r in b if r["split"] == "valid"]
    check(name + ": validation losses equal", va and len(va) == len(vb) and
          all(abs(x - y) <= 2e-5 * abs(y) for x, y in zip(va, vb)), "%s vs %s" % (va, vb))
    if tensors:
        # the first steps' losses barely see the cell (a chunk op's backward left out moves them by
        # 2e-6), the weights and adamw's moments after them do (by 1 then)
        ca = sft.load(os.path.join(out, "checkpoint.safetensors"))
        cb = sft.load(os.path.join(out_b, "checkpoint.safetensors"))
        worst = max((float(np.max(np.abs(ca[k].astype(np.float64) - cb[k])) / max(float(np.max(np.abs(cb[k]))), 1e-30)), k)
                    for k in cb if cb[k].size)
        check("%s: every tensor of the checkpoint (weights, adamw's moments) equal within %g of its largest" % (name, tensors),
              set(ca) == set(cb) and worst[0] <= tensors, "largest relative difference %g in %s" % worst)
    return out


sc = write_in(tmp, "sc.cfg", SC)
compare("gated_deltanet (the delta rule, against sequential)", "gated_deltanet", sc, DIMS["gated_deltanet"], "sequential")
for cell in ("gla", "hgrn2", "mamba2"):
    out = compare(cell, cell, sc, DIMS[cell])

# evaluation of the last one's checkpoint (mamba2) in either mode
ev = {}
for mode in ("chunked", "scan"):
    r = run([CELLC, "eval", "stdlib/mamba2.cell", sc, "--checkpoint", os.path.join(out, "checkpoint.safetensors"),
             "--set", "train.mode=" + mode] + sum([["--set", s] for s in DIMS["mamba2"]], []), 300)
    line = [w for w in r.out.split() if w.startswith("loss=")]
    ev[mode] = float(line[0][5:]) if r.rc == 0 and line else None
check("eval: the chunked and the scan model give the same test loss",
      ev["chunked"] is not None and ev["scan"] is not None and abs(ev["chunked"] - ev["scan"]) <= 1e-4 * abs(ev["scan"]),
      str(ev))

# sequences of their own lengths: a file task, lengths 1..T (padding never read: NaN)
rng = np.random.default_rng(5)
T, D = 11, 3
for split, n in (("train", 96), ("valid", 16), ("test", 16)):
    lengths = rng.integers(1, T + 1, size=n)
    lengths[0] = T
    x = rng.standard_normal((n, T, D)).astype(np.float32)
    y = (x[np.arange(n), lengths - 1, 0] > 0).astype(np.int64) + (x[:, 0, 1] > 0)
    for i in range(n):
        x[i, lengths[i]:] = np.nan
    sft.write(os.path.join(tmp, "len_%s.safetensors" % split), {"x": x, "y": y, "lengths": lengths.astype(np.int64)})
LEN = """[task]
name  = file
train = {d}/len_train.safetensors
valid = {d}/len_valid.safetensors
test  = {d}/len_test.safetensors
[model]
layers  = {layers}
width   = 8
encoder = linear
readout = last
bidirectional = {bi}
[train]
steps     = 24
batch     = 8
optimizer = sgd
lr        = 0.1
momentum  = 0.9
seed      = 3
[eval]
every = 24
[log]
every = 1
"""
for layers, bi in ((1, "false"), (2, "true")):
    cfg = write_in(tmp, "len%d.cfg" % layers, LEN.format(d=tmp, layers=layers, bi=bi))
    compare("gla, lengths, %d layer%s%s" % (layers, "s" if layers > 1 else "", ", bidirectional" if bi == "true" else ""),
            "gla", cfg, ["model.dims.NH=2", "model.dims.K=4", "model.dims.V=4"])

# auto: gla at heads of 16 x 16 runs chunked (check's estimates, docs/language.md)
r = run([CELLC, "train", "stdlib/gla.cell", sc, "--dry-run", "--set", "model.dims.NH=2", "--set", "model.dims.K=16",
         "--set", "model.dims.V=16"], 120)
check("auto: gla with heads of 16 x 16 runs chunked", r.rc == 0 and "layer 0: cell gla, mode chunked" in r.out, r.why())

# the errors
r = run([CELLC, "train", "stdlib/gru.cell", sc, "--set", "train.mode=chunked", "--set", "model.hidden=8",
         "--out", os.path.join(tmp, "gru")], 120)
check("a cell without the form: status 1, at the cell, saying why", r.rc == 1 and "stdlib/gru.cell:" in r.err and
      "cannot run cell 'gru' in chunked mode" in r.err, r.why())

# cuda-emu (chunkdev.c's forward and backward apart): a few steps of tiny models against its scans
# (the emulator runs a kernel's threads one by one: slow), and the checkpoint evaluated there
EMU = ["train.device=cuda-emu", "train.steps=4", "train.batch=4", "eval.every=4", "eval.batches=1"]
for cell, dims in (("gla", ["model.dims.NH=2", "model.dims.K=4", "model.dims.V=4"]),
                   ("mamba2", ["model.dims.NH=2", "model.dims.P=4", "model.dims.N=4"])):
    out = compare("cuda-emu " + cell, cell, sc, dims + EMU, least=4, tensors=2e-3)
ev = {}
for mode, dev in (("chunked", "cuda-emu"), ("scan", "cuda-emu"), ("chunked", "cpu")):
    r = run([CELLC, "eval", "stdlib/mamba2.cell", sc, "--checkpoint", os.path.join(out, "checkpoint.safetensors"),
             "--set", "train.mode=" + mode, "--set", "train.device=" + dev, "--set", "eval.batches=1"] +
            sum([["--set", s] for s in ("model.dims.NH=2", "model.dims.P=4", "model.dims.N=4")], []), 300)
    line = [w for w in r.out.split() if w.startswith("loss=")]
    ev[mode + " " + dev] = float(line[0][5:]) if r.rc == 0 and line else None
check("cuda-emu eval: chunked there gives the test loss of its scan and of the cpu's chunked form",
      None not in ev.values() and all(abs(x - ev["scan cuda-emu"]) <= 1e-5 * abs(ev["scan cuda-emu"]) for x in ev.values()),
      str(ev))
# heads of 64 x 64, whose scan does not fit a block of cuda-emu (the layer's layout from the
# interpreter's program), against the cpu's chunked form
compare("cuda-emu gla, heads of 64 x 64, against the cpu", "gla", sc, ["model.dims.NH=1", "model.dims.K=64", "model.dims.V=64",
        "model.chunk=8", "train.device=cuda-emu", "train.steps=3", "eval.every=3", "eval.batches=1"], "chunked", least=3,
        tensors=2e-3, other_sets=["train.device=cpu"])
# sequences of their own lengths (varlen.c on the device), bidirectional
cfg = write_in(tmp, "lenemu.cfg", LEN.format(d=tmp, layers=2, bi="true"))
compare("cuda-emu gla, lengths, 2 layers, bidirectional", "gla", cfg,
        ["model.dims.NH=2", "model.dims.K=4", "model.dims.V=4", "train.device=cuda-emu", "train.steps=4", "eval.every=4"], least=4,
        tensors=2e-3)
# the delta rule chunked on cuda-emu against its sequential form there; auto takes the chunked form
# on cuda-emu as on the cpu (the same estimates)
compare("cuda-emu gated_deltanet (the delta rule, against sequential)", "gated_deltanet", sc,
        ["model.dims.NH=2", "model.dims.K=4", "model.dims.V=4", "train.device=cuda-emu", "train.steps=4", "eval.every=4"],
        "sequential", least=4, tensors=2e-3)
dry = {}
for dev in ("cpu", "cuda-emu"):
    r = run([CELLC, "train", "stdlib/gated_deltanet.cell", sc, "--dry-run", "--set", "train.device=" + dev] +
            sum([["--set", s] for s in DIMS["gated_deltanet"]], []), 120)
    dry[dev] = r.out if r.rc == 0 else r.why()
check("auto: the delta rule runs chunked on the cpu and on cuda-emu",
      all("layer 0: cell gated_deltanet, mode chunked" in dry[d] for d in dry), str(dry))
r = run([CELLC, "train", "stdlib/gla.cell", sc, "--dry-run", "--set", "train.device=cuda-emu", "--set", "model.dims.NH=2",
         "--set", "model.dims.K=16", "--set", "model.dims.V=16"], 120)
check("cuda-emu auto: gla with heads of 16 x 16 runs chunked", r.rc == 0 and "layer 0: cell gla, mode chunked" in r.out, r.why())

shutil.rmtree(tmp, ignore_errors=True)
finish()
