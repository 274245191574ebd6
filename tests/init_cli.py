"""cellc run of a cell initialized with the version-2 initializers (spec section 9): the params and
initial states it writes hold s4d_real's log(j + 1), arange's start + step * j, log_uniform's
values in [lo, hi], and inv_softplus's log(expm1(x)) of its inner initializer's values; the same
seed gives the same values on every back end; inv_softplus of values that are not positive is an
error at the initializer."""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "torch"))
import numpy as np  # noqa: E402
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run, write_in  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp()

# Mamba's A_log and dt bias, beside the other two.
CELL = """cell m {
  input x[D]
  dim N = 5
  state h[D] = inv_softplus(ones)
  param A_log[D, N] ~ s4d_real
  param dt_bias[D] ~ inv_softplus(log_uniform(0.001, 0.1))
  param pos[N] ~ arange(1, 1 / N)
  param s[D] ~ log_uniform(0.5, 2)
  h = sigmoid(A_log @ pos) * h + x * dt_bias + s
  output h
}
"""
cell = write_in(tmp, "m.cell", CELL)
D, N, B = 64, 5, 3


def run_cell(name, *extra):
    out = os.path.join(tmp, name + ".st")
    r = run([CELLC, "run", cell, "--dims", f"D={D}", "--T", "2", "--B", str(B), "--out", out, *extra], 120)
    tensors = sft.read(out)[0] if r.rc == 0 and os.path.exists(out) else None
    return r, tensors


def softplus(y):
    return np.where(y > 0, y + np.log1p(np.exp(-y)), np.log1p(np.exp(y)))


r, t = run_cell("f64", "--backend", "interp", "--precision", "f64", "--seed", "3")
check("run_f64", t is not None, r.why())
if t is not None:
    a = t["param.A_log"]
    check("s4d_real_values", a.dtype == np.float64 and a.shape == (D, N)
          and all(a[i, j] == math.log(j + 1.0) for i in range(D) for j in range(N)), repr(a[:2]))
    pos = t["param.pos"]
    check("arange_values", pos.shape == (N,) and all(pos[j] == 1 + (1 / N) * j for j in range(N)), repr(pos))
    s = t["param.s"]
    ls = np.log(s)
    check("log_uniform_range", s.shape == (D,) and s.min() >= 0.5 and s.max() <= 2 and len(set(s.tolist())) == D, repr(s))
    check("log_uniform_spread", ls.min() < math.log(0.5) + 0.2 and ls.max() > math.log(2) - 0.2, repr(ls))
    dt = softplus(t["param.dt_bias"])
    check("inv_softplus_of_log_uniform", dt.min() >= 0.001 * (1 - 1e-12) and dt.max() <= 0.1 * (1 + 1e-12)
          and np.log(dt).min() < math.log(0.001) + 1 and np.log(dt).max() > math.log(0.1) - 1, repr(dt))
    h0 = t["h0.h"]
    check("inv_softplus_of_ones_state", h0.shape == (B, D) and np.all(h0 == math.log(math.expm1(1.0))), repr(h0[0, :4]))

    r2, t2 = run_cell("f64_again", "--backend", "interp", "--precision", "f64", "--seed", "3")
    check("same_seed_same_values", t2 is not None and all(np.array_equal(t[k], t2[k]) for k in t if k.startswith("param.")),
          r2.why())
    r3, t3 = run_cell("f64_seed4", "--backend", "interp", "--precision", "f64", "--seed", "4")
    check("other_seed_other_draws", t3 is not None and not np.array_equal(t["param.s"], t3["param.s"])
          and np.array_equal(t["param.A_log"], t3["param.A_log"]), r3.why())
    r4, t4 = run_cell("cpu_f32", "--backend", "cpu", "--seed", "3")
    check("cpu_f32_same_values", t4 is not None and all(
        t4[k].dtype == np.float32 and np.array_equal(t4[k], t[k].astype(np.float32)) for k in t if k.startswith("param.")),
        r4.why())
    out4 = t4["y"] if t4 is not None else None
    check("cpu_f32_output_finite", out4 is not None and np.all(np.isfinite(out4)), r4.why())

bad = write_in(tmp, "bad.cell", CELL.replace("inv_softplus(log_uniform(0.001, 0.1))", "inv_softplus(arange(1, -1))"))
r = run([CELLC, "run", bad, "--dims", "D=4", "--T", "1", "--B", "1", "--out", os.path.join(tmp, "bad.st")], 60)
check("inv_softplus_non_positive_is_located", r.rc == 1 and "bad.cell:6:22: error: cannot initialize param 'dt_bias': "
      "inv_softplus needs positive values, but arange gave 0" in r.err and not os.path.exists(os.path.join(tmp, "bad.st")),
      r.why())
finish()
