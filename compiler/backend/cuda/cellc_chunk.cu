/* cellc_chunk.cu: the chunked form's chunk op on a CUDA device (docs/gpu.md, "The chunked form"),
 * after cellc_prelude.h and cellc_chunk.h (cuda_chunk.c puts them first). The products of
 * compiler/ir/chunkop.h per chunk of n <= L sub-steps, with b the cumulative log-decays from the
 * chunk's start (float64):
 *   A_ij = sum_k q_i[k] k_j[k] e^{b_i[k] - b_j[k]}  (j <= i; a scalar decay: (q_i . k_j) e^{b_i - b_j})
 *   o_i = (q_i e^{b_i})^T S_0 + sum_{j <= i} A_ij v_j
 *   S_n = e^{b_{n-1}} S_0 + sum_j (k_j e^{b_{n-1} - b_j}) v_j^T
 * and the backward of chunkop.c. Every exponent is b_i - b_j with j <= i, or b_i: at most 0, so
 * every factor is at most 1 and nothing overflows however strong the decays; each e^{b_i - b_j} is
 * computed pairwise (no sub-block factoring as chunkop_f32.c's: the exponentials run on the SFUs
 * beside the FMAs). The chunks run in parallel, as flash-linear-attention's chunk kernels do: a
 * thread block (CK_BLOCK threads) per chunk of a head of a batch row computes the chunk's own
 * contribution to the state passed on (cellc_chunk_local), one block per head passes the states
 * between the chunks in order (cellc_chunk_pass: K V multiply-adds a chunk), then a block per chunk
 * computes its reads (cellc_chunk_fwd) or its gradients (cellc_chunk_bwd) from its boundary
 * states. A block holds its chunk's q, k, v (and the reads' gradients) and state in shared memory;
 * each product is a loop of the block's threads over its outputs. */

#define CK_BLOCK 256
#define CK_LOG_FLOOR (-1e4) /* chunkop.h's CHUNK_LOG_FLOOR: a decay of 0 */

/* the sub-step s of head h of batch row b: its step's row of yin (or xo) and its place in the step */
struct CkAt {
  long long row; /* t B + b */
  int e;         /* the sub-step within its step */
};

static __device__ __forceinline__ CkAt ck_at(const CellcChunkArgs &a, int s, int b) {
  CkAt r;
  int t = s / a.E;
  r.row = (long long)t * a.B + b, r.e = s - t * a.E;
  return r;
}

/* the chunk's tiles: q (0 but at the reads), k and v (0 but at the terms); dO (0 but at the reads) */
static __device__ void ck_load(const CellcChunkArgs &a, const CellcChunkSmem &m, float *sh, int b, int h, int t0, int n,
                               bool grad) {
  int K = a.K, V = a.V;
  for (int x = threadIdx.x; x < n * K; x += blockDim.x) {
    int i = x / K, k = x - i * K;
    CkAt p = ck_at(a, t0 + i, b);
    const float *row = a.yin + p.row * a.nin;
    int r = p.e - (a.M - 1);
    sh[m.q + i * m.ldk + k] = r >= 0 ? row[a.q_off + (r * a.nh + h) * K + k] : 0.0f;
    sh[m.k + i * m.ldk + k] = p.e < a.M ? row[a.k_off + (p.e * a.nh + h) * K + k] : 0.0f;
  }
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int i = x / V, y = x - i * V;
    CkAt p = ck_at(a, t0 + i, b);
    const float *row = a.yin + p.row * a.nin;
    sh[m.v + x] = p.e < a.M ? row[a.v_off + (p.e * a.nh + h) * V + y] : 0.0f;
    if (grad) {
      int r = p.e - (a.M - 1);
      sh[m.dO + x] = r >= 0 ? a.dxo[p.row * a.xw + a.out_off + (r * a.nh + h) * V + y] : 0.0f;
    }
  }
}

