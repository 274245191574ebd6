#!/bin/sh
# The PyTorch oracle suite: selftest.py (the oracle's own checks, no cellc needed) and parity.py
# (`bin/cellc run` against the float64 PyTorch reference of every stdlib cell) and time_cells.py
# (prev and conv: tests/cells' qrnn_conv and rglru_conv against their PyTorch autograd reference)
# and chunked_ref.py (bench/torch_chunked.py, the chunkwise-parallel peer of the matrix-state
# bench, against step-by-step recurrences).
# Run from anywhere; prints both outputs and, last, "N passed, M failed" summed over both.
cd "$(dirname "$0")/.." || exit 1
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
pass=0; fail=0
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT INT TERM
for t in selftest parity time_cells chunked_ref; do
  echo "-- tests/torch/$t.py"
  "$PY" tests/torch/$t.py >"$tmp" 2>&1
  rc=$?
  cat "$tmp"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp" | tail -n 1)
  if [ -z "$line" ]; then
    echo "tests/torch/$t.py: no summary line (exit $rc)"
    fail=$((fail + 1))
    continue
  fi
  p=${line%% passed*}
  f=${line#*passed, }; f=${f%% failed*}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "tests/torch/$t.py: exited $rc"
    f=1
  fi
  pass=$((pass + p)); fail=$((fail + f))
done
# version 2's tensor cells against their PyTorch references (tests/torch/tensors.py)
for spec in gla:NH=2,K=3,V=4,D=5 ops:D=4; do
  c=${spec%%:*}; d=${spec#*:}
  echo "-- tests/torch/parity.py tests/cells/tensor_$c.cell"
  "$PY" tests/torch/parity.py --cell-file tests/cells/tensor_$c.cell --ref tests/torch/tensors.py:$c --dims $d >"$tmp" 2>&1
  rc=$?
  grep -v '^PASS' "$tmp"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp" | tail -n 1)
  if [ -z "$line" ]; then echo "tensor_$c: no summary line (exit $rc)"; fail=$((fail + 1)); continue; fi
  p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  pass=$((pass + p)); fail=$((fail + f))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
