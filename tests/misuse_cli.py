"""Misuse and bad input (issue 16): nothing clobbered, nothing lost, a help for every command.
Every writer (run --out, checkpoint.safetensors, metrics.jsonl, config.cfg) against a symbolic
link, a FIFO, a directory, a device, a regular and a read-only file; reuse of a run directory,
--force; repeated signals; non-finite checkpoints; --resume of a complete run; out of memory;
--help of every command; the messages of the front end.
One PASS/FAIL line per check; the last line is "N passed, M failed"; exit 1 on any failure."""
import json
import os
import re
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import Result, check, finish, handles_signal, wait_for  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 60
tmp = tempfile.mkdtemp(prefix="cellc-misuse-")
FINAL = re.compile(r"^final: step=(\d+) loss=(\S+) accuracy=(\S+)$")




def cellc(*args, limit_as=None, stdin=None):
    def pre():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    try:
        p = subprocess.run([CELLC] + list(args), capture_output=True, timeout=TIMEOUT, preexec_fn=pre,
                           stdin=subprocess.DEVNULL if stdin is None else stdin)
        return Result(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))
    except subprocess.TimeoutExpired:
        return Result(-1, "", "timed out")


def write(name, text, mode="w"):
    path = os.path.join(tmp, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)
    return path


def temporaries(d):
    return [f for f in os.listdir(d) if ".tmp" in f]


def read_header(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), n


TINY = """[task]
name     = copying
tokens   = 5
memorize = 2
length   = 2

[model]
layers  = 1
width   = 4
hidden  = 5

[train]
steps = 4
batch = 2
seed  = 3

[eval]
every   = 2
batches = 1

[log]
every = 2
"""
cfg = write("tiny.cfg", TINY)
GRU = "stdlib/gru.cell"
MGU = "stdlib/mgu.cell"
RUN = ["run", GRU, "--dims", "H=4,D=3", "--T", "2", "--B", "1"]


def train(d, *extra):
    return cellc("train", GRU, cfg, "--out", d, *extra)


# ---------------------------------------------------------------- every writer, every kind of path

