/* test_chunkdelta.c: the chunked delta rule (compiler/ir/chunkdelta.c) against the recurrence run
 * step by step (chunkdelta.h: S_t = a_t S_{t-1} + k_t u_t^T, u_t = v_t + c_t S_{t-1}^T k_t,
 * o_t = S_t^T q_t): the reads and final state within 1e-10, every gradient against backpropagation
 * through the steps within 1e-9, at T = 1, 63, 64, 65, 300 with chunks of 64 and 16 (and T = 9 in
 * chunks of 1 and 100, T = 0), K != V, for Gated DeltaNet's inputs (unit keys, c = -a beta), strong
 * decays (log a = -8 a step) and none (DeltaNet); the op's backward against central differences of
 * its own forward; then the float32 op of the cpu (compiler/backend/cpu/chunkdelta_f32.c) against
 * the float64 one within 2e-4 of each quantity's largest magnitude, with strided inputs, at T = 0,
 * 1, 63, 64, 65, 2048, K = V = 64. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "ir.h"
#include "support.h"

/* One head's sequence, each per-step array with its own stride (element i of step t at
 * x[t * ld + i]), the gradients given (dout, dsT) those of a random linear functional. */
typedef struct Seq {
  int T, K, V;
  int ldq, ldk, ldv, ldla, ldc, ldo;
  double *q, *k, *v, *la, *c, *s0, *dout, *dsT;
} Seq;

enum { DECAY_RANDOM, DECAY_STRONG, DECAY_NONE };

static double *randn(Rng *r, size_t n, double scale) {
  double *x = xcalloc(n + 1, sizeof(double));
  for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(r);
  return x;
}

/* strides 0: dense (ld = the row's width) */
static Seq seq_new(int T, int K, int V, int decay, int pad, uint64_t seed) {
  Rng r;
  rng_seed(&r, seed, 41);
  Seq s = {T, K, V, K + pad, K + 2 * pad, V + pad, 1 + pad, 1 + 2 * pad, V + 3 * pad, 0, 0, 0, 0, 0, 0, 0, 0};
  s.q = randn(&r, (size_t)T * s.ldq, 1), s.k = randn(&r, (size_t)T * s.ldk, 1), s.v = randn(&r, (size_t)T * s.ldv, 1);
  s.la = xcalloc((size_t)T * s.ldla + 1, sizeof(double)), s.c = xcalloc((size_t)T * s.ldc + 1, sizeof(double));
  for (int t = 0; t < T; t++) { /* unit keys and queries (Gated DeltaNet's l2 norms), c = -a beta */
    double nq = 0, nk = 0;
    for (int i = 0; i < K; i++) nq += s.q[(size_t)t * s.ldq + i] * s.q[(size_t)t * s.ldq + i], nk += s.k[(size_t)t * s.ldk + i] * s.k[(size_t)t * s.ldk + i];
    for (int i = 0; i < K; i++) s.q[(size_t)t * s.ldq + i] /= sqrt(nq), s.k[(size_t)t * s.ldk + i] /= sqrt(nk);
    double la = decay == DECAY_STRONG ? -8 : decay == DECAY_NONE ? 0 : -rng_uniform(&r), beta = rng_uniform_open(&r);
    s.la[(size_t)t * s.ldla] = la, s.c[(size_t)t * s.ldc] = -exp(la) * beta;
  }
  s.s0 = randn(&r, (size_t)K * V, 1), s.dout = randn(&r, (size_t)T * s.ldo, 1), s.dsT = randn(&r, (size_t)K * V, 1);
  return s;
}

static void seq_free(Seq *s) {
  free(s->q), free(s->k), free(s->v), free(s->la), free(s->c), free(s->s0), free(s->dout), free(s->dsT);
}

static ChunkDelta op_of(const Seq *s, int L) {
  return (ChunkDelta){s->T, s->K, s->V, L, s->q, s->k, s->v, s->la, s->c, s->ldq, s->ldk, s->ldv, s->ldla, s->ldc};
}

