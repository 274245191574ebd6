/* test_init.c: the initializers of spec sections 6 and 9: their table, the statistics and bounds
 * of each on large samples, orthogonality, determinism, the exact values of the deterministic
 * ones, inv_softplus's precision, the initializer text, and every rejected argument. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "support.h"
#include "init.h"

#define N 100000

static char err[256];

/* Fills a param with a fresh rng from (seed, 0); returns init_fill's result. */
static int fill(const char *name, const double *args, int nargs, int rank, const int *shape, bool cplx, uint64_t seed,
                double *out) {
  Rng r;
  rng_seed(&r, seed, 0);
  err[0] = 0;
  return init_fill(name, args, nargs, NULL, rank, shape, cplx, 16, &r, out, err, sizeof err);
}

static double mean_of(const double *v, size_t n, size_t stride) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i * stride];
  return s / (double)n;
}

static double min_of(const double *v, size_t n) {
  double m = INFINITY;
  for (size_t i = 0; i < n; i++) m = fmin(m, v[i]);
  return m;
}

static double max_of(const double *v, size_t n) {
  double m = -INFINITY;
  for (size_t i = 0; i < n; i++) m = fmax(m, v[i]);
  return m;
}

/* Expects init_fill to reject the arguments with a message containing `want`. */
static void expect_error(const char *name, const double *args, int nargs, const double *ref, int rank, const int *shape,
                         int H, const char *want) {
  double out[64];
  Rng r;
  rng_seed(&r, 1, 0);
  err[0] = 0;
  cr_assert_eq(init_fill(name, args, nargs, ref, rank, shape, false, H, &r, out, err, sizeof err), -1,
               "%s accepted", name);
  cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

Test(init, table_knows_every_initializer) {
  const char *const *names;
  int n = init_names(&names);
  cr_assert_eq(n, 21);
  for (int i = 0; i < n; i++) {
    const InitDef *d = init_find(names[i]);
    cr_assert_not_null(d, "%s", names[i]);
    cr_assert_str_eq(d->name, names[i]);
  }
  cr_assert_null(init_find("glorot_uniform"));
}

Test(init, table_argument_counts) {
  cr_assert_eq(init_find("zeros")->max_args, 0);
  cr_assert_eq(init_find("const")->min_args, 1);
  cr_assert_eq(init_find("uniform")->min_args, 2);
  cr_assert_eq(init_find("normal")->max_args, 2);
  cr_assert_eq(init_find("chrono")->min_args, 1);
  cr_assert_eq(init_find("gumbel")->min_args, 2);
  cr_assert_eq(init_find("lru_nu")->min_args, 2);
  cr_assert_eq(init_find("lru_theta")->max_args, 1);
  cr_assert(init_find("lru_gamma")->ref_param);
  cr_assert_not(init_find("ugi")->ref_param);
  cr_assert_eq(init_find("arange")->min_args, 2);
  cr_assert_eq(init_find("arange")->max_args, 2);
  cr_assert_eq(init_find("s4d_real")->max_args, 0);
  cr_assert_eq(init_find("log_uniform")->min_args, 2);
  cr_assert_eq(init_find("inv_softplus")->min_args, 1);
  cr_assert_eq(init_find("inv_softplus")->max_args, 1);
  cr_assert(init_find("inv_softplus")->wraps);
  const char *const *names;
  int n = init_names(&names);
  for (int i = 0; i < n; i++) cr_assert_eq(init_find(names[i])->wraps, !strcmp(names[i], "inv_softplus"), "%s", names[i]);
}

Test(init, constants_real_and_complex) {
  double out[12];
  cr_assert_eq(fill("const", (double[]){2.5}, 1, 1, (int[]){3}, true, 1, out), 0, "%s", err);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(out[2 * i], 2.5);
    cr_assert_eq(out[2 * i + 1], 0.0);
  }
  cr_assert_eq(fill("ones", NULL, 0, 2, (int[]){2, 3}, false, 1, out), 0);
  for (int i = 0; i < 6; i++) cr_assert_eq(out[i], 1.0);
  cr_assert_eq(fill("zeros", NULL, 0, 0, NULL, false, 1, out), 0);
  cr_assert_eq(out[0], 0.0);
}

Test(init, uniform_bounds_and_mean) {
  double *v = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("uniform", (double[]){-1, 3}, 2, 1, (int[]){N}, false, 3, v), 0, "%s", err);
  cr_assert_geq(min_of(v, N), -1);
  cr_assert_lt(max_of(v, N), 3);
  cr_assert_lt(min_of(v, N), -0.99);
  cr_assert_gt(max_of(v, N), 2.99);
  cr_assert_lt(fabs(mean_of(v, N, 1) - 1.0), 5 * 4 / sqrt(12.0 * N));
  free(v);
}

Test(init, normal_mean_and_std) {
  double *v = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("normal", (double[]){0.5, 2}, 2, 1, (int[]){N}, false, 4, v), 0, "%s", err);
  double m = mean_of(v, N, 1), var = 0;
  for (int i = 0; i < N; i++) var += (v[i] - m) * (v[i] - m);
  var /= N - 1;
  cr_assert_lt(fabs(m - 0.5), 5 * 2 / sqrt(N));
  cr_assert_lt(fabs(sqrt(var) - 2), 0.03);
  free(v);
}

Test(init, complex_uniform_draws_re_then_im) {
  double c[2 * 50], r[2 * 50];
  cr_assert_eq(fill("uniform", (double[]){0, 1}, 2, 2, (int[]){5, 10}, true, 9, c), 0);
  cr_assert_eq(fill("uniform", (double[]){0, 1}, 2, 1, (int[]){100}, false, 9, r), 0);
  cr_assert_eq(memcmp(c, r, sizeof c), 0);
}

