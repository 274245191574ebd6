/* nn.c: the model's blocks around the recurrent cell as forward/backward pairs (nn.h has the
 * equations and the shapes); plain loops over channels innermost, cellc's own sgemm (runtime/gemm)
 * for the products. */
#include "nn.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "support.h"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794

/* ---- embedding ---- */

/* Rows over cellc's threads where there are enough to pay (a training batch's 32768 rows of 128
 * floats: 1.6 to 0.8 ms on two). */
void nn_embedding_forward(float *out, const int32_t *ids, const float *wte, int rows, int V, int C) {
  int nt = support_threads_for((double)rows * C, 1 << 18);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int r = 0; r < rows; r++) {
    CHECK(ids[r] >= 0 && ids[r] < V);
    memcpy(out + (size_t)r * C, wte + (size_t)ids[r] * C, sizeof(float) * (size_t)C);
  }
}

/* Each row's gradient into its token's row (dout and dwte do not overlap: the loops are
 * vectorized), the same bits on any thread count, two ways:
 * - a small table (the partial sums below in EMB_PRIVATE floats): the rows in chunks of EMB_CHUNK,
 *   each chunk summed from zero in row order by the thread that takes it, the threads taking
 *   chunks in order (the rows the layer's threads wrote, in their caches), then the chunks' sums
 *   added into dwte in chunk order. At 32768 rows, C = 256, 10 tokens, in training on 2 threads:
 *   0.72-0.82 ms (docs/performance.md);
 * - a larger one: the threads split the columns, each column summing its rows in row order, the
 *   split points on dwte's cache lines (where every row starts at the same place in a line: C a
 *   multiple of 16), so that no line is written by two threads. Both threads read every row of
 *   dout: 3.3 ms on 2 threads (1.2 on one) where the chunks take 0.8. */
enum { EMB_CHUNK = 4096, EMB_PRIVATE = 1 << 20 };

static void embedding_backward_cols(float *dwte, const float *dout, size_t ldd, const int32_t *ids, int rows, int C) {
  int lead = C % 16 == 0 ? (16 - (int)((uintptr_t)dwte / sizeof(float) % 16)) % 16 : 0; /* columns before the first line */
  int nl = (C - lead + 15) / 16;                                                           /* lines (or 16s) after them */
  int nt = support_threads_for((double)rows * C, 1 << 18);
  if (nt > nl) nt = nl > 0 ? nl : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int i = 0; i < nt; i++) {
    int c0 = i == 0 ? 0 : lead + nl * i / nt * 16, c1 = i + 1 == nt ? C : lead + nl * (i + 1) / nt * 16;
    for (int r = 0; r < rows; r++) {
      float *d = dwte + (size_t)ids[r] * C;
      const float *g = dout + (size_t)r * ldd;
#pragma omp simd
      for (int c = c0; c < c1; c++) d[c] += g[c];
    }
  }
}

void nn_embedding_backward(float *dwte, const float *dout, const int32_t *ids, int rows, int V, int C) {
  nn_embedding_backward_ld(dwte, dout, (size_t)C, ids, rows, V, C);
}

void nn_embedding_backward_ld(float *dwte, const float *dout, size_t ldd, const int32_t *ids, int rows, int V, int C) {
  if (!dwte || rows <= 0) return;
  for (int r = 0; r < rows; r++) CHECK(ids[r] >= 0 && ids[r] < V);
  int nch = (rows + EMB_CHUNK - 1) / EMB_CHUNK;
  size_t vc = (size_t)V * (size_t)C;
  if ((double)nch * (double)vc > EMB_PRIVATE) {
    embedding_backward_cols(dwte, dout, ldd, ids, rows, C);
    return;
  }
  float *part = xcalloc((size_t)nch * vc, sizeof(float));
  int nt = support_threads_for((double)rows * C, 1 << 18);
  if (nt > nch) nt = nch;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int i = 0; i < nt; i++)
    for (int k = nch * i / nt; k < nch * (i + 1) / nt; k++) {
      int r1 = rows - k * EMB_CHUNK < EMB_CHUNK ? rows : (k + 1) * EMB_CHUNK;
      for (int r = k * EMB_CHUNK; r < r1; r++) {
        float *d = part + (size_t)k * vc + (size_t)ids[r] * C;
        const float *g = dout + (size_t)r * ldd;
#pragma omp simd
        for (int c = 0; c < C; c++) d[c] += g[c];
      }
    }
  for (int k = 0; k < nch; k++) {
    const float *p = part + (size_t)k * vc;
#pragma omp simd
    for (size_t j = 0; j < vc; j++) dwte[j] += p[j];
  }
  free(part);
}

