/* test_gemm.c: cellc's own sgemm (runtime/gemm/gemm.c) against a float64
 * reference, on every kernel this CPU runs (AVX-512 8x32, AVX2 6x16, cblas), forced through
 * gemm_pack's isa: both products (A W^T and A W), M from 1 to 70, N and K off the tiles,
 * row strides wider than the rows, beta 0 and 1; the cells around C are never written. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "support.h"

static void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

#define SENTINEL 12345.0f

/* The largest error of C [M, N] (row stride ldc) against op(A) B (+ C0 where acc) in float64,
 * relative to sum |a||b| + |c0|, A's element (i, k) at A[i ars + k aks] and B's (k, j) at
 * B[k bks + j bjs]; C's cells past N must still hold the sentinel. */
static double worst_error(GemmIsa isa, const float *C, const float *C0, int M, int N, int ldc, int K, bool acc, const float *A,
                          size_t ars, size_t aks, const float *B, size_t bks, size_t bjs) {
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < ldc; j++) {
      float got = C[(size_t)i * ldc + j], c0 = C0[(size_t)i * ldc + j];
      if (j >= N) {
        cr_assert(got == SENTINEL, "%s: wrote past the row: C[%d][%d]", gemm_isa_name(isa), i, j);
        continue;
      }
      double ref = acc ? c0 : 0, mag = acc ? fabs(c0) : 0;
      for (int k = 0; k < K; k++) {
        double a = A[(size_t)i * ars + (size_t)k * aks], b = B[(size_t)k * bks + (size_t)j * bjs];
        ref += a * b, mag += fabs(a * b);
      }
      double e = mag == 0 ? fabs(got - ref) : fabs(got - ref) / mag;
      if (e > worst) worst = e;
    }
  return worst;
}

/* One product on one kernel: C (M x N, ldc = N + padc) starts from random values (beta 1) or
 * sentinels (beta 0); returns the largest error relative to sum |a||w| + |c0|. */
static double check(GemmIsa isa, bool trans, int M, int N, int K, int pada, int padw, int padc, bool acc) {
  int lda = K + pada, ldc = N + padc, ldw = (trans ? K : N) + padw, wrows = trans ? N : K;
  float *A = malloc(sizeof(float) * ((size_t)M * lda + 1)), *W = malloc(sizeof(float) * ((size_t)wrows * ldw + 1));
  float *C = malloc(sizeof(float) * ((size_t)M * ldc + 1)), *C0 = malloc(sizeof(float) * ((size_t)M * ldc + 1));
  fill(A, (size_t)M * lda, 1 + (unsigned)M), fill(W, (size_t)wrows * ldw, 2 + (unsigned)N);
  fill(C0, (size_t)M * ldc, 3 + (unsigned)K);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < ldc; j++)
      if (j >= N || !acc) C0[(size_t)i * ldc + j] = SENTINEL;
  memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
  GemmPacked pk = {0};
  gemm_pack(&pk, isa, W, ldw, N, K, trans);
  gemm_run(&pk, M, A, lda, C, ldc, acc);
  double worst = worst_error(isa, C, C0, M, N, ldc, K, acc, A, lda, 1, W, trans ? 1 : ldw, trans ? ldw : 1);
  gemm_packed_free(&pk);
  free(A), free(W), free(C), free(C0);
  return worst;
}

static const GemmIsa isas[] = {GEMM_AVX512, GEMM_AVX2, GEMM_BLAS};

static void sweep(GemmIsa isa) {
  if (!gemm_isa_runs(isa)) {
    cr_skip_test("this CPU does not run %s", gemm_isa_name(isa));
    return;
  }
  static const int Ns[] = {1, 5, 16, 17, 31, 32, 33, 47, 48, 64, 70, 100};
  static const int Ks[] = {0, 1, 3, 8, 17, 33, 64, 129};
  int n = 0;
  for (int M = 1; M <= 70; M += (M < 17 ? 1 : 7))
    for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++)
      for (size_t ik = 0; ik < sizeof Ks / sizeof Ks[0]; ik++) {
        int N = Ns[in], K = Ks[ik];
        bool trans = (M + N + K) % 2, acc = (M * 3 + N + K) % 3 == 0;
        int pad = (M + N) % 4 == 0 ? 0 : (M + K) % 5 + 1;
        double e = check(isa, trans, M, N, K, pad, pad / 2, pad, acc);
        cr_assert(e < 1e-5, "%s %s M %d N %d K %d pad %d beta %d: relative error %g", gemm_isa_name(isa),
                  trans ? "A W^T" : "A W", M, N, K, pad, acc, e);
        n++;
      }
  cr_assert(n > 500);
}