Test(init, complex_normal_has_random_imaginary_parts) {
  double *v = xmalloc(sizeof(double) * 2 * N);
  cr_assert_eq(fill("normal", (double[]){0, 1}, 2, 1, (int[]){N}, true, 5, v), 0);
  double re2 = 0, im2 = 0;
  for (int i = 0; i < N; i++) re2 += v[2 * i] * v[2 * i], im2 += v[2 * i + 1] * v[2 * i + 1];
  cr_assert_lt(fabs(re2 / N - 1), 0.03);
  cr_assert_lt(fabs(im2 / N - 1), 0.03);
  free(v);
}

Test(init, draws_row_major) {
  double m[12], v[12];
  cr_assert_eq(fill("glorot", NULL, 0, 2, (int[]){3, 4}, false, 2, m), 0);
  cr_assert_eq(fill("uniform", (double[]){-sqrt(6.0 / 7), sqrt(6.0 / 7)}, 2, 1, (int[]){12}, false, 2, v), 0);
  for (int i = 0; i < 12; i++) cr_assert_float_eq(m[i], v[i], 1e-12);
}

Test(init, glorot_matrix_bound) {
  int O = 200, I = 500;
  double *v = xmalloc(sizeof(double) * (size_t)(O * I));
  cr_assert_eq(fill("glorot", NULL, 0, 2, (int[]){O, I}, false, 6, v), 0);
  double a = sqrt(6.0 / (O + I));
  cr_assert_leq(max_of(v, (size_t)(O * I)), a);
  cr_assert_geq(min_of(v, (size_t)(O * I)), -a);
  cr_assert_gt(max_of(v, (size_t)(O * I)), 0.99 * a);
  cr_assert_lt(fabs(mean_of(v, (size_t)(O * I), 1)), 0.01 * a);
  free(v);
}

Test(init, glorot_vector_and_scalar_bounds) {
  double *v = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("glorot", NULL, 0, 1, (int[]){N}, false, 7, v), 0);
  double a = sqrt(6.0 / (2.0 * N));
  cr_assert_leq(max_of(v, N), a);
  cr_assert_gt(max_of(v, N), 0.99 * a);
  double s[1];
  for (uint64_t seed = 0; seed < 200; seed++) {
    cr_assert_eq(fill("glorot", NULL, 0, 0, NULL, false, seed, s), 0);
    cr_assert_leq(fabs(s[0]), sqrt(3.0));
  }
  free(v);
}

Test(init, standard_bound_uses_H) {
  double *v = xmalloc(sizeof(double) * N);
  Rng r;
  rng_seed(&r, 8, 0);
  cr_assert_eq(init_fill("standard", NULL, 0, NULL, 2, (int[]){100, 1000}, false, 64, &r, v, err, sizeof err), 0);
  cr_assert_leq(max_of(v, N), 0.125);
  cr_assert_geq(min_of(v, N), -0.125);
  cr_assert_gt(max_of(v, N), 0.124);
  cr_assert_lt(min_of(v, N), -0.124);
  free(v);
}

Test(init, chrono_range) {
  double *v = xmalloc(sizeof(double) * N);
  double tmax = 100;
  cr_assert_eq(fill("chrono", (double[]){tmax}, 1, 1, (int[]){N}, false, 10, v), 0);
  cr_assert_geq(min_of(v, N), 0.0);
  cr_assert_lt(max_of(v, N), log(tmax - 1));
  cr_assert_gt(max_of(v, N), log(tmax - 1.1));
  double e = 0;
  for (int i = 0; i < N; i++) e += exp(v[i]);
  cr_assert_lt(fabs(e / N - tmax / 2), 0.01 * tmax); /* exp(v) ~ U(1, tmax - 1), mean tmax / 2 */
  free(v);
}

Test(init, ugi_range_and_symmetry) {
  int d = 10;
  double *v = xmalloc(sizeof(double) * (size_t)d * 10000);
  cr_assert_eq(fill("ugi", NULL, 0, 2, (int[]){d, 10000}, false, 11, v), 0);
  double bound = log((1 - 1.0 / d) / (1.0 / d)); /* logit(1 - 1/d) = log(9) */
  size_t n = (size_t)d * 10000;
  cr_assert_geq(min_of(v, n), -bound - 1e-12);
  cr_assert_leq(max_of(v, n), bound);
  cr_assert_lt(min_of(v, n), -bound + 0.01);
  cr_assert_lt(fabs(mean_of(v, n, 1)), 0.02);
  free(v);
}

Test(init, ugi_of_size_two_is_zero) {
  double v[2];
  cr_assert_eq(fill("ugi", NULL, 0, 1, (int[]){2}, false, 1, v), 0);
  cr_assert_eq(v[0], 0.0);
  cr_assert_eq(v[1], 0.0);
}

Test(init, gumbel_0_1_equals_ugi) {
  double g[640], u[640];
  cr_assert_eq(fill("gumbel", (double[]){0, 1}, 2, 2, (int[]){64, 10}, false, 12, g), 0, "%s", err);
  cr_assert_eq(fill("ugi", NULL, 0, 2, (int[]){64, 10}, false, 12, u), 0);
  cr_assert_eq(memcmp(g, u, sizeof g), 0);
}

Test(init, gumbel_shifts_and_scales_ugi) {
  double g[128], u[128];
  cr_assert_eq(fill("gumbel", (double[]){1.5, 0.5}, 2, 1, (int[]){128}, false, 13, g), 0);
  cr_assert_eq(fill("ugi", NULL, 0, 1, (int[]){128}, false, 13, u), 0);
  for (int i = 0; i < 128; i++) cr_assert_float_eq(g[i], (1.5 + u[i]) / 0.5, 1e-12);
}

