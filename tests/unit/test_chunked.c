/* test_chunked.c: the chunkwise-parallel form. The chunk op (compiler/ir/chunkop.c) against the
 * recurrence run step by step: the reads and the final state of the forward, and every gradient of
 * the closed-form backward (dq, dk, dv, the log-decays' and the initial state's) against
 * backpropagation through the steps, within 1e-10, at T = 1, 63, 64, 65, 130 with chunks of 64 and
 * of 16, for a decay per key (GLA, HGRN2) and a scalar one (Mamba-2); the step-by-step backward
 * itself against finite differences. Then whole cells in --mode chunked (compiler/pipeline/
 * chunkrun.c) against --mode sequential on the float64 interpreter: outputs, final states, every
 * param gradient, dx and dh0 of gla, hgrn2, mamba2, a cell of two terms and two reads
 * (tests/cells/chunk_terms.cell) and the delta rule (gated_deltanet, tests/cells/delta_kv.cell:
 * compiler/ir/chunkdelta.h) within 1e-10 at the same T and chunks; on the cpu (float32, its sgemm
 * chunk ops) within 1e-4. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "harness.h"
#include "ir.h"
#include "plan.h"
#include "support.h"

typedef struct Seq {
  int T, K, V;
  bool per_key;
  double *q, *k, *v, *la, *s0, *dout, *dsT;
} Seq;

static double *randn(Rng *r, size_t n, double scale) {
  double *x = xmalloc(sizeof(double) * n + 1);
  for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(r);
  return x;
}

static Seq seq_new(int T, int K, int V, bool per_key, uint64_t seed) {
  Rng r;
  rng_seed(&r, seed, 31);
  Seq s = {T, K, V, per_key, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  size_t tk = (size_t)T * K + 1, tv = (size_t)T * V + 1, kv = (size_t)K * V;
  s.q = randn(&r, tk, 0.5), s.k = randn(&r, tk, 0.5), s.v = randn(&r, tv, 1);
  int w = per_key ? K : 1;
  s.la = xmalloc(sizeof(double) * ((size_t)T * w + 1));
  /* decays in (0.05, 1): log a in (-3, 0), some near 1, some small, as gates give */
  for (size_t i = 0; i < (size_t)T * w; i++) s.la[i] = -3 * rng_uniform(&r) * rng_uniform(&r);
  s.s0 = randn(&r, kv, 1), s.dout = randn(&r, tv, 1), s.dsT = randn(&r, kv, 1);
  return s;
}

static void seq_free(Seq *s) { free(s->q), free(s->k), free(s->v), free(s->la), free(s->s0), free(s->dout), free(s->dsT); }

static ChunkOp op_of(const Seq *s, int L) {
  return (ChunkOp){s->T, s->K, s->V, L, s->per_key, s->q, s->k, s->v, s->la, s->K, s->K, s->V, s->per_key ? s->K : 1};
}

static double dec(const Seq *s, int t, int k) { return exp(s->la[(size_t)t * (s->per_key ? s->K : 1) + (s->per_key ? k : 0)]); }

/* The recurrence step by step: o [T, V], sT [K, V]; every state kept in st [(T + 1), K, V]. */
static void steps_forward(const Seq *s, double *o, double *st) {
  int K = s->K, V = s->V;
  size_t kv = (size_t)K * V;
  memcpy(st, s->s0, sizeof(double) * kv);
  for (int t = 0; t < s->T; t++) {
    const double *p = st + kv * t;
    double *n = st + kv * (t + 1);
    for (int k = 0; k < K; k++)
      for (int x = 0; x < V; x++) n[k * V + x] = dec(s, t, k) * p[k * V + x] + s->k[t * K + k] * s->v[t * V + x];
    for (int x = 0; x < V; x++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += n[k * V + x] * s->q[t * K + k];
      o[t * V + x] = acc;
    }
  }
}

/* Backpropagation through the steps. */
static void steps_backward(const Seq *s, double *dq, double *dk, double *dv, double *dla, double *ds0) {
  int K = s->K, V = s->V, w = s->per_key ? K : 1;
  size_t kv = (size_t)K * V;
  double *o = xmalloc(sizeof(double) * ((size_t)s->T * V + 1)), *st = xmalloc(sizeof(double) * kv * ((size_t)s->T + 1));
  steps_forward(s, o, st);
  double *g = xmalloc(sizeof(double) * kv);
  memcpy(g, s->dsT, sizeof(double) * kv);
  for (int t = s->T - 1; t >= 0; t--) {
    const double *n = st + kv * (t + 1), *p = st + kv * t;
    for (int k = 0; k < K; k++)
      for (int x = 0; x < V; x++) g[k * V + x] += s->q[t * K + k] * s->dout[t * V + x];
    for (int k = 0; k < K; k++) {
      double a = 0, b = 0;
      for (int x = 0; x < V; x++) a += n[k * V + x] * s->dout[t * V + x], b += g[k * V + x] * s->v[t * V + x];
      dq[t * K + k] = a, dk[t * K + k] = b;
    }
    for (int x = 0; x < V; x++) {
      double a = 0;
      for (int k = 0; k < K; k++) a += g[k * V + x] * s->k[t * K + k];
      dv[t * V + x] = a;
    }
    for (int i = 0; i < w; i++) dla[t * w + i] = 0;
    for (int k = 0; k < K; k++) {
      double a = 0;
      for (int x = 0; x < V; x++) a += g[k * V + x] * p[k * V + x];
      dla[t * w + (s->per_key ? k : 0)] += a * dec(s, t, k); /* d/d log a = a d/da */
      for (int x = 0; x < V; x++) g[k * V + x] *= dec(s, t, k);
    }
  }
  memcpy(ds0, g, sizeof(double) * kv);
  free(o), free(st), free(g);
}