Test(gemm, avx512_shapes) { sweep(GEMM_AVX512); }
Test(gemm, avx2_shapes) { sweep(GEMM_AVX2); }
Test(gemm, blas_shapes) { sweep(GEMM_BLAS); }

/* Both products, both betas, on every kernel at the GRU layer's per-step shapes (B = 64). */
Test(gemm, gru_step_shapes) {
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
    if (!gemm_isa_runs(isas[i])) continue;
    for (int H = 128; H <= 256; H *= 2)
      for (int acc = 0; acc < 2; acc++) {
        cr_assert(check(isas[i], true, 64, 3 * H, H, 0, 0, 0, acc) < 1e-5, "%s h U^T H %d", gemm_isa_name(isas[i]), H);
        cr_assert(check(isas[i], false, 64, H, 3 * H, 0, 0, 0, acc) < 1e-5, "%s dG U H %d", gemm_isa_name(isas[i]), H);
        cr_assert(check(isas[i], false, 32, H, 3 * H, 3, 5, 7, acc) < 1e-5, "%s dG U H %d, strided", gemm_isa_name(isas[i]), H);
      }
  }
}

/* A packed buffer is reused for a larger and a smaller matrix. */
Test(gemm, repack) {
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
    if (!gemm_isa_runs(isas[i])) continue;
    GemmPacked pk = {0};
    float W[40 * 40], A[9 * 40], C[9 * 40];
    fill(W, 1600, 5), fill(A, 360, 6);
    for (int n = 5; n <= 40; n += 35)
      for (int rep = 0; rep < 2; rep++) {
        gemm_pack(&pk, isas[i], W, 40, n, n, rep);
        gemm_run(&pk, 9, A, 40, C, 40, false);
        for (int r = 0; r < 9; r++)
          for (int j = 0; j < n; j++) {
            double ref = 0;
            for (int k = 0; k < n; k++) ref += (double)A[r * 40 + k] * (rep ? W[j * 40 + k] : W[k * 40 + j]);
            cr_assert(fabs(C[r * 40 + j] - ref) < 1e-5, "%s n %d", gemm_isa_name(isas[i]), n);
          }
      }
    gemm_packed_free(&pk);
  }
}

/* The kernel follows CPUID features; Tuning.gemm (CELLC_GEMM) only lowers it. */
Test(gemm, isa_from_features) {
  CpuFeatures f = cpu_features_host();
  GemmIsa h = gemm_isa_host();
  if (f.avx512f && f.os_zmm) cr_assert_eq(h, GEMM_AVX512);
  else if (f.avx2 && f.fma && f.os_ymm) cr_assert_eq(h, GEMM_AVX2);
  else cr_assert_eq(h, GEMM_BLAS);
  Tuning was = *tuning(), t = was;
  t.gemm = TUNING_GEMM_BLAS;
  tuning_set(&t);
  cr_assert_eq(gemm_isa_default(), GEMM_BLAS);
  t.gemm = TUNING_GEMM_AVX2;
  tuning_set(&t);
  cr_assert_eq(gemm_isa_default(), h >= GEMM_AVX2 ? GEMM_AVX2 : h);
  t.gemm = TUNING_GEMM_HOST;
  tuning_set(&t);
  cr_assert_eq(gemm_isa_default(), h);
  tuning_set(&was);
}

/* The weight gradient C += A^T B (A [K, M], B [K, N]) against float64, on every kernel: M and N
 * off the tiles, K across the row blocks, strides wider than the rows; C's padding untouched. */
static double check_tn(GemmIsa isa, int M, int N, int K, int pad, GemmScratch *scratch) {
  int lda = M + pad, ldb = N + pad, ldc = N + pad;
  float *A = malloc(sizeof(float) * ((size_t)K * lda + 1)), *B = malloc(sizeof(float) * ((size_t)K * ldb + 1));
  float *C = malloc(sizeof(float) * ((size_t)M * ldc + 1)), *C0 = malloc(sizeof(float) * ((size_t)M * ldc + 1));
  fill(A, (size_t)K * lda, 7 + (unsigned)M), fill(B, (size_t)K * ldb, 8 + (unsigned)N), fill(C0, (size_t)M * ldc, 9);
  for (int i = 0; i < M; i++)
    for (int j = N; j < ldc; j++) C0[(size_t)i * ldc + j] = SENTINEL;
  memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
  gemm_tn_acc(isa, M, N, K, A, lda, B, ldb, C, ldc, scratch);
  double worst = worst_error(isa, C, C0, M, N, ldc, K, true, A, 1, lda, B, ldb, 1); /* A^T B */
  free(A), free(B), free(C), free(C0);
  return worst;
}

