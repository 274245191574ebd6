/* test_nn.c: the model's blocks (runtime/nn/nn.h): every gradient against float64-accumulated finite
 * differences, the backward adding into its buffers, and one behaviour of each block per test. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "nn.h"
#include "support.h"

/* ---- helpers ---- */

static void fill_uniform(float *x, size_t n, float lo, float hi, uint64_t stream) {
  Rng r;
  rng_seed(&r, 1234, stream);
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rng_uniform(&r);
}

static float *randn_like(size_t n, uint64_t stream) { /* uniform in [-1, 1) */
  float *x = calloc(n ? n : 1, sizeof(float));
  fill_uniform(x, n, -1.0f, 1.0f, stream);
  return x;
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* The library's threads for what follows (Tuning.threads, CELLC_THREADS; 0: every core). */
static void set_threads(int n) {
  Tuning t = *tuning();
  t.threads = n;
  tuning_set(&t);
}

/* sum(out (.) dy), accumulated in double: the scalar whose gradient the backward computes when
 * it is given dout = dy. */
static double dot(const float *out, const float *dy, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)out[i] * (double)dy[i];
  return s;
}

/* One gradient to check: the tensor x and the buffer g its backward adds into. */
typedef struct Grad {
  const char *name;
  float *x; /* (n) */
  float *g; /* (n) */
  size_t n;
} Grad;

typedef double (*LossFn)(void *ctx); /* runs the forward, returns the scalar loss in double */
typedef void (*BackFn)(void *ctx);   /* runs the backward of that loss (after a forward) */

#define PREFILL 0.25f /* every gradient buffer starts here: the backward must add, not write */
#define STEP 0.03125 /* 2^-5: float rounding noise falls as 1 / STEP, the stencil's error as STEP^4 */
#define TOL 1e-3

/* The derivative of loss along x[i] by the 5-point central stencil, the loss in double. */
static double numeric(LossFn loss, void *ctx, float *x, size_t i) {
  float x0 = x[i];
  double f[4];
  const double k[4] = {-2, -1, 1, 2};
  for (int j = 0; j < 4; j++) {
    x[i] = (float)((double)x0 + k[j] * STEP);
    f[j] = loss(ctx);
  }
  x[i] = x0;
  return (8.0 * (f[2] - f[1]) - (f[3] - f[0])) / (12.0 * STEP);
}

/* Checks every gradient in gs: analytic (backward, minus the prefill) against numeric.
 * Error per element: |a - n| / max(|a|, |n|, 1e-2 max_j |a_j|, 1e-6), all below TOL. */
static void gradcheck(LossFn loss, BackFn back, void *ctx, Grad *gs, int ng) {
  for (int k = 0; k < ng; k++)
    for (size_t i = 0; i < gs[k].n; i++) gs[k].g[i] = PREFILL;
  loss(ctx);
  back(ctx);
  for (int k = 0; k < ng; k++) {
    Grad *G = &gs[k];
    double scale = 0.0;
    for (size_t i = 0; i < G->n; i++) scale = fmax(scale, fabs((double)G->g[i] - PREFILL));
    double worst = 0.0;
    size_t wi = 0;
    double wa = 0, wn = 0;
    for (size_t i = 0; i < G->n; i++) {
      double a = (double)G->g[i] - PREFILL;
      double n = numeric(loss, ctx, G->x, i);
      double den = fmax(fmax(fabs(a), fabs(n)), fmax(1e-2 * scale, 1e-6));
      double err = fabs(a - n) / den;
      if (err > worst) worst = err, wi = i, wa = a, wn = n;
    }
    cr_assert(worst < TOL, "%s[%zu]: analytic %.8g, numeric %.8g, relative error %.3g", G->name, wi, wa, wn, worst);
    cr_assert(scale > 0.0, "%s: the gradient is all zero", G->name);
  }
}

/* ---- embedding ---- */

typedef struct {
  int rows, V, C;
  int32_t *ids;
  float *wte, *dwte, *out, *dy;
} EmbCtx;

static double emb_loss(void *p) {
  EmbCtx *c = p;
  nn_embedding_forward(c->out, c->ids, c->wte, c->rows, c->V, c->C);
  return dot(c->out, c->dy, (size_t)c->rows * c->C);
}
static void emb_back(void *p) {
  EmbCtx *c = p;
  nn_embedding_backward(c->dwte, c->dy, c->ids, c->rows, c->V, c->C);
}

Test(embedding, gradient) {
  int32_t ids[6] = {3, 0, 3, 1, 4, 3}; /* repeated ids accumulate */
  EmbCtx c = {6, 5, 4, ids, randn_like(20, 1), zeros(20), zeros(24), randn_like(24, 2)};
  Grad g[] = {{"wte", c.wte, c.dwte, 20}};
  gradcheck(emb_loss, emb_back, &c, g, 1);
  free(c.wte), free(c.dwte), free(c.out), free(c.dy);
}

Test(embedding, picks_rows) {
  float wte[3 * 2] = {0, 1, 10, 11, 20, 21};
  int32_t ids[4] = {2, 0, 2, 1};
  float out[8];
  nn_embedding_forward(out, ids, wte, 4, 3, 2);
  float want[8] = {20, 21, 0, 1, 20, 21, 10, 11};
  for (int i = 0; i < 8; i++) cr_assert_eq(out[i], want[i]);
}

/* Enough rows that they split over threads (three asked for): each row still its token's. */
Test(embedding, picks_rows_on_threads) {
  set_threads(3);
  enum { ROWS = 10007, V = 7, C = 64 };
  float *wte = randn_like(V * C, 3), *out = zeros(ROWS * C);
  int32_t *ids = malloc(sizeof(int32_t) * ROWS);
  for (int r = 0; r < ROWS; r++) ids[r] = (r * 5 + r / 3) % V;
  nn_embedding_forward(out, ids, wte, ROWS, V, C);
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < C; c++) cr_assert_eq(out[(size_t)r * C + c], wte[ids[r] * C + c], "row %d col %d", r, c);
  set_threads(0);
  free(wte), free(out), free(ids);
}

Test(embedding, backward_sums_repeated_ids) {
  float dwte[3 * 2] = {0};
  int32_t ids[3] = {1, 1, 0};
  float dout[6] = {1, 2, 3, 4, 5, 6};
  nn_embedding_backward(dwte, dout, ids, 3, 3, 2);
  float want[6] = {5, 6, 4, 6, 0, 0};
  for (int i = 0; i < 6; i++) cr_assert_eq(dwte[i], want[i]);
}

