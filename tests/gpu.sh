#!/bin/sh
# make test-gpu: the CUDA back end on this machine's GPU. test_cuda and test_backends' cuda suite
# again with the real driver (CELLC_TEST_CUDA_BACKEND=cuda: every stdlib cell against the interpreter at T = 9, 130, 1000, scan
# against sequential, and the benchmark's sizes against the CPU back end), the emitted P.cu of every
# stdlib cell built by nvcc and run against the CPU back end (gpu_cuda_emit), the chunked form
# against the cpu's and the interpreter (test_cuda_chunk), `cellc run --backend
# cuda` against `--backend cpu` on one cell, training on the GPU: mgu on small copying to 99%, the
# LRU residual model's first 20 steps against the CPU, gla in the chunked form against its scan and
# against the CPU's chunked form, the Python package on CUDA tensors
# (tests/python_cuda_gpu.py, from the cache `make python-cuda-prebuild` leaves in
# build/python-cuda-cache: carry it, with the very bin/cellc that filled it, not a stripped copy:
# its keys hold the binary's hash). Skips with one line where there is no GPU. Ends with
# "N passed, M failed". CELLC_GPU_JOBS: Criterion's jobs per test binary (default 1; the GPU
# machine's cores shorten the run), CELLC_GPU_TIMEOUT: seconds per binary (default 1800).
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
probe=$(bin/cellc run stdlib/gru.cell --dims H=4,D=3 --T 2 --B 1 --backend cuda --out "$tmp/probe.safetensors" 2>&1)
rc=$?
if [ $rc -eq 3 ]; then
  echo "test-gpu: skipped, no GPU here: $(echo "$probe" | head -n 1 | sed 's/^cellc: error: //')"
  echo "0 passed, 0 failed"
  exit 0
fi
pass=0; fail=0
jobs=${CELLC_GPU_JOBS:-1}; limit=${CELLC_GPU_TIMEOUT:-1800}
if [ $rc -ne 0 ]; then echo "test-gpu: cellc run --backend cuda exited $rc: $probe"; fail=$((fail + 1)); fi
# a Criterion binary's counts into pass and fail: criterion NAME (output in $out, status in $rc)
criterion() {
  echo "$out" | grep -E 'FAIL|CRASH|Synthesis|Assertion|^\[----\]   [^ ]' | head -60
  syn=$(echo "$out" | grep 'Synthesis' | tail -n 1)
  if [ -z "$syn" ]; then
    echo "$1: no synthesis (exit $rc)"; fail=$((fail + 1))
  else
    tested=$(echo "$syn" | sed -E 's/.*Tested: ([0-9]+).*/\1/')
    passing=$(echo "$syn" | sed -E 's/.*Passing: ([0-9]+).*/\1/')
    pass=$((pass + passing)); fail=$((fail + tested - passing))
  fi
}
out=$(CELLC_TEST_CUDA_BACKEND=cuda timeout $limit build/tests/test_cuda --jobs $jobs 2>&1); rc=$?
criterion test_cuda
# the conformance test's cuda suite (every cell against the interpreter at T = 9 and 130) on the GPU
out=$(CELLC_TEST_CUDA_BACKEND=cuda timeout $limit build/tests/test_backends --jobs $jobs --filter 'cuda/*' 2>&1); rc=$?
criterion test_backends
# the chunked form on the GPU (cellc_chunk.cu): gla, hgrn2, mamba2 and a cell of two terms and two
# reads in --mode chunked against the cpu's chunked form and the interpreter's sequential form
out=$(CELLC_TEST_CUDA_BACKEND=cuda timeout $limit build/tests/test_cuda_chunk --jobs $jobs 2>&1); rc=$?
criterion test_cuda_chunk
# cellc emit --target cuda: every stdlib cell's P.cu built by nvcc (-shared, -lcublas) for this GPU's
# arch and run through its C API against the CPU back end (test_cuda_emit.c with CELLC_EMIT_GPU)
out=$(timeout $limit build/tests/gpu_cuda_emit --jobs $jobs 2>&1); rc=$?
criterion gpu_cuda_emit
# the command line: the same inputs on cuda and cpu, every tensor within float32 rounding
for cell in gru lru; do
  bin/cellc run stdlib/$cell.cell --dims H=64,D=32 --T 300 --B 8 --seed 5 --backend cuda --out "$tmp/cuda.safetensors" &&
    bin/cellc run stdlib/$cell.cell --dims H=64,D=32 --T 300 --B 8 --seed 5 --backend cpu --out "$tmp/cpu.safetensors" &&
    python3 - "$tmp/cuda.safetensors" "$tmp/cpu.safetensors" <<'PY'
import json, struct, sys
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), data[s:e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
worst = 0.0
for k in b:
    ref = max(1e-30, max(abs(v) for v in b[k]) if b[k] else 1e-30)
    d = max((abs(x - y) for x, y in zip(a[k], b[k])), default=0.0)
    worst = max(worst, d / ref)
sys.exit(0 if worst < 1e-3 else print("relative error", worst) or 1)
PY
  if [ $? -eq 0 ]; then pass=$((pass + 1)); else echo "test-gpu: cellc run $cell: cuda and cpu differ"; fail=$((fail + 1)); fi
done
# training on the GPU: mgu on small copying (examples/small/copying.cfg, 3000 steps) to 99% test
# accuracy, and 20 steps of the LRU residual model on cuda against cpu (the losses within 1e-3)
run=$(bin/cellc train stdlib/mgu.cell examples/small/copying.cfg --set train.device=cuda --out "$tmp/copying" 2>&1)
acc=$(echo "$run" | sed -n 's/^final: step=3000 loss=[^ ]* accuracy=\([0-9.]*\)$/\1/p')
echo "$run" | grep -E '^(final|step [0-9]+ valid)' | tail -n 3
if [ -n "$acc" ] && python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.99 else 1)"; then pass=$((pass + 1))
else echo "test-gpu: mgu on small copying with train.device = cuda: accuracy '$acc', want >= 0.99"; echo "$run" | tail -n 5; fail=$((fail + 1)); fi
for dev in cpu cuda; do
  bin/cellc train stdlib/lru.cell examples/small/lru.cfg --set train.device=$dev --set train.steps=20 --set log.every=1 \
    --set eval.every=20 --out "$tmp/lru-$dev" > /dev/null 2>&1 || echo "test-gpu: lru residual on $dev failed"
