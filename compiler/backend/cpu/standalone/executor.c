/* executor.c: the driver of an emitted cell (`cellc emit --target cpu`): checks the C API's
 * arguments and runs the plan that emit_cpu.c wrote as a table (plan_table.h) with the plan
 * executor (exec.c, the one cellc runs too: it binds the caller's buffers and the workspace in the
 * C API's convention, EXEC_CAPI) on the generated kernels, cellc's GEMM kernels (gemm_core.c, the
 * instruction set from CPUID at run time) and a team of pthreads. The build
 * compiles these three files to LLVM bitcode (clang -emit-llvm) and links them into one module
 * once; emit links that into each cell's module, renames the entry points below to P_forward,
 * P_forward_ex, ..., and makes every other symbol internal. No global state, nothing printed:
 * everything lives in the caller's buffers and workspace, but for a call with lengths (ABI 2),
 * which allocates its segments' buffers (see "Lengths" below). */
#define _GNU_SOURCE /* sched_getaffinity */
#include <cpuid.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../exec.h"

typedef void (*KernelFn)(int64_t r0, int64_t r1, float **bases);

/* Defined in the cell's module at emit time. */
extern const unsigned char cellc_table[];
extern const KernelFn cellc_kernels[];

#define TAB ((const EtHeader *)cellc_table)

