/* test_optim.c: the optimizers' first steps against hand-computed values (PyTorch's formulas in the
 * comments), per-group hyperparameters, the schedules at their key steps, clipping, state restore. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "optim.h"

#define TOL 1e-6

/* lr_scale 1, no decay, no momentum, PyTorch's Adam defaults. */
static const OptHyper H = {1, 0, 0, 0.9, 0.999, 1e-8};

static OptHyper with_wd(double wd) {
  OptHyper h = H;
  h.weight_decay = wd;
  return h;
}

/* An optimizer over one tensor of n floats in one group. */
static Opt *single(OptKind kind, OptHyper h, float *p, float *g, size_t n) {
  Opt *o = opt_new(kind);
  opt_add(o, opt_group(o, h), p, g, n);
  return o;
}

/* ---- SGD ---- */

Test(sgd, plain_step) {
  /* torch.optim.SGD(lr=0.1): p -= lr * g */
  float p[2] = {1, -2}, g[2] = {0.5f, 0.25f};
  Opt *o = single(OPT_SGD, H, p, g, 2);
  opt_step(o, 0.1);
  cr_assert_float_eq(p[0], 0.95f, TOL);
  cr_assert_float_eq(p[1], -2.025f, TOL);
  cr_assert_eq(o->step, 1);
  opt_free(o);
}

Test(sgd, momentum_two_steps) {
  /* momentum 0.9: buf1 = g1 = 0.5, p1 = 1 - 0.1 * 0.5 = 0.95;
   * buf2 = 0.9 * 0.5 + 0.5 = 0.95, p2 = 0.95 - 0.1 * 0.95 = 0.855 */
  OptHyper h = H;
  h.momentum = 0.9;
  float p[1] = {1}, g[1] = {0.5f};
  Opt *o = single(OPT_SGD, h, p, g, 1);
  opt_step(o, 0.1);
  cr_assert_float_eq(p[0], 0.95f, TOL);
  cr_assert_float_eq(o->m[0], 0.5f, TOL);
  opt_step(o, 0.1);
  cr_assert_float_eq(o->m[0], 0.95f, TOL);
  cr_assert_float_eq(p[0], 0.855f, TOL);
  opt_free(o);
}

Test(sgd, weight_decay_is_l2) {
  /* d = g + wd p = 0.5 + 0.1 * 2 = 0.7; p = 2 - 0.1 * 0.7 = 1.93 */
  float p[1] = {2}, g[1] = {0.5f};
  Opt *o = single(OPT_SGD, with_wd(0.1), p, g, 1);
  opt_step(o, 0.1);
  cr_assert_float_eq(p[0], 1.93f, TOL);
  cr_assert_float_eq(g[0], 0.5f, 0); /* the gradient is left as it was */
  opt_free(o);
}

Test(sgd, state_is_one_moment) {
  float p[3] = {0}, g[3] = {0};
  Opt *o = single(OPT_SGD, H, p, g, 3);
  cr_assert_eq(opt_state_size(o), 3);
  cr_assert_null(o->v);
  opt_free(o);
}

/* ---- Adam and AdamW ---- */

Test(adam, first_step_moves_each_param_by_lr) {
  /* t = 1: m = (1 - b1) g, v = (1 - b2) g^2; m / (1 - b1) = g, sqrt(v / (1 - b2)) = |g|:
   * p -= lr g / (|g| + eps), a step of lr against the sign of g */
  float p[3] = {1, 1, 1}, g[3] = {0.5f, -3, 1e-3f};
  Opt *o = single(OPT_ADAM, H, p, g, 3);
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 0.99f, TOL);
  cr_assert_float_eq(p[1], 1.01f, TOL);
  cr_assert_float_eq(p[2], 1 - 0.01 * 1e-3 / (1e-3 + 1e-8), TOL);
  cr_assert_float_eq(o->m[0], 0.05f, TOL);
  cr_assert_float_eq(o->v[0], 0.00025f, 1e-9);
  opt_free(o);
}

