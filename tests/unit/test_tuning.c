/* test_tuning.c: the CELLC_* variables read at the edge (cmd/env.c) into the tuning options
 * (tuning.h), each at its default when unset or empty, a bad value refused with a message that
 * names the variable; and the options installed reach the library (support_threads). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "support.h"

static const char *const vars[] = {"CELLC_THREADS", "CELLC_GEMM", "CELLC_PROFILE", "CELLC_DUMP_IR",
                                   "CELLC_CUDA_SCAN_CHUNK", "CELLC_CUDA_PERSISTENT", "CELLC_EMBED_FOLD",
                                   "CELLC_EMU_CXX", "CELLC_EMU_CFLAGS", NULL};

static void clear(void) {
  for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
}

/* The options of the environment with name=value (and nothing else set). */
static Tuning with(const char *name, const char *value) {
  clear();
  if (name) setenv(name, value, 1);
  Tuning t;
  char err[256];
  cr_assert_eq(cli_tuning_from_env(&t, err, sizeof err), 0, "%s=%s: %s", name, value, err);
  return t;
}

static void refused(const char *name, const char *value) {
  clear();
  setenv(name, value, 1);
  Tuning t;
  char err[256] = "";
  cr_assert_eq(cli_tuning_from_env(&t, err, sizeof err), -1, "%s='%s' taken", name, value);
  cr_assert(strstr(err, name) && strstr(err, value), "%s='%s': the message '%s' names neither", name, value, err);
}

Test(tuning, defaults_are_zero) {
  Tuning t = with(NULL, NULL), zero;
  memset(&zero, 0, sizeof zero);
  cr_assert(!memcmp(&t, &zero, sizeof t), "the unset environment is not the zero Tuning");
  /* an empty variable is an unset one */
  for (int i = 0; vars[i]; i++) {
    t = with(vars[i], "");
    cr_assert(!memcmp(&t, &zero, sizeof t), "%s= is not the default", vars[i]);
  }
}

Test(tuning, values) {
  cr_assert_eq(with("CELLC_THREADS", "3").threads, 3);
  cr_assert_eq(with("CELLC_THREADS", "0").threads, 0);
  cr_assert_eq(with("CELLC_GEMM", "blas").gemm, TUNING_GEMM_BLAS);
  cr_assert_eq(with("CELLC_GEMM", "avx2").gemm, TUNING_GEMM_AVX2);
  cr_assert_eq(with("CELLC_GEMM", "avx512").gemm, TUNING_GEMM_HOST);
  cr_assert_eq(with("CELLC_PROFILE", "1").profile, TUNING_PROFILE_TOTALS);
  cr_assert_eq(with("CELLC_PROFILE", "steps").profile, TUNING_PROFILE_STEPS);
  cr_assert_eq(with("CELLC_PROFILE", "0").profile, TUNING_PROFILE_OFF);
  cr_assert(with("CELLC_DUMP_IR", "1").dump_ir);
  cr_assert(!with("CELLC_DUMP_IR", "0").dump_ir);
  cr_assert_eq(with("CELLC_CUDA_SCAN_CHUNK", "64").cuda_scan_chunk, 64);
  cr_assert(with("CELLC_CUDA_PERSISTENT", "0").cuda_no_persistent);
  cr_assert(!with("CELLC_CUDA_PERSISTENT", "1").cuda_no_persistent);
  cr_assert(with("CELLC_EMBED_FOLD", "0").no_embed_fold);
  cr_assert(!with("CELLC_EMBED_FOLD", "1").no_embed_fold);
  cr_assert_str_eq(with("CELLC_EMU_CXX", "clang++").emu_cxx, "clang++");
  cr_assert_str_eq(with("CELLC_EMU_CFLAGS", "-O0 -g").emu_cflags, "-O0 -g");
}

Test(tuning, bad_values_refused) {
  refused("CELLC_THREADS", "abc");
  refused("CELLC_THREADS", "-1");
  refused("CELLC_THREADS", "4x");
  refused("CELLC_THREADS", "99999999999999999999");
  refused("CELLC_GEMM", "avx3");
  refused("CELLC_PROFILE", "yes");
  refused("CELLC_DUMP_IR", "2");
  refused("CELLC_CUDA_SCAN_CHUNK", "big");
  refused("CELLC_CUDA_SCAN_CHUNK", "-8");
  refused("CELLC_CUDA_PERSISTENT", "off");
  refused("CELLC_EMBED_FOLD", "no");
}

/* What tuning_set installs is what the library reads: the thread count of support_threads. */
Test(tuning, installed_options_reach_the_library) {
  Tuning was = *tuning(), t = with("CELLC_THREADS", "5");
  tuning_set(&t);
  cr_assert_eq(support_threads(), 5);
  cr_assert_eq(support_threads_for(1e9, 1), 5);
  t.threads = 1;
  tuning_set(&t);
  cr_assert_eq(support_threads(), 1);
  tuning_set(&was);
}
