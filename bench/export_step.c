/* export_step.c: the streaming step of an exported model (cellc export --to c), timed: model_step
 * on one token at a time, the state carried, on the calling thread alone.
 *
 *   export_step WEIGHTS TOKENS ROUNDS
 *
 * Runs TOKENS steps (a fixed pseudo-random token stream) ROUNDS times after one warm-up round and
 * prints one line of JSON: the best round's microseconds per token. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 4 || !MODEL_TOKENS) return 2;
  Model *m = model_load(argv[1]);
  if (!m) return 1;
  int n = atoi(argv[2]), rounds = atoi(argv[3]);
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
  unsigned s = 12345;
  for (int i = 0; i < n; i++) s = s * 1103515245u + 12345u, tok[i] = (int32_t)((s >> 16) % MODEL_VOCAB);
  float *state = malloc(sizeof(float) * (MODEL_STATE + 1)), out[MODEL_OUT_DIM];
  double best = 1e30, sink = 0;
  for (int r = 0; r <= rounds; r++) {
    model_state_init(m, state);
    double t0 = now();
    for (int i = 0; i < n; i++) model_step(m, state, &tok[i], out), sink += out[0];
    double us = (now() - t0) * 1e6 / n;
    if (r > 0 && us < best) best = us; /* round 0 warms the caches up */
  }
  printf("{\"us_per_token\": %.4f, \"tokens\": %d, \"rounds\": %d, \"sink\": %g}\n", best, n, rounds, sink);
  model_free(m);
  free(tok), free(state);
  return 0;
}
