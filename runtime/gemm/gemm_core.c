/* gemm_core.c: cellc's own sgemm for C (+)= A op(W) with W packed once into column panels, and
 * the weight gradient's float64 totals (gemm_core.h); freestanding: the caller gives the memory
 * and the instruction set. Loop order, as the bench/peak.c prototype measured best: rows of A in
 * blocks (64 for AVX-512, 48 for AVX2) that stay in L1/L2, then each panel of W (from L2), then
 * the micro-tiles of the block: mr x nr accumulators in registers over the whole K, A broadcast
 * from memory, W's panel row loaded as two vectors. Row tails take a micro-kernel of fewer rows
 * (mr is a constant in each specialization), column tails masked loads and stores (the packed
 * panel is zero-padded, so the extra lanes compute zeros that are never stored). */
#include "gemm_core.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* cblas, declared here (cellc and the emitted objects link -lopenblas): the fallback without AVX2 */
enum { BLAS_ROW_MAJOR = 101, BLAS_NO_TRANS = 111, BLAS_TRANS = 112 };
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc);

#define T512 __attribute__((target("avx512f")))
#define T256 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

/* ---- packing ---- */

size_t gemm_pack_floats(GemmIsa isa, int N, int K) {
  if (isa == GEMM_BLAS) return 0;
  int nr = isa == GEMM_AVX512 ? 32 : 16, np = (N + nr - 1) / nr;
  size_t need = (size_t)np * (size_t)K * (size_t)nr;
  if (need < 16) need = 16;
  return (need + 15) / 16 * 16;
}

void gemm_pack_into(GemmPacked *pk, GemmIsa isa, const float *W, int ldw, int N, int K, bool trans, float *mem) {
  pk->isa = isa, pk->trans = trans, pk->N = N, pk->K = K, pk->w = W, pk->ldw = ldw;
  if (isa == GEMM_BLAS) {
    pk->nr = 0;
    return;
  }
  int nr = isa == GEMM_AVX512 ? 32 : 16, np = (N + nr - 1) / nr;
  pk->nr = nr, pk->p = mem, pk->cap = gemm_pack_floats(isa, N, K);
  for (int jp = 0; jp < np; jp++) {
    float *dst = pk->p + (size_t)jp * (size_t)K * (size_t)nr;
    for (int j = 0; j < nr; j++) {
      int n = jp * nr + j;
      if (n >= N) {
        for (int k = 0; k < K; k++) dst[(size_t)k * nr + j] = 0.0f;
      } else if (trans) {
        const float *row = W + (size_t)n * (size_t)ldw;
        for (int k = 0; k < K; k++) dst[(size_t)k * nr + j] = row[k];
      } else {
        for (int k = 0; k < K; k++) dst[(size_t)k * nr + j] = W[(size_t)k * (size_t)ldw + n];
      }
    }
  }
}


/* ---- AVX-512: 8 x 32 micro-tile, 16 zmm accumulators ---- */

/* a's element (r, k) is a[r * ars + k * aks] (a row-major A, or a packed panel of A^T); b's row k
 * at b + k ldb: a packed panel (ldb = 32, zero-padded) or B's rows in place. bfull: b's rows hold
 * the tile's nv vectors (a panel, or columns in place short of B's end), else their loads are
 * masked to m0, m1. nv: the vectors of columns the tile computes (2; 1 where the columns left are
 * 16 or fewer). C's stores are masked only where the masks are. */
