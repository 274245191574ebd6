/* cellc_emit_host.h: the host side of every P.cu that `cellc emit --target cuda` writes: the device
 * operations of the CUDA host's executor (cellc_exec.h) on the CUDA runtime API and cuBLAS, on the
 * caller's stream, and the C API's calls around it, every array in the caller's workspace.
 * cuda_emit.c pastes cellc_launch.h, plan_table.h and cellc_exec.h before this text, then the plan
 * as plan_table.h's table (words of a uint32_t array) and its kernels (CxHostPlan). Everything is
 * static: several emitted cells link into one program.
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
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Statuses (P_strerror). */
enum { CELLC_E_OK, CELLC_E_SIZE, CELLC_E_NULL, CELLC_E_OVERFLOW, CELLC_E_CUDA, CELLC_E_CUBLAS, CELLC_E_LENGTHS, CELLC_E_THREADS };

static const char *cellc_e_strerror(int status) {
  switch (status) {
  case CELLC_E_OK: return "success";
  case CELLC_E_SIZE: return "T and B must be at least 1";
  case CELLC_E_NULL: return "a required pointer is NULL (w or one of its members, x, y, work; dy and grad in backward)";
  case CELLC_E_OVERFLOW: return "T * B is too large: a size overflows";
  case CELLC_E_CUDA: return "a CUDA runtime call failed (a kernel launch, a copy or a memset)";
  case CELLC_E_CUBLAS: return "cuBLAS failed (creating the handle, or a GEMM)";
  case CELLC_E_LENGTHS: return "a length is outside 1..T";
  case CELLC_E_THREADS: return "threads is negative";
  default: return "unknown status";
  }
}

/* The plan and its kernels: the table, the CUDA-only facts, plan kernel i, and the CX_K_* kernels
 * (NULL when absent). */
typedef struct CxHostPlan {
  const EtHeader *t;
  const CxKernels *k;
  const void *const *kfn;
  const void *const *fixed;
} CxHostPlan;

/* ---- the device operations (CxOps) ---- */

typedef struct CxHostCtx {
  const CxHostPlan *pl;
  cudaStream_t s;
  cublasHandle_t h;
} CxHostCtx;

static int cellc_e_launch(void *ctx, int k, unsigned gx, unsigned gy, unsigned block, unsigned shared, void **args) {
  const CxHostCtx *c = (const CxHostCtx *)ctx;
  dim3 g, b;
  g.x = gx, g.y = gy, g.z = 1;
  b.x = block, b.y = 1, b.z = 1;
  const void *f = k >= 0 ? c->pl->kfn[k] : c->pl->fixed[-1 - k];
  if (cellc_needs_optin(shared) &&
      cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared) != cudaSuccess)
    return CELLC_E_CUDA;
  return cudaLaunchKernel(f, g, b, args, shared, c->s) == cudaSuccess ? CELLC_E_OK : CELLC_E_CUDA;
}

static int cellc_e_sgemm(void *ctx, int ta, int tb, int m, int n, int k, unsigned long long A, int lda, unsigned long long B, int ldb,
                         float beta, unsigned long long C, int ldc) {
  const CxHostCtx *c = (const CxHostCtx *)ctx;
  float one = 1.0f;
  return cublasSgemm(c->h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, (const float *)(uintptr_t)A,
                     lda, (const float *)(uintptr_t)B, ldb, &beta, (float *)(uintptr_t)C, ldc) == CUBLAS_STATUS_SUCCESS
             ? CELLC_E_OK
             : CELLC_E_CUBLAS;
}

static int cellc_e_htod(void *ctx, unsigned long long dst, const void *src, size_t bytes) {
  const CxHostCtx *c = (const CxHostCtx *)ctx;
  return cudaMemcpyAsync((void *)(uintptr_t)dst, src, bytes, cudaMemcpyHostToDevice, c->s) == cudaSuccess ? CELLC_E_OK : CELLC_E_CUDA;
}

