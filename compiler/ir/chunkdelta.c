/* chunkdelta.c: the chunked delta rule in float64 (chunkdelta.h). Written for clarity: plain loops
 * over the chunk's steps, each exponential computed where it is used; a fast back end groups the
 * same sums into matrix products (compiler/backend/cpu/chunkdelta_f32.c). */
#include "chunkdelta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chunkop.h" /* CHUNK_LOG_FLOOR */
#include "support.h"

#define Q(t_, i_) d->q[(size_t)(t_) * (size_t)d->ldq + (size_t)(i_)]
#define KK(t_, i_) d->k[(size_t)(t_) * (size_t)d->ldk + (size_t)(i_)]
#define VV(t_, i_) d->v[(size_t)(t_) * (size_t)d->ldv + (size_t)(i_)]
#define CC(t_) d->c[(size_t)(t_) * (size_t)d->ldc]

/* One chunk: its steps t0 .. t0 + n - 1 and their cumulative log-decays from its start, b[i] after
 * step i, p[i] = b[i - 1] before it (p[0] = 0). Scratch of the chunk's size, [L] and [L, L]. */
typedef struct Chunk {
  int t0, n;
  double *b, *p; /* [L] */
  double *A;     /* [L, L]: A[i, s] = c_i e^{p_i - b_s} (k_i . k_s), s < i; 0 elsewhere */
  double *U;     /* [L, V]: the u of the steps */
  double *KS;    /* [L, V]: S_0^T k_i */
} Chunk;

/* The log-decay of step t, at least CHUNK_LOG_FLOOR (chunkop.c's la_at: a decay of 0, log -inf,
 * would make b_i - b_s = -inf - -inf) */
static double la_at(const ChunkDelta *d, int t) {
  double la = d->la[(size_t)t * (size_t)d->ldla];
  return la < CHUNK_LOG_FLOOR ? CHUNK_LOG_FLOOR : la;
}

static Chunk chunk_new(const ChunkDelta *d) {
  size_t L = (size_t)(d->L < d->T ? d->L : (d->T > 0 ? d->T : 1)); /* the longest chunk */
  Chunk ch = {0};
  ch.b = xmalloc(sizeof(double) * L), ch.p = xmalloc(sizeof(double) * L);
  ch.A = xmalloc(sizeof(double) * L * L), ch.U = xmalloc(sizeof(double) * L * (size_t)d->V + 1);
  ch.KS = xmalloc(sizeof(double) * L * (size_t)d->V + 1);
  return ch;
}

static void chunk_free(Chunk *ch) { free(ch->b), free(ch->p), free(ch->A), free(ch->U), free(ch->KS); }

/* Chunk j: its steps, b and p, A, S_0^T k and the solve of (I - A) U = V + diag(c e^p) (K S_0)
 * by forward substitution. */
static void chunk_solve(const ChunkDelta *d, int j, const double *s0, Chunk *ch) {
  int K = d->K, V = d->V;
  ch->t0 = j * d->L;
  ch->n = d->T - ch->t0 < d->L ? d->T - ch->t0 : d->L;
  int n = ch->n, t0 = ch->t0;
  for (int i = 0; i < n; i++) ch->p[i] = i ? ch->b[i - 1] : 0, ch->b[i] = ch->p[i] + la_at(d, t0 + i);
  for (int i = 0; i < n; i++)
    for (int s = 0; s < n; s++) {
      double a = 0;
      if (s < i) {
        for (int k = 0; k < K; k++) a += KK(t0 + i, k) * KK(t0 + s, k);
        a *= CC(t0 + i) * exp(ch->p[i] - ch->b[s]);
      }
      ch->A[(size_t)i * n + s] = a;
    }
  for (int i = 0; i < n; i++) {
    double *ks = ch->KS + (size_t)i * V, *u = ch->U + (size_t)i * V, w = CC(t0 + i) * exp(ch->p[i]);
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += KK(t0 + i, k) * s0[(size_t)k * V + x];
      ks[x] = a;
      u[x] = VV(t0 + i, x) + w * a;
    }
    for (int s = 0; s < i; s++)
      for (int x = 0; x < V; x++) u[x] += ch->A[(size_t)i * n + s] * ch->U[(size_t)s * V + x];
  }
}