Test(adam, two_steps_by_hand) {
  /* g1 = 0.5, g2 = -0.25, lr 0.01:
   * t=1: m = 0.05, v = 0.00025, p = 1 - 0.01 * 0.5 / (0.5 + 1e-8) = 0.9900000002
   * t=2: m = 0.02, v = 0.00031225, bc1 = 0.19, bc2 = 0.001999,
   *      p = p - 0.01 / 0.19 * 0.02 / (sqrt(0.00031225) / sqrt(0.001999) + 1e-8) = 0.98733663 */
  float p[1] = {1}, g[1] = {0.5f};
  Opt *o = single(OPT_ADAM, H, p, g, 1);
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 0.9900000002, TOL);
  g[0] = -0.25f;
  opt_step(o, 0.01);
  cr_assert_float_eq(o->m[0], 0.02f, TOL);
  cr_assert_float_eq(o->v[0], 0.00031225f, 1e-9);
  cr_assert_float_eq(p[0], 0.9873366298707846, TOL);
  opt_free(o);
}

Test(adam, weight_decay_is_l2_in_the_gradient) {
  /* g' = g + wd p = -0.1 + 0.5 * 1 = 0.4 > 0: the first step goes down by lr, against g's own sign */
  float p[1] = {1}, g[1] = {-0.1f};
  Opt *o = single(OPT_ADAM, with_wd(0.5), p, g, 1);
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 0.99f, TOL);
  cr_assert_float_eq(o->m[0], 0.04f, TOL); /* (1 - b1) g' */
  opt_free(o);
}

Test(adamw, weight_decay_is_decoupled) {
  /* torch.optim.AdamW: p *= 1 - lr wd; then Adam on g alone:
   * p = 1 * (1 - 0.01 * 0.5) + 0.01 * 0.1 / (0.1 + 1e-8) = 0.995 + 0.01 = 1.005 */
  float p[1] = {1}, g[1] = {-0.1f};
  Opt *o = single(OPT_ADAMW, with_wd(0.5), p, g, 1);
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 1.005f, TOL);
  cr_assert_float_eq(o->m[0], -0.01f, TOL); /* (1 - b1) g: the decay stays out of the moments */
  opt_free(o);
}

Test(adamw, two_steps_by_hand) {
  /* wd 0.1, lr 0.01, g1 = 0.5, g2 = -0.25: the two steps of adam.two_steps_by_hand, each after
   * p *= 0.999: 0.9890000002, then 0.98534762987 */
  float p[1] = {1}, g[1] = {0.5f};
  Opt *o = single(OPT_ADAMW, with_wd(0.1), p, g, 1);
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 0.9890000002, TOL);
  g[0] = -0.25f;
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 0.9853476298705847, TOL);
  opt_free(o);
}

Test(adam, state_is_two_moments_in_one_block) {
  float p[5] = {0}, g[5] = {1, 1, 1, 1, 1};
  Opt *o = opt_new(OPT_ADAM);
  int gr = opt_group(o, H);
  opt_add(o, gr, p, g, 2);
  opt_add(o, gr, p + 2, g + 2, 3);
  cr_assert_eq(o->nparams, 5);
  cr_assert_eq(opt_state_size(o), 10);
  cr_assert_eq(o->m, o->state);
  cr_assert_eq(o->v, o->state + 5);
  cr_assert_eq(o->groups[0].tensors[1].off, 2);
  opt_step(o, 0.1);
  for (int i = 0; i < 5; i++) {
    cr_assert_float_eq(o->m[i], 0.1f, TOL);
    cr_assert_float_eq(o->v[i], 0.001f, 1e-9);
  }
  opt_free(o);
}

/* ---- Groups ---- */

Test(groups, lr_scale_and_weight_decay_per_group) {
  /* sgd, lr 0.1: group 0 (lr_scale 0.5): p = 1 - 0.05 * 1 = 0.95;
   * group 1 (lr_scale 2, wd 0.1): p = 1 - 0.2 * (1 + 0.1) = 0.78 */
  float p[2] = {1, 1}, g[2] = {1, 1};
  Opt *o = opt_new(OPT_SGD);
  OptHyper a = H, b = H;
  a.lr_scale = 0.5;
  b.lr_scale = 2;
  b.weight_decay = 0.1;
  opt_add(o, opt_group(o, a), p, g, 1);
  opt_add(o, opt_group(o, b), p + 1, g + 1, 1);
  opt_step(o, 0.1);
  cr_assert_float_eq(p[0], 0.95f, TOL);
  cr_assert_float_eq(p[1], 0.78f, TOL);
  opt_free(o);
}

