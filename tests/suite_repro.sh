#!/bin/sh
# The sources' protocols as examples/repro/ runs them (tests/repro_cli.py): the model keys they
# need (model.encoder = none, model.head_bias = false) and the time-scale study's script at a
# tiny size (its table, figures and summary). Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 tests/repro_cli.py "$@"