/* Over three threads the same bits as on one, and the sums in double: a small table (7 tokens,
 * 12007 rows: in chunks, two of 4096 rows and a short one, each summed apart) and large ones (9000
 * tokens: the threads split the columns; C = 80 with dwte 4 floats further into its allocation, so
 * the split points on cache lines move; C = 72: shares of 16, 32 and 24 from the row's start, the
 * last one not a multiple of 16). */
static void embedding_threads(int rows, int V, int C, int offset) {
  float *dout = randn_like((size_t)rows * C, 5), *one = zeros(V * C), *three = zeros(V * C + offset);
  int32_t *ids = malloc(sizeof(int32_t) * rows);
  double *ref = calloc((size_t)V * C, sizeof(double));
  for (int r = 0; r < rows; r++) ids[r] = (r * 5 + r / 3) % V;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) ref[(size_t)ids[r] * C + c] += dout[(size_t)r * C + c];
  set_threads(1);
  nn_embedding_backward(one, dout, ids, rows, V, C);
  set_threads(3);
  nn_embedding_backward(three + offset, dout, ids, rows, V, C);
  set_threads(0);
  for (int v = 0; v < V; v++)
    for (int c = 0; c < C; c++) {
      cr_assert_eq(three[offset + v * C + c], one[v * C + c], "V %d: token %d col %d", V, v, c);
      double s = ref[(size_t)v * C + c];
      cr_assert(fabs(one[v * C + c] - s) < 1e-3, "V %d: token %d col %d: %g, in double %g", V, v, c, one[v * C + c], s);
    }
  free(dout), free(one), free(three), free(ids), free(ref);
}

Test(embedding, backward_on_threads_same_bits) {
  embedding_threads(12007, 7, 72, 0);
  embedding_threads(12007, 9000, 80, 4);
  embedding_threads(5000, 9000, 72, 0);
}

/* dout's rows wider than C (a layer's array, nn_embedding_backward_ld): the same bits as the rows
 * copied out, on both paths (a small and a large table). */
Test(embedding, backward_rows_apart) {
  static const int Vs[] = {7, 30000};
  for (int k = 0; k < 2; k++) {
    enum { ROWS = 5000, C = 24, LD = 29 };
    int V = Vs[k];
    float *wide = randn_like((size_t)ROWS * LD, 6), *tight = zeros((size_t)ROWS * C);
    float *a = zeros((size_t)V * C), *b = zeros((size_t)V * C);
    int32_t *ids = malloc(sizeof(int32_t) * ROWS);
    for (int r = 0; r < ROWS; r++) {
      ids[r] = (r * 11 + r / 7) % V;
      memcpy(tight + (size_t)r * C, wide + (size_t)r * LD, sizeof(float) * C);
    }
    nn_embedding_backward_ld(a, wide, LD, ids, ROWS, V, C);
    nn_embedding_backward(b, tight, ids, ROWS, V, C);
    cr_assert_eq(memcmp(a, b, sizeof(float) * (size_t)V * C), 0, "V %d", V);
    free(wide), free(tight), free(a), free(b), free(ids);
  }
}

/* ---- linear ---- */

typedef struct {
  int rows, I, O;
  float *inp, *w, *b, *out, *dy;
  float *dinp, *dw, *db;
} LinCtx;

static double lin_loss(void *p) {
  LinCtx *c = p;
  nn_linear_forward(c->out, c->inp, c->w, c->b, c->rows, c->I, c->O);
  return dot(c->out, c->dy, (size_t)c->rows * c->O);
}
static void lin_back(void *p) {
  LinCtx *c = p;
  nn_linear_backward(c->dinp, true, c->dw, c->db, c->dy, c->inp, c->w, c->rows, c->I, c->O);
}

static LinCtx lin_new(int rows, int I, int O, bool bias) {
  LinCtx c = {rows, I, O, randn_like((size_t)rows * I, 3), randn_like((size_t)O * I, 4),
              bias ? randn_like((size_t)O, 5) : NULL, zeros((size_t)rows * O), randn_like((size_t)rows * O, 6),
              zeros((size_t)rows * I), zeros((size_t)O * I), bias ? zeros((size_t)O) : NULL};
  return c;
}
static void lin_free(LinCtx *c) {
  free(c->inp), free(c->w), free(c->b), free(c->out), free(c->dy), free(c->dinp), free(c->dw), free(c->db);
}

Test(linear, gradient) {
  LinCtx c = lin_new(6, 5, 3, true);
  Grad g[] = {{"inp", c.inp, c.dinp, 30}, {"w", c.w, c.dw, 15}, {"b", c.b, c.db, 3}};
  gradcheck(lin_loss, lin_back, &c, g, 3);
  lin_free(&c);
}

Test(linear, gradient_without_bias) {
  LinCtx c = lin_new(4, 3, 5, false);
  Grad g[] = {{"inp", c.inp, c.dinp, 12}, {"w", c.w, c.dw, 15}};
  gradcheck(lin_loss, lin_back, &c, g, 2);
  lin_free(&c);
}

Test(linear, matches_loops) {
  LinCtx c = lin_new(5, 4, 3, true);
  lin_loss(&c);
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++) {
      double y = c.b[o];
      for (int i = 0; i < 4; i++) y += (double)c.inp[r * 4 + i] * c.w[o * 4 + i];
      cr_assert_float_eq(c.out[r * 3 + o], y, 1e-5);
    }
  lin_free(&c);
}

/* ---- layernorm and rmsnorm ---- */

typedef struct {
  int rows, C;
  bool rms;
  float *inp, *w, *b, *out, *dy, *mean, *rstd;
  float *dinp, *dw, *db;
} NormCtx;

static double norm_loss(void *p) {
  NormCtx *c = p;
  if (c->rms)
    nn_norm_forward(c->out, NULL, c->rstd, c->inp, c->w, c->b, c->rows, c->C);
  else
    nn_norm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->rows, c->C);
  return dot(c->out, c->dy, (size_t)c->rows * c->C);
}
static void norm_back(void *p) {
  NormCtx *c = p;
  if (c->rms)
    nn_norm_backward(c->dinp, c->dw, c->db, c->dy, c->inp, c->w, NULL, c->rstd, c->rows, c->C);
  else
    nn_norm_backward(c->dinp, c->dw, c->db, c->dy, c->inp, c->w, c->mean, c->rstd, c->rows, c->C);
}

