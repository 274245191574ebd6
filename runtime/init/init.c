/* init.c: the initializers of spec sections 6 and 9. Elementwise ones draw one value per real
 * number (re then im for complex); orthogonal draws a Gaussian matrix and takes its QR. */
#include "init.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "support.h"

#define INIT_LIST(X)  /* id, name, min and max argument counts, ref_param, wraps */ \
  X(ZEROS, "zeros", 0, 0, false, false)               \
  X(ONES, "ones", 0, 0, false, false)                 \
  X(CONST, "const", 1, 1, false, false)               \
  X(UNIFORM, "uniform", 2, 2, false, false)           \
  X(NORMAL, "normal", 2, 2, false, false)             \
  X(GLOROT, "glorot", 0, 0, false, false)             \
  X(ORTHOGONAL, "orthogonal", 0, 1, false, false)     \
  X(STANDARD, "standard", 0, 0, false, false)         \
  X(CHRONO, "chrono", 1, 1, false, false)             \
  X(UGI, "ugi", 0, 0, false, false)                   \
  X(GUMBEL, "gumbel", 2, 2, false, false)             \
  X(LRU_NU, "lru_nu", 2, 2, false, false)             \
  X(LRU_THETA, "lru_theta", 1, 1, false, false)       \
  X(LRU_GAMMA, "lru_gamma", 1, 1, true, false)        \
  X(ARANGE, "arange", 2, 2, false, false)             \
  X(S4D_REAL, "s4d_real", 0, 0, false, false)         \
  X(LOG_UNIFORM, "log_uniform", 2, 2, false, false)   \
  X(INV_SOFTPLUS, "inv_softplus", 1, 1, false, true)   \
  X(ARANGE_POW, "arange_pow", 4, 4, false, false)     \
  X(CYCLE, "cycle", 1, 8, false, false)               \
  X(LOG_OF_UNIFORM, "log_of_uniform", 2, 2, false, false)

typedef enum {
#define X(id, name, lo, hi, ref, wraps) INIT_##id,
  INIT_LIST(X)
#undef X
  INIT_COUNT
} InitKind;

static const InitDef init_defs[] = {
#define X(id, name, lo, hi, ref, wraps) [INIT_##id] = {name, lo, hi, ref, wraps},
    INIT_LIST(X)
#undef X
};

static const char *const init_name_list[] = {
#define X(id, name, lo, hi, ref, wraps) name,
    INIT_LIST(X)
#undef X
};

_Static_assert(sizeof init_defs / sizeof init_defs[0] == INIT_COUNT, "one InitDef per initializer");

const InitDef *init_find(const char *name) {
  for (int i = 0; i < INIT_COUNT; i++)
    if (strcmp(init_defs[i].name, name) == 0) return &init_defs[i];
  return NULL;
}

int init_names(const char *const **names) {
  *names = init_name_list;
  return INIT_COUNT;
}

static int init_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int init_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* The arguments each random initializer needs while it draws. */
typedef struct Draw {
  InitKind kind;
  double a, b; /* uniform: lo, width; normal: mean, std; glorot, standard: bound, -;
                  chrono: tmax - 2, -; ugi, gumbel: lo of u, width of u; lru_nu: r_min^2,
                  r_max^2 - r_min^2; lru_theta: max_phase, -; log_uniform: log lo,
                  log hi - log lo; log_of_uniform: lo, hi - lo */
  double alpha, tau; /* gumbel (ugi: 0, 1) */
} Draw;

/* log u - log(1 - u) shifted and scaled; ugi is gumbel(0, 1), and (0 + x) / 1 == x exactly,
 * so the two give bit-identical values from the same rng state. */
static double gumbel_value(double u, double alpha, double tau) { return (alpha + log(u) - log(1.0 - u)) / tau; }

