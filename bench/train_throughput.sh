#!/bin/sh
# Training throughput: `cellc train stdlib/gru.cell bench/train_gru.cfg` (copying, T=512, B=64,
# width = hidden = 128) against the same model trained in PyTorch (bench/torch_train.py: nn.Embedding,
# nn.GRU, nn.Linear, cross-entropy on the same steps, AdamW, clip), tokens per second, with the same
# thread count for both (CELLC_BENCH_THREADS, default 1), interleaved: cellc, PyTorch, cellc, PyTorch.
#
#   sh bench/train_throughput.sh [OUT.jsonl]     appends the JSON lines to OUT.jsonl (bench/run.sh
#                                                passes its latest.jsonl); prints a summary
#   TRAIN_BENCH_LAYERS="1 2"   layer counts (default 1)
#   TRAIN_BENCH_STEPS=30       timed steps per run (default 30; 10 with CELLC_BENCH_QUICK); cellc logs
#                              every 5 steps and the first interval (5 steps) is the warm-up; PyTorch
#                              runs 5 warm-up steps, then the timed ones
#   TRAIN_BENCH_FTZ=0          skip the second pair, both with denormals flushed to zero (cellc through
#                              bench/ftz_preload.c, PyTorch through torch.set_flush_denormal); only at
#                              1 thread (the preload sets the main thread's MXCSR only). Since cellc
#                              train flushes denormals itself, the pair differs from the first only
#                              on PyTorch's side.
# cellc's number is tokens_per_s from metrics.jsonl over the measured intervals (B*T tokens per step
# over the summed step times: batch generation, forward, backward, clip, optimizer step).
set -e
cd "$(dirname "$0")/.."
th=${CELLC_BENCH_THREADS:-1}
export CELLC_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th MKL_NUM_THREADS=$th
out=${1:-}
layers=${TRAIN_BENCH_LAYERS:-1}
steps=${TRAIN_BENCH_STEPS:-30}
[ -n "$CELLC_BENCH_QUICK" ] && [ -z "$TRAIN_BENCH_STEPS" ] && steps=10
every=5
ftz=${TRAIN_BENCH_FTZ:-1}
[ "$th" = 1 ] || ftz=0
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lines=$tmp/lines.jsonl
: > $lines
if [ "$ftz" = 1 ]; then
  ${CC:-cc} -O2 -shared -fPIC -o $tmp/ftz.so bench/ftz_preload.c
fi

# one cellc run: layers, round, ftz (0|1)
cellc_run() {
  dir=$tmp/cellc-$1-$2-$3
  pre=""
  [ "$3" = 1 ] && pre=$tmp/ftz.so
  if ! LD_PRELOAD=$pre ./bin/cellc train stdlib/gru.cell bench/train_gru.cfg --out $dir \
       --set model.layers=$1 --set train.steps=$((steps + every)) --set log.every=$every \
       --set eval.every=$((steps + every)) > $tmp/cellc.log 2>&1; then
    cat $tmp/cellc.log >&2
    echo "train_throughput: cellc train failed" >&2
    exit 3
  fi
  $py - "$dir/metrics.jsonl" "$1" "$2" "$3" "$th" "$every" <<'PY' >> $lines
import json, sys
path, layers, rnd, ftz, th, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5]), int(sys.argv[6])
train = [r for r in map(json.loads, open(path)) if r["split"] == "train"]
measured = [r["tokens_per_s"] for r in train[1:]]  # the first interval is the warm-up
# equal steps per interval: overall tokens/s = intervals / sum(1 / rate)
print(json.dumps(dict(kind="cellc_train", cell="gru", layers=layers, T=512, B=64, width=128, threads=th,
                      flush_denormal=ftz, round=rnd, steps=every * len(measured),
                      tokens_per_s=len(measured) / sum(1 / v for v in measured),
                      interval_tokens_per_s=measured, warmup_tokens_per_s=train[0]["tokens_per_s"],
                      loss_first=train[1]["loss"], loss_last=train[-1]["loss"])))
PY
}

torch_run() {
  flag=""
  [ "$3" = 1 ] && flag=--flush-denormal
  $py bench/torch_train.py --layers $1 --threads $th --warmup $every --steps $steps $flag \
    | sed "s/^{/{\"round\": $2, /" >> $lines
}

for L in $layers; do
  passes=0
  [ "$ftz" = 1 ] && passes="0 1"
  for f in $passes; do
    for round in 1 2; do
      cellc_run $L $round $f
      torch_run $L $round $f
      echo "train_throughput: layers=$L flush_denormal=$f round $round done" >&2
    done
  done
done

[ -n "$out" ] && cat $lines >> "$out"
$py - $lines <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = sorted({(r["layers"], r["flush_denormal"]) for r in rows})
for L, f in keys:
    c = [r["tokens_per_s"] for r in rows if r["kind"] == "cellc_train" and (r["layers"], r["flush_denormal"]) == (L, f)]
    t = [r["tokens_per_s"] for r in rows if r["kind"] == "torch_train" and (r["layers"], r["flush_denormal"]) == (L, f)]
    print(f"train gru layers={L} threads={rows[0]['threads']} flush_denormal={'yes' if f else 'no'}: "
          f"cellc {' '.join(f'{v:.0f}' for v in c)} tokens/s, PyTorch {' '.join(f'{v:.0f}' for v in t)} tokens/s, "
          f"cellc/PyTorch {max(c) / max(t):.2f} (best of each)")
PY
