/* export_drv.c: the driver tests/export_cli.py links with an exported model (cellc export --to c):
 *
 *   export_drv WEIGHTS T B IN OUT
 *
 * reads B sequences of T steps from IN (raw [T, B] int32 tokens or [T, B, MODEL_IN_DIM] float32),
 * runs model_forward, and runs every sequence again through model_step one token at a time from
 * model_state_init's state, carrying the state; exits 4 unless the step-by-step outputs equal
 * model_forward's bit for bit. Writes model_forward's outputs to OUT (raw float32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

int main(int argc, char **argv) {
  if (argc != 6) return 2;
  Model *m = model_load(argv[1]);
  if (!m) return 1;
  int T = atoi(argv[2]), B = atoi(argv[3]);
  size_t per = MODEL_TOKENS ? sizeof(int32_t) : sizeof(float) * MODEL_IN_DIM;
  char *in = malloc(per * (size_t)T * B);
  FILE *f = fopen(argv[4], "rb");
  if (!f || fread(in, per, (size_t)T * B, f) != (size_t)T * B) return 1;
  fclose(f);
  size_t nout = (size_t)(MODEL_READOUT == 0 ? T * B : B) * MODEL_OUT_DIM;
  float *out = malloc(sizeof(float) * nout), *o = malloc(sizeof(float) * MODEL_OUT_DIM);
  float *state = malloc(sizeof(float) * (MODEL_STATE + 1));
  if (model_forward(m, T, B, in, out)) return 3;
  int differ = 0;
  for (int b = 0; b < B; b++) {
    model_state_init(m, state);
    for (int t = 0; t < T; t++) {
      if (model_step(m, state, in + per * ((size_t)t * B + b), o)) return 3;
      const float *want = MODEL_READOUT == 0 ? out + ((size_t)t * B + b) * MODEL_OUT_DIM : t == T - 1 ? out + (size_t)b * MODEL_OUT_DIM : NULL;
      if (want && memcmp(want, o, sizeof(float) * MODEL_OUT_DIM)) differ++;
    }
  }
  f = fopen(argv[5], "wb");
  if (!f || fwrite(out, sizeof(float), nout, f) != nout || fclose(f)) return 1;
  model_free(m);
  free(in), free(out), free(o), free(state);
  if (differ) fprintf(stderr, "export_drv: %d step outputs differ from model_forward's\n", differ);
  return differ ? 4 : 0;
}
