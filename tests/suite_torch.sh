#!/bin/sh
# The PyTorch oracle suite: selftest.py (the oracle's own checks, no cellc needed) and parity.py
# (`bin/cellc run` against the float64 PyTorch reference of every stdlib cell) and time_cells.py
# (prev and conv: tests/cells' qrnn_conv and rglru_conv against their PyTorch autograd reference).
# Run from anywhere; prints both outputs and, last, "N passed, M failed" summed over both.
cd "$(dirname "$0")/.." || exit 1
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
pass=0; fail=0
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT INT TERM
for t in selftest parity time_cells; do
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
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
