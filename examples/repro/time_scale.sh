#!/bin/sh
# The time-scale study at the paper's protocol (seeds.md sections 1, 3-5; docs/experiments.md):
# the leaky (alpha 0.8), scalar-gated and multi-gated RNNs as input -> cell -> z = W_o h_T
# (time_scale_adding.cfg, time_scale_sinmix.cfg), plain SGD lr 1e-2, a fresh batch of 64 each
# step, 800 steps; at steps 0, 50, 200, 400, 600 and 800 `cellc diag` on one fixed probe batch
# of 12 sequences (validation batch 0 of the probe seed 10000 + seed, drawn once, apart from the
# training data), exact Jacobians of every sequence; the slope s of log S against log P (P the
# product of the gate on the new input: alpha^(t-k), prod g, the units' mean of prod g_i: diag's
# slope_complement), Theil-Sen over the central 98% of P. Then the table of medians and
# interquartile ranges over the seeds, and the figures (profile_<task>, slope_<task>).
#
#   examples/repro/time_scale.sh [--full] [--seeds N] [--out DIR] [--tasks "adding sinmix"]
#                                [--checkpoints "0 50 200 400 600 800"] [--no-alt] [--set KEY=VALUE]...
#
# --set goes to every train and diag (a smaller model or T for a quick look: tests/repro_cli.py).
# Default (reduced): 3 seeds, the products from 16 start times per sequence, and the alternative
# initialization (every weight N(0, 1/64) instead of the cells' U(-1/8, 1/8)) on adding at steps 0
# and 800; about 25 minutes on two shared cores. --full: the paper's 20 seeds and every start time
# (several hours here). Rerunning skips the runs and probes already complete.
set -eu
cd "$(dirname "$0")/../.."
CELLC=${CELLC:-bin/cellc}
seeds=3 starts=16 out=runs/time_scale-protocol tasks="adding sinmix" alt=1
checkpoints="0 50 200 400 600 800" sets=""
while [ $# -gt 0 ]; do
  case $1 in
    --full) seeds=20 starts=all ;;
    --seeds) seeds=$2; shift ;;
    --out) out=$2; shift ;;
    --tasks) tasks=$2; shift ;;
    --checkpoints) checkpoints=$2; shift ;;
    --set) sets="$sets --set $2"; shift ;;
    --no-alt) alt=0 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "time_scale.sh: unknown argument '$1' (--full, --seeds N, --out DIR, --tasks LIST, --checkpoints LIST, --no-alt, --set KEY=VALUE)" >&2; exit 2 ;;
  esac
  shift
done
last=${checkpoints##* }
mkdir -p "$out"

# study TASK CELL SEED TAG CHECKPOINTS [--set ...]: one seed's run, extended checkpoint by
# checkpoint (--resume gives the uninterrupted run's steps), probed at each
study() {
  task=$1 cell=$2 seed=$3 tag=$4 points=$5; shift 5
  cfg=examples/repro/time_scale_$task.cfg
  dir=$out/$task/$tag$cell/seed-$seed
  opt="--set train.seed=$seed$sets"
  [ "$cell" = leaky ] && opt="$opt --set model.option.alpha=0.8"
  probe="--set train.data_seed=$((10000 + seed)) --set train.batch=12 --sequences 12 --starts $starts --batches 1"
  mkdir -p "$dir"
  for step in $points; do
    [ -f "$dir/diag-$step/diag.json" ] && continue
    if [ "$step" = 0 ]; then
      # shellcheck disable=SC2086
      "$CELLC" diag stdlib/$cell.cell "$cfg" $opt "$@" $probe --out "$dir/diag-0" > "$dir/diag-0.log"
      continue
    fi
    resume=""
    [ -f "$dir/run/checkpoint.safetensors" ] && resume=--resume
    # shellcheck disable=SC2086
    "$CELLC" train stdlib/$cell.cell "$cfg" $opt "$@" --set train.steps=$step --out "$dir/run" $resume \
      --progress none > "$dir/train-$step.log"
    # shellcheck disable=SC2086
    "$CELLC" diag stdlib/$cell.cell "$cfg" $opt "$@" $probe --checkpoint "$dir/run/checkpoint.safetensors" \
      --out "$dir/diag-$step" > "$dir/diag-$step.log"
  done
}

for task in $tasks; do
  for cell in leaky scalar_gate multi_gate; do
    s=1
    while [ $s -le "$seeds" ]; do
      echo "time_scale: $task $cell seed $s" >&2
      study "$task" "$cell" $s "" "$checkpoints"
      s=$((s + 1))
    done
  done
done
if [ $alt = 1 ]; then
  for cell in leaky scalar_gate multi_gate; do
    inits="--set model.init.Wr=normal(0,0.125) --set model.init.Wi=normal(0,0.125)"
    [ $cell != leaky ] && inits="$inits --set model.init.Wrg=normal(0,0.125) --set model.init.Wig=normal(0,0.125)"
    s=1
    while [ $s -le "$seeds" ]; do
      echo "time_scale: adding $cell seed $s, init N(0, 1/64)" >&2
      # shellcheck disable=SC2086
      study adding $cell $s "normal-" "0 $last" $inits
      s=$((s + 1))
    done
  done
fi
/usr/bin/python3 examples/repro/time_scale.py "$out" --cellc "$CELLC"
