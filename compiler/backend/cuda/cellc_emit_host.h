/* cellc_emit_host.h: the host side of every P.cu that `cellc emit --target cuda` writes (cuda_emit.c
 * embeds this text, then the cell's plan as constant tables of these types). It runs a plan as the
 * CUDA back end's executor (cuda_backend.c) does, step for step and with the same launch shapes,
 * (cellc_launch.h, pasted before this text) through the CUDA runtime API and cuBLAS on the caller's stream, every array in the caller's
 * workspace. Everything is static: several emitted cells link into one program.
 *
 * With CELLC_EMIT_HOST_ONLY defined this part compiles alone (as C++) and names each kernel by its
 * name instead of its address: the tests run it on cuda-emu through a small runtime-API shim. */
#ifdef CELLC_EMIT_HOST_ONLY
#include <cuda_runtime_api.h>
#define CELLC_E_KFN(sym, name) ((const void *)#name)
#else
#include <cuda_runtime.h>
#define CELLC_E_KFN(sym, name) ((const void *)&sym)
#endif
#include <cublas_v2.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Statuses (P_strerror). */
enum { CELLC_E_OK, CELLC_E_SIZE, CELLC_E_NULL, CELLC_E_OVERFLOW, CELLC_E_CUDA, CELLC_E_CUBLAS };

static const char *cellc_e_strerror(int status) {
  switch (status) {
  case CELLC_E_OK: return "success";
  case CELLC_E_SIZE: return "T and B must be at least 1";
  case CELLC_E_NULL: return "a required pointer is NULL (w or one of its members, x, y, work; dy and grad in backward)";
  case CELLC_E_OVERFLOW: return "T * B is too large: a size overflows";
  case CELLC_E_CUDA: return "a CUDA runtime call failed (a kernel launch, a copy or a memset)";
  case CELLC_E_CUBLAS: return "cuBLAS failed (creating the handle, or a GEMM)";
  default: return "unknown status";
  }
}

/* Where an array is: in the workspace (OWN, (a T + b) B + c floats), or the caller's. */
enum { CELLC_E_OWN, CELLC_E_PARAM, CELLC_E_X, CELLC_E_DY, CELLC_E_Y, CELLC_E_GX };
/* Step kinds, as the plan's (plan.h PStepKind), and regions. */
enum { CELLC_E_ELEM, CELLC_E_GEMM, CELLC_E_GEMM_T, CELLC_E_OUTER_ACC, CELLC_E_COLSUM, CELLC_E_SCAN, CELLC_E_RSCAN,
       CELLC_E_COPY, CELLC_E_ZERO };
enum { CELLC_E_ALL, CELLC_E_STEP, CELLC_E_FIRST };
/* The phases, in the order the plan runs them. */
enum { CELLC_E_FWD_PRE, CELLC_E_FWD_STEP, CELLC_E_FWD_POST, CELLC_E_BWD_PRE, CELLC_E_BWD_STEP, CELLC_E_BWD_POST,
       CELLC_E_BWD_FIRST };

typedef struct CellcEArray {
  int where, index;        /* CELLC_E_PARAM: the caller's param `index` */
  int width;               /* row stride in floats */
  long long a, b, c;       /* floats in the workspace: (a T + b) B + c (GX: when dx is NULL) */
  long long zero;          /* floats zeroed before the backward (the sums over rows) */
} CellcEArray;

typedef struct CellcESlot {
  int array, row_off, col; /* row r at array + (r + row_off B) width + col */
} CellcESlot;

/* ELEM: i0 kernel, i1 its temporaries (floats a row). GEMM, GEMM_T: i0..i4 slots y, v, m, nO, nI,
 * i5 accumulate. OUTER_ACC: slots G, V, acc, n0, n1. COLSUM: slot (or -1: the constant k), acc
 * slot, elements. SCAN, RSCAN: i0 the state part. COPY: slot (or -1: k), elements, dst slot.
 * ZERO: dst slot. */
typedef struct CellcEStep {
  int kind, i[6];
  float k;
} CellcEStep;

typedef struct CellcEPhase {
  int region, first, n;    /* steps [first, first + n) */
} CellcEPhase;

typedef struct CellcEStack {
  int array, slot;         /* the matrix in `slot` copied into the stacked array at float `at` */
  long long at, numel;
} CellcEStack;

