#!/bin/sh
# Misuse and bad input (issue 16): every writer against links, FIFOs, devices, directories and
# read-only files; run directories reused, --force; repeated signals; non-finite checkpoints;
# --resume of a complete run; out of memory; --help of every command; front-end messages.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/misuse_cli.py "$@"
