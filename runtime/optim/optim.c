/* optim.c: SGD with momentum, Adam and AdamW as PyTorch defines them, over groups of tensors whose
 * moments live in one block; learning-rate schedules with warmup; global gradient-norm clipping. */
#include "optim.h"

#include <math.h>
#include <string.h>

#include "support.h"

Opt *opt_new(OptKind kind) {
  CHECK(kind == OPT_SGD || kind == OPT_ADAM || kind == OPT_ADAMW);
  Opt *o = xcalloc(1, sizeof *o);
  o->kind = kind;
  return o;
}

void opt_free(Opt *o) {
  if (!o)
    return;
  for (int g = 0; g < o->ngroups; g++)
    free(o->groups[g].tensors);
  free(o->groups);
  memuse_free(o->state);
  free(o);
}

int opt_group(Opt *o, OptHyper h) {
  OptGroup g = {h, NULL, 0, 0};
  VEC_PUSH(o->groups, o->ngroups, o->capgroups, g);
  return o->ngroups - 1;
}

size_t opt_state_size(const Opt *o) { return (o->kind == OPT_SGD ? 1 : 2) * o->nparams; }

void opt_add(Opt *o, int group, float *param, float *grad, size_t n) {
  CHECK(group >= 0 && group < o->ngroups);
  CHECK(o->step == 0); /* the state is laid out before training starts */
  OptGroup *g = &o->groups[group];
  OptTensor t = {param, grad, n, o->nparams};
  VEC_PUSH(g->tensors, g->ntensors, g->cap, t);
  o->nparams += n;
  memuse_free(o->state);
  o->state = memuse_calloc(sizeof(float) * opt_state_size(o));
  o->m = o->state;
  o->v = o->kind == OPT_SGD ? NULL : o->state + o->nparams;
}

/* sgd: d = g + wd p; buf = momentum buf + d (buf starts at 0, so the first buf is d); p -= lr buf. */
void opt_sgd_apply(float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu) {
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * p[i];
    if (mu != 0)
      d = buf[i] = mu * buf[i] + d;
    p[i] -= lr * d;
  }
}

OptAdamK opt_adam_k(const OptHyper *h, double lr, int64_t step, bool decoupled) {
  /* 1 - b is taken in double, then rounded, as PyTorch passes (1 - beta) to its float kernels. */
  OptAdamK k;
  k.one_b1 = (float)(1.0 - h->beta1), k.b2 = (float)h->beta2, k.one_b2 = (float)(1.0 - h->beta2);
  k.eps = (float)h->eps, k.wd = (float)h->weight_decay;
  k.step_size = (float)(lr / (1.0 - pow(h->beta1, (double)step)));
  k.bc2_sqrt = (float)sqrt(1.0 - pow(h->beta2, (double)step));
  k.decay = decoupled ? (float)(1.0 - lr * h->weight_decay) : 1.0f;
  k.decoupled = decoupled;
  return k;
}

/* adam, adamw (see opt_adam_k for the coefficients):
 *   adamw: p *= 1 - lr wd;   adam: g += wd p
 *   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2     (with PyTorch's float rounding order)
 *   p -= (lr / (1 - b1^step)) m / (sqrt(v) / sqrt(1 - b2^step) + eps)   (PyTorch's order) */
void opt_adam_apply(const OptAdamK *k, float *param, const float *grad, float *m, float *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float p = param[i], g = grad[i];
    if (k->decoupled)
      p *= k->decay;
    else
      g += k->wd * p;
    m[i] += k->one_b1 * (g - m[i]); /* PyTorch's m.lerp_(g, 1 - b1) */
    v[i] = k->b2 * v[i] + k->one_b2 * g * g;
    p -= k->step_size * (m[i] / (sqrtf(v[i]) / k->bc2_sqrt + k->eps));
    param[i] = p;
  }
}

static void host_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu) {
  (void)ctx;
  opt_sgd_apply(p, g, buf, n, lr, wd, mu);
}
static void host_adam(void *ctx, const OptAdamK *k, float *p, const float *g, float *m, float *v, size_t n) {
  (void)ctx;
  opt_adam_apply(k, p, g, m, v, n);
}
static double host_sumsq(void *ctx, const float *x, size_t n) {
  (void)ctx;
  double ss = 0;
  for (size_t i = 0; i < n; i++)
    ss += (double)x[i] * x[i];
  return ss;
}
static void host_scale(void *ctx, float *x, float c, size_t n) {
  (void)ctx;
  for (size_t i = 0; i < n; i++)
    x[i] *= c;
}
static const OptApply host_apply = {NULL, host_sgd, host_adam, host_sumsq, host_scale};

