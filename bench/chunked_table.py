"""Formats bench/chunked.sh's JSON lines as the markdown table of docs/performance.md ("Matrix
states: the chunkwise-parallel target"). Counts, per token, of one training step (forward and
backward, the backward taken as twice the forward's products):
  core  (chunk L = 64, per head, K keys, V values; the causal half of the intra-chunk squares)
        forward L K (Q K^T) + L V (A V) + 2 K V (q S_0) + 2 K V (the chunk's k^T v) = L (K + V) + 4 K V
        gated_deltanet's delta rule (the UT / WY form, bench/torch_chunked.py's delta_chunked):
        forward L K (the strictly lower K K^T) + L K (Q K^T) + L (K + V) (the unit triangular
        solve, L^2 / 2 multiply-adds per chunk for each of its V + K right-hand sides: U and W)
        + L V (the causal (Q K^T) w) + 2 K V (W S_0) + 2 K V (q S_0) + 2 K V (the state update
        k^T w) = L (3 K + 2 V) + 6 K V: 45,056 at K = V = L = 64 (GLA's core 24,576)
  cell  the stdlib cell's projections, 2 FLOPs per weight per token:
        gla    D (2 NH K + 3 NH V + R) + NH K R  weights (Wq, Wk, Wv, Wr, Wo, Wa1, Wa2; R = 16)
        hgrn2  D (2 NH K + 2 NH V)               (Wf, Wq, Wi, Wo)
        mamba2 D (3 NH P + 2 N + NH)             (Wz, Wx, Wo, WB, WC, Wdt; mamba2's core has K = N, V = P)
        gated_deltanet D (2 NH K + 3 NH V + 2 NH) (Wq, Wk, Wv, Wg, Wo, Wb, Wa)
  bytes a floor for the activations: every per-token vector (x, y, and per head q, k, log decay,
        v, o; gla also r; gated_deltanet q, k, v, o, the output gate, beta and the log decay)
        written once and read once forward, its gradient written and read once backward: 16
        bytes per float32 element.
Elementwise work (gates, norms, the decay factors) is left out: the floors are lower bounds.
cellc's chunked form (bench_cell --mode chunked) adds its parts' times and its programs' products.
gated_deltanet's state is matrix-linear: it has no scan, its "cellc scan" column is cellc's
sequential form (marked "seq"); where cellc has no chunked form of a cell, the bench records the
failure and its columns read "n/a"."""
import json
import sys

L = 64
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
machines = [r for r in rows if r["kind"] == "machine"]
fma_all = max(m["fma_peak_all"] for m in machines)
fma_1 = max(m["fma_peak_1"] for m in machines)
copy_all = max(m["copy_all"] for m in machines)
fresh = max(m.get("fresh", 0) for m in machines)


def dims_of(s):
    return {kv.split("=")[0]: int(kv.split("=")[1]) for kv in s.split(",")}


def counts(cell, d):
    """(core FLOPs, cell FLOPs, bytes) per token, forward and backward"""
    D, NH = d["D"], d["NH"]
    if cell == "mamba2":
        K, V = d["N"], d["P"]
        w = D * (3 * NH * V + 2 * K + NH)
        elems = 2 * D + 3 * NH * V + 2 * K + NH           # x, y; z, u, y per head; b, c; dt
    elif cell == "gated_deltanet":
        K, V = d["K"], d["V"]
        w = D * (2 * NH * K + 3 * NH * V + 2 * NH)
        elems = 2 * D + NH * (2 * K + 3 * V + 2)          # x, y; q, k; v, o, gate; beta, log decay
        return 3 * NH * (L * (3 * K + 2 * V) + 6 * K * V), 3 * 2 * w, 16 * elems
    else:
        K, V = d["K"], d["V"]
        w = D * (2 * NH * K + 3 * NH * V + 16) + NH * K * 16 if cell == "gla" else D * (2 * NH * K + 2 * NH * V)
        elems = 2 * D + NH * (3 * K + 2 * V) + (NH * V if cell == "gla" else 0)
    core = NH * (L * (K + V) + 4 * K * V)
    return 3 * core, 3 * 2 * w, 16 * elems


