#!/bin/sh
# before_after.sh: "nothing gets slower" (issue 17): build/bench_cell forward + backward of one
# layer of every stdlib cell (B = 64, T = 512, H = D = 128) from another build against this one's,
# on 1 and 2 threads, interleaved in rounds (each cell: the other build, then this one), best
# total_s of the rounds each; prints a markdown table with after / before.
#   sh bench/before_after.sh OTHER_BENCH_CELL [ROUNDS]
#   BEFORE_AFTER_WIDTHS="128 256"   H = D (default 128)
#   e.g. git worktree add /tmp/old REV && make -C /tmp/old build/bench_cell &&
#        sh bench/before_after.sh /tmp/old/build/bench_cell 2
cd "$(dirname "$0")/.." || exit 1
old=$1
rounds=${2:-2}
[ -x "$old" ] && [ -x build/bench_cell ] || { echo "usage: sh bench/before_after.sh OTHER_BENCH_CELL [ROUNDS] (and make build/bench_cell)" >&2; exit 2; }
widths=${BEFORE_AFTER_WIDTHS:-128}
# total BIN THREADS CELLFILE H EXTRA: total_s of one run
total() { env CELLC_THREADS=$2 OPENBLAS_NUM_THREADS=1 "$1" "$3" $4 $4 512 64 --reps 3 $5 | sed -n 's/.*"total_s": \([0-9.]*\).*/\1/p'; }
echo "| cell | H | threads | before s | after s | after / before |"
echo "|---|---|---|---|---|---|"
for H in $widths; do
for th in 1 2; do
  for cell in gru lstm mgu mgu_see_h lru hgru mingru elman; do
    file=stdlib/${cell%_see_h}.cell extra=""
    case $cell in *_see_h) extra="--set see_h=true" ;; hgru) extra="--set lb=0.25" ;; esac
    bo="" bn=""
    r=1
    while [ $r -le "$rounds" ]; do
      o=$(total "$old" $th $file $H "$extra") n=$(total ./build/bench_cell $th $file $H "$extra")
      bo=$(echo "$bo $o" | tr ' ' '\n' | sed '/^$/d' | sort -g | head -n 1)
      bn=$(echo "$bn $n" | tr ' ' '\n' | sed '/^$/d' | sort -g | head -n 1)
      r=$((r + 1))
    done
    awk -v c="$cell" -v h=$H -v t=$th -v o="$bo" -v n="$bn" 'BEGIN { printf "| %s | %d | %d | %.4f | %.4f | %.2f |\n", c, h, t, o, n, n / o }'
  done
done
done
