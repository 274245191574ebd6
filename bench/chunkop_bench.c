/* chunkop_bench.c: times the cpu chunk op of the chunked form (compiler/backend/cpu/chunkop_f32.c)
 * alone on one head of one sequence, on one thread (OpenBLAS single-threaded), best of REPS:
 *   chunkop_bench [T K V L REPS]     (default 2048 64 64 64 7)
 * For a decay per key and a scalar decay per head: the op's forward and backward, and the
 * recurrence as a plain float32 loop (decay, outer product, read: the sequential form's arithmetic).
 * Log decays uniform in [-0.05, 0], q, k, v, dO uniform in [-0.5, 0.5]. One JSON object a line.
 * Then the chunked delta rule (chunkdelta_f32.c, decay "delta") the same way, its keys of unit
 * length, c = -a beta with beta uniform in [0, 1], its loop the delta rule's step.
 * The loop vectorized (O3), as the op's own row loops are. As the chunked form calls them, the ops
 * keep their scratch between calls and the forward keeps what the backward reads (ChunkOpF32.bnd,
 * ChunkDeltaF32.keep). Last, "key, interleaved": the per-key op on rows laid out as the chunked
 * form's in program writes them, B = 8 sequences' rows interleaved (row t B + b), each row
 * NIN = 300 floats of which q, k, v, log a are the first 2K + V + K, the reads and gradients
 * likewise; its times per sequence (the 8 calls' over 8), against the dense rows above. */
#pragma GCC optimize("O3")
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *uniform(size_t n, float lo, float hi) {
  float *v = xmalloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (float)rand() / (float)RAND_MAX;
  return v;
}

/* the recurrence step by step: S = a S + k v^T, o = S^T q */
static void steps(int T, int K, int V, bool per_key, const float *q, const float *k, const float *v, const float *la,
                  float *S, float *o) {
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < K; i++) {
      float a = expf(la[(size_t)t * (per_key ? K : 1) + (per_key ? i : 0)]), ki = k[(size_t)t * K + i];
      for (int j = 0; j < V; j++) S[(size_t)i * V + j] = a * S[(size_t)i * V + j] + ki * v[(size_t)t * V + j];
    }
    for (int j = 0; j < V; j++) o[(size_t)t * V + j] = 0;
    for (int i = 0; i < K; i++)
      for (int j = 0; j < V; j++) o[(size_t)t * V + j] += S[(size_t)i * V + j] * q[(size_t)t * K + i];
  }
}

/* the delta rule step by step: u = v + c S^T k, S = a S + k u^T, o = S^T q */
static void delta_steps(int T, int K, int V, const float *q, const float *k, const float *v, const float *la, const float *c,
                        float *S, float *u, float *o) {
  for (int t = 0; t < T; t++) {
    const float *kt = k + (size_t)t * K, *qt = q + (size_t)t * K;
    for (int j = 0; j < V; j++) u[j] = 0;
    for (int i = 0; i < K; i++)
      for (int j = 0; j < V; j++) u[j] += S[(size_t)i * V + j] * kt[i];
    for (int j = 0; j < V; j++) u[j] = v[(size_t)t * V + j] + c[t] * u[j];
    float a = expf(la[t]);
    for (int i = 0; i < K; i++)
      for (int j = 0; j < V; j++) S[(size_t)i * V + j] = a * S[(size_t)i * V + j] + kt[i] * u[j];
    for (int j = 0; j < V; j++) o[(size_t)t * V + j] = 0;
    for (int i = 0; i < K; i++)
      for (int j = 0; j < V; j++) o[(size_t)t * V + j] += S[(size_t)i * V + j] * qt[i];
  }
}

