/* cmd_train.c: `cellc train` (the training loop: batches, optimizer, schedule, evaluation,
 * checkpoints, metrics, progress, Ctrl-C and NaN handling) and `cellc eval`. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xmmintrin.h>

#include "cfg.h"
#include "cli.h"
#include "dist.h"
#include "support.h"
#include "model.h"
#include "optim.h"
#include "pipeline.h"
#include "safetensors.h"
#include "cell_form.h"
#include "probes.h"

#define MAX_SETS 256
#define CHECKPOINT_FORMAT "cellc-checkpoint-1"

/* How training reports its progress (--progress): auto is a bar on a terminal, lines otherwise
 * (under mpirun too: a rank's stdout is a terminal of mpirun's wherever mpirun writes). */
typedef enum { PROGRESS_AUTO, PROGRESS_BAR, PROGRESS_LINES, PROGRESS_NONE } ProgressMode;

typedef struct TrainArgs {
  const char *cell, *cfg, *out, *checkpoint;
  const char *sets[MAX_SETS];
  int nsets;
  bool resume, force, dry_run;
  bool allow_changed_cell; /* load a checkpoint of a cell that differs from this one (a warning) */
  ProgressMode progress;
} TrainArgs;

/* Everything a run holds. */
typedef struct Run {
  TrainArgs a;
  Cfg *cfg;
  Task *task;
  TaskShape shape;
  Model *model;
  Opt *opt;
  DevOps *ops;      /* the device of train.device (model_ops) */
  float *state;     /* the optimizer's moments where the ops work: opt->state on the host, else a device copy */
  size_t *moff;     /* per tensor: where its moments start (part 0; part 1 follows), or SIZE_MAX */
  OptSchedule sched;
  int64_t steps, step;
  int B;            /* train.batch: the global batch */
  int world, rank;  /* data-parallel: ranks (1 without mpirun) and this one's rank */
  int Bl;           /* this rank's share of every batch, B / world: rows [rank * Bl, rank * Bl + Bl) */
  float *gbuf;      /* world > 1: the one buffer of a step's allreduce (gradients, then the loss sums) */
  size_t ngrad;     /* learned floats in gbuf */
  DistNccl *nccl;   /* world > 1 on cuda: the gradient sum through NCCL, on dbuf (device memory) */
  float *dbuf;
  uint64_t seed;
  char *dir;
  FILE *metrics;
  bool bar;         /* progress as one line redrawn in place (\r, ESC[K) */
  bool lines;       /* progress as plain lines: one per log interval and per evaluation */
  double t0;        /* when training started (this process) */
  double elapsed0;  /* elapsed seconds carried over from a resumed run */
  GradProbe *probe; /* [log] grad_per_step */
} Run;

static volatile sig_atomic_t interrupted;

/* SIGINT and SIGTERM only raise the flag, the first as every later one (a second signal
 * milliseconds after the first, as `timeout` or a scheduler sends to a process group, must not
 * kill the checkpoint being written): the loop checks it between steps. */
static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

/* SIGINT and SIGTERM held back (how = SIG_BLOCK) or let through again (SIG_UNBLOCK) while a
 * checkpoint is written: a signal then neither interrupts a write nor runs the handler. */
