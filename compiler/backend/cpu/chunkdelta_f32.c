/* chunkdelta_f32.c: the chunked delta rule (compiler/ir/chunkdelta.h) in float32 with its products
 * as matrix products (cpu_mm; OpenBLAS's strsm for the solves), forward and backward, for the CPU back end. Per
 * chunk of n <= L steps, with b the cumulative log-decays from the chunk's start, p_i = b_{i-1}
 * (p_0 = 0) and the [n, n] decay tables E_is = e^{p_i - b_s} (s < i), D_is = e^{b_i - b_s}
 * (s <= i), 0 elsewhere (every exponent at most 0):
 *   M = E o (K K^T)  (o: elementwise),  A = diag(c) M,  (I - A) U = V + diag(c e^p) (K S_0)  (strsm)
 *   O = diag(e^b) (Q S_0) + (D o (Q K^T)) U,  S_n = e^{b_n} S_0 + (diag(e^{b_n - b}) K)^T U.
 * The backward is the float64 reference's (chunkdelta.c) with the same products; the pass that
 * recomputes the boundary states keeps each chunk's M, U and K S_0 for it. */

/* the row loops (tables, scalings, masks) vectorized: -O2's cost model leaves loops of a run-time
 * length scalar (as chunkop_f32.c) */
#pragma GCC optimize("O3", "no-trapping-math")

#include "cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>

#include "chunk_f32.h"
#include "ir.h" /* CHUNK_LOG_FLOOR */

#define CLONED __attribute__((target_clones("avx512f", "avx2", "default")))
#define ROW(p, ld, t) ((p) + (size_t)(t) * (size_t)(ld))
#define MASKED (-100.0f) /* an exponent whose exponential is 0 (vexp) */

/* Per call: the current chunk and the scratch of the longest one, allocated once. */
typedef struct Ctx {
  const ChunkDeltaF32 *d;
  int t0, n, L;
  double *b;         /* [L + 1]: b[0] = 0, b[i + 1] after step i (float64: b_i - b_s of large sums loses nothing) */
  float *eb, *ep, *f; /* [L]: e^{b_i}, e^{p_i}, e^{b_n - b_i} */
  float *E, *D;      /* [L, L] the decay tables (0 outside their triangles) */
  float *N;          /* [L, L]: -A, strictly lower (the solve's unit lower triangular matrix) */
  float *P, *W, *Z;  /* [L, L] scratch ([L, L + 3]: Z and P hold 3 L exponents first) */
  float *x1;         /* [L, max(K, V)] scratch */
  float *kT;         /* [K, L]: the chunk's k transposed */
  float *s0T, *gT;   /* [V, K]: S_0 and dS_n transposed */
  float *uT;         /* [V, L]: U transposed */
  float *t, *t2;     /* [L] scratch */
  double *db;        /* [L] */
} Ctx;

/* The call's scratch carved from s (ChunkDeltaF32.scratch) */
static Ctx ctx_new(const ChunkDeltaF32 *d, Scratch *s) {
  int L = chunk_call_length(d->T, d->L), m = d->K > d->V ? d->K : d->V;
  size_t ll = sizeof(float) * (size_t)L * (size_t)(L + 3), lm = sizeof(float) * (size_t)L * (size_t)m;
  Ctx x = {.d = d, .L = L};
  x.b = scratch_take(s, sizeof(double) * (size_t)(L + 1)), x.db = scratch_take(s, sizeof(double) * (size_t)L);
  x.eb = scratch_take(s, sizeof(float) * (size_t)L), x.ep = scratch_take(s, sizeof(float) * (size_t)L);
  x.f = scratch_take(s, sizeof(float) * (size_t)L);
  x.E = scratch_take(s, ll), x.D = scratch_take(s, ll), x.N = scratch_take(s, ll), x.P = scratch_take(s, ll);
  x.W = scratch_take(s, ll), x.Z = scratch_take(s, ll);
  x.kT = scratch_take(s, sizeof(float) * (size_t)L * (size_t)d->K), x.uT = scratch_take(s, sizeof(float) * (size_t)L * (size_t)d->V);
  x.s0T = scratch_take(s, sizeof(float) * (size_t)d->K * (size_t)d->V), x.gT = scratch_take(s, sizeof(float) * (size_t)d->K * (size_t)d->V);
  x.x1 = scratch_take(s, lm), x.t = scratch_take(s, sizeof(float) * (size_t)L), x.t2 = scratch_take(s, sizeof(float) * (size_t)L);
  return x;
}

