/* rundir.c: the run directory of `cellc train` (checkpoint.safetensors, metrics.jsonl,
 * config.cfg): made, or continued (--resume) or started over (--force), and what is written into it
 * before the first step. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "support.h"
#include "train_impl.h"

/* The files of a run: a directory that holds any of them holds a run. */
static const char *const run_files[] = {"checkpoint.safetensors", "metrics.jsonl", "config.cfg", "best.safetensors",
                                        "metrics.csv"};
#define NRUN_FILES ((int)(sizeof run_files / sizeof run_files[0]))

const char *const run_metric_fields[RUN_METRIC_FIELDS] = {"loss", "accuracy", "lr", "grad_norm", "tokens_per_s", "elapsed_s"};

void run_csv_row(FILE *f, int64_t step, const char *split, const double *v) {
  fprintf(f, "%lld,%s", (long long)step, split);
  for (int i = 0; i < RUN_METRIC_FIELDS; i++) {
    if (isfinite(v[i])) fprintf(f, ",%.9g", v[i]);
    else fputc(',', f);
  }
  fputc('\n', f);
  fflush(f);
}

/* A number of a metrics.jsonl row (line[0..n)): its value, NaN for null or when absent. */
static double row_num(const char *line, size_t n, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p || p >= line + n) return NAN;
  p += strlen(pat);
  return strncmp(p, "null", 4) ? strtod(p, NULL) : NAN;
}

/* The split of a row into buf ("" when absent). */
static void row_split(const char *line, size_t n, char *buf, size_t cap) {
  const char *p = strstr(line, "\"split\":\"");
  buf[0] = 0;
  if (!p || p >= line + n) return;
  p += 9;
  size_t k = 0;
  while (p + k < line + n && p[k] != '"' && k + 1 < cap) buf[k] = p[k], k++;
  buf[k] = 0;
}

/* Calls fn on each row of a run's metrics.jsonl; false when it cannot be read. */
static bool each_row(const char *path, void (*fn)(void *ctx, const char *line, size_t n), void *ctx) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return false;
  for (char *line = text; *line;) {
    char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    if (n > 0) fn(ctx, line, n);
    line += n + (end ? 1 : 0);
  }
  free(text);
  return true;
}

static void csv_of_row(void *ctx, const char *line, size_t n) {
  char split[64];
  double v[RUN_METRIC_FIELDS];
  row_split(line, n, split, sizeof split);
  for (int i = 0; i < RUN_METRIC_FIELDS; i++) v[i] = row_num(line, n, run_metric_fields[i]);
  run_csv_row(ctx, (int64_t)row_num(line, n, "step"), split, v);
}

typedef struct BestRows {
  bool classify;
  double loss, acc;
} BestRows;

/* The rule of train_loop's better_valid, over the rows read back. */
static void best_of_row(void *ctx, const char *line, size_t n) {
  BestRows *b = ctx;
  char split[64];
  row_split(line, n, split, sizeof split);
  if (strcmp(split, "valid")) return;
  double loss = row_num(line, n, "loss"), acc = row_num(line, n, "accuracy");
  bool better = isnan(b->loss) || (b->classify && acc != b->acc ? acc > b->acc : loss < b->loss);
  if (better) b->loss = loss, b->acc = acc;
}

void run_best_so_far(Run *r, double *loss, double *acc) {
  double v[2] = {NAN, NAN};
  if (r->rank == 0) {
    char *best = xasprintf("%s/best.safetensors", r->dir), *mpath = xasprintf("%s/metrics.jsonl", r->dir);
    struct stat st;
    BestRows b = {r->shape.loss == TASK_LOSS_CE, NAN, NAN};
    if (r->metrics) fflush(r->metrics);
    if (stat(best, &st) == 0 && each_row(mpath, best_of_row, &b)) v[0] = b.loss, v[1] = b.acc;
    free(best), free(mpath);
  }
  dist_bcast(v, sizeof v, 0);
  *loss = v[0], *acc = v[1];
}

/* The first of a run's files that `dir` holds, or NULL. */
static const char *held_run_file(const char *dir) {
  for (int i = 0; i < NRUN_FILES; i++) {
    char *p = xasprintf("%s/%s", dir, run_files[i]);
    struct stat st;
    bool there = lstat(p, &st) == 0;
    free(p);
    if (there) return run_files[i];
  }
  return NULL;
}

/* --force: removes the earlier run's files (a symbolic link itself, never what it points to);
 * anything else under those names is left alone, and the run fails (status 3). */
static int remove_run(const char *dir) {
  for (int i = 0; i < NRUN_FILES; i++) {
    char *p = xasprintf("%s/%s", dir, run_files[i]);
    struct stat st;
    int rc = 0;
    if (lstat(p, &st) == 0) {
      if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        diag_plain("--force: %s is not a regular file; left as it is", p);
        rc = 3;
      } else if (unlink(p) != 0) {
        diag_plain("--force: cannot remove %s: %s", p, strerror(errno));
        rc = 3;
      }
    }
    free(p);
    if (rc) return rc;
  }
  return 0;
}