static void hold_signals(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(how, &set, NULL);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_args(int argc, char **argv, TrainArgs *a, bool eval) {
  static const char *const synopses[] = {"train", "eval", NULL};
  const char *cmd = eval ? "eval" : "train";
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(s, "--set")) {
      if (!has_value) return cli_command_usage(cmd, synopses, "%s needs KEY=VALUE", s);
      if (a->nsets == MAX_SETS) return cli_command_usage(cmd, synopses, "too many %s", s);
      a->sets[a->nsets++] = argv[++i];
    } else if (!strcmp(s, "--out") && !eval) {
      if (!has_value || !argv[i + 1][0]) return cli_command_usage(cmd, synopses, "%s needs a directory", s);
      a->out = argv[++i];
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
      i++;
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

/* ---- setup ---- */

static int build_optimizer(Run *r) {
  Cfg *c = r->cfg;
  OptKind kind = OPT_ADAMW;
  opt_kind_from_name(cfg_word(c, "train.optimizer"), &kind);
  r->opt = opt_new(kind);
  const char *const *tags;
  int ntags = cfg_optim_tags(c, &tags);
  int *group = xcalloc((size_t)ntags + 1, sizeof(int));
  bool *used = xcalloc((size_t)ntags + 1, sizeof(bool));
  for (int g = 0; g <= ntags; g++) {
    char key[256];
    const char *sec = g ? tags[g - 1] : NULL;
    OptHyper h = {0};
#define KEY(name) (sec ? (snprintf(key, sizeof key, "optim.%s." name, sec), key) : "train." name)
    h.lr_scale = sec ? cfg_real(c, KEY("lr_scale")) : 1.0;
    h.weight_decay = cfg_real(c, KEY("weight_decay"));
    h.momentum = cfg_real(c, KEY("momentum"));
    h.eps = cfg_real(c, KEY("eps"));
    const double *betas;
    cfg_reals(c, KEY("betas"), &betas);
#undef KEY
    h.beta1 = betas[0], h.beta2 = betas[1];
    int idx = opt_group(r->opt, h);
    if (g) group[g - 1] = idx;
  }
  int n = model_ntensors(r->model);
  r->moff = xcalloc((size_t)n + 1, sizeof(size_t));
  for (int i = 0; i < n; i++) {
    ModelTensor *t = model_tensor(r->model, i);
    r->moff[i] = SIZE_MAX;
    if (!t->learned) continue;
    int gi = 0; /* the default group */
    for (int j = 0; j < t->ntags && !gi; j++)
      for (int g = 0; g < ntags; g++)
        if (!strcmp(t->tags[j], tags[g])) gi = group[g], used[g] = true;
    r->moff[i] = r->opt->nparams;
    for (int part = 0; part < (t->cplx ? 2 : 1); part++) opt_add(r->opt, gi, t->dval[part], t->dgrad[part], (size_t)t->numel);
  }
  int status = 0;
  for (int g = 0; g < ntags && !status; g++)
    if (!used[g]) {
      char key[256];
      snprintf(key, sizeof key, "optim.%s", tags[g]);
      cfg_error(c, key, false, "no param of the model carries the tag '%s'", tags[g]);
      status = 1;
    }
  free(group), free(used);
  r->state = r->ops->device ? r->ops->alloc(r->ops, sizeof(float) * (opt_state_size(r->opt) + 1)) : r->opt->state;
  OptScheduleKind sk = OPT_CONSTANT;
  opt_schedule_from_name(cfg_word(c, "train.schedule"), &sk);
  r->sched.kind = sk;
  r->sched.lr = cfg_real(c, "train.lr");
  r->sched.min_lr = cfg_real(c, "train.min_lr");
  r->sched.total = r->steps;
  r->sched.warmup = opt_warmup_steps(cfg_real(c, "train.warmup"), r->steps);
  return status;
}

/* The device operations of train.device: the host's, or a device back end's (exit 3 when it cannot
 * run here, naming what is missing). 0 or the exit status. */
static int open_device(Run *r) {
  const char *dev = cfg_word(r->cfg, "train.device");
  if (!strcmp(dev, "cpu")) {
    r->ops = model_host_ops();
    return 0;
  }
  /* several processes on cuda: each rank its own GPU, the one of its rank on this machine, unless
   * the user chose with CUDA_VISIBLE_DEVICES (set before the driver starts) */
  if (dist_size() > 1 && !strcmp(dev, "cuda") && !getenv("CUDA_VISIBLE_DEVICES")) {
    char gpu[16];
    snprintf(gpu, sizeof gpu, "%d", dist_local_rank());
    setenv("CUDA_VISIBLE_DEVICES", gpu, 1);
  }
  const Backend *be = backend_find(dev);
  char err[1024];
  CHECK(be);
  if (!be->ops_new) snprintf(err, sizeof err, "training on this device is not built yet");
  r->ops = be->ops_new ? be->ops_new(err, sizeof err) : NULL;
  if (!r->ops) {
    diag_plain("train.device = %s: %s", dev, err);
    return 3;
  }
  return 0;
}

/* Loads the configuration, the task and the model; returns 0 or the exit status. */
static int setup(Run *r) {
  r->cfg = cfg_load(r->a.cfg, r->a.sets, r->a.nsets);
  if (!r->cfg) return 1;
  Cfg *c = r->cfg;
  int rc = open_device(r);
  if (rc) return rc;
  r->steps = cfg_int(c, "train.steps");
  r->B = (int)cfg_int(c, "train.batch");
  r->seed = (uint64_t)cfg_int(c, "train.seed");
  r->world = dist_size(), r->rank = dist_rank();
  if (r->B % r->world) {
    if (r->rank == 0)
      diag_plain("%s: train.batch = %d does not divide by the %d processes of this run (mpirun -np %d): each process "
                 "takes train.batch / N sequences of every batch", r->a.cfg, r->B, r->world, r->world);
    return 1;
  }
  r->Bl = r->B / r->world;
  if (r->world > 1 && !strcmp(cfg_word(c, "train.device"), "cuda")) { /* the gradient sum through NCCL */
    char e[512] = "";
    r->nccl = dist_nccl_open(e, sizeof e);
    if (dist_any(!r->nccl) || dist_any(dist_nccl_init(r->nccl, e, sizeof e) < 0)) {
      diag_plain("train.device = cuda with %d processes: NCCL: %s", r->world, *e ? e : "failed on another rank");
      return 3;
    }
  }
  const TaskDef *def = cfg_task(c);
  double *num = xcalloc((size_t)def->nkeys + 1, sizeof(double));
  const char **str = xcalloc((size_t)def->nkeys + 1, sizeof(char *));
  cfg_task_values(c, num, str);
  char err[1024];
  static char purpose[512];
  snprintf(purpose, sizeof purpose, "the data of task '%s' (its [task] keys)", cfg_word(c, "task.name"));
  base_alloc_for(purpose);
  rc = task_new(def, num, str, r->seed, &r->task, err, sizeof err);
  free(num), free(str);
  if (rc < 0) {
    diag_plain("%s: [task] %s", r->a.cfg, err);
    return 1;
  }
  r->shape = task_shape(r->task);
  snprintf(purpose, sizeof purpose,
           "the model and its work arrays (model.layers = %lld, model.width = %lld, model.hidden = %lld, train.batch = "
           "%d, sequence length %d)", (long long)cfg_int(c, "model.layers"), (long long)cfg_int(c, "model.width"),
           (long long)cfg_int(c, "model.hidden"), r->B, r->shape.length);
  r->model = model_new_on(c, r->a.cell, cli_stdlib_dir(), &r->shape, r->Bl, r->seed, r->ops, &rc);
  if (!r->model) return rc;
  model_set_part(r->model, r->rank * r->Bl, r->B);
  rc = build_optimizer(r);
  r->ngrad = r->opt->nparams;
  return rc;
}

static void teardown(Run *r) {
  if (r->metrics) fclose(r->metrics);
  grad_probe_free(r->probe);
  model_free(r->model);
  if (r->ops && r->ops->device && r->state) r->ops->free(r->ops, r->state);
  if (r->dbuf) r->ops->free(r->ops, r->dbuf);
  if (r->nccl) dist_nccl_close(r->nccl);
  if (r->ops) r->ops->close(r->ops);
  opt_free(r->opt);
  if (r->task) task_free(r->task);
  cfg_free(r->cfg);
  free(r->moff);
  free(r->dir);
  free(r->gbuf);
}

/* ---- the cell a checkpoint was trained with ----
 * A checkpoint records its cell's compiled form (cell_form.h; metadata "cell_program"); loading it
 * compares that form with this run's cell's, and a difference is refused (status 1) unless
 * --allow-changed-cell. */

/* This run's form: the cell's name, then every layer's cell. */
static void run_form(Run *r, CellForm *f) {
  cell_form_add_name(f, model_cell_name(r->model));
  for (int k = 0; k < model_nlayers(r->model); k++) cell_form_add_layer(f, k, model_layer_cell(r->model, k));
}

/* The options of layer k in a configuration: every all-layer entry, then the layer's own (the last
 * one wins), as runtime/model binds them. */
static int cfg_layer_options(const Cfg *cfg, int k, Binding *out, int max) {
  const CfgEntry *e;
  int n = cfg_entries(cfg, &e), count = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n && count < max; i++)
      if (e[i].kind == CFG_ENTRY_OPTION && (pass == 0 ? e[i].layer < 0 : e[i].layer == k))
        out[count++] = (Binding){e[i].name, e[i].text};
  return count;
}

/* The form of a checkpoint that holds none of this version: its cell_source checked with the
 * options of its configuration, imports found next to this run's cell file, for the layers both
 * have. What the checker prints goes into err (its first line), not to the terminal: 0, or -1. */
static int checkpoint_form(Run *r, const SftFile *f, const char *path, CellForm *out, char *err, size_t errlen) {
  const char *source = sft_meta(f, "cell_source"), *name = sft_meta(f, "cell"), *config = sft_meta(f, "config");
  if (!source || !name || !config) {
    snprintf(err, errlen, "its metadata holds no %s", !source ? "cell_source" : !name ? "cell" : "config");
    return -1;
  }
  char *said = NULL;
  size_t said_len = 0;
  FILE *quiet = open_memstream(&said, &said_len), *was = diag_out;
  CHECK(quiet);
  diag_out = quiet;
  Arena a = {0};
  Cfg *cfg = cfg_parse(src_from_text(&a, arena_printf(&a, "%s (its config)", path), config, strlen(config)), NULL, 0);
  const Cell *now = model_layer_cell(r->model, 0);
  Module *mod = cfg ? check_load_text(&a, now->src->path, source, strlen(source), cli_stdlib_dir()) : NULL;
  const Src *src = NULL;
  const CellAst *ast = mod ? check_find_cell(mod, name, &src) : NULL;
  int rc = ast ? 0 : -1;
  if (mod && !ast) fprintf(quiet, "its cell_source has no cell '%s'\n", name);
  if (!rc) cell_form_add_name(out, name);
  int layers = rc ? 0 : (int)cfg_int(cfg, "model.layers");
  for (int k = 0; k < layers && k < model_nlayers(r->model) && !rc; k++) {
    Binding opts[64];
    CheckOptions o = {0};
    o.sets = opts, o.nsets = cfg_layer_options(cfg, k, opts, 64);
    o.training = true; /* as the run's layer cells (model_layer_cell) */
    Cell *c = check_cell(&a, src, ast, &o);
    if (c) cell_form_add_layer(out, k, c), cell_free(c);
    else rc = -1;
  }
  diag_out = was;
  fclose(quiet);
  if (rc) {
    const char *first = said && *said ? said : "it does not check";
    snprintf(err, errlen, "its cell_source does not check with this cellc (%.*s)", (int)strcspn(first, "\n"), first);
    cell_form_free(out);
  }
  free(said);
  cfg_free(cfg);
  arena_free(&a);
  return rc;
}

/* Whether the checkpoint's cell is this run's (cell_form.h): 0, or 1 after the error;
 * with --allow-changed-cell a difference is a warning. */
static int check_cell_form(Run *r, const SftFile *f, const char *path) {
  CellForm was = {0}, now = {0};
  char err[1024];
  const char *stored = sft_meta(f, "cell_program");
  int rc = stored && cell_form_read(stored, &was) == 0 ? 0 : checkpoint_form(r, f, path, &was, err, sizeof err);
  char *msg = NULL;
  int count = 0;
  if (rc < 0) msg = xasprintf("cannot tell whether the cell changed since the checkpoint was written: %s", err);
  else {
    run_form(r, &now);
    char *d = cell_form_diff(&was, &now, &count);
    char more[64] = "";
    if (count > 1) snprintf(more, sizeof more, " (and %d more difference%s)", count - 1, count > 2 ? "s" : "");
    if (d) msg = xasprintf("the cell differs from the one the checkpoint was trained with: %s%s", d, more);
    free(d);
  }
  int status = 0;
  if (msg && r->a.allow_changed_cell) {
    fflush(stdout);
    fprintf(stderr, "cellc: warning: %s: %s; loading it anyway (--allow-changed-cell)\n", path, msg);
  } else if (msg) {
    diag_plain("%s: %s; --allow-changed-cell loads it anyway", path, msg);
    status = 1;
  }
  free(msg);
  cell_form_free(&was), cell_form_free(&now);
  return status;
}

/* ---- checkpoints ---- */

/* A tensor's planes as the file holds them: complex interleaved [..., 2]. */
static float *interleave(const ModelTensor *t, float *const *planes) {
  int parts = t->cplx ? 2 : 1;
  float *buf = xmalloc(sizeof(float) * (size_t)(t->numel * parts + 1));
  for (int64_t j = 0; j < t->numel; j++)
    for (int part = 0; part < parts; part++) buf[j * parts + part] = planes[part][j];
  return buf;
}

static void moment_planes(const Run *r, int i, float *m_or_v, float **planes) {
  const ModelTensor *t = model_tensor(r->model, i);
  planes[0] = m_or_v + r->moff[i];
  planes[1] = planes[0] + t->numel;
}

/* A device's params and moments copied to the host mirrors a checkpoint is written from, and back
 * after one is read. */
static void state_to_host(Run *r) {
  model_to_host(r->model);
  if (r->ops->device) r->ops->download(r->ops, r->opt->state, r->state, sizeof(float) * opt_state_size(r->opt));
}

static void state_to_device(Run *r) {
  model_to_device(r->model);
  if (r->ops->device) r->ops->upload(r->ops, r->state, r->opt->state, sizeof(float) * opt_state_size(r->opt));
}

static int write_checkpoint(Run *r, const char *path) {
  state_to_host(r);
  SftWriter *w = sft_writer_new();
  float **bufs = xcalloc((size_t)(3 * model_ntensors(r->model) + 1), sizeof(float *));
  int nb = 0;
  for (int i = 0; i < model_ntensors(r->model); i++) {
    ModelTensor *t = model_tensor(r->model, i);
    bufs[nb] = interleave(t, t->val);
    sft_add(w, t->name, SFT_F32, t->ndim, t->shape, bufs[nb++]);
    if (r->moff[i] == SIZE_MAX) continue;
    float *planes[2];
    moment_planes(r, i, r->opt->m, planes);
    bufs[nb] = interleave(t, planes);
    char *name = xasprintf("optim.m.%s", t->name);
    sft_add(w, name, SFT_F32, t->ndim, t->shape, bufs[nb++]);
    free(name);
    if (r->opt->v) {
      moment_planes(r, i, r->opt->v, planes);
      bufs[nb] = interleave(t, planes);
      name = xasprintf("optim.v.%s", t->name);
      sft_add(w, name, SFT_F32, t->ndim, t->shape, bufs[nb++]);
      free(name);
    }
  }
  int64_t step = r->step;
  sft_add(w, "optim.step", SFT_I64, 0, NULL, &step);
  char *cfgtext = cfg_write_string(r->cfg), num[64];
  sft_set_meta(w, "format", CHECKPOINT_FORMAT);
  sft_set_meta(w, "cell", model_cell_name(r->model));
  sft_set_meta(w, "cell_source", model_cell_source(r->model));
  CellForm form = {0};
  run_form(r, &form);
  char *formtext = cell_form_write(&form);
  cell_form_free(&form);
  sft_set_meta(w, "cell_program", formtext);
  free(formtext);
  sft_set_meta(w, "config", cfgtext);
  snprintf(num, sizeof num, "%lld", (long long)r->step);
  sft_set_meta(w, "step", num);
  snprintf(num, sizeof num, "%.17g", r->elapsed0 + (r->t0 > 0 ? now() - r->t0 : 0));
  sft_set_meta(w, "elapsed_s", num);
  char err[PATH_MAX + 512];
  hold_signals(SIG_BLOCK);
  int rc = sft_write(w, path, err, sizeof err);
  hold_signals(SIG_UNBLOCK);
  if (rc < 0) diag_plain("%s", err);
  sft_writer_free(w);
  for (int i = 0; i < nb; i++) free(bufs[i]);
  free(bufs), free(cfgtext);
  return rc;
}

/* "[3, 4]" (malloc'd). */
static char *shape_text(const int64_t *shape, int ndim) {
  char buf[256];
  int len = snprintf(buf, sizeof buf, "[");
  for (int i = 0; i < ndim && len < (int)sizeof buf - 32; i++) len += snprintf(buf + len, sizeof buf - (size_t)len, i ? ", %lld" : "%lld", (long long)shape[i]);
  snprintf(buf + len, sizeof buf - (size_t)len, "]");
  return xstrdup(buf);
}

/* Reads a checkpoint into the model (and the optimizer, when `with_opt`). */
static int read_checkpoint(Run *r, const char *path, bool with_opt) {
  SftFile f = {0};
  char err[512];
  if (sft_read(path, &f, err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 1;
  }
  int status = 0;
  const char *fmt = sft_meta(&f, "format");
  if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT)) {
    diag_plain("%s: not a cellc checkpoint (no \"format\": \"%s\" in its metadata)", path, CHECKPOINT_FORMAT);
    status = 1;
  }
  if (!status) status = check_cell_form(r, &f, path);
  for (int i = 0; i < model_ntensors(r->model) && !status; i++) {
    ModelTensor *t = model_tensor(r->model, i);
    for (int which = 0; which < (with_opt && r->moff[i] != SIZE_MAX ? (r->opt->v ? 3 : 2) : 1) && !status; which++) {
      char *name = which == 0 ? xstrdup(t->name) : xasprintf("optim.%s.%s", which == 1 ? "m" : "v", t->name);
      const SftTensor *s = sft_find(&f, name);
      bool ok = s && s->ndim == t->ndim;
      for (int d = 0; ok && d < t->ndim; d++) ok = s->shape[d] == t->shape[d];
      if (!s) {
        diag_plain("%s: no tensor '%s': the checkpoint was written for another model or configuration", path, name);
        status = 1;
      } else if (!ok) {
        char *got = shape_text(s->shape, s->ndim), *want = shape_text(t->shape, t->ndim);
        diag_plain("%s: tensor '%s' has shape %s, but this model's is %s: the checkpoint was written for another "
                   "model or configuration", path, name, got, want);
        free(got), free(want);
        status = 1;
      } else if (s->dtype != SFT_F32 && s->dtype != SFT_F64) {
        diag_plain("%s: tensor '%s' is %s; a checkpoint holds F32 or F64 tensors", path, name, sft_dtype_name(s->dtype));
        status = 1;
      } else {
        float *planes[2];
        if (which == 0) planes[0] = t->val[0], planes[1] = t->val[1];
        else moment_planes(r, i, which == 1 ? r->opt->m : r->opt->v, planes);
        int parts = t->cplx ? 2 : 1;
        for (int64_t j = 0; j < t->numel && !status; j++)
          for (int part = 0; part < parts; part++) {
            double v = sft_get(s, j * parts + part);
            if (!isfinite(v) || !isfinite((float)v)) {
              diag_plain("%s: tensor '%s' holds a value that is not finite (%s at element %lld): the checkpoint is "
                         "not usable", path, name, isnan(v) ? "NaN" : "infinite", (long long)(j * parts + part));
              status = 1;
              break;
            }
            planes[part][j] = (float)v;
          }
      }
      free(name);
    }
  }
  /* a tensor this model does not have: the checkpoint belongs to another model or configuration */
  for (int k = 0; k < f.n && !status; k++) {
    const char *name = f.tensors[k].name;
    if (!strcmp(name, "optim.step")) continue;
    if (!strncmp(name, "optim.m.", 8) || !strncmp(name, "optim.v.", 8)) name += 8;
    bool known = false;
    for (int i = 0; i < model_ntensors(r->model) && !known; i++) known = !strcmp(model_tensor(r->model, i)->name, name);
    if (!known) {
      diag_plain("%s: tensor '%s' is not part of this model: the checkpoint was written for another model or configuration",
                 path, f.tensors[k].name);
      status = 1;
    }
  }
  const SftTensor *st = sft_find(&f, "optim.step");
  if (!status && (!st || st->numel != 1)) {
    diag_plain("%s: no optim.step", path);
    status = 1;
  }
  if (!status && !(sft_get(st, 0) >= 0 && sft_get(st, 0) <= 1e15)) {
    diag_plain("%s: optim.step is %g, not a step count", path, sft_get(st, 0));
    status = 1;
  }
  if (!status) {
    state_to_device(r);
    r->step = (int64_t)sft_get(st, 0);
    if (with_opt) r->opt->step = r->step;
    const char *el = sft_meta(&f, "elapsed_s");
    r->elapsed0 = el ? atof(el) : 0;
  }
  sft_free(&f);
  return status;
}

