#!/bin/sh
# cellc train and cellc eval end to end on tiny configurations: the final line, metrics.jsonl,
# config.cfg, the checkpoint, exact resume, eval, errors and exit codes, NaN and Ctrl-C.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/train_cli.py "$@"
