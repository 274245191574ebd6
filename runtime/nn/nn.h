/* nn.h: the model's blocks around the recurrent cell (embedding, linear, norms, GLU and MLP mixers,
 * dropout, skip, readouts, losses) as forward/backward pairs over time-major activations, float32. */
#ifndef CELLC_NN_H
#define CELLC_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support.h"

/* Conventions of every block.
 *   Activations are time-major (T, B, C): row r = t * B + b, channels innermost; a block that works
 *   per position sees them as (rows, C) with rows = T * B.
 *   _forward WRITES its output and the caches its _backward needs (caller-provided buffers).
 *   _backward ADDS into every gradient buffer (dparams and dinp) and never zeroes one: the caller
 *   zeroes gradients once per step. A NULL gradient pointer skips that gradient.
 *   Scratch buffers are the caller's too (sizes below); their contents in and out do not matter.
 *   Outputs never alias inputs, except where a function says so.
 *   Matrix products go through runtime/gemm (AVX-512 / AVX2 kernels from CPUID, over cellc's threads;
 *   the weight gradient summed as gemm.h says, the same on any thread count); weights are (out features, in features), y = x W^T. */

#define NN_NORM_EPS 1e-5f    /* layernorm, rmsnorm, batchnorm: added to the (biased) variance */
#define NN_BN_MOMENTUM 0.1f  /* batchnorm: running = (1 - m) running + m batch statistic */

/* ---- embedding: out[r, :] = wte[ids[r], :] ---- */
void nn_embedding_forward(float *out,         /* (rows, C) */
                          const int32_t *ids, /* (rows) each in [0, V) */
                          const float *wte,   /* (V, C) */
                          int rows, int V, int C);
void nn_embedding_backward(float *dwte,        /* (V, C) += */
                           const float *dout,  /* (rows, C) */
                           const int32_t *ids, /* (rows) */
                           int rows, int V, int C);
/* The same with dout's rows ldd floats apart (the rows of a layer's array wider than C). */
void nn_embedding_backward_ld(float *dwte, const float *dout, size_t ldd, const int32_t *ids, int rows, int V, int C);

/* ---- linear: out = inp W^T + b (the linear encoder, the head, the mixers' projections) ---- */
/* O = nout, I = nin (named so that <complex.h>'s I cannot clash). */
void nn_linear_forward(float *out,       /* (rows, O) */
                       const float *inp, /* (rows, I) */
                       const float *w,   /* (O, I) */
                       const float *b,   /* (O) or NULL: no bias */
                       int rows, int nin, int nout);
void nn_linear_backward(float *dinp,       /* (rows, I) += dout W (add_dinp) or = dout W; or NULL */
                        bool add_dinp,
                        float *dw,         /* (O, I) += dout^T inp; or NULL */
                        float *db,         /* (O) += sum over rows of dout; or NULL */
                        const float *dout, /* (rows, O) */
                        const float *inp,  /* (rows, I) */
                        const float *w,    /* (O, I) */
                        int rows, int nin, int nout);

/* ---- layernorm and rmsnorm over the channels of each row ----
 *   layernorm (mean given): mu = mean_c x,  var = mean_c (x - mu)^2 (biased),  rstd = 1 / sqrt(var + eps)
 *   rmsnorm (mean NULL):    mu = 0,          rstd = 1 / sqrt(mean_c x^2 + eps)
 *   y = (x - mu) rstd (.) w + b          w, b NULL: no affine (w = 1, b = 0) */
void nn_norm_forward(float *out,       /* (rows, C) */
                     float *mean,      /* (rows) cache; NULL: rmsnorm */
                     float *rstd,      /* (rows) cache */
                     const float *inp, /* (rows, C) */
                     const float *w,   /* (C) or NULL */
                     const float *b,   /* (C) or NULL */
                     int rows, int C);
void nn_norm_backward(float *dinp,       /* (rows, C) += */
                      float *dw,         /* (C) += ; or NULL */
                      float *db,         /* (C) += ; or NULL */
                      const float *dout, /* (rows, C) */
                      const float *inp,  /* (rows, C) */
                      const float *w,    /* (C) or NULL */
                      const float *mean, /* (rows) from forward; NULL: rmsnorm */
                      const float *rstd, /* (rows) from forward */
                      int rows, int C);

/* ---- batchnorm over the rows (every t and b of the batch), per channel ----
 *   training: mu_c = mean_r x,  var_c = mean_r (x - mu_c)^2 (biased), normalized with these;
 *             running_mean = (1 - m) running_mean + m mu_c,
 *             running_var  = (1 - m) running_var  + m var_c rows / (rows - 1)   (unbiased, as PyTorch)
 *             with m = NN_BN_MOMENTUM; rows > 1.
 *   eval:     mu_c = running_mean, var_c = running_var; the running statistics are not touched.
 *   y = (x - mu_c) / sqrt(var_c + eps) (.) w + b          w, b NULL: no affine
 * The caches mean and rstd hold the statistics used (batch or running) for the backward. */
