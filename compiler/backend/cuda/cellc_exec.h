/* cellc_exec.h: the CUDA host's plan executor, the one piece of code that runs a plan on a GPU for
 * both of its hosts: the CUDA back ends (cuda_backend.c, through the driver API, and so also the
 * emulator) and every emitted P.cu (cellc_emit_host.h, through the runtime API and cuBLAS on the
 * caller's stream; cuda_emit.c pastes this text into it). It reads the plan as plan_table.h's table
 * (plan_table_build), plus the CUDA-only facts of CxKernels beside it, and binds the arrays, lays out
 * the workspace and issues every launch, copy and GEMM through a small table of device operations
 * (CxOps) that each host implements. Plain C that also compiles as C++; no allocation, no globals,
 * no I/O. Needs plan_table.h and cellc_launch.h before it (for the launch shapes). */
#ifndef CELLC_EXEC_H
#define CELLC_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The kernels beside the plan's own (k0, k1, ...): CxOps.launch gets plan kernel k as k, and these
 * as CX_FIXED(CX_K_*). Names in the generated source (cg_cuda.h) and in cellc_emit_kernels.h. */
enum {
  CX_K_STATIC_FWD, CX_K_STATIC_BWD, /* kstatic_fwd, kstatic_bwd */
  CX_K_STEP_FWD, CX_K_STEP_BWD,     /* kstep_fwd, kstep_bwd: the persistent per-step kernels */
  CX_K_SCAN_CHUNKS, CX_K_SCAN_CARRY, CX_K_SCAN_APPLY,
  CX_K_COPY, CX_K_FILL, CX_K_ADD_CONST,
  CX_K_UNPACK, CX_K_PACK,           /* the C API's interleaved complex values (P.cu only) */
  CX_NFIXED
};
#define CX_FIXED(k) (-1 - (k))

/* cx_layout's statuses; cx_forward and cx_backward return CX_OK or the first nonzero status a
 * device operation returned. */
enum { CX_OK, CX_SIZE, CX_OVERFLOW };

/* What the CUDA host needs beyond the plan table: the generated kernels' shared memory, and which
 * of the optional kernels exist (cg_cuda.h CgCudaInfo). */
typedef struct CxKernels {
  int32_t nkernels;
  int32_t static_tmp[2];   /* kstatic_fwd, kstatic_bwd: floats of temporaries a row, or -1: absent */
  int32_t step_tmp[2];     /* kstep_fwd, kstep_bwd: warp 0's floats of temporaries, or -1: absent */
  const int32_t *tmp;      /* per plan kernel: floats of temporaries a row (a warp) */
} CxKernels;

/* The device operations of a host. Each returns 0 or a nonzero status; after the first nonzero
 * one the executor issues nothing more. Addresses are device addresses. */
typedef struct CxOps {
  /* kernel k (a plan kernel, or CX_FIXED(CX_K_*)) on a (gx, gy) grid of 1-D blocks */
  int (*launch)(void *ctx, int k, unsigned gx, unsigned gy, unsigned block, unsigned shared, void **args);
  /* column-major C = A B + beta C (cuBLAS sgemm, alpha 1); ta, tb: 1 to transpose */
  int (*sgemm)(void *ctx, int ta, int tb, int m, int n, int k, unsigned long long A, int lda, unsigned long long B, int ldb,
               float beta, unsigned long long C, int ldc);
  int (*htod)(void *ctx, unsigned long long dst, const void *src, size_t bytes);
  int (*dtod)(void *ctx, unsigned long long dst, unsigned long long src, size_t bytes);
  int (*zero)(void *ctx, unsigned long long dst, size_t floats);
  /* optional (NULL: none): around each plan step (and the persistent kernel, as ET_ELEM), for
   * profiling */
  void (*step_begin)(void *ctx);
  void (*step_end)(void *ctx, int kind);
} CxOps;

/* How the caller's values are laid out: CX_SEQIO as the back ends' SeqIO (a complex value as two
 * planes, one pointer per part; dL/dh0 and dx the caller's), CX_CAPI as docs/emit.md's C API (a
 * complex value interleaved, one pointer per param or state; the planes, dL/dh0 and a missing dx
 * in the workspace). */
enum { CX_SEQIO, CX_CAPI };

