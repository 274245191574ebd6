/* cuda_backend.c: the CUDA back ends' host executor. Compiles a Program into a plan
 * (compiler/plan) and its CUDA C source (cg_cuda.c), compiles that with NVRTC (or the emulator's)
 * through the CudaApi table, and runs the plan's phases in order over whole sequences in float32,
 * as cpu.c does: GEMMs through cuBLAS, the chunked scans, the fused kernels, every buffer in device
 * memory. `cuda` opens the real libraries, `cuda-emu` the emulator: the code is the same. */
#include "cuda.h"

#include <string.h>
#include <time.h>

#include "cellc_launch.h"
#include "cg_cuda.h"
#include "cuda_api.h"
#include "cuda_dev.h"
#include "support.h"

/* ---- the device: one per kind (real, emulated) per process, shared by every compiled program ---- */

static CudaDev *devices[2]; /* [emulated] */

void cuda_dev_release(CudaDev *d) {
  if (!d || --d->refs > 0) return;
  d->api.cuCtxSetCurrent(d->ctx);
  if (d->blas) d->api.cublasDestroy(d->blas);
  d->api.cuDevicePrimaryCtxRelease(d->dev);
  cuda_api_close(&d->api);
  devices[d->emulated] = NULL;
  free(d);
}

/* The device of a kind, opened on first use: 0, or -1 with what is missing in err. */
CudaDev *cuda_dev_acquire(bool emulated, char *err, size_t errlen) {
  if (devices[emulated]) {
    devices[emulated]->refs++;
    return devices[emulated];
  }
  CudaDev *d = xcalloc(1, sizeof *d);
  d->emulated = emulated;
  d->refs = 1;
  char why[1024];
  if (emulated) cuda_api_open_emu(&d->api);
  else if (cuda_api_open_real(&d->api, why, sizeof why) != 0) {
    snprintf(err, errlen, "the cuda back end cannot run here: %s", why);
    free(d);
    return NULL;
  }
  devices[emulated] = d;
  if (cuda_open_device(&d->api, 0, &d->dev, why, sizeof why) != 0 ||
      CUDA_CU(&d->api, why, sizeof why, cuDevicePrimaryCtxRetain, &d->ctx, d->dev) != 0) {
    snprintf(err, errlen, "the %s back end cannot run here: %s", emulated ? "cuda-emu" : "cuda", why);
    cuda_api_close(&d->api);
    devices[emulated] = NULL;
    free(d);
    return NULL;
  }
  if (CUDA_CU(&d->api, why, sizeof why, cuCtxSetCurrent, d->ctx) != 0 ||
      CUDA_CUBLAS(&d->api, why, sizeof why, cublasCreate, &d->blas) != 0 ||
      (emulated ? (snprintf(d->arch, sizeof d->arch, "sm_90"), 0)
                : cuda_device_arch(&d->api, d->dev, d->arch, sizeof d->arch, why, sizeof why))) {
    snprintf(err, errlen, "the %s back end cannot run here: %s", emulated ? "cuda-emu" : "cuda", why);
    cuda_dev_release(d);
    return NULL;
  }
  return d;
}

/* ---- a compiled program ---- */

typedef struct CudaCell {
  Compiled base;
  CudaDev *d;
  Plan *pl;
  CgCudaInfo info;
  char *source;
  CUmodule mod;
  CUfunction *kfn;         /* per plan kernel */
  CUfunction kstatic[2];   /* static forward, backward (or NULL) */
  CUfunction kstep[2];     /* the persistent per-step kernels, forward and backward (or NULL) */
  CUfunction scan_chunks, scan_carry, scan_apply, copy, fill, add_const;
  int (*coef_off)[3];      /* per state part: a, b, g's row in the constant coefficients, or -1 */
  int nconst;              /* floats of constant coefficient rows */
} CudaCell;

/* The arrays of one sequence in flight, in device memory. */
typedef struct CudaWork {
  Work base;
  int T, B;
  int narr;
  CUdeviceptr *arr;        /* per plan array */
  bool *owned;
  size_t *size;
  CUdeviceptr *bases;      /* per slot: where row 0 of its values is */
  CUdeviceptr *uploaded;   /* the bases the device array holds */
  CUdeviceptr dbases;      /* the device array of bases */
  CUdeviceptr carry;       /* the scans' chunk carries */
  size_t carry_floats;
  CUdeviceptr ones;        /* rows of 1 (COLSUM as a GEMM) */
  size_t ones_floats;
  CUdeviceptr consts;      /* constant scan coefficients, filled once */
} CudaWork;