static int cellc_e_dtod(void *ctx, unsigned long long dst, unsigned long long src, size_t bytes) {
  const CxHostCtx *c = (const CxHostCtx *)ctx;
  return cudaMemcpyAsync((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, cudaMemcpyDeviceToDevice, c->s) == cudaSuccess
             ? CELLC_E_OK
             : CELLC_E_CUDA;
}

static int cellc_e_zero(void *ctx, unsigned long long dst, size_t floats) {
  const CxHostCtx *c = (const CxHostCtx *)ctx;
  return cudaMemsetAsync((void *)(uintptr_t)dst, 0, 4 * floats, c->s) == cudaSuccess ? CELLC_E_OK : CELLC_E_CUDA;
}

static const CxOps cellc_e_ops = {cellc_e_launch, cellc_e_sgemm, cellc_e_htod, cellc_e_dtod, cellc_e_zero, NULL, NULL};

/* ---- the C API ---- */

static thread_local cublasHandle_t cellc_e_blas_handle = NULL;

static void cellc_e_release(void) {
  if (cellc_e_blas_handle) cublasDestroy(cellc_e_blas_handle);
  cellc_e_blas_handle = NULL;
}

/* A run over the caller's storage for the arrays (arr, off: per array; bases: per slot), its
 * layout for T, B: CELLC_E_OK, or CELLC_E_SIZE / CELLC_E_OVERFLOW. */
static int cellc_e_prepare(CxRun *r, const CxHostPlan *pl, int T, int B, unsigned long long *arr, unsigned long long *bases,
                           unsigned long long *off) {
  memset(r, 0, sizeof *r);
  r->t = pl->t, r->k = pl->k, r->ops = &cellc_e_ops, r->mode = CX_CAPI;
  r->arr = arr, r->bases = bases, r->off = off, r->T = T, r->B = B;
  int st = cx_layout(r, T, B);
  return st == CX_OK ? CELLC_E_OK : st == CX_SIZE ? CELLC_E_SIZE : CELLC_E_OVERFLOW;
}

/* P_workspace_bytes: 0 for a bad size. */
static size_t cellc_e_workspace(const CxHostPlan *pl, int T, int B, unsigned long long *arr, unsigned long long *bases,
                                unsigned long long *off) {
  CxRun r;
  return cellc_e_prepare(&r, pl, T, B, arr, bases, off) ? 0 : (size_t)r.L.total;
}

/* The forward (bwd 0) or backward of one call; w per param, the caller checked the rest. */
static int cellc_e_run(const CxHostPlan *pl, int bwd, int T, int B, const CxIO *io, void *work, void *stream, unsigned long long *arr,
                       unsigned long long *bases, unsigned long long *off) {
  CxRun r;
  if (T < 1 || B < 1) return CELLC_E_SIZE;
  if (!io->x || (bwd ? !io->dy : !io->y) || !work) return CELLC_E_NULL;
  for (int i = 0; i < pl->t->nparams; i++)
    if (!io->params[i]) return CELLC_E_NULL;
  int st = cellc_e_prepare(&r, pl, T, B, arr, bases, off);
  if (st) return st;
  if (!cellc_e_blas_handle && cublasCreate(&cellc_e_blas_handle) != CUBLAS_STATUS_SUCCESS) {
    cellc_e_blas_handle = NULL;
    return CELLC_E_CUBLAS;
  }
  CxHostCtx c;
  c.pl = pl, c.s = (cudaStream_t)stream, c.h = cellc_e_blas_handle;
  if (cublasSetStream(c.h, c.s) != CUBLAS_STATUS_SUCCESS) return CELLC_E_CUBLAS;
  r.ctx = &c;
  return bwd ? cx_backward(&r, io, (unsigned long long)(uintptr_t)work) : cx_forward(&r, io, (unsigned long long)(uintptr_t)work);
}

/* ---- lengths (ABI 2's P_forward_ex, P_backward_ex) ----
 * The batch in segments between its distinct lengths, as cellc's pipeline runs it
 * (compiler/pipeline/varlen.c) and the cpu target's executor: segment j runs steps [u_{j-1}, u_j)
 * of the rows still running, gathered (device-to-device copies on the stream) into buffers of its
 * own (cudaMalloc'd per call), as an ordinary P_forward / P_backward of that many steps and rows in
 * the caller's workspace. The backward runs the forward sweep again for the segments' initial
 * states, then the segments last to first, each one's forward again before its backward; the
 * weight gradients are summed over segments (a GEMM with beta 1). lengths is host memory. */

typedef int (*CellcEFwd)(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y, float *const *final,
                         void *work, void *stream);
typedef int (*CellcEBwd)(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,
                         const float *const *dfinal, void *work, float *const *grad, float *dx, float *const *dh0, void *stream);

enum { CELLC_E_MAXP = 64 };

typedef struct CellcESeg {
  int t0, t1, n;
  int *act, *pos;
} CellcESeg;

typedef struct CellcEVarlen {
  const EtHeader *t;
  int T, B, K, ns, np;
  const int *len;
  cudaStream_t s;
  size_t sw[CELLC_E_MAXP], pw[CELLC_E_MAXP];
  CellcESeg *seg;
  float *xs, *ys, *dys, *dxs, *one;
  float **h0;
  float *fin[CELLC_E_MAXP], *dfin[CELLC_E_MAXP], *gh[2][CELLC_E_MAXP], *gtmp[CELLC_E_MAXP];
  int rc;
} CellcEVarlen;

static int cellc_e_cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static float *cellc_e_dev(CellcEVarlen *v, size_t floats) {
  void *p = NULL;
  if (cudaMalloc(&p, 4 * (floats ? floats : 1)) != cudaSuccess) {
    v->rc = CELLC_E_CUDA;
    return NULL;
  }
  return (float *)p;
}

static void cellc_e_varlen_free(CellcEVarlen *v) {
  cudaStreamSynchronize(v->s); /* the copies on the stream read these buffers */
  for (int j = 0; v->seg && j < v->K; j++) free(v->seg[j].act), free(v->seg[j].pos);
  for (int j = 1; v->h0 && j < v->K; j++)
    for (int q = 0; q < v->ns; q++) cudaFree(v->h0[j * v->ns + q]);
  free(v->seg), free(v->h0);
  cudaFree(v->xs), cudaFree(v->ys), cudaFree(v->dys), cudaFree(v->dxs), cudaFree(v->one);
  for (int q = 0; q < v->ns; q++) cudaFree(v->fin[q]), cudaFree(v->dfin[q]), cudaFree(v->gh[0][q]), cudaFree(v->gh[1][q]);
  for (int i = 0; i < v->np; i++) cudaFree(v->gtmp[i]);
}

/* The segments and their buffers: CELLC_E_OK, or a status with everything freed. */
static int cellc_e_varlen_init(CellcEVarlen *v, const CxHostPlan *pl, int T, int B, const int *len, void *stream) {
  memset(v, 0, sizeof *v);
  const EtHeader *t = pl->t;
  v->t = t, v->T = T, v->B = B, v->len = len, v->s = (cudaStream_t)stream, v->ns = t->nstates, v->np = t->nparams;
  if (v->ns > CELLC_E_MAXP || v->np > CELLC_E_MAXP) return CELLC_E_OVERFLOW;
  const EtStatePart *sp = (const EtStatePart *)((const char *)t + t->sparts);
  const EtParamPart *pp = (const EtParamPart *)((const char *)t + t->pparts);
  for (int q = 0; q < t->nsparts; q++) v->sw[sp[q].state] += (size_t)sp[q].size;
  for (int i = 0; i < t->npparts; i++) v->pw[pp[i].param] += (size_t)pp[i].numel;
  int *u = (int *)malloc(sizeof(int) * (size_t)B);
  v->seg = (CellcESeg *)calloc((size_t)B, sizeof(CellcESeg));
  if (!u || !v->seg) return free(u), cellc_e_varlen_free(v), CELLC_E_OVERFLOW;
  memcpy(u, len, sizeof(int) * (size_t)B);
  qsort(u, (size_t)B, sizeof(int), cellc_e_cmp_int);
  for (int b = 0; b < B; b++)
    if (!v->K || u[b] != u[v->K - 1]) u[v->K++] = u[b];
  for (int j = 0; j < v->K; j++) {
    CellcESeg *g = &v->seg[j];
    g->t0 = j ? u[j - 1] : 0, g->t1 = u[j];
    g->act = (int *)calloc((size_t)B, sizeof(int)), g->pos = (int *)calloc((size_t)B, sizeof(int));
    if (!g->act || !g->pos) return free(u), cellc_e_varlen_free(v), CELLC_E_OVERFLOW;
    for (int b = 0, k = 0; b < B; b++) {
      if (j && k < v->seg[j - 1].n && b == v->seg[j - 1].act[k]) k++;
      if (len[b] < g->t1) continue;
      g->pos[g->n] = j ? k - 1 : g->n;
      g->act[g->n++] = b;
    }
  }
  free(u);
  size_t rows = (size_t)T * (size_t)B;
  v->xs = cellc_e_dev(v, rows * (size_t)t->x_size), v->dxs = cellc_e_dev(v, rows * (size_t)t->x_size);
  v->ys = cellc_e_dev(v, rows * (size_t)t->output_size), v->dys = cellc_e_dev(v, rows * (size_t)t->output_size);
  v->one = cellc_e_dev(v, 1);
  v->h0 = (float **)calloc((size_t)v->K * (size_t)v->ns + 1, sizeof(float *));
  if (!v->h0) v->rc = CELLC_E_OVERFLOW;
  for (int j = 1; !v->rc && j < v->K; j++)
    for (int q = 0; q < v->ns; q++) v->h0[j * v->ns + q] = cellc_e_dev(v, (size_t)v->seg[j].n * v->sw[q]);
  for (int q = 0; q < v->ns; q++) {
    size_t n = (size_t)B * v->sw[q];
    v->fin[q] = cellc_e_dev(v, n), v->dfin[q] = cellc_e_dev(v, n), v->gh[0][q] = cellc_e_dev(v, n), v->gh[1][q] = cellc_e_dev(v, n);
  }
  for (int i = 0; i < v->np; i++) v->gtmp[i] = cellc_e_dev(v, v->pw[i]);
  float one = 1.0f;
  if (!v->rc && cudaMemcpyAsync(v->one, &one, 4, cudaMemcpyHostToDevice, v->s) != cudaSuccess) v->rc = CELLC_E_CUDA;
  if (!v->rc && cudaStreamSynchronize(v->s) != cudaSuccess) v->rc = CELLC_E_CUDA; /* `one` is on the stack */
  int rc = v->rc;
  if (rc) cellc_e_varlen_free(v);
  return rc;
}

static void cellc_e_copy(CellcEVarlen *v, float *dst, const float *src, size_t floats) {
  if (!v->rc && cudaMemcpyAsync(dst, src, 4 * floats, cudaMemcpyDeviceToDevice, v->s) != cudaSuccess) v->rc = CELLC_E_CUDA;
}

/* Rows of w floats between a [T, B, w] array and segment g's [t1 - t0, n, w] (gather: into the
 * segment's), runs of consecutive rows as one copy. */
static void cellc_e_steps(CellcEVarlen *v, const CellcESeg *g, float *seq, float *sub, size_t w, bool gather) {
  for (int t = g->t0; t < g->t1; t++)
    for (int i = 0; i < g->n;) {
      int e = i + 1;
      while (e < g->n && g->act[e] == g->act[e - 1] + 1) e++;
      float *a = seq + ((size_t)t * (size_t)v->B + (size_t)g->act[i]) * w;
      float *b = sub + ((size_t)(t - g->t0) * (size_t)g->n + (size_t)i) * w;
      if (gather) cellc_e_copy(v, b, a, (size_t)(e - i) * w);
      else cellc_e_copy(v, a, b, (size_t)(e - i) * w);
      i = e;
    }
}

static const float *const *cellc_e_seg_h0(const CellcEVarlen *v, int j, const float *const *h0) {
  return j ? (const float *const *)v->h0 + (size_t)j * (size_t)v->ns : h0; /* segment 0 runs every row */
}

static int cellc_e_sweep_forward(CellcEVarlen *v, CellcEFwd fwd, const float *const *w, const float *x, const float *const *h0,
                                 float *y, float *const *final, void *work) {
  if (y && cudaMemsetAsync(y, 0, 4 * (size_t)v->T * (size_t)v->B * (size_t)v->t->output_size, v->s) != cudaSuccess) return CELLC_E_CUDA;
  for (int j = 0; j < v->K && !v->rc; j++) {
    const CellcESeg *g = &v->seg[j];
    cellc_e_steps(v, g, (float *)x, v->xs, (size_t)v->t->x_size, true);
    int rc = v->rc ? v->rc : fwd(w, g->t1 - g->t0, g->n, v->xs, cellc_e_seg_h0(v, j, h0), v->ys, v->fin, work, v->s);
    if (rc) return rc;
    if (y) cellc_e_steps(v, g, y, v->ys, (size_t)v->t->output_size, false);
    for (int q = 0; q < v->ns; q++) {
      size_t sw = v->sw[q];
      for (int i = 0; final && final[q] && i < g->n; i++)
        if (v->len[g->act[i]] == g->t1) cellc_e_copy(v, final[q] + (size_t)g->act[i] * sw, v->fin[q] + (size_t)i * sw, sw);
      for (int i = 0; j + 1 < v->K && i < v->seg[j + 1].n; i++)
        cellc_e_copy(v, v->h0[(j + 1) * v->ns + q] + (size_t)i * sw, v->fin[q] + (size_t)v->seg[j + 1].pos[i] * sw, sw);
    }
  }
  return v->rc;
}

static int cellc_e_sweep_backward(CellcEVarlen *v, CellcEFwd fwd, CellcEBwd bwd, const float *const *w, const float *x,
                                  const float *const *h0, const float *dy, const float *const *dfinal, void *work,
                                  float *const *grad, float *dx, float *const *dh0) {
  if (dx && cudaMemsetAsync(dx, 0, 4 * (size_t)v->T * (size_t)v->B * (size_t)v->t->x_size, v->s) != cudaSuccess) return CELLC_E_CUDA;
  for (int j = v->K - 1; j >= 0 && !v->rc; j--) {
    const CellcESeg *g = &v->seg[j];
    int Tj = g->t1 - g->t0;
    cellc_e_steps(v, g, (float *)x, v->xs, (size_t)v->t->x_size, true);
    cellc_e_steps(v, g, (float *)dy, v->dys, (size_t)v->t->output_size, true);
    float **dnext = v->gh[(j + 1) % 2];
    for (int q = 0; q < v->ns; q++) {
      size_t sw = v->sw[q];
      for (int i = 0, k = 0; i < g->n; i++) {
        int b = g->act[i];
        float *dst = v->dfin[q] + (size_t)i * sw;
        if (v->len[b] != g->t1) cellc_e_copy(v, dst, dnext[q] + (size_t)k++ * sw, sw);
        else if (dfinal && dfinal[q]) cellc_e_copy(v, dst, dfinal[q] + (size_t)b * sw, sw);
        else if (!v->rc && cudaMemsetAsync(dst, 0, 4 * sw, v->s) != cudaSuccess) v->rc = CELLC_E_CUDA;
      }
    }
    int rc = v->rc ? v->rc : fwd(w, Tj, g->n, v->xs, cellc_e_seg_h0(v, j, h0), v->ys, NULL, work, v->s);
    float *const *gj = j == v->K - 1 ? grad : v->gtmp;
    float *const *dh = j ? v->gh[j % 2] : dh0;
    if (!rc) rc = bwd(w, Tj, g->n, v->xs, cellc_e_seg_h0(v, j, h0), v->dys, (const float *const *)v->dfin, work, gj, dx ? v->dxs : NULL, dh, v->s);
    if (rc) return rc;
    if (dx) cellc_e_steps(v, g, dx, v->dxs, (size_t)v->t->x_size, false);
    for (int i = 0; j < v->K - 1 && i < v->np && !v->rc; i++) { /* grad += gtmp: [pw, 1] times [1, 1] plus beta 1 */
      float a = 1.0f, b = 1.0f;
      if (cublasSetStream(cellc_e_blas_handle, v->s) != CUBLAS_STATUS_SUCCESS ||
          cublasSgemm(cellc_e_blas_handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)v->pw[i], 1, 1, &a, v->gtmp[i], (int)v->pw[i], v->one, 1,
                      &b, grad[i], (int)v->pw[i]) != CUBLAS_STATUS_SUCCESS)
        v->rc = CELLC_E_CUBLAS;
    }
  }
  return v->rc;
}

