#!/bin/sh
# The sources' protocols as examples/repro/ runs them (tests/repro_cli.py): the model keys they
# need (model.encoder = none, model.head_bias = false) and the time-scale study's script at a
# tiny size (its table, figures and summary); then each block below. Ends with
# "N passed, M failed": the sum of the files' own lines.
cd "$(dirname "$0")/.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
files=0
run() {
  files=$((files + 1))
  /usr/bin/python3 "$@" | tee -a "$log"
}
run tests/repro_cli.py "$@"

# the gated-linear and thesis studies' scripts at a tiny size (tests/repro_gl_cli.py)
run tests/repro_gl_cli.py

# a file that ended without its line counts as one failure
awk -v files=$files '/^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3; n++ }
  END { if (n < files) f += files - n; print p " passed, " f " failed"; exit f > 0 }' "$log"