static double draw_one(const Draw *d, Rng *rng) {
  switch (d->kind) {
  case INIT_UNIFORM: return d->a + d->b * rng_uniform(rng);
  case INIT_NORMAL: return d->a + d->b * rng_normal(rng);
  case INIT_GLOROT:
  case INIT_STANDARD: return -d->a + 2.0 * d->a * rng_uniform(rng);
  case INIT_CHRONO: return log(1.0 + d->a * rng_uniform(rng)); /* log U(1, tmax - 1) */
  case INIT_UGI:
  case INIT_GUMBEL: return gumbel_value(d->a + d->b * rng_uniform(rng), d->alpha, d->tau);
  case INIT_LRU_NU: {
    double x = rng_uniform_open(rng) * d->b + d->a;
    /* Rounding may push x to 1 (nu = 0) or 0 (nu = inf); keep log(nu) finite. */
    x = fmin(fmax(x, DBL_MIN), nextafter(1.0, 0.0));
    return log(-0.5 * log(x));
  }
  case INIT_LRU_THETA: return log(d->a * rng_uniform_open(rng));
  case INIT_LOG_UNIFORM: return exp(d->a + d->b * rng_uniform(rng));
  /* u in (0, 1): lo = 0 never gives log(0) */
  case INIT_LOG_OF_UNIFORM: return log(d->a + d->b * rng_uniform_open(rng));
  default: UNREACHABLE("draw_one: not an elementwise random initializer");
  }
}

/* Householder QR of the m x n matrix a (row-major, m >= n), returning the n orthonormal
 * columns of Q in q (m x n, row-major) with each column multiplied by sign(R[k][k]), as
 * PyTorch's orthogonal_ does, so that the factorization is the unique one with diag(R) > 0. */
static void qr_orthonormal_columns(double *a, int m, int n, double *q) {
  double *v = xcalloc((size_t)m * (size_t)n, sizeof(double)); /* (n, m): Householder vectors */
  double *rdiag = xcalloc((size_t)n, sizeof(double));
  for (int k = 0; k < n; k++) {
    double *vk = v + (size_t)k * (size_t)m;
    double norm = 0;
    for (int i = k; i < m; i++) norm += a[(size_t)i * n + k] * a[(size_t)i * n + k];
    norm = sqrt(norm);
    if (norm == 0) continue; /* a zero column (probability 0): no reflection, R[k][k] = 0 */
    double x0 = a[(size_t)k * n + k];
    double alpha = x0 > 0 ? -norm : norm; /* reflect x onto alpha e1, away from x0: no cancellation */
    for (int i = k; i < m; i++) vk[i] = a[(size_t)i * n + k];
    vk[k] -= alpha;
    double vnorm = 0;
    for (int i = k; i < m; i++) vnorm += vk[i] * vk[i];
    vnorm = sqrt(vnorm);
    for (int i = k; i < m; i++) vk[i] /= vnorm;
    for (int j = k; j < n; j++) { /* A[k:, j] -= 2 v (v . A[k:, j]) */
      double dot = 0;
      for (int i = k; i < m; i++) dot += vk[i] * a[(size_t)i * n + j];
      for (int i = k; i < m; i++) a[(size_t)i * n + j] -= 2.0 * vk[i] * dot;
    }
    rdiag[k] = alpha;
  }
  /* Q = H_0 H_1 ... H_{n-1} [I_n; 0]: apply the reflections in reverse order. */
  memset(q, 0, sizeof(double) * (size_t)m * (size_t)n);
  for (int k = 0; k < n; k++) q[(size_t)k * n + k] = 1.0;
  for (int k = n - 1; k >= 0; k--) {
    const double *vk = v + (size_t)k * (size_t)m;
    if (rdiag[k] == 0) continue;
    for (int j = 0; j < n; j++) {
      double dot = 0;
      for (int i = k; i < m; i++) dot += vk[i] * q[(size_t)i * n + j];
      for (int i = k; i < m; i++) q[(size_t)i * n + j] -= 2.0 * vk[i] * dot;
    }
  }
  for (int j = 0; j < n; j++)
    if (rdiag[j] < 0)
      for (int i = 0; i < m; i++) q[(size_t)i * n + j] = -q[(size_t)i * n + j];
  free(v);
  free(rdiag);
}

/* A random [O, I] matrix with orthonormal rows (O <= I) or columns (O > I), as PyTorch's
 * orthogonal_: draw O x I Gaussians row-major, transpose when O < I, QR, transpose back. */