/* ---- linear ---- */

/* Below this many multiply-adds a GEMM stays on one thread. */
#define GEMM_MIN_MACS_PER_THREAD (1 << 20)

/* The threads a product of `macs` multiply-adds over `parts` independent parts pays for. */
static int gemm_threads(double macs, int64_t parts) {
  static bool single;
  if (!single) openblas_set_num_threads(1), single = true; /* the threads are ours (gemm.c's cblas fallback) */
  int nt = support_threads_for(macs, GEMM_MIN_MACS_PER_THREAD);
  return nt < parts ? nt : (int)parts;
}

/* C[rows, N] (+)= A[rows, K] op(W) with W packed (gemm.h), C's rows split over the threads. */
static void gemm_rows(const GemmPacked *pk, int rows, const float *A, int lda, float *C, int ldc, bool accumulate) {
  int nt = gemm_threads((double)rows * pk->N * pk->K, rows);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int i = 0; i < nt; i++) {
    int m0 = (int)((long)rows * i / nt), m1 = (int)((long)rows * (i + 1) / nt);
    gemm_run(pk, m1 - m0, A + (size_t)m0 * lda, lda, C + (size_t)m0 * ldc, ldc, accumulate);
  }
}

void nn_linear_forward(float *out, const float *inp, const float *w, const float *b, int rows, int nin, int nout) {
  if (rows <= 0 || nout <= 0) return;
  if (b || nin <= 0) /* the bias, or zeros: no inputs */
    for (int r = 0; r < rows; r++)
      for (int o = 0; o < nout; o++) out[(size_t)r * nout + o] = b ? b[o] : 0.0f;
  if (nin <= 0) return;
  /* out (rows, nout) (+)= inp (rows, nin) W^T, W (nout, nin) */
  GemmPacked pk = {0};
  gemm_pack(&pk, gemm_isa_default(), w, nin, nout, nin, true);
  gemm_rows(&pk, rows, inp, nin, out, nout, b != NULL);
  gemm_packed_free(&pk);
}

/* dw (nout, nin) += dout^T inp and db (nout) += dout's column sums over the rows: the rows split
 * over the threads at multiples of GEMM_TN_ROWS, each thread's float64 totals added in thread
 * order, so the sums do not depend on the thread count (gemm.h). */
static void linear_weight_grad(float *dw, float *db, const float *dout, const float *inp, int rows, int nin, int nout) {
  int64_t nsb = (rows + GEMM_TN_ROWS - 1) / GEMM_TN_ROWS;
  int nt = gemm_threads((double)rows * nout * nin, nsb);
  size_t mn = (size_t)nout * (size_t)nin, len = mn + (size_t)nout;
  double *tot = xcalloc((size_t)nt * len, sizeof(double));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int i = 0; i < nt; i++) {
    int64_t k0 = nsb * i / nt * GEMM_TN_ROWS, k1 = nsb * (i + 1) / nt * GEMM_TN_ROWS;
    if (k1 > rows) k1 = rows;
    GemmScratch sc = {0};
    double *t = tot + (size_t)i * len;
    gemm_tn_total(gemm_isa_default(), &(GemmCols){dout + k0 * nout, nout, nout}, 1, &(GemmCols){inp + k0 * nin, nin, nin}, 1,
                  (int)(k1 - k0), t, db ? t + mn : NULL, &sc);
    gemm_scratch_free(&sc);
  }
  for (size_t e = 0; e < len; e++) {
    if (e >= mn && !db) break;
    double sum = 0;
    for (int i = 0; i < nt; i++) sum += tot[(size_t)i * len + e];
    if (e < mn) dw[e] += (float)sum;
    else db[e - mn] += (float)sum;
  }
  free(tot);
}

