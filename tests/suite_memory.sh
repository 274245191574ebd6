#!/bin/sh
# Training memory: check's figures against the allocator's high-water mark of cellc run and cellc
# train (tests/memory_cli.py). Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/memory_cli.py "$@"
