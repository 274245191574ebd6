/* chunkop_f32.c: the chunk op of the chunked form (compiler/ir/chunkop.h) in float32 with its
 * products as matrix products (OpenBLAS sgemm), forward and backward, for the CPU back end. Per
 * chunk of n <= L steps, with b the cumulative log-decays from the chunk's start:
 *   intra scores A [n, n] (lower triangle): scalar decay: (q k^T) masked and weighted by
 *     e^{b_i - b_j}; per key: in blocks of SUB rows, block I against the steps before it as
 *     (q_i e^{b_i - b_s}) (k_j e^{b_s - b_j})^T with s the step before the block (both exponents
 *     <= 0: nothing overflows), the diagonal blocks pairwise;
 *   o = (q e^b) S_0 + A v;  S_n = e^{b_n} S_0 + (k e^{b_n - b})^T v.
 * The backward is the float64 reference's (chunkop.c) with the same products; the decay-weighted
 * sums over j <= i (dq) and i >= j (dk) are blocked as the scores are. */
#include "cpu.h"

#include <cblas.h>
#include <math.h>

#include "ir.h" /* CHUNK_LOG_FLOOR */

#define SUB 16 /* the block of rows a per-key decay's products are taken in */

typedef struct Ctx {
  const ChunkOpF32 *c;
  int t0, n;
  double *b;           /* [n, w]: the cumulative log-decays, w = K per key, else 1, in float64:
                          b_i - b_j of large b's loses nothing */
  float *x1, *x2;      /* [L, max(K, V)] scratch */
  float *A, *W;        /* [L, L] */
} Ctx;

static int w_of(const ChunkOpF32 *c) { return c->per_key ? c->K : 1; }

static float bexp(const Ctx *x, int i, int j, int k) { /* e^{b_i - b_j} (i or j -1: b = 0) */
  int w = w_of(x->c), kk = x->c->per_key ? k : 0;
  double bi = i < 0 ? 0 : x->b[(size_t)i * w + kk], bj = j < 0 ? 0 : x->b[(size_t)j * w + kk];
  return expf((float)(bi - bj));
}

static void cumulate(Ctx *x) {
  const ChunkOpF32 *c = x->c;
  int w = w_of(c);
  for (int k = 0; k < w; k++) {
    double s = 0;
    for (int i = 0; i < x->n; i++) {
      double la = c->la[(size_t)(x->t0 + i) * (size_t)c->ldla + (size_t)k];
      s += la < CHUNK_LOG_FLOOR ? CHUNK_LOG_FLOOR : la; /* a decay of 0 (chunkop.h) */
      x->b[(size_t)i * w + k] = s;
    }
  }
}

#define ROW(p, ld, t) ((p) + (size_t)(t) * (size_t)(ld))

/* x->A = the intra scores of the chunk (zero above the diagonal) */
static void scores(Ctx *x) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K;
  const float *q = ROW(c->q, c->ldq, x->t0), *k = ROW(c->k, c->ldk, x->t0);
  if (!c->per_key) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, K, 1, q, c->ldq, k, c->ldk, 0, x->A, n);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) x->A[(size_t)i * n + j] = j <= i ? x->A[(size_t)i * n + j] * bexp(x, i, j, 0) : 0;
    return;
  }
  for (size_t e = 0; e < (size_t)n * n; e++) x->A[e] = 0;
  for (int i0 = 0; i0 < n; i0 += SUB) {
    int i1 = i0 + SUB < n ? i0 + SUB : n, s = i0 - 1;
    for (int i = i0; i < i1; i++) /* the diagonal block, pairwise */
      for (int j = i0; j <= i; j++) {
        float a = 0;
        for (int kk = 0; kk < K; kk++) a += ROW(q, c->ldq, i)[kk] * ROW(k, c->ldk, j)[kk] * bexp(x, i, j, kk);
        x->A[(size_t)i * n + j] = a;
      }
    if (i0 == 0) continue;
    for (int i = i0; i < i1; i++)
      for (int kk = 0; kk < K; kk++) x->x1[(size_t)(i - i0) * K + kk] = ROW(q, c->ldq, i)[kk] * bexp(x, i, s, kk);
    for (int j = 0; j < i0; j++)
      for (int kk = 0; kk < K; kk++) x->x2[(size_t)j * K + kk] = ROW(k, c->ldk, j)[kk] * bexp(x, s, j, kk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i0, K, 1, x->x1, K, x->x2, K, 0, x->A + (size_t)i0 * n, n);
  }
}

