"""python_cuda_gpu.py: the cellc package on CUDA tensors, on a real GPU (make test-gpu, tests/gpu.sh).

    python3 tests/python_cuda_gpu.py             on a machine with a GPU: the checks below
    python3 tests/python_cuda_gpu.py --prebuild  here, without a GPU: fill the cache it will use

The GPU machine has PyTorch and the CUDA toolkit but no host compiler, so neither the cpu library
(`cellc emit` links it with cc) nor the CUDA one (nvcc needs a host compiler) can be built there:
--prebuild makes every cache entry the checks load (the cpu entries, their initial values, the
emitted P.cu and its libP.so built by nvcc for CELLC_CUDA_ARCH, default sm_90: H100 and H200) in
CELLC_CACHE (default build/python-cuda-cache, which must travel with the bundle). The package finds
them there by the bytes of cellc, the cell sources and P.cu (docs/python.md, "The cache").

The checks, each cell loaded by cellc.load and moved by .cuda() / .to("cuda"): y, finals and the
gradients of x, h0 and every param on CUDA tensors (the emitted CUDA library) equal the same
module's on CPU tensors (the cpu library) within 1e-4 relative, for gru (sequential, GEMMs in the
step), lru (scan, complex) and lstm (two states), with lengths and batch_first; the same on a
non-default stream; float64 and gates=True (the torch-ops step) on CUDA equal the CPU's; a
module on the CPU with x on the GPU is a ValueError; no library was built here when the cache was
prebuilt. Fails loudly (exit 1) where torch.cuda is not available. Ends with "N passed, M failed"."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("CELLC_CACHE", os.path.join(ROOT, "build", "python-cuda-cache"))
os.environ.setdefault("CELLC_BIN", os.path.join(ROOT, "bin", "cellc"))
ARCH = os.environ.setdefault("CELLC_CUDA_ARCH", "sm_90")
PREBUILD = sys.argv[1:] == ["--prebuild"]

import torch  # noqa: E402

import cellc  # noqa: E402
from cellc import _build  # noqa: E402
from clitest import check, finish  # noqa: E402

# (name, dims, mode): what the checks load; --prebuild loads the same
CASES = [("gru", dict(D=32, H=64), None), ("lru", dict(D=16, H=32), "scan"), ("lstm", dict(D=16, H=32), None)]


def load(name, dims, mode, **kw):
    return cellc.load(name, seed=3, mode=mode, **dims, **kw)


def prebuild():
    for name, dims, mode in CASES:
        for dtype in (torch.float32, torch.float64):
            m = load(name, dims, mode, dtype=dtype)
        spec = m._cuda_spec
        src = _build.cuda_source(*spec)
        lib = _build.cuda_library(src, ARCH, lambda s, o: _build.nvcc_build(s, o, ARCH))
        print("prebuilt %s: %s" % (name, os.path.relpath(lib, os.environ["CELLC_CACHE"])))
    print("python_cuda_gpu: the cache %s is ready (%s); carry it to the GPU machine" % (os.environ["CELLC_CACHE"], ARCH))


def rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-6))


def run(m, x, h0, lengths, dy, dfin, gates=False):
    m.zero_grad()
    xi = x.clone().requires_grad_()
    hi = {k: v.clone().requires_grad_() for k, v in h0.items()}
    out = m(xi, hi, lengths, gates=gates)
    y, finals = out[0], out[1]
    loss = (y * dy).sum() + sum((finals[k] * dfin[k]).sum() for k in finals)
    loss.backward()
    res = {"y": y, **{"final." + k: v for k, v in finals.items()}, "dx": xi.grad}
    res.update({"dh0." + k: v.grad for k, v in hi.items()})
    res.update({"d" + n: p.grad for n, p in m.named_parameters() if p.requires_grad})
    if gates:
        res.update({"gate." + k: v for k, v in out[2].items()})
    return res


def compare(label, cpu, gpu, T, B, lengths=None, gates=False, bound=1e-4):
    dt = cpu.dtype
    g = torch.Generator().manual_seed(T * 1000 + B)
    x = torch.randn(T, B, cpu.input_size, generator=g, dtype=dt)
    if cpu.batch_first:
        x = x.transpose(0, 1).contiguous()
    h0 = {k: 0.5 * torch.randn(v.shape, generator=g, dtype=dt) for k, v in cpu.initial_states(B).items()}
    y = cpu(x, h0, lengths)[0]
    dy = torch.randn(y.shape, generator=g, dtype=dt)
    dfin = {k: torch.randn(v.shape, generator=g, dtype=dt) for k, v in h0.items()}
    want = run(cpu, x, h0, lengths, dy, dfin, gates)
    dev = lambda d: {k: v.cuda() for k, v in d.items()}
    got = run(gpu, x.cuda(), dev(h0), lengths, dy.cuda(), dev(dfin), gates)
    on_gpu = all(v.is_cuda for v in got.values())
    worst = max(rel(got[k], want[k]) for k in want)
    check("%s T=%d B=%d%s: on CUDA = on CPU (%d tensors: y, finals, gradients%s): worst %.1e" % (
        label, T, B, " lengths" if lengths else "", len(want), ", gates" if gates else "", worst),
        sorted(got) == sorted(want) and on_gpu and worst < bound, str(worst))


def main():
    if not torch.cuda.is_available():
        print("python_cuda_gpu: FAIL: torch.cuda is not available on this machine (torch %s): this check needs "
              "a GPU and PyTorch built with CUDA" % torch.__version__)
        print("0 passed, 1 failed")
        sys.exit(1)
    print("python_cuda_gpu: %s, torch %s, cache %s" % (torch.cuda.get_device_name(0), torch.__version__,
                                                     os.environ["CELLC_CACHE"]))
    for name, dims, mode in CASES:
        cpu = load(name, dims, mode)
        gpu = load(name, dims, mode).cuda()  # the same seed: the same params
        compare(name, cpu, gpu, 9, 8)
        compare(name, cpu, gpu, 300, 8)
        compare(name, cpu, gpu, 1, 1)
        compare(name, cpu, gpu, 40, 4, lengths=[40, 7, 23, 1])
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            compare(name + " on a stream of its own", cpu, gpu, 50, 3)
        torch.cuda.synchronize()
        compare(name + " gates=True (torch ops)", cpu, gpu, 20, 3, gates=True)
        cpu64 = load(name, dims, mode, dtype=torch.float64)
        compare(name + " float64 (torch ops)", cpu64, load(name, dims, mode, dtype=torch.float64).to("cuda"), 20, 3,
                bound=1e-10)
    cpu = load("gru", CASES[0][1], None, batch_first=True)
    compare("gru batch_first", cpu, load("gru", CASES[0][1], None, batch_first=True).to("cuda"), 30, 5)
    try:
        cpu(torch.randn(3, 2, CASES[0][1]["D"], device="cuda"))
        msg = None
    except ValueError as e:
        msg = str(e)
    check("x on the GPU into a module on the CPU is a ValueError saying to move it", msg is not None and ".to(" in msg,
          str(msg))
    # the cache's keys hold a hash of cellc's bytes: a stripped or rebuilt copy of the binary that
    # filled it misses every entry (and re-emits them here)
    check("nothing was compiled here (the cache was prebuilt by this very bin/cellc): %s" % _build.stats,
          _build.stats["compiles"] == 0 and _build.stats["cuda_builds"] == 0, str(_build.stats))
    finish()


if __name__ == "__main__":
    if PREBUILD:
        prebuild()
    else:
        try:
            main()
        except Exception as e:  # noqa: BLE001 - reported as a failure with its traceback
            import traceback
            traceback.print_exc()
            if isinstance(e, _build.CellcError):  # cellc emit or nvcc ran, and failed: the cache missed
                print("python_cuda_gpu: was %s prebuilt (make python-cuda-prebuild, by the machine that built this "
                      "very bin/cellc) and carried here? The GPU machine cannot build the cpu or CUDA libraries"
                      % os.environ["CELLC_CACHE"])
            check("the checks ran to their end", False, repr(e))
            finish()
