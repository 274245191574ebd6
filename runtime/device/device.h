/* device.h: the devices cellc runs on, as ggml separates them from its back ends: where buffers
 * live (host or device memory) and the operations of training over them, one struct of entry points
 * per device. A back end (compiler/backend) compiles cells and runs their sequences over a device's
 * buffers; the model and the training loop (train/) run everything else through the device. The
 * host device is here (it is runtime/nn's and runtime/optim's code); the CUDA devices live with
 * the CUDA back ends, which compile their kernels. */
#ifndef CELLC_DEVICE_H
#define CELLC_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optim.h"
#include "support.h"

/* A device: where buffers live and the operations of training run (docs/gpu.md).
 * Its memory (alloc, free, upload, download, zero, copy: the buffers every back end's SeqIO points
 * to on it, and the model's) and everything `cellc train` and `cellc eval` do outside the cell
 * layers, as a table of entry points over that memory: train/model runs the model's blocks, its
 * loss and its learned initial states through it, and the training loop its gradient norm,
 * clipping and optimizer update, so the same code runs every device.
 * The host device (device_host, device.c) is runtime/nn's and runtime/optim's code on host memory;
 * the CUDA devices (compiler/backend/cuda/cuda_ops.c) run CUDA C kernels compiled by NVRTC and
 * cuBLAS for the products. compiler/pipeline opens them, one per kind (device_open).
 * Conventions as runtime/nn's: row-major, rows = T B; a _bwd entry ADDS into its gradients
 * (linear_bwd writes its input gradient). */
/* The kinds of device, one device of each per process. */
typedef enum { DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_EMU, DEVICE_KINDS } DeviceKind;

/* One Adam/AdamW update's coefficients: runtime/optim's struct, which computes them, so that the
 * optimizer's updates reach a device's table with no conversion. */
typedef OptAdamK DevAdam;