Test(gemm, weight_gradient_shapes) {
  static const int Ms[] = {1, 5, 8, 9, 13, 40, 70}, Ns[] = {1, 7, 16, 17, 33, 48, 64, 70}, Ks[] = {0, 1, 5, 128, 129, 300};
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s])) continue;
    int n = 0;
    for (size_t im = 0; im < sizeof Ms / sizeof Ms[0]; im++)
      for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++)
        for (size_t ik = 0; ik < sizeof Ks / sizeof Ks[0]; ik++) {
          int M = Ms[im], N = Ns[in], K = Ks[ik], pad = (M + N + K) % 3 * 2;
          double e = check_tn(isas[s], M, N, K, pad, NULL);
          cr_assert(e < 1e-5, "%s A^T B M %d N %d K %d pad %d: relative error %g", gemm_isa_name(isas[s]), M, N, K, pad, e);
          n++;
        }
    cr_assert(n == 336);
  }
  /* the GRU layer's weight gradient at H = 128: [T B = 2048 rows] dG^T X, 3H x H */
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++)
    if (gemm_isa_runs(isas[s]))
      cr_assert(check_tn(isas[s], 384, 128, 2048, 0, NULL) < 1e-5, "%s GRU shape", gemm_isa_name(isas[s]));
}

/* Rows past one superblock (4096) go through the float64 total; a scratch kept between calls of
 * other shapes (larger, then smaller, then larger again) leaves nothing behind. */
/* gemm_tn_total's column sums of A (the bias gradient, taken in the packing), over rows split at
 * a superblock as two threads split them: the two halves' totals add up to the whole's, and the
 * sums follow float64. */
Test(gemm, weight_gradient_column_sums) {
  static const int shapes[][3] = {{13, 7, 100}, {70, 33, 9001}, {8, 32, 4096 + 5}};
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s])) continue;
    GemmScratch sc = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], lda = M + 3, ldb = N + 1;
      float *A = malloc(sizeof(float) * (size_t)K * lda), *B = malloc(sizeof(float) * (size_t)K * ldb);
      fill(A, (size_t)K * lda, 11 + (unsigned)i), fill(B, (size_t)K * ldb, 12 + (unsigned)i);
      double *t1 = calloc((size_t)M * N + M, sizeof(double)), *t2 = calloc((size_t)M * N + M, sizeof(double));
      gemm_tn_total(isas[s], &(GemmCols){A, lda, M}, 1, &(GemmCols){B, ldb, N}, 1, K, t1, t1 + (size_t)M * N, &sc);
      int half = K > GEMM_TN_ROWS ? GEMM_TN_ROWS : K;
      gemm_tn_total(isas[s], &(GemmCols){A, lda, M}, 1, &(GemmCols){B, ldb, N}, 1, half, t2, t2 + (size_t)M * N, &sc);
      gemm_tn_total(isas[s], &(GemmCols){A + (size_t)half * lda, lda, M}, 1, &(GemmCols){B + (size_t)half * ldb, ldb, N}, 1,
                    K - half, t2, t2 + (size_t)M * N, &sc);
      for (int r = 0; r < M; r++) {
        double ref = 0, mag = 0;
        for (int k = 0; k < K; k++) ref += A[(size_t)k * lda + r], mag += fabs(A[(size_t)k * lda + r]);
        double got = t1[(size_t)M * N + r];
        cr_assert(fabs(got - ref) <= 1e-5 * mag, "%s column sum %d of %dx%d: %g, float64 %g", gemm_isa_name(isas[s]), r, K, M, got, ref);
      }
      for (size_t e = 0; e < (size_t)M * N + M; e++)
        cr_assert(t1[e] == t2[e], "%s: the rows in two parts differ at %zu: %.17g %.17g", gemm_isa_name(isas[s]), e, t1[e], t2[e]);
      free(A), free(B), free(t1), free(t2);
    }
    gemm_scratch_free(&sc);
  }
}

/* A in column blocks of several matrices (other strides, widths off the tile): the product and the
 * column sums equal those of the blocks one at a time, to the bit, and follow float64; so does the
 * product with B in two column blocks of two matrices (an LSTM's x and h, products that share A),
 * to the bit on cellc's kernels. */
