/* chunkop.c: the chunkwise-parallel form in float64 (chunkop.h). Written for clarity: the
 * pairwise decays e^{b_i - b_j} per key are computed as they are used; a fast back end groups the
 * same sums into matrix products. */
#include "chunkop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* The log-decay of step t (key k), at least CHUNK_LOG_FLOOR: a decay of 0 (log -inf) would make
 * b_i - b_j = -inf - -inf; e^{CHUNK_LOG_FLOOR} is 0 all the same (a NaN, a negative decay's, stays) */
static double la_at(const ChunkOp *c, int t, int k) {
  double la = c->la[(size_t)t * (size_t)c->ldla + (size_t)(c->per_key ? k : 0)];
  return la < CHUNK_LOG_FLOOR ? CHUNK_LOG_FLOOR : la;
}

/* b: [n, K] the cumulative log-decays of steps t0 .. t0 + n - 1 from t0 */
static void cumulate(const ChunkOp *c, int t0, int n, double *b) {
  int K = c->K;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < K; k++) b[(size_t)i * K + k] = (i ? b[(size_t)(i - 1) * K + k] : 0) + la_at(c, t0 + i, k);
}

#define Q(t_, i_) c->q[(size_t)(t_) * (size_t)c->ldq + (size_t)(i_)]
#define KK(t_, i_) c->k[(size_t)(t_) * (size_t)c->ldk + (size_t)(i_)]
#define VV(t_, i_) c->v[(size_t)(t_) * (size_t)c->ldv + (size_t)(i_)]

/* The chunk from t0 of n steps: its reads into o (when o is not NULL) and its final state s1 from
 * the state s0 before it (s1 may not be s0). b: its cumulative log-decays. */
static void chunk_forward(const ChunkOp *c, int t0, int n, const double *b, const double *s0, double *o, int ldo,
                          double *s1) {
  int K = c->K, V = c->V;
  if (o)
    for (int i = 0; i < n; i++) {
      double *oi = o + (size_t)(t0 + i) * (size_t)ldo;
      for (int x = 0; x < V; x++) oi[x] = 0;
      for (int k = 0; k < K; k++) { /* inter: (q_i e^{b_i})^T S_0 */
        double w = Q(t0 + i, k) * exp(b[(size_t)i * K + k]);
        for (int x = 0; x < V; x++) oi[x] += w * s0[(size_t)k * V + x];
      }
      for (int j = 0; j <= i; j++) { /* intra: the masked, decay-weighted q k^T, times v */
        double aij = 0;
        for (int k = 0; k < K; k++) aij += Q(t0 + i, k) * KK(t0 + j, k) * exp(b[(size_t)i * K + k] - b[(size_t)j * K + k]);
        for (int x = 0; x < V; x++) oi[x] += aij * VV(t0 + j, x);
      }
    }
  const double *bn = b + (size_t)(n - 1) * K;
  for (int k = 0; k < K; k++) {
    double e = exp(bn[k]);
    for (int x = 0; x < V; x++) s1[(size_t)k * V + x] = e * s0[(size_t)k * V + x];
    for (int j = 0; j < n; j++) {
      double w = KK(t0 + j, k) * exp(bn[k] - b[(size_t)j * K + k]);
      for (int x = 0; x < V; x++) s1[(size_t)k * V + x] += w * VV(t0 + j, x);
    }
  }
}

void chunkop_forward(const ChunkOp *c, const double *s0, double *o, int ldo, double *sT) {
  CHECK(c->L >= 1 && c->T >= 0);
  size_t kv = (size_t)c->K * (size_t)c->V;
  double *b = xmalloc(sizeof(double) * (size_t)c->L * (size_t)c->K + 1);
  double *cur = xmalloc(sizeof(double) * kv + 1), *next = xmalloc(sizeof(double) * kv + 1);
  memcpy(cur, s0, sizeof(double) * kv);
  for (int t0 = 0; t0 < c->T; t0 += c->L) {
    int n = c->T - t0 < c->L ? c->T - t0 : c->L;
    cumulate(c, t0, n, b);
    chunk_forward(c, t0, n, b, cur, o, ldo, next);
    double *sw = cur;
    cur = next, next = sw;
  }
  memcpy(sT, cur, sizeof(double) * kv);
  free(b), free(cur), free(next);
}

/* The backward of one chunk (t0, n), its state before s0 and after s1, given do and ds1 (the
 * gradient of its final state): dq, dk, dv, dla of its steps and ds0.
 *   dA_ij = do_i . v_j                                     (j <= i)
 *   dv_j  = sum_{i >= j} A_ij do_i + (k_j e^{b_n - b_j})^T ds1
 *   dq_i  = e^{b_i} (S_0 do_i) + sum_{j <= i} dA_ij k_j e^{b_i - b_j}
 *   dk_j  = sum_{i >= j} dA_ij q_i e^{b_i - b_j} + e^{b_n - b_j} (ds1 v_j)
 *   dS_0  = sum_i (q_i e^{b_i}) do_i^T + e^{b_n} ds1
 *   db_i  = q_i dq_i - k_i dk_i + [i = n] (S_n . ds1 per key)   (every b_i term appears in q_i's
 *           or, negated, in k_i's products, and b_n also in S_n's)
 *   dla_t = sum_{i >= t} db_i                              (b_i = sum_{t <= i} la_t) */
