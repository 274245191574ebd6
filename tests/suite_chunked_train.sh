#!/bin/sh
# cellc train in the chunked form against scan mode, step by step (tests/chunked_train.py). Ends
# with "N passed, M failed".
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" tests/chunked_train.py "$@"