static void fill_orthogonal(int O, int I, Rng *rng, double *w) {
  size_t numel = (size_t)O * (size_t)I;
  double *g = xmalloc(sizeof(double) * (numel ? numel : 1));
  for (size_t i = 0; i < numel; i++) g[i] = rng_normal(rng);
  if (O >= I) qr_orthonormal_columns(g, O, I, w);
  else {
    double *gt = xmalloc(sizeof(double) * numel), *qt = xmalloc(sizeof(double) * numel);
    for (int r = 0; r < O; r++)
      for (int c = 0; c < I; c++) gt[(size_t)c * O + r] = g[(size_t)r * I + c];
    qr_orthonormal_columns(gt, I, O, qt); /* (I, O) */
    for (int r = 0; r < O; r++)
      for (int c = 0; c < I; c++) w[(size_t)r * I + c] = qt[(size_t)c * O + r];
    free(gt);
    free(qt);
  }
  free(g);
}

/* Checks the arguments of `kind` and sets up its draw; 0 or -1 with a message. */
static int init_prepare(InitKind kind, const double *args, int rank, const int *shape, int H, Draw *d, char *err,
                        size_t errlen) {
  /* d: the param's first size; of a rank-3 param [NH, O, I] (a matrix per head) its last, and
   * fan_in = I, fan_out = O */
  int first = rank == 0 ? 1 : rank == 3 ? shape[2] : shape[0];
  double fan_in = rank == 0 ? 1 : rank == 1 ? shape[0] : rank == 2 ? shape[1] : shape[2];
  double fan_out = rank == 0 ? 1 : rank == 3 ? shape[1] : shape[0];
  d->kind = kind;
  switch (kind) {
  case INIT_UNIFORM:
    if (args[0] > args[1]) return init_fail(err, errlen, "uniform(lo, hi) needs lo <= hi, got uniform(%g, %g)", args[0], args[1]);
    d->a = args[0], d->b = args[1] - args[0];
    if (!isfinite(d->b)) return init_fail(err, errlen, "uniform(%g, %g): the range is too wide", args[0], args[1]);
    return 0;
  case INIT_NORMAL:
    if (args[1] < 0) return init_fail(err, errlen, "normal(mean, std) needs std >= 0, got normal(%g, %g)", args[0], args[1]);
    d->a = args[0], d->b = args[1];
    return 0;
  case INIT_GLOROT:
    d->a = fan_in + fan_out > 0 ? sqrt(6.0 / (fan_in + fan_out)) : 0;
    return 0;
  case INIT_STANDARD:
    if (H <= 0) return init_fail(err, errlen, "standard needs the cell's first state to have a positive size, got %d", H);
    d->a = 1.0 / sqrt((double)H);
    return 0;
  case INIT_CHRONO:
    if (!(args[0] > 2)) return init_fail(err, errlen, "chrono(tmax) needs tmax > 2, got chrono(%g)", args[0]);
    d->a = args[0] - 2.0;
    return 0;
  case INIT_UGI:
  case INIT_GUMBEL:
    if (first < 2)
      return init_fail(err, errlen, "%s needs a param whose first size is at least 2, got %s%d",
                       kind == INIT_UGI ? "ugi" : "gumbel", rank == 0 ? "a scalar, size " : "size ", first);
    d->a = 1.0 / first, d->b = 1.0 - 2.0 / first; /* u ~ U(1/d, 1 - 1/d) */
    d->alpha = 0, d->tau = 1;
    if (kind == INIT_GUMBEL) {
      if (!(args[1] > 0)) return init_fail(err, errlen, "gumbel(alpha, tau) needs tau > 0, got gumbel(%g, %g)", args[0], args[1]);
      d->alpha = args[0], d->tau = args[1];
    }
    return 0;
  case INIT_LRU_NU:
    if (!(0 <= args[0] && args[0] < args[1] && args[1] <= 1))
      return init_fail(err, errlen, "lru_nu(r_min, r_max) needs 0 <= r_min < r_max <= 1, got lru_nu(%g, %g)", args[0], args[1]);
    d->a = args[0] * args[0], d->b = args[1] * args[1] - args[0] * args[0];
    return 0;
  case INIT_LRU_THETA:
    if (!(args[0] > 0)) return init_fail(err, errlen, "lru_theta(max_phase) needs max_phase > 0, got lru_theta(%g)", args[0]);
    d->a = args[0];
    return 0;
  case INIT_ARANGE_POW: {
    int bad;
    return init_check_args("arange_pow", args, 4, &bad, err, errlen);
  }
  case INIT_LOG_OF_UNIFORM: {
    int bad;
    if (init_check_args("log_of_uniform", args, 2, &bad, err, errlen) != 0) return -1;
    d->a = args[0], d->b = args[1] - args[0];
    return 0;
  }
  case INIT_LOG_UNIFORM: {
    int bad;
    if (init_check_args("log_uniform", args, 2, &bad, err, errlen) != 0) return -1;
    d->a = log(args[0]), d->b = log(args[1]) - log(args[0]);
    return 0;
  }
  default: return 0;
  }
}

