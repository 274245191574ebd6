/* train.c: a C program that trains an emitted cell with plain SGD, with no part of cellc at run
 * time: only gru.h, gru.o (cellc emit stdlib/gru.cell --dims D=1,H=16 --name gru) and cblas.
 *
 * Toy task: a stream of numbers x_t uniform in (-1, 1); at each step predict x_{t-2} (remember
 * two steps back). Prediction = v . y_t + c, a linear readout of the cell's output; the loss is the
 * mean squared error over the steps of every sequence. The sequences of a batch have lengths of
 * their own (ABI 2's opt->lengths, from LAG + 1 to T); the padding after a sequence holds NaN,
 * which the cell never reads. Each step: a fresh batch, gru_forward_ex, the readout and dL/dy by
 * hand, gru_backward_ex, SGD on the cell's params and the readout.
 * Prints the loss every 50 steps; exits 0 when the loss fell below a third of the first one's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gru.h"

enum { T = 24, BATCH = 32, STEPS = 600, LAG = 2 };
#define NP (sizeof(gru_params) / sizeof(float *))

static unsigned long long rng = 88172645463325252ull;
static float uniform(void) { /* xorshift64, in (-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

int main(void) {
  /* the params, in declaration order (gru.h lists their shapes): sizes from the dims */
  size_t sizes[NP] = {gru_H * gru_D, gru_H * gru_H, gru_H, gru_H * gru_D, gru_H * gru_H, gru_H,
                      gru_H * gru_D, gru_H * gru_H, gru_H};
  float *w[NP], *g[NP];
  for (size_t i = 0; i < NP; i++) {
    w[i] = malloc(sizeof(float) * sizes[i]), g[i] = malloc(sizeof(float) * sizes[i]);
    float scale = sizes[i] == gru_H ? 0.0f : 1.0f / sqrtf((float)(sizes[i] / gru_H));
    for (size_t j = 0; j < sizes[i]; j++) w[i][j] = scale * uniform();
  }
  float v[gru_O], dv[gru_O], c = 0;
  for (int j = 0; j < gru_O; j++) v[j] = 0.1f * uniform();
  float *x = malloc(sizeof(float) * T * BATCH * gru_D), *y = malloc(sizeof(float) * T * BATCH * gru_O);
  float *dy = malloc(sizeof(float) * T * BATCH * gru_O);
  void *work = malloc(gru_workspace_bytes(T, BATCH));
  int len[BATCH];
  gru_options opt = {len, 1}; /* each sequence's length; one thread */
  const float lr = 0.5f;
  double first = 0, loss = 0;
  for (int step = 0; step < STEPS; step++) {
    int n = 0; /* the steps the loss counts */
    for (int b = 0; b < BATCH; b++) {
      len[b] = LAG + 1 + (int)((uniform() + 1) * 0.5f * (T - LAG)) % (T - LAG);
      n += len[b] - LAG;
    }
    for (int t = 0; t < T; t++)
      for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < gru_D; i++) x[((size_t)t * BATCH + b) * gru_D + i] = t < len[b] ? uniform() : NAN;
    int rc = gru_forward_ex((const gru_params *)(void *)w, T, BATCH, x, NULL, y, NULL, work, &opt);
    if (rc) return fprintf(stderr, "gru_forward_ex: %s\n", gru_strerror(rc)), 1;
    /* readout and loss from step LAG on; dL/dy = dL/dpred * v */
    loss = 0;
    double dc = 0;
    for (int j = 0; j < gru_O; j++) dv[j] = 0;
    for (int t = 0; t < T; t++)
      for (int b = 0; b < BATCH; b++) {
        const float *yr = y + ((size_t)t * BATCH + b) * gru_O;
        float *dyr = dy + ((size_t)t * BATCH + b) * gru_O;
        float pred = c, e;
        if (t >= len[b]) { /* padding: y is zeros there, dy is never read */
          for (int j = 0; j < gru_O; j++) dyr[j] = NAN;
          continue;
        }
        for (int j = 0; j < gru_O; j++) pred += v[j] * yr[j];
        e = t >= LAG ? pred - x[((size_t)(t - LAG) * BATCH + b) * gru_D] : 0.0f;
        loss += (double)e * e / n;
        float dpred = 2.0f * e / (float)n;
        dc += dpred;
        for (int j = 0; j < gru_O; j++) dv[j] += dpred * yr[j], dyr[j] = dpred * v[j];
      }
    rc = gru_backward_ex((const gru_params *)(void *)w, T, BATCH, x, NULL, dy, NULL, work, &opt, (gru_params *)(void *)g, NULL,
                         NULL);
    if (rc) return fprintf(stderr, "gru_backward_ex: %s\n", gru_strerror(rc)), 1;
    for (size_t i = 0; i < NP; i++)
      for (size_t j = 0; j < sizes[i]; j++) w[i][j] -= lr * g[i][j];
    for (int j = 0; j < gru_O; j++) v[j] -= lr * dv[j];
    c -= lr * (float)dc;
    if (step == 0) first = loss;
    if (step % 50 == 0 || step == STEPS - 1) printf("step %4d  loss %.5f\n", step, loss);
  }
  printf("final: first loss %.5f, last loss %.5f (%s)\n", first, loss, loss < first / 3 ? "learned" : "did not learn");
  return loss < first / 3 ? 0 : 1;
}
