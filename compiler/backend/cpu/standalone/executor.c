/* executor.c: the driver of an emitted cell (`cellc emit --target cpu`): binds the caller's
 * buffers and the workspace to the plan that emit_cpu.c wrote as a table (plan_table.h) and runs
 * it with the plan executor (exec.c, the one cellc runs too) on the generated kernels, cellc's GEMM
 * kernels (gemm_core.c, the instruction set from CPUID at run time) and pthreads. The build
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
#include <string.h>

#include "../exec.h"

typedef void (*KernelFn)(int64_t r0, int64_t r1, float **bases);

/* Defined in the cell's module at emit time. */
extern const unsigned char cellc_table[];
extern const KernelFn cellc_kernels[];

#define TAB ((const EtHeader *)cellc_table)
#define AT(type, off) ((const type *)(cellc_table + (off)))

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

/* ---- the workspace: the slot table and the arrays' bases, then every array the code owns (a
 * step-local one: B rows), then the complex params' planes, then dx's stand-in, then the packed
 * weights, then each thread's buffers (its slot bases, the weight gradients' blocks and float64
 * totals) for the most threads the workspace serves (threads_max), each 64-byte aligned ---- */

#define ALIGN 64

static int add_bytes(uint64_t *total, uint64_t floats) {
  uint64_t b;
  if (__builtin_mul_overflow(floats, (uint64_t)sizeof(float), &b)) return -1;
  b = (b + ALIGN - 1) / ALIGN * ALIGN;
  if (__builtin_add_overflow(*total, b, total)) return -1;
  return 0;
}

static int owned_floats(const EtArray *a, uint64_t T, uint64_t B, uint64_t *out) {
  uint64_t rows, x, y;
  if (a->local) T = 1;
  if (__builtin_mul_overflow(T, B, &rows) || __builtin_mul_overflow(rows, (uint64_t)a->rows, &x) ||
      __builtin_mul_overflow(B, (uint64_t)a->per_b, &y) || __builtin_add_overflow(x, y, out) ||
      __builtin_add_overflow(*out, (uint64_t)a->fixed, out))
    return -1;
  return 0;
}

/* The workspace's layout for T and B: the byte offset of each owned array (offs, may be NULL)
 * and of the planes and dx areas; the total in *total. 0 or E_SIZE. */
typedef struct Layout {
  uint64_t planes, gx, packs, pack_mem, threads, total;
  uint64_t owned;              /* floats of the owned arrays (what the threads share) */
  int maxt;                    /* the threads it serves */
  uint64_t th_bytes;           /* one thread's buffers */
  size_t at, bt, blk, tot;     /* floats (tot: doubles) of a thread's buffers */
} Layout;

/* One thread per this many floats of the sequence's arrays, at most EXEC_MAX_THREADS (as cellc's
 * own runs choose, cpu.c): the workspace holds that many threads' buffers. */
#define EXEC_MIN_FLOATS_PER_THREAD (1 << 16)
#define EXEC_MAX_THREADS 64