static NormCtx norm_new(int rows, int C, bool rms, bool affine) {
  size_t n = (size_t)rows * C;
  NormCtx c = {rows, C, rms, randn_like(n, 7), affine ? randn_like((size_t)C, 8) : NULL,
               affine ? randn_like((size_t)C, 9) : NULL, zeros(n), randn_like(n, 10), zeros((size_t)rows),
               zeros((size_t)rows), zeros(n), affine ? zeros((size_t)C) : NULL, affine ? zeros((size_t)C) : NULL};
  return c;
}
static void norm_free(NormCtx *c) {
  free(c->inp), free(c->w), free(c->b), free(c->out), free(c->dy), free(c->mean), free(c->rstd);
  free(c->dinp), free(c->dw), free(c->db);
}

Test(layernorm, gradient) {
  NormCtx c = norm_new(4, 6, false, true);
  Grad g[] = {{"inp", c.inp, c.dinp, 24}, {"w", c.w, c.dw, 6}, {"b", c.b, c.db, 6}};
  gradcheck(norm_loss, norm_back, &c, g, 3);
  norm_free(&c);
}

Test(layernorm, gradient_without_affine) {
  NormCtx c = norm_new(3, 5, false, false);
  Grad g[] = {{"inp", c.inp, c.dinp, 15}};
  gradcheck(norm_loss, norm_back, &c, g, 1);
  norm_free(&c);
}

Test(layernorm, mean_zero_variance_one_without_affine) {
  NormCtx c = norm_new(5, 16, false, false);
  for (int i = 0; i < 5 * 16; i++) c.inp[i] = 3.0f + 2.0f * c.inp[i]; /* shifted and scaled */
  norm_loss(&c);
  for (int r = 0; r < 5; r++) {
    double m = 0, v = 0;
    for (int k = 0; k < 16; k++) m += c.out[r * 16 + k];
    m /= 16;
    for (int k = 0; k < 16; k++) v += (c.out[r * 16 + k] - m) * (c.out[r * 16 + k] - m);
    v /= 16; /* biased */
    cr_assert(fabs(m) < 1e-6, "row %d mean %g", r, m);
    cr_assert(fabs(v - 1.0) < 1e-4, "row %d variance %g", r, v);
  }
  norm_free(&c);
}

Test(layernorm, affine_applies_weight_and_bias) {
  float x[2] = {1, 3}, w[2] = {2, 3}, b[2] = {0.5f, -1}, y[2], mu, rs;
  nn_norm_forward(y, &mu, &rs, x, w, b, 1, 2);
  float s = 1.0f / sqrtf(1.0f + NN_NORM_EPS); /* normalized: -s, +s */
  cr_assert_float_eq(mu, 2.0f, 1e-6);
  cr_assert_float_eq(y[0], -s * 2 + 0.5f, 1e-6);
  cr_assert_float_eq(y[1], s * 3 - 1, 1e-6);
}

Test(rmsnorm, gradient) {
  NormCtx c = norm_new(4, 6, true, true);
  Grad g[] = {{"inp", c.inp, c.dinp, 24}, {"w", c.w, c.dw, 6}, {"b", c.b, c.db, 6}};
  gradcheck(norm_loss, norm_back, &c, g, 3);
  norm_free(&c);
}

Test(rmsnorm, gradient_without_affine) {
  NormCtx c = norm_new(3, 5, true, false);
  Grad g[] = {{"inp", c.inp, c.dinp, 15}};
  gradcheck(norm_loss, norm_back, &c, g, 1);
  norm_free(&c);
}

Test(rmsnorm, mean_square_one_without_affine) {
  NormCtx c = norm_new(4, 16, true, false);
  for (int i = 0; i < 4 * 16; i++) c.inp[i] = 1.0f + 5.0f * c.inp[i];
  norm_loss(&c);
  for (int r = 0; r < 4; r++) {
    double ms = 0;
    for (int k = 0; k < 16; k++) ms += (double)c.out[r * 16 + k] * c.out[r * 16 + k];
    cr_assert(fabs(ms / 16 - 1.0) < 1e-4, "row %d mean square %g", r, ms / 16);
  }
  norm_free(&c);
}

/* ---- batchnorm ---- */

typedef struct {
  int rows, C;
  bool training;
  float *inp, *w, *b, *out, *dy, *mean, *rstd, *rmean, *rvar, *scratch;
  float *dinp, *dw, *db;
} BnCtx;

static double bn_loss(void *p) {
  BnCtx *c = p;
  nn_batchnorm_forward(c->out, c->mean, c->rstd, c->rmean, c->rvar, c->inp, c->w, c->b, c->rows, c->C, c->training);
  return dot(c->out, c->dy, (size_t)c->rows * c->C);
}
static void bn_back(void *p) {
  BnCtx *c = p;
  nn_batchnorm_backward(c->dinp, c->dw, c->db, c->scratch, c->dy, c->inp, c->w, c->mean, c->rstd, c->rows, c->C,
                        c->training);
}

static BnCtx bn_new(int rows, int C, bool training, bool affine) {
  size_t n = (size_t)rows * C;
  BnCtx c = {rows, C, training, randn_like(n, 11), affine ? randn_like((size_t)C, 12) : NULL,
             affine ? randn_like((size_t)C, 13) : NULL, zeros(n), randn_like(n, 14), zeros((size_t)C),
             zeros((size_t)C), zeros((size_t)C), zeros((size_t)C), zeros(2 * (size_t)C), zeros(n),
             affine ? zeros((size_t)C) : NULL, affine ? zeros((size_t)C) : NULL};
  for (int k = 0; k < C; k++) c.rvar[k] = 1.0f; /* PyTorch's initial running statistics: 0 and 1 */
  return c;
}
static void bn_free(BnCtx *c) {
  free(c->inp), free(c->w), free(c->b), free(c->out), free(c->dy), free(c->mean), free(c->rstd);
  free(c->rmean), free(c->rvar), free(c->scratch), free(c->dinp), free(c->dw), free(c->db);
}

