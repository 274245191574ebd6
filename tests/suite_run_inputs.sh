#!/bin/sh
# cellc run with malformed --inputs files: each gets a clear one-line error and
# exit 1, and leaves no output file. Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/run_inputs.py "$@"
