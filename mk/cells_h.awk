# cells_h.awk: stdlib/cells.list -> the C tests' X-macro of the stdlib cells,
#   #define STDLIB_CELLS(X) X(NAME, "FILE", "SET" or NULL, "DIMS", MODE) ...
# (the Makefile writes build/gen/stdlib_cells.h with it). A malformed line fails the build.
BEGIN {
  print "/* stdlib_cells.h: generated from stdlib/cells.list by mk/cells_h.awk; edit the list. */"
  print "#define STDLIB_CELLS(X) \\"
}
/^[ \t]*#/ || NF == 0 { next }
NF != 5 || $1 !~ /^[A-Za-z_][A-Za-z0-9_]*$/ || ($5 != "scan" && $5 != "sequential") {
  printf "%s:%d: expected NAME FILE SET DIMS scan|sequential\n", FILENAME, FNR > "/dev/stderr"
  bad = 1
  exit 1
}
{
  set = $3 == "-" ? "NULL" : "\"" $3 "\""
  printf "  X(%s, \"%s\", %s, \"%s\", %s) \\\n", $1, $2, set, $4, $5
}
END { if (!bad) print "" }