void nn_linear_backward(float *dinp, bool add_dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int rows, int nin, int nout) {
  if (rows <= 0 || nout <= 0) return;
  if (dw && nin > 0) linear_weight_grad(dw, db, dout, inp, rows, nin, nout); /* db with it */
  else if (db)
    for (int r = 0; r < rows; r++) {
      const float *g = dout + (size_t)r * nout;
      for (int o = 0; o < nout; o++) db[o] += g[o];
    }
  if (!dinp || nin <= 0) return;
  /* dinp (rows, nin) (+)= dout (rows, nout) W, W (nout, nin) */
  GemmPacked pk = {0};
  gemm_pack(&pk, gemm_isa_default(), w, nin, nin, nout, false);
  gemm_rows(&pk, rows, dout, nout, dinp, nin, add_dinp);
  gemm_packed_free(&pk);
}

/* y = n (.) w + b over one row of C, w and b optional. */
static void affine_row(float *y, const float *n, const float *w, const float *b, int C) {
  if (w && b)
    for (int c = 0; c < C; c++) y[c] = n[c] * w[c] + b[c];
  else if (w)
    for (int c = 0; c < C; c++) y[c] = n[c] * w[c];
  else if (b)
    for (int c = 0; c < C; c++) y[c] = n[c] + b[c];
  else if (y != n)
    memcpy(y, n, sizeof(float) * (size_t)C);
}

/* ---- layernorm ---- */

void nn_norm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int rows,
                     int C) {
  for (int r = 0; r < rows; r++) {
    const float *x = inp + (size_t)r * C;
    float *y = out + (size_t)r * C;
    float mu = 0.0f;
    if (mean) {
      for (int c = 0; c < C; c++) mu += x[c];
      mu /= (float)C;
    }
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
      float d = x[c] - mu;
      v += d * d;
    }
    float rs = 1.0f / sqrtf(v / (float)C + NN_NORM_EPS);
    for (int c = 0; c < C; c++) y[c] = (x[c] - mu) * rs;
    affine_row(y, y, w, b, C);
    if (mean) mean[r] = mu;
    rstd[r] = rs;
  }
}

/* With n = (x - mu) rstd and dn = dout (.) w:
 *   layernorm: dx = rstd (dn - mean_c(dn) - n mean_c(dn (.) n));  rmsnorm (mu = 0): dx = rstd (dn - n mean_c(dn (.) n));
 *   dw += dout (.) n,  db += dout. */
void nn_norm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                      const float *mean, const float *rstd, int rows, int C) {
  for (int r = 0; r < rows; r++) {
    const float *x = inp + (size_t)r * C;
    const float *g = dout + (size_t)r * C;
    float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
    if (dinp) {
      float *dx = dinp + (size_t)r * C;
      float sdn = 0.0f, sdnn = 0.0f;
      for (int c = 0; c < C; c++) {
        float n = (x[c] - mu) * rs;
        float dn = w ? g[c] * w[c] : g[c];
        sdn += dn;
        sdnn += dn * n;
      }
      float mdn = mean ? sdn / (float)C : 0.0f, mdnn = sdnn / (float)C;
      for (int c = 0; c < C; c++) {
        float n = (x[c] - mu) * rs;
        float dn = w ? g[c] * w[c] : g[c];
        dx[c] += mean ? rs * (dn - mdn - n * mdnn) : rs * (dn - n * mdnn);
      }
    }
    if (dw)
      for (int c = 0; c < C; c++) dw[c] += g[c] * (x[c] - mu) * rs;
    if (db)
      for (int c = 0; c < C; c++) db[c] += g[c];
  }
}

/* ---- batchnorm ---- */

