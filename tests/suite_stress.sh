#!/bin/sh
# make test's stress suite (tests/stress.sh at a size CI affords): every command 40 times at
# once under CPU load on bin/cellc, 8 times on the ASan/UBSan build. `make stress` runs the long one.
cd "$(dirname "$0")/.."
STRESS_CI=1 STRESS_RUNS=${STRESS_RUNS:-40} exec sh tests/stress.sh