typedef struct CellcEPart {  /* a state part */
  int size, array, darray; /* its state array and its backward array (dstate or dtotal) */
  int dh0;                 /* where dL/dh0 is: an array (rows [0, B)), or -1 (zero) */
  int coef[3];             /* a, b, g as a constant row at this offset of the constants, or -1 */
  float cval[3];
  int cslot[3];            /* else their slot */
} CellcEPart;

typedef struct CellcEUser {  /* a param or a state of the C API */
  int part0, cplx;         /* first part; complex: parts part0 and part0 + 1 */
  long long numel;         /* param: elements (a part's); state: size (a part's) */
  int array[2];            /* param: a complex one's planes in the workspace (or -1) */
  int gslot[2];            /* param: its gradient's slot per part, or -1: the constant gk */
  float gk[2];
} CellcEUser;

typedef struct CellcEPlan {
  int narrays, nslots, nstacks, nparts, nparams, nstates, nconst, scan;
  const CellcEArray *arrays;
  const CellcESlot *slots;
  const CellcEStep *steps;
  CellcEPhase phases[7];
  const CellcEStack *stacks;
  const CellcEPart *parts;
  const CellcEUser *params, *states;
  int static_tmp[2], step_tmp[2];
  /* the kernels: plan kernel i, the static ones and the persistent step ones (NULL when absent) */
  const void *const *k;
  const void *kstatic[2], *kstep[2];
  const void *scan_chunks, *scan_carry, *scan_apply, *copy, *fill, *add_const, *unpack, *pack;
} CellcEPlan;

/* One call in flight: the plan, the caller's stream, the arrays' device addresses. */
typedef struct CellcERun {
  const CellcEPlan *pl;
  cudaStream_t s;
  cublasHandle_t h;
  int T, B, status;
  unsigned long long *arr; /* per array */
  unsigned long long *bases; /* per slot: where row 0 of its values is */
  unsigned long long dbases, consts, carry, ones;
} CellcERun;

/* The workspace's layout: a region per owned array, then the bases, the constants, the scans'
 * carries and the rows of ones; each 256-byte aligned. */
typedef struct CellcELayout {
  unsigned long long *off; /* per array (OWN, and GX's fallback) */
  unsigned long long bases, consts, carry, ones, total;
} CellcELayout;

/* Reserve `floats` floats: their offset, or sets *bad on overflow. */
static unsigned long long cellc_e_take(unsigned long long *total, unsigned long long floats, int *bad) {
  unsigned long long at = *total, bytes;
  if (__builtin_mul_overflow(floats, 4ull, &bytes) || __builtin_add_overflow(at, bytes, total) ||
      __builtin_add_overflow(*total, 255ull, total))
    *bad = 1;
  *total &= ~255ull;
  return at;
}

/* floats = (a T + b) B + c; sets *bad on overflow. */
static unsigned long long cellc_e_floats(long long a, long long b, long long c, int T, int B, int *bad) {
  unsigned long long v;
  if (__builtin_mul_overflow((unsigned long long)a, (unsigned long long)T, &v) || __builtin_add_overflow(v, (unsigned long long)b, &v) ||
      __builtin_mul_overflow(v, (unsigned long long)B, &v) || __builtin_add_overflow(v, (unsigned long long)c, &v))
    *bad = 1;
  return v;
}

/* The layout for T, B: 0, or CELLC_E_SIZE / CELLC_E_OVERFLOW. total counts 256 bytes of slack for
 * a workspace of any alignment. */
