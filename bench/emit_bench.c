/* emit_bench.c: times an emitted cell (cellc emit --target cpu), P_forward_ex + P_backward_ex with
 * opt->threads (0: every core), best of N after a warm-up; the counterpart of build/bench_cell for
 * bench/emit_compare.sh. Built against one emitted object: cc -DP=<name> -include <name>.h.
 *   emit_bench T B THREADS REPS NPARAMS SIZE... NSTATES SIZE...   (state sizes per batch row)
 * Prints one JSON object. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(P, x)
typedef CAT(P, _params) Params;
typedef CAT(P, _states) States;
typedef CAT(P, _options) Options;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *rnd(size_t n, float scale, unsigned *seed) {
  float *v = malloc(sizeof(float) * (n + 1));
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    v[i] = scale * ((float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc < 7) return fprintf(stderr, "usage: emit_bench T B THREADS REPS NPARAMS SIZE... NSTATES SIZE...\n"), 2;
  int T = atoi(argv[1]), B = atoi(argv[2]), threads = atoi(argv[3]), reps = atoi(argv[4]), a = 5;
  int np = atoi(argv[a++]);
  float *w[64], *g[64], *h0[64], *df[64], *fin[64], *dh0[64];
  unsigned seed = 3;
  for (int i = 0; i < np && i < 64; i++) {
    long n = atol(argv[a++]);
    w[i] = rnd((size_t)n, 0.08f, &seed), g[i] = malloc(sizeof(float) * (size_t)(n + 1));
  }
  int ns = atoi(argv[a++]);
  for (int i = 0; i < ns && i < 64; i++) {
    long n = atol(argv[a++]) * B;
    h0[i] = rnd((size_t)n, 0.1f, &seed), df[i] = rnd((size_t)n, 0.1f, &seed);
    fin[i] = malloc(sizeof(float) * (size_t)(n + 1)), dh0[i] = malloc(sizeof(float) * (size_t)(n + 1));
  }
  size_t rows = (size_t)T * B;
  float *x = rnd(rows * FN(_INPUT), 1.0f, &seed), *dy = rnd(rows * FN(_O), 1.0f, &seed);
  float *y = malloc(sizeof(float) * rows * FN(_O)), *dx = malloc(sizeof(float) * rows * FN(_INPUT));
  size_t wsb = FN(_workspace_bytes)(T, B);
  void *work = malloc(wsb);
  if (!work) return fprintf(stderr, "emit_bench: no memory for the workspace (%zu bytes)\n", wsb), 1;
  Options o = {NULL, threads};
  const Params *W = (const Params *)(void *)w;
  double best_f = 1e30, best_b = 1e30;
  for (int rep = 0; rep <= reps; rep++) { /* the first warms up: page faults */
    double t0 = now();
    int r1 = FN(_forward_ex)(W, T, B, x, (const States *)(void *)h0, y, (States *)(void *)fin, work, &o);
    double t1 = now();
    int r2 = FN(_backward_ex)(W, T, B, x, (const States *)(void *)h0, dy, (const States *)(void *)df, work, &o,
                              (Params *)(void *)g, dx, (States *)(void *)dh0);
    double t2 = now();
    if (r1 || r2) return fprintf(stderr, "emit_bench: %s\n", FN(_strerror)(r1 ? r1 : r2)), 1;
    if (rep && t1 - t0 < best_f) best_f = t1 - t0;
    if (rep && t2 - t1 < best_b) best_b = t2 - t1;
  }
  printf("{\"T\": %d, \"B\": %d, \"threads\": %d, \"workspace_bytes\": %zu, \"forward_s\": %.6f, \"backward_s\": %.6f, "
         "\"total_s\": %.6f}\n", T, B, threads, wsb, best_f, best_b, best_f + best_b);
  return 0;
}
