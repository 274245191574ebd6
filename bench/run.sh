#!/bin/sh
# make bench: cellc's CPU back end against PyTorch on this machine, in one run,
# with the same thread count for both (CELLC_BENCH_THREADS, default 1), and the
# machine's measured limits (sgemm rate, copy bandwidth); then the training
# throughput (bench/train_throughput.sh: cellc on all cores, PyTorch at its best
# thread count), cellc's thread-scaling curve (bench/thread_scaling.sh) and the data-parallel
# speedup of two MPI ranks (bench/mpi_scaling.sh).
# Writes the tables to bench/results/latest.md and prints them; the JSON lines
# go to bench/results/latest.jsonl, train.jsonl, scaling.jsonl and mpi.jsonl.
#   CELLC_BENCH_QUICK=1  only B=64, T=512, H=D=128 in the table; the training
#                        throughput only for gru at H=128 (PyTorch probed at 1 and
#                        nproc threads), the scaling only at H=128 on 1 and nproc
#                        threads; 10 training steps per run
#   The scripts' own knobs (TRAIN_BENCH_*, SCALING_*) pass through.
set -e
cd "$(dirname "$0")/.."
th=${CELLC_BENCH_THREADS:-1}
export CELLC_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th MKL_NUM_THREADS=$th
. bench/blas_env.sh
out=bench/results
mkdir -p $out
raw=$out/latest.jsonl
: > $raw
B=64
configs="512:128"
[ -n "$CELLC_BENCH_QUICK" ] || configs="512:128 512:256 2048:128 2048:256"
# the machine's peak (FMA at its widest vector width, 1 core and all), the GEMM kernels cellc runs
# and the OpenBLAS core the peers run (the CPUID choice, bench/blas_env.sh), sgemm at the GRU
# layer's shapes as a fraction of the peak on both (build/peak, bench/peak.c)
{ echo "Machine limits and GEMM kernels (build/peak; OpenBLAS as the peers run it, $peer_env):"; echo
  env $peer_env OPENBLAS_NUM_THREADS=1 ./build/peak | sed 's/^/    /'; } > $out/peak.md
# limits first and last (the best of the two counts): this machine is shared and noisy
./build/bench_cell x 128 128 512 $B --machine | sed 's/^{/{"kind": "machine", /' >> $raw
cells="gru lstm mgu mgu_see_h lru hgru mingru"
for cfg in $configs; do
  T=${cfg%%:*}; H=${cfg##*:}
  for cell in $cells; do
    file=stdlib/$cell.cell; set=""
    [ $cell = mgu_see_h ] && { file=stdlib/mgu.cell; set="--set see_h=true"; }
    case $cell in
      gru|lstm) style=nn ;;
      *) style=unbind ;;
    esac
    # interleaved: cellc, PyTorch, cellc, PyTorch; the table keeps each one's best
    for round in 1 2; do
      ./build/bench_cell $file $H $H $T $B --reps 3 $set | sed "s/^{/{\"kind\": \"cellc\", \"name\": \"$cell\", /" >> $raw
      env $peer_env /usr/bin/python3 bench/torch_cells.py $cell $H $H $T $B $style 2 | sed 's/^{/{"kind": "torch", /' >> $raw
    done
    if [ $T = 512 ] && [ $H = 128 ] && [ $style = unbind ]; then
      env $peer_env /usr/bin/python3 bench/torch_cells.py $cell $H $H $T $B index 1 | sed 's/^{/{"kind": "torch", /' >> $raw
    fi
    echo "bench: $cell T=$T H=$H done" >&2
  done
done
./build/bench_cell x 128 128 512 $B --machine | sed 's/^{/{"kind": "machine", /' >> $raw
/usr/bin/python3 bench/table.py $raw > $out/latest.md
{ echo; cat $out/peak.md; } >> $out/latest.md
# training throughput, cellc train against the same model in PyTorch, and the thread-scaling
# curve (the scripts set their own thread counts; their progress and errors go to stderr)
: > $out/train.jsonl
: > $out/scaling.jsonl
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{ echo; echo "Training throughput against PyTorch:"; echo; } >> $out/latest.md
sh bench/train_throughput.sh $out/train.jsonl > $tmp
cat $tmp >> $out/latest.md
{ echo; echo "Thread scaling of cellc:"; echo; } >> $out/latest.md
sh bench/thread_scaling.sh $out/scaling.jsonl > $tmp
cat $tmp >> $out/latest.md
# data-parallel: mpirun -np 2 with one thread per rank against one process with one thread
: > $out/mpi.jsonl
{ echo; echo "Data-parallel training, mpirun -np 2 (bench/mpi_scaling.sh):"; echo; } >> $out/latest.md
sh bench/mpi_scaling.sh $out/mpi.jsonl > $tmp
cat $tmp >> $out/latest.md
cat $out/latest.md
