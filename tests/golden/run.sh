#!/bin/sh
# run.sh: golden tests for the cellc front end. Run from the repository root:
#   sh tests/golden/run.sh            compare every case
#   sh tests/golden/run.sh --update   rewrite the expected files (review them!)
#   sh tests/golden/run.sh NAME...    only these cases
#
# A case is tests/golden/NAME.cell (files under lib/ are only imported). An
# optional first line
#   # args: check --json --dims H=4
# gives the cellc arguments: the word FILE stands for the case's path (added
# at the end when the arguments name no .cell file), TMP/NAME for a file in a
# scratch directory; the default is `check FILE`. NAME.out holds the expected
# stdout and stderr together (paths as written on the command line),
# NAME.status the expected exit status (0 when absent). The ASan/UBSan build
# is used when present, with leak checking on, so a leak or a sanitizer report
# fails the case; CELLC=PATH picks another binary.
cd "$(dirname "$0")/../.." || exit 1
dir=tests/golden
cellc=${CELLC:-build/asan/cellc}
[ -x "$cellc" ] || cellc=bin/cellc
if [ ! -x "$cellc" ]; then
  echo "golden: no cellc built (make, or make SAN=1 all)"
  echo "0 passed, 1 failed"
  exit 1
fi
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
UBSAN_OPTIONS=print_stacktrace=1
export ASAN_OPTIONS UBSAN_OPTIONS
CELLC_STDLIB=stdlib # stable paths in messages (the stdlib found next to the binary is absolute)
CELLC_THREADS=1     # check's memory figures count the cpu's per-thread buffers
export CELLC_STDLIB CELLC_THREADS

update=0
if [ "$1" = "--update" ]; then
  update=1
  shift
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
set -f # arguments are split on blanks, never globbed

pass=0
fail=0
if [ $# -gt 0 ]; then
  cases=""
  for n in "$@"; do cases="$cases $dir/$n.cell"; done
else
  set +f
  cases=$(ls $dir/*.cell)
  set -f
fi
for cell in $cases; do
  name=$(basename "$cell" .cell)
  args=$(sed -n '1s/^# args:[ ]*//p' "$cell")
  [ -n "$args" ] || args="check FILE"
  case " $args " in
  *" FILE "* | *".cell "*) ;;
  *) args="$args FILE" ;;
  esac
  rm -rf "$tmp/work"
  mkdir "$tmp/work"
  set --
  for w in $args; do
    case $w in
    FILE) w=$cell ;;
    TMP/*) w="$tmp/work/${w#TMP/}" ;;
    esac
    set -- "$@" "$w"
  done
  "$cellc" "$@" >"$tmp/got" 2>&1
  status=$?
  if [ $update -eq 1 ]; then
    cp "$tmp/got" "$dir/$name.out"
    if [ $status -eq 0 ]; then rm -f "$dir/$name.status"; else echo $status >"$dir/$name.status"; fi
  fi
  want_status=0
  [ -f "$dir/$name.status" ] && want_status=$(cat "$dir/$name.status")
  if [ ! -f "$dir/$name.out" ]; then
    echo "FAIL $name"
    echo "  no expected output $dir/$name.out (sh $0 --update $name, then review it)"
    fail=$((fail + 1))
  elif [ "$status" -eq "$want_status" ] && cmp -s "$dir/$name.out" "$tmp/got"; then
    echo "PASS $name"
    pass=$((pass + 1))
  else
    echo "FAIL $name"
    echo "  cellc $*"
    [ "$status" -eq "$want_status" ] || echo "  exit status $status, expected $want_status"
    diff -u "$dir/$name.out" "$tmp/got" | sed 's/^/  /'
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