INLINE T512 void tile512(int mr, int nv, int K, const float *restrict a, size_t ars, size_t aks, const float *restrict b,
                         size_t ldb, bool bfull, float *restrict c, size_t ldc, __mmask16 m0, __mmask16 m1, bool acc) {
  __m512 c0[8], c1[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    c0[r] = c1[r] = _mm512_setzero_ps();
    if (acc && r < mr) { /* C's lines arrive while the loop runs */
      _mm_prefetch((const char *)(c + (size_t)r * ldc), _MM_HINT_T0);
      if (nv > 1) _mm_prefetch((const char *)(c + (size_t)r * ldc + 16), _MM_HINT_T0);
    }
  }
  for (int k = 0; k < K; k++) {
    const float *bk = b + (size_t)k * ldb;
    __m512 b0 = bfull ? _mm512_loadu_ps(bk) : _mm512_maskz_loadu_ps(m0, bk), b1 = b0;
    if (nv > 1) b1 = bfull ? _mm512_loadu_ps(bk + 16) : _mm512_maskz_loadu_ps(m1, bk + 16);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
      if (r < mr) {
        __m512 x = _mm512_set1_ps(a[(size_t)r * ars + (size_t)k * aks]);
        c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
        if (nv > 1) c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
      }
  }
  bool w0 = m0 == 0xffff, w1 = m1 == 0xffff;
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++)
    if (r < mr) {
      float *cr = c + (size_t)r * ldc;
      __m512 y0 = c0[r], y1 = c1[r];
      if (acc) y0 = _mm512_add_ps(y0, w0 ? _mm512_loadu_ps(cr) : _mm512_maskz_loadu_ps(m0, cr));
      w0 ? _mm512_storeu_ps(cr, y0) : _mm512_mask_storeu_ps(cr, m0, y0);
      if (nv < 2 || !m1) continue;
      if (acc) y1 = _mm512_add_ps(y1, w1 ? _mm512_loadu_ps(cr + 16) : _mm512_maskz_loadu_ps(m1, cr + 16));
      w1 ? _mm512_storeu_ps(cr + 16, y1) : _mm512_mask_storeu_ps(cr + 16, m1, y1);
    }
}

/* The micro-kernels of every row count: A row-major (a's rows lda apart) against a packed panel
 * (tiles512), and a packed panel of A^T against one of B (tn_tiles512).
 * The strides are constants where they are fixed, so each is its own specialization. */
#define TILES512(mr, ...)                                                                                            \
  switch (mr) {                                                                                                      \
  case 8: tile512(8, __VA_ARGS__); break;                                                                            \
  case 7: tile512(7, __VA_ARGS__); break;                                                                            \
  case 6: tile512(6, __VA_ARGS__); break;                                                                            \
  case 5: tile512(5, __VA_ARGS__); break;                                                                            \
  case 4: tile512(4, __VA_ARGS__); break;                                                                            \
  case 3: tile512(3, __VA_ARGS__); break;                                                                            \
  case 2: tile512(2, __VA_ARGS__); break;                                                                            \
  default: tile512(1, __VA_ARGS__); break;                                                                           \
  }
T512 static void tiles512(int mr, int K, const float *a, size_t lda, const float *b, float *c, size_t ldc, __mmask16 m0,
                          __mmask16 m1, bool acc) {
  TILES512(mr, 2, K, a, lda, 1, b, 32, true, c, ldc, m0, m1, acc)
}

