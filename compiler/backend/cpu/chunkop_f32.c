/* chunkop_f32.c: the chunk op of the chunked form (compiler/ir/chunkop.h) in float32 with its
 * products as matrix products (cpu_mm: cellc's own kernels), forward and backward, for the CPU back end. Per
 * chunk of n <= L steps, with b the cumulative log-decays from the chunk's start:
 *   intra scores A [n, n] (lower triangle), in sub-blocks of SUB rows: sub-block I against the
 *     steps before it and (where tight) itself as one product through the decay tables below
 *     (every factor at most 1: nothing overflows), a scalar decay's as (q k^T) times a mask;
 *   o = (q e^b) S_0 + A v;  S_n = e^{b_n} S_0 + (k e^{b_n - b})^T v.
 * The backward is the float64 reference's (chunkop.c) with the same products; the decay-weighted
 * sums over j <= i (dq) and i >= j (dk) are blocked as the scores are. */

/* The row loops below (scalings by the decay tables) are most of the op's time outside the products:
 * vectorized (O3; -O2's cost model leaves loops of a run-time length scalar) */
#pragma GCC optimize("O3", "no-trapping-math")

#include "cpu.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "chunk_f32.h"
#include "gemm.h"
#include "ir.h" /* CHUNK_LOG_FLOOR */

/* the loops of the tables and the scalings, cloned as vexp is */
#define CLONED __attribute__((target_clones("avx512f", "avx2", "default")))

#define SUB 16 /* the sub-block of rows the decays are factored in */
#define TIGHT 30.0 /* a sub-block's diagonal as a product where its log-decays span at most this */

/* Per chunk, with b the cumulative log-decays, sub-block I of rows [i0, i1), r = i0 - 1 (b_{-1} =
 * 0) and e = i1 - 1, tables of exponentials computed once (w = K per key, else 1):
 *   Qf_i = e^{b_i - b_r}, Kf_i = e^{b_e - b_i}           (i in I; both <= 1)
 *   gap[I][J] = e^{b_rI - b_eJ}                           (J < I; <= 1)
 *   G_i = e^{b_i}, F_i = e^{b_{n-1} - b_i}                (<= 1)
 * so that e^{b_i - b_j} = Qf_i gap[I][J] Kf_j for i in I, j in J < I, every factor at most 1:
 * nothing overflows however strong the decays. Within a sub-block e^{b_i - b_j} = Qf_i Qi_j =
 * Kf_j Ki_i with Qi = 1 / Qf, Ki = 1 / Kf, at most e^{TIGHT}: the diagonal sub-blocks are
 * products too where the sub-block is tight (its span b_r - b_e at most TIGHT), else pairwise. */
typedef struct Ctx {
  const ChunkOpF32 *c;         /* the chunk's rows: the caller's, or lc */
  const ChunkOpF32 *src;       /* the caller's */
  ChunkOpF32 lc;               /* the chunk's rows gathered (gather): q, k, v, la [L, K / V / w] */
  bool gather;
  int t0, n, w, nb;            /* t0: the chunk's first row in c */
  int tg;                      /* its first step in the sequence */
  double *b;                   /* [n, w], float64: b_i - b_j of large b's loses nothing */
  float *Qf, *Kf, *Qi, *Ki, *G, *F; /* [L, w] */
  float *gap;                  /* [nb, nb, w] */
  double *zero;                /* [w] zeros: b_{-1} */
  float *ex;                   /* [(SUB + 3 + nb) w] scratch of tables */
  bool *tight;                 /* [nb] */
  float *x1, *x2;              /* [L, max(K, V)] scratch */
  float *x3;                   /* [SUB, K] scratch */
  float *x3o;                  /* [L, V]: the reads, dense */
  float *A, *W, *M;            /* [L, L]; M: a scalar decay's e^{b_i - b_j}, j <= i */
} Ctx;

CLONED static void cumulate(Ctx *x) {
  const ChunkOpF32 *c = x->c;
  int w = x->w;
  for (int i = 0; i < x->n; i++) {
    const float *restrict la = c->la + (size_t)(x->t0 + i) * (size_t)c->ldla;
    const double *restrict prev = i ? x->b + (size_t)(i - 1) * w : x->zero;
    double *restrict b = x->b + (size_t)i * w;
    for (int k = 0; k < w; k++) b[k] = prev[k] + (la[k] < CHUNK_LOG_FLOOR ? CHUNK_LOG_FLOOR : (double)la[k]); /* a decay of 0 (chunkop.h) */
  }
}

#define ROW(p, ld, t) ((p) + (size_t)(t) * (size_t)(ld))
#define TAB(t, i) ((t) + (size_t)(i) * (size_t)x->w)
#define GAP(ib, jb) (x->gap + ((size_t)(ib) * (size_t)x->nb + (size_t)(jb)) * (size_t)x->w)