typedef struct Device Device;
struct Device {
  const char *name;        /* "cpu", "cuda", "cuda-emu" (messages) */
  DeviceKind kind;         /* DEVICE_CPU: host memory; else device memory, not dereferenced on the host */
  void (*close)(Device *o); /* compiler/pipeline's device_release, when its last holder lets go */
  /* Makes the operations of training ready (a CUDA device loads its kernels, once): 0, or -1 with
   * why in err. Memory needs no preparing; a training operation on a device not prepared prepares
   * it, and exits 3 naming why when it cannot. */
  int (*prepare)(Device *o, char *err, size_t errlen);
  /* memory: alloc returns zeroed bytes; exits 3 naming the amount when there is not enough */
  void *(*alloc)(Device *o, size_t bytes);
  void (*free)(Device *o, void *p);
  void (*upload)(Device *o, void *dst, const void *host, size_t bytes);
  void (*download)(Device *o, void *host, const void *src, size_t bytes);
  void (*zero)(Device *o, void *p, size_t bytes);
  void (*copy)(Device *o, void *dst, const void *src, size_t bytes);
  /* free device memory in bytes (SIZE_MAX on the host) */
  size_t (*mem_free_bytes)(Device *o);
  /* out[r, :] = wte[ids[r], :];  dwte[ids[r], :] += dout[r, :] */
  void (*embed_fwd)(Device *o, float *out, const int32_t *ids, const float *wte, int rows, int V, int C);
  void (*embed_bwd)(Device *o, float *dwte, const float *dout, const int32_t *ids, int rows, int V, int C);
  /* nn_linear_forward / nn_linear_backward (b, dinp, dw, db may be NULL); linear_bwd WRITES dinp
   * (dout W, no zeroing first: the head's input gradient), adds to dw and db */
  void (*linear_fwd)(Device *o, float *out, const float *inp, const float *w, const float *b, int rows, int nin, int nout);
  void (*linear_bwd)(Device *o, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                     int rows, int nin, int nout);
  /* nn_readout_forward / _backward; mode: 0 all, 1 last, 2 mean (NnReadout) */
  void (*readout_fwd)(Device *o, int mode, float *out, const float *inp, int T, int B, int C);
  void (*readout_bwd)(Device *o, int mode, float *dinp, const float *dout, int T, int B, int C);
  /* out[r, :] = v (rows copies of n floats);  acc += sum over rows of x[r, :] */
  void (*bcast_rows)(Device *o, float *out, const float *v, int rows, int n);
  void (*colsum_add)(Device *o, float *acc, const float *x, int rows, int n);
  /* residual blocks: out = a + b;  y += x */
  void (*add)(Device *o, float *out, const float *a, const float *b, size_t n);
  void (*acc)(Device *o, float *y, const float *x, size_t n);
  /* nn_norm_forward / nn_norm_backward (layernorm; rmsnorm with mean NULL) */
  void (*norm_fwd)(Device *o, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int rows,
                   int C);
  void (*norm_bwd)(Device *o, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                   const float *mean, const float *rstd, int rows, int C);
  /* nn_batchnorm_forward / nn_batchnorm_backward */
  void (*batchnorm_fwd)(Device *o, float *out, float *mean, float *rstd, float *running_mean, float *running_var,
                        const float *inp, const float *w, const float *b, int rows, int C, bool training);
  void (*batchnorm_bwd)(Device *o, float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int rows, int C, bool training);
  /* nn_glu_forward / _backward and nn_mlp_forward / _backward: p, d are NnGlu's (w1 b1 w2 b2 w3 b3)
   * or NnMlp's (w1 b1 w2 b2) pointers in order, cache and scratch as nn.h lays them out */
  void (*glu_fwd)(Device *o, float *out, float *cache, const float *inp, float *const *p, int rows, int C, int H);
  void (*glu_bwd)(Device *o, float *dinp, float *const *d, float *scratch, const float *dout, const float *inp,
                  float *cache, float *const *p, int rows, int C, int H);
  void (*mlp_fwd)(Device *o, float *out, float *cache, const float *inp, float *const *p, int rows, int C, int H);
  void (*mlp_bwd)(Device *o, float *dinp, float *const *d, float *scratch, const float *dout, const float *inp,
                  float *cache, float *const *p, int rows, int C, int H);
  /* out[i] = rng_philox_uniform_open(key, draw_counter(slice, i)): the cells' gumbel noise */
  void (*uniform_open)(Device *o, float *out, size_t n, uint64_t key, DrawSlice slice);
  /* nn_dropout_forward with the counter-based mask of `key` (rng_key), nn_dropout_backward */
  void (*dropout_fwd)(Device *o, float *out, float *mask, const float *inp, size_t n, float p, uint64_t key,
                      DrawSlice slice, bool training);
  void (*dropout_bwd)(Device *o, float *dinp, const float *dout, const float *mask, size_t n);
  /* nn_crossentropy with the targets already masked (-1) and `counted` targets >= 0; dlogits NULL
   * in evaluation. Writes the loss sum and the arg-max hits to the host. */
  void (*crossentropy)(Device *o, float *dlogits, const float *logits, const int32_t *targets, int N, int V,
                       int64_t counted, double *loss_sum, int64_t *correct);
  /* squared error over the rows with on[r] != 0; dpred = 2 (pred - target) / counted there, 0
   * elsewhere (dpred NULL in evaluation). Writes the sum of squares to the host. */
  void (*mse)(Device *o, float *dpred, const float *pred, const float *target, const float *on, int N, int K,
              int64_t counted, double *sq_sum);
  /* the optimizer: sum of squares (double) of n floats, x *= c, and the updates of runtime/optim */
  double (*sumsq)(Device *o, const float *x, size_t n);
  void (*scale)(Device *o, float *x, float c, size_t n);
  void (*sgd)(Device *o, float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu);
  void (*adam)(Device *o, float *p, const float *g, float *m, float *v, size_t n, const DevAdam *k);
};

/* Whether d's buffers are host memory. */
static inline bool device_is_host(const Device *d) { return d->kind == DEVICE_CPU; }

/* The host device: host memory, runtime/nn's and runtime/optim's code (static, never closed). */
Device *device_host(void);
/* The optimizer's per-tensor updates through a device's operations. */
OptApply device_opt_apply(Device *d);

#endif