/* b (the cumulative log-decays, floored), then G_i = e^{b_i} and F_i = e^{b_{n-1} - b_i} */
static __device__ void ck_decays(const CellcChunkArgs &a, const CellcChunkSmem &m, float *sh, double *bb, int b, int h,
                                 int t0, int n) {
  int w = a.per_key ? a.K : 1;
  for (int k = threadIdx.x; k < w; k += blockDim.x) {
    double acc = 0;
    for (int i = 0; i < n; i++) {
      CkAt p = ck_at(a, t0 + i, b);
      if (p.e == 0) {
        double la = a.yin[p.row * a.nin + a.la_off + h * w + k];
        acc += la < CK_LOG_FLOOR ? CK_LOG_FLOOR : la;
      }
      bb[i * w + k] = acc;
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < n * w; x += blockDim.x) {
    int k = x % w;
    sh[m.G + x] = expf((float)bb[x]);
    sh[m.F + x] = expf((float)(bb[(n - 1) * w + k] - bb[x]));
  }
}

/* A (zero above the diagonal) */
static __device__ void ck_scores(const CellcChunkArgs &a, const CellcChunkSmem &m, float *sh, const double *bb, int n) {
  int K = a.K, w = a.per_key ? K : 1;
  for (int x = threadIdx.x; x < n * n; x += blockDim.x) {
    int i = x / n, j = x - i * n;
    float acc = 0.0f;
    if (j <= i) {
      const float *qi = sh + m.q + i * m.ldk, *kj = sh + m.k + j * m.ldk;
      if (a.per_key) {
        const double *bi = bb + i * w, *bj = bb + j * w;
        for (int k = 0; k < K; k++) acc += qi[k] * kj[k] * expf((float)(bi[k] - bj[k]));
      } else {
        for (int k = 0; k < K; k++) acc += qi[k] * kj[k];
        acc *= expf((float)(bb[i] - bb[j]));
      }
    }
    sh[m.A + x] = acc;
  }
}

/* the state of head h of batch row b in a state part's row ([K, V], or [V, K] key_last) */
static __device__ __forceinline__ long long ck_state_at(const CellcChunkArgs &a, int b, int h, int k, int y) {
  long long base = ((long long)b * a.nh + h) * a.K * a.V;
  return base + (a.key_last ? (long long)y * a.K + k : (long long)k * a.V + y);
}

/* The chunk's own part of the boundary pass, per chunk c (blockIdx.y) of head blockIdx.x: into
 * a.loc[c] forward sum_j (k_j e^{b_{n-1} - b_j}) v_j^T, backward sum_i (q_i e^{b_i}) dO_i^T; into
 * a.dec[c] the chunk's whole decay e^{b_{n-1}}. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK) cellc_chunk_local(CellcChunkArgs a, int backward) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, c = blockIdx.y, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, pk = a.per_key, w = pk ? K : 1;
  int Ts = a.T * a.E, nc = (Ts + a.L - 1) / a.L, t0 = c * a.L, n = Ts - t0 < a.L ? Ts - t0 : a.L;
  CellcChunkSmem m = cellc_chunk_smem(K, V, a.L, pk, backward);
  double *bb = (double *)sh;
  ck_load(a, m, sh, b, h, t0, n, backward != 0);
  ck_decays(a, m, sh, bb, b, h, t0, n);
  __syncthreads();
  float *lc = a.loc + ((long long)bh * nc + c) * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
    int k = x / V, y = x - k * V, kw = pk ? k : 0;
    float acc = 0.0f;
    if (backward)
      for (int i = 0; i < n; i++) acc += sh[m.q + i * m.ldk + k] * sh[m.G + i * w + kw] * sh[m.dO + i * V + y];
    else
      for (int j = 0; j < n; j++) acc += sh[m.k + j * m.ldk + k] * sh[m.F + j * w + kw] * sh[m.v + j * V + y];
    lc[x] = acc;
  }
  for (int k = threadIdx.x; k < w; k += blockDim.x) a.dec[((long long)bh * nc + c) * w + k] = sh[m.G + (n - 1) * w + k];
}

/* The pass between the chunks, a thread per state entry (grid: heads of batch rows, entries / CK_BLOCK):
 * forward S_{c+1} = dec_c S_c + loc_c from h0 (every S_c into a.bnd, the last into a.final);
 * backward dS_{c-1} = dec_c dS_c + loc_c from dfinal (each chunk's dS at its end into a.loc[c], in
 * place), the last into a.dh0. nc multiply-adds a thread, the only part in chunk order; its loads
 * do not wait on the state, four chunks' in flight. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK) cellc_chunk_pass(CellcChunkArgs a, int backward) {
  int bh = blockIdx.x, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, w = a.per_key ? K : 1;
  int Ts = a.T * a.E, nc = (Ts + a.L - 1) / a.L, x = blockIdx.y * blockDim.x + threadIdx.x;
  if (x >= K * V) return;
  long long kv = (long long)K * V;
  float *lc = a.loc + (long long)bh * nc * kv + x, *bnd = a.bnd + (long long)bh * (nc + 1) * kv + x;
  int k = x / V, y = x - k * V;
  const float *dc = a.dec + (long long)bh * nc * w + (a.per_key ? k : 0);
  long long at = ck_state_at(a, b, h, k, y);
  if (!backward) {
    float S = a.h0[at];
    CELLC_UNROLL4
    for (int c = 0; c < nc; c++) {
      bnd[c * kv] = S;
      S = dc[c * w] * S + lc[c * kv];
    }
    bnd[nc * kv] = S;
    if (a.final) a.final[at] = S;
  } else {
    float G = a.dfinal[at];
    CELLC_UNROLL4
    for (int c = nc - 1; c >= 0; c--) {
      float l = lc[c * kv];
      lc[c * kv] = G;
      G = dc[c * w] * G + l;
    }
    a.dh0[at] = G;
  }
}

/* The reads of chunk blockIdx.y of head blockIdx.x into xo, from its boundary state a.bnd[c] */
extern "C" __global__ void __launch_bounds__(CK_BLOCK) cellc_chunk_fwd(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, c = blockIdx.y, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, w = a.per_key ? K : 1;
  int Ts = a.T * a.E, nc = (Ts + a.L - 1) / a.L, t0 = c * a.L, n = Ts - t0 < a.L ? Ts - t0 : a.L;
  CellcChunkSmem m = cellc_chunk_smem(K, V, a.L, a.per_key, 0);
  double *bb = (double *)sh;
  float *S = sh + m.S;
  const float *s0 = a.bnd + ((long long)bh * (nc + 1) + c) * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) S[x] = s0[x];
  ck_load(a, m, sh, b, h, t0, n, false);
  ck_decays(a, m, sh, bb, b, h, t0, n);
  __syncthreads();
  ck_scores(a, m, sh, bb, n);
  __syncthreads();
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int i = x / V, y = x - i * V;
    CkAt p = ck_at(a, t0 + i, b);
    int r = p.e - (a.M - 1);
    if (r < 0) continue; /* not a read */
    const float *qi = sh + m.q + i * m.ldk, *gi = sh + m.G + i * w, *Ai = sh + m.A + i * n;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += qi[k] * gi[a.per_key ? k : 0] * S[k * V + y];
    for (int j = 0; j <= i; j++) acc += Ai[j] * sh[m.v + j * V + y];
    a.xo[p.row * a.xw + a.out_off + (r * a.nh + h) * V + y] = acc;
  }
}

