"""cellc train and cellc eval end to end on tiny configurations (spec/cli.md): the final line,
metrics.jsonl, config.cfg read back, the checkpoint's contents, exact resume, eval from a
checkpoint, configuration errors, usage errors, NaN, Ctrl-C, --out and train.device = cuda.
One PASS/FAIL line per check; the last line is "N passed, M failed"; exit 1 on any failure."""
import json
import math
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitest  # noqa: E402
from clitest import check, finish, read_header  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 60
tmp = tempfile.mkdtemp(prefix="cellc-train-")

FINAL = re.compile(r"^final: step=(\d+) loss=(\S+) accuracy=(\S+)$")
METRIC_KEYS = {"step", "split", "loss", "accuracy", "lr", "grad_norm", "tokens_per_s", "elapsed_s"}




def cellc(*args):
    return clitest.run([CELLC] + list(args), TIMEOUT)


def write(name, text):
    return clitest.write_in(tmp, name, text)


def outdir(name):
    return os.path.join(tmp, "runs", name)


def read_metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def no_temporaries(d):
    return [f for f in os.listdir(d) if ".tmp" in f]


# Tiny tasks: T = 6, batch 3, a few steps each.
COPYING = """# a tiny copying run
[task]
name     = copying
tokens   = 5
memorize = 2
length   = 2

[model]
layers  = 2
width   = 4
hidden  = 5
dropout = 0.2

[train]
steps    = 12
batch    = 3
lr       = 1e-2
schedule = constant
seed     = 3

[eval]
every   = 4
batches = 2

[log]
every = 2
"""
ADDING = """[task]
name = adding
length = 6
noise_channels = 2

[model]
layers = 1
width = 4
hidden = 4
block = residual
norm = batch
mixer = glu
dropout = 0.1

[train]
steps = 6
batch = 3
optimizer = sgd
lr = 1e-2
seed = 2

[eval]
every = 3
batches = 2

[log]
every = 3
"""
XOR = """[task]
name = temporal_xor
length = 6
vocab = 4
window = 3
train = 24
valid = 7
test = 8

[model]
layers = 2
width = 4
hidden = 4
block = residual
norm = layer
dropout = 0.2

[train]
steps = 8
batch = 3
lr = 1e-2
seed = 4

[eval]
every = 4

[log]
every = 2
"""
copying = write("copying.cfg", COPYING)
adding = write("adding.cfg", ADDING)
xor = write("xor.cfg", XOR)
MGU = "stdlib/mgu.cell"


def check_final(name, r, steps):
    m = FINAL.match(r.last())
    check(f"{name}: exit 0 and the last line is final: step={steps} loss=X accuracy=Y",
          r.rc == 0 and m is not None and int(m.group(1)) == steps, r.why())
    return m


def check_metrics(name, d, steps, classify):
    try:
        rows = read_metrics(d)
    except (OSError, ValueError) as e:
        check(f"{name}: metrics.jsonl is JSON lines", False, str(e))
        return []
    keys_ok = all(set(row) == METRIC_KEYS for row in rows)
    check(f"{name}: every metrics line has exactly the spec keys", keys_ok and rows,
          str([sorted(row) for row in rows if set(row) != METRIC_KEYS][:1]))
    splits = {row.get("split") for row in rows}
    check(f"{name}: metrics splits are train, valid and test", splits == {"train", "valid", "test"}, str(splits))
    train = [row for row in rows if row["split"] == "train"]
    ok = all(isinstance(row["step"], int) and isinstance(row["loss"], float) and math.isfinite(row["loss"])
             and isinstance(row["lr"], (int, float)) and isinstance(row["grad_norm"], float)
             and isinstance(row["tokens_per_s"], float) and isinstance(row["elapsed_s"], float) for row in train)
    if classify:
        ok = ok and all(isinstance(row["accuracy"], (int, float)) for row in rows)
    else:
        ok = ok and all(row["accuracy"] is None for row in rows)
    check(f"{name}: train lines carry numbers (accuracy {'a number' if classify else 'null'})", ok and train,
          str(train[:1]))
    check(f"{name}: the last metrics line is the test split at step {steps}",
          rows and rows[-1]["split"] == "test" and rows[-1]["step"] == steps, str(rows[-1:]))
    return rows


# ---- a plain run: final line, metrics, config.cfg, checkpoint ----

d = outdir("copying")
r = cellc("train", MGU, copying, "--out", d)
m = check_final("copying", r, 12)
rows = check_metrics("copying", d, 12, True)
if m and rows:
    check("copying: the final line is the test line of metrics.jsonl",
          "%.6g" % rows[-1]["loss"] == m.group(2) and "%.6g" % rows[-1]["accuracy"] == m.group(3),
          f"{rows[-1]} vs {r.last()}")
    train_steps = [row["step"] for row in rows if row["split"] == "train"]
    valid_steps = [row["step"] for row in rows if row["split"] == "valid"]
    check("copying: train lines every log.every steps, valid lines every eval.every steps",
          train_steps == [2, 4, 6, 8, 10, 12] and valid_steps == [4, 8, 12], f"{train_steps} {valid_steps}")