/* ---- metrics and progress ---- */

static void json_num(FILE *f, const char *key, double v, bool last) {
  if (isfinite(v)) fprintf(f, "\"%s\":%.9g%s", key, v, last ? "" : ",");
  else fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

static void metric(Run *r, const char *split, double loss, double acc, double lr, double gnorm, double tps) {
  if (!r->metrics) return;
  fprintf(r->metrics, "{\"step\":%lld,\"split\":\"%s\",", (long long)r->step, split);
  json_num(r->metrics, "loss", loss, false);
  json_num(r->metrics, "accuracy", acc, false);
  json_num(r->metrics, "lr", lr, false);
  json_num(r->metrics, "grad_norm", gnorm, false);
  json_num(r->metrics, "tokens_per_s", tps, false);
  json_num(r->metrics, "elapsed_s", r->elapsed0 + now() - r->t0, true);
  fprintf(r->metrics, "}\n");
  fflush(r->metrics);
}

static void fmt_time(char *buf, size_t n, double s) {
  if (!isfinite(s) || s < 0) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s / 60 % 60);
}

/* A line above the progress bar (or a plain line off a terminal). */
static void say(Run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(Run *r, const char *fmt, ...) {
  if (r->bar) fputs("\r\033[K", stdout);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

static void progress(Run *r, double loss, double acc, double rate) {
  int width = 24, done = (int)((double)width * (double)r->step / (double)r->steps);
  char bar[64], eta[32];
  for (int i = 0; i < width; i++) bar[i] = i < done ? '#' : '.';
  bar[width] = 0;
  fmt_time(eta, sizeof eta, rate > 0 ? (double)(r->steps - r->step) / rate : NAN);
  printf("\r\033[K[%s] step %lld/%lld loss %.4f", bar, (long long)r->step, (long long)r->steps, loss);
  if (isfinite(acc)) printf(" acc %.3f", acc);
  printf(" | %.1f steps/s ETA %s", rate, eta);
  fflush(stdout);
}

/* ---- evaluation ---- */

typedef struct EvalResult {
  double loss, accuracy;
  int64_t bad;      /* the first batch whose loss is not finite (this rank's share), or -1 */
  int bad_rows;     /* its rows that count */
} EvalResult;

/* The mean loss and accuracy over a split: `batches` batches of a generated task, or the whole
 * of a fixed split (its last batch counting only the sequences the split holds). Each rank of a
 * data-parallel run evaluates its share of every batch; the sums are added across the ranks. */
static EvalResult evaluate(Run *r, TaskSplit split, int64_t batches) {
  int64_t size = r->shape.split_size[split], n = batches;
  if (size > 0) n = (size + r->B - 1) / r->B;
  double sum[3] = {0, 0, 0}; /* loss * counted, counted, correct */
  int first = r->rank * r->Bl, bad_rows = 0;
  int64_t bad = -1;
  for (int64_t i = 0; i < n; i++) {
    int rows = size > 0 && (i + 1) * r->B > size ? (int)(size - i * r->B) : r->B;
    int mine = rows - first < r->Bl ? rows - first : r->Bl; /* this rank's rows that count */
    if (mine <= 0) continue;
    TaskBatch b = {0};
    task_batch_part(r->task, split, i, r->B, first, r->Bl, &b);
    ModelLoss l = model_batch(r->model, &b, false, 0, mine);
    task_batch_free(&b);
    if (bad < 0 && !isfinite(l.loss)) bad = i, bad_rows = mine;
    if (l.counted) sum[0] += l.loss * (double)l.counted;
    sum[1] += (double)l.counted, sum[2] += (double)l.correct;
  }
  dist_allreduce_sum(sum, 3, DIST_F64);
  bool classify = r->shape.loss == TASK_LOSS_CE;
  EvalResult e = {sum[1] > 0 ? sum[0] / sum[1] : NAN, classify && sum[1] > 0 ? sum[2] / sum[1] : NAN, bad, bad_rows};
  return e;
}

/* After a step stopped on a value that is not finite: " The first value that is not finite: ...",
 * from batch b run as the step ran it (model_find_nonfinite), or "" where this rank's share of the
 * batch was finite throughout. */
static void nonfinite_where(Run *r, const TaskBatch *b, bool training, int64_t step, int rows, char *buf, size_t n) {
  char what[512];
  if (model_find_nonfinite(r->model, b, training, step, rows, what, sizeof what))
    snprintf(buf, n, " The first value that is not finite: %s.", what);
  else snprintf(buf, n, "%s", "");
}

/* ---- the ranks of a data-parallel run (one rank without mpirun: each of these is a no-op) ---- */

/* Rank 0 alone writes the run's files; what came of it, on every rank. */
static int rank0_status(int rc) {
  dist_bcast(&rc, sizeof rc, 0);
  return rc;
}

static int checkpoint(Run *r, const char *path) {
  return rank0_status(r->rank == 0 ? write_checkpoint(r, path) : 0);
}

/* After rank 0 read the checkpoint of --resume: its params, buffers, optimizer state and step on
 * every rank (on a cluster, only rank 0 needs the run directory). */
static void share_state(Run *r) {
  if (r->world == 1) return;
  for (int i = 0; i < model_ntensors(r->model); i++) {
    ModelTensor *t = model_tensor(r->model, i);
    for (int part = 0; part < (t->cplx ? 2 : 1); part++) dist_bcast(t->val[part], sizeof(float) * (size_t)t->numel, 0);
  }
  dist_bcast(r->opt->state, sizeof(float) * opt_state_size(r->opt), 0);
  dist_bcast(&r->step, sizeof r->step, 0);
  dist_bcast(&r->opt->step, sizeof r->opt->step, 0);
  dist_bcast(&r->elapsed0, sizeof r->elapsed0, 0);
}

/* Every learned float, in the optimizer's order: to (gbuf from the gradients, times w) or from
 * (the gradients from gbuf, times w). */
/* The gradients into r->gbuf times w (to), or back from it times w; on a device each tensor goes
 * through host memory (the MPI sum runs on the host; docs/distributed.md). */
static void gather_grads(Run *r, bool to, float w) {
  size_t k = 0;
  DevOps *o = r->ops;
  for (int g = 0; g < r->opt->ngroups; g++)
    for (int i = 0; i < r->opt->groups[g].ntensors; i++) {
      OptTensor *t = &r->opt->groups[g].tensors[i];
      float *h = r->gbuf + k;
      if (to && o->device) o->download(o, h, t->grad, sizeof(float) * t->n);
      for (size_t j = 0; j < t->n; j++) {
        if (to) h[j] = (o->device ? h[j] : t->grad[j]) * w;
        else if (o->device) h[j] *= w;
        else t->grad[j] = h[j] * w;
      }
      if (!to && o->device) o->upload(o, t->grad, h, sizeof(float) * t->n);
      k += t->n;
    }
}

/* On cuda with several processes: the same sum through NCCL on one device buffer, queued on the
 * default stream the training kernels run on; only the four loss numbers cross to the host. */
static int nccl_sum(Run *r, float w, float *ex, char *err, size_t errlen) {
  DevOps *o = r->ops;
  size_t n = r->ngrad, k = 0;
  if (!r->dbuf) r->dbuf = o->alloc(o, sizeof(float) * (n + 4));
  for (int g = 0; g < r->opt->ngroups; g++)
    for (int i = 0; i < r->opt->groups[g].ntensors; i++) {
      OptTensor *t = &r->opt->groups[g].tensors[i];
      o->copy(o, r->dbuf + k, t->grad, sizeof(float) * t->n);
      o->scale(o, r->dbuf + k, w, t->n);
      k += t->n;
    }
  o->upload(o, r->dbuf + n, ex, sizeof(float) * 4);
  if (dist_nccl_allreduce_sum(r->nccl, r->dbuf, n + 4, NULL, err, errlen) < 0) return -1;
  o->download(o, ex, r->dbuf + n, sizeof(float) * 4);
  float inv = ex[1] > 0 ? 1.0f / ex[1] : 0.0f;
  k = 0;
  for (int g = 0; g < r->opt->ngroups; g++)
    for (int i = 0; i < r->opt->groups[g].ntensors; i++) {
      OptTensor *t = &r->opt->groups[g].tensors[i];
      o->copy(o, t->grad, r->dbuf + k, sizeof(float) * t->n);
      o->scale(o, t->grad, inv, t->n);
      k += t->n;
    }
  return 0;
}

/* The step's one allreduce: every rank's gradient of its mean loss weighted by the positions it
 * counted (the loss is the mean over the global batch, and masks make the counts differ), its
 * loss sums and its Ctrl-C flag, in one buffer; the global means come back into the gradients and
 * *l. Returns true when any rank was interrupted. */
static bool average_gradients(Run *r, ModelLoss *l) {
  size_t n = r->ngrad;
  float ex[4] = {l->counted ? (float)(l->loss * (double)l->counted) : 0.0f, (float)l->counted, (float)l->correct,
                 interrupted ? 1.0f : 0.0f};
  if (r->nccl) {
    char err[512];
    if (nccl_sum(r, (float)l->counted, ex, err, sizeof err) < 0) {
      diag_plain("rank %d: the gradient sum failed: %s", r->rank, err);
      dist_abort(3);
    }
  } else {
    if (!r->gbuf) r->gbuf = xmalloc(sizeof(float) * (n + 4));
    gather_grads(r, true, (float)l->counted);
    memcpy(r->gbuf + n, ex, sizeof ex);
    dist_allreduce_sum(r->gbuf, n + 4, DIST_F32);
    memcpy(ex, r->gbuf + n, sizeof ex);
    gather_grads(r, false, ex[1] > 0 ? (float)(1.0 / ex[1]) : 0.0f);
  }
  double counted = ex[1];
  l->loss = counted > 0 ? ex[0] / counted : NAN;
  l->counted = (int64_t)counted, l->correct = (int64_t)ex[2];
  return ex[3] > 0;
}

static void print_final(Run *r, EvalResult e) {
  if (r->bar) fputs("\r\033[K", stdout);
  printf("final: step=%lld loss=%.6g accuracy=%.6g\n", (long long)r->step, e.loss, e.accuracy);
  fflush(stdout);
}

/* ---- training ---- */

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
    bool keep = !s || s > line + n || strtoll(s + 7, NULL, 10) <= step;
    if (keep && (!end || n > 1)) memcpy(o, line, n), o += n;
    line += n;
  }
  *o = 0;
  int rc = write_text_atomic(path, out);
  free(text), free(out);
  return rc;
}

