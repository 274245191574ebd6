/* cmd_train.c: `cellc train` and `cellc eval`, drivers of the training library (train.h): the
 * arguments, --dry-run's listing of the model and the gradient probe of [log] grad_per_step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "probes.h"
#include "support.h"
#include "train.h"

static int parse_args(int argc, char **argv, RunOptions *a, bool eval, const char **seeds, const char **progress) {
  static const char *const synopses[] = {"train", "eval", NULL};
  const char *cmd = eval ? "eval" : "train";
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(s, "--set")) {
      if (!has_value) return cli_command_usage(cmd, synopses, "%s needs KEY=VALUE", s);
      if (a->nsets == TRAIN_MAX_SETS) return cli_command_usage(cmd, synopses, "too many %s", s);
      a->sets[a->nsets++] = argv[++i];
    } else if (!strcmp(s, "--out") && !eval) {
      if (!has_value || !argv[i + 1][0]) return cli_command_usage(cmd, synopses, "%s needs a directory", s);
      a->out = argv[++i];
    } else if (!strcmp(s, "--seeds") && !eval) {
      if (!has_value || !argv[i + 1][0]) return cli_command_usage(cmd, synopses, "%s needs a list of seeds: 1..5 or 1,3,7", s);
      *seeds = argv[++i];
    } else if (!strcmp(s, "--resume") && !eval) {
      a->resume = true;
    } else if (!strcmp(s, "--force") && !eval) {
      a->force = true;
    } else if (!strcmp(s, "--dry-run") && !eval) {
      a->dry_run = true;
    } else if (!strcmp(s, "--checkpoint") && eval) {
      if (!has_value) return cli_command_usage(cmd, synopses, "%s needs a file", s);
      a->checkpoint = argv[++i];
    } else if (!strcmp(s, "--allow-changed-cell")) {
      a->allow_changed_cell = true;
    } else if (!strcmp(s, "--progress") && !eval) {
      static const char *const modes[] = {[PROGRESS_BAR] = "bar", [PROGRESS_LINES] = "lines", [PROGRESS_NONE] = "none"};
      int m = PROGRESS_BAR;
      while (m <= PROGRESS_NONE && !(has_value && !strcmp(argv[i + 1], modes[m]))) m++;
      if (m > PROGRESS_NONE) return cli_command_usage(cmd, synopses, "%s needs bar, lines or none", s);
      a->progress = (ProgressMode)m;
      *progress = argv[++i];
    } else if (s[0] == '-' && s[1]) {
      return cli_command_usage(cmd, synopses, "unknown flag '%s'", s);
    } else if (!a->cell) {
      a->cell = s;
    } else if (!a->cfg) {
      a->cfg = s;
    } else {
      return cli_command_usage(cmd, synopses, "unexpected argument '%s'", s);
    }
  }
  if (!a->cell || !a->cfg) return cli_command_usage(cmd, synopses, "%s", "needs MODEL.cell and TASK.cfg");
  if (eval && !a->checkpoint) return cli_command_usage(cmd, synopses, "%s", "needs --checkpoint FILE");
  if (a->resume && !a->out) return cli_command_usage(cmd, synopses, "%s", "--resume needs --out DIR (the run to continue)");
  if (a->resume && a->force) return cli_command_usage(cmd, synopses, "%s", "--resume continues a run and --force starts it over: give one of them");
  if (a->allow_changed_cell && !eval && !a->resume)
    return cli_command_usage(cmd, synopses, "%s", "--allow-changed-cell goes with --resume (the checkpoint it loads)");
  return 0;
}


/* --dry-run: the model, as PyTorch's print(model): each tensor with its shape and size, the
 * parameter count, and each cell layer's compile mode and options. */
