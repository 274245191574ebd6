"""python_cuda_emu.py: the cellc package's CUDA path (python/cellc/_cuda.py) without a GPU. The
cell's emitted CUDA target (P.cu) is built, as the package builds it for a GPU but by the host C++
compiler, over cuda-emu (tests/python_cuda_emu.c: P.cu's host part with CELLC_EMIT_HOST_ONLY, its
kernels run by the emulator, device pointers being host pointers); with that builder set as the
package's test hook (cellc._cuda.emulator), float32 CPU tensors take the CUDA path: the same
ctypes calls with data_ptr() as device pointers as on a GPU. Checks: y, finals and the gradients of
x, h0 and every param equal the cpu library's within float32 rounding (gru sequential, lru with
complex params and states in scan mode, lstm with two states; T = 1 and 9, lengths,
batch_first, frozen params), the emulator launched kernels for each call, a second load builds
nothing, a copy of the cache and of cellc (a GPU machine's bundle) finds the prebuilt library,
float64 and gates=True keep the torch-ops path, and the device errors. What it cannot check: CUDA
tensors, streams, the nvcc build, the kernels on a GPU (tests/python_cuda_gpu.py, make test-gpu).
Ends with "N passed, M failed"."""
import ctypes
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
CACHE = tempfile.mkdtemp(prefix="cellc-pycuda-")
os.environ["CELLC_CACHE"] = CACHE
os.environ.setdefault("CELLC_BIN", os.path.join(ROOT, "bin", "cellc"))

import torch  # noqa: E402

import cellc  # noqa: E402
from cellc import _build, _cuda  # noqa: E402
from clitest import check, finish  # noqa: E402

CUDA_HOME = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
WORK = tempfile.mkdtemp(prefix="cellc-pycuda-emu-")
# the emulator and what it needs, compiled once as position-independent code (libcellc.a's objects
# are not: they cannot go into a shared library)
EMU_SOURCES = (glob.glob(os.path.join(ROOT, "runtime/support/*.c")) + glob.glob(os.path.join(ROOT, "compiler/backend/cuda/emu/*.c"))
               + [os.path.join(ROOT, "compiler/backend/cuda", f) for f in ("cuda_api.c", "cuda_util.c", "cuda_compile.c", "cuda_headers.c")])
FOLDERS = [d for d, _, files in os.walk(ROOT) if any(f.endswith(".h") for f in files)
           and os.path.relpath(d, ROOT).split(os.sep)[0] in ("runtime", "compiler", "lang")]
INCS = ["-I" + d for d in sorted(FOLDERS)] + ["-I" + os.path.join(ROOT, "build", "gen"), "-isystem", CUDA_HOME + "/include"]
OBJS = []


def sh(args, cwd=ROOT):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr[-4000:]))


def emu_objects():
    if not OBJS:
        for i, src in enumerate(EMU_SOURCES):
            obj = os.path.join(WORK, "emu%d.o" % i)
            sh(["gcc", "-std=c11", "-O2", "-fPIC", "-fopenmp", "-D_GNU_SOURCE", "-w"] + INCS + ["-c", src, "-o", obj])
            OBJS.append(obj)
    return OBJS


def emu_build(src, out):
    """The package's builder hook: src/P.cu -> out/libP.so over cuda-emu."""
    sh(["g++", "-O1", "-shared", "-fPIC", "-Wall", "-Werror", "-Wl,-Bsymbolic", "-DCELLC_EMIT_HOST_ONLY", "-isystem",
        CUDA_HOME + "/include", "-x", "c++", os.path.join(src, "P.cu"), "-x", "c",
        '-DCELLC_EMU_PCU="%s"' % os.path.join(src, "P.cu")] + INCS + [os.path.join(HERE, "python_cuda_emu.c"), "-x", "none"]
       + emu_objects() + ["-fopenmp", "-lopenblas", "-lm", "-ldl", "-o", os.path.join(out, "libP.so")])


def counter(lib, name):
    f = getattr(ctypes.CDLL(lib.path), "cellc_emu_" + name)
    f.restype = ctypes.c_long
    return f()


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-6))


def run(m, x, h0, lengths, dy, dfin, emulated):
    """y, finals and the gradients of x, h0 and the params, through the CUDA path or the cpu one."""
    _cuda.emulator = emu_build if emulated else None
    try:
        m.zero_grad()
        xi = x.clone().requires_grad_()
        hi = {k: v.clone().requires_grad_() for k, v in h0.items()}
        y, finals = m(xi, hi, lengths)
        loss = (y * dy).sum() + sum((finals[k] * dfin[k]).sum() for k in finals)
        loss.backward()
        grads = {"x": xi.grad, **{"h0." + k: v.grad for k, v in hi.items()}}
        grads.update({"d" + n: p.grad for n, p in m.named_parameters() if p.requires_grad})
        return y, finals, grads
    finally:
        _cuda.emulator = None


def compare(label, m, T, B, lengths=None, bound=2e-5):
    torch.manual_seed(T * 100 + B)
    x = torch.randn(T, B, m.input_size)
    if m.batch_first:
        x = x.transpose(0, 1).contiguous()
    start = m.initial_states(B)
    h0 = {k: 0.5 * torch.randn(v.shape) for k, v in start.items()}
    y, finals = m(x, h0, lengths)
    dy, dfin = torch.randn_like(y), {k: torch.randn_like(v) for k, v in finals.items()}
    want = run(m, x, h0, lengths, dy, dfin, False)
    got = run(m, x, h0, lengths, dy, dfin, True)
    worst = max([rel(got[0], want[0])] + [rel(got[1][k], want[1][k]) for k in want[1]]
                + [rel(got[2][k], want[2][k]) for k in want[2]])
    names = sorted(got[2]) == sorted(want[2]) and all(got[2][k] is not None for k in got[2])
    check("%s T=%d B=%d%s: the CUDA path on cuda-emu = the cpu library (y, finals, %d gradients): worst %.1e"
          % (label, T, B, " lengths" if lengths else "", len(want[2]), worst), names and worst < bound, str(worst))