/* A failed CUDA call while running: the call and its error, exit 3 (the run failed). */
static void die(const CudaCell *c, const char *err) {
  fprintf(stderr, "cellc: the %s back end failed: %s\n", c->base.be->name, err);
  exit(3);
}

#define CU(c, fn, ...)                                                                      \
  do {                                                                                      \
    char e_[1024];                                                                          \
    if (CUDA_CU(&(c)->d->api, e_, sizeof e_, fn, __VA_ARGS__) != 0) die((c), e_);           \
  } while (0)
#define CUBLAS(c, fn, ...)                                                                  \
  do {                                                                                      \
    char e_[1024];                                                                          \
    if (CUDA_CUBLAS(&(c)->d->api, e_, sizeof e_, fn, __VA_ARGS__) != 0) die((c), e_);       \
  } while (0)

static void set_current(CudaCell *c) { CU(c, cuCtxSetCurrent, c->d->ctx); }

static CUdeviceptr dev_alloc(CudaCell *c, size_t bytes) {
  CUdeviceptr p;
  char e[1024];
  if (CUDA_CU(&c->d->api, e, sizeof e, cuMemAlloc, &p, bytes ? bytes : 4) != 0) {
    char m[1200];
    snprintf(m, sizeof m, "%s (asking for %zu bytes)", e, bytes);
    die(c, m);
  }
  return p;
}

static void dev_free(CudaCell *c, CUdeviceptr p) {
  if (p) CU(c, cuMemFree, p);
}

#define FBYTES(n) (sizeof(float) * (size_t)(n))

/* ---- launches ---- */

static void launch(CudaCell *c, CUfunction f, unsigned gx, unsigned gy, unsigned block, unsigned shared, void **params) {
  CU(c, cuLaunchKernel, f, gx, gy, 1, block, 1, 1, shared, NULL, params, NULL);
}

static void copy_rows(CudaCell *c, long long rows, int e, CUdeviceptr src, long long lds, CUdeviceptr dst, long long ldd) {
  if (rows <= 0 || e <= 0) return;
  void *args[] = {&rows, &e, &src, &lds, &dst, &ldd};
  launch(c, c->copy, cellc_blocks_for(rows * e, 256), 1, 256, 0, args);
}

static void fill_rows(CudaCell *c, long long rows, int e, float k, CUdeviceptr dst, long long ldd) {
  if (rows <= 0 || e <= 0) return;
  void *args[] = {&rows, &e, &k, &dst, &ldd};
  launch(c, c->fill, cellc_blocks_for(rows * e, 256), 1, 256, 0, args);
}

/* An elementwise kernel (or a static one) over rows [r0, r1): a warp a row (cellc_launch.h). */
static void launch_elem(CudaCell *c, CudaWork *w, CUfunction f, int tmp_floats, long long r0, long long r1) {
  long long rows = r1 - r0;
  if (rows <= 0) return;
  unsigned grid, block, shared;
  cellc_elem_shape(rows, tmp_floats, &grid, &block, &shared);
  void *args[] = {&r0, &r1, &w->dbases};
  launch(c, f, grid, 1, block, shared, args);
}

/* ---- arrays ---- */

/* The scans' chunk length (cellc_launch.h); CELLC_CUDA_SCAN_CHUNK overrides it. */
static int scan_chunk(int T, long long channels) {
  const char *env = getenv("CELLC_CUDA_SCAN_CHUNK");
  if (!env || atoi(env) <= 0) return cellc_scan_chunk(T, channels);
  long long L = atoi(env);
  if ((T + L - 1) / L > 65535) L = (T + 65534) / 65535; /* gridDim.y */
  return (int)L;
}

