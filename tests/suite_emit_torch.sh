#!/bin/sh
# cellc emit --torch: P_torch.py (over libP.so) against the PyTorch cells of tests/torch/cells.py,
# and torch.autograd.gradcheck. Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 tests/emit_torch.py "$@"
