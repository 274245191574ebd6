#!/bin/sh
# make demo: the main job on a built-in default. Today: the analysis of every
# standard cell, then one GRU run forward and backward on the interpreter.
set -e
cd "$(dirname "$0")/.."
for f in stdlib/*.cell; do
  ./bin/cellc check "$f"
  echo
done
out=$(mktemp -d)
./bin/cellc run stdlib/gru.cell --backend interp --dims H=8,D=4 --T 16 --B 3 --seed 1 --out "$out/gru.safetensors"
echo "cellc run stdlib/gru.cell --backend interp: wrote $out/gru.safetensors"
rm -rf "$out"
