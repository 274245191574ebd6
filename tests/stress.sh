#!/bin/sh
# make stress: every cellc command run many times at once under CPU load (tests/stress.py), on
# each build and checker: the optimized bin/cellc, the ASan/UBSan build, the TSan build and
# valgrind. STRESS_RUNS (runs of each command on the optimized build, default 1000) scales the
# others: ASan a fifth of it, TSan a tenth, valgrind a two-hundredth (at least 2 each).
# tests/suite_stress.sh is the size `make test` runs. Ends with "N passed, M failed" over all.
cd "$(dirname "$0")/.."
runs=${STRESS_RUNS:-1000}
at_least() { [ "$1" -lt "$2" ] && echo "$2" || echo "$1"; }
pass=0; fail=0
one() { # label, stress.py arguments...
  label=$1; shift
  echo "== stress: $label"
  out=$(/usr/bin/python3 tests/stress.py "$@" 2>&1); rc=$?
  echo "$out"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [ -z "$line" ]; then fail=$((fail + 1)); echo "stress: $label: no summary (exit $rc)"; return; fi
  pass=$((pass + ${line%% passed*})); f=${line#*passed, }; fail=$((fail + ${f%% failed}))
}
if [ "${STRESS_CI:-0}" = 1 ]; then
  # the size of `make test`: about two minutes on two cores
  one "bin/cellc" --runs "$runs"
  one "ASan/UBSan build" --cellc build/asan/cellc --runs "$(at_least $((runs / 5)) 2)"
else
  one "bin/cellc" --runs "$runs"
  one "ASan/UBSan build" --cellc build/asan/cellc --runs "$(at_least $((runs / 5)) 2)"
  # cellc's OpenMP runtime is LLVM's libomp, which TSan cannot see into: Archer (its OMPT tool,
  # loaded through OMP_TOOL_LIBRARIES) tells TSan about the runtime's barriers and locks, so that
  # the parallel regions are checked on all cores without false reports
  export OMP_TOOL_LIBRARIES="$(llvm-config-14 --libdir 2>/dev/null || echo /usr/lib/llvm-14/lib)/libarcher.so"
  one "TSan build (Archer)" --cellc build/tsan/cellc --runs "$(at_least $((runs / 10)) 2)"
  unset OMP_TOOL_LIBRARIES
  one "valgrind" --wrap "valgrind -q --error-exitcode=89 --suppressions=tests/valgrind.supp" \
      --jobs 2 --runs "$(at_least $((runs / 200)) 2)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
