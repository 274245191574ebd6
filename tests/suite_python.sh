#!/bin/sh
# The cellc Python package (python/cellc) from the checkout, without installing it: loads, outputs
# and gradients against tests/torch/cells.py, initial values against cellc run, the cache.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python exec /usr/bin/python3 tests/python_pkg.py "$@"