Test(init, lru_nu_magnitudes_lie_in_the_ring) {
  double *v = xmalloc(sizeof(double) * N);
  double rmin = 0.4, rmax = 0.99;
  cr_assert_eq(fill("lru_nu", (double[]){rmin, rmax}, 2, 1, (int[]){N}, false, 14, v), 0);
  double m2 = 0, lo = INFINITY, hi = 0;
  for (int i = 0; i < N; i++) {
    double r = exp(-exp(v[i])); /* |lambda| */
    lo = fmin(lo, r), hi = fmax(hi, r);
    m2 += r * r;
  }
  cr_assert_geq(lo, rmin - 1e-12);
  cr_assert_leq(hi, rmax + 1e-12);
  cr_assert_lt(fabs(m2 / N - (rmin * rmin + rmax * rmax) / 2), 0.005); /* |lambda|^2 ~ U(rmin^2, rmax^2) */
  free(v);
}

Test(init, lru_nu_with_r_max_one_stays_finite) {
  double *v = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("lru_nu", (double[]){0, 1}, 2, 1, (int[]){N}, false, 15, v), 0);
  for (int i = 0; i < N; i++) cr_assert(isfinite(v[i]));
  free(v);
}

Test(init, lru_theta_range) {
  double *v = xmalloc(sizeof(double) * N);
  double mp = 2 * M_PI;
  cr_assert_eq(fill("lru_theta", (double[]){mp}, 1, 1, (int[]){N}, false, 16, v), 0);
  double s = 0;
  for (int i = 0; i < N; i++) {
    double t = exp(v[i]);
    cr_assert(t > 0 && t < mp);
    s += t;
  }
  cr_assert_lt(fabs(s / N - mp / 2), 0.02 * mp);
  free(v);
}

Test(init, lru_gamma_formula_and_no_draws) {
  double nu_log[4] = {-3, -1, 0, 1.5}, out[4];
  Rng r, before;
  rng_seed(&r, 17, 0);
  before = r;
  cr_assert_eq(init_fill("lru_gamma", NULL, 0, nu_log, 1, (int[]){4}, false, 8, &r, out, err, sizeof err), 0, "%s", err);
  for (int i = 0; i < 4; i++) {
    double lambda = exp(-exp(nu_log[i]));
    cr_assert_float_eq(out[i], 0.5 * log(1 - lambda * lambda), 1e-12);
  }
  cr_assert_eq(memcmp(&r, &before, sizeof r), 0);
}

/* max |A B^T - I| over an n x n product, for rows of a (n x k) against rows of b. */
static double gram_error(const double *a, int rows, int cols, bool by_rows) {
  int n = by_rows ? rows : cols;
  double worst = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      if (by_rows)
        for (int k = 0; k < cols; k++) s += a[i * cols + k] * a[j * cols + k];
      else
        for (int k = 0; k < rows; k++) s += a[k * cols + i] * a[k * cols + j];
      worst = fmax(worst, fabs(s - (i == j)));
    }
  return worst;
}

Test(init, orthogonal_square) {
  int n = 64;
  double *w = xmalloc(sizeof(double) * (size_t)(n * n));
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){n, n}, false, 18, w), 0, "%s", err);
  cr_assert_lt(gram_error(w, n, n, true), 1e-9);
  cr_assert_lt(gram_error(w, n, n, false), 1e-9);
  free(w);
}

Test(init, orthogonal_wide_has_orthonormal_rows) {
  int O = 20, I = 50;
  double *w = xmalloc(sizeof(double) * (size_t)(O * I));
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){O, I}, false, 19, w), 0);
  cr_assert_lt(gram_error(w, O, I, true), 1e-9);
  free(w);
}

Test(init, orthogonal_tall_has_orthonormal_columns) {
  int O = 50, I = 20;
  double *w = xmalloc(sizeof(double) * (size_t)(O * I));
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){O, I}, false, 20, w), 0);
  cr_assert_lt(gram_error(w, O, I, false), 1e-9);
  free(w);
}

/* PyTorch's convention: Q from the QR of the drawn Gaussian G with diag(R) > 0, so
 * R = Q^T G is upper triangular with a positive diagonal. */
Test(init, orthogonal_follows_the_positive_diagonal_convention) {
  int n = 16;
  double w[16 * 16], g[16 * 16];
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){n, n}, false, 21, w), 0);
  Rng r;
  rng_seed(&r, 21, 0);
  for (int i = 0; i < n * n; i++) g[i] = rng_normal(&r);
  for (int i = 0; i < n; i++)
    for (int j = 0; j <= i; j++) {
      double s = 0;
      for (int k = 0; k < n; k++) s += w[k * n + i] * g[k * n + j];
      if (i == j) cr_assert_gt(s, 0, "R[%d][%d] = %g", i, j, s);
      else cr_assert_lt(fabs(s), 1e-9, "R[%d][%d] = %g below the diagonal", i, j, s);
    }
}

Test(init, orthogonal_complex_is_real_orthogonal) {
  int n = 8;
  double c[2 * 64], w[64];
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){n, n}, true, 22, c), 0);
  for (int i = 0; i < 64; i++) {
    cr_assert_eq(c[2 * i + 1], 0.0);
    w[i] = c[2 * i];
  }
  cr_assert_lt(gram_error(w, n, n, true), 1e-9);
}

Test(init, same_seed_same_values_other_seed_other_values) {
  double a[100], b[100], c[100];
  cr_assert_eq(fill("normal", (double[]){0, 1}, 2, 2, (int[]){10, 10}, false, 23, a), 0);
  cr_assert_eq(fill("normal", (double[]){0, 1}, 2, 2, (int[]){10, 10}, false, 23, b), 0);
  cr_assert_eq(fill("normal", (double[]){0, 1}, 2, 2, (int[]){10, 10}, false, 24, c), 0);
  cr_assert_eq(memcmp(a, b, sizeof a), 0);
  cr_assert_neq(memcmp(a, c, sizeof a), 0);
  double o1[100], o2[100];
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){10, 10}, false, 25, o1), 0);
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){10, 10}, false, 25, o2), 0);
  cr_assert_eq(memcmp(o1, o2, sizeof o1), 0);
}