static int cellc_e_layout(const CellcEPlan *pl, int T, int B, CellcELayout *L) {
  if (T < 1 || B < 1) return CELLC_E_SIZE;
  int bad = (long long)T * B > INT_MAX;
  L->total = 0;
  for (int i = 0; i < pl->narrays; i++) {
    const CellcEArray *a = &pl->arrays[i];
    L->off[i] = (a->where == CELLC_E_OWN || a->where == CELLC_E_GX)
                    ? cellc_e_take(&L->total, cellc_e_floats(a->a, a->b, a->c, T, B, &bad), &bad)
                    : 0;
  }
  L->bases = cellc_e_take(&L->total, 2ull * ((unsigned long long)pl->nslots + 1), &bad);
  L->consts = cellc_e_take(&L->total, (unsigned long long)pl->nconst + 1, &bad);
  unsigned long long carry = 1;
  for (int q = 0; pl->scan && q < pl->nparts; q++) {
    long long ch = (long long)B * pl->parts[q].size;
    unsigned long long need = cellc_scan_carry_floats(T, cellc_scan_chunk(T, ch), ch);
    if (need > carry) carry = need;
  }
  L->carry = cellc_e_take(&L->total, carry, &bad);
  L->ones = cellc_e_take(&L->total, cellc_e_floats(1, 0, 0, T, B, &bad), &bad);
  if (__builtin_add_overflow(L->total, 256ull, &L->total)) bad = 1;
  return bad ? CELLC_E_OVERFLOW : CELLC_E_OK;
}

/* ---- launches (each does nothing once the call has failed) ---- */

static void cellc_e_launch(CellcERun *r, const void *f, unsigned gx, unsigned gy, unsigned block, size_t shared, void **args) {
  if (r->status) return;
  dim3 g, b;
  g.x = gx, g.y = gy, g.z = 1;
  b.x = block, b.y = 1, b.z = 1;
  if (cudaLaunchKernel(f, g, b, args, shared, r->s) != cudaSuccess) r->status = CELLC_E_CUDA;
}

static void cellc_e_copy_rows(CellcERun *r, long long rows, int e, unsigned long long src, long long lds,
                              unsigned long long dst, long long ldd) {
  if (rows <= 0 || e <= 0) return;
  void *args[] = {&rows, &e, &src, &lds, &dst, &ldd};
  cellc_e_launch(r, r->pl->copy, cellc_blocks_for(rows * e, 256), 1, 256, 0, args);
}

static void cellc_e_fill_rows(CellcERun *r, long long rows, int e, float k, unsigned long long dst, long long ldd) {
  if (rows <= 0 || e <= 0) return;
  void *args[] = {&rows, &e, &k, &dst, &ldd};
  cellc_e_launch(r, r->pl->fill, cellc_blocks_for(rows * e, 256), 1, 256, 0, args);
}

static void cellc_e_unpack(CellcERun *r, long long n, const float *src, int stride, unsigned long long re, unsigned long long im) {
  if (n <= 0) return;
  void *args[] = {&n, &src, &stride, &re, &im};
  cellc_e_launch(r, r->pl->unpack, cellc_blocks_for(n, 256), 1, 256, 0, args);
}

static void cellc_e_pack(CellcERun *r, long long n, unsigned long long re, float kre, unsigned long long im, float kim, int stride,
                         float *dst) {
  if (n <= 0 || !dst) return;
  void *args[] = {&n, &re, &kre, &im, &kim, &stride, &dst};
  cellc_e_launch(r, r->pl->pack, cellc_blocks_for(n, 256), 1, 256, 0, args);
}

/* An elementwise kernel over rows [r0, r1): a warp a row (cellc_launch.h). */
static void cellc_e_elem(CellcERun *r, const void *f, int tmp_floats, long long r0, long long r1) {
  long long rows = r1 - r0;
  if (rows <= 0) return;
  unsigned grid, block, shared;
  cellc_elem_shape(rows, tmp_floats, &grid, &block, &shared);
  void *args[] = {&r0, &r1, &r->dbases};
  cellc_e_launch(r, f, grid, 1, block, shared, args);
}

/* ---- steps ---- */

static int cellc_e_width(const CellcERun *r, int slot) { return r->pl->arrays[r->pl->slots[slot].array].width; }

static unsigned long long cellc_e_row(const CellcERun *r, int slot, long long row) {
  return r->bases[slot] + 4ull * (unsigned long long)(row * cellc_e_width(r, slot));
}

static void cellc_e_sgemm(CellcERun *r, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, unsigned long long A,
                          int lda, unsigned long long B, int ldb, float beta, unsigned long long C, int ldc) {
  float one = 1.0f;
  if (r->status) return;
  if (cublasSgemm(r->h, ta, tb, m, n, k, &one, (const float *)(uintptr_t)A, lda, (const float *)(uintptr_t)B, ldb, &beta,
                  (float *)(uintptr_t)C, ldc) != CUBLAS_STATUS_SUCCESS)
    r->status = CELLC_E_CUBLAS;
}

