"""The chunked form (docs/language.md, "The chunked form") from the command line: `cellc run
--mode chunked` writes the same tensors as `--mode sequential` (interp float64 within 1e-10, cpu
float32 within 1e-4 of the interpreter) for gla, hgrn2, mamba2 and gated_deltanet (the delta rule),
chunks of 16 over T = 37, on cuda-emu too; a cell without the form is refused with the reason; derive, which does not run it yet, says so;
CELLC_PROFILE prints the form's parts.
Ends with "N passed, M failed"."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
import sft  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, finish, run  # noqa: E402

CELLC = os.environ.get("CELLC", "bin/cellc")
tmp = tempfile.mkdtemp()


def tensors(cell, dims, mode, backend):
    out = os.path.join(tmp, "%s-%s.st" % (mode, backend))
    args = ["run", cell, "--dims", dims, "--T", "37", "--B", "2", "--seed", "3", "--backend", backend,
            "--mode", mode, "--set", "chunk=16", "--out", out]
    if backend == "interp":
        args += ["--precision", "f64"]
    r = run([CELLC, *args], 300)
    if r.rc != 0:
        return None, r.why()
    return sft.load(out), ""


def worst(ref, got):
    w, name = 0.0, ""
    for k, a in ref.items():
        if k not in got:
            return float("inf"), k + " missing"
        a, b = a.astype("float64").ravel(), got[k].astype("float64").ravel()
        if a.size == 0:
            continue
        e = float(abs(a - b).max()) / max(1e-30, float(abs(a).max()))
        if e > w:
            w, name = e, k
    return w, name


cases = [("stdlib/gla.cell", "NH=2,K=3,V=4,D=5"), ("stdlib/hgrn2.cell", "NH=2,K=3,V=4,D=5"),
         ("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5"), ("stdlib/gated_deltanet.cell", "NH=2,K=3,V=4,D=5")]
for cell, dims in cases:
    base = os.path.basename(cell)
    ref, why = tensors(cell, dims, "sequential", "interp")
    check("%s sequential runs" % base, ref is not None, why)
    for backend, bound in (("interp", 1e-10), ("cpu", 1e-4), ("cuda-emu", 1e-4)):
        got, why = tensors(cell, dims, "chunked", backend)
        check("%s chunked on %s runs" % (base, backend), got is not None, why)
        if ref is not None and got is not None:
            e, name = worst(ref, got)
            check("%s chunked on %s as sequential" % (base, backend), e < bound, "%s off by %g" % (name, e))

# CELLC_PROFILE: the chunked form's parts (docs/tuning.md), then each program's profile
r = run([CELLC, "run", "stdlib/gla.cell", "--dims", "NH=2,K=3,V=4,D=5", "--T", "37", "--B", "2", "--backend", "cpu",
         "--mode", "chunked", "--out", os.path.join(tmp, "p.st")], 300, env=dict(os.environ, CELLC_PROFILE="1"))
check("chunked profile", r.rc == 0 and "profile: chunked form, 1 run: in " in r.err and "chunk ops " in r.err
      and "profile: chunked form, the out program:" in r.err, r.why())

# cuda-emu: keys and values of 64, whose whole cell the cuda back end's kernels do not take (the
# chunked form's programs do); a chunk whose block does not fit the shared memory: refused, naming it
r = run([CELLC, "run", "stdlib/gla.cell", "--dims", "NH=1,K=64,V=64,D=4", "--T", "5", "--B", "1", "--backend", "cuda-emu",
         "--mode", "chunked", "--out", os.path.join(tmp, "k64.st")], 300)
check("gla K = V = 64 chunked on cuda-emu", r.rc == 0, r.why())
r = run([CELLC, "run", "stdlib/gla.cell", "--dims", "NH=1,K=64,V=64,D=4", "--T", "5", "--B", "1", "--backend", "cuda-emu",
         "--mode", "chunked", "--set", "chunk=128", "--out", os.path.join(tmp, "k64.st")], 300)
check("a chunk too large for cuda-emu's shared memory refused", r.rc == 3 and "bytes of shared memory a block" in r.err
      and "--set chunk=L" in r.err, r.why())

# the delta rule on cuda-emu with keys and values of different sizes, against sequential
ref, why = tensors("stdlib/gated_deltanet.cell", "NH=2,K=4,V=3,D=5", "sequential", "interp")
got, why2 = tensors("stdlib/gated_deltanet.cell", "NH=2,K=4,V=3,D=5", "chunked", "cuda-emu")
e, name = worst(ref, got) if ref is not None and got is not None else (float("inf"), why if ref is None else why2)
check("the delta rule chunked on cuda-emu, K != V, as sequential", e < 1e-4, "%s off by %g" % (name, e))
with open(os.path.join(tmp, "mlin.cell"), "w") as f:  # matrix-linear, not the delta rule
    f.write("cell mlin {\n  input x[D]\n  dim K\n  state S[K, K]\n  param W[K, K] ~ standard\n  param Wk[K, D] ~ standard\n"
            "  let k = Wk @ x\n  S = S @ W + outer(k, k)\n  output flatten(S @ unsqueeze(k, 1))\n}\n")
r = run([CELLC, "run", os.path.join(tmp, "mlin.cell"), "--dims", "K=3,D=2", "--mode", "chunked", "--out",
         os.path.join(tmp, "ml.st")], 60)
check("a matrix-linear state other than the delta rule refused", r.rc == 1 and "not the delta rule" in r.err, r.why())
r = run([CELLC, "run", "stdlib/mamba.cell", "--dims", "E=4,N=3,R=2,D=5", "--mode", "chunked", "--out",
         os.path.join(tmp, "m.st")], 60)
check("mamba chunked refused", r.rc == 1 and "its decay varies along both" in r.err, r.why())
r = run([CELLC, "derive", "stdlib/gla.cell", "--dims", "NH=2,K=3,V=4,D=5", "--mode", "chunked"], 60)
check("derive chunked refused", r.rc == 1 and "does not yet" in r.err, r.why())
finish()
