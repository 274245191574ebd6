#!/bin/sh
# The thesis (seeds.md sections 3, 5): GRU on temporal XOR (examples/small/temporal_xor.cfg),
# mixed training (40% easy sequences) against hard-only training: the largest ||dL/dh_t|| per
# step seen during training ([log] grad_per_step = true: grad_per_step.json and .svg in each run),
# and cellc diag after training: the gradient per step and the gate means and state changes by
# input token (filler tokens against the informative ones).
# Run from the repository root:  sh examples/diag/thesis.sh [OUT]   (about a minute on 2 cores)
set -e
CELLC=${CELLC:-bin/cellc}
OUT=${1:-runs/diag-examples/thesis}
CFG=examples/small/temporal_xor.cfg
rm -rf "$OUT"; mkdir -p "$OUT"
for mode in mixed hard; do
  frac=0.4
  [ $mode = hard ] && frac=0
  $CELLC train stdlib/gru.cell $CFG --out "$OUT/$mode-run" --set task.easy_fraction=$frac --set log.grad_per_step=true \
    > "$OUT/$mode-run.log"
  $CELLC diag stdlib/gru.cell $CFG --checkpoint "$OUT/$mode-run/checkpoint.safetensors" --out "$OUT/$mode-trained" \
    --set task.easy_fraction=$frac --by-token > "$OUT/$mode-trained.log"
done
/usr/bin/python3 examples/diag/summary.py final "$OUT"/*-run
/usr/bin/python3 examples/diag/summary.py grad "$OUT"/*-trained
/usr/bin/python3 examples/diag/summary.py tokens "$OUT"/*-trained
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
for mode in ("mixed", "hard"):
    g = json.load(open("%s/%s-run/grad_per_step.json" % (sys.argv[1], mode)))["layers"][0]["max_grad_norm_per_step"]
    print("%-5s largest ||dL/dh_t|| during training: t=1 %.3g, t=%d %.3g, t=%d %.3g" % (mode, g[0], len(g) // 2, g[len(g) // 2 - 1], len(g), g[-1]))
PY
