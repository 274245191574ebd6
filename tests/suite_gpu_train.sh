#!/bin/sh
# cellc train on the device (train.device = cuda-emu) against train.device = cpu: 20 steps of small
# copying, temporal XOR and adding follow the cpu run within 1e-4, a resume cpu -> cuda-emu -> cpu,
# eval on the device, refusals (tests/gpu_train_cli.py). Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/gpu_train_cli.py "$@"
