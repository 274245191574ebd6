"""emit_cli.py: `cellc emit --target cpu` end to end (spec/emit.md, docs/emit.md).

For every stdlib cell (its options' defaults): emit it, link P.o into tests/emit/harness.c, and
separately libP.so, run forward and backward on the params, x, dy of a `cellc run --backend interp
--precision f64` run with nonzero h0 and dfinal, and compare every output and gradient with the
interpreter's (relative error below 1e-4); the harness checks the NULL and bad-call semantics
itself. Then: the default --cpu object holds AVX-512 only in the GEMM kernels chosen at run time, the
errors of the command (unbound dim, unknown target or cpu, bad name, unwritable directory: located
messages, cli.md exit statuses, no output directory left behind), and two cells linked into one
program. Ends with "N passed, M failed"."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import sft  # noqa: E402
import clitest  # noqa: E402
from clitest import Result, check, finish, stdlib_cells  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELLC = os.environ.get("CELLC_BIN", os.path.join(ROOT, "bin", "cellc"))
HARNESS = os.path.join(ROOT, "tests", "emit", "harness.c")
DIMS = "D=6,H=8"
T, B = 5, 3
TOL = 1e-4


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    return Result(p.returncode, p.stdout, p.stderr)


def dims_of(cell_file):
    """DIMS, or for a stdlib cell with dims of its own (stdlib/cells.list) those at DIMS's H and D."""
    d = dict(kv.split("=") for kv in DIMS.split(","))
    if set(d) != {"D", "H"}:
        return DIMS
    listed = clitest.stdlib_dims(cell_file, int(d["H"]), int(d["D"]))
    return listed if {kv.split("=")[0] for kv in listed.split(",")} - {"H", "D"} else DIMS


def emit(cell_file, out, *extra):
    return run([CELLC, "emit", cell_file, "--dims", dims_of(cell_file), "--out", out, *extra])


M64 = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def emitted_noise(seed, stream, shape):
    """The noise a train_noise forward draws (docs/emit.md): uniform in (0, 1) from the seed."""
    base = (seed ^ ((stream + 1) * 0xD1B54A32D192ED03 & M64)) & M64
    n = int(np.prod(shape))
    return np.array([((splitmix64((base + j) & M64) >> 40) + 0.5) / 16777216.0 for j in range(n)]).reshape(shape)


def h0_name(s):
    """cellc run's name of a state's initial value (a history of prev/conv: hist.NAME)."""
    return s["name"] if "history" in s else "h0." + s["name"]


def gh0_name(s):
    return "grad." + s["name"] if "history" in s else "grad.h0." + s["name"]


def reference(cell_file, meta, work, extra, seed=None):
    """The interpreter's float64 run with nonzero h0 and dfinal (and, for a train_noise cell, the
    emitted code's noise of that seed): its tensors by name."""
    rng = np.random.default_rng(7)
    inputs = {}
    for s in meta["states"]:
        shape = [B] + s["shape"] + ([2] if s["complex"] else [])
        if "history" in s:  # [B, K, size]
            shape = [B, s["history"]["steps"]] + s["history"]["shape"]
        inputs[h0_name(s)] = rng.normal(0, 0.5, shape)
        inputs["dfinal." + s["name"]] = rng.normal(0, 1.0, shape)
    inp, out = os.path.join(work, "in.safetensors"), os.path.join(work, "ref.safetensors")
    if seed is not None:  # the noise streams' shapes from a first run, then the emitted noise
        sft.write(inp, inputs)
        run([CELLC, "run", cell_file, "--dims", dims_of(cell_file), "--T", str(T), "--B", str(B), "--backend", "interp", "--precision",
             "f64", "--inputs", inp, "--out", out, "--train", *extra])
        first, _ = sft.read(out)
        for name in first:
            if name.startswith("noise."):
                inputs[name] = emitted_noise(seed, int(name[6:]), first[name].shape)
        extra = list(extra) + ["--train"]
    sft.write(inp, inputs)
    r = run([CELLC, "run", cell_file, "--dims", dims_of(cell_file), "--T", str(T), "--B", str(B), "--seed", "3", "--backend", "interp",
             "--precision", "f64", "--inputs", inp, "--out", out, *extra])
    if r.rc != 0:
        raise RuntimeError("cellc run: " + r.why())
    tensors, _ = sft.read(out)
    for st in meta["states"]:  # cellc run adds dh0 summed over B to a learned initial state's param
        if "learned" in st:
            tensors["grad.param." + st["learned"]] = tensors["grad.param." + st["learned"]] - tensors[gh0_name(st)].sum(0)
    return tensors


