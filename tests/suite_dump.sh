#!/bin/sh
# `cellc check --dump typed|lower|ad|plan`: the graph after each pass (tests/dump_cli.py).
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/dump_cli.py "$@"
