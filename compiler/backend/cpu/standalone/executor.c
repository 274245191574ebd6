/* executor.c: the driver of an emitted cell (`cellc emit --target cpu`): checks the C API's
 * arguments and runs the plan that emit_cpu.c wrote as a table (plan_table.h) with the plan
 * executor (exec.c, the one cellc runs too: it binds the caller's buffers and the workspace in the
 * C API's convention, EXEC_CAPI) on the generated kernels, cellc's GEMM kernels (gemm_core.c, the
 * instruction set from CPUID at run time) and a team of pthreads. The build
 * compiles these three files to LLVM bitcode (clang -emit-llvm) and links them into one module
 * once; emit links that into each cell's module, renames the entry points below to P_forward,
 * P_forward_ex, ..., and makes every other symbol internal. No global state, no allocation, nothing
 * printed: everything lives in the caller's buffers and workspace. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <cpuid.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#include "../exec.h"

typedef void (*KernelFn)(int64_t r0, int64_t r1, float **bases);

/* Defined in the cell's module at emit time. */
extern const unsigned char cellc_table[];
extern const KernelFn cellc_kernels[];

#define TAB ((const EtHeader *)cellc_table)

enum {
  OK, E_TB, E_WORK, E_X, E_Y, E_DY, E_PARAM, E_GRAD, E_SIZE, E_TABLE, E_LENGTHS, E_THREADS, E_COUNT
};

static const char *const messages[E_COUNT] = {
    "success",
    "T and B must be at least 1",
    "the workspace pointer is NULL",
    "x is NULL",
    "y is NULL",
    "dy is NULL",
    "w is NULL or one of its params is NULL",
    "grad is NULL or one of its members is NULL",
    "T * B is too large: the workspace size overflows",
    "the emitted table is damaged",
    "lengths are not supported by this build",
    "threads is negative",
};

/* P_options (ABI 2). */
typedef struct Options {
  const int *lengths;
  int threads;
} Options;

const char *cellc_exec_strerror(int status) {
  if (status < 0 || status >= E_COUNT) return "unknown status";
  return messages[status];
}

/* ---- running the plan ---- */

/* The widest kernels this CPU and its OS run (CPUID, XGETBV). */
static GemmIsa cpu_isa(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_FMA)) return GEMM_BLAS;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6) != 6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX2)) return GEMM_BLAS;
  return (b & bit_AVX512F) && (lo & 0xe6) == 0xe6 ? GEMM_AVX512 : GEMM_AVX2;
}

/* The cores this process may run on. */
static int cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set)) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

/* The team of a call: the threads asked for (or the cores), started for each run of phases. */
typedef struct Team {
  int want;                    /* threads wanted: the count asked, the cores, or 1 (ABI 1) */
  bool asked;
  Exec *e;
  bool backward;
  pthread_barrier_t bar;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go;                      /* 0 waiting, 1 run, 2 quit (a thread could not be started) */
} Team;

static void team_kernel(void *ctx, int k, int64_t r0, int64_t r1, float **bases) {
  (void)ctx;
  cellc_kernels[k](r0, r1, bases);
}

static void team_barrier(void *ctx) { pthread_barrier_wait(&((Team *)ctx)->bar); }

typedef struct Member {
  Team *team;
  int i;
} Member;

static void *member_main(void *arg) {
  Member *m = arg;
  Team *t = m->team;
  pthread_mutex_lock(&t->mu);
  while (!t->go) pthread_cond_wait(&t->cv, &t->mu);
  int go = t->go;
  pthread_mutex_unlock(&t->mu);
  if (go == 1) exec_run(t->e, t->backward, m->i);
  return NULL;
}

/* The plan's forward or backward phases on the threads that pay (exec_threads; fewer where the
 * system starts fewer). */
static void team_run(void *ctx, Exec *e, bool backward) {
  Team *t = ctx;
  int n = exec_threads(e, t->want, t->asked);
  t->e = e, t->backward = backward, t->go = 0;
  pthread_t ids[EXEC_MAX_THREADS];
  Member mem[EXEC_MAX_THREADS];
  int started = 1;
  if (n > 1) {
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    for (; started < n; started++) {
      mem[started] = (Member){t, started};
      if (pthread_create(&ids[started], NULL, member_main, &mem[started])) break;
    }
  }
  exec_team(e, started, t->asked);
  if (started > 1) pthread_barrier_init(&t->bar, NULL, (unsigned)started);
  if (n > 1) {
    pthread_mutex_lock(&t->mu);
    t->go = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
  }
  exec_run(e, backward, 0);
  for (int i = 1; i < started; i++) pthread_join(ids[i], NULL);
  if (started > 1) pthread_barrier_destroy(&t->bar);
  if (n > 1) pthread_mutex_destroy(&t->mu), pthread_cond_destroy(&t->cv);
}

