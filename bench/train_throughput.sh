#!/bin/sh
# Training throughput: `cellc train stdlib/CELL.cell bench/train_gru.cfg` (copying, T=512, B=64,
# width = hidden = H, one layer) against the same model trained in PyTorch (bench/torch_train.py:
# nn.Embedding, the cell, nn.Linear, cross-entropy on the same steps, AdamW, clip), tokens per
# second, over a matrix of cells, peers and widths. cellc runs on all cores; PyTorch on its best
# thread count, found by a short probe of 1, 2, 4, ... cores before the measured runs. Then,
# interleaved, cellc, PyTorch, cellc, PyTorch (TRAIN_BENCH_ROUNDS), and the best of each counts.
# Prints the probe, a table of cellc / PyTorch per (cell, peer, H) with issue 17's targets (3.5x
# against nn.GRU / nn.LSTM, 5x against a PyTorch loop), and the JSON lines' summary.
#
#   sh bench/train_throughput.sh [OUT.jsonl]   appends the JSON lines to OUT.jsonl (bench/run.sh
#                                              passes its train.jsonl); progress goes to stderr
#   TRAIN_BENCH_MATRIX="gru:nn lstm:nn mgu_see_h:loop lstm:loop"   CELL:PEER pairs (the default).
#                              CELL: stdlib/CELL.cell, or NAME_see_h for stdlib/NAME.cell with
#                              option see_h=true. PEER: nn (nn.GRU / nn.LSTM) or loop (the step
#                              function of bench/torch_cells.py in a Python loop over x.unbind(0)).
#                              A cell listed with several peers runs once per round for all of them.
#   TRAIN_BENCH_WIDTHS="128 256"  H = width = hidden (default 128 256)
#   TRAIN_BENCH_LAYERS="1 2"   layer counts (default 1)
#   TRAIN_BENCH_STEPS=30       timed steps per run (default 30; 10 with CELLC_BENCH_QUICK), rounded up
#                              to a multiple of 5: cellc logs every 5 steps and the first interval is
#                              the warm-up; PyTorch runs 5 warm-up steps, then the timed ones (with
#                              fewer than 5 steps, the interval and warm-up are the steps)
#   TRAIN_BENCH_ROUNDS=2       interleaved rounds (default 2); the best round of each counts
#   TRAIN_BENCH_THREADS=N      cellc's threads (CELLC_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS;
#                              default: all cores, nproc). CELLC_BENCH_THREADS does not apply here.
#   TRAIN_BENCH_TORCH_THREADS="1 2 4"  PyTorch thread counts to probe (torch.set_num_threads and
#                              OMP/OPENBLAS/MKL_NUM_THREADS; default 1 2 4 ... nproc); with one
#                              count there is no probe
#   TRAIN_BENCH_PROBE_STEPS=3  timed steps per probe run (after 2 warm-up steps; default 3)
#   TRAIN_BENCH_FTZ=1          PyTorch with torch.set_flush_denormal(True) (denormals flushed; it sets
#                              the calling thread's MXCSR only, so it means something at 1 thread).
#                              cellc train always flushes denormals on its threads.
#   CELLC_BENCH_QUICK=1        a short run: gru:nn at H=128 only, PyTorch probed at 1 and nproc,
#                              10 steps (each unless set explicitly)
# cellc sums layer 0's input adjoints by token for the embedding's gradient (docs/training.md: the
# same gradient, with the layer's input-gradient product over all T B rows skipped); PyTorch takes
# that product. CELLC_EMBED_FOLD=0 in the environment runs cellc without the fold, product for product.
# cellc's number is tokens_per_s from metrics.jsonl over the measured intervals (B*T tokens per step
# over the summed step times: batch generation, forward, backward, clip, optimizer step). PyTorch's
# is the same over its timed steps (forward, backward, clip, optimizer step; its batch generation is
# timed apart). A failed cellc or PyTorch run prints its log and exits non-zero (3 or 4).
set -e
cd "$(dirname "$0")/.."
. bench/train_common.sh
out=${1:-}
matrix=${TRAIN_BENCH_MATRIX:-gru:nn lstm:nn mgu_see_h:loop lstm:loop}
widths=${TRAIN_BENCH_WIDTHS:-128 256}
tthreads=${TRAIN_BENCH_TORCH_THREADS:-$(thread_list $ncpu)}
if [ -n "$CELLC_BENCH_QUICK" ]; then
  matrix=${TRAIN_BENCH_MATRIX:-gru:nn}
  widths=${TRAIN_BENCH_WIDTHS:-128}
  [ $ncpu = 1 ] && q=1 || q="1 $ncpu"
  tthreads=${TRAIN_BENCH_TORCH_THREADS:-$q}
