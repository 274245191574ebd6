/* scan.h: the scans of the diagonal-linear states over whole sequences, shared by the CPU back end
 * (cpu.c) and the standalone executor that `cellc emit` links into its objects
 * (standalone/executor.c): the forward new = a * prev + b and the reverse adjoint scan, real or
 * complex, over a range of channels. Freestanding: stdint and stdbool only. */
#ifndef CELLC_SCAN_H
#define CELLC_SCAN_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__)
#define SCAN_OPT __attribute__((optimize("O3")))
#else
#define SCAN_OPT
#endif

/* A coefficient of a scan: its array (row stride ld), or a constant (ld 0,
 * pointing at a row filled with it). */
typedef struct Coef {
  const float *base;
  int64_t ld;
  float *fill;
} Coef;

static const float *coef_row(const Coef *k, int64_t r) { return k->base + r * k->ld; }

/* new[t] = a[t] * prev[t] + b[t] (complex: a complex product), channel-innermost, over the
 * channels [j0, j1) of every row. */
SCAN_OPT static void scan_forward(int64_t rows, int B, int size, int j0, int j1, Coef *a, Coef *b,
                                                         float *S0, float *S1) {
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict ar = coef_row(&a[0], r), *restrict br = coef_row(&b[0], r);
    const float *restrict p0 = S0 + r * size;
    float *restrict n0 = S0 + (r + B) * size;
    if (!S1) {
      for (int j = j0; j < j1; j++) n0[j] = ar[j] * p0[j] + br[j];
      continue;
    }
    const float *restrict ai = coef_row(&a[1], r), *restrict bi = coef_row(&b[1], r), *restrict p1 = S1 + r * size;
    float *restrict n1 = S1 + (r + B) * size;
    for (int j = j0; j < j1; j++) {
      float pr = p0[j], pi = p1[j];
      n0[j] = ar[j] * pr - ai[j] * pi + br[j];
      n1[j] = ar[j] * pi + ai[j] * pr + bi[j];
    }
  }
}

/* dtotal[t] = g[t] + conj(a[t+1]) * dtotal[t+1]; the last step adds dfinal
 * (already in the rows after the last). Over the channels [j0, j1). */
SCAN_OPT static void scan_reverse(int64_t rows, int B, int size, int j0, int j1, Coef *a, Coef *g,
                                                         float *D0, float *D1) {
  for (int64_t r = rows - 1; r >= 0; r--) {
    bool last = r >= rows - B;
    const float *restrict g0 = coef_row(&g[0], r), *restrict n0 = D0 + (r + B) * size;
    float *restrict d0 = D0 + r * size;
    if (!D1) {
      if (last)
        for (int j = j0; j < j1; j++) d0[j] = g0[j] + n0[j];
      else {
        const float *restrict ar = coef_row(&a[0], r + B);
        for (int j = j0; j < j1; j++) d0[j] = g0[j] + ar[j] * n0[j];
      }
      continue;
    }
    const float *restrict g1 = coef_row(&g[1], r), *restrict n1 = D1 + (r + B) * size;
    float *restrict d1 = D1 + r * size;
    if (last) {
      for (int j = j0; j < j1; j++) d0[j] = g0[j] + n0[j], d1[j] = g1[j] + n1[j];
      continue;
    }
    const float *restrict ar = coef_row(&a[0], r + B), *restrict ai = coef_row(&a[1], r + B);
    for (int j = j0; j < j1; j++) {
      d0[j] = g0[j] + ar[j] * n0[j] + ai[j] * n1[j];
      d1[j] = g1[j] + ar[j] * n1[j] - ai[j] * n0[j];
    }
  }
}

#endif