done
if python3 - "$tmp/lru-cpu/metrics.jsonl" "$tmp/lru-cuda/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
tr = lambda m: [x["loss"] for x in m if x["split"] == "train"]
la, lb = tr(a), tr(b)
worst = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(la, lb)) if la and len(la) == len(lb) == 20 else 1.0
print(f"lru residual (batch norm, glu, dropout) 20 steps, cuda against cpu: worst relative loss difference {worst:.2e}")
sys.exit(0 if worst < 1e-3 else 1)
PY
then pass=$((pass + 1)); else echo "test-gpu: lru residual: cuda does not follow cpu"; fail=$((fail + 1)); fi
# chunked training on the GPU (chunkdev.c's forward and backward apart): gla with train.mode =
# chunked, 20 steps of small selective copying (examples/small), against its scan on cuda at heads of 16 x 16 and
# against the cpu's chunked form at heads of 64 x 64 (the layer's layout from the interpreter): the losses
# within 1e-3, the checkpoints' tensors within 1e-2 of each one's largest
sed '/^hidden/d' examples/small/selective_copying.cfg > "$tmp/sc.cfg" # gla has no H
for case in "16:scan:cuda" "64:chunked:cpu"; do
  kv=${case%%:*}; other=${case#*:}; mode=${other%%:*}; odev=${other#*:}
  for run in "chunked:cuda" "$mode:$odev"; do
    bin/cellc train stdlib/gla.cell "$tmp/sc.cfg" --set train.mode=${run%%:*} \
      --set train.device=${run#*:} --set model.dims.NH=4 --set model.dims.K=$kv --set model.dims.V=$kv \
      --set train.steps=20 --set log.every=1 --set eval.every=20 --set eval.batches=2 --progress none --force \
      --out "$tmp/gla-$kv-${run%%:*}-${run#*:}" > /dev/null 2>&1 || echo "test-gpu: gla ${run%%:*} on ${run#*:} failed"
  done
  if python3 - "$tmp/gla-$kv-chunked-cuda" "$tmp/gla-$kv-$mode-$odev" "$kv" "$mode" "$odev" <<'PY'
import json, os, struct, sys
def load(path):  # a checkpoint's float32 tensors
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head, data = json.loads(b[8:8 + n]), b[8 + n:]
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__" and v["dtype"] == "F32"}
try:
    a, b = ([json.loads(l) for l in open(os.path.join(p, "metrics.jsonl"))] for p in sys.argv[1:3])
    ca, cb = (load(os.path.join(p, "checkpoint.safetensors")) for p in sys.argv[1:3])
except OSError:
    a = b = ca = cb = {}
tr = lambda m: [x["loss"] for x in m if x["split"] == "train"]
la, lb = tr(a), tr(b)
worst = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(la, lb)) if la and len(la) == len(lb) == 20 else 1.0
# the first steps' losses barely see the cell: the weights and adamw's moments after them do
wt = max((max(abs(x - y) for x, y in zip(ca[k], cb[k])) / max(max(abs(y) for y in cb[k]), 1e-30) for k in cb if cb[k]),
         default=1.0) if ca and set(ca) == set(cb) else 1.0
print(f"gla heads of {sys.argv[3]} 20 steps, chunked on cuda against {sys.argv[4]} on {sys.argv[5]}: worst relative loss "
      f"difference {worst:.2e}, checkpoint tensors {wt:.2e} of their largest")
sys.exit(0 if worst < 1e-3 and wt < 1e-2 else 1)
PY
  then pass=$((pass + 1)); else echo "test-gpu: gla chunked on cuda does not follow $mode on $odev"; fail=$((fail + 1)); fi
done
# the Python package on CUDA tensors: cellc.load's modules on the GPU (the emitted CUDA library) against
# the same modules on the CPU (tests/python_cuda_gpu.py). This machine builds neither library: they
# come from the cache `make python-cuda-prebuild` fills where cellc was built (build/python-cuda-cache,
# carried with the bundle). The CUDA libraries link cuBLAS from the toolkit.
cache=${CELLC_PY_CUDA_CACHE:-build/python-cuda-cache}
if [ -d "$cache" ]; then
  out=$(CELLC_CACHE=$cache LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${CUDA_HOME:-/usr/local/cuda}/lib64" \
        PYTHONDONTWRITEBYTECODE=1 timeout $limit python3 tests/python_cuda_gpu.py 2>&1)
  echo "$out" | grep -v '^PASS' | tail -n 40
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  if [ -n "$line" ]; then
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
  else echo "test-gpu: tests/python_cuda_gpu.py ended without its summary"; fail=$((fail + 1)); fi
else
  echo "test-gpu: no $cache: run make python-cuda-prebuild where cellc was built, and carry it here"; fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
