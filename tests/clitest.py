"""clitest.py: what the end-to-end CLI suites share (train_cli.py, misuse_cli.py, run_inputs.py, diag_cli.py,
gpu_train_cli.py, ...):
one PASS/FAIL line per check, a command's result, the closing "N passed, M failed" line with
exit 1 on any failure, waiting for a condition (never for a fixed time) with what it takes to
watch a process, and the stdlib cells the tests run (stdlib/cells.list)."""
import json
import os
import struct
import subprocess
import sys
import time

counts = {"passed": 0, "failed": 0}


class StdlibCell:
    """A case of stdlib/cells.list: name, file (relative to the repository), cell (the file's cell
    name), opts ({} or {option: value}, values as the tests' Python types), mode ("scan" or
    "sequential") and dims(H, D), its --dims text for a test's sizes."""

    def __init__(self, name, file, opts, dims, mode):
        self.name, self.file, self.opts, self._dims, self.mode = name, file, opts, dims, mode
        self.cell = os.path.basename(file)[:-len(".cell")]

    def dims(self, H, D):
        return self._dims.replace("%H", str(H)).replace("%D", str(D))


def _value(text):
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)


def stdlib_cells():
    """Every case of stdlib/cells.list, in its order: the one list of the stdlib cells the tests run."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    with open(os.path.join(root, "stdlib", "cells.list")) as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            name, file, setting, dims, mode = fields
            opts = {} if setting == "-" else {setting.split("=")[0]: _value(setting.split("=", 1)[1])}
            out.append(StdlibCell(name, file, opts, dims, mode))
    return out


def stdlib_dims(path, H, D):
    """The --dims of a cell file at a test's H and D: stdlib/cells.list's first case of the file
    (mamba2's heads), "H=H,D=D" for any other file."""
    for c in stdlib_cells():
        if os.path.basename(path) == os.path.basename(c.file) and os.path.basename(os.path.dirname(path)) == "stdlib":
            return c.dims(H, D)
    return "H=%d,D=%d" % (H, D)


def check(name, ok, detail=""):
    counts["passed" if ok else "failed"] += 1
    print("PASS" if ok else "FAIL", name, *([] if ok else [detail]))
    sys.stdout.flush()


def finish():
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    sys.exit(1 if counts["failed"] else 0)


class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def last(self):
        lines = self.out.strip().splitlines()
        return lines[-1] if lines else ""

    def why(self):
        return f"rc={self.rc} stdout={self.out.strip()[-400:]!r} stderr={self.err.strip()[-400:]!r}"


def run(cmd, timeout, **kw):
    """A command's Result (rc -1 when it ran past timeout seconds)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        return Result(p.returncode, p.stdout, p.stderr)
    except subprocess.TimeoutExpired:
        return Result(-1, "", "timed out")


def write_in(directory, name, text):
    """text into directory/name; its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def read_header(path):
    """A safetensors file: its JSON header and the bytes of its tensors."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def wait_for(condition, seconds, poll=0.005):
    """Calls condition() until it is true or `seconds` have passed (a deadline for a condition that
    normally holds at once or soon, never the expected wait); its last value."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(poll)


def proc_stat(pid):
    """/proc/PID/stat's fields after the command name (state first, then ppid, ...; the start
    time at [19]), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid, start):
    """A process's state letter while the one with that pid and start time (proc_stat()[19]) runs;
    None once it is gone or a zombie (a later process with its pid is another one)."""
    st = proc_stat(pid)
    return st[0] if st and st[19] == start and st[0] not in "ZX" else None


def handles_signal(pid, sig):
    """Whether the process has installed a handler for sig (SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = [line for line in f if line.startswith("SigCgt:")][0].split()[1]
        return int(caught, 16) & (1 << (sig - 1)) != 0
    except (OSError, IndexError, ValueError):
        return False
