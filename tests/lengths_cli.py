"""Variable lengths in the execution layer (SeqIO.lengths; spec/emit.md "ABI 2"; docs/cli.md,
`cellc run --lengths`). For every stdlib cell (stdlib/cells.list) in sequential mode and, where it
runs as a scan, in scan mode:
  - `cellc run --lengths` on the float64 interpreter equals, per sequence, a float64 run of that
    sequence alone truncated to its length: y, gates, grad.x up to the length, zeros past it;
    final, grad.h0 and every per-row state tensor; the weight gradients the sum of the
    sequences' (within 1e-9);
  - x, dy and noise past a sequence's length are never read (changing them changes nothing);
  - the interpreter in float32, cpu and cuda-emu with the same lengths agree with the float64
    interpreter within float32 bounds.
The emitted C API (cellc emit --target cpu) with lengths through tests/emit/harness.c against
`cellc run --lengths`. tests/cells/ops.cell (every built-in, a complex state, gumbel_sigmoid's noise with --train) as
the stdlib cells. Then finite differences of L = sum(y dy) + sum(final dfinal) on a few cells (x and a param), the
chunked form (--mode chunked, interp and cpu) with lengths against sequential, lengths all T
bit-identical to no lengths, and the errors of a bad --lengths or 'lengths' tensor.
Ends with "N passed, M failed"."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run, stdlib_cells  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp()
T, B, H, D = 7, 3, 3, 2
LENGTHS = [4, 7, 1]
count = [0]


def cellc_run(case_args, backend, extra, inputs=None):
    """The tensors of a cellc run (dict), or (None, why)."""
    count[0] += 1
    out = os.path.join(tmp, "r%d.st" % count[0])
    args = [CELLC, "run", *case_args, "--backend", backend.split("-f32")[0], "--out", out, *extra]
    if backend.startswith("interp"):  # interp-f32: the interpreter rounding every value to float32
        args += ["--precision", "f32" if backend.endswith("-f32") else "f64"]
    if inputs is not None:
        path = os.path.join(tmp, "in%d.st" % count[0])
        sft.write(path, inputs)
        args += ["--inputs", path]
    r = run(args, 300)
    if r.rc != 0:
        return None, r.why()
    return sft.load(out), ""


# the tensors of a run by their leading axes: per step and row, per row, or neither
def per_step(k):
    return k in ("x", "y", "dy", "grad.x") or k.startswith("gate.") or k.startswith("noise.")


def per_row(k):
    return k.split(".")[0] in ("h0", "hist", "dfinal", "final") or k.startswith("grad.h0.") or k.startswith("grad.hist.")


def inputs_of(t):
    """What a run's file holds that a run takes as input."""
    return {k: v for k, v in t.items() if k in ("x", "dy") or k.startswith("param.") or k.startswith("buffer.") or
            k.startswith("h0.") or k.startswith("hist.") or k.startswith("dfinal.") or k.startswith("noise.")}


def alone(t, b, n):
    """Sequence b of a run's inputs, truncated to its n steps."""
    out = {}
    for k, v in inputs_of(t).items():
        if per_step(k):
            out[k] = v[:n, b:b + 1].copy()
        elif per_row(k):
            out[k] = v[b:b + 1].copy()
        else:
            out[k] = v
    return out


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.size == 0:
        return 0.0
    return float(np.abs(a - b).max()) / max(1.0, float(np.abs(a).max()))


def per_sequence(name, case_args, got):
    """got (an interp f64 run with LENGTHS) against each sequence run alone: the worst error."""
    worst, where = 0.0, ""
    sums = {}
    for b, n in enumerate(LENGTHS):
        ref, why = cellc_run(case_args, "interp", ["--T", str(n), "--B", "1"], alone(got, b, n))
        if ref is None:
            return float("inf"), "sequence %d alone: %s" % (b, why)
        for k, v in ref.items():
            if k.startswith("grad.param."):
                sums[k] = sums.get(k, 0) + v
                continue
            if k in inputs_of(ref) or k not in got:
                continue
            if per_step(k):
                e = max(rel(v[:, 0], got[k][:n, b]), float(np.abs(got[k][n:, b]).max(initial=0.0)))
            elif per_row(k):
                e = rel(v[0], got[k][b])
            else:
                continue
            if e > worst:
                worst, where = e, "%s of sequence %d" % (k, b)
    for k, v in sums.items():
        e = rel(v, got[k])
        if e > worst:
            worst, where = e, k
    return worst, where