Test(batchnorm, gradient_training) {
  BnCtx c = bn_new(6, 4, true, true);
  Grad g[] = {{"inp", c.inp, c.dinp, 24}, {"w", c.w, c.dw, 4}, {"b", c.b, c.db, 4}};
  gradcheck(bn_loss, bn_back, &c, g, 3);
  bn_free(&c);
}

Test(batchnorm, gradient_training_without_affine) {
  BnCtx c = bn_new(5, 3, true, false);
  Grad g[] = {{"inp", c.inp, c.dinp, 15}};
  gradcheck(bn_loss, bn_back, &c, g, 1);
  bn_free(&c);
}

Test(batchnorm, gradient_eval) {
  BnCtx c = bn_new(6, 4, false, true);
  fill_uniform(c.rmean, 4, -0.5f, 0.5f, 15);
  fill_uniform(c.rvar, 4, 0.5f, 2.0f, 16);
  Grad g[] = {{"inp", c.inp, c.dinp, 24}, {"w", c.w, c.dw, 4}, {"b", c.b, c.db, 4}};
  gradcheck(bn_loss, bn_back, &c, g, 3);
  bn_free(&c);
}

Test(batchnorm, training_normalizes_channels_and_updates_running_stats) {
  int rows = 12, C = 3;
  BnCtx c = bn_new(rows, C, true, false);
  for (int i = 0; i < rows * C; i++) c.inp[i] = 2.0f + 3.0f * c.inp[i];
  bn_loss(&c);
  for (int k = 0; k < C; k++) {
    double m = 0, v = 0, mo = 0, vo = 0;
    for (int r = 0; r < rows; r++) m += c.inp[r * C + k], mo += c.out[r * C + k];
    m /= rows, mo /= rows;
    for (int r = 0; r < rows; r++) {
      v += (c.inp[r * C + k] - m) * (c.inp[r * C + k] - m);
      vo += (c.out[r * C + k] - mo) * (c.out[r * C + k] - mo);
    }
    cr_assert(fabs(mo) < 1e-5, "channel %d output mean %g", k, mo);
    cr_assert(fabs(vo / rows - 1.0) < 1e-4, "channel %d output variance %g", k, vo / rows);
    /* from (0, 1), momentum 0.1, the unbiased variance into the running one */
    cr_assert_float_eq(c.rmean[k], 0.1 * m, 1e-5);
    cr_assert_float_eq(c.rvar[k], 0.9 + 0.1 * v / (rows - 1), 1e-5);
  }
  bn_free(&c);
}

Test(batchnorm, eval_uses_running_stats_and_keeps_them) {
  float x[4] = {1, 2, 3, 5}; /* rows 2, C 2 */
  float w[2] = {2, 1}, b[2] = {0, 1}, rm[2] = {0.5f, -1}, rv[2] = {4, 0.25f};
  float y[4], mean[2], rstd[2];
  nn_batchnorm_forward(y, mean, rstd, rm, rv, x, w, b, 2, 2, false);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 2; k++) {
      double want = (x[r * 2 + k] - (double)rm[k]) / sqrt((double)rv[k] + 1e-5) * w[k] + b[k];
      cr_assert_float_eq(y[r * 2 + k], want, 1e-5);
    }
  cr_assert_eq(rm[0], 0.5f);
  cr_assert_eq(rm[1], -1.0f);
  cr_assert_eq(rv[0], 4.0f);
  cr_assert_eq(rv[1], 0.25f);
}

/* ---- gelu ---- */

typedef struct {
  size_t n;
  float *inp, *out, *dy, *dinp;
} GeluCtx;

static double gelu_loss(void *p) {
  GeluCtx *c = p;
  nn_gelu_forward(c->out, c->inp, c->n);
  return dot(c->out, c->dy, c->n);
}
static void gelu_back(void *p) {
  GeluCtx *c = p;
  nn_gelu_backward(c->dinp, c->dy, c->inp, c->n);
}

Test(gelu, gradient) {
  GeluCtx c = {12, randn_like(12, 17), zeros(12), randn_like(12, 18), zeros(12)};
  for (int i = 0; i < 12; i++) c.inp[i] *= 3.0f;
  Grad g[] = {{"inp", c.inp, c.dinp, 12}};
  gradcheck(gelu_loss, gelu_back, &c, g, 1);
  free(c.inp), free(c.out), free(c.dy), free(c.dinp);
}

Test(gelu, exact_erf_values) {
  float x[4] = {0, 1, -1, 2}, y[4];
  nn_gelu_forward(y, x, 4);
  cr_assert_float_eq(y[0], 0.0f, 1e-7);
  cr_assert_float_eq(y[1], 0.8413447460685429, 1e-6);
  cr_assert_float_eq(y[2], -0.15865525393145707, 1e-6);
  cr_assert_float_eq(y[3], 1.9544997361036416, 1e-6); /* not tanh's 1.9545977 */
}

/* ---- GLU and MLP mixers ---- */

typedef struct {
  int rows, C, H;
  bool mlp;
  float *inp, *out, *dy, *dinp, *params, *grads, *cachebuf, *scratch;
  NnGlu glu, dglu;
  NnGluCache gcache;
  NnMlp m, dm;
  NnMlpCache mcache;
} MixCtx;

static double mix_loss(void *p) {
  MixCtx *c = p;
  if (c->mlp)
    nn_mlp_forward(c->out, &c->mcache, c->inp, &c->m, c->rows, c->C, c->H);
  else
    nn_glu_forward(c->out, &c->gcache, c->inp, &c->glu, c->rows, c->C, c->H);
  return dot(c->out, c->dy, (size_t)c->rows * c->C);
}
static void mix_back(void *p) {
  MixCtx *c = p;
  if (c->mlp)
    nn_mlp_backward(c->dinp, &c->dm, c->scratch, c->dy, c->inp, &c->mcache, &c->m, c->rows, c->C, c->H);
  else
    nn_glu_backward(c->dinp, &c->dglu, c->scratch, c->dy, c->inp, &c->gcache, &c->glu, c->rows, c->C, c->H);
}