void nn_batchnorm_forward(float *out, float *mean, float *rstd, float *running_mean, float *running_var,
                          const float *inp, const float *w, const float *b, int rows, int C, bool training) {
  if (training) {
    CHECK(rows > 1);
    /* rows outer, channels inner: per-channel sums in mean, then in rstd */
    for (int c = 0; c < C; c++) mean[c] = 0.0f, rstd[c] = 0.0f;
    for (int r = 0; r < rows; r++) {
      const float *x = inp + (size_t)r * C;
      for (int c = 0; c < C; c++) mean[c] += x[c];
    }
    for (int c = 0; c < C; c++) mean[c] /= (float)rows;
    for (int r = 0; r < rows; r++) {
      const float *x = inp + (size_t)r * C;
      for (int c = 0; c < C; c++) {
        float d = x[c] - mean[c];
        rstd[c] += d * d;
      }
    }
    const float m = NN_BN_MOMENTUM;
    for (int c = 0; c < C; c++) {
      float var = rstd[c] / (float)rows; /* biased: normalizes */
      running_mean[c] = (1.0f - m) * running_mean[c] + m * mean[c];
      running_var[c] = (1.0f - m) * running_var[c] + m * var * (float)rows / (float)(rows - 1); /* unbiased */
      rstd[c] = 1.0f / sqrtf(var + NN_NORM_EPS);
    }
  } else {
    for (int c = 0; c < C; c++) {
      mean[c] = running_mean[c];
      rstd[c] = 1.0f / sqrtf(running_var[c] + NN_NORM_EPS);
    }
  }
  for (int r = 0; r < rows; r++) {
    const float *x = inp + (size_t)r * C;
    float *y = out + (size_t)r * C;
    for (int c = 0; c < C; c++) y[c] = (x[c] - mean[c]) * rstd[c];
    affine_row(y, y, w, b, C);
  }
}

/* Training, per channel over the rows, with n = (x - mu) rstd and dn = dout (.) w:
 *   dx = rstd (dn - mean_r(dn) - n mean_r(dn (.) n)).   Eval: dx = rstd dn.
 * dw += sum_r dout (.) n, db += sum_r dout, either way. */
void nn_batchnorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int rows, int C, bool training) {
  float *sg = scratch;      /* (C) sum_r dout */
  float *sgn = scratch + C; /* (C) sum_r dout (.) n */
  for (int c = 0; c < C; c++) sg[c] = 0.0f, sgn[c] = 0.0f;
  for (int r = 0; r < rows; r++) {
    const float *x = inp + (size_t)r * C;
    const float *g = dout + (size_t)r * C;
    for (int c = 0; c < C; c++) {
      sg[c] += g[c];
      sgn[c] += g[c] * (x[c] - mean[c]) * rstd[c];
    }
  }
  if (dw)
    for (int c = 0; c < C; c++) dw[c] += sgn[c];
  if (db)
    for (int c = 0; c < C; c++) db[c] += sg[c];
  if (!dinp) return;
  /* mean_r(dn) = w sg / rows, mean_r(dn n) = w sgn / rows, in place (constants in eval) */
  for (int c = 0; c < C; c++) {
    float wc = w ? w[c] : 1.0f;
    sg[c] = training ? wc * sg[c] / (float)rows : 0.0f;
    sgn[c] = training ? wc * sgn[c] / (float)rows : 0.0f;
  }
  for (int r = 0; r < rows; r++) {
    const float *x = inp + (size_t)r * C;
    const float *g = dout + (size_t)r * C;
    float *dx = dinp + (size_t)r * C;
    for (int c = 0; c < C; c++) {
      float n = (x[c] - mean[c]) * rstd[c];
      float dn = w ? g[c] * w[c] : g[c];
      dx[c] += rstd[c] * (dn - sg[c] - n * sgn[c]);
    }
  }
}

/* ---- gelu ---- */

/* gelu'(x) = Phi(x) + x phi(x) */
static inline float gelu_grad(float x) {
  float cdf = 0.5f * (1.0f + erff(x * (float)SQRT1_2));
  float pdf = (float)INV_SQRT_2PI * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

void nn_gelu_forward(float *out, const float *inp, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + erff(x * (float)SQRT1_2));
  }
}

