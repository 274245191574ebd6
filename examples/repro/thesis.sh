#!/bin/sh
# The thesis's figures across its seeds (seeds.md sections 3-5; docs/experiments.md): GRU on
# temporal XOR, mixed training (40% easy samples) against hard-only training, each over the
# thesis's 5 init seeds x 5 data seeds (`cellc train --seeds 1..5 --set train.data_seed=1..5`,
# train.keep = best), with the training-time probe on (log.grad_per_step: the largest ||dL/dh_t||
# per step seen during training); then `cellc diag --by-token` on each run's best-valid
# checkpoint (its valid split: hard sequences): the gate means and the state change
# ||h_t - h_{t-1}|| by input token. thesis.py prints the table (medians and interquartile
# ranges over the 25 runs) and draws grad_per_step (median and quartiles per step), tokens (per
# token, the medians with quartiles of the first gate's mean and of the state change) and
# tokens_gates (every gate's mean).
#
#   examples/repro/thesis.sh [--full] [--out DIR] [--seeds LIST] [--data-seeds LIST]
#                            [--set KEY=VALUE]... [CELL]
#
# Default (reduced): examples/small/temporal_xor.cfg (T = 50, 400 steps = 100 epochs); 50 runs of
# about 10 s and 50 probes of about 1.5 s on two idle cores (22 minutes on two cores shared with
# four other jobs). --full: examples/temporal_xor.cfg, the thesis's T = 100 and 2000 steps
# (500 epochs; about 2 minutes a run here, 50 runs). CELL defaults to stdlib/gru.cell. --seeds and
# --data-seeds (default 1..5 each) and --set (every train; tests/repro_gl_cli.py runs it tiny).
# Rerunning skips the runs and probes already complete (the sweeps' --resume).
set -eu
cd "$(dirname "$0")/../.."
CELLC=${CELLC:-bin/cellc}
cfg=examples/small/temporal_xor.cfg out=runs/thesis-protocol cell=stdlib/gru.cell
seeds=1..5 data_seeds=1..5 sets=""
while [ $# -gt 0 ]; do
  case $1 in
    --full) cfg=examples/temporal_xor.cfg ;;
    --out) out=$2; shift ;;
    --seeds) seeds=$2; shift ;;
    --data-seeds) data_seeds=$2; shift ;;
    --set) sets="$sets --set $2"; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "thesis.sh: unknown flag '$1' (--full, --out DIR, --seeds LIST, --data-seeds LIST, --set KEY=VALUE)" >&2; exit 2 ;;
    *) cell=$1 ;;
  esac
  shift
done
mkdir -p "$out"
for mode in mixed hard; do
  frac=0.4
  [ $mode = hard ] && frac=0
  echo "thesis: $mode training (easy fraction $frac), seeds $seeds x data seeds $data_seeds" >&2
  # shellcheck disable=SC2086 # $sets: --set flags, word by word
  "$CELLC" train "$cell" "$cfg" --seeds "$seeds" --set train.data_seed="$data_seeds" --set task.easy_fraction=$frac \
    --set train.keep=best --set log.grad_per_step=true $sets --out "$out/$mode" --resume --progress none > "$out/$mode.log"
  # each run's own configuration (its seeds and every --set) rebuilds its model and valid split
  for run in "$out/$mode"/*seed-*/; do
    run=${run%/}
    [ -f "$run/best.safetensors" ] || continue
    [ -f "$run/diag/diag.json" ] && continue
    "$CELLC" diag "$cell" "$run/config.cfg" --checkpoint "$run/best.safetensors" --by-token --out "$run/diag" > "$run/diag.log"
  done
done
/usr/bin/python3 examples/repro/thesis.py "$out" --cellc "$CELLC"
