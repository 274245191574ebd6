# bench/blas_env.sh (sourced): the BLAS kernels of the peers. PyTorch calls OpenBLAS, which picks
# its kernels when it loads, from OPENBLAS_CORETYPE or from the CPU's model name: Debian's 0.3.21
# runs SSE3 "Prescott" kernels on an Intel Xeon of family 6 model 207, a quarter of the machine.
# A peer at its best gets the OpenBLAS core of the CPU's widest vector width, decided from CPUID
# features by the same code that chooses cellc's own GEMM kernels (build/peak --coretype), in the
# environment its process starts with. Sets:
#   peer_core    that core ("" on a CPU without AVX: the library's own choice)
#   peer_env     "OPENBLAS_CORETYPE=core" (or empty) for `env $peer_env ...`; it replaces any
#                OPENBLAS_CORETYPE of the caller's environment, for the peer's process only
#   cellc_gemm   the GEMM kernels cellc runs here (its own, by CPUID; "blas" on CPUs without AVX2)
#   MALLOC_*     exported: glibc's malloc keeping freed memory (below)
if [ ! -x build/peak ]; then
  echo "bench: build/peak is missing: make build/peak" >&2
  exit 2
fi
peer_core=$(./build/peak --coretype)
peer_env=${peer_core:+OPENBLAS_CORETYPE=$peer_core}
cellc_gemm=$(./build/peak --gemm)
# Every process of a benchmark (the peers and cellc) keeps the memory it frees: glibc's malloc
# serves large buffers with mmap and returns them on free, so a peer that allocates its tensors
# afresh every op touches fresh pages every op, and on some virtual machines of this kind each
# fresh page faults out to the host (build/peak's "fresh pages": 0.27 GB/s against 50 GB/s of
# copy seen on one), which made PyTorch 4-5x slower than itself on reused memory. Memory from the
# heap only (no mmap), never trimmed back: the rate a PyTorch user gets from a caching allocator.
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=268435456
