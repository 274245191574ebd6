/* emu_cublas.c: emulated cuBLAS: SGEMM (plain and strided-batched) with cuBLAS's column-major
 * semantics and argument checks, computed by OpenBLAS; every operand must lie inside device
 * memory, so a wrong leading dimension or transpose fails here as it would on a GPU. */
#include <cblas.h>
#include <string.h>

#include "support.h"
#include "emu.h"

#define BLAS_MAGIC 0x626c6173

typedef struct EmuBlas {
  int magic;
  cublasMath_t math;
  cublasPointerMode_t pointer_mode;
} EmuBlas;

static cublasStatus_t blas_fail(cublasStatus_t s, const char *what) {
  emu_set_detail("%s", what);
  return s;
}

static EmuBlas *handle(cublasHandle_t h) {
  EmuBlas *b = (EmuBlas *)h;
  return b && b->magic == BLAS_MAGIC ? b : NULL;
}

cublasStatus_t emu_cublasCreate(cublasHandle_t *h) {
  if (!h) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: NULL handle pointer");
  EmuBlas *b = xcalloc(1, sizeof *b);
  b->magic = BLAS_MAGIC;
  *h = (cublasHandle_t)b;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasDestroy(cublasHandle_t h) {
  EmuBlas *b = handle(h);
  if (!b) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: not a live handle");
  b->magic = 0;
  free(b);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  (void)s;
  return handle(h) ? CUBLAS_STATUS_SUCCESS : blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: not a live handle");
}

cublasStatus_t emu_cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  EmuBlas *b = handle(h);
  if (!b) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode: not a live handle");
  b->math = mode; /* TF32 and the like round on a GPU; here every mode is exact float32 */
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode) {
  EmuBlas *b = handle(h);
  if (!b) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetPointerMode: not a live handle");
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode: unknown mode");
  b->pointer_mode = mode; /* device memory is host memory: both read alike */
  return CUBLAS_STATUS_SUCCESS;
}

const char *emu_cublasGetStatusName(cublasStatus_t s) {
  return cuda_cublas_status_name(s);
}

/* One GEMM's shape: op(A) is m x k, op(B) is k x n, C is m x n, all column-major. */
typedef struct Gemm {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  long long sa, sb, sc;
  int batch;
} Gemm;

static bool op_ok(cublasOperation_t t) {
  return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C;
}

static int max1(int a) {
  return a > 1 ? a : 1;
}

/* cuBLAS's own checks, in its terms. */
static cublasStatus_t check_args(const char *call, const Gemm *g) {
  const char *bad = NULL;
  if (!op_ok(g->ta) || !op_ok(g->tb)) bad = "transa/transb must be CUBLAS_OP_N, _T or _C";
  else if (g->m < 0 || g->n < 0 || g->k < 0) bad = "m, n and k must be >= 0";
  else if (g->lda < max1(g->ta == CUBLAS_OP_N ? g->m : g->k)) bad = "lda < max(1, rows of A as stored)";
  else if (g->ldb < max1(g->tb == CUBLAS_OP_N ? g->k : g->n)) bad = "ldb < max(1, rows of B as stored)";
  else if (g->ldc < max1(g->m)) bad = "ldc < max(1, m)";
  else if (g->batch < 0) bad = "batchCount < 0";
  if (!bad) return CUBLAS_STATUS_SUCCESS;
  emu_set_detail("%s: %s (transa=%d transb=%d m=%d n=%d k=%d lda=%d ldb=%d ldc=%d)", call, bad,
                 (int)g->ta, (int)g->tb, g->m, g->n, g->k, g->lda, g->ldb, g->ldc);
  return CUBLAS_STATUS_INVALID_VALUE;
}

/* Elements a column-major matrix of rows x cols with leading dimension ld spans. */
static size_t extent(int rows, int cols, int ld) {
  return rows == 0 || cols == 0 ? 0 : (size_t)(cols - 1) * (size_t)ld + (size_t)rows;
}

static bool operand_ok(const char *call, const char *name, const float *p, int rows, int cols,
                       int ld) {
  size_t bytes = extent(rows, cols, ld) * sizeof(float);
  if (bytes == 0 || emu_device_range(p, bytes)) return true;
  emu_set_detail("%s: %s (%d x %d as stored, ld=%d: %zu bytes from %p) is not inside one device "
                 "allocation (a wrong leading dimension, transpose or pointer)",
                 call, name, rows, cols, ld, bytes, (const void *)p);
  return false;
}

static CBLAS_TRANSPOSE cblas_op(cublasOperation_t t) {
  return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

/* C = alpha op(A) op(B) + beta C for one matrix of the batch. */
static cublasStatus_t gemm_one(const char *call, const Gemm *g, float alpha, const float *A,
                               const float *B, float beta, float *C) {
  int ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
  int br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
  if (!operand_ok(call, "C", C, g->m, g->n, g->ldc)) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (g->k > 0 && alpha != 0.0f &&
      (!operand_ok(call, "A", A, ar, ac, g->lda) || !operand_ok(call, "B", B, br, bc, g->ldb)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (g->k == 0 || alpha == 0.0f) { /* C = beta C; beta == 0 never reads C */
    for (int j = 0; j < g->n; j++)
      for (int i = 0; i < g->m; i++) {
        float *c = &C[(size_t)j * (size_t)g->ldc + (size_t)i];
        *c = beta == 0.0f ? 0.0f : beta * *c;
      }
    return CUBLAS_STATUS_SUCCESS;
  }
  cblas_sgemm(CblasColMajor, cblas_op(g->ta), cblas_op(g->tb), g->m, g->n, g->k, alpha, A, g->lda,
              B, g->ldb, beta, C, g->ldc);
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t gemm(const char *call, cublasHandle_t h, const Gemm *g, const float *alpha,
                           const float *A, const float *B, const float *beta, float *C) {
  if (!handle(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cuBLAS call on a handle that is not live");
  cublasStatus_t s = check_args(call, g);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (!alpha || !beta) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "NULL alpha or beta");
  if (g->m == 0 || g->n == 0 || g->batch == 0) return CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < g->batch && s == CUBLAS_STATUS_SUCCESS; i++)
    s = gemm_one(call, g, *alpha, A + i * g->sa, B + i * g->sb, *beta, C + i * g->sc);
  return s;
}

cublasStatus_t emu_cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                               int n, int k, const float *alpha, const float *A, int lda,
                               const float *B, int ldb, const float *beta, float *C, int ldc) {
  Gemm g = {ta, tb, m, n, k, lda, ldb, ldc, 0, 0, 0, 1};
  return gemm("cublasSgemm", h, &g, alpha, A, B, beta, C);
}

cublasStatus_t emu_cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                             cublasOperation_t tb, int m, int n, int k,
                                             const float *alpha, const float *A, int lda,
                                             long long sa, const float *B, int ldb, long long sb,
                                             const float *beta, float *C, int ldc, long long sc,
                                             int batch) {
  Gemm g = {ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch};
  return gemm("cublasSgemmStridedBatched", h, &g, alpha, A, B, beta, C);
}