static int threads_max(uint64_t owned) {
  uint64_t n = owned / EXEC_MIN_FLOATS_PER_THREAD;
  return n < 1 ? 1 : n > EXEC_MAX_THREADS ? EXEC_MAX_THREADS : (int)n;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static int layout(int T, int B, uint64_t *offs, Layout *L) {
  const EtHeader *h = TAB;
  const EtArray *arr = AT(EtArray, h->arrays);
  uint64_t total = 0;
  L->owned = 0;
  if (add_bytes(&total, ((uint64_t)h->nslots + (uint64_t)h->narrays) * 2)) return E_SIZE; /* a float * per slot and array */
  for (int i = 0; i < h->narrays; i++) {
    uint64_t f;
    if (arr[i].kind != ET_OWNED && arr[i].kind != ET_GH0 && arr[i].kind != ET_NOISE) continue;
    if (arr[i].kind == ET_GH0) f = (uint64_t)B * (uint64_t)arr[i].width;
    else if (owned_floats(&arr[i], (uint64_t)T, (uint64_t)B, &f)) return E_SIZE;
    if (offs) offs[i] = total;
    if (add_bytes(&total, f)) return E_SIZE;
    if (__builtin_add_overflow(L->owned, f, &L->owned)) return E_SIZE;
  }
  L->planes = total;
  if (add_bytes(&total, (uint64_t)h->planes)) return E_SIZE;
  L->gx = total;
  uint64_t gx;
  if (__builtin_mul_overflow((uint64_t)T * (uint64_t)B, (uint64_t)h->x_size, &gx) || add_bytes(&total, gx)) return E_SIZE;
  /* the packed weights and the threads' buffers: the most any instruction set takes */
  L->packs = total;
  if (add_bytes(&total, ((uint64_t)h->npacks * sizeof(GemmPacked) + 3) / 4)) return E_SIZE;
  L->pack_mem = total;
  if (add_bytes(&total, max_size(exec_pack_floats(h, GEMM_AVX2), exec_pack_floats(h, GEMM_AVX512)))) return E_SIZE;
  L->at = L->bt = L->blk = L->tot = 0;
  for (GemmIsa isa = GEMM_BLAS; isa <= GEMM_AVX512; isa++) {
    size_t at, bt, blk, tot;
    exec_thread_floats(h, isa, &at, &bt, &blk, &tot);
    L->at = max_size(L->at, at), L->bt = max_size(L->bt, bt), L->blk = max_size(L->blk, blk), L->tot = max_size(L->tot, tot);
  }
  L->th_bytes = 0;
  if (add_bytes(&L->th_bytes, ((uint64_t)h->nslots * sizeof(float *) + 3) / 4) || add_bytes(&L->th_bytes, L->at) ||
      add_bytes(&L->th_bytes, L->bt) || add_bytes(&L->th_bytes, L->blk) || add_bytes(&L->th_bytes, (uint64_t)L->tot * 2))
    return E_SIZE;
  L->maxt = threads_max(L->owned);
  L->threads = total;
  uint64_t th;
  if (add_bytes(&total, ((uint64_t)L->maxt * sizeof(ExecThread) + 3) / 4) ||
      __builtin_mul_overflow(L->th_bytes, (uint64_t)L->maxt, &th) || __builtin_add_overflow(total, th, &total))
    return E_SIZE;
  if (__builtin_add_overflow(total, (uint64_t)ALIGN, &total)) return E_SIZE; /* aligning the caller's pointer */
  L->total = total;
  return OK;
}

size_t cellc_exec_workspace_bytes(int T, int B) {
  Layout L;
  if (T < 1 || B < 1 || TAB->magic != ET_MAGIC || layout(T, B, NULL, &L)) return 0;
  if (L.total > (uint64_t)SIZE_MAX) return 0;
  return (size_t)L.total;
}

/* ---- one call's view of the buffers ---- */

typedef struct Run {
  int T, B;
  int64_t rows;
  float **bases;               /* per slot */
  float **abase;               /* per array */
  char *work;                  /* 64-byte aligned */
  const float *const *w;       /* the caller's params */
  Layout L;
} Run;

static float *plane_of(const Run *r, const EtParamPart *pp, const Layout *L) {
  return (float *)(r->work + L->planes) + pp->plane;
}

/* Every slot's base for this call: the caller's arrays where they are, the workspace for the rest.
 * Complex params are split into their (re, im) planes. */
static int bind(Run *r, int T, int B, void *work, const float *const *w, const float *x, const float *dy, float *dx) {
  const EtHeader *h = TAB;
  if (h->magic != ET_MAGIC) return E_TABLE;
  if (T < 1 || B < 1) return E_TB;
  if (!work) return E_WORK;
  if (!x) return E_X;
  if (!w) return E_PARAM;
  for (int i = 0; i < h->nparams; i++)
    if (!w[i]) return E_PARAM;
  uint64_t offs_buf[h->narrays + 1];
  Layout L;
  if (layout(T, B, offs_buf, &L)) return E_SIZE;
  r->L = L;
  r->T = T, r->B = B, r->rows = (int64_t)T * B, r->w = w;
  r->work = (char *)(((uintptr_t)work + ALIGN - 1) / ALIGN * ALIGN);
  r->bases = (float **)r->work;
  r->abase = r->bases + h->nslots;
  const EtArray *arr = AT(EtArray, h->arrays);
  const EtSlot *sl = AT(EtSlot, h->slots);
  const EtParamPart *pp = AT(EtParamPart, h->pparts);
  float *gx = dx ? dx : (float *)(r->work + L.gx);
  for (int i = 0; i < h->narrays; i++) {
    const EtArray *a = &arr[i];
    float *base = NULL;
    switch (a->kind) {
    case ET_OWNED: case ET_GH0: case ET_NOISE: base = (float *)(r->work + offs_buf[i]); break;
    case ET_PARAM:
      base = pp[a->index].cplx ? plane_of(r, &pp[a->index], &L) : (float *)w[pp[a->index].param];
      break;
    case ET_X: base = (float *)x; break;
    case ET_DY: base = (float *)dy; break;
    case ET_GX: base = gx; break;
    }
    r->abase[i] = base;
  }
  for (int s = 0; s < h->nslots; s++) {
    float *base = r->abase[sl[s].array];
    r->bases[s] = base ? base + (int64_t)sl[s].row_off * B * arr[sl[s].array].width + sl[s].col : NULL;
  }
  for (int i = 0; i < h->npparts; i++) {
    if (!pp[i].cplx) continue;
    float *dst = plane_of(r, &pp[i], &L);
    const float *src = w[pp[i].param];
    for (int j = 0; j < pp[i].numel; j++) dst[j] = src[2 * j + pp[i].part];
  }
  return OK;
}

static float *array_base(const Run *r, int array) { return r->abase[array]; }

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

typedef struct Team {
  Exec e;
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
  if (go == 1) exec_run(&t->e, t->backward, m->i);
  return NULL;
}

/* The plan's forward or backward phases on n threads (fewer where the system starts fewer). The
 * time loop runs on as many as get 8 batch rows each when the caller left the count to us (the
 * products over all rows on all of them), as cellc's own runs do. */
static void run_threads(const Run *r, bool backward, int n, bool asked) {
  const EtHeader *h = TAB;
  Team t = {.backward = backward};
  char *work = r->work;
  t.e = (Exec){.tab = h, .T = r->T, .B = r->B, .bases = r->bases, .abase = r->abase, .isa = cpu_isa(),
               .packs = (GemmPacked *)(work + r->L.packs), .pack_mem = (float *)(work + r->L.pack_mem),
               .th = (ExecThread *)(work + r->L.threads), .skip = -1, .host = {&t, team_kernel, team_barrier, NULL}};
  char *tb = work + r->L.threads + ((uint64_t)r->L.maxt * sizeof(ExecThread) + ALIGN - 1) / ALIGN * ALIGN;
  for (int i = 0; i < n; i++, tb += r->L.th_bytes) {
    char *q = tb;
    ExecThread *th = &t.e.th[i];
    th->bases = (float **)q, q += ((uint64_t)h->nslots * sizeof(float *) + ALIGN - 1) / ALIGN * ALIGN;
    th->tn.at = (float *)q, q += (r->L.at * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
    th->tn.bt = (float *)q, q += (r->L.bt * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
    th->tn.blk = (float *)q, q += (r->L.blk * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
    th->total = (double *)q;
  }
  exec_pack(&t.e, backward);
  pthread_t ids[EXEC_MAX_THREADS];
  Member mem[EXEC_MAX_THREADS];
  int started = 1;
  if (n > 1) {
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    for (; started < n; started++) {
      mem[started] = (Member){&t, started};
      if (pthread_create(&ids[started], NULL, member_main, &mem[started])) break;
    }
  }
  bool has_loop = h->phases[ET_FWD_STEP].n || h->phases[ET_BWD_STEP].n;
  int rows = r->B / (asked ? 1 : 8);
  t.e.nthreads = started;
  t.e.nloop = has_loop && rows < started ? (rows > 1 ? rows : 1) : started;
  if (started > 1) pthread_barrier_init(&t.bar, NULL, (unsigned)started);
  if (n > 1) {
    pthread_mutex_lock(&t.mu);
    t.go = 1;
    pthread_cond_broadcast(&t.cv);
    pthread_mutex_unlock(&t.mu);
  }
  exec_run(&t.e, backward, 0);
  for (int i = 1; i < started; i++) pthread_join(ids[i], NULL);
  if (started > 1) pthread_barrier_destroy(&t.bar);
  if (n > 1) pthread_mutex_destroy(&t.mu), pthread_cond_destroy(&t.cv);
}

/* The threads of a call: one without options (ABI 1: the code is single-threaded), else the
 * asked count or all cores, at most what the workspace serves. */
static int threads_of(const Run *r, const Options *opt, bool *asked) {
  int n = !opt ? 1 : opt->threads > 0 ? opt->threads : cores();
  *asked = opt && opt->threads > 0;
  return n < r->L.maxt ? n : r->L.maxt;
}

static void run_static(const Run *r, int kernel) {
  if (kernel >= 0) cellc_kernels[kernel](0, 1, r->bases);
}

/* ---- the noise of gumbel_sigmoid (train_noise): uniform in (0, 1), a function of the seed, the
 * stream and the element: splitmix64 of (seed ^ (stream + 1) * K) + index, its top 24 bits ---- */

static uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void draw_noise(const Run *r, uint64_t seed) {
  const EtArray *arr = AT(EtArray, TAB->arrays);
  for (int i = 0; i < TAB->narrays; i++) {
    if (arr[i].kind != ET_NOISE) continue;
    float *v = array_base(r, i);
    uint64_t base = seed ^ ((uint64_t)arr[i].index + 1) * 0xd1b54a32d192ed03ull, n = (uint64_t)r->rows * (uint64_t)arr[i].width;
    for (uint64_t j = 0; j < n; j++) v[j] = ((float)(splitmix64(base + j) >> 40) + 0.5f) / 16777216.0f;
  }
}

/* ---- the entry points ---- */

/* The options' check: 0 or a status. */
static int check_options(const Options *opt) {
  if (opt && opt->lengths) return E_LENGTHS; /* variable lengths: not in this build */
  if (opt && opt->threads < 0) return E_THREADS;
  return OK;
}

static int forward(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y, float *const *final,
                   void *work, uint64_t seed, const Options *opt) {
  const EtHeader *h = TAB;
  Run r;
  int rc = check_options(opt);
  if (!rc) rc = bind(&r, T, B, work, w, x, NULL, NULL);
  if (!rc && !y) rc = E_Y;
  if (rc) return rc;
  draw_noise(&r, seed);
  run_static(&r, h->kstatic_fwd);
  const EtStackCopy *sc = AT(EtStackCopy, h->stack);
  for (int i = 0; i < h->nstack; i++)
    memcpy(array_base(&r, sc[i].array) + sc[i].offset, r.bases[sc[i].src], sizeof(float) * (size_t)sc[i].numel);
  const EtStatePart *sp = AT(EtStatePart, h->sparts);
  for (int q = 0; q < h->nsparts; q++) {
    float *dst = array_base(&r, sp[q].arr);
    const float *src = h0 ? h0[sp[q].state] : NULL;
    int64_t n = (int64_t)B * sp[q].size, step = sp[q].cplx ? 2 : 1;
    for (int64_t j = 0; j < n; j++) dst[j] = src ? src[j * step + sp[q].part] : 0.0f;
  }
  bool asked;
  int n = threads_of(&r, opt, &asked);
  run_threads(&r, false, n, asked);
  const EtArray *ya = &AT(EtArray, h->arrays)[h->y_array];
  const float *ys = array_base(&r, h->y_array);
  for (int64_t row = 0; row < r.rows; row++) memcpy(y + row * h->output_size, ys + row * ya->width, sizeof(float) * (size_t)h->output_size);
  for (int q = 0; q < h->nsparts && final; q++) {
    float *dst = final[sp[q].state];
    if (!dst) continue;
    const float *src = array_base(&r, sp[q].arr) + (int64_t)T * B * sp[q].size;
    int64_t n = (int64_t)B * sp[q].size, step = sp[q].cplx ? 2 : 1;
    for (int64_t j = 0; j < n; j++) dst[j * step + sp[q].part] = src[j];
  }
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

/* The gradient of a param part into the caller's grad (interleaved when complex). */
static void write_grad(const Run *r, const EtParamPart *pp, float *const *grad) {
  float *dst = grad[pp->param];
  int step = pp->cplx ? 2 : 1;
  const float *src = pp->grad >= 0 ? r->bases[pp->grad] : NULL;
  for (int j = 0; j < pp->numel; j++) dst[j * step + pp->part] = src ? src[j] : pp->grad_k;
}

static int backward(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                    const float *const *dfinal, void *work, const Options *opt, float *const *grad, float *dx, float *const *dh0) {
  (void)h0; /* the forward kept what the backward reads */
  const EtHeader *h = TAB;
  Run r;
  int rc = check_options(opt);
  if (rc) return rc;
  if (T < 1 || B < 1) return E_TB;
  if (!work) return E_WORK;
  if (!x) return E_X;
  if (!dy) return E_DY;
  if (!grad) return E_GRAD;
  for (int i = 0; i < h->nparams; i++)
    if (!grad[i]) return E_GRAD;
  rc = bind(&r, T, B, work, w, x, dy, dx);
  if (rc) return rc;
  const EtArray *arr = AT(EtArray, h->arrays);
  for (int i = 0; i < h->narrays; i++)
    if (arr[i].zero_bwd) memset(array_base(&r, i), 0, sizeof(float) * (size_t)arr[i].fixed);
  const EtStatePart *sp = AT(EtStatePart, h->sparts);
  for (int q = 0; q < h->nsparts; q++) {
    float *dst = array_base(&r, sp[q].darr) + (int64_t)T * B * sp[q].size;
    const float *src = dfinal ? dfinal[sp[q].state] : NULL;
    int64_t n = (int64_t)B * sp[q].size, step = sp[q].cplx ? 2 : 1;
    for (int64_t j = 0; j < n; j++) dst[j] = src ? src[j * step + sp[q].part] : 0.0f;
  }
  bool asked;
  int n = threads_of(&r, opt, &asked);
  run_threads(&r, true, n, asked);
  run_static(&r, h->kstatic_bwd);
  const EtParamPart *pp = AT(EtParamPart, h->pparts);
  for (int i = 0; i < h->npparts; i++) write_grad(&r, &pp[i], grad);
  for (int q = 0; q < h->nsparts && dh0; q++) {
    float *dst = dh0[sp[q].state];
    if (!dst) continue;
    const float *src = h->scan ? (sp[q].gh0 >= 0 ? array_base(&r, sp[q].gh0) : NULL) : array_base(&r, sp[q].darr);
    int64_t n = (int64_t)B * sp[q].size, step = sp[q].cplx ? 2 : 1;
    for (int64_t j = 0; j < n; j++) dst[j * step + sp[q].part] = src ? src[j] : 0.0f;
  }
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