#define SQ(t, i) s->q[(size_t)(t) * s->ldq + (i)]
#define SK(t, i) s->k[(size_t)(t) * s->ldk + (i)]
#define SV(t, i) s->v[(size_t)(t) * s->ldv + (i)]
#define SA(t) exp(s->la[(size_t)(t) * s->ldla])
#define SC(t) s->c[(size_t)(t) * s->ldc]

/* The recurrence step by step: o [T, V] dense, every state in st [T + 1, K, V], u [T, V]. */
static void steps_forward(const Seq *s, double *o, double *st, double *u) {
  int K = s->K, V = s->V;
  size_t kv = (size_t)K * V;
  memcpy(st, s->s0, sizeof(double) * kv);
  for (int t = 0; t < s->T; t++) {
    const double *p = st + kv * t;
    double *n = st + kv * (t + 1), *ut = u + (size_t)t * V;
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += p[k * V + x] * SK(t, k);
      ut[x] = SV(t, x) + SC(t) * a;
    }
    for (int k = 0; k < K; k++)
      for (int x = 0; x < V; x++) n[k * V + x] = SA(t) * p[k * V + x] + SK(t, k) * ut[x];
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += n[k * V + x] * SQ(t, k);
      o[(size_t)t * V + x] = a;
    }
  }
}

/* Backpropagation through the steps; the gradients dense ([T, K], [T, V], [T], [K, V]). */
static void steps_backward(const Seq *s, double *dq, double *dk, double *dv, double *dla, double *dc, double *ds0) {
  int K = s->K, V = s->V;
  size_t kv = (size_t)K * V;
  double *o = xmalloc(sizeof(double) * ((size_t)s->T * V + 1)), *st = xmalloc(sizeof(double) * kv * ((size_t)s->T + 1));
  double *u = xmalloc(sizeof(double) * ((size_t)s->T * V + 1)), *g = xmalloc(sizeof(double) * kv), *du = xmalloc(sizeof(double) * V);
  steps_forward(s, o, st, u);
  memcpy(g, s->dsT, sizeof(double) * kv);
  for (int t = s->T - 1; t >= 0; t--) {
    const double *n = st + kv * (t + 1), *p = st + kv * t, *ut = u + (size_t)t * V, *dot = s->dout + (size_t)t * s->ldo;
    for (int k = 0; k < K; k++) { /* o_t = S_t^T q_t */
      double a = 0;
      for (int x = 0; x < V; x++) a += n[k * V + x] * dot[x], g[k * V + x] += SQ(t, k) * dot[x];
      dq[(size_t)t * K + k] = a;
    }
    double da = 0; /* S_t = a_t S_{t-1} + k_t u_t^T */
    for (size_t e = 0; e < kv; e++) da += g[e] * p[e];
    dla[t] = da * SA(t);
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += g[k * V + x] * SK(t, k);
      du[x] = a;
    }
    for (int k = 0; k < K; k++) {
      double a = 0;
      for (int x = 0; x < V; x++) a += g[k * V + x] * ut[x];
      dk[(size_t)t * K + k] = a;
    }
    for (size_t e = 0; e < kv; e++) g[e] *= SA(t);
    /* u_t = v_t + c_t S_{t-1}^T k_t */
    double dct = 0;
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += p[k * V + x] * SK(t, k);
      dct += a * du[x], dv[(size_t)t * V + x] = du[x];
    }
    dc[t] = dct;
    for (int k = 0; k < K; k++) {
      double a = 0;
      for (int x = 0; x < V; x++) a += p[k * V + x] * du[x], g[k * V + x] += SC(t) * SK(t, k) * du[x];
      dk[(size_t)t * K + k] += SC(t) * a;
    }
  }
  memcpy(ds0, g, sizeof(double) * kv);
  free(o), free(st), free(u), free(g), free(du);
}

/* max |x - y| / max(1, max |y|) over n rows of w at strides ldx, ldy; infinite at a NaN */
static double relerr(const double *x, int ldx, const double *y, int ldy, int n, int w) {
  double m = 1, e = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < w; j++) {
      double a = x[(size_t)i * ldx + j], b = y[(size_t)i * ldy + j];
      if (isnan(a)) return INFINITY;
      m = fmax(m, fabs(b)), e = fmax(e, fabs(a - b));
    }
  return e / m;
}