/* The gradients of chunk blockIdx.y of head blockIdx.x, from its boundary states (a.bnd) and the
 * gradient of its last state (a.loc after the backward pass): q, k, v and the log-decays' into dyin
 * at the sub-steps that carry them. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK) cellc_chunk_bwd(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, c = blockIdx.y, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, pk = a.per_key, w = pk ? K : 1;
  int Ts = a.T * a.E, nc = (Ts + a.L - 1) / a.L, t0 = c * a.L, n = Ts - t0 < a.L ? Ts - t0 : a.L;
  CellcChunkSmem m = cellc_chunk_smem(K, V, a.L, pk, 1);
  double *bb = (double *)sh;
  float *S = sh + m.S, *g = sh + m.g, *dA = sh + m.dA, *db = sh + m.db;
  const float *bnd = a.bnd + (long long)bh * (nc + 1) * K * V, *gc = a.loc + ((long long)bh * nc + c) * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) S[x] = bnd[(long long)c * K * V + x], g[x] = gc[x];
  ck_load(a, m, sh, b, h, t0, n, true);
  ck_decays(a, m, sh, bb, b, h, t0, n);
  __syncthreads();
  ck_scores(a, m, sh, bb, n);
  /* dA = dO v^T on and below the diagonal (a scalar decay's times e^{b_i - b_j}: the masked weights) */
  for (int x = threadIdx.x; x < n * n; x += blockDim.x) {
    int i = x / n, j = x - i * n;
    float acc = 0.0f;
    if (j <= i) {
      for (int y = 0; y < V; y++) acc += sh[m.dO + i * V + y] * sh[m.v + j * V + y];
      if (!pk) acc *= expf((float)(bb[i] - bb[j]));
    }
    dA[x] = acc;
  }
  __syncthreads();
  /* dv_j = sum_{i >= j} A_ij dO_i + (k_j e^{b_{n-1} - b_j}) dS_n */
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int j = x / V, y = x - j * V;
    CkAt p = ck_at(a, t0 + j, b);
    if (p.e >= a.M) continue;
    float acc = 0.0f;
    for (int i = j; i < n; i++) acc += sh[m.A + i * n + j] * sh[m.dO + i * V + y];
    for (int k = 0; k < K; k++) acc += sh[m.k + j * m.ldk + k] * sh[m.F + j * w + (pk ? k : 0)] * g[k * V + y];
    a.dyin[p.row * a.nin + a.v_off + (p.e * a.nh + h) * V + y] = acc;
  }
  /* dq_i = e^{b_i} (dO_i S_0^T) + sum_{j <= i} dA_ij k_j e^{b_i - b_j};  db = q dq */
  for (int x = threadIdx.x; x < n * K; x += blockDim.x) {
    int i = x / K, k = x - i * K;
    float acc = 0.0f;
    for (int y = 0; y < V; y++) acc += sh[m.dO + i * V + y] * S[k * V + y];
    acc *= sh[m.G + i * w + (pk ? k : 0)];
    for (int j = 0; j <= i; j++) {
      float e = pk ? expf((float)(bb[i * w + k] - bb[j * w + k])) : 1.0f;
      acc += dA[i * n + j] * sh[m.k + j * m.ldk + k] * e;
    }
    CkAt p = ck_at(a, t0 + i, b);
    int r = p.e - (a.M - 1);
    if (r >= 0) a.dyin[p.row * a.nin + a.q_off + (r * a.nh + h) * K + k] = acc;
    db[x] = sh[m.q + i * m.ldk + k] * acc;
  }
  /* dk_j = e^{b_{n-1} - b_j} (v_j dS_n^T) + sum_{i >= j} dA_ij q_i e^{b_i - b_j};  db -= k dk (the
     same thread's element of db as above) */
  for (int x = threadIdx.x; x < n * K; x += blockDim.x) {
    int j = x / K, k = x - j * K;
    float acc = 0.0f;
    for (int y = 0; y < V; y++) acc += sh[m.v + j * V + y] * g[k * V + y];
    acc *= sh[m.F + j * w + (pk ? k : 0)];
    for (int i = j; i < n; i++) {
      float e = pk ? expf((float)(bb[i * w + k] - bb[j * w + k])) : 1.0f;
      acc += dA[i * n + j] * sh[m.q + i * m.ldk + k] * e;
    }
    CkAt p = ck_at(a, t0 + j, b);
    if (p.e < a.M) a.dyin[p.row * a.nin + a.k_off + (p.e * a.nh + h) * K + k] = acc;
    db[x] -= sh[m.k + j * m.ldk + k] * acc;
  }
  __syncthreads();
  /* the last sub-step's log-decays: + S_n . dS_n (S_n the next boundary) */
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float *s1 = bnd + (long long)(c + 1) * K * V + (long long)k * V;
    float acc = 0.0f;
    for (int y = 0; y < V; y++) acc += s1[y] * g[k * V + y];
    db[(n - 1) * K + k] += acc;
  }
  __syncthreads();
  /* d log a_t = sum_{i >= t} db_i within the chunk (over the keys too for a scalar decay) */
  if (pk) {
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
      double acc = 0;
      for (int i = n - 1; i >= 0; i--) {
        acc += db[i * K + k];
        CkAt p = ck_at(a, t0 + i, b);
        if (p.e == 0) a.dyin[p.row * a.nin + a.la_off + h * K + k] = (float)acc;
      }
    }
  } else {
    float *rs = sh + m.rs;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      float acc = 0.0f;
      for (int k = 0; k < K; k++) acc += db[i * K + k];
      rs[i] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double acc = 0;
      for (int i = n - 1; i >= 0; i--) {
        acc += rs[i];
        CkAt p = ck_at(a, t0 + i, b);
        if (p.e == 0) a.dyin[p.row * a.nin + a.la_off + h] = (float)acc;
      }
    }
  }
}