def write_inputs(ref, meta, d):
    os.makedirs(d, exist_ok=True)
    ps, ss = meta["params"], meta["states"]

    def raw(name, v):
        np.asarray(v, dtype="<f4").tofile(os.path.join(d, name))

    for i, p in enumerate(ps):
        raw("param.%d" % i, ref["param." + p["name"]])
    for i, s in enumerate(ss):
        raw("h0.%d" % i, ref[h0_name(s)])
        raw("dfinal.%d" % i, ref["dfinal." + s["name"]])
    raw("x", ref["x"])
    raw("dy", ref["dy"])
    sizes = [ref["param." + p["name"]].size for p in ps] + [ref[h0_name(s)].size for s in ss]
    with open(os.path.join(d, "meta"), "w") as f:
        f.write("%d %d %d %d %d %d\n" % (T, B, len(ps), len(ss), ref["x"].size, ref["y"].size))
        f.write(" ".join(str(n) for n in sizes) + "\n")


def build_harness(edir, name, shared, exe, seed=None):
    link = ["-L" + edir, "-l" + name, "-Wl,-rpath," + edir] if shared else [os.path.join(edir, name + ".o")]
    defs = ["-DSEED=%d" % seed] if seed is not None else []
    return run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-DP=" + name, *defs, "-include",
                os.path.join(edir, name + ".h"), "-o", exe, HARNESS, *link, "-lopenblas", "-lm"])


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-6)) if b.size else 0.0


def compare(ref, meta, odir):
    """The largest relative error over every output and gradient, and where."""
    def load(name, like):
        return np.fromfile(os.path.join(odir, name), dtype="<f4").reshape(like.shape)

    pairs = [("y", "y"), ("dx", "grad.x")]
    pairs += [("final.%d" % i, "final." + s["name"]) for i, s in enumerate(meta["states"])]
    pairs += [("dh0.%d" % i, gh0_name(s)) for i, s in enumerate(meta["states"])]
    pairs += [("grad.%d" % i, "grad.param." + p["name"]) for i, p in enumerate(meta["params"])]
    worst, where = 0.0, ""
    for mine, theirs in pairs:
        e = rel_err(load(mine, ref[theirs]), ref[theirs])
        if not e <= worst:
            worst, where = e, theirs
    return worst, where