void nn_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
  if (!dinp) return;
  for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * gelu_grad(inp[i]);
}

/* ---- the mixers' blocks of parameters and caches ---- */

/* A linear layer from `in` to `out` channels: its weight (out, in) then its bias (out) in base. */
static size_t linear_size(int in, int out) { return (size_t)out * in + (size_t)out; }

static float *linear_views(float **w, float **b, float *base, int in, int out) {
  *w = base, base += (size_t)out * in;
  *b = base, base += out;
  return base;
}

/* k views of n floats each, one after the other in base. */
static float *equal_views(float *base, size_t n, float **const views[], int k) {
  for (int i = 0; i < k; i++) *views[i] = base, base += n;
  return base;
}

/* ---- GLU mixer ---- */

size_t nn_glu_size(int C, int H) { return 2 * linear_size(C, H) + linear_size(H, C); }

float *nn_glu_views(NnGlu *p, float *base, int C, int H) {
  base = linear_views(&p->w1, &p->b1, base, C, H);
  base = linear_views(&p->w2, &p->b2, base, C, H);
  return linear_views(&p->w3, &p->b3, base, H, C);
}

size_t nn_glu_cache_size(int rows, int H) { return 3 * (size_t)rows * H; }

float *nn_glu_cache_views(NnGluCache *c, float *base, int rows, int H) {
  return equal_views(base, (size_t)rows * H, (float **const[]){&c->a, &c->s, &c->g}, 3);
}

size_t nn_glu_scratch_size(int rows, int H) { return 2 * (size_t)rows * H; }

void nn_glu_forward(float *out, const NnGluCache *cache, const float *inp, const NnGlu *p, int rows, int C, int H) {
  size_t n = (size_t)rows * H;
  float *a = cache->a, *s = cache->s, *g = cache->g;
  nn_linear_forward(a, inp, p->w1, p->b1, rows, C, H);
  nn_linear_forward(s, inp, p->w2, p->b2, rows, C, H);
  for (size_t i = 0; i < n; i++) {
    s[i] = 1.0f / (1.0f + expf(-s[i]));
    g[i] = a[i] * s[i];
  }
  nn_linear_forward(out, g, p->w3, p->b3, rows, H, C);
}

void nn_glu_backward(float *dinp, const NnGlu *d, float *scratch, const float *dout, const float *inp,
                     const NnGluCache *cache, const NnGlu *p, int rows, int C, int H) {
  size_t n = (size_t)rows * H;
  const float *a = cache->a, *s = cache->s;
  float *dg = scratch;     /* (rows, H): dL/dg, then dL/d(pre-sigmoid) */
  float *da = scratch + n; /* (rows, H): dL/da */
  /* y = g W3^T + b3 */
  nn_linear_backward(dg, false, d->w3, d->b3, dout, cache->g, p->w3, rows, H, C);
  /* g = a (.) s, s = sigmoid(z): da = dg s, dz = dg a s (1 - s) */
  for (size_t i = 0; i < n; i++) {
    da[i] = dg[i] * s[i];
    dg[i] = dg[i] * a[i] * s[i] * (1.0f - s[i]);
  }
  /* z = x W2^T + b2, a = x W1^T + b1 */
  nn_linear_backward(dinp, true, d->w2, d->b2, dg, inp, p->w2, rows, C, H);
  nn_linear_backward(dinp, true, d->w1, d->b1, da, inp, p->w1, rows, C, H);
}

/* ---- MLP mixer ---- */

size_t nn_mlp_size(int C, int H) { return linear_size(C, H) + linear_size(H, C); }

float *nn_mlp_views(NnMlp *p, float *base, int C, int H) {
  base = linear_views(&p->w1, &p->b1, base, C, H);
  return linear_views(&p->w2, &p->b2, base, H, C);
}

size_t nn_mlp_cache_size(int rows, int H) { return 2 * (size_t)rows * H; }

float *nn_mlp_cache_views(NnMlpCache *c, float *base, int rows, int H) {
  return equal_views(base, (size_t)rows * H, (float **const[]){&c->h, &c->a}, 2);
}

