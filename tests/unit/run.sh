#!/bin/sh
# Criterion unit tests (ASan/UBSan build). Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
pass=0; fail=0
for t in build/asan/tests/test_*; do
  [ -x "$t" ] || continue
  t0=$(date +%s)
  out=$(ASAN_OPTIONS=detect_leaks=0 timeout 900 "$t" --jobs 2 2>&1); rc=$?
  echo "$out" | grep -E 'FAIL|CRASH|Synthesis|Assertion|ERROR' | head -40
  echo "$(basename "$t") took $(($(date +%s) - t0)) s"
  syn=$(echo "$out" | grep 'Synthesis' | tail -n 1)
  tested=$(echo "$syn" | sed -E 's/.*Tested: ([0-9]+).*/\1/')
  passing=$(echo "$syn" | sed -E 's/.*Passing: ([0-9]+).*/\1/')
  if [ -z "$syn" ]; then echo "$t: no synthesis (exit $rc)"; fail=$((fail + 1)); continue; fi
  pass=$((pass + passing)); fail=$((fail + tested - passing))
  [ "$rc" -ne 0 ] && [ "$tested" = "$passing" ] && fail=$((fail + 1))
done
echo "$pass passed, $fail failed"