/* ---- the delta rule (compiler/ir/chunkdelta.h): one term and one read a step, a decay per head ----
 * A chunk's u solve a unit lower triangular system whose right side holds the state before the
 * chunk (S_0^T k_i), so a chunk's part of the pass is no longer S_0-free: a block per head of a
 * batch row walks its chunks in order, the state in shared memory. Per chunk of n steps, with b
 * the cumulative log-decays from its start (float64), p_i = b_{i-1} (p_0 = 0):
 *   M_is = e^{p_i - b_s} (k_i . k_s) (s < i),  P_is = e^{b_i - b_s} (q_i . k_s) (s <= i)
 *   u_i = v_i + c_i e^{p_i} S_0^T k_i + sum_{s < i} c_i M_is u_s   (forward substitution: a thread
 *         a value column walks the rows, each row a reduction over the earlier ones)
 *   o_i = e^{b_i} S_0^T q_i + sum_{s <= i} P_is u_s,  S_n = e^{b_{n-1}} S_0 + sum_s e^{b_{n-1} - b_s} k_s u_s^T
 * Every exponent is at most 0 (chunkdelta.c's scheme). The backward is chunkdelta.c's, the chunks
 * in reverse from the forward's boundary states (a.bnd), its sums grouped as the tables'. */

/* the chunk's q, k, c, b (thread 0, float64, floored as chunkop.h's), dO where grad, and into U
 * either v or, where kept, the forward walk's u (a.ukeep) */
static __device__ void cd_load(const CellcChunkArgs &a, const CellcDeltaSmem &m, float *sh, double *bb, int b, int h, int t0,
                               int n, bool grad, bool kept) {
  int K = a.K, V = a.V;
  const float *u = a.ukeep + ((long long)(b * a.nh + h) * a.T + t0) * V;
  for (int x = threadIdx.x; x < n * K; x += blockDim.x) {
    int i = x / K, k = x - i * K;
    const float *row = a.yin + ((long long)(t0 + i) * a.B + b) * a.nin;
    sh[m.q + i * m.ldk + k] = row[a.q_off + h * K + k];
    sh[m.k + i * m.ldk + k] = row[a.k_off + h * K + k];
  }
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int i = x / V, y = x - i * V;
    long long r = (long long)(t0 + i) * a.B + b;
    sh[m.U + x] = kept ? u[x] : a.yin[r * a.nin + a.v_off + h * V + y];
    if (grad) sh[m.dO + x] = a.dxo[r * a.xw + a.out_off + h * V + y];
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) sh[m.c + i] = a.yin[((long long)(t0 + i) * a.B + b) * a.nin + a.c_off + h];
  if (threadIdx.x == 0) {
    double acc = 0;
    for (int i = 0; i < n; i++) {
      double la = a.yin[((long long)(t0 + i) * a.B + b) * a.nin + a.la_off + h];
      acc += la < CK_LOG_FLOOR ? CK_LOG_FLOOR : la;
      bb[i] = acc;
    }
  }
}

