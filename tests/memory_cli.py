"""Training memory (language spec section 10) as cellc check figures it and as the allocator counts
it (runtime/support/memuse.h): `cellc run`'s peak_bytes against check's per-run, per-row and
per-token bytes, whole and in chunks; `cellc train`'s memory line against check's figure for the
cell layers; a long scan run with a time convolution on a small stack (its generated kernels keep
their temporaries off the row loop). Ends with "N passed, M failed"."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp()
# The figures are exact for the buffers a run allocates; the bound leaves room for what check does
# not count (a run's gates are written out: gates are no training memory).
BOUND = 0.10


def figure(cell, dims, chunk):
    args = ["check", cell, "--dims", dims, "--json"] + (["--set", "chunk=%d" % chunk] if chunk is not None else [])
    r = run([CELLC, *args], 120)
    if r.rc != 0:
        return None, r.why()
    return json.loads(r.out)["cells"][-1]["memory"], ""


def run_peak(cell, dims, T, B, chunk):
    out = os.path.join(tmp, "run.st")
    args = ["run", cell, "--dims", dims, "--T", str(T), "--B", str(B), "--out", out]
    if chunk is not None:
        args += ["--set", "chunk=%d" % chunk]
    r = run([CELLC, *args], 300)
    if r.rc != 0:
        return None, r.why()
    return int(sft.read(out)[1]["peak_bytes"]), ""


cases = [("stdlib/mamba.cell", "D=24", 0), ("stdlib/mamba.cell", "D=24", 16), ("stdlib/mamba.cell", "D=24", None),
         ("stdlib/gla.cell", "NH=2,K=8,V=8,D=16", 0), ("stdlib/gla.cell", "NH=2,K=8,V=8,D=16", 32),
         ("stdlib/gated_deltanet.cell", "NH=2,K=8,V=8,D=16", 20), ("stdlib/lru.cell", "H=16,D=8", None)]
T, B = 200, 3
for cell, dims, chunk in cases:
    name = "%s %s chunk=%s" % (os.path.basename(cell), dims, "default" if chunk is None else chunk)
    m, why = figure(cell, dims, chunk)
    check("check --json has the memory figures: " + name,
          m is not None and all(k in m for k in ("train_peak_bytes_per_token", "chunk", "row_bytes", "run_bytes")),
          why or str(m))
    if m is None:
        continue
    if chunk is not None:
        check("check's chunk is the one asked: " + name, m["chunk"] == chunk, str(m))
    predicted = m["run_bytes"] + B * (m["row_bytes"] + T * m["train_peak_bytes_per_token"])
    peak, why = run_peak(cell, dims, T, B, chunk)
    check("run's allocator high-water mark within %d%% of check's figure: %s" % (100 * BOUND, name),
          peak is not None and abs(peak / predicted - 1) <= BOUND, why or "peak %s, check %d" % (peak, predicted))

# chunks bound the memory: a state every L steps, not every step
whole, _ = figure("stdlib/mamba.cell", "D=24", 0)
chunked, _ = figure("stdlib/mamba.cell", "D=24", 16)
check("mamba in chunks of 16 keeps fewer bytes per token than whole sequences",
      whole and chunked and 4 * chunked["train_peak_bytes_per_token"] < whole["train_peak_bytes_per_token"],
      "%s %s" % (whole, chunked))

# cellc train: the memory line's two figures for the cell layers
cfg = os.path.join(tmp, "copy.cfg")
with open(cfg, "w") as f:
    f.write("[task]\nname = copying\ntokens = 10\nmemorize = 5\nlength = 150\n"
            "[model]\nlayers = 2\nwidth = 16\nencoder = embed\nblock = stack\nreadout = all\n"
            "[train]\nsteps = 2\nbatch = 4\noptimizer = adamw\nlr = 1e-3\nseed = 1\n"
            "[eval]\nevery = 1\nbatches = 1\n[log]\nevery = 1\n")
for chunk in (0, 16):
    out = os.path.join(tmp, "train%d" % chunk)
    r = run([CELLC, "train", "stdlib/mamba.cell", cfg, "--set", "model.chunk=%d" % chunk, "--out", out,
             "--progress", "none"], 300)
    line = next((ln for ln in r.out.splitlines() if ln.startswith("memory: ")), "")
    words = line.replace("(", " ").split()
    try:
        more = float(words[words.index("more") - 2])
        fig = float(words[words.index("figure:") + 1])
    except (ValueError, IndexError):
        more = fig = None
    check("train prints its memory line (chunk=%d)" % chunk, r.rc == 0 and more is not None, r.why() + line)
    check("train: the cell layers' runs within %d%% of check's figure (chunk=%d)" % (100 * BOUND, chunk),
          more is not None and fig > 0 and abs(more / fig - 1) <= BOUND, line)
    check("train: the last line is still final: (chunk=%d)" % chunk, r.out.strip().splitlines()[-1].startswith("final: "),
          r.out[-300:])

# a scan with a time convolution over many rows, on a 1 MB stack: a temporary allocated inside the
# row loop would take stack on every row and overflow it
out = os.path.join(tmp, "long.st")
p = subprocess.run(["sh", "-c", 'ulimit -s 1024 && exec "$0" "$@"', CELLC, "run", "stdlib/mamba.cell", "--dims", "D=32",
                    "--T", "3000", "--B", "2", "--set", "chunk=0", "--out", out], capture_output=True, text=True, timeout=300)
check("mamba scan, T = 3000, B = 2, whole sequence, on a 1 MB stack", p.returncode == 0,
      "rc %d %s" % (p.returncode, p.stderr[-300:]))
finish()
