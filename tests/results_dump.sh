#!/bin/sh
# results_dump.sh BIN OUTDIR: every result cellc computes for every stdlib cell (and tests/cells) on
# every back end that runs here (interp in f64 and f32, cpu, cuda-emu), in each mode that applies,
# plus short training runs on the CPU and on cuda-emu (the adding task, and a token task whose
# embedding gradient the CPU folds through layer 0, also unfolded: CELLC_EMBED_FOLD=0), written
# under OUTDIR. A refactoring that must
# not change a bit compares two such directories: `cmp -s` per file (tests/results_compare.py).
# Thread counts are fixed (CELLC_THREADS=2): the CPU back end's sums do not depend on them, but a
# fixed count keeps the comparison about the code alone.
set -u
BIN=${1:?usage: results_dump.sh BIN OUTDIR}
OUT=${2:?usage: results_dump.sh BIN OUTDIR}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
export CELLC_THREADS=2
fail=0
# a cell's dims: D=5,H=7, but a cell with heads takes its own (stdlib/cells.list's first case of
# the file; the tensor test cells below)
dims_of() {
  case $1 in
    tests/cells/tensor_gla.cell) echo NH=2,K=3,V=4,D=5; return ;;
    tests/cells/chunk_terms.cell) echo NH=2,K=3,V=4,D=5; return ;;
    tests/cells/tensor_ops.cell) echo D=5; return ;;
  esac
  d=$(awk -v f="$1" '$2 == f { print $4; exit }' stdlib/cells.list)
  case $d in
    *NH=*) echo "$d" | sed 's/%H/7/g; s/%D/5/g' ;;
    *) echo D=5,H=7 ;;
  esac
}
for f in stdlib/*.cell tests/cells/*.cell; do
  c=$(basename "$f" .cell)
  dims=$(dims_of "$f")
  for be in interp cpu cuda-emu; do
    for mode in auto sequential; do
      case $be in interp) precs="f64 f32" ;; *) precs=f32 ;; esac
      for prec in $precs; do
        T=12; [ "$be" = cuda-emu ] && T=6
        o="$OUT/run.$c.$be.$mode.$prec.safetensors"
        if ! "$BIN" run "$f" --backend "$be" --mode "$mode" --precision "$prec" --T $T --B 3 --seed 5 \
             --dims "$dims" --out "$o" >"$o.log" 2>&1; then
          echo "results_dump: run $c $be $mode $prec failed: $(head -c 300 "$o.log")" >&2
          fail=1
        fi
        rm -f "$o.log"
      done
    done
  done
done
for c in gru lstm lru; do
  for dev in cpu cuda-emu; do
    steps=6; [ $dev = cuda-emu ] && steps=2
    d="$OUT/train.$c.$dev"
    rm -rf "$d"
    if ! "$BIN" train "stdlib/$c.cell" examples/adding.cfg --out "$d" --progress none \
         --set train.steps=$steps --set train.batch=8 --set task.length=10 --set model.hidden=16 \
         --set eval.every=3 --set eval.batches=1 --set log.every=1 --set train.device=$dev >"$d.log" 2>&1; then
      echo "results_dump: train $c $dev failed (see $d.log)" >&2
      fail=1
    fi
  done
done
# a token task: a stacked GRU over an embedding, rows (T B = 512) at least twice the vocab (256),
# so that the CPU folds the embedding's gradient through layer 0 (docs/training.md); its text is
# made here, so that the dump does not change with a file of the tree
awk 'BEGIN { for (i = 0; i < 6000; i++) printf "%s%s", substr("the cell gates its state ", 1 + (i * 7) % 20, 1 + i % 5), (i % 13 ? "" : "\n") }' >"$OUT/lm.txt"
cat >"$OUT/lm.cfg" <<EOF
[task]
name    = text
path    = $OUT/lm.txt
context = 64
[model]
layers  = 2
width   = 16
hidden  = 16
encoder = embed
block   = stack
readout = all
[train]
steps     = 3
batch     = 8
optimizer = adamw
lr        = 2e-3
seed      = 1
[eval]
every   = 3
batches = 1
[log]
every = 1
EOF
for run in cpu:1 cpu:0 cuda-emu:1; do
  dev=${run%:*} fold=${run#*:}
  d="$OUT/train.lm.$dev.fold$fold"
  rm -rf "$d"
  if ! CELLC_EMBED_FOLD=$fold "$BIN" train stdlib/gru.cell "$OUT/lm.cfg" --out "$d" --progress none \
       --set train.device=$dev >"$d.log" 2>&1; then
    echo "results_dump: train lm $dev fold $fold failed (see $d.log)" >&2
    fail=1
  fi
done
exit $fail