/* The caller's arrays for one call (device addresses, 0 when absent). */
typedef struct CxIO {
  unsigned long long x, dy, y, dx;
  const unsigned long long *params; /* CX_SEQIO: per param part; CX_CAPI: per param (interleaved) */
  const unsigned long long *noise;  /* per noise stream (CX_SEQIO) */
  const unsigned long long *gh0;    /* per state part: dL/dh0 rows (CX_SEQIO) */
  const unsigned long long *gates;  /* per gate array (CX_SEQIO), or NULL: in the workspace */
  const unsigned long long *states; /* the forward's h0 or the backward's dfinal (NULL in CX_CAPI: zero);
                                       CX_SEQIO per state part, CX_CAPI per state */
  const unsigned long long *out;    /* the forward's final, the backward's dh0 (NULL in CX_CAPI: none) */
  const unsigned long long *grads;  /* the backward's param gradients, as params */
} CxIO;

/* The workspace of one (T, B): a region per array it holds, then the slot bases, the constant
 * rows, the scans' carries and the rows of ones, each 256-byte aligned; total counts 256 bytes of
 * slack for a workspace of any alignment. */
typedef struct CxLayout {
  unsigned long long *off;          /* per array, in the workspace (0 for the caller's) */
  unsigned long long planes, bases, consts, carry, ones, total;
} CxLayout;

/* One call in flight, or a back end's work: the caller sets t .. off (the arrays' storage: arr and
 * off per array, bases and uploaded per slot), T and B, and lays the workspace out (cx_layout)
 * before cx_forward or cx_backward; they keep the rest. */
typedef struct CxRun {
  const EtHeader *t;
  const CxKernels *k;
  const CxOps *ops;
  void *ctx;
  int mode;                         /* CX_SEQIO, CX_CAPI */
  int chunk;                        /* the scans' chunk length, or 0: cellc_scan_chunk's */
  int no_persistent;                /* the per-step phases step by step even with kstep_* */
  unsigned long long *arr;          /* per array: its address */
  unsigned long long *bases;        /* per slot: where row 0 of its values is */
  unsigned long long *uploaded;     /* per slot: the bases the device holds, or NULL: upload each call */
  unsigned long long *off;          /* per array: its offset in the workspace */
  int T, B, status;
  unsigned long long work;          /* the workspace (256-aligned) */
  CxLayout L;
  /* what the device holds already (CX_SEQIO's back end keeps it from call to call): where the
   * constant rows and the ones were filled (0: nowhere), and how many ones */
  unsigned long long consts_at, ones_at;
  long long ones_n;
} CxRun;

#define CX_TABLE(t, type, field) ((const type *)((const char *)(t) + (t)->field))

/* ---- the workspace ---- */

/* Reserve `floats` floats: their offset, or sets *bad on overflow. */
static inline unsigned long long cx_take(unsigned long long *total, unsigned long long floats, int *bad) {
  unsigned long long at = *total, bytes;
  if (__builtin_mul_overflow(floats, 4ull, &bytes) || __builtin_add_overflow(at, bytes, total) ||
      __builtin_add_overflow(*total, 255ull, total))
    *bad = 1;
  *total &= ~255ull;
  return at;
}

/* (a T + b) B + c; sets *bad on overflow. */
static inline unsigned long long cx_floats(long long a, long long b, long long c, int T, int B, int *bad) {
  unsigned long long v;
  if (__builtin_mul_overflow((unsigned long long)a, (unsigned long long)T, &v) || __builtin_add_overflow(v, (unsigned long long)b, &v) ||
      __builtin_mul_overflow(v, (unsigned long long)B, &v) || __builtin_add_overflow(v, (unsigned long long)c, &v))
    *bad = 1;
  return v;
}

/* The scans' chunk length over `channels` channels (cellc_launch.h, or the run's override). */
static inline int cx_chunk(const CxRun *r, int T, long long channels) {
  if (r->chunk <= 0) return cellc_scan_chunk(T, channels);
  long long L = r->chunk;
  if ((T + L - 1) / L > 65535) L = ((long long)T + 65534) / 65535; /* gridDim.y */
  return (int)L;
}

/* Whether array i is in the workspace in this mode (and its floats). */
static inline int cx_in_workspace(const CxRun *r, int i, unsigned long long *floats, int T, int B, int *bad) {
  const EtHeader *t = r->t;
  const EtArray *a = &CX_TABLE(t, EtArray, arrays)[i];
  int capi = r->mode == CX_CAPI;
  switch (a->kind) {
  case ET_OWNED:
    if (i == t->y_array) return 0; /* the caller's y */
    *floats = cx_floats(a->rows, a->per_b, a->fixed, T, B, bad);
    return 1;
  case ET_GX: *floats = cx_floats(a->width, 0, 0, T, B, bad); return capi; /* when dx is NULL */
  case ET_GH0: *floats = cx_floats(0, a->width, 0, T, B, bad); return capi; /* packed into dh0 */
  default: return 0;
  }
}