/* The executor of a call over the emitted table in the C API's convention, laid out for T and B
 * (the workspace holds as many threads as its arrays pay for, EXEC_MAX_THREADS at most), and its
 * team: one thread without options (ABI 1: the code is single-threaded), else the count asked or
 * all cores. 0 or E_SIZE. */
static int exec_of(Exec *e, Team *t, int T, int B, const Options *opt) {
  *t = (Team){.want = !opt ? 1 : opt->threads > 0 ? opt->threads : cores(), .asked = opt && opt->threads > 0};
  *e = (Exec){.tab = TAB, .mode = EXEC_CAPI, .isa = cpu_isa(), .host = {t, team_kernel, team_barrier, NULL, team_run}};
  return exec_layout(e, T, B, 0) == EXEC_OK ? OK : E_SIZE;
}

size_t cellc_exec_workspace_bytes(int T, int B) {
  Exec e = {.tab = TAB, .mode = EXEC_CAPI};
  if (T < 1 || B < 1 || TAB->magic != ET_MAGIC || exec_layout(&e, T, B, 0) != EXEC_OK) return 0;
  if (e.L.total > (uint64_t)SIZE_MAX) return 0;
  return (size_t)e.L.total;
}

/* ---- the entry points ---- */

/* The options' check: 0 or a status. */
static int check_options(const Options *opt) {
  if (opt && opt->lengths) return E_LENGTHS; /* variable lengths: not in this build */
  if (opt && opt->threads < 0) return E_THREADS;
  return OK;
}

/* The checks every call makes, in this order: 0 or a status. */
static int check_call(int T, int B, const void *work, const float *const *w, const float *x) {
  if (TAB->magic != ET_MAGIC) return E_TABLE;
  if (T < 1 || B < 1) return E_TB;
  if (!work) return E_WORK;
  if (!x) return E_X;
  if (!w) return E_PARAM;
  for (int i = 0; i < TAB->nparams; i++)
    if (!w[i]) return E_PARAM;
  return OK;
}

static int forward(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y, float *const *final,
                   void *work, uint64_t seed, const Options *opt) {
  Team t;
  Exec e;
  int rc = check_options(opt);
  if (!rc) rc = check_call(T, B, work, w, x);
  if (!rc) rc = exec_of(&e, &t, T, B, opt);
  if (!rc && !y) rc = E_Y;
  if (rc) return rc;
  ExecIO io = {.x = x, .y = y, .params = w, .states = h0, .out = final, .seed = seed};
  exec_forward(&e, &io, work);
  return OK;
}

int cellc_exec_forward(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                       float *const *final, void *work) {
  return forward(w, T, B, x, h0, y, final, work, 0, NULL);
}

int cellc_exec_forward_seeded(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                              float *const *final, void *work, unsigned long long seed) {
  return forward(w, T, B, x, h0, y, final, work, seed, NULL);
}

int cellc_exec_forward_ex(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                          float *const *final, void *work, const Options *opt) {
  return forward(w, T, B, x, h0, y, final, work, 0, opt);
}

int cellc_exec_forward_ex_seeded(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                                 float *const *final, void *work, const Options *opt, unsigned long long seed) {
  return forward(w, T, B, x, h0, y, final, work, seed, opt);
}

static int backward(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                    const float *const *dfinal, void *work, const Options *opt, float *const *grad, float *dx, float *const *dh0) {
  (void)h0; /* the forward kept what the backward reads */
  Team t;
  Exec e;
  int rc = check_options(opt);
  if (rc) return rc;
  if (T < 1 || B < 1) return E_TB;
  if (!work) return E_WORK;
  if (!x) return E_X;
  if (!dy) return E_DY;
  if (!grad) return E_GRAD;
  for (int i = 0; i < TAB->nparams; i++)
    if (!grad[i]) return E_GRAD;
  rc = check_call(T, B, work, w, x);
  if (!rc) rc = exec_of(&e, &t, T, B, opt);
  if (rc) return rc;
  ExecIO io = {.x = x, .dy = dy, .dx = dx, .params = w, .states = dfinal, .out = dh0, .grads = grad};
  exec_backward(&e, &io, work);
  return OK;
}

int cellc_exec_backward(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                        const float *const *dfinal, void *work, float *const *grad, float *dx, float *const *dh0) {
  return backward(w, T, B, x, h0, dy, dfinal, work, NULL, grad, dx, dh0);
}

int cellc_exec_backward_ex(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                           const float *const *dfinal, void *work, const Options *opt, float *const *grad, float *dx,
                           float *const *dh0) {
  return backward(w, T, B, x, h0, dy, dfinal, work, opt, grad, dx, dh0);
}
