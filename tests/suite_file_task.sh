#!/bin/sh
# `task.name = file` end to end (tests/file_task_cli.py): safetensors per split, one file of every
# split and JSON lines; the loss, readout, vocab and classes the data decide; short runs with
# lengths, bucketing and bidirectional layers; bad files (wrong dtype, ragged shapes, lengths out
# of 1..T, NaN in x, missing tensors, bad JSON lines) refused with exit 1 naming the file, the
# tensor and the shape expected, an earlier run kept. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" tests/file_task_cli.py --cellc "${CELLC:-bin/cellc}"