static void work_bind(CudaCell *c, CudaWork *w, const SeqIO *s) {
  Plan *pl = c->pl;
  Program *p = c->base.p;
  if (!w->arr) {
    w->arr = xcalloc((size_t)pl->narrays, sizeof(CUdeviceptr));
    w->owned = xcalloc((size_t)pl->narrays, sizeof(bool));
    w->size = xcalloc((size_t)pl->narrays, sizeof(size_t));
    w->bases = xcalloc((size_t)pl->nslots + 1, sizeof(CUdeviceptr));
    w->uploaded = xcalloc((size_t)pl->nslots + 1, sizeof(CUdeviceptr));
    w->dbases = dev_alloc(c, sizeof(CUdeviceptr) * ((size_t)pl->nslots + 1));
    w->narr = pl->narrays;
    w->uploaded[0] = 1; /* differs from any base: the first bind uploads */
    if (c->nconst) {
      w->consts = dev_alloc(c, FBYTES(c->nconst));
      for (int q = 0; q < p->nsparts; q++)
        for (int k = 0; k < 3; k++) {
          if (c->coef_off[q][k] < 0) continue;
          int id = k == 0 ? p->sparts[q].a : k == 1 ? p->sparts[q].b : p->sparts[q].g;
          float v = id < 0 ? 0.0f : (float)graph_node(&p->g, id)->k;
          fill_rows(c, 1, p->sparts[q].size, v, w->consts + FBYTES(c->coef_off[q][k]), 0);
        }
    }
  }
  w->T = s->T, w->B = s->B;
  for (int i = 0; i < pl->narrays; i++) {
    const PlanArray *a = &pl->arrays[i];
    const void *ext = NULL;
    switch (a->kind) {
    case ARR_PARAM: ext = s->params[a->index]; break;
    case ARR_X: ext = s->x; break;
    case ARR_DY: ext = s->dy; break;
    case ARR_NOISE: ext = s->noise[a->index]; break;
    case ARR_Y: ext = s->y; break;
    case ARR_GX: ext = s->grad_x; break;
    case ARR_GH0: ext = s->grad_h0[a->index]; break;
    case ARR_GATE: ext = s->gates ? s->gates[a->index] : NULL; break;
    default: break;
    }
    if (ext || a->kind == ARR_PARAM || a->kind == ARR_X || a->kind == ARR_DY || a->kind == ARR_Y || a->kind == ARR_GX ||
        a->kind == ARR_GH0 || a->kind == ARR_NOISE) {
      if (w->owned[i]) dev_free(c, w->arr[i]);
      w->owned[i] = false;
      w->arr[i] = (CUdeviceptr)(uintptr_t)ext;
      continue;
    }
    size_t need = plan_array_floats(a, s->T, s->B);
    if (!w->owned[i] || w->size[i] < need) {
      if (w->owned[i]) dev_free(c, w->arr[i]);
      w->arr[i] = dev_alloc(c, FBYTES(need));
      w->owned[i] = true;
      w->size[i] = need;
    }
  }
  bool changed = false;
  for (int i = 0; i < pl->nslots; i++) {
    const Slot *sl = &pl->slots[i];
    const PlanArray *a = &pl->arrays[sl->array];
    CUdeviceptr base = w->arr[sl->array];
    w->bases[i] = base ? base + FBYTES((size_t)sl->row_off * (size_t)s->B * (size_t)a->width + (size_t)sl->col) : 0;
    changed = changed || w->bases[i] != w->uploaded[i];
  }
  if (changed && pl->nslots) {
    CU(c, cuMemcpyHtoD, w->dbases, w->bases, sizeof(CUdeviceptr) * (size_t)pl->nslots);
    memcpy(w->uploaded, w->bases, sizeof(CUdeviceptr) * (size_t)pl->nslots);
  }
  /* the scans' carries and COLSUM's rows of ones, for this T and B */
  size_t rows = (size_t)s->T * (size_t)s->B, carry = 0;
  for (int q = 0; q < p->nsparts; q++) {
    long long ch = (long long)s->B * p->sparts[q].size;
    size_t need = (size_t)cellc_scan_carry_floats(s->T, scan_chunk(s->T, ch), ch);
    if (need > carry) carry = need;
  }
  if (pl->scan && carry > w->carry_floats) {
    dev_free(c, w->carry);
    w->carry = dev_alloc(c, FBYTES(carry));
    w->carry_floats = carry;
  }
  if (rows > w->ones_floats) {
    dev_free(c, w->ones);
    w->ones = dev_alloc(c, FBYTES(rows));
    w->ones_floats = rows;
    fill_rows(c, 1, (int)rows, 1.0f, w->ones, 0);
  }
}

/* ---- steps ---- */

static int width_of(CudaCell *c, int slot) { return c->pl->arrays[c->pl->slots[slot].array].width; }

static CUdeviceptr row_ptr(CudaCell *c, CudaWork *w, int slot, long long r) {
  return w->bases[slot] + FBYTES(r * width_of(c, slot));
}

/* PS_GEMM: Y[rows, nO] = V[rows, nI] M^T; PS_GEMM_T: Y[rows, nI] = G[rows, nO] M (M row-major
 * [nO, nI]). Row-major [rows, width] with row stride ld is column-major (width x rows), ld. */
