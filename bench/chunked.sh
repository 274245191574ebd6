#!/bin/sh
# make bench-chunked (and the end of make bench): matrix-state cells (gla, hgrn2, mamba2,
# gated_deltanet) at issue 31's shapes, T = 2048, B = 8, one training step (forward + backward),
# measured in one run:
#   cellc      build/bench_cell on the stdlib cell (its scan), at 1 and nproc threads; gated_deltanet
#              (gdn1, gdn4), whose matrix-linear state has no scan: its sequential form
#   cellc chunked  build/bench_cell --mode chunked: the chunked form (two programs around the chunk
#              op), with its parts' times (in, the chunk ops, out) and the programs' products; where
#              the cell has no chunked form yet, a row saying so (the table's "n/a"), not an abort
#   torch core bench/torch_chunked.py: the chunkwise-parallel core alone (q, k, v, log decays, S0;
#              gated_deltanet's delta rule also beta, in the UT / WY form)
#   torch cell the same core inside the stdlib cell's projections, norm and gates
# the PyTorch peers at 1 and nproc threads (torch.set_num_threads, the OpenBLAS core of
# bench/blas_env.sh); each kind keeps its best over the thread counts and the interleaved rounds
# of REPS repetitions: the machine is shared and noisy. Then the machine's limits (build/peak: FMA
# peak and copy bandwidth, best of a run before and after) and the FLOPs per token of the chunked
# form against them (bench/chunked_table.py states the counts).
# Writes bench/results/chunked.jsonl and the table bench/results/chunked.md, and prints the table.
#   CHUNKED_BENCH_CASES="gla1 mamba2_4"  only those cases (default: all eight below)
#   CHUNKED_BENCH_REPS=N                  repetitions per measurement (default 2, after a warm-up)
#   CHUNKED_BENCH_ROUNDS=N                interleaved rounds (default 2)
#   CHUNKED_BENCH_T / CHUNKED_BENCH_B     other sequence lengths / batch sizes (default 2048 / 8)
#   CELLC_BENCH_QUICK=1                   (as for make bench) only gla1 and mamba2_1, one round
set -e
cd "$(dirname "$0")/.."
. bench/blas_env.sh
out=bench/results
mkdir -p $out
raw=$out/chunked.jsonl
: > $raw
err=$(mktemp)
trap 'rm -f "$err"' EXIT INT TERM
T=${CHUNKED_BENCH_T:-2048}
B=${CHUNKED_BENCH_B:-8}
reps=${CHUNKED_BENCH_REPS:-2}
rounds=${CHUNKED_BENCH_ROUNDS:-2}
quick_cases=""
[ -n "$CELLC_BENCH_QUICK" ] && { quick_cases="gla1 mamba2_1"; rounds=${CHUNKED_BENCH_ROUNDS:-1}; }
ncpu=$(nproc)
threads=1
[ "$ncpu" -gt 1 ] && threads="1 $ncpu"
# case: name cell dims (D last: bench_cell takes it apart)
# (gdn4's sequential form is the longest measurement: 1 to 3 minutes a round on 2 cores)
cases=${CHUNKED_BENCH_CASES:-${quick_cases:-"gla1 gla4 hgrn2_1 hgrn2_4 mamba2_1 mamba2_4 gdn1 gdn4"}}
dims_of() {
  case $1 in
    gla1|hgrn2_1|gdn1) echo NH=1,K=64,V=64,D=64 ;;
    gla4|hgrn2_4|gdn4) echo NH=4,K=64,V=64,D=256 ;;
    mamba2_1) echo NH=1,P=64,N=64,D=64 ;;
    mamba2_4) echo NH=4,P=64,N=64,D=256 ;;
    *) echo "chunked.sh: no case '$1'" >&2; exit 2 ;;
  esac
}
peak() {
  env $peer_env OPENBLAS_NUM_THREADS=1 ./build/peak | tail -n 1 | sed 's/^{/{"kind": "machine", /' >> $raw
}
peak
for case in $cases; do
  cell=${case%%_*}; cell=${cell%1}; cell=${cell%4}
  # the scan column: gated_deltanet's S is matrix-linear (no scan), so its sequential form
  scanmode=""
  [ "$cell" = gdn ] && { cell=gated_deltanet; scanmode="--mode sequential"; }
  dims=$(dims_of $case)
  D=${dims##*D=}
  celldims=${dims%,D=*}
  for round in $(seq $rounds); do
    for th in $threads; do
      CELLC_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th \
        ./build/bench_cell stdlib/$cell.cell 0 $D $T $B --reps $reps --dims $celldims $scanmode |
        sed "s/^{/{\"kind\": \"cellc\", \"case\": \"$case\", \"dims\": \"$dims\", \"threads\": $th, /" >> $raw
      # a cell the chunked form does not (yet) take: its error in a row of its own, the rest goes on
      if line=$(CELLC_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th \
          ./build/bench_cell stdlib/$cell.cell 0 $D $T $B --reps $reps --dims $celldims --mode chunked 2>$err); then
        cat $err >&2
        echo "$line" |
          sed "s/^{/{\"kind\": \"cellc_chunked\", \"case\": \"$case\", \"dims\": \"$dims\", \"threads\": $th, /" >> $raw
      else
        why=$(grep -m 1 'error' $err | sed 's/.*error: //; s/["\\]/ /g')
        [ -n "$why" ] || { cat $err >&2; why="exit status not 0"; }
        echo "{\"kind\": \"cellc_chunked\", \"case\": \"$case\", \"dims\": \"$dims\", \"threads\": $th, \"failed\": \"$why\"}" >> $raw
        echo "bench-chunked: $case: cellc --mode chunked failed: $why" >&2
      fi
      for what in core cell; do
        env $peer_env OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th \
          /usr/bin/python3 bench/torch_chunked.py $cell $dims $T $B $th $reps $what |
          sed "s/^{/{\"case\": \"$case\", /" >> $raw
      done
    done
  done
  echo "bench-chunked: $case ($dims, T=$T, B=$B) done" >&2
done
peak
{ echo "Matrix states, one training step (forward + backward), T = $T, B = $B; $(date -u '+%Y-%m-%d %H:%M UTC'),"
  echo "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $ncpu cores (bench/chunked.sh):"; echo
  /usr/bin/python3 bench/chunked_table.py $raw $ncpu $rounds $reps; } > $out/chunked.md
cat $out/chunked.md
