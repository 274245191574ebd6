#!/bin/sh
# fuzz.sh: builds the front-end fuzz target (make fuzz), seeds a corpus from
# every .cell file of the repository, fuzzes for FUZZ_TIME seconds (60 by
# default) and ends with "1 passed, 0 failed" or, after printing the failing
# input and the report, "0 passed, 1 failed". Run from the repository root.
#   FUZZ_TIME=600 sh tests/fuzz.sh     a longer run
#   FUZZ_KEEP=DIR sh tests/fuzz.sh     keep the grown corpus and artifacts in DIR
cd "$(dirname "$0")/.." || exit 1
time=${FUZZ_TIME:-60}
fail() {
  echo "fuzz: $1"
  echo "0 passed, 1 failed"
  exit 1
}
command -v clang >/dev/null 2>&1 || fail "clang is missing (make deps)"
make -s fuzz >/dev/null 2>"${TMPDIR:-/tmp}/cellc-fuzz-build.$$" || {
  cat "${TMPDIR:-/tmp}/cellc-fuzz-build.$$"
  rm -f "${TMPDIR:-/tmp}/cellc-fuzz-build.$$"
  fail "make fuzz failed"
}
rm -f "${TMPDIR:-/tmp}/cellc-fuzz-build.$$"
target=build/fuzz_frontend

if [ -n "$FUZZ_KEEP" ]; then
  work=$FUZZ_KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/corpus" "$work/artifacts"
cp stdlib/*.cell tests/cells/*.cell tests/golden/*.cell tests/golden/lib/*.cell "$work/corpus/" 2>/dev/null

# the language's words, so mutations build tokens sooner
for w in cell import input dim param state let gate output if else tag true false real int bool \
  complex learned sigmoid tanh relu silu gelu exp log softplus logsigmoid sqrt abs square min max re im \
  conj cis sum mean concat layernorm rmsnorm gumbel_sigmoid zeros ones const uniform normal glorot \
  orthogonal standard chrono ugi gumbel lru_nu lru_theta lru_gamma gru.cell lstm.cell mgu.cell \
  '@' '~' '1e-3' '2.5E+2' '#'; do
  printf '"%s"\n' "$w"
done >"$work/dict"

echo "fuzz: $target for ${time}s, corpus of $(ls "$work/corpus" | wc -l) files"
CELLC_STDLIB=stdlib "$target" -max_total_time="$time" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -dict="$work/dict" -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1
rc=$?
grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$work/log" | sed 's/^/fuzz: /'
if [ $rc -ne 0 ]; then
  echo "fuzz: the target failed (exit $rc); the report:"
  grep -v -E '^(#[0-9]+|INFO:|stat::)' "$work/log" | tail -n 60
  for f in "$work"/artifacts/*; do
    [ -f "$f" ] || continue
    echo "fuzz: failing input $f ($(wc -c <"$f") bytes), as text (cat -v):"
    cat -v "$f"
    echo
    echo "fuzz: as hex:"
    od -A d -t x1 "$f" | head -n 40
  done
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
