/* gemm_core.h: the freestanding part of cellc's sgemm (stdint/stddef/stdbool only: no allocation,
 * no CPUID, no I/O), the micro-kernels, the packing into caller-given memory and the weight
 * gradient's float64 totals over caller-given buffers. gemm.c builds its allocating API on it
 * (gemm.h), and the plan executor (compiler/backend/cpu/exec.c) calls it directly, both in cellc
 * and in the object that `cellc emit --target cpu` writes (clang compiles this file into the
 * executor's bitcode). The caller picks the instruction set (gemm.h's gemm_isa_host in cellc,
 * the CPU's features at run time in an emitted object); GEMM_BLAS calls cblas_sgemm, which both
 * link (-lopenblas). */
#ifndef CELLC_GEMM_CORE_H
#define CELLC_GEMM_CORE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum GemmIsa { GEMM_BLAS, GEMM_AVX2, GEMM_AVX512 } GemmIsa;

/* A packed weight matrix: for the kernels, panels of nr columns ([N / nr rounded up][K][nr],
 * the last padded with zeros); for GEMM_BLAS, W itself. */
typedef struct GemmPacked {
  GemmIsa isa;
  bool trans;
  int N, K, nr;
  const float *w; /* GEMM_BLAS: W as given */
  int ldw;
  float *p;       /* the panels (64-byte aligned) */
  size_t cap;     /* floats p holds */
} GemmPacked;

/* The floats the panels of an N x K product take with `isa` (0 for GEMM_BLAS; a multiple of 16). */
size_t gemm_pack_floats(GemmIsa isa, int N, int K);
/* Packs W (row stride ldw) into mem (gemm_pack_floats floats, 64-byte aligned) for `isa`. */
void gemm_pack_into(GemmPacked *pk, GemmIsa isa, const float *W, int ldw, int N, int K, bool trans, float *mem);
/* C[M, N] = A[M, K] op(W), or C += that when `accumulate`. */
void gemm_run(const GemmPacked *pk, int M, const float *A, int lda, float *C, int ldc, bool accumulate);

/* C[M, N] = op(A) B, or C += that when `accumulate`: products whose operands change every call
 * (the chunk ops' blocks), nothing packed. A row-major [M, K] (trans_a: [K, M]), B [K, N], C, each
 * read in place at its row stride; fastest where A and B fit in L1 together. */
void gemm_small(GemmIsa isa, bool trans_a, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                int ldc, bool accumulate);
/* n columns of a matrix: row k's at a + k lda. */
typedef struct GemmCols {
  const float *a;
  int lda, n;
} GemmCols;

/* The weight gradient's buffers for one call of gemm_tn_total_into: packed blocks of A and B and
 * the float32 sum of a superblock, each 64-byte aligned, of at least the floats gemm_tn_floats
 * gives. */
typedef struct GemmTnBuf {
  float *at, *bt, *blk;
} GemmTnBuf;
void gemm_tn_floats(GemmIsa isa, const GemmCols *a, int na, const GemmCols *b, int nb, size_t *at, size_t *bt, size_t *blk);

/* The weight gradient in float64: total[M, N] += A^T B over K rows, A [K, M] the na column blocks
 * side by side (M their columns in all; blocks of several arrays: the gate adjoints of products
 * that share B), B [K, N] the nb column blocks side by side (N their columns: the inputs of
 * products that share A, as an LSTM's x and h), as the float32 sums of superblocks of GEMM_TN_ROWS
 * rows (from row 0) added in float64. A caller that splits the rows between threads at multiples
 * of GEMM_TN_ROWS and adds the threads' totals gets the same sums (to the rounding of float64
 * additions of a few float32 values, which are exact unless their magnitudes differ by 2^29).
 * With `colsum`, also colsum[M] += the column sums of A over the rows (the bias gradient), summed
 * the same way, read while A is packed. */
enum { GEMM_TN_ROWS = 4096 };
void gemm_tn_total_into(GemmIsa isa, const GemmCols *a, int na, const GemmCols *b, int nb, int K, double *total,
                        double *colsum, const GemmTnBuf *buf);

#endif
