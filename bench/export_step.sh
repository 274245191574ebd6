#!/bin/sh
# The streaming step of an exported GRU: a byte-level language model (vocabulary 256, width = H =
# 256, one layer; and H = 128 beside it) trained one step, `cellc export --to c`, built with cc -O3 -march=native, and
# model_step timed per token on the calling thread (bench/export_step.c: 20000 tokens a round,
# the best of 5 rounds), against the cost of its FLOPs at the single-core FMA peak measured in the
# same run (build/peak --fma 1), interleaved three times, each one's best kept. The FLOPs of a
# token are its products: the recurrent 3 H x H and the head's V x H (the input products of layer
# 0 are a table over the vocabulary, computed at load). Prints a markdown table and writes the
# JSON lines to bench/results/export_step.jsonl.
set -e
cd "$(dirname "$0")/.."
out=bench/results
mkdir -p $out
raw=$out/export_step.jsonl
: > $raw
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for H in 128 256; do
  cat > $tmp/gru$H.cfg <<CFG
[task]
name = text
path = docs/language.md
context = 16
[model]
layers = 1
width = $H
hidden = $H
[train]
steps = 1
batch = 2
[eval]
every = 1
batches = 1
CFG
  ./bin/cellc train stdlib/gru.cell $tmp/gru$H.cfg --out $tmp/run$H --progress none > /dev/null
  ./bin/cellc export $tmp/run$H --to c --out $tmp/c$H > /dev/null
  cc -O3 -march=native -I$tmp/c$H -o $tmp/step$H bench/export_step.c $tmp/c$H/model.c -lm
done
for round in 1 2 3; do
  ./build/peak --fma 1 | sed 's/^{/{"kind": "peak", /' >> $raw
  for H in 128 256; do
    $tmp/step$H $tmp/c$H/weights.bin 20000 5 | sed "s/^{/{\"kind\": \"step\", \"H\": $H, \"V\": 256, /" >> $raw
  done
done
/usr/bin/python3 - "$raw" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
peak = max(r["fma_peak"] for r in recs if r["kind"] == "peak")
print("| model | us per token (model_step, 1 core) | FLOPs per token | their cost at the FMA peak (%.1f GFLOP/s) | step / FLOP cost | weights read per token |" % (peak / 1e9))
print("|---|---|---|---|---|---|")
for H in (128, 256):
    step = min(r["us_per_token"] for r in recs if r["kind"] == "step" and r["H"] == H)
    V = 256
    flops = 2 * (3 * H * H + V * H)
    print("| GRU H=%d, byte LM (V=%d), 1 layer | %.2f | %d | %.2f us | %.1fx | %d KiB |" % (H, V, step, flops, flops / peak * 1e6, step / (flops / peak * 1e6), flops * 2 // 1024))
PY