size_t nn_mlp_scratch_size(int rows, int H) { return (size_t)rows * H; }

void nn_mlp_forward(float *out, const NnMlpCache *cache, const float *inp, const NnMlp *p, int rows, int C, int H) {
  nn_linear_forward(cache->h, inp, p->w1, p->b1, rows, C, H);
  nn_gelu_forward(cache->a, cache->h, (size_t)rows * H);
  nn_linear_forward(out, cache->a, p->w2, p->b2, rows, H, C);
}

void nn_mlp_backward(float *dinp, const NnMlp *d, float *scratch, const float *dout, const float *inp,
                     const NnMlpCache *cache, const NnMlp *p, int rows, int C, int H) {
  size_t n = (size_t)rows * H;
  float *da = scratch; /* (rows, H): dL/da */
  float *dh = scratch; /* (rows, H): dL/dh, over da in place */
  /* y = a W2^T + b2, a = gelu(h), h = x W1^T + b1: in reverse */
  nn_linear_backward(da, false, d->w2, d->b2, dout, cache->a, p->w2, rows, H, C);
  for (size_t i = 0; i < n; i++) dh[i] = da[i] * gelu_grad(cache->h[i]); /* in place over da */
  nn_linear_backward(dinp, true, d->w1, d->b1, dh, inp, p->w1, rows, C, H);
}

/* ---- dropout ---- */

void nn_dropout_forward(float *out, float *mask, const float *inp, size_t n, float p, uint64_t key, DrawSlice slice,
                        bool training) {
  CHECK(p >= 0.0f && p < 1.0f);
  if (!training || p == 0.0f) {
    for (size_t i = 0; i < n; i++) mask[i] = 1.0f;
    if (out != inp) memcpy(out, inp, sizeof(float) * n);
    return;
  }
  float scale = 1.0f / (1.0f - p);
  for (size_t i = 0; i < n; i++) mask[i] = rng_philox_uniform(key, draw_counter(slice, i)) >= p ? scale : 0.0f;
  for (size_t i = 0; i < n; i++) out[i] = inp[i] * mask[i];
}

void nn_dropout_backward(float *dinp, const float *dout, const float *mask, size_t n) {
  if (!dinp) return;
  for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * mask[i];
}

/* ---- skip connection ---- */