/* The layout for T, B into r->L (r->off per array): CX_OK, or CX_SIZE / CX_OVERFLOW. */
static inline int cx_layout(CxRun *r, int T, int B) {
  const EtHeader *t = r->t;
  CxLayout *L = &r->L;
  if (T < 1 || B < 1) return CX_SIZE;
  if ((long long)T * B > 0x7fffffffLL) return CX_OVERFLOW; /* the kernels index rows with int */
  int bad = 0;
  L->off = r->off;
  L->total = 0;
  for (int i = 0; i < t->narrays; i++) {
    unsigned long long floats = 0;
    L->off[i] = cx_in_workspace(r, i, &floats, T, B, &bad) ? cx_take(&L->total, floats, &bad) : 0;
  }
  L->planes = cx_take(&L->total, r->mode == CX_CAPI ? (unsigned long long)t->planes : 0, &bad);
  L->bases = cx_take(&L->total, 2ull * ((unsigned long long)t->nslots + 1), &bad);
  L->consts = cx_take(&L->total, (unsigned long long)t->nfloats + 1, &bad);
  unsigned long long carry = 1;
  const EtStatePart *sp = CX_TABLE(t, EtStatePart, sparts);
  for (int q = 0; t->scan && q < t->nsparts; q++) {
    long long ch = (long long)B * sp[q].size;
    unsigned long long need = cellc_scan_carry_floats(T, cx_chunk(r, T, ch), ch);
    if (need > carry) carry = need;
  }
  L->carry = cx_take(&L->total, carry, &bad);
  L->ones = cx_take(&L->total, cx_floats(1, 0, 0, T, B, &bad), &bad);
  if (__builtin_add_overflow(L->total, 256ull, &L->total)) bad = 1;
  return bad ? CX_OVERFLOW : CX_OK;
}

/* What the device holds (bases, constants, ones) is stale: a new workspace, or the old one freed
 * and another allocated (maybe at the same address). */
static inline void cx_forget(CxRun *r) {
  r->consts_at = r->ones_at = 0, r->ones_n = 0;
  if (r->uploaded && r->t->nslots) r->uploaded[0] = ~0ull; /* differs from any base */
}

/* ---- device operations (each does nothing once the run has failed) ---- */

static inline void cx_launch(CxRun *r, int k, unsigned gx, unsigned gy, unsigned block, unsigned shared, void **args) {
  if (!r->status) r->status = r->ops->launch(r->ctx, k, gx, gy, block, shared, args);
}

static inline void cx_sgemm(CxRun *r, int ta, int tb, int m, int n, int k, unsigned long long A, int lda, unsigned long long B,
                            int ldb, float beta, unsigned long long C, int ldc) {
  if (!r->status) r->status = r->ops->sgemm(r->ctx, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc);
}

static inline void cx_dtod(CxRun *r, unsigned long long dst, unsigned long long src, size_t bytes) {
  if (!r->status && bytes) r->status = r->ops->dtod(r->ctx, dst, src, bytes);
}

static inline void cx_htod(CxRun *r, unsigned long long dst, const void *src, size_t bytes) {
  if (!r->status && bytes) r->status = r->ops->htod(r->ctx, dst, src, bytes);
}

static inline void cx_zero(CxRun *r, unsigned long long dst, size_t floats) {
  if (!r->status && floats) r->status = r->ops->zero(r->ctx, dst, floats);
}

static inline void cx_copy_rows(CxRun *r, long long rows, int e, unsigned long long src, long long lds, unsigned long long dst,
                                long long ldd) {
  if (rows <= 0 || e <= 0) return;
  void *args[] = {&rows, &e, &src, &lds, &dst, &ldd};
  cx_launch(r, CX_FIXED(CX_K_COPY), cellc_blocks_for(rows * e, 256), 1, 256, 0, args);
}

