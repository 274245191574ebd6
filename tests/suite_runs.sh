#!/bin/sh
# Runs worth looking at, seeds as an axis (tests/runs_cli.py): train.keep = best against a run
# stopped at the best step, log.csv against metrics.jsonl, --seeds and --set lists with
# summary.json recomputed from the runs, cellc plot's SVG and PNG, the errors.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 tests/runs_cli.py "$@"