Test(gemm, weight_gradient_column_blocks) {
  enum { K = 5000, N = 37 };
  static const int widths[] = {5, 19, 8, 33};
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s])) continue;
    GemmScratch sc = {0};
    GemmCols cols[4];
    float *mats[4];
    int M = 0;
    for (int b = 0; b < 4; b++) {
      int lda = widths[b] + b * 3;
      mats[b] = malloc(sizeof(float) * (size_t)K * lda);
      fill(mats[b], (size_t)K * lda, 20 + (unsigned)b);
      cols[b] = (GemmCols){mats[b] + b, lda, widths[b] - (b == 3)}; /* an offset into the rows, not all columns */
      M += cols[b].n;
    }
    float *B = malloc(sizeof(float) * (size_t)K * N);
    fill(B, (size_t)K * N, 30);
    double *all = calloc((size_t)M * N + M, sizeof(double)), *one = calloc((size_t)M * N + M, sizeof(double));
    gemm_tn_total(isas[s], cols, 4, &(GemmCols){B, N, N}, 1, K, all, all + (size_t)M * N, &sc);
    enum { N0 = 21, LD1 = 40 }; /* B's columns [0, 21) in place, [21, 37) copied into another matrix at column 3 */
    float *B1 = malloc(sizeof(float) * (size_t)K * LD1);
    for (size_t k = 0; k < K; k++)
      for (int j = 0; j < LD1; j++) B1[k * LD1 + j] = j >= 3 && j < 3 + N - N0 ? B[k * N + N0 + j - 3] : NAN;
    GemmCols bcols[2] = {{B, N, N0}, {B1 + 3, LD1, N - N0}};
    double *split = calloc((size_t)M * N + M, sizeof(double));
    gemm_tn_total(isas[s], cols, 4, bcols, 2, K, split, split + (size_t)M * N, &sc);
    for (size_t e = 0; e < (size_t)M * N + M; e++) /* (OpenBLAS blocks its sums by the call's shape) */
      cr_assert(isas[s] == GEMM_BLAS ? fabs(split[e] - all[e]) <= 1e-4 * (1 + fabs(all[e])) : split[e] == all[e],
                "%s, B in two blocks: element %zu %.17g, in one %.17g", gemm_isa_name(isas[s]), e, split[e], all[e]);
    free(B1), free(split);
    for (int b = 0, m0 = 0; b < 4; m0 += cols[b].n, b++) {
      double *t = calloc((size_t)cols[b].n * N + cols[b].n, sizeof(double));
      gemm_tn_total(isas[s], &cols[b], 1, &(GemmCols){B, N, N}, 1, K, t, t + (size_t)cols[b].n * N, &sc);
      for (int i = 0; i < cols[b].n; i++) {
        for (int j = 0; j < N; j++) {
          double got = all[(size_t)(m0 + i) * N + j], ref = 0, mag = 0;
          cr_assert(got == t[(size_t)i * N + j], "%s block %d row %d col %d: %.17g alone %.17g", gemm_isa_name(isas[s]), b, i, j,
                    got, t[(size_t)i * N + j]);
          for (int k = 0; k < K; k++) {
            double p = (double)cols[b].a[(size_t)k * cols[b].lda + i] * B[(size_t)k * N + j];
            ref += p, mag += fabs(p);
          }
          cr_assert(fabs(got - ref) <= 1e-5 * mag, "%s block %d: %g, float64 %g", gemm_isa_name(isas[s]), b, got, ref);
        }
        cr_assert(all[(size_t)M * N + m0 + i] == t[(size_t)cols[b].n * N + i], "%s block %d column sum %d", gemm_isa_name(isas[s]), b, i);
      }
      free(t);
    }
    for (int b = 0; b < 4; b++) free(mats[b]);
    free(B), free(all), free(one);
    gemm_scratch_free(&sc);
  }
}

Test(gemm, weight_gradient_superblocks_and_scratch) {
  static const int shapes[][3] = {{70, 48, 300}, {40, 33, 9001}, {9, 17, 4096}, {13, 70, 4097}, {70, 70, 8192}};
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s])) continue;
    GemmScratch sc = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
      double e = check_tn(isas[s], M, N, K, (int)i % 2 * 3, &sc);
      cr_assert(e < 1e-5, "%s A^T B M %d N %d K %d: relative error %g", gemm_isa_name(isas[s]), M, N, K, e);
    }
    gemm_scratch_free(&sc);
  }
}