static __mmask16 lanes16(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

T512 static void run512(const GemmPacked *pk, int M, const float *A, size_t lda, float *C, size_t ldc, bool acc) {
  enum { MR = 8, NR = 32, MB = 64 };
  int N = pk->N, K = pk->K, np = (N + NR - 1) / NR;
  for (int ib = 0; ib < M; ib += MB) {
    int ie = ib + MB < M ? ib + MB : M;
    for (int jp = 0; jp < np; jp++) {
      const float *b = pk->p + (size_t)jp * (size_t)K * NR;
      int nv = N - jp * NR;
      __mmask16 m0 = lanes16(nv), m1 = lanes16(nv - 16);
      for (int i0 = ib; i0 < ie; i0 += MR)
        tiles512(ie - i0 < MR ? ie - i0 : MR, K, A + (size_t)i0 * lda, lda, b, C + (size_t)i0 * ldc + (size_t)jp * NR,
                 ldc, m0, m1, acc);
    }
  }
}

/* ---- AVX2 + FMA: 6 x 16 micro-tile, 12 ymm accumulators ---- */

/* As tile512, 6 x 16 (a packed panel 16 wide). */
INLINE T256 void tile256(int mr, int K, const float *restrict a, size_t ars, size_t aks, const float *restrict b, size_t ldb,
                         bool packed, float *restrict c, size_t ldc, __m256i m0, __m256i m1, bool acc) {
  __m256 c0[6], c1[6];
#pragma GCC unroll 6
  for (int r = 0; r < 6; r++) c0[r] = c1[r] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++) {
    const float *bk = b + (size_t)k * ldb;
    __m256 b0 = packed ? _mm256_load_ps(bk) : _mm256_maskload_ps(bk, m0);
    __m256 b1 = packed ? _mm256_load_ps(bk + 8) : _mm256_maskload_ps(bk + 8, m1);
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
      if (r < mr) {
        __m256 x = _mm256_broadcast_ss(a + (size_t)r * ars + (size_t)k * aks);
        c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
        c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
      }
  }
#pragma GCC unroll 6
  for (int r = 0; r < 6; r++)
    if (r < mr) {
      float *cr = c + (size_t)r * ldc;
      __m256 y0 = c0[r], y1 = c1[r];
      if (acc) {
        y0 = _mm256_add_ps(y0, _mm256_maskload_ps(cr, m0));
        y1 = _mm256_add_ps(y1, _mm256_maskload_ps(cr + 8, m1));
      }
      _mm256_maskstore_ps(cr, m0, y0);
      _mm256_maskstore_ps(cr + 8, m1, y1);
    }
}

#define TILES256(mr, ...)                                                                                            \
  switch (mr) {                                                                                                      \
  case 6: tile256(6, __VA_ARGS__); break;                                                                            \
  case 5: tile256(5, __VA_ARGS__); break;                                                                            \
  case 4: tile256(4, __VA_ARGS__); break;                                                                            \
  case 3: tile256(3, __VA_ARGS__); break;                                                                            \
  case 2: tile256(2, __VA_ARGS__); break;                                                                            \
  default: tile256(1, __VA_ARGS__); break;                                                                           \
  }
T256 static void tiles256(int mr, int K, const float *a, size_t lda, const float *b, float *c, size_t ldc, __m256i m0,
                          __m256i m1, bool acc) {
  TILES256(mr, K, a, lda, 1, b, 16, true, c, ldc, m0, m1, acc)
}

T256 static void run256(const GemmPacked *pk, int M, const float *A, size_t lda, float *C, size_t ldc, bool acc) {
  enum { MR = 6, NR = 16, MB = 48 };
  int N = pk->N, K = pk->K, np = (N + NR - 1) / NR;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int ib = 0; ib < M; ib += MB) {
    int ie = ib + MB < M ? ib + MB : M;
    for (int jp = 0; jp < np; jp++) {
      const float *b = pk->p + (size_t)jp * (size_t)K * NR;
      int nv = N - jp * NR;
      __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), lane), m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - 8), lane);
      for (int i0 = ib; i0 < ie; i0 += MR)
        tiles256(ie - i0 < MR ? ie - i0 : MR, K, A + (size_t)i0 * lda, lda, b, C + (size_t)i0 * ldc + (size_t)jp * NR,
                 ldc, m0, m1, acc);
    }
  }
}

/* ---- the entry ---- */