/* dst [w, n] = src^T of n rows of w. A product with a transposed second factor runs as an
 * untransposed one on such a copy: OpenBLAS's small-matrix kernels (about twice as fast at
 * 64 x 64 x 64) take none (row-major A B^T is its column-major "tn"). */
CLONED static void transposed(float *dst, const float *src, int lds, int n, int w) {
  for (int i = 0; i < n; i++) {
    const float *restrict a = src + (size_t)i * (size_t)lds;
    for (int k = 0; k < w; k++) dst[(size_t)k * n + i] = a[k];
  }
}

/* Chunk j: its steps, b, the tables of exponentials and k^T. */
CLONED static void at_chunk(Ctx *x, int j) {
  const ChunkDeltaF32 *d = x->d;
  x->t0 = j * d->L;
  x->n = d->T - x->t0 < d->L ? d->T - x->t0 : d->L;
  int n = x->n;
  const double *b = x->b; /* b[i + 1]: b_i; b[i]: p_i */
  x->b[0] = 0;
  for (int i = 0; i < n; i++) {
    float la = d->la[(size_t)(x->t0 + i) * (size_t)d->ldla];
    x->b[i + 1] = b[i] + (la < CHUNK_LOG_FLOOR ? CHUNK_LOG_FLOOR : (double)la); /* a decay of 0 (chunkop.h) */
  }
  float *z = x->Z;
  for (int i = 0; i < n; i++) z[i] = (float)b[i + 1], z[n + i] = (float)b[i], z[2 * n + i] = (float)(b[n] - b[i + 1]);
  cpu_vexp(x->P, z, 3 * n);
  for (int i = 0; i < n; i++) x->eb[i] = x->P[i], x->ep[i] = x->P[n + i], x->f[i] = x->P[2 * n + i];
  for (int i = 0; i < n; i++) {
    float *restrict ze = x->P + (size_t)i * n, *restrict zd = z + (size_t)i * n;
    for (int s = 0; s < n; s++) {
      ze[s] = s < i ? (float)(b[i] - b[s + 1]) : MASKED;
      zd[s] = s <= i ? (float)(b[i + 1] - b[s + 1]) : MASKED;
    }
  }
  cpu_vexp(x->E, x->P, n * n), cpu_vexp(x->D, z, n * n);
  transposed(x->kT, ROW(d->k, d->ldk, x->t0), d->ldk, n, d->K);
}

/* dst_i = src_i * t_i for n rows of w (dst may be src) */
CLONED static void scaled(float *dst, int ldd, const float *src, int lds, const float *t, int n, int w) {
  for (int i = 0; i < n; i++) {
    float *d = dst + (size_t)i * (size_t)ldd, f = t[i];
    const float *a = src + (size_t)i * (size_t)lds;
    for (int k = 0; k < w; k++) d[k] = a[k] * f;
  }
}

/* The chunk's M = E o (K K^T) into M, K S_0 into KS and the solve's U into U (each [n, .] dense),
 * and x->N = -diag(c) M. */
CLONED static void chunk_solve(Ctx *x, const float *s0, float *M, float *KS, float *U) {
  const ChunkDeltaF32 *d = x->d;
  int n = x->n, K = d->K, V = d->V;
  const float *k = ROW(d->k, d->ldk, x->t0), *v = ROW(d->v, d->ldv, x->t0), *c = d->c + (size_t)x->t0 * (size_t)d->ldc;
  cpu_mm(false, n, n, K, k, d->ldk, x->kT, n, M, n, false);
  for (int i = 0; i < n; i++) {
    float ci = -c[(size_t)i * (size_t)d->ldc], *restrict m = M + (size_t)i * n, *restrict nn = x->N + (size_t)i * n;
    const float *restrict e = x->E + (size_t)i * n;
    for (int s = 0; s < n; s++) m[s] *= e[s], nn[s] = ci * m[s];
  }
  cpu_mm(false, n, V, K, k, d->ldk, s0, V, KS, V, false);
  for (int i = 0; i < n; i++) {
    float w = c[(size_t)i * (size_t)d->ldc] * x->ep[i], *restrict u = U + (size_t)i * V;
    const float *restrict vi = v + (size_t)i * (size_t)d->ldv, *restrict ks = KS + (size_t)i * V;
    for (int y = 0; y < V; y++) u[y] = vi[y] + w * ks[y];
  }
  cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, V, 1, x->N, n, U, V);
}