def worst_of(ref, got, skip=()):
    w, name = 0.0, ""
    for k, a in ref.items():
        if k in skip or k == "lengths":
            continue
        if k not in got:
            return float("inf"), k + " missing"
        e = rel(a, got[k])
        if e > w:
            w, name = e, k
    return w, name


lens = ",".join(map(str, LENGTHS))
backends = ["interp-f32", "cpu", "cuda-emu"]
for c in stdlib_cells():
    dims = c.dims(H, D)
    opts = [a for k, v in c.opts.items() for a in ("--set", "%s=%s" % (k, str(v).lower()))]
    modes = ["sequential"] + (["scan"] if c.mode == "scan" else [])
    for mode in modes:
        case_args = [c.file, "--dims", dims, *opts, "--mode", mode]
        name = "%s %s" % (c.name, mode)
        common = ["--T", str(T), "--B", str(B), "--seed", "5", "--lengths", lens]
        got, why = cellc_run(case_args, "interp", common)
        check(name + ": interp f64 runs with --lengths", got is not None, why)
        if got is None:
            continue
        check(name + ": lengths written", list(got["lengths"]) == LENGTHS and got["lengths"].dtype == np.int32,
              str(got.get("lengths")))
        e, where = per_sequence(name, case_args, got)
        check(name + ": interp per sequence as each run alone", e < 1e-9, "%s off by %g" % (where, e))
        # padding is never read: past each length, x, dy and noise changed
        pad = inputs_of(got)
        for k in list(pad):
            if per_step(k):
                v = pad[k].copy()
                for b, n in enumerate(LENGTHS):
                    v[n:, b] = 0.5 if k.startswith("noise.") else 1e3
                pad[k] = v
        again, why = cellc_run(case_args, "interp", ["--lengths", lens], pad)
        if again is None:
            check(name + ": padding changed runs", False, why)
        else:
            e, where = worst_of(got, again, skip=set(inputs_of(got)))
            check(name + ": padding is never read", e == 0.0, "%s off by %g" % (where, e))
        for be in backends:
            other, why = cellc_run(case_args, be, ["--lengths", lens], inputs_of(got))
            check(name + ": %s runs with --lengths" % be, other is not None, why)
            if other is not None:
                e, where = worst_of(got, other, skip=set(inputs_of(got)))
                check(name + ": %s as interp" % be, e < 2e-4, "%s off by %g" % (where, e))

# every built-in, with gumbel_sigmoid's noise in training mode (noise past a length never read) and
# a complex state
ops = [("ops complex", ["tests/cells/ops.cell", "--dims", "H=3,D=2"]),
       ("ops gumbel --train", ["tests/cells/ops.cell", "--dims", "H=3,D=2", "--set", "use_gumbel=true", "--train"])]
for name, case_args in ops:
    got, why = cellc_run(case_args, "interp", ["--T", str(T), "--B", str(B), "--seed", "5", "--lengths", lens])
    check(name + ": interp f64 runs with --lengths", got is not None, why)
    if got is None:
        continue
    e, where = per_sequence(name, case_args, got)
    check(name + ": interp per sequence as each run alone", e < 1e-9, "%s off by %g" % (where, e))
    for be in backends:
        other, why = cellc_run(case_args, be, ["--lengths", lens], inputs_of(got))
        check(name + ": %s runs with --lengths" % be, other is not None, why)
        if other is not None:
            e, where = worst_of(got, other, skip=set(inputs_of(got)))
            check(name + ": %s as interp" % be, e < 2e-4, "%s off by %g" % (where, e))


