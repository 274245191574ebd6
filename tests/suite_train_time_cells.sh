#!/bin/sh
# cellc train on the stdlib cells that read earlier steps (mamba2, rglru, qrnn): the loss of a
# short selective-copying run falls clearly; T = 1000 runs in float32 on cpu and cuda-emu, both
# modes, match the float64 interpreter (tests/train_time_cells.py).
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/train_time_cells.py "$@"
