#!/bin/sh
# The anisotropy study at the source's protocol (seeds.md sections 1, 3-5; docs/experiments.md):
# the plain RNN (stdlib/elman.cell) trained with Adam lr 1e-3 against the scalar-gated and the
# multi-gated RNN with plain SGD lr 1e-2, each as input -> cell -> z = W_o h_T
# (anisotropy_<task>.cfg: no encoder, no bias), hidden 64, a fresh batch of 64 each step, 1200
# steps, T = 120, on adding, ar2, delay_sum and moving_average, with and without a global
# gradient clip of 1. After training, `cellc diag` on a probe batch of 256 sequences of the probe
# seed 10000 + seed (apart from the training data): AI_10 and CE_10 of the Jacobian products
# M_{t,k} per lag (the first 12 sequences, 16 start times each) and of the matrix of per-sample
# parameter gradients of the 256 sequences (rows normalized, columns centred). Then the table of
# medians and interquartile ranges over the seeds and the figures (anisotropy_<task>, param_grad).
#
#   examples/repro/anisotropy.sh [--full] [--seeds N] [--out DIR] [--tasks LIST] [--models LIST]
#                                [--clips "0 1"] [--samples M] [--set KEY=VALUE]...
#
# --set goes to every train and diag (a smaller model, T or step count for a quick look:
# tests/repro_aniso_cli.py); --samples the probe sequences of the per-sample gradients (256).
# Default (reduced): 3 seeds, 24 runs and probes each. The runs go as JOBS at once (default:
# the cores), each on one thread: a model this small trains no faster on two (8.3 minutes on
# two idle cores, docs/experiments.md). --full: the source's 20 seeds. Rerunning skips the runs and probes already complete.
set -eu
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
CELLC=${CELLC:-bin/cellc}
seeds=3 out=runs/anisotropy-protocol tasks="adding ar2 delay_sum moving_average"
models="elman scalar_gate multi_gate" clips="0 1" samples=256 sets="" study_args=""
while [ $# -gt 0 ]; do
  case $1 in
    --full) seeds=20 ;;
    --seeds) seeds=$2; shift ;;
    --out) out=$2; shift ;;
    --tasks) tasks=$2; shift ;;
    --models) models=$2; shift ;;
    --clips) clips=$2; shift ;;
    --samples) samples=$2; shift ;;
    --set) sets="$sets --set $2"; shift ;;
    --study) study_args="$2 $3 $4 $5"; shift 4 ;; # one run and its probe (the script's own jobs)
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "anisotropy.sh: unknown argument '$1' (--full, --seeds N, --out DIR, --tasks LIST, --models LIST, --clips LIST, --samples M, --set KEY=VALUE)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"

# study TASK CELL CLIP SEED: one seed's run to the end, then its probe; a run that finished
# (train.done) is not trained again, a probe that finished (diag/diag.json) not run again
study() {
  task=$1 cell=$2 clip=$3 seed=$4
  cfg=examples/repro/anisotropy_$task.cfg
  dir=$out/$task/$cell/clip-$clip/seed-$seed
  [ -f "$dir/diag/diag.json" ] && return 0
  # the plain RNN as the source trains it: Adam lr 1e-3 (PyTorch's betas); the gated cells keep
  # the configuration's plain SGD lr 1e-2
  opt="--set train.seed=$seed --set train.clip=$clip"
  [ "$cell" = elman ] && opt="$opt --set train.optimizer=adam --set train.lr=1e-3"
  opt="$opt$sets"
  mkdir -p "$dir"
  if [ ! -f "$dir/train.done" ]; then
    # shellcheck disable=SC2086
    "$CELLC" train stdlib/$cell.cell "$cfg" $opt --out "$dir/run" --force --progress none > "$dir/train.log"
    : > "$dir/train.done"
  fi
  # shellcheck disable=SC2086
  "$CELLC" diag stdlib/$cell.cell "$cfg" $opt --set train.data_seed=$((10000 + seed)) --set train.batch=$samples \
    --sequences 12 --starts 16 --batches 1 --checkpoint "$dir/run/checkpoint.safetensors" --out "$dir/diag" \
    > "$dir/diag.log"
}

if [ -n "$study_args" ]; then
  echo "anisotropy: $study_args" >&2
  # shellcheck disable=SC2086
  study $study_args
  exit 0
fi

# every run and probe, JOBS at once, each as this script with --study (the same --out, --samples
# and --set); a failed one stops the study with its status
jobs=${JOBS:-$(nproc)}
s=1
# shellcheck disable=SC2086
while [ $s -le "$seeds" ]; do
  for task in $tasks; do
    for cell in $models; do
      for clip in $clips; do echo "$task $cell $clip $s"; done
    done
  done
  s=$((s + 1))
done | CELLC_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
  xargs -P "$jobs" -L 1 sh "$self" --out "$out" --samples "$samples" $sets --study
/usr/bin/python3 examples/repro/anisotropy.py "$out" --cellc "$CELLC"
