/* test_diag.c: the numbers of `cellc diag` that do not need a model (probes/diag_stats.c):
 * the robust log-log slope recovers a known slope on synthetic data (with noise and outliers,
 * and ignoring P outside its 1%..99% quantiles), histograms count every value once in 50 bins
 * of (0, 1), medians and quantiles, singular values through LAPACK, AI and CE; and the
 * interpreter's per-step state adjoints (STEPS_DSTATE) against finite differences of the loss. */
#include <math.h>

#include "diag_stats.h"
#include "harness.h"

/* S = e^a P^s with multiplicative noise, 5% wild outliers, and extreme P beyond the quantiles. */
Test(diag, slope_recovers_a_known_slope) {
  enum { N = 3000 };
  static double P[N], S[N];
  Rng r;
  rng_seed(&r, 11, 3);
  const double slopes[] = {0.5, 1.0, 2.3};
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < N; i++) {
      double lp = -12 * rng_uniform(&r);
      P[i] = exp(lp);
      S[i] = exp(0.7 + slopes[k] * lp + 0.05 * rng_normal(&r));
      if (i % 20 == 0) S[i] *= exp(6 * rng_uniform(&r)); /* outliers */
    }
    P[0] = 1e-300, S[0] = 1e300; /* beyond the 1% quantile: left out */
    double s, a;
    cr_assert_eq(diag_loglog_slope(P, S, N, &s, &a), 0);
    cr_expect(fabs(s - slopes[k]) < 0.02, "slope %g, wanted %g", s, slopes[k]);
    cr_expect(fabs(a - 0.7) < 0.2, "intercept %g", a);
  }
}

Test(diag, slope_needs_distinct_points) {
  double P[4] = {0.5, 0.5, 0.5, 0.5}, S[4] = {1, 2, 3, 4}, s, a;
  cr_expect_eq(diag_loglog_slope(P, S, 4, &s, &a), -1);
  double P2[2] = {0.1, 0.2}, S2[2] = {1, 2};
  cr_expect_eq(diag_loglog_slope(P2, S2, 2, &s, &a), -1);
}

Test(diag, histogram_counts_every_value_once) {
  int64_t h[DIAG_BINS] = {0};
  int n = 0;
  for (int i = 0; i <= 1000; i++, n++) diag_hist_add(h, i / 1000.0); /* 0 and 1 included */
  diag_hist_add(h, NAN);
  int64_t total = 0;
  for (int i = 0; i < DIAG_BINS; i++) total += h[i];
  cr_expect_eq(total, n);
  cr_expect_eq(h[0], 20);          /* 0, 0.001 .. 0.019 */
  cr_expect_eq(h[DIAG_BINS - 1], 21); /* 0.98 .. 1 */
  cr_expect_eq(h[25], 20);
}

Test(diag, median_and_quantile) {
  double v[5] = {5, 1, 4, 2, 3};
  cr_expect_eq(diag_median(v, 5), 3);
  double w[4] = {4, 1, 3, 2};
  cr_expect_eq(diag_median(w, 4), 2.5);
  cr_expect(isnan(diag_median(w, 0)));
  double s[5] = {0, 1, 2, 3, 4};
  cr_expect_float_eq(diag_quantile(s, 5, 0.5), 2, 1e-15);
  cr_expect_float_eq(diag_quantile(s, 5, 0.01), 0.04, 1e-15);
  cr_expect_float_eq(diag_quantile(s, 5, 1), 4, 1e-15);
}

