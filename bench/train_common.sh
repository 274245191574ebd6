# bench/train_common.sh: shared by bench/train_throughput.sh and bench/thread_scaling.sh (sourced,
# not run). Expects the repository root as the working directory and sets:
#   py, ncpu, tmp (removed on exit), lines (the JSON lines of this run), steps and every
#   (TRAIN_BENCH_STEPS, rounded up to a multiple of the log interval; 10 with CELLC_BENCH_QUICK).

py=/usr/bin/python3
. bench/blas_env.sh
# the runs use bin/cellc (`make all` installs it): refuse one older than the build's
if [ ! -x bin/cellc ] || { [ -e build/cellc ] && [ build/cellc -nt bin/cellc ]; }; then
  echo "bench: bin/cellc is missing or older than build/cellc: run make all first" >&2
  exit 2
fi
# the cores this process may run on (nproc alone honours OMP_NUM_THREADS, which bench/run.sh sets)
ncpu=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lines=$tmp/lines.jsonl
: > $lines
steps=${TRAIN_BENCH_STEPS:-30}
[ -n "$CELLC_BENCH_QUICK" ] && [ -z "$TRAIN_BENCH_STEPS" ] && steps=10
# cellc logs every `every` steps; its first interval is the warm-up
every=5
[ "$steps" -lt $every ] && every=$steps
steps=$(( (steps + every - 1) / every * every ))

# thread_list N: 1 2 4 ... (powers of two below N), then N
thread_list() {
  _l="" _t=1
  while [ $_t -lt "$1" ]; do _l="$_l $_t"; _t=$((_t * 2)); done
  echo $_l "$1"
}

# cell_file CELL / cell_sets CELL: the model file and --set flags of a benchmark cell name:
# stdlib/CELL.cell, except NAME_see_h = stdlib/NAME.cell with the option see_h=true
cell_file() {
  case $1 in
    *_see_h) echo stdlib/${1%_see_h}.cell ;;
    *) echo stdlib/$1.cell ;;
  esac
}
cell_sets() {
  case $1 in
    *_see_h) echo --set model.option.see_h=true ;;
  esac
}

# cellc_train CELL WIDTH LAYERS THREADS ROUND [JSON extras]: one `cellc train` run on
# bench/train_gru.cfg (T=512, B=64, width = hidden = WIDTH) with CELLC_THREADS, OPENBLAS_NUM_THREADS
# and OMP_NUM_THREADS = THREADS (per process), started through $CELLC_LAUNCH when set (bench/
# mpi_scaling.sh: "mpirun -np 2 ..."); appends a "cellc_train" JSON line to $lines. A failed run
# prints its log and exits 3.
cellc_train() {
  _dir=$tmp/cellc-$1-$2-$3-$4-$5
  rm -rf $_dir
  if ! env CELLC_THREADS=$4 OPENBLAS_NUM_THREADS=$4 OMP_NUM_THREADS=$4 \
       ${CELLC_LAUNCH:-} ./bin/cellc train $(cell_file $1) bench/train_gru.cfg --out $_dir $(cell_sets $1) \
       --set model.layers=$3 --set model.width=$2 --set model.hidden=$2 \
       --set train.steps=$((steps + every)) --set log.every=$every \
       --set eval.every=$((steps + every)) > $tmp/cellc.log 2>&1; then
    cat $tmp/cellc.log >&2
    echo "bench: cellc train $1 (width $2, $3 layers, $4 threads) failed" >&2
    exit 3
  fi
  if ! $py - "$_dir/metrics.jsonl" "$1" "$2" "$3" "$4" "$5" "$every" "${6:-}" <<'PY' >> $lines; then
import json, sys
path, cell, width, layers, th, rnd, every, extra = sys.argv[1:]
train = [r for r in map(json.loads, open(path)) if r.get("split") == "train"]
if len(train) < 2:
    sys.exit(f"{path}: {len(train)} train rows, expected a warm-up interval and measured ones")
measured = [r["tokens_per_s"] for r in train[1:]]  # the first interval is the warm-up
# equal steps per interval: overall tokens/s = intervals / sum(1 / rate)
row = dict(kind="cellc_train", cell=cell, layers=int(layers), T=512, B=64, width=int(width), threads=int(th),
           round=int(rnd), steps=int(every) * len(measured),
           tokens_per_s=len(measured) / sum(1 / v for v in measured),
           interval_tokens_per_s=measured, warmup_tokens_per_s=train[0]["tokens_per_s"],
           loss_first=train[1]["loss"], loss_last=train[-1]["loss"])
row.update(json.loads(extra or "{}"))
print(json.dumps(row))
PY
    cat $tmp/cellc.log >&2
    echo "bench: cellc train $1 (width $2): no throughput in $_dir/metrics.jsonl" >&2
    exit 3
  fi
}
