#!/bin/sh
# cellc export (tests/export_cli.py): the PyTorch module's and the C library's test losses against
# cellc eval's, the C library's step-by-step outputs against its whole-sequence ones, the errors.
# Needs `make all` (bin/cellc, build/eval_dump). Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 tests/export_cli.py "$@"