# finite differences on the interpreter: L(x + e u, param + e v) against the gradients
def loss(t):
    L = float((t["y"] * t["dy"]).sum())
    for k in t:
        if k.startswith("final."):
            L += float((t[k] * t["dfinal." + k[len("final."):]]).sum())
    return L


rng = np.random.default_rng(3)
for cell, dims in (("stdlib/gru.cell", "H=3,D=2"), ("stdlib/lstm.cell", "H=3,D=2"), ("stdlib/lru.cell", "H=3,D=2"),
                   ("stdlib/gla.cell", "NH=2,K=3,V=4,D=2")):
    args = [cell, "--dims", dims]
    base, why = cellc_run(args, "interp", ["--T", str(T), "--B", str(B), "--seed", "9", "--lengths", lens])
    if base is None:
        check(cell + ": finite differences run", False, why)
        continue
    inp = inputs_of(base)
    for k in inp:  # a dfinal that counts, so that the final states' gradients are checked too
        if k.startswith("dfinal."):
            inp[k] = rng.standard_normal(inp[k].shape)
    base, why = cellc_run(args, "interp", ["--lengths", lens], inp)
    pname = sorted(k for k in inp if k.startswith("param."))[0]
    u, v = rng.standard_normal(inp["x"].shape), rng.standard_normal(inp[pname].shape)
    want = float((base["grad.x"] * u).sum() + (base["grad." + pname] * v).sum())
    eps, Ls = 1e-5, []
    for s in (1, -1):
        q = dict(inp)
        q["x"], q[pname] = inp["x"] + s * eps * u, inp[pname] + s * eps * v
        t, why = cellc_run(args, "interp", ["--lengths", lens], q)
        Ls.append(loss(t) if t is not None else float("nan"))
    fd = (Ls[0] - Ls[1]) / (2 * eps)
    check(cell + ": finite differences with lengths", abs(fd - want) < 1e-6 * max(1.0, abs(want)),
          "fd %.12g, gradient %.12g" % (fd, want))

# the chunked form with lengths, against sequential
for cell, dims in (("stdlib/gla.cell", "NH=2,K=3,V=4,D=2"), ("stdlib/hgrn2.cell", "NH=2,K=3,V=4,D=2"),
                   ("stdlib/mamba2.cell", "NH=2,P=3,N=3,D=2")):
    args = [cell, "--dims", dims, "--set", "chunk=3"]
    ref, why = cellc_run(args + ["--mode", "sequential"], "interp", ["--T", str(T), "--B", str(B), "--lengths", lens])
    check(cell + ": sequential with lengths runs", ref is not None, why)
    for be, bound in (("interp", 1e-10), ("cpu", 2e-4)):
        got, why = cellc_run(args + ["--mode", "chunked"], be, ["--lengths", lens], inputs_of(ref) if ref else None)
        check(cell + ": chunked on %s runs with lengths" % be, got is not None, why)
        if ref is not None and got is not None:
            e, where = worst_of(ref, got, skip=set(inputs_of(ref)))
            check(cell + ": chunked on %s as sequential" % be, e < bound, "%s off by %g" % (where, e))

# lengths all T: bit for bit the run without lengths
for be in ("cpu", "interp"):
    a, why = cellc_run(["stdlib/gru.cell", "--dims", "H=3,D=2"], be, ["--T", "5", "--B", "2"])
    b, why2 = cellc_run(["stdlib/gru.cell", "--dims", "H=3,D=2"], be, ["--T", "5", "--B", "2", "--lengths", "5,5"])
    ok = a is not None and b is not None and all(np.array_equal(a[k], b[k]) for k in a)
    check("lengths all T on %s: as no lengths, bit for bit" % be, ok, why + why2)

# cellc emit --target cpu: the C API's lengths (ABI 2) through tests/emit/harness.c against
# `cellc run --lengths` on the float64 interpreter
import emit_cli  # noqa: E402

