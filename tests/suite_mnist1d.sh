#!/bin/sh
# suite_mnist1d.sh: cellc's MNIST-1D against the source's dataset (tests/mnist1d_suite.py): the
# splits `cellc train examples/mnist1d.cfg` trains on, dumped by build/task_dump (built by
# `make all`), compared with an independent construction of the reference dataset, and the
# source's baselines (logistic regression, MLP, CNN, bidirectional GRU) trained on them with
# PyTorch on one thread, each asserted near its published accuracy. About 2 minutes.
cd "$(dirname "$0")/.." || exit 1
PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
export PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if [ ! -x build/task_dump ]; then
  echo "FAIL build/task_dump is missing (make all builds it)"
  echo "0 passed, 1 failed"
  exit 1
fi
exec "$PY" tests/mnist1d_suite.py "$@"