/* e^{b_i}, e^{b_{n-1} - b_i}, e^{p_i}; M, and P where with_P */
static __device__ void cd_tables(const CellcChunkArgs &a, const CellcDeltaSmem &m, float *sh, const double *bb, int n,
                                 bool with_P) {
  int K = a.K, L = a.L;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    sh[m.G + i] = expf((float)bb[i]);
    sh[m.F + i] = expf((float)(bb[n - 1] - bb[i]));
    sh[m.Ep + i] = i ? expf((float)bb[i - 1]) : 1.0f;
  }
  __syncthreads(); /* Ep read below */
  for (int x = threadIdx.x; x < n * n; x += blockDim.x) {
    int i = x / n, s = x - i * n;
    const float *qi = sh + m.q + i * m.ldk, *ki = sh + m.k + i * m.ldk, *ks = sh + m.k + s * m.ldk;
    float mk = 0.0f, pq = 0.0f;
    if (!with_P) {
      if (s < i)
        for (int k = 0; k < K; k++) mk += ki[k] * ks[k];
    } else if (s <= i)
      for (int k = 0; k < K; k++) mk += ki[k] * ks[k], pq += qi[k] * ks[k];
    sh[m.M + i * L + s] = s < i ? mk * expf((float)(bb[i - 1] - bb[s])) : 0.0f;
    if (with_P) sh[m.P + i * L + s] = s <= i ? pq * expf((float)(bb[i] - bb[s])) : 0.0f;
  }
}

/* S_0^T k_i into KS where not NULL; u's right side, U = v + c_i e^{p_i} S_0^T k_i, where rhs (after
 * cd_tables: e^{p_i}) */
static __device__ void cd_rhs(const CellcChunkArgs &a, const CellcDeltaSmem &m, float *sh, int n, float *KS, bool rhs) {
  int K = a.K, V = a.V;
  const float *S = sh + m.S;
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int i = x / V, y = x - i * V;
    const float *ki = sh + m.k + i * m.ldk;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += ki[k] * S[k * V + y];
    if (KS) KS[x] = acc;
    if (rhs) sh[m.U + x] += sh[m.c + i] * sh[m.Ep + i] * acc;
  }
}

/* (I - diag(c) M) U = U in place by forward substitution: a thread a value column */
static __device__ void cd_solve(const CellcChunkArgs &a, const CellcDeltaSmem &m, float *sh, int n) {
  int V = a.V, L = a.L;
  float *U = sh + m.U;
  const float *M = sh + m.M, *c = sh + m.c;
  for (int y = threadIdx.x; y < V; y += blockDim.x)
    for (int i = 1; i < n; i++) {
      float acc = 0.0f;
      for (int s = 0; s < i; s++) acc += M[i * L + s] * U[s * V + y];
      U[i * V + y] += c[i] * acc;
    }
}

/* The delta rule's forward in two kernels, as its backward: only the state passes between chunks.
 * The walk (cellc_chunk_delta_fwd, a block per head blockIdx.x of a batch row) carries it: every
 * chunk's state before it into a.bnd (the last the final state, also into a.final), every step's u
 * (the solve's, which the state before the chunk enters) into a.ukeep. Given those, each chunk's
 * reads are its own: cellc_chunk_delta_reads writes them into xo, a block a chunk, all
 * chunks at once. The delta kernels declare one block an SM (__launch_bounds__'s second argument):
 * their shared memory takes most of an SM's at the chunks that fit, and ptxas may then use the
 * registers that spare spills (the bound of 64 a block of 256 would otherwise get spills on sm_80). */