/* The chunk's final state s1 from s0: S_n = e^{b_n} S_0 + sum_s e^{b_n - b_s} k_s u_s^T */
static void chunk_state(const ChunkDelta *d, const Chunk *ch, const double *s0, double *s1) {
  int K = d->K, V = d->V, n = ch->n;
  double bn = ch->b[n - 1];
  for (int k = 0; k < K; k++)
    for (int x = 0; x < V; x++) {
      double a = exp(bn) * s0[(size_t)k * V + x];
      for (int s = 0; s < n; s++) a += exp(bn - ch->b[s]) * KK(ch->t0 + s, k) * ch->U[(size_t)s * V + x];
      s1[(size_t)k * V + x] = a;
    }
}

/* The chunk's reads: o_i = e^{b_i} S_0^T q_i + sum_{s <= i} e^{b_i - b_s} (q_i . k_s) u_s */
static void chunk_reads(const ChunkDelta *d, const Chunk *ch, const double *s0, double *o, int ldo) {
  int K = d->K, V = d->V, n = ch->n, t0 = ch->t0;
  for (int i = 0; i < n; i++) {
    double *oi = o + (size_t)(t0 + i) * (size_t)ldo;
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += Q(t0 + i, k) * s0[(size_t)k * V + x];
      oi[x] = exp(ch->b[i]) * a;
    }
    for (int s = 0; s <= i; s++) {
      double qk = 0;
      for (int k = 0; k < K; k++) qk += Q(t0 + i, k) * KK(t0 + s, k);
      qk *= exp(ch->b[i] - ch->b[s]);
      for (int x = 0; x < V; x++) oi[x] += qk * ch->U[(size_t)s * V + x];
    }
  }
}

void chunkdelta_forward(const ChunkDelta *d, const double *s0, double *o, int ldo, double *sT) {
  CHECK(d->L >= 1 && d->T >= 0);
  size_t kv = (size_t)d->K * (size_t)d->V;
  Chunk ch = chunk_new(d);
  double *cur = xmalloc(sizeof(double) * kv + 1), *next = xmalloc(sizeof(double) * kv + 1);
  memcpy(cur, s0, sizeof(double) * kv);
  for (int j = 0; j * d->L < d->T; j++) {
    chunk_solve(d, j, cur, &ch);
    chunk_reads(d, &ch, cur, o, ldo);
    chunk_state(d, &ch, cur, next);
    double *sw = cur;
    cur = next, next = sw;
  }
  memcpy(sT, cur, sizeof(double) * kv);
  free(cur), free(next);
  chunk_free(&ch);
}

/* The backward of one chunk (docs/architecture.md, "The chunked delta rule"), its state before s0,
 * given do and ds1 (the gradient of the state after it): dq, dk, dv, dc, dla of its steps and ds0. In reverse order of
 * the forward: the final state's and the reads' parts give dU (and their own dq, dk, dS_0, db);
 * the solve gives dR = (I - A)^{-T} dU and dA = dR U^T (s < i); R's part and A's part give the
 * rest; dla is the reverse cumulative sum of db, where p_i = b_{i-1} passes its part to b_{i-1}. */