Test(groups, adamw_decay_only_where_the_group_says) {
  /* The LRU setup: no weight decay on the recurrent group. lr 0.01, wd 0.5 vs 0, g = 0.1 each:
   * decayed: 1 * (1 - 0.005) - 0.01 = 0.985; recurrent (lr_scale 0.5): 1 - 0.005 = 0.995 */
  float p[2] = {1, 1}, g[2] = {0.1f, 0.1f};
  Opt *o = opt_new(OPT_ADAMW);
  OptHyper rec = H;
  rec.lr_scale = 0.5;
  opt_add(o, opt_group(o, with_wd(0.5)), p, g, 1);
  opt_add(o, opt_group(o, rec), p + 1, g + 1, 1);
  opt_step(o, 0.01);
  cr_assert_float_eq(p[0], 0.985f, TOL);
  cr_assert_float_eq(p[1], 0.995f, TOL);
  opt_free(o);
}

Test(groups, betas_and_eps_per_group) {
  /* Two steps, g = 1 then 0; group 1 has beta1 0.5. t=2: m = b1 (1 - b1), v = b2 (1 - b2),
   * update = lr m / (1 - b1^2) / (sqrt(v / (1 - b2^2)) + eps) */
  float p[2] = {0, 0}, g[2] = {1, 1};
  Opt *o = opt_new(OPT_ADAM);
  OptHyper b = H;
  b.beta1 = 0.5;
  b.eps = 1e-3;
  opt_add(o, opt_group(o, H), p, g, 1);
  opt_add(o, opt_group(o, b), p + 1, g + 1, 1);
  opt_step(o, 1);
  g[0] = g[1] = 0;
  opt_step(o, 1);
  double s1a = 1 / (1 + 1e-8), s1b = 1 / (1 + 1e-3);
  double va = 0.999 * 0.001, vb = va, bc2 = 1 - 0.999 * 0.999;
  double s2a = 0.9 * 0.1 / (1 - 0.81) / (sqrt(va / bc2) + 1e-8);
  double s2b = 0.5 * 0.5 / (1 - 0.25) / (sqrt(vb / bc2) + 1e-3);
  cr_assert_float_eq(p[0], -(s1a + s2a), TOL);
  cr_assert_float_eq(p[1], -(s1b + s2b), TOL);
  opt_free(o);
}

/* ---- Schedules ---- */

static OptSchedule sched(OptScheduleKind kind, double lr, double min_lr, int64_t warmup, int64_t total) {
  OptSchedule s = {kind, lr, min_lr, warmup, total};
  return s;
}

Test(schedule, constant_with_warmup) {
  OptSchedule s = sched(OPT_CONSTANT, 1, 0, 4, 100);
  cr_assert_float_eq(opt_lr_at(&s, 0), 0.25, 1e-12); /* update 1 of 4 */
  cr_assert_float_eq(opt_lr_at(&s, 1), 0.5, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 3), 1, 1e-12); /* the end of warmup */
  cr_assert_float_eq(opt_lr_at(&s, 50), 1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 99), 1, 1e-12);
}

Test(schedule, constant_without_warmup) {
  OptSchedule s = sched(OPT_CONSTANT, 3e-4, 0, 0, 10);
  cr_assert_float_eq(opt_lr_at(&s, 0), 3e-4, 1e-15);
  cr_assert_float_eq(opt_lr_at(&s, 9), 3e-4, 1e-15);
}

Test(schedule, warmup_rises_from_min_lr) {
  OptSchedule s = sched(OPT_COSINE, 1, 0.1, 4, 100);
  cr_assert_float_eq(opt_lr_at(&s, 0), 0.1 + 0.9 * 0.25, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 3), 1, 1e-12);
}

Test(schedule, cosine_to_min_lr) {
  /* W = 10, total = 110: p = (t - 10) / 100 with t = step + 1 */
  OptSchedule s = sched(OPT_COSINE, 1, 0.1, 10, 110);
  cr_assert_float_eq(opt_lr_at(&s, 0), 0.1 + 0.9 * 0.1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 9), 1, 1e-12); /* end of warmup */
  cr_assert_float_eq(opt_lr_at(&s, 10), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.01)), 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 59), 0.55, 1e-12); /* middle: p = 0.5 */
  cr_assert_float_eq(opt_lr_at(&s, 84), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.75)), 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 109), 0.1, 1e-12); /* the last update */
  cr_assert_float_eq(opt_lr_at(&s, 500), 0.1, 1e-12); /* past the end */
}

Test(schedule, linear_to_min_lr) {
  OptSchedule s = sched(OPT_LINEAR, 1, 0, 10, 110);
  cr_assert_float_eq(opt_lr_at(&s, 0), 0.1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 9), 1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 10), 0.99, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 59), 0.5, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 109), 0, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 200), 0, 1e-12);
}

