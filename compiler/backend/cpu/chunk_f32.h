/* chunk_f32.h: what the cpu's float32 chunk ops (chunkop_f32.c, chunkdelta_f32.c) share. */
#ifndef CELLC_CHUNK_F32_H
#define CELLC_CHUNK_F32_H

#include <stdbool.h>

/* y = e^x for n values, 0 under -87: Cephes' expf after range reduction, within 1e-7 relative,
 * vectorized on every x86-64 (chunkop_f32.c) */
void cpu_vexp(float *restrict y, const float *restrict x, int n);

/* C[M, N] = op(A) B, or C += that when acc: the ops' products (chunkop_f32.c) */
void cpu_mm(bool trans_a, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, bool acc);

/* A call's chunk length: L, or T where shorter (1 at T = 0) */
static inline int chunk_call_length(int T, int L) { return L < T ? L : (T > 0 ? T : 1); }

#endif
