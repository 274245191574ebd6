/* mnist1d.c: the MNIST-1D dataset (docs/training.md "Tasks"; shared/seeds.md section 3), generated
 * from its ten 12-point templates with the reference pipeline (pad, resample, scale, roll,
 * correlated and i.i.d. noise, shear, resample). tests/suite_mnist1d.sh checks the result against an
 * independent construction of the reference dataset and trains the source's baselines on it
 * (docs/experiments.md "MNIST-1D"). */
#include <math.h>
#include <string.h>

#include "task_impl.h"

static const TaskKey mnist1d_keys[] = {
    {"length", TKEY_INT, "40", 2, 100000, "points per sequence after the final resampling"},
    {"train", TKEY_INT, "4000", 10, 10000000, "training samples; the last 10% of them form the valid split"},
    {"test", TKEY_INT, "1000", 1, 10000000, "test samples"},
};
const TaskDef mnist1d_def = {"mnist1d", mnist1d_keys, 3, TASK_LOSS_CE, TASK_READ_LAST};

#define TEMPLATE_LEN 12
#define PAD_MIN 36
#define PAD_MAX 60
#define DENSE_LEN (TEMPLATE_LEN + PAD_MAX) /* 72 */
#define MAX_SHIFT 48
#define SCALE_COEFF 0.4
#define CORR_NOISE 0.25
#define CORR_SIGMA 2.0
#define IID_NOISE 0.02
#define SHEAR_SCALE 0.75

static const double raw_templates[10][TEMPLATE_LEN] = {
    {5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5},     {5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5},
    {5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5}, {5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5},
    {5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5},     {5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5},
    {5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5},     {5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5},
    {5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5},       {5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5},
};

/* The data: a FixedSet, x standardized. */

/* Linear resampling of x (n points on [0,1]) to out (m points on [0,1]). */
static void resample(const double *x, int n, double *out, int m) {
  for (int i = 0; i < m; i++) {
    double pos = m > 1 ? (double)i * (n - 1) / (m - 1) : 0;
    int j = (int)pos;
    if (j >= n - 1) {
      out[i] = x[n - 1];
      continue;
    }
    double f = pos - j;
    out[i] = x[j] * (1 - f) + x[j + 1] * f;
  }
}

/* A Gaussian filter (sigma, radius = int(4 sigma + 0.5)) with half-sample reflection at both ends,
 * as scipy.ndimage.gaussian_filter's default mode. */
static void gaussian_smooth(const double *x, int n, double sigma, double *out) {
  int radius = (int)(4 * sigma + 0.5);
  double w[64], sum = 0;
  CHECK(radius < 32);
  for (int k = -radius; k <= radius; k++)
    sum += w[k + radius] = exp(-0.5 * k * k / (sigma * sigma));
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int k = -radius; k <= radius; k++) {
      int j = i + k;
      while (j < 0 || j >= n)
        j = j < 0 ? -j - 1 : 2 * n - j - 1;
      s += w[k + radius] * x[j];
    }
    out[i] = s / sum;
  }
}

/* The templates: each whitened (mean 0, std 1), shifted to start at 0, divided by 6. */
static void make_templates(double tpl[10][TEMPLATE_LEN]) {
  for (int c = 0; c < 10; c++) {
    double mean = 0, var = 0;
    for (int i = 0; i < TEMPLATE_LEN; i++)
      mean += raw_templates[c][i] / TEMPLATE_LEN;
    for (int i = 0; i < TEMPLATE_LEN; i++)
      var += pow(raw_templates[c][i] - mean, 2) / TEMPLATE_LEN;
    for (int i = 0; i < TEMPLATE_LEN; i++)
      tpl[c][i] = (raw_templates[c][i] - mean) / sqrt(var);
    double first = tpl[c][0];
    for (int i = 0; i < TEMPLATE_LEN; i++)
      tpl[c][i] = (tpl[c][i] - first) / 6;
  }
}

