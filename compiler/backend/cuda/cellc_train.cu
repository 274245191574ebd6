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