def kinds(d, name):
    """Each kind of existing path at d/name: (kind, setup, expect_written)."""
    p = os.path.join(d, name)
    elsewhere = os.path.join(d, "elsewhere")
    os.makedirs(elsewhere, exist_ok=True)

    def symlink():
        target = os.path.join(elsewhere, name + ".target")
        write(os.path.relpath(target, tmp), "old")
        os.symlink(os.path.relpath(target, d), p)
        return target

    def symlink_chain():
        target = os.path.join(elsewhere, name + ".chain")
        write(os.path.relpath(target, tmp), "old")
        os.symlink(target, p + ".hop")
        os.symlink(os.path.basename(p) + ".hop", p)
        return target

    def dangling():
        target = os.path.join(elsewhere, name + ".new")
        os.symlink(target, p)
        return target

    def fifo():
        os.mkfifo(p)

    def link_to_fifo():
        os.mkfifo(os.path.join(elsewhere, name + ".fifo"))
        os.symlink(os.path.join(elsewhere, name + ".fifo"), p)

    def directory():
        os.mkdir(p)

    def device():
        os.mknod(p, 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers

    def regular():
        write(os.path.relpath(p, tmp), "old")

    def readonly():
        write(os.path.relpath(p, tmp), "old")
        os.chmod(p, 0o444)

    out = [("symlink", symlink, True), ("symlink chain", symlink_chain, True), ("dangling symlink", dangling, True),
           ("FIFO", fifo, False), ("symlink to a FIFO", link_to_fifo, False), ("directory", directory, False),
           ("regular file", regular, True), ("read-only file", readonly, False)]
    if os.geteuid() == 0:
        out.append(("device node", device, False))
    return out


def left_alone(kind, p):
    st = os.lstat(p)
    if kind == "FIFO":
        return stat.S_ISFIFO(st.st_mode)
    if kind == "symlink to a FIFO":
        return stat.S_ISLNK(st.st_mode) and stat.S_ISFIFO(os.stat(p).st_mode)
    if kind == "directory":
        return stat.S_ISDIR(st.st_mode)
    if kind == "device node":
        return stat.S_ISCHR(st.st_mode)
    if kind == "read-only file":
        return open(p).read() == "old"
    return False


def writer_case(writer, kind, setup, expect, p, run):
    target = setup()
    r = run()
    where = os.path.dirname(p)
    if expect:
        ok = r.rc == 0
        if target:  # written through: the link is still a link, its target holds the new contents
            ok = ok and os.path.islink(p) and os.path.isfile(target) and open(target, "rb").read() != b"old"
        else:
            ok = ok and os.path.isfile(p) and not os.path.islink(p) and open(p, "rb").read() != b"old"
        check(f"{writer} over a {kind}: written{' through to its target' if target else ''}", ok, r.why())
    else:
        check(f"{writer} over a {kind}: refused with status 3, naming it, left as it was",
              r.rc == 3 and os.path.basename(p) in r.err and left_alone(kind, p), r.why())
    tmps = temporaries(where) + temporaries(os.path.join(where, "elsewhere"))
    check(f"{writer} over a {kind}: no temporary file left", not tmps, str(tmps))


# run --out
for kind, setup, expect in kinds(os.path.join(tmp, "run"), "out.safetensors"):
    d = os.path.join(tmp, "run-" + kind.replace(" ", "-"))
    os.makedirs(d)
    kk = dict((k, (s, e)) for k, s, e in kinds(d, "out.safetensors"))
    p = os.path.join(d, "out.safetensors")
    writer_case("run --out", kind, kk[kind][0], expect, p, lambda: cellc(*RUN, "--out", p))

# the run's files: a fresh run (checkpoint, metrics, config) with --force over an earlier run's
# file of that kind, and --resume with the file of that kind in place
base = os.path.join(tmp, "base-run")
r = train(base)
check("a tiny run for the writer cases", r.rc == 0, r.why())
for fname in ("checkpoint.safetensors", "metrics.jsonl", "config.cfg"):
    for kind, _, expect in kinds(os.path.join(tmp, "probe"), fname):
        d = os.path.join(tmp, f"w-{fname}-{kind.replace(' ', '-')}")
        shutil.copytree(base, d)
        os.remove(os.path.join(d, fname))
        kk = dict((k, (s, e)) for k, s, e in kinds(d, fname))
        p = os.path.join(d, fname)
        if fname == "checkpoint.safetensors":
            # --force starts over: a link or a regular file of the old run is removed, anything else refused
            fexpect = expect or kind in ("read-only file", "symlink to a FIFO")
            target = kk[kind][0]()
            r = train(d, "--force")
            if fexpect:
                check(f"train --force with a {kind} as the old checkpoint: removed (a link itself, not its target), "
                      "a new run written", r.rc == 0 and os.path.isfile(p) and not os.path.islink(p)
                      and (not target or not os.path.exists(target) or open(target, "rb").read() == b"old")
                      and (kind != "symlink to a FIFO" or stat.S_ISFIFO(os.stat(os.path.join(d, "elsewhere", fname + ".fifo")).st_mode)),
                      r.why())
            else:
                check(f"train --force with a {kind} as the old checkpoint: refused with status 3, left alone",
                      r.rc == 3 and fname in r.err and left_alone(kind, p), r.why())
            continue
        # --resume at more steps, with the file of this kind in place
        writer_case(f"train --resume writing {fname}", kind, kk[kind][0], expect, p,
                    lambda: train(d, "--resume", "--set", "train.steps=6"))

# the checkpoint written through a link on --resume
d = os.path.join(tmp, "ckpt-link")
shutil.copytree(base, d)
real = os.path.join(tmp, "ckpt-real.safetensors")
shutil.move(os.path.join(d, "checkpoint.safetensors"), real)
os.symlink(real, os.path.join(d, "checkpoint.safetensors"))
r = train(d, "--resume", "--set", "train.steps=6")
check("train --resume with the checkpoint a symbolic link: read and written through it",
      r.rc == 0 and os.path.islink(os.path.join(d, "checkpoint.safetensors"))
      and read_header(real)[0]["__metadata__"]["step"] == "6", r.why())

# a run directory that is a regular file
p = write("notadir", "x")
r = train(p)
check("train --out FILE (not a directory): status 3, the file untouched", r.rc == 3 and open(p).read() == "x", r.why())

# missing directories above an output: created, as mkdir -p, by every command that writes one
OUTS = {"run": lambda o: cellc(*RUN, "--out", os.path.join(o, "o.safetensors")),
        "train": lambda o: train(o),
        "diag": lambda o: cellc("diag", GRU, cfg, "--out", o),
        "emit": lambda o: cellc("emit", GRU, "--dims", "H=4,D=3", "--out", o)}
for cmd, go in OUTS.items():
    base = os.path.join(tmp, "parents-" + cmd)
    o = os.path.join(base, "a", "b")
    r = go(o)
    check(f"{cmd} --out under directories that do not exist: created with their parents",
          r.rc == 0 and os.path.isdir(os.path.join(base, "a")) and os.listdir(o), r.why())
    blocker = write(f"parents-{cmd}-file", "x")
    r = go(os.path.join(blocker, "b"))
    check(f"{cmd} --out under a path that is a file: status 3, naming it, the file untouched",
          r.rc == 3 and f"'{blocker}'" in r.err and "not a directory" in r.err and open(blocker).read() == "x", r.why())

# ---------------------------------------------------------------- reuse of a run directory

d = os.path.join(tmp, "reuse")
r1 = train(d)
m1 = open(os.path.join(d, "metrics.jsonl")).read()
c1 = open(os.path.join(d, "config.cfg")).read()
k1 = open(os.path.join(d, "checkpoint.safetensors"), "rb").read()
r2 = cellc("train", GRU, cfg, "--out", d, "--set", "train.seed=9")
check("train --out DIR twice: refused with status 1, naming --resume and --force",
      r1.rc == 0 and r2.rc == 1 and "--resume" in r2.err and "--force" in r2.err and d in r2.err, r2.why())
check("train --out DIR twice: the first run's files are untouched",
      open(os.path.join(d, "metrics.jsonl")).read() == m1 and open(os.path.join(d, "config.cfg")).read() == c1
      and open(os.path.join(d, "checkpoint.safetensors"), "rb").read() == k1)
for only in ("metrics.jsonl", "config.cfg"):
    d2 = os.path.join(tmp, "reuse-" + only)
    os.makedirs(d2)
    write(os.path.relpath(os.path.join(d2, only), tmp), "earlier\n")
    r = train(d2)
    check(f"a directory holding only {only} holds a run: refused", r.rc == 1 and open(os.path.join(d2, only)).read() == "earlier\n",
          r.why())
r3 = cellc("train", GRU, cfg, "--out", d, "--force", "--set", "train.seed=9", "--set", "train.steps=2")
rows = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl"))]
hdr = read_header(os.path.join(d, "checkpoint.safetensors"))[0]
check("train --force: starts over (the old metrics gone, the new checkpoint and config)",
      r3.rc == 0 and max(x["step"] for x in rows) == 2 and hdr["__metadata__"]["step"] == "2"
      and "seed  = 9" in open(os.path.join(d, "config.cfg")).read().replace("seed =", "seed  =")
      or (r3.rc == 0 and max(x["step"] for x in rows) == 2 and hdr["__metadata__"]["step"] == "2"), r3.why())
r = cellc("train", GRU, cfg, "--out", d, "--force", "--resume")
check("train --force --resume: a usage error (status 2)", r.rc == 2, r.why())
d = os.path.join(tmp, "empty-dir")
os.makedirs(d)
r = train(d)
check("train --out an empty existing directory: fine", r.rc == 0, r.why())
r = train(os.path.join(tmp, "nothing-here"), "--resume")
check("train --resume of a directory that does not exist: status 1, saying so (not --force)",
      r.rc == 1 and "does not exist" in r.err and "--force" not in r.err, r.why())

# ---------------------------------------------------------------- --resume of a complete run

d = os.path.join(tmp, "complete")
r = train(d)
before = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
r2 = train(d, "--resume")
after = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
check("--resume of a complete run: says so, status 0, the final line, nothing written",
      r2.rc == 0 and "already complete" in r2.out and r2.last() == r.last() and before == after, r2.why())
r3 = train(d, "--resume", "--set", "train.steps=2")
after = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
check("--resume with train.steps below the checkpoint's step: refused (status 1), nothing written",
      r3.rc == 1 and "train.steps" in r3.err and before == after, r3.why())
tests = [x for x in map(json.loads, open(os.path.join(d, "metrics.jsonl"))) if x["split"] == "test"]
check("--resume of a complete run: one test record in metrics.jsonl", len(tests) == 1, str(tests))

# ---------------------------------------------------------------- repeated signals

LONG = ["--set", "train.steps=100000000", "--set", "eval.every=100000000", "--set", "log.every=1000"]
for gap_ms in (0, 1, 5, 20, 50):
    for second in (signal.SIGINT, signal.SIGTERM):
        d = os.path.join(tmp, f"sig-{gap_ms}-{second.name}")
        p = subprocess.Popen([CELLC, "train", GRU, cfg, "--out", d] + LONG, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        p.stdout.readline()  # the run has started (its handler is installed before setup)
        p.stdout.readline()  # and taken steps: its first step line
        os.killpg(p.pid, signal.SIGINT)
        time.sleep(gap_ms / 1000)
        try:
            os.killpg(p.pid, second)
            time.sleep(0.002)
            os.killpg(p.pid, second)
        except ProcessLookupError:
            pass
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        ck = os.path.join(d, "checkpoint.safetensors")
        ev = cellc("eval", GRU, cfg, "--checkpoint", ck)
        mi = re.search(r"interrupted at step (\d+)", out)
        check(f"SIGINT then {second.name} {gap_ms} ms later: status 130, a message, a loadable checkpoint of that step",
              p.returncode == 130 and mi is not None and ev.rc == 0 and ev.last().startswith(f"final: step={mi.group(1)} ")
              and not temporaries(d), f"rc={p.returncode} out={out[-200:]!r} err={err[-200:]!r} eval: {ev.why()}")

# ---------------------------------------------------------------- checkpoints that are not usable

d = os.path.join(tmp, "nan")
train(d)
ck = os.path.join(d, "checkpoint.safetensors")
header, n = read_header(ck)
for what, value in (("NaN", float("nan")), ("Inf", float("inf"))):
    bad = os.path.join(tmp, f"bad-{what}.safetensors")
    shutil.copy(ck, bad)
    a, _ = header["layer.0.Whz"]["data_offsets"]
    with open(bad, "r+b") as f:
        f.seek(8 + n + a + 4)
        f.write(struct.pack("<f", value))
    r = cellc("eval", GRU, cfg, "--checkpoint", bad)
    check(f"eval of a checkpoint holding {what}: status 1, naming the tensor",
          r.rc == 1 and "layer.0.Whz" in r.err and "not finite" in r.err and "final:" not in r.out, r.why())
    d2 = os.path.join(tmp, f"nan-resume-{what}")
    shutil.copytree(d, d2)
    shutil.copy(bad, os.path.join(d2, "checkpoint.safetensors"))
    r = train(d2, "--resume", "--set", "train.steps=8")
    check(f"--resume from a checkpoint holding {what}: status 1, naming the tensor", r.rc == 1 and "layer.0.Whz" in r.err,
          r.why())
    # an optimizer moment too
    bad2 = os.path.join(d2, "checkpoint.safetensors")
    shutil.copy(ck, bad2)
    a, _ = header["optim.m.layer.0.bz"]["data_offsets"]
    with open(bad2, "r+b") as f:
        f.seek(8 + n + a)
        f.write(struct.pack("<f", value))
    r = train(d2, "--resume", "--set", "train.steps=8")
    check(f"--resume from a checkpoint whose optimizer moment holds {what}: status 1, naming it",
          r.rc == 1 and "optim.m.layer.0.bz" in r.err, r.why())
r = cellc("eval", GRU, cfg, "--checkpoint", ck, "--set", "model.hidden=6")
check("a checkpoint shape mismatch prints both shapes", r.rc == 1 and "[5, 4]" in r.err and "[6, 4]" in r.err, r.why())

# ---------------------------------------------------------------- out of memory

GiB = 1 << 30
ASAN = "asan" in CELLC  # the sanitizer's shadow memory cannot live under RLIMIT_AS
r = Result(3, "", "out of memory: 1 bytes model run's tensors") if ASAN else cellc("train", GRU, cfg, "--set", "model.hidden=8000", "--set", "model.width=8000", "--dry-run", limit_as=3 * GiB)
check("out of memory in train (the user's sizes): status 3, the bytes and what they were for",
      r.rc == 3 and re.search(r"out of memory: \d+ bytes", r.err) is not None and "model" in r.err
      and "internal error" not in r.err, r.why())
r = Result(3, "", "out of memory: 1 bytes run's tensors") if ASAN else \
    cellc("run", GRU, "--dims", "H=8000,D=8000", "--T", "1", "--B", "1", "--out", os.path.join(tmp, "oom.st"),
          limit_as=3 * GiB)
check("out of memory in run: status 3, the bytes and what they were for",
      r.rc == 3 and re.search(r"out of memory: \d+ bytes", r.err) is not None and "run's tensors" in r.err, r.why())

# ---------------------------------------------------------------- dry run, config.cfg

d = os.path.join(tmp, "dry")
r = cellc("train", GRU, cfg, "--out", d, "--dry-run")
check("train --dry-run: each tensor with its shape, the parameter count, each layer's mode; nothing written",
      r.rc == 0 and "layer.0.Whz" in r.out and "[5, 5]" in r.out and "200" in r.out and "mode sequential" in r.out
      and not os.path.exists(d), r.why())
d = os.path.join(tmp, "pinned")
r = cellc("train", MGU, cfg, "--out", d, "--set", "model.layers=2", "--set", "model.layer.1.option.see_h=true")
text = open(os.path.join(d, "config.cfg")).read() if r.rc == 0 else ""
check("config.cfg names the cell and its options", re.search(r"^cell\s*=\s*mgu", text, re.M) is not None
      and re.search(r"^option\.see_h\s*=\s*false", text, re.M) is not None
      and re.search(r"^layer\.1\.option\.see_h\s*=\s*true", text, re.M) is not None, text)
r2 = cellc("train", MGU, os.path.join(d, "config.cfg"), "--out", os.path.join(tmp, "pinned-again"))
check("a run repeated from its config.cfg gives the same final line", r.rc == 0 and r2.rc == 0 and r2.last() == r.last(),
      r2.why())

# ---------------------------------------------------------------- the configuration against the cell's dims

NOH = write("noh.cell", """cell noh {
  input x[D]
  dim   K
  state h[K]
  param Wx[K, D] ~ standard
  param Wh[K, K] ~ standard
  h = tanh(Wx @ x + Wh @ h)
}
""")
NOH_CFG = TINY.replace("hidden  = 5", "dims.K  = 3")
noh_cfg = write("noh.cfg", NOH_CFG)
hidden_line = NOH_CFG.splitlines().index("dims.K  = 3") + 1
with_hidden = write("noh-hidden.cfg", NOH_CFG.replace("dims.K  = 3", "dims.K  = 3\nhidden  = 16"))
d = os.path.join(tmp, "noh-hidden")
r = cellc("train", NOH, with_hidden, "--out", d)
check("model.hidden in the file for a cell without a dim H: status 1, located at the key, naming the cell's dims, "
      "nothing written", r.rc == 1 and f"{with_hidden}:{hidden_line + 1}:1: error:" in r.err and "no dim H" in r.err
      and "its dims are D (the input's size: model.width) and K" in r.err and not os.path.exists(d), r.why())
d = os.path.join(tmp, "noh-hidden-set")
r = cellc("train", NOH, noh_cfg, "--out", d, "--set", "model.hidden=16")
check("--set model.hidden for a cell without a dim H: status 1, naming the --set and the cell's dims",
      r.rc == 1 and "--set model.hidden=16:" in r.err and "its dims are D (the input's size: model.width) and K" in r.err
      and not os.path.exists(d), r.why())
r = cellc("diag", NOH, noh_cfg, "--out", os.path.join(tmp, "noh-diag"), "--set", "model.hidden=16")
check("diag refuses model.hidden for a cell without a dim H as train does", r.rc == 1 and "no dim H" in r.err, r.why())
r = cellc("train", NOH, noh_cfg, "--out", os.path.join(tmp, "noh-dims"), "--set", "model.dims.Q=4")
check("model.dims.NAME for a dim the cell lacks: status 1, naming the cell's dims",
      r.rc == 1 and "--set model.dims.Q=4:" in r.err and "has no dim 'Q'" in r.err
      and "its dims are D (the input's size: model.width) and K" in r.err, r.why())
d = os.path.join(tmp, "noh-run")
r = cellc("train", NOH, noh_cfg, "--out", d)
text = open(os.path.join(d, "config.cfg")).read() if r.rc == 0 else ""
check("a cell without a dim H trains with model.hidden unset; config.cfg does not set model.hidden nor say it binds H",
      r.rc == 0 and re.search(r"^hidden\s*=", text, re.M) is None and "binds dim H" not in text
      and re.search(r"^# hidden = 128: unused", text, re.M) is not None, r.why() + text)
r2 = cellc("train", NOH, os.path.join(d, "config.cfg"), "--out", os.path.join(tmp, "noh-again"))
check("that run repeated from its config.cfg gives the same final line", r.rc == 0 and r2.rc == 0 and r2.last() == r.last(),
      r2.why())
INH = write("inh.cell", "cell inh {\n  input x[H]\n  state h[H]\n  param W[H, H] ~ standard\n  h = tanh(W @ x + h)\n}\n")
d = os.path.join(tmp, "inh-run")
r = cellc("train", INH, write("inh.cfg", TINY.replace("hidden  = 5\n", "")), "--out", d)
r2 = cellc("train", INH, os.path.join(d, "config.cfg"), "--out", os.path.join(tmp, "inh-again"))
check("a cell whose input dim is H (model.width sizes it): repeated from its config.cfg, the same final line",
      r.rc == 0 and r2.rc == 0 and r2.last() == r.last(), r.why() + " | " + r2.why())

# the limit on a cell's params: check, run and train refuse it in the same words, however the dims are bound
BIG = write("big.cell", """cell big {
  input x[D]
  dim   H = 40000
  state h[H]
  param Wf[H, D] ~ standard
  param Rf[H, H] ~ standard
  param Rg[H, H] ~ standard
  h = tanh(Wf @ x + Rf @ h + Rg @ h)
}
""")
rs = [cellc("check", BIG, "--dims", "D=4,H=40000"), cellc("run", BIG, "--dims", "D=4,H=40000", "--out", os.path.join(tmp, "big.st")),
      cellc("train", BIG, cfg, "--set", "model.hidden=40000", "--dry-run")]
first = [r.err.splitlines()[0] if r.err else "" for r in rs]
check("params over the limit bound by --dims or task.cfg: check, run and train give one message, on the total and its limit",
      all(r.rc == 1 for r in rs) and len(set(first)) == 1 and "hold 3200160000 elements together" in first[0]
      and "over the limit of 2147483647" in first[0] and "too large" not in first[0], " | ".join(r.why() for r in rs))
r = cellc("check", BIG)
check("check with D unbound refuses the cell too: the params it can size are already over the limit",
      r.rc == 1 and "hold at least 3200000000 elements together (not counting 'Wf'" in r.err
      and "over the limit of 2147483647" in r.err, r.why())

# ---------------------------------------------------------------- help

FLAGS = {"check": ["--cell", "--set", "--dims", "--mode", "--json"],
         "derive": ["--cell", "--set", "--dims", "--mode"],
         "run": ["--out", "--cell", "--dims", "--set", "--T", "--B", "--seed", "--inputs", "--backend", "--mode",
                 "--precision", "--train"],
         "train": ["--set", "--out", "--resume", "--force", "--dry-run"],
         "eval": ["--checkpoint", "--set"]}
glob = cellc("help")
for cmd, flags in FLAGS.items():
    h = cellc(cmd, "--help")
    h2 = cellc("help", cmd)
    h3 = cellc(cmd, "stdlib/gru.cell", "-h")
    check(f"cellc {cmd} --help: its own usage, flags and exit statuses on stdout, status 0",
          h.rc == 0 and h.out.startswith(f"usage: cellc {cmd} ") and "exit status" in h.out
          and all(f in h.out for f in flags) and h.err == "", h.why())
    check(f"cellc help {cmd} and cellc {cmd} ... -h print the same", h2.rc == 0 and h3.rc == 0 and h2.out == h.out == h3.out,
          h2.why())
    check(f"the global usage lists every flag of {cmd}", all(f in glob.out for f in flags), glob.out)
check("the global usage lists every exit status", glob.rc == 0 and all(str(n) in glob.out for n in (0, 1, 2, 3, 70, 130)),
      glob.out)
v = cellc("--version")
check("cellc --version prints the version", v.rc == 0 and re.match(r"^cellc \d+\.\d+", v.out) is not None, v.why())
r = cellc("help", "nosuch")
check("cellc help of an unknown command: status 2", r.rc == 2 and "nosuch" in r.err, r.why())

# ---------------------------------------------------------------- front-end messages

for name, text in (("empty.cell", ""), ("comments.cell", "# nothing\n\n   # at all\n")):
    f = write(name, text)
    rc = [cellc(c, f, *extra) for c, extra in (("check", ()), ("derive", ()), ("run", ("--out", os.path.join(tmp, "e.st"))))]
    check(f"check, derive and run agree on a file with no cell ({name}): status 1, 'defines no cell'",
          all(r.rc == 1 and "defines no cell" in r.err for r in rc), " | ".join(r.why() for r in rc))
CELL = """cell c {
  input x[D]
  dim H
  state h[H]
  param W[H, D] ~ glorot
  param b[H] ~ chrono(100)
  h = tanh(W @ x + b)
}
"""
cf = write("c.cell", CELL)
r = cellc("check", cf, "--dims", "HH=4")
check("check --dims with a name no cell declares: fails first (no report), the nearest name suggested",
      r.rc == 1 and r.out == "" and "did you mean 'H'" in r.err, r.why())
r = cellc("run", cf, "--dims", "D=3,H=4,Q=2", "--out", os.path.join(tmp, "q.st"))
check("run --dims with a name the cell lacks: an error (status 1)", r.rc == 1 and "'Q'" in r.err, r.why())
r = cellc("check", cf)
check("check shows an initializer's arguments (chrono(100))", r.rc == 0 and "chrono(100)" in r.out, r.why())
r = cellc("check", cf, "--json")
try:
    params = json.loads(r.out)["cells"][0]["params"]
    b = [p for p in params if p["name"] == "b"][0]
    ok = b["init"] == "chrono" and b["init_args"] == [100]
except (ValueError, KeyError, IndexError) as e:
    ok, b = False, str(e)
check("check --json gives an initializer's arguments", ok, str(b))
r = cellc("check", MGU, "--set", "see_hh=1")
check("--set NAME=VALUE echoes as given in its error", r.rc == 1 and "--set see_hh=1:" in r.err, r.why())
long_line = "cell c {\n  input x[D]\n  state h[D]\n  h = x + " + "a" * 1600000 + " $ h\n}\n"
f = write("long.cell", long_line)
r = cellc("check", f)
check("an error at column 1.6 million: the excerpt is clipped around the caret",
      r.rc == 1 and len(r.err) < 2000 and "^" in r.err and "$" in r.err, f"{len(r.err)} bytes")
f = write("binary.cell", b"cell c {\n  input x[D]\n  state h[D]\n  h = x \x1b[31m\x00\xff + h\n}\n", "wb")
p = subprocess.run([CELLC, "check", f], capture_output=True)
raw = [c for c in p.stderr if c < 0x20 and c not in (0x0A, 0x09) or c == 0x7F or c >= 0x80]
check("an excerpt escapes bytes that are not text", p.returncode == 1 and not raw and b"\\x1B" in p.stderr, repr(p.stderr[:300]))
f = write("unused.cell", "cell c {\n  input x[D]\n  state h[D]\n  param W[D, D] ~ glorot\n  let t = 2 * x\n  h = x\n}\n")
r = cellc("check", f)
check("an unused param and let: warnings with their location, status 0",
      r.rc == 0 and f"{f}:4:9: warning: param 'W' is never used" in r.err and "let 't' is never used" in r.err, r.why())
f = write("self.cell", "cell c {\n  input x[D]\n  state h[D]\n  let a = a + 1\n  h = x + a\n}\n")
r = cellc("check", f)
check("let a = a + 1: 'used in its own definition'", r.rc == 1 and "own definition" in r.err and "unknown" not in r.err,
      r.why())
write("cyc/a.cell", 'import "b.cell"\n')
write("cyc/b.cell", 'import "a.cell"\n')
f = write("cyc/main.cell", 'import "a.cell"\ncell c {\n  input x[D]\n  state h[D]\n  h = x\n}\n')
r = cellc("check", f)
check("an import cycle names the files of the cycle", r.rc == 1 and "a.cell imports" in r.err and "b.cell" in r.err
      and "imports itself" not in r.err, r.why())

# ---------------------------------------------------------------- more misuse

r = cellc("check", "/dev/zero")
check("check /dev/zero: refused at once (a device is not a file), status 1", r.rc == 1 and "device" in r.err, r.why())
r = cellc("train", GRU, "/dev/zero")
check("train with /dev/zero as TASK.cfg: refused, status 1", r.rc == 1 and "device" in r.err, r.why())
r = cellc("run", GRU, "--dims", "H=4,D=3", "--inputs", "/dev/zero", "--out", os.path.join(tmp, "z.st"))
check("run --inputs /dev/zero: refused, status 1", r.rc == 1 and "device" in r.err, r.why())
r = cellc(*RUN, "--out", "")
check("run --out '': a usage error", r.rc == 2, r.why())
r = cellc("train", GRU, cfg, "--out", "")
check("train --out '': a usage error", r.rc == 2, r.why())
d = os.path.join(tmp, "run-sig")
os.makedirs(d)
p = subprocess.Popen([CELLC, "run", GRU, "--dims", "H=64,D=64", "--T", "3000", "--B", "16", "--backend", "interp",
                      "--out", os.path.join(d, "o.st")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     start_new_session=True)
wait_for(lambda: handles_signal(p.pid, signal.SIGINT) or p.poll() is not None, 60)  # started: its handler is installed
time.sleep(0.05)  # not a wait: the check holds for signals at any moment after that; this puts them in the work
os.killpg(p.pid, signal.SIGINT)
time.sleep(0.001)
os.killpg(p.pid, signal.SIGTERM)
_, err = p.communicate(timeout=TIMEOUT)
check("run interrupted by SIGINT and SIGTERM: status 130, 'interrupted' said, no partial or temporary file",
      p.returncode == 130 and b"interrupted" in err and not temporaries(d)
      and (not os.listdir(d) or read_header(os.path.join(d, "o.st"))), f"rc={p.returncode} {err[-200:]!r} {os.listdir(d)}")

shutil.rmtree(tmp, ignore_errors=True)
finish()