/* s1 = e^{b_n} S_0 + (diag(e^{b_n - b}) K)^T U (s1 may not be s0) */
static void chunk_state(Ctx *x, const float *s0, const float *U, float *s1) {
  const ChunkDeltaF32 *d = x->d;
  int n = x->n, K = d->K, V = d->V;
  float e = x->eb[n - 1];
  for (size_t i = 0; i < (size_t)K * V; i++) s1[i] = e * s0[i];
  scaled(x->x1, K, ROW(d->k, d->ldk, x->t0), d->ldk, x->f, n, K);
  cpu_mm(true, K, V, n, x->x1, K, U, V, s1, V, true);
}

/* x->P = D o (Q K^T) */
CLONED static void intra_scores(Ctx *x) {
  const ChunkDeltaF32 *d = x->d;
  int n = x->n;
  cpu_mm(false, n, n, d->K, ROW(d->q, d->ldq, x->t0), d->ldq, x->kT, n, x->P, n, false);
  for (size_t e = 0; e < (size_t)n * n; e++) x->P[e] *= x->D[e];
}

/* o = diag(e^b) (Q S_0) + P U */
static void chunk_reads(Ctx *x, const float *s0, const float *U, float *o, int ldo) {
  const ChunkDeltaF32 *d = x->d;
  int n = x->n, V = d->V;
  float *oc = ROW(o, ldo, x->t0);
  cpu_mm(false, n, V, d->K, ROW(d->q, d->ldq, x->t0), d->ldq, s0, V, oc, ldo, false);
  scaled(oc, ldo, oc, ldo, x->eb, n, V);
  intra_scores(x);
  cpu_mm(false, n, V, n, x->P, n, U, V, oc, ldo, true);
}

/* The layout of ChunkDeltaF32.keep: the states before each chunk [nc][K V], then by step t M's row
 * [T][L], K S_0's and U's [T][V] (L the chunk length of the call, at most T) */
typedef struct Kept {
  float *bnd, *M, *KS, *U;
} Kept;

static Kept kept_at(float *keep, int T, int K, int V, int L) {
  size_t nc = (size_t)(T + L - 1) / (size_t)L, kv = (size_t)K * (size_t)V;
  Kept k = {keep, NULL, NULL, NULL};
  k.M = k.bnd + nc * kv, k.KS = k.M + (size_t)T * (size_t)chunk_call_length(T, L), k.U = k.KS + (size_t)T * (size_t)V;
  return k;
}

size_t cpu_chunkdelta_keep_floats(int T, int K, int V, int L) {
  size_t nc = (size_t)(T + L - 1) / (size_t)L;
  return nc * (size_t)K * (size_t)V + (size_t)T * ((size_t)chunk_call_length(T, L) + 2 * (size_t)V);
}

