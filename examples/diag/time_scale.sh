#!/bin/sh
# The time-scale study (seeds.md sections 1, 5): the slope s of log S = a + s log P, S the
# sensitivity sigma_max of the Jacobian products and P the product of the coefficient that
# multiplies h_{t-1} over the lag, for the leaky integrator (alpha 0.5), the scalar-gated and the
# multi-gated RNN on adding (hidden 64, batch 64, SGD lr 1e-2 for them; the plain tanh RNN with
# Adam lr 1e-3, which has no predictor), before and after training.
# Run from the repository root:  sh examples/diag/time_scale.sh [OUT]   (a few minutes on 2 cores)
set -e
CELLC=${CELLC:-bin/cellc}
OUT=${1:-runs/diag-examples/time_scale}
STEPS=${STEPS:-1000}
CFG=examples/small/adding.cfg
rm -rf "$OUT"; mkdir -p "$OUT"
for cell in leaky scalar_gate multi_gate elman; do
  opt=""
  [ $cell = elman ] && opt="--set train.optimizer=adam --set train.lr=1e-3"
  # shellcheck disable=SC2086
  $CELLC diag stdlib/$cell.cell $CFG --out "$OUT/$cell-init" --batches 2 $opt > "$OUT/$cell-init.log"
  # shellcheck disable=SC2086
  $CELLC train stdlib/$cell.cell $CFG --out "$OUT/$cell-run" --set train.steps=$STEPS $opt > "$OUT/$cell-run.log"
  # shellcheck disable=SC2086
  $CELLC diag stdlib/$cell.cell $CFG --checkpoint "$OUT/$cell-run/checkpoint.safetensors" --out "$OUT/$cell-trained" \
    --batches 2 --compare "$OUT/$cell-init" $opt > "$OUT/$cell-trained.log"
done
echo "== before training"
/usr/bin/python3 examples/diag/summary.py slope "$OUT"/*-init
echo "== after $STEPS steps"
/usr/bin/python3 examples/diag/summary.py slope "$OUT"/*-trained
/usr/bin/python3 examples/diag/summary.py final "$OUT"/*-run