void gemm_run(const GemmPacked *pk, int M, const float *A, int lda, float *C, int ldc, bool accumulate) {
  int N = pk->N, K = pk->K;
  if (M <= 0 || N <= 0) return;
  switch (pk->isa) {
  case GEMM_AVX512: run512(pk, M, A, (size_t)lda, C, (size_t)ldc, accumulate); return;
  case GEMM_AVX2: run256(pk, M, A, (size_t)lda, C, (size_t)ldc, accumulate); return;
  default: break;
  }
  if (K == 0) { /* BLAS wants lda >= 1 and K >= 1: nothing to add */
    if (!accumulate)
      for (int i = 0; i < M; i++) memset(C + (size_t)i * (size_t)ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  cblas_sgemm(BLAS_ROW_MAJOR, BLAS_NO_TRANS, pk->trans ? BLAS_TRANS : BLAS_NO_TRANS, M, N, K, 1.0f, A, lda, pk->w, pk->ldw,
              accumulate ? 1.0f : 0.0f, C, ldc);
}

/* ---- the weight gradient: C[M, N] += A^T B ----
 * K (all T * B rows) is far too long for one pass of the accumulators to keep its operands in
 * cache, so it runs in blocks of TN_KC rows. Each block of B is copied into panels of nr columns
 * ([N / nr][kc][nr], zero-padded): read in place, the vectors of a tile's B would be a few cache
 * lines per row at a stride of a power of two floats, on a few L1 sets that thrash. A's block is
 * copied into panels of mr columns the same way where its rows are long (a_in_place says where
 * they are short enough to read in place, a broadcast per row and tile). Then, as in
 * gemm_run, rows of A^T in blocks that stay in L2, each panel of B (kc nr floats, which must fit
 * in L1 beside a tile's panel of A: 16 + 4 KB at kc = 128), the micro-tiles of the block,
 * accumulating into a float32 sum of the superblock (GEMM_TN_ROWS rows). Each superblock's sum goes into
 * a float64 total (M N additions per GEMM_TN_ROWS M N multiply-adds), added to C at the end: the
 * rounding of the sum over all T B rows is then that of one superblock, whatever the row count,
 * so a data-parallel rank's part and the whole batch round alike. The buffers live in a
 * GemmTnBuf that the caller keeps between calls (fresh pages cost more than the packing).
 * Measured at a GRU layer's shapes in docs/performance.md. */
enum { TN_KC = 128 };

/* Packed panels lie one cache line more than their kc rows apart. Whole panels (4 or 16 KB at
 * AVX-512) would put a row's copies into every panel on the same L1 set, and the row-by-row copy
 * below would evict its own lines: 5x slower at an LSTM's 512 gate columns. */
static size_t panel_stride(int w) { return (size_t)TN_KC * (size_t)w + 16; }

/* sum[i] += row[i] over n columns: A's column sums (the bias gradient), row by row in the same
 * order whether A is packed or read in place, so that both give the same bits. */
INLINE void add_row(float *sum, const float *row, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) sum[i] += row[i];
}

/* Rows [0, kc) of the n columns at x (row k at x + k ld) as panels of w columns `stride` apart,
 * the last one zero-padded: p[(i0 / w) stride + k w + r] = x[k, i0 + r]. In groups of PACK_ROWS
 * rows, each group panel by panel: a group's source lines (PACK_ROWS rows, in L1) go out as one
 * run of PACK_ROWS w floats per panel. Row by row, each row wrote a piece to every panel (panels
 * about a page apart): a GRU's Whh gradient (A 256 of 768 columns) ran at 138-139 GFLOP/s on 1
 * thread and 257-273 on 2, against 165-175 and 327-340 in groups of 16 (the LSTM's and the 3-gate
 * shapes within the noise; docs/performance.md).
 * With `sum`, also sum[i] += x[k, i] (A's column sums, the bias gradient, for the price of an add
 * in the copy), row after row as before. Inlined with w a constant, so that a panel's row is a
 * fixed-size copy, not a call. */
enum { PACK_ROWS = 16 };
INLINE void pack_panels(const float *x, size_t ld, int n, int kc, int w, float *p, size_t stride, float *sum) {
  int full = n / w * w, tail = n - full;
  for (int k0 = 0; k0 < kc; k0 += PACK_ROWS) {
    int k1 = kc - k0 < PACK_ROWS ? kc : k0 + PACK_ROWS;
    float *d = p + (size_t)k0 * (size_t)w;
    for (int i0 = 0; i0 < full; i0 += w, d += stride)
      for (int k = k0; k < k1; k++) memcpy(d + (size_t)(k - k0) * (size_t)w, x + (size_t)k * ld + i0, sizeof(float) * (size_t)w);
    if (tail)
      for (int k = k0; k < k1; k++) {
        float *dk = d + (size_t)(k - k0) * (size_t)w;
        memcpy(dk, x + (size_t)k * ld + full, sizeof(float) * (size_t)tail);
        memset(dk + tail, 0, sizeof(float) * (size_t)(w - tail));
      }
    if (sum)
      for (int k = k0; k < k1; k++) add_row(sum, x + (size_t)k * ld, n);
  }
}

/* The micro-tile at c: its mr rows and nv of its columns (+)= A^T times a panel of B over kc
 * rows, A's element (r, k) at a[r + k aks]: a packed panel (aks = mr, a constant in the
 * _packed kernels) or A's rows in place (aks = lda). */
typedef void TnTiles(int mr, int kc, const float *a, size_t aks, const float *b, float *c, size_t ldc, int nv, bool acc);

T512 static void tn_tiles512_packed(int mr, int kc, const float *a, size_t aks, const float *b, float *c, size_t ldc, int nv,
                                    bool acc) {
  (void)aks;
  TILES512(mr, 2, kc, a, 1, 8, b, 32, true, c, ldc, lanes16(nv), lanes16(nv - 16), acc)
}

T512 static void tn_tiles512(int mr, int kc, const float *a, size_t aks, const float *b, float *c, size_t ldc, int nv, bool acc) {
  TILES512(mr, 2, kc, a, 1, aks, b, 32, true, c, ldc, lanes16(nv), lanes16(nv - 16), acc)
}

#define MASKS256(nv)                                                                                                 \
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                                                    \
  __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), lane), m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((nv) - 8), lane)