static const char *names[6] = {"dq", "dk", "dv", "dla", "dc", "ds0"};

static void compare(int T, int L, int decay) {
  int K = 8, V = 5;
  Seq s = seq_new(T, K, V, decay, 0, (uint64_t)(T * 131 + L * 7 + decay));
  ChunkDelta d = op_of(&s, L);
  size_t kv = (size_t)K * V;
  double *o1 = xcalloc((size_t)T * V + 1, sizeof(double)), *o2 = xcalloc((size_t)T * V + 1, sizeof(double));
  double *st = xmalloc(sizeof(double) * kv * ((size_t)T + 1)), *u = xmalloc(sizeof(double) * ((size_t)T * V + 1));
  double *sT = xmalloc(sizeof(double) * kv);
  steps_forward(&s, o1, st, u);
  chunkdelta_forward(&d, s.s0, o2, V, sT);
  cr_assert_lt(relerr(o2, V, o1, V, T, V), 1e-10, "reads T=%d L=%d decay=%d", T, L, decay);
  cr_assert_lt(relerr(sT, V, st + kv * T, V, K, V), 1e-10, "final state T=%d L=%d decay=%d", T, L, decay);
  double *g1[6], *g2[6];
  int rows[6] = {T, T, T, T, T, K}, w[6] = {K, K, V, 1, 1, V};
  for (int i = 0; i < 6; i++)
    g1[i] = xcalloc((size_t)rows[i] * w[i] + 1, sizeof(double)), g2[i] = xcalloc((size_t)rows[i] * w[i] + 1, sizeof(double));
  steps_backward(&s, g1[0], g1[1], g1[2], g1[3], g1[4], g1[5]);
  chunkdelta_backward(&d, s.s0, s.dout, s.ldo, s.dsT, g2[0], g2[1], g2[2], g2[3], g2[4], g2[5]);
  for (int i = 0; i < 6; i++) {
    double e = relerr(g2[i], w[i], g1[i], w[i], rows[i], w[i]);
    cr_assert_lt(e, 1e-9, "%s T=%d L=%d decay=%d: %g", names[i], T, L, decay, e);
  }
  for (int i = 0; i < 6; i++) free(g1[i]), free(g2[i]);
  free(o1), free(o2), free(st), free(u), free(sT);
  seq_free(&s);
}

static const int Ts[] = {1, 63, 64, 65, 300};

Test(chunkdelta, matches_steps) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare(Ts[i], 64, DECAY_RANDOM), compare(Ts[i], 16, DECAY_RANDOM);
}

/* log a = -8 a step: e^{b} down to e^{-512} over a chunk of 64 (e^{-b} would overflow) */
Test(chunkdelta, strong_decays_match_steps) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare(Ts[i], 64, DECAY_STRONG), compare(Ts[i], 16, DECAY_STRONG);
}

/* a = 1: DeltaNet */
Test(chunkdelta, no_decay_matches_steps) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare(Ts[i], 64, DECAY_NONE), compare(Ts[i], 16, DECAY_NONE);
}

Test(chunkdelta, chunk_of_one_longer_than_the_sequence_and_empty) {
  compare(9, 1, DECAY_RANDOM), compare(9, 100, DECAY_RANDOM), compare(0, 16, DECAY_RANDOM);
}

/* the functional sum(o . dout) + sum(sT . dsT) of the op's own forward */
static double functional(const Seq *s, int L) {
  ChunkDelta d = op_of(s, L);
  size_t kv = (size_t)s->K * s->V;
  double *o = xcalloc((size_t)s->T * s->ldo + 1, sizeof(double)), *sT = xmalloc(sizeof(double) * kv), l = 0;
  chunkdelta_forward(&d, s->s0, o, s->ldo, sT);
  for (size_t i = 0; i < (size_t)s->T * s->ldo; i++) l += o[i] * s->dout[i];
  for (size_t i = 0; i < kv; i++) l += sT[i] * s->dsT[i];
  free(o), free(sT);
  return l;
}

