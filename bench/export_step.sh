#!/bin/sh
# The streaming step of an exported GRU: a byte-level language model (vocabulary 256, width = H =
# 256, one layer; and H = 128 beside it) trained one step, `cellc export --to c`, built with cc -O3 -march=native, and
# model_step timed per token on the calling thread (bench/export_step.c: 3000 tokens a round,
# the best of 30 rounds: short rounds, so that some miss the other jobs of a shared machine),
# against two floors measured in the same run: the cost of its FLOPs at the single-core FMA peak
# (build/peak --fma 1) and the time to read its weights once (export_step --read: a buffer of as
# many bytes summed in order, repeated as the steps repeat their weights, so served from whichever
# cache holds it). Interleaved three times; the table shows the best and the median of the three.
# The FLOPs of a token are its products: the recurrent 3 H x H and the head's V x H (the input
# products of layer 0 are a table over the vocabulary, computed at load), 4 bytes of weights read
# per multiply-add. Prints a markdown table and writes the JSON lines to
# bench/results/export_step.jsonl.
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
    $tmp/step$H $tmp/c$H/weights.bin 3000 30 | sed "s/^{/{\"kind\": \"step\", \"H\": $H, \"V\": 256, /" >> $raw
    $tmp/step$H --read $(((3 * H * H + 256 * H) * 4 / 1024)) 5 | sed "s/^{/{\"kind\": \"read\", \"H\": $H, /" >> $raw
  done
done
/usr/bin/python3 - "$raw" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
peak = max(r["fma_peak"] for r in recs if r["kind"] == "peak")
print("| model | us per token (model_step, 1 core): best, median | FLOPs per token | their cost at the FMA peak (%.1f GFLOP/s) | weights read per token | their read from cache, best (GB/s) | step / FLOP cost | step / read |" % (peak / 1e9))
print("|---|---|---|---|---|---|---|---|")
for H in (128, 256):
    steps = [r["us_per_token"] for r in recs if r["kind"] == "step" and r["H"] == H]
    reads = [r for r in recs if r["kind"] == "read" and r["H"] == H]
    rd = min(reads, key=lambda r: r["us_per_pass"])
    step, V = min(steps), 256
    flops = 2 * (3 * H * H + V * H)
    fc = flops / peak * 1e6
    print("| GRU H=%d, byte LM (V=%d), 1 layer | %.2f, %.2f | %d | %.2f us | %d KiB | %.2f us (%.0f) | %.1fx | %.2fx |" % (
        H, V, step, statistics.median(steps), flops, fc, flops * 2 // 1024, rd["us_per_pass"], rd["gb_per_s"], step / fc, step / rd["us_per_pass"]))
PY