best = {}
failed = {}                                        # case -> why cellc's chunked form did not run
for r in rows:
    if r["kind"] == "machine":
        continue
    if "failed" in r:
        failed[r["case"]] = r["failed"]
        continue
    key = (r["case"], r["kind"] if r["kind"] in ("cellc", "cellc_chunked") else r["what"])
    if key not in best or r["total_s"] < best[key]["total_s"]:
        best[key] = r

# the best CPU time (cpu_s) at one thread of each cellc kind: a step's time without the waits for a
# core that other jobs add to the wall clock (rows without it: older bench_cell)
cpu1 = {}
for r in rows:
    if r["kind"] in ("cellc", "cellc_chunked") and r.get("threads") == 1 and "cpu_s" in r and "failed" not in r:
        key = (r["case"], r["kind"])
        cpu1[key] = min(cpu1.get(key, 1e30), r["cpu_s"])

ncpu = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rounds = sys.argv[3] if len(sys.argv) > 3 else "?"
reps = sys.argv[4] if len(sys.argv) > 4 else "?"
# the floor on all cores: nproc times the 1-core peak (this CPU's measured all-core peak is that on a
# quiet machine; other jobs on the shared cores depress the measurement, not what the cores can do)
fma_n = max(fma_all, ncpu * fma_1)
print(f"Machine limits measured in this run (build/peak, best of a run before and after): FMA peak "
      f"{fma_1 / 1e9:.0f} GFLOP/s on 1 core, {fma_all / 1e9:.0f} on all {ncpu} (the floors below take "
      f"{fma_n / 1e9:.0f}: {ncpu} x the 1-core peak); copy {copy_all / 1e9:.1f} GB/s (read + write, all cores); "
      f"fresh pages {fresh / 1e9:.2f} GB/s (written once after mmap: every process here runs with glibc's malloc "
      "keeping the memory it frees, bench/blas_env.sh). "
      f"Each time is the best of {rounds} interleaved rounds of {reps} repetitions each (after a warm-up), "
      "at 1 and nproc threads (the count that gave it in brackets): the machine is shared and noisy.\n")
print("| case | dims | cellc scan s | cellc chunked s | PyTorch chunked core s | PyTorch chunked cell s | "
      "scan / chunked | scan / chunked, 1-thread CPU time | PyTorch cell / cellc chunked | PyTorch core / cellc chunk op |")
print("|---|---|---|---|---|---|---|---|---|---|")
cases = list(dict.fromkeys(r["case"] for r in rows if r["kind"] != "machine"))
targets, parts = [], []


def cpu_ratio(case):
    a, b = cpu1.get((case, "cellc")), cpu1.get((case, "cellc_chunked"))
    return f"{a / b:.1f}x ({a:.3f} / {b:.3f} s)" if a and b else "-"


seq_seen = False


def ratio(a, b):
    """a / b as "N.Nx", "n/a" without b (no chunked run)"""
    return f"{a / b:.1f}x" if b else "n/a"