def test_cell(cell_file, work, cell=None, extra=(), label=None, seed=None, harness_args=()):
    cell = cell or os.path.splitext(os.path.basename(cell_file))[0]
    extra = list(extra) + (["--cell", cell] if cell else [])
    label = label or cell
    os.makedirs(os.path.join(work, label), exist_ok=True)
    edir = os.path.join(work, label, "emitted")
    r = emit(cell_file, edir, *extra)
    check("emit %s" % label, r.rc == 0 and all(os.path.exists(os.path.join(edir, cell + s)) for s in (".h", ".json", ".o"))
          and os.path.exists(os.path.join(edir, "lib%s.so" % cell)), r.why())
    if r.rc != 0:
        return
    meta = json.load(open(os.path.join(edir, cell + ".json")))
    check("%s.json" % cell, meta["abi"] == 2 and meta["cell"] == cell and meta["target"] == "cpu" and meta["input"] == 6
          and set(meta) >= {"mode", "dims", "options", "params", "states", "output"}, str(meta)[:300])
    run_extra = [e for i, e in enumerate(extra) if "train_noise=" not in e
                 and not (e == "--set" and i + 1 < len(extra) and "train_noise=" in extra[i + 1])]
    ref = reference(cell_file, meta, os.path.join(work, label), run_extra, seed)
    ind = os.path.join(work, label, "in")
    write_inputs(ref, meta, ind)
    for shared in (False, True):
        kind = "libP.so" if shared else "P.o"
        exe = os.path.join(work, label, "harness_so" if shared else "harness_o")
        b = build_harness(edir, cell, shared, exe, seed)
        check("%s: the harness links %s" % (label, kind), b.rc == 0, b.why())
        if b.rc != 0:
            continue
        odir = os.path.join(work, label, "out_so" if shared else "out_o")
        os.makedirs(odir, exist_ok=True)
        h = run([exe, ind, odir, *harness_args])
        check("%s (%s): NULL semantics and bad calls" % (label, kind), h.rc == 0, h.out[-1500:] + h.err[-500:])
        if "forward status" not in h.out:
            continue
        worst, where = compare(ref, meta, odir)
        check("%s (%s, %s): forward and backward match the float64 interpreter (max rel err %.2e at %s)"
              % (label, kind, meta["mode"], worst, where), worst < TOL, "")


def zmm_functions(dis):
    """The functions of an objdump -d listing that use an AVX-512 register."""
    found, fn = set(), None
    for line in dis.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            fn = m.group(1)
        elif "zmm" in line:
            found.add(fn)
    return found


def test_no_avx512(work):
    """The default --cpu x86-64-v3 object: AVX-512 registers only in the GEMM kernels that the
    executor picks at run time from CPUID (run512, tn_run512, and the column sums of the products'
    instruction set, colsum_pieces512), none in the cell's kernels or the rest of the executor; x86-64-v4 uses them where it vectorizes (the check can tell the difference)."""
    d3, d4 = os.path.join(work, "v3"), os.path.join(work, "v4")
    r3 = emit(os.path.join(ROOT, "stdlib", "gru.cell"), d3)
    r4 = emit(os.path.join(ROOT, "stdlib", "gru.cell"), d4, "--cpu", "x86-64-v4")
    if r3.rc or r4.rc:
        check("emit for the AVX-512 check", False, r3.why() + r4.why())
        return
    dis3 = run(["objdump", "-d", os.path.join(d3, "gru.o")]).out
    dis4 = run(["objdump", "-d", os.path.join(d4, "gru.o")]).out
    z3 = zmm_functions(dis3)
    chosen = {"run512", "tn_run512", "colsum_pieces512"}
    check("default --cpu (x86-64-v3): AVX-512 registers only in the run-time-chosen kernels of gru.o",
          z3 <= chosen and "ymm" in dis3, "zmm in %s" % sorted(z3 - chosen))
    check("--cpu x86-64-v4 differs from the default (AVX-512 encodings)",
          dis3 != dis4 and (zmm_functions(dis4) - z3 or "{" in dis4), "")