void cpu_chunkdelta_forward(const ChunkDeltaF32 *d, const float *s0, float *o, int ldo, float *sT) {
  CHECK(d->L >= 1 && d->T >= 0);
  size_t kv = (size_t)d->K * (size_t)d->V;
  Scratch mine = {0}, *s = scratch_for_call(d->scratch, &mine);
  Ctx x = ctx_new(d, s);
  int nc = (d->T + d->L - 1) / d->L;
  /* with keep: each chunk's values into it, the states before the chunks too (the final one into
   * a buffer of ours); else one chunk's values and two states of our own in turn */
  Kept kp = d->keep ? kept_at(d->keep, d->T, d->K, d->V, d->L) : (Kept){0};
  float *fin = scratch_take(s, sizeof(float) * kv), *own = d->keep ? NULL : scratch_take(s, sizeof(float) * kv);
  float *M = NULL, *KS = NULL, *U = NULL;
  if (!d->keep)
    M = scratch_take(s, sizeof(float) * (size_t)x.L * (size_t)x.L), KS = scratch_take(s, sizeof(float) * (size_t)x.L * (size_t)d->V),
    U = scratch_take(s, sizeof(float) * (size_t)x.L * (size_t)d->V);
  float *cur = d->keep && nc ? kp.bnd : fin;
  memcpy(cur, s0, sizeof(float) * kv);
  for (int j = 0; j < nc; j++) {
    at_chunk(&x, j);
    size_t t0 = (size_t)x.t0;
    float *next = d->keep && j + 1 < nc ? kp.bnd + kv * (size_t)(j + 1) : cur == fin ? own : fin;
    if (d->keep) M = kp.M + t0 * (size_t)x.L, KS = kp.KS + t0 * (size_t)d->V, U = kp.U + t0 * (size_t)d->V;
    chunk_solve(&x, cur, M, KS, U);
    chunk_reads(&x, cur, U, o, ldo);
    chunk_state(&x, cur, U, next);
    cur = next;
  }
  memcpy(sT, cur, sizeof(float) * kv);
  scratch_free(&mine);
}

/* r_i += the sum of row i of an [n, n] matrix, c_j -= the sum of its column j */
CLONED static void row_col_sums(const float *Z, int n, double *r, double *c) {
  for (int i = 0; i < n; i++) {
    const float *restrict z = Z + (size_t)i * n;
    float s = 0;
    for (int j = 0; j < n; j++) s += z[j];
    r[i] += s;
  }
  for (int i = 0; i < n; i++) {
    const float *restrict z = Z + (size_t)i * n;
    for (int j = 0; j < n; j++) c[j] -= z[j];
  }
}

/* dot products of n rows of w, into t (t_i = a_i . b_i) */
CLONED static void row_dots(const float *a, int lda, const float *b, int ldb, int n, int w, float *t) {
  for (int i = 0; i < n; i++) {
    const float *restrict x = a + (size_t)i * (size_t)lda, *restrict y = b + (size_t)i * (size_t)ldb;
    float s = 0;
    for (int k = 0; k < w; k++) s += x[k] * y[k];
    t[i] = s;
  }
}

/* The backward of one chunk (chunkdelta.c's chunk_backward, the same terms in the same order):
 * g is dS_n on entry and dS_0 on return. */