/* max |x - y| / max(1, max |y|); infinite where x holds a NaN (fmax would pass it over) */
static double relerr(const double *x, const double *y, size_t n) {
  double m = 1, e = 0;
  for (size_t i = 0; i < n; i++)
    if (isnan(x[i])) return INFINITY;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(y[i]));
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs(x[i] - y[i]));
  return e / m;
}

static void compare(int T, int L, bool per_key) {
  int K = 5, V = 3, w = per_key ? K : 1;
  Seq s = seq_new(T, K, V, per_key, (uint64_t)(T * 131 + L * 7 + per_key));
  ChunkOp c = op_of(&s, L);
  size_t tk = (size_t)T * K + 1, tv = (size_t)T * V + 1, kv = (size_t)K * V, tw = (size_t)T * w + 1;
  double *o1 = xcalloc(tv, sizeof(double)), *o2 = xcalloc(tv, sizeof(double));
  double *st = xmalloc(sizeof(double) * kv * ((size_t)T + 1)), *sT = xmalloc(sizeof(double) * kv);
  steps_forward(&s, o1, st);
  chunkop_forward(&c, s.s0, o2, V, sT);
  cr_assert_lt(relerr(o2, o1, (size_t)T * V), 1e-10, "reads T=%d L=%d per_key=%d", T, L, per_key);
  cr_assert_lt(relerr(sT, st + kv * T, kv), 1e-10, "final state T=%d L=%d per_key=%d", T, L, per_key);
  double *g1[5], *g2[5];
  size_t sz[5] = {tk, tk, tv, tw, kv};
  for (int i = 0; i < 5; i++) g1[i] = xcalloc(sz[i], sizeof(double)), g2[i] = xcalloc(sz[i], sizeof(double));
  steps_backward(&s, g1[0], g1[1], g1[2], g1[3], g1[4]);
  chunkop_backward(&c, s.s0, s.dout, V, s.dsT, g2[0], g2[1], g2[2], g2[3], g2[4]);
  const char *names[5] = {"dq", "dk", "dv", "dla", "ds0"};
  for (int i = 0; i < 5; i++)
    cr_assert_lt(relerr(g2[i], g1[i], sz[i] - (i < 4)), 1e-10, "%s T=%d L=%d per_key=%d: %g", names[i], T, L, per_key,
                 relerr(g2[i], g1[i], sz[i] - (i < 4)));
  for (int i = 0; i < 5; i++) free(g1[i]), free(g2[i]);
  free(o1), free(o2), free(st), free(sT);
  seq_free(&s);
}

static const int Ts[] = {1, 63, 64, 65, 130};

Test(chunked, per_key_matches_steps) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare(Ts[i], 64, true), compare(Ts[i], 16, true);
}

Test(chunked, scalar_matches_steps) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare(Ts[i], 64, false), compare(Ts[i], 16, false);
}

Test(chunked, chunk_of_one_and_whole) {
  compare(9, 1, true), compare(9, 9, false), compare(9, 100, true);
}

/* the loss sum(o * dout) + sum(sT * dsT), step by step */
static double loss(const Seq *s) {
  size_t kv = (size_t)s->K * s->V;
  double *o = xmalloc(sizeof(double) * ((size_t)s->T * s->V + 1)), *st = xmalloc(sizeof(double) * kv * ((size_t)s->T + 1));
  steps_forward(s, o, st);
  double l = 0;
  for (size_t i = 0; i < (size_t)s->T * s->V; i++) l += o[i] * s->dout[i];
  for (size_t i = 0; i < kv; i++) l += st[kv * s->T + i] * s->dsT[i];
  free(o), free(st);
  return l;
}

/* The reference backward against central differences of the loss, for every input. */
Test(chunked, steps_backward_against_finite_differences) {
  for (int pk = 0; pk < 2; pk++) {
    int T = 7, K = 3, V = 2, w = pk ? K : 1;
    Seq s = seq_new(T, K, V, pk, 99 + (uint64_t)pk);
    double *g[5];
    size_t sz[5] = {(size_t)T * K, (size_t)T * K, (size_t)T * V, (size_t)T * w, (size_t)K * V};
    for (int i = 0; i < 5; i++) g[i] = xcalloc(sz[i] + 1, sizeof(double));
    steps_backward(&s, g[0], g[1], g[2], g[3], g[4]);
    double *x[5] = {s.q, s.k, s.v, s.la, s.s0};
    for (int i = 0; i < 5; i++)
      for (size_t j = 0; j < sz[i]; j++) {
        double keep = x[i][j], h = 1e-6;
        x[i][j] = keep + h;
        double lp = loss(&s);
        x[i][j] = keep - h;
        double lm = loss(&s);
        x[i][j] = keep;
        double fd = (lp - lm) / (2 * h);
        cr_assert_lt(fabs(fd - g[i][j]), 1e-6 * fmax(1, fabs(fd)), "input %d element %zu: %g against %g", i, j, g[i][j], fd);
      }
    for (int i = 0; i < 5; i++) free(g[i]);
    seq_free(&s);
  }
}

