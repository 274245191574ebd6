/* diag_stats.c: histograms, medians, singular values and the robust slope of `cellc diag`. */
#include "diag_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* LAPACK (liblapack-dev): the singular value decomposition of a general matrix. */
extern void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a, const int *lda,
                    double *s, double *u, const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork,
                    int *info);

void diag_hist_add(int64_t *hist, double v) {
  if (isnan(v)) return;
  int bin = (int)floor(v * DIAG_BINS);
  if (bin < 0) bin = 0;
  if (bin >= DIAG_BINS) bin = DIAG_BINS - 1;
  hist[bin]++;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double diag_median(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double diag_quantile(const double *sorted, int n, double q) {
  if (n <= 0) return NAN;
  double pos = q * (double)(n - 1);
  int i = (int)floor(pos);
  if (i >= n - 1) return sorted[n - 1];
  double f = pos - (double)i;
  return sorted[i] + f * (sorted[i + 1] - sorted[i]);
}

int diag_singular_values(int n, const double *m, double *sv) {
  double *a = xmalloc(sizeof(double) * (size_t)n * (size_t)n + 8);
  memcpy(a, m, sizeof(double) * (size_t)n * (size_t)n); /* its transpose: the same singular values */
  int lwork = -1, info = 0, one = 1;
  double q = 0, dummy = 0;
  dgesvd_("N", "N", &n, &n, a, &n, sv, &dummy, &one, &dummy, &one, &q, &lwork, &info);
  lwork = info == 0 ? (int)q : 5 * n + 8;
  double *work = xmalloc(sizeof(double) * (size_t)lwork + 8);
  dgesvd_("N", "N", &n, &n, a, &n, sv, &dummy, &one, &dummy, &one, work, &lwork, &info);
  free(work), free(a);
  return info == 0 ? 0 : -1;
}

void diag_anisotropy(const double *sv, int n, int r, double *ai, double *ce) {
  if (r > n) r = n;
  double top = 0, all = 0;
  for (int i = 0; i < n; i++) all += sv[i] * sv[i], top += i < r ? sv[i] * sv[i] : 0;
  *ai = sv[r - 1] > 0 ? sv[0] / sv[r - 1] : INFINITY;
  *ce = all > 0 ? top / all : NAN;
}

/* The points of the fit: (log P, log S) for the pairs within P's 1%..99% quantile range. */
static int fit_points(const double *P, const double *S, int n, double *x, double *y) {
  double *ps = xmalloc(sizeof(double) * (size_t)n + 8);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (P[i] > 0 && S[i] > 0 && isfinite(P[i]) && isfinite(S[i])) ps[m++] = P[i];
  qsort(ps, (size_t)m, sizeof(double), cmp_double);
  double lo = diag_quantile(ps, m, 0.01), hi = diag_quantile(ps, m, 0.99);
  free(ps);
  int k = 0;
  for (int i = 0; i < n && m > 0; i++)
    if (P[i] > 0 && S[i] > 0 && isfinite(P[i]) && isfinite(S[i]) && P[i] >= lo && P[i] <= hi)
      x[k] = log(P[i]), y[k] = log(S[i]), k++;
  return k;
}

int diag_loglog_slope(const double *P, const double *S, int n, double *slope, double *icept) {
  double *x = xmalloc(sizeof(double) * (size_t)n + 8), *y = xmalloc(sizeof(double) * (size_t)n + 8);
  int k = fit_points(P, S, n, x, y);
  int stride = k > 2000 ? (k + 1999) / 2000 : 1, m = 0;
  for (int i = 0; i < k; i += stride) x[m] = x[i], y[m] = y[i], m++;
  size_t cap = (size_t)m * (size_t)(m > 0 ? m - 1 : 0) / 2 + 1, ns = 0;
  double *sl = xmalloc(sizeof(double) * cap);
  for (int i = 0; i < m; i++)
    for (int j = i + 1; j < m; j++)
      if (fabs(x[j] - x[i]) > 1e-12 * (1 + fabs(x[i]))) sl[ns++] = (y[j] - y[i]) / (x[j] - x[i]);
  int rc = -1;
  if (m >= 3 && ns > 0) {
    *slope = diag_median(sl, (int)ns);
    for (int i = 0; i < m; i++) y[i] -= *slope * x[i];
    *icept = diag_median(y, m);
    rc = 0;
  }
  free(sl), free(x), free(y);
  return rc;
}

int diag_loglog_ols(const double *P, const double *S, int n, double *slope, double *icept) {
  double *x = xmalloc(sizeof(double) * (size_t)n + 8), *y = xmalloc(sizeof(double) * (size_t)n + 8);
  int k = fit_points(P, S, n, x, y);
  double mx = 0, my = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < k; i++) mx += x[i], my += y[i];
  if (k > 0) mx /= k, my /= k;
  for (int i = 0; i < k; i++) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  int rc = -1;
  if (k >= 3 && sxx > 0) *slope = sxy / sxx, *icept = my - *slope * mx, rc = 0;
  free(x), free(y);
  return rc;
}
