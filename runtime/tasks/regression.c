/* regression.c: the generated regression tasks read at the last step (MSE): adding, ar2, delay_sum,
 * moving_average and sinmix (docs/training.md "Tasks"; shared/seeds.md section 3). Real-valued
 * inputs drawn fresh per batch. */
#include <math.h>

#include "task_impl.h"

#define MAX_CHANNELS 1024
#define MAX_LENGTH 1000000

static const TaskKey adding_keys[] = {
    {"length", TKEY_INT, "80", 2, MAX_LENGTH, "T; one marker in each half"},
    {"noise_channels", TKEY_INT, "3", 1, MAX_CHANNELS, "U(0,1) channels; a marker channel comes after them"},
};
const TaskDef adding_def = {"adding", adding_keys, 2, TASK_LOSS_MSE, TASK_READ_LAST};

static const TaskKey ar2_keys[] = {
    {"length", TKEY_INT, "120", 1, MAX_LENGTH, "T; the target is the latent AR(2) value at the last step"},
    {"channels", TKEY_INT, "1", 1, MAX_CHANNELS, "N(0,1) distractor channels, independent of the target"},
};
const TaskDef ar2_def = {"ar2", ar2_keys, 2, TASK_LOSS_MSE, TASK_READ_LAST};

static const TaskKey delay_sum_keys[] = {
    {"length", TKEY_INT, "120", 37, MAX_LENGTH, "T, at least 37 for the delay 36"},
    {"channels", TKEY_INT, "2", 1, MAX_CHANNELS, "N(0,1) channels; the target reads channel 1 (the first)"},
};
const TaskDef delay_sum_def = {"delay_sum", delay_sum_keys, 2, TASK_LOSS_MSE, TASK_READ_LAST};

static const TaskKey moving_average_keys[] = {
    {"length", TKEY_INT, "120", 8, MAX_LENGTH, "T, at least the window of 8"},
    {"channels", TKEY_INT, "2", 1, MAX_CHANNELS, "N(0,1) channels; the target reads channel 1 (the first)"},
};
const TaskDef moving_average_def = {"moving_average", moving_average_keys, 2, TASK_LOSS_MSE, TASK_READ_LAST};

static const TaskKey sinmix_keys[] = {
    {"length", TKEY_INT, "120", 4, MAX_LENGTH, "T, the points sampled on [0, 1]"},
    {"channels", TKEY_INT, "4", 4, MAX_CHANNELS, "two sinusoids, a N(0, 0.1^2) channel, then unused mask channels (0)"},
};
const TaskDef sinmix_def = {"sinmix", sinmix_keys, 2, TASK_LOSS_MSE, TASK_READ_LAST};

/* The delays of delay_sum: y = (1/4) sum_i u[T-1-d_i, 0]. */
static const int delays[4] = {4, 12, 24, 36};
#define AVG_WINDOW 8
#define AR2_BURN_IN 100

typedef enum { REG_ADDING, REG_AR2, REG_DELAY_SUM, REG_MOVING_AVERAGE, REG_SINMIX } RegKind;

