"""Data-parallel training (spec/cli.md "Data-parallel training on several processes",
docs/distributed.md): `mpirun -np 2 cellc train` against the one-process run with the same
global batch on small copying and adding configurations (loss curves, evaluations and final
params within 1e-5), dropout drawn as the one-process run draws it, a -np 1 resume of a -np 2
checkpoint, Ctrl-C on one rank, SIGKILL of either rank (no hang, the last complete checkpoint
left), a batch that does not divide. One PASS/FAIL line per check; the last line is
"N passed, M failed"; exit 1 on any failure."""
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import Result, check, finish, proc_stat, read_header, running, wait_for  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
TIMEOUT = 120
tmp = tempfile.mkdtemp(prefix="cellc-mpi-")
# root in a container; two cores, so two ranks oversubscribe nothing but mpirun counts slots
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CELLC_THREADS="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]
MGU, MULTI = "stdlib/mgu.cell", "stdlib/multi_gate.cell"
COPYING, ADDING = "examples/small/copying.cfg", "examples/small/adding.cfg"
SHORT = ["--set", "train.steps=50", "--set", "log.every=1", "--set", "eval.every=25", "--set", "eval.batches=2",
         "--set", "train.schedule=constant"]


def train(np_, name, cell, cfg, *extra):
    out = os.path.join(tmp, name)
    cmd = ([] if np_ == 0 else MPIRUN + ["-np", str(np_)]) + [CELLC, "train", cell, cfg, "--out", out] + SHORT + list(extra)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
        return out, Result(p.returncode, p.stdout, p.stderr)
    except subprocess.TimeoutExpired:
        return out, Result(-1, "", "timed out")


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def params(d):
    """The checkpoint's float32 tensors by name."""
    header, data = read_header(os.path.join(d, "checkpoint.safetensors"))
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
    return out


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def curve_diff(da, db, first=0):
    """The largest relative difference of loss (and accuracy) over the lines of step > first,
    train, valid and test; inf when the lines differ in number or in kind."""
    ma = [m for m in metrics(da) if m["step"] > first]
    mb = [m for m in metrics(db) if m["step"] > first]
    if len(ma) != len(mb) or not ma:
        return math.inf, f"{len(ma)} against {len(mb)} lines"
    worst, where = 0.0, ""
    for x, y in zip(ma, mb):
        if (x["step"], x["split"]) != (y["step"], y["split"]):
            return math.inf, f"line {x} against {y}"
        for k in ("loss", "accuracy"):
            if x[k] is None and y[k] is None:
                continue
            if x[k] is None or y[k] is None:
                return math.inf, f"{k} at step {x['step']}: {x[k]} against {y[k]}"
            d = rel(x[k], y[k])
            if d > worst:
                worst, where = d, f"{x['split']} {k} at step {x['step']}: {x[k]} against {y[k]}"
    return worst, where


def param_diff(da, db):
    """The largest relative difference of a param tensor, ||a - b|| / max(1, ||a||) (2-norms): the
    gradient sums of N processes round differently from one process's, and Adam's normalized step
    turns the rounding of a gradient near zero (a sum that cancels) into a step of any sign, so a
    single element can drift by about 1e-5 while the tensor agrees to 1e-7 (docs/distributed.md)."""
    pa, pb = params(da), params(db)
    if set(pa) != set(pb):
        return math.inf, "different tensors"
    worst, where = 0.0, ""
    for name in pa:
        num = math.sqrt(sum((x - y) ** 2 for x, y in zip(pa[name], pb[name])))
        d = num / max(1.0, math.sqrt(sum(x * x for x in pa[name])))
        if d > worst:
            worst, where = d, name
    return worst, where


def param_max_diff(da, db):
    """The largest difference of one element, over max(1, max |a|) of its tensor."""
    pa, pb = params(da), params(db)
    worst, where = 0.0, ""
    for name in pa:
        scale = max(1.0, max(abs(v) for v in pa[name]))
        d = max(abs(x - y) for x, y in zip(pa[name], pb[name])) / scale
        if d > worst:
            worst, where = d, name
    return worst, where


