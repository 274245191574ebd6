#!/bin/sh
# Runs every test suite and prints one summary line over all of them:
# "N passed, M failed". Each suite ends its own output with such a line.
cd "$(dirname "$0")/.."
total_pass=0; total_fail=0
log=$(mktemp -d)
run_suite() { # name command...
  name=$1; shift
  echo "== $name"
  t0=$(date +%s)
  "$@" >"$log/$name.out" 2>&1
  rc=$?
  cat "$log/$name.out"
  echo "== $name took $(($(date +%s) - t0)) s" # (what to trim when make test nears its budget)
  line=$(grep -E '^[A-Za-z:]*[ ]*[0-9]+ passed, [0-9]+ failed' "$log/$name.out" | tail -n 1)
  p=$(echo "$line" | sed -E 's/^([A-Za-z:]*[ ]*)?([0-9]+) passed, ([0-9]+) failed.*/\2/')
  f=$(echo "$line" | sed -E 's/^([A-Za-z:]*[ ]*)?([0-9]+) passed, ([0-9]+) failed.*/\3/')
  [ -n "$line" ] || { p=0; f=1; echo "$name: no summary line (exit $rc)"; }
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "$name: exited $rc"; }
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
}
run_suite unit sh tests/unit/run.sh
run_suite golden sh tests/golden/run.sh
run_suite fuzz sh tests/fuzz.sh
for s in tests/suite_*.sh; do
  [ -f "$s" ] || continue
  run_suite "$(basename "$s" .sh)" sh "$s"
done
rm -rf "$log"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