/* GEMM: Y[rows, nO] = V[rows, nI] M^T; GEMM_T: Y[rows, nI] = G[rows, nO] M (cuda_backend.c run_gemm). */
static void cellc_e_gemm(CellcERun *r, const CellcEStep *st, long long r0, long long r1) {
  int y = st->i[0], v = st->i[1], m = st->i[2], nO = st->i[3], nI = st->i[4], rows = (int)(r1 - r0);
  float beta = st->i[5] ? 1.0f : 0.0f;
  if (rows <= 0) return;
  if (st->kind == CELLC_E_GEMM)
    cellc_e_sgemm(r, CUBLAS_OP_T, CUBLAS_OP_N, nO, rows, nI, r->bases[m], nI, cellc_e_row(r, v, r0), cellc_e_width(r, v), beta,
                  cellc_e_row(r, y, r0), cellc_e_width(r, y));
  else
    cellc_e_sgemm(r, CUBLAS_OP_N, CUBLAS_OP_N, nI, rows, nO, r->bases[m], nI, cellc_e_row(r, v, r0), cellc_e_width(r, v), beta,
                  cellc_e_row(r, y, r0), cellc_e_width(r, y));
}

/* The chunked scan of state part q over all rows: chunks, carries, apply (cuda_backend.c run_scan). */
typedef struct CellcEScan {
  unsigned long long a0, a1, b0, b1;
  long long lda0, lda1, ldb0, ldb1;
  unsigned long long s0, s1;
  unsigned long long carry;
  long long T;
  int B, size, L, nchunks, cplx, reverse;
} CellcEScan;

static void cellc_e_coef(const CellcERun *r, int q, int k, unsigned long long *ptr, long long *ld) {
  const CellcEPart *p = &r->pl->parts[q];
  if (p->coef[k] >= 0) {
    *ptr = r->consts + 4ull * (unsigned long long)p->coef[k];
    *ld = 0;
    return;
  }
  *ptr = r->bases[p->cslot[k]];
  *ld = cellc_e_width(r, p->cslot[k]);
}

static void cellc_e_scan(CellcERun *r, int q, int cplx, int reverse) {
  const CellcEPart *p = &r->pl->parts[q];
  CellcEScan s;
  memset(&s, 0, sizeof s);
  s.T = r->T, s.B = r->B, s.size = p->size, s.cplx = cplx, s.reverse = reverse;
  long long ch = (long long)s.B * s.size;
  s.L = cellc_scan_chunk(r->T, ch);
  s.nchunks = (int)((r->T + s.L - 1) / s.L);
  cellc_e_coef(r, q, 0, &s.a0, &s.lda0);
  cellc_e_coef(r, q, reverse ? 2 : 1, &s.b0, &s.ldb0);
  if (cplx) {
    cellc_e_coef(r, q + 1, 0, &s.a1, &s.lda1);
    cellc_e_coef(r, q + 1, reverse ? 2 : 1, &s.b1, &s.ldb1);
  }
  s.s0 = r->arr[reverse ? p->darray : p->array];
  s.s1 = cplx ? r->arr[reverse ? p[1].darray : p[1].array] : 0;
  s.carry = r->carry;
  unsigned block, gx;
  cellc_scan_shape(ch, &gx, &block);
  void *args[] = {&s};
  cellc_e_launch(r, r->pl->scan_chunks, gx, (unsigned)s.nchunks, block, 0, args);
  cellc_e_launch(r, r->pl->scan_carry, gx, 1, block, 0, args);
  cellc_e_launch(r, r->pl->scan_apply, gx, (unsigned)s.nchunks, block, 0, args);
}