/* ---- the float32 chunk op of the cpu back end (sgemm) against the float64 reference ---- */

static float *f32v(const double *x, size_t n) {
  float *f = xmalloc(sizeof(float) * n + 4);
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
  return f;
}

static double *f64v(const float *x, size_t n) {
  double *d = xmalloc(sizeof(double) * n + 8);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

/* K = 20, V = 12: blocks of 16 rows, the last one short */
static void compare_f32(int T, int L, bool per_key) {
  int K = 20, V = 12, w = per_key ? K : 1;
  Seq s = seq_new(T, K, V, per_key, (uint64_t)(T * 7 + L + per_key));
  ChunkOp c = op_of(&s, L);
  size_t tk = (size_t)T * K, tv = (size_t)T * V, kv = (size_t)K * V, tw = (size_t)T * w;
  float *q = f32v(s.q, tk), *k = f32v(s.k, tk), *v = f32v(s.v, tv), *la = f32v(s.la, tw), *s0 = f32v(s.s0, kv);
  float *dout = f32v(s.dout, tv), *dsT = f32v(s.dsT, kv);
  ChunkOpF32 c32 = {T, K, V, L, per_key, q, k, v, la, K, K, V, w, NULL, NULL};
  double *o = xcalloc(tv + 1, sizeof(double)), *sT = xcalloc(kv, sizeof(double));
  float *o32 = xcalloc(tv + 1, sizeof(float)), *sT32 = xcalloc(kv, sizeof(float));
  chunkop_forward(&c, s.s0, o, V, sT);
  cpu_chunkop_forward(&c32, s0, o32, V, sT32);
  double *x;
  cr_assert_lt(relerr(x = f64v(o32, tv), o, tv), 1e-4, "f32 reads T=%d L=%d per_key=%d", T, L, per_key);
  free(x);
  cr_assert_lt(relerr(x = f64v(sT32, kv), sT, kv), 1e-4, "f32 final state T=%d L=%d per_key=%d", T, L, per_key);
  free(x);
  size_t sz[5] = {tk, tk, tv, tw, kv};
  double *g[5];
  float *g32[5];
  for (int i = 0; i < 5; i++) g[i] = xcalloc(sz[i] + 1, sizeof(double)), g32[i] = xcalloc(sz[i] + 1, sizeof(float));
  chunkop_backward(&c, s.s0, s.dout, V, s.dsT, g[0], g[1], g[2], g[3], g[4]);
  cpu_chunkop_backward(&c32, s0, dout, V, dsT, g32[0], g32[1], g32[2], g32[3], g32[4]);
  const char *names[5] = {"dq", "dk", "dv", "dla", "ds0"};
  for (int i = 0; i < 5; i++) {
    double *gx = f64v(g32[i], sz[i]), e = relerr(gx, g[i], sz[i]);
    cr_assert_lt(e, 1e-4, "f32 %s T=%d L=%d per_key=%d: %g", names[i], T, L, per_key, e);
    free(gx);
  }
  /* the forward's boundary states kept (ChunkOpF32.bnd): the first s0, the last sT, and the
     backward that reads them within the same bounds */
  int nc = (T + L - 1) / L;
  c32.bnd = xmalloc(sizeof(float) * kv * (size_t)(nc + 1));
  cpu_chunkop_forward(&c32, s0, o32, V, sT32);
  cr_assert(!memcmp(c32.bnd, s0, sizeof(float) * kv) && !memcmp(c32.bnd + kv * (size_t)nc, sT32, sizeof(float) * kv),
            "kept boundary states T=%d L=%d per_key=%d", T, L, per_key);
  for (int i = 0; i < 5; i++) memset(g32[i], 0, sizeof(float) * sz[i]);
  cpu_chunkop_backward(&c32, s0, dout, V, dsT, g32[0], g32[1], g32[2], g32[3], g32[4]);
  for (int i = 0; i < 5; i++) {
    double *gx = f64v(g32[i], sz[i]), e = relerr(gx, g[i], sz[i]);
    cr_assert_lt(e, 1e-4, "f32 %s from kept states T=%d L=%d per_key=%d: %g", names[i], T, L, per_key, e);
    free(gx);
  }
  free(c32.bnd);
  for (int i = 0; i < 5; i++) free(g[i]), free(g32[i]);
  free(q), free(k), free(v), free(la), free(s0), free(dout), free(dsT), free(o), free(sT), free(o32), free(sT32);
  seq_free(&s);
}

Test(chunked, f32_per_key_as_f64) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare_f32(Ts[i], 64, true), compare_f32(Ts[i], 16, true);
  compare_f32(40, 7, true), compare_f32(40, 1, true);
}

Test(chunked, f32_scalar_as_f64) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) compare_f32(Ts[i], 64, false), compare_f32(Ts[i], 16, false);
}

/* The op on rows far apart (a caller's views of wide rows: it gathers each chunk's rows dense) gives
 * the same bits as on dense rows, and writes only its own values of the wide rows (the rest keeps
 * a sentinel); decays strong enough for sub-blocks that are not tight (pairwise) included. With a
 * scratch kept between calls (sc: the same one across the cases, whose sizes differ) the same
 * bits again. */