static MixCtx mix_new(int rows, int C, int H, bool mlp) {
  MixCtx c = {.rows = rows, .C = C, .H = H, .mlp = mlp};
  size_t n = (size_t)rows * C;
  c.inp = randn_like(n, 19), c.out = zeros(n), c.dy = randn_like(n, 20), c.dinp = zeros(n);
  size_t np = mlp ? nn_mlp_size(C, H) : nn_glu_size(C, H);
  c.params = randn_like(np, 21), c.grads = zeros(np);
  if (mlp) {
    cr_assert_eq(nn_mlp_views(&c.m, c.params, C, H), c.params + np);
    nn_mlp_views(&c.dm, c.grads, C, H);
    c.cachebuf = zeros(nn_mlp_cache_size(rows, H));
    cr_assert_eq(nn_mlp_cache_views(&c.mcache, c.cachebuf, rows, H), c.cachebuf + nn_mlp_cache_size(rows, H));
    c.scratch = zeros(nn_mlp_scratch_size(rows, H));
  } else {
    cr_assert_eq(nn_glu_views(&c.glu, c.params, C, H), c.params + np);
    nn_glu_views(&c.dglu, c.grads, C, H);
    c.cachebuf = zeros(nn_glu_cache_size(rows, H));
    cr_assert_eq(nn_glu_cache_views(&c.gcache, c.cachebuf, rows, H), c.cachebuf + nn_glu_cache_size(rows, H));
    c.scratch = zeros(nn_glu_scratch_size(rows, H));
  }
  return c;
}
static void mix_free(MixCtx *c) {
  free(c->inp), free(c->out), free(c->dy), free(c->dinp), free(c->params), free(c->grads);
  free(c->cachebuf), free(c->scratch);
}

Test(glu, gradient) {
  int rows = 5, C = 4, H = 3;
  MixCtx c = mix_new(rows, C, H, false);
  size_t hc = (size_t)H * C;
  Grad g[] = {{"inp", c.inp, c.dinp, (size_t)rows * C},
              {"w1", c.glu.w1, c.dglu.w1, hc},
              {"b1", c.glu.b1, c.dglu.b1, (size_t)H},
              {"w2", c.glu.w2, c.dglu.w2, hc},
              {"b2", c.glu.b2, c.dglu.b2, (size_t)H},
              {"w3", c.glu.w3, c.dglu.w3, hc},
              {"b3", c.glu.b3, c.dglu.b3, (size_t)C}};
  gradcheck(mix_loss, mix_back, &c, g, 7);
  mix_free(&c);
}

Test(glu, matches_equation) {
  /* C = 1, H = 1: y = w3 ((w1 x + b1) sigmoid(w2 x + b2)) + b3 */
  float p[6] = {2, 0.5f, -1, 0.25f, 3, -0.5f}; /* w1 b1 w2 b2 w3 b3 */
  NnGlu glu;
  nn_glu_views(&glu, p, 1, 1);
  float cb[3], x = 0.7f, y;
  NnGluCache cache;
  nn_glu_cache_views(&cache, cb, 1, 1);
  nn_glu_forward(&y, &cache, &x, &glu, 1, 1, 1);
  double want = 3.0 * ((2.0 * 0.7 + 0.5) / (1.0 + exp(-(-0.7 + 0.25)))) - 0.5;
  cr_assert_float_eq(y, want, 1e-6);
}

Test(mlp, gradient) {
  int rows = 4, C = 3, H = 12; /* H = 4 C */
  MixCtx c = mix_new(rows, C, H, true);
  size_t hc = (size_t)H * C;
  Grad g[] = {{"inp", c.inp, c.dinp, (size_t)rows * C},
              {"w1", c.m.w1, c.dm.w1, hc},
              {"b1", c.m.b1, c.dm.b1, (size_t)H},
              {"w2", c.m.w2, c.dm.w2, hc},
              {"b2", c.m.b2, c.dm.b2, (size_t)C}};
  gradcheck(mix_loss, mix_back, &c, g, 5);
  mix_free(&c);
}

Test(mlp, matches_equation) {
  int rows = 3, C = 2, H = 8;
  MixCtx c = mix_new(rows, C, H, true);
  mix_loss(&c);
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < C; o++) {
      double y = c.m.b2[o];
      for (int j = 0; j < H; j++) {
        double h = c.m.b1[j];
        for (int i = 0; i < C; i++) h += (double)c.m.w1[j * C + i] * c.inp[r * C + i];
        y += c.m.w2[o * H + j] * 0.5 * h * (1.0 + erf(h / sqrt(2.0)));
      }
      cr_assert_float_eq(c.out[r * C + o], y, 1e-5);
    }
  mix_free(&c);
}

/* ---- dropout ---- */

typedef struct {
  size_t n;
  float p;
  float *inp, *out, *mask, *dy, *dinp;
} DropCtx;

static double drop_loss(void *ctx) {
  DropCtx *c = ctx;
  nn_dropout_forward(c->out, c->mask, c->inp, c->n, c->p, 99, DRAW_ALL, true); /* the same mask at every evaluation */
  return dot(c->out, c->dy, c->n);
}
static void drop_back(void *ctx) {
  DropCtx *c = ctx;
  nn_dropout_backward(c->dinp, c->dy, c->mask, c->n);
}

Test(dropout, gradient) {
  DropCtx c = {20, 0.3f, randn_like(20, 22), zeros(20), zeros(20), randn_like(20, 23), zeros(20)};
  Grad g[] = {{"inp", c.inp, c.dinp, 20}};
  gradcheck(drop_loss, drop_back, &c, g, 1);
  int dropped = 0;
  for (int i = 0; i < 20; i++) dropped += c.mask[i] == 0.0f;
  cr_assert(dropped > 0 && dropped < 20, "dropped %d of 20", dropped);
  free(c.inp), free(c.out), free(c.mask), free(c.dy), free(c.dinp);
}

Test(dropout, keeps_the_expectation) {
  size_t n = 200000;
  float p = 0.3f;
  float *x = zeros(n), *y = zeros(n), *mask = zeros(n);
  for (size_t i = 0; i < n; i++) x[i] = 2.0f;
  nn_dropout_forward(y, mask, x, n, p, rng_key(5, 0, 1), DRAW_ALL, true);
  double s = 0;
  size_t zero = 0;
  for (size_t i = 0; i < n; i++) {
    s += y[i];
    zero += y[i] == 0.0f;
    cr_assert(y[i] == 0.0f || fabsf(y[i] - 2.0f / 0.7f) < 1e-6f);
  }
  cr_assert(fabs(s / (double)n - 2.0) < 0.02, "mean %g, want 2", s / (double)n);
  cr_assert(fabs((double)zero / (double)n - p) < 0.005, "dropped fraction %g", (double)zero / (double)n);
  free(x), free(y), free(mask);
}

