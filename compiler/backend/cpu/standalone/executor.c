/* executor.c: the driver of an emitted cell (`cellc emit --target cpu`): runs the plan that
 * emit_cpu.c wrote as a table (plan_table.h) with the generated kernels, cblas for the products
 * and scan.h's scans, over the caller's buffers and workspace. The build compiles it to LLVM
 * bitcode (clang -emit-llvm) once; emit links it into each cell's module, renames the four entry
 * points below to P_forward, P_backward, P_workspace_bytes and P_strerror, and makes every other
 * symbol internal. No global state, no allocation, nothing printed: single-threaded code over what
 * the caller passes in. It includes only plan_table.h and scan.h (freestanding headers). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../../plan/plan_table.h"
#include "../scan.h"

/* cblas, declared here (the object links with -lopenblas) */
enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc);

typedef void (*KernelFn)(int64_t r0, int64_t r1, float **bases);

/* Defined in the cell's module at emit time. */
extern const unsigned char cellc_table[];
extern const KernelFn cellc_kernels[];

#define TAB ((const EtHeader *)cellc_table)
#define AT(type, off) ((const type *)(cellc_table + (off)))

enum {
  OK, E_TB, E_WORK, E_X, E_Y, E_DY, E_PARAM, E_GRAD, E_SIZE, E_TABLE, E_COUNT
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
};

const char *cellc_exec_strerror(int status) {
  if (status < 0 || status >= E_COUNT) return "unknown status";
  return messages[status];
}

/* ---- the workspace: the slot table, then every array the code owns, then the complex params'
 * planes, then dx's stand-in, each 64-byte aligned ---- */

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
  if (__builtin_mul_overflow(T, B, &rows) || __builtin_mul_overflow(rows, (uint64_t)a->rows, &x) ||
      __builtin_mul_overflow(B, (uint64_t)a->per_b, &y) || __builtin_add_overflow(x, y, out) ||
      __builtin_add_overflow(*out, (uint64_t)a->fixed, out))
    return -1;
  return 0;
}

/* The workspace's layout for T and B: the byte offset of each owned array (offs, may be NULL)
 * and of the planes and dx areas; the total in *total. 0 or E_SIZE. */
typedef struct Layout {
  uint64_t planes, gx, gh0, total;
} Layout;

