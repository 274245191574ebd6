/* device.c: the host device (device.h's Device of kind DEVICE_CPU): runtime/nn's and runtime/optim's
 * code on host memory, what `train.device = cpu` runs; and the optimizer's OptApply over any
 * device, so that cellc train updates every device's tensors through one loop. */
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "nn.h"
#include "optim.h"
#include "support.h"

static void h_close(Device *o) { (void)o; }
static int h_prepare(Device *o, char *err, size_t errlen) {
  (void)o, (void)err, (void)errlen;
  return 0;
}
static void *h_alloc(Device *o, size_t bytes) {
  (void)o;
  return memuse_calloc(bytes);
}
static void h_free(Device *o, void *p) {
  (void)o;
  memuse_free(p);
}
static void h_copy(Device *o, void *dst, const void *src, size_t bytes) {
  (void)o;
  if (bytes) memcpy(dst, src, bytes);
}
/* Large buffers (the 16 MB activation gradient of a training batch) in slices over cellc's
 * threads: one core's stores do not fill the memory bandwidth. */
static void h_zero(Device *o, void *p, size_t bytes) {
  (void)o;
  int nt = support_threads_for((double)bytes, 1 << 22);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int i = 0; i < nt; i++) {
    size_t b0 = bytes * (size_t)i / (size_t)nt / 64 * 64, b1 = i + 1 == nt ? bytes : bytes * (size_t)(i + 1) / (size_t)nt / 64 * 64;
    memset((char *)p + b0, 0, b1 - b0);
  }
}
static size_t h_mem_free_bytes(Device *o) {
  (void)o;
  return SIZE_MAX;
}

static void h_embed_fwd(Device *o, float *out, const int32_t *ids, const float *wte, int rows, int V, int C) {
  (void)o;
  nn_embedding_forward(out, ids, wte, rows, V, C);
}
static void h_embed_bwd(Device *o, float *dwte, const float *dout, const int32_t *ids, int rows, int V, int C) {
  (void)o;
  nn_embedding_backward(dwte, dout, ids, rows, V, C);
}
static void h_linear_fwd(Device *o, float *out, const float *inp, const float *w, const float *b, int rows, int nin, int nout) {
  (void)o;
  nn_linear_forward(out, inp, w, b, rows, nin, nout);
}
static void h_linear_bwd(Device *o, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                         int rows, int nin, int nout) {
  (void)o;
  nn_linear_backward(dinp, false, dw, db, dout, inp, w, rows, nin, nout);
}
static void h_readout_fwd(Device *o, int mode, float *out, const float *inp, int T, int B, int C) {
  (void)o;
  nn_readout_forward((NnReadout)mode, out, inp, T, B, C);
}
static void h_readout_bwd(Device *o, int mode, float *dinp, const float *dout, int T, int B, int C) {
  (void)o;
  nn_readout_backward((NnReadout)mode, dinp, dout, T, B, C);
}
static void h_bcast_rows(Device *o, float *out, const float *v, int rows, int n) {
  (void)o;
  for (int r = 0; r < rows; r++) memcpy(out + (size_t)r * n, v, sizeof(float) * (size_t)n);
}
static void h_colsum_add(Device *o, float *acc, const float *x, int rows, int n) {
  (void)o;
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++) acc[j] += x[(size_t)r * n + j];
}
static void h_add(Device *o, float *out, const float *a, const float *b, size_t n) {
  (void)o;
  nn_add_forward(out, a, b, n);
}
static void h_acc(Device *o, float *y, const float *x, size_t n) {
  (void)o;
  nn_add_backward(y, NULL, x, n);
}
static void h_norm_fwd(Device *o, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                       int rows, int C) {
  (void)o;
  nn_norm_forward(out, mean, rstd, inp, w, b, rows, C);
}
static void h_norm_bwd(Device *o, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int rows, int C) {
  (void)o;
  nn_norm_backward(dinp, dw, db, dout, inp, w, mean, rstd, rows, C);
}
static void h_bn_fwd(Device *o, float *out, float *mean, float *rstd, float *rmean, float *rvar, const float *inp,
                     const float *w, const float *b, int rows, int C, bool training) {
  (void)o;
  nn_batchnorm_forward(out, mean, rstd, rmean, rvar, inp, w, b, rows, C, training);
}
static void h_bn_bwd(Device *o, float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                     const float *w, const float *mean, const float *rstd, int rows, int C, bool training) {
  (void)o;
  nn_batchnorm_backward(dinp, dw, db, scratch, dout, inp, w, mean, rstd, rows, C, training);
}
static NnGlu glu_of(float *const *p) { return p ? (NnGlu){p[0], p[1], p[2], p[3], p[4], p[5]} : (NnGlu){0}; }
static NnMlp mlp_of(float *const *p) { return p ? (NnMlp){p[0], p[1], p[2], p[3]} : (NnMlp){0}; }
static void h_glu_fwd(Device *o, float *out, float *cache, const float *inp, float *const *p, int rows, int C, int H) {
  (void)o;
  NnGluCache c;
  nn_glu_cache_views(&c, cache, rows, H);
  NnGlu g = glu_of(p);
  nn_glu_forward(out, &c, inp, &g, rows, C, H);
}
static void h_glu_bwd(Device *o, float *dinp, float *const *d, float *scratch, const float *dout, const float *inp, float *cache,
                      float *const *p, int rows, int C, int H) {
  (void)o;
  NnGluCache c;
  nn_glu_cache_views(&c, cache, rows, H);
  NnGlu g = glu_of(p), dg = glu_of(d);
  nn_glu_backward(dinp, &dg, scratch, dout, inp, &c, &g, rows, C, H);
}
static void h_mlp_fwd(Device *o, float *out, float *cache, const float *inp, float *const *p, int rows, int C, int H) {
  (void)o;
  NnMlpCache c;
  nn_mlp_cache_views(&c, cache, rows, H);
  NnMlp m = mlp_of(p);
  nn_mlp_forward(out, &c, inp, &m, rows, C, H);
}
static void h_mlp_bwd(Device *o, float *dinp, float *const *d, float *scratch, const float *dout, const float *inp, float *cache,
                      float *const *p, int rows, int C, int H) {
  (void)o;
  NnMlpCache c;
  nn_mlp_cache_views(&c, cache, rows, H);
  NnMlp m = mlp_of(p), dm = mlp_of(d);
  nn_mlp_backward(dinp, &dm, scratch, dout, inp, &c, &m, rows, C, H);
}
static void h_uniform_open(Device *o, float *out, size_t n, uint64_t key, DrawSlice slice) {
  (void)o;
  for (size_t i = 0; i < n; i++) out[i] = rng_philox_uniform_open(key, draw_counter(slice, i));
}
static void h_dropout_fwd(Device *o, float *out, float *mask, const float *inp, size_t n, float p, uint64_t key,
                          DrawSlice slice, bool training) {
  (void)o;
  nn_dropout_forward(out, mask, inp, n, p, key, slice, training);
}
static void h_dropout_bwd(Device *o, float *dinp, const float *dout, const float *mask, size_t n) {
  (void)o;
  nn_dropout_backward(dinp, dout, mask, n);
}
static void h_crossentropy(Device *o, float *dlogits, const float *logits, const int32_t *targets, int N, int V,
                           int64_t counted, double *loss_sum, int64_t *correct) {
  (void)o;
  NnLoss l = nn_crossentropy(dlogits, logits, targets, N, V);
  CHECK(l.counted == counted);
  *loss_sum = l.loss * (double)l.counted, *correct = l.correct;
}
static void h_mse(Device *o, float *dpred, const float *pred, const float *target, const float *on, int N, int K,
                  int64_t counted, double *sq_sum) {
  (void)o;
  *sq_sum = nn_mse(dpred, pred, target, on, N, K, counted).sum;
}
static double h_sumsq(Device *o, const float *x, size_t n) {
  (void)o;
  double ss = 0;
  for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  return ss;
}
static void h_scale(Device *o, float *x, float c, size_t n) {
  (void)o;
  for (size_t i = 0; i < n; i++) x[i] *= c;
}
static void h_sgd(Device *o, float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu) {
  (void)o;
  opt_sgd_apply(p, g, buf, n, lr, wd, mu);
}
static void h_adam(Device *o, float *p, const float *g, float *m, float *v, size_t n, const DevAdam *k) {
  (void)o;
  opt_adam_apply(k, p, g, m, v, n);
}

