/* chunkdelta.h: the chunkwise-parallel form of the gated delta rule (DeltaNet, Gated DeltaNet),
 * one head of one sequence, forward and its backward, in float64 (the reference the float32 op of
 * the cpu, cpu.h, is checked against). With a_t > 0 the decay of step t (one per head) and c_t the
 * coefficient of the state's projection on k_t (Gated DeltaNet: c_t = -a_t beta_t, v_t = beta_t v):
 *   S_t = a_t S_{t-1} + k_t u_t^T,  u_t = v_t + c_t S_{t-1}^T k_t      (S: [K, V])
 *   o_t = S_t^T q_t                                                      (the read of the new value)
 * The sequence runs in chunks of L steps. With b_t = sum_{j <= t} log a_j inside a chunk (b_0 = 0
 * before its first step) and S_0 the state before it, the chunk's u solve one unit lower
 * triangular system (the UT form of the product of the steps' Householder-like factors):
 *   u_t - sum_{s < t} c_t e^{b_{t-1} - b_s} (k_t . k_s) u_s = v_t + c_t e^{b_{t-1}} S_0^T k_t
 *   o_t = e^{b_t} S_0^T q_t + sum_{s <= t} e^{b_t - b_s} (q_t . k_s) u_s
 *   S_n = e^{b_n} S_0 + sum_s e^{b_n - b_s} k_s u_s^T                  (n: the chunk's last step)
 * Every exponent is at most 0. docs/architecture.md, "The chunked delta rule", derives the backward. */
#ifndef CELLC_CHUNKDELTA_H
#define CELLC_CHUNKDELTA_H

typedef struct ChunkDelta {
  int T, K, V, L;       /* steps, key and value sizes, the chunk length */
  /* per-step arrays: element i of step t at base[t * ld + i]; la and c one value a step */
  const double *q, *k, *v, *la, *c; /* la: log a_t (<= 0; below CHUNK_LOG_FLOOR taken as it) */
  int ldq, ldk, ldv, ldla, ldc;
} ChunkDelta;

/* o: [T] rows of V at o[t * ldo]; s0, sT: [K, V] row-major. */
void chunkdelta_forward(const ChunkDelta *d, const double *s0, double *o, int ldo, double *sT);
/* The gradients given dout (wrt o) and dsT (wrt the final state): dq, dk, dv, dla, dc (overwritten,
 * with the strides of q, k, v, la, c) and ds0 ([K, V]). Recomputes the chunk boundaries from s0. */
void chunkdelta_backward(const ChunkDelta *d, const double *s0, const double *dout, int lddo, const double *dsT, double *dq,
                         double *dk, double *dv, double *dla, double *dc, double *ds0);

#endif
