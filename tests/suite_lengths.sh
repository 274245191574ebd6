#!/bin/sh
# Variable lengths (SeqIO.lengths) from the command line: cellc run --lengths on every back end and
# mode against each sequence run alone (tests/lengths_cli.py). Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/lengths_cli.py "$@"
