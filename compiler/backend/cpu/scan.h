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

/* Whether the coefficients' rows lie one after another (row stride = size): then the rows of
 * consecutive batch entries of one step are one run of floats, scanned as one loop. */
static bool coefs_packed(const Coef *k, int n, int size) {
  for (int i = 0; i < n; i++)
    if (k[i].ld != size) return false;
  return true;
}

/* One block of the forward scan: n entries (a step's block of rows, or a row's channels):
 * new = a * prev + b, complex where the imaginary planes are given (n1 not NULL). */
SCAN_OPT static inline void scan_block(int64_t n, const float *restrict ar, const float *restrict ai,
                                       const float *restrict br, const float *restrict bi, const float *restrict p0,
                                       const float *restrict p1, float *restrict n0, float *restrict n1) {
  if (!n1) {
    for (int64_t j = 0; j < n; j++) n0[j] = ar[j] * p0[j] + br[j];
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    float pr = p0[j], pi = p1[j];
    n0[j] = ar[j] * pr - ai[j] * pi + br[j];
    n1[j] = ar[j] * pi + ai[j] * pr + bi[j];
  }
}

/* new[t] = a[t] * prev[t] + b[t] (complex: a complex product), channel-innermost, over the
 * channels [j0, j1) of the batch entries [b0, b1) of every step. With all channels and rows one
 * after another, each step's block of entries is one loop (a loop per row of 64 channels spent
 * more on its setup than on its FMAs: the scans of mgu at H = 128 took 3x as long); the same
 * operations per element either way. */
SCAN_OPT static void scan_forward(int64_t rows, int B, int size, int b0, int b1, int j0, int j1, Coef *a, Coef *b,
                                  float *S0, float *S1) {
  int parts = S1 ? 2 : 1;
  bool flat = j0 == 0 && j1 == size && coefs_packed(a, parts, size) && coefs_packed(b, parts, size);
  for (int64_t t0 = 0; t0 < rows; t0 += B) {
    int64_t r = t0 + b0, r1 = flat ? r + 1 : t0 + b1, n = flat ? (int64_t)(b1 - b0) * size : j1 - j0;
    int c0 = flat ? 0 : j0;
    for (; r < r1; r++)
      scan_block(n, coef_row(&a[0], r) + c0, S1 ? coef_row(&a[1], r) + c0 : NULL, coef_row(&b[0], r) + c0,
                 S1 ? coef_row(&b[1], r) + c0 : NULL, S0 + r * size + c0, S1 ? S1 + r * size + c0 : NULL,
                 S0 + (r + B) * size + c0, S1 ? S1 + (r + B) * size + c0 : NULL);
  }
}

/* One block of the reverse scan (as scan_block): d = g + conj(a) * next, or d = g + next on the
 * last step (a NULL). */
SCAN_OPT static inline void rscan_block(int64_t n, const float *restrict g0, const float *restrict g1,
                                        const float *restrict ar, const float *restrict ai, const float *restrict n0,
                                        const float *restrict n1, float *restrict d0, float *restrict d1) {
  if (!d1) {
    if (!ar)
      for (int64_t j = 0; j < n; j++) d0[j] = g0[j] + n0[j];
    else
      for (int64_t j = 0; j < n; j++) d0[j] = g0[j] + ar[j] * n0[j];
    return;
  }
  if (!ar) {
    for (int64_t j = 0; j < n; j++) d0[j] = g0[j] + n0[j], d1[j] = g1[j] + n1[j];
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    d0[j] = g0[j] + ar[j] * n0[j] + ai[j] * n1[j];
    d1[j] = g1[j] + ar[j] * n1[j] - ai[j] * n0[j];
  }
}

/* dtotal[t] = g[t] + conj(a[t+1]) * dtotal[t+1]; the last step adds dfinal (already in the rows
 * after the last). Over the channels [j0, j1) of the batch entries [b0, b1), one loop per step's
 * block where the rows lie one after another (as scan_forward). */
SCAN_OPT static void scan_reverse(int64_t rows, int B, int size, int b0, int b1, int j0, int j1, Coef *a, Coef *g,
                                  float *D0, float *D1) {
  int parts = D1 ? 2 : 1;
  bool flat = j0 == 0 && j1 == size && coefs_packed(a, parts, size) && coefs_packed(g, parts, size);
  for (int64_t t0 = rows - B; t0 >= 0; t0 -= B) {
    bool last = t0 + B >= rows;
    int64_t r = t0 + b0, r1 = flat ? r + 1 : t0 + b1, n = flat ? (int64_t)(b1 - b0) * size : j1 - j0;
    int c0 = flat ? 0 : j0;
    for (; r < r1; r++) {
      const float *g0 = coef_row(&g[0], r) + c0, *n0 = D0 + (r + B) * size + c0;
      const float *g1 = D1 ? coef_row(&g[1], r) + c0 : NULL, *n1 = D1 ? D1 + (r + B) * size + c0 : NULL;
      const float *ar = last ? NULL : coef_row(&a[0], r + B) + c0;
      const float *ai = last || !D1 ? NULL : coef_row(&a[1], r + B) + c0;
      rscan_block(n, g0, g1, ar, ai, n0, n1, D0 + r * size + c0, D1 ? D1 + r * size + c0 : NULL);
    }
  }
}

#endif