fi
layers=${TRAIN_BENCH_LAYERS:-1}
rounds=${TRAIN_BENCH_ROUNDS:-2}
cth=${TRAIN_BENCH_THREADS:-$ncpu}
probe_steps=${TRAIN_BENCH_PROBE_STEPS:-3}
ftz=""
[ "${TRAIN_BENCH_FTZ:-0}" = 1 ] && ftz=--flush-denormal
cells=$(for p in $matrix; do echo ${p%%:*}; done | awk '!seen[$0]++')
for p in $matrix; do
  case ${p##*:} in nn|loop) ;; *) echo "train_throughput: $p: the peer must be nn or loop" >&2; exit 2 ;; esac
  [ -f "$(cell_file ${p%%:*})" ] || { echo "train_throughput: $p: no $(cell_file ${p%%:*})" >&2; exit 2; }
done

# torch_train CELL PEER WIDTH LAYERS THREADS WARMUP STEPS ROUND PROBE(0|1): one PyTorch run
torch_train() {
  if ! env $peer_env OMP_NUM_THREADS=$5 OPENBLAS_NUM_THREADS=$5 MKL_NUM_THREADS=$5 \
       $py bench/torch_train.py --cell $1 --peer $2 --width $3 --layers $4 --threads $5 \
       --warmup $6 --steps $7 $ftz > $tmp/torch.out 2> $tmp/torch.err; then
    cat $tmp/torch.err >&2
    echo "train_throughput: PyTorch $1 ($2, width $3, $5 threads) failed" >&2
    exit 4
  fi
  sed "s/^{/{\"round\": $8, \"probe\": $([ $9 = 1 ] && echo true || echo false), /" $tmp/torch.out >> $lines
}

# the PyTorch lines matching CELL PEER WIDTH LAYERS PROBE(true|false): prints the best as
# "threads tokens/s" (nothing if none), and with PROBE true lists them all on stderr
torch_best() {
  $py - $lines "$@" <<'PY'
import json, sys
path, cell, peer, width, layers, probe = sys.argv[1:7]
rows = [r for r in map(json.loads, open(path)) if r["kind"] == "torch_train" and r["cell"] == cell
        and r["peer"].startswith("nn." if peer == "nn" else "loop") and r["width"] == int(width)
        and r["layers"] == int(layers) and r["probe"] == (probe == "true")]
if rows:
    b = max(rows, key=lambda r: r["tokens_per_s"])
    if probe == "true":
        print(f"train_throughput: {cell}:{peer} H={width} layers={layers}: PyTorch probe, threads: tokens/s  "
              + "  ".join(f"{r['threads']}: {r['tokens_per_s']:.0f}" for r in rows) + f"  -> {b['threads']} threads",
              file=sys.stderr)
    print(b["threads"], round(b["tokens_per_s"]))
PY
}

for L in $layers; do
  for H in $widths; do
    for cell in $cells; do
      peers=$(for p in $matrix; do [ ${p%%:*} = $cell ] && echo ${p##*:}; done | awk '!seen[$0]++')
      # PyTorch's thread count per peer: the best of a short probe
      for peer in $peers; do
        set -- $tthreads
        if [ $# -gt 1 ]; then
          for t in $tthreads; do torch_train $cell $peer $H $L $t 2 $probe_steps 0 1; done
          best=$(torch_best $cell $peer $H $L true)
          eval "th_$peer=${best%% *}"
        else
          eval "th_$peer=$1"
        fi
      done
      r=1
      while [ $r -le $rounds ]; do
        cellc_train $cell $H $L $cth $r
        for peer in $peers; do
          eval "t=\$th_$peer"
          torch_train $cell $peer $H $L $t $every $steps $r 0
        done
        echo "train_throughput: $cell H=$H layers=$L round $r done" >&2
        r=$((r + 1))
      done
    done
  done
done

[ -n "$out" ] && cat $lines >> "$out"
$py - $lines "$matrix" "$cellc_gemm" "$peer_core" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gemm, chosen = sys.argv[3], sys.argv[4]
order = [tuple(p.split(":")) for p in dict.fromkeys(sys.argv[2].split())]
cellc = [r for r in rows if r["kind"] == "cellc_train"]
torch = [r for r in rows if r["kind"] == "torch_train" and not r["probe"]]
probes = [r for r in rows if r["kind"] == "torch_train" and r["probe"]]
target = {"nn": 3.5, "loop": 5.0}
ftz = any(r["flush_denormal"] for r in torch)
print(f"cellc train on {cellc[0]['threads']} threads, PyTorch {torch[0]['torch']} on its best thread count "
      f"(probed: {' '.join(str(t) for t in sorted({r['threads'] for r in probes})) or 'no probe'})"
      f"{', torch.set_flush_denormal(True)' if ftz else ''}; T=512, B=64; best of {max(r['round'] for r in cellc)} "
      f"interleaved rounds, {cellc[0]['steps']} timed steps each; tokens/s.")
ran = sorted({r.get("blas_core", "") for r in torch})
print(f"Kernels: cellc's own GEMM ({gemm}); PyTorch's OpenBLAS {', '.join(ran) or 'unknown'} "
      f"(OPENBLAS_CORETYPE={chosen or 'unset'}, the CPUID choice).\n")
print("| cell | peer | H | layers | cellc tokens/s | PyTorch tokens/s | PyTorch threads | cellc / PyTorch | target |")
print("|---|---|---|---|---|---|---|---|---|")
for L in sorted({r["layers"] for r in cellc}):
    for H in sorted({r["width"] for r in cellc}):
        for cell, peer in order:
            c = [r["tokens_per_s"] for r in cellc if (r["cell"], r["width"], r["layers"]) == (cell, H, L)]
            t = [r for r in torch if (r["cell"], r["width"], r["layers"]) == (cell, H, L)
                 and r["peer"].startswith("nn." if peer == "nn" else "loop")]
            if not c or not t:
                continue
            tb = max(t, key=lambda r: r["tokens_per_s"])
            ratio = max(c) / tb["tokens_per_s"]
            tg = target[peer]
            print(f"| {cell} | {tb['peer']} | {H} | {L} | {max(c):,.0f} | {tb['tokens_per_s']:,.0f} | {tb['threads']} | "
                  f"**{ratio:.2f}x** | {tg:g}x {'met' if ratio >= tg else 'not met'} |")
if probes:
    print("\nPyTorch's probe (tokens/s by thread count, "
          f"{probes[0]['steps']} steps after {probes[0]['warmup']} warm-up; the best count ran the table's rounds):\n")
    for key in dict.fromkeys((r["cell"], r["peer"], r["width"], r["layers"]) for r in probes):
        ps = [r for r in probes if (r["cell"], r["peer"], r["width"], r["layers"]) == key]
        print(f"    {key[0]} {key[1]} H={key[2]} layers={key[3]}: "
              + ", ".join(f"{r['threads']}: {r['tokens_per_s']:,.0f}" for r in ps))
PY