/* A's blocks with short rows (under 2 KB) are read in place, longer ones packed: the same A at a
 * stride of M (in place) and of 640 floats (packed) gives the same totals and column sums to the
 * bit, on every kernel, over two superblocks, for M on and off the tiles; the packed path also
 * against float64 (check_tn with the stride padded past 2 KB). */
Test(gemm, weight_gradient_in_place_equals_packed) {
  static const int shapes[][2] = {{13, 33}, {70, 17}, {384, 128}};
  int K = 4096 + 300, wide = 640;
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s]) || isas[s] == GEMM_BLAS) continue;
    GemmScratch sc = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      int M = shapes[i][0], N = shapes[i][1];
      float *A = malloc(sizeof(float) * (size_t)K * M), *Aw = malloc(sizeof(float) * (size_t)K * wide);
      float *B = malloc(sizeof(float) * (size_t)K * N);
      fill(A, (size_t)K * M, 21 + (unsigned)M), fill(B, (size_t)K * N, 22 + (unsigned)N);
      for (int k = 0; k < K; k++) memcpy(Aw + (size_t)k * wide, A + (size_t)k * M, sizeof(float) * (size_t)M);
      size_t len = (size_t)M * N + (size_t)M;
      double *t1 = calloc(len, sizeof(double)), *t2 = calloc(len, sizeof(double));
      gemm_tn_total(isas[s], &(GemmCols){A, M, M}, 1, &(GemmCols){B, N, N}, 1, K, t1, t1 + (size_t)M * N, &sc);
      gemm_tn_total(isas[s], &(GemmCols){Aw, wide, M}, 1, &(GemmCols){B, N, N}, 1, K, t2, t2 + (size_t)M * N, &sc);
      cr_assert(!memcmp(t1, t2, sizeof(double) * len), "%s M %d N %d: in place and packed differ", gemm_isa_name(isas[s]), M, N);
      free(A), free(Aw), free(B), free(t1), free(t2);
      double e = check_tn(isas[s], M, N, 300, wide - M, NULL);
      cr_assert(e < 1e-5, "%s packed A^T B M %d N %d: relative error %g", gemm_isa_name(isas[s]), M, N, e);
    }
    gemm_scratch_free(&sc);
  }
}

/* The freestanding part (gemm_core.h) over caller memory: gemm_pack_into into exactly
 * gemm_pack_floats floats and gemm_tn_total_into over buffers of exactly gemm_tn_floats floats
 * give the bits of the allocating API (gemm.h) and write nothing past those sizes, on every
 * kernel this CPU runs (the plan executor and the emitted objects size their workspace so). */
#define GUARD 64
static float *guarded(size_t n) {
  float *p = aligned_alloc(64, ((n + GUARD) * sizeof(float) + 63) / 64 * 64);
  for (size_t i = 0; i < n + GUARD; i++) p[i] = SENTINEL;
  return p;
}
static bool guard_intact(const float *p, size_t n) {
  for (size_t i = n; i < n + GUARD; i++)
    if (p[i] != SENTINEL) return false;
  return true;
}