static void strided_as_dense(int T, int L, bool per_key, double strong, Scratch *sc) {
  int K = 20, V = 12, w = per_key ? K : 1, R = 2 * K + V + w + 3, ld = 3 * R, ldo = 2 * V + 5;
  Seq s = seq_new(T, K, V, per_key, (uint64_t)(T * 5 + L + per_key));
  for (size_t i = 0; i < (size_t)T * w; i++) s.la[i] *= strong;
  size_t tk = (size_t)T * K, tv = (size_t)T * V, kv = (size_t)K * V, tw = (size_t)T * w, big = (size_t)T * ld;
  float *q = f32v(s.q, tk), *k = f32v(s.k, tk), *v = f32v(s.v, tv), *la = f32v(s.la, tw), *s0 = f32v(s.s0, kv);
  float *dout = f32v(s.dout, tv), *dsT = f32v(s.dsT, kv);
  float *wide = xmalloc(sizeof(float) * big), *wdo = xmalloc(sizeof(float) * (size_t)T * ldo), *wo = xmalloc(sizeof(float) * (size_t)T * ldo);
  for (size_t i = 0; i < big; i++) wide[i] = 7;
  for (size_t i = 0; i < (size_t)T * ldo; i++) wdo[i] = 7, wo[i] = -7;
  float *r = wide + R; /* the op's values start one row in: the second of three */
  for (int t = 0; t < T; t++) {
    memcpy(r + (size_t)t * ld, q + (size_t)t * K, sizeof(float) * K), memcpy(r + (size_t)t * ld + K, k + (size_t)t * K, sizeof(float) * K);
    memcpy(r + (size_t)t * ld + 2 * K, v + (size_t)t * V, sizeof(float) * V);
    memcpy(r + (size_t)t * ld + 2 * K + V, la + (size_t)t * w, sizeof(float) * w);
    memcpy(wdo + (size_t)t * ldo + 1, dout + (size_t)t * V, sizeof(float) * V);
  }
  ChunkOpF32 cd = {T, K, V, L, per_key, q, k, v, la, K, K, V, w, NULL, NULL};
  ChunkOpF32 cw = {T, K, V, L, per_key, r, r + K, r + 2 * K, r + 2 * K + V, ld, ld, ld, ld, NULL, NULL};
  float *o = xcalloc(tv + 1, sizeof(float)), *sT = xcalloc(kv, sizeof(float)), *sTw = xcalloc(kv, sizeof(float));
  cpu_chunkop_forward(&cd, s0, o, V, sT);
  cpu_chunkop_forward(&cw, s0, wo + 1, ldo, sTw);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < ldo; j++) {
      float want = j >= 1 && j <= V ? o[(size_t)t * V + j - 1] : -7;
      cr_assert(wo[(size_t)t * ldo + j] == want, "reads T=%d L=%d per_key=%d t=%d j=%d", T, L, per_key, t, j);
    }
  cr_assert(!memcmp(sT, sTw, sizeof(float) * kv), "final state T=%d L=%d per_key=%d", T, L, per_key);
  float *g = xcalloc(2 * tk + tv + tw + 2 * kv + 1, sizeof(float)), *gw = xmalloc(sizeof(float) * big), *ds0w = xcalloc(kv, sizeof(float));
  float *dq = g, *dk = dq + tk, *dv = dk + tk, *dla = dv + tv, *ds0 = dla + tw;
  for (size_t i = 0; i < big; i++) gw[i] = 7;
  float *rg = gw + R;
  cpu_chunkop_backward(&cd, s0, dout, V, dsT, dq, dk, dv, dla, ds0);
  cpu_chunkop_backward(&cw, s0, wdo + 1, ldo, dsT, rg, rg + K, rg + 2 * K, rg + 2 * K + V, ds0w);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < ld; j++) {
      int c = j - R;
      float want = c < 0 || c >= 2 * K + V + w ? 7
                 : c < K ? dq[(size_t)t * K + c]
                 : c < 2 * K ? dk[(size_t)t * K + c - K]
                 : c < 2 * K + V ? dv[(size_t)t * V + c - 2 * K] : dla[(size_t)t * w + c - 2 * K - V];
      cr_assert(gw[(size_t)t * ld + j] == want, "gradients T=%d L=%d per_key=%d t=%d j=%d", T, L, per_key, t, j);
    }
  cr_assert(!memcmp(ds0, ds0w, sizeof(float) * kv), "ds0 T=%d L=%d per_key=%d", T, L, per_key);
  ChunkOpF32 cs = cd;
  cs.scratch = sc;
  float *os = xcalloc(tv + 1, sizeof(float)), *gs = xcalloc(2 * tk + tv + tw + 2 * kv + 1, sizeof(float));
  cpu_chunkop_forward(&cs, s0, os, V, gs + 2 * tk + tv + tw + kv);
  cr_assert(!memcmp(o, os, sizeof(float) * tv) && !memcmp(sT, gs + 2 * tk + tv + tw + kv, sizeof(float) * kv),
            "forward with a kept scratch T=%d L=%d per_key=%d", T, L, per_key);
  cpu_chunkop_backward(&cs, s0, dout, V, dsT, gs, gs + tk, gs + 2 * tk, gs + 2 * tk + tv, gs + 2 * tk + tv + tw);
  cr_assert(!memcmp(g, gs, sizeof(float) * (2 * tk + tv + tw + kv)), "backward with a kept scratch T=%d L=%d per_key=%d", T, L, per_key);
  free(os), free(gs);
  free(q), free(k), free(v), free(la), free(s0), free(dout), free(dsT), free(wide), free(wdo), free(wo), free(o), free(sT), free(sTw);
  free(g), free(gw), free(ds0w);
  seq_free(&s);
}