static inline void cx_fill_rows(CxRun *r, long long rows, int e, float k, unsigned long long dst, long long ldd) {
  if (rows <= 0 || e <= 0) return;
  void *args[] = {&rows, &e, &k, &dst, &ldd};
  cx_launch(r, CX_FIXED(CX_K_FILL), cellc_blocks_for(rows * e, 256), 1, 256, 0, args);
}

/* re[i] = src[i stride], im[i] = src[i stride + 1] (zeros when src is 0): cellc_emit_unpack. */
static inline void cx_unpack(CxRun *r, long long n, unsigned long long src, int stride, unsigned long long re,
                             unsigned long long im) {
  if (n <= 0) return;
  void *args[] = {&n, &src, &stride, &re, &im};
  cx_launch(r, CX_FIXED(CX_K_UNPACK), cellc_blocks_for(n, 256), 1, 256, 0, args);
}

/* dst[i stride] = re[i] (kre when re is 0), and with stride 2 dst[i stride + 1] = im[i] (or kim):
 * cellc_emit_pack; nothing when dst is 0. */
static inline void cx_pack(CxRun *r, long long n, unsigned long long re, float kre, unsigned long long im, float kim, int stride,
                           unsigned long long dst) {
  if (n <= 0 || !dst) return;
  void *args[] = {&n, &re, &kre, &im, &kim, &stride, &dst};
  cx_launch(r, CX_FIXED(CX_K_PACK), cellc_blocks_for(n, 256), 1, 256, 0, args);
}

/* An elementwise kernel (a plan kernel or a static one) over rows [r0, r1): a warp a row. */
static inline void cx_elem(CxRun *r, int k, int tmp_floats, long long r0, long long r1) {
  long long rows = r1 - r0;
  if (rows <= 0) return;
  unsigned grid, block, shared;
  cellc_elem_shape(rows, tmp_floats, &grid, &block, &shared);
  unsigned long long dbases = r->work + r->L.bases;
  void *args[] = {&r0, &r1, &dbases};
  cx_launch(r, k, grid, 1, block, shared, args);
}

/* ---- steps ---- */

static inline int cx_width(const CxRun *r, int slot) {
  const EtHeader *t = r->t;
  return CX_TABLE(t, EtArray, arrays)[CX_TABLE(t, EtSlot, slots)[slot].array].width;
}

static inline unsigned long long cx_row(const CxRun *r, int slot, long long row) {
  return r->bases[slot] + 4ull * (unsigned long long)(row * cx_width(r, slot));
}

/* GEMM: Y[rows, nO] = V[rows, nI] M^T; GEMM_T: Y[rows, nI] = G[rows, nO] M (M row-major [nO, nI]).
 * Row-major [rows, width] with row stride ld is column-major (width x rows), ld. */
static inline void cx_gemm(CxRun *r, const EtStep *st, long long r0, long long r1) {
  int rows = (int)(r1 - r0);
  float beta = st->accumulate ? 1.0f : 0.0f;
  if (rows <= 0) return;
  if (st->kind == ET_GEMM)
    cx_sgemm(r, 1, 0, st->nO, rows, st->nI, r->bases[st->m], st->nI, cx_row(r, st->v, r0), cx_width(r, st->v), beta,
             cx_row(r, st->y, r0), cx_width(r, st->y));
  else
    cx_sgemm(r, 0, 0, st->nI, rows, st->nO, r->bases[st->m], st->nI, cx_row(r, st->v, r0), cx_width(r, st->v), beta,
             cx_row(r, st->y, r0), cx_width(r, st->y));
}

/* The scan kernels' argument, by value: the generated source declares the same struct (cg_cuda.h
 * CgCudaScan: pointers as device addresses, 8 bytes each, in this order). */
typedef struct CxScan {
  unsigned long long a0, a1, b0, b1; /* coefficients (re, im): a, and b (forward) or g (reverse) */
  long long lda0, lda1, ldb0, ldb1;  /* their row strides (0: one row for every row) */
  unsigned long long s0, s1;         /* the state (forward) or dtotal (reverse) parts, [(T+1)B, size] */
  unsigned long long carry;          /* [nchunks][B size][6] floats */
  long long T;
  int B, size, L, nchunks, cplx, reverse;
} CxScan;

/* A scan coefficient: its slot's rows, or its constant row (row stride 0). */
static inline void cx_coef(const CxRun *r, EtCoef c, unsigned long long *ptr, long long *ld) {
  if (c.slot < 0) {
    *ptr = r->work + r->L.consts + 4ull * (unsigned long long)c.fill;
    *ld = 0;
    return;
  }
  *ptr = r->bases[c.slot];
  *ld = cx_width(r, c.slot);
}