/* dst_i = src_i * t_i (rows of K; t's rows [w]: per key, or one scalar a row) for n rows */
CLONED static void scaled(float *dst, int ldd, const float *src, int lds, const float *t, int w, int n, int K) {
  for (int i = 0; i < n; i++) {
    float *d = dst + (size_t)i * (size_t)ldd; /* dst may be src (in place) */
    const float *a = src + (size_t)i * (size_t)lds, *restrict f = t + (size_t)i * (size_t)w;
    if (w == 1)
      for (int k = 0; k < K; k++) d[k] = a[k] * f[0];
    else
      for (int k = 0; k < K; k++) d[k] = a[k] * f[k];
  }
}

/* rows of K: dst_j = src_j * f_j (* g where g is not NULL: one row for all), dst's row stride K, f's K */
CLONED static void scaled_rows(float *restrict dst, const float *restrict src, int lds, const float *restrict f, const float *restrict g,
                               int rows, int K) {
  for (int j = 0; j < rows; j++) {
    float *restrict d = dst + (size_t)j * K;
    const float *restrict a = src + (size_t)j * lds, *restrict t = f + (size_t)j * K;
    if (g)
      for (int k = 0; k < K; k++) d[k] = a[k] * t[k] * g[k];
    else
      for (int k = 0; k < K; k++) d[k] = a[k] * t[k];
  }
}

/* rows of K: r_i += y_i * f_i (y's and f's row stride K) */
CLONED static void addmul_rows(float *restrict r, int ldr, const float *restrict y, const float *restrict f, int rows, int K) {
  for (int i = 0; i < rows; i++) {
    float *restrict d = r + (size_t)i * ldr;
    const float *restrict a = y + (size_t)i * K, *restrict t = f + (size_t)i * K;
    for (int k = 0; k < K; k++) d[k] += a[k] * t[k];
  }
}

/* y = e^x for n values: a polynomial after range reduction (Cephes' expf, within 1e-7 relative),
 * 0 under -87 (e^x below float's normal range; a decay of 0 gives -1e4), vectorized on every
 * x86-64 (libm's expf is one value a call: most of the op's time when it made the tables);
 * chunk_f32.h */
typedef union { float f; int32_t i; } Bits;
CLONED void cpu_vexp(float *restrict y, const float *restrict x, int n) {
  for (int i = 0; i < n; i++) {
    float v = x[i], c = v < -87.0f ? -87.0f : v;
    c = c > 88.0f ? 88.0f : c;
    float m = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(c / ln 2) */
    float r = c - m * 0.693359375f + m * 2.12194440e-4f, p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f, p = p * r + 8.3334519073e-3f, p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f, p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1;
    Bits s;
    s.i = ((int32_t)m + 127) << 23; /* 2^m */
    y[i] = v < -87.0f ? 0.0f : p * s.f;
  }
}

/* C = op(A) B, or C += that (row-major, read in place): every product of the chunk ops, through
 * cellc's own kernels of this CPU (gemm_core.h's gemm_small; CELLC_GEMM=blas: OpenBLAS). A
 * library's sgemm costs a call's setup per product at these sizes (16 to 64 rows), and the core
 * OpenBLAS loads with may not be the CPU's widest. */
void cpu_mm(bool trans_a, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc, bool acc) {
  gemm_small(gemm_isa_default(), trans_a, M, N, K, A, lda, B, ldb, C, ldc, acc);
}

/* y = e^{a - b} for n values (a, b float64: the difference of large b's loses nothing); z: scratch */
static void exp_diff(float *y, const double *a, const double *b, int n, float *z) {
  for (int i = 0; i < n; i++) z[i] = (float)(a[i] - b[i]);
  cpu_vexp(y, z, n);
}

/* qi = 1 / qf, kf = qe qi, ki = qf rq (rq = 1 / qe) for rows of w: restrict, so that it vectorizes */
CLONED static void inverses(float *restrict qi, float *restrict kf, float *restrict ki, const float *restrict qf, const float *restrict qe,
                            const float *restrict rq, int rows, int w) {
  for (int i = 0; i < rows; i++)
    for (int k = 0; k < w; k++) {
      size_t e = (size_t)i * w + (size_t)k;
      qi[e] = 1 / qf[e], kf[e] = qe[k] * qi[e], ki[e] = qf[e] * rq[k];
    }
}

/* z_i = (float)(b_i - r) (sign 1) or (r - b_i) (sign -1) for rows of w (b's row stride ldb) */
CLONED static void rowdiff(float *restrict z, const double *restrict b, int ldb, const double *restrict r, int rows, int w, int sign) {
  for (int i = 0; i < rows; i++) {
    const double *restrict bi = b + (size_t)i * ldb;
    float *restrict zi = z + (size_t)i * w;
    if (sign > 0)
      for (int k = 0; k < w; k++) zi[k] = (float)(bi[k] - r[k]);
    else
      for (int k = 0; k < w; k++) zi[k] = (float)(r[k] - bi[k]);
  }
}

/* d_i = s * t_i for rows of w */
CLONED static void scale_by_row(float *restrict d, const float *restrict s, const float *restrict t, int rows, int w) {
  for (int i = 0; i < rows; i++)
    for (int k = 0; k < w; k++) d[(size_t)i * w + k] = s[k] * t[(size_t)i * w + k];
}

