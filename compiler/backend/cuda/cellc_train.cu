/* cellc_train.cu: the device kernels of training (docs/gpu.md, "Training on the GPU"): what
 * runtime/nn and runtime/optim do on the host, for the device operations of cuda_ops.c. Compiled
 * once per process by NVRTC (or the emulator). Each kernel keeps the host code's order of float
 * operations where it can (a row's or a column's sums in the host's order), so cuda-emu follows the
 * CPU to rounding; the sums over many rows (losses, the gradient norm) are in double. */
#include "cellc_prelude.h"

#define CELLC_TRAIN_BLOCK 256

/* i over [0, n) across the whole grid */
#define GRID_STRIDE(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)

/* out[r, c] = wte[ids[r], c] */
extern "C" __global__ void tr_embed_fwd(float *out, const int *ids, const float *wte, long long rows, int C) {
  GRID_STRIDE(i, rows * C) {
    long long r = i / C;
    out[i] = wte[(long long)ids[r] * C + (i - r * C)];
  }
}

/* dwte[ids[r], c] += dout[r, c] */
extern "C" __global__ void tr_embed_bwd(float *dwte, const float *dout, const int *ids, long long rows, int C) {
  GRID_STRIDE(i, rows * C) {
    long long r = i / C;
    atomicAdd(&dwte[(long long)ids[r] * C + (i - r * C)], dout[i]);
  }
}

/* out[r, j] = v[j] over rows r */
extern "C" __global__ void tr_bcast_rows(float *out, const float *v, long long rows, int n) {
  GRID_STRIDE(i, rows * n) out[i] = v[i % n];
}

/* acc[j] += sum over r of x[r, j], rows in order (a thread a column) */
extern "C" __global__ void tr_colsum_add(float *acc, const float *x, long long rows, int n) {
  GRID_STRIDE(j, (long long)n) {
    float a = acc[j];
    for (long long r = 0; r < rows; r++) a += x[r * n + j];
    acc[j] = a;
  }
}

/* readouts over (T, B, C) with bc = B C: mode 0 all, 1 last, 2 mean */
extern "C" __global__ void tr_readout_fwd(int mode, float *out, const float *inp, int T, long long bc) {
  if (mode == 0) {
    GRID_STRIDE(i, T * bc) out[i] = inp[i];
  } else if (mode == 1) {
    GRID_STRIDE(i, bc) out[i] = inp[(T - 1) * bc + i];
  } else {
    float inv = 1.0f / (float)T;
    GRID_STRIDE(i, bc) {
      float s = 0.0f;
      for (int t = 0; t < T; t++) s += inp[t * bc + i];
      out[i] = s * inv;
    }
  }
}

extern "C" __global__ void tr_readout_bwd(int mode, float *dinp, const float *dout, int T, long long bc) {
  if (mode == 0) {
    GRID_STRIDE(i, T * bc) dinp[i] += dout[i];
  } else if (mode == 1) {
    GRID_STRIDE(i, bc) dinp[(T - 1) * bc + i] += dout[i];
  } else {
    float inv = 1.0f / (float)T;
    GRID_STRIDE(i, bc) for (int t = 0; t < T; t++) dinp[t * bc + i] += dout[i] * inv;
  }
}

/* Softmax cross-entropy, a thread a row (nn_crossentropy's order): loss[r] = logsumexp(z) - z[y],
 * hit[r] = (first arg-max == y); dz = (softmax - onehot) inv (dz NULL: evaluation). Rows with y < 0
 * count nothing and get dz = 0. */
