#!/bin/sh
# The chunked form from the command line: cellc run --mode chunked (interp, cpu, cuda-emu) against
# --mode sequential, and the commands that refuse it (tests/chunked_cli.py). Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/chunked_cli.py "$@"