static void cellc_e_step(CellcERun *r, const CellcEStep *st, long long r0, long long r1) {
  long long rows = (long long)r->T * r->B;
  const int *i = st->i;
  switch (st->kind) {
  case CELLC_E_ELEM: cellc_e_elem(r, r->pl->k[i[0]], i[1], r0, r1); break;
  case CELLC_E_GEMM:
  case CELLC_E_GEMM_T: cellc_e_gemm(r, st, r0, r1); break;
  case CELLC_E_SCAN:
  case CELLC_E_RSCAN: cellc_e_scan(r, i[0], i[1], st->kind == CELLC_E_RSCAN); break;
  case CELLC_E_OUTER_ACC: /* acc^T (n1 x n0) += V^T G over all rows */
    cellc_e_sgemm(r, CUBLAS_OP_N, CUBLAS_OP_T, i[4], i[3], (int)rows, r->bases[i[1]], cellc_e_width(r, i[1]), r->bases[i[0]],
                  cellc_e_width(r, i[0]), 1.0f, r->bases[i[2]], i[4]);
    break;
  case CELLC_E_COLSUM:
    if (i[0] < 0) {
      int e = i[2];
      float k = st->k * (float)rows;
      unsigned long long acc = r->bases[i[1]];
      void *args[] = {&e, &k, &acc};
      cellc_e_launch(r, r->pl->add_const, cellc_blocks_for(e, 256), 1, 256, 0, args);
    } else
      cellc_e_sgemm(r, CUBLAS_OP_N, CUBLAS_OP_N, i[2], 1, (int)rows, r->bases[i[0]], cellc_e_width(r, i[0]), r->ones, (int)rows,
                    1.0f, r->bases[i[1]], i[2]);
    break;
  case CELLC_E_COPY:
    if (i[0] < 0) cellc_e_fill_rows(r, r1 - r0, i[1], st->k, cellc_e_row(r, i[2], r0), cellc_e_width(r, i[2]));
    else
      cellc_e_copy_rows(r, r1 - r0, i[1], cellc_e_row(r, i[0], r0), cellc_e_width(r, i[0]), cellc_e_row(r, i[2], r0),
                        cellc_e_width(r, i[2]));
    break;
  case CELLC_E_ZERO:
    cellc_e_fill_rows(r, r1 - r0, cellc_e_width(r, i[0]), 0.0f, cellc_e_row(r, i[0], r0), cellc_e_width(r, i[0]));
    break;
  }
}

/* A phase over the rows of step t, of the first step, or all rows. */
static void cellc_e_phase(CellcERun *r, int which, int t) {
  const CellcEPhase *ph = &r->pl->phases[which];
  long long r0 = 0, r1 = (long long)r->T * r->B;
  if (ph->region == CELLC_E_STEP) r0 = (long long)t * r->B, r1 = r0 + r->B;
  else if (ph->region == CELLC_E_FIRST) r1 = r->B;
  for (int i = 0; i < ph->n; i++) cellc_e_step(r, &r->pl->steps[ph->first + i], r0, r1);
}

/* A per-step phase over all T steps: the persistent kernel when there is one, else step by step. */
static void cellc_e_steps(CellcERun *r, int bwd) {
  int which = bwd ? CELLC_E_BWD_STEP : CELLC_E_FWD_STEP;
  if (!r->pl->phases[which].n) return;
  if (r->pl->kstep[bwd]) {
    long long T = r->T;
    int B = r->B;
    void *args[] = {&T, &B, &r->dbases};
    cellc_e_launch(r, r->pl->kstep[bwd], (unsigned)B, 1, 32 * CELLC_WARPS, (size_t)4 * (size_t)r->pl->step_tmp[bwd], args);
    return;
  }
  for (int t = 0; t < r->T; t++) cellc_e_phase(r, which, bwd ? r->T - 1 - t : t);
}

static void cellc_e_static(CellcERun *r, int bwd) {
  if (r->pl->kstatic[bwd]) cellc_e_elem(r, r->pl->kstatic[bwd], r->pl->static_tmp[bwd], 0, 1);
}

/* ---- binding a call's pointers ---- */

static thread_local cublasHandle_t cellc_e_blas_handle = NULL;

static void cellc_e_release(void) {
  if (cellc_e_blas_handle) cublasDestroy(cellc_e_blas_handle);
  cellc_e_blas_handle = NULL;
}

/* Every array's and slot's address for this call, the bases uploaded, the constant coefficients
 * filled and the complex params split into planes. The caller checked the pointers. */
