"""Formats bench/chunked.sh's JSON lines as the markdown table of docs/performance.md ("Matrix
states: the chunkwise-parallel target"). Counts, per token, of one training step (forward and
backward, the backward taken as twice the forward's products):
  core  (chunk L = 64, per head, K keys, V values; the causal half of the intra-chunk squares)
        forward L K (Q K^T) + L V (A V) + 2 K V (q S_0) + 2 K V (the chunk's k^T v) = L (K + V) + 4 K V
  cell  the stdlib cell's projections, 2 FLOPs per weight per token:
        gla    D (2 NH K + 3 NH V + R) + NH K R  weights (Wq, Wk, Wv, Wr, Wo, Wa1, Wa2; R = 16)
        hgrn2  D (2 NH K + 2 NH V)               (Wf, Wq, Wi, Wo)
        mamba2 D (3 NH P + 2 N + NH)             (Wz, Wx, Wo, WB, WC, Wdt; mamba2's core has K = N, V = P)
  bytes a floor for the activations: every per-token vector (x, y, and per head q, k, log decay,
        v, o; gla also r) written once and read once forward, its gradient written and read once
        backward: 16 bytes per float32 element.
Elementwise work (gates, norms, the decay factors) is left out: the floors are lower bounds."""
import json
import sys

L = 64
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
machines = [r for r in rows if r["kind"] == "machine"]
fma_all = max(m["fma_peak_all"] for m in machines)
fma_1 = max(m["fma_peak_1"] for m in machines)
copy_all = max(m["copy_all"] for m in machines)


def dims_of(s):
    return {kv.split("=")[0]: int(kv.split("=")[1]) for kv in s.split(",")}


def counts(cell, d):
    """(core FLOPs, cell FLOPs, bytes) per token, forward and backward"""
    D, NH = d["D"], d["NH"]
    if cell == "mamba2":
        K, V = d["N"], d["P"]
        w = D * (3 * NH * V + 2 * K + NH)
        elems = 2 * D + 3 * NH * V + 2 * K + NH           # x, y; z, u, y per head; b, c; dt
    else:
        K, V = d["K"], d["V"]
        w = D * (2 * NH * K + 3 * NH * V + 16) + NH * K * 16 if cell == "gla" else D * (2 * NH * K + 2 * NH * V)
        elems = 2 * D + NH * (3 * K + 2 * V) + (NH * V if cell == "gla" else 0)
    core = NH * (L * (K + V) + 4 * K * V)
    return 3 * core, 3 * 2 * w, 16 * elems


best = {}
for r in rows:
    if r["kind"] == "machine":
        continue
    key = (r["case"], r["kind"] if r["kind"] == "cellc" else r["what"])
    if key not in best or r["total_s"] < best[key]["total_s"]:
        best[key] = r

ncpu = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rounds = sys.argv[3] if len(sys.argv) > 3 else "?"
reps = sys.argv[4] if len(sys.argv) > 4 else "?"
# the floor on all cores: nproc times the 1-core peak (this CPU's measured all-core peak is that on a
# quiet machine; other jobs on the shared cores depress the measurement, not what the cores can do)
fma_n = max(fma_all, ncpu * fma_1)
print(f"Machine limits measured in this run (build/peak, best of a run before and after): FMA peak "
      f"{fma_1 / 1e9:.0f} GFLOP/s on 1 core, {fma_all / 1e9:.0f} on all {ncpu} (the floors below take "
      f"{fma_n / 1e9:.0f}: {ncpu} x the 1-core peak); copy {copy_all / 1e9:.1f} GB/s (read + write, all cores). "
      f"Each time is the best of {rounds} interleaved rounds of {reps} repetitions each (after a warm-up), "
      "at 1 and nproc threads (the count that gave it in brackets): the machine is shared and noisy.\n")
print("| case | dims | cellc scan s | PyTorch chunked core s | PyTorch chunked cell s | PyTorch cell / cellc |")
print("|---|---|---|---|---|---|")
cases = list(dict.fromkeys(r["case"] for r in rows if r["kind"] != "machine"))
targets = []
for case in cases:
    c, tc, tw = best.get((case, "cellc")), best.get((case, "core")), best.get((case, "cell"))
    if not (c and tc and tw):
        print(f"| {case} | (missing: {'cellc ' if not c else ''}{'core ' if not tc else ''}{'cell' if not tw else ''}) |")
        continue
    print(f"| {case} | {tc['dims']} | {c['total_s']:.3f} ({c['threads']}) | {tc['total_s']:.3f} ({tc['threads']}) | "
          f"{tw['total_s']:.3f} ({tw['threads']}) | {tw['total_s'] / c['total_s']:.2f}x |")
    d = dims_of(tc["dims"])
    tokens = tc["T"] * tc["B"]
    fc, fw, by = counts(tc["cell"], d)
    targets.append(f"| {case} | {fc * tokens / 1e9:.2f} + {fw * tokens / 1e9:.2f} | "
                   f"{fc * tokens / fma_n * 1e3:.0f} / {(fc + fw) * tokens / fma_n * 1e3:.0f} | "
                   f"{by * tokens / copy_all * 1e3:.1f} | {c['total_s'] / ((fc + fw) * tokens / fma_n):.0f}x | "
                   f"{c['total_s'] / 5 * 1e3:.0f} | {tw['total_s'] / 10 * 1e3:.0f} | {tc['total_s'] / 10 * 1e3:.0f} |")
print("\nPyTorch cell / cellc above 1: cellc's scan is faster than the PyTorch chunked cell.\n")
print("The issue's targets for the chunked form against the limits (ms per training step; FMA floors on all "
      "cores, of the counted products only):\n")
print("| case | GFLOP per step, core + cell | FMA floor ms, core / whole cell | bytes floor ms | cellc scan / floor | "
      "5x cellc ms | 10x PyTorch cell ms | 10x PyTorch core ms |")
print("|---|---|---|---|---|---|---|---|")
for t in targets:
    print(t)
