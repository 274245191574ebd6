#!/bin/sh
# On a lent GPU machine, from the project's root, with .gpu/ (make gpu-bundle) carried there:
#   sh .gpu/run.sh
# unpacks the bundle, then runs make test-gpu's and make bench-gpu's scripts directly (the machine
# cannot rebuild: no LLVM, re2c, Bison or Criterion), each under a time limit. Logs and the bench's
# results go to $OUT (the device tool's folder) or .gpu/out. TEST_S, BENCH_S: the limits in seconds
# (300, 300; 0 skips that part); CELLC_GPU_BENCH: the bench's parts (bench/gpu.sh);
# CELLC_GPU_JOBS: Criterion's jobs (16).
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-.gpu/out}
mkdir -p "$out"
t0=$(date +%s)
tar xJf .gpu/bundle.tar.xz && tar xJf .gpu/pycache.tar.xz || exit 1
export LD_LIBRARY_PATH=$PWD/lib CELLC_GPU_JOBS=${CELLC_GPU_JOBS:-16}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$out/machine.txt" 2>&1
if [ "${TEST_S:-300}" != 0 ]; then
  timeout -k 5 "${TEST_S:-300}" sh tests/gpu.sh > "$out/test-gpu.log" 2>&1
  echo "test-gpu: exit $? at $(( $(date +%s) - t0 )) s: $(tail -n 1 "$out/test-gpu.log")" >> "$out/machine.txt"
fi
if [ "${BENCH_S:-300}" != 0 ]; then
  timeout -k 5 "${BENCH_S:-300}" sh bench/gpu.sh > "$out/bench-gpu.log" 2>&1
  echo "bench-gpu: exit $? at $(( $(date +%s) - t0 )) s" >> "$out/machine.txt"
  tar czf "$out/bench-results.tgz" bench/results/gpu* 2>/dev/null
fi
cat "$out/machine.txt"