def same_run(name, one, two, tol=1e-5):
    ok = one[1].rc == 0 and two[1].rc == 0
    check(f"{name}: -np 1 and -np 2 both finish", ok, one[1].why() + " / " + two[1].why())
    if not ok:
        return
    d, where = curve_diff(one[0], two[0])
    check(f"{name}: the loss curve of -np 2 is the one-process curve within {tol:g} (50 steps, evals)",
          d <= tol, f"{d:.3g}: {where}")
    d, where = param_diff(one[0], two[0])
    check(f"{name}: the final params of -np 2 are the one-process params within {tol:g} (per tensor)", d <= tol,
          f"{d:.3g} in {where}")
    d, where = param_max_diff(one[0], two[0])
    check(f"{name}: and every element within 1e-4", d <= 1e-4, f"{d:.3g} in {where}")
    check(f"{name}: -np 2 prints the final line once (rank 0 alone prints)",
          two[1].out.count("final: step=50") == 1, two[1].why())


# ---- the curves: copying (cross-entropy over the masked marker steps), adding (MSE) ----
c1 = train(0, "copy1", MGU, COPYING)
c2 = train(2, "copy2", MGU, COPYING)
same_run("copying, mgu", c1, c2)
a1 = train(0, "add1", MULTI, ADDING)
a2 = train(2, "add2", MULTI, ADDING)
same_run("adding, multi_gate", a1, a2)
# a device run: each rank's gradients come down from the device, are summed over MPI, go back up
emu = ["--set", "train.device=cuda-emu", "--set", "train.batch=4"]
same_run("copying, mgu on cuda-emu (device gradients summed through the host)",
         train(0, "emu1", MGU, COPYING, *emu), train(2, "emu2", MGU, COPYING, *emu))
drop = ["--set", "model.dropout=0.2"]
same_run("copying with dropout 0.2 (each rank draws its slice of the global masks)",
         train(0, "drop1", MGU, COPYING, *drop), train(2, "drop2", MGU, COPYING, *drop))
if c2[1].rc == 0:
    files = sorted(os.listdir(c2[0]))
    check("-np 2 writes one set of run files (rank 0 alone writes)",
          files == ["checkpoint.safetensors", "config.cfg", "metrics.jsonl"], str(files))
    ev = [subprocess.run(pre + [CELLC, "eval", MGU, COPYING, "--checkpoint", os.path.join(c1[0], "checkpoint.safetensors")],
                         capture_output=True, text=True, timeout=TIMEOUT, env=ENV) for pre in ([], MPIRUN + ["-np", "2"])]
    check("cellc eval under mpirun -np 2 (test batches split, sums reduced) prints the one-process final line",
          ev[0].returncode == 0 and ev[1].returncode == 0 and ev[0].stdout.startswith("final: ")
          and ev[0].stdout == ev[1].stdout, f"{ev[0].stdout!r} {ev[1].stdout!r} {ev[1].stderr[-300:]!r}")

# ---- train.keep = best and log.csv under -np 2: one best.safetensors at the one-process step ----
best = ["--set", "train.keep=best", "--set", "log.csv=true", "--set", "eval.every=5"]
b1, b2 = train(0, "best1", MGU, COPYING, *best), train(2, "best2", MGU, COPYING, *best)
if b1[1].rc == 0 and b2[1].rc == 0:
    tb = [[x for x in metrics(d) if x["split"] == "test_best"] for d in (b1[0], b2[0])]
    check("keep=best under -np 2: rank 0 writes best.safetensors and metrics.csv; the test_best row at the "
          "one-process best step, its loss within 1e-5",
          all(os.path.exists(os.path.join(b2[0], f)) for f in ("best.safetensors", "metrics.csv"))
          and len(tb[0]) == 1 and len(tb[1]) == 1 and tb[0][0]["step"] == tb[1][0]["step"]
          and rel(tb[0][0]["loss"], tb[1][0]["loss"]) <= 1e-5 and b2[1].out.count("best: step=") == 1,
          f"{tb} {b2[1].why()}")
else:
    check("keep=best under -np 2: both runs finish", False, b1[1].why() + " / " + b2[1].why())

