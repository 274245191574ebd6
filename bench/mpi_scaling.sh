#!/bin/sh
# Data-parallel scaling (docs/distributed.md): `cellc train stdlib/gru.cell bench/train_gru.cfg`
# (copying, T=512, B=64, H = D = 128, one layer; as bench/train_throughput.sh) as one process with
# one thread against `mpirun -np 2` with one thread per rank (each rank 32 sequences of every
# batch, one MPI_Allreduce of the gradients per step); tokens/s of the global batch, the best of
# TRAIN_BENCH_ROUNDS interleaved rounds, and the speedup against the target of issue 14 (>= 1.7x).
#
#   sh bench/mpi_scaling.sh [OUT.jsonl]   appends the JSON lines to OUT.jsonl (bench/run.sh passes
#                                         its mpi.jsonl); prints the table, progress on stderr
#   MPI_SCALING_RANKS=2        the ranks of the MPI run (default 2)
#   MPI_SCALING_WIDTH=128      H = D = width (default 128)
#   TRAIN_BENCH_STEPS, TRAIN_BENCH_ROUNDS as in bench/train_common.sh (default 30 steps, 2 rounds)
# Runs as root through Open MPI's OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM). A failed run exits non-zero.
set -e
cd "$(dirname "$0")/.."
. bench/train_common.sh
out=${1:-}
ranks=${MPI_SCALING_RANKS:-2}
H=${MPI_SCALING_WIDTH:-128}
rounds=${TRAIN_BENCH_ROUNDS:-2}
command -v mpirun > /dev/null || { echo "mpi_scaling: no mpirun (make deps installs openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
r=1
while [ $r -le $rounds ]; do
  CELLC_LAUNCH="" cellc_train gru $H 1 1 $r '{"ranks": 1}'
  echo "mpi_scaling: 1 process round $r done" >&2
  CELLC_LAUNCH="mpirun --oversubscribe --bind-to none -np $ranks" cellc_train gru $H 1 1 $r "{\"ranks\": $ranks}"
  echo "mpi_scaling: $ranks ranks round $r done" >&2
  r=$((r + 1))
done
[ -n "$out" ] && cat $lines >> "$out"
$py - $lines <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = {}
for r in rows:
    best[r["ranks"]] = max(best.get(r["ranks"], 0), r["tokens_per_s"])
one = best[1]
print("| processes (1 thread each) | tokens/s (best) | speedup | target |")
print("|---|---|---|---|")
for n in sorted(best):
    print(f"| {n} | {best[n]:.0f} | {best[n] / one:.2f}x | {'>= 1.7x' if n == 2 else ''} |")
PY
