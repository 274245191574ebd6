/* setup.c: a run of the training library: its configuration, device, task, model and optimizer
 * (train.h), and the signal flag the loop checks. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xmmintrin.h>

#include "pipeline.h"
#include "support.h"
#include "train_impl.h"

volatile sig_atomic_t run_interrupted;

/* SIGINT and SIGTERM only raise the flag, the first as every later one (a second signal
 * milliseconds after the first, as `timeout` or a scheduler sends to a process group, must not
 * kill the checkpoint being written): the loop checks it between steps. */
static void on_signal(int sig) {
  (void)sig;
  run_interrupted = 1;
}

/* SIGINT and SIGTERM held back (how = SIG_BLOCK) or let through again (SIG_UNBLOCK) while a
 * checkpoint is written: a signal then neither interrupts a write nor runs the handler. */
void run_hold_signals(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(how, &set, NULL);
}

double run_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void run_catch_signals(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
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
    int gi = 0; /* the default group */
    for (int j = 0; j < t->ntags && !gi; j++)
      for (int g = 0; g < ntags; g++)
        if (!strcmp(t->tags[j], tags[g])) gi = group[g], used[g] = true;
    /* a frozen param's tag still names a group of the cell (it trains once unfrozen) */
    if (!t->learned) continue;
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
  r->state = !device_is_host(r->ops) ? r->ops->alloc(r->ops, sizeof(float) * (opt_state_size(r->opt) + 1)) : r->opt->state;
  OptScheduleKind sk = OPT_CONSTANT;
  opt_schedule_from_name(cfg_word(c, "train.schedule"), &sk);
  r->sched.kind = sk;
  r->sched.lr = cfg_real(c, "train.lr");
  r->sched.min_lr = cfg_real(c, "train.min_lr");
  r->sched.total = r->steps;
  r->sched.warmup = opt_warmup_steps(cfg_real(c, "train.warmup"), r->steps);
  return status;
}

/* The device of train.device (exit 3 when it cannot run here, naming what is missing). 0 or the
 * exit status. */
static int open_device(Run *r) {
  const char *dev = cfg_word(r->cfg, "train.device");
  DeviceKind kind;
  CHECK(device_kind_find(dev, &kind)); /* the configuration's choices are the devices' names */
  /* several processes on cuda: each rank its own GPU, the one of its rank on this machine, unless
   * the user chose with CUDA_VISIBLE_DEVICES (set before the driver starts) */
  if (dist_size() > 1 && kind == DEVICE_CUDA && !getenv("CUDA_VISIBLE_DEVICES")) {
    char gpu[16];
    snprintf(gpu, sizeof gpu, "%d", dist_local_rank());
    setenv("CUDA_VISIBLE_DEVICES", gpu, 1);
  }
  char err[1024];
  r->ops = device_open(kind, err, sizeof err);
  if (r->ops && r->ops->prepare(r->ops, err, sizeof err) != 0) device_release(r->ops), r->ops = NULL;
  if (!r->ops) {
    diag_plain("train.device = %s: %s", dev, err);
    return 3;
  }
  return 0;
}

/* Loads the configuration, the task and the model; returns 0 or the exit status. */
int run_setup(Run *r) {
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
  /* train.data_seed apart from train.seed: the init and the data of a study crossed independently */
  uint64_t data_seed = cfg_text(c, "train.data_seed") ? (uint64_t)cfg_int(c, "train.data_seed") : r->seed;
  rc = task_new(def, num, str, data_seed, &r->task, err, sizeof err);
  free(num), free(str);
  if (rc < 0) {
    diag_plain("%s: [task] %s", r->a.cfg, err);
    return 1;
  }
  task_set_bucket(r->task, cfg_bool(c, "train.bucket"));
  r->shape = task_shape(r->task);
  snprintf(purpose, sizeof purpose,
           "the model and its work arrays (model.layers = %lld, model.width = %lld, model.hidden = %lld, train.batch = "
           "%d, sequence length %d)", (long long)cfg_int(c, "model.layers"), (long long)cfg_int(c, "model.width"),
           (long long)cfg_int(c, "model.hidden"), r->B, r->shape.length);
  r->model = model_new_on(c, r->a.cell, r->a.stdlib, &r->shape, r->Bl, r->seed, r->ops, &rc);
  if (!r->model) return rc;
  model_set_part(r->model, r->rank * r->Bl, r->B);
  rc = build_optimizer(r);
  r->ngrad = r->opt->nparams;
  return rc;
}

void run_teardown(Run *r) {
  if (r->metrics) fclose(r->metrics);
  if (r->csv) fclose(r->csv);
  model_free(r->model);
  if (r->ops && !device_is_host(r->ops) && r->state) r->ops->free(r->ops, r->state);
  if (r->dbuf) r->ops->free(r->ops, r->dbuf);
  if (r->nccl) dist_nccl_close(r->nccl);
  device_release(r->ops);
  opt_free(r->opt);
  if (r->task) task_free(r->task);
  cfg_free(r->cfg);
  free(r->moff);
  free(r->dir);
  free(r->gbuf);
}

int run_start(Run *r, bool eval) {
  flush_denormals();
  char err[512];
  if (dist_init(err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 3;
  }
  /* under mpirun, rank 0 alone prints the progress and the final line */
  if (dist_rank() > 0 && !freopen("/dev/null", "w", stdout)) return 3;
  if (!eval) run_catch_signals(); /* from here the loop writes the checkpoint and exits 130 */
  return run_setup(r);
}

int run_load(Run *r) {
  flush_denormals();
  int rc = run_setup(r);
  if (!rc && r->a.checkpoint) rc = checkpoint_read(r, r->a.checkpoint, false);
  return rc;
}

/* "[3, 4]" (malloc'd). */
char *run_shape_text(const int64_t *shape, int ndim) {
  char buf[256];
  int len = snprintf(buf, sizeof buf, "[");
  for (int i = 0; i < ndim && len < (int)sizeof buf - 32; i++) len += snprintf(buf + len, sizeof buf - (size_t)len, i ? ", %lld" : "%lld", (long long)shape[i]);
  snprintf(buf + len, sizeof buf - (size_t)len, "]");
  return xstrdup(buf);
}
