#!/bin/sh
# cellc emit --target cpu: every stdlib cell emitted, linked into a C harness (P.o and libP.so) and
# compared with the float64 interpreter; NULL and bad-call semantics; ABI 2's threads (the same
# bits on every count); AVX-512 in the default object only in the run-time-chosen kernels (GEMM, column sums);
# the command's errors. Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/emit_cli.py "$@"