# ---- resume with another N: -np 2 for 25 steps, then -np 1 --resume to 50 ----
d, r = train(2, "resume", MGU, COPYING, "--set", "train.steps=25")
check("resume: -np 2 trains 25 steps", r.rc == 0, r.why())
d, r = train(0, "resume", MGU, COPYING, "--resume")
check("resume: -np 1 --resume continues the -np 2 checkpoint", r.rc == 0 and "resuming at step 25" in r.out, r.why())
if r.rc == 0 and c1[1].rc == 0:
    diff, where = curve_diff(c1[0], d, first=25)
    check("resume: steps 26..50 after a -np 2 -> -np 1 resume follow the one-process curve within 1e-5",
          diff <= 1e-5, f"{diff:.3g}: {where}")
    diff, where = param_diff(c1[0], d)
    check("resume: its final params are the one-process params within 1e-5 (per tensor)", diff <= 1e-5,
          f"{diff:.3g} in {where}")
    diff, where = param_max_diff(c1[0], d)
    check("resume: and every element within 1e-4", diff <= 1e-4, f"{diff:.3g} in {where}")

# ---- a batch that does not divide ----
d, r = train(3, "nodiv", MGU, COPYING)
check("-np 3 with train.batch = 64: exit 1 naming both numbers",
      r.rc == 1 and "train.batch = 64" in r.err and "3 processes" in r.err and not os.path.exists(d), r.why())