CLONED static void tables(Ctx *x) {
  int n = x->n, w = x->w;
  x->nb = (n + SUB - 1) / SUB;
  float *gr = x->ex, *ge = gr + w, *z = ge + w;
  for (int ib = 0; ib < x->nb; ib++) {
    int i0 = ib * SUB, i1 = i0 + SUB < n ? i0 + SUB : n, rows = i1 - i0;
    const double *br = i0 ? x->b + (size_t)(i0 - 1) * w : x->zero, *be = x->b + (size_t)(i1 - 1) * w;
    const double *bn = x->b + (size_t)(n - 1) * w, *bi = x->b + (size_t)i0 * w;
    double span = 0;
    for (int k = 0; k < w; k++) span = br[k] - be[k] > span ? br[k] - be[k] : span;
    x->tight[ib] = span <= TIGHT;
    float *qf = TAB(x->Qf, i0), *kf = TAB(x->Kf, i0), *g = TAB(x->G, i0), *f = TAB(x->F, i0);
    float *qi = TAB(x->Qi, i0), *ki = TAB(x->Ki, i0), *qe = TAB(x->Qf, i1 - 1);
    /* the exponents a few calls a sub-block (a call is a dispatch and a loop's prologue: w is small) */
    rowdiff(z, br, 0, x->zero, 1, w, 1), rowdiff(z + w, bn, 0, be, 1, w, 1);
    cpu_vexp(gr, z, 2 * w); /* gr, ge */
    rowdiff(z, bi, w, br, rows, w, 1);
    cpu_vexp(qf, z, rows * w);
    if (x->tight[ib]) { /* Kf_i = e^{b_e - b_r} / e^{b_i - b_r}, the quotient at most e^TIGHT; one division an entry */
      float *rq = z + (size_t)SUB * w;
      for (int k = 0; k < w; k++) rq[k] = 1 / qe[k];
      inverses(qi, kf, ki, qf, qe, rq, rows, w);
    } else {
      rowdiff(z, bi, w, be, rows, w, -1);
      cpu_vexp(kf, z, rows * w);
    }
    scale_by_row(g, gr, qf, rows, w), scale_by_row(f, ge, kf, rows, w);
    if (ib) { /* gap[I][J] = e^{b_rI - b_eJ}, J < I: rows of w, contiguous in J */
      rowdiff(z, x->b + (size_t)(SUB - 1) * w, SUB * w, br, ib, w, -1);
      cpu_vexp(GAP(ib, 0), z, ib * w);
    }
  }
  if (x->c->per_key) return;
  for (int i = 0; i < n; i++) { /* a scalar decay's mask, by sub-blocks of columns */
    int ib = i / SUB, i0 = ib * SUB;
    float *restrict m = x->M + (size_t)i * n, qf = x->Qf[i];
    for (int jb = 0; jb < ib; jb++) {
      float a = qf * GAP(ib, jb)[0];
      const float *restrict kf = x->Kf + (size_t)jb * SUB;
      for (int j = 0; j < SUB; j++) m[jb * SUB + j] = a * kf[j];
    }
    if (x->tight[ib])
      for (int j = i0; j <= i; j++) m[j] = qf * x->Qi[j];
    else
      for (int j = i0; j <= i; j++) m[j] = expf((float)(x->b[i] - x->b[j]));
    for (int j = i + 1; j < n; j++) m[j] = 0;
  }
}

/* Only what the final state needs (the backward's pass for the boundary states): F and G_{n-1} */
CLONED static void tables_final(Ctx *x) {
  int n = x->n, w = x->w;
  float *z = x->ex;
  const double *bn = x->b + (size_t)(n - 1) * w;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < w; k++) x->Qf[(size_t)i * w + k] = (float)(bn[k] - x->b[(size_t)i * w + k]); /* scratch */
  cpu_vexp(x->F, x->Qf, n * w);
  exp_diff(TAB(x->G, n - 1), bn, x->zero, w, z);
}

/* e^{b_i - b_j} of key k, j <= i in one sub-block, pairwise (a sub-block that is not tight) */
static float pair(const Ctx *x, int i, int j, int k) { return expf((float)(x->b[(size_t)i * x->w + k] - x->b[(size_t)j * x->w + k])); }

/* dst [cols, rows] (row stride ldd) = the transpose of src [rows, cols] (row stride lds): tiles of
 * 8 x 8 through AVX registers (a scalar copy moves one value a cycle: a 64 x 64 transpose was as
 * long as a third of a 64 x 64 x 64 product), the edges and CPUs without AVX2 value by value */
static void transpose_edges(float *dst, int ldd, const float *src, int lds, int rows, int cols, int r8, int c8) {
  for (int i = 0; i < rows; i++)
    for (int j = i < r8 ? c8 : 0; j < cols; j++) dst[(size_t)j * ldd + i] = src[(size_t)i * lds + j];
}

