#!/bin/sh
# Training on sequences of their own lengths, with bidirectional layers, against PyTorch
# (tests/torch/varlen_train.py): GRU and LSTM, one and two layers, bidirectional or not, read out
# last (and runs read out at every step, by the mean, joined by sum, with float targets), on a
# `file` dataset with lengths and NaN in its padding: `cellc train` for 20 steps on cpu and
# cuda-emu follows nn.GRU / nn.LSTM over pack_padded_sequence from the same initial weights on
# the same batches, every step's loss within 1e-4 relative. About a minute on two idle cores.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" tests/torch/varlen_train.py --cellc "${CELLC:-bin/cellc}" --dump "${TASK_DUMP:-build/task_dump}"
