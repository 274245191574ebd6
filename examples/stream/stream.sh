#!/bin/sh
# Streaming inference from a trained model (examples/stream/README.md): train the small byte-level
# LM of lm.cfg, export it as a C library, build generate.c against it and print generated text.
#   sh examples/stream/stream.sh [OUT_DIR] [PROMPT]      (from the repository root, after make)
set -e
cd "$(dirname "$0")/../.."
out=${1:-runs/stream}
prompt=${2:-"A cell "}
./bin/cellc train stdlib/hgru.cell examples/stream/lm.cfg --out "$out/run" --force --progress none | tail -1
./bin/cellc export "$out/run" --to c --out "$out/c"
make -s -C "$out/c"
cc -O3 -march=native -I"$out/c" -o "$out/generate" examples/stream/generate.c "$out/c/libmodel.a" -lm
"$out/generate" "$out/c/weights.bin" "$prompt" 400 0.8 1
