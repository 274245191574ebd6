/* env.c: the environment at cellc's edge: every CELLC_* variable the program reads, read once and
 * checked here, then passed in (the tuning options through tuning_set, the standard library's
 * directory to cli_stdlib_dir). Library code never reads a CELLC_* variable; docs/tuning.md lists
 * them all. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A variable's value; NULL when unset or empty (an empty variable is an unset one). */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static int bad(char *err, size_t errlen, const char *name, const char *v, const char *want) {
  snprintf(err, errlen, "%s='%s': %s", name, v, want);
  return -1;
}

/* A whole number in [0, max], or -1. */
static long whole(const char *v, long max) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  return errno || end == v || *end || n < 0 || n > max ? -1 : n;
}

/* On/off variables take 0 or 1: *on becomes the value, or stays as it is when unset. */
static int on_off(const char *name, bool *on, char *err, size_t errlen) {
  const char *v = env(name);
  if (!v) return 0;
  if (strcmp(v, "0") && strcmp(v, "1")) return bad(err, errlen, name, v, "expected 0 or 1");
  *on = !strcmp(v, "1");
  return 0;
}

int cli_tuning_from_env(Tuning *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  const char *v;
  if ((v = env("CELLC_THREADS"))) {
    long n = whole(v, 1 << 16);
    if (n < 0) return bad(err, errlen, "CELLC_THREADS", v, "expected a number of threads (0: every core)");
    t->threads = (int)n;
  }
  if ((v = env("CELLC_GEMM"))) {
    /* avx512: the host's best, which the variable only lowers */
    if (!strcmp(v, "blas")) t->gemm = TUNING_GEMM_BLAS;
    else if (!strcmp(v, "avx2")) t->gemm = TUNING_GEMM_AVX2;
    else if (!strcmp(v, "avx512")) t->gemm = TUNING_GEMM_HOST;
    else return bad(err, errlen, "CELLC_GEMM", v, "expected blas, avx2 or avx512");
  }
  if ((v = env("CELLC_PROFILE"))) {
    if (!strcmp(v, "1")) t->profile = TUNING_PROFILE_TOTALS;
    else if (!strcmp(v, "steps")) t->profile = TUNING_PROFILE_STEPS;
    else if (strcmp(v, "0")) return bad(err, errlen, "CELLC_PROFILE", v, "expected 0, 1 or steps");
  }
  if (on_off("CELLC_DUMP_IR", &t->dump_ir, err, errlen) < 0) return -1;
  if ((v = env("CELLC_CUDA_SCAN_CHUNK"))) {
    long n = whole(v, INT_MAX);
    if (n < 0) return bad(err, errlen, "CELLC_CUDA_SCAN_CHUNK", v, "expected a chunk length in steps (0: chosen from T)");
    t->cuda_scan_chunk = (int)n;
  }
  bool persistent = true, fold = true;
  if (on_off("CELLC_CUDA_PERSISTENT", &persistent, err, errlen) < 0) return -1;
  if (on_off("CELLC_EMBED_FOLD", &fold, err, errlen) < 0) return -1;
  t->cuda_no_persistent = !persistent, t->no_embed_fold = !fold;
  t->emu_cxx = env("CELLC_EMU_CXX");
  t->emu_cflags = env("CELLC_EMU_CFLAGS");
  return 0;
}

static const char *stdlib_env;

int cli_read_env(const char *prog) {
  Tuning t;
  char err[512];
  if (cli_tuning_from_env(&t, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s (docs/tuning.md)\n", prog, err);
    return 2;
  }
  tuning_set(&t);
  stdlib_env = env("CELLC_STDLIB");
  return 0;
}

const char *cli_env_stdlib(void) { return stdlib_env; }
