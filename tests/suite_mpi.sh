#!/bin/sh
# Data-parallel training with Open MPI (tests/mpi_cli.py): mpirun -np 2 against the one-process
# run, resume with another N, Ctrl-C and SIGKILL of one rank, a batch that does not divide.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
exec /usr/bin/python3 tests/mpi_cli.py "$@"