/* lengths: CELLC_E_OK with *varlen whether one lies below T, or CELLC_E_LENGTHS. */
static int cellc_e_check_lengths(const int *len, int T, int B, bool *varlen) {
  *varlen = false;
  for (int b = 0; len && b < B; b++) {
    if (len[b] < 1 || len[b] > T) return CELLC_E_LENGTHS;
    *varlen = *varlen || len[b] < T;
  }
  return CELLC_E_OK;
}

static int cellc_e_forward_ex(const CxHostPlan *pl, CellcEFwd fwd, const float *const *w, int T, int B, const float *x,
                              const float *const *h0, float *y, float *const *final, void *work, const int *len, int threads,
                              void *stream) {
  bool varlen;
  if (T < 1 || B < 1) return CELLC_E_SIZE;
  if (threads < 0) return CELLC_E_THREADS;
  int rc = cellc_e_check_lengths(len, T, B, &varlen);
  if (rc || !varlen) return rc ? rc : fwd(w, T, B, x, h0, y, final, work, stream);
  if (!w || !x || !y || !work) return CELLC_E_NULL;
  CellcEVarlen v;
  if ((rc = cellc_e_varlen_init(&v, pl, T, B, len, stream))) return rc;
  rc = cellc_e_sweep_forward(&v, fwd, w, x, h0, y, final, work);
  cellc_e_varlen_free(&v);
  return rc;
}