__attribute__((target("avx2"))) static void transpose_avx2(float *dst, int ldd, const float *src, int lds, int rows, int cols) {
  int r8 = rows & ~7, c8 = cols & ~7;
  for (int i = 0; i < r8; i += 8)
    for (int j = 0; j < c8; j += 8) {
      const float *s = src + (size_t)i * lds + j;
      __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds), r2 = _mm256_loadu_ps(s + 2 * (size_t)lds);
      __m256 r3 = _mm256_loadu_ps(s + 3 * (size_t)lds), r4 = _mm256_loadu_ps(s + 4 * (size_t)lds);
      __m256 r5 = _mm256_loadu_ps(s + 5 * (size_t)lds), r6 = _mm256_loadu_ps(s + 6 * (size_t)lds);
      __m256 r7 = _mm256_loadu_ps(s + 7 * (size_t)lds);
      __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3);
      __m256 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE), u2 = _mm256_shuffle_ps(t1, t3, 0x44);
      __m256 u3 = _mm256_shuffle_ps(t1, t3, 0xEE), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float *d = dst + (size_t)j * ldd + i;
      _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(d + 2 * (size_t)ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(d + 3 * (size_t)ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(d + 4 * (size_t)ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(d + 5 * (size_t)ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(d + 6 * (size_t)ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(d + 7 * (size_t)ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
  transpose_edges(dst, ldd, src, lds, rows, cols, r8, c8);
}

static void transpose(float *dst, int ldd, const float *src, int lds, int rows, int cols) {
  if (__builtin_cpu_supports("avx2")) transpose_avx2(dst, ldd, src, lds, rows, cols);
  else transpose_edges(dst, ldd, src, lds, rows, cols, 0, 0);
}

/* x->A = the intra scores of the chunk: a scalar decay's A (zero above the diagonal), a decay per
 * key's A^T (zero below it): its sub-block I of rows is a product X2 X1^T with X1^T = (q_I Qf_I)^T
 * [K, rows] made transposed as it is scaled, a plain product whose narrow right side OpenBLAS
 * runs through its small-matrix kernel (q k^T as A B^T packs both operands). */
static void scores(Ctx *x) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K;
  const float *q = ROW(c->q, c->ldq, x->t0), *k = ROW(c->k, c->ldk, x->t0);
  if (!c->per_key) {
    transpose(x->x2, n, k, c->ldk, n, K); /* k^T [K, n] */
    cpu_mm(false, n, n, K, q, c->ldq, x->x2, n, x->A, n, false);
    for (size_t e = 0; e < (size_t)n * n; e++) x->A[e] *= x->M[e];
    return;
  }
  float *AT = x->A;
  for (int ib = 0; ib < x->nb; ib++) {
    int i0 = ib * SUB, i1 = i0 + SUB < n ? i0 + SUB : n, cols = x->tight[ib] ? i1 : i0, rows = i1 - i0;
    scaled_rows(x->x3, ROW(q, c->ldq, i0), c->ldq, TAB(x->Qf, i0), NULL, rows, K);
    transpose(x->x1, rows, x->x3, K, rows, K);
    for (int j0 = 0; j0 < cols; j0 += SUB)
      scaled_rows(x->x2 + (size_t)j0 * K, ROW(k, c->ldk, j0), c->ldk, j0 < i0 ? TAB(x->Kf, j0) : TAB(x->Qi, j0),
                  j0 < i0 ? GAP(ib, j0 / SUB) : NULL, (j0 + SUB < cols ? j0 + SUB : cols) - j0, K);
    if (cols) cpu_mm(false, cols, rows, K, x->x2, K, x->x1, rows, AT + i0, n, false);
    /* the diagonal sub-block: zero above the diagonal (no product or loop reads A^T's rows j >= i1 in
     * columns i < i1: intra_read reads rows j < i1, intra_grad from column j on) */
    for (int j = i0; j < i1; j++)
      for (int i = i0; i < i1; i++) {
        if (j > i) AT[(size_t)j * n + i] = 0;
        else if (!x->tight[ib]) {
          float a = 0;
          for (int kk = 0; kk < K; kk++) a += ROW(q, c->ldq, i)[kk] * ROW(k, c->ldk, j)[kk] * pair(x, i, j, kk);
          AT[(size_t)j * n + i] = a;
        }
      }
  }
}

/* o += A v (rows of V), x->A as scores leaves it; a decay per key's by sub-blocks of rows, each
 * against the steps up to it only */
static void intra_read(Ctx *x, const float *v, int ldv, float *o, int ldo) {
  int n = x->n, V = x->c->V;
  if (!x->c->per_key) {
    cpu_mm(false, n, V, n, x->A, n, v, ldv, o, ldo, true);
    return;
  }
  for (int i0 = 0; i0 < n; i0 += SUB) {
    int i1 = i0 + SUB < n ? i0 + SUB : n;
    cpu_mm(true, i1 - i0, V, i1, x->A + i0, n, v, ldv, ROW(o, ldo, i0), ldo, true);
  }
}

/* r = A^T y (rows of V, overwritten): a decay per key's by sub-blocks of rows, each against the
 * steps from it on only */
static void intra_grad(Ctx *x, const float *y, int ldy, float *r, int ldr) {
  int n = x->n, V = x->c->V;
  if (!x->c->per_key) {
    cpu_mm(true, n, V, n, x->A, n, y, ldy, r, ldr, false);
    return;
  }
  for (int j0 = 0; j0 < n; j0 += SUB) {
    int j1 = j0 + SUB < n ? j0 + SUB : n;
    cpu_mm(false, j1 - j0, V, n - j0, x->A + (size_t)j0 * n + j0, n, ROW(y, ldy, j0), ldy, ROW(r, ldr, j0), ldr, false);
  }
}

/* x->W = W_ij e^{b_i - b_j} for j <= i, 0 above: a scalar decay's masked weights */
static void scalar_mask(Ctx *x, const float *W) {
  for (size_t e = 0; e < (size_t)x->n * x->n; e++) x->W[e] = W[e] * x->M[e];
}

/* r_i += sum_{j <= i} W_ij y_j e^{b_i - b_j} (rows of K; W [n, n] lower triangular) */
static void weighted_before(Ctx *x, const float *W, const float *y, int ldy, float *r, int ldr) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K;
  if (!c->per_key) {
    scalar_mask(x, W);
    cpu_mm(false, n, K, n, x->W, n, y, ldy, r, ldr, true);
    return;
  }
  for (int ib = 0; ib < x->nb; ib++) {
    int i0 = ib * SUB, i1 = i0 + SUB < n ? i0 + SUB : n, cols = x->tight[ib] ? i1 : i0;
    for (int j0 = 0; j0 < cols; j0 += SUB)
      scaled_rows(x->x2 + (size_t)j0 * K, ROW(y, ldy, j0), ldy, j0 < i0 ? TAB(x->Kf, j0) : TAB(x->Qi, j0),
                  j0 < i0 ? GAP(ib, j0 / SUB) : NULL, (j0 + SUB < cols ? j0 + SUB : cols) - j0, K);
    if (cols) {
      cpu_mm(false, i1 - i0, K, cols, W + (size_t)i0 * n, n, x->x2, K, x->x1, K, false);
      addmul_rows(ROW(r, ldr, i0), ldr, x->x1, TAB(x->Qf, i0), i1 - i0, K);
    }
    if (!x->tight[ib])
      for (int i = i0; i < i1; i++)
        for (int j = i0; j <= i; j++)
          for (int kk = 0; kk < K; kk++) ROW(r, ldr, i)[kk] += W[(size_t)i * n + j] * ROW(y, ldy, j)[kk] * pair(x, i, j, kk);
  }
}

/* r_j += sum_{i >= j} W_ij y_i e^{b_i - b_j} */
static void weighted_after(Ctx *x, const float *W, const float *y, int ldy, float *r, int ldr) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K;
  if (!c->per_key) {
    scalar_mask(x, W);
    cpu_mm(true, n, K, n, x->W, n, y, ldy, r, ldr, true);
    return;
  }
  for (int jb = 0; jb < x->nb; jb++) {
    int j0 = jb * SUB, j1 = j0 + SUB < n ? j0 + SUB : n, from = x->tight[jb] ? j0 : j1;
    for (int i0 = from; i0 < n; i0 += SUB)
      scaled_rows(x->x2 + (size_t)(i0 - from) * K, ROW(y, ldy, i0), ldy, i0 > j0 ? TAB(x->Qf, i0) : TAB(x->Ki, i0),
                  i0 > j0 ? GAP(i0 / SUB, jb) : NULL, (i0 + SUB < n ? i0 + SUB : n) - i0, K);
    if (from < n) {
      cpu_mm(true, j1 - j0, K, n - from, W + (size_t)from * n + j0, n, x->x2, K, x->x1, K, false);
      addmul_rows(ROW(r, ldr, j0), ldr, x->x1, TAB(x->Kf, j0), j1 - j0, K);
    }
    if (!x->tight[jb])
      for (int j = j0; j < j1; j++)
        for (int i = j; i < j1; i++)
          for (int kk = 0; kk < K; kk++) ROW(r, ldr, j)[kk] += W[(size_t)i * n + j] * ROW(y, ldy, i)[kk] * pair(x, i, j, kk);
  }
}

/* Asks for the cache lines of rows [t0, t0 + n) of src (stride lds, cols values each): a chunk's
 * rows far apart, asked for a chunk ahead, arrive while the chunk before them runs (the hardware
 * prefetcher does not follow rows a page or more apart) */
static void prefetch_rows(const float *src, int lds, int t0, int n, int cols) {
  for (int i = 0; i < n; i++) {
    const char *r = (const char *)(src + (size_t)(t0 + i) * lds);
    for (size_t b = 0; b < sizeof(float) * (size_t)cols; b += 64) __builtin_prefetch(r + b);
  }
}

/* rows [t0, t0 + n) of src (stride lds) to dst (stride ldd), cols values each */
static void copy_rows(float *dst, int ldd, const float *src, int lds, int t0, int n, int cols) {
  for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * ldd, src + (size_t)(t0 + i) * lds, sizeof(float) * (size_t)cols);
}

/* The chunk's reads into o (when not NULL) and its final state s1 from s0. */
static void chunk_forward(Ctx *x, const float *s0, float *o, int ldo, float *s1) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K, V = c->V;
  const float *q = ROW(c->q, c->ldq, x->t0), *k = ROW(c->k, c->ldk, x->t0), *v = ROW(c->v, c->ldv, x->t0);
  if (o) {
    float *oc = ROW(o, ldo, x->tg), *od = ldo == V ? oc : x->x3o; /* written twice: dense */
    int ldd = ldo == V ? ldo : V;
    scaled(x->x1, K, q, c->ldq, x->G, x->w, n, K);
    cpu_mm(false, n, V, K, x->x1, K, s0, V, od, ldd, false);
    scores(x);
    intra_read(x, v, c->ldv, od, ldd);
    if (od != oc) copy_rows(oc, ldo, od, V, 0, n, V);
  }
  for (int kk = 0; kk < K; kk++) {
    float e = TAB(x->G, n - 1)[c->per_key ? kk : 0];
    for (int y = 0; y < V; y++) s1[(size_t)kk * V + y] = e * s0[(size_t)kk * V + y];
  }
  scaled(x->x1, K, k, c->ldk, x->F, x->w, n, K);
  cpu_mm(true, K, V, n, x->x1, K, v, c->ldv, s1, V, true);
}

