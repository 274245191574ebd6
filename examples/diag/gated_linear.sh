#!/bin/sh
# The gated-linear study (seeds.md sections 1, 5) on copying (examples/small/copying.cfg at
# width and hidden 32):
#  1. mgu with the gate cut off from h_{t-1} (see_h = false, diagonal-linear, a scan) against the
#     gate that sees h_{t-1} (see_h = true): the first layer's gate histograms before and after
#     training (gates_layer0.svg, --compare), and the share of gate values in (0.1, 0.9);
#  2. the first layer's gate bias drawn from gumbel(0, 0.5) against UGI (the default of mgu's bz)
#     on a longer copying task (LENGTH blanks) where UGI is slow, over SEEDS seeds: the valid
#     accuracy by step of each run.
# Run from the repository root:  sh examples/diag/gated_linear.sh [OUT]
# (STEPS, LENGTH, LSTEPS and SEEDS set the sizes; the defaults take about 10 minutes on 2 cores)
set -e
CELLC=${CELLC:-bin/cellc}
OUT=${1:-runs/diag-examples/gated_linear}
STEPS=${STEPS:-800}
LENGTH=${LENGTH:-60}
LSTEPS=${LSTEPS:-600}
SEEDS=${SEEDS:-1 2 3}
CFG=examples/small/copying.cfg
SIZE="--set model.width=32 --set model.hidden=32"
rm -rf "$OUT"; mkdir -p "$OUT"
for see in false true; do
  # shellcheck disable=SC2086
  $CELLC diag stdlib/mgu.cell $CFG $SIZE --set model.option.see_h=$see --out "$OUT/see_h-$see-init" > /dev/null
  # shellcheck disable=SC2086
  $CELLC train stdlib/mgu.cell $CFG $SIZE --set model.option.see_h=$see --set train.steps=$STEPS \
    --out "$OUT/see_h-$see-run" > "$OUT/see_h-$see-run.log"
  # shellcheck disable=SC2086
  $CELLC diag stdlib/mgu.cell $CFG $SIZE --set model.option.see_h=$see --out "$OUT/see_h-$see-trained" \
    --checkpoint "$OUT/see_h-$see-run/checkpoint.safetensors" --compare "$OUT/see_h-$see-init" > /dev/null
done
echo "== 1. layer 0's gate z, before and after $STEPS steps"
/usr/bin/python3 examples/diag/summary.py gates "$OUT"/see_h-*-init "$OUT"/see_h-*-trained
/usr/bin/python3 examples/diag/summary.py final "$OUT"/see_h-*-run
for seed in $SEEDS; do
  for init in ugi gumbel; do
    ov=""
    [ $init = gumbel ] && ov="--set model.layer.0.init.bz=gumbel(0.0,0.5)"
    # shellcheck disable=SC2086
    $CELLC train stdlib/mgu.cell $CFG $SIZE --set task.length=$LENGTH --set train.steps=$LSTEPS --set eval.every=100 \
      --set train.seed=$seed $ov --out "$OUT/long-$init-seed$seed" > "$OUT/long-$init-seed$seed.log"
  done
done
echo "== 2. copying $LENGTH blanks, $LSTEPS steps: UGI against Gumbel in the first layer"
/usr/bin/python3 examples/diag/summary.py final "$OUT"/long-*[0-9]