enum {
  OK, E_TB, E_WORK, E_X, E_Y, E_DY, E_PARAM, E_GRAD, E_SIZE, E_TABLE, E_LENGTHS, E_THREADS, E_LENRANGE, E_NOMEM,
  E_COUNT
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
    "lengths are not supported with train_noise (a seeded forward)",
    "threads is negative",
    "a length is outside 1..T",
    "out of memory for the buffers of a call with lengths",
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
static int check_options(const Options *opt, int T, int B) {
  if (opt && opt->threads < 0) return E_THREADS;
  bool below = false;
  for (int b = 0; opt && opt->lengths && b < B; b++) {
    if (opt->lengths[b] < 1 || opt->lengths[b] > T) return E_LENRANGE;
    below = below || opt->lengths[b] < T;
  }
  /* a seeded forward draws each row's noise by its place in the batch, which segments change */
  if (below && TAB->train_noise) return E_LENGTHS;
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
  int rc = check_options(opt, T, B);
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


static int backward(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                    const float *const *dfinal, void *work, const Options *opt, float *const *grad, float *dx, float *const *dh0) {
  (void)h0; /* the forward kept what the backward reads */
  Team t;
  Exec e;
  if (T < 1 || B < 1) return E_TB;
  int rc = check_options(opt, T, B);
  if (rc) return rc;
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

/* ---- Lengths (ABI 2): the batch in segments ----
 * As cellc's pipeline runs them (compiler/pipeline/varlen.c): between the batch's distinct lengths
 * u_1 < ... < u_K, segment j runs steps [u_{j-1}, u_j) of the rows still running (length >= u_j),
 * gathered into buffers of its own, as an ordinary call of T = u_j - u_{j-1} and those rows; each
 * segment starts from the final states of the one before, a row's final state is that of the
 * segment it ends in. The backward runs the forward sweep again for the segments' initial states,
 * then the segments last to first, each one's forward again before its backward (the caller's
 * workspace serves every segment: a segment is no larger than the call); a row's dfinal is the
 * caller's in the segment it ends in, else the next segment's dh0; the weight gradients are summed
 * over segments. y and dx past a row's length are zeros; x and dy there are never read. */

typedef struct Seg {
  int t0, t1, n;
  int *act;                    /* [n]: the rows running, in batch order */
  int *pos;                    /* [n]: each one's index among the segment before's */
} Seg;

typedef struct Varlen {
  int T, B, K, ns, np;
  const int *len;
  int sw[64], pw[64];          /* floats per row of each state, of each param (interleaved parts) */
  Seg *seg;
  float *xs, *ys, *dys, *dxs;  /* one segment's [T, n, width] */
  float **h0;                  /* per segment j > 0 and state s: h0[j * ns + s], [n_j, width] */
  float *fin[64], *dfin[64], *gh[2][64], *gtmp[64];
} Varlen;

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void varlen_free(Varlen *v) {
  for (int j = 0; v->seg && j < v->K; j++) free(v->seg[j].act), free(v->seg[j].pos);
  for (int j = 1; v->h0 && j < v->K; j++)
    for (int s = 0; s < v->ns; s++) free(v->h0[j * v->ns + s]);
  free(v->seg), free(v->h0), free(v->xs), free(v->ys), free(v->dys), free(v->dxs);
  for (int s = 0; s < v->ns; s++) free(v->fin[s]), free(v->dfin[s]), free(v->gh[0][s]), free(v->gh[1][s]);
  for (int i = 0; i < v->np; i++) free(v->gtmp[i]);
}

static void *zmem(size_t floats, bool *ok) {
  void *p = calloc(floats ? floats : 1, sizeof(float));
  if (!p) *ok = false;
  return p;
}

/* The segments of a call with lengths; 0 or E_NOMEM (everything freed). */
static int varlen_init(Varlen *v, int T, int B, const int *len) {
  memset(v, 0, sizeof *v);
  v->T = T, v->B = B, v->len = len, v->ns = TAB->nstates, v->np = TAB->nparams;
  if (v->ns > 64 || v->np > 64) return E_SIZE;
  const EtStatePart *sp = (const EtStatePart *)(cellc_table + TAB->sparts);
  const EtParamPart *pp = (const EtParamPart *)(cellc_table + TAB->pparts);
  for (int q = 0; q < TAB->nsparts; q++) v->sw[sp[q].state] += sp[q].size;
  for (int i = 0; i < TAB->npparts; i++) v->pw[pp[i].param] += pp[i].numel;
  bool ok = true;
  int *u = zmem((size_t)B, &ok);
  v->seg = zmem((size_t)B * sizeof(Seg) / sizeof(float) + 1, &ok);
  if (!ok) return free(u), varlen_free(v), E_NOMEM;
  memcpy(u, len, sizeof(int) * (size_t)B);
  qsort(u, (size_t)B, sizeof(int), cmp_int);
  for (int b = 0; b < B; b++)
    if (!v->K || u[b] != u[v->K - 1]) u[v->K++] = u[b];
  for (int j = 0; j < v->K; j++) {
    Seg *g = &v->seg[j];
    g->t0 = j ? u[j - 1] : 0, g->t1 = u[j];
    g->act = zmem((size_t)B, &ok), g->pos = zmem((size_t)B, &ok);
    if (!ok) break;
    for (int b = 0, k = 0; b < B; b++) {
      if (j && k < v->seg[j - 1].n && b == v->seg[j - 1].act[k]) k++;
      if (len[b] < g->t1) continue;
      g->pos[g->n] = j ? k - 1 : g->n;
      g->act[g->n++] = b;
    }
  }
  free(u);
  size_t rows = (size_t)T * (size_t)B;
  v->xs = zmem(rows * (size_t)TAB->x_size, &ok), v->dxs = zmem(rows * (size_t)TAB->x_size, &ok);
  v->ys = zmem(rows * (size_t)TAB->output_size, &ok), v->dys = zmem(rows * (size_t)TAB->output_size, &ok);
  v->h0 = zmem((size_t)v->K * (size_t)v->ns * sizeof(float *) / sizeof(float) + 1, &ok);
  for (int j = 1; ok && j < v->K; j++)
    for (int s = 0; s < v->ns; s++) v->h0[j * v->ns + s] = zmem((size_t)v->seg[j].n * (size_t)v->sw[s], &ok);
  for (int s = 0; s < v->ns; s++) {
    size_t n = (size_t)B * (size_t)v->sw[s];
    v->fin[s] = zmem(n, &ok), v->dfin[s] = zmem(n, &ok), v->gh[0][s] = zmem(n, &ok), v->gh[1][s] = zmem(n, &ok);
  }
  for (int i = 0; i < v->np; i++) v->gtmp[i] = zmem((size_t)v->pw[i], &ok);
  if (!ok) return varlen_free(v), E_NOMEM;
  return OK;
}

/* Rows of w floats between a [T, B, w] array and segment g's [t1 - t0, n, w] (gather: into the
 * segment's). */
static void move_steps(const Varlen *v, const Seg *g, float *seq, float *sub, size_t w, bool gather) {
  for (int t = g->t0; t < g->t1; t++)
    for (int i = 0; i < g->n; i++) {
      float *a = seq + ((size_t)t * (size_t)v->B + (size_t)g->act[i]) * w;
      float *b = sub + ((size_t)(t - g->t0) * (size_t)g->n + (size_t)i) * w;
      if (gather) memcpy(b, a, sizeof(float) * w);
      else memcpy(a, b, sizeof(float) * w);
    }
}

static const float *const *seg_h0(const Varlen *v, int j, const float *const *h0) {
  return j ? (const float *const *)v->h0 + (size_t)j * (size_t)v->ns : h0; /* segment 0 runs every row */
}

/* The forward sweep: each segment's initial states kept; y and final written where given. */
static int sweep_forward(Varlen *v, const float *const *w, const float *x, const float *const *h0, float *y,
                         float *const *final, void *work, const Options *inner) {
  if (y) memset(y, 0, sizeof(float) * (size_t)v->T * (size_t)v->B * (size_t)TAB->output_size);
  for (int j = 0; j < v->K; j++) {
    const Seg *g = &v->seg[j];
    move_steps(v, g, (float *)x, v->xs, (size_t)TAB->x_size, true);
    int rc = forward(w, g->t1 - g->t0, g->n, v->xs, seg_h0(v, j, h0), v->ys, v->fin, work, 0, inner);
    if (rc) return rc;
    if (y) move_steps(v, g, y, v->ys, (size_t)TAB->output_size, false);
    for (int s = 0; s < v->ns; s++) {
      size_t sw = (size_t)v->sw[s];
      for (int i = 0; final && final[s] && i < g->n; i++)
        if (v->len[g->act[i]] == g->t1) memcpy(final[s] + (size_t)g->act[i] * sw, v->fin[s] + (size_t)i * sw, sizeof(float) * sw);
      if (j + 1 < v->K)
        for (int i = 0; i < v->seg[j + 1].n; i++)
          memcpy(v->h0[(j + 1) * v->ns + s] + (size_t)i * sw, v->fin[s] + (size_t)v->seg[j + 1].pos[i] * sw, sizeof(float) * sw);
    }
  }
  return OK;
}

static int sweep_backward(Varlen *v, const float *const *w, const float *x, const float *const *h0, const float *dy,
                          const float *const *dfinal, void *work, const Options *inner, float *const *grad, float *dx,
                          float *const *dh0) {
  if (dx) memset(dx, 0, sizeof(float) * (size_t)v->T * (size_t)v->B * (size_t)TAB->x_size);
  for (int j = v->K - 1; j >= 0; j--) {
    const Seg *g = &v->seg[j];
    int Tj = g->t1 - g->t0;
    move_steps(v, g, (float *)x, v->xs, (size_t)TAB->x_size, true);
    move_steps(v, g, (float *)dy, v->dys, (size_t)TAB->output_size, true);
    float **dnext = v->gh[(j + 1) % 2];
    for (int s = 0; s < v->ns; s++) {
      size_t sw = (size_t)v->sw[s];
      for (int i = 0, k = 0; i < g->n; i++) {
        int b = g->act[i];
        float *dst = v->dfin[s] + (size_t)i * sw;
        if (v->len[b] != g->t1) memcpy(dst, dnext[s] + (size_t)k++ * sw, sizeof(float) * sw);
        else if (dfinal && dfinal[s]) memcpy(dst, dfinal[s] + (size_t)b * sw, sizeof(float) * sw);
        else memset(dst, 0, sizeof(float) * sw);
      }
    }
    int rc = forward(w, Tj, g->n, v->xs, seg_h0(v, j, h0), v->ys, NULL, work, 0, inner);
    float *const *gj = j == v->K - 1 ? grad : v->gtmp;
    float *const *dh = j ? v->gh[j % 2] : dh0;
    if (!rc) rc = backward(w, Tj, g->n, v->xs, seg_h0(v, j, h0), v->dys, (const float *const *)v->dfin, work, inner, gj,
                           dx ? v->dxs : NULL, dh);
    if (rc) return rc;
    if (dx) move_steps(v, g, dx, v->dxs, (size_t)TAB->x_size, false);
    if (j < v->K - 1)
      for (int i = 0; i < v->np; i++)
        for (int k = 0; k < v->pw[i]; k++) grad[i][k] += v->gtmp[i][k];
  }
  return OK;
}

/* Whether a call has lengths with one below T (after check_options). */
static bool has_varlen(const Options *opt, int T, int B) {
  for (int b = 0; opt && opt->lengths && b < B; b++)
    if (opt->lengths[b] < T) return true;
  return false;
}

static int forward_ex(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y, float *const *final,
                      void *work, uint64_t seed, const Options *opt) {
  int rc = check_options(opt, T, B);
  if (!rc) rc = check_call(T, B, work, w, x);
  if (!rc && !y) rc = E_Y;
  if (rc || !has_varlen(opt, T, B)) return rc ? rc : forward(w, T, B, x, h0, y, final, work, seed, opt);
  Options inner = {NULL, opt->threads};
  Varlen v;
  if ((rc = varlen_init(&v, T, B, opt->lengths))) return rc;
  rc = sweep_forward(&v, w, x, h0, y, final, work, &inner);
  varlen_free(&v);
  return rc;
}

int cellc_exec_forward_ex(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                          float *const *final, void *work, const Options *opt) {
  return forward_ex(w, T, B, x, h0, y, final, work, 0, opt);
}

int cellc_exec_forward_ex_seeded(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                                 float *const *final, void *work, const Options *opt, unsigned long long seed) {
  return forward_ex(w, T, B, x, h0, y, final, work, seed, opt);
}

int cellc_exec_backward_ex(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                           const float *const *dfinal, void *work, const Options *opt, float *const *grad, float *dx,
                           float *const *dh0) {
  if (T < 1 || B < 1) return E_TB;
  int rc = check_options(opt, T, B);
  if (!rc && !has_varlen(opt, T, B)) return backward(w, T, B, x, h0, dy, dfinal, work, opt, grad, dx, dh0);
  if (!rc) rc = check_call(T, B, work, w, x);
  if (!rc && !dy) rc = E_DY;
  if (!rc && !grad) rc = E_GRAD;
  for (int i = 0; !rc && i < TAB->nparams; i++)
    if (!grad[i]) rc = E_GRAD;
  if (rc) return rc;
  Options inner = {NULL, opt->threads};
  Varlen v;
  if ((rc = varlen_init(&v, T, B, opt->lengths))) return rc;
  rc = sweep_forward(&v, w, x, h0, NULL, NULL, work, &inner);
  if (!rc) rc = sweep_backward(&v, w, x, h0, dy, dfinal, work, &inner, grad, dx, dh0);
  varlen_free(&v);
  return rc;
}
