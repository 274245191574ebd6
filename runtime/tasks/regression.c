/* regression.c: the generated regression tasks read at the last step (MSE): adding, ar2, delay_sum,
 * moving_average and sinmix (docs/training.md "Tasks"; shared/seeds.md section 3). Real-valued
 * inputs drawn fresh per batch. */
#include <math.h>

#include "task_impl.h"

#define MAX_CHANNELS 1024
#define MAX_LENGTH 1000000

/* The keys of each task: the length, then its channels. */
static const TaskKey reg_keys[][2] = {
    {{"length", TKEY_INT, "80", 2, MAX_LENGTH, "T; one marker in each half"},
     {"noise_channels", TKEY_INT, "3", 1, MAX_CHANNELS, "U(0,1) channels; a marker channel comes after them"}},
    {{"length", TKEY_INT, "120", 1, MAX_LENGTH, "T; the target is the latent AR(2) value at the last step"},
     {"channels", TKEY_INT, "1", 1, MAX_CHANNELS, "N(0,1) distractor channels, independent of the target"}},
    {{"length", TKEY_INT, "120", 37, MAX_LENGTH, "T, at least 37 for the delay 36"},
     {"channels", TKEY_INT, "2", 1, MAX_CHANNELS, "N(0,1) channels; the target reads channel 1 (the first)"}},
    {{"length", TKEY_INT, "120", 8, MAX_LENGTH, "T, at least the window of 8"},
     {"channels", TKEY_INT, "2", 1, MAX_CHANNELS, "N(0,1) channels; the target reads channel 1 (the first)"}},
    {{"length", TKEY_INT, "120", 4, MAX_LENGTH, "T, the points sampled on [0, 1]"},
     {"channels", TKEY_INT, "4", 4, MAX_CHANNELS, "two sinusoids, a N(0, 0.1^2) channel, then unused mask channels (0)"}},
};
const TaskDef adding_def = {"adding", reg_keys[0], 2, TASK_LOSS_MSE, TASK_READ_LAST};
const TaskDef ar2_def = {"ar2", reg_keys[1], 2, TASK_LOSS_MSE, TASK_READ_LAST};
const TaskDef delay_sum_def = {"delay_sum", reg_keys[2], 2, TASK_LOSS_MSE, TASK_READ_LAST};
const TaskDef moving_average_def = {"moving_average", reg_keys[3], 2, TASK_LOSS_MSE, TASK_READ_LAST};
const TaskDef sinmix_def = {"sinmix", reg_keys[4], 2, TASK_LOSS_MSE, TASK_READ_LAST};

/* The delays of delay_sum: y = (1/4) sum_i u[T-1-d_i, 0]. */
static const int delays[4] = {4, 12, 24, 36};
#define AVG_WINDOW 8
#define AR2_BURN_IN 100

/* One sequence: row b of x [T, B, C]. */
typedef struct Seq {
  float *x;
  int T, B, C, b;
} Seq;

static float *at(const Seq *q, int t, int c) { return &q->x[((size_t)t * q->B + q->b) * q->C + c]; }

/* Channels [c0, c1) of every step: N(0,1). */
static void fill_normal(Rng *r, const Seq *q, int c0, int c1) {
  for (int t = 0; t < q->T; t++)
    for (int c = c0; c < c1; c++) *at(q, t, c) = (float)rng_normal(r);
}

/* Channels 0..C-2: U(0,1) noise; channel C-1: the marker. Target: channel 0 at the two markers. */
static float sample_adding(Rng *r, const Seq *q) {
  int T = q->T, C = q->C;
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C - 1; c++) *at(q, t, c) = (float)rng_uniform(r);
  int p1 = (int)rng_below(r, (uint64_t)(T / 2)), p2 = T / 2 + (int)rng_below(r, (uint64_t)(T - T / 2));
  *at(q, p1, C - 1) = 1;
  *at(q, p2, C - 1) = 1;
  return (float)((double)*at(q, p1, 0) + (double)*at(q, p2, 0));
}

/* Latent z_t = 1.6 z_{t-1} - 0.7 z_{t-2} + e_t, e ~ N(0, 0.05^2), from 0 with a burn-in so the
 * target z_T is near stationary at any T; the inputs are distractor noise drawn afterwards. */