extern "C" __global__ void tr_ce_rows(float *dlogits, const float *logits, const int *targets, long long N, int V,
                                      double inv, double *loss, double *hit) {
  GRID_STRIDE(r, N) {
    const float *z = logits + r * V;
    float *dz = dlogits ? dlogits + r * V : 0;
    int y = targets[r];
    loss[r] = 0.0, hit[r] = 0.0;
    if (y < 0) {
      for (int v = 0; dz && v < V; v++) dz[v] = 0.0f;
      continue;
    }
    int arg = 0;
    float zmax = z[0];
    for (int v = 1; v < V; v++)
      if (z[v] > zmax) zmax = z[v], arg = v;
    double se = 0.0;
    for (int v = 0; v < V; v++) {
      float e = expf(z[v] - zmax);
      if (dz) dz[v] = e;
      se += e;
    }
    loss[r] = log(se) + (double)zmax - (double)z[y];
    hit[r] = arg == y ? 1.0 : 0.0;
    if (dz) {
      float k = (float)(inv / se);
      for (int v = 0; v < V; v++) dz[v] *= k;
      dz[y] -= (float)inv;
    }
  }
}

/* Squared error of the rows with on[r] != 0, a thread a row: loss[r] = sum_j (pred - target)^2;
 * dpred = 2 (pred - target) scale there, 0 elsewhere (dpred NULL: evaluation). */
extern "C" __global__ void tr_mse_rows(float *dpred, const float *pred, const float *target, const float *on, long long N,
                                       int K, double scale, double *loss) {
  GRID_STRIDE(r, N) {
    double s = 0.0;
    bool counts = on[r] != 0.0f;
    for (int j = 0; j < K; j++) {
      long long i = r * K + j;
      double e = (double)pred[i] - (double)target[i];
      if (counts) s += e * e;
      if (dpred) dpred[i] = counts ? (float)(2.0 * e * scale) : 0.0f;
    }
    loss[r] = s;
  }
}

/* The block's sum of v, in thread 0 (blockDim.x == CELLC_TRAIN_BLOCK). */
static __device__ double block_sum(double v) {
  __shared__ double sh[CELLC_TRAIN_BLOCK];
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = CELLC_TRAIN_BLOCK / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  return sh[0];
}

/* out[0] = sum of x[0 .. n), one block */
extern "C" __global__ void tr_sum(const double *x, long long n, double *out) {
  double s = 0.0;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] = s;
}

/* partial[block] = that block's share of the sum of x^2 (then tr_sum over the blocks) */
extern "C" __global__ void tr_sumsq(const float *x, long long n, double *partial) {
  double s = 0.0;
  GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" __global__ void tr_scale(float *x, float c, long long n) {
  GRID_STRIDE(i, n) x[i] *= c;
}

/* runtime/optim's opt_sgd_apply */
extern "C" __global__ void tr_sgd(float *p, const float *g, float *buf, long long n, float lr, float wd, float mu) {
  GRID_STRIDE(i, n) {
    float d = g[i] + wd * p[i];
    if (mu != 0.0f) d = buf[i] = mu * buf[i] + d;
    p[i] -= lr * d;
  }
}

/* runtime/optim's opt_adam_apply */
extern "C" __global__ void tr_adam(float *param, const float *grad, float *m, float *v, long long n, float one_b1, float b2,
                                   float one_b2, float eps, float wd, float step_size, float bc2_sqrt, float decay,
                                   int decoupled) {
  GRID_STRIDE(i, n) {
    float p = param[i], g = grad[i];
    if (decoupled) p *= decay;
    else g += wd * p;
    float mi = m[i] + one_b1 * (g - m[i]);
    float vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi, v[i] = vi;
    p -= step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    param[i] = p;
  }
}

/* ---- residual blocks: skip connections, norms, the mixers' elementwise parts ---- */

extern "C" __global__ void tr_add(float *out, const float *a, const float *b, long long n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

/* y += x */
extern "C" __global__ void tr_acc(float *y, const float *x, long long n) {
  GRID_STRIDE(i, n) y[i] += x[i];
}

/* nn_norm_forward, a thread a row: layernorm (mean given) or rmsnorm (mean NULL) */
extern "C" __global__ void tr_norm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                       long long rows, int C) {
  GRID_STRIDE(r, rows) {
    const float *x = inp + r * C;
    float *y = out + r * C;
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
    float rs = 1.0f / sqrtf(v / (float)C + 1e-5f);
    for (int c = 0; c < C; c++) {
      float n = (x[c] - mu) * rs;
      if (w) n = n * w[c];
      if (b) n = n + b[c];
      y[c] = n;
    }
    if (mean) mean[r] = mu;
    rstd[r] = rs;
  }
}