int init_check_args(const char *name, const double *args, int nargs, int *bad, char *err, size_t errlen) {
  *bad = 0;
  if (!strcmp(name, "log_uniform") && nargs == 2) {
    /* exp(U(log lo, log hi)): log lo must exist; lo == hi is the constant lo, as uniform(c, c) is c. */
    if (!(args[0] > 0)) return init_fail(err, errlen, "log_uniform(lo, hi) needs lo > 0, got log_uniform(%g, %g)", args[0], args[1]);
    *bad = 1;
    if (!(args[1] >= args[0]))
      return init_fail(err, errlen, "log_uniform(lo, hi) needs hi >= lo, got log_uniform(%g, %g)", args[0], args[1]);
  }
  if (!strcmp(name, "log_of_uniform") && nargs == 2) {
    /* log U(lo, hi): lo = 0 is allowed (Gated DeltaNet's A_log = log U(0, 16)), u is never 0 */
    if (!(args[0] >= 0))
      return init_fail(err, errlen, "log_of_uniform(lo, hi) needs lo >= 0, got log_of_uniform(%g, %g)", args[0], args[1]);
    *bad = 1;
    if (!(args[1] > args[0]))
      return init_fail(err, errlen, "log_of_uniform(lo, hi) needs hi > lo, got log_of_uniform(%g, %g)", args[0], args[1]);
  }
  if (!strcmp(name, "arange_pow") && nargs == 4) {
    /* (step j)^p for j = 0, 1, ...: a real power of a non-negative base, 0^p = 0 (not inf, not 1) */
    *bad = 2;
    if (!(args[2] >= 0))
      return init_fail(err, errlen, "arange_pow(start, scale, step, p) needs step >= 0, got step %g", args[2]);
    *bad = 3;
    if (!(args[3] > 0)) return init_fail(err, errlen, "arange_pow(start, scale, step, p) needs p > 0, got p %g", args[3]);
  }
  return 0;
}

double init_inv_softplus(double x) {
  /* For x > 1, log(expm1(x)) = x + log(1 - e^-x): no overflow of expm1 past x = 709, and the log's
   * argument lies in (0.63, 1). For x <= 1, expm1 keeps full relative precision down to the
   * smallest x (log(expm1(1e-300)) = log(1e-300)), where log(exp(x) - 1) would give log(0). */
  return x > 1 ? x + log(-expm1(-x)) : log(expm1(x));
}

int init_fill_wrapped(const char *wrap, const char *name, const double *args, int nargs, const double *ref, int rank,
                      const int *shape, bool cplx, int H, Rng *rng, double *out, char *err, size_t errlen) {
  if (!wrap) return init_fill(name, args, nargs, ref, rank, shape, cplx, H, rng, out, err, errlen);
  const InitDef *w = init_find(wrap), *in = init_find(name);
  if (!w) return init_fail(err, errlen, "unknown initializer '%s'", wrap);
  if (!w->wraps) return init_fail(err, errlen, "%s does not take an initializer as its argument", wrap);
  if (!in) return init_fail(err, errlen, "unknown initializer '%s'", name);
  if (in->wraps || in->ref_param)
    return init_fail(err, errlen, "%s takes an initializer that draws values, not %s", wrap, name);
  /* log(expm1(x)) has no complex meaning that a recurrence here would use, and im = 0 maps to -inf. */
  if (cplx) return init_fail(err, errlen, "%s needs a real param", wrap);
  if (init_fill(name, args, nargs, ref, rank, shape, cplx, H, rng, out, err, errlen) != 0) return -1;
  size_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= (size_t)shape[i];
  for (size_t i = 0; i < numel; i++) {
    if (!(out[i] > 0) || !isfinite(out[i]))
      return init_fail(err, errlen, "%s needs positive values, but %s gave %g", wrap, name, out[i]);
    out[i] = init_inv_softplus(out[i]);
  }
  return 0;
}