static void bench_delta(int T, int K, int V, int L, int reps) {
  size_t tk = (size_t)T * K, tv = (size_t)T * V, kv = (size_t)K * V;
  float *q = uniform(tk, -.5f, .5f), *k = uniform(tk, -.5f, .5f), *v = uniform(tv, -.5f, .5f);
  float *la = uniform((size_t)T, -.05f, 0), *c = uniform((size_t)T, 0, 1), *dO = uniform(tv, -.5f, .5f);
  float *s0 = uniform(kv, -.5f, .5f), *dsT = uniform(kv, -.5f, .5f), *o = xmalloc(sizeof(float) * tv), *s1 = xmalloc(sizeof(float) * kv);
  float *dq = xmalloc(sizeof(float) * tk), *dk = xmalloc(sizeof(float) * tk), *dv = xmalloc(sizeof(float) * tv);
  float *dla = xmalloc(sizeof(float) * (size_t)T), *dc = xmalloc(sizeof(float) * (size_t)T), *ds0 = xmalloc(sizeof(float) * kv);
  float *S = xmalloc(sizeof(float) * kv), *u = xmalloc(sizeof(float) * (size_t)V);
  for (int t = 0; t < T; t++) { /* unit keys (a longer key makes the step expand), c = -a beta */
    float n = 0;
    for (int i = 0; i < K; i++) n += k[(size_t)t * K + i] * k[(size_t)t * K + i];
    for (int i = 0; i < K; i++) k[(size_t)t * K + i] /= sqrtf(n);
    c[t] = -expf(la[t]) * c[t];
  }
  Scratch sc = {0};
  float *keep = xmalloc(sizeof(float) * cpu_chunkdelta_keep_floats(T, K, V, L) + 1);
  ChunkDeltaF32 d = {T, K, V, L, q, k, v, la, c, K, K, V, 1, 1, keep, &sc};
  double bf = 1e30, bb = 1e30, bs = 1e30;
  for (int r = 0; r < reps; r++) {
    double a = now();
    cpu_chunkdelta_forward(&d, s0, o, V, s1);
    double b = now();
    cpu_chunkdelta_backward(&d, s0, dO, V, dsT, dq, dk, dv, dla, dc, ds0);
    double e = now();
    memcpy(S, s0, sizeof(float) * kv);
    delta_steps(T, K, V, q, k, v, la, c, S, u, o);
    double f = now();
    bf = fmin(bf, b - a), bb = fmin(bb, e - b), bs = fmin(bs, f - e);
  }
  printf("{\"decay\": \"delta\", \"T\": %d, \"K\": %d, \"V\": %d, \"L\": %d, \"forward_ms\": %.3f, \"backward_ms\": %.3f, "
         "\"loop_forward_ms\": %.3f}\n",
         T, K, V, L, bf * 1e3, bb * 1e3, bs * 1e3);
  free(q), free(k), free(v), free(la), free(c), free(dO), free(s0), free(dsT), free(o), free(s1), free(dq), free(dk);
  free(dv), free(dla), free(dc), free(ds0), free(S), free(u), free(keep);
  scratch_free(&sc);
}

static void bench_interleaved(int T, int K, int V, int L, int reps) {
  enum { B = 8, NIN = 300 };
  int nin = 2 * K + V + K > NIN ? 2 * K + V + K : NIN, nout = V > 64 ? V : 64;
  size_t rows = (size_t)T * B, kv = (size_t)K * V, per = kv * (size_t)((T + L - 1) / L + 1);
  float *yin = uniform(rows * (size_t)nin, -.5f, .5f), *dyin = xmalloc(sizeof(float) * rows * (size_t)nin);
  float *o = xmalloc(sizeof(float) * rows * (size_t)nout), *dO = uniform(rows * (size_t)nout, -.5f, .5f);
  float *s0 = uniform(kv, -.5f, .5f), *dsT = uniform(kv, -.5f, .5f), *s1 = xmalloc(sizeof(float) * kv);
  float *ds0 = xmalloc(sizeof(float) * kv), *bnd = xmalloc(sizeof(float) * per * B);
  for (size_t r = 0; r < rows; r++)
    for (int j = 0; j < K; j++) yin[r * (size_t)nin + (size_t)(2 * K + V + j)] = -.05f * (float)rand() / (float)RAND_MAX;
  Scratch sc = {0};
  double bf = 1e30, bb = 1e30;
  for (int r = 0; r < reps; r++) {
    double a = now();
    for (int b = 0; b < B; b++) {
      const float *row = yin + (size_t)b * nin;
      int ld = B * nin;
      ChunkOpF32 c = {T, K, V, L, true, row, row + K, row + 2 * K, row + 2 * K + V, ld, ld, ld, ld, bnd + per * b, &sc};
      cpu_chunkop_forward(&c, s0, o + (size_t)b * nout, B * nout, s1);
    }
    double m = now();
    for (int b = 0; b < B; b++) {
      const float *row = yin + (size_t)b * nin;
      float *g = dyin + (size_t)b * nin;
      int ld = B * nin;
      ChunkOpF32 c = {T, K, V, L, true, row, row + K, row + 2 * K, row + 2 * K + V, ld, ld, ld, ld, bnd + per * b, &sc};
      cpu_chunkop_backward(&c, s0, dO + (size_t)b * nout, B * nout, dsT, g, g + K, g + 2 * K, g + 2 * K + V, ds0);
    }
    double e = now();
    bf = fmin(bf, m - a), bb = fmin(bb, e - m);
  }
  printf("{\"decay\": \"key, interleaved\", \"T\": %d, \"K\": %d, \"V\": %d, \"L\": %d, \"forward_ms\": %.3f, \"backward_ms\": %.3f}\n", T, K,
         V, L, bf * 1e3 / B, bb * 1e3 / B);
  free(yin), free(dyin), free(o), free(dO), free(s0), free(dsT), free(s1), free(ds0), free(bnd);
  scratch_free(&sc);
}