static void chunk_backward(Ctx *x, const float *S0, const float *M, const float *KS, const float *U,
                           const float *dout, int lddo, float *g, float *dq, float *dk, float *dv, float *dla, float *dc) {
  const ChunkDeltaF32 *d = x->d;
  int n = x->n, t0 = x->t0, K = d->K, V = d->V;
  const float *q = ROW(d->q, d->ldq, t0), *k = ROW(d->k, d->ldk, t0), *c = d->c + (size_t)t0 * (size_t)d->ldc;
  const float *dO = ROW(dout, lddo, t0);
  float *dQ = ROW(dq, d->ldq, t0), *dK = ROW(dk, d->ldk, t0), *dV = ROW(dv, d->ldv, t0), *dC = dc + (size_t)t0 * (size_t)d->ldc;
  float *t = x->t, *t2 = x->t2;
  double *db = x->db;
  for (int i = 0; i < n; i++) db[i] = 0;
  /* the final state: dU = diag(f) (K dS_n), dk = diag(f) (U dS_n^T), db_s -= t_s = f_s k_s . dS_n u_s,
   * db_n += S_n . dS_n; then dS_0 = e^{b_n} dS_n. The last step's own t_{n-1} is in S_n . dS_n too:
   * db_n += e^{b_n} S_0 . dS_n + sum_{s < n-1} t_s in its place (in float32 the two would cancel to
   * what is left of O(1) terms: all of it where the decays are strong) */
  cpu_mm(false, n, V, K, k, d->ldk, g, V, x->x1, V, false);
  scaled(dV, d->ldv, x->x1, V, x->f, n, V);
  row_dots(dV, d->ldv, U, V, n, V, t);
  double sn = 0;
  for (size_t e = 0; e < (size_t)K * V; e++) sn += (double)S0[e] * g[e];
  sn *= x->eb[n - 1];
  for (int i = 0; i < n - 1; i++) db[i] -= t[i], sn += t[i];
  db[n - 1] += sn;
  transposed(x->gT, g, V, K, V), transposed(x->s0T, S0, V, K, V), transposed(x->uT, U, V, n, V);
  cpu_mm(false, n, K, V, U, V, x->gT, K, dK, d->ldk, false);
  scaled(dK, d->ldk, dK, d->ldk, x->f, n, K);
  float en = x->eb[n - 1];
  for (size_t e = 0; e < (size_t)K * V; e++) g[e] *= en;
  /* the reads: P = D o (Q K^T), dP = dO U^T (its lower triangle: P's); dU += P^T dO;
   * dq = diag(e^b) (dO S_0^T) + (dP o D) K, dk += (dP o D)^T Q, dS_0 += (diag(e^b) Q)^T dO,
   * db_i += q_i . (its first dq) + sum_s (dP o P)_is, db_s -= sum_i (dP o P)_is */
  intra_scores(x);
  cpu_mm(true, n, V, n, x->P, n, dO, lddo, dV, d->ldv, true);
  cpu_mm(false, n, K, V, dO, lddo, x->s0T, K, dQ, d->ldq, false);
  scaled(dQ, d->ldq, dQ, d->ldq, x->eb, n, K);
  row_dots(q, d->ldq, dQ, d->ldq, n, K, t);
  for (int i = 0; i < n; i++) db[i] += t[i];
  cpu_mm(false, n, n, V, dO, lddo, x->uT, n, x->W, n, false);
  for (size_t e = 0; e < (size_t)n * n; e++) x->Z[e] = x->W[e] * x->P[e], x->W[e] *= x->D[e];
  for (int i = 0; i < n; i++) x->Z[(size_t)i * n + i] = 0; /* e^{b_i - b_i}: its two terms cancel */
  row_col_sums(x->Z, n, db, db);
  cpu_mm(false, n, K, n, x->W, n, k, d->ldk, dQ, d->ldq, true);
  cpu_mm(true, n, K, n, x->W, n, q, d->ldq, dK, d->ldk, true);
  scaled(x->x1, K, q, d->ldq, x->eb, n, K);
  cpu_mm(true, K, V, n, x->x1, K, dO, lddo, g, V, true);
  /* the solve: (I - A)^T dR = dU (in place in dv): dv = dR */
  for (int i = 0; i < n; i++) {
    float ci = -c[(size_t)i * (size_t)d->ldc], *restrict nn = x->N + (size_t)i * n;
    const float *restrict m = M + (size_t)i * n;
    for (int s = 0; s < n; s++) nn[s] = ci * m[s];
  }
  cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasUnit, n, V, 1, x->N, n, dV, d->ldv);
  /* R = V + diag(c e^p) (K S_0): dc_i = e^{p_i} (K S_0)_i . dR_i, db_{i-1} += c_i times that,
   * dk += diag(c e^p) (dR S_0^T), dS_0 += (diag(c e^p) K)^T dR */
  row_dots(KS, V, dV, d->ldv, n, V, t);
  for (int i = 0; i < n; i++) {
    float ci = c[(size_t)i * (size_t)d->ldc];
    dC[(size_t)i * (size_t)d->ldc] = x->ep[i] * t[i];
    if (i) db[i - 1] += (double)(ci * x->ep[i] * t[i]);
    t2[i] = ci * x->ep[i];
  }
  cpu_mm(false, n, K, V, dV, d->ldv, x->s0T, K, x->x1, K, false);
  for (int i = 0; i < n; i++) {
    float *restrict o = dK + (size_t)i * (size_t)d->ldk;
    const float *restrict y = x->x1 + (size_t)i * K;
    for (int kk = 0; kk < K; kk++) o[kk] += t2[i] * y[kk];
  }
  scaled(x->x1, K, k, d->ldk, t2, n, K);
  cpu_mm(true, K, V, n, x->x1, K, dV, d->ldv, g, V, true);
  /* A = diag(c) M, dA = dR U^T (s < i): dc_i += sum_s dA_is M_is, db_{i-1} += c_i times that,
   * db_s -= sum_i (dA o A)_is (the terms of s = i - 1, e^{b_{i-1} - b_{i-1}}, cancel: left out of
   * both), dk += (W + W^T) K with W = dA o diag(c) E */
  cpu_mm(false, n, n, V, dV, d->ldv, x->uT, n, x->W, n, false);
  for (int i = 0; i < n; i++) {
    float ci = c[(size_t)i * (size_t)d->ldc], s = 0, all = 0, *restrict w = x->W + (size_t)i * n;
    float *restrict z = x->Z + (size_t)i * n;
    const float *restrict m = M + (size_t)i * n, *restrict e = x->E + (size_t)i * n;
    for (int j = 0; j < n; j++) {
      float a = w[j] * m[j];
      all += a, s += j < i - 1 ? a : 0, z[j] = j < i - 1 ? ci * a : 0, w[j] *= ci * e[j];
    }
    dC[(size_t)i * (size_t)d->ldc] += all;
    if (i) db[i - 1] += (double)(ci * s);
  }
  for (int i = 0; i < n; i++) { /* db_s -= the column sums of dA o A */
    const float *restrict z = x->Z + (size_t)i * n;
    for (int j = 0; j < n; j++) db[j] -= z[j];
  }
  for (int i = 0; i < n; i++) /* W + W^T: W is strictly lower */
    for (int j = i + 1; j < n; j++) x->W[(size_t)i * n + j] = x->W[(size_t)j * n + i];
  cpu_mm(false, n, K, n, x->W, n, k, d->ldk, dK, d->ldk, true);
  /* d la_t = sum_{i >= t} db_i */
  double acc = 0;
  for (int i = n - 1; i >= 0; i--) acc += db[i], dla[(size_t)(t0 + i) * (size_t)d->ldla] = (float)acc;
}