/* The call's tables and buffers, carved from its scratch (ChunkOpF32.scratch) on 64 bytes: rows of
 * 16 floats then fill whole cache lines (a vector that crosses two lines costs about two) */
static Ctx ctx_new(const ChunkOpF32 *c, Scratch *s) {
  int L = chunk_call_length(c->T, c->L), m = c->K > c->V ? c->K : c->V;
  int w = c->per_key ? c->K : 1, nb = (L + SUB - 1) / SUB;
  size_t lw = sizeof(float) * (size_t)L * (size_t)w, ll = sizeof(float) * (size_t)L * (size_t)L;
  Ctx x = {.c = c, .src = c, .w = w};
  /* Rows far apart (the caller's views of wide rows: a stride of B times the row) cost a TLB miss
   * and a cache line apart each time a product or a row loop passes over them, about as much as
   * the chunk's work: such a chunk's rows are gathered once, dense. */
  x.gather = c->ldq != c->K || c->ldk != c->K || c->ldv != c->V || c->ldla != w;
  if (x.gather) {
    x.lc = *c;
    x.lc.q = scratch_take(s, sizeof(float) * (size_t)L * (size_t)c->K), x.lc.k = scratch_take(s, sizeof(float) * (size_t)L * (size_t)c->K);
    x.lc.v = scratch_take(s, sizeof(float) * (size_t)L * (size_t)c->V), x.lc.la = scratch_take(s, lw);
    x.lc.ldq = c->K, x.lc.ldk = c->K, x.lc.ldv = c->V, x.lc.ldla = w;
  }
  x.b = scratch_take(s, sizeof(double) * (size_t)L * (size_t)w);
  x.Qf = scratch_take(s, lw), x.Kf = scratch_take(s, lw), x.Qi = scratch_take(s, lw), x.Ki = scratch_take(s, lw);
  x.G = scratch_take(s, lw), x.F = scratch_take(s, lw);
  x.gap = scratch_take(s, sizeof(float) * (size_t)nb * (size_t)nb * (size_t)w), x.tight = scratch_zeros(s, (size_t)nb);
  x.x1 = scratch_take(s, sizeof(float) * (size_t)L * (size_t)m), x.x2 = scratch_take(s, sizeof(float) * (size_t)L * (size_t)m);
  x.x3 = scratch_take(s, sizeof(float) * SUB * (size_t)c->K), x.x3o = scratch_take(s, sizeof(float) * (size_t)L * (size_t)c->V);
  x.A = scratch_take(s, ll), x.W = scratch_take(s, ll), x.M = scratch_take(s, ll);
  x.zero = scratch_zeros(s, sizeof(double) * (size_t)w), x.ex = scratch_take(s, sizeof(float) * (size_t)(SUB + 3 + nb) * (size_t)w);
  return x;
}