Test(init, empty_param_is_fine) {
  double out[1] = {42};
  cr_assert_eq(fill("glorot", NULL, 0, 2, (int[]){0, 5}, false, 1, out), 0);
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){4, 0}, false, 1, out), 0);
  cr_assert_eq(out[0], 42);
}

Test(init, error_unknown_initializer) { expect_error("xavier", NULL, 0, NULL, 1, (int[]){4}, 8, "unknown initializer 'xavier'"); }

Test(init, error_wrong_argument_counts) {
  expect_error("uniform", (double[]){1}, 1, NULL, 1, (int[]){4}, 8, "uniform takes 2 arguments, got 1");
  expect_error("chrono", NULL, 0, NULL, 1, (int[]){4}, 8, "chrono takes 1 argument, got 0");
  expect_error("glorot", (double[]){1}, 1, NULL, 1, (int[]){4}, 8, "glorot takes no arguments");
  expect_error("const", NULL, 0, NULL, 1, (int[]){4}, 8, "const takes 1 argument");
  expect_error("gumbel", (double[]){0}, 1, NULL, 1, (int[]){4}, 8, "gumbel takes 2 arguments");
  expect_error("lru_nu", (double[]){0.5}, 1, NULL, 1, (int[]){4}, 8, "lru_nu takes 2 arguments");
  expect_error("lru_theta", NULL, 0, NULL, 1, (int[]){4}, 8, "lru_theta takes 1 argument");
  expect_error("normal", (double[]){0, 1, 2}, 3, NULL, 1, (int[]){4}, 8, "normal takes 2 arguments, got 3");
}

Test(init, error_non_finite_argument) { expect_error("const", (double[]){NAN}, 1, NULL, 1, (int[]){4}, 8, "not finite"); }

Test(init, error_uniform_lo_above_hi) { expect_error("uniform", (double[]){2, 1}, 2, NULL, 1, (int[]){4}, 8, "lo <= hi"); }

Test(init, error_normal_negative_std) { expect_error("normal", (double[]){0, -1}, 2, NULL, 1, (int[]){4}, 8, "std >= 0"); }

Test(init, error_chrono_tmax_at_most_two) {
  expect_error("chrono", (double[]){2}, 1, NULL, 1, (int[]){4}, 8, "tmax > 2");
  expect_error("chrono", (double[]){-5}, 1, NULL, 1, (int[]){4}, 8, "tmax > 2");
}

Test(init, error_ugi_on_size_below_two) {
  expect_error("ugi", NULL, 0, NULL, 1, (int[]){1}, 8, "at least 2");
  expect_error("ugi", NULL, 0, NULL, 2, (int[]){1, 8}, 8, "at least 2");
  expect_error("ugi", NULL, 0, NULL, 0, NULL, 8, "scalar");
}

Test(init, error_gumbel_on_size_below_two) { expect_error("gumbel", (double[]){0, 1}, 2, NULL, 1, (int[]){1}, 8, "at least 2"); }

Test(init, error_gumbel_non_positive_tau) { expect_error("gumbel", (double[]){0, 0}, 2, NULL, 1, (int[]){4}, 8, "tau > 0"); }

Test(init, error_orthogonal_on_non_matrix) {
  expect_error("orthogonal", NULL, 0, NULL, 1, (int[]){4}, 8, "needs a matrix param, got a vector");
  expect_error("orthogonal", NULL, 0, NULL, 0, NULL, 8, "got a scalar");
}

Test(init, error_lru_nu_outside_the_unit_ring) {
  expect_error("lru_nu", (double[]){-0.1, 0.5}, 2, NULL, 1, (int[]){4}, 8, "0 <= r_min < r_max <= 1");
  expect_error("lru_nu", (double[]){0.5, 0.5}, 2, NULL, 1, (int[]){4}, 8, "0 <= r_min < r_max <= 1");
  expect_error("lru_nu", (double[]){0.9, 0.5}, 2, NULL, 1, (int[]){4}, 8, "0 <= r_min < r_max <= 1");
  expect_error("lru_nu", (double[]){0.5, 1.5}, 2, NULL, 1, (int[]){4}, 8, "0 <= r_min < r_max <= 1");
}

Test(init, error_lru_theta_non_positive_max_phase) {
  expect_error("lru_theta", (double[]){0}, 1, NULL, 1, (int[]){4}, 8, "max_phase > 0");
  expect_error("lru_theta", (double[]){-1}, 1, NULL, 1, (int[]){4}, 8, "max_phase > 0");
}

Test(init, error_lru_gamma_without_ref) { expect_error("lru_gamma", NULL, 0, NULL, 1, (int[]){4}, 8, "lru_gamma needs"); }

Test(init, error_standard_without_a_state_size) { expect_error("standard", NULL, 0, NULL, 1, (int[]){4}, 0, "positive size"); }

/* ---- version 2 (spec section 9) ---- */

/* softplus(y) = log(1 + e^y), without overflow for large y. */
static double softplus(double y) { return y > 0 ? y + log1p(exp(-y)) : log1p(exp(y)); }

