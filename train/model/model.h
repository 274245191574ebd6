/* model.h: the model `cellc train` builds around a compiled cell (spec "TASK.cfg" [model]):
 * encoder, `layers` copies of the cell in stack or residual blocks with norms, mixers and dropout,
 * readout, head and loss, with the forward and backward of one batch on a device (device.h).
 *
 * The model, for a batch of B sequences of length T (rows r = t B + b, channels innermost):
 *   a_0 = embed.weight[tokens]                       (encoder = embed: token tasks)
 *       | x encoder.weight^T + encoder.bias          (encoder = linear: real-valued tasks)
 *   stack:    a_{k+1} = dropout(cell_k(a_k))          dropout between layers, not after the last
 *   residual: a_{k+1} = a_k + dropout(mixer_k(cell_k(norm_k(a_k))))
 *   bidirectional (stack): a_{k+1} = join(cell_k(a_k), rev(cell'_k(rev(a_k)))), rev reversing each
 *                          sequence within its length, join concat | sum, cell'_k the reverse copy
 *   z = head.weight readout(a_L) + head.bias;  loss = cross-entropy (task mask) | MSE
 * With lengths (TaskShape.lengths) the layers run the padded batch (cells are causal), the loss
 * counts each sequence's own steps only, readout last and mean read each sequence's own steps.
 * Each cell starts from its declared initial states (zeros, an initializer drawn once from the
 * seed, or a learned param) and ends with no gradient on its final states.
 * Every random draw (initial values, dropout, gumbel noise) comes from the seed and a stream named
 * after what it is for, per step for the per-batch draws: a run is a function of (seed, step). */
#ifndef CELLC_MODEL_H
#define CELLC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "cfg.h"
#include "optim.h"
#include "tasks.h"

/* A learned tensor: params of the cell (`layer.<k>.<param>`, a bidirectional layer's reverse copy
 * `layer.<k>.reverse.<param>`) and the model's own (`embed.weight`,
 * `head.weight`, `layer.<k>.norm.weight`, ...). A complex param holds its real and imaginary parts
 * in two planes; the checkpoint writes it [..., 2] interleaved, as `cellc run` does. */
typedef struct ModelTensor {
  const char *name;
  int ndim;           /* as written in a checkpoint (complex: the trailing 2 included) */
  int64_t shape[4]; /* up to three dims, and 2 for a complex one */
  bool cplx;
  int64_t numel;      /* per part */
  float *val[2];      /* part 0 (re), part 1 (im, complex only), host memory */
  float *grad[2];
  float *dval[2];     /* where the blocks and the optimizer work on them: val and grad on the host, */
  float *dgrad[2];    /* device memory on a device (model_to_host / model_to_device copy the values) */
  const char *const *tags;
  int ntags;
  bool learned;       /* false: a buffer the optimizer does not touch (batch norm's running statistics, a
                         cell's buffers and frozen params) */
  bool frozen;        /* a cell's frozen param (not learned, as configured: model.unfreeze) */
} ModelTensor;

typedef struct Model Model;

/* Builds the model the configuration describes around the cell of `cell_file` (model.cell, or its
 * last cell) for batches of `batch` sequences of the task's length, initialized from `seed`.
 * stdlib_dir: where imports of the standard library are found. NULL after printing a located error
 * (in the .cell file or the configuration). */
Model *model_new(const Cfg *cfg, const char *cell_file, const char *stdlib_dir, const TaskShape *shape,
                 int batch, uint64_t seed);
void model_free(Model *m);
/* model_new on device `dev` (device_host(): the CPU); the cell layers on the back end that trains
 * on its kind (backend_on_device). NULL after printing the error, with *status 1 (the
 * configuration, the cell) or 3 (the device has less free memory than the model's params,
 * gradients and activations need). */
Model *model_new_on(const Cfg *cfg, const char *cell_file, const char *stdlib_dir, const TaskShape *shape, int batch,
                    uint64_t seed, Device *dev, int *status);
