/* cellc_chunk.h: the arguments of the chunked form's chunk op on a CUDA device (cellc_chunk.cu),
 * shared by the host (cuda.h includes this) and the kernels (cuda_chunk.c puts this text before
 * the kernels' source): plain C, the same layout on both sides.
 *
 * The launches run every head of every batch row of one chunked state, chunk by chunk in parallel
 * (compiler/ir/chunkop.h; cellc_chunk.cu). Its sequence is chunkrun.c's: a step of
 * M terms and R reads is E = M + R - 1 sub-steps (term m at sub-step m, the decay on sub-step 0
 * only, read r at sub-step M - 1 + r), chunks of L sub-steps (L a multiple of E). The kernels read
 * the in program's rows in place and write the reads into the out program's input rows. */
#ifndef CELLC_CHUNK_H
#define CELLC_CHUNK_H

typedef struct CellcChunkArgs {
  int T, B, nh, K, V, L;   /* steps, batch rows, heads, key and value sizes, chunk length (sub-steps) */
  int M, R, E;             /* terms and reads a step, sub-steps a step */
  int per_key, key_last;   /* K log-decays a step (else one); the state's rows [V, K] per head */
  int nin, xw;             /* row widths of yin and xo (rows t B + b) */
  int q_off, k_off, v_off, la_off, out_off; /* read 0's q, term 0's k and v, the log-decays, read 0 in xo */
  const float *yin;        /* the in program's output [T B, nin] */
  float *dyin;             /* its gradient (backward: the chunk op's inputs' gradients, written) */
  float *xo;               /* the out program's input [T B, xw] (forward: the reads, written) */
  const float *dxo;        /* its gradient (backward: the reads' gradients) */
  const float *h0;         /* the state's initial value [B, nh K V] */
  float *final;            /* forward: its final value (NULL: not written) */
  const float *dfinal;     /* backward: the gradient of the final value */
  float *dh0;              /* backward: the gradient of h0 (written) */
  float *bnd;              /* the boundary states [B nh, nchunks + 1, K V]: the forward's, for the backward */
  float *loc;              /* scratch [B nh, nchunks, K V]: each chunk's part of the pass, then dS at its end */
  float *dec;              /* scratch [B nh, nchunks, w]: each chunk's whole decay */
  int delta, c_off;        /* the delta rule (compiler/ir/chunkdelta.h; E = 1, a decay per head), its c's offset */
  float *ukeep;            /* the delta rule: every step's u [B nh, T, V], the forward's, for its reads and the backward */
} CellcChunkArgs;

/* The block's dynamic shared memory, offsets in floats from its start: the cumulative log-decays
 * first (doubles: b_i - b_j of large sums loses nothing, as chunkop_f32.c), then float arrays.
 * Rows of q and k have an odd stride (ldk) so that the threads of a warp reading one key of
 * different rows fall in different banks. backward: the arrays the backward adds. */
typedef struct CellcChunkSmem {
  int ldk, S, g, q, k, v, dO, G, F, A, dA, db, rs, total;
} CellcChunkSmem;

#ifndef CELLC_CHUNK_FN
#define CELLC_CHUNK_FN static inline
#endif
CELLC_CHUNK_FN CellcChunkSmem cellc_chunk_smem(int K, int V, int L, int per_key, int backward) {
  CellcChunkSmem m;
  int w = per_key ? K : 1, o = 2 * L * w;
  m.ldk = K | 1;
  m.S = o, o += K * V;
  m.q = o, o += L * m.ldk;
  m.k = o, o += L * m.ldk;
  m.v = o, o += L * V;
  m.G = o, o += L * w;
  m.F = o, o += L * w;
  m.A = o, o += L * L;
  m.g = m.dO = m.dA = m.db = m.rs = o;
  if (backward) {
    m.g = o, o += K * V;
    m.dO = o, o += L * V;
    m.dA = o, o += L * L;
    m.db = o, o += L * K;
    m.rs = o, o += L;
  }
  m.total = o;
  return m;
}

/* The delta rule's blocks (cellc_chunk_delta_fwd, _reads, _bwd, _grads), offsets in floats: b
 * (doubles) first, then the state (not in the backward's walk), q and k (odd stride ldk), U (v, then
 * the solve's u in place; or the forward's u), c, e^{b_i}, e^{b_{n-1} - b_i}, e^{p_i}, the tables
 * M_is = e^{p_i - b_s} (k_i . k_s) and P_is = e^{b_i - b_s} (q_i . k_s) ([L, L], row stride L); the
 * backward's walk adds the state's gradient, dO and dU (then dR in place); its gradients kernel
 * also S_0^T k_i, dP, dA, E (e^{b_i - b_s}, s <= i), the per-key parts of db and the row sums. */
/* the kernel a layout is for: the forward's two, the backward's walk, its gradients */
enum { CELLC_DELTA_FWD, CELLC_DELTA_WALK, CELLC_DELTA_GRADS };
typedef struct CellcDeltaSmem {
  int ldk, S, q, k, U, c, G, F, Ep, M, P, g, dO, dU, KS, dP, dA, E, dbt, red, ra, db, total;
} CellcDeltaSmem;

CELLC_CHUNK_FN CellcDeltaSmem cellc_chunk_delta_smem(int K, int V, int L, int kernel) {
  CellcDeltaSmem m;
  int o = 2 * L;
  m.ldk = K | 1;
  m.S = o, o += kernel == CELLC_DELTA_WALK ? 0 : K * V;
  m.q = o, o += L * m.ldk;
  m.k = o, o += L * m.ldk;
  m.U = o, o += L * V;
  m.c = o, o += L;
  m.G = o, o += L;
  m.F = o, o += L;
  m.Ep = o, o += L;
  m.M = o, o += L * L;
  m.P = o, o += L * L;
  m.g = m.dO = m.dU = m.KS = m.dP = m.dA = m.E = m.dbt = m.red = m.ra = m.db = o;
  if (kernel != CELLC_DELTA_FWD) {
    m.g = o, o += K * V;
    m.dO = o, o += L * V;
    m.dU = o, o += L * V;
  }
  if (kernel == CELLC_DELTA_GRADS) {
    m.KS = o, o += L * V;
    m.dP = o, o += L * L;
    m.dA = o, o += L * L;
    m.E = o, o += L * L;
    m.dbt = o, o += L * K;
    m.red = o, o += K;
    m.ra = o, o += L;
    m.db = o, o += L;
  }
  m.total = o;
  return m;
}

#endif