/* nn_norm_backward's dinp, a thread a row */
extern "C" __global__ void tr_norm_bwd_dx(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                                          const float *rstd, long long rows, int C) {
  GRID_STRIDE(r, rows) {
    const float *x = inp + r * C, *g = dout + r * C;
    float *dx = dinp + r * C;
    float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
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
}

/* nn_norm_backward's dw and db, a thread a channel over the rows in order */
extern "C" __global__ void tr_norm_bwd_dwdb(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                                            const float *rstd, long long rows, int C) {
  GRID_STRIDE(c, (long long)C) {
    float aw = dw ? dw[c] : 0.0f, ab = db ? db[c] : 0.0f;
    for (long long r = 0; r < rows; r++) {
      float g = dout[r * C + c];
      aw += g * (inp[r * C + c] - (mean ? mean[r] : 0.0f)) * rstd[r];
      ab += g;
    }
    if (dw) dw[c] = aw;
    if (db) db[c] = ab;
  }
}

/* nn_batchnorm_forward's statistics, a thread a channel (training: the batch's, updating the running
 * ones; eval: the running ones) */
extern "C" __global__ void tr_bn_stats(float *mean, float *rstd, float *rmean, float *rvar, const float *inp, long long rows, int C,
                                       int training) {
  GRID_STRIDE(c, (long long)C) {
    if (!training) {
      mean[c] = rmean[c];
      rstd[c] = 1.0f / sqrtf(rvar[c] + 1e-5f);
      continue;
    }
    float mu = 0.0f, ss = 0.0f;
    for (long long r = 0; r < rows; r++) mu += inp[r * C + c];
    mu /= (float)rows;
    for (long long r = 0; r < rows; r++) {
      float d = inp[r * C + c] - mu;
      ss += d * d;
    }
    const float m = 0.1f;
    float var = ss / (float)rows;
    rmean[c] = (1.0f - m) * rmean[c] + m * mu;
    rvar[c] = (1.0f - m) * rvar[c] + m * var * (float)rows / (float)(rows - 1);
    mean[c] = mu;
    rstd[c] = 1.0f / sqrtf(var + 1e-5f);
  }
}

/* y = (x - mean_c) rstd_c (.) w + b, per element */
extern "C" __global__ void tr_bn_apply(float *out, const float *inp, const float *mean, const float *rstd, const float *w,
                                       const float *b, long long rows, int C) {
  GRID_STRIDE(i, rows * C) {
    int c = (int)(i % C);
    float n = (inp[i] - mean[c]) * rstd[c];
    if (w) n = n * w[c];
    if (b) n = n + b[c];
    out[i] = n;
  }
}

/* nn_batchnorm_backward's per-channel sums: dw, db, then sg, sgn as the dx kernel uses them */
extern "C" __global__ void tr_bn_bwd_sums(float *sg, float *sgn, float *dw, float *db, const float *dout, const float *inp,
                                          const float *w, const float *mean, const float *rstd, long long rows, int C,
                                          int training) {
  GRID_STRIDE(c, (long long)C) {
    float a = 0.0f, an = 0.0f;
    for (long long r = 0; r < rows; r++) {
      float g = dout[r * C + c];
      a += g;
      an += g * (inp[r * C + c] - mean[c]) * rstd[c];
    }
    if (dw) dw[c] += an;
    if (db) db[c] += a;
    float wc = w ? w[c] : 1.0f;
    sg[c] = training ? wc * a / (float)rows : 0.0f;
    sgn[c] = training ? wc * an / (float)rows : 0.0f;
  }
}

extern "C" __global__ void tr_bn_bwd_dx(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                                        const float *rstd, const float *sg, const float *sgn, long long rows, int C) {
  GRID_STRIDE(i, rows * C) {
    int c = (int)(i % C);
    float n = (inp[i] - mean[c]) * rstd[c];
    float dn = w ? dout[i] * w[c] : dout[i];
    dinp[i] += rstd[c] * (dn - sg[c] - n * sgn[c]);
  }
}

/* GLU: s = sigmoid(s) in place, g = a s;  backward: da = dg s, dg = dg a s (1 - s) */
extern "C" __global__ void tr_glu_gate(const float *a, float *s, float *g, long long n) {
  GRID_STRIDE(i, n) {
    s[i] = 1.0f / (1.0f + expf(-s[i]));
    g[i] = a[i] * s[i];
  }
}

extern "C" __global__ void tr_glu_gate_bwd(float *dg, float *da, const float *a, const float *s, long long n) {
  GRID_STRIDE(i, n) {
    da[i] = dg[i] * s[i];
    dg[i] = dg[i] * a[i] * s[i] * (1.0f - s[i]);
  }
}

/* exact GELU and, in place over d, d gelu'(h) */
extern "C" __global__ void tr_gelu(float *out, const float *inp, long long n) {
  GRID_STRIDE(i, n) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + erff(x * (float)0.70710678118654752440));
  }
}