static void print_model(Run *r) {
  Model *m = r->model;
  printf("%s\n", model_summary(m));
  printf("task %s, T=%d, batch %d, %lld steps\n", cfg_word(r->cfg, "task.name"), r->shape.length, r->B, (long long)r->steps);
  for (int k = 0; k < model_nlayers(m); k++) {
    const Cell *c = model_layer_cell(m, k);
    printf("layer %d: cell %s, mode %s", k, c->name, c->chunked ? "chunked" : c->mode == MODE_SCAN ? "scan" : "sequential");
    for (int o = 0; o < c->noptions; o++) {
      const OptionInfo *op = &c->options[o];
      if (op->type == OPT_BOOL) printf("%s%s=%s", o ? ", " : "; options ", op->name, op->value ? "true" : "false");
      else printf("%s%s=%g", o ? ", " : "; options ", op->name, op->value);
    }
    printf("\n");
  }
  printf("%-32s %-18s %12s\n", "tensor", "shape", "params");
  for (int i = 0; i < model_ntensors(m); i++) {
    const ModelTensor *t = model_tensor(m, i);
    char *shape = run_shape_text(t->shape, t->ndim);
    printf("%-32s %-18s %12lld%s\n", t->name, shape, (long long)(t->numel * (t->cplx ? 2 : 1)),
           t->learned ? "" : t->frozen ? "  (frozen, not learned)" : "  (buffer, not learned)");
    free(shape);
  }
  printf("total: %lld learned params in %d tensors\n", (long long)model_nparams(m), model_ntensors(m));
  printf("dry run: nothing trained, nothing written\n");
}

static void probe_update(void *ctx, Model *m, int rows) { grad_probe_update(ctx, m, rows); }

int cmd_train(int argc, char **argv) {
  Run r = {0};
  const char *seeds = NULL, *progress = NULL;
  int rc = parse_args(argc, argv, &r.a, false, &seeds, &progress);
  if (rc) return rc;
  if (sweep_wanted(&r.a, seeds)) return sweep_train(&r.a, seeds, progress);
  r.a.stdlib = cli_stdlib_dir();
  rc = run_start(&r, false);
  if (!rc && r.a.dry_run) {
    print_model(&r);
    run_teardown(&r);
    dist_finalize();
    return 0;
  }
  bool complete = false;
  if (!rc) rc = run_prepare(&r, &complete);
  GradProbe *probe = NULL;
  if (!rc && !complete) {
    char err[1024];
    if (cfg_bool(r.cfg, "log.grad_per_step") && !device_is_host(r.ops)) {
      diag_plain("[log] grad_per_step: the probe reruns the layers on the host's float64 interpreter from the "
                 "model's host arrays; it is not built for train.device = %s yet", cfg_word(r.cfg, "train.device"));
      rc = 3;
    } else if (cfg_bool(r.cfg, "log.grad_per_step") &&
               !(probe = grad_probe_new(r.model, r.shape.length, r.Bl, err, sizeof err))) {
      diag_plain("[log] grad_per_step: %s", err);
      rc = 1;
    }
    if (probe) r.probe = (RunProbe){probe_update, probe};
    if (!rc) rc = train_loop(&r);
    /* several processes: rank 0's sequences (its first rows of each sampled batch), written by it */
    if (!rc && probe && r.rank == 0 && grad_probe_write(probe, r.dir, err, sizeof err) < 0) {
      diag_plain("%s", err);
      rc = 3;
    }
    if (!rc) run_finish(&r);
  }
  /* the handler stays: a signal arriving while the process ends must not turn status 130 (or 0)
   * into death by signal */
  grad_probe_free(probe);
  run_teardown(&r);
  dist_finalize();
  return rc;
}

int cmd_eval(int argc, char **argv) {
  Run r = {0};
  const char *seeds = NULL, *progress = NULL;
  int rc = parse_args(argc, argv, &r.a, true, &seeds, &progress);
  if (rc) return rc;
  r.a.stdlib = cli_stdlib_dir();
  rc = run_start(&r, true);
  if (!rc) rc = checkpoint_read(&r, r.a.checkpoint, false);
  if (!rc) {
    r.t0 = run_now();
    run_print_final(&r, run_evaluate(&r, TASK_TEST, cfg_int(r.cfg, "eval.batches")));
  }
  run_teardown(&r);
  dist_finalize();
  return rc;
}