Test(gemm, caller_memory) {
  enum { M = 37, K = 300, N = 70, Mg = 3 * 45 };
  float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
  float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
  float *G = malloc(sizeof(float) * (size_t)K * Mg), *V = malloc(sizeof(float) * (size_t)K * N);
  fill(A, (size_t)M * K, 11), fill(W, (size_t)N * K, 12), fill(G, (size_t)K * Mg, 13), fill(V, (size_t)K * N, 14);
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s])) continue;
    for (int trans = 0; trans < 2; trans++) {
      GemmPacked own = {0}, mine = {0};
      gemm_pack(&own, isas[s], W, trans ? K : N, N, K, trans);
      size_t n = gemm_pack_floats(isas[s], N, K);
      cr_assert(isas[s] == GEMM_BLAS ? n == 0 : n % 16 == 0 && n >= (size_t)K * N, "%s: %zu floats", gemm_isa_name(isas[s]), n);
      float *mem = guarded(n);
      gemm_pack_into(&mine, isas[s], W, trans ? K : N, N, K, trans, mem);
      gemm_run(&own, M, A, K, C1, N, false);
      gemm_run(&mine, M, A, K, C2, N, false);
      cr_assert(!memcmp(C1, C2, sizeof(float) * M * N), "%s trans %d: the products differ", gemm_isa_name(isas[s]), trans);
      cr_assert(guard_intact(mem, n), "%s: packed past gemm_pack_floats", gemm_isa_name(isas[s]));
      free(mem), gemm_packed_free(&own);
    }
    /* three G blocks of 45 columns (one array, as a GRU's gate adjoints) against V, rows past a superblock */
    GemmCols a[3] = {{G, Mg, 45}, {G + 45, Mg, 45}, {G + 90, Mg, 45}}, b = {V, N, N};
    size_t at, bt, blk, mn = (size_t)Mg * N;
    gemm_tn_floats(isas[s], a, 3, &b, 1, &at, &bt, &blk);
    GemmTnBuf buf = {guarded(at), guarded(bt), guarded(blk)};
    double *t1 = calloc(mn + Mg, sizeof(double)), *t2 = calloc(mn + Mg, sizeof(double));
    GemmScratch sc = {0};
    gemm_tn_total(isas[s], a, 3, &b, 1, K, t1, t1 + mn, &sc);
    gemm_tn_total_into(isas[s], a, 3, &b, 1, K, t2, t2 + mn, &buf);
    cr_assert(!memcmp(t1, t2, sizeof(double) * (mn + Mg)), "%s: the weight gradients differ", gemm_isa_name(isas[s]));
    cr_assert(guard_intact(buf.at, at) && guard_intact(buf.bt, bt) && guard_intact(buf.blk, blk),
              "%s: written past gemm_tn_floats (%zu %zu %zu)", gemm_isa_name(isas[s]), at, bt, blk);
    free(buf.at), free(buf.bt), free(buf.blk), free(t1), free(t2), gemm_scratch_free(&sc);
  }
  free(A), free(W), free(C1), free(C2), free(G), free(V);
}

/* gemm_small (the chunk ops' products, operands in place): C = op(A) B (+ C) against float64 on
 * every kernel this CPU runs, op(A) = A and A^T, M and N across the tiles' edges (1 to 70; the
 * 16-wide and masked column blocks), K from 0, row strides wider than the rows, beta 0 and 1.
 * A and B end exactly at their last element (a load past them is a read out of bounds under
 * ASan), and C's cells past each row's N are never written. */
static double check_small(GemmIsa isa, bool ta, int M, int N, int K, int pad, bool acc) {
  int lda = (ta ? M : K) + pad, ldb = N + pad / 2, ldc = N + pad, arows = ta ? K : M;
  size_t na = arows ? (size_t)(arows - 1) * lda + (size_t)(ta ? M : K) : 0, nb = K ? (size_t)(K - 1) * ldb + (size_t)N : 0;
  float *A = malloc(sizeof(float) * (na ? na : 1)), *B = malloc(sizeof(float) * (nb ? nb : 1));
  float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);
  fill(A, na, 5 + (unsigned)M), fill(B, nb, 6 + (unsigned)N), fill(C0, (size_t)M * ldc, 7 + (unsigned)K);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < ldc; j++)
      if (j >= N || !acc) C0[(size_t)i * ldc + j] = SENTINEL;
  memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
  gemm_small(isa, ta, M, N, K, A, lda, B, ldb, C, ldc, acc);
  double worst = worst_error(isa, C, C0, M, N, ldc, K, acc, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, 1);
  free(A), free(B), free(C), free(C0);
  return worst;
}

Test(gemm, small_products_in_place) {
  static const int Ns[] = {1, 7, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 70};
  static const int Ks[] = {0, 1, 5, 16, 33, 64};
  for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
    if (!gemm_isa_runs(isas[s])) continue;
    int n = 0;
    for (int M = 1; M <= 70; M += (M < 17 ? 1 : 6))
      for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++)
        for (size_t ik = 0; ik < sizeof Ks / sizeof Ks[0]; ik++)
          for (int ta = 0; ta < 2; ta++) {
            int N = Ns[in], K = Ks[ik], pad = (M + N + K) % 3 == 0 ? 0 : (M + K) % 5 + 1;
            bool acc = (M + 2 * N + K + ta) % 2;
            if (isas[s] == GEMM_BLAS && K == 0) acc = !acc; /* both betas at K = 0 on the library's path too */
            double e = check_small(isas[s], ta, M, N, K, pad, acc);
            cr_assert(e < 1e-5, "%s %s M %d N %d K %d pad %d beta %d: relative error %g", gemm_isa_name(isas[s]),
                      ta ? "A^T B" : "A B", M, N, K, pad, acc, e);
            n++;
          }
    cr_assert(n > 3000, "%d products", n);
  }
}