static void run_gemm(CudaCell *c, CudaWork *w, const PStep *st, long long r0, long long r1) {
  GemmOperands op = plan_gemm_operands(c->pl, st);
  int hy = op.y, hv = op.v, hm = op.m, rows = (int)(r1 - r0), nO = op.nO, nI = op.nI;
  float one = 1.0f, beta = st->accumulate ? 1.0f : 0.0f;
  const float *M = (const float *)(uintptr_t)w->bases[hm], *V = (const float *)(uintptr_t)row_ptr(c, w, hv, r0);
  float *Y = (float *)(uintptr_t)row_ptr(c, w, hy, r0);
  if (st->kind == PS_GEMM)
    CUBLAS(c, cublasSgemm, c->d->blas, CUBLAS_OP_T, CUBLAS_OP_N, nO, rows, nI, &one, M, nI, V, width_of(c, hv), &beta, Y,
           width_of(c, hy));
  else
    CUBLAS(c, cublasSgemm, c->d->blas, CUBLAS_OP_N, CUBLAS_OP_N, nI, rows, nO, &one, M, nI, V, width_of(c, hv), &beta, Y,
           width_of(c, hy));
}

/* acc[bound][n0, n1] += G^T V over all rows: column-major acc^T (n1 x n0) += V^T G. */
static void run_outer_acc(CudaCell *c, CudaWork *w, const PStep *st, long long rows) {
  Node *o = graph_node(&c->base.p->g, st->node);
  int hG = c->pl->home[o->a[0]], hV = c->pl->home[o->a[1]];
  int hacc = c->pl->home[c->base.p->bounds[st->bound].acc];
  CHECK(hG >= 0 && hV >= 0 && hacc >= 0);
  float one = 1.0f;
  CUBLAS(c, cublasSgemm, c->d->blas, CUBLAS_OP_N, CUBLAS_OP_T, o->n[1], o->n[0], (int)rows, &one,
         (const float *)(uintptr_t)w->bases[hV], width_of(c, hV), (const float *)(uintptr_t)w->bases[hG], width_of(c, hG),
         &one, (float *)(uintptr_t)w->bases[hacc], o->n[1]);
}

/* acc[bound] += the sum over all rows of the node: (e x rows) times a column of ones. */
static void run_colsum(CudaCell *c, CudaWork *w, const PStep *st, long long rows) {
  Graph *g = &c->base.p->g;
  Node *n = graph_node(g, st->node);
  int h = c->pl->home[st->node], hacc = c->pl->home[c->base.p->bounds[st->bound].acc];
  int e = node_numel(n);
  CUdeviceptr acc = w->bases[hacc];
  if (h < 0) { /* a constant adjoint */
    CHECK(n->op == OP_CONST);
    float k = (float)n->k * (float)rows;
    void *args[] = {&e, &k, &acc};
    launch(c, c->add_const, cellc_blocks_for(e, 256), 1, 256, 0, args);
    return;
  }
  float one = 1.0f;
  CUBLAS(c, cublasSgemm, c->d->blas, CUBLAS_OP_N, CUBLAS_OP_N, e, 1, (int)rows, &one, (const float *)(uintptr_t)w->bases[h],
         width_of(c, h), (const float *)(uintptr_t)w->ones, (int)rows, &one, (float *)(uintptr_t)acc, e);
}

/* A coefficient of a scan: its array and row stride, or its constant row (stride 0). */
static void coef_of(CudaCell *c, CudaWork *w, int q, int k, unsigned long long *ptr, long long *ld) {
  Program *p = c->base.p;
  if (c->coef_off[q][k] >= 0) {
    *ptr = w->consts + FBYTES(c->coef_off[q][k]);
    *ld = 0;
    return;
  }
  int id = k == 0 ? p->sparts[q].a : k == 1 ? p->sparts[q].b : p->sparts[q].g;
  int h = c->pl->home[id];
  CHECK(h >= 0);
  *ptr = w->bases[h];
  *ld = width_of(c, h);
}

/* The chunked scan of a state over all rows (cg_cuda.c's cellc_scan_*): chunks, carries, apply. */
static void run_scan(CudaCell *c, CudaWork *w, int state, bool reverse) {
  Program *p = c->base.p;
  int q = p->spart_of[state];
  bool cplx = p->sparts[q].cplx;
  CgCudaScan s = {0};
  s.T = w->T, s.B = w->B, s.size = p->sparts[q].size, s.cplx = cplx, s.reverse = reverse;
  long long ch = (long long)s.B * s.size;
  s.L = scan_chunk(w->T, ch);
  s.nchunks = (int)((w->T + s.L - 1) / s.L);
  coef_of(c, w, q, 0, &s.a0, &s.lda0);
  coef_of(c, w, q, reverse ? 2 : 1, &s.b0, &s.ldb0);
  if (cplx) {
    coef_of(c, w, q + 1, 0, &s.a1, &s.lda1);
    coef_of(c, w, q + 1, reverse ? 2 : 1, &s.b1, &s.ldb1);
  }
  const int *arr = reverse ? c->pl->dstate_array : c->pl->state_array;
  s.s0 = w->arr[arr[q]];
  s.s1 = cplx ? w->arr[arr[q + 1]] : 0;
  s.carry = w->carry;
  unsigned block, gx;
  cellc_scan_shape(ch, &gx, &block);
  void *args[] = {&s};
  launch(c, c->scan_chunks, gx, (unsigned)s.nchunks, block, 0, args);
  launch(c, c->scan_carry, gx, 1, block, 0, args);
  launch(c, c->scan_apply, gx, (unsigned)s.nchunks, block, 0, args);
}