/* The op's backward against central differences of its forward, for a sample of each input's
 * entries (strided inputs: the gradients come back with the inputs' strides). */
Test(chunkdelta, backward_against_finite_differences) {
  int T = 70, K = 8, V = 5, L = 16;
  Seq s = seq_new(T, K, V, DECAY_RANDOM, 2, 7);
  ChunkDelta d = op_of(&s, L);
  double *x[6] = {s.q, s.k, s.v, s.la, s.c, s.s0};
  size_t sz[6] = {(size_t)T * s.ldq, (size_t)T * s.ldk, (size_t)T * s.ldv, (size_t)T * s.ldla, (size_t)T * s.ldc, (size_t)K * V};
  int ld[6] = {s.ldq, s.ldk, s.ldv, s.ldla, s.ldc, V}, w[6] = {K, K, V, 1, 1, V};
  double *g[6];
  for (int i = 0; i < 6; i++) g[i] = xcalloc(sz[i] + 1, sizeof(double));
  chunkdelta_backward(&d, s.s0, s.dout, s.ldo, s.dsT, g[0], g[1], g[2], g[3], g[4], g[5]);
  Rng r;
  rng_seed(&r, 5, 1);
  for (int i = 0; i < 6; i++)
    for (int m = 0; m < 12; m++) {
      size_t rowsn = sz[i] / (size_t)ld[i];
      size_t j = (size_t)rng_below(&r, rowsn) * (size_t)ld[i] + (size_t)rng_below(&r, (uint64_t)w[i]);
      double keep = x[i][j], h = 1e-5;
      x[i][j] = keep + h;
      double lp = functional(&s, L);
      x[i][j] = keep - h;
      double lm = functional(&s, L);
      x[i][j] = keep;
      double fd = (lp - lm) / (2 * h);
      cr_assert_lt(fabs(fd - g[i][j]), 1e-6 * fmax(1, fabs(fd)), "%s element %zu: %.12g against %.12g", names[i], j, g[i][j], fd);
    }
  for (int i = 0; i < 6; i++) free(g[i]);
  seq_free(&s);
}

/* ---- the float32 op of the cpu back end (sgemm, strsm) against the float64 one ---- */

/* x rounded to float in place (both ops then see the same inputs), and its float copy */
static float *to_f32(double *x, size_t n) {
  float *f = xmalloc(sizeof(float) * n + 4);
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i], x[i] = f[i];
  return f;
}

/* max |x - y| over n rows of w at stride ld, over max(1e-30, max |y|) */
static double relerr_f32(const float *x, const double *y, int ld, int n, int w) {
  double m = 1e-30, e = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < w; j++) {
      double a = x[(size_t)i * ld + j], b = y[(size_t)i * ld + j];
      if (isnan(a)) return INFINITY;
      m = fmax(m, fabs(b)), e = fmax(e, fabs(a - b));
    }
  return e / m;
}

/* The float32 op within float32 bounds (2e-4 of each quantity's largest magnitude) of the float64
 * one, forward and backward, with every per-step array strided wider than its row. */