static const char *held_run_file(const char *dir);

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

/* Ctrl-C (SIGINT, SIGTERM): the checkpoint of the step reached, then status 130 (3 when it
 * cannot be written). */
static int stop_interrupted(Run *r, const char *ckpt) {
  say(r, "interrupted at step %lld: writing %s\n", (long long)r->step, ckpt);
  return checkpoint(r, ckpt) < 0 ? 3 : 130;
}

/* Double buffering on a device: the next training batch is generated on a host thread while the
 * device runs the current step (the task is touched by one thread at a time: the thread is joined
 * before anything else reads it). On the CPU the step's own threads use every core: no prefetch. */
typedef struct Prefetch {
  Run *r;
  bool on, running, have;
  int64_t index;
  TaskBatch b;
  pthread_t th;
} Prefetch;

/* Training batch `index`: this rank's rows of the global batch (all of it in one process). */
static void train_batch(Run *r, int64_t index, TaskBatch *b) {
  task_batch_part(r->task, TASK_TRAIN, index, r->B, r->rank * r->Bl, r->Bl, b);
}

static void *prefetch_main(void *arg) {
  Prefetch *pf = arg;
  train_batch(pf->r, pf->index, &pf->b);
  return NULL;
}

static void prefetch_wait(Prefetch *pf) {
  if (!pf->running) return;
  pthread_join(pf->th, NULL);
  pf->running = false, pf->have = true;
}