Test(init, arange_fills_the_last_dim_exactly_and_draws_nothing) {
  double out[2 * 12];
  Rng r, before;
  rng_seed(&r, 5, 0);
  before = r;
  cr_assert_eq(init_fill("arange", (double[]){1, 0.5}, 2, NULL, 2, (int[]){3, 4}, false, 8, &r, out, err, sizeof err), 0,
               "%s", err);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) cr_assert_eq(out[i * 4 + j], 1 + 0.5 * j, "[%d, %d] = %g", i, j, out[i * 4 + j]);
  cr_assert_eq(memcmp(&r, &before, sizeof r), 0);
  cr_assert_eq(fill("arange", (double[]){-2, 3}, 2, 1, (int[]){5}, false, 1, out), 0, "%s", err);
  for (int j = 0; j < 5; j++) cr_assert_eq(out[j], -2 + 3.0 * j);
  cr_assert_eq(fill("arange", (double[]){7, 3}, 2, 0, NULL, false, 1, out), 0, "%s", err);
  cr_assert_eq(out[0], 7);
  cr_assert_eq(fill("arange", (double[]){0, 1}, 2, 2, (int[]){2, 3}, true, 1, out), 0, "%s", err);
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(out[2 * i], (double)(i % 3));
    cr_assert_eq(out[2 * i + 1], 0.0);
  }
}

Test(init, s4d_real_is_log_j_plus_one_along_the_last_dim) {
  enum { D = 3, NS = 16 };
  double out[D * NS];
  Rng r, before;
  rng_seed(&r, 5, 0);
  before = r;
  cr_assert_eq(init_fill("s4d_real", NULL, 0, NULL, 2, (int[]){D, NS}, false, 8, &r, out, err, sizeof err), 0, "%s", err);
  cr_assert_eq(memcmp(&r, &before, sizeof r), 0);
  for (int i = 0; i < D; i++)
    for (int j = 0; j < NS; j++) {
      cr_assert_eq(out[i * NS + j], log(j + 1.0));
      /* Mamba's A = -exp(A_log) = -(j + 1), to rounding */
      cr_assert_leq(fabs(exp(out[i * NS + j]) - (j + 1)), 4 * DBL_EPSILON * (j + 1));
    }
  cr_assert_eq(out[0], 0.0);
}

Test(init, log_uniform_range_and_log_values_uniform) {
  double lo = 0.001, hi = 0.1, *v = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("log_uniform", (double[]){lo, hi}, 2, 1, (int[]){N}, false, 11, v), 0, "%s", err);
  double a = log(lo), b = log(hi), w = b - a, s = 0, s2 = 0;
  int below_gm = 0, first_decade = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(v[i] >= lo * (1 - 1e-15) && v[i] <= hi * (1 + 1e-15), "%g outside [%g, %g]", v[i], lo, hi);
    double l = log(v[i]);
    s += l, s2 += l * l;
    below_gm += v[i] < sqrt(lo * hi);
    first_decade += v[i] < 0.01;
  }
  double mean = s / N, var = s2 / N - mean * mean;
  /* log v ~ U(log lo, log hi): mean the midpoint, variance w^2 / 12; half the draws in each decade */
  cr_assert_lt(fabs(mean - (a + b) / 2), 5 * w / sqrt(12.0 * N));
  cr_assert_lt(fabs(var - w * w / 12) / (w * w / 12), 0.02);
  cr_assert_lt(fabs(below_gm / (double)N - 0.5), 5 * 0.5 / sqrt(N));
  cr_assert_lt(fabs(first_decade / (double)N - 0.5), 5 * 0.5 / sqrt(N));
  cr_assert_lt(min_of(v, N), lo * 1.001);
  cr_assert_gt(max_of(v, N), hi * 0.999);
  free(v);
}

Test(init, log_uniform_is_exp_of_uniform_of_the_logs) {
  double lu[64], u[64];
  cr_assert_eq(fill("log_uniform", (double[]){0.5, 8}, 2, 2, (int[]){8, 8}, false, 3, lu), 0, "%s", err);
  cr_assert_eq(fill("uniform", (double[]){0, 1}, 2, 2, (int[]){8, 8}, false, 3, u), 0, "%s", err);
  for (int i = 0; i < 64; i++) cr_assert_eq(lu[i], exp(log(0.5) + (log(8.0) - log(0.5)) * u[i]));
  cr_assert_eq(fill("log_uniform", (double[]){2, 2}, 2, 1, (int[]){4}, false, 3, lu), 0, "%s", err);
  for (int i = 0; i < 4; i++) cr_assert_float_eq(lu[i], 2.0, 1e-15);
}

Test(init, inv_softplus_inverts_softplus_of_the_inner_values) {
  double *in = xmalloc(sizeof(double) * N), *out = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("log_uniform", (double[]){0.001, 0.1}, 2, 2, (int[]){N / 100, 100}, false, 21, in), 0, "%s", err);
  Rng r;
  rng_seed(&r, 21, 0);
  cr_assert_eq(init_fill_wrapped("inv_softplus", "log_uniform", (double[]){0.001, 0.1}, 2, NULL, 2, (int[]){N / 100, 100},
                                 false, 8, &r, out, err, sizeof err),
               0, "%s", err);
  for (int i = 0; i < N; i++) {
    cr_assert_lt(out[i], log(expm1(0.1)) + 1e-12); /* Mamba's dt bias: softplus(.) in [0.001, 0.1] */
    cr_assert_leq(fabs(softplus(out[i]) - in[i]), 4 * DBL_EPSILON * in[i], "softplus(%.17g) = %.17g, want %.17g", out[i],
                  softplus(out[i]), in[i]);
  }
  /* no wrap: init_fill itself */
  rng_seed(&r, 21, 0);
  cr_assert_eq(init_fill_wrapped(NULL, "log_uniform", (double[]){0.001, 0.1}, 2, NULL, 2, (int[]){N / 100, 100}, false, 8,
                                 &r, out, err, sizeof err),
               0, "%s", err);
  cr_assert_eq(memcmp(in, out, sizeof(double) * N), 0);
  free(in), free(out);
}