# ---- NaN after a good checkpoint: every rank exits 3, the good checkpoint stays ----
def eval_line(d):
    r = subprocess.run([CELLC, "eval", MGU, COPYING, "--checkpoint", os.path.join(d, "checkpoint.safetensors"),
                        "--set", "eval.batches=1"], capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    return r.returncode, r.stdout.strip().splitlines()[-1:] or [""]


d, r1 = train(2, "nan", MGU, COPYING, "--set", "train.steps=4", "--set", "eval.every=2")
good = eval_line(d)
d, r2 = train(2, "nan", MGU, COPYING, "--resume", "--set", "train.steps=12", "--set", "train.lr=1e30",
              "--set", "train.optimizer=sgd", "--set", "eval.every=1")
check("NaN on -np 2: every rank stops, exit 3 naming the step",
      r1.rc == 0 and r2.rc == 3 and re.search(r"step \d+: .*(NaN|infinite)", r2.out + r2.err) is not None, r2.why())
check("NaN on -np 2: the checkpoint left is the last good one (step 4)",
      good[0] == 0 and good[1][0].startswith("final: step=4 ") and eval_line(d) == good, f"{good} {eval_line(d)}")

# ---- a file rank 0 cannot write: its status reaches every rank ----
d = os.path.join(tmp, "unwritable")
os.makedirs(os.path.join(d, "checkpoint.safetensors"))
d, r = train(2, "unwritable", MGU, COPYING, "--force")
check("-np 2 --force over a directory named checkpoint.safetensors: every rank exits 3, nothing trained",
      r.rc == 3 and "not a regular file" in r.err and "final:" not in r.out, r.why())

# ---- stopping: Ctrl-C on one rank, SIGKILL of one rank ----
def start_long(name, *extra):
    out = os.path.join(tmp, name)
    cmd = MPIRUN + ["-np", "2", CELLC, "train", MGU, COPYING, "--out", out, "--set", "train.steps=1000000",
                    "--set", "eval.every=10", "--set", "eval.batches=1"] + list(extra)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    return out, p


def ranks(p):
    """The ranks mpirun started, in rank order (each has OMPI_COMM_WORLD_RANK): (pid, start time) each."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            st = proc_stat(pid)
            if not st or int(st[1]) != p.pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = (int(pid), st[19])
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return [found[k] for k in sorted(found)]


def checkpoint_step(d):
    """The step of the checkpoint in d; None while there is none."""
    try:
        return int(json.loads(read_header(os.path.join(d, "checkpoint.safetensors"))[0]["__metadata__"]["step"]))
    except (OSError, ValueError, KeyError, struct.error):
        return None


def wait_checkpoint(d, p, past=0):
    """Until the run has written a checkpoint of a step after `past` (renamed into place: one that
    is there is complete); that step, or None when the run ended first or none came in 60 s."""
    wait_for(lambda: (checkpoint_step(d) or 0) > past or p.poll() is not None, 60)
    step = checkpoint_step(d)
    return step if step is not None and step > past else None


def wait_logged(d, p):
    """Until rank 0 has logged a training step to metrics.jsonl (flushed a record at a time); the
    last one logged, or None when the run ended first or none came in 60 s."""
    def last():
        try:
            return [x["step"] for x in metrics(d) if x["split"] == "train"][-1]
        except (OSError, ValueError, IndexError):
            return None
    wait_for(lambda: last() is not None or p.poll() is not None, 60)
    return last()


def still_running(procs):
    """Those of the (pid, start time) processes still running, as "pid (state, wchan): command"."""
    left = []
    for pid, start in procs:
        state = running(pid, start)
        if state:
            try:
                with open(f"/proc/{pid}/wchan") as f:
                    wchan = f.read()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                wchan, cmd = "?", "?"
            left.append(f"{pid} ({state}, {wchan}): {cmd}")
    return left


def checkpoint_usable(d):
    r = subprocess.run([CELLC, "eval", MGU, COPYING, "--checkpoint", os.path.join(d, "checkpoint.safetensors"),
                        "--set", "eval.batches=1"], capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    step = checkpoint_step(d)
    return step is not None and r.returncode == 0 and r.stdout.startswith(f"final: step={step} "), step, r


def stopped(name, p, seconds):
    t0 = time.time()
    try:
        out, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, time.time() - t0, Result(-1, out, err)
    return p.returncode, time.time() - t0, Result(p.returncode, out, err)


# no eval in this run: a checkpoint on disk can only be the interrupt's
d, p = start_long("sigterm", "--set", "eval.every=1000000", "--set", "log.every=1")
logged = wait_logged(d, p)  # a step taken: both ranks are training, their handlers installed (before setup)
procs = ranks(p)
if len(procs) == 2:
    os.kill(procs[1][0], signal.SIGTERM)
rc, took, r = stopped("sigterm", p, 30)
check("SIGTERM (Ctrl-C) to rank 1 only: every rank stops, status 130", rc == 130 and len(procs) == 2,
      f"step {logged} logged, ranks {procs} took {took:.1f}s {r.why()}")
if rc == 130:
    ok, step, e = checkpoint_usable(d)
    check("SIGTERM: rank 0 wrote the checkpoint of the step reached (no eval before it: the interrupt's)",
          ok and f"interrupted at step {step}:" in r.out and logged is not None and step >= logged,
          f"step {step} (step {logged} logged before the signal) {r.why()} {e.stdout} {e.stderr}")

for victim in (0, 1):
    d, p = start_long(f"kill{victim}")
    first = wait_checkpoint(d, p)
    had = first and wait_checkpoint(d, p, first)  # a checkpoint replaced: the kill lands in a run under way
    procs = ranks(p)
    if len(procs) == 2:
        os.kill(procs[victim][0], signal.SIGKILL)
    rc, took, r = stopped(f"kill{victim}", p, 30)
    check(f"SIGKILL of rank {victim}: mpirun and the other rank exit non-zero within 10 s (no hang)",
          had and len(procs) == 2 and rc not in (None, 0) and took < 10,
          f"checkpoints {first} {had} ranks {procs} rc {rc} took {took:.1f}s {r.why()}")
    # mpirun may exit before the rank it killed has finished exiting: wait for that, not for a time
    wait_for(lambda: not still_running(procs), 30)
    left = still_running(procs)
    check(f"SIGKILL of rank {victim}: no rank is left running (30 s after mpirun's exit)", not left, "; ".join(left))
    if had:
        ok, step, e = checkpoint_usable(d)
        check(f"SIGKILL of rank {victim}: the checkpoint on disk is the last complete one (loads, a step of eval.every)",
              ok and step % 10 == 0 and step >= had, f"step {step} (step {had} was on disk before the kill) {e.stdout} {e.stderr}")

shutil.rmtree(tmp, ignore_errors=True)
finish()