static void cellc_e_bind(CellcERun *r, const float *const *w, const float *x, const float *dy, float *y, float *dx, void *work,
                         unsigned long long *off) {
  const CellcEPlan *pl = r->pl;
  CellcELayout L;
  L.off = off;
  r->status = cellc_e_layout(pl, r->T, r->B, &L);
  if (r->status) return;
  if (!cellc_e_blas_handle && cublasCreate(&cellc_e_blas_handle) != CUBLAS_STATUS_SUCCESS) {
    cellc_e_blas_handle = NULL;
    r->status = CELLC_E_CUBLAS;
    return;
  }
  r->h = cellc_e_blas_handle;
  if (cublasSetStream(r->h, r->s) != CUBLAS_STATUS_SUCCESS) r->status = CELLC_E_CUBLAS;
  unsigned long long base = ((unsigned long long)(uintptr_t)work + 255ull) & ~255ull;
  for (int i = 0; i < pl->narrays; i++) {
    const CellcEArray *a = &pl->arrays[i];
    const void *ext = NULL;
    switch (a->where) {
    case CELLC_E_OWN: ext = (const void *)(uintptr_t)(base + off[i]); break;
    case CELLC_E_PARAM: ext = w[a->index]; break;
    case CELLC_E_X: ext = x; break;
    case CELLC_E_DY: ext = dy; break;
    case CELLC_E_Y: ext = y; break;
    case CELLC_E_GX: ext = dx ? (const void *)dx : (const void *)(uintptr_t)(base + off[i]); break;
    }
    r->arr[i] = (unsigned long long)(uintptr_t)ext;
  }
  for (int i = 0; i < pl->nslots; i++) {
    const CellcESlot *sl = &pl->slots[i];
    unsigned long long a = r->arr[sl->array];
    r->bases[i] = a ? a + 4ull * ((unsigned long long)sl->row_off * (unsigned long long)r->B *
                                       (unsigned long long)pl->arrays[sl->array].width + (unsigned long long)sl->col)
                    : 0;
  }
  r->dbases = base + L.bases, r->consts = base + L.consts, r->carry = base + L.carry, r->ones = base + L.ones;
  if (!r->status && pl->nslots &&
      cudaMemcpyAsync((void *)(uintptr_t)r->dbases, r->bases, 8 * (size_t)pl->nslots, cudaMemcpyHostToDevice, r->s) != cudaSuccess)
    r->status = CELLC_E_CUDA;
  for (int q = 0; q < pl->nparts; q++)
    for (int k = 0; k < 3; k++)
      if (pl->parts[q].coef[k] >= 0)
        cellc_e_fill_rows(r, 1, pl->parts[q].size, pl->parts[q].cval[k], r->consts + 4ull * (unsigned long long)pl->parts[q].coef[k], 0);
  for (int i = 0; i < pl->nparams; i++) {
    const CellcEUser *u = &pl->params[i];
    if (!u->cplx) continue;
    unsigned long long re = u->array[0] >= 0 ? r->arr[u->array[0]] : 0, im = u->array[1] >= 0 ? r->arr[u->array[1]] : 0;
    cellc_e_unpack(r, u->numel, w[i], 2, re, im);
  }
}

/* 0, or CELLC_E_NULL when w or a member is NULL. */
static int cellc_e_check_params(const CellcEPlan *pl, const float *const *w) {
  for (int i = 0; i < pl->nparams; i++)
    if (!w[i]) return CELLC_E_NULL;
  return CELLC_E_OK;
}

/* ---- forward and backward (cuda_backend.c cuda_forward, cuda_backward) ---- */

