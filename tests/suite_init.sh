#!/bin/sh
# cellc run writes the values of the version-2 initializers (tests/init_cli.py).
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/init_cli.py "$@"