/* The chunked scan of a state over all rows: chunks, carries, apply. */
static inline void cx_scan(CxRun *r, const EtStep *st) {
  CxScan s;
  memset(&s, 0, sizeof s);
  s.T = r->T, s.B = r->B, s.size = st->size, s.cplx = st->cplx, s.reverse = st->kind == ET_RSCAN;
  long long ch = (long long)s.B * s.size;
  s.L = cx_chunk(r, r->T, ch);
  s.nchunks = (int)((r->T + s.L - 1) / s.L);
  cx_coef(r, st->a[0], &s.a0, &s.lda0);
  cx_coef(r, st->b[0], &s.b0, &s.ldb0);
  if (st->cplx) {
    cx_coef(r, st->a[1], &s.a1, &s.lda1);
    cx_coef(r, st->b[1], &s.b1, &s.ldb1);
  }
  s.s0 = r->arr[st->arr0];
  s.s1 = st->cplx ? r->arr[st->arr1] : 0;
  s.carry = r->work + r->L.carry;
  unsigned block, gx;
  cellc_scan_shape(ch, &gx, &block);
  void *args[] = {&s};
  cx_launch(r, CX_FIXED(CX_K_SCAN_CHUNKS), gx, (unsigned)s.nchunks, block, 0, args);
  cx_launch(r, CX_FIXED(CX_K_SCAN_CARRY), gx, 1, block, 0, args);
  cx_launch(r, CX_FIXED(CX_K_SCAN_APPLY), gx, (unsigned)s.nchunks, block, 0, args);
}

static inline void cx_step(CxRun *r, const EtStep *st, long long r0, long long r1) {
  long long rows = (long long)r->T * r->B;
  switch (st->kind) {
  case ET_ELEM: cx_elem(r, st->kernel, r->k->tmp[st->kernel], r0, r1); break;
  case ET_GEMM:
  case ET_GEMM_T: cx_gemm(r, st, r0, r1); break;
  case ET_SCAN:
  case ET_RSCAN: cx_scan(r, st); break;
  case ET_OUTER_ACC: /* acc[nO, nI] += G^T V over all rows: column-major acc^T (nI x nO) += V^T G */
    cx_sgemm(r, 0, 1, st->nI, st->nO, (int)rows, r->bases[st->v], cx_width(r, st->v), r->bases[st->m], cx_width(r, st->m), 1.0f,
             r->bases[st->y], st->nI);
    break;
  case ET_COLSUM: /* acc += the sum over all rows: (e x rows) times a column of ones */
    if (st->src < 0) {
      int e = st->numel;
      float k = st->k * (float)rows;
      unsigned long long acc = r->bases[st->dst];
      void *args[] = {&e, &k, &acc};
      cx_launch(r, CX_FIXED(CX_K_ADD_CONST), cellc_blocks_for(e, 256), 1, 256, 0, args);
    } else
      cx_sgemm(r, 0, 0, st->numel, 1, (int)rows, r->bases[st->src], cx_width(r, st->src), r->work + r->L.ones, (int)rows, 1.0f,
               r->bases[st->dst], st->numel);
    break;
  case ET_COPY:
    if (st->src < 0) cx_fill_rows(r, r1 - r0, st->numel, st->k, cx_row(r, st->dst, r0), cx_width(r, st->dst));
    else
      cx_copy_rows(r, r1 - r0, st->numel, cx_row(r, st->src, r0), cx_width(r, st->src), cx_row(r, st->dst, r0),
                   cx_width(r, st->dst));
    break;
  case ET_ZERO: cx_fill_rows(r, r1 - r0, cx_width(r, st->dst), 0.0f, cx_row(r, st->dst, r0), cx_width(r, st->dst)); break;
  default: break;
  }
}

/* A phase over the rows of step t (ET_REG_STEP), of the first step, or all rows. */
static inline void cx_phase(CxRun *r, int which, int t) {
  const EtPhase *ph = &r->t->phases[which];
  const EtStep *steps = CX_TABLE(r->t, EtStep, steps);
  long long r0 = 0, r1 = (long long)r->T * r->B;
  if (ph->region == ET_REG_STEP) r0 = (long long)t * r->B, r1 = r0 + r->B;
  else if (ph->region == ET_REG_FIRST) r1 = r->B;
  for (int i = 0; i < ph->n; i++) {
    if (r->ops->step_begin) r->ops->step_begin(r->ctx);
    cx_step(r, &steps[ph->first + i], r0, r1);
    if (r->ops->step_end) r->ops->step_end(r->ctx, steps[ph->first + i].kind);
  }
}

