#!/bin/sh
# The cellc Python package's CUDA path on cuda-emu (tests/python_cuda_emu.py): the emitted CUDA
# target's library called through the package's ctypes plumbing with CPU tensors, against the cpu
# library. Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python exec /usr/bin/python3 tests/python_cuda_emu.py "$@"
