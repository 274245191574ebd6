"""Stress: every cellc command run many times at once, under extra CPU load, on a build or under
a checker. A run fails when it dies by a signal, when a sanitizer or valgrind reports an error,
or when its exit status is not the one the command gives on that input (spec/cli.md). Rare
faults (a race at start-up, a use of memory freed by another thread) show up this way and in no
single run: the rarity is the point, so the runs are many and the machine is kept busy.

usage: python3 tests/stress.py [--cellc BIN] [--runs N] [--jobs J] [--load L] [--wrap CMD]
                               [--threads T] [--seconds S] [--only NAME,...]
  --cellc    the binary (bin/cellc; build/asan/cellc, build/tsan/cellc for the sanitizer builds)
  --runs     runs of each command (default 40)
  --jobs     runs at once (default 2 x cores)
  --load     busy loops beside them for the whole run (default: cores)
  --wrap     a command the runs go through, e.g. "valgrind -q --error-exitcode=89"
  --threads  CELLC_THREADS of each run (default: unset, all cores)
  --seconds  stop starting runs after this long (default: no limit); a command that ran
             fewer than 2 times is a failure
One PASS/FAIL line per command with its run count and time; the last line is
"N passed, M failed"; exit 1 on any failure. A failed run's command, status and the end of
its stderr are printed (the first three per command)."""
import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# exit statuses the checkers are told to use, so that a report is never mistaken for a
# command's own status 1 (spec/cli.md: 1 = a located error in the input)
CHECKER_STATUS = {86: "AddressSanitizer/LeakSanitizer", 87: "UndefinedBehaviorSanitizer", 88: "ThreadSanitizer",
                  89: "valgrind"}
CHECKER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:exitcode=86:abort_on_error=0",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
    # uninstrumented libraries (libLLVM, OpenBLAS, libomp) are Archer's and the interceptors' business
    "TSAN_OPTIONS": "exitcode=88:halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1",
}
REPORT_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "WARNING: ThreadSanitizer", "ERROR: LeakSanitizer",
                "Invalid read", "Invalid write", "uninitialised value")

SMALL = ["--set", "train.steps=4", "--set", "log.every=2", "--set", "eval.every=4", "--set", "eval.batches=1",
         "--set", "model.width=16", "--set", "model.hidden=16", "--set", "train.batch=8"]
COPYING = "examples/small/copying.cfg"
# every cell of the stdlib and of tests/cells (which hold the shapes of plan that went wrong once)
CELLS = [os.path.relpath(p, ROOT) for d in ("stdlib", "tests/cells") for p in sorted(glob.glob(os.path.join(ROOT, d, "*.cell")))]
# the dims of a cell: a stdlib cell's from stdlib/cells.list (the cells with heads have no H), the
# tensor test cells' own, else H and D
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import stdlib_cells  # noqa: E402
CELL_DIMS = {c.file: c.dims(8, 4) for c in stdlib_cells()}
CELL_DIMS.update({"tests/cells/tensor_gla.cell": "NH=2,K=3,V=4,D=4", "tests/cells/tensor_ops.cell": "D=4"})
# (a version-1 cell keeps H=8,D=4, hgru's default H = D included)


def dims_of(cell):
    d = CELL_DIMS.get(cell, "")
    return d if set(kv.split("=")[0] for kv in d.split(",") if kv) - {"H", "D"} or d == "D=4" else "H=8,D=4"


def has_dim_h(cell):
    with open(os.path.join(ROOT, cell)) as f:
        return re.search(r"\bdim\s+H\b", f.read()) is not None


def train_sets(cell):
    """SMALL's sizes for training this cell: model.hidden for a cell with a dim H, model.dims.*
    for its other dims (D is model.width)."""
    has_h = has_dim_h(cell)
    out = [a for flag, kv in zip(SMALL[::2], SMALL[1::2]) if kv != "model.hidden=16" for a in (flag, kv)]
    if has_h:
        out += ["--set", "model.hidden=16"]
    for kv in dims_of(cell).split(","):
        k, v = kv.split("=")
        if k not in ("D", "H"):
            out += ["--set", "model.dims.%s=%s" % (k, v)]
    return out