Test(dropout, eval_is_identity) {
  float x[5] = {1, -2, 3, 0.5f, 7}, y[5], mask[5];
  nn_dropout_forward(y, mask, x, 5, 0.5f, rng_key(5, 0, 2), DRAW_ALL, false);
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(y[i], x[i]);
    cr_assert_eq(mask[i], 1.0f);
  }
  float dx[5] = {0}, dy[5] = {1, 2, 3, 4, 5};
  nn_dropout_backward(dx, dy, mask, 5);
  for (int i = 0; i < 5; i++) cr_assert_eq(dx[i], dy[i]);
}

Test(dropout, p_zero_is_identity_in_training) {
  float x[3] = {1, 2, 3}, mask[3];
  nn_dropout_forward(x, mask, x, 3, 0.0f, rng_key(5, 0, 3), DRAW_ALL, true); /* in place */
  cr_assert_eq(x[0], 1.0f);
  cr_assert_eq(x[1], 2.0f);
  cr_assert_eq(x[2], 3.0f);
}

Test(dropout, same_seed_same_mask_in_place) {
  float a[64], b[64], ma[64], mb[64];
  fill_uniform(a, 64, 1, 2, 24);
  memcpy(b, a, sizeof a);
  nn_dropout_forward(a, ma, a, 64, 0.5f, rng_key(8, 0, 4), DRAW_ALL, true);
  nn_dropout_forward(b, mb, b, 64, 0.5f, rng_key(8, 0, 4), DRAW_ALL, true);
  cr_assert_eq(memcmp(ma, mb, sizeof ma), 0);
  cr_assert_eq(memcmp(a, b, sizeof a), 0);
}

/* ---- skip connection ---- */

typedef struct {
  size_t n;
  float *a, *b, *out, *dy, *da, *db;
} AddCtx;

static double add_loss(void *p) {
  AddCtx *c = p;
  nn_add_forward(c->out, c->a, c->b, c->n);
  return dot(c->out, c->dy, c->n);
}
static void add_back(void *p) {
  AddCtx *c = p;
  nn_add_backward(c->da, c->db, c->dy, c->n);
}

Test(add, gradient) {
  AddCtx c = {10, randn_like(10, 25), randn_like(10, 26), zeros(10), randn_like(10, 27), zeros(10), zeros(10)};
  Grad g[] = {{"a", c.a, c.da, 10}, {"b", c.b, c.db, 10}};
  gradcheck(add_loss, add_back, &c, g, 2);
  free(c.a), free(c.b), free(c.out), free(c.dy), free(c.da), free(c.db);
}

Test(add, in_place_skip) {
  float x[3] = {1, 2, 3}, f[3] = {10, 20, 30};
  nn_add_forward(x, x, f, 3);
  cr_assert_eq(x[0], 11.0f);
  cr_assert_eq(x[1], 22.0f);
  cr_assert_eq(x[2], 33.0f);
}

/* ---- readouts ---- */

typedef struct {
  NnReadout kind;
  int T, B, C;
  float *inp, *out, *dy, *dinp;
} ReadCtx;

static double read_loss(void *p) {
  ReadCtx *c = p;
  nn_readout_forward(c->kind, c->out, c->inp, c->T, c->B, c->C);
  return dot(c->out, c->dy, (size_t)nn_readout_rows(c->kind, c->T, c->B) * c->C);
}
static void read_back(void *p) {
  ReadCtx *c = p;
  nn_readout_backward(c->kind, c->dinp, c->dy, c->T, c->B, c->C);
}

static void readout_gradcheck(NnReadout kind) {
  int T = 4, B = 3, C = 2;
  size_t n = (size_t)T * B * C;
  ReadCtx c = {kind, T, B, C, randn_like(n, 28), zeros(n), randn_like(n, 29), zeros(n)};
  Grad g[] = {{nn_readout_name(kind), c.inp, c.dinp, n}};
  gradcheck(read_loss, read_back, &c, g, 1);
  free(c.inp), free(c.out), free(c.dy), free(c.dinp);
}

Test(readout, gradient_all) { readout_gradcheck(NN_READOUT_ALL); }
Test(readout, gradient_last) { readout_gradcheck(NN_READOUT_LAST); }
Test(readout, gradient_mean) { readout_gradcheck(NN_READOUT_MEAN); }

/* inp[t, b, c] = 100 t + 10 b + c */
static void fill_tbc(float *x, int T, int B, int C) {
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++)
      for (int k = 0; k < C; k++) x[((size_t)t * B + b) * C + k] = (float)(100 * t + 10 * b + k);
}

Test(readout, last_picks_the_last_step_of_each_sequence) {
  float x[4 * 3 * 2], y[3 * 2];
  fill_tbc(x, 4, 3, 2);
  cr_assert_eq(nn_readout_rows(NN_READOUT_LAST, 4, 3), 3);
  nn_readout_forward(NN_READOUT_LAST, y, x, 4, 3, 2);
  for (int b = 0; b < 3; b++)
    for (int k = 0; k < 2; k++) cr_assert_eq(y[b * 2 + k], (float)(300 + 10 * b + k));
  float dx[4 * 3 * 2] = {0}, dy[3 * 2] = {1, 2, 3, 4, 5, 6};
  nn_readout_backward(NN_READOUT_LAST, dx, dy, 4, 3, 2);
  for (int i = 0; i < 18; i++) cr_assert_eq(dx[i], 0.0f); /* t < T - 1 */
  for (int i = 0; i < 6; i++) cr_assert_eq(dx[18 + i], dy[i]);
}

Test(readout, mean_over_time) {
  float x[4 * 3 * 2], y[3 * 2];
  fill_tbc(x, 4, 3, 2);
  nn_readout_forward(NN_READOUT_MEAN, y, x, 4, 3, 2);
  for (int b = 0; b < 3; b++)
    for (int k = 0; k < 2; k++) cr_assert_float_eq(y[b * 2 + k], 150.0f + 10 * b + k, 1e-4);
}