check("copying: no temporary file is left in the run directory", os.path.isdir(d) and not no_temporaries(d),
      str(os.listdir(d) if os.path.isdir(d) else d))

cfgpath = os.path.join(d, "config.cfg")
check("copying: config.cfg exists", os.path.isfile(cfgpath))
if os.path.isfile(cfgpath):
    text = open(cfgpath).read()
    check("copying: config.cfg writes every default out",
          all(re.search(rf"^{k}\s*=", text, re.M) for k in ("optimizer", "betas", "warmup", "clip", "device", "mode",
                                                            "norm", "mixer", "readout", "every", "batches")), text[:300])
    d2 = outdir("copying-again")
    r2 = cellc("train", MGU, cfgpath, "--out", d2)
    check("copying: training again from config.cfg gives the same final line",
          r2.rc == 0 and r2.last() == r.last(), r2.why() + " vs " + r.last())
    r3 = cellc("train", MGU, cfgpath, "--set", "train.steps=1", "--out", outdir("copying-one"))
    check_final("copying: config.cfg with train.steps=1", r3, 1)

ckpt = os.path.join(d, "checkpoint.safetensors")
try:
    header, data = read_header(ckpt)
except (OSError, ValueError, struct.error) as e:
    header, data = {}, b""
    check("copying: checkpoint.safetensors has a JSON header", False, str(e))
