#!/bin/sh
# make bench-gpu: cellc's cuda back end against PyTorch on the same GPU (nn.GRU and nn.LSTM through
# cuDNN; the other cells as PyTorch loops over time), B = 64, T = 512 and 2048, H = 128 and 256, and
# each run's scans as a fraction of the device's measured copy bandwidth; then whole training steps
# (`cellc train --set train.device=cuda` against bench/torch_train.py --device cuda); the chunked
# form of gla, hgrn2, mamba2 and gated_deltanet at issue 31's shapes against their scans
# (gated_deltanet's: sequential). Writes bench/results/gpu.jsonl, gpu_train.jsonl, gpu_chunked.jsonl
# and gpu.md and prints the tables; skips with one line where there is no GPU. PYTHON picks the
# interpreter with CUDA PyTorch (default python3).
# Last, the CPU back end's thread-scaling curve on this machine's cores (bench/thread_scaling.sh,
# bench/results/gpu_scaling.md).
#   CELLC_BENCH_QUICK=1  only T=512, H=128 (and the chunked form at one head)
#   CELLC_GPU_BENCH="cells chunked train scaling"  the parts to run (default all; a short lease
#                        runs one part: its jsonl and its table in gpu.md, the other tables left out)
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
parts=${CELLC_GPU_BENCH:-cells chunked train scaling}
part() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
B=64
configs="512:128 512:256 2048:128 2048:256"
[ -n "$CELLC_BENCH_QUICK" ] && configs="512:128"
part cells || configs=""
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
# the chunked form on the GPU (issue 31's shapes, T = 2048, B = 8, forward + backward): cellc's
# chunked form (cellc_chunk.cu between the two programs) against the same cell on the same GPU in
# its other mode (the elementwise scan; Gated DeltaNet's matrix-linear state has none: sequential),
# with the chunk ops' share (docs/gpu.md, "The chunked form")
chunked=$out/gpu_chunked.jsonl
: > $chunked
cases="gla:NH=1,K=64,V=64:64 gla:NH=4,K=64,V=64:256 hgrn2:NH=1,K=64,V=64:64 hgrn2:NH=4,K=64,V=64:256
       mamba2:NH=1,P=64,N=64:64 mamba2:NH=4,P=64,N=64:256 gated_deltanet:NH=1,K=64,V=64:64 gated_deltanet:NH=4,K=64,V=64:256"
part chunked || cases=""
for case in $cases; do
  [ -n "$CELLC_BENCH_QUICK" ] && case $case in *NH=4*) continue ;; esac
  cell=${case%%:*}; rest=${case#*:}; dims=${rest%%:*}; D=${rest##*:}
  base=scan; [ $cell = gated_deltanet ] && base=sequential
  for mode in $base chunked; do
    kind=scan; [ $mode = chunked ] && kind=chunked
    ./build/bench_cell stdlib/$cell.cell 0 $D 2048 8 --reps 5 --backend cuda --dims $dims --mode $mode |
      sed "s/^{/{\"kind\": \"$kind\", \"case\": \"$cell $dims\", /" >> $chunked
  done
  echo "bench-gpu: chunked $cell $dims done" >&2
done
# training on the GPU: cellc train (train.device = cuda) against the same model in PyTorch on the
# same GPU (bench/torch_train.py --device cuda), bench/train_gru.cfg's task and model (copying,
# T = 512, B = 64, embedding, one layer of width 128, readout all, AdamW, clip): tokens per second
# of whole training steps (batch, forward, backward, clip, update)
train=$out/gpu_train.jsonl
: > $train
trains="gru:nn lstm:nn mgu:loop mgu_see_h:loop"
part train || trains=""
for cellpeer in $trains; do
  cell=${cellpeer%%:*}; peer=${cellpeer##*:}
  file=stdlib/$cell.cell; set=""
  [ $cell = mgu_see_h ] && { file=stdlib/mgu.cell; set="--set model.option.see_h=true"; }
  dir=$(mktemp -d)
  if ./bin/cellc train $file bench/train_gru.cfg --set train.device=cuda $set --out "$dir/run" > "$dir/log" 2>&1; then
    $py - "$dir/run/metrics.jsonl" "$cell" >> $train <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tps = [r["tokens_per_s"] for r in rows if r["split"] == "train"][1:]  # the first interval holds the compile
print(json.dumps({"kind": "cellc_train", "cell": sys.argv[2], "device": "cuda", "tokens_per_s": max(tps) if tps else 0}))
PY
  else
    echo "bench-gpu: cellc train $cell on cuda failed:"; tail -n 5 "$dir/log"
  fi
  rm -rf "$dir"
  [ $torch_ok = 1 ] && $py bench/torch_train.py --cell $cell --peer $peer --device cuda --T 512 --B 64 --width 128 \
    --steps 30 >> $train
  echo "bench-gpu: training $cell done" >&2
done
if part cells; then $py bench/gpu_table.py $raw; fi > $out/gpu.md
part train && $py - $train >> $out/gpu.md <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("\n## Training on the GPU (copying, T = 512, B = 64, width 128, 1 layer, AdamW): tokens/s\n")
print("| cell | cellc train (train.device = cuda) | PyTorch (same GPU) | cellc / PyTorch |")
print("|---|---|---|---|")
for cell in dict.fromkeys(r["cell"] for r in rows):
    c = next((r["tokens_per_s"] for r in rows if r["kind"] == "cellc_train" and r["cell"] == cell), None)
    t = next((r for r in rows if r["kind"] == "torch_train" and r["cell"] == cell), None)
    tt = t["tokens_per_s"] if t else None
    print(f"| {cell} | {c:.0f} | " + (f"{tt:.0f} ({t['peer']}) | {c / tt:.2f}x |" if tt and c else "- | - |"))
PY
part chunked && $py - $chunked >> $out/gpu.md <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("\n## The chunked form on the GPU (T = 2048, B = 8, forward + backward): ms\n")
print("| cell, dims | scan (gated_deltanet: sequential) | chunked (L) | chunk ops | in + out programs | scan / chunked |")
print("|---|---|---|---|---|---|")
for case in dict.fromkeys(r["case"] for r in rows):
    s = next((r for r in rows if r["case"] == case and r["kind"] == "scan"), None)
    c = next((r for r in rows if r["case"] == case and r["kind"] == "chunked"), None)
    if not c:
        print(f"| {case} | " + (f"{1e3 * s['total_s']:.2f}" if s else "-") + " | failed | - | - | - |")
        continue
    print(f"| {case} | " + (f"{1e3 * s['total_s']:.2f}" if s else "-") + f" | {1e3 * c['total_s']:.2f} ({c['L']}) | "
          f"{1e3 * c['op_s']:.2f} | {1e3 * (c['in_s'] + c['out_s']):.2f} | " + (f"{s['total_s'] / c['total_s']:.1f}x |" if s else "- |"))
PY
cat $out/gpu.md
# A machine with a GPU has many cores: the CPU back end's thread-scaling curve there (issue 17),
# 1, 2, 4, ... all cores, GRU at H = 128 and 256 (bench/thread_scaling.sh; needs build/peak).
part scaling || exit 0
echo
sh bench/thread_scaling.sh $out/scaling.jsonl | tee $out/gpu_scaling.md || echo "bench-gpu: the thread-scaling curve failed" >&2
