/* average.c: the ranks of a data-parallel run (runtime/dist: MPI, and NCCL on cuda); with one
 * rank (no mpirun) each of these is a no-op. docs/distributed.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "train_impl.h"

/* Rank 0 alone writes the run's files; what came of it, on every rank. */
int run_rank0_status(int rc) {
  dist_bcast(&rc, sizeof rc, 0);
  return rc;
}

/* After rank 0 read the checkpoint of --resume: its params, buffers, optimizer state and step on
 * every rank (on a cluster, only rank 0 needs the run directory). */
void run_share_state(Run *r) {
  if (r->world == 1) return;
  for (int i = 0; i < model_ntensors(r->model); i++) {
    ModelTensor *t = model_tensor(r->model, i);
    for (int part = 0; part < (t->cplx ? 2 : 1); part++) dist_bcast(t->val[part], sizeof(float) * (size_t)t->numel, 0);
  }
  dist_bcast(r->opt->state, sizeof(float) * opt_state_size(r->opt), 0);
  dist_bcast(&r->step, sizeof r->step, 0);
  dist_bcast(&r->opt->step, sizeof r->opt->step, 0);
  dist_bcast(&r->elapsed0, sizeof r->elapsed0, 0);
}

/* Every learned float, in the optimizer's order: the gradients into r->gbuf times w (to), or back
 * from it times w; on a device each tensor goes through host memory (the MPI sum runs on the
 * host; docs/distributed.md). */
static void gather_grads(Run *r, bool to, float w) {
  size_t k = 0;
  Device *o = r->ops;
  for (int g = 0; g < r->opt->ngroups; g++)
    for (int i = 0; i < r->opt->groups[g].ntensors; i++) {
      OptTensor *t = &r->opt->groups[g].tensors[i];
      float *h = r->gbuf + k;
      if (to && !device_is_host(o)) o->download(o, h, t->grad, sizeof(float) * t->n);
      for (size_t j = 0; j < t->n; j++) {
        if (to) h[j] = (!device_is_host(o) ? h[j] : t->grad[j]) * w;
        else if (!device_is_host(o)) h[j] *= w;
        else t->grad[j] = h[j] * w;
      }
      if (!to && !device_is_host(o)) o->upload(o, t->grad, h, sizeof(float) * t->n);
      k += t->n;
    }
}

/* On cuda with several processes: the same sum through NCCL on one device buffer, queued on the
 * default stream the training kernels run on; only the four loss numbers cross to the host. */
static int nccl_sum(Run *r, float w, float *ex, char *err, size_t errlen) {
  Device *o = r->ops;
  size_t n = r->ngrad, k = 0;
  if (!r->dbuf) r->dbuf = o->alloc(o, sizeof(float) * (n + 4));
  for (int g = 0; g < r->opt->ngroups; g++)
    for (int i = 0; i < r->opt->groups[g].ntensors; i++) {
      OptTensor *t = &r->opt->groups[g].tensors[i];
      o->copy(o, r->dbuf + k, t->grad, sizeof(float) * t->n);
      o->scale(o, r->dbuf + k, w, t->n);
      k += t->n;
    }
  o->upload(o, r->dbuf + n, ex, sizeof(float) * 4);
  if (dist_nccl_allreduce_sum(r->nccl, r->dbuf, n + 4, NULL, err, errlen) < 0) return -1;
  o->download(o, ex, r->dbuf + n, sizeof(float) * 4);
  float inv = ex[1] > 0 ? 1.0f / ex[1] : 0.0f;
  k = 0;
  for (int g = 0; g < r->opt->ngroups; g++)
    for (int i = 0; i < r->opt->groups[g].ntensors; i++) {
      OptTensor *t = &r->opt->groups[g].tensors[i];
      o->copy(o, t->grad, r->dbuf + k, sizeof(float) * t->n);
      o->scale(o, t->grad, inv, t->n);
      k += t->n;
    }
  return 0;
}

/* The step's one allreduce: every rank's gradient of its mean loss weighted by the positions it
 * counted (the loss is the mean over the global batch, and masks make the counts differ), its
 * loss sums and its Ctrl-C flag, in one buffer; the global means come back into the gradients and
 * *l. Returns true when any rank was interrupted. */
bool run_average_gradients(Run *r, ModelLoss *l) {
  size_t n = r->ngrad;
  float ex[4] = {l->counted ? (float)(l->loss * (double)l->counted) : 0.0f, (float)l->counted, (float)l->correct,
                 run_interrupted ? 1.0f : 0.0f};
  if (r->nccl) {
    char err[512];
    if (nccl_sum(r, (float)l->counted, ex, err, sizeof err) < 0) {
      diag_plain("rank %d: the gradient sum failed: %s", r->rank, err);
      dist_abort(3);
    }
  } else {
    if (!r->gbuf) r->gbuf = xmalloc(sizeof(float) * (n + 4));
    gather_grads(r, true, (float)l->counted);
    memcpy(r->gbuf + n, ex, sizeof ex);
    dist_allreduce_sum(r->gbuf, n + 4, DIST_F32);
    memcpy(ex, r->gbuf + n, sizeof ex);
    gather_grads(r, false, ex[1] > 0 ? (float)(1.0 / ex[1]) : 0.0f);
  }
  double counted = ex[1];
  l->loss = counted > 0 ? ex[0] / counted : NAN;
  l->counted = (int64_t)counted, l->correct = (int64_t)ex[2];
  return ex[3] > 0;
}