/* Batch r->step into *b (the prefetched one when there is one), and the next one started. */
static void next_batch(Run *r, Prefetch *pf, TaskBatch *b) {
  prefetch_wait(pf);
  if (pf->have && pf->index == r->step) *b = pf->b;
  else {
    if (pf->have) task_batch_free(&pf->b);
    train_batch(r, r->step, b);
  }
  pf->have = false;
  if (!pf->on || r->step + 1 >= r->steps) return;
  pf->index = r->step + 1;
  pf->running = pthread_create(&pf->th, NULL, prefetch_main, pf) == 0;
  if (!pf->running) train_batch(r, pf->index, &pf->b), pf->have = true;
}

static void prefetch_end(Prefetch *pf) {
  prefetch_wait(pf);
  if (pf->have) task_batch_free(&pf->b);
  pf->have = false;
}

static int train_loop(Run *r) {
  Prefetch pf = {.r = r, .on = model_ops(r->model)->device};
  char *ckpt = xasprintf("%s/checkpoint.safetensors", r->dir);
  int64_t log_every = cfg_int(r->cfg, "log.every"), eval_every = cfg_int(r->cfg, "eval.every");
  int64_t eval_batches = cfg_int(r->cfg, "eval.batches");
  double tokens = (double)r->B * (double)r->shape.length;
  double int_loss = 0, int_gnorm = 0, int_time = 0, last_bar = 0;
  int64_t int_counted = 0, int_correct = 0, int_steps = 0;
  bool classify = r->shape.loss == TASK_LOSS_CE, have_ckpt = r->a.resume;
  int status = 0;
  while (r->step < r->steps) {
    if (r->world == 1 && interrupted) {
      status = stop_interrupted(r, ckpt);
      break;
    }
    double t = now();
    TaskBatch b = {0};
    next_batch(r, &pf, &b);
    ModelLoss l = model_batch(r->model, &b, true, r->step, r->Bl);
    if (r->probe && ((r->step + 1) % log_every == 0 || r->step + 1 == r->steps)) grad_probe_update(r->probe, r->model, r->Bl);
    /* several ranks: Ctrl-C on any of them stops all at the same step, before its update */
    if (r->world > 1 && average_gradients(r, &l)) {
      task_batch_free(&b);
      prefetch_wait(&pf);
      status = stop_interrupted(r, ckpt);
      break;
    }
    OptApply apply = model_opt_apply(r->model);
    double gnorm = opt_clip_on(r->opt, cfg_real(r->cfg, "train.clip"), &apply);
    prefetch_wait(&pf); /* the task is ours again (evaluation reads it) */
    if (!isfinite(l.loss) || !isfinite(gnorm)) {
      char where[600] = "";
      if (r->rank == 0) nonfinite_where(r, &b, true, r->step, r->Bl, where, sizeof where);
      say(r, "step %lld: the %s is %s; stopping.%s %s%s\n", (long long)r->step + 1, isfinite(l.loss) ? "gradient norm" : "loss",
          isnan(isfinite(l.loss) ? gnorm : l.loss) ? "NaN" : "infinite", where,
          have_ckpt ? "The last good checkpoint is " : "No checkpoint was written yet", have_ckpt ? ckpt : "");
      task_batch_free(&b);
      status = 3;
      break;
    }
    task_batch_free(&b);
    double lr = opt_lr_at(&r->sched, r->step);
    opt_step_on(r->opt, lr, r->state, &apply);
    r->step++;
    double dt = now() - t;
    int_time += dt, int_steps++;
    int_loss += l.loss, int_gnorm += gnorm;
    int_counted += l.counted, int_correct += l.correct;
    double acc = classify && int_counted ? (double)int_correct / (double)int_counted : NAN;
    if (r->bar && (now() - last_bar > 0.1 || r->step == r->steps)) {
      progress(r, int_loss / (double)int_steps, acc, (double)int_steps / int_time);
      last_bar = now();
    }
    if (r->step % log_every == 0 || r->step == r->steps) {
      double tps = tokens * (double)int_steps / int_time;
      metric(r, "train", int_loss / (double)int_steps, acc, lr, int_gnorm / (double)int_steps, tps);
      if (r->lines) {
        printf("step %lld/%lld loss %.4f", (long long)r->step, (long long)r->steps, int_loss / (double)int_steps);
        if (classify) printf(" acc %.3f", acc);
        printf(" lr %.3g grad_norm %.3g | %.0f tokens/s\n", lr, int_gnorm / (double)int_steps, tps);
        fflush(stdout);
      }
      int_loss = int_gnorm = int_time = 0;
      int_counted = int_correct = int_steps = 0;
    }
    if (r->step % eval_every == 0 || r->step == r->steps) {
      EvalResult e = evaluate(r, TASK_VALID, eval_batches);
      metric(r, "valid", e.loss, e.accuracy, NAN, NAN, NAN);
      if (!isfinite(e.loss)) {
        /* an update can blow the params up while the training loss and gradient were finite:
         * keep the last good checkpoint rather than overwrite it with this model */
        char where[600] = "";
        if (r->rank == 0 && e.bad >= 0) {
          TaskBatch b = {0};
          task_batch_part(r->task, TASK_VALID, e.bad, r->B, r->rank * r->Bl, r->Bl, &b);
          nonfinite_where(r, &b, false, 0, e.bad_rows, where, sizeof where);
          task_batch_free(&b);
        }
        say(r, "step %lld: the valid loss is %s; stopping.%s %s%s\n", (long long)r->step, isnan(e.loss) ? "NaN" : "infinite",
            where, have_ckpt ? "The last good checkpoint is " : "No checkpoint was written yet", have_ckpt ? ckpt : "");
        status = 3;
        break;
      }
      bool shown = r->bar || r->lines; /* --progress none: metrics.jsonl alone has them */
      if (shown && classify) say(r, "step %lld valid loss %.4f accuracy %.4f\n", (long long)r->step, e.loss, e.accuracy);
      else if (shown) say(r, "step %lld valid loss %.6g\n", (long long)r->step, e.loss);
      if (checkpoint(r, ckpt) < 0) {
        status = 3;
        break;
      }
      have_ckpt = true;
    }
  }
  prefetch_end(&pf);
  free(ckpt);
  return status;
}