static void chunk_backward(const ChunkDelta *d, const Chunk *ch, const double *s0, const double *dout, int lddo, const double *ds1, double *dq, double *dk, double *dv, double *dla, double *dc,
                           double *ds0) {
  int K = d->K, V = d->V, n = ch->n, t0 = ch->t0;
  const double *b = ch->b, *p = ch->p, *U = ch->U;
  double bn = b[n - 1];
#define DO(t, x) dout[(size_t)(t) * (size_t)lddo + (size_t)(x)]
#define DQ(t, k) dq[(size_t)(t) * (size_t)d->ldq + (size_t)(k)]
#define DK(t, k) dk[(size_t)(t) * (size_t)d->ldk + (size_t)(k)]
#define DV(t, x) dv[(size_t)(t) * (size_t)d->ldv + (size_t)(x)]
#define DC(t) dc[(size_t)(t) * (size_t)d->ldc]
  double *dU = xcalloc((size_t)n * (size_t)V + 1, sizeof(double)), *db = xcalloc((size_t)n + 1, sizeof(double));
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < K; k++) DQ(t0 + i, k) = 0, DK(t0 + i, k) = 0;
    DC(t0 + i) = 0;
  }
  /* the final state: dS_0 = e^{b_n} dS_n, dU_s = e^{b_n - b_s} dS_n^T k_s, dk_s = e^{b_n - b_s} dS_n u_s,
   * db_n += e^{b_n} S_0 . dS_n + sum_{s < n} t_s and db_s -= t_s (s < n) with
   * t_s = e^{b_n - b_s} k_s . dS_n u_s (the last step's own t_n, e^{b_n - b_n}, would cancel) */
  for (size_t e = 0; e < (size_t)K * V; e++) ds0[e] = exp(bn) * ds1[e], db[n - 1] += exp(bn) * s0[e] * ds1[e];
  for (int s = 0; s < n; s++) {
    double f = exp(bn - b[s]);
    for (int k = 0; k < K; k++) {
      double a = 0;
      for (int x = 0; x < V; x++) a += ds1[(size_t)k * V + x] * U[(size_t)s * V + x];
      DK(t0 + s, k) += f * a;
      if (s < n - 1) db[s] -= f * a * KK(t0 + s, k), db[n - 1] += f * a * KK(t0 + s, k);
      for (int x = 0; x < V; x++) dU[(size_t)s * V + x] += f * KK(t0 + s, k) * ds1[(size_t)k * V + x];
    }
  }
  /* the reads: P_is = e^{b_i - b_s} (q_i . k_s) (s <= i); dP_is = do_i . u_s, dU_s += P_is do_i,
   * dq_i += e^{b_i - b_s} dP_is k_s, dk_s += e^{b_i - b_s} dP_is q_i, db_i += dP_is P_is, db_s -= the same
   * (s < i: at s = i they cancel);
   * and e^{b_i} S_0^T q_i: dq_i += e^{b_i} S_0 do_i, dS_0 += e^{b_i} q_i do_i^T, db_i += q_i . its dq_i */
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < K; k++) {
      double a = 0;
      for (int x = 0; x < V; x++) a += s0[(size_t)k * V + x] * DO(t0 + i, x);
      a *= exp(b[i]);
      DQ(t0 + i, k) += a, db[i] += Q(t0 + i, k) * a;
      for (int x = 0; x < V; x++) ds0[(size_t)k * V + x] += exp(b[i]) * Q(t0 + i, k) * DO(t0 + i, x);
    }
    for (int s = 0; s <= i; s++) {
      double e = exp(b[i] - b[s]), qk = 0, dp = 0;
      for (int k = 0; k < K; k++) qk += Q(t0 + i, k) * KK(t0 + s, k);
      for (int x = 0; x < V; x++) dp += DO(t0 + i, x) * U[(size_t)s * V + x], dU[(size_t)s * V + x] += e * qk * DO(t0 + i, x);
      for (int k = 0; k < K; k++) DQ(t0 + i, k) += e * dp * KK(t0 + s, k), DK(t0 + s, k) += e * dp * Q(t0 + i, k);
      if (s < i) db[i] += dp * e * qk, db[s] -= dp * e * qk;
    }
  }
  /* the solve: (I - A)^T dR = dU by back substitution; dv = dR */
  double *dR = dU; /* in place, from the last row */
  for (int i = n - 1; i >= 0; i--)
    for (int t = i + 1; t < n; t++)
      for (int x = 0; x < V; x++) dR[(size_t)i * V + x] += ch->A[(size_t)t * n + i] * dR[(size_t)t * V + x];
  for (int i = 0; i < n; i++)
    for (int x = 0; x < V; x++) DV(t0 + i, x) = dR[(size_t)i * V + x];
  /* R_i = v_i + c_i e^{p_i} S_0^T k_i: dc_i += e^{p_i} (S_0^T k_i) . dR_i, dp_i += c_i times that,
   * dk_i += c_i e^{p_i} S_0 dR_i, dS_0 += c_i e^{p_i} k_i dR_i^T */
  for (int i = 0; i < n; i++) {
    double w = CC(t0 + i) * exp(p[i]), a = 0;
    for (int x = 0; x < V; x++) a += ch->KS[(size_t)i * V + x] * dR[(size_t)i * V + x];
    DC(t0 + i) += exp(p[i]) * a;
    if (i) db[i - 1] += w * a;
    for (int k = 0; k < K; k++) {
      double g = 0;
      for (int x = 0; x < V; x++) g += s0[(size_t)k * V + x] * dR[(size_t)i * V + x], ds0[(size_t)k * V + x] += w * KK(t0 + i, k) * dR[(size_t)i * V + x];
      DK(t0 + i, k) += w * g;
    }
  }
  /* A_is = c_i e^{p_i - b_s} (k_i . k_s), s < i, dA_is = dR_i . u_s: dc_i += dA_is A_is / c_i,
   * dk_i += c_i e^{p_i - b_s} dA_is k_s and dk_s += the same with k_i, dp_i += dA_is A_is, db_s -= it
   * (s < i - 1: at s = i - 1, p_i = b_{i-1}, they cancel) */
  for (int i = 1; i < n; i++)
    for (int s = 0; s < i; s++) {
      double da = 0, e = exp(p[i] - b[s]), kk = 0;
      for (int x = 0; x < V; x++) da += dR[(size_t)i * V + x] * U[(size_t)s * V + x];
      for (int k = 0; k < K; k++) kk += KK(t0 + i, k) * KK(t0 + s, k);
      DC(t0 + i) += da * e * kk;
      double w = CC(t0 + i) * e * da;
      for (int k = 0; k < K; k++) DK(t0 + i, k) += w * KK(t0 + s, k), DK(t0 + s, k) += w * KK(t0 + i, k);
      double z = da * ch->A[(size_t)i * n + s];
      if (s < i - 1) db[i - 1] += z, db[s] -= z;
    }
  /* b_i = sum_{t <= i} la_t: d la_t = sum_{i >= t} db_i */
  double acc = 0;
  for (int i = n - 1; i >= 0; i--) acc += db[i], dla[(size_t)(t0 + i) * (size_t)d->ldla] = acc;
  free(dU), free(db);
