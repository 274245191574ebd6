/* export_step.c: the streaming step of an exported model (cellc export --to c), timed: model_step
 * on one token at a time, the state carried, on the calling thread alone.
 *
 *   export_step WEIGHTS TOKENS ROUNDS
 *
 * Runs TOKENS steps (a fixed pseudo-random token stream) ROUNDS times after one warm-up round and
 * prints one line of JSON: the best round's microseconds per token.
 *
 *   export_step --read KIB ROUNDS
 *
 * The floor a step's weights set: a buffer of KIB KiB (the bytes of weights one token reads) summed
 * in order, repeated as the steps repeat it (so it is served from whichever cache level holds it),
 * with the same 16-float vectors and 8 independent sums as the step's kernel; prints the best
 * round's microseconds per pass and GB/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef float v16 __attribute__((vector_size(64)));

static int read_floor(int kib, int rounds) {
  size_t n = (size_t)kib * 1024 / sizeof(v16);
  v16 *b = aligned_alloc(64, n * sizeof(v16));
  if (!b) return 1;
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < 16; j++) b[i][j] = (float)(i % 7) * 0.25f;
  int passes = 2000;
  double best = 1e30;
  v16 t = {0};
  for (int r = 0; r <= rounds; r++) {
    double t0 = now();
    for (int p = 0; p < passes; p++) {
      v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};
      for (size_t i = 0; i + 8 <= n; i += 8)
        s0 += b[i], s1 += b[i + 1], s2 += b[i + 2], s3 += b[i + 3], s4 += b[i + 4], s5 += b[i + 5], s6 += b[i + 6], s7 += b[i + 7];
      t += s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
      __asm__ volatile("" : : "r"(b) : "memory"); /* each pass reads the buffer again */
    }
    double us = (now() - t0) * 1e6 / passes;
    if (r > 0 && us < best) best = us;
  }
  printf("{\"read_kib\": %d, \"us_per_pass\": %.4f, \"gb_per_s\": %.2f, \"sink\": %g}\n", kib, best,
         (double)n * sizeof(v16) / best * 1e-3, (double)t[0]);
  free(b);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--read")) return read_floor(atoi(argv[2]), atoi(argv[3]));
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