/* The chunk ops' scratch (base.h): 64-byte aligned takes; after a call, the next one's takes of
 * the same sizes land in one block as large as the call took, a larger call's surplus in
 * allocations of its own until the next begin; zeros zeroed after the block held other values. */
Test(chunked, scratch_keeps_one_block) {
  Scratch s = {0};
  static const size_t sz[] = {100, 5000, 0, 64};
  for (int call = 0; call < 4; call++) {
    scratch_begin(&s);
    for (int i = 0; i < 4; i++) {
      char *p = scratch_take(&s, sz[i]);
      cr_assert(((uintptr_t)p & 63) == 0, "call %d take %d aligned", call, i);
      memset(p, 0x5a, sz[i]);
      if (call) cr_assert(p >= s.mem && p + sz[i] <= s.mem + s.cap, "call %d take %d in the block", call, i);
    }
    cr_assert_eq(s.nextra, call ? 0 : 4, "call %d: allocations of their own", call);
    if (call == 2) { /* more than the block: its own, until the next begin makes the block larger */
      char *big = scratch_zeros(&s, 10000);
      cr_assert(s.nextra == 1 && (big < s.mem || big >= s.mem + s.cap));
      for (int i = 0; i < 10000; i++) cr_assert_eq(big[i], 0);
    }
  }
  cr_assert_eq(s.cap, 128 + 5056 + 64 + 64 + 10048, "the block after the larger call");
  scratch_begin(&s);
  unsigned char *z = scratch_zeros(&s, 5248);
  for (int i = 0; i < 5248; i++) cr_assert_eq(z[i], 0);
  scratch_free(&s);
  cr_assert(!s.mem && !s.extra && !s.cap);
}

Test(chunked, f32_strided_as_dense) {
  Scratch sc = {0};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
    for (int pk = 0; pk < 2; pk++) strided_as_dense(Ts[i], 64, pk, 1, &sc), strided_as_dense(Ts[i], 16, pk, 1, &sc);
  strided_as_dense(130, 64, true, 40, &sc), strided_as_dense(40, 7, true, 1, &sc);
  scratch_free(&sc);
}

/* Decays of exactly 0 (log -inf) and strong ones (log -60) before decays near 1: the chunk op
 * stays finite and equal to the steps (the reads, the final state, dq, dk, dv, dS0; d log a is
 * not defined at a = 0), float32 too. */
Test(chunked, zero_and_strong_decays) {
  for (int pk = 0; pk < 2; pk++) {
    int T = 70, K = 5, V = 3, L = 32, w = pk ? K : 1;
    Seq s = seq_new(T, K, V, pk, 7 + (uint64_t)pk);
    for (int t = 0; t < T; t++)
      for (int i = 0; i < w; i++) s.la[t * w + i] = t % 23 == 5 ? -INFINITY : t % 17 == 3 ? -60 : -0.01 * (i + 1);
    ChunkOp c = op_of(&s, L);
    size_t tk = (size_t)T * K, tv = (size_t)T * V, kv = (size_t)K * V, tw = (size_t)T * w;
    double *o1 = xcalloc(tv + 1, sizeof(double)), *o2 = xcalloc(tv + 1, sizeof(double));
    double *st = xmalloc(sizeof(double) * kv * ((size_t)T + 1)), *sT = xmalloc(sizeof(double) * kv);
    steps_forward(&s, o1, st);
    chunkop_forward(&c, s.s0, o2, V, sT);
    cr_assert_lt(relerr(o2, o1, tv), 1e-10, "reads per_key=%d", pk);
    cr_assert_lt(relerr(sT, st + kv * T, kv), 1e-10, "final state per_key=%d", pk);
    size_t sz[5] = {tk, tk, tv, tw, kv};
    double *g1[5], *g2[5];
    for (int i = 0; i < 5; i++) g1[i] = xcalloc(sz[i] + 1, sizeof(double)), g2[i] = xcalloc(sz[i] + 1, sizeof(double));
    steps_backward(&s, g1[0], g1[1], g1[2], g1[3], g1[4]);
    chunkop_backward(&c, s.s0, s.dout, V, s.dsT, g2[0], g2[1], g2[2], g2[3], g2[4]);
    for (int i = 0; i < 5; i++)
      if (i != 3) cr_assert_lt(relerr(g2[i], g1[i], sz[i]), 1e-10, "gradient %d per_key=%d", i, pk);
    float *q = f32v(s.q, tk), *k = f32v(s.k, tk), *v = f32v(s.v, tv), *la = f32v(s.la, tw), *s0 = f32v(s.s0, kv);
    ChunkOpF32 c32 = {T, K, V, L, pk, q, k, v, la, K, K, V, w, NULL, NULL};
    float *o32 = xcalloc(tv + 1, sizeof(float)), *sT32 = xcalloc(kv, sizeof(float));
    cpu_chunkop_forward(&c32, s0, o32, V, sT32);
    double *x = f64v(o32, tv);
    cr_assert_lt(relerr(x, o1, tv), 1e-4, "f32 reads per_key=%d", pk);
    free(x);
    for (int i = 0; i < 5; i++) free(g1[i]), free(g2[i]);
    free(o1), free(o2), free(st), free(sT), free(q), free(k), free(v), free(la), free(s0), free(o32), free(sT32);
    seq_free(&s);
  }
}

