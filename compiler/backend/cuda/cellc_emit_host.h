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