def test_errors(work):
    gru = os.path.join(ROOT, "stdlib", "gru.cell")
    out = os.path.join(work, "err", "gru")
    r = run([CELLC, "emit", gru, "--out", out])
    check("an unbound dim: exit 1, located, no directory", r.rc == 1 and "gru.cell:" in r.err and not os.path.exists(out),
          r.why())
    r = run([CELLC, "emit", gru, "--dims", DIMS, "--target", "tpu", "--out", out])
    check("an unknown target: exit 2 naming it", r.rc == 2 and "tpu" in r.err and not os.path.exists(out), r.why())
    r = run([CELLC, "emit", gru, "--dims", DIMS, "--cpu", "pentium", "--out", out])
    check("an unknown cpu: exit 2 naming it", r.rc == 2 and "pentium" in r.err and not os.path.exists(out), r.why())
    r = run([CELLC, "emit", gru, "--dims", DIMS, "--name", "9bad", "--out", out])
    check("a --name that is no C identifier: exit 2", r.rc == 2 and "9bad" in r.err, r.why())
    r = run([CELLC, "emit", gru, "--dims", DIMS])
    check("no --out: exit 2", r.rc == 2 and "--out" in r.err, r.why())
    ro = os.path.join(work, "readonly")
    os.makedirs(ro, exist_ok=True)
    os.chmod(ro, 0o555)
    target = os.path.join(ro, "gru")
    r = run([CELLC, "emit", gru, "--dims", DIMS, "--out", target])
    os.chmod(ro, 0o755)
    if os.geteuid() != 0:
        check("an unwritable directory: exit 3 naming it, nothing left", r.rc == 3 and ro in r.err and not os.listdir(ro),
              r.why())
    fileout = os.path.join(work, "afile")
    open(fileout, "w").write("x")
    r = run([CELLC, "emit", gru, "--dims", DIMS, "--out", fileout])
    left = [f for f in os.listdir(work) if f.startswith("afile.tmp")]
    check("--out an existing file: exit 3, no temporary directory left", r.rc == 3 and fileout in r.err and not left,
          r.why() + str(left))
    r = run([CELLC, "emit", gru, "--dims", DIMS, "--out", os.path.join(work, "err", "x"), "--bogus"])
    check("an unknown flag: exit 2", r.rc == 2 and "--bogus" in r.err, r.why())
    r = run([CELLC, "emit", "--help"])
    check("emit --help", r.rc == 0 and "--cpu" in r.out and "--torch" in r.out, r.why())


def test_two_cells(work):
    """Two emitted cells (and the same cell under two names) link into one program: no symbol clash."""
    a, b = os.path.join(work, "two", "a"), os.path.join(work, "two", "b")
    r1 = emit(os.path.join(ROOT, "stdlib", "gru.cell"), a, "--name", "cella")
    r2 = emit(os.path.join(ROOT, "stdlib", "gru.cell"), b, "--name", "cellb")
    src = os.path.join(work, "two", "main.c")
    with open(src, "w") as f:
        f.write('#include "cella.h"\n#include "cellb.h"\nint main(void) { return cella_workspace_bytes(2, 2) == '
                'cellb_workspace_bytes(2, 2) && cella_workspace_bytes(2, 2) > 0 ? 0 : 1; }\n')
    c = run(["cc", "-I" + a, "-I" + b, "-o", os.path.join(work, "two", "main"), src, os.path.join(a, "cella.o"),
             os.path.join(b, "cellb.o"), "-lopenblas", "-lm"])
    ok = r1.rc == 0 and r2.rc == 0 and c.rc == 0 and run([os.path.join(work, "two", "main")]).rc == 0
    check("two emitted cells link into one program", ok, r1.why() + r2.why() + c.why())
    again = emit(os.path.join(ROOT, "stdlib", "gru.cell"), a, "--name", "cella")
    check("emit into an existing output directory replaces its files", again.rc == 0, again.why())


def test_example(work):
    """examples/emit: the C program built against an emitted gru.o trains with plain SGD."""
    r = run(["sh", os.path.join(ROOT, "examples", "emit", "run_c.sh"), os.path.join(work, "example")])
    check("examples/emit/train.c trains the emitted cell (loss below a third of the first)",
          r.rc == 0 and "(learned)" in r.out, r.why())


PROJ = """# a dim named O (the output size), an output of another size than the state, and a product of
# params alone (U @ b: a static value, computed once per call)
cell proj {
  input x[D]
  dim   H
  dim   O
  state h[H]
  param W[H, D] ~ glorot
  param U[H, H] ~ orthogonal
  param V[O, H] ~ glorot
  param b[H]    ~ normal(0, 0.5)
  h = tanh(W @ x + U @ h + U @ b)
  output V @ h
}
"""


def test_custom(work):
    global DIMS
    path = os.path.join(work, "proj.cell")
    with open(path, "w") as f:
        f.write(PROJ)
    keep, DIMS = DIMS, "D=6,H=8,O=5"
    try:
        test_cell(path, work)
    finally:
        DIMS = keep


