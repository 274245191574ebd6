/* generate.c: text from a byte-level language model exported by `cellc export --to c`, one token at
 * a time: the prompt's bytes go through model_step (the state carried from step to step), then
 * each next byte is drawn from the softmax of the logits at temperature TEMP (0: the arg-max) and
 * fed back. Prints the prompt and what follows it.
 *
 *   generate WEIGHTS "PROMPT" [N=400] [TEMP=0.8] [SEED=1] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

/* xorshift64*: a fixed stream for a seed */
static double uniform(uint64_t *s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return (double)((*s * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int draw(const float *z, double temp, uint64_t *rng) {
  int best = 0;
  for (int v = 1; v < MODEL_OUT_DIM; v++)
    if (z[v] > z[best]) best = v;
  if (temp <= 0) return best;
  double p[MODEL_OUT_DIM], sum = 0;
  for (int v = 0; v < MODEL_OUT_DIM; v++) sum += p[v] = exp((z[v] - z[best]) / temp);
  double u = uniform(rng) * sum;
  for (int v = 0; v < MODEL_OUT_DIM; v++)
    if ((u -= p[v]) <= 0) return v;
  return best;
}

int main(int argc, char **argv) {
  if (argc < 3 || !MODEL_TOKENS || MODEL_VOCAB != 256) {
    fprintf(stderr, "usage: generate WEIGHTS \"PROMPT\" [N] [TEMP] [SEED] (a byte-level model)\n");
    return 2;
  }
  Model *m = model_load(argv[1]);
  if (!m) return 1;
  int n = argc > 3 ? atoi(argv[3]) : 400;
  double temp = argc > 4 ? atof(argv[4]) : 0.8;
  uint64_t rng = argc > 5 ? strtoull(argv[5], NULL, 10) * 0x9E3779B97F4A7C15ULL + 1 : 0x9E3779B97F4A7C16ULL;
  float *state = malloc(sizeof(float) * (MODEL_STATE + 1)), z[MODEL_OUT_DIM];
  model_state_init(m, state);
  const unsigned char *p = (const unsigned char *)argv[2];
  int32_t tok = 0;
  for (; *p; p++) { /* the prompt: its last step's logits give the first byte drawn */
    tok = *p;
    model_step(m, state, &tok, z);
    putchar(tok);
  }
  for (int i = 0; i < n; i++) {
    tok = draw(z, temp, &rng);
    putchar(tok);
    model_step(m, state, &tok, z);
  }
  putchar('\n');
  model_free(m);
  free(state);
  return 0;
}