/* ---- whole cells: --mode chunked against --mode sequential on the interpreter ---- */

static void cell_case(const char *file, const char *dims, int T, int L) {
  Arena a = {0};
  Cell *cs = h_cell(&a, file, NULL, dims, false, "sequential");
  Cell *cc = h_cell(&a, file, NULL, dims, false, "chunked");
  cr_assert(cc->chunked, "%s: chunked", file);
  PipelineOptions o = {.backend = backend_find("interp"), .gates = true};
  char err[512] = "";
  Compiled *ref = pipeline_compile(cs, &o, err, sizeof err);
  cr_assert(ref, "%s", err);
  ChunkForm *f = chunkform_compile(cc, &o, L, err, sizeof err);
  cr_assert(f, "%s", err);
  cr_assert_eq(chunkform_length(f), L);
  int B = 2;
  uint64_t seed = (uint64_t)(T * 17 + L);
  HBufs *h1 = h_bufs_new(ref->p, T, B, seed, 0.5, 1), *h2 = h_bufs_new(ref->p, T, B, seed, 0.5, 1);
  pipeline_run_f64(ref, &h1->io);
  chunkform_run_f64(f, &h2->io);
  const char *what;
  double e = h_compare(h1, h2, ref->p, &what);
  cr_assert_lt(e, 1e-10, "%s T=%d L=%d: %s off by %g", file, T, L, what, e);
  /* the comparison sees something: the gradients are not all zero */
  double gsum = 0;
  for (int i = 0; i < h1->np; i++)
    for (size_t j = 0; j < h1->pn[i]; j++) gsum += fabs(h1->gparams[i][j]);
  cr_assert_gt(gsum, 0);
  h_bufs_free(h1), h_bufs_free(h2);
  chunkform_free(f);
  pipeline_release(ref);
  cell_free(cs), cell_free(cc);
  arena_free(&a);
}

static void cell_cases(const char *file, const char *dims) {
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) cell_case(file, dims, Ts[i], 64), cell_case(file, dims, Ts[i], 16);
}

Test(chunked, gla_as_sequential) { cell_cases("stdlib/gla.cell", "NH=2,K=3,V=4,D=5"); }
Test(chunked, hgrn2_as_sequential) { cell_cases("stdlib/hgrn2.cell", "NH=2,K=3,V=4,D=5"); }
Test(chunked, mamba2_as_sequential) { cell_cases("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5"); }
/* two terms and two reads: a step as three sub-steps of the chunk op (chunkrun.c) */
Test(chunked, terms_and_reads_as_sequential) { cell_cases("tests/cells/chunk_terms.cell", "NH=2,K=3,V=4,D=5"); }
/* the delta rule (chunkdelta.h): Gated DeltaNet ([V, K] heads, a decay), and DeltaNet keys first
 * with its projection on the left and no decay */
Test(chunked, gated_deltanet_as_sequential) { cell_cases("stdlib/gated_deltanet.cell", "NH=2,K=3,V=4,D=5"); }
Test(chunked, delta_kv_as_sequential) { cell_cases("tests/cells/delta_kv.cell", "NH=2,K=3,V=4,D=5"); }

/* The values both programs would compute are IN's alone: Mamba-2's u (the conv of its projection)
 * passes to OUT, whose conv histories then keep their values (IN's are the final ones); GLA's OUT
 * needs nothing of IN's (its gate is recomputed only when asked for). */
static int shared_of(const char *file, const char *dims, int *kept, int *nparts) {
  Arena a = {0};
  Cell *cc = h_cell(&a, file, NULL, dims, false, "chunked");
  Program *in = lower_cell_part(cc, true, true, LOWER_CHUNK_IN), *out = lower_cell_part(cc, true, true, LOWER_CHUNK_OUT);
  cr_assert_eq(in->chunk_shared, out->chunk_shared);
  *kept = 0, *nparts = out->nsparts;
  for (int q = 0; q < out->nsparts; q++) *kept += out->sparts[q].next == out->sparts[q].prev;
  int n = in->chunk_shared;
  program_free(in), program_free(out);
  cell_free(cc);
  arena_free(&a);
  return n;
}

Test(chunked, in_passes_shared_values) {
  int kept, nparts;
  cr_assert_eq(shared_of("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5", &kept, &nparts), 2 * 4);
  cr_assert_eq(nparts, 3);
  cr_assert_eq(kept, 3);
  cr_assert_eq(shared_of("stdlib/gla.cell", "NH=2,K=3,V=4,D=5", &kept, &nparts), 0);
  cr_assert_eq(kept, 0);
}

/* The log-decay IN passes to the chunk op is the decay's exp argument (gla's, mamba2's) or the
 * logsigmoid of its sigmoid's (hgrn2's), however many reshapes lie between: no log of an exp per
 * element (nor the exp, which nothing else reads). */