extern "C" __global__ void tr_gelu_bwd(float *d, const float *h, long long n) {
  GRID_STRIDE(i, n) {
    float x = h[i];
    float cdf = 0.5f * (1.0f + erff(x * (float)0.70710678118654752440));
    float pdf = (float)0.39894228040143267794 * expf(-0.5f * x * x);
    d[i] = d[i] * (cdf + x * pdf);
  }
}

/* ---- dropout and noise: the counter-based draws of runtime/support's rng_philox_uniform ---- */

/* Philox4x32-10 of the counter (lo, hi, 0, 0) under the key: the first word (runtime/support/rng.c) */
static __device__ uint32_t philox(unsigned long long key, unsigned long long counter) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int round = 0; round < 10; round++) {
    unsigned long long p0 = (unsigned long long)0xD2511F53u * c0, p1 = (unsigned long long)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return c0;
}

/* its top 24 bits as a float in [0, 1) */
static __device__ float philox_uniform(unsigned long long key, unsigned long long counter) {
  return (float)(philox(key, counter) >> 8) * (1.0f / 16777216.0f);
}

/* out[i] in (0, 1): the gumbel noise of the cells (rng_philox_uniform_open) */
/* rng.h's draw_counter: value i of a data-parallel rank's part takes its counter in the whole batch */
__device__ __forceinline__ unsigned long long draw_counter(long long i, unsigned long long row, unsigned long long grow,
                                                           unsigned long long first) {
  unsigned long long u = (unsigned long long)i;
  return row ? u / row * grow + first + u % row : u;
}

extern "C" __global__ void tr_uniform_open(float *out, long long n, unsigned long long key, unsigned long long row,
                                           unsigned long long grow, unsigned long long first) {
  GRID_STRIDE(i, n)
  out[i] = ((float)(philox(key, draw_counter(i, row, grow, first)) >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/* mask = keep / (1 - p), out = inp mask (on = 0: mask 1, out = inp) */
extern "C" __global__ void tr_dropout(float *out, float *mask, const float *inp, long long n, float p, float scale,
                                      unsigned long long key, unsigned long long row, unsigned long long grow,
                                      unsigned long long first, int on) {
  GRID_STRIDE(i, n) {
    float k = on ? (philox_uniform(key, draw_counter(i, row, grow, first)) >= p ? scale : 0.0f) : 1.0f;
    mask[i] = k;
    out[i] = on ? inp[i] * k : inp[i];
  }
}

/* y += a b */
extern "C" __global__ void tr_mul_acc(float *y, const float *a, const float *b, long long n) {
  GRID_STRIDE(i, n) y[i] += a[i] * b[i];
}