cases = [("gru", dict(D=3, H=5), None), ("lru", dict(D=4, H=6), "scan"), ("lstm", dict(D=3, H=4), None)]
libs = {}
for name, dims, mode in cases:
    m = cellc.load(name, seed=2, mode=mode, **dims)
    b0 = _build.stats["cuda_builds"]
    compare(name, m, 9, 3)
    lib = _cuda._libraries[(m._entry, "emu")]
    libs[name] = lib
    check("%s: its CUDA library built once (%s), its kernels launched on the emulator (%d launches, %d GEMMs)"
          % (name, os.path.relpath(lib.path, CACHE), counter(lib, "launches"), counter(lib, "gemms")),
          _build.stats["cuda_builds"] == b0 + 1 and counter(lib, "launches") > 0, str(_build.stats))
    compare(name, m, 1, 1)
    compare(name, m, 7, 4, lengths=[7, 2, 5, 1])

m = cellc.load("gru", D=3, H=5, seed=2, batch_first=True)
compare("gru batch_first", m, 6, 2)
m.Whz.requires_grad_(False)
compare("gru with Whz frozen (its gradient not asked for)", m, 5, 2)

# a second load builds nothing; a copy of cellc (new mtime) and of the cache finds what was built
e0, b0 = _build.stats["cuda_emits"], _build.stats["cuda_builds"]
m = cellc.load("gru", D=3, H=5, seed=2)
compare("gru loaded again", m, 4, 2)
check("a second load in the process emits and builds nothing", (_build.stats["cuda_emits"], _build.stats["cuda_builds"]) == (e0, b0),
      str(_build.stats))
bundle = os.path.join(WORK, "bundle")
os.makedirs(os.path.join(bundle, "bin"))
shutil.copy(os.environ["CELLC_BIN"], os.path.join(bundle, "bin", "cellc"))  # copied: a new mtime
shutil.copytree(CACHE, os.path.join(bundle, "cache"))
code = ("import torch, cellc\nfrom cellc import _cuda\n\n"
        "def refuse(src, out):\n    raise RuntimeError('no build expected')\n\n"
        "_cuda.emulator = refuse\nm = cellc.load('gru', D=3, H=5, seed=2)\ny = m(torch.ones(4, 2, 3))[0]\n"
        "print(cellc.stats['compiles'], cellc.stats['inits'], cellc.stats['cuda_emits'], cellc.stats['cuda_builds'])\n")
env = dict(os.environ, CELLC_BIN=os.path.join(bundle, "bin", "cellc"), CELLC_CACHE=os.path.join(bundle, "cache"),
           CELLC_STDLIB=os.path.join(ROOT, "stdlib"), PYTHONPATH=os.path.join(ROOT, "python"))
p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
check("a copy of cellc and of the cache (as carried to a GPU machine) emits, draws and builds nothing",
      p.returncode == 0 and p.stdout.split() == ["0", "0", "0", "0"], p.stdout + p.stderr[-2000:])

# float64 and gates=True keep the torch-ops path: no launch
lib = libs["gru"]
n0 = counter(lib, "launches")
_cuda.emulator = emu_build
try:
    m = cellc.load("gru", D=3, H=5, seed=2)
    y, _, g = m(torch.randn(4, 2, 3), gates=True)
    m64 = cellc.load("gru", D=3, H=5, seed=2, dtype=torch.float64)
    y64, _ = m64(torch.randn(4, 2, 3, dtype=torch.float64))
    check("gates=True and float64 run the torch-ops step, not the CUDA library", counter(lib, "launches") == n0 and "z" in g,
          str(counter(lib, "launches") - n0))
finally:
    _cuda.emulator = None


def raises(kind, fn):
    try:
        fn()
    except kind as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the wrong kind is a failure, reported
        return "wrong exception %r" % e
    return None


m = cellc.load("gru", D=3, H=5)
msg = raises(ValueError, lambda: m(torch.randn(3, 2, 3, device="meta")))
check("x on a device neither CPU nor CUDA is a ValueError", msg is not None and "CPU or CUDA" in msg, str(msg))
msg = raises(ValueError, lambda: m(torch.randn(3, 2, 3), torch.zeros(2, 5, device="meta")))
check("an h0 on another device than x is a ValueError naming both", msg is not None and "meta" in msg and "cpu" in msg, str(msg))
m.to("meta")
msg = raises(ValueError, lambda: m(torch.randn(3, 2, 3)))
check("a module on another device than x is a ValueError that says to move it",
      msg is not None and ".to('cpu')" in msg, str(msg))
noisy = cellc.load(os.path.join(ROOT, "tests", "cells", "learned_gate.cell"), cell="learned_gate", D=3, H=4, train_noise=True)
_cuda.emulator = emu_build
try:
    msg = raises(NotImplementedError, lambda: noisy(torch.randn(3, 2, 3)))
finally:
    _cuda.emulator = None
check("train_noise=True on the CUDA path is refused (no device RNG)", msg is not None and "train_noise" in msg, str(msg))

shutil.rmtree(WORK)
shutil.rmtree(CACHE)
finish()
