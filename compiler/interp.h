/* interp.h: the reference interpreter: runs a Program's forward and backward
 * step graphs over whole sequences, row by row, in float64 (or rounding every
 * value to float32). The oracle every back end is tested against. */
#ifndef CELLC_INTERP_H
#define CELLC_INTERP_H

#include "lower.h"

/* All buffers are row-major doubles; per-part arrays follow the Program's
 * param parts and state parts (complex values as separate re/im planes). */
typedef struct SeqData {
  int T, B;
  bool f32;               /* round every value to float32 */
  /* inputs */
  const double *x;        /* [T, B, x_size] */
  const double **params;  /* per param part: numel */
  const double **h0;      /* per state part: [B, size] */
  const double *dy;       /* [T, B, output_size] */
  const double **dfinal;  /* per state part: [B, size] */
  const double **noise;   /* per noise stream: [T, B, size] */
  /* outputs (allocated by the caller) */
  double *y;              /* [T, B, output_size] */
  double **final;         /* per state part: [B, size] */
  double **gates;         /* per gate: [T, B, size] */
  double **grad_params;   /* per param part: numel */
  double *grad_x;         /* [T, B, x_size] */
  double **grad_h0;       /* per state part: [B, size] */
} SeqData;

void interp_run(Program *p, SeqData *d);

#endif