static void compare_f32(int T, int decay) {
  int K = 64, V = 64, L = 64;
  Seq s = seq_new(T, K, V, decay, 3, (uint64_t)(T * 17 + decay));
  size_t kv = (size_t)K * V, n[8] = {(size_t)T * s.ldq, (size_t)T * s.ldk, (size_t)T * s.ldv, (size_t)T * s.ldla,
                                      (size_t)T * s.ldc, kv, (size_t)T * s.ldo, kv};
  double *x[8] = {s.q, s.k, s.v, s.la, s.c, s.s0, s.dout, s.dsT};
  float *f[8];
  for (int i = 0; i < 8; i++) f[i] = to_f32(x[i], n[i]);
  ChunkDelta d = op_of(&s, L);
  ChunkDeltaF32 df = {T, K, V, L, f[0], f[1], f[2], f[3], f[4], s.ldq, s.ldk, s.ldv, s.ldla, s.ldc, NULL, NULL};
  double *o = xcalloc(n[6] + 1, sizeof(double)), *sT = xmalloc(sizeof(double) * kv);
  float *of = xcalloc(n[6] + 1, sizeof(float)), *sTf = xmalloc(sizeof(float) * kv);
  chunkdelta_forward(&d, s.s0, o, s.ldo, sT);
  cpu_chunkdelta_forward(&df, f[5], of, s.ldo, sTf);
  double eo = relerr_f32(of, o, s.ldo, T, V), es = relerr_f32(sTf, sT, V, K, V);
  cr_assert_lt(eo, 2e-4, "f32 reads T=%d decay=%d: %g", T, decay, eo);
  cr_assert_lt(es, 2e-4, "f32 final state T=%d decay=%d: %g", T, decay, es);
  double *g[6];
  float *gf[6];
  for (int i = 0; i < 6; i++) g[i] = xcalloc(n[i] + 1, sizeof(double)), gf[i] = xcalloc(n[i] + 1, sizeof(float));
  chunkdelta_backward(&d, s.s0, s.dout, s.ldo, s.dsT, g[0], g[1], g[2], g[3], g[4], g[5]);
  cpu_chunkdelta_backward(&df, f[5], f[6], s.ldo, f[7], gf[0], gf[1], gf[2], gf[3], gf[4], gf[5]);
  int ld[6] = {s.ldq, s.ldk, s.ldv, s.ldla, s.ldc, V}, w[6] = {K, K, V, 1, 1, V};
  for (int i = 0; i < 6; i++) {
    double e = relerr_f32(gf[i], g[i], ld[i], i < 5 ? T : K, w[i]);
    cr_assert_lt(e, 2e-4, "f32 %s T=%d decay=%d: %g", names[i], T, decay, e);
  }
  /* the forward's values kept for the backward (ChunkDeltaF32.keep), with a scratch kept across
     both: the same bits as computing them again */
  Scratch sc = {0};
  ChunkDeltaF32 dk = df;
  dk.keep = xmalloc(sizeof(float) * cpu_chunkdelta_keep_floats(T, K, V, L) + 1), dk.scratch = &sc;
  float *ok = xcalloc(n[6] + 1, sizeof(float)), *sTk = xmalloc(sizeof(float) * kv);
  cpu_chunkdelta_forward(&dk, f[5], ok, s.ldo, sTk);
  cr_assert(!memcmp(ok, of, sizeof(float) * n[6]) && !memcmp(sTk, sTf, sizeof(float) * kv), "kept forward T=%d decay=%d", T, decay);
  float *gk[6];
  for (int i = 0; i < 6; i++) gk[i] = xcalloc(n[i] + 1, sizeof(float));
  cpu_chunkdelta_backward(&dk, f[5], f[6], s.ldo, f[7], gk[0], gk[1], gk[2], gk[3], gk[4], gk[5]);
  for (int i = 0; i < 6; i++) {
    cr_assert(!memcmp(gk[i], gf[i], sizeof(float) * n[i]), "kept backward %s T=%d decay=%d", names[i], T, decay);
    free(gk[i]);
  }
  free(dk.keep), free(ok), free(sTk);
  scratch_free(&sc);
  for (int i = 0; i < 6; i++) free(g[i]), free(gf[i]);
  for (int i = 0; i < 8; i++) free(f[i]);
  free(o), free(sT), free(of), free(sTf);
  seq_free(&s);
}

Test(chunkdelta, f32_matches_f64) {
  static const int T32[] = {0, 1, 63, 64, 65, 2048};
  for (size_t i = 0; i < sizeof T32 / sizeof T32[0]; i++) compare_f32(T32[i], DECAY_RANDOM);
}

/* strong decays (exponents down to -512: below float's range, taken as 0) and none */
Test(chunkdelta, f32_strong_and_no_decays) { compare_f32(130, DECAY_STRONG), compare_f32(130, DECAY_NONE); }