T256 static void tn_tiles256_packed(int mr, int kc, const float *a, size_t aks, const float *b, float *c, size_t ldc, int nv,
                                    bool acc) {
  (void)aks;
  MASKS256(nv);
  TILES256(mr, kc, a, 1, 6, b, 16, true, c, ldc, m0, m1, acc)
}

T256 static void tn_tiles256(int mr, int kc, const float *a, size_t aks, const float *b, float *c, size_t ldc, int nv, bool acc) {
  MASKS256(nv);
  TILES256(mr, kc, a, 1, aks, b, 16, true, c, ldc, m0, m1, acc)
}

/* The columns of blocks c[0 .. n) with each block padded to whole panels of w. */
static int padded_cols(const GemmCols *c, int n, int w) {
  int p = 0;
  for (int i = 0; i < n; i++) p += (c[i].n + w - 1) / w * w;
  return p;
}

/* Whether the micro-tiles read a block of A in place instead of packed: where its rows are short
 * (2 KB or less). A tile then reads kc rows of A at a stride of lda, one page or less for each few
 * rows; the packing's copy, a third of the product's time at a GRU's shapes (H = 128), is saved:
 * the weight gradient 165 to 180 GFLOP/s there, mgu's (2H columns) 152 to 177. Longer rows put
 * each of a tile's kc rows on its own page (and L1 set): 10% slower than packed at an LSTM's
 * 4 KB rows (H = 256); at 2 KB (mgu's two adjoints side by side at H = 256) the weight gradients
 * took 47 ms packed, 39-41 in place (2 threads, in the layer, profiled). The sums are the same
 * either way (the same tiles). */
static bool a_in_place(const GemmCols *c) { return (size_t)c->lda * sizeof(float) <= 2048; }

/* Asks for rows [0, kc) of the n columns at x (row stride ld) when the rows are far apart: the
 * hardware prefetchers follow a stream within a page, and rows of a wide array put only a few
 * of the block's lines on each page. */
INLINE void prefetch_block(const float *x, int ld, int n, int kc) {
  if (ld <= n + 16) return;
  for (int k = 0; k < kc; k++)
    for (int c = 0; c < n; c += 16) __builtin_prefetch(x + (size_t)k * (size_t)ld + c);
}