Test(schedule, inverse_sqrt_after_warmup) {
  /* fairseq's inverse_sqrt: lr sqrt(W / t) after warmup: 1 at t = 4, 1/2 at t = 16, 1/4 at t = 64 */
  OptSchedule s = sched(OPT_INVERSE_SQRT, 1, 0, 4, 1000);
  cr_assert_float_eq(opt_lr_at(&s, 0), 0.25, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 3), 1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 4), sqrt(4.0 / 5), 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 15), 0.5, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 63), 0.25, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 999), sqrt(4.0 / 1000), 1e-12);
}

Test(schedule, inverse_sqrt_floor_and_no_warmup) {
  OptSchedule s = sched(OPT_INVERSE_SQRT, 1, 0.3, 0, 1000);
  cr_assert_float_eq(opt_lr_at(&s, 0), 1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 3), 0.5, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 99), 0.3, 1e-12); /* 0.1 < min_lr */
}

Test(schedule, warmup_as_fraction_or_steps) {
  cr_assert_eq(opt_warmup_steps(0.1, 1000), 100);
  cr_assert_eq(opt_warmup_steps(0.05, 50), 3); /* 2.5 rounds up */
  cr_assert_eq(opt_warmup_steps(0, 1000), 0);
  cr_assert_eq(opt_warmup_steps(1, 1000), 1);
  cr_assert_eq(opt_warmup_steps(4000, 50000), 4000);
}

Test(schedule, all_warmup) {
  OptSchedule s = sched(OPT_COSINE, 1, 0, 10, 10);
  cr_assert_float_eq(opt_lr_at(&s, 9), 1, 1e-12);
  cr_assert_float_eq(opt_lr_at(&s, 10), 0, 1e-12);
}

Test(schedule, names) {
  OptScheduleKind k;
  cr_assert_eq(opt_schedule_from_name("inverse_sqrt", &k), 0);
  cr_assert_eq(k, OPT_INVERSE_SQRT);
  cr_assert_eq(opt_schedule_from_name("cosine", &k), 0);
  cr_assert_eq(k, OPT_COSINE);
  cr_assert_eq(opt_schedule_from_name("step", &k), -1);
  OptKind o;
  cr_assert_eq(opt_kind_from_name("adamw", &o), 0);
  cr_assert_eq(o, OPT_ADAMW);
  cr_assert_eq(opt_kind_from_name("sgd", &o), 0);
  cr_assert_eq(o, OPT_SGD);
  cr_assert_eq(opt_kind_from_name("lion", &o), -1);
}

/* ---- Clipping ---- */

/* Two groups, gradients 3 and 4: the global norm is 5. */
static Opt *norm5(float *p, float *g) {
  g[0] = 3, g[1] = 4;
  Opt *o = opt_new(OPT_SGD);
  opt_add(o, opt_group(o, H), p, g, 1);
  opt_add(o, opt_group(o, H), p + 1, g + 1, 1);
  return o;
}

Test(clip, scales_to_the_max_norm_and_returns_the_norm_before) {
  /* torch.nn.utils.clip_grad_norm_(max_norm=1): g *= 1 / (5 + 1e-6) */
  float p[2] = {0}, g[2];
  Opt *o = norm5(p, g);
  cr_assert_float_eq(opt_grad_norm(o), 5, 1e-12);
  double norm = opt_clip(o, 1); /* assertion macros evaluate their arguments more than once */
  cr_assert_float_eq(norm, 5, 1e-12);
  cr_assert_float_eq(g[0], 3 / (5 + 1e-6), 1e-7);
  cr_assert_float_eq(g[1], 4 / (5 + 1e-6), 1e-7);
  cr_assert_float_eq(opt_grad_norm(o), 1, 1e-6);
  opt_free(o);
}

Test(clip, leaves_small_gradients) {
  float p[2] = {0}, g[2];
  Opt *o = norm5(p, g);
  double norm = opt_clip(o, 10);
  cr_assert_float_eq(norm, 5, 1e-12);
  cr_assert_eq(g[0], 3);
  cr_assert_eq(g[1], 4);
  opt_free(o);
}

Test(clip, zero_is_off) {
  float p[2] = {0}, g[2];
  Opt *o = norm5(p, g);
  double norm = opt_clip(o, 0);
  cr_assert_float_eq(norm, 5, 1e-12);
  cr_assert_eq(g[0], 3);
  opt_free(o);
}