for case in cases:
    c, ch = best.get((case, "cellc")), best.get((case, "cellc_chunked"))
    tc, tw = best.get((case, "core")), best.get((case, "cell"))
    if not (c and tc and tw) or not (ch or case in failed):
        print(f"| {case} | (missing: {'cellc ' if not c else ''}{'chunked ' if not ch else ''}"
              f"{'core ' if not tc else ''}{'cell' if not tw else ''}) |")
        continue
    # a cell without a scan (gated_deltanet): cellc's sequential form in the scan column
    seq = " seq" if c.get("mode") == "sequential" else ""
    seq_seen = seq_seen or bool(seq)
    ch_s = ch["total_s"] if ch else None
    ch_cell = f"{ch_s:.3f} ({ch['threads']})" if ch else "n/a"
    print(f"| {case} | {tc['dims']} | {c['total_s']:.3f} ({c['threads']}){seq} | {ch_cell} | "
          f"{tc['total_s']:.3f} ({tc['threads']}) | {tw['total_s']:.3f} ({tw['threads']}) | "
          f"{ratio(c['total_s'], ch_s)} | {cpu_ratio(case)} | {ratio(tw['total_s'], ch_s)} | "
          f"{ratio(tc['total_s'], ch['op_s'] if ch else None)} |")
    d = dims_of(tc["dims"])
    tokens = tc["T"] * tc["B"]
    fc, fw, by = counts(tc["cell"], d)
    floor = (fc + fw) * tokens / fma_n
    targets.append(f"| {case} | {fc * tokens / 1e9:.2f} + {fw * tokens / 1e9:.2f} | "
                   f"{fc * tokens / fma_n * 1e3:.0f} / {floor * 1e3:.0f} | "
                   f"{by * tokens / copy_all * 1e3:.1f} | {c['total_s'] / floor:.0f}x{seq} | "
                   f"{ratio(ch_s, floor) if ch else 'n/a'} | "
                   f"{c['total_s'] / 5 * 1e3:.0f} | {tw['total_s'] / 10 * 1e3:.0f} | {tc['total_s'] / 10 * 1e3:.0f} |")
    if not ch:
        continue
    th = ch["threads"]
    peak = th * fma_1
    gemm_rate = ch["prog_gemm_flops"] / ch["prog_gemm_s"] if ch["prog_gemm_s"] > 0 else 0
    op_rate = fc * tokens / ch["op_s"]
    parts.append(f"| {case} | {ch['total_s']:.3f} ({th}) | {ch['in_s']:.3f} | {ch['op_s']:.3f} | {ch['out_s']:.3f} | "
                 f"{ch['prog_gemm_s']:.3f} ({100 * ch['prog_gemm_s'] / ch['total_s']:.0f}%) | "
                 f"{gemm_rate / 1e9:.0f} ({100 * gemm_rate / peak:.0f}%) | {op_rate / 1e9:.0f} ({100 * op_rate / peak:.0f}%) | "
                 f"{(fc + fw) * tokens / ch['total_s'] / 1e9:.0f} ({100 * (fc + fw) * tokens / ch['total_s'] / peak:.0f}%) |")
print("\nscan / chunked: cellc's chunked form against its scan of the same cell (the issue: at least 5x), best wall "
      "times; the same from the process's CPU time at one thread (best of its rounds), which the other jobs on a "
      "shared machine disturb less; "
      "PyTorch cell / cellc chunked: the issue's 10x; PyTorch core / cellc chunk op: the PyTorch chunked algorithm "
      "alone against cellc's chunk ops alone (their forward + backward in the chunked run)." +
      (" seq: the cell's state has no scan (gated_deltanet's is matrix-linear): the scan column is cellc's "
       "sequential form (bench_cell --mode sequential)." if seq_seen else "") +
      "".join(f" n/a ({case}): no cellc chunked run: {why}." for case, why in failed.items()
              if (case, "cellc_chunked") not in best) + "\n")
print("The issue's targets against the limits (ms per training step; FMA floors on all cores, of the counted "
      "products only):\n")
print("| case | GFLOP per step, core + cell | FMA floor ms, core / whole cell | bytes floor ms | cellc scan / floor | "
      "cellc chunked / floor | 5x cellc ms | 10x PyTorch cell ms | 10x PyTorch core ms |")
print("|---|---|---|---|---|---|---|---|---|")
for t in targets:
    print(t)
print("\nThe chunked form's parts in its best run (s; its thread count in brackets): the in program (x to the chunk "
      "op's inputs), the chunk ops, the out program (the reads to the output), each forward + backward; the two "
      "programs' products (CELLC_PROFILE's gemm of one more, profiled run) and their share of the step; rates in "
      "GFLOP/s and against the FMA peak of the threads used (threads x the 1-core peak): the programs' products "
      "(counted by the back end), the chunk ops (the core's counted FLOPs over their time, everything in them "
      "included), the whole step (core + cell counted FLOPs over the step).\n")
print("| case | chunked s | in s | chunk ops s | out s | programs' GEMM s (share) | programs' GEMM GFLOP/s (of peak) | "
      "chunk op GFLOP/s (of peak) | step GFLOP/s (of peak) |")
print("|---|---|---|---|---|---|---|---|---|")
for t in parts:
    print(t)
