"""emit_torch.py: the speed of P_torch.py (cellc emit --torch: the emitted forward and backward over
libP.so) against the same cell written in PyTorch as a Python loop over time (tests/torch/cells.py,
in float32), forward + backward of one batch, one thread each (OPENBLAS_NUM_THREADS=1,
torch.set_num_threads(1)). Best of REPS after a warm-up.

usage (repository root, after make):  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/emit_torch.py [H D T B REPS]
Prints one line per cell: the seconds of each and the ratio."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))
import cells  # noqa: E402


def best(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    H, D, T, B, REPS = (int(a) for a in (sys.argv[1:6] if len(sys.argv) > 5 else (128, 128, 128, 32, 3)))
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="cellc-bench-emit-")
    print("H=%d D=%d T=%d B=%d, forward+backward seconds per batch, best of %d, 1 thread" % (H, D, T, B, REPS))
    for cell in ("gru", "lstm", "mingru", "lru"):
        out = os.path.join(work, cell)
        subprocess.run([os.path.join(ROOT, "bin", "cellc"), "emit", os.path.join(ROOT, "stdlib", cell + ".cell"), "--dims",
                        "D=%d,H=%d" % (D, H), "--out", out, "--torch"], check=True, capture_output=True)
        spec = importlib.util.spec_from_file_location(cell + "_torch", os.path.join(out, cell + "_torch.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        m = mod.Module()
        pspec, sspec = cells.shapes(cell, H, D)
        x = torch.randn(T, B, D)
        h0 = {k: torch.zeros((B,) + s) for k, (s, _) in sspec.items()}
        params = {n: p.detach().clone().requires_grad_() for n, p in m.named_parameters()}

        def emitted():
            y, fin = m(x, h0)
            y.sum().backward()

        def loop():
            y, fin, _ = cells.run(cell, params, x, h0)
            y.sum().backward()

        te, tl = best(emitted, REPS), best(loop, REPS)
        print("%-7s P_torch.py %.4f s   PyTorch loop %.4f s   speedup %.2fx" % (cell, te, tl, tl / te))


if __name__ == "__main__":
    main()