void nn_add_forward(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void nn_add_backward(float *da, float *db, const float *dout, size_t n) {
  if (da)
    for (size_t i = 0; i < n; i++) da[i] += dout[i];
  if (db)
    for (size_t i = 0; i < n; i++) db[i] += dout[i];
}

/* ---- readouts ---- */

int nn_readout_from_name(const char *name, NnReadout *out) {
  static const char *const names[] = {"all", "last", "mean"};
  for (int i = 0; i < 3; i++)
    if (strcmp(name, names[i]) == 0) {
      *out = (NnReadout)i;
      return 0;
    }
  return -1;
}

const char *nn_readout_name(NnReadout r) {
  switch (r) {
  case NN_READOUT_ALL: return "all";
  case NN_READOUT_LAST: return "last";
  case NN_READOUT_MEAN: return "mean";
  default: UNREACHABLE("nn_readout_name: unknown readout");
  }
}

int nn_readout_rows(NnReadout r, int T, int B) {
  switch (r) {
  case NN_READOUT_ALL: return T * B;
  case NN_READOUT_LAST:
  case NN_READOUT_MEAN: return B;
  default: UNREACHABLE("nn_readout_rows: unknown readout");
  }
}

void nn_readout_forward(NnReadout r, float *out, const float *inp, int T, int B, int C) {
  size_t bc = (size_t)B * C;
  switch (r) {
  case NN_READOUT_ALL: memcpy(out, inp, sizeof(float) * (size_t)T * bc); return;
  case NN_READOUT_LAST:
    CHECK(T > 0);
    memcpy(out, inp + (size_t)(T - 1) * bc, sizeof(float) * bc);
    return;
  case NN_READOUT_MEAN: {
    CHECK(T > 0);
    memset(out, 0, sizeof(float) * bc);
    for (int t = 0; t < T; t++) {
      const float *x = inp + (size_t)t * bc;
      for (size_t i = 0; i < bc; i++) out[i] += x[i];
    }
    float inv = 1.0f / (float)T;
    for (size_t i = 0; i < bc; i++) out[i] *= inv;
    return;
  }
  default: UNREACHABLE("nn_readout_forward: unknown readout");
  }
}

void nn_readout_backward(NnReadout r, float *dinp, const float *dout, int T, int B, int C) {
  if (!dinp) return;
  size_t bc = (size_t)B * C;
  switch (r) {
  case NN_READOUT_ALL:
    for (size_t i = 0; i < (size_t)T * bc; i++) dinp[i] += dout[i];
    return;
  case NN_READOUT_LAST: {
    CHECK(T > 0);
    float *d = dinp + (size_t)(T - 1) * bc;
    for (size_t i = 0; i < bc; i++) d[i] += dout[i];
    return;
  }
  case NN_READOUT_MEAN: {
    CHECK(T > 0);
    float inv = 1.0f / (float)T;
    for (int t = 0; t < T; t++) {
      float *d = dinp + (size_t)t * bc;
      for (size_t i = 0; i < bc; i++) d[i] += dout[i] * inv;
    }
    return;
  }
  default: UNREACHABLE("nn_readout_backward: unknown readout");
  }
}

/* ---- losses ---- */

NnLoss nn_crossentropy(float *dlogits, const float *logits, const int32_t *targets, int N, int V) {
  NnLoss L = {0};
  for (int r = 0; r < N; r++) {
    CHECK(targets[r] == -1 || (targets[r] >= 0 && targets[r] < V));
    L.counted += targets[r] >= 0;
  }
  double inv = L.counted ? 1.0 / (double)L.counted : 0.0;
  double sum = 0.0;
  for (int r = 0; r < N; r++) {
    const float *z = logits + (size_t)r * V;
    float *dz = dlogits ? dlogits + (size_t)r * V : NULL;
    int y = targets[r];
    if (y < 0) {
      if (dz) memset(dz, 0, sizeof(float) * (size_t)V);
      continue;
    }
    int arg = 0; /* the first arg-max */
    float zmax = z[0];
    for (int v = 1; v < V; v++)
      if (z[v] > zmax) zmax = z[v], arg = v;
    double se = 0.0;
    if (dz) { /* exp(z - max) once, kept in dz and scaled into the softmax below */
      for (int v = 0; v < V; v++) dz[v] = expf(z[v] - zmax);
      for (int v = 0; v < V; v++) se += dz[v];
    } else {
      for (int v = 0; v < V; v++) se += expf(z[v] - zmax);
    }
    sum += log(se) + (double)zmax - (double)z[y]; /* logsumexp(z) - z[y] */
    L.correct += arg == y;
    if (dz) {
      float k = (float)(inv / se); /* softmax / n */
      for (int v = 0; v < V; v++) dz[v] *= k;
      dz[y] -= (float)inv;
    }
  }
  L.loss = sum * inv;
  L.sum = sum;
  return L;
}

NnLoss nn_mse(float *dpred, const float *pred, const float *target, const float *on, int N, int K, int64_t counted) {
  int64_t mine = 0;
  double sum = 0.0;
  for (int r = 0; r < N; r++)
    for (int j = 0; j < K && (!on || on[r] != 0); j++, mine++) {
      double e = (double)pred[(size_t)r * K + j] - target[(size_t)r * K + j];
      sum += e * e;
    }
  NnLoss L = {0.0, sum, counted ? counted : mine, 0};
  if (L.counted) L.loss = sum / (double)L.counted;
  for (int r = 0; dpred && r < N; r++)
    for (int j = 0; j < K; j++) {
      size_t i = (size_t)r * K + j;
      dpred[i] = L.counted && (!on || on[r] != 0) ? (float)(2.0 * ((double)pred[i] - target[i]) / (double)L.counted) : 0.0f;
    }
  return L;
}