int init_fill(const char *name, const double *args, int nargs, const double *ref, int rank, const int *shape,
              bool cplx, int H, Rng *rng, double *out, char *err, size_t errlen) {
  CHECK(rank >= 0 && rank <= 3);
  const InitDef *def = init_find(name);
  if (!def) return init_fail(err, errlen, "unknown initializer '%s'", name);
  if (def->wraps) return init_fail(err, errlen, "%s takes another initializer as its argument, such as %s(log_uniform(0.001, 0.1))", name, name);
  InitKind kind = (InitKind)(def - init_defs);
  if (!def->ref_param && (nargs < def->min_args || nargs > def->max_args)) {
    if (def->max_args == 0) return init_fail(err, errlen, "%s takes no arguments, got %d", name, nargs);
    if (def->min_args != def->max_args)
      return init_fail(err, errlen, "%s takes %d to %d arguments, got %d", name, def->min_args, def->max_args, nargs);
    return init_fail(err, errlen, "%s takes %d argument%s, got %d", name, def->min_args, def->min_args == 1 ? "" : "s", nargs);
  }
  for (int i = 0; i < nargs && !def->ref_param; i++)
    if (!isfinite(args[i])) return init_fail(err, errlen, "%s: argument %d is not finite (%g)", name, i + 1, args[i]);
  size_t numel = 1;
  for (int i = 0; i < rank; i++) {
    CHECK(shape[i] >= 0);
    numel *= (size_t)shape[i];
  }
  size_t nout = cplx ? 2 * numel : numel;

  Draw d = {0};
  if (init_prepare(kind, args, rank, shape, H, &d, err, errlen) != 0) return -1;
  switch (kind) {
  case INIT_ZEROS:
  case INIT_ONES:
  case INIT_CONST: { /* complex: re = c, im = 0 */
    double c = kind == INIT_ZEROS ? 0.0 : kind == INIT_ONES ? 1.0 : args[0];
    for (size_t i = 0; i < numel; i++) {
      if (cplx) out[2 * i] = c, out[2 * i + 1] = 0.0;
      else out[i] = c;
    }
    return 0;
  }
  case INIT_ORTHOGONAL: {
    if (rank < 2) return init_fail(err, errlen, "orthogonal needs a matrix param, got a %s", rank == 0 ? "scalar" : "vector");
    /* Complex params: the real part is orthogonal and the imaginary part zero. That is a
     * unitary matrix too, which is what the recurrences that use it need. A rank-3 param
     * [NH, O, I]: one orthogonal matrix per head. */
    int heads = rank == 3 ? shape[0] : 1, O = shape[rank - 2], I = shape[rank - 1];
    double *w = cplx ? xmalloc(sizeof(double) * (numel ? numel : 1)) : out;
    for (int h = 0; h < heads; h++) fill_orthogonal(O, I, rng, w + (size_t)h * (size_t)O * (size_t)I);
    if (nargs == 1) /* orthogonal(gain), as PyTorch's orthogonal_(w, gain): the matrix times gain */
      for (size_t i = 0; i < numel; i++) w[i] *= args[0];
    if (cplx) {
      for (size_t i = 0; i < numel; i++) out[2 * i] = w[i], out[2 * i + 1] = 0.0;
      free(w);
    }
    return 0;
  }
  case INIT_ARANGE:   /* start + step * j along the last dim, as torch.arange repeated */
  case INIT_S4D_REAL: { /* log(j + 1) along the last dim: Mamba's A_log, A = -(j + 1) */
    size_t last = rank ? (size_t)shape[rank - 1] : 1;
    for (size_t i = 0; i < numel; i++) {
      double j = (double)(i % last);
      double v = kind == INIT_ARANGE ? args[0] + args[1] * j : log(j + 1.0);
      if (cplx) out[2 * i] = v, out[2 * i + 1] = 0.0;
      else out[i] = v;
    }
    return 0;
  }
  case INIT_ARANGE_POW: /* start + scale * (step * j)^p along the last dim: power-law ramps */
  case INIT_CYCLE: {    /* args[j mod nargs] along the last dim */
    size_t last = rank ? (size_t)shape[rank - 1] : 1;
    for (size_t i = 0; i < numel; i++) {
      size_t j = i % last;
      double v = kind == INIT_CYCLE ? args[j % (size_t)nargs] : args[0] + args[1] * pow(args[2] * (double)j, args[3]);
      if (cplx) out[2 * i] = v, out[2 * i + 1] = 0.0;
      else out[i] = v;
    }
    return 0;
  }
  case INIT_LRU_GAMMA: /* log(sqrt(1 - |lambda|^2)), |lambda| = exp(-exp(nu_log)) */
    if (!ref) return init_fail(err, errlen, "lru_gamma needs the values of the param it names");
    for (size_t i = 0; i < numel; i++) {
      double g = log(sqrt(1.0 - exp(-2.0 * exp(ref[i]))));
      if (cplx) out[2 * i] = g, out[2 * i + 1] = 0.0;
      else out[i] = g;
    }
    return 0;
  default: /* elementwise random: one draw per real number, re then im */
    for (size_t i = 0; i < nout; i++) out[i] = draw_one(&d, rng);
    return 0;
  }
}