emit_cli.T, emit_cli.B = T, B
for cell_file in ("stdlib/gru.cell", "stdlib/lstm.cell", "stdlib/lru.cell", "stdlib/mamba2.cell", "stdlib/qrnn.cell"):
    cell = os.path.basename(cell_file)[:-len(".cell")]
    work = os.path.join(tmp, "emit-" + cell)
    os.makedirs(work)
    edir = os.path.join(work, "emitted")
    r = emit_cli.emit(cell_file, edir)
    check("emit %s" % cell, r.rc == 0, r.why())
    if r.rc != 0:
        continue
    import json
    meta = json.load(open(os.path.join(edir, cell + ".json")))
    ref = emit_cli.reference(cell_file, meta, work, ["--lengths", lens])
    ind, odir = os.path.join(work, "in"), os.path.join(work, "out")
    emit_cli.write_inputs(ref, meta, ind)
    with open(os.path.join(ind, "lengths"), "w") as f:
        f.write(" ".join(map(str, LENGTHS)) + "\n")
    exe = os.path.join(work, "harness")
    b = emit_cli.build_harness(edir, cell, False, exe)
    check("%s: the harness links" % cell, b.rc == 0, b.why())
    if b.rc != 0:
        continue
    os.makedirs(odir)
    h = run([exe, ind, odir], 300)
    check("%s: the harness with lengths" % cell, h.rc == 0 and "ok lengths: 1 and 2 threads" in h.out, h.why())
    if h.rc != 0:
        continue
    pairs = [("len.y", "y"), ("len.dx", "grad.x")]
    pairs += [("len.final.%d" % i, "final." + st["name"]) for i, st in enumerate(meta["states"])]
    pairs += [("len.dh0.%d" % i, emit_cli.gh0_name(st)) for i, st in enumerate(meta["states"])]
    pairs += [("len.grad.%d" % i, "grad.param." + p["name"]) for i, p in enumerate(meta["params"])]
    worst, where = 0.0, ""
    for mine, theirs in pairs:
        got = np.fromfile(os.path.join(odir, mine), dtype="<f4").reshape(ref[theirs].shape)
        e = rel(ref[theirs], got)
        if e > worst:
            worst, where = e, theirs
    check("%s (%s): emitted P_forward_ex and P_backward_ex with lengths as cellc run --lengths" % (cell, meta["mode"]),
          worst < 2e-4, "%s off by %g" % (where, worst))

# errors
gru = ["run", "stdlib/gru.cell", "--dims", "H=3,D=2", "--T", "5", "--B", "2", "--out", os.path.join(tmp, "e.st")]
for flag, why in (("4", "one length for two rows"), ("4,5,5", "three lengths"), ("0,5", "a length 0"),
                  ("6,5", "a length above T"), ("4,x", "not a number"), ("4,", "an empty length")):
    r = run([CELLC, *gru, "--lengths", flag], 60)
    check("--lengths %s (%s): status 2" % (flag, why), r.rc == 2 and "--lengths" in r.err, r.why())
for arr, why in ((np.array([3, 5], dtype=np.float32), "F32"), (np.array([3, 6], dtype=np.int64), "above T"),
                 (np.array([3, 5, 5], dtype=np.int32), "shape [3]"), (np.array([0, 5], dtype=np.int32), "zero")):
    path = os.path.join(tmp, "bad.st")
    sft.write(path, {"lengths": arr})
    r = run([CELLC, *gru, "--inputs", path], 60)
    check("input lengths %s: status 1 naming the tensor" % why, r.rc == 1 and "'lengths'" in r.err, r.why())
sft.write(os.path.join(tmp, "ok.st"), {"lengths": np.array([3, 5], dtype=np.int64)})
r = run([CELLC, *gru, "--inputs", os.path.join(tmp, "ok.st")], 60)
check("input lengths I64: runs", r.rc == 0, r.why())
r = run([CELLC, *gru, "--inputs", os.path.join(tmp, "ok.st"), "--lengths", "3,5"], 60)
check("--lengths and input lengths: status 2", r.rc == 2, r.why())
finish()
