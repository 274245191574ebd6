#!/bin/sh
# The sources' protocols as examples/repro/ runs them (tests/repro_cli.py): the model keys they
# need (model.encoder = none, model.head_bias = false) and the time-scale study's script at a
# tiny size (its table, figures and summary). Ends with "N passed, M failed" over every block.
cd "$(dirname "$0")/.." || exit 1
pass=0 fail=0
# block FILE: one Python suite; its PASS/FAIL lines shown, its summary line added to the total
block() {
  log=$(mktemp)
  PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 "$@" > "$log" 2>&1
  rc=$?
  grep -v -E '^[0-9]+ passed, [0-9]+ failed' "$log"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  rm -f "$log"
  if [ -z "$line" ]; then echo "$1: no summary line (exit $rc)"; fail=$((fail + 1)); return; fi
  p=${line%% passed*} f=${line#*passed, }; f=${f%% failed*}
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { echo "$1: exited $rc"; f=1; }
  pass=$((pass + p)) fail=$((fail + f))
}
block tests/repro_cli.py "$@"
# The anisotropy study's script at a tiny size (tests/repro_aniso_cli.py)
block tests/repro_aniso_cli.py
# The gated-linear and thesis studies' scripts at a tiny size (tests/repro_gl_cli.py)
block tests/repro_gl_cli.py
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
