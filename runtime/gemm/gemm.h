/* gemm.h: cellc's own single-precision GEMM, for the CPU back end's products with a weight
 * matrix W that stays constant over a forward or a backward, and for the model's dense layers
 * (runtime/nn: the head, a linear encoder):
 *   trans:  C[M, N] (+)= A[M, K] W^T,  W row-major [N, K] (PS_GEMM, nn_linear_forward)
 *   !trans: C[M, N] (+)= A[M, K] W,    W row-major [K, N] (PS_GEMM_T, the input gradient)
 * and the weight gradient C += A^T B over all rows (PS_OUTER_ACC, gemm_tn_total).
 * W is packed once (gemm_pack) into column panels of the micro-kernel's width; gemm_run then
 * takes any M rows of A (row stride lda) into C (row stride ldc), single-threaded (the caller
 * splits the rows between its threads). The micro-kernel comes from CPUID features: 8 x 32
 * with AVX-512 F, 6 x 16 with AVX2 + FMA; on a CPU with neither, cblas_sgemm. */
#ifndef CELLC_GEMM_H
#define CELLC_GEMM_H

#include <stdbool.h>
#include <stddef.h>

#include "gemm_core.h"

/* The widest kernel this CPU (and its OS's register state) runs. */
GemmIsa gemm_isa_host(void);
/* gemm_isa_host(), lowered by Tuning.gemm (tuning.h; CELLC_GEMM=blas|avx2|avx512, never raised
 * above what the host runs): the comparison switch of the benchmarks. */
GemmIsa gemm_isa_default(void);
/* Whether this CPU can run kernels of `isa`. */
bool gemm_isa_runs(GemmIsa isa);
const char *gemm_isa_name(GemmIsa isa);

/* Packs W (row stride ldw) for products with `isa` (a kernel the CPU runs); reuses pk's buffer. */
void gemm_pack(GemmPacked *pk, GemmIsa isa, const float *W, int ldw, int N, int K, bool trans);
/* gemm_run (gemm_core.h): C[M, N] = A[M, K] op(W), or C += that when `accumulate`. */
void gemm_packed_free(GemmPacked *pk);

/* The weight gradient's buffers (packed blocks, the float32 sum of a superblock, the float64
 * total), kept between calls; zero-initialized, freed with gemm_scratch_free. */
typedef struct GemmScratch {
  float *at, *bt, *blk;
  double *total;
  size_t cap_at, cap_bt, cap_blk, cap_total;
} GemmScratch;
void gemm_scratch_free(GemmScratch *s);
/* s's float64 buffer with room for n values (contents unspecified; kept in s). */
double *gemm_scratch_total(GemmScratch *s, size_t n);

/* gemm_tn_total_into (gemm_core.h) over s's buffers, grown as needed. `s` is required. */
void gemm_tn_total(GemmIsa isa, const GemmCols *a, int na, const GemmCols *b, int nb, int K, double *total, double *colsum,
                   GemmScratch *s);

/* The weight gradient: C[M, N] += A^T B, A [K, M] (row stride lda), B [K, N] (row stride ldb),
 * C row stride ldc; single-threaded (the caller splits M between its threads). `s`: buffers
 * kept between calls, or NULL (allocated and freed in the call). */
void gemm_tn_acc(GemmIsa isa, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                 GemmScratch *s);

#endif