Test(readout, all_is_identity_and_names_round_trip) {
  float x[2 * 2 * 3], y[2 * 2 * 3];
  fill_tbc(x, 2, 2, 3);
  cr_assert_eq(nn_readout_rows(NN_READOUT_ALL, 2, 2), 4);
  nn_readout_forward(NN_READOUT_ALL, y, x, 2, 2, 3);
  cr_assert_eq(memcmp(x, y, sizeof x), 0);
  const char *names[] = {"all", "last", "mean"};
  for (int i = 0; i < 3; i++) {
    NnReadout r;
    cr_assert_eq(nn_readout_from_name(names[i], &r), 0);
    cr_assert_str_eq(nn_readout_name(r), names[i]);
  }
  NnReadout r;
  cr_assert_eq(nn_readout_from_name("first", &r), -1);
}

/* ---- losses ---- */

typedef struct {
  int N, V;
  float *logits, *dlogits, *target, *tmp;
  int32_t *targets;
  bool mse;
} LossCtx;

static double loss_loss(void *p) {
  LossCtx *c = p;
  return c->mse ? nn_mse(NULL, c->logits, c->target, NULL, c->N, c->V, 0).loss
                : nn_crossentropy(NULL, c->logits, c->targets, c->N, c->V).loss;
}
static void loss_back(void *p) { /* the losses write their gradient: add it for the harness */
  LossCtx *c = p;
  if (c->mse)
    nn_mse(c->tmp, c->logits, c->target, NULL, c->N, c->V, 0);
  else
    nn_crossentropy(c->tmp, c->logits, c->targets, c->N, c->V);
  for (int i = 0; i < c->N * c->V; i++) c->dlogits[i] += c->tmp[i];
}

Test(crossentropy, gradient_with_ignored_targets) {
  int N = 5, V = 4;
  int32_t t[5] = {2, -1, 0, 3, -1};
  LossCtx c = {N, V, randn_like(20, 30), zeros(20), NULL, zeros(20), t, false};
  for (int i = 0; i < 20; i++) c.logits[i] *= 3.0f;
  Grad g[] = {{"logits", c.logits, c.dlogits, 20}};
  gradcheck(loss_loss, loss_back, &c, g, 1);
  for (int v = 0; v < V; v++) { /* ignored rows get no gradient */
    cr_assert_eq(c.dlogits[1 * V + v], PREFILL);
    cr_assert_eq(c.dlogits[4 * V + v], PREFILL);
  }
  free(c.logits), free(c.dlogits), free(c.tmp);
}

Test(crossentropy, hand_computed_value) {
  /* row 0: z = (1, 2, 3), y = 2: log(e + e^2 + e^3) - 3 = 0.40760596444438
   * row 1: z = (0, 0, 0), y = 0: log 3 = 1.09861228866811;  mean 0.75310912655625 */
  float z[6] = {1, 2, 3, 0, 0, 0}, dz[6];
  int32_t t[2] = {2, 0};
  NnLoss L = nn_crossentropy(dz, z, t, 2, 3);
  cr_assert_float_eq(L.loss, 0.75310912655625, 1e-6);
  cr_assert_eq(L.counted, 2);
  cr_assert_eq(L.correct, 2); /* row 1 ties: the first arg-max, 0, is the target */
  /* dz = (softmax - onehot) / 2 */
  double e = exp(1.0) + exp(2.0) + exp(3.0);
  cr_assert_float_eq(dz[0], exp(1.0) / e / 2, 1e-6);
  cr_assert_float_eq(dz[2], (exp(3.0) / e - 1) / 2, 1e-6);
  cr_assert_float_eq(dz[3], (1.0 / 3 - 1) / 2, 1e-6);
  cr_assert_float_eq(dz[4], 1.0 / 6, 1e-6);
}

Test(crossentropy, ignores_minus_one_targets) {
  float z[9] = {1, 2, 3, 9, -4, 0.5f, 0, 0, 0}, dz[9];
  for (int i = 0; i < 9; i++) dz[i] = 42.0f; /* written, not added */
  int32_t t[3] = {2, -1, -1};
  NnLoss L = nn_crossentropy(dz, z, t, 3, 3);
  cr_assert_float_eq(L.loss, 0.40760596444438, 1e-6);
  cr_assert_eq(L.counted, 1);
  cr_assert_eq(L.correct, 1);
  for (int i = 3; i < 9; i++) cr_assert_eq(dz[i], 0.0f);
  double s = dz[0] + dz[1] + dz[2];
  cr_assert(fabs(s) < 1e-6, "a counted row's gradient sums to 0: %g", s);
}

Test(crossentropy, accuracy_counts) {
  float z[4 * 3] = {5, 1, 0, /* argmax 0 */ 0, 1, 5, /* 2 */ 1, 7, 2, /* 1 */ 3, 3, 1 /* 0 (tie) */};
  int32_t t[4] = {0, 1, 1, -1};
  NnLoss L = nn_crossentropy(NULL, z, t, 4, 3);
  cr_assert_eq(L.counted, 3);
  cr_assert_eq(L.correct, 2);
}

Test(crossentropy, nothing_counted_is_zero) {
  float z[4] = {1, 2, 3, 4}, dz[4] = {7, 7, 7, 7};
  int32_t t[2] = {-1, -1};
  NnLoss L = nn_crossentropy(dz, z, t, 2, 2);
  cr_assert_eq(L.loss, 0.0);
  cr_assert_eq(L.counted, 0);
  for (int i = 0; i < 4; i++) cr_assert_eq(dz[i], 0.0f);
}

Test(crossentropy, large_logits_are_stable) {
  float z[3] = {1000, 0, -1000}, dz[3];
  int32_t t[1] = {1};
  NnLoss L = nn_crossentropy(dz, z, t, 1, 3);
  cr_assert_float_eq(L.loss, 1000.0, 1e-6);
  cr_assert_float_eq(dz[0], 1.0f, 1e-6);
  cr_assert_float_eq(dz[1], -1.0f, 1e-6);
}

Test(mse, gradient) {
  LossCtx c = {4, 3, randn_like(12, 31), zeros(12), randn_like(12, 32), zeros(12), NULL, true};
  Grad g[] = {{"pred", c.logits, c.dlogits, 12}};
  gradcheck(loss_loss, loss_back, &c, g, 1);
  free(c.logits), free(c.dlogits), free(c.target), free(c.tmp);
}

