#!/bin/sh
# The environment read at the edge (docs/tuning.md): library code (runtime, lang, compiler, train,
# probes) reads no CELLC_* variable and only the system variables the doc lists; cellc reads every
# CELLC_* variable in one file (cmd/env.c), each documented; a bad value is refused naming the
# variable (exit 2, nothing run); the values reach the library: CELLC_THREADS (1 and 2 threads:
# the same bits), CELLC_PROFILE (=1 totals, =steps every plan step), CELLC_DUMP_IR, CELLC_EMU_CXX
# and CELLC_EMU_CFLAGS. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
CELLC=${CELLC:-bin/cellc}
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "$2" ] && printf '%s\n' "$2" | sed 's/^/     /'; }
check() { if [ "$2" = yes ]; then ok "$1"; else bad "$1" "$3"; fi; }
# every variable of the test's own choosing unset, so each case sees only what it sets
for v in $(env | sed -n 's/^\(CELLC_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export XDG_CACHE_HOME="$tmp/cache"

# ---- the sources ----
LIB="runtime lang compiler train probes"
SYSTEM="XDG_CACHE_HOME HOME TMPDIR CUDA_HOME CUDA_VISIBLE_DEVICES OPENBLAS_CORETYPE OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_LOCAL_RANK"
# shellcheck disable=SC2086
calls=$(grep -rnE 'getenv[[:space:]]*\(' $LIB --include='*.[ch]' --include='*.cu' 2>/dev/null)
wrong=$(printf '%s\n' "$calls" | grep -v '^$' | while IFS= read -r line; do
  names=$(printf '%s\n' "$line" | grep -oE 'getenv[[:space:]]*\([[:space:]]*"[A-Za-z0-9_]*"[[:space:]]*\)' | sed -E 's/.*"(.*)".*/\1/')
  n_calls=$(printf '%s\n' "$line" | grep -oE 'getenv[[:space:]]*\(' | wc -l)
  n_named=$(printf '%s\n' "$names" | grep -c .)
  allowed=yes
  for n in $names; do case " $SYSTEM " in *" $n "*) ;; *) allowed=no ;; esac; done
  [ "$allowed" = yes ] && [ "$n_calls" -eq "$n_named" ] || printf '%s\n' "$line"
done)
check "library code reads no CELLC_* variable, only the system variables of docs/tuning.md" \
  "$([ -z "$wrong" ] && echo yes)" "$wrong"
for n in $SYSTEM; do
  grep -q "\`$n\`" docs/tuning.md || bad "docs/tuning.md lists the system variable $n"
done
elsewhere=$(grep -rlE 'getenv[[:space:]]*\([[:space:]]*"CELLC_' cmd | grep -v '^cmd/env.c$')
check "cellc reads the CELLC_* variables in cmd/env.c only" "$([ -z "$elsewhere" ] && echo yes)" "$elsewhere"
read_vars=$(grep -oE '"CELLC_[A-Z0-9_]*"' cmd/env.c | tr -d '"' | sort -u)
[ -n "$read_vars" ] || bad "cmd/env.c reads CELLC_* variables"
undocumented=$(for v in $read_vars; do grep -q "^| \`$v\`" docs/tuning.md || echo "$v"; done)
check "every variable cmd/env.c reads has its row in docs/tuning.md" "$([ -z "$undocumented" ] && echo yes)" "$undocumented"

# ---- a bad value: exit 2, the variable named, nothing run ----
refuse() { # VAR VALUE
  out=$(env "$1=$2" "$CELLC" run stdlib/gru.cell --dims H=4,D=3 --out "$tmp/bad.safetensors" 2>&1)
  rc=$?
  if [ $rc -ne 2 ]; then bad "$1='$2' exits 2 (exit $rc)" "$out"
  elif ! printf '%s\n' "$out" | grep -q "^cellc: $1='$2': "; then bad "$1='$2': the message names it" "$out"
  elif [ -e "$tmp/bad.safetensors" ]; then bad "$1='$2': nothing written"
  else ok "$1='$2' refused (exit 2)"; fi
}
refuse CELLC_THREADS abc
refuse CELLC_THREADS -2
refuse CELLC_GEMM avx3
refuse CELLC_PROFILE yes
refuse CELLC_DUMP_IR 2
refuse CELLC_CUDA_SCAN_CHUNK 1.5
refuse CELLC_CUDA_PERSISTENT off
refuse CELLC_EMBED_FOLD no