void nn_batchnorm_forward(float *out,          /* (rows, C) */
                          float *mean,         /* (C) cache: mu */
                          float *rstd,         /* (C) cache: 1 / sqrt(var + eps) */
                          float *running_mean, /* (C) updated in training */
                          float *running_var,  /* (C) updated in training */
                          const float *inp,    /* (rows, C) */
                          const float *w,      /* (C) or NULL */
                          const float *b,      /* (C) or NULL */
                          int rows, int C, bool training);
/* training: the batch statistics depend on the input and are differentiated through;
 * eval: they are constants, dinp = dout (.) w rstd. */
void nn_batchnorm_backward(float *dinp,       /* (rows, C) += */
                           float *dw,         /* (C) += ; or NULL */
                           float *db,         /* (C) += ; or NULL */
                           float *scratch,    /* (2 C) */
                           const float *dout, /* (rows, C) */
                           const float *inp,  /* (rows, C) */
                           const float *w,    /* (C) or NULL */
                           const float *mean, /* (C) from forward */
                           const float *rstd, /* (C) from forward */
                           int rows, int C, bool training);

/* ---- GELU, exact: gelu(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (in place allowed) ---- */
void nn_gelu_forward(float *out, const float *inp, size_t n);
/* dinp += dout (.) gelu'(inp),  gelu'(x) = Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi) */
void nn_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n);

/* ---- GLU channel mixer, C -> H -> C (H = C in the LRU and HGRN blocks) ----
 *   a = x W1^T + b1           (rows, H)  the value
 *   s = sigmoid(x W2^T + b2)  (rows, H)  the gate
 *   g = a (.) s               (rows, H)
 *   y = g W3^T + b3           (rows, C)
 * i.e. y = W3 ((W1 x + b1) (.) sigmoid(W2 x + b2)) + b3, the common GLU(x) = (x W_a) (.) sigmoid(x W_b)
 * projected back to C. The parameters and their gradients share one layout: */
typedef struct NnGlu {
  float *w1; /* (H, C) value projection */
  float *b1; /* (H) */
  float *w2; /* (H, C) gate projection */
  float *b2; /* (H) */
  float *w3; /* (C, H) out projection */
  float *b3; /* (C) */
} NnGlu;
typedef struct NnGluCache {
  float *a; /* (rows, H) x W1^T + b1 */
  float *s; /* (rows, H) sigmoid(x W2^T + b2) */
  float *g; /* (rows, H) a (.) s */
} NnGluCache;
size_t nn_glu_size(int C, int H);                  /* floats of the parameters */
float *nn_glu_views(NnGlu *p, float *base, int C, int H); /* views into base in the order above; returns the end */
size_t nn_glu_cache_size(int rows, int H);         /* 3 rows H */
float *nn_glu_cache_views(NnGluCache *c, float *base, int rows, int H);
size_t nn_glu_scratch_size(int rows, int H);       /* 2 rows H: the backward's scratch */
void nn_glu_forward(float *out,        /* (rows, C) */
                    const NnGluCache *cache,
                    const float *inp,  /* (rows, C) */
                    const NnGlu *p, int rows, int C, int H);
/* Reverse order of the forward: out projection, gate product, the two input projections. */
void nn_glu_backward(float *dinp,       /* (rows, C) += ; or NULL */
                     const NnGlu *d,    /* gradients += ; any field NULL skips it */
                     float *scratch,    /* (nn_glu_scratch_size) */
                     const float *dout, /* (rows, C) */
                     const float *inp,  /* (rows, C) */
                     const NnGluCache *cache, const NnGlu *p, int rows, int C, int H);

/* ---- MLP channel mixer, C -> H -> C (H = 4 C in the usual transformer form) ----
 *   h = x W1^T + b1,  a = gelu(h) (exact, erf),  y = a W2^T + b2
 * i.e. y = W2 gelu(W1 x + b1) + b2. */
typedef struct NnMlp {
  float *w1; /* (H, C) */
  float *b1; /* (H) */
  float *w2; /* (C, H) */
  float *b2; /* (C) */
} NnMlp;
typedef struct NnMlpCache {
  float *h; /* (rows, H) x W1^T + b1 */
  float *a; /* (rows, H) gelu(h) */
} NnMlpCache;
size_t nn_mlp_size(int C, int H);
float *nn_mlp_views(NnMlp *p, float *base, int C, int H);
size_t nn_mlp_cache_size(int rows, int H);         /* 2 rows H */
float *nn_mlp_cache_views(NnMlpCache *c, float *base, int rows, int H);
size_t nn_mlp_scratch_size(int rows, int H);       /* rows H */
void nn_mlp_forward(float *out,       /* (rows, C) */
                    const NnMlpCache *cache,
                    const float *inp, /* (rows, C) */
                    const NnMlp *p, int rows, int C, int H);