void cpu_chunkdelta_backward(const ChunkDeltaF32 *d, const float *s0, const float *dout, int lddo, const float *dsT, float *dq,
                             float *dk, float *dv, float *dla, float *dc, float *ds0) {
  CHECK(d->L >= 1 && d->T >= 0);
  int nc = (d->T + d->L - 1) / d->L, V = d->V;
  size_t kv = (size_t)d->K * (size_t)V, T = (size_t)d->T;
  Scratch mine = {0}, *s = scratch_for_call(d->scratch, &mine);
  Ctx x = ctx_new(d, s);
  /* the states at the chunk boundaries, bnd[j] before chunk j (no final one); each chunk's M, K S_0
   * and U from its rows (t0 L for M, t0 V for the others): the forward's (keep), else again */
  Kept kp = d->keep ? kept_at(d->keep, d->T, d->K, V, d->L) : (Kept){0};
  float *bnd = kp.bnd ? kp.bnd : scratch_take(s, sizeof(float) * kv * (size_t)(nc > 0 ? nc : 1)), *g = scratch_take(s, sizeof(float) * kv);
  float *M = kp.M ? kp.M : scratch_take(s, sizeof(float) * T * (size_t)x.L), *KS = kp.KS ? kp.KS : scratch_take(s, sizeof(float) * T * (size_t)V);
  float *U = kp.U ? kp.U : scratch_take(s, sizeof(float) * T * (size_t)V);
  if (!d->keep) memcpy(bnd, s0, sizeof(float) * kv);
  for (int j = 0; !d->keep && j < nc; j++) {
    at_chunk(&x, j);
    size_t t0 = (size_t)x.t0;
    chunk_solve(&x, bnd + kv * (size_t)j, M + t0 * (size_t)x.L, KS + t0 * (size_t)V, U + t0 * (size_t)V);
    if (j + 1 < nc) chunk_state(&x, bnd + kv * (size_t)j, U + t0 * (size_t)V, bnd + kv * (size_t)(j + 1));
  }
  memcpy(g, dsT, sizeof(float) * kv);
  for (int j = nc - 1; j >= 0; j--) {
    at_chunk(&x, j);
    size_t t0 = (size_t)x.t0;
    chunk_backward(&x, bnd + kv * (size_t)j, M + t0 * (size_t)x.L, KS + t0 * (size_t)V,
                   U + t0 * (size_t)V, dout, lddo, g, dq, dk, dv, dla, dc);
  }
  memcpy(ds0, g, sizeof(float) * kv);
  scratch_free(&mine);
}
