/* cpu.h: the CPU back end: runs a Program's plan over whole sequences in float32, with GEMMs
 * through OpenBLAS, scans, and fused elementwise kernels generated through the LLVM-C API and
 * JIT-compiled. CELLC_THREADS (default: all cores) sets the threads of BackendOptions.threads 0. */
#ifndef CELLC_CPU_H
#define CELLC_CPU_H

#include "backend.h"

extern const Backend cpu_backend;

/* The chunk op of the chunked form (compiler/ir/chunkop.h: the float64 reference, its equations)
 * in float32, its products through OpenBLAS (chunkop_f32.c); the same arguments in float. */
typedef struct ChunkOpF32 {
  int T, K, V, L;
  bool per_key;
  const float *q, *k, *v, *la;
  int ldq, ldk, ldv, ldla;
  float *bnd; /* or NULL: the states at the chunk boundaries, [ceil(T / L) + 1][K V] (the first s0, the
                 last sT): the forward writes them, the backward of the same sequence reads them
                 instead of running the chunks again */
  Scratch *scratch; /* or NULL: a thread's scratch for the op's buffers, kept between its calls; NULL:
                       the call's own */
} ChunkOpF32;
void cpu_chunkop_forward(const ChunkOpF32 *c, const float *s0, float *o, int ldo, float *sT);
void cpu_chunkop_backward(const ChunkOpF32 *c, const float *s0, const float *dout, int lddo, const float *dsT, float *dq,
                          float *dk, float *dv, float *dla, float *ds0);

/* The chunked delta rule (compiler/ir/chunkdelta.h) in float32, its products through OpenBLAS
 * (chunkdelta_f32.c); the same arguments in float. */
typedef struct ChunkDeltaF32 {
  int T, K, V, L;
  const float *q, *k, *v, *la, *c;
  int ldq, ldk, ldv, ldla, ldc;
  float *keep; /* or NULL: the forward's values of each chunk, cpu_chunkdelta_keep_floats of them (the
                  states before each chunk, M, K S_0 and the solve's U): the forward writes them, the
                  backward of the same sequence reads them instead of running the chunks again */
  Scratch *scratch; /* as ChunkOpF32's */
} ChunkDeltaF32;
size_t cpu_chunkdelta_keep_floats(int T, int K, int V, int L);
void cpu_chunkdelta_forward(const ChunkDeltaF32 *d, const float *s0, float *o, int ldo, float *sT);
void cpu_chunkdelta_backward(const ChunkDeltaF32 *d, const float *s0, const float *dout, int lddo, const float *dsT, float *dq,
                             float *dk, float *dv, float *dla, float *dc, float *ds0);

#endif
