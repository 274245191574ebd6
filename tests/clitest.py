"""clitest.py: what the end-to-end CLI suites share (train_cli.py, misuse_cli.py, run_inputs.py, diag_cli.py,
gpu_train_cli.py, ...):
one PASS/FAIL line per check, a command's result, and the closing "N passed, M failed" line with
exit 1 on any failure."""
import json
import os
import struct
import subprocess
import sys

counts = {"passed": 0, "failed": 0}


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