extern "C" __global__ void __launch_bounds__(CK_BLOCK, 1) cellc_chunk_delta_fwd(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, L = a.L, T = a.T, nc = (T + L - 1) / L;
  CellcDeltaSmem m = cellc_chunk_delta_smem(K, V, L, CELLC_DELTA_FWD);
  double *bb = (double *)sh;
  float *S = sh + m.S, *U = sh + m.U;
  float *bnd = a.bnd + (long long)bh * (nc + 1) * K * V, *ukeep = a.ukeep + (long long)bh * T * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
    int k = x / V, y = x - k * V;
    S[x] = a.h0[ck_state_at(a, b, h, k, y)];
  }
  for (int c = 0; c < nc; c++) {
    int t0 = c * L, n = T - t0 < L ? T - t0 : L;
    __syncthreads(); /* the state in, the last chunk's tiles read */
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) bnd[(long long)c * K * V + x] = S[x];
    cd_load(a, m, sh, bb, b, h, t0, n, false, false);
    __syncthreads();
    cd_tables(a, m, sh, bb, n, false);
    cd_rhs(a, m, sh, n, NULL, true);
    __syncthreads();
    cd_solve(a, m, sh, n);
    __syncthreads();
    for (int x = threadIdx.x; x < n * V; x += blockDim.x) ukeep[(long long)t0 * V + x] = U[x];
    float en = sh[m.G + n - 1];
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
      int k = x / V, y = x - k * V;
      float acc = 0.0f;
      for (int s = 0; s < n; s++) acc += sh[m.k + s * m.ldk + k] * sh[m.F + s] * U[s * V + y];
      S[x] = en * S[x] + acc;
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
    int k = x / V, y = x - k * V;
    bnd[(long long)nc * K * V + x] = S[x];
    if (a.final) a.final[ck_state_at(a, b, h, k, y)] = S[x];
  }
}

/* A chunk's reads, a block a chunk (blockIdx.y) of a head of a batch row (blockIdx.x), after the
 * walk: from its boundary state (a.bnd) and u (a.ukeep), o_i = e^{b_i} S_0^T q_i + sum_{s <= i}
 * P_is u_s into xo. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK, 1) cellc_chunk_delta_reads(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, c = blockIdx.y, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, L = a.L, T = a.T;
  int nc = (T + L - 1) / L, t0 = c * L, n = T - t0 < L ? T - t0 : L;
  CellcDeltaSmem m = cellc_chunk_delta_smem(K, V, L, CELLC_DELTA_FWD);
  double *bb = (double *)sh;
  float *S = sh + m.S, *U = sh + m.U;
  const float *bnd = a.bnd + ((long long)bh * (nc + 1) + c) * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) S[x] = bnd[x];
  cd_load(a, m, sh, bb, b, h, t0, n, false, true);
  __syncthreads();
  cd_tables(a, m, sh, bb, n, true);
  __syncthreads();
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int i = x / V, y = x - i * V;
    const float *qi = sh + m.q + i * m.ldk, *Pi = sh + m.P + i * L;
    float acc = 0.0f, r = 0.0f;
    for (int k = 0; k < K; k++) acc += qi[k] * S[k * V + y];
    for (int s = 0; s <= i; s++) r += Pi[s] * U[s * V + y];
    a.xo[((long long)(t0 + i) * a.B + b) * a.xw + a.out_off + h * V + y] = sh[m.G + i] * acc + r;
  }
}

/* The delta rule's backward in two kernels. Only dS passes between chunks: the walk
 * (cellc_chunk_delta_bwd, a block per head of a batch row, the chunks from the last) carries it,
 * each chunk's dU from the forward's u (a.ukeep), the back substitution to dR = dv, and dS_0
 * passed to the chunk before; it keeps every chunk's dS at its end in a.loc. Given those, the rest
 * of every chunk's gradients (dq, dk, dc, d log a) is its own: cellc_chunk_delta_grads runs them a
 * block a chunk, all chunks at once. */

/* dU_s = e^{b_{n-1} - b_s} dS^T k_s + sum_{i >= s} P_is dO_i, then (I - diag(c) M)^T dR = dU by back
 * substitution (a thread a value column); dR into dyin's v columns (it is dv) */
static __device__ void cd_dR(const CellcChunkArgs &a, const CellcDeltaSmem &m, float *sh, int b, int h, int t0, int n) {
  int K = a.K, V = a.V, L = a.L;
  const float *g = sh + m.g, *dO = sh + m.dO, *P = sh + m.P, *M = sh + m.M, *F = sh + m.F, *cc = sh + m.c;
  float *dR = sh + m.dU;
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int s = x / V, y = x - s * V;
    const float *ks = sh + m.k + s * m.ldk;
    float acc = 0.0f, r = 0.0f;
    for (int k = 0; k < K; k++) acc += ks[k] * g[k * V + y];
    for (int i = s; i < n; i++) r += P[i * L + s] * dO[i * V + y];
    dR[x] = F[s] * acc + r;
  }
  __syncthreads();
  for (int y = threadIdx.x; y < V; y += blockDim.x) {
    for (int i = n - 2; i >= 0; i--) {
      float acc = 0.0f;
      for (int t = i + 1; t < n; t++) acc += cc[t] * M[t * L + i] * dR[t * V + y];
      dR[i * V + y] += acc;
    }
    for (int i = 0; i < n; i++) a.dyin[((long long)(t0 + i) * a.B + b) * a.nin + a.v_off + h * V + y] = dR[i * V + y];
  }
}