/* x->W = W_ij e^{b_i - b_j} for j <= i, 0 above: a scalar decay's masked weights */
static void scalar_mask(Ctx *x, const float *W) {
  int n = x->n;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) x->W[(size_t)i * n + j] = j <= i ? W[(size_t)i * n + j] * bexp(x, i, j, 0) : 0;
}

/* r_i += sum_{j <= i} W_ij y_j e^{b_i - b_j} (rows of K; W [n, n] lower triangular) */
static void weighted_before(Ctx *x, const float *W, const float *y, int ldy, float *r, int ldr) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K;
  if (!c->per_key) {
    scalar_mask(x, W);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, K, n, 1, x->W, n, y, ldy, 1, r, ldr);
    return;
  }
  for (int i0 = 0; i0 < n; i0 += SUB) {
    int i1 = i0 + SUB < n ? i0 + SUB : n, s = i0 - 1;
    for (int i = i0; i < i1; i++)
      for (int j = i0; j <= i; j++)
        for (int kk = 0; kk < K; kk++) ROW(r, ldr, i)[kk] += W[(size_t)i * n + j] * ROW(y, ldy, j)[kk] * bexp(x, i, j, kk);
    if (i0 == 0) continue;
    for (int j = 0; j < i0; j++)
      for (int kk = 0; kk < K; kk++) x->x2[(size_t)j * K + kk] = ROW(y, ldy, j)[kk] * bexp(x, s, j, kk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, K, i0, 1, W + (size_t)i0 * n, n, x->x2, K, 0, x->x1, K);
    for (int i = i0; i < i1; i++)
      for (int kk = 0; kk < K; kk++) ROW(r, ldr, i)[kk] += x->x1[(size_t)(i - i0) * K + kk] * bexp(x, i, s, kk);
  }
}

/* r_j += sum_{i >= j} W_ij y_i e^{b_i - b_j} */
static void weighted_after(Ctx *x, const float *W, const float *y, int ldy, float *r, int ldr) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K;
  if (!c->per_key) {
    scalar_mask(x, W);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, K, n, 1, x->W, n, y, ldy, 1, r, ldr);
    return;
  }
  for (int j0 = 0; j0 < n; j0 += SUB) {
    int j1 = j0 + SUB < n ? j0 + SUB : n, s = j1 - 1;
    for (int j = j0; j < j1; j++)
      for (int i = j; i < j1; i++)
        for (int kk = 0; kk < K; kk++) ROW(r, ldr, j)[kk] += W[(size_t)i * n + j] * ROW(y, ldy, i)[kk] * bexp(x, i, j, kk);
    if (j1 == n) continue;
    for (int i = j1; i < n; i++)
      for (int kk = 0; kk < K; kk++) x->x2[(size_t)(i - j1) * K + kk] = ROW(y, ldy, i)[kk] * bexp(x, i, s, kk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, K, n - j1, 1, W + (size_t)j1 * n + j0, n, x->x2, K, 0, x->x1, K);
    for (int j = j0; j < j1; j++)
      for (int kk = 0; kk < K; kk++) ROW(r, ldr, j)[kk] += x->x1[(size_t)(j - j0) * K + kk] * bexp(x, s, j, kk);
  }
}