# ---- the values reach the library ----
run() { # OUT ENV... : a GRU large enough to split over threads, on the CPU
  out=$1; shift
  env "$@" "$CELLC" run stdlib/gru.cell --dims H=48,D=24 --T 40 --B 24 --backend cpu --out "$out" 2>"$tmp/stderr"
}
same_tensors() { # A B: every tensor bit for bit (the metadata's peak_bytes counts the threads' buffers)
  /usr/bin/python3 -c 'import sys; sys.path.insert(0, "tests/torch"); import sft
a, b = sft.load(sys.argv[1]), sft.load(sys.argv[2])
sys.exit(0 if a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes() for k in a) else 1)' "$1" "$2"
}
run "$tmp/t1.safetensors" CELLC_THREADS=1 && run "$tmp/t2.safetensors" CELLC_THREADS=2 &&
  same_tensors "$tmp/t1.safetensors" "$tmp/t2.safetensors"
check "CELLC_THREADS=1 and =2: the same bits" "$([ $? -eq 0 ] && echo yes)"
run "$tmp/t0.safetensors" CELLC_THREADS= CELLC_GEMM=avx512
check "empty CELLC_THREADS (the default) and CELLC_GEMM=avx512 taken" "$([ $? -eq 0 ] && echo yes)" "$(cat "$tmp/stderr")"

run "$tmp/p.safetensors" CELLC_NONE=1
check "no CELLC_PROFILE: no profile" "$(grep -q '^profile:' "$tmp/stderr" || echo yes)" "$(cat "$tmp/stderr")"
run "$tmp/p.safetensors" CELLC_PROFILE=1
check "CELLC_PROFILE=1: the totals" "$(grep -q '^profile: elem .* s, gemm .* s' "$tmp/stderr" && echo yes)" "$(cat "$tmp/stderr")"
run "$tmp/p.safetensors" CELLC_PROFILE=0
check "CELLC_PROFILE=0: no profile" "$(grep -q '^profile:' "$tmp/stderr" || echo yes)" "$(cat "$tmp/stderr")"
# plan steps are timed from the second sequence on (the first allocates): a few training steps
cat > "$tmp/tiny.cfg" <<'CFG'
[task]
name     = copying
tokens   = 5
memorize = 2
length   = 2

[model]
layers  = 1
width   = 4
hidden  = 5

[train]
steps    = 3
batch    = 3
lr       = 1e-2
seed     = 3
CFG
CELLC_PROFILE=steps CELLC_THREADS=1 "$CELLC" train stdlib/gru.cell "$tmp/tiny.cfg" --out "$tmp/run" >/dev/null 2>"$tmp/stderr"
rc=$?
check "CELLC_PROFILE=steps: every plan step (cellc train)" \
  "$([ $rc -eq 0 ] && grep -q '^profile: fwd_step ' "$tmp/stderr" && grep -q '^profile: bwd_step ' "$tmp/stderr" && echo yes)" \
  "exit $rc; $(head -5 "$tmp/stderr")"

run "$tmp/ir.safetensors" CELLC_DUMP_IR=1
check "CELLC_DUMP_IR=1: the LLVM module on stderr" "$(grep -q '^define ' "$tmp/stderr" && echo yes)" "$(head -5 "$tmp/stderr")"
run "$tmp/ir.safetensors" CELLC_NONE=1
check "no CELLC_DUMP_IR: no module" "$(grep -q '^define ' "$tmp/stderr" || echo yes)"

# the emulator's host compiler and its flags (a compiler that fails: no compile to wait for)
out=$(CELLC_EMU_CXX=false "$CELLC" run stdlib/gru.cell --dims H=4,D=3 --backend cuda-emu --out "$tmp/emu.safetensors" 2>&1)
check "CELLC_EMU_CXX names the emulator's compiler" "$(printf '%s\n' "$out" | grep -q 'false failed' && echo yes)" "$out"
out=$(CELLC_EMU_CFLAGS=--no-such-flag-for-cellc "$CELLC" run stdlib/gru.cell --dims H=4,D=3 --backend cuda-emu --out "$tmp/emu.safetensors" 2>&1)
check "CELLC_EMU_CFLAGS reaches the emulator's compiler" "$(printf '%s\n' "$out" | grep -q 'no-such-flag-for-cellc' && echo yes)" "$out"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
