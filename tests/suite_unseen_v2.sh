#!/bin/sh
# Cells written from the language spec alone (tests/cells/unseen/): check, run on interp (float64),
# cpu and cuda-emu in both modes, finite differences of every gradient, emit; and wrong cells
# (tests/cells/unseen/bad/) that must each give one located error. Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/unseen_cli.py "$@"