/* One sample of template `tpl` into out (T points), drawing in the reference's order. */
static void make_sample(const double *tpl, Rng *r, int T, double *out) {
  double padded[DENSE_LEN], dense[DENSE_LEN], rolled[DENSE_LEN], noise[DENSE_LEN], smooth[DENSE_LEN];
  int pad = PAD_MIN + (int)(rng_uniform(r) * (PAD_MAX - PAD_MIN + 1));
  int n = TEMPLATE_LEN + pad;
  for (int i = 0; i < n; i++)
    padded[i] = i < TEMPLATE_LEN ? tpl[i] + 1e-8 : 0; /* eps keeps the signal nonzero */
  resample(padded, n, dense, DENSE_LEN);
  double scale = 1 + SCALE_COEFF * (rng_uniform(r) - 0.5);
  for (int i = 0; i < DENSE_LEN; i++)
    dense[i] *= scale;
  int shift = (int)rng_below(r, MAX_SHIFT);
  for (int i = 0; i < DENSE_LEN; i++)
    rolled[i] = dense[(i - shift + DENSE_LEN) % DENSE_LEN];
  for (int i = 0; i < DENSE_LEN; i++)
    noise[i] = CORR_NOISE * rng_normal(r);
  gaussian_smooth(noise, DENSE_LEN, CORR_SIGMA, smooth);
  for (int i = 0; i < DENSE_LEN; i++) {
    if (rolled[i] == 0)
      rolled[i] = smooth[i];
  }
  for (int i = 0; i < DENSE_LEN; i++)
    rolled[i] += IID_NOISE * rng_normal(r);
  double coeff = SHEAR_SCALE * (rng_uniform(r) - 0.5);
  for (int i = 0; i < DENSE_LEN; i++)
    rolled[i] -= coeff * (-0.5 + (double)i / (DENSE_LEN - 1));
  resample(rolled, DENSE_LEN, out, T);
}

/* The `train` samples have labels i % 10 (i = 0, 1, ...) and the last 10% of them become the valid
 * split; the `test` samples likewise. Sample i of each part draws from its own rng stream. Every split
 * is standardized with the mean and standard deviation of all values of the train split. */
int mnist1d_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  int T = task_int(t, "length"), ntrain_all = task_int(t, "train"), ntest = task_int(t, "test");
  int64_t n[3] = {ntrain_all - ntrain_all / 10, ntrain_all / 10, ntest};
  double tpl[10][TEMPLATE_LEN];
  make_templates(tpl);
  FixedSet *d = xcalloc(1, sizeof *d);
  t->data = d;
  t->free = task_set_free;
  d->T = T;
  for (int s = 0; s < 3; s++) {
    d->x[s] = xmalloc((size_t)n[s] * (size_t)T * sizeof(float));
    d->label[s] = xmalloc((size_t)n[s] * sizeof(int32_t));
  }
  double *buf = xmalloc((size_t)T * sizeof *buf);
  for (int part = 0; part < 2; part++) {
    int count = part == 0 ? ntrain_all : ntest;
    for (int i = 0; i < count; i++) {
      int split = part == 0 ? (i < n[0] ? TASK_TRAIN : TASK_VALID) : TASK_TEST;
      int64_t item = split == TASK_VALID ? i - n[0] : i;
      Rng r;
      task_rng(t, "sample", part == 0 ? TASK_TRAIN : TASK_TEST, i, &r);
      make_sample(tpl[i % 10], &r, T, buf);
      for (int s = 0; s < T; s++)
        d->x[split][(size_t)item * T + s] = (float)buf[s];
      d->label[split][item] = i % 10;
    }
  }
  free(buf);
  double sum = 0, sq = 0, count = (double)n[0] * T;
  for (size_t i = 0; i < (size_t)n[0] * T; i++)
    sum += d->x[0][i];
  double mean = sum / count;
  for (size_t i = 0; i < (size_t)n[0] * T; i++)
    sq += pow(d->x[0][i] - mean, 2);
  double sd = sqrt(sq / count);
  if (!(sd > 0))
    sd = 1;
  for (int s = 0; s < 3; s++)
    for (size_t i = 0; i < (size_t)n[s] * T; i++)
      d->x[s][i] = (float)((d->x[s][i] - mean) / sd);
  t->shape.in_dim = 1;
  t->shape.out_dim = 10;
  t->shape.length = T;
  for (int s = 0; s < 3; s++)
    t->shape.split_size[s] = n[s];
  t->batch = task_set_batch;
  return 0;
}
