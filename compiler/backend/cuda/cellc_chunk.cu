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
 * beside the FMAs). A thread block (CK_BLOCK threads) per head of a batch row, the chunks in
 * order, the chunk's q, k, v (and the reads' gradients) and the state in shared memory; each
 * product a loop of threads over its outputs. */

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

/* The forward: the reads into xo (with_reads), the final state, and (a.bnd) the boundary states. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK) cellc_chunk_fwd(CellcChunkArgs a, int with_reads) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int b = blockIdx.x / a.nh, h = blockIdx.x - b * a.nh, K = a.K, V = a.V, w = a.per_key ? K : 1;
  int Ts = a.T * a.E, nc = (Ts + a.L - 1) / a.L;
  CellcChunkSmem m = cellc_chunk_smem(K, a.V, a.L, a.per_key, 0);
  double *bb = (double *)sh;
  float *S = sh + m.S;
  float *bnd = a.bnd ? a.bnd + (long long)blockIdx.x * (nc + 1) * K * V : 0;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) S[x] = a.h0[ck_state_at(a, b, h, x / V, x % V)];
  for (int c = 0; c < nc; c++) {
    int t0 = c * a.L, n = Ts - t0 < a.L ? Ts - t0 : a.L;
    __syncthreads();
    if (bnd)
      for (int x = threadIdx.x; x < K * V; x += blockDim.x) bnd[(long long)c * K * V + x] = S[x];
    ck_load(a, m, sh, b, h, t0, n, false);
    ck_decays(a, m, sh, bb, b, h, t0, n);
    __syncthreads();
    if (with_reads) {
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
      __syncthreads(); /* the reads read the whole S_0 */
    }
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
      int k = x / V, y = x - k * V;
      float acc = sh[m.G + (n - 1) * w + (a.per_key ? k : 0)] * S[x];
      for (int j = 0; j < n; j++) acc += sh[m.k + j * m.ldk + k] * sh[m.F + j * w + (a.per_key ? k : 0)] * sh[m.v + j * V + y];
      S[x] = acc;
    }
  }
  __syncthreads();
  if (bnd)
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) bnd[(long long)nc * K * V + x] = S[x];
  if (a.final)
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) a.final[ck_state_at(a, b, h, x / V, x % V)] = S[x];
}

/* The backward, after cellc_chunk_fwd has written the boundary states into a.bnd: the gradients of
 * q, k, v and the log-decays into dyin (at the sub-steps that carry them), dh0. */
extern "C" __global__ void __launch_bounds__(CK_BLOCK) cellc_chunk_bwd(CellcChunkArgs a) {
  CELLC_DYNAMIC_SHARED(float, sh);
  int b = blockIdx.x / a.nh, h = blockIdx.x - b * a.nh, K = a.K, V = a.V, w = a.per_key ? K : 1, pk = a.per_key;
  int Ts = a.T * a.E, nc = (Ts + a.L - 1) / a.L;
  CellcChunkSmem m = cellc_chunk_smem(K, V, a.L, pk, 1);
  double *bb = (double *)sh;
  float *S = sh + m.S, *g = sh + m.g, *dA = sh + m.dA, *db = sh + m.db;
  const float *bnd = a.bnd + (long long)blockIdx.x * (nc + 1) * K * V;
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) g[x] = a.dfinal[ck_state_at(a, b, h, x / V, x % V)];
  for (int c = nc - 1; c >= 0; c--) {
    int t0 = c * a.L, n = Ts - t0 < a.L ? Ts - t0 : a.L;
    __syncthreads();
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) S[x] = bnd[(long long)c * K * V + x];
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
    /* dS_0 = e^{b_{n-1}} dS_n + (q e^b)^T dO */
    for (int x = threadIdx.x; x < K * V; x += blockDim.x) {
      int k = x / V, y = x - k * V;
      float acc = sh[m.G + (n - 1) * w + (pk ? k : 0)] * g[x];
      for (int i = 0; i < n; i++) acc += sh[m.q + i * m.ldk + k] * sh[m.G + i * w + (pk ? k : 0)] * sh[m.dO + i * V + y];
      g[x] = acc;
    }
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
  __syncthreads();
  for (int x = threadIdx.x; x < K * V; x += blockDim.x) a.dh0[ck_state_at(a, b, h, x / V, x % V)] = g[x];
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
