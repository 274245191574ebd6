#!/bin/sh
# cellc diag end to end (tests/diag_cli.py): the step Jacobians against PyTorch autograd for
# every stdlib cell, diag.json, the plots, --compare, the error cases, the training-time probe.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 tests/diag_cli.py "$@"