/* The walk: the chunks from the last, each from the forward's u (a.ukeep) and the state's gradient
 * at its end (from a.dfinal, then the chunk after's dS_0): that gradient into a.loc [B nh, nchunks,
 * K V], dv into dyin, the first chunk's dS_0 into a.dh0. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK, 1) cellc_chunk_delta_bwd(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, L = a.L, T = a.T, nc = (T + L - 1) / L;
  CellcDeltaSmem m = cellc_chunk_delta_smem(K, V, L, CELLC_DELTA_WALK);
  double *bb = (double *)sh;
  float *g = sh + m.g, *dO = sh + m.dO, *dR = sh + m.dU, *cc = sh + m.c, *G = sh + m.G, *Ep = sh + m.Ep;
  float *loc = a.loc + (long long)bh * nc * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
    int k = x / V, y = x - k * V;
    g[x] = a.dfinal[ck_state_at(a, b, h, k, y)];
  }
  for (int c = nc - 1; c >= 0; c--) {
    int t0 = c * L, n = T - t0 < L ? T - t0 : L;
    __syncthreads(); /* dS in, the last chunk's tiles read */
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) loc[(long long)c * K * V + x] = g[x];
    cd_load(a, m, sh, bb, b, h, t0, n, true, true);
    __syncthreads();
    cd_tables(a, m, sh, bb, n, true);
    __syncthreads();
    cd_dR(a, m, sh, b, h, t0, n);
    __syncthreads();
    /* dS_0 = e^{b_{n-1}} dS + sum_i e^{b_i} q_i dO_i^T + sum_i c_i e^{p_i} k_i dR_i^T */
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
      int k = x / V, y = x - k * V;
      float acc = 0.0f;
      for (int i = 0; i < n; i++)
        acc += G[i] * sh[m.q + i * m.ldk + k] * dO[i * V + y] + cc[i] * Ep[i] * sh[m.k + i * m.ldk + k] * dR[i * V + y];
      g[x] = G[n - 1] * g[x] + acc;
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
    int k = x / V, y = x - k * V;
    a.dh0[ck_state_at(a, b, h, k, y)] = g[x];
  }
}

