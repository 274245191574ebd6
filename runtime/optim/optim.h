/* optim.h: the optimizers of training (SGD with momentum, Adam, AdamW) over groups of parameter
 * tensors with their own hyperparameters, learning-rate schedules with warmup, global-norm clipping. */
#ifndef CELLC_OPTIM_H
#define CELLC_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } OptKind;

/* The hyperparameters of one group: [train], or an [optim.TAG] section over it. */
typedef struct OptHyper {
  double lr_scale;     /* the group's lr = the schedule's lr * lr_scale */
  double weight_decay; /* adamw: decoupled, p *= 1 - lr * wd; sgd, adam: L2, wd * p added to the gradient */
  double momentum;     /* sgd: buf = momentum * buf + g (PyTorch, dampening 0, no Nesterov) */
  double beta1, beta2; /* adam, adamw */
  double eps;          /* adam, adamw */
} OptHyper;

/* One tensor the optimizer updates: views into the parameter and gradient blocks. */
typedef struct OptTensor {
  float *param; /* (n) */
  float *grad;  /* (n) */
  size_t n;
  size_t off; /* where its moments start in m and v */
} OptTensor;

typedef struct OptGroup {
  OptHyper h;
  OptTensor *tensors;
  int ntensors, cap;
} OptGroup;

/* The optimizer: its groups and its state, one block a checkpoint can write (m, v and step). */
typedef struct Opt {
  OptKind kind;
  OptGroup *groups;
  int ngroups, capgroups;
  size_t nparams; /* floats over every tensor */
  float *state;   /* (opt_state_size) the one block m and v live in */
  float *m;       /* (nparams) adam, adamw: first moment; sgd: momentum buffer */
  float *v;       /* (nparams) adam, adamw: second moment; NULL for sgd */
  int64_t step;   /* updates taken: the next update is number step + 1 in bias correction */
} Opt;

Opt *opt_new(OptKind kind);
void opt_free(Opt *o);
/* Adds a group; returns its index. */
int opt_group(Opt *o, OptHyper h);
/* Adds a tensor to a group; its moments follow those of the tensors added before. Only before the
 * first step (the state is reallocated, zeroed). */
void opt_add(Opt *o, int group, float *param, float *grad, size_t n);
/* Floats in o->state: nparams for sgd, 2 * nparams for adam and adamw. */
size_t opt_state_size(const Opt *o);

/* One update of every tensor with the schedule's lr (each group scales it), then step += 1.
 * Adds nothing to and does not clear the gradients. */
void opt_step(Opt *o, double lr);
void opt_zero_grad(Opt *o);

/* The L2 norm of every gradient together. */
double opt_grad_norm(const Opt *o);
/* Global gradient-norm clipping as PyTorch's clip_grad_norm_: when max_norm > 0 and the norm is finite,
 * scales every gradient by min(1, max_norm / (norm + 1e-6)). Returns the norm before clipping. */
double opt_clip(Opt *o, double max_norm);

/* The per-tensor updates, over any memory: opt_step and opt_clip run them on the host; opt_step_on
 * and opt_clip_on call them through an OptApply (cellc train: the model's device operations). */
typedef struct OptAdamK { /* one Adam/AdamW update's coefficients at an lr and a step */
  float one_b1, b2, one_b2, eps, wd, step_size, bc2_sqrt, decay;
  bool decoupled;         /* adamw: p *= decay; adam: g += wd p */
} OptAdamK;             /* also the device operations' DevAdam (backend.h) */
OptAdamK opt_adam_k(const OptHyper *h, double lr, int64_t step, bool decoupled);
void opt_adam_apply(const OptAdamK *k, float *p, const float *g, float *m, float *v, size_t n);
void opt_sgd_apply(float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu);

typedef struct OptApply {
  void *ctx;
  void (*sgd)(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu);
  void (*adam)(void *ctx, const OptAdamK *k, float *p, const float *g, float *m, float *v, size_t n);
  double (*sumsq)(void *ctx, const float *x, size_t n);
  void (*scale)(void *ctx, float *x, float c, size_t n);
} OptApply;
/* opt_step with the moments in `state` (opt_state_size floats, laid out as o->state) and the
 * tensors' param and grad pointers in the memory `a` works on. */
void opt_step_on(Opt *o, double lr, float *state, const OptApply *a);
/* opt_clip through `a`. */
double opt_clip_on(Opt *o, double max_norm, const OptApply *a);

typedef enum { OPT_CONSTANT, OPT_COSINE, OPT_INVERSE_SQRT, OPT_LINEAR } OptScheduleKind;

/* The learning rate of every update. With t = step + 1 (updates counted from 1) and W warmup steps:
 *   t <= W: min_lr + (lr - min_lr) t / W              (linear warmup, reaching lr at update W)
 *   after:  constant      lr
 *           cosine        min_lr + (lr - min_lr) (1 + cos(pi p)) / 2,  p = (t - W) / (total - W)
 *           linear        lr + (min_lr - lr) p                         (min_lr at the last update)
 *           inverse_sqrt  max(min_lr, lr sqrt(max(W, 1) / t))
 * p is clamped to [0, 1]: past `total` the cosine and linear schedules stay at min_lr. */
typedef struct OptSchedule {
  OptScheduleKind kind;
  double lr, min_lr;
  int64_t warmup; /* W, in steps */
  int64_t total;  /* train.steps */
} OptSchedule;

/* train.warmup as steps: a value < 1 is a fraction of total (rounded), else a number of steps. */
int64_t opt_warmup_steps(double warmup, int64_t total);
double opt_lr_at(const OptSchedule *s, int64_t step);

/* Names as the configuration writes them ("sgd", "adam", "adamw"; "constant", "cosine",
 * "inverse_sqrt", "linear"); 0, or -1 for an unknown name. */
int opt_kind_from_name(const char *name, OptKind *out);
int opt_schedule_from_name(const char *name, OptScheduleKind *out);

#endif
