#!/bin/sh
# gemm_compare.sh: bench_cell with cellc's own GEMM kernels against cblas_sgemm (CELLC_GEMM=blas)
# for GRU and LSTM at B = 64, T = 512, H = D = 128 and 256 on 1 thread, interleaved in rounds
# (every configuration once per round), best total_s of the rounds per configuration; once with
# the environment as it is and once with OpenBLAS on the CPUID choice (bench/blas_env.sh).
#   sh bench/gemm_compare.sh [ROUNDS]      (needs build/bench_cell; prints a markdown table)
cd "$(dirname "$0")/.." || exit 1
. bench/blas_env.sh
rounds=${1:-3}
out=$(mktemp)
export CELLC_THREADS=1 OPENBLAS_NUM_THREADS=1
for r in $(seq "$rounds"); do
  for pin in env cpuid; do
    for cell in gru lstm; do
      for H in 128 256; do
        for g in blas own; do
          set -- ./build/bench_cell "stdlib/$cell.cell" "$H" "$H" 512 64 --reps 3
          if [ $g = blas ]; then set -- env CELLC_GEMM=blas "$@"; else set -- env -u CELLC_GEMM "$@"; fi
          if [ $pin = cpuid ]; then set -- env $peer_env "$@"; fi
          line=$("$@" 2>/dev/null | tail -n 1)
          echo "$pin $cell $H $g $line" >> "$out"
        done
      done
    done
  done
done
python3 - "$out" "${OPENBLAS_CORETYPE:-}" "$peer_core" <<'PY'
import json, sys
best = {}
for l in open(sys.argv[1]):
    pin, cell, H, g, js = l.split(" ", 4)
    d = json.loads(js)
    k = (pin, cell, int(H), g)
    if k not in best or d["total_s"] < best[k]["total_s"]:
        best[k] = d
pinname = sys.argv[2] or "(none)"
print("| OPENBLAS_CORETYPE | cell | H | cblas s | cellc gemm s | speedup | GEMM share cblas | GEMM share cellc |")
print("|---|---|---|---|---|---|---|---|")
for pin in ("env", "cpuid"):
    for cell in ("gru", "lstm"):
        for H in (128, 256):
            b, o = best.get((pin, cell, H, "blas")), best.get((pin, cell, H, "own"))
            if not b or not o: continue
            sh = lambda d: d["gemm_s"] / d["profiled_s"] if d.get("profiled_s") else 0
            print("| %s | %s | %d | %.3f | %.3f | %.2fx | %.0f%% | %.0f%% |" % (
                pinname if pin == "env" else f"{sys.argv[3] or '(none)'} (CPUID choice)", cell, H, b["total_s"], o["total_s"],
                b["total_s"] / o["total_s"], 100 * sh(b), 100 * sh(o)))
PY
rm -f "$out"