static int layout(int T, int B, uint64_t *offs, Layout *L) {
  const EtHeader *h = TAB;
  const EtArray *arr = AT(EtArray, h->arrays);
  uint64_t total = 0;
  if (add_bytes(&total, ((uint64_t)h->nslots + (uint64_t)h->narrays) * 2)) return E_SIZE; /* a float * per slot and array */
  for (int i = 0; i < h->narrays; i++) {
    uint64_t f;
    if (arr[i].kind != ET_OWNED && arr[i].kind != ET_GH0 && arr[i].kind != ET_NOISE) continue;
    if (arr[i].kind == ET_GH0) f = (uint64_t)B * (uint64_t)arr[i].width;
    else if (owned_floats(&arr[i], (uint64_t)T, (uint64_t)B, &f)) return E_SIZE;
    if (offs) offs[i] = total;
    if (add_bytes(&total, f)) return E_SIZE;
  }
  L->planes = total;
  if (add_bytes(&total, (uint64_t)h->planes)) return E_SIZE;
  L->gx = total;
  uint64_t gx;
  if (__builtin_mul_overflow((uint64_t)T * (uint64_t)B, (uint64_t)h->x_size, &gx) || add_bytes(&total, gx)) return E_SIZE;
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

static int width_of(int slot) {
  return AT(EtArray, TAB->arrays)[AT(EtSlot, TAB->slots)[slot].array].width;
}

static float *row_ptr(const Run *r, int slot, int64_t row) { return r->bases[slot] + row * width_of(slot); }

/* ---- steps ---- */

static Coef coef(const Run *r, const EtCoef *c, int size) {
  (void)size;
  Coef k = {0};
  if (c->slot >= 0) k.base = r->bases[c->slot], k.ld = width_of(c->slot);
  else k.base = AT(float, TAB->floats) + c->fill; /* fill: a row of `size` constants */
  return k;
}

static void run_scan(const Run *r, const EtStep *st, bool reverse) {
  Coef a[2], b[2];
  for (int k = 0; k < (st->cplx ? 2 : 1); k++) a[k] = coef(r, &st->a[k], st->size), b[k] = coef(r, &st->b[k], st->size);
  float *S0 = array_base(r, st->arr0), *S1 = st->arr1 >= 0 ? array_base(r, st->arr1) : NULL;
  if (reverse) scan_reverse(r->rows, r->B, st->size, 0, r->B, 0, st->size, a, b, S0, S1);
  else scan_forward(r->rows, r->B, st->size, 0, r->B, 0, st->size, a, b, S0, S1);
}

static void run_step(const Run *r, const EtStep *st, int64_t r0, int64_t r1) {
  int n = (int)(r1 - r0);
  switch (st->kind) {
  case ET_ELEM: cellc_kernels[st->kernel](r0, r1, r->bases); break;
  case ET_GEMM: /* Y[rows, nO] (+)= V[rows, nI] M^T */
    if (n > 0)
      cblas_sgemm(RowMajor, NoTrans, Trans, n, st->nO, st->nI, 1.0f, row_ptr(r, st->v, r0), width_of(st->v), r->bases[st->m],
                  st->nI, st->accumulate ? 1.0f : 0.0f, row_ptr(r, st->y, r0), width_of(st->y));
    break;
  case ET_GEMM_T: /* Y[rows, nI] (+)= V[rows, nO] M */
    if (n > 0)
      cblas_sgemm(RowMajor, NoTrans, NoTrans, n, st->nI, st->nO, 1.0f, row_ptr(r, st->v, r0), width_of(st->v),
                  r->bases[st->m], st->nI, st->accumulate ? 1.0f : 0.0f, row_ptr(r, st->y, r0), width_of(st->y));
    break;
  case ET_OUTER_ACC: /* acc[nO, nI] += G^T V over all rows */
    cblas_sgemm(RowMajor, Trans, NoTrans, st->nO, st->nI, (int)r->rows, 1.0f, r->bases[st->m], width_of(st->m),
                r->bases[st->v], width_of(st->v), 1.0f, r->bases[st->y], st->nI);
    break;
  case ET_COLSUM: {
    float *acc = r->bases[st->dst];
    if (st->src < 0) {
      for (int j = 0; j < st->numel; j++) acc[j] += st->k * (float)r->rows;
      break;
    }
    for (int64_t row = 0; row < r->rows; row++) {
      const float *v = row_ptr(r, st->src, row);
      for (int j = 0; j < st->numel; j++) acc[j] += v[j];
    }
    break;
  }
  case ET_SCAN: run_scan(r, st, false); break;
  case ET_RSCAN: run_scan(r, st, true); break;
  case ET_COPY:
    for (int64_t row = r0; row < r1; row++) {
      float *dst = row_ptr(r, st->dst, row);
      if (st->src < 0)
        for (int j = 0; j < st->numel; j++) dst[j] = st->k;
      else memcpy(dst, row_ptr(r, st->src, row), sizeof(float) * (size_t)st->numel);
    }
    break;
  case ET_ZERO:
    for (int64_t row = r0; row < r1; row++) memset(row_ptr(r, st->dst, row), 0, sizeof(float) * (size_t)width_of(st->dst));
    break;
  }
}

static void run_phase(const Run *r, int which, int t) {
  const EtPhase *ph = &TAB->phases[which];
  const EtStep *steps = AT(EtStep, TAB->steps);
  int64_t r0 = 0, r1 = r->rows;
  if (ph->region == ET_REG_STEP) r0 = (int64_t)t * r->B, r1 = r0 + r->B;
  else if (ph->region == ET_REG_FIRST) r1 = r->B;
  for (int i = 0; i < ph->n; i++) run_step(r, &steps[ph->first + i], r0, r1);
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

static int forward(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y, float *const *final,
                   void *work, uint64_t seed) {
  const EtHeader *h = TAB;
  Run r;
  int rc = bind(&r, T, B, work, w, x, NULL, NULL);
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
  run_phase(&r, ET_FWD_PRE, 0);
  for (int t = 0; t < T && h->phases[ET_FWD_STEP].n; t++) run_phase(&r, ET_FWD_STEP, t);
  run_phase(&r, ET_FWD_POST, 0);
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
  return forward(w, T, B, x, h0, y, final, work, 0);
}

int cellc_exec_forward_seeded(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,
                              float *const *final, void *work, unsigned long long seed) {
  return forward(w, T, B, x, h0, y, final, work, seed);
}

/* The gradient of a param part into the caller's grad (interleaved when complex). */
static void write_grad(const Run *r, const EtParamPart *pp, float *const *grad) {
  float *dst = grad[pp->param];
  int step = pp->cplx ? 2 : 1;
  const float *src = pp->grad >= 0 ? r->bases[pp->grad] : NULL;
  for (int j = 0; j < pp->numel; j++) dst[j * step + pp->part] = src ? src[j] : pp->grad_k;
}

int cellc_exec_backward(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                        const float *const *dfinal, void *work, float *const *grad, float *dx, float *const *dh0) {
  (void)h0; /* the forward kept what the backward reads */
  const EtHeader *h = TAB;
  Run r;
  if (T < 1 || B < 1) return E_TB;
  if (!work) return E_WORK;
  if (!x) return E_X;
  if (!dy) return E_DY;
  if (!grad) return E_GRAD;
  for (int i = 0; i < h->nparams; i++)
    if (!grad[i]) return E_GRAD;
  int rc = bind(&r, T, B, work, w, x, dy, dx);
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
  run_phase(&r, ET_BWD_PRE, 0);
  for (int t = T - 1; t >= 0 && h->phases[ET_BWD_STEP].n; t--) run_phase(&r, ET_BWD_STEP, t);
  run_phase(&r, ET_BWD_POST, 0);
  run_phase(&r, ET_BWD_FIRST, 0);
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