static float sample_ar2(Rng *r, const Seq *q) {
  double z1 = 0, z2 = 0;
  for (int t = 0; t < AR2_BURN_IN + q->T; t++) {
    double z = 1.6 * z1 - 0.7 * z2 + 0.05 * rng_normal(r);
    z2 = z1;
    z1 = z;
  }
  fill_normal(r, q, 0, q->C);
  return (float)z1;
}

/* N(0,1) channels; the target: the mean of channel 0 at the delays before the last step. */
static float sample_delay_sum(Rng *r, const Seq *q) {
  fill_normal(r, q, 0, q->C);
  double s = 0;
  for (int i = 0; i < 4; i++) s += *at(q, q->T - 1 - delays[i], 0);
  return (float)(s / 4);
}

/* N(0,1) channels; the target: the mean of channel 0 over the last AVG_WINDOW steps. */
static float sample_moving_average(Rng *r, const Seq *q) {
  fill_normal(r, q, 0, q->C);
  double s = 0;
  for (int t = q->T - AVG_WINDOW; t < q->T; t++) s += *at(q, t, 0);
  return (float)(s / AVG_WINDOW);
}

/* s_k(tau) = sin(2 pi f_k tau + phi_k), f ~ U(1,7), phi ~ U(0, 2 pi), tau = t/(T-1);
 * y = (mean s1 last quarter - first quarter) + (mean s2 first quarter - last quarter). */
static float sample_sinmix(Rng *r, const Seq *q) {
  int T = q->T;
  double f1 = 1 + 6 * rng_uniform(r), f2 = 1 + 6 * rng_uniform(r);
  double ph1 = 2 * M_PI * rng_uniform(r), ph2 = 2 * M_PI * rng_uniform(r);
  for (int t = 0; t < T; t++) {
    double tau = (double)t / (T - 1);
    *at(q, t, 0) = (float)sin(2 * M_PI * f1 * tau + ph1);
    *at(q, t, 1) = (float)sin(2 * M_PI * f2 * tau + ph2);
    *at(q, t, 2) = (float)(0.1 * rng_normal(r));
  }
  int n = T / 4;
  double s1a = 0, s1b = 0, s2a = 0, s2b = 0;
  for (int t = 0; t < n; t++) {
    s1a += *at(q, t, 0);
    s2a += *at(q, t, 1);
    s1b += *at(q, T - n + t, 0);
    s2b += *at(q, T - n + t, 1);
  }
  return (float)((s1b - s1a) / n + (s2a - s2b) / n);
}

/* The regression tasks: each one's generator and its input channels (the channels key's value
 * and the extra ones: adding's marker). */
typedef struct RegTask {
  const TaskDef *def;
  float (*sample)(Rng *r, const Seq *q); /* fills q, returns the target */
  int extra_channels;
} RegTask;

static const RegTask reg_tasks[] = {
    {&adding_def, sample_adding, 1},
    {&ar2_def, sample_ar2, 0},
    {&delay_sum_def, sample_delay_sum, 0},
    {&moving_average_def, sample_moving_average, 0},
    {&sinmix_def, sample_sinmix, 0},
};

static const RegTask *reg_task(const Task *t) {
  for (size_t i = 0; i < sizeof reg_tasks / sizeof reg_tasks[0]; i++)
    if (reg_tasks[i].def == t->def) return &reg_tasks[i];
  UNREACHABLE("regression task def");
}

/* Train, valid and test draw from disjoint rng streams per (split, index); real-valued sequences
 * from different streams never coincide in practice. */
static void reg_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) {
  Rng r;
  task_rng(t, "batch", split, index, &r);
  const RegTask *rt = reg_task(t);
  for (int b = 0; b < out->B; b++) {
    Seq q = {out->x, out->T, out->B, t->shape.in_dim, b};
    out->y[b] = rt->sample(&r, &q);
  }
}

/* Every regression task's constructor (task_impl.h's TASK_LIST). */
int regression_new(Task *t, char *err, size_t errlen) {
  (void)err, (void)errlen;
  t->shape.in_dim = task_int(t, t->def->keys[1].name) + reg_task(t)->extra_channels;
  t->shape.out_dim = 1;
  t->shape.length = task_int(t, "length");
  t->batch = reg_batch;
  return 0;
}