static int cellc_e_forward(CellcERun *r, const float *const *w, const float *x, const float *const *h0, float *y,
                           float *const *final, void *work, unsigned long long *off) {
  const CellcEPlan *pl = r->pl;
  if (r->T < 1 || r->B < 1) return CELLC_E_SIZE;
  if (!x || !y || !work || cellc_e_check_params(pl, w)) return CELLC_E_NULL;
  cellc_e_bind(r, w, x, NULL, y, NULL, work, off);
  if (r->status) return r->status;
  long long B = r->B, T = r->T;
  cellc_e_static(r, 0);
  for (int i = 0; i < pl->nstacks; i++) {
    const CellcEStack *st = &pl->stacks[i];
    long long at = st->at;
    if (!r->status && st->numel &&
        cudaMemcpyAsync((void *)(uintptr_t)(r->arr[st->array] + 4ull * (unsigned long long)at), (const void *)(uintptr_t)r->bases[st->slot],
                        4 * (size_t)st->numel, cudaMemcpyDeviceToDevice, r->s) != cudaSuccess)
      r->status = CELLC_E_CUDA;
  }
  for (int i = 0; i < pl->nstates; i++) {
    const CellcEUser *u = &pl->states[i];
    const CellcEPart *p = &pl->parts[u->part0];
    cellc_e_unpack(r, B * u->numel, h0 ? h0[i] : NULL, u->cplx ? 2 : 1, r->arr[p->array], u->cplx ? r->arr[p[1].array] : 0);
  }
  cellc_e_phase(r, CELLC_E_FWD_PRE, 0);
  cellc_e_steps(r, 0);
  cellc_e_phase(r, CELLC_E_FWD_POST, 0);
  for (int i = 0; final && i < pl->nstates; i++) {
    const CellcEUser *u = &pl->states[i];
    const CellcEPart *p = &pl->parts[u->part0];
    unsigned long long last = 4ull * (unsigned long long)(T * B * u->numel);
    cellc_e_pack(r, B * u->numel, r->arr[p->array] + last, 0.0f, u->cplx ? r->arr[p[1].array] + last : 0, 0.0f, u->cplx ? 2 : 1,
                 final[i]);
  }
  return r->status;
}

static int cellc_e_backward(CellcERun *r, const float *const *w, const float *x, const float *dy, const float *const *dfinal,
                            void *work, float *const *grad, float *dx, float *const *dh0, unsigned long long *off) {
  const CellcEPlan *pl = r->pl;
  if (r->T < 1 || r->B < 1) return CELLC_E_SIZE;
  if (!x || !dy || !work || !grad || cellc_e_check_params(pl, w)) return CELLC_E_NULL;
  cellc_e_bind(r, w, x, dy, NULL, dx, work, off);
  if (r->status) return r->status;
  long long B = r->B, T = r->T;
  cellc_e_fill_rows(r, 1, (int)(T * B), 1.0f, r->ones, 0);
  for (int i = 0; i < pl->narrays; i++)
    if (pl->arrays[i].zero && !r->status &&
        cudaMemsetAsync((void *)(uintptr_t)r->arr[i], 0, 4 * (size_t)pl->arrays[i].zero, r->s) != cudaSuccess)
      r->status = CELLC_E_CUDA;
  for (int i = 0; i < pl->nstates; i++) {
    const CellcEUser *u = &pl->states[i];
    const CellcEPart *p = &pl->parts[u->part0];
    unsigned long long last = 4ull * (unsigned long long)(T * B * u->numel);
    cellc_e_unpack(r, B * u->numel, dfinal ? dfinal[i] : NULL, u->cplx ? 2 : 1, r->arr[p->darray] + last,
                   u->cplx ? r->arr[p[1].darray] + last : 0);
  }
  cellc_e_phase(r, CELLC_E_BWD_PRE, 0);
  cellc_e_steps(r, 1);
  cellc_e_phase(r, CELLC_E_BWD_POST, 0);
  cellc_e_phase(r, CELLC_E_BWD_FIRST, 0);
  cellc_e_static(r, 1);
  for (int i = 0; i < pl->nparams; i++) {
    const CellcEUser *u = &pl->params[i];
    unsigned long long g0 = u->gslot[0] >= 0 ? r->bases[u->gslot[0]] : 0, g1 = u->cplx && u->gslot[1] >= 0 ? r->bases[u->gslot[1]] : 0;
    cellc_e_pack(r, u->numel, g0, u->gk[0], g1, u->gk[1], u->cplx ? 2 : 1, grad[i]);
  }
  for (int i = 0; dh0 && i < pl->nstates; i++) {
    const CellcEUser *u = &pl->states[i];
    const CellcEPart *p = &pl->parts[u->part0];
    unsigned long long d0 = p->dh0 >= 0 ? r->arr[p->dh0] : 0, d1 = u->cplx && p[1].dh0 >= 0 ? r->arr[p[1].dh0] : 0;
    cellc_e_pack(r, B * u->numel, d0, 0.0f, d1, 0.0f, u->cplx ? 2 : 1, dh0[i]);
  }
  return r->status;
}
