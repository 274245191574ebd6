#!/bin/sh
# The emitted CPU kernel against cellc's own run, in one run: for the GRU and the LSTM at H = D =
# 128 and 256, B = 64, T = 512, `cellc emit --target cpu` linked into bench/emit_bench.c
# (P_forward_ex + P_backward_ex, threads 0: every core) and build/bench_cell on the same cell (its
# default threads: every core that pays), interleaved twice, each one's best kept. Prints a
# markdown table with the ratio emitted / cellc (1.00: as fast) and writes the JSON lines to
# bench/results/emit.jsonl.   EMIT_BENCH_REPS (default 3): timed runs per measurement.
set -e
cd "$(dirname "$0")/.."
unset CELLC_THREADS OMP_NUM_THREADS
export OPENBLAS_NUM_THREADS=1
reps=${EMIT_BENCH_REPS:-3}
T=512; B=64
out=bench/results
mkdir -p $out
raw=$out/emit.jsonl
: > $raw
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cell in gru lstm; do
  for H in 128 256; do
    d=$tmp/$cell$H
    ./bin/cellc emit stdlib/$cell.cell --dims D=$H,H=$H --out $d >&2
    cc -std=c11 -O2 -Wall -Wextra -Werror -DP=$cell -include $d/$cell.h -o $d/bench bench/emit_bench.c $d/$cell.o -lopenblas -lm
    # the params' sizes and the states' sizes per batch row, from P.json
    sizes=$(/usr/bin/python3 -c '
import json, math, sys
m = json.load(open(sys.argv[1]))
def n(t, lead_b):
    s = [d for d in t["shape"] if d != "B"] if lead_b else t["shape"]
    return math.prod(s) * (2 if t.get("complex") else 1)
print(len(m["params"]), *[n(p, False) for p in m["params"]], len(m["states"]), *[n(s, True) for s in m["states"]])
' $d/$cell.json)
    for round in 1 2; do
      $d/bench $T $B 0 $reps $sizes | sed "s/^{/{\"kind\": \"emitted\", \"cell\": \"$cell\", \"H\": $H, /" >> $raw
      ./build/bench_cell stdlib/$cell.cell $H $H $T $B --reps $reps | sed 's/^{/{"kind": "cellc", /' >> $raw
    done
    echo "bench: emitted $cell H=$H done" >&2
  done
done
/usr/bin/python3 - "$raw" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    k = (r["cell"], r["H"], r["kind"])
    best[k] = min(best.get(k, 1e30), r["total_s"])
print("| cell | H | emitted P_forward_ex + P_backward_ex (ms) | cellc (build/bench_cell, ms) | emitted / cellc |")
print("|---|---|---|---|---|")
for cell in ("gru", "lstm"):
    for H in (128, 256):
        e, c = best.get((cell, H, "emitted")), best.get((cell, H, "cellc"))
        if e and c:
            print("| %s | %d | %.1f | %.1f | %.2f |" % (cell, H, e * 1e3, c * 1e3, e / c))
PY