/* One kernel's driver: total[M, N] += A^T B over K rows, A and B each column blocks side by side,
 * each superblock's float32 sum added in float64, and colsum[M] (when given) += A's column sums the
 * same way; mr x nr tiles, each block's columns in blocks of mb. B's blocks are packed into whole
 * panels (the last one zero-padded), A's too unless read in place, so the sums are computed in a
 * padded space and then added row by row. (Packing the next block a few rows after each tile,
 * into a second buffer, measured 1.5x slower: its lines evict the tiles' panels from L1.) */
INLINE void tn_run(TnTiles *packed, TnTiles *in_place, int mr, int nr, int mb, const GemmCols *a, int na, const GemmCols *b,
                   int nb, int N, int K, double *total, double *colsum, const GemmTnBuf *s) {
  int Mp = padded_cols(a, na, mr), Np = padded_cols(b, nb, nr); /* with every block's padding */
  size_t mpn = (size_t)Mp * (size_t)Np, sa = panel_stride(mr), sb = panel_stride(nr);
  float *at = s->at, *bt = s->bt, *blk = s->blk, *sum = colsum ? blk + mpn : NULL;
  for (int s0 = 0; s0 < K; s0 += GEMM_TN_ROWS) {
    int s1 = K - s0 < GEMM_TN_ROWS ? K : s0 + GEMM_TN_ROWS;
    if (sum) memset(sum, 0, sizeof(float) * (size_t)Mp);
    for (int k0 = s0; k0 < s1; k0 += TN_KC) {
      int kc = s1 - k0 < TN_KC ? s1 - k0 : TN_KC;
      if (k0 + kc < K) {
        int kn = K - k0 - kc < TN_KC ? K - k0 - kc : TN_KC;
        for (int i = 0; i < na; i++) prefetch_block(a[i].a + (size_t)(k0 + kc) * (size_t)a[i].lda, a[i].lda, a[i].n, kn);
        for (int j = 0; j < nb; j++) prefetch_block(b[j].a + (size_t)(k0 + kc) * (size_t)b[j].lda, b[j].lda, b[j].n, kn);
      }
      for (int i = 0, p0 = 0; i < na; p0 += (a[i].n + mr - 1) / mr * mr, i++) {
        const float *ab = a[i].a + (size_t)k0 * (size_t)a[i].lda;
        if (!a_in_place(&a[i]))
          pack_panels(ab, (size_t)a[i].lda, a[i].n, kc, mr, at + (size_t)(p0 / mr) * sa, sa, sum ? sum + p0 : NULL);
        else if (sum) /* the column sums as pack_panels takes them (and the rows into cache for the tiles) */
          for (int k = 0; k < kc; k++) add_row(sum + p0, ab + (size_t)k * (size_t)a[i].lda, a[i].n);
      }
      for (int j = 0, q0 = 0; j < nb; q0 += (b[j].n + nr - 1) / nr * nr, j++)
        pack_panels(b[j].a + (size_t)k0 * (size_t)b[j].lda, (size_t)b[j].lda, b[j].n, kc, nr, bt + (size_t)(q0 / nr) * sb, sb, NULL);
      for (int i = 0, p0 = 0; i < na; p0 += (a[i].n + mr - 1) / mr * mr, i++) {
        bool ip = a_in_place(&a[i]);
        const float *ab = a[i].a + (size_t)k0 * (size_t)a[i].lda;
        for (int cb = 0; cb < a[i].n; cb += mb)
          for (int j0 = 0; j0 < Np; j0 += nr)
            for (int c0 = cb; c0 < a[i].n && c0 < cb + mb; c0 += mr) {
              const float *bp = bt + (size_t)(j0 / nr) * sb;
              float *c = blk + (size_t)(p0 + c0) * Np + j0;
              if (ip) in_place(a[i].n - c0 < mr ? a[i].n - c0 : mr, kc, ab + c0, (size_t)a[i].lda, bp, c, (size_t)Np, nr, k0 > s0);
              else packed(mr, kc, at + (size_t)((p0 + c0) / mr) * sa, (size_t)mr, bp, c, (size_t)Np, nr, k0 > s0);
            }
      }
    }
    for (int i = 0, p0 = 0, m0 = 0; i < na; p0 += (a[i].n + mr - 1) / mr * mr, m0 += a[i].n, i++) {
      for (int r = 0; r < a[i].n; r++) {
        double *t = total + (size_t)(m0 + r) * (size_t)N;
        const float *row = blk + (size_t)(p0 + r) * (size_t)Np;
        for (int j = 0, q0 = 0, n0 = 0; j < nb; q0 += (b[j].n + nr - 1) / nr * nr, n0 += b[j].n, j++)
          for (int e = 0; e < b[j].n; e++) t[n0 + e] += row[q0 + e];
      }
      if (sum)
        for (int r = 0; r < a[i].n; r++) colsum[m0 + r] += sum[p0 + r];
    }
  }
}

