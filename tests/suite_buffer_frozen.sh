#!/bin/sh
# buffers and frozen params end to end: cellc run on every back end against the float64
# interpreter and PyTorch, cellc train (not moved; model.unfreeze), checkpoints, cellc emit.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/buffer_frozen_cli.py "$@"