Test(clip, non_finite_norm_is_reported_not_spread) {
  float p[2] = {0}, g[2];
  Opt *o = norm5(p, g);
  g[0] = INFINITY;
  double norm = opt_clip(o, 1);
  cr_assert(isinf(norm));
  cr_assert_eq(g[1], 4);
  g[0] = NAN;
  norm = opt_clip(o, 1);
  cr_assert(isnan(norm));
  cr_assert_eq(g[1], 4);
  opt_free(o);
}

Test(clip, zero_grad_clears_every_tensor) {
  float p[2] = {0}, g[2];
  Opt *o = norm5(p, g);
  opt_zero_grad(o);
  cr_assert_eq(g[0], 0);
  cr_assert_eq(g[1], 0);
  cr_assert_eq(opt_grad_norm(o), 0);
  opt_free(o);
}

/* ---- State save and restore ---- */

#define NP 7

/* The gradient of 0.5 |p - target|^2 with a target that moves with the step. */
static void grads(const float *p, float *g, int64_t step) {
  for (int i = 0; i < NP; i++)
    g[i] = p[i] - (float)sin(0.3 * i + 0.1 * (double)step);
}

/* An optimizer over p in two groups (3 and 4 floats). */
static Opt *two_groups(OptKind kind, float *p, float *g) {
  Opt *o = opt_new(kind);
  OptHyper a = H, b = H;
  a.momentum = 0.9;
  a.weight_decay = 0.01;
  b.lr_scale = 0.5;
  b.beta1 = 0.8;
  opt_add(o, opt_group(o, a), p, g, 3);
  opt_add(o, opt_group(o, b), p + 3, g + 3, 4);
  return o;
}

static void run(Opt *o, float *p, float *g, int n) {
  for (int i = 0; i < n; i++) {
    grads(p, g, o->step);
    opt_clip(o, 1.0);
    opt_step(o, 0.05);
  }
}

static void expect_restore_identical(OptKind kind) {
  float p[NP], g[NP];
  for (int i = 0; i < NP; i++)
    p[i] = (float)i * 0.25f - 1;
  Opt *a = two_groups(kind, p, g);
  run(a, p, g, 3);
  /* The checkpoint: params, the state block and the step. */
  float saved_p[NP], saved_state[2 * NP];
  memcpy(saved_p, p, sizeof p);
  memcpy(saved_state, a->state, opt_state_size(a) * sizeof(float));
  int64_t saved_step = a->step;
  run(a, p, g, 2);

  float q[NP], h[NP];
  memcpy(q, saved_p, sizeof q);
  Opt *b = two_groups(kind, q, h);
  cr_assert_eq(opt_state_size(b), opt_state_size(a));
  memcpy(b->state, saved_state, opt_state_size(b) * sizeof(float));
  b->step = saved_step;
  run(b, q, h, 2);
  cr_assert_eq(memcmp(p, q, sizeof p), 0, "params differ after restore");
  cr_assert_eq(memcmp(a->state, b->state, opt_state_size(a) * sizeof(float)), 0, "state differs after restore");
  cr_assert_eq(a->step, 5);
  cr_assert_eq(b->step, 5);
  opt_free(a);
  opt_free(b);
}

Test(state, restore_gives_identical_next_steps_adamw) { expect_restore_identical(OPT_ADAMW); }
Test(state, restore_gives_identical_next_steps_adam) { expect_restore_identical(OPT_ADAM); }
Test(state, restore_gives_identical_next_steps_sgd) { expect_restore_identical(OPT_SGD); }

Test(state, the_step_counter_is_part_of_the_state) {
  /* The same moments with step 0 instead of 3: a different bias correction, different params. */
  float p[NP], g[NP], q[NP], h[NP];
  for (int i = 0; i < NP; i++)
    p[i] = q[i] = (float)i;
  Opt *a = two_groups(OPT_ADAM, p, g), *b = two_groups(OPT_ADAM, q, h);
  run(a, p, g, 3);
  memcpy(q, p, sizeof q);
  memcpy(b->state, a->state, opt_state_size(a) * sizeof(float));
  grads(p, g, 3);
  grads(q, h, 3);
  opt_step(a, 0.05);
  opt_step(b, 0.05);
  cr_assert_neq(memcmp(p, q, sizeof p), 0);
  opt_free(a);
  opt_free(b);
}
