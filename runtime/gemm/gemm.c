/* gemm.c: the instruction set from CPUID, and gemm_core.c's products over memory this file
 * allocates and keeps (see gemm.h). */
#include "gemm.h"

#include <stdlib.h>
#include <string.h>

#include "support.h"

/* CPUID once per process (it traps to the hypervisor in a VM); any thread may be first. */
GemmIsa gemm_isa_host(void) {
  static _Atomic int cached = -1;
  int isa = cached;
  if (isa >= 0) return (GemmIsa)isa;
  CpuFeatures f = cpu_features_host();
  isa = f.avx512f && f.os_zmm ? GEMM_AVX512 : f.avx2 && f.fma && f.os_ymm ? GEMM_AVX2 : GEMM_BLAS;
  cached = isa;
  return (GemmIsa)isa;
}

bool gemm_isa_runs(GemmIsa isa) { return isa <= gemm_isa_host(); }

GemmIsa gemm_isa_default(void) {
  GemmIsa host = gemm_isa_host();
  TuningGemm cap = tuning()->gemm;
  if (cap == TUNING_GEMM_BLAS) return GEMM_BLAS;
  if (cap == TUNING_GEMM_AVX2 && host >= GEMM_AVX2) return GEMM_AVX2;
  return host;
}

const char *gemm_isa_name(GemmIsa isa) {
  switch (isa) {
  case GEMM_AVX512: return "avx512 8x32";
  case GEMM_AVX2: return "avx2 6x16";
  default: return "blas";
  }
}

/* ---- packing ---- */

void gemm_pack(GemmPacked *pk, GemmIsa isa, const float *W, int ldw, int N, int K, bool trans) {
  CHECK(N >= 0 && K >= 0 && gemm_isa_runs(isa));
  size_t need = gemm_pack_floats(isa, N, K);
  if (need && pk->cap < need) {
    free(pk->p);
    pk->p = aligned_alloc(64, need * sizeof(float)); /* need * 4 is a multiple of 64 */
    CHECK(pk->p);
    pk->cap = need;
  }
  float *mem = pk->p;
  size_t cap = pk->cap;
  gemm_pack_into(pk, isa, W, ldw, N, K, trans, mem);
  pk->p = mem, pk->cap = cap; /* the buffer stays owned by pk (GEMM_BLAS keeps it for the next) */
}

void gemm_packed_free(GemmPacked *pk) {
  free(pk->p);
  memset(pk, 0, sizeof *pk);
}

/* ---- the weight gradient ---- */

/* *p with room for n elements of `size` bytes, 64-byte aligned, kept between calls. */
static void *scratch_grow(void **p, size_t *cap, size_t n, size_t size) {
  if (*cap < n) {
    free(*p);
    *p = aligned_alloc(64, (n * size + 63) / 64 * 64);
    CHECK(*p);
    *cap = n;
  }
  return *p;
}

double *gemm_scratch_total(GemmScratch *s, size_t n) {
  return scratch_grow((void **)&s->total, &s->cap_total, n, sizeof(double));
}

void gemm_scratch_free(GemmScratch *s) {
  free(s->at), free(s->bt), free(s->blk), free(s->total);
  memset(s, 0, sizeof *s);
}

void gemm_tn_total(GemmIsa isa, const GemmCols *a, int na, const GemmCols *b, int nb, int K, double *total, double *colsum,
                   GemmScratch *s) {
  CHECK(gemm_isa_runs(isa) && s);
  size_t at, bt, blk;
  gemm_tn_floats(isa, a, na, b, nb, &at, &bt, &blk);
  GemmTnBuf buf = {scratch_grow((void **)&s->at, &s->cap_at, at ? at : 1, sizeof(float)),
                   scratch_grow((void **)&s->bt, &s->cap_bt, bt ? bt : 1, sizeof(float)),
                   scratch_grow((void **)&s->blk, &s->cap_blk, blk ? blk : 1, sizeof(float))};
  gemm_tn_total_into(isa, a, na, b, nb, K, total, colsum, &buf);
}

void gemm_tn_acc(GemmIsa isa, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                 GemmScratch *s) {
  CHECK(gemm_isa_runs(isa));
  if (M <= 0 || N <= 0 || K <= 0) return;
  GemmScratch own = {0};
  if (!s) s = &own;
  size_t mn = (size_t)M * (size_t)N;
  double *total = scratch_grow((void **)&s->total, &s->cap_total, mn, sizeof(double));
  memset(total, 0, mn * sizeof(double));
  gemm_tn_total(isa, &(GemmCols){A, lda, M}, 1, &(GemmCols){B, ldb, N}, 1, K, total, NULL, s);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) C[(size_t)i * (size_t)ldc + j] += (float)total[(size_t)i * (size_t)N + j];
  gemm_scratch_free(&own);
}