static int logs_in(const char *file, const char *dims) {
  Arena a = {0};
  Cell *cc = h_cell(&a, file, NULL, dims, false, "chunked");
  Program *in = lower_cell_part(cc, true, true, LOWER_CHUNK_IN);
  int n = 0;
  for (int i = 0; i < in->g.nnodes; i++) n += in->g.nodes[i].op == OP_LOG;
  program_free(in);
  cell_free(cc);
  arena_free(&a);
  return n;
}

Test(chunked, log_decay_without_log) {
  cr_assert_eq(logs_in("stdlib/gla.cell", "NH=2,K=3,V=4,D=5"), 0);
  cr_assert_eq(logs_in("stdlib/hgrn2.cell", "NH=2,K=3,V=4,D=5"), 0);
  cr_assert_eq(logs_in("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5"), 0);
}

/* OUT's histories that only IN reads keep their values (new = prev): the cpu back end's plan runs no
 * step for them (PlanOptions.still; without it, a copy per step each way), and its executor still
 * gives their final state h0 and their dL/dh0 dL/dfinal, read_steps h0 at every step; the rest of
 * OUT as the interpreter's. The CUDA back ends' executor (cellc_exec.h) likewise, on cuda-emu. */
static Compiled *out_program(Cell *c, const char *backend) {
  Program *p = lower_cell_part(c, true, true, LOWER_CHUNK_OUT);
  ad_differentiate(p);
  BackendOptions bo = {.scan = true, .f32 = true, .threads = 1};
  char err[512] = "";
  Compiled *cc = backend_find(backend)->compile(p, &bo, err, sizeof err);
  cr_assert(cc, "%s", err);
  return cc;
}

static void out_program_free(Compiled *c) {
  Program *p = c->p;
  c->be->free(c);
  program_free(p);
}

Test(chunked, out_still_histories) {
  Arena a = {0};
  Cell *cc = h_cell(&a, "stdlib/mamba2.cell", NULL, "NH=2,P=4,N=3,D=5", false, "chunked");
  Compiled *ref = out_program(cc, "interp"), *cpu = out_program(cc, "cpu"), *emu = out_program(cc, "cuda-emu");
  Program *p = cpu->p;
  for (int still = 0; still < 2; still++) {
    Plan *pl = plan_new(p, &(PlanOptions){.scan = true, .still = still});
    cr_assert_eq(pl->fwd_step.n, still ? 0 : 3, "still=%d", still);
    cr_assert_eq(pl->bwd_step.n, still ? 0 : 3, "still=%d", still);
    for (int q = 0; q < p->nsparts; q++) cr_assert_eq(pl->still[q], still);
    plan_free(pl);
  }
  for (int T = 1; T <= 9; T += 8)
    for (int be = 0; be < 2; be++) {
      Compiled *under = be ? emu : cpu;
      HBufs *h1 = h_bufs_new(p, T, 3, 7 + (uint64_t)T, 0.5, 1), *h2 = h_bufs_new(p, T, 3, 7 + (uint64_t)T, 0.5, 1);
      pipeline_run_f64(ref, &h1->io);
      pipeline_run_f64(under, &h2->io);
      const char *what;
      double e = h_compare(h1, h2, p, &what);
      cr_expect_lt(e, 1e-4, "%s T=%d: %s off by %g", under->be->name, T, what, e);
      for (int q = 0; q < p->nsparts; q++)
        for (size_t j = 0; j < h2->sn[q]; j++) {
          cr_assert_eq(h2->final[q][j], (double)(float)h2->h0[q][j], "%s T=%d part %d", under->be->name, T, q);
          cr_assert_eq(h2->gh0[q][j], (double)(float)h2->dfinal[q][j], "%s T=%d part %d", under->be->name, T, q);
        }
      h_bufs_free(h1), h_bufs_free(h2);
    }
  /* every step's value, as read_steps gives it (cellc's probes): h0 */
  int T = 5, B = 2;
  HBufs *h = h_bufs_new(p, T, B, 11, 0.5, 1);
  size_t rows = (size_t)T * B;
  float *xf = xcalloc(rows * (size_t)p->x_size + 1, sizeof(float)), *yf = xcalloc(rows * (size_t)p->output_size + 1, sizeof(float));
  float **pf = xcalloc((size_t)h->np + 1, sizeof(float *)), **hf = xcalloc((size_t)h->ns + 1, sizeof(float *));
  float **ff = xcalloc((size_t)h->ns + 1, sizeof(float *));
  for (size_t i = 0; i < rows * (size_t)p->x_size; i++) xf[i] = (float)h->x[i];
  for (int i = 0; i < h->np; i++) {
    pf[i] = xcalloc(h->pn[i] + 1, sizeof(float));
    for (size_t j = 0; j < h->pn[i]; j++) pf[i][j] = (float)h->params[i][j];
  }
  for (int q = 0; q < h->ns; q++) {
    hf[q] = xcalloc(h->sn[q] + 1, sizeof(float)), ff[q] = xcalloc(h->sn[q] + 1, sizeof(float));
    for (size_t j = 0; j < h->sn[q]; j++) hf[q][j] = (float)h->h0[q][j];
  }
  SeqIO s = {.T = T, .B = B, .dtype = DT_F32, .x = xf, .params = (const void **)pf, .y = yf, .h0 = (const void **)hf,
             .final = (void **)ff};
  Work *w = cpu->be->work_new(cpu);
  cpu->be->forward(cpu, w, &s);
  for (int q = 0; q < h->ns; q++) {
    float *st = xcalloc(((size_t)T + 1) * h->sn[q] + 1, sizeof(float));
    cr_assert_eq(cpu->be->read_steps(cpu, w, STEPS_STATE, q, st), 0);
    for (size_t j = 0; j < ((size_t)T + 1) * h->sn[q]; j++) cr_assert_eq(st[j], hf[q][j % h->sn[q]], "part %d value %zu", q, j);
    free(st), free(hf[q]), free(ff[q]);
  }
  cpu->be->work_free(w);
  for (int i = 0; i < h->np; i++) free(pf[i]);
  free(pf), free(hf), free(ff), free(xf), free(yf);
  h_bufs_free(h);
  out_program_free(ref), out_program_free(cpu), out_program_free(emu);
  cell_free(cc);
  arena_free(&a);
}