/* Before the first step: each of the run's files can be written (a file that cannot, such as a
 * FIFO or a read-only file, fails the run now, not at its first checkpoint). 0 or 3. */
static int writable_run_files(const char *dir) {
  for (int i = 0; i < NRUN_FILES; i++) {
    char *p = xasprintf("%s/%s", dir, run_files[i]), err[PATH_MAX + 256];
    char *target = fsout_target(p, err, sizeof err);
    free(p);
    if (!target) {
      diag_plain("%s", err);
      return 3;
    }
    free(target);
  }
  return 0;
}

/* Takes the run directory: creates it, or checks the run it holds against --resume and --force.
 * Returns 0 or the exit status. */
static int take_dir(Run *r) {
  struct stat st;
  if (stat(r->dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
    diag_plain("%s: cannot write the run there: it is not a directory", r->dir);
    return 3;
  }
  if (r->a.resume) {
    char *ckpt = xasprintf("%s/checkpoint.safetensors", r->dir);
    int rc = 0;
    if (stat(r->dir, &st) != 0) {
      diag_plain("--resume: the run directory %s does not exist: there is no run to continue (without --resume, "
                 "cellc train starts a new run there)", r->dir);
      rc = 1;
    } else if (lstat(ckpt, &st) != 0 && !held_run_file(r->dir)) {
      diag_plain("--resume: %s holds no run (no checkpoint.safetensors): there is nothing to continue (without "
                 "--resume, cellc train starts a new run there)", r->dir);
      rc = 1;
    } else if (lstat(ckpt, &st) != 0) {
      diag_plain("--resume: %s does not exist: the run in %s wrote no checkpoint yet (--force starts it over)", ckpt, r->dir);
      rc = 1;
    } else if (stat(ckpt, &st) != 0 || !S_ISREG(st.st_mode)) {
      diag_plain("--resume: %s is not a regular file", ckpt);
      rc = 1;
    } else rc = checkpoint_read(r, ckpt, true);
    free(ckpt);
    return rc ? rc : writable_run_files(r->dir);
  }
  const char *held = held_run_file(r->dir);
  if (held && !r->a.force) {
    diag_plain("%s already holds a run (%s): --resume continues it, --force starts over (removing its files)", r->dir, held);
    return 1;
  }
  if (held) {
    int rc = remove_run(r->dir);
    if (rc) return rc;
  }
  char err[PATH_MAX + 256];
  if (fsout_make_dirs(r->dir, err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 3;
  }
  return writable_run_files(r->dir);
}

static int write_text_atomic(const char *path, const char *text) {
  char err[PATH_MAX + 256];
  int rc = fsout_write_file(path, text, strlen(text), err, sizeof err);
  if (rc < 0) diag_plain("%s", err);
  return rc;
}

/* On --resume: the lines a run wrote after its checkpoint's step are dropped (the resumed run
 * writes them again), so metrics.jsonl reads as one uninterrupted run. */
static int drop_metrics_after(const char *path, int64_t step) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return errno == ENOENT ? 0 : (diag_plain("cannot read %s: %s", path, strerror(errno)), -1);
  char *out = xmalloc(len + 1), *o = out;
  for (char *line = text; *line;) {
    char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) + 1 : strlen(line);
    const char *s = strstr(line, "\"step\":");
    char split[64];
    row_split(line, n, split, sizeof split);
    /* a test row marked the end of the run, which goes on now */
    bool keep = (!s || s > line + n || strtoll(s + 7, NULL, 10) <= step) && strcmp(split, "test") && strcmp(split, "test_best");
    if (keep && (!end || n > 1)) memcpy(o, line, n), o += n;
    line += n;
  }
  *o = 0;
  int rc = write_text_atomic(path, out);
  free(text), free(out);
  return rc;
}

static char *default_dir(Run *r) {
  char stamp[32];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  char *dir = xasprintf("runs/%s-%s-%s", model_cell_name(r->model), cfg_word(r->cfg, "task.name"), stamp);
  /* two runs started in the same second get two directories */
  for (int i = 2; held_run_file(dir); i++) {
    free(dir);
    dir = xasprintf("runs/%s-%s-%s-%d", model_cell_name(r->model), cfg_word(r->cfg, "task.name"), stamp, i);
  }
  return dir;
}

/* config.cfg (and a checkpoint's configuration) names the cell and the value of each of its
 * options, so that the run can be repeated from it alone. */