def test_threads(work):
    """ABI 2's threads where they run: sequences long and wide enough that the workspace serves
    several threads (one per 65536 floats of the arrays), so that threads 3 starts two pthreads per
    call (the harness counts them) and its bits must still be those of one thread: the time loop
    split by batch rows, the products over all rows and the weight gradients split between threads."""
    global DIMS, T, B
    keep = DIMS, T, B
    DIMS, T, B = "D=6,H=32", 48, 40
    try:
        for c in ("gru", "lstm"):
            test_cell(os.path.join(ROOT, "stdlib", c + ".cell"), work, label=c + "-threads", harness_args=["threads"])
    finally:
        DIMS, T, B = keep


def test_wide(work):
    """An LSTM at H = 256: its stacked products' arrays (1024 columns) have longer rows."""
    global DIMS
    keep, DIMS = DIMS, "D=6,H=256"
    try:
        test_cell(os.path.join(ROOT, "stdlib", "lstm.cell"), work, label="lstm-wide")
    finally:
        DIMS = keep


def main():
    work = tempfile.mkdtemp(prefix="cellc-emit-")
    try:
        global DIMS
        cells = sys.argv[1:] or sorted(glob.glob(os.path.join(ROOT, "stdlib", "*.cell")))
        # a cell with heads (no H) at its stdlib/cells.list dims (H = 8, D = 6); the others at DIMS
        list_dims = {os.path.join(ROOT, c.file): c.dims(8, 6) for c in stdlib_cells()
                     if {kv.split("=")[0] for kv in c.dims(8, 6).split(",")} - {"H", "D"}}
        keep = DIMS
        for cf in cells:
            DIMS = list_dims.get(os.path.abspath(cf), keep)
            test_cell(cf, work)
        DIMS = keep
        if not sys.argv[1:]:  # beyond the stdlib: every op, learned and drawn initial states, forced modes
            tc = os.path.join(ROOT, "tests", "cells")
            test_cell(os.path.join(tc, "ops.cell"), work)
            test_cell(os.path.join(tc, "ops.cell"), work, extra=["--set", "use_gumbel=true"], label="ops-gumbel-eval")
            for c in ("ops_v2", "ops_v2_scan"):  # language version 2's elementwise built-ins
                test_cell(os.path.join(tc, c + ".cell"), work)
            for c in ("learned_gate", "learned_scan", "drawn_state"):
                test_cell(os.path.join(tc, "learned_gate.cell"), work, cell=c)
            # scan cells whose state's coefficient times its gradient is also another gradient
            # (the plan once wrote that shared value over all rows into the B rows of dh0)
            for c in ("scan_dprev_sqrt", "scan_dprev_scale", "scan_dprev_gate"):
                test_cell(os.path.join(tc, c + ".cell"), work)
            test_cell(os.path.join(tc, "prev_shapes.cell"), work)  # histories of a scalar, a vector, a matrix
            for c in ("qrnn_conv", "rglru_conv"):  # prev and conv: histories after the states
                test_cell(os.path.join(tc, c + ".cell"), work)
                test_cell(os.path.join(tc, c + ".cell"), work, extra=["--mode", "sequential"], label=c + "-sequential")
            test_cell(os.path.join(ROOT, "stdlib", "lru.cell"), work, extra=["--mode", "sequential"], label="lru-sequential")
            test_cell(os.path.join(ROOT, "stdlib", "mgu.cell"), work, extra=["--set", "see_h=true"], label="mgu-see_h")
            test_cell(os.path.join(tc, "ops.cell"), work, extra=["--set", "use_gumbel=true", "--set", "train_noise=true"],
                      label="ops-train_noise", seed=1234)
        test_no_avx512(work)
        test_errors(work)
        test_two_cells(work)
        test_custom(work)
        test_wide(work)
        test_threads(work)
        test_example(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