Test(init, inv_softplus_keeps_precision_for_tiny_and_large_values) {
  const double xs[] = {4.9e-324, 1e-300, 1e-30, 1e-12, 1e-8, 1e-3, 0.5, 0.6931471805599453, 1, 1.5, 20, 40, 700, 1e4, 1e300};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    double x = xs[i], y = init_inv_softplus(x);
    cr_assert(isfinite(y), "inv_softplus(%g) = %g", x, y);
    /* y's own rounding (|y| ulp-sized in absolute terms) comes back through exp as |y| eps relative */
    cr_assert_leq(fabs(softplus(y) - x), (4 + fabs(y)) * DBL_EPSILON * x + 4.9e-324, "softplus(inv_softplus(%.17g)) = %.17g",
                  x, softplus(y));
    /* tiny x: log(expm1(x)) = log(x) + x/2 + O(x^2), to the last bits */
    if (x < 1e-8 && x > 1e-300) cr_assert_leq(fabs(y - (log(x) + x / 2)), 2 * DBL_EPSILON * fabs(y), "inv_softplus(%g) = %.17g", x, y);
  }
  /* the naive log(exp(x) - 1) gives log(0) = -inf here */
  cr_assert_float_eq(init_inv_softplus(1e-300), log(1e-300), 1e-12);
  cr_assert(isinf(log(exp(1e-300) - 1)));
  /* and overflows here: inv_softplus(x) = x - e^-x + ... */
  cr_assert_eq(init_inv_softplus(1000), 1000);
}

Test(init, error_log_uniform_arguments) {
  expect_error("log_uniform", (double[]){0, 1}, 2, NULL, 1, (int[]){4}, 8, "needs lo > 0");
  expect_error("log_uniform", (double[]){-1, 1}, 2, NULL, 1, (int[]){4}, 8, "needs lo > 0");
  expect_error("log_uniform", (double[]){2, 1}, 2, NULL, 1, (int[]){4}, 8, "needs hi >= lo");
  expect_error("log_uniform", (double[]){1}, 1, NULL, 1, (int[]){4}, 8, "log_uniform takes 2 arguments, got 1");
  expect_error("arange", (double[]){1}, 1, NULL, 1, (int[]){4}, 8, "arange takes 2 arguments, got 1");
  expect_error("s4d_real", (double[]){1}, 1, NULL, 1, (int[]){4}, 8, "s4d_real takes no arguments");
  int bad = -1;
  cr_assert_eq(init_check_args("log_uniform", (double[]){0, 1}, 2, &bad, err, sizeof err), -1);
  cr_assert_eq(bad, 0);
  cr_assert_eq(init_check_args("log_uniform", (double[]){3, 1}, 2, &bad, err, sizeof err), -1);
  cr_assert_eq(bad, 1);
  cr_assert_eq(init_check_args("log_uniform", (double[]){1, 1}, 2, &bad, err, sizeof err), 0);
  cr_assert_eq(init_check_args("uniform", (double[]){3, 1}, 2, &bad, err, sizeof err), 0); /* version 1: when drawn */
}