static int cellc_e_backward_ex(const CxHostPlan *pl, CellcEFwd fwd, CellcEBwd bwd, const float *const *w, int T, int B, const float *x,
                               const float *const *h0, const float *dy, const float *const *dfinal, void *work, const int *len,
                               int threads, float *const *grad, float *dx, float *const *dh0, void *stream) {
  bool varlen;
  if (T < 1 || B < 1) return CELLC_E_SIZE;
  if (threads < 0) return CELLC_E_THREADS;
  int rc = cellc_e_check_lengths(len, T, B, &varlen);
  if (rc || !varlen) return rc ? rc : bwd(w, T, B, x, h0, dy, dfinal, work, grad, dx, dh0, stream);
  if (!w || !x || !dy || !work || !grad) return CELLC_E_NULL;
  for (int i = 0; i < pl->t->nparams; i++)
    if (!grad[i]) return CELLC_E_NULL;
  CellcEVarlen v;
  if ((rc = cellc_e_varlen_init(&v, pl, T, B, len, stream))) return rc;
  rc = cellc_e_sweep_forward(&v, fwd, w, x, h0, NULL, NULL, work);
  if (!rc) rc = cellc_e_sweep_backward(&v, fwd, bwd, w, x, h0, dy, dfinal, work, grad, dx, dh0);
  cellc_e_varlen_free(&v);
  return rc;
}