/* The chunk's reads into o (when not NULL) and its final state s1 from s0. */
static void chunk_forward(Ctx *x, const float *s0, float *o, int ldo, float *s1) {
  const ChunkOpF32 *c = x->c;
  int n = x->n, K = c->K, V = c->V;
  const float *q = ROW(c->q, c->ldq, x->t0), *k = ROW(c->k, c->ldk, x->t0), *v = ROW(c->v, c->ldv, x->t0);
  if (o) {
    float *oc = ROW(o, ldo, x->t0);
    for (int i = 0; i < n; i++)
      for (int kk = 0; kk < K; kk++) x->x1[(size_t)i * K + kk] = ROW(q, c->ldq, i)[kk] * bexp(x, i, -1, kk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, V, K, 1, x->x1, K, s0, V, 0, oc, ldo);
    scores(x);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, V, n, 1, x->A, n, v, c->ldv, 1, oc, ldo);
  }
  for (int kk = 0; kk < K; kk++) {
    float e = bexp(x, n - 1, -1, kk);
    for (int y = 0; y < V; y++) s1[(size_t)kk * V + y] = e * s0[(size_t)kk * V + y];
  }
  for (int j = 0; j < n; j++)
    for (int kk = 0; kk < K; kk++) x->x1[(size_t)j * K + kk] = ROW(k, c->ldk, j)[kk] * bexp(x, n - 1, j, kk);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, V, n, 1, x->x1, K, v, c->ldv, 1, s1, V);
}

static Ctx ctx_new(const ChunkOpF32 *c) {
  int L = c->L < c->T ? c->L : (c->T > 0 ? c->T : 1), m = c->K > c->V ? c->K : c->V;
  Ctx x = {c, 0, 0, NULL, NULL, NULL, NULL, NULL};
  x.b = xmalloc(sizeof(double) * (size_t)L * (size_t)c->K + 1);
  x.x1 = xmalloc(sizeof(float) * (size_t)L * (size_t)m + 1), x.x2 = xmalloc(sizeof(float) * (size_t)L * (size_t)m + 1);
  x.A = xmalloc(sizeof(float) * (size_t)L * (size_t)L + 1), x.W = xmalloc(sizeof(float) * (size_t)L * (size_t)L + 1);
  return x;
}

static void ctx_free(Ctx *x) { free(x->b), free(x->x1), free(x->x2), free(x->A), free(x->W); }

static void at_chunk(Ctx *x, int j) {
  x->t0 = j * x->c->L;
  x->n = x->c->T - x->t0 < x->c->L ? x->c->T - x->t0 : x->c->L;
  cumulate(x);
}

void cpu_chunkop_forward(const ChunkOpF32 *c, const float *s0, float *o, int ldo, float *sT) {
  CHECK(c->L >= 1 && c->T >= 0);
  size_t kv = (size_t)c->K * (size_t)c->V;
  Ctx x = ctx_new(c);
  float *cur = xmalloc(sizeof(float) * kv + 1), *next = xmalloc(sizeof(float) * kv + 1);
  memcpy(cur, s0, sizeof(float) * kv);
  for (int j = 0; j * c->L < c->T; j++) {
    at_chunk(&x, j);
    chunk_forward(&x, cur, o, ldo, next);
    float *sw = cur;
    cur = next, next = sw;
  }
  memcpy(sT, cur, sizeof(float) * kv);
  free(cur), free(next);
  ctx_free(&x);
}

