#!/bin/sh
# The folder layering the build enforces (mk/layers.sh, the Makefile's FOLDERS and USES_*): the
# tree passes, and an include that reaches up the layers fails `make layers` and the build,
# naming the file and line. Each case runs on a copy of the tree with one file added.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "$2" ] && printf '%s\n' "$2" | sed 's/^/     /'; }

# the tree as it is
if out=$(make -s layers 2>&1); then ok "the tree follows the folder graph"; else bad "the tree follows the folder graph" "$out"; fi

# case NAME FILE INCLUDE WANT: FILE (in the copy) including INCLUDE must fail the build
# with a message that names FILE and WANT
case_up() {
  name=$1 file=$2 header=$3 want=$4
  rm -rf "$tmp/tree" && mkdir "$tmp/tree"
  cp -R Makefile mk runtime lang compiler train probes cmd "$tmp/tree"/ 2>/dev/null
  printf '/* a deliberate upward include */\n#include "%s"\n' "$header" > "$tmp/tree/$file"
  # the build's own prerequisite of libcellc.a: what fails here fails `make all`
  out=$(make -s -C "$tmp/tree" build/layers.ok 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    bad "$name: the build's include check passed" "$out"
  elif ! printf '%s\n' "$out" | grep -q "^$file:2: includes \"$header\".*$want"; then
    bad "$name: the message does not name $file:2 and $want" "$out"
  else
    ok "$name"
  fi
}
case_up "runtime/support including the model" runtime/support/upward.c model.h "train/model"
case_up "runtime/nn including the compiler" runtime/nn/upward.h pipeline.h "compiler/pipeline"
case_up "runtime/device including the back-end interface" runtime/device/upward.c backend.h "compiler/backend"
case_up "lang including the configuration" lang/upward.c cfg.h "train/cfg"
case_up "the compiler including the training library's model" compiler/check/upward.c model.h "train/model"
case_up "train/cfg including train/model" train/cfg/upward.c model.h "train/model"
case_up "the training library's model including a compiler-internal header" train/model/upward.c check.h "compiler/check"
case_up "train/model including the library that holds it (its parent folder)" train/model/upward.c train.h "train"
case_up "the training library including the probes" train/upward.c probes.h "probes"
case_up "the probes including a command's header" probes/upward.c cli.h "no folder's public header"
case_up "the probes including another folder's private header" probes/upward.c task_impl.h "no folder's public header"

# Calls, not only includes (the objects of `make`): no command file calls another command file's
# functions (what they share is cmd/cli.c), and the host device does not call back into the model
# (model.c uses runtime/device, not the other way).
defined() { nm --defined-only "$1" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u; }
calls() { nm -u "$1" | awk '{print $2}' | sort -u; }
calls_none_of() { # NAME OBJECT OBJECTS...: OBJECT calls no function the others define
  name=$1 obj=$2; shift 2
  for o in "$obj" "$@"; do [ -f "$o" ] || { bad "$name: $o is not built (make)"; return; }; done
  for o in "$@"; do defined "$o"; done | sort -u > "$tmp/defs"
  both=$(calls "$obj" | comm -12 - "$tmp/defs" | tr '\n' ' ')
  if [ -n "$both" ]; then bad "$name" "$obj calls $both"; else ok "$name"; fi
}
for f in cmd/cmd_*.c; do
  obj=build/${f%.c}.o
  others=$(for g in cmd/cmd_*.c; do [ "$g" != "$f" ] && printf 'build/%s.o ' "${g%.c}"; done)
  # shellcheck disable=SC2086
  calls_none_of "$f calls no other command's file" "$obj" $others
done
calls_none_of "runtime/device/device.c calls nothing of model.c" build/runtime/device/device.o build/train/model/model.o

# the commands are listed once, in help.c's table: main names no command's function, and the
# table names every cmd_<name> a command file defines
if [ -f build/cmd/main.o ] && [ -f build/cmd/help.o ]; then
  named=$(calls build/cmd/main.o | grep '^cmd_' | tr '\n' ' ')
  if [ -n "$named" ]; then bad "main dispatches through the table of commands" "main.o calls $named"; else ok "main dispatches through the table of commands"; fi
  missing=""
  for f in cmd/cmd_*.c; do
    for fn in $(defined "build/${f%.c}.o" | grep '^cmd_'); do
      calls build/cmd/help.o | grep -qx "$fn" || missing="$missing $fn"
    done
  done
  if [ -n "$missing" ]; then bad "every command is in help.c's table" "not in the table:$missing"; else ok "every command is in help.c's table"; fi
else
  bad "the table of commands: build/cmd/main.o and help.o are not built (make)"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