/* tn_run compiled for each instruction set, so that its copies and sums use the wide vectors too. */
T512 static void tn_run512(const GemmCols *a, int na, const GemmCols *b, int nb, int N, int K, double *total, double *colsum,
                           const GemmTnBuf *s) {
  tn_run(tn_tiles512_packed, tn_tiles512, 8, 32, 64, a, na, b, nb, N, K, total, colsum, s);
}

T256 static void tn_run256(const GemmCols *a, int na, const GemmCols *b, int nb, int N, int K, double *total, double *colsum,
                           const GemmTnBuf *s) {
  tn_run(tn_tiles256_packed, tn_tiles256, 6, 16, 48, a, na, b, nb, N, K, total, colsum, s);
}

/* The buffers' floats: the sizes tn_run and the cblas path below take. */
void gemm_tn_floats(GemmIsa isa, const GemmCols *a, int na, const GemmCols *b, int nb, size_t *at, size_t *bt, size_t *blk) {
  if (isa == GEMM_BLAS) {
    size_t M = 0, N = 0;
    for (int i = 0; i < na; i++) M += (size_t)a[i].n;
    for (int j = 0; j < nb; j++) N += (size_t)b[j].n;
    *at = *bt = 0, *blk = M * N + M;
    return;
  }
  int mr = isa == GEMM_AVX512 ? 8 : 6, nr = isa == GEMM_AVX512 ? 32 : 16;
  size_t Mp = (size_t)padded_cols(a, na, mr), Np = (size_t)padded_cols(b, nb, nr);
  *at = Mp / (size_t)mr * panel_stride(mr), *bt = Np / (size_t)nr * panel_stride(nr), *blk = Mp * Np + Mp;
}

void gemm_tn_total_into(GemmIsa isa, const GemmCols *a, int na, const GemmCols *b, int nb, int K, double *total,
                        double *colsum, const GemmTnBuf *s) {
  int M = 0, N = 0;
  for (int i = 0; i < na; i++) M += a[i].n;
  for (int j = 0; j < nb; j++) N += b[j].n;
  if (M <= 0 || N <= 0 || K <= 0) return;
  switch (isa) {
  case GEMM_AVX512: tn_run512(a, na, b, nb, N, K, total, colsum, s); return;
  case GEMM_AVX2: tn_run256(a, na, b, nb, N, K, total, colsum, s); return;
  default: break;
  }
  size_t mn = (size_t)M * (size_t)N;
  float *blk = s->blk, *sum = blk + mn;
  for (int s0 = 0; s0 < K; s0 += GEMM_TN_ROWS) {
    int n = K - s0 < GEMM_TN_ROWS ? K - s0 : GEMM_TN_ROWS;
    for (int i = 0, m0 = 0; i < na; m0 += a[i].n, i++) {
      if (!a[i].n) continue;
      const float *As = a[i].a + (size_t)s0 * (size_t)a[i].lda;
      for (int j = 0, n0 = 0; j < nb; n0 += b[j].n, j++)
        if (b[j].n)
          cblas_sgemm(BLAS_ROW_MAJOR, BLAS_TRANS, BLAS_NO_TRANS, a[i].n, b[j].n, n, 1.0f, As, a[i].lda,
                      b[j].a + (size_t)s0 * (size_t)b[j].lda, b[j].lda, 0.0f, blk + (size_t)m0 * N + n0, N);
      if (!colsum) continue;
      memset(sum + m0, 0, sizeof(float) * (size_t)a[i].n);
      for (int k = 0; k < n; k++)
        for (int r = 0; r < a[i].n; r++) sum[m0 + r] += As[(size_t)k * (size_t)a[i].lda + r];
    }
    for (size_t i = 0; i < mn; i++) total[i] += blk[i];
    if (colsum)
      for (int i = 0; i < M; i++) colsum[i] += sum[i];
  }
}