void nn_mlp_backward(float *dinp,       /* (rows, C) += ; or NULL */
                     const NnMlp *d,    /* gradients += ; any field NULL skips it */
                     float *scratch,    /* (nn_mlp_scratch_size) */
                     const float *dout, /* (rows, C) */
                     const float *inp,  /* (rows, C) */
                     const NnMlpCache *cache, const NnMlp *p, int rows, int C, int H);

/* ---- dropout, inverted ----
 * training, p > 0: element i is kept when u_i = rng_philox_uniform(key, draw_counter(slice, i)) >= p
 *   (counter-based: the same mask on the CPU and on a GPU, for any order of the elements, and a
 *   data-parallel rank's part is its slice of the whole batch's mask);
 *   mask = keep / (1 - p), out = inp (.) mask: the expectation of out is inp.
 * eval, or p == 0: out = inp, mask = 1.
 * 0 <= p < 1. out may be inp (in place). */
void nn_dropout_forward(float *out,       /* (n) */
                        float *mask,      /* (n) cache: 0 or 1 / (1 - p) */
                        const float *inp, /* (n) */
                        size_t n, float p, uint64_t key, DrawSlice slice, bool training);
void nn_dropout_backward(float *dinp,       /* (n) += dout (.) mask */
                         const float *dout, /* (n) */
                         const float *mask, /* (n) from forward */
                         size_t n);

/* ---- skip connection: out = a + b (out may be a or b); backward: da += dout, db += dout ---- */
void nn_add_forward(float *out, const float *a, const float *b, size_t n);
void nn_add_backward(float *da, float *db, const float *dout, size_t n);

/* ---- readouts from the top layer's (T, B, C) ----
 *   all:  out = inp, (T, B, C)
 *   last: out[b, :] = inp[T - 1, b, :], (B, C)
 *   mean: out[b, :] = (1 / T) sum_t inp[t, b, :], (B, C) */
typedef enum { NN_READOUT_ALL, NN_READOUT_LAST, NN_READOUT_MEAN } NnReadout;
/* "all", "last", "mean"; 0, or -1 for an unknown name. */
int nn_readout_from_name(const char *name, NnReadout *out);
const char *nn_readout_name(NnReadout r);
int nn_readout_rows(NnReadout r, int T, int B); /* rows of the output: T B for all, else B */
void nn_readout_forward(NnReadout r,
                        float *out,       /* (nn_readout_rows, C) */
                        const float *inp, /* (T, B, C) */
                        int T, int B, int C);
void nn_readout_backward(NnReadout r,
                         float *dinp,       /* (T, B, C) += */
                         const float *dout, /* (nn_readout_rows, C) */
                         int T, int B, int C);

/* ---- losses: they start the backward, so they WRITE their gradient (not add) ---- */

/* What a loss reports: the mean loss over the counted positions, how many were counted and, for
 * classification, how many had the target as the first arg-max of the logits. */
typedef struct NnLoss {
  double loss;     /* mean over counted; 0 when none counted */
  double sum;      /* the loss summed over the counted positions, before the division */
  int64_t counted; /* positions with a target (cross-entropy), or N K elements (MSE) */
  int64_t correct; /* cross-entropy: argmax == target among the counted; MSE: 0 */
} NnLoss;

/* Softmax cross-entropy with integer targets; target -1 ignores the position (the mask).
 *   loss = (1 / n) sum over counted r of (logsumexp(z_r) - z_r[y_r]),  n = counted
 *   dlogits[r, :] = (softmax(z_r) - onehot(y_r)) / n for counted rows, 0 for ignored rows.
 * dlogits may be NULL (evaluation). Targets other than -1 must be in [0, V). */
NnLoss nn_crossentropy(float *dlogits,         /* (N, V) written; or NULL */
                       const float *logits,    /* (N, V) */
                       const int32_t *targets, /* (N) in [0, V) or -1 */
                       int N, int V);

/* Mean squared error over the rows that count (row r counts when `on` is NULL or on[r] != 0):
 *   sum = sum over counted rows of (pred - target)^2,  loss = sum / n,
 *   dpred = 2 (pred - target) / n on counted rows, 0 on the others,
 * with n = `counted` values: 0 for the values of the counted rows here, or a larger total when the
 * rows are a share of a batch (a rank of a data-parallel run divides by the global count). The
 * sum and each gradient value are taken in double and rounded once. */
NnLoss nn_mse(float *dpred,        /* (N, K) written; or NULL */
              const float *pred,   /* (N, K) */
              const float *target, /* (N, K) */
              const float *on,     /* (N): 0 masks the row out; or NULL */
              int N, int K, int64_t counted);

#endif
