/* chunkop.h: the chunkwise-parallel form of a gated outer-product recurrence, one head of one
 * sequence, forward and its closed-form backward, in float64 (the reference every back end's
 * chunk op is checked against). With a_t > 0 the decay of step t (per key, [K], or a scalar):
 *   S_t = diag(a_t) S_{t-1} + k_t v_t^T       (S: [K, V])
 *   o_t = S_t^T q_t                           (the read of the new value)
 * The sequence runs in chunks of L steps. With b_i = sum_{j <= i} log a_j inside a chunk (from its
 * first step) and S_0 the state before it, for i, j in the chunk:
 *   o_i = (q_i e^{b_i})^T S_0 + sum_{j <= i} (sum_k q_i[k] k_j[k] e^{b_i[k] - b_j[k]}) v_j
 *   S_n = e^{b_n} S_0 + sum_j (k_j e^{b_n - b_j}) v_j^T           (n: the chunk's last step)
 * Every exponent is b_i - b_j with j <= i, or b_i: at most 0, so nothing overflows however long
 * the chunk (e^{-b} alone never appears). docs/architecture.md, "The chunked form", derives the
 * backward. */
#ifndef CELLC_CHUNKOP_H
#define CELLC_CHUNKOP_H

#include <stdbool.h>

/* The least log-decay the chunk op uses (a decay of 0 has log -inf): e^-10000 is 0 in float64, and
 * a sum of such stays exact enough for the differences b_i - b_j of the steps after it. */
#define CHUNK_LOG_FLOOR (-1e4)

typedef struct ChunkOp {
  int T, K, V, L;       /* steps, key and value sizes, the chunk length */
  bool per_key;         /* la holds K log-decays a step; else one */
  /* per-step arrays: element i of step t at base[t * ld + i] */
  const double *q, *k, *v, *la; /* la: log a_t (<= 0) */
  int ldq, ldk, ldv, ldla;
} ChunkOp;

/* o [T] rows of V at o[t * ldo]; s0, sT: [K, V] row-major. */
void chunkop_forward(const ChunkOp *c, const double *s0, double *o, int ldo, double *sT);
/* The gradients of a loss given do (its gradient wrt o) and dsT (wrt the final state): dq, dk, dv,
 * dla (overwritten, with the strides of q, k, v, la) and ds0 ([K, V]). Recomputes the chunk
 * boundaries from s0. */
void chunkop_backward(const ChunkOp *c, const double *s0, const double *dout, int lddo, const double *dsT, double *dq,
                      double *dk, double *dv, double *dla, double *ds0);

#endif