static Device host_device = {
    .name = "cpu", .kind = DEVICE_CPU, .close = h_close, .prepare = h_prepare, .alloc = h_alloc, .free = h_free, .upload = h_copy,
    .download = h_copy, .zero = h_zero, .copy = h_copy, .mem_free_bytes = h_mem_free_bytes, .embed_fwd = h_embed_fwd,
    .embed_bwd = h_embed_bwd, .linear_fwd = h_linear_fwd, .linear_bwd = h_linear_bwd, .readout_fwd = h_readout_fwd,
    .readout_bwd = h_readout_bwd, .bcast_rows = h_bcast_rows, .colsum_add = h_colsum_add, .add = h_add, .acc = h_acc,
    .norm_fwd = h_norm_fwd, .norm_bwd = h_norm_bwd, .batchnorm_fwd = h_bn_fwd, .batchnorm_bwd = h_bn_bwd,
    .glu_fwd = h_glu_fwd, .glu_bwd = h_glu_bwd, .mlp_fwd = h_mlp_fwd, .mlp_bwd = h_mlp_bwd, .dropout_fwd = h_dropout_fwd, .uniform_open = h_uniform_open,
    .dropout_bwd = h_dropout_bwd, .crossentropy = h_crossentropy, .mse = h_mse, .sumsq = h_sumsq, .scale = h_scale, .sgd = h_sgd, .adam = h_adam,
};

Device *device_host(void) { return &host_device; }

/* ---- the optimizer's per-tensor updates through a Device ---- */

static void a_sgd(void *ctx, float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu) {
  Device *o = ctx;
  o->sgd(o, p, g, buf, n, lr, wd, mu);
}
static void a_adam(void *ctx, const OptAdamK *k, float *p, const float *g, float *m, float *v, size_t n) {
  Device *o = ctx;
  o->adam(o, p, g, m, v, n, k);
}
static double a_sumsq(void *ctx, const float *x, size_t n) {
  Device *o = ctx;
  return o->sumsq(o, x, n);
}
static void a_scale(void *ctx, float *x, float c, size_t n) {
  Device *o = ctx;
  o->scale(o, x, c, n);
}

OptApply device_opt_apply(Device *d) { return (OptApply){d, a_sgd, a_adam, a_sumsq, a_scale}; }