/* A per-step phase over all T steps: the persistent kernel (a block a batch row) when there is
 * one, else step by step. */
static inline void cx_steps(CxRun *r, int bwd) {
  int which = bwd ? ET_BWD_STEP : ET_FWD_STEP;
  if (!r->t->phases[which].n) return;
  if (r->k->step_tmp[bwd] >= 0 && !r->no_persistent) {
    long long T = r->T;
    int B = r->B;
    unsigned long long dbases = r->work + r->L.bases;
    void *args[] = {&T, &B, &dbases};
    if (r->ops->step_begin) r->ops->step_begin(r->ctx);
    cx_launch(r, CX_FIXED(bwd ? CX_K_STEP_BWD : CX_K_STEP_FWD), (unsigned)B, 1, 32 * CELLC_WARPS,
              (unsigned)(4 * r->k->step_tmp[bwd]), args);
    if (r->ops->step_end) r->ops->step_end(r->ctx, ET_ELEM);
    return;
  }
  for (int t = 0; t < r->T; t++) cx_phase(r, which, bwd ? r->T - 1 - t : t);
}

static inline void cx_static(CxRun *r, int bwd) {
  if (r->k->static_tmp[bwd] >= 0) cx_elem(r, CX_FIXED(bwd ? CX_K_STATIC_BWD : CX_K_STATIC_FWD), r->k->static_tmp[bwd], 0, 1);
}

/* ---- binding a call's arrays ---- */

/* Every array's and slot's address for (T, B) over the workspace `work` (its layout from
 * cx_layout), the bases uploaded and the constant rows filled where they changed, and (CX_CAPI) the
 * complex params split into their planes. */
static inline void cx_bind(CxRun *r, const CxIO *io, unsigned long long work) {
  const EtHeader *t = r->t;
  const EtArray *arrays = CX_TABLE(t, EtArray, arrays);
  const EtParamPart *pp = CX_TABLE(t, EtParamPart, pparts);
  const EtSlot *slots = CX_TABLE(t, EtSlot, slots);
  int capi = r->mode == CX_CAPI;
  unsigned long long base = (work + 255ull) & ~255ull;
  if (base != r->work) cx_forget(r);
  r->work = base;
  for (int i = 0; i < t->narrays; i++) {
    const EtArray *a = &arrays[i];
    unsigned long long at = 0, own = base + r->L.off[i];
    switch (a->kind) {
    case ET_OWNED:
      if (i == t->y_array) at = io->y;
      else if (a->gate && io->gates && io->gates[a->index]) at = io->gates[a->index];
      else at = own;
      break;
    case ET_PARAM:
      if (!capi) at = io->params[a->index];
      else if (pp[a->index].cplx) at = base + r->L.planes + 4ull * (unsigned long long)pp[a->index].plane;
      else at = io->params[pp[a->index].param];
      break;
    case ET_X: at = io->x; break;
    case ET_DY: at = io->dy; break;
    case ET_GX: at = io->dx || !capi ? io->dx : own; break;
    case ET_GH0: at = capi ? own : io->gh0 ? io->gh0[a->index] : 0; break; /* (none in a forward alone) */
    case ET_NOISE: at = io->noise[a->index]; break;
    }
    r->arr[i] = at;
  }
  int changed = !r->uploaded;
  for (int i = 0; i < t->nslots; i++) {
    const EtSlot *sl = &slots[i];
    unsigned long long a = r->arr[sl->array];
    r->bases[i] = a ? a + 4ull * ((unsigned long long)sl->row_off * (unsigned long long)r->B *
                                      (unsigned long long)arrays[sl->array].width + (unsigned long long)sl->col)
                    : 0;
    if (r->uploaded && r->bases[i] != r->uploaded[i]) changed = 1;
  }
  if (changed && t->nslots) {
    cx_htod(r, base + r->L.bases, r->bases, 8 * (size_t)t->nslots);
    if (r->uploaded) memcpy(r->uploaded, r->bases, 8 * (size_t)t->nslots);
  }
  if (r->consts_at != base + r->L.consts) {
    cx_htod(r, base + r->L.consts, CX_TABLE(t, float, floats), 4 * (size_t)t->nfloats);
    r->consts_at = base + r->L.consts;
  }
  for (int i = 0; capi && i < t->npparts; i++)
    if (pp[i].cplx && pp[i].part == 0)
      cx_unpack(r, pp[i].numel, io->params[pp[i].param], 2, pp[i].array >= 0 ? r->arr[pp[i].array] : 0,
                pp[i + 1].array >= 0 ? r->arr[pp[i + 1].array] : 0);
}