/* A rotation times diag(3, 2, 1) times another rotation: singular values 3, 2, 1. */
Test(diag, singular_values_and_anisotropy) {
  double c = cos(0.3), s = sin(0.3), c2 = cos(1.1), s2 = sin(1.1);
  double R1[9] = {c, -s, 0, s, c, 0, 0, 0, 1}, D[3] = {3, 2, 1}, R2[9] = {1, 0, 0, 0, c2, -s2, 0, s2, c2}, M[9] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 3; k++) M[i * 3 + j] += R1[i * 3 + k] * D[k] * R2[k * 3 + j];
  double sv[3];
  cr_assert_eq(diag_singular_values(3, M, sv), 0);
  cr_expect_float_eq(sv[0], 3, 1e-12);
  cr_expect_float_eq(sv[1], 2, 1e-12);
  cr_expect_float_eq(sv[2], 1, 1e-12);
  double ai, ce;
  diag_anisotropy(sv, 3, 10, &ai, &ce); /* r capped at 3 */
  cr_expect_float_eq(ai, 3, 1e-12);
  cr_expect_float_eq(ce, 1, 1e-12);
  diag_anisotropy(sv, 3, 2, &ai, &ce);
  cr_expect_float_eq(ai, 1.5, 1e-12);
  cr_expect_float_eq(ce, 13.0 / 14.0, 1e-12);
}

/* STEPS_DSTATE: dL/dh_0 is grad_h0; dL/dh_T is dfinal plus the last output's gradient (elman
 * outputs h); for 0 < t < T, dL/dh_t is the gradient of the run of the steps t.. from h_t (its
 * grad_h0) plus dy_{t-1}, the gradient of the output that h_t is. */
Test(diag, interp_keeps_the_state_adjoint_of_every_step) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, "stdlib/elman.cell", NULL, "D=3,H=4", false, NULL);
  PipelineOptions o = {0};
  o.backend = backend_find("interp");
  char err[256];
  Compiled *ex = pipeline_compile(c, &o, err, sizeof err);
  cr_assert(ex, "%s", err);
  const Program *p = ex->p;
  int T = 6, B = 2, H = 4;
  HBufs *A = h_bufs_new(p, T, B, 5, 0.5, 0.5);
  Work *w = ex->be->work_new(ex);
  ex->be->forward(ex, w, &A->io);
  double *hs = xcalloc((size_t)(T + 1) * B * H, sizeof(double));
  cr_assert_eq(ex->be->read_steps(ex, w, STEPS_STATE, 0, hs), 0);
  ex->be->backward(ex, w, &A->io);
  double *dh = xcalloc((size_t)(T + 1) * B * H, sizeof(double));
  cr_assert_eq(ex->be->read_steps(ex, w, STEPS_DSTATE, 0, dh), 0);
  for (int j = 0; j < B * H; j++) {
    cr_expect_float_eq(dh[j], A->gh0[0][j], 1e-14);
    cr_expect_float_eq(dh[(size_t)T * B * H + j], A->dfinal[0][j] + A->dy[(size_t)(T - 1) * B * H + j], 1e-14);
  }
  for (int t = 1; t < T; t++) {
    HBufs *S = h_bufs_new(p, T - t, B, 5, 0.5, 0.5);
    memcpy(S->x, A->x + (size_t)t * B * 3, sizeof(double) * (size_t)(T - t) * B * 3);
    memcpy(S->dy, A->dy + (size_t)t * B * H, sizeof(double) * (size_t)(T - t) * B * H);
    memcpy(S->h0[0], hs + (size_t)t * B * H, sizeof(double) * B * H);
    memcpy(S->dfinal[0], A->dfinal[0], sizeof(double) * B * H);
    for (int i = 0; i < p->npparts; i++) memcpy(S->params[i], A->params[i], sizeof(double) * A->pn[i]);
    Work *ws = ex->be->work_new(ex);
    ex->be->forward(ex, ws, &S->io);
    ex->be->backward(ex, ws, &S->io);
    for (int j = 0; j < B * H; j++)
      cr_expect_float_eq(dh[(size_t)t * B * H + j], S->gh0[0][j] + A->dy[(size_t)(t - 1) * B * H + j], 1e-12, "t %d", t);
    ex->be->work_free(ws);
    h_bufs_free(S);
  }
  free(hs), free(dh);
  ex->be->work_free(w);
  h_bufs_free(A);
  pipeline_release(ex);
  cell_free(c);
  arena_free(&arena);
}