int main(int argc, char **argv) {
  int T = argc > 1 ? atoi(argv[1]) : 2048, K = argc > 2 ? atoi(argv[2]) : 64, V = argc > 3 ? atoi(argv[3]) : 64;
  int L = argc > 4 ? atoi(argv[4]) : 64, reps = argc > 5 ? atoi(argv[5]) : 7;
  openblas_set_num_threads(1);
  srand(1);
  for (int pk = 1; pk >= 0; pk--) {
    int w = pk ? K : 1;
    size_t tk = (size_t)T * K, tv = (size_t)T * V, kv = (size_t)K * V;
    float *q = uniform(tk, -.5f, .5f), *k = uniform(tk, -.5f, .5f), *v = uniform(tv, -.5f, .5f);
    float *la = uniform((size_t)T * w, -.05f, 0), *dO = uniform(tv, -.5f, .5f), *s0 = uniform(kv, -.5f, .5f);
    float *dsT = uniform(kv, -.5f, .5f), *o = xmalloc(sizeof(float) * tv), *s1 = xmalloc(sizeof(float) * kv);
    float *dq = xmalloc(sizeof(float) * tk), *dk = xmalloc(sizeof(float) * tk), *dv = xmalloc(sizeof(float) * tv);
    float *dla = xmalloc(sizeof(float) * (size_t)T * w), *ds0 = xmalloc(sizeof(float) * kv), *S = xmalloc(sizeof(float) * kv);
    Scratch sc = {0};
    float *bnd = xmalloc(sizeof(float) * kv * (size_t)((T + L - 1) / L + 1));
    ChunkOpF32 c = {T, K, V, L, pk, q, k, v, la, K, K, V, w, bnd, &sc};
    double bf = 1e30, bb = 1e30, bs = 1e30;
    for (int r = 0; r < reps; r++) {
      double a = now();
      cpu_chunkop_forward(&c, s0, o, V, s1);
      double b = now();
      cpu_chunkop_backward(&c, s0, dO, V, dsT, dq, dk, dv, dla, ds0);
      double e = now();
      memcpy(S, s0, sizeof(float) * kv);
      steps(T, K, V, pk, q, k, v, la, S, o);
      double f = now();
      bf = fmin(bf, b - a), bb = fmin(bb, e - b), bs = fmin(bs, f - e);
    }
    printf("{\"decay\": \"%s\", \"T\": %d, \"K\": %d, \"V\": %d, \"L\": %d, \"forward_ms\": %.3f, \"backward_ms\": %.3f, "
           "\"loop_forward_ms\": %.3f}\n",
           pk ? "key" : "scalar", T, K, V, L, bf * 1e3, bb * 1e3, bs * 1e3);
    free(q), free(k), free(v), free(la), free(dO), free(s0), free(dsT), free(o), free(s1), free(dq), free(dk), free(dv);
    free(dla), free(ds0), free(S), free(bnd);
    scratch_free(&sc);
  }
  bench_delta(T, K, V, L, reps);
  bench_interleaved(T, K, V, L, reps);
  return 0;
}