/* A history in the shift layout (EtStatePart.shift; the back end's plans, CX_SEQIO, as the emitted
 * code's shift nothing): step j of its value at step `row` is row (row + j) B of its array, n =
 * shift floats wide; the caller's rows hold the K steps side by side. to_caller: from the array's
 * rows to the caller's. */
static inline void cx_shift_rows(CxRun *r, const EtStatePart *sp, unsigned long long a, unsigned long long caller, long long row,
                                 int to_caller) {
  long long n = sp->shift;
  for (int j = 0; j < sp->size / sp->shift; j++) {
    unsigned long long steps = a + 4ull * (unsigned long long)((row + j) * r->B * n);
    unsigned long long mine = caller + 4ull * (unsigned long long)(j * n);
    if (to_caller) cx_copy_rows(r, r->B, (int)n, steps, n, mine, sp->size);
    else cx_copy_rows(r, r->B, (int)n, mine, sp->size, steps, n);
  }
}

/* A state's rows of one step (at `row`) from the caller's values (src per part, or CX_CAPI the
 * interleaved values, 0: zero) into the arrays arr0 (and arr1 when complex). */
static inline void cx_state_in(CxRun *r, int state, int q, const CxIO *io, int back, long long row) {
  const EtStatePart *sp = CX_TABLE(r->t, EtStatePart, sparts);
  if (sp[q].shift) {
    for (int p = q; p <= q + sp[q].cplx; p++)
      cx_shift_rows(r, &sp[p], r->arr[back ? sp[p].darr : sp[p].arr], io->states[p], row, 0);
    return;
  }
  int cplx = sp[q].cplx;
  unsigned long long off = 4ull * (unsigned long long)(row * r->B * sp[q].size);
  unsigned long long a0 = r->arr[back ? sp[q].darr : sp[q].arr] + off, a1 = cplx ? r->arr[back ? sp[q + 1].darr : sp[q + 1].arr] + off : 0;
  long long n = (long long)r->B * sp[q].size;
  if (r->mode == CX_CAPI) {
    cx_unpack(r, n, io->states ? io->states[state] : 0, cplx ? 2 : 1, a0, a1);
    return;
  }
  cx_dtod(r, a0, io->states[q], 4 * (size_t)n);
  if (cplx) cx_dtod(r, a1, io->states[q + 1], 4 * (size_t)n);
}

/* ---- forward and backward ---- */

/* The forward over T steps of B rows: y, and the final states. The layout (cx_layout for this T and
 * B) and the workspace are the caller's. */
static inline int cx_forward(CxRun *r, const CxIO *io, unsigned long long work) {
  const EtHeader *t = r->t;
  const EtStatePart *sp = CX_TABLE(t, EtStatePart, sparts);
  cx_bind(r, io, work);
  cx_static(r, 0);
  const EtStackCopy *sc = CX_TABLE(t, EtStackCopy, stack);
  for (int i = 0; i < t->nstack; i++)
    cx_dtod(r, r->arr[sc[i].array] + 4ull * (unsigned long long)sc[i].offset, r->bases[sc[i].src], 4 * (size_t)sc[i].numel);
  for (int q = 0; q < t->nsparts; q++)
    if (sp[q].part == 0) cx_state_in(r, sp[q].state, q, io, 0, 0);
  cx_phase(r, ET_FWD_PRE, 0);
  cx_steps(r, 0);
  cx_phase(r, ET_FWD_POST, 0);
  long long last = (long long)r->T * r->B;
  for (int q = 0; io->out && q < t->nsparts; q++) {
    /* (a still history's final state is h0, its row 0) */
    unsigned long long n = (unsigned long long)r->B * (unsigned long long)sp[q].size,
                       off = sp[q].still ? 0 : 4ull * (unsigned long long)last * sp[q].size;
    if (sp[q].shift) cx_shift_rows(r, &sp[q], r->arr[sp[q].arr], io->out[q], r->T, 1);
    else if (r->mode == CX_SEQIO) cx_dtod(r, io->out[q], r->arr[sp[q].arr] + off, 4 * (size_t)n);
    else if (sp[q].part == 0)
      cx_pack(r, (long long)n, r->arr[sp[q].arr] + off, 0.0f, sp[q].cplx ? r->arr[sp[q + 1].arr] + off : 0, 0.0f, sp[q].cplx ? 2 : 1,
              io->out[sp[q].state]);
  }
  return r->status;
}

