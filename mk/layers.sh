#!/bin/sh
# layers.sh: the include check of the build. Every quoted #include in a folder of $FOLDERS names a
# header of the file's own folder, or the public header (named after its folder: compiler/plan ->
# plan.h) of a folder that USES_<folder> (the Makefile, '/' written '_') lets it use, or a header of
# its parent folder when it uses that folder (a subfolder is then a private part of its parent).
# Prints each violation as file:line and exits 1 when there is one.
cd "$(dirname "$0")/.." || exit 1
status=0
for d in $FOLDERS; do
  var=USES_$(echo "$d" | tr '/' '_')
  eval "uses=\$$var"
  for f in "$d"/*.c "$d"/*.h "$d"/*.re "$d"/*.y; do
    [ -f "$f" ] || continue
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS= read -r hit; do
      line=${hit%%:*}
      h=$(echo "$hit" | sed 's/.*include[[:space:]]*"\([^"]*\)".*/\1/')
      [ -f "$d/$h" ] && continue
      # a subfolder that uses its parent is a private part of it: it may include the parent's
      # headers (train/model does not use train: it sits below the library that holds it)
      parent=$(dirname "$d")
      if [ "$parent" != . ] && [ -f "$parent/$h" ]; then
        for allowed in $uses; do [ "$allowed" = "$parent" ] && continue 2; done
      fi
      [ "$d" = lang ] && [ "$h" = parser.h ] && continue   # generated into the build folder
      ok=0; owner=""
      for u in $FOLDERS; do
        [ "$h" = "$(basename "$u").h" ] || continue
        owner=$u
        for allowed in $uses; do [ "$allowed" = "$u" ] && ok=1; done
      done
      [ $ok = 1 ] && continue
      if [ -n "$owner" ]; then
        echo "$f:$line: includes \"$h\", the public header of $owner, which $d may not use (USES_$d in the Makefile)"
      else
        echo "$f:$line: includes \"$h\", which is no folder's public header (a private header of another folder?)"
      fi
      echo x >> "${TMPDIR:-/tmp}/cellc-layers.$$"
    done
  done
done
if [ -f "${TMPDIR:-/tmp}/cellc-layers.$$" ]; then rm -f "${TMPDIR:-/tmp}/cellc-layers.$$"; exit 1; fi
exit 0