static void pin_config(Run *r) {
  if (!cfg_word(r->cfg, "model.cell")) {
    char *set = xasprintf("model.cell=%s", model_cell_name(r->model));
    CHECK(cfg_set(r->cfg, set) == 0);
    free(set);
  }
  const Cell *c0 = model_layer_cell(r->model, 0);
  for (int o = 0; o < c0->noptions; o++) {
    const char *name = c0->options[o].name;
    const CfgEntry *e;
    int n = cfg_entries(r->cfg, &e), layer = -1;
    bool global = false;
    for (int i = 0; i < n; i++) global = global || (e[i].kind == CFG_ENTRY_OPTION && e[i].layer < 0 && !strcmp(e[i].name, name));
    for (int k = 0; k < model_nlayers(r->model) && !global && layer < 0; k++) {
      bool own = false;
      for (int i = 0; i < n; i++) own = own || (e[i].kind == CFG_ENTRY_OPTION && e[i].layer == k && !strcmp(e[i].name, name));
      if (!own) layer = k;
    }
    if (global || layer < 0) continue; /* given for all layers, or for each one */
    const OptionInfo *op = &model_layer_cell(r->model, layer)->options[o];
    char *set = op->type == OPT_BOOL  ? xasprintf("model.option.%s=%s", name, op->value ? "true" : "false")
                : op->type == OPT_INT ? xasprintf("model.option.%s=%.0f", name, op->value)
                                      : xasprintf("model.option.%s=%.17g", name, op->value);
    CHECK(cfg_set(r->cfg, set) == 0);
    free(set);
  }
  /* model.hidden binds a dim H other than the input's; for any other cell its default sets
   * nothing, and written out it would be a setting the cell refuses when the run is repeated */
  bool input_h = false, binds_h = false;
  for (int i = 0; i < c0->ndims; i++)
    if (!strcmp(c0->dims[i].name, "H")) input_h = c0->dims[i].from_input, binds_h = !input_h;
  if (!binds_h && !cfg_is_set(r->cfg, "model.hidden"))
    cfg_mark_unused(r->cfg, "model.hidden", input_h ? "the cell's input dim is H: model.width sets it" : "the cell has no dim H");
}

int run_prepare(Run *r, bool *complete) {
  *complete = false;
  pin_config(r);
  r->dir = r->a.out ? xstrdup(r->a.out) : default_dir(r);
  int rc = run_rank0_status(r->rank == 0 ? take_dir(r) : 0);
  if (!rc && r->a.resume) run_share_state(r);
  if (!rc && r->a.resume && r->step > r->steps) {
    diag_plain("--resume: the checkpoint in %s is at step %lld, past train.steps = %lld; nothing written "
               "(to train further, raise train.steps)", r->dir, (long long)r->step, (long long)r->steps);
    return 1;
  }
  if (!rc && r->a.resume && r->step == r->steps) {
    printf("the run in %s is already complete (step %lld of %lld); nothing written\n", r->dir, (long long)r->step,
           (long long)r->steps);
    run_print_final(r, run_evaluate(r, TASK_TEST, cfg_int(r->cfg, "eval.batches")));
    *complete = true;
    return 0;
  }
  if (!rc && r->rank == 0) {
    char *cfgpath = xasprintf("%s/config.cfg", r->dir), *text = cfg_write_string(r->cfg);
    if (write_text_atomic(cfgpath, text) < 0) rc = 3;
    free(cfgpath), free(text);
    char *mpath = xasprintf("%s/metrics.jsonl", r->dir);
    if (!rc && r->a.resume && drop_metrics_after(mpath, r->step) < 0) rc = 3;
    char err[PATH_MAX + 256];
    if (!rc && !(r->metrics = fsout_append(mpath, !r->a.resume, err, sizeof err))) {
      diag_plain("%s", err);
      rc = 3;
    }
    if (!rc && cfg_bool(r->cfg, "log.csv")) {
      /* written whole from metrics.jsonl's rows on --resume: the same rows, whatever an earlier
       * run's log.csv was */
      char *cpath = xasprintf("%s/metrics.csv", r->dir);
      if (!(r->csv = fsout_append(cpath, 1, err, sizeof err))) {
        diag_plain("%s", err);
        rc = 3;
      } else {
        fprintf(r->csv, "step,split");
        for (int i = 0; i < RUN_METRIC_FIELDS; i++) fprintf(r->csv, ",%s", run_metric_fields[i]);
        fprintf(r->csv, "\n");
        if (r->a.resume) fflush(r->metrics), each_row(mpath, csv_of_row, r->csv);
        fflush(r->csv);
      }
      free(cpath);
    }
    free(mpath);
  }
  rc = run_rank0_status(rc);
  if (rc) return rc;
  /* under mpirun a rank's stdout is a pseudo-terminal of mpirun's, whatever mpirun itself writes
   * to (a file, a pipe): there the default is lines */
  bool terminal = isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE");
  ProgressMode pm = r->a.progress != PROGRESS_AUTO ? r->a.progress : terminal ? PROGRESS_BAR : PROGRESS_LINES;
  r->bar = pm == PROGRESS_BAR, r->lines = pm == PROGRESS_LINES;
  r->t0 = run_now();
  printf("cellc train: %s; task %s, T=%d, batch %d, %lld steps%s; writing %s\n", model_summary(r->model),
         cfg_word(r->cfg, "task.name"), r->shape.length, r->B, (long long)r->steps, r->a.resume ? " (resumed)" : "", r->dir);
  if (r->a.resume) printf("resuming at step %lld\n", (long long)r->step);
  fflush(stdout);
  return 0;
}
