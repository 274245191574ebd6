/* edge.c: the unit tests' edge, linked into every test binary: the CELLC_* variables read and
 * passed in (cli_read_env) before criterion starts, as cellc's main does, so that, say,
 * CELLC_THREADS=1 build/tests/test_cpu runs the library on one thread. A test that needs other
 * options installs them with tuning_set and puts these back. */
#include <stdlib.h>

#include "cli.h"

__attribute__((constructor)) static void read_env(void) {
  int rc = cli_read_env("test");
  if (rc) exit(rc);
}
