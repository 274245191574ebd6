#!/bin/sh
# make bench-gpu: cellc's cuda back end against PyTorch on the same GPU (nn.GRU and nn.LSTM through
# cuDNN; the other cells as PyTorch loops over time), B = 64, T = 512 and 2048, H = 128 and 256, and
# each run's scans as a fraction of the device's measured copy bandwidth. Writes
# bench/results/gpu.jsonl and bench/results/gpu.md and prints the table; skips with one line where
# there is no GPU. PYTHON picks the interpreter with CUDA PyTorch (default python3).
#   CELLC_BENCH_QUICK=1  only T=512, H=128
cd "$(dirname "$0")/.." || exit 1
py=${PYTHON:-python3}
out=bench/results
mkdir -p $out
raw=$out/gpu.jsonl
machine=$(./build/bench_cell x 1 1 1 1 --machine-gpu 2>"$out/gpu.err")
case "$machine" in
  *'"gpu_copy_bytes_per_s": 0}'*|'')
    echo "bench-gpu: skipped, no GPU here: $(head -n 1 "$out/gpu.err" | sed 's/^bench_cell: //')"
    rm -f "$out/gpu.err"
    exit 0 ;;
esac
rm -f "$out/gpu.err"
echo "$machine" | sed 's/^{/{"kind": "machine", /' > $raw
B=64
configs="512:128 512:256 2048:128 2048:256"
[ -n "$CELLC_BENCH_QUICK" ] && configs="512:128"
torch_ok=1
$py -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
  torch_ok=0; echo "bench-gpu: $py has no CUDA PyTorch: cellc only" >&2; }
for cfg in $configs; do
  T=${cfg%%:*}; H=${cfg##*:}
  for cell in gru lstm mgu mgu_see_h lru hgru mingru; do
    file=stdlib/$cell.cell; set=""
    [ $cell = mgu_see_h ] && { file=stdlib/mgu.cell; set="--set see_h=true"; }
    [ $cell = hgru ] && set="--set lb=0.25"
    case $cell in gru|lstm) style=nn ;; *) style=unbind ;; esac
    ./build/bench_cell $file $H $H $T $B --reps 5 --backend cuda $set | sed "s/^{/{\"kind\": \"cellc\", \"name\": \"$cell\", /" >> $raw
    case $cell in mgu|lru|hgru|mingru)
      ./build/bench_cell $file $H $H $T $B --reps 3 --backend cuda --mode sequential $set |
        sed "s/^{/{\"kind\": \"cellc\", \"name\": \"$cell\", /" >> $raw ;;
    esac
    [ $torch_ok = 1 ] && CELLC_TORCH_DEVICE=cuda $py bench/torch_cells.py $cell $H $H $T $B $style 3 |
      sed 's/^{/{"kind": "torch", /' >> $raw
    echo "bench-gpu: $cell T=$T H=$H done" >&2
  done
done
$py bench/gpu_table.py $raw > $out/gpu.md
cat $out/gpu.md
