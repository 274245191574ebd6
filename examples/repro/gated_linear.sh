#!/bin/sh
# The gated-linear study (seeds.md sections 1-5; docs/experiments.md) as one command, on copying:
#  1. The gate distribution: stdlib/mgu.cell with the gate cut off from h_{t-1} (see_h = false:
#     diagonal-linear, a scan) and seeing it (see_h = true), SEEDS seeds each (`cellc train
#     --seeds`); `cellc diag` at initialization and after training (--compare: each run's
#     gates_layer0 shows before and after on one y range); the share of the first layer's gate
#     values in (0.1, 0.9), below 0.1 and above 0.9.
#  2. Gumbel against UGI: the first layer's gate bias drawn from gumbel(0, 0.5) (UGI above it:
#     "Gumbel-UGI") against UGI everywhere (mgu's default), see_h = false, at each length of
#     LENGTHS blanks, SEEDS seeds each: the valid accuracy by step (median and quartiles) and the
#     steps to reach THRESHOLD.
# Then gated_linear.py: the tables, summary.json and the figures (gates_layer0, copying_accuracy).
#
#   examples/repro/gated_linear.sh [--full] [--seeds N] [--out DIR] [--lengths "100 300"]
#                                  [--steps N] [--gate-steps N] [--threshold A] [--set KEY=VALUE]...
#
# Default (reduced; 4.6 minutes on two idle cores, docs/experiments.md): examples/small/copying.cfg
# at width and hidden 32 (2 layers, 5 tokens, AdamW lr 3e-3 with a cosine schedule, clip 1); part 1 at 20 blanks for 1000 steps, part 2 at 100 and
# 300 blanks for 3000 steps, 5 seeds, evaluated every 100 steps, threshold 0.5 (chance 0.125).
# --full: the source's size for a GPU, examples/repro/gated_linear_full.cfg (3 layers, hidden and
# embedding 128, 10 tokens over 500 blanks, AdamW lr 1e-4, batch 64, 50K steps, train.device =
# cuda) at 500 blanks for both parts, evaluated every 500 steps, threshold 0.9. --set goes to
# every train and diag (tests/repro_gl_cli.py runs it tiny). Rerunning skips the runs and probes
# already complete (the sweeps' --resume).
set -eu
cd "$(dirname "$0")/../.."
CELLC=${CELLC:-bin/cellc}
seeds=5 out=runs/gated_linear-protocol lengths="" steps="" gate_steps="" threshold="" sets="" full=0
while [ $# -gt 0 ]; do
  case $1 in
    --full) full=1 ;;
    --seeds) seeds=$2; shift ;;
    --out) out=$2; shift ;;
    --lengths) lengths=$2; shift ;;
    --steps) steps=$2; shift ;;
    --gate-steps) gate_steps=$2; shift ;;
    --threshold) threshold=$2; shift ;;
    --set) sets="$sets --set $2"; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gated_linear.sh: unknown argument '$1' (--full, --seeds N, --out DIR, --lengths LIST, --steps N, --gate-steps N, --threshold A, --set KEY=VALUE)" >&2; exit 2 ;;
  esac
  shift
done
# the sizes of each mode where no flag gave them
if [ $full = 1 ]; then
  cfg=examples/repro/gated_linear_full.cfg size="" every=500
  : "${lengths:=500}" "${steps:=50000}" "${gate_steps:=50000}" "${threshold:=0.9}"
else
  cfg=examples/small/copying.cfg size="--set model.width=32 --set model.hidden=32" every=100
  : "${lengths:=100 300}" "${steps:=3000}" "${gate_steps:=1000}" "${threshold:=0.5}"
fi
mkdir -p "$out/gates"
# diag runs on the host (the float64 interpreter) whatever train.device says
probe="--set train.device=cpu"

# The sweeps go as JOBS at once (default: the cores; 1 with --full, whose runs take the GPU), each
# on one thread: models this small train no faster on two (docs/experiments.md). bg CMD...: start
# one (in a subshell), at most JOBS running; settle: wait for those started, failing with the first
# failure's status.
[ $full = 1 ] && jobs=${JOBS:-1} || jobs=${JOBS:-$(nproc)}
pids="" running=0
export CELLC_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
settle() {
  rc=0
  for p in $pids; do wait "$p" || rc=$?; done
  pids="" running=0
  [ $rc -eq 0 ] || exit $rc
}
bg() {
  [ "$running" -lt "$jobs" ] || settle
  ("$@") &
  pids="$pids $!" running=$((running + 1))
}

# 1. the gate distribution, with and without see_h
gates() {
  see=$1
  dir=$out/gates/see_h-$see
  echo "gated_linear: see_h = $see, seeds 1..$seeds, $gate_steps steps" >&2
  # shellcheck disable=SC2086 # $size, $sets: --set flags, word by word
  "$CELLC" train stdlib/mgu.cell "$cfg" $size --set model.option.see_h=$see --set train.steps="$gate_steps" \
    --set eval.every="$every" $sets --seeds "1..$seeds" --out "$dir" --resume --progress none > "$dir.log"
  s=1
  while [ $s -le "$seeds" ]; do
    opt="--set model.option.see_h=$see --set train.seed=$s"
    if [ ! -f "$dir/diag/seed-$s-init/diag.json" ]; then
      # shellcheck disable=SC2086
      "$CELLC" diag stdlib/mgu.cell "$cfg" $size $opt $sets $probe --out "$dir/diag/seed-$s-init" > /dev/null
    fi
    if [ ! -f "$dir/diag/seed-$s-trained/diag.json" ]; then
      # shellcheck disable=SC2086
      "$CELLC" diag stdlib/mgu.cell "$cfg" $size $opt $sets $probe --checkpoint "$dir/seed-$s/checkpoint.safetensors" \
        --compare "$dir/diag/seed-$s-init" --out "$dir/diag/seed-$s-trained" > /dev/null
    fi
    s=$((s + 1))
  done
}
for see in false true; do bg gates $see; done
settle

# 2. Gumbel-UGI against UGI at each length
copying() {
    len=$1 init=$2
    bz=ugi
    [ "$init" = gumbel ] && bz="gumbel(0.0,0.5)"
    echo "gated_linear: $len blanks, $init, seeds 1..$seeds, $steps steps" >&2
    dir=$out/copy-T$len/$init
    mkdir -p "$out/copy-T$len"
    # shellcheck disable=SC2086
    "$CELLC" train stdlib/mgu.cell "$cfg" $size --set task.length="$len" --set train.steps="$steps" \
      --set eval.every="$every" --set "model.layer.0.init.bz=$bz" $sets --seeds "1..$seeds" --out "$dir" --resume \
      --progress none > "$dir.log"
}
for len in $lengths; do
  for init in ugi gumbel; do bg copying "$len" $init; done
done
settle
/usr/bin/python3 examples/repro/gated_linear.py "$out" --cellc "$CELLC" --threshold "$threshold"