/* A chunk's gradients but dv, a block a chunk (blockIdx.y) of a head of a batch row (blockIdx.x),
 * after the walk: its boundary state (a.bnd), u (a.ukeep), dS at its end (a.loc) and dR (dyin's v
 * columns) read back; q, k, log a and c's gradients into dyin. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK, 1) cellc_chunk_delta_grads(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int bh = blockIdx.x, c = blockIdx.y, b = bh / a.nh, h = bh - b * a.nh, K = a.K, V = a.V, L = a.L, T = a.T;
  int nc = (T + L - 1) / L, t0 = c * L, n = T - t0 < L ? T - t0 : L;
  CellcDeltaSmem m = cellc_chunk_delta_smem(K, V, L, CELLC_DELTA_GRADS);
  double *bb = (double *)sh;
  float *S = sh + m.S, *U = sh + m.U, *g = sh + m.g, *dO = sh + m.dO, *dR = sh + m.dU, *KS = sh + m.KS;
  float *M = sh + m.M, *P = sh + m.P, *dP = sh + m.dP, *dA = sh + m.dA, *E = sh + m.E, *dbt = sh + m.dbt, *cc = sh + m.c;
  float *G = sh + m.G, *F = sh + m.F, *Ep = sh + m.Ep, *db = sh + m.db, *ra = sh + m.ra, *red = sh + m.red;
  const float *bnd = a.bnd + (long long)bh * (nc + 1) * K * V, *loc = a.loc + ((long long)bh * nc + c) * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) S[x] = bnd[(long long)c * K * V + x], g[x] = loc[x];
  cd_load(a, m, sh, bb, b, h, t0, n, true, true);
  __syncthreads();
  /* the state part of the last step's d log a: S_n . dS_n, a key a thread */
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float *s1 = bnd + (long long)(c + 1) * K * V + (long long)k * V;
    float acc = 0.0f;
    for (int y = 0; y < V; y++) acc += s1[y] * g[k * V + y];
    red[k] = acc;
  }
  cd_tables(a, m, sh, bb, n, true);
  cd_rhs(a, m, sh, n, KS, false);
  /* E_is = e^{b_i - b_s} (s <= i): the sums over s below read it, each exponent once a chunk */
  for (int x = threadIdx.x; x < n * n; x += blockDim.x) {
    int i = x / n, s = x - i * n;
    if (s <= i) E[i * L + s] = expf((float)(bb[i] - bb[s]));
  }
  __syncthreads();
  /* dP_is = dO_i . u_s (s <= i); dR back from dv */
  for (int x = threadIdx.x; x < n * n; x += blockDim.x) {
    int i = x / n, s = x - i * n;
    float acc = 0.0f;
    if (s <= i)
      for (int y = 0; y < V; y++) acc += dO[i * V + y] * U[s * V + y];
    dP[i * L + s] = acc;
  }
  for (int x = threadIdx.x; x < n * V; x += blockDim.x) {
    int i = x / V, y = x - i * V;
    dR[x] = a.dyin[((long long)(t0 + i) * a.B + b) * a.nin + a.v_off + h * V + y];
  }
  __syncthreads();
  /* dA_is = dR_i . u_s (s < i); dq_i = e^{b_i} S_0 dO_i + sum_{s <= i} e^{b_i - b_s} dP_is k_s, and
     q_i's part of db_i per key */
  for (int x = threadIdx.x; x < n * n; x += blockDim.x) {
    int i = x / n, s = x - i * n;
    float acc = 0.0f;
    if (s < i)
      for (int y = 0; y < V; y++) acc += dR[i * V + y] * U[s * V + y];
    dA[i * L + s] = acc;
  }
  for (int x = threadIdx.x; x < n * K; x += blockDim.x) {
    int i = x / K, k = x - i * K;
    float sq = 0.0f, r = 0.0f;
    for (int y = 0; y < V; y++) sq += S[k * V + y] * dO[i * V + y];
    for (int s = 0; s <= i; s++) r += E[i * L + s] * dP[i * L + s] * sh[m.k + s * m.ldk + k];
    a.dyin[((long long)(t0 + i) * a.B + b) * a.nin + a.q_off + h * K + k] = G[i] * sq + r;
    dbt[x] = G[i] * sh[m.q + i * m.ldk + k] * sq;
  }
  __syncthreads();
  /* dk_s: the final state's, the reads', R's (c_s e^{p_s} S_0 dR_s) and A's; the final state's
     part of db_s per key; dc_i = e^{p_i} (S_0^T k_i) . dR_i + sum_{s < i} dA_is M_is */
  for (int x = threadIdx.x; x < n * K; x += blockDim.x) {
    int s = x / K, k = x - s * K;
    float gu = 0.0f, sr = 0.0f, r = 0.0f, w = 0.0f;
    for (int y = 0; y < V; y++) gu += g[k * V + y] * U[s * V + y], sr += S[k * V + y] * dR[s * V + y];
    for (int i = s; i < n; i++) r += E[i * L + s] * dP[i * L + s] * sh[m.q + i * m.ldk + k];
    for (int j = s + 1; j < n; j++) w += cc[j] * E[(j - 1) * L + s] * dA[j * L + s] * sh[m.k + j * m.ldk + k];
    for (int t = 0; t < s; t++) w += cc[s] * E[(s - 1) * L + t] * dA[s * L + t] * sh[m.k + t * m.ldk + k];
    float ks = sh[m.k + s * m.ldk + k];
    a.dyin[((long long)(t0 + s) * a.B + b) * a.nin + a.k_off + h * K + k] = F[s] * gu + r + cc[s] * Ep[s] * sr + w;
    dbt[x] -= F[s] * ks * gu;
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float acc = 0.0f, r = 0.0f;
    for (int y = 0; y < V; y++) acc += KS[i * V + y] * dR[i * V + y];
    for (int s = 0; s < i; s++) r += dA[i * L + s] * M[i * L + s];
    ra[i] = acc;
    a.dyin[((long long)(t0 + i) * a.B + b) * a.nin + a.c_off + h] = Ep[i] * acc + r;
  }
  __syncthreads();
  /* db_i: its per-key parts, the reads' (dP o P) row i less column i, R's through p_{i+1} = b_i,
     A's (dA o A) row i + 1 less column i (p_{i+1} - b_s cancels at s = i) */
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += dbt[i * K + k];
    if (i == n - 1)
      for (int k = 0; k < K; k++) acc += red[k];
    for (int s = 0; s < i; s++) acc += dP[i * L + s] * P[i * L + s];
    for (int j = i + 1; j < n; j++) acc -= dP[j * L + i] * P[j * L + i];
    if (i + 1 < n) {
      float r = Ep[i + 1] * ra[i + 1];
      for (int s = 0; s < i; s++) r += dA[(i + 1) * L + s] * M[(i + 1) * L + s];
      acc += cc[i + 1] * r;
    }
    for (int j = i + 2; j < n; j++) acc -= cc[j] * dA[j * L + i] * M[j * L + i];
    db[i] = acc;
  }
  __syncthreads();
  /* d log a_t = sum_{i >= t} db_i within the chunk */
  if (threadIdx.x == 0) {
    double acc = 0;
    for (int i = n - 1; i >= 0; i--) {
      acc += db[i];
      a.dyin[((long long)(t0 + i) * a.B + b) * a.nin + a.la_off + h] = (float)acc;
    }
  }
}

/* dst[r, j] = a[r, j] (+ b[r, j] where b is not NULL), j < n: the columns glue of chunkrun's programs */
extern "C" __global__ void cellc_chunk_cols(float *dst, int ldd, const float *a, int lda, const float *b, int ldb,
                                            long long rows, int n) {
  for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < rows * n; x += (long long)blockDim.x * gridDim.x) {
    long long r = x / n;
    int j = (int)(x - r * n);
    float v = a[r * lda + j];
    if (b) v += b[r * ldb + j];
    dst[r * ldd + j] = v;
  }
}