Device *model_device(Model *m);
/* What the cell layers' runs allocate beyond the buffers the model holds (their workspaces and
 * chunk buffers), as cellc check figures it (pipeline_train_memory): 0 where the back end is not
 * the cpu, whose workspace the figure describes. */
size_t model_work_bytes(const Model *m);
/* A device's tensors: the values (params and buffers, not the gradients) copied to the host (before
 * a checkpoint is written) and back (after one is read). Nothing to do on the host. */
void model_to_host(Model *m);
void model_to_device(Model *m);

/* Data-parallel training: the batches this model sees are rows [first, first + batch) of global
 * batches of `global_batch` sequences; its per-step draws (dropout, gumbel noise) are then exactly
 * those rows of the draws of a model of batch `global_batch`. */
void model_set_part(Model *m, int first, int global_batch);
int model_ntensors(const Model *m);
ModelTensor *model_tensor(Model *m, int i);
const char *model_cell_name(const Model *m);
const char *model_cell_source(const Model *m); /* the text of the .cell file */
const char *model_summary(const Model *m);     /* one line: cell, mode, layers, params */
int64_t model_nparams(const Model *m);         /* learned floats */
int model_nlayers(const Model *m);
/* Layer k's checked cell (the training variant): its mode, options, params. */
const struct Cell *model_layer_cell(const Model *m, int k);

/* Whether the embedding's gradient is folded through layer 0 (model.c, plan_embedding_fold). */
bool model_folds_embedding(const Model *m);

/* Layer k as the last model_batch left it, for diagnostics (cellc diag). */
typedef struct ModelLayerView {
  struct Cell *cell;           /* the evaluation variant of its checked cell */
  int first;                   /* its params: param i of the cell is tensor first + i */
  int in, out;                 /* the cell's input and output sizes */
  const float *x;              /* the cell's input of the last forward [rows, in] (rows = T B) */
  const float *dy;             /* after a training batch: dL/d(the cell's output) [rows, out] */
  float *const *h0;            /* per state part of the lowered program: [B, size] */
} ModelLayerView;
void model_layer_view(const Model *m, int k, ModelLayerView *v);

/* One batch: the forward and, when training, the backward, writing every learned tensor's gradient
 * (overwritten, not accumulated). `step` seeds the batch's dropout and gumbel noise. Only the first
 * `rows` sequences of the batch count in the loss (an evaluation's last, partial batch); rows = B
 * counts all. Evaluation (training false): no dropout, no noise, batch norm's running statistics. */
typedef struct ModelLoss {
  double loss;      /* mean over the counted positions (cross-entropy) or elements (MSE) */
  int64_t counted;
  int64_t correct;  /* cross-entropy: arg-max hits; MSE: 0 */
  bool classify;    /* cross-entropy: accuracy = correct / counted means something */
} ModelLoss;
ModelLoss model_batch(Model *m, const TaskBatch *b, bool training, int64_t step, int rows);

/* After a model_batch whose loss or gradient was not finite, with the params it saw: where the
 * first value that is not finite arose, in the order the batch computes them: the params and
 * buffers as the batch began (in tensor order); the forward (the encoder's output; per layer its
 * norm's output, the cell's states step by step, at each step in the order the cell declares them,
 * the cell's output, its mixer's output, the block's output; the readout, the logits, the loss);
 * after a training batch, the gradients in the order the backward computes them (the head, then
 * the layers from the last, each its mixer's, its cell's params in declaration order, its norm's,
 * then the encoder's). The forward runs again as model_batch ran it (the same step's draws): batch
 * norm's running statistics take the batch a second time, so it is for a run that stops. A phrase
 * into buf ("layer 1, state 'h' (infinite at step 4 of 6, sequence 2)"), or false when every value
 * is finite (another rank's share of a batch went non-finite). */
bool model_find_nonfinite(Model *m, const TaskBatch *b, bool training, int64_t step, int rows, char *buf, size_t n);

#endif