/* Training flushes denormal floats to zero (MXCSR FTZ and DAZ, as torch.set_flush_denormal):
 * decaying gates and optimizer moments produce denormals, which cost about 100 cycles each on
 * x86 and halved training throughput. On this thread and on the back end's OpenMP threads;
 * `cellc run` keeps IEEE arithmetic, for exact parity with the interpreter. */
static void flush_denormals(void) {
  _mm_setcsr(_mm_getcsr() | 0x8040);
#pragma omp parallel
  _mm_setcsr(_mm_getcsr() | 0x8040);
}

/* What train and eval start with: denormals flushed, the arguments, then setup. 0 or the exit
 * status; teardown after either. */
static int run_start(Run *r, int argc, char **argv, bool eval) {
  flush_denormals();
  int rc = parse_args(argc, argv, &r->a, eval);
  if (rc) return rc;
  char err[512];
  if (dist_init(err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 3;
  }
  /* under mpirun, rank 0 alone prints the progress and the final line */
  if (dist_rank() > 0 && !freopen("/dev/null", "w", stdout)) return 3;
  if (!eval) { /* from here a signal only raises the flag: the loop writes the checkpoint and exits 130 */
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
  }
  return setup(r);
}

/* ---- the run directory ---- */

/* The files of a run: a directory that holds any of them holds a run. */
static const char *const run_files[] = {"checkpoint.safetensors", "metrics.jsonl", "config.cfg"};

/* The first of a run's files that `dir` holds, or NULL. */
static const char *held_run_file(const char *dir) {
  for (int i = 0; i < 3; i++) {
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
  for (int i = 0; i < 3; i++) {
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
  for (int i = 0; i < 3; i++) {
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
    } else rc = read_checkpoint(r, ckpt, true);
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

/* --dry-run: the model, as PyTorch's print(model): each tensor with its shape and size, the
 * parameter count, and each cell layer's compile mode and options. */
static void print_model(Run *r) {
  Model *m = r->model;
  printf("%s\n", model_summary(m));
  printf("task %s, T=%d, batch %d, %lld steps\n", cfg_word(r->cfg, "task.name"), r->shape.length, r->B, (long long)r->steps);
  for (int k = 0; k < model_nlayers(m); k++) {
    const Cell *c = model_layer_cell(m, k);
    printf("layer %d: cell %s, mode %s", k, c->name, c->mode == MODE_SCAN ? "scan" : "sequential");
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
    char *shape = shape_text(t->shape, t->ndim);
    printf("%-32s %-18s %12lld%s\n", t->name, shape, (long long)(t->numel * (t->cplx ? 2 : 1)),
           t->learned ? "" : "  (buffer, not learned)");
    free(shape);
  }
  printf("total: %lld learned params in %d tensors\n", (long long)model_nparams(m), model_ntensors(m));
  printf("dry run: nothing trained, nothing written\n");
}

int cmd_train(int argc, char **argv) {
  Run r = {0};
  int rc = run_start(&r, argc, argv, false);
  if (!rc && r.a.dry_run) {
    print_model(&r);
    teardown(&r);
    dist_finalize();
    return 0;
  }
  if (!rc) {
    pin_config(&r);
    r.dir = r.a.out ? xstrdup(r.a.out) : default_dir(&r);
    rc = rank0_status(r.rank == 0 ? take_dir(&r) : 0);
    if (!rc && r.a.resume) share_state(&r);
  }
  bool complete = false;
  if (!rc && r.a.resume && r.step > r.steps) {
    diag_plain("--resume: the checkpoint in %s is at step %lld, past train.steps = %lld; nothing written "
               "(to train further, raise train.steps)", r.dir, (long long)r.step, (long long)r.steps);
    rc = 1;
  } else if (!rc && r.a.resume && r.step == r.steps) {
    printf("the run in %s is already complete (step %lld of %lld); nothing written\n", r.dir, (long long)r.step,
           (long long)r.steps);
    print_final(&r, evaluate(&r, TASK_TEST, cfg_int(r.cfg, "eval.batches")));
    complete = true;
  }
  if (!rc && !complete && r.rank == 0) {
    char *cfgpath = xasprintf("%s/config.cfg", r.dir), *text = cfg_write_string(r.cfg);
    if (write_text_atomic(cfgpath, text) < 0) rc = 3;
    free(cfgpath), free(text);
    char *mpath = xasprintf("%s/metrics.jsonl", r.dir);
    if (!rc && r.a.resume && drop_metrics_after(mpath, r.step) < 0) rc = 3;
    char err[PATH_MAX + 256];
    if (!rc && !(r.metrics = fsout_append(mpath, !r.a.resume, err, sizeof err))) {
      diag_plain("%s", err);
      rc = 3;
    }
    free(mpath);
  }
  if (!complete) rc = rank0_status(rc);
  if (!rc && !complete) {
    /* under mpirun a rank's stdout is a pseudo-terminal of mpirun's, whatever mpirun itself writes
     * to (a file, a pipe): there the default is lines */
    bool terminal = isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE");
    ProgressMode pm = r.a.progress != PROGRESS_AUTO ? r.a.progress : terminal ? PROGRESS_BAR : PROGRESS_LINES;
    r.bar = pm == PROGRESS_BAR, r.lines = pm == PROGRESS_LINES;
    r.t0 = now();
    printf("cellc train: %s; task %s, T=%d, batch %d, %lld steps%s; writing %s\n", model_summary(r.model),
           cfg_word(r.cfg, "task.name"), r.shape.length, r.B, (long long)r.steps, r.a.resume ? " (resumed)" : "", r.dir);
    if (r.a.resume) printf("resuming at step %lld\n", (long long)r.step);
    fflush(stdout);
    char err[1024];
    if (cfg_bool(r.cfg, "log.grad_per_step") && r.ops->device) {
      diag_plain("[log] grad_per_step: the probe reruns the layers on the host's float64 interpreter from the "
                 "model's host arrays; it is not built for train.device = %s yet", cfg_word(r.cfg, "train.device"));
      rc = 3;
    } else if (cfg_bool(r.cfg, "log.grad_per_step") &&
               !(r.probe = grad_probe_new(r.model, r.shape.length, r.Bl, err, sizeof err))) {
      diag_plain("[log] grad_per_step: %s", err);
      rc = 1;
    }
    if (!rc) rc = train_loop(&r);
    /* several processes: rank 0's sequences (its first rows of each sampled batch), written by it */
    if (!rc && r.probe && r.rank == 0 && grad_probe_write(r.probe, r.dir, err, sizeof err) < 0) {
      diag_plain("%s", err);
      rc = 3;
    }
    if (!rc) {
      EvalResult e = evaluate(&r, TASK_TEST, cfg_int(r.cfg, "eval.batches"));
      metric(&r, "test", e.loss, e.accuracy, NAN, NAN, NAN);
      print_final(&r, e);
    }
  }
  /* the handler stays: a signal arriving while the process ends must not turn status 130 (or 0)
   * into death by signal */
  teardown(&r);
  dist_finalize();
  return rc;
}

int cmd_eval(int argc, char **argv) {
  Run r = {0};
  int rc = run_start(&r, argc, argv, true);
  if (!rc) rc = read_checkpoint(&r, r.a.checkpoint, false);
  if (!rc) {
    r.t0 = now();
    print_final(&r, evaluate(&r, TASK_TEST, cfg_int(r.cfg, "eval.batches")));
  }
  teardown(&r);
  dist_finalize();
  return rc;
}

int run_load(const char *cell, const char *cfg, const char *const *sets, int nsets, const char *checkpoint,
             bool allow_changed_cell, LoadedRun *out) {
  Run *r = xcalloc(1, sizeof *r);
  *out = (LoadedRun){0};
  out->priv = r;
  r->a.cell = cell, r->a.cfg = cfg, r->a.checkpoint = checkpoint, r->a.allow_changed_cell = allow_changed_cell;
  for (int i = 0; i < nsets && i < MAX_SETS; i++) r->a.sets[r->a.nsets++] = sets[i];
  flush_denormals();
  int rc = setup(r);
  if (!rc && checkpoint) rc = read_checkpoint(r, checkpoint, false);
  out->cfg = r->cfg, out->task = r->task, out->model = r->model, out->B = r->B, out->step = r->step;
  return rc;
}

void run_unload(LoadedRun *l) {
  if (!l->priv) return;
  teardown(l->priv);
  free(l->priv);
  l->priv = NULL;
}
