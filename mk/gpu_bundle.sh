#!/bin/sh
# make gpu-bundle: what a lent GPU machine needs for make test-gpu and make bench-gpu, in .gpu/,
# within the device tool's 64 MiB: bundle.tar.xz (pack-for-gpu: the programs and the libraries
# they load; the test and bench programs stripped, bin/cellc whole, since the Python check's cache
# is keyed by its bytes), pycache.tar.xz (that cache, build/python-cuda-cache) and run.sh
# (mk/gpu_run.sh). .gpu/ is listed in .git/info/exclude; carry it: on the GPU machine run
#   sh .gpu/run.sh
# from the project's root (docs/gpu.md, "Testing").
set -eu
cd "$(dirname "$0")/.."
pack=$(cd "${SHARED:-../shared}/tools" && pwd)/pack-for-gpu
root=$(pwd)
progs="build/tests/test_cuda build/tests/test_backends build/tests/gpu_cuda_emit build/tests/test_cuda_chunk build/bench_cell build/peak"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/build/tests" .gpu
cp bin/cellc "$tmp/bin/cellc"
for p in $progs; do strip -o "$tmp/$p" "$p"; done
rm -f .gpu/bundle.tar.xz .gpu/pycache.tar.xz
(cd "$tmp" && "$pack" "$root/.gpu" bin/cellc $progs)
tar -cJf .gpu/pycache.tar.xz build/python-cuda-cache
cp mk/gpu_run.sh .gpu/run.sh
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
echo "gpu-bundle: .gpu/ $(du -sh .gpu | cut -f1) (the tree that travels: $(git ls-files -z | xargs -0 cat | wc -c | awk '{printf "%.1f", $1 / 1048576}') MiB more)"