/* Makes chunk j the current one (its rows, cumulative log-decays and tables; only what the final
 * state needs where not full); the rows of chunk next (if in the sequence) asked for. */
static void at_chunk(Ctx *x, int j, bool full, int next) {
  const ChunkOpF32 *c = x->src;
  int nt = next * c->L, nn = c->T - nt < c->L ? c->T - nt : c->L;
  if (x->gather && next >= 0 && nt < c->T) {
    if (full) prefetch_rows(c->q, c->ldq, nt, nn, c->K);
    prefetch_rows(c->k, c->ldk, nt, nn, c->K), prefetch_rows(c->v, c->ldv, nt, nn, c->V), prefetch_rows(c->la, c->ldla, nt, nn, x->w);
  }
  x->tg = j * c->L;
  x->n = c->T - x->tg < c->L ? c->T - x->tg : c->L;
  x->c = x->gather ? &x->lc : c, x->t0 = x->gather ? 0 : x->tg;
  if (x->gather) {
    ChunkOpF32 *l = &x->lc;
    if (full) copy_rows((float *)l->q, l->ldq, c->q, c->ldq, x->tg, x->n, c->K);
    copy_rows((float *)l->k, l->ldk, c->k, c->ldk, x->tg, x->n, c->K), copy_rows((float *)l->v, l->ldv, c->v, c->ldv, x->tg, x->n, c->V);
    copy_rows((float *)l->la, l->ldla, c->la, c->ldla, x->tg, x->n, x->w);
  }
  cumulate(x);
  full ? tables(x) : tables_final(x);
}

