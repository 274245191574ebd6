#!/bin/sh
# make bench-train-chunked: one `cellc train` step of a whole model (embedding, one gla layer of 4
# heads of K = V = 64 at D = 256, readout, cross-entropy, adamw) on selective copying at T = 2048,
# B = 8, with the layer in its chunked form (train.mode = chunked) against its elementwise scan
# (train.mode = scan), measured in one run: each mode trains STEPS steps logged every step, the
# first a warm-up, and the fastest later step counts (tokens_per_s of metrics.jsonl); the modes
# interleave over ROUNDS rounds, the best of each counts: the machine is shared and noisy.
# Appends JSON lines to bench/results/train_chunked.jsonl and prints the ratio.
#   TRAIN_CHUNKED_STEPS=N   steps per run (default 3)
#   TRAIN_CHUNKED_ROUNDS=N  interleaved rounds (default 1)
#   TRAIN_CHUNKED_T / TRAIN_CHUNKED_B  other sequence lengths / batch sizes (default 2048 / 8)
set -e
cd "$(dirname "$0")/.."
out=bench/results
mkdir -p $out
raw=$out/train_chunked.jsonl
steps=${TRAIN_CHUNKED_STEPS:-3}
rounds=${TRAIN_CHUNKED_ROUNDS:-1}
T=${TRAIN_CHUNKED_T:-2048}
B=${TRAIN_CHUNKED_B:-8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
cat > "$work/gla.cfg" <<CFG
[task]
name     = selective_copying
tokens   = 10
memorize = 8
length   = $((T - 8))
[model]
layers  = 1
width   = 256
encoder = embed
readout = all
[train]
steps     = $steps
batch     = $B
optimizer = adamw
lr        = 1e-3
seed      = 1
[eval]
every   = 100000
batches = 1
[log]
every = 1
CFG
when=$(date -u '+%Y-%m-%d %H:%M UTC')
for round in $(seq "$rounds"); do
  for mode in scan chunked; do
    ./bin/cellc train stdlib/gla.cell "$work/gla.cfg" --set model.dims.NH=4 --set model.dims.K=64 --set model.dims.V=64 \
      --set train.mode=$mode --set eval.batches=1 --out "$work/$mode" --force --progress none > "$work/$mode.log" 2>&1 ||
      { cat "$work/$mode.log" >&2; exit 1; }
    /usr/bin/python3 - "$work/$mode/metrics.jsonl" "$mode" "$round" "$T" "$B" "$when" >> $raw <<'PY'
import json, sys
path, mode, rnd, T, B, when = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
tps = [r["tokens_per_s"] for r in rows if r["split"] == "train"]
best = max(tps[1:] or tps)
print(json.dumps({"kind": "train_step", "cell": "gla", "dims": "NH=4,K=64,V=64,D=256", "mode": mode, "round": int(rnd),
                  "T": int(T), "B": int(B), "tokens_per_s": best, "step_s": int(T) * int(B) / best, "when": when}))
PY
    echo "bench-train-chunked: round $round, $mode done" >&2
  done
done
/usr/bin/python3 - $raw "$when" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("when") == sys.argv[2]]
best = {m: min(r["step_s"] for r in rows if r["mode"] == m) for m in ("scan", "chunked")}
r0 = rows[0]
print("cellc train, one step of gla (%s), T = %d, B = %d: scan %.2f s, chunked %.2f s: chunked %.1fx faster (%s)"
      % (r0["dims"], r0["T"], r0["B"], best["scan"], best["chunked"], best["scan"] / best["chunked"], sys.argv[2]))
PY