if header:
    names = set(header) - {"__metadata__"}
    want = {"embed.weight", "head.weight", "head.bias", "layer.0.Wzx", "layer.0.bz", "layer.1.Wix", "layer.1.bh",
            "optim.m.layer.0.Wzx", "optim.v.layer.1.bh", "optim.m.embed.weight", "optim.v.head.weight", "optim.step"}
    check("copying: the checkpoint has layer.K.<param>, embed.weight, head.weight, optimizer moments and step",
          want <= names, str(sorted(want - names)))
    check("copying: embed.weight is F32 [tokens, width], head.weight F32 [classes, width]",
          header.get("embed.weight", {}).get("shape") == [5, 4] and header["embed.weight"]["dtype"] == "F32"
          and header.get("head.weight", {}).get("shape") == [5, 5], str(header.get("embed.weight")))
    st = header.get("optim.step", {})
    step = None
    if st.get("dtype") == "I64":
        a, b = st["data_offsets"]
        step = struct.unpack("<q", data[a:b])[0]
    check("copying: optim.step holds the step (12)", step == 12, str(st))
    ends = sorted(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    check("copying: the tensors fill the file exactly", ends and ends[-1] == len(data), f"{ends[-1:]} vs {len(data)}")
    meta = header.get("__metadata__", {})
    check("copying: __metadata__ holds the cell source", meta.get("cell_source") == open(MGU).read() and
          meta.get("cell") == "mgu", str({k: v[:40] for k, v in meta.items()}))
    conf = meta.get("config", "")
    check("copying: __metadata__ holds the resolved configuration",
          "[train]" in conf and re.search(r"^steps\s*=\s*12\b", conf, re.M) and re.search(r"^memorize\s*=\s*2\b", conf, re.M),
          conf[:200])
    check("copying: __metadata__ step is 12", meta.get("step") == "12", str(meta.get("step")))

# eval from the checkpoint reproduces the final test line
re_ = cellc("eval", MGU, copying, "--checkpoint", ckpt)
check("eval --checkpoint reproduces train's final line", re_.rc == 0 and re_.last() == r.last(),
      re_.why() + " vs " + r.last())
re2 = cellc("eval", MGU, cfgpath, "--checkpoint", ckpt)
check("eval with the run's config.cfg reproduces the final line", re2.rc == 0 and re2.last() == r.last(), re2.why())

r = cellc("eval", MGU, copying, "--checkpoint", ckpt, "--set", "model.hidden=6")
check("eval of a checkpoint written for another model exits 1 naming a tensor",
      r.rc == 1 and "layer.0." in r.err and "checkpoint" in r.err, r.why())
# a cell option differs (see_h adds a param): the cell's difference is named first; past it, with
# --allow-changed-cell, the tensors' own checks still refuse a checkpoint without the model's tensors
r = cellc("eval", MGU, copying, "--checkpoint", ckpt, "--set", "model.option.see_h=true", "--allow-changed-cell")
check("eval (--allow-changed-cell) with a model that has an extra param (see_h) exits 1 naming it",
      r.rc == 1 and "layer.0.Wzh" in r.err, r.why())
d_seeh = outdir("seeh")
cellc("train", MGU, copying, "--out", d_seeh, "--set", "model.option.see_h=true", "--set", "train.steps=2")
r = cellc("eval", MGU, copying, "--checkpoint", os.path.join(d_seeh, "checkpoint.safetensors"), "--allow-changed-cell")
check("eval (--allow-changed-cell) of a checkpoint with a tensor the model lacks (see_h) exits 1 naming it",
      r.rc == 1 and "layer.0.Wzh" in r.err and "not part of this model" in r.err, r.why())


# ---- a cell that changed since the checkpoint was written: refused (exit 1) unless --allow-changed-cell ----

MGU_SRC = open(MGU).read()


def cell_variant(name, old, new):
    assert old in MGU_SRC, old
    return write(name + ".cell", MGU_SRC.replace(old, new))


def changed_refused(name, r, needles):
    missing = [n for n in needles if n not in r.err]
    check(f"changed cell ({name}): exit 1 naming what differs {needles}, and the flag that loads it anyway",
          r.rc == 1 and not missing and "--allow-changed-cell" in r.err and "final:" not in r.out, r.why())


# comments, blank lines and spacing are no change: the checkpoint loads and evaluates as before
reformatted = write("mgu_reformatted.cell", "# the same cell, laid out otherwise\n" + "\n".join(
    " ".join(line.split("#")[0].split()) + ("  # a comment" if i % 3 == 0 else "") for i, line in enumerate(MGU_SRC.splitlines())))
r = cellc("eval", reformatted, copying, "--checkpoint", ckpt)
check("changed cell: comments, blank lines and spacing alone change nothing (eval exits 0, the same final line)",
      r.rc == 0 and r.last() == re_.last() and "warning" not in r.err, r.why() + " vs " + re_.last())
# one coefficient of a state's update
coef = cell_variant("mgu_coef", "h = z * h + (1 - z) * xt", "h = z * h + (1 - 0.5 * z) * xt")
r = cellc("eval", coef, copying, "--checkpoint", ckpt)
changed_refused("a coefficient of the update", r, ["the update of state 'h'", "layer 0", "(1 - z)", "(1 - 0.5 * z)"])
# a coefficient inside a `let` the update reads: the update's formula expands it
let_coef = cell_variant("mgu_let", "let xt = Wix @ x + bh", "let xt = Wix @ x + 2 * bh")
r = cellc("eval", let_coef, copying, "--checkpoint", ckpt)
changed_refused("a coefficient of a let", r, ["the update of state 'h'", "2 * bh"])
# a gate's formula
gate = cell_variant("mgu_gate", "gate z = sigmoid(Wzx @ x + bz)", "gate z = sigmoid(Wzx @ x - bz)")
r = cellc("eval", gate, copying, "--checkpoint", ckpt)
changed_refused("a gate", r, ["gate 'z'", "Wzx @ x - bz"])
check("changed cell: a changed gate is one difference per layer, not also the update that reads it",
      "(and 1 more difference)" in r.err, r.err)
r = cellc("eval", coef, copying, "--checkpoint", ckpt, "--allow-changed-cell")
m = FINAL.match(r.last())
check("changed cell: --allow-changed-cell evaluates it (exit 0) with a warning on stderr naming the difference",
      r.rc == 0 and m is not None and "warning" in r.err and "the update of state 'h'" in r.err and "warning" not in r.out,
      r.why())
# a cell option: a bool (it changes the graph), and a real one the formula reads
r = cellc("eval", MGU, copying, "--checkpoint", ckpt, "--set", "model.option.see_h=true")
changed_refused("option see_h", r, ["option 'see_h' is false in the checkpoint's cell, true here"])
d_leaky = outdir("leaky")
cellc("train", "stdlib/leaky.cell", copying, "--out", d_leaky, "--set", "train.steps=2")
leaky_ckpt = os.path.join(d_leaky, "checkpoint.safetensors")
r = cellc("eval", "stdlib/leaky.cell", copying, "--checkpoint", leaky_ckpt, "--set", "model.option.alpha=0.25")
changed_refused("real option alpha", r, ["option 'alpha' is 0.5 in the checkpoint's cell, 0.25 here"])
r = cellc("eval", "stdlib/leaky.cell", copying, "--checkpoint", leaky_ckpt, "--set", "model.layer.1.option.alpha=0.25")
changed_refused("one layer's option", r, ["layer 1: option 'alpha'"])
r = cellc("eval", "stdlib/leaky.cell", copying, "--checkpoint", leaky_ckpt, "--set", "model.option.alpha=0.5")
check("changed cell: an option set to the value it had is no change", r.rc == 0 and FINAL.match(r.last()), r.why())
# another cell altogether
r = cellc("eval", "stdlib/leaky.cell", copying, "--checkpoint", ckpt)
changed_refused("another cell", r, ["another model, of cell 'mgu'; this one is of cell 'leaky'"])
check("changed cell: another cell is one difference (its definitions are not listed)", "more difference" not in r.err, r.err)

# --resume of a changed cell: refused, the run left as it was; with the flag it goes on (a warning)
d_ch = outdir("changed-resume")
cellc("train", MGU, copying, "--out", d_ch, "--set", "train.steps=4")
ck_ch = os.path.join(d_ch, "checkpoint.safetensors")
before = open(ck_ch, "rb").read()
r = cellc("train", coef, copying, "--out", d_ch, "--resume", "--set", "train.steps=8")
changed_refused("--resume", r, ["the update of state 'h'"])
check("changed cell: a refused --resume leaves the checkpoint as it was", open(ck_ch, "rb").read() == before)
r = cellc("train", reformatted, copying, "--out", d_ch, "--resume", "--set", "train.steps=6")
check("changed cell: --resume of a reformatted cell goes on", r.rc == 0 and "resuming at step 4" in r.out, r.why())
r = cellc("train", coef, copying, "--out", d_ch, "--resume", "--set", "train.steps=8", "--allow-changed-cell")
check("changed cell: --resume --allow-changed-cell goes on with a warning",
      r.rc == 0 and "resuming at step 6" in r.out and "warning" in r.err and r.last().startswith("final: step=8 "), r.why())
r = cellc("eval", coef, copying, "--checkpoint", ck_ch)
check("changed cell: the checkpoint written after --allow-changed-cell is the new cell's", r.rc == 0, r.why())
r = cellc("train", MGU, copying, "--out", outdir("allow-new"), "--allow-changed-cell")
check("--allow-changed-cell without --resume is a usage error (exit 2)", r.rc == 2 and "--resume" in r.err, r.why())

# cellc diag loads checkpoints the same way
r = cellc("diag", coef, copying, "--checkpoint", ckpt, "--out", outdir("diag-changed"))
changed_refused("diag --checkpoint", r, ["the update of state 'h'"])
r = cellc("diag", coef, copying, "--checkpoint", ckpt, "--out", outdir("diag-allowed"), "--allow-changed-cell")
check("changed cell: diag --allow-changed-cell loads it with a warning",
      r.rc == 0 and "warning" in r.err and os.path.isfile(os.path.join(outdir("diag-allowed"), "diag.json")), r.why())


# a checkpoint written before checkpoints held cell_program: its cell_source is checked with the
# options of its configuration, and compared the same way
def without_cell_program(src, dst, **meta):
    header, data = read_header(src)
    header["__metadata__"].pop("cell_program", None)
    header["__metadata__"].update(meta)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return dst


old_ckpt = without_cell_program(ckpt, os.path.join(tmp, "old.safetensors"))
r = cellc("eval", MGU, copying, "--checkpoint", old_ckpt)
check("checkpoint without cell_program: the same cell evaluates (exit 0, the same final line)",
      r.rc == 0 and r.last() == re_.last(), r.why())
r = cellc("eval", reformatted, copying, "--checkpoint", old_ckpt)
check("checkpoint without cell_program: a reformatted cell evaluates", r.rc == 0 and r.last() == re_.last(), r.why())
r = cellc("eval", coef, copying, "--checkpoint", old_ckpt)
changed_refused("checkpoint without cell_program", r, ["the update of state 'h'", "(1 - 0.5 * z)"])
r = cellc("eval", MGU, copying, "--checkpoint", old_ckpt, "--set", "model.option.see_h=true")
changed_refused("checkpoint without cell_program, an option", r, ["option 'see_h'"])
bad_src = without_cell_program(ckpt, os.path.join(tmp, "old-bad.safetensors"), cell_source="cell mgu {")
r = cellc("eval", MGU, copying, "--checkpoint", bad_src)
check("checkpoint whose cell_source does not check: exit 1, it cannot tell (and names the flag)",
      r.rc == 1 and "cannot tell" in r.err and "--allow-changed-cell" in r.err and "final:" not in r.out, r.why())
r = cellc("eval", MGU, copying, "--checkpoint", bad_src, "--allow-changed-cell")
check("checkpoint whose cell_source does not check: --allow-changed-cell evaluates it with a warning",
      r.rc == 0 and r.last() == re_.last() and "warning" in r.err, r.why())


# on a terminal: a progress bar, and still the final line last
def run_on_tty(args):
    master, slave = pty.openpty()
    p = subprocess.Popen([CELLC] + args, stdout=slave, stderr=slave)
    os.close(slave)
    buf = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    os.close(master)
    return p.wait(timeout=TIMEOUT), buf.decode(errors="replace")


rc, text = run_on_tty(["train", MGU, copying, "--out", outdir("tty")])
last = text.replace("\r\n", "\n").strip().split("\n")[-1].split("\x1b[K")[-1]
check("on a terminal: a progress bar with steps/s and ETA, then the final line",
      rc == 0 and "[####" in text and "steps/s" in text and "ETA" in text and FINAL.match(last) is not None,
      repr(text[-300:]))

# ---- progress: a live line only on a terminal, plain lines otherwise; --progress bar|lines|none ----
ESC_OR_CR = re.compile(r"[\r\x1b]")


def raw_run(args, **kw):
    """A command's exit status and its stdout as written (text mode would read \\r as a newline)."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT * 2, **kw)
    return p.returncode, p.stdout.decode(errors="replace")


d = outdir("progress-pipe")
rc, out = raw_run([CELLC, "train", MGU, copying, "--out", d])
check("progress into a pipe: plain lines (no \\r, no ESC), one per log interval and evaluation",
      rc == 0 and not ESC_OR_CR.search(out) and len(re.findall(r"^step \d+/12 loss", out, re.M)) == 6
      and len(re.findall(r"^step \d+ valid loss", out, re.M)) == 3, repr(out[-300:]))
d = outdir("progress-none")
rc, out = raw_run([CELLC, "train", MGU, copying, "--out", d, "--progress", "none"])
check("--progress none: no progress lines (neither the interval nor the evaluation lines), the final line last",
      rc == 0 and not re.search(r"^step ", out, re.M) and not ESC_OR_CR.search(out)
      and FINAL.match(out.strip().splitlines()[-1]) is not None, repr(out[-300:]))
check("--progress none: metrics.jsonl as without it", os.path.isfile(os.path.join(d, "metrics.jsonl"))
      and [(row["step"], row["split"]) for row in read_metrics(d)] ==
      [(row["step"], row["split"]) for row in read_metrics(outdir("progress-pipe"))], d)
rc, out = raw_run([CELLC, "train", MGU, copying, "--out", outdir("progress-bar"), "--progress", "bar"])
last = out.split("\x1b[K")[-1].strip()
check("--progress bar into a pipe: the bar, drawn with \\r and ESC[K, then the final line",
      rc == 0 and "\r\x1b[K[####" in out and "steps/s" in out and FINAL.match(last) is not None
      and not re.search(r"^step \d+/12 loss", out, re.M), repr(out[-300:]))
rc, text = run_on_tty(["train", MGU, copying, "--out", outdir("progress-tty-lines"), "--progress", "lines"])
check("--progress lines on a terminal: plain lines, no \\r or ESC",
      rc == 0 and not ESC_OR_CR.search(text.replace("\r\n", "\n")) and "step 12/12 loss" in text, repr(text[-300:]))
for bad in (["--progress"], ["--progress", "fancy"]):
    r = cellc("train", MGU, copying, "--out", outdir("progress-bad"), *bad)
    check(f"train {' '.join(bad)}: a usage error (exit 2) naming the values", r.rc == 2 and "bar, lines or none" in r.err, r.why())

# under mpirun a rank's stdout is a pseudo-terminal of mpirun's, whatever mpirun writes into: by
# default plain lines there, written by rank 0 alone
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CELLC_THREADS="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
if shutil.which("mpirun"):
    log = os.path.join(tmp, "mpirun.log")
    with open(log, "w") as f:
        p = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", CELLC, "train", MGU, copying,
                            "--out", outdir("progress-mpi"), "--set", "train.batch=4"], stdout=f, stderr=subprocess.STDOUT, env=MPI_ENV,
                           timeout=TIMEOUT * 2)
    with open(log, "rb") as f:
        text = f.read().decode(errors="replace")
    check("under mpirun into a file: plain lines (no \\r, no ESC), from rank 0 alone (each line once)",
          p.returncode == 0 and not ESC_OR_CR.search(text) and len(re.findall(r"^step \d+/12 loss", text, re.M)) == 6
          and len(re.findall(r"^final: ", text, re.M)) == 1, repr(text[-400:]))
else:
    check("mpirun is installed (tests/deps.sh)", False, "no mpirun on PATH")

# an MSE task with a linear encoder, residual blocks and batch norm
d = outdir("adding")
r = cellc("train", "stdlib/lru.cell", adding, "--out", d)
m = check_final("adding (MSE)", r, 6)
check_metrics("adding (MSE)", d, 6, False)
if m:
    check("adding (MSE): accuracy is nan on the final line", m.group(3) == "nan", r.last())
re_ = cellc("eval", "stdlib/lru.cell", adding, "--checkpoint", os.path.join(d, "checkpoint.safetensors"))
check("adding (MSE): eval reproduces the final line (batch norm's running statistics restored)",
      re_.rc == 0 and re_.last() == r.last(), re_.why() + " vs " + r.last())
if os.path.isfile(os.path.join(d, "checkpoint.safetensors")):
    header, _ = read_header(os.path.join(d, "checkpoint.safetensors"))
    want = {"encoder.weight", "encoder.bias", "layer.0.B", "layer.0.norm.running_mean", "layer.0.mixer.w1"}
    check("adding (MSE): the checkpoint has encoder.*, running statistics and mixer weights",
          want <= set(header), str(sorted(want - set(header))))
    check("adding (MSE): a complex param is written [..., 2]", header.get("layer.0.B", {}).get("shape") == [4, 4, 2],
          str(header.get("layer.0.B")))

# a fixed dataset: the whole test split (8 sequences: the last batch counts 2)
d = outdir("xor")
r = cellc("train", MGU, xor, "--out", d)
check_final("temporal_xor", r, 8)
re_ = cellc("eval", MGU, xor, "--checkpoint", os.path.join(d, "checkpoint.safetensors"))
check("temporal_xor: eval reproduces the final line", re_.rc == 0 and re_.last() == r.last(), re_.why())
m = FINAL.match(r.last())
if m:
    acc = float(m.group(3))
    check("temporal_xor: the accuracy counts the 8 test sequences", abs(acc * 8 - round(acc * 8)) < 1e-6, r.last())


# ---- resume ----

def train_rows(d):
    keep = ("step", "split", "loss", "accuracy", "lr", "grad_norm")
    return [tuple(row[k] for k in keep) for row in read_metrics(d) if row["split"] == "train"]


def valid_rows(d):
    return [(row["step"], row["loss"], row["accuracy"]) for row in read_metrics(d) if row["split"] == "valid"]


def resume_check(name, cell, cfg, n, extra=()):
    full, part = outdir(name + "-full"), outdir(name + "-split")
    a = cellc("train", cell, cfg, "--out", full, "--set", f"train.steps={n}", *extra)
    b1 = cellc("train", cell, cfg, "--out", part, "--set", f"train.steps={n // 2}", *extra)
    b2 = cellc("train", cell, cfg, "--out", part, "--resume", "--set", f"train.steps={n}", *extra)
    ok = a.rc == 0 and b1.rc == 0 and b2.rc == 0
    check(f"resume {name}: {n} steps in one go and {n // 2} + --resume both succeed", ok,
          a.why() + " | " + b1.why() + " | " + b2.why())
    if not ok:
        return
    check(f"resume {name}: the resumed run says where it resumes", f"resuming at step {n // 2}" in b2.out, b2.out[:300])
    check(f"resume {name}: identical final line", a.last() == b2.last(), f"{a.last()} vs {b2.last()}")
    ta, tb = train_rows(full), train_rows(part)
    check(f"resume {name}: identical train lines in metrics.jsonl", ta == tb and len(ta) > 2,
          f"\n  full:  {ta}\n  split: {tb}")
    # the first half also evaluates at its own end, step n / 2
    va, vb = valid_rows(full), valid_rows(part)
    steps_a = {row[0] for row in va}
    vb = [row for row in vb if row[0] != n // 2 or row[0] in steps_a]
    check(f"resume {name}: identical valid lines", va == vb and va, f"{va} vs {vb}")


resume_check("copying (adamw, dropout)", MGU, copying, 12)
resume_check("adding (sgd momentum, batch norm, glu)", "stdlib/lru.cell", adding, 6,
             ("--set", "train.momentum=0.9", "--set", "eval.every=1", "--set", "log.every=1"))
resume_check("learned state and gumbel noise", "tests/cells/learned_gate.cell", xor, 8,
             ("--set", "model.cell=learned_gate", "--set", "model.block=stack", "--set", "model.norm=none"))

# --resume of a run that is not there: exit 1 (spec: a checkpoint that is missing), saying so; a new
# run is started without --resume (--force, which starts over a run that is there, is no answer)
r = cellc("train", MGU, copying, "--out", outdir("nothing-here"), "--resume")
check("--resume of a directory that does not exist: exit 1, it says so and suggests a new run, not --force",
      r.rc == 1 and "nothing-here does not exist" in r.err and "without --resume" in r.err and "--force" not in r.err
      and not os.path.exists(outdir("nothing-here")), r.why())
os.makedirs(outdir("empty-dir"))
r = cellc("train", MGU, copying, "--out", outdir("empty-dir"), "--resume")
check("--resume of an empty directory: exit 1, it holds no run (no --force suggested)",
      r.rc == 1 and "holds no run" in r.err and "--force" not in r.err and os.listdir(outdir("empty-dir")) == [], r.why())
d = outdir("no-checkpoint")
os.makedirs(d)
write(os.path.join(d, "metrics.jsonl"), "")
r = cellc("train", MGU, copying, "--out", d, "--resume")
check("--resume of a run without a checkpoint exits 1 naming it (--force starts it over)",
      r.rc == 1 and "checkpoint.safetensors" in r.err and "--force" in r.err, r.why())

# ---- configuration errors: exit 1, file:line, the nearest key ----


def cfg_error(name, text, needles, sets=()):
    path = write(name + ".cfg", text)
    r = cellc("train", MGU, path, "--out", outdir(name), *sets)
    missing = [n for n in needles if n not in r.err]
    check(f"bad cfg ({name}): exit 1 with {needles}", r.rc == 1 and not missing, r.why())
    check(f"bad cfg ({name}): no run directory is written", not os.path.exists(outdir(name)), outdir(name))


base = COPYING.replace("steps    = 12", "steps    = 2")


def line_of(text, needle):
    return next(i + 1 for i, l in enumerate(text.splitlines()) if needle in l)


bad = base.replace("lr       = 1e-2", "lrr      = 1e-2")
cfg_error("unknown_key", bad, [f"unknown_key.cfg:{line_of(bad, 'lrr')}:", "did you mean 'lr'"])
bad = base.replace("dropout = 0.2", "dropout = 1.5")
cfg_error("out_of_range", bad, [f"out_of_range.cfg:{line_of(bad, 'dropout')}:", "dropout", "1"])
bad = base.replace("[train]", "[trian]")
cfg_error("unknown_section", bad, [f"unknown_section.cfg:{line_of(bad, 'trian')}:", "did you mean [train]"])
bad = base.replace("width   = 4", "width   = 4\noption.see_hh = true")
cfg_error("unknown_option", bad, [f"unknown_option.cfg:{line_of(bad, 'see_hh')}:", "did you mean 'see_h'"])
cfg_error("unknown_set", base, ["train.lrr", "did you mean 'lr'"], ("--set", "train.lrr=1"))
bad = base.replace("tokens   = 5", "tokens   = 5\ntokenz   = 5")
cfg_error("unknown_task_key", bad, [f"unknown_task_key.cfg:{line_of(bad, 'tokenz')}:", "did you mean 'tokens'"])

r = cellc("train", "tests/cells/no_such.cell", copying, "--out", outdir("nocell"))
check("a missing .cell file exits 1 naming it", r.rc == 1 and "no_such.cell" in r.err, r.why())
r = cellc("train", MGU, os.path.join(tmp, "no_such.cfg"), "--out", outdir("nocfg"))
check("a missing .cfg file exits 1 naming it", r.rc == 1 and "no_such.cfg" in r.err, r.why())

# ---- usage errors: exit 2 with the usage ----
r = cellc("train", MGU, copying, "--frobnicate")
check("train with an unknown flag exits 2 and prints the usage",
      r.rc == 2 and "--frobnicate" in r.err and "usage" in r.err, r.why())
r = cellc("eval", MGU, copying)
check("eval without --checkpoint exits 2", r.rc == 2 and "usage" in r.err, r.why())
r = cellc("train", MGU)
check("train without TASK.cfg exits 2", r.rc == 2 and "usage" in r.err, r.why())
r = cellc("eval", MGU, copying, "--checkpoint", ckpt, "--out", outdir("x"))
check("eval --out (a train flag) exits 2", r.rc == 2, r.why())

# ---- devices and files: exit 3 ----
r = cellc("train", MGU, copying, "--set", "train.device=cuda", "--out", outdir("cuda"))
check("train.device = cuda exits 3 with a message", r.rc == 3 and "cuda" in r.err, r.why())

d = os.path.join(tmp, "deep", "er", "run")
r = cellc("train", MGU, copying, "--set", "train.steps=2", "--out", d)
check("--out creates the directory and its parents", r.rc == 0 and os.path.isfile(os.path.join(d, "checkpoint.safetensors")),
      r.why())
blocker = write("a_file", "x")
r = cellc("train", MGU, copying, "--set", "train.steps=2", "--out", os.path.join(blocker, "run"))
check("--out under a plain file exits 3", r.rc == 3 and "a_file" in r.err, r.why())

# ---- NaN: exit 3, naming the step; no bad checkpoint ----
d = outdir("nan")
r = cellc("train", MGU, copying, "--out", d, "--set", "train.optimizer=sgd", "--set", "train.lr=1e30")
check("NaN: sgd with lr 1e30 exits 3 naming the step",
      r.rc == 3 and re.search(r"step \d+: .*(NaN|infinite)", r.out + r.err) is not None, r.why())
check("NaN: no checkpoint and no temporary file are left",
      not os.path.exists(os.path.join(d, "checkpoint.safetensors")) and not no_temporaries(d), str(os.listdir(d)))

check("NaN: the stop names the first value that is not finite (sgd with lr 1e30: layer 0's state h, at a step)",
      re.search(r"The first value that is not finite: layer 0, state 'h' \(infinite at step \d of 6, sequence \d\)",
                r.out + r.err) is not None, r.why())

# A cell whose state g grows as exp(k)^t, k = 40 in layer 1 only: g_3 ~ e^80 is finite, g_4 ~ e^120 is
# not; h beside it stays finite. The stop names layer 1, state g, step 4.
BLOW = """cell blow(k: real = 0) {
  input x[D]
  dim   H
  state h[H]
  state g[H]
  param W[H, D] ~ glorot
  h = 0.5 * h + tanh(W @ x)
  g = exp(k) * g + tanh(W @ x)
  output h + g
}
"""
blow = write("blow.cell", BLOW)
for mode, device in (("scan", "cpu"), ("sequential", "cpu"), ("scan", "cuda-emu")):
    r = cellc("train", blow, copying, "--out", outdir(f"nan-blow-{mode}-{device}"), "--set", "model.layer.1.option.k=40",
              "--set", f"train.mode={mode}", "--set", "model.dropout=0", "--set", f"train.device={device}")
    check(f"NaN in the forward ({mode}, {device}): exit 3 naming layer 1, state 'g', step 4 of 6",
          r.rc == 3 and re.search(r"step 1: the loss is (NaN|infinite); stopping\. The first value that is not finite: "
                                  r"layer 1, state 'g' \(infinite at step 4 of 6, sequence \d\)", r.out) is not None, r.why())
# A forward that stays finite (the term 1e-35 / b is at most 667 for b >= 1.5e-38) whose backward
# overflows (d/db = -G (a / b) / b); U is declared first and its gradient stays finite: the stop names
# the first gradient in the order the backward computes them, layer 1's (the last layer's) W.
GRAD = """cell dv {
  input x[D]
  dim   H
  state h[H]
  param U[H, D] ~ glorot
  param W[H, D] ~ glorot
  h = 0.5 * h + tanh(U @ x) + 1e-35 / (1.5e-38 * (1 + sigmoid(W @ x)))
}
"""
r = cellc("train", write("dv.cell", GRAD), copying, "--out", outdir("nan-grad"), "--set", "model.dropout=0")
check("NaN in the backward only: the gradient norm stops it, naming the gradient of layer.1.W",
      r.rc == 3 and re.search(r"the gradient norm is (NaN|infinite); stopping\. The first value that is not finite: "
                              r"the gradient of layer\.1\.W \(", r.out) is not None, r.why())

# The run blows up after a good checkpoint (resumed with a huge learning rate, evaluating every step):
# the checkpoint left behind is still the good one.
d = outdir("nan-later")
r1 = cellc("train", MGU, copying, "--out", d, "--set", "train.steps=4", "--set", "eval.every=2")
good = cellc("eval", MGU, copying, "--checkpoint", os.path.join(d, "checkpoint.safetensors"))
r2 = cellc("train", MGU, copying, "--out", d, "--resume", "--set", "train.steps=12", "--set", "train.lr=1e30",
           "--set", "eval.every=1")
check("NaN after a checkpoint: exits 3 naming the step",
      r1.rc == 0 and r2.rc == 3 and re.search(r"step \d+: .*(NaN|infinite)", r2.out + r2.err) is not None, r2.why())
check("NaN after a checkpoint: the stop names the first value that is not finite",
      re.search(r"The first value that is not finite: (layer \d|param|the )", r2.out) is not None, r2.why())
after = cellc("eval", MGU, copying, "--checkpoint", os.path.join(d, "checkpoint.safetensors"))
m = FINAL.match(after.last())
check("NaN after a checkpoint: the checkpoint left is readable and holds finite params",
      after.rc == 0 and m is not None and math.isfinite(float(m.group(2))), after.why())
check("NaN after a checkpoint: it is the last good one (eval gives the step-4 line)",
      after.last() == good.last(), f"{after.last()} vs {good.last()}")

# ---- Ctrl-C: exit 130, a checkpoint, and --resume goes on from it ----
d = outdir("sigint")
p = subprocess.Popen([CELLC, "train", MGU, copying, "--out", d, "--set", "train.steps=100000000",
                      "--set", "eval.every=100000000", "--set", "log.every=200"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
seen = False
deadline = time.time() + 30
out_lines = []
while time.time() < deadline:
    line = p.stdout.readline()
    if not line:
        break
    out_lines.append(line)
    if line.startswith("step "):
        seen = True
        break
if seen:
    p.send_signal(signal.SIGINT)
try:
    rest, err = p.communicate(timeout=TIMEOUT)
except subprocess.TimeoutExpired:
    p.kill()
    rest, err = p.communicate()
out = "".join(out_lines) + rest
check("Ctrl-C: a progress line came, SIGINT exits 130", seen and p.returncode == 130, f"rc={p.returncode} {out[-300:]!r} {err[-300:]!r}")
mi = re.search(r"interrupted at step (\d+)", out + err)
check("Ctrl-C: it says at which step it stopped", mi is not None, (out + err)[-300:])
ck = os.path.join(d, "checkpoint.safetensors")
step = None
try:
    header, data = read_header(ck)
    a, b = header["optim.step"]["data_offsets"]
    step = struct.unpack("<q", data[a:b])[0]
except (OSError, ValueError, KeyError, struct.error) as e:
    check("Ctrl-C: the checkpoint is readable", False, str(e))
if step is not None:
    check("Ctrl-C: the checkpoint holds the interrupted step", mi is not None and step == int(mi.group(1)) and step >= 200,
          f"{step} vs {mi and mi.group(1)}")
    ev = cellc("eval", MGU, copying, "--checkpoint", ck)
    check("Ctrl-C: eval reads the checkpoint", ev.rc == 0 and FINAL.match(ev.last()) is not None, ev.why())
    total = step + 10
    r = cellc("train", MGU, copying, "--out", d, "--resume", "--set", f"train.steps={total}",
              "--set", "eval.every=100000000", "--set", "log.every=200")
    check("Ctrl-C: --resume continues from the checkpoint", r.rc == 0 and f"resuming at step {step}" in r.out
          and r.last().startswith(f"final: step={total} "), r.why())
    u = cellc("train", MGU, copying, "--out", outdir("sigint-uninterrupted"), "--set", f"train.steps={total}",
              "--set", "eval.every=100000000", "--set", "log.every=200")
    check("Ctrl-C: interrupted and resumed ends as an uninterrupted run", u.rc == 0 and u.last() == r.last(),
          f"{u.last()} vs {r.last()}")
check("Ctrl-C: no temporary file is left", os.path.isdir(d) and not no_temporaries(d), str(os.listdir(d) if os.path.isdir(d) else d))

shutil.rmtree(tmp, ignore_errors=True)
finish()