void cpu_chunkop_forward(const ChunkOpF32 *c, const float *s0, float *o, int ldo, float *sT) {
  CHECK(c->L >= 1 && c->T >= 0);
  size_t kv = (size_t)c->K * (size_t)c->V;
  Scratch mine = {0}, *s = scratch_for_call(c->scratch, &mine);
  Ctx x = ctx_new(c, s);
  /* the states chunk by chunk: into the caller's boundary states, else two of our own in turn */
  float *own = c->bnd ? NULL : scratch_take(s, sizeof(float) * 2 * kv), *cur = c->bnd ? c->bnd : own;
  memcpy(cur, s0, sizeof(float) * kv);
  for (int j = 0; j * c->L < c->T; j++) {
    float *next = c->bnd ? cur + kv : own + kv * (size_t)((j + 1) % 2);
    at_chunk(&x, j, true, j + 1);
    chunk_forward(&x, cur, o, ldo, next);
    cur = next;
  }
  memcpy(sT, cur, sizeof(float) * kv);
  scratch_free(&mine);
}

/* The log-decays' gradients of a chunk: db_i = q_i dq_i - k_i dk_i, + S_n . dS_n at its last step,
 * then d log a_t = sum_{i >= t} db_i (over the keys too for a scalar decay) into dla; and
 * dS_n *= e^{b_n} (g: dS_n, gn: G_{n-1}). Row loops over restrict locals so that they vectorize;
 * the dot products in 16 partial sums (a single sum does not vectorize without reassociation). */
CLONED static void log_decay_grads(const ChunkOpF32 *c, int n, const float *q, const float *dQ, const float *k,
                                   const float *dK, const float *S1, float *g, const float *gn, float *db, double *acc,
                                   float *dla, int ldla) {
  int K = c->K, V = c->V, w = c->per_key ? K : 1;
  for (int i = 0; i < n; i++) {
    const float *restrict qi = ROW(q, c->ldq, i), *restrict dqi = ROW(dQ, c->ldq, i), *restrict ki = ROW(k, c->ldk, i);
    const float *restrict dki = ROW(dK, c->ldk, i);
    float *restrict d = db + (size_t)i * K;
    for (int kk = 0; kk < K; kk++) d[kk] = qi[kk] * dqi[kk] - ki[kk] * dki[kk];
  }
  float *restrict dn = db + (size_t)(n - 1) * K;
  for (int kk = 0; kk < K; kk++) {
    const float *restrict a = S1 + (size_t)kk * V;
    float *restrict b = g + (size_t)kk * V, e = gn[c->per_key ? kk : 0], part[16] = {0};
    int y = 0;
    for (; y + 16 <= V; y += 16)
      for (int l = 0; l < 16; l++) part[l] += a[y + l] * b[y + l];
    double s = 0;
    for (; y < V; y++) s += (double)a[y] * b[y];
    for (int l = 0; l < 16; l++) s += part[l];
    dn[kk] += (float)s;
    for (y = 0; y < V; y++) b[y] *= e;
  }
  double *restrict ac = acc;
  for (int kk = 0; kk < w; kk++) ac[kk] = 0;
  for (int i = n - 1; i >= 0; i--) {
    const float *restrict d = db + (size_t)i * K;
    float *restrict o = dla + (size_t)i * (size_t)ldla;
    if (c->per_key)
      for (int kk = 0; kk < K; kk++) ac[kk] += d[kk], o[kk] = (float)ac[kk];
    else {
      for (int kk = 0; kk < K; kk++) ac[0] += d[kk];
      o[0] = (float)ac[0];
    }
  }
}