/* The node's values (or its constant) copied to slot `dst` over rows [r0, r1). */
static void run_copy(CudaCell *c, CudaWork *w, const PStep *st, long long r0, long long r1) {
  Node *n = graph_node(&c->base.p->g, st->node);
  int e = node_numel(n), h = c->pl->home[st->node];
  if (h < 0) {
    CHECK(n->op == OP_CONST);
    fill_rows(c, r1 - r0, e, (float)n->k, row_ptr(c, w, st->dst, r0), width_of(c, st->dst));
  } else
    copy_rows(c, r1 - r0, e, row_ptr(c, w, h, r0), width_of(c, h), row_ptr(c, w, st->dst, r0), width_of(c, st->dst));
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_step(CudaCell *c, CudaWork *w, const PStep *st, Region region, long long r0, long long r1) {
  long long rows = (long long)w->T * w->B;
  bool all = region == REG_ALL;
  switch (st->kind) {
  case PS_ELEM: launch_elem(c, w, c->kfn[st->kernel], c->info.tmp_floats[st->kernel], r0, r1); break;
  case PS_GEMM:
  case PS_GEMM_T:
    if (r1 > r0) run_gemm(c, w, st, r0, r1);
    break;
  case PS_SCAN:
  case PS_RSCAN: CHECK(all); run_scan(c, w, st->state, st->kind == PS_RSCAN); break;
  case PS_OUTER_ACC: CHECK(all); run_outer_acc(c, w, st, rows); break;
  case PS_COLSUM: CHECK(all); run_colsum(c, w, st, rows); break;
  case PS_COPY: run_copy(c, w, st, r0, r1); break;
  case PS_ZERO: fill_rows(c, r1 - r0, width_of(c, st->dst), 0.0f, row_ptr(c, w, st->dst, r0), width_of(c, st->dst)); break;
  default: UNREACHABLE("plan step");
  }
}

static void profile_add(CudaWork *w, const PStep *st, double s) {
  Profile *pr = &w->base.prof;
  switch (st->kind) {
  case PS_ELEM: pr->elem_s += s; break;
  case PS_GEMM: case PS_GEMM_T: case PS_OUTER_ACC: pr->gemm_s += s; break;
  case PS_SCAN: pr->scan_s += s; break;
  case PS_RSCAN: pr->rscan_s += s; break;
  default: pr->other_s += s; break;
  }
}

/* A phase: the rows of step t (REG_STEP), of the first step (REG_FIRST), or all rows. Profiling
 * synchronizes after every step. */
static void run_phase(CudaCell *c, CudaWork *w, const Phase *ph, int t) {
  long long r0 = 0, r1 = (long long)w->T * w->B;
  if (ph->region == REG_STEP) r0 = (long long)t * w->B, r1 = r0 + w->B;
  else if (ph->region == REG_FIRST) r1 = w->B;
  for (int i = 0; i < ph->n; i++) {
    double t0 = w->base.profiling ? now_s() : 0;
    run_step(c, w, &ph->steps[i], ph->region, r0, r1);
    if (w->base.profiling) {
      CU(c, cuCtxSynchronize);
      profile_add(w, &ph->steps[i], now_s() - t0);
    }
  }
}

/* A per-step phase over all T steps: the persistent kernel (a block a batch row), or, with
 * CELLC_CUDA_PERSISTENT=0, the plan's steps launched step by step. */
static void run_steps(CudaCell *c, CudaWork *w, int which) {
  const Phase *ph = which ? &c->pl->bwd_step : &c->pl->fwd_step;
  const char *pe = getenv("CELLC_CUDA_PERSISTENT");
  if (!ph->n) return;
  if (c->kstep[which] && !(pe && !strcmp(pe, "0"))) {
    long long T = w->T;
    int B = w->B;
    void *args[] = {&T, &B, &w->dbases};
    double t0 = w->base.profiling ? now_s() : 0;
    launch(c, c->kstep[which], (unsigned)B, 1, 32 * CELLC_WARPS, (unsigned)FBYTES(c->info.step_tmp[which]), args);
    if (w->base.profiling) {
      CU(c, cuCtxSynchronize);
      w->base.prof.elem_s += now_s() - t0;
    }
    return;
  }
  if (!which)
    for (int t = 0; t < w->T; t++) run_phase(c, w, ph, t);
  else
    for (int t = w->T - 1; t >= 0; t--) run_phase(c, w, ph, t);
}

static void run_static(CudaCell *c, CudaWork *w, int which) {
  if (c->info.has_static[which]) launch_elem(c, w, c->kstatic[which], c->info.static_tmp[which], 0, 1);
}

static void dtod(CudaCell *c, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  if (bytes) CU(c, cuMemcpyDtoD, dst, src, bytes);
}

#define DEV(p) ((CUdeviceptr)(uintptr_t)(p))

static void cuda_forward(Compiled *cc, Work *ww, const SeqIO *s) {
  CudaCell *c = (CudaCell *)cc;
  CudaWork *w = (CudaWork *)ww;
  Program *p = c->base.p;
  Plan *pl = c->pl;
  CHECK(s->dtype == DT_F32);
  set_current(c);
  work_bind(c, w, s);
  run_static(c, w, 0);
  for (int i = 0; i < pl->narrays; i++) {
    if (pl->arrays[i].kind != ARR_STACK) continue;
    CUdeviceptr dst = w->arr[i];
    int st = pl->arrays[i].index;
    for (int m = 0; m < pl->nstack[st]; m++) {
      int mat = pl->stacks[st][m];
      size_t e = (size_t)node_numel(graph_node(&p->g, mat));
      dtod(c, dst, w->bases[pl->home[mat]], FBYTES(e));
      dst += FBYTES(e);
    }
  }
  for (int q = 0; q < p->nsparts; q++)
    dtod(c, w->arr[pl->state_array[q]], DEV(s->h0[q]), FBYTES((size_t)s->B * (size_t)p->sparts[q].size));
  run_phase(c, w, &pl->fwd_pre, 0);
  run_steps(c, w, 0);
  run_phase(c, w, &pl->fwd_post, 0);
  for (int q = 0; q < p->nsparts; q++) {
    size_t sz = (size_t)s->B * (size_t)p->sparts[q].size;
    dtod(c, DEV(s->final[q]), w->arr[pl->state_array[q]] + FBYTES((size_t)s->T * sz), FBYTES(sz));
  }
  CU(c, cuCtxSynchronize);
}

static void cuda_backward(Compiled *cc, Work *ww, const SeqIO *s) {
  CudaCell *c = (CudaCell *)cc;
  CudaWork *w = (CudaWork *)ww;
  Program *p = c->base.p;
  Plan *pl = c->pl;
  CHECK(s->dtype == DT_F32);
  CHECK(w->T == s->T && w->B == s->B);
  set_current(c);
  work_bind(c, w, s);
  for (int i = 0; i < pl->narrays; i++)
    if (pl->arrays[i].kind == ARR_ACC && pl->arrays[i].numel) CU(c, cuMemsetD32, w->arr[i], 0, (size_t)pl->arrays[i].numel);
  for (int q = 0; q < p->nsparts; q++) {
    size_t sz = (size_t)s->B * (size_t)p->sparts[q].size;
    dtod(c, w->arr[pl->dstate_array[q]] + FBYTES((size_t)s->T * sz), DEV(s->dfinal[q]), FBYTES(sz));
  }
  run_phase(c, w, &pl->bwd_pre, 0);
  run_steps(c, w, 1);
  run_phase(c, w, &pl->bwd_post, 0);
  run_phase(c, w, &pl->bwd_first, 0);
  run_static(c, w, 1);
  for (int i = 0; i < p->npparts; i++) {
    size_t e = (size_t)p->pparts[i].numel;
    int grad = p->pparts[i].grad;
    if (!e) continue;
    if (grad < 0) CU(c, cuMemsetD32, DEV(s->grad_params[i]), 0, e);
    else if (pl->home[grad] >= 0) dtod(c, DEV(s->grad_params[i]), w->bases[pl->home[grad]], FBYTES(e));
    else {
      Node *n = graph_node(&p->g, grad);
      CHECK(n->op == OP_CONST);
      fill_rows(c, 1, (int)e, (float)n->k, DEV(s->grad_params[i]), 0);
    }
  }
  if (!pl->scan)
    for (int q = 0; q < p->nsparts; q++)
      dtod(c, DEV(s->grad_h0[q]), w->arr[pl->dstate_array[q]], FBYTES((size_t)s->B * (size_t)p->sparts[q].size));
  CU(c, cuCtxSynchronize);
}

/* h_0 .. h_T of a state part into host memory: its state array, [(T + 1) B, size]. */
static int cuda_read_steps(Compiled *cc, Work *ww, StepArray what, int part, void *out) {
  CudaCell *c = (CudaCell *)cc;
  CudaWork *w = (CudaWork *)ww;
  Program *p = c->base.p;
  if (what != STEPS_STATE) return -1;
  CHECK(part >= 0 && part < p->nsparts && w->arr);
  set_current(c);
  size_t n = ((size_t)w->T + 1) * (size_t)w->B * (size_t)p->sparts[part].size;
  CHECK(c->pl->arrays[c->pl->state_array[part]].width == p->sparts[part].size);
  CU(c, cuMemcpyDtoH, out, w->arr[c->pl->state_array[part]], FBYTES(n));
  return 0;
}

/* ---- memory for SeqIO ---- */

static void *cuda_mem_alloc(Compiled *cc, size_t bytes) {
  CudaCell *c = (CudaCell *)cc;
  set_current(c);
  return (void *)(uintptr_t)dev_alloc(c, bytes);
}

static void cuda_mem_free(Compiled *cc, void *ptr) {
  CudaCell *c = (CudaCell *)cc;
  set_current(c);
  dev_free(c, DEV(ptr));
}

static void cuda_mem_upload(Compiled *cc, void *dst, const void *src, size_t bytes) {
  CudaCell *c = (CudaCell *)cc;
  set_current(c);
  if (bytes) CU(c, cuMemcpyHtoD, DEV(dst), src, bytes);
}

static void cuda_mem_download(Compiled *cc, void *dst, const void *src, size_t bytes) {
  CudaCell *c = (CudaCell *)cc;
  set_current(c);
  if (bytes) CU(c, cuMemcpyDtoH, dst, DEV(src), bytes);
}

/* ---- the interface ---- */

static const char *cuda_supports(const Program *p, const BackendOptions *o) {
  (void)p, (void)o; /* every program, in either mode, float32 (or a compile-time message) */
  return NULL;
}

static void cuda_free(Compiled *cc) {
  CudaCell *c = (CudaCell *)cc;
  if (!c) return;
  if (c->d) {
    c->d->api.cuCtxSetCurrent(c->d->ctx);
    if (c->mod) c->d->api.cuModuleUnload(c->mod);
    cuda_dev_release(c->d);
  }
  if (c->pl) plan_free(c->pl);
  cg_cuda_info_free(&c->info);
  free(c->kfn);
  free(c->coef_off);
  free(c->source);
  free(c);
}

static int get_function(CudaCell *c, CUfunction *f, const char *name, char *err, size_t errlen) {
  return CUDA_CU(&c->d->api, err, errlen, cuModuleGetFunction, f, c->mod, name);
}

static Compiled *compile_on(bool emulated, const Backend *be, Program *p, const BackendOptions *o, char *err, size_t errlen) {
  CHECK(p->differentiated && (!o->scan || p->scan_form));
  CudaCell *c = xcalloc(1, sizeof *c);
  c->base.be = be, c->base.p = p, c->base.opt = *o;
  c->d = cuda_dev_acquire(emulated, err, errlen);
  if (!c->d) {
    free(c);
    return NULL;
  }
  c->pl = plan_new(p, &(PlanOptions){.scan = o->scan, .gates = o->gates});
  char why[8192];
  c->source = cg_cuda_source(c->pl, &c->info, why, sizeof why);
  if (!c->source) {
    snprintf(err, errlen, "the %s back end: %s", be->name, why);
    cuda_free(&c->base);
    return NULL;
  }
  /* the constant coefficients of the scans: one row each */
  c->coef_off = xcalloc((size_t)p->nsparts + 1, sizeof *c->coef_off);
  for (int q = 0; q < p->nsparts; q++)
    for (int k = 0; k < 3; k++) {
      int id = k == 0 ? p->sparts[q].a : k == 1 ? p->sparts[q].b : p->sparts[q].g;
      c->coef_off[q][k] = -1;
      if (id < 0 || graph_node(&p->g, id)->op == OP_CONST) {
        c->coef_off[q][k] = c->nconst;
        c->nconst += p->sparts[q].size;
      }
    }
  CudaImage img;
  CudaImageKind kind = emulated ? CUDA_IMAGE_PTX : CUDA_IMAGE_CUBIN;
  int rc = cuda_compile(&c->d->api, c->source, c->d->arch, kind, NULL, 0, &img, why, sizeof why);
  if (rc == 0) {
    rc = CUDA_CU(&c->d->api, why, sizeof why, cuCtxSetCurrent, c->d->ctx);
    if (rc == 0) rc = CUDA_CU(&c->d->api, why, sizeof why, cuModuleLoadData, &c->mod, img.data);
    cuda_image_free(&img);
  }
  c->kfn = xcalloc((size_t)c->pl->nkernels + 1, sizeof(CUfunction));
  for (int k = 0; k < c->pl->nkernels && rc == 0; k++) {
    char name[32];
    snprintf(name, sizeof name, "k%d", k);
    rc = get_function(c, &c->kfn[k], name, why, sizeof why);
  }
  for (int i = 0; i < 2 && rc == 0; i++)
    if (c->info.has_static[i]) rc = get_function(c, &c->kstatic[i], i ? "kstatic_bwd" : "kstatic_fwd", why, sizeof why);
  for (int i = 0; i < 2 && rc == 0; i++)
    if (c->info.has_step[i]) rc = get_function(c, &c->kstep[i], i ? "kstep_bwd" : "kstep_fwd", why, sizeof why);
  if (rc == 0) rc = get_function(c, &c->scan_chunks, "cellc_scan_chunks", why, sizeof why);
  if (rc == 0) rc = get_function(c, &c->scan_carry, "cellc_scan_carry", why, sizeof why);
  if (rc == 0) rc = get_function(c, &c->scan_apply, "cellc_scan_apply", why, sizeof why);
  if (rc == 0) rc = get_function(c, &c->copy, "cellc_copy", why, sizeof why);
  if (rc == 0) rc = get_function(c, &c->fill, "cellc_fill", why, sizeof why);
  if (rc == 0) rc = get_function(c, &c->add_const, "cellc_add_const", why, sizeof why);
  if (rc != 0) {
    snprintf(err, errlen, "the %s back end: %s", be->name, why);
    cuda_free(&c->base);
    return NULL;
  }
  return &c->base;
}

static Compiled *cuda_compile_real(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  return compile_on(false, &cuda_backend, p, o, err, errlen);
}

static Compiled *cuda_compile_emu(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  return compile_on(true, &cuda_emu_backend, p, o, err, errlen);
}

const char *cuda_compiled_source(const Compiled *c) {
  if (!c || (c->be != &cuda_backend && c->be != &cuda_emu_backend)) return NULL;
  return ((const CudaCell *)c)->source;
}

static Work *cuda_work_new(Compiled *c) {
  CudaWork *w = xcalloc(1, sizeof *w);
  work_init(&w->base, c);
  return &w->base;
}

/* The work's device arrays go with the compiled program's context: work_free needs it current,
 * which the last forward or backward left it (one thread drives a back end). */
static void cuda_work_free(Work *ww) {
  CudaWork *w = (CudaWork *)ww;
  if (!w) return;
  const CudaDev *d = devices[w->base.be == &cuda_emu_backend];
  work_profile_report(&w->base);
  if (d) {
    d->api.cuCtxSetCurrent(d->ctx);
    for (int i = 0; i < w->narr; i++)
      if (w->owned[i]) d->api.cuMemFree(w->arr[i]);
    CUdeviceptr extra[] = {w->dbases, w->carry, w->ones, w->consts};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
      if (extra[i]) d->api.cuMemFree(extra[i]);
  }
  free(w->arr);
  free(w->owned);
  free(w->size);
  free(w->bases);
  free(w->uploaded);
  free(w);
}

/* The two back ends differ only in the CudaApi their compile opens: the real libraries or the
 * emulator. */
#define CUDA_BACKEND(label, compile_fn, ops_fn)                                                           \
  {                                                                                                \
    .name = label, .dtype = DT_F32, .scans = true, .device_memory = true, .supports = cuda_supports, \
    .compile = compile_fn, .free = cuda_free, .work_new = cuda_work_new, .work_free = cuda_work_free, \
    .forward = cuda_forward, .backward = cuda_backward, .read_steps = cuda_read_steps,               \
    .mem_alloc = cuda_mem_alloc, .mem_free = cuda_mem_free, .mem_upload = cuda_mem_upload,          \
    .mem_download = cuda_mem_download, .emit = cuda_emit, .ops_new = ops_fn                       \
  }

const Backend cuda_backend = CUDA_BACKEND("cuda", cuda_compile_real, cuda_ops_new_real);
const Backend cuda_emu_backend = CUDA_BACKEND("cuda-emu", cuda_compile_emu, cuda_ops_new_emu);