/* The cpu back end (float32) in chunked mode against the interpreter's sequential mode (float64):
 * every output and gradient within 1e-4 relative (test_backends' bound), one compilation per chunk
 * length for every T. */
static void cpu_cases_at(const char *file, const char *dims, int threads, const int *Tl, size_t nT, double *worst) {
  Arena a = {0};
  Cell *cs = h_cell(&a, file, NULL, dims, false, "sequential");
  Cell *cc = h_cell(&a, file, NULL, dims, false, "chunked");
  PipelineOptions oi = {.backend = backend_find("interp"), .gates = true};
  PipelineOptions oc = {.backend = backend_find("cpu"), .gates = true, .threads = threads};
  char err[512] = "";
  Compiled *ref = pipeline_compile(cs, &oi, err, sizeof err);
  cr_assert(ref, "%s", err);
  int Ls[2] = {64, 16};
  for (int li = 0; li < 2; li++) {
    ChunkForm *f = chunkform_compile(cc, &oc, Ls[li], err, sizeof err);
    cr_assert(f, "%s", err);
    for (size_t i = 0; i < nT; i++) {
      int T = Tl[i], B = 2;
      uint64_t seed = (uint64_t)(T * 19 + Ls[li]);
      HBufs *h1 = h_bufs_new(ref->p, T, B, seed, 0.5, 1), *h2 = h_bufs_new(ref->p, T, B, seed, 0.5, 1);
      pipeline_run_f64(ref, &h1->io);
      chunkform_run_f64(f, &h2->io);
      const char *what;
      double e = h_compare(h1, h2, ref->p, &what);
      cr_expect_lt(e, 1e-4, "%s on cpu T=%d L=%d: %s off by %g", file, T, Ls[li], what, e);
      if (worst && e > *worst) *worst = e;
      h_bufs_free(h1), h_bufs_free(h2);
    }
    chunkform_free(f);
  }
  pipeline_release(ref);
  cell_free(cs), cell_free(cc);
  arena_free(&a);
}

static void cpu_cases(const char *file, const char *dims, int threads) {
  cpu_cases_at(file, dims, threads, Ts, sizeof Ts / sizeof Ts[0], NULL);
}

/* (the heads and batch rows of the chunk op on 3 threads for gla) */
Test(chunked, cpu_gla) { cpu_cases("stdlib/gla.cell", "NH=2,K=3,V=4,D=5", 3); }
Test(chunked, cpu_hgrn2) { cpu_cases("stdlib/hgrn2.cell", "NH=2,K=3,V=4,D=5", 1); }
Test(chunked, cpu_mamba2) { cpu_cases("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5", 1); }
Test(chunked, cpu_terms_and_reads) { cpu_cases("tests/cells/chunk_terms.cell", "NH=2,K=3,V=4,D=5", 2); }
Test(chunked, cpu_gated_deltanet) { cpu_cases("stdlib/gated_deltanet.cell", "NH=2,K=3,V=4,D=5", 2); }
Test(chunked, cpu_delta_kv) { cpu_cases("tests/cells/delta_kv.cell", "NH=2,K=3,V=4,D=5", 1); }

/* The issue's lengths, T = 1, 63, 64, 65 and 2048 (32 chunks of 64, 128 of 16), at keys and values
 * of 16 (the chunk op's 16-row sub-blocks whole): the float32 form against the float64 sequential
 * form within 1e-4 of each quantity's largest magnitude (the float32 back ends' bound, as
 * test_backends). A read sums at most L + K products of values of the order of one and the decays,
 * all at most 1, keep the state's error from growing over the chunks: the outputs and states
 * differ by under 1e-6; the largest differences, 1e-6 to 3e-5, are parameters' gradients, sums
 * over all the tokens with cancellation. */
Test(chunked, cpu_issue_lengths) {
  static const int Tl[] = {1, 63, 64, 65, 2048};
  double worst = 0;
  cpu_cases_at("stdlib/gla.cell", "NH=2,K=16,V=16,D=8", 2, Tl, 5, &worst);
  cpu_cases_at("stdlib/hgrn2.cell", "NH=2,K=16,V=16,D=8", 2, Tl, 5, &worst);
  cpu_cases_at("stdlib/mamba2.cell", "NH=2,P=16,N=16,D=8", 2, Tl, 5, &worst);
  cpu_cases_at("stdlib/gated_deltanet.cell", "NH=2,K=16,V=16,D=8", 2, Tl, 5, &worst);
  cr_log_info("cpu_issue_lengths: worst relative difference %g", worst);
  cr_assert_gt(worst, 0); /* the float32 form is compared, not the float64 one */
}