void cpu_chunkop_backward(const ChunkOpF32 *c, const float *s0, const float *dout, int lddo, const float *dsT, float *dq,
                          float *dk, float *dv, float *dla, float *ds0) {
  CHECK(c->L >= 1 && c->T >= 0);
  int K = c->K, V = c->V, nc = (c->T + c->L - 1) / c->L, w = w_of(c);
  size_t kv = (size_t)K * (size_t)V;
  Ctx x = ctx_new(c);
  float *bnd = xmalloc(sizeof(float) * kv * (size_t)(nc + 1) + 1), *g = xmalloc(sizeof(float) * kv + 1);
  float *dA = xmalloc(sizeof(float) * (size_t)c->L * (size_t)c->L + 1), *db = xmalloc(sizeof(float) * (size_t)c->L * (size_t)K + 1);
  memcpy(bnd, s0, sizeof(float) * kv);
  for (int j = 0; j < nc; j++) at_chunk(&x, j), chunk_forward(&x, bnd + kv * (size_t)j, NULL, 0, bnd + kv * (size_t)(j + 1));
  memcpy(g, dsT, sizeof(float) * kv);
  for (int jc = nc - 1; jc >= 0; jc--) {
    at_chunk(&x, jc);
    int n = x.n, t0 = x.t0;
    const float *S0 = bnd + kv * (size_t)jc, *S1 = bnd + kv * (size_t)(jc + 1);
    const float *q = ROW(c->q, c->ldq, t0), *k = ROW(c->k, c->ldk, t0), *v = ROW(c->v, c->ldv, t0), *dO = ROW(dout, lddo, t0);
    float *dQ = ROW(dq, c->ldq, t0), *dK = ROW(dk, c->ldk, t0), *dV = ROW(dv, c->ldv, t0);
    scores(&x);
    /* dA = dO v^T on and below the diagonal */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, V, 1, dO, lddo, v, c->ldv, 0, dA, n);
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) dA[(size_t)i * n + j] = 0;
    /* dv = A^T dO + (k e^{b_n - b}) dS_n */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, V, n, 1, x.A, n, dO, lddo, 0, dV, c->ldv);
    for (int j = 0; j < n; j++)
      for (int kk = 0; kk < K; kk++) x.x1[(size_t)j * K + kk] = ROW(k, c->ldk, j)[kk] * bexp(&x, n - 1, j, kk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, V, K, 1, x.x1, K, g, V, 1, dV, c->ldv);
    /* dq = e^{b} (dO S_0^T) + intra;  dk = e^{b_n - b} (v dS_n^T) + intra */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, K, V, 1, dO, lddo, S0, V, 0, dQ, c->ldq);
    for (int i = 0; i < n; i++)
      for (int kk = 0; kk < K; kk++) ROW(dQ, c->ldq, i)[kk] *= bexp(&x, i, -1, kk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, K, V, 1, v, c->ldv, g, V, 0, dK, c->ldk);
    for (int j = 0; j < n; j++)
      for (int kk = 0; kk < K; kk++) ROW(dK, c->ldk, j)[kk] *= bexp(&x, n - 1, j, kk);
    weighted_before(&x, dA, k, c->ldk, dQ, c->ldq);
    weighted_after(&x, dA, q, c->ldq, dK, c->ldk);
    /* dS_0 = (q e^b)^T dO + e^{b_n} dS_n */
    for (int i = 0; i < n; i++)
      for (int kk = 0; kk < K; kk++) x.x1[(size_t)i * K + kk] = ROW(q, c->ldq, i)[kk] * bexp(&x, i, -1, kk);
    for (int kk = 0; kk < K; kk++) { /* the log-decays: db = q dq - k dk, + S_n . dS_n at the last step */
      double s = 0;
      for (int y = 0; y < V; y++) s += (double)S1[(size_t)kk * V + y] * g[(size_t)kk * V + y];
      for (int i = 0; i < n; i++)
        db[(size_t)i * K + kk] = ROW(q, c->ldq, i)[kk] * ROW(dQ, c->ldq, i)[kk] - ROW(k, c->ldk, i)[kk] * ROW(dK, c->ldk, i)[kk];
      db[(size_t)(n - 1) * K + kk] += (float)s;
    }
    for (int kk = 0; kk < K; kk++) {
      float e = bexp(&x, n - 1, -1, kk);
      for (int y = 0; y < V; y++) g[(size_t)kk * V + y] *= e;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, V, n, 1, x.x1, K, dO, lddo, 1, g, V);
    for (int kk = 0; kk < w; kk++) {
      double s = 0;
      for (int i = n - 1; i >= 0; i--) {
        if (c->per_key) s += db[(size_t)i * K + kk];
        else
          for (int k2 = 0; k2 < K; k2++) s += db[(size_t)i * K + k2];
        dla[(size_t)(t0 + i) * (size_t)c->ldla + (size_t)kk] = (float)s;
      }
    }
  }
  memcpy(ds0, g, sizeof(float) * kv);
  free(bnd), free(g), free(dA), free(db);
  ctx_free(&x);
}
