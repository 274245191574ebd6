"""cellc run --inputs with malformed safetensors files: wrong shapes, extra or
misspelled tensors, truncated files, lying headers, wrong dtypes, non-finite
values; and the good cases (a partial file, a replayed OUT file)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "torch"))
import numpy as np  # noqa: E402
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")


def run(args):
    p = subprocess.run([CELLC, "run"] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr




def write_raw(path, header, data=b""):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


tmp = tempfile.mkdtemp()
cell = ["stdlib/gru.cell", "--backend", "interp", "--dims", "H=4,D=3", "--T", "5", "--B", "2"]


def expect_error(name, path, needle, code=1):
    out = os.path.join(tmp, name + ".out.st")
    rc, err = run(cell + ["--inputs", path, "--out", out])
    check(name, rc == code and needle in err and not os.path.exists(out),
          f"rc={rc} stderr={err.strip()[:300]!r} want {needle!r}")


# wrong shape
p = os.path.join(tmp, "shape.st")
sft.write(p, {"h0.h": np.zeros((2, 5), np.float32)})
expect_error("wrong_shape", p, "tensor 'h0.h' has shape [2, 5], expected [2, 4]")
# extra tensor, with a suggestion
p = os.path.join(tmp, "extra.st")
sft.write(p, {"param.Wxzz": np.zeros((4, 3), np.float32)})
expect_error("extra_tensor", p, "unexpected tensor 'param.Wxzz'")
expect_error("extra_tensor_suggests", p, "did you mean 'param.Wxz'")
# truncated file
p = os.path.join(tmp, "trunc.st")
sft.write(p, {"x": np.zeros((5, 2, 3), np.float32)})
data = open(p, "rb").read()
open(p, "wb").write(data[: len(data) - 7])
expect_error("truncated", p, "trunc.st")
# header longer than the file
p = os.path.join(tmp, "lying.st")
with open(p, "wb") as f:
    f.write(struct.pack("<Q", 1 << 40) + b"{}")
expect_error("lying_header", p, "lying.st")
# not JSON
p = os.path.join(tmp, "notjson.st")
with open(p, "wb") as f:
    f.write(struct.pack("<Q", 5) + b"hello")
expect_error("not_json", p, "notjson.st")
# a dtype inputs do not take
p = os.path.join(tmp, "dtype.st")
write_raw(p, {"h0.h": {"dtype": "I32", "shape": [2, 4], "data_offsets": [0, 32]}}, b"\0" * 32)
expect_error("wrong_dtype", p, "is I32; inputs are F32 or F64")
# a NaN
p = os.path.join(tmp, "nan.st")
sft.write(p, {"dfinal.h": np.full((2, 4), np.nan, np.float32)})
expect_error("not_finite", p, "not finite")
# x disagreeing with --T
p = os.path.join(tmp, "tb.st")
sft.write(p, {"x": np.zeros((7, 2, 3), np.float32)})
expect_error("x_vs_T", p, "--T 5")
# missing file
expect_error("missing_file", os.path.join(tmp, "nope.st"), "nope.st")
# good: a partial file (only h0) is completed from the seed
p = os.path.join(tmp, "partial.st")
sft.write(p, {"h0.h": np.ones((2, 4), np.float64)})
out = os.path.join(tmp, "partial.out.st")
rc, err = run(cell + ["--inputs", p, "--out", out])
ok = rc == 0 and os.path.exists(out)
if ok:
    t, _ = sft.read(out)
    ok = np.all(t["h0.h"] == 1) and t["x"].shape == (5, 2, 3)
check("partial_inputs", ok, err)
# good: an OUT file replays to the same results
out2 = os.path.join(tmp, "replay.out.st")
rc, err = run(cell + ["--inputs", out, "--out", out2])
ok = rc == 0
if ok:
    a, _ = sft.read(out)
    b, _ = sft.read(out2)
    ok = set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
check("replay_out_file", ok, err)
# an unwritable output (its directory would be a device, which cannot be made a directory): exit 3, naming it
rc, err = run(cell + ["--out", "/dev/null/out.st"])
check("unwritable_out", rc == 3 and "'/dev/null'" in err and "not a directory" in err, f"rc={rc} {err.strip()[:200]}")
finish()
