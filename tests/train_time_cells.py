"""train_time_cells.py: the stdlib cells that read earlier steps (prev, conv: mamba, mamba2, rglru, qrnn)
learn in `cellc train`: on selective copying (4 tokens of 8 at random positions among 12 steps,
reproduced on 4 marker steps), one layer of 32, 300 AdamW steps, each run ends with a test loss
clearly below chance (log 8 = 2.08 nats on the marker steps: under 1.5; measured 1.13 to 1.25)
and below its first logged training loss by more than 0.3 (the first is logged after 50 steps).
Long runs: T = 1000, B = 2 in float32 on cpu (scan and sequential) and cuda-emu (scan) against the
float64 interpreter from the same seed: y, final.* and every grad.* within 1e-4 relative
(measured: 2e-6 for qrnn and rglru, 1.6e-5 for mamba2). About 20 s on two cores.
Ends with "N passed, M failed"."""
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "torch"))
import clitest  # noqa: E402
import numpy as np  # noqa: E402
import sft  # noqa: E402
from clitest import check, finish  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
FINAL = re.compile(r"^final: step=(\d+) loss=(\S+) accuracy=(\S+)$", re.M)
CFG = """[task]
name     = selective_copying
tokens   = 10
memorize = 4
length   = 12

[model]
layers  = 1
width   = 32
encoder = embed
block   = stack
readout = all

[train]
steps        = 300
batch        = 32
optimizer    = adamw
lr           = 5e-3
schedule     = constant
clip         = 1.0
seed         = 1

[eval]
every   = 100
batches = 4

[log]
every = 50
"""
CELLS = {
    "qrnn": ["--set", "model.hidden=32"],
    "rglru": ["--set", "model.hidden=32"],
    "mamba2": ["--set", "model.dims.NH=4", "--set", "model.dims.P=8", "--set", "model.dims.N=8"],
    "mamba": ["--set", "model.dims.N=8", "--set", "model.dims.R=4"],
}
LONG_DIMS = {"qrnn": "H=16,D=8", "rglru": "H=16,D=8", "mamba2": "NH=2,P=8,N=4,D=8", "mamba": "E=16,N=4,R=2,D=8"}


def long_runs(tmp):
    for cell, dims in LONG_DIMS.items():
        res = {}
        for be, mode, prec in (("interp", "auto", "f64"), ("cpu", "scan", "f32"), ("cpu", "sequential", "f32"),
                               ("cuda-emu", "scan", "f32")):
            out = os.path.join(tmp, "%s_%s_%s.safetensors" % (cell, be, mode))
            r = clitest.run([CELLC, "run", "stdlib/%s.cell" % cell, "--dims", dims, "--T", "1000", "--B", "2", "--seed", "4",
                             "--backend", be, "--mode", mode, "--precision", prec, "--out", out], 120)
            if r.rc != 0:
                check("%s T=1000 %s %s runs" % (cell, be, mode), False, r.err[-800:])
                continue
            res[(be, mode)] = sft.read(out)
        ref = res.get(("interp", "auto"))
        for (be, mode), (t, meta) in res.items():
            if ref is None or be == "interp":
                continue
            errs = {k: float(np.max(np.abs(t[k] - v)) / max(float(np.max(np.abs(v))), 1e-300))
                    for k, v in ref[0].items() if k.startswith(("y", "final.", "grad."))}
            worst = max(errs, key=errs.get)
            check("%s T=1000 %s f32 in %s mode against the f64 interpreter (worst %s: %.1e)" % (cell, be, mode, worst,
                                                                                                 errs[worst]),
                  errs[worst] < 1e-4 and meta.get("mode") == mode and len(errs) == len(
                      [k for k in t if k.startswith(("y", "final.", "grad."))]), str(meta))


def main():
    tmp = tempfile.mkdtemp(prefix="cellc-train-time-")
    try:
        cfg = clitest.write_in(tmp, "sc.cfg", CFG)
        for cell, sets in CELLS.items():
            out = os.path.join(tmp, cell)
            r = clitest.run([CELLC, "train", "stdlib/%s.cell" % cell, cfg, "--out", out] + sets, 120)
            m = FINAL.search(r.out)
            if r.rc != 0 or not m:
                check("%s trains on selective copying" % cell, False, "rc %d\n%s\n%s" % (r.rc, r.out[-800:], r.err[-800:]))
                continue
            with open(os.path.join(out, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            first = next(row["loss"] for row in rows if row["split"] == "train")
            final = float(m.group(2))
            check("%s: selective copying's test loss falls from %.3f to %.3f (under 1.5, by over 0.3)" % (cell, first, final),
                  final < 1.5 and first - final > 0.3, r.out[-800:])
        long_runs(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