Test(mse, hand_computed_value) {
  /* N 2, K 2: differences (1, -2, 0, 3): (1 + 4 + 0 + 9) / 4 = 3.5; dpred = 2 d / 4 */
  float p[4] = {1, 0, 2, 5}, y[4] = {0, 2, 2, 2}, dp[4];
  NnLoss L = nn_mse(dp, p, y, NULL, 2, 2, 0);
  cr_assert_float_eq(L.loss, 3.5, 1e-9);
  cr_assert_float_eq(L.sum, 14.0, 1e-9);
  cr_assert_eq(L.counted, 4);
  float want[4] = {0.5f, -1.0f, 0.0f, 1.5f};
  for (int i = 0; i < 4; i++) cr_assert_float_eq(dp[i], want[i], 1e-7);
}

/* The model's form (the host table's mse): rows masked out by `on` count nothing and get a zero
 * gradient, and the division is by the count given (a rank's share of a global batch). */
Test(mse, masked_rows_and_given_count) {
  /* rows (1, -2), (5, 5) masked, (0, 3): sum 1 + 4 + 0 + 9 = 14 over a global count of 8 */
  float p[6] = {1, 0, 9, 9, 2, 5}, y[6] = {0, 2, 4, 4, 2, 2}, on[3] = {1, 0, 1}, dp[6];
  NnLoss L = nn_mse(dp, p, y, on, 3, 2, 8);
  cr_assert_eq(L.sum, 14.0);
  cr_assert_eq(L.loss, 14.0 / 8);
  cr_assert_eq(L.counted, 8);
  float want[6] = {0.25f, -0.5f, 0, 0, 0, 0.75f};
  for (int i = 0; i < 6; i++) cr_assert_eq(dp[i], want[i], "dpred[%d] = %g, want %g", i, dp[i], want[i]);
  /* count 0: the counted rows' values (4) */
  L = nn_mse(NULL, p, y, on, 3, 2, 0);
  cr_assert_eq(L.counted, 4);
  cr_assert_eq(L.loss, 3.5);
}

/* Large enough to split over threads (three threads: uneven row shares): forward and backward
 * equal the loops in double. */
Test(linear, threaded_matches_loops) {
  set_threads(3);
  int R = 301, I = 67, O = 129;
  float *inp = randn_like((size_t)R * I, 1), *w = randn_like((size_t)O * I, 2), *b = randn_like(O, 3);
  float *dy = randn_like((size_t)R * O, 4), *out = zeros((size_t)R * O), *dinp = zeros((size_t)R * I);
  float *dw = zeros((size_t)O * I), *db = zeros(O);
  nn_linear_forward(out, inp, w, b, R, I, O);
  nn_linear_backward(dinp, true, dw, db, dy, inp, w, R, I, O);
  for (int r = 0; r < R; r++)
    for (int o = 0; o < O; o++) {
      double s = b[o];
      for (int i = 0; i < I; i++) s += (double)inp[r * I + i] * w[o * I + i];
      cr_assert(fabs(out[r * O + o] - s) < 1e-4, "out[%d,%d]", r, o);
    }
  for (int o = 0; o < O; o++)
    for (int i = 0; i < I; i++) {
      double s = 0;
      for (int r = 0; r < R; r++) s += (double)dy[r * O + o] * inp[r * I + i];
      cr_assert(fabs(dw[o * I + i] - s) < 1e-3, "dw[%d,%d]", o, i);
    }
  /* dinp added to (from zeros, then from ones), and written over what was there (add_dinp false) */
  for (int pass = 0; pass < 3; pass++) {
    if (pass) {
      for (size_t e = 0; e < (size_t)R * I; e++) dinp[e] = pass == 1 ? 1.0f : 7.0f;
      nn_linear_backward(dinp, pass == 1, NULL, NULL, dy, inp, w, R, I, O);
    }
    for (int r = 0; r < R; r++)
      for (int i = 0; i < I; i++) {
        double s = pass == 1 ? 1.0 : 0.0;
        for (int o = 0; o < O; o++) s += (double)dy[r * O + o] * w[o * I + i];
        cr_assert(fabs(dinp[r * I + i] - s) < 1e-4, "pass %d: dinp[%d,%d]", pass, r, i);
      }
  }
  set_threads(0);
  free(inp), free(w), free(b), free(dy), free(out), free(dinp), free(dw), free(db);
}

/* The weight and bias gradients over rows that span several superblocks of GEMM_TN_ROWS (split
 * over threads there): equal to the loops in double, and to the bit on one thread and on three. */
static void lin_weight_grad(int threads, int R, int I, int O, float *dw, float *db) {
  set_threads(threads);
  float *inp = randn_like((size_t)R * I, 7), *w = randn_like((size_t)O * I, 8), *dy = randn_like((size_t)R * O, 9);
  memset(dw, 0, sizeof(float) * (size_t)O * I), memset(db, 0, sizeof(float) * (size_t)O);
  nn_linear_backward(NULL, true, dw, db, dy, inp, w, R, I, O);
  for (int o = 0; o < O; o++) {
    double sb = 0;
    for (int r = 0; r < R; r++) sb += dy[(size_t)r * O + o];
    cr_assert(fabs(db[o] - sb) < 1e-2, "db[%d] %g, loops %g", o, db[o], sb);
    for (int i = 0; i < I; i++) {
      double s = 0;
      for (int r = 0; r < R; r++) s += (double)dy[(size_t)r * O + o] * inp[(size_t)r * I + i];
      cr_assert(fabs(dw[o * I + i] - s) < 1e-2, "dw[%d,%d] %g, loops %g", o, i, dw[o * I + i], s);
    }
  }
  set_threads(0);
  free(inp), free(w), free(dy);
}

Test(linear, weight_gradient_same_on_any_thread_count) {
  int R = 3 * 4096 + 1000, I = 37, O = 11;
  float *dw1 = zeros((size_t)O * I), *db1 = zeros(O), *dw3 = zeros((size_t)O * I), *db3 = zeros(O);
  lin_weight_grad(1, R, I, O, dw1, db1);
  lin_weight_grad(3, R, I, O, dw3, db3);
  cr_assert(!memcmp(dw1, dw3, sizeof(float) * (size_t)O * I), "dw differs between 1 and 3 threads");
  cr_assert(!memcmp(db1, db3, sizeof(float) * (size_t)O), "db differs between 1 and 3 threads");
  free(dw1), free(db1), free(dw3), free(db3);
}