#undef DO
#undef DQ
#undef DK
#undef DV
#undef DC
}

void chunkdelta_backward(const ChunkDelta *d, const double *s0, const double *dout, int lddo, const double *dsT, double *dq,
                         double *dk, double *dv, double *dla, double *dc, double *ds0) {
  CHECK(d->L >= 1 && d->T >= 0);
  size_t kv = (size_t)d->K * (size_t)d->V;
  int nc = (d->T + d->L - 1) / d->L;
  /* the states at the chunk boundaries: bnd[j] before chunk j (the backward needs no final one) */
  double *bnd = xmalloc(sizeof(double) * kv * (size_t)(nc > 0 ? nc : 1) + 1);
  double *g = xmalloc(sizeof(double) * kv + 1), *g0 = xmalloc(sizeof(double) * kv + 1);
  Chunk ch = chunk_new(d);
  memcpy(bnd, s0, sizeof(double) * kv);
  for (int j = 0; j + 1 < nc; j++) chunk_solve(d, j, bnd + kv * (size_t)j, &ch), chunk_state(d, &ch, bnd + kv * (size_t)j, bnd + kv * (size_t)(j + 1));
  memcpy(g, dsT, sizeof(double) * kv);
  for (int j = nc - 1; j >= 0; j--) {
    chunk_solve(d, j, bnd + kv * (size_t)j, &ch);
    chunk_backward(d, &ch, bnd + kv * (size_t)j, dout, lddo, g, dq, dk, dv, dla, dc, g0);
    memcpy(g, g0, sizeof(double) * kv);
  }
  memcpy(ds0, g, sizeof(double) * kv);
  chunk_free(&ch);
  free(bnd), free(g), free(g0);
}