/* A float's bits are zero (+0.0): zeroed memory holds it. */
static inline int cx_is_zero(float k) {
  uint32_t u;
  memcpy(&u, &k, 4);
  return u == 0;
}

/* The backward after a forward on the same work: the param gradients, dx and dL/dh0. */
static inline int cx_backward(CxRun *r, const CxIO *io, unsigned long long work) {
  const EtHeader *t = r->t;
  const EtStatePart *sp = CX_TABLE(t, EtStatePart, sparts);
  const EtParamPart *pp = CX_TABLE(t, EtParamPart, pparts);
  const EtArray *arrays = CX_TABLE(t, EtArray, arrays);
  cx_bind(r, io, work);
  unsigned long long ones = r->work + r->L.ones;
  if (r->ones_at != ones || r->ones_n != (long long)r->T * r->B) {
    cx_fill_rows(r, 1, r->T * r->B, 1.0f, ones, 0);
    r->ones_at = ones, r->ones_n = (long long)r->T * r->B;
  }
  for (int i = 0; i < t->narrays; i++)
    if (arrays[i].zero_bwd) cx_zero(r, r->arr[i], (size_t)arrays[i].fixed);
  for (int q = 0; q < t->nsparts; q++)
    if (sp[q].part == 0) cx_state_in(r, sp[q].state, q, io, 1, r->T);
  cx_phase(r, ET_BWD_PRE, 0);
  cx_steps(r, 1);
  cx_phase(r, ET_BWD_POST, 0);
  cx_phase(r, ET_BWD_FIRST, 0);
  cx_static(r, 1);
  for (int i = 0; i < t->npparts; i++) {
    const EtParamPart *p = &pp[i];
    unsigned long long g = p->grad >= 0 ? r->bases[p->grad] : 0;
    if (r->mode == CX_CAPI) {
      if (p->part) continue;
      unsigned long long g1 = p->cplx && pp[i + 1].grad >= 0 ? r->bases[pp[i + 1].grad] : 0;
      cx_pack(r, p->numel, g, p->grad_k, g1, p->cplx ? pp[i + 1].grad_k : 0.0f, p->cplx ? 2 : 1, io->grads[p->param]);
    } else if (!p->numel) continue;
    else if (g) cx_dtod(r, io->grads[i], g, 4 * (size_t)p->numel);
    else if (cx_is_zero(p->grad_k)) cx_zero(r, io->grads[i], (size_t)p->numel);
    else cx_fill_rows(r, 1, p->numel, p->grad_k, io->grads[i], 0);
  }
  /* dL/dh0: the dL/dh0 arrays in scan mode (CX_SEQIO: the caller's already), else the dstates' rows 0;
   * a still history's is dL/dfinal, its dstate's row T */
  for (int q = 0; io->out && q < t->nsparts; q++) {
    long long n = (long long)r->B * sp[q].size;
    unsigned long long still = 4ull * (unsigned long long)((long long)r->T * n);
    if (r->mode == CX_SEQIO) {
      if (sp[q].still) cx_dtod(r, io->out[q], r->arr[sp[q].darr] + still, 4 * (size_t)n);
      else if (!t->scan) cx_dtod(r, io->out[q], r->arr[sp[q].darr], 4 * (size_t)n);
    } else if (sp[q].part == 0) {
      int from_gh0 = t->scan && !sp[q].still;
      int a0 = from_gh0 ? sp[q].gh0 : sp[q].darr, a1 = !sp[q].cplx ? -1 : from_gh0 ? sp[q + 1].gh0 : sp[q + 1].darr;
      unsigned long long at = sp[q].still ? still : 0;
      cx_pack(r, n, a0 >= 0 ? r->arr[a0] + at : 0, 0.0f, a1 >= 0 ? r->arr[a1] + at : 0, 0.0f, sp[q].cplx ? 2 : 1,
              io->out[sp[q].state]);
    }
  }
  return r->status;
}

#endif