static void chunk_backward(const ChunkOp *c, int t0, int n, const double *b, const double *s0, const double *s1,
                           const double *dout, int lddo, const double *ds1, double *dq, double *dk, double *dv, double *dla,
                           double *ds0, double *db) {
  int K = c->K, V = c->V;
#define DO(t, x) dout[(size_t)(t) * (size_t)lddo + (size_t)(x)]
#define DQ(t, k) dq[(size_t)(t) * (size_t)c->ldq + (size_t)(k)]
#define DK(t, k) dk[(size_t)(t) * (size_t)c->ldk + (size_t)(k)]
#define DV(t, x) dv[(size_t)(t) * (size_t)c->ldv + (size_t)(x)]
  const double *bn = b + (size_t)(n - 1) * K;
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < K; k++) DQ(t0 + i, k) = 0, DK(t0 + i, k) = 0;
    for (int x = 0; x < V; x++) DV(t0 + i, x) = 0;
  }
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < K; k++) { /* inter */
      double s = 0;
      for (int x = 0; x < V; x++) s += s0[(size_t)k * V + x] * DO(t0 + i, x);
      DQ(t0 + i, k) += exp(b[(size_t)i * K + k]) * s;
    }
    for (int j = 0; j <= i; j++) {
      double aij = 0, daij = 0;
      for (int k = 0; k < K; k++) aij += Q(t0 + i, k) * KK(t0 + j, k) * exp(b[(size_t)i * K + k] - b[(size_t)j * K + k]);
      for (int x = 0; x < V; x++) daij += DO(t0 + i, x) * VV(t0 + j, x), DV(t0 + j, x) += aij * DO(t0 + i, x);
      for (int k = 0; k < K; k++) {
        double e = exp(b[(size_t)i * K + k] - b[(size_t)j * K + k]);
        DQ(t0 + i, k) += daij * KK(t0 + j, k) * e;
        DK(t0 + j, k) += daij * Q(t0 + i, k) * e;
      }
    }
  }
  for (int j = 0; j < n; j++) /* the final state's part */
    for (int k = 0; k < K; k++) {
      double e = exp(bn[k] - b[(size_t)j * K + k]), s = 0;
      for (int x = 0; x < V; x++) s += ds1[(size_t)k * V + x] * VV(t0 + j, x), DV(t0 + j, x) += KK(t0 + j, k) * e * ds1[(size_t)k * V + x];
      DK(t0 + j, k) += e * s;
    }
  for (int k = 0; k < K; k++) {
    double e = exp(bn[k]);
    for (int x = 0; x < V; x++) {
      double s = e * ds1[(size_t)k * V + x];
      for (int i = 0; i < n; i++) s += Q(t0 + i, k) * exp(b[(size_t)i * K + k]) * DO(t0 + i, x);
      ds0[(size_t)k * V + x] = s;
    }
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < K; k++) db[(size_t)i * K + k] = Q(t0 + i, k) * DQ(t0 + i, k) - KK(t0 + i, k) * DK(t0 + i, k);
  for (int k = 0; k < K; k++) {
    double s = 0;
    for (int x = 0; x < V; x++) s += s1[(size_t)k * V + x] * ds1[(size_t)k * V + x];
    db[(size_t)(n - 1) * K + k] += s;
  }
  /* the reverse cumulative sum, per key or summed over the keys for a scalar decay */
  int w = c->per_key ? K : 1;
  for (int k = 0; k < w; k++) {
    double s = 0;
    for (int i = n - 1; i >= 0; i--) {
      if (c->per_key) s += db[(size_t)i * K + k];
      else
        for (int kk = 0; kk < K; kk++) s += db[(size_t)i * K + kk];
      dla[(size_t)(t0 + i) * (size_t)c->ldla + (size_t)k] = s;
    }
  }
#undef DO
#undef DQ
#undef DK
#undef DV
}

void chunkop_backward(const ChunkOp *c, const double *s0, const double *dout, int lddo, const double *dsT, double *dq,
                      double *dk, double *dv, double *dla, double *ds0) {
  CHECK(c->L >= 1 && c->T >= 0);
  size_t kv = (size_t)c->K * (size_t)c->V;
  int nc = (c->T + c->L - 1) / c->L;
  /* the states at the chunk boundaries: bnd[j] before chunk j, bnd[nc] the final one */
  double *bnd = xmalloc(sizeof(double) * kv * (size_t)(nc + 1) + 1);
  double *b = xmalloc(sizeof(double) * (size_t)c->L * (size_t)c->K + 1), *db = xmalloc(sizeof(double) * (size_t)c->L * (size_t)c->K + 1);
  double *g = xmalloc(sizeof(double) * kv + 1), *g0 = xmalloc(sizeof(double) * kv + 1);
  memcpy(bnd, s0, sizeof(double) * kv);
  for (int j = 0; j < nc; j++) {
    int t0 = j * c->L, n = c->T - t0 < c->L ? c->T - t0 : c->L;
    cumulate(c, t0, n, b);
    chunk_forward(c, t0, n, b, bnd + kv * (size_t)j, NULL, 0, bnd + kv * (size_t)(j + 1));
  }
  memcpy(g, dsT, sizeof(double) * kv);
  for (int j = nc - 1; j >= 0; j--) {
    int t0 = j * c->L, n = c->T - t0 < c->L ? c->T - t0 : c->L;
    cumulate(c, t0, n, b);
    chunk_backward(c, t0, n, b, bnd + kv * (size_t)j, bnd + kv * (size_t)(j + 1), dout, lddo, g, dq, dk, dv, dla, g0, db);
    memcpy(g, g0, sizeof(double) * kv);
  }
  memcpy(ds0, g, sizeof(double) * kv);
  free(bnd), free(b), free(db), free(g), free(g0);
}