/* ---- initializer text ---- */

static bool is_blank(int ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }
static bool is_name_start(int ch) { return isalpha(ch) || ch == '_'; }
static bool is_name_char(int ch) { return isalnum(ch) || ch == '_'; }

/* One argument, text [a, b) without its surrounding blanks: a number, or the name of a param. */
static int parse_arg(const InitDef *d, const char *s, size_t a, size_t b, InitText *out, char *why, size_t n, int *off,
                     int *len) {
  *off = (int)a, *len = (int)(b - a);
  if (d->ref_param) {
    size_t e = a;
    while (e < b && is_name_char((unsigned char)s[e])) e++;
    if (!is_name_start((unsigned char)s[a]) || e != b || b - a >= sizeof out->ref) {
      snprintf(why, n, "%s takes the name of another param", d->name);
      return -1;
    }
    memcpy(out->ref, s + a, b - a);
    out->ref[b - a] = 0;
    return 0;
  }
  char *end;
  double v = strtod(s + a, &end);
  if (end != s + b || !isfinite(v)) {
    snprintf(why, n, "%s: expected a number", d->name);
    return -1;
  }
  if (out->nargs < 8) out->args[out->nargs] = v;
  out->nargs++;
  return 0;
}

/* NAME(ARG, ...) from the '(' at s[open]: the arguments, split at the commas outside parentheses.
 * The index after the ')', or -1. */
static long parse_args_of(const InitDef *d, const char *s, size_t open, InitText *out, char *why, size_t n, int *off,
                          int *len) {
  size_t start = open + 1, slen = strlen(s);
  int depth = 0, count = 0;
  for (size_t i = open + 1; i < slen; i++) {
    char ch = s[i];
    if (ch == '(') depth++;
    if (ch == ')' && depth > 0) {
      depth--;
      continue;
    }
    if ((ch != ',' && ch != ')') || depth > 0) continue;
    size_t a = start, b = i;
    while (a < b && is_blank((unsigned char)s[a])) a++;
    while (b > a && is_blank((unsigned char)s[b - 1])) b--;
    if (a == b && !(ch == ')' && count == 0)) {
      *off = (int)i, *len = 1;
      snprintf(why, n, "empty argument");
      return -1;
    }
    if (a < b) {
      if (parse_arg(d, s, a, b, out, why, n, off, len) < 0) return -1;
      count++;
    }
    start = i + 1;
    if (ch == ')') return (long)i + 1;
  }
  *off = (int)open, *len = 1;
  snprintf(why, n, "'(' without its ')'");
  return -1;
}

/* An unknown name: the nearest known one, or the whole list. */
static void unknown_init(const char *name, char *why, size_t n) {
  const char *const *names;
  int nn = init_names(&names);
  const char *near = edit_nearest(name, names, nn);
  if (near) {
    snprintf(why, n, "unknown initializer '%s'; did you mean '%s'?", name, near);
    return;
  }
  int used = snprintf(why, n, "unknown initializer '%s'; the initializers are", name);
  for (int i = 0; i < nn && used > 0 && (size_t)used < n; i++) used += snprintf(why + used, n - (size_t)used, "%s %s", i ? "," : "", names[i]);
}

