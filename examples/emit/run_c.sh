#!/bin/sh
# Emits stdlib/gru.cell, builds examples/emit/train.c against gru.o (no cellc at run time) and runs
# it: plain SGD on a toy task. Usage (from the repository root): sh examples/emit/run_c.sh [WORKDIR]
set -e
cd "$(dirname "$0")/../.."
W=${1:-build/example-emit}
bin/cellc emit stdlib/gru.cell --dims D=1,H=16 --name gru --out "$W"
cc -std=c11 -O2 -Wall -Wextra -I"$W" -o "$W/train" examples/emit/train.c "$W/gru.o" -lopenblas -lm
"$W/train"