def commands(tmp, ckpt):
    """(name, expected status, argv builder of the run index and its scratch folder)."""
    cell = lambda i: CELLS[i % len(CELLS)]  # noqa: E731
    bad = os.path.join(tmp, "bad.cell")
    with open(bad, "w") as f:
        f.write("cell bad {\n  input x[D]; dim H; state h[H]\n  h = tanh(W @ x)\n}\n")
    badcfg = os.path.join(tmp, "bad.cfg")
    with open(badcfg, "w") as f:
        f.write("[task]\nname = copying\n[train]\nsteps = -3\n")
    # the copying task without its `hidden` line, for a cell without a dim H (a value given
    # for a dim the cell lacks is an error)
    nohidden = os.path.join(tmp, "copying_no_hidden.cfg")
    with open(os.path.join(ROOT, COPYING)) as f, open(nohidden, "w") as g:
        g.writelines(line for line in f if not re.match(r"\s*hidden\s*=", line))
    task = lambda c: COPYING if has_dim_h(c) else nohidden  # noqa: E731
    return [
        ("check", 0, lambda i, d: ["check", cell(i)]),
        ("check --json", 0, lambda i, d: ["check", cell(i), "--json", "--dims", dims_of(cell(i))]),
        ("check (error)", 1, lambda i, d: ["check", bad]),
        ("derive", 0, lambda i, d: ["derive", cell(i)]),
        ("run", 0, lambda i, d: ["run", cell(i), "--dims", dims_of(cell(i)), "--out", os.path.join(d, "r.safetensors")]),
        ("train", 0, lambda i, d: ["train", cell(i), task(cell(i)), *train_sets(cell(i)), "--out", os.path.join(d, "run")]),
        ("train (bad cfg)", 1, lambda i, d: ["train", cell(i), badcfg, "--out", os.path.join(d, "run")]),
        ("eval", 0, lambda i, d: ["eval", "stdlib/mgu.cell", COPYING, *SMALL, "--checkpoint", ckpt]),
        ("emit cpu", 0, lambda i, d: ["emit", cell(i), "--target", "cpu", "--dims", dims_of(cell(i)), "--out",
                                      os.path.join(d, "e")]),
        ("emit cuda", 0, lambda i, d: ["emit", cell(i), "--target", "cuda", "--dims", dims_of(cell(i)), "--out",
                                       os.path.join(d, "e")]),
        ("diag", 0, lambda i, d: ["diag", "stdlib/mgu.cell", COPYING, *SMALL, "--batches", "1", "--out",
                                  os.path.join(d, "diag")]),
        ("help", 0, lambda i, d: ["help"]),
        ("usage error", 2, lambda i, d: ["no-such-command"]),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cellc", default="bin/cellc")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2 * (os.cpu_count() or 1))
    ap.add_argument("--load", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--wrap", default="")
    ap.add_argument("--threads", default="")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.chdir(ROOT)
    cellc = os.path.abspath(a.cellc)
    if not os.access(cellc, os.X_OK):
        print(f"stress: no {a.cellc} (make all; make SAN=1 all for build/asan, make SAN=tsan all for build/tsan)")
        print("0 passed, 1 failed")
        return 1
    wrap = shlex.split(a.wrap)
    env = dict(os.environ, **CHECKER_ENV)
    if a.threads:
        env["CELLC_THREADS"] = a.threads
    tmp = tempfile.mkdtemp(prefix="cellc-stress-")
    # one checkpoint for every eval run, trained once by the binary under test
    prep = subprocess.run([cellc, "train", "stdlib/mgu.cell", COPYING, *SMALL, "--out", os.path.join(tmp, "ckpt")],
                          capture_output=True, text=True, env=env, timeout=600)
    ckpt = os.path.join(tmp, "ckpt", "checkpoint.safetensors")
    if prep.returncode != 0 or not os.path.exists(ckpt):
        print(f"stress: the checkpoint for eval could not be trained (exit {prep.returncode}):\n{prep.stderr[-2000:]}")
        print("0 passed, 1 failed")
        return 1
    cmds = commands(tmp, ckpt)
    if a.only:
        keep = set(a.only.split(","))
        cmds = [c for c in cmds if c[0] in keep]
    # runs interleaved across commands, so each command meets every other one under load
    order = [(c, i) for i in range(a.runs) for c in range(len(cmds))]
    lock = threading.Lock()
    stats = {c: {"runs": 0, "fails": [], "secs": 0.0} for c in range(len(cmds))}
    t0 = time.time()

    def one(job):
        c, i = job
        if a.seconds and time.time() - t0 > a.seconds:
            return
        name, want, argv = cmds[c]
        d = tempfile.mkdtemp(dir=tmp)
        full = wrap + [cellc] + argv(i, d)
        t = time.time()
        try:
            p = subprocess.run(full, capture_output=True, text=True, env=env, timeout=600, errors="replace")
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, err = "timeout", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
        dt = time.time() - t
        shutil.rmtree(d, ignore_errors=True)
        why = None
        if rc == "timeout":
            why = "hung (600 s)"
        elif rc < 0:
            why = f"killed by {signal.Signals(-rc).name}"
        elif rc in CHECKER_STATUS and rc != want:
            why = f"{CHECKER_STATUS[rc]} report (exit {rc})"
        elif any(m in err for m in REPORT_MARKS):
            why = f"a checker's report in stderr (exit {rc})"
        elif rc != want:
            why = f"exit {rc}, expected {want}"
        with lock:
            s = stats[c]
            s["runs"] += 1
            s["secs"] += dt
            if why:
                s["fails"].append((why, " ".join(shlex.quote(x) for x in full), err[-1500:]))

    # OpenBLAS picks its kernels once, when it loads; a second pick inside the running process
    # races with the worker threads the first one started (OPENBLAS_VERBOSE=2 prints each pick)
    dispatch = []
    if not wrap:
        venv = dict(env, OPENBLAS_VERBOSE="2")
        for name, want, argv in cmds:
            d = tempfile.mkdtemp(dir=tmp)
            p = subprocess.run([cellc] + argv(0, d), capture_output=True, text=True, env=venv, timeout=600,
                               errors="replace")
            shutil.rmtree(d, ignore_errors=True)
            picks = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("Core: ")]
            if len(picks) > 1:
                dispatch.append(f"{name}: OpenBLAS picked its kernels {len(picks)} times ({', '.join(picks)})")

    loads = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.load)]
    try:
        with ThreadPoolExecutor(max_workers=a.jobs) as ex:
            list(ex.map(one, order))
    finally:
        for p in loads:
            p.kill()
            p.wait()
    passed = failed = 0
    for c, (name, want, _) in enumerate(cmds):
        s = stats[c]
        ok = not s["fails"] and s["runs"] >= min(2, a.runs)
        mean = s["secs"] / s["runs"] if s["runs"] else 0
        print(f"{'PASS' if ok else 'FAIL'} {name}: {s['runs']} runs, {len(s['fails'])} failed "
              f"(exit {want} expected; {mean:.2f} s a run)")
        for why, cmd, err in s["fails"][:3]:
            print(f"    {why}: {cmd}\n" + "".join(f"      | {line}\n" for line in err.splitlines()[-15:]), end="")
        passed, failed = passed + ok, failed + (not ok)
    if not wrap:
        ok = not dispatch
        print(f"{'PASS' if ok else 'FAIL'} OpenBLAS picks its kernels once per process, at load (every command)")
        for line in dispatch:
            print(f"    {line}")
        passed, failed = passed + ok, failed + (not ok)
    total = sum(s["runs"] for s in stats.values())
    print(f"stress: {total} runs of {len(cmds)} commands in {time.time() - t0:.0f} s, {a.jobs} at once beside "
          f"{a.load} busy loops ({' '.join(wrap + [a.cellc]) if wrap else a.cellc})")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
