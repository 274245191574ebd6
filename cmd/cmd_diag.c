/* cmd_diag.c: `cellc diag MODEL.cell TASK.cfg` (spec/cli.md, seeds.md section 5), a driver of the
 * diagnostics' probes (probes.h: diag_run.c) on a run of the training library (train.h): the
 * model at its initialization or a checkpoint's params, N batches of the task's validation data,
 * and the directory of what they found. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "probes.h"
#include "support.h"
#include "train.h"

typedef struct DiagArgs {
  const char *cell, *cfg, *checkpoint, *out, *compare;
  const char *sets[TRAIN_MAX_SETS];
  int nsets;
  int batches, sequences, starts;
  bool by_token;
  bool allow_changed_cell;
} DiagArgs;

static int parse_args(int argc, char **argv, DiagArgs *a) {
  static const char *const synopses[] = {"diag", NULL};
  a->batches = 1;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(s, "--set")) {
      if (!has) return cli_command_usage("diag", synopses, "%s needs KEY=VALUE", s);
      if (a->nsets == TRAIN_MAX_SETS) return cli_command_usage("diag", synopses, "too many %s", s);
      a->sets[a->nsets++] = argv[++i];
    } else if (!strcmp(s, "--checkpoint") || !strcmp(s, "--out") || !strcmp(s, "--compare")) {
      if (!has || !argv[i + 1][0]) return cli_command_usage("diag", synopses, "%s needs a path", s);
      const char **dst = !strcmp(s, "--checkpoint") ? &a->checkpoint : !strcmp(s, "--out") ? &a->out : &a->compare;
      *dst = argv[++i];
    } else if (!strcmp(s, "--batches")) {
      char *end;
      long v = has ? strtol(argv[i + 1], &end, 10) : 0;
      if (!has || *end || v < 1 || v > 1000000) return cli_command_usage("diag", synopses, "%s needs a whole number of batches, 1 or more", s);
      a->batches = (int)v;
      i++;
    } else if (!strcmp(s, "--sequences") || !strcmp(s, "--starts")) {
      bool starts = !strcmp(s, "--starts");
      char *end;
      long v = has ? strtol(argv[i + 1], &end, 10) : 0;
      if (starts && has && !strcmp(argv[i + 1], "all")) v = -1, end = argv[i + 1] + 3;
      if (!has || *end || (v < 1 && !(starts && v == -1)) || v > 1000000)
        return cli_command_usage("diag", synopses, "%s", starts ? "--starts needs a whole number, 1 or more, or all"
                                                                : "--sequences needs a whole number, 1 or more");
      *(starts ? &a->starts : &a->sequences) = (int)v;
      i++;
    } else if (!strcmp(s, "--by-token")) {
      a->by_token = true;
    } else if (!strcmp(s, "--allow-changed-cell")) {
      a->allow_changed_cell = true;
    } else if (s[0] == '-' && s[1]) {
      return cli_command_usage("diag", synopses, "unknown flag '%s'", s);
    } else if (!a->cell) {
      a->cell = s;
    } else if (!a->cfg) {
      a->cfg = s;
    } else {
      return cli_command_usage("diag", synopses, "unexpected argument '%s'", s);
    }
  }
  if (!a->cell || !a->cfg) return cli_command_usage("diag", synopses, "%s", "needs MODEL.cell and TASK.cfg");
  if (a->allow_changed_cell && !a->checkpoint) return cli_command_usage("diag", synopses, "%s", "--allow-changed-cell goes with --checkpoint FILE");
  return 0;
}

int cmd_diag(int argc, char **argv) {
  DiagArgs a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  run_catch_signals(); /* the batch loop and the writing check the flag; nothing is left behind */
  Run run = {0};
  RunOptions *o = &run.a;
  o->cell = a.cell, o->cfg = a.cfg, o->checkpoint = a.checkpoint, o->allow_changed_cell = a.allow_changed_cell;
  for (int i = 0; i < a.nsets; i++) o->sets[o->nsets++] = a.sets[i];
  o->stdlib = cli_stdlib_dir();
  Diag *d = NULL;
  rc = run_load(&run);
  if (!rc) rc = diag_open(&d, &run, &(DiagOptions){a.out, a.compare, a.batches, a.by_token, a.sequences, a.starts});
  for (int64_t i = 0; !rc && i < a.batches; i++) {
    if (run_interrupted) {
      diag_plain("interrupted at batch %lld: nothing written", (long long)i);
      rc = 130;
      break;
    }
    diag_batch(d, i);
  }
  if (!rc) rc = diag_write(d);
  diag_close(d);
  run_teardown(&run);
  return rc;
}