/* One sequence: row b of x [T, B, C] and its target y[b]. */
static void reg_sample(RegKind kind, Rng *r, int T, int B, int C, int b, float *x, float *y) {
#define X_AT(t, c) x[((size_t)(t)*B + b) * C + (c)]
  switch (kind) {
  case REG_ADDING: {
    /* Channels 0..C-2: U(0,1) noise; channel C-1: the marker. Target: channel 0 at the two markers. */
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C - 1; c++)
        X_AT(t, c) = (float)rng_uniform(r);
    int p1 = (int)rng_below(r, (uint64_t)(T / 2)), p2 = T / 2 + (int)rng_below(r, (uint64_t)(T - T / 2));
    X_AT(p1, C - 1) = 1;
    X_AT(p2, C - 1) = 1;
    y[b] = (float)((double)X_AT(p1, 0) + (double)X_AT(p2, 0));
    break;
  }
  case REG_AR2: {
    /* Latent z_t = 1.6 z_{t-1} - 0.7 z_{t-2} + e_t, e ~ N(0, 0.05^2), from 0 with a burn-in so the
     * target z_T is near stationary at any T; the inputs are distractor noise drawn afterwards. */
    double z1 = 0, z2 = 0;
    for (int t = 0; t < AR2_BURN_IN + T; t++) {
      double z = 1.6 * z1 - 0.7 * z2 + 0.05 * rng_normal(r);
      z2 = z1;
      z1 = z;
    }
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        X_AT(t, c) = (float)rng_normal(r);
    y[b] = (float)z1;
    break;
  }
  case REG_DELAY_SUM:
  case REG_MOVING_AVERAGE: {
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        X_AT(t, c) = (float)rng_normal(r);
    double s = 0;
    if (kind == REG_DELAY_SUM) {
      for (int i = 0; i < 4; i++)
        s += X_AT(T - 1 - delays[i], 0);
      y[b] = (float)(s / 4);
    } else {
      for (int t = T - AVG_WINDOW; t < T; t++)
        s += X_AT(t, 0);
      y[b] = (float)(s / AVG_WINDOW);
    }
    break;
  }
  case REG_SINMIX: {
    /* s_k(tau) = sin(2 pi f_k tau + phi_k), f ~ U(1,7), phi ~ U(0, 2 pi), tau = t/(T-1);
     * y = (mean s1 last quarter - first quarter) + (mean s2 first quarter - last quarter). */
    double f1 = 1 + 6 * rng_uniform(r), f2 = 1 + 6 * rng_uniform(r);
    double ph1 = 2 * M_PI * rng_uniform(r), ph2 = 2 * M_PI * rng_uniform(r);
    for (int t = 0; t < T; t++) {
      double tau = (double)t / (T - 1);
      X_AT(t, 0) = (float)sin(2 * M_PI * f1 * tau + ph1);
      X_AT(t, 1) = (float)sin(2 * M_PI * f2 * tau + ph2);
      X_AT(t, 2) = (float)(0.1 * rng_normal(r));
    }
    int q = T / 4;
    double s1a = 0, s1b = 0, s2a = 0, s2b = 0;
    for (int t = 0; t < q; t++) {
      s1a += X_AT(t, 0);
      s2a += X_AT(t, 1);
      s1b += X_AT(T - q + t, 0);
      s2b += X_AT(T - q + t, 1);
    }
    y[b] = (float)((s1b - s1a) / q + (s2a - s2b) / q);
    break;
  }
  default:
    UNREACHABLE("regression task kind");
  }
#undef X_AT
}

/* The kind of the task, from its def. */
static RegKind kind_of(const Task *t) {
  if (t->def == &adding_def)
    return REG_ADDING;
  if (t->def == &ar2_def)
    return REG_AR2;
  if (t->def == &delay_sum_def)
    return REG_DELAY_SUM;
  if (t->def == &moving_average_def)
    return REG_MOVING_AVERAGE;
  if (t->def == &sinmix_def)
    return REG_SINMIX;
  UNREACHABLE("regression task def");
}

/* Train, valid and test draw from disjoint rng streams per (split, index); real-valued sequences
 * from different streams never coincide in practice. */
static void reg_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) {
  Rng r;
  task_rng(t, "batch", split, index, &r);
  for (int b = 0; b < out->B; b++)
    reg_sample(kind_of(t), &r, out->T, out->B, t->shape.in_dim, b, out->x, out->y);
}

static int reg_new(Task *t, int channels) {
  t->shape.in_dim = channels;
  t->shape.out_dim = 1;
  t->shape.length = task_int(t, "length");
  t->batch = reg_batch;
  return 0;
}

int adding_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return reg_new(t, task_int(t, "noise_channels") + 1);
}
int ar2_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return reg_new(t, task_int(t, "channels"));
}
int delay_sum_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return reg_new(t, task_int(t, "channels"));
}
int moving_average_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return reg_new(t, task_int(t, "channels"));
}
int sinmix_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  return reg_new(t, task_int(t, "channels"));
}