void cpu_chunkop_backward(const ChunkOpF32 *c, const float *s0, const float *dout, int lddo0, const float *dsT, float *dq,
                          float *dk, float *dv, float *dla, float *ds0) {
  CHECK(c->L >= 1 && c->T >= 0);
  int K = c->K, V = c->V, nc = (c->T + c->L - 1) / c->L, w = c->per_key ? K : 1;
  size_t kv = (size_t)K * (size_t)V;
  Scratch mine = {0}, *s = scratch_for_call(c->scratch, &mine);
  Ctx x = ctx_new(c, s);
  float *bnd = c->bnd ? c->bnd : scratch_take(s, sizeof(float) * kv * (size_t)(nc + 1)), *g = scratch_take(s, sizeof(float) * kv);
  float *dA = scratch_take(s, sizeof(float) * (size_t)c->L * (size_t)c->L), *db = scratch_take(s, sizeof(float) * (size_t)c->L * (size_t)K);
  double *acc = scratch_take(s, sizeof(double) * (size_t)w);
  float *tr = scratch_take(s, sizeof(float) * (size_t)V * (size_t)(c->L > K ? c->L : K)); /* a transposed right side */
  float *gdo = scratch_take(s, sizeof(float) * (size_t)c->L * (size_t)V); /* dO's rows, dense */
  float *gd = scratch_take(s, sizeof(float) * (size_t)c->L * (size_t)(2 * K + V)); /* dq, dk, dv's, dense */
  if (!c->bnd) { /* the boundary states again */
    memcpy(bnd, s0, sizeof(float) * kv);
    for (int j = 0; j < nc; j++) at_chunk(&x, j, false, j + 1), chunk_forward(&x, bnd + kv * (size_t)j, NULL, 0, bnd + kv * (size_t)(j + 1));
  }
  memcpy(g, dsT, sizeof(float) * kv);
  for (int jc = nc - 1; jc >= 0; jc--) {
    at_chunk(&x, jc, true, jc - 1);
    if (lddo0 != V && jc) prefetch_rows(dout, lddo0, (jc - 1) * x.src->L, x.src->L, V);
    const ChunkOpF32 *c = x.c; /* the chunk's rows; dq, dk, dv dense (gd) where those are gathered */
    int n = x.n, t0 = x.t0, tg = x.tg, lddo = lddo0;
    const float *S0 = bnd + kv * (size_t)jc, *S1 = bnd + kv * (size_t)(jc + 1);
    const float *q = ROW(c->q, c->ldq, t0), *k = ROW(c->k, c->ldk, t0), *v = ROW(c->v, c->ldv, t0), *dO = ROW(dout, lddo, tg);
    float *dQ = x.gather ? gd : ROW(dq, c->ldq, t0), *dK = x.gather ? gd + (size_t)n * K : ROW(dk, c->ldk, t0);
    float *dV = x.gather ? gd + 2 * (size_t)n * K : ROW(dv, c->ldv, t0);
    if (lddo != V) copy_rows(gdo, V, dO, lddo, 0, n, V), dO = gdo, lddo = V;
    scores(&x);
    /* dA = dO v^T on and below the diagonal, by sub-blocks of rows; the products with a transposed
     * right side are made plain ones (OpenBLAS's row-major A B^T at these sizes packs its operands:
     * about twice the time of A B) */
    transpose(tr, n, v, c->ldv, n, V);
    for (int i0 = 0; i0 < n; i0 += SUB) {
      int i1 = i0 + SUB < n ? i0 + SUB : n;
      cpu_mm(false, i1 - i0, i1, V, ROW(dO, lddo, i0), lddo, tr, n, dA + (size_t)i0 * n, n, false);
    }
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) dA[(size_t)i * n + j] = 0;
    /* dv = A^T dO + (k e^{b_n - b}) dS_n */
    intra_grad(&x, dO, lddo, dV, c->ldv);
    scaled(x.x1, K, k, c->ldk, x.F, w, n, K);
    cpu_mm(false, n, V, K, x.x1, K, g, V, dV, c->ldv, true);
    /* dq = e^{b} (dO S_0^T) + intra;  dk = e^{b_n - b} (v dS_n^T) + intra */
    transpose(tr, K, S0, V, K, V);
    cpu_mm(false, n, K, V, dO, lddo, tr, K, dQ, c->ldq, false);
    scaled(dQ, c->ldq, dQ, c->ldq, x.G, w, n, K);
    transpose(tr, K, g, V, K, V);
    cpu_mm(false, n, K, V, v, c->ldv, tr, K, dK, c->ldk, false);
    scaled(dK, c->ldk, dK, c->ldk, x.F, w, n, K);
    weighted_before(&x, dA, k, c->ldk, dQ, c->ldq);
    weighted_after(&x, dA, q, c->ldq, dK, c->ldk);
    /* dS_0 = (q e^b)^T dO + e^{b_n} dS_n */
    scaled(x.x1, K, q, c->ldq, x.G, w, n, K);
    log_decay_grads(c, n, q, dQ, k, dK, S1, g, x.G + (size_t)(n - 1) * w, db, acc, ROW(dla, x.src->ldla, tg), x.src->ldla);
    cpu_mm(true, K, V, n, x.x1, K, dO, lddo, g, V, true);
    if (x.gather) {
      const ChunkOpF32 *o = x.src;
      copy_rows(ROW(dq, o->ldq, tg), o->ldq, dQ, K, 0, n, K), copy_rows(ROW(dk, o->ldk, tg), o->ldk, dK, K, 0, n, K);
      copy_rows(ROW(dv, o->ldv, tg), o->ldv, dV, V, 0, n, V);
    }
  }
  memcpy(ds0, g, sizeof(float) * kv);
  scratch_free(&mine);
}
