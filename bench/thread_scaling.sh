#!/bin/sh
# Thread scaling of cellc's CPU back end: at CELLC_THREADS = 1, 2, 4, ... nproc (and nproc itself
# when it is not a power of two), for a GRU with H = D = width:
#   - `cellc train stdlib/gru.cell bench/train_gru.cfg` tokens/s (copying, T=512, B=64, one layer;
#     as in bench/train_throughput.sh), and
#   - build/bench_cell's forward + backward of one GRU layer (T=512, B=64, best of 3),
# each with its speedup over 1 thread, and issue 17's target next to 2 threads (>= 1.7x). The
# thread counts run in turn, TRAIN_BENCH_ROUNDS times (interleaved); the best of each counts.
# OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set to the same count (at 1 thread cellc's GEMMs run
# on the ambient OpenBLAS threads).
#
#   sh bench/thread_scaling.sh [OUT.jsonl]   appends the JSON lines to OUT.jsonl (bench/run.sh passes
#                                            its scaling.jsonl); prints the table, progress on stderr
#   SCALING_THREADS="1 2 4"    the thread counts (default 1 2 4 ... nproc; CELLC_BENCH_QUICK: 1 nproc)
#   SCALING_WIDTHS="128 256"   H = D = width (default 128 256; CELLC_BENCH_QUICK: 128)
#   SCALING_CELL=gru           the cell (a bench/train_throughput.sh name: stdlib/CELL.cell, or
#                              NAME_see_h)
#   TRAIN_BENCH_STEPS=30       timed training steps per run (default 30; 10 with CELLC_BENCH_QUICK;
#                              rounded up to a multiple of 5, after a warm-up interval of 5)
#   TRAIN_BENCH_ROUNDS=2       rounds over the thread counts (default 2)
#   SCALING_REPS=3             bench_cell's timed repetitions (after one warm-up; default 3)
# A failed run prints its log and exits non-zero.
set -e
cd "$(dirname "$0")/.."
. bench/train_common.sh
out=${1:-}
threads=${SCALING_THREADS:-$(thread_list $ncpu)}
widths=${SCALING_WIDTHS:-128 256}
if [ -n "$CELLC_BENCH_QUICK" ]; then
  [ $ncpu = 1 ] && q=1 || q="1 $ncpu"
  threads=${SCALING_THREADS:-$q}
  widths=${SCALING_WIDTHS:-128}
fi
cell=${SCALING_CELL:-gru}
rounds=${TRAIN_BENCH_ROUNDS:-2}
reps=${SCALING_REPS:-3}
file=$(cell_file $cell)
[ -f $file ] || { echo "thread_scaling: no $file" >&2; exit 2; }
[ -x build/bench_cell ] && [ -x build/peak ] || { echo "thread_scaling: no build/bench_cell or build/peak (make build/bench_cell build/peak)" >&2; exit 2; }
bset=""
case $cell in *_see_h) bset="--set see_h=true" ;; esac

for H in $widths; do
  r=1
  while [ $r -le $rounds ]; do
    for th in $threads; do
      cellc_train $cell $H 1 $th $r
      if ! env CELLC_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th \
           ./build/bench_cell $file $H $H 512 64 --reps $reps $bset > $tmp/bench.out 2> $tmp/bench.err; then
        cat $tmp/bench.out $tmp/bench.err >&2
        echo "thread_scaling: bench_cell $file H=$H on $th threads failed" >&2
        exit 3
      fi
      sed "s/^{/{\"kind\": \"cellc_layer\", \"name\": \"$cell\", \"threads\": $th, \"round\": $r, /" $tmp/bench.out >> $lines
      ./build/peak --fma $th | sed "s/^{/{\"kind\": \"fma_peak\", \"round\": $r, /" >> $lines
      echo "thread_scaling: $cell H=$H threads=$th round $r done" >&2
    done
    r=$((r + 1))
  done
done

[ -n "$out" ] && cat $lines >> "$out"
$py - $lines $ncpu <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ncpu = int(sys.argv[2])
train = [r for r in rows if r["kind"] == "cellc_train"]
layer = [r for r in rows if r["kind"] == "cellc_layer"]
peak = {}
for r in rows:
    if r["kind"] == "fma_peak":
        peak[r["threads"]] = max(peak.get(r["threads"], 0), r["fma_peak"])
cell = train[0]["cell"]
print(f"Thread scaling ({cell}, T=512, B=64, H = D = width; this machine: {ncpu} cores): `cellc train` tokens/s "
      f"({train[0]['steps']} timed steps per run) and one layer's forward + backward (build/bench_cell), "
      f"best of {max(r['round'] for r in train)} rounds; speedup over 1 thread. Issue 17's target: 2 threads >= 1.7x.\n")
print("The layer's GEMM GFLOP/s are its products' operations (gemm_flops) over its wall time, against the FMA peak "
      "of as many cores (build/peak --fma THREADS, best of the rounds). Issue 17's target: >= 70% at H = 256.\n")
print("| H | threads | train tokens/s | train speedup | layer fwd+bwd s | layer speedup | layer GEMM GFLOP/s | of FMA peak | target |")
print("|---|---|---|---|---|---|---|---|---|")
for H in sorted({r["width"] for r in train}):
    ths = sorted({r["threads"] for r in train if r["width"] == H})
    tr = {t: max(r["tokens_per_s"] for r in train if (r["width"], r["threads"]) == (H, t)) for t in ths}
    ly = {t: min(r["total_s"] for r in layer if (r["H"], r["threads"]) == (H, t)) for t in ths}
    fl = {t: max(r["gemm_flops"] / r["total_s"] for r in layer if (r["H"], r["threads"]) == (H, t)) for t in ths}
    for t in ths:
        ts = f"{tr[t] / tr[1]:.2f}x" if 1 in tr else ""
        ls = f"{ly[1] / ly[t]:.2f}x" if 1 in ly else ""
        tg = ""
        if t == 2 and 1 in tr:
            ok = tr[2] / tr[1] >= 1.7 and ly[1] / ly[2] >= 1.7
            tg = f"2 threads >= 1.7x {'met' if ok else 'not met'}"
        frac = fl[t] / peak[t] if peak.get(t) else 0
        if H == 256:
            tg += ("; " if tg else "") + f"70% of peak {'met' if frac >= 0.7 else 'not met'}"
        print(f"| {H} | {t} | {tr[t]:,.0f} | {ts} | {ly[t]:.3f} | {ls} | {fl[t] / 1e9:.1f} | {100 * frac:.0f}% | {tg} |")
PY