static void expect_wrapped_error(const char *wrap, const char *name, const double *args, int nargs, bool cplx,
                                 const char *want) {
  double out[16];
  Rng r;
  rng_seed(&r, 1, 0);
  err[0] = 0;
  cr_assert_eq(init_fill_wrapped(wrap, name, args, nargs, NULL, 1, (int[]){4}, cplx, 8, &r, out, err, sizeof err), -1,
               "%s(%s) accepted", wrap, name);
  cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

Test(init, error_inv_softplus) {
  expect_error("inv_softplus", (double[]){0.5}, 1, NULL, 1, (int[]){4}, 8, "takes another initializer");
  expect_wrapped_error("inv_softplus", "zeros", NULL, 0, false, "needs positive values, but zeros gave 0");
  expect_wrapped_error("inv_softplus", "s4d_real", NULL, 0, false, "needs positive values, but s4d_real gave 0");
  expect_wrapped_error("inv_softplus", "const", (double[]){-1}, 1, false, "gave -1");
  expect_wrapped_error("inv_softplus", "ones", NULL, 0, true, "needs a real param");
  expect_wrapped_error("inv_softplus", "inv_softplus", NULL, 0, false, "draws values, not inv_softplus");
  expect_wrapped_error("inv_softplus", "lru_gamma", NULL, 0, false, "draws values, not lru_gamma");
  expect_wrapped_error("uniform", "ones", NULL, 0, false, "does not take an initializer");
  expect_wrapped_error("inv_softplus", "log_uniform", (double[]){0, 1}, 2, false, "needs lo > 0");
  double out[4];
  Rng r;
  rng_seed(&r, 1, 0);
  cr_assert_eq(init_fill_wrapped("inv_softplus", "arange", (double[]){1, 1}, 2, NULL, 1, (int[]){4}, false, 8, &r, out, err,
                                 sizeof err),
               0, "%s", err);
  for (int j = 0; j < 4; j++) cr_assert_eq(out[j], init_inv_softplus(1.0 + j));
}

Test(init, text_of_a_wrapped_initializer) {
  InitText t;
  int off, len;
  cr_assert_eq(init_parse("inv_softplus(log_uniform(0.001, 0.1))", &t, err, sizeof err, &off, &len), 0, "%s", err);
  cr_assert_str_eq(t.name, "inv_softplus");
  cr_assert_str_eq(t.inner, "log_uniform");
  cr_assert_eq(t.nargs, 2);
  cr_assert_eq(t.args[0], 0.001);
  cr_assert_eq(t.args[1], 0.1);
  cr_assert_eq(init_parse(" inv_softplus ( ones ) ", &t, err, sizeof err, &off, &len), -1); /* a name starts the text */
  cr_assert_eq(init_parse("inv_softplus ( ones ) ", &t, err, sizeof err, &off, &len), 0, "%s", err);
  cr_assert_str_eq(t.inner, "ones");
  cr_assert_eq(init_parse("inv_softplus( arange(1, 2) )", &t, err, sizeof err, &off, &len), 0, "%s", err);
  cr_assert_str_eq(t.inner, "arange");
  cr_assert_eq(init_parse("log_uniform(0.5, 2)", &t, err, sizeof err, &off, &len), 0, "%s", err);
  cr_assert_str_eq(t.inner, "");
}

static void expect_text_error(const char *text, const char *want, int want_off) {
  InitText t;
  int off = -1, len = -1;
  err[0] = 0;
  cr_assert_eq(init_parse(text, &t, err, sizeof err, &off, &len), -1, "'%s' accepted", text);
  cr_assert_not_null(strstr(err, want), "'%s': message '%s' lacks '%s'", text, err, want);
  cr_assert_eq(off, want_off, "'%s': at %d, want %d", text, off, want_off);
}

Test(init, text_errors_of_wrapped_initializers) {
  expect_text_error("inv_softplus", "takes an initializer as its argument", 0);
  expect_text_error("inv_softplus()", "takes an initializer as its argument", 13);
  expect_text_error("inv_softplus(0.5)", "expected an initializer", 13);
  expect_text_error("inv_softplus(log_unifrom(1, 2))", "did you mean 'log_uniform'", 13);
  expect_text_error("inv_softplus(log_uniform(1))", "log_uniform takes 2 arguments, not 1", 13);
  expect_text_error("inv_softplus(inv_softplus(ones))", "draws values, not inv_softplus", 13);
  expect_text_error("inv_softplus(lru_gamma(nu))", "draws values, not lru_gamma", 13);
  expect_text_error("inv_softplus(ones", "'(' without its ')'", 12);
  expect_text_error("inv_softplus(ones) x", "unexpected 'x'", 19);
  expect_text_error("uniform(log_uniform(1, 2), 3)", "expected a number", 8);
}

/* arange_pow(start, scale, step, p) = start + scale * (step j)^p along the last dim: the
 * power-law ramps of RWKV-6's decay (-6 + 5 (j / (n - 1))^0.7) and of sLSTM's forget bias
 * (5 - 12 (j / (P - 1))^0.3), the same for every row; it draws nothing. */
Test(init, arange_pow_is_a_power_of_the_index_along_the_last_dim) {
  enum { NH = 2, K = 5 };
  double out[NH * K];
  Rng r, before;
  rng_seed(&r, 5, 0);
  before = r;
  cr_assert_eq(init_fill("arange_pow", (double[]){5, -12, 1.0 / (K - 1), 0.3}, 4, NULL, 2, (int[]){NH, K}, false, 8, &r, out,
                         err, sizeof err),
               0, "%s", err);
  cr_assert_eq(memcmp(&r, &before, sizeof r), 0);
  for (int h = 0; h < NH; h++) {
    cr_assert_eq(out[h * K], 5.0); /* 0^p = 0: the ramp starts at start */
    cr_assert_float_eq(out[h * K + K - 1], -7.0, 1e-14);
    for (int j = 0; j < K; j++) cr_assert_eq(out[h * K + j], 5 - 12 * pow(j / 4.0, 0.3), "[%d, %d] = %.17g", h, j, out[h * K + j]);
  }
  /* RWKV-6's decay over 8 channels: -6 at j = 0, -1 at j = 7, a concave ramp (p < 1) */
  double w[8];
  cr_assert_eq(fill("arange_pow", (double[]){-6, 5, 1.0 / 7, 0.7}, 4, 1, (int[]){8}, false, 1, w), 0, "%s", err);
  cr_assert_eq(w[0], -6.0);
  cr_assert_float_eq(w[7], -1.0, 1e-14);
  for (int j = 1; j < 7; j++) cr_assert_gt(w[j] - w[j - 1], w[j + 1] - w[j], "not concave at %d", j);
  /* p = 1 is arange(start, scale * step) */
  double a[6], b[6];
  cr_assert_eq(fill("arange_pow", (double[]){1, -1, 0.25, 1}, 4, 1, (int[]){6}, false, 1, a), 0, "%s", err);
  cr_assert_eq(fill("arange", (double[]){1, -0.25}, 2, 1, (int[]){6}, false, 1, b), 0, "%s", err);
  for (int j = 0; j < 6; j++) cr_assert_eq(a[j], b[j]);
  /* complex: the value in the real part, 0 in the imaginary part */
  double c[8];
  cr_assert_eq(fill("arange_pow", (double[]){0, 1, 1, 2}, 4, 1, (int[]){4}, true, 1, c), 0, "%s", err);
  for (int j = 0; j < 4; j++) cr_assert(c[2 * j] == (double)(j * j) && c[2 * j + 1] == 0.0, "%d: %g %g", j, c[2 * j], c[2 * j + 1]);
}

Test(init, error_arange_pow_arguments) {
  expect_error("arange_pow", (double[]){0, 1, -0.5, 0.5}, 4, NULL, 1, (int[]){4}, 8, "needs step >= 0");
  expect_error("arange_pow", (double[]){0, 1, 0.5, 0}, 4, NULL, 1, (int[]){4}, 8, "needs p > 0");
  expect_error("arange_pow", (double[]){0, 1, 0.5}, 3, NULL, 1, (int[]){4}, 8, "arange_pow takes 4 arguments, got 3");
  int bad = -1;
  cr_assert_eq(init_check_args("arange_pow", (double[]){0, 1, -1, 1}, 4, &bad, err, sizeof err), -1);
  cr_assert_eq(bad, 2);
  cr_assert_eq(init_check_args("arange_pow", (double[]){0, 1, 1, -1}, 4, &bad, err, sizeof err), -1);
  cr_assert_eq(bad, 3);
  cr_assert_eq(init_check_args("arange_pow", (double[]){0, 1, 0, 1}, 4, &bad, err, sizeof err), 0);
}

/* cycle(v0, ..., v_{m-1}) = v_(j mod m) along the last dim: RWKV-6's bonus 0.1 ((j + 1) mod 3 - 1)
 * is cycle(0, 0.1, -0.1). */
Test(init, cycle_repeats_its_arguments_along_the_last_dim) {
  enum { R = 2, C = 7 };
  double out[R * C];
  Rng r, before;
  rng_seed(&r, 5, 0);
  before = r;
  cr_assert_eq(init_fill("cycle", (double[]){0, 0.1, -0.1}, 3, NULL, 2, (int[]){R, C}, false, 8, &r, out, err, sizeof err), 0,
               "%s", err);
  cr_assert_eq(memcmp(&r, &before, sizeof r), 0);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) cr_assert_eq(out[i * C + j], 0.1 * ((j + 1) % 3 - 1), "[%d, %d] = %g", i, j, out[i * C + j]);
  double one[3];
  cr_assert_eq(fill("cycle", (double[]){2.5}, 1, 1, (int[]){3}, false, 1, one), 0, "%s", err);
  for (int j = 0; j < 3; j++) cr_assert_eq(one[j], 2.5);
  double eight[10];
  const double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  cr_assert_eq(fill("cycle", v, 8, 1, (int[]){10}, false, 1, eight), 0, "%s", err);
  for (int j = 0; j < 10; j++) cr_assert_eq(eight[j], v[j % 8]);
  expect_error("cycle", NULL, 0, NULL, 1, (int[]){4}, 8, "cycle takes 1 to 8 arguments, got 0");
  expect_error("cycle", (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 9, NULL, 1, (int[]){4}, 8, "cycle takes 1 to 8 arguments, got 9");
}

/* orthogonal(gain) is orthogonal's matrix times gain (PyTorch's orthogonal_(w, gain)), the same draws. */
Test(init, orthogonal_gain_scales_the_same_matrix) {
  enum { O = 6, I = 4 };
  double w[O * I], g[O * I];
  cr_assert_eq(fill("orthogonal", NULL, 0, 2, (int[]){O, I}, false, 30, w), 0, "%s", err);
  cr_assert_eq(fill("orthogonal", (double[]){0.1}, 1, 2, (int[]){O, I}, false, 30, g), 0, "%s", err);
  for (int i = 0; i < O * I; i++) cr_assert_eq(g[i], w[i] * 0.1);
  /* columns of norm 0.1, orthogonal to each other */
  for (int a = 0; a < I; a++)
    for (int b = 0; b < I; b++) {
      double d = 0;
      for (int i = 0; i < O; i++) d += g[i * I + a] * g[i * I + b];
      cr_assert_float_eq(d, a == b ? 0.01 : 0.0, 1e-14, "column %d . column %d = %g", a, b, d);
    }
  double h[2 * 3 * 3];
  cr_assert_eq(fill("orthogonal", (double[]){2}, 1, 3, (int[]){2, 3, 3}, false, 31, h), 0, "%s", err);
  for (int hd = 0; hd < 2; hd++)
    for (int a = 0; a < 3; a++) {
      double d = 0;
      for (int i = 0; i < 3; i++) d += h[hd * 9 + i * 3 + a] * h[hd * 9 + i * 3 + a];
      cr_assert_float_eq(d, 4.0, 1e-13);
    }
  expect_error("orthogonal", (double[]){1, 2}, 2, NULL, 2, (int[]){4, 4}, 8, "orthogonal takes 0 to 1 arguments, got 2");
}

/* log_of_uniform(lo, hi) = log(U(lo, hi)), u in (0, 1) so that lo = 0 gives no log(0): Gated
 * DeltaNet's A_log = log(A), A ~ U(0, 16). */
Test(init, log_of_uniform_is_the_log_of_a_uniform_draw) {
  double *v = xmalloc(sizeof(double) * N);
  cr_assert_eq(fill("log_of_uniform", (double[]){0, 16}, 2, 2, (int[]){N / 100, 100}, false, 13, v), 0, "%s", err);
  Rng r;
  rng_seed(&r, 13, 0);
  double s = 0, s2 = 0;
  for (int i = 0; i < N; i++) {
    cr_assert_eq(v[i], log(16 * rng_uniform_open(&r)), "%d", i);
    double a = exp(v[i]);
    cr_assert(isfinite(v[i]) && a > 0 && a < 16, "%g", a);
    s += a, s2 += a * a;
  }
  /* exp(v) ~ U(0, 16): mean 8, variance 256 / 12 */
  double mean = s / N, var = s2 / N - mean * mean;
  cr_assert_lt(fabs(mean - 8), 5 * 16 / sqrt(12.0 * N));
  cr_assert_lt(fabs(var - 256 / 12.0) / (256 / 12.0), 0.02);
  free(v);
  double w[8];
  cr_assert_eq(fill("log_of_uniform", (double[]){1, 16}, 2, 1, (int[]){8}, false, 3, w), 0, "%s", err);
  for (int i = 0; i < 8; i++) cr_assert(w[i] > 0 && w[i] < log(16.0), "%g", w[i]);
  expect_error("log_of_uniform", (double[]){-1, 1}, 2, NULL, 1, (int[]){4}, 8, "needs lo >= 0");
  expect_error("log_of_uniform", (double[]){2, 2}, 2, NULL, 1, (int[]){4}, 8, "needs hi > lo");
  int bad = -1;
  cr_assert_eq(init_check_args("log_of_uniform", (double[]){-1, 1}, 2, &bad, err, sizeof err), -1);
  cr_assert_eq(bad, 0);
  cr_assert_eq(init_check_args("log_of_uniform", (double[]){3, 1}, 2, &bad, err, sizeof err), -1);
  cr_assert_eq(bad, 1);
}