/* ---- small products on operands read in place (gemm_small) ----
 * Both operands fit in L1 at the sizes this is for (the chunk ops' 64 x 64 blocks), so nothing is
 * packed: the tiles read B's rows in place, their column tails masked, and broadcast A's elements
 * from its rows (or, transposed, its columns). */

/* The tiles of one column block: nv vectors (a constant), b's loads whole or masked */
#define SMALL512(nv, bfull)                                                                                          \
  if (ta) {                                                                                                          \
    TILES512(mr, nv, K, A + i0, 1, lda, B + j0, ldb, bfull, c, ldc, m0, m1, acc)                                     \
  } else {                                                                                                           \
    TILES512(mr, nv, K, A + (size_t)i0 * lda, lda, 1, B + j0, ldb, bfull, c, ldc, m0, m1, acc)                       \
  }

T512 static void small512(bool ta, int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                          size_t ldc, bool acc) {
  for (int j0 = 0; j0 < N; j0 += 32) {
    int cols = N - j0;
    __mmask16 m0 = lanes16(cols), m1 = lanes16(cols - 16);
    for (int i0 = 0; i0 < M; i0 += 8) {
      int mr = M - i0 < 8 ? M - i0 : 8;
      float *c = C + (size_t)i0 * ldc + (size_t)j0;
      if (cols >= 32) {
        SMALL512(2, true)
      } else if (cols > 16) {
        SMALL512(2, false)
      } else if (cols == 16) {
        SMALL512(1, true)
      } else {
        SMALL512(1, false)
      }
    }
  }
}

T256 static void small256(bool ta, int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                          size_t ldc, bool acc) {
  for (int j0 = 0; j0 < N; j0 += 16) {
    MASKS256(N - j0);
    for (int i0 = 0; i0 < M; i0 += 6) {
      int mr = M - i0 < 6 ? M - i0 : 6;
      float *c = C + (size_t)i0 * ldc + (size_t)j0;
      if (ta) {
        TILES256(mr, K, A + i0, 1, lda, B + j0, ldb, false, c, ldc, m0, m1, acc)
      } else {
        TILES256(mr, K, A + (size_t)i0 * lda, lda, 1, B + j0, ldb, false, c, ldc, m0, m1, acc)
      }
    }
  }
}

void gemm_small(GemmIsa isa, bool trans_a, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                int ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  switch (isa) {
  case GEMM_AVX512: small512(trans_a, M, N, K, A, (size_t)lda, B, (size_t)ldb, C, (size_t)ldc, accumulate); return;
  case GEMM_AVX2: small256(trans_a, M, N, K, A, (size_t)lda, B, (size_t)ldb, C, (size_t)ldc, accumulate); return;
  default: break;
  }
  if (K == 0) {
    if (!accumulate)
      for (int i = 0; i < M; i++) memset(C + (size_t)i * (size_t)ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  cblas_sgemm(BLAS_ROW_MAJOR, trans_a ? BLAS_TRANS : BLAS_NO_TRANS, BLAS_NO_TRANS, M, N, K, 1.0f, A, lda, B, ldb,
              accumulate ? 1.0f : 0.0f, C, ldc);
}