void opt_step_on(Opt *o, double lr, float *state, const OptApply *a) {
  o->step++;
  float *m = state, *v = o->kind == OPT_SGD ? NULL : state + o->nparams;
  for (int gi = 0; gi < o->ngroups; gi++) {
    const OptGroup *g = &o->groups[gi];
    double glr = lr * g->h.lr_scale;
    for (int ti = 0; ti < g->ntensors; ti++) {
      const OptTensor *t = &g->tensors[ti];
      if (o->kind == OPT_SGD) {
        a->sgd(a->ctx, t->param, t->grad, m + t->off, t->n, (float)glr, (float)g->h.weight_decay, (float)g->h.momentum);
      } else {
        OptAdamK k = opt_adam_k(&g->h, glr, o->step, o->kind == OPT_ADAMW);
        a->adam(a->ctx, &k, t->param, t->grad, m + t->off, v + t->off, t->n);
      }
    }
  }
}

void opt_step(Opt *o, double lr) { opt_step_on(o, lr, o->state, &host_apply); }

void opt_zero_grad(Opt *o) {
  for (int gi = 0; gi < o->ngroups; gi++)
    for (int ti = 0; ti < o->groups[gi].ntensors; ti++) {
      const OptTensor *t = &o->groups[gi].tensors[ti];
      memset(t->grad, 0, t->n * sizeof(float));
    }
}

static double grad_norm_on(const Opt *o, const OptApply *a) {
  double ss = 0;
  for (int gi = 0; gi < o->ngroups; gi++)
    for (int ti = 0; ti < o->groups[gi].ntensors; ti++) {
      const OptTensor *t = &o->groups[gi].tensors[ti];
      ss += a->sumsq(a->ctx, t->grad, t->n);
    }
  return sqrt(ss);
}

double opt_grad_norm(const Opt *o) { return grad_norm_on(o, &host_apply); }

double opt_clip_on(Opt *o, double max_norm, const OptApply *a) {
  double norm = grad_norm_on(o, a);
  if (!(max_norm > 0) || !isfinite(norm))
    return norm;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1)
    return norm;
  for (int gi = 0; gi < o->ngroups; gi++)
    for (int ti = 0; ti < o->groups[gi].ntensors; ti++) {
      const OptTensor *t = &o->groups[gi].tensors[ti];
      a->scale(a->ctx, t->grad, (float)coef, t->n);
    }
  return norm;
}

double opt_clip(Opt *o, double max_norm) { return opt_clip_on(o, max_norm, &host_apply); }

int64_t opt_warmup_steps(double warmup, int64_t total) {
  CHECK(warmup >= 0);
  if (warmup < 1)
    return (int64_t)llround(warmup * (double)total);
  return (int64_t)warmup;
}

double opt_lr_at(const OptSchedule *s, int64_t step) {
  double t = (double)step + 1, W = (double)s->warmup;
  if (t <= W)
    return s->min_lr + (s->lr - s->min_lr) * t / W;
  double span = (double)s->total - W, p = span > 0 ? (t - W) / span : 1;
  p = p < 0 ? 0 : p > 1 ? 1 : p;
  switch (s->kind) {
  case OPT_CONSTANT:
    return s->lr;
  case OPT_COSINE:
    return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1 + cos(M_PI * p));
  case OPT_LINEAR:
    return s->lr + (s->min_lr - s->lr) * p;
  case OPT_INVERSE_SQRT:
    return fmax(s->min_lr, s->lr * sqrt((W > 1 ? W : 1) / t));
  default:
    UNREACHABLE("schedule kind");
  }
}

int opt_kind_from_name(const char *name, OptKind *out) {
  static const char *const names[] = {[OPT_SGD] = "sgd", [OPT_ADAM] = "adam", [OPT_ADAMW] = "adamw"};
  for (int i = 0; i < 3; i++)
    if (strcmp(names[i], name) == 0) {
      *out = (OptKind)i;
      return 0;
    }
  return -1;
}

int opt_schedule_from_name(const char *name, OptScheduleKind *out) {
  static const char *const names[] = {[OPT_CONSTANT] = "constant",
                                      [OPT_COSINE] = "cosine",
                                      [OPT_INVERSE_SQRT] = "inverse_sqrt",
                                      [OPT_LINEAR] = "linear"};
  for (int i = 0; i < 4; i++)
    if (strcmp(names[i], name) == 0) {
      *out = (OptScheduleKind)i;
      return 0;
    }
  return -1;
}