/* A wrapping initializer's argument, NAME(ARGS) from the '(' at s[open]: another initializer, parsed
 * by init_parse, into out->inner and out->args. The index after the ')', or -1. */
static long parse_wrapped(const InitDef *d, const char *s, size_t open, InitText *out, char *why, size_t n, int *off,
                          int *len) {
  size_t slen = strlen(s), close = open + 1;
  for (int depth = 0; close < slen && (s[close] != ')' || depth > 0); close++) depth += s[close] == '(' ? 1 : s[close] == ')' ? -1 : 0;
  if (close >= slen) {
    *off = (int)open, *len = 1;
    snprintf(why, n, "'(' without its ')'");
    return -1;
  }
  size_t a = open + 1, b = close;
  while (a < b && is_blank((unsigned char)s[a])) a++;
  while (b > a && is_blank((unsigned char)s[b - 1])) b--;
  char *text = xmalloc(b - a + 1);
  memcpy(text, s + a, b - a);
  text[b - a] = 0;
  InitText in;
  int rc = a == b ? -1 : init_parse(text, &in, why, n, off, len);
  free(text);
  if (a == b) {
    *off = (int)a, *len = 1;
    snprintf(why, n, "%s takes an initializer as its argument, such as %s(log_uniform(0.001, 0.1))", d->name, d->name);
    return -1;
  }
  if (rc < 0) {
    *off += (int)a;
    return -1;
  }
  const InitDef *id = init_find(in.name);
  if (id->wraps || id->ref_param) {
    *off = (int)a, *len = (int)(b - a);
    snprintf(why, n, "%s takes an initializer that draws values, not %s", d->name, in.name);
    return -1;
  }
  memcpy(out->inner, in.name, sizeof out->inner);
  memcpy(out->args, in.args, sizeof out->args);
  out->nargs = in.nargs;
  return (long)close + 1;
}

int init_parse(const char *s, InitText *out, char *why, size_t n, int *off, int *len) {
  memset(out, 0, sizeof *out);
  size_t i = 0, slen = strlen(s);
  if (!is_name_start((unsigned char)s[0])) {
    *off = 0, *len = 1;
    snprintf(why, n, "expected an initializer, such as ugi or gumbel(0, 0.5)");
    return -1;
  }
  while (is_name_char((unsigned char)s[i])) i++;
  size_t name_len = i < sizeof out->name ? i : sizeof out->name - 1;
  memcpy(out->name, s, name_len);
  const InitDef *d = init_find(out->name);
  if (!d) {
    *off = 0, *len = (int)i;
    unknown_init(out->name, why, n);
    return -1;
  }
  while (is_blank((unsigned char)s[i])) i++;
  if (d->wraps && s[i] != '(') {
    *off = 0, *len = (int)slen;
    snprintf(why, n, "%s takes an initializer as its argument, such as %s(log_uniform(0.001, 0.1))", d->name, d->name);
    return -1;
  }
  if (d->wraps) {
    long after = parse_wrapped(d, s, i, out, why, n, off, len);
    if (after < 0) return -1;
    i = (size_t)after;
    while (is_blank((unsigned char)s[i])) i++;
  } else if (s[i] == '(') {
    long after = parse_args_of(d, s, i, out, why, n, off, len);
    if (after < 0) return -1;
    i = (size_t)after;
    while (is_blank((unsigned char)s[i])) i++;
  }
  if (s[i]) {
    *off = (int)i, *len = 1;
    snprintf(why, n, "unexpected '%c' after the initializer", s[i]);
    return -1;
  }
  int given = d->ref_param ? (out->ref[0] != 0) : d->wraps ? 1 : out->nargs;
  if (given < d->min_args || given > d->max_args) {
    *off = 0, *len = (int)slen;
    if (d->min_args == d->max_args)
      snprintf(why, n, "%s takes %d argument%s, not %d", d->name, d->min_args, d->min_args == 1 ? "" : "s", given);
    else snprintf(why, n, "%s takes %d to %d arguments, not %d", d->name, d->min_args, d->max_args, given);
    return -1;
  }
  return 0;
}
