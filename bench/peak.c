/* peak.c: this machine's limits next to the GEMMs cellc runs: the FMA peak at the widest
 * vector width CPUID reports (independent FMA chains, 1 core and all cores), STREAM-like
 * copy bandwidth, the rate of fresh pages (memory the process maps and writes the first time: on
 * some virtual machines each page faults out to the host, and a peer that frees and maps its
 * buffers again every op pays that each time; bench/blas_env.sh), and sgemm at the shapes of a GRU layer (B = 64, T = 512, H = D = 128 and
 * 256) as a fraction of the single-core peak: OpenBLAS with the core it loaded with, and
 * cellc's own kernels (runtime/gemm/gemm.c, chosen from CPUID features; CELLC_GEMM=avx2 forces
 * the AVX2 one, CELLC_GEMM=blas none).
 *
 *   OPENBLAS_NUM_THREADS=1 ./build/peak                # OpenBLAS as the environment loads it
 *   OPENBLAS_CORETYPE=$(./build/peak --coretype) ./build/peak   # OpenBLAS on the CPUID choice
 *   ./build/peak --coretype   # only the OpenBLAS core of the CPU's widest width (empty: none)
 *   ./build/peak --gemm       # only the GEMM kernels cellc runs here
 *   OPENBLAS_NUM_THREADS=1 ./build/peak --proto        # plus the hand-written AVX-512 prototype
 *   OPENBLAS_NUM_THREADS=1 ./build/peak --blis         # plus BLIS (libblis4-*, opened with dlopen)
 * OpenBLAS picks its core when it loads (OPENBLAS_CORETYPE or its own detection); nothing
 * here changes it afterwards (cpu_features.h says why). Prints one line of JSON last. */
#include "cli.h"
#include "gemm.h"
#include "support.h"

#include <cblas.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_floats(size_t n) {
  float *p = aligned_alloc(64, ((n * sizeof(float)) + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "peak: out of memory\n");
    exit(1);
  }
  return p;
}

static void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* ---- FMA peak: independent chains (latency 4 x 2 FMA pipes needs 8 in flight), as many as
 * fit in registers with the two constants: 24 of 32 zmm, 12 of 16 ymm. FLOPs = 2 x lanes. ---- */

#define CHAINS_512 24
#define CHAINS_256 12
#define FMA_ITERS 3000000L

__attribute__((target("avx512f"))) static float fma_chains_512(long iters) {
  __m512 acc[CHAINS_512], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int j = 0; j < CHAINS_512; j++) acc[j] = _mm512_set1_ps((float)j);
  for (long i = 0; i < iters; i++) {
#pragma GCC unroll 24
    for (int j = 0; j < CHAINS_512; j++) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  }
  float s = 0;
  for (int j = 0; j < CHAINS_512; j++) s += _mm512_reduce_add_ps(acc[j]);
  return s;
}

__attribute__((target("avx2,fma"))) static float fma_chains_256(long iters) {
  __m256 acc[CHAINS_256], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int j = 0; j < CHAINS_256; j++) acc[j] = _mm256_set1_ps((float)j);
  for (long i = 0; i < iters; i++) {
#pragma GCC unroll 12
    for (int j = 0; j < CHAINS_256; j++) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  }
  float s = 0, lane[8];
  for (int j = 0; j < CHAINS_256; j++) {
    _mm256_storeu_ps(lane, acc[j]);
    for (int k = 0; k < 8; k++) s += lane[k];
  }
  return s;
}

static volatile float fma_sink;

/* FLOP/s of `threads` threads running FMA chains of `width` bits at once, best of `reps`. */
static double fma_peak_of(int width, int threads, int reps) {
  double best = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    double t0 = now();
#pragma omp parallel num_threads(threads)
    {
      float s = width == 512 ? fma_chains_512(FMA_ITERS) : fma_chains_256(FMA_ITERS);
#pragma omp atomic
      fma_sink += s;
    }
    double t = now() - t0;
    if (t < best) best = t;
  }
  int chains = width == 512 ? CHAINS_512 : CHAINS_256;
  return 2.0 * (width / 32) * chains * (double)FMA_ITERS * threads / best;
}
static double fma_peak(int width, int threads) { return fma_peak_of(width, threads, 7); }

/* ---- copy bandwidth: b[i] = a[i] over 64 MiB, 8 bytes counted per element ---- */

__attribute__((optimize("no-tree-loop-distribute-patterns"))) static double copy_rate(int threads) {
  size_t n = (size_t)16 << 20;
  float *a = alloc_floats(n), *b = alloc_floats(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 0;
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) b[i] = a[i];
    double t = now() - t0;
    if (t < best) best = t;
  }
  fma_sink += b[n / 3];
  free(a), free(b);
  return 2.0 * (double)n * sizeof(float) / best;
}

/* ---- fresh pages: 64 MiB mapped, written once and unmapped, as glibc's malloc serves and frees
 * a large buffer; bytes written per second, the best of 3 ---- */

static double fresh_rate(void) {
  size_t n = (size_t)64 << 20;
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = now();
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    memset(p, rep + 1, n);
    fma_sink += p[n / 3];
    munmap(p, n);
    double t = now() - t0;
    if (t < best) best = t;
  }
  return (double)n / best;
}

/* ---- GEMM shapes of a GRU layer ---- */

/* One product as cellc issues it: row-major, C[M x N] = op(A) op(B) (+ C). */
typedef struct Shape {
  const char *what;
  CBLAS_TRANSPOSE ta, tb;
  int M, N, K;
  int reps; /* calls per timing: one sequence's worth for the per-step products */
} Shape;

typedef void (*GemmFn)(const Shape *s, const float *A, const float *B, float *C, void *ctx);

static void gemm_openblas(const Shape *s, const float *A, const float *B, float *C, void *ctx) {
  (void)ctx;
  int lda = s->ta == CblasNoTrans ? s->K : s->M, ldb = s->tb == CblasNoTrans ? s->N : s->K;
  cblas_sgemm(CblasRowMajor, s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N);
}

/* BLIS through its typed API (strides given directly), opened with dlopen so that no
 * build depends on it; RTLD_DEEPBIND keeps its internal calls off OpenBLAS's symbols. */
typedef void (*BliSgemm)(int transa, int transb, long m, long n, long k, float *alpha, float *a, long rsa, long csa,
                         float *b, long rsb, long csb, float *beta, float *c, long rsc, long csc);
enum { BLI_NO_TRANSPOSE = 0x0, BLI_TRANSPOSE = 0x8 }; /* blis.h: BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE */

static void gemm_blis(const Shape *s, const float *A, const float *B, float *C, void *ctx) {
  BliSgemm fn = (BliSgemm)ctx;
  float one = 1.0f, zero = 0.0f;
  /* op(A) is M x K: A stored M x K (no trans) or K x M (trans), row-major */
  long rsa = s->ta == CblasNoTrans ? s->K : s->M, rsb = s->tb == CblasNoTrans ? s->N : s->K;
  fn(s->ta == CblasNoTrans ? BLI_NO_TRANSPOSE : BLI_TRANSPOSE, s->tb == CblasNoTrans ? BLI_NO_TRANSPOSE : BLI_TRANSPOSE,
     s->M, s->N, s->K, &one, (float *)A, rsa, 1, (float *)B, rsb, 1, &zero, C, s->N, 1);
}

/* ---- a hand-written small GEMM (prototype): C[M x N] = A[M x K] op(W), the per-step
 * products with the recurrent weights packed once into 32-column panels that stay in cache
 * (the weights do not change within a sequence): h U^T (W = U, N x K, transposed) and
 * dG U (W = U, K x N). Micro-tile 8 x 32: 16 zmm accumulators, A broadcast from memory.
 * M % 8 == 0, N % 32 == 0. ---- */

typedef struct Packed {
  int N, K;
  float *w; /* (N / 32, K, 32) */
} Packed;

/* W is N x K when `trans` (C = A W^T), else K x N (C = A W). */
static Packed pack_panels(const float *W, int N, int K, bool trans) {
  Packed p = {N, K, alloc_floats((size_t)N * K)};
  for (int jp = 0; jp < N / 32; jp++)
    for (int k = 0; k < K; k++)
      for (int j = 0; j < 32; j++) {
        int n = jp * 32 + j;
        p.w[((size_t)jp * K + k) * 32 + j] = trans ? W[(size_t)n * K + k] : W[(size_t)k * N + n];
      }
  return p;
}

__attribute__((target("avx512f"))) static void proto_gemm(const Packed *p, int M, const float *A, float *C) {
  int N = p->N, K = p->K;
  for (int ib = 0; ib < M; ib += 64) /* 64 rows of A stay in L1/L2 across all panels */
  for (int jp = 0; jp < N / 32; jp++) {
    const float *bp = p->w + (size_t)jp * K * 32;
    for (int i0 = ib; i0 < ib + 64 && i0 < M; i0 += 8) {
      __m512 c0[8], c1[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) c0[r] = c1[r] = _mm512_setzero_ps();
      const float *a = A + (size_t)i0 * K;
      for (int k = 0; k < K; k++) {
        __m512 b0 = _mm512_load_ps(bp + (size_t)k * 32), b1 = _mm512_load_ps(bp + (size_t)k * 32 + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          __m512 x = _mm512_set1_ps(a[(size_t)r * K + k]);
          c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
          c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(C + (size_t)(i0 + r) * N + jp * 32, c0[r]);
        _mm512_storeu_ps(C + (size_t)(i0 + r) * N + jp * 32 + 16, c1[r]);
      }
    }
  }
}

/* cellc's own sgemm (runtime/gemm/gemm.c) with the weights packed before the timing, as
 * the CPU back end packs them once per forward or backward */
static void gemm_cellc(const Shape *s, const float *A, const float *B, float *C, void *ctx) {
  (void)B;
  gemm_run((const GemmPacked *)ctx, s->M, A, s->K, C, s->N, false);
}

/* cellc's weight gradient (gemm_tn_acc: C += A^T B), from C = 0 as the others, its buffers kept
 * between calls as the back end keeps them. */
typedef struct TnCtx {
  GemmIsa isa;
  GemmScratch scratch;
} TnCtx;
static void gemm_cellc_tn(const Shape *s, const float *A, const float *B, float *C, void *ctx) {
  TnCtx *t = ctx;
  memset(C, 0, sizeof(float) * (size_t)s->M * s->N);
  gemm_tn_acc(t->isa, s->M, s->N, s->K, A, s->M, B, s->N, C, s->N, &t->scratch);
}

static void gemm_proto(const Shape *s, const float *A, const float *B, float *C, void *ctx) {
  (void)B;
  proto_gemm((const Packed *)ctx, s->M, A, C);
}

/* The weight gradient C[M x N] = A^T B over all T * B rows (A is K x M, B is K x N, K large):
 * no packing (both operands stream once), K in chunks of 256 so that the chunk of A and the
 * 32-column panel of B stay in L2 and L1 across the 8-row tiles; C accumulates in cache. */
__attribute__((target("avx512f"))) static void proto_gemm_tn(int M, int N, int K, const float *A, const float *B,
                                                              float *C) {
  enum { KC = 256 };
  memset(C, 0, sizeof(float) * (size_t)M * N);
  for (int k0 = 0; k0 < K; k0 += KC) {
    int k1 = k0 + KC < K ? k0 + KC : K;
    for (int jp = 0; jp < N / 32; jp++)
      for (int i0 = 0; i0 < M; i0 += 8) {
        __m512 c0[8], c1[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          c0[r] = _mm512_loadu_ps(C + (size_t)(i0 + r) * N + jp * 32);
          c1[r] = _mm512_loadu_ps(C + (size_t)(i0 + r) * N + jp * 32 + 16);
        }
        for (int k = k0; k < k1; k++) {
          const float *b = B + (size_t)k * N + jp * 32, *a = A + (size_t)k * M + i0;
          __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
          for (int r = 0; r < 8; r++) {
            __m512 x = _mm512_set1_ps(a[r]);
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
          }
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          _mm512_storeu_ps(C + (size_t)(i0 + r) * N + jp * 32, c0[r]);
          _mm512_storeu_ps(C + (size_t)(i0 + r) * N + jp * 32 + 16, c1[r]);
        }
      }
  }
}

static void gemm_proto_tn(const Shape *s, const float *A, const float *B, float *C, void *ctx) {
  (void)ctx;
  proto_gemm_tn(s->M, s->N, s->K, A, B, C);
}

/* Best FLOP/s of `fn` at shape s (best of 5 timings of s->reps calls each). */
static double gemm_rate(const Shape *s, GemmFn fn, void *ctx, const float *A, const float *B, float *C) {
  fn(s, A, B, C, ctx); /* warm-up: first-touch, packing buffers */
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    for (int i = 0; i < s->reps; i++) fn(s, A, B, C, ctx);
    double t = (now() - t0) / s->reps;
    if (t < best) best = t;
  }
  return 2.0 * s->M * s->N * (double)s->K / best;
}

static double max_abs_diff(const float *x, const float *y, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = x[i] > y[i] ? x[i] - y[i] : y[i] - x[i];
    if (d > m) m = d;
  }
  return m;
}

static const char *trans_name(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb) {
  return ta == CblasNoTrans ? (tb == CblasNoTrans ? "NN" : "NT") : (tb == CblasNoTrans ? "TN" : "TT");
}

int main(int argc, char **argv) {
  int rc = cli_read_env("peak"); /* CELLC_GEMM, CELLC_THREADS */
  if (rc) return rc;
  bool proto = false, blis = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--fma") && i + 1 < argc) { /* only the FMA peak of that many threads, as JSON */
      CpuFeatures f = cpu_features_host();
      int width = cpu_fma_width(&f), n = atoi(argv[++i]);
      if (n < 1 || width < 256) {
        fprintf(stderr, "peak: --fma needs a thread count >= 1 and a CPU with FMA\n");
        return 2;
      }
      printf("{\"width\": %d, \"threads\": %d, \"fma_peak\": %.4g}\n", width, n, fma_peak_of(width, n, 40));
      return 0;
    }
    if (!strcmp(argv[i], "--coretype")) { /* for a peer's OPENBLAS_CORETYPE (bench/blas_env.sh) */
      CpuFeatures f = cpu_features_host();
      BlasChoice c = cpu_blas_choose(&f);
      printf("%s\n", c.core ? c.core : "");
      return 0;
    }
    if (!strcmp(argv[i], "--gemm")) { /* the GEMM kernels cellc runs here (bench/blas_env.sh) */
      printf("%s\n", gemm_isa_name(gemm_isa_default()));
      return 0;
    }
    if (!strcmp(argv[i], "--proto")) proto = true;
    else if (!strcmp(argv[i], "--blis")) blis = true;
    else {
      fprintf(stderr, "usage: peak [--proto] [--blis] | --fma THREADS | --coretype | --gemm\n");
      return 2;
    }
  }
  CpuFeatures f = cpu_features_host();
  int width = cpu_fma_width(&f), cores = omp_get_num_procs();
  char line[256];
  cpu_blas_describe(line, sizeof line);
  const char *core = cpu_blas_corename();

  printf("cpu: %s family %d model %d; AVX2 %d FMA %d AVX-512 F/DQ/BW/VL %d%d%d%d BF16 %d AMX %d; OS saves YMM %d ZMM %d\n",
         f.vendor_id, f.family, f.model, f.avx2, f.fma, f.avx512f, f.avx512dq, f.avx512bw, f.avx512vl,
         f.avx512_bf16, f.amx_tile, f.os_ymm, f.os_zmm);
  printf("OpenBLAS %s\ncellc GEMM kernels: %s\n", line, gemm_isa_name(gemm_isa_default()));
  int blas_threads = openblas_get_num_threads();

  double peak1 = width >= 256 ? fma_peak(width, 1) : 0, peakn = width >= 256 ? fma_peak(width, cores) : 0;
  double peak256 = width == 512 ? fma_peak(256, 1) : peak1;
  double copy1 = copy_rate(1), copyn = copy_rate(cores), fresh = fresh_rate();
  printf("FMA peak (%d-bit): 1 core %.1f GFLOP/s, %d cores %.1f GFLOP/s", width, peak1 / 1e9, cores,
         peakn / 1e9);
  if (width == 512) printf("; 256-bit 1 core %.1f GFLOP/s", peak256 / 1e9);
  printf("\ncopy (b[i] = a[i], 64 MiB, read + write): 1 core %.2f GB/s, %d cores %.2f GB/s\n", copy1 / 1e9, cores,
         copyn / 1e9);
  printf("fresh pages (64 MiB mapped, written once, unmapped): %.2f GB/s\n", fresh / 1e9);

  BliSgemm bli = NULL;
  const char *blis_arch = "";
  if (blis) {
    void *h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) fprintf(stderr, "peak: no BLIS (%s)\n", dlerror());
    else {
      bli = (BliSgemm)dlsym(h, "bli_sgemm");
      int (*arch_id)(void) = (int (*)(void))dlsym(h, "bli_arch_query_id");
      const char *(*arch_str)(int) = (const char *(*)(int))dlsym(h, "bli_arch_string");
      if (arch_id && arch_str) blis_arch = arch_str(arch_id());
    }
  }

  /* B = 64, T = 512: per-step products (a sequence's worth of calls per timing) and the
   * products over all T * B rows, forward and backward, as cellc issues them */
  enum { B = 64, T = 512 };
  double peak_at = peak1 * (blas_threads > 1 ? blas_threads : 1);
  printf("sgemm, %d BLAS thread(s); fraction of the %d-bit FMA peak of %d core(s) (%.1f GFLOP/s)\n", blas_threads,
         width, blas_threads, peak_at / 1e9);
  printf("  %-34s %-24s %9s %7s\n", "product", "shape (M x N x K)", "GFLOP/s", "of peak");
  char json[8192];
  int jn = snprintf(json, sizeof json,
                    "{\"core\": \"%s\", \"width\": %d, \"fma_peak_1\": %.4g, \"fma_peak_all\": %.4g, \"copy_1\": %.4g, "
                    "\"copy_all\": %.4g, \"fresh\": %.4g, \"blas_threads\": %d, \"gemm\": [",
                    core, width, peak1, peakn, copy1, copyn, fresh, blas_threads);
  int first = 1;
  for (int H = 128; H <= 256; H *= 2) {
    int D = H;
    Shape shapes[] = {
        {"step forward  h U^T", CblasNoTrans, CblasTrans, B, 3 * H, H, T},
        {"step backward dG U", CblasNoTrans, CblasNoTrans, B, H, 3 * H, T},
        {"hoisted forward X W^T", CblasNoTrans, CblasTrans, T * B, 3 * H, D, 2},
        {"hoisted backward dG W", CblasNoTrans, CblasNoTrans, T * B, D, 3 * H, 2},
        {"weight grad dG^T X", CblasTrans, CblasNoTrans, 3 * H, D, T * B, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      Shape *s = &shapes[i];
      size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
      float *A = alloc_floats(na), *Bm = alloc_floats(nb), *C = alloc_floats(nc), *C2 = alloc_floats(nc);
      fill(A, na, 1), fill(Bm, nb, 2);
      char dims[64];
      snprintf(dims, sizeof dims, "%d x %d x %d %s", s->M, s->N, s->K, trans_name(s->ta, s->tb));
      double r = gemm_rate(s, gemm_openblas, NULL, A, Bm, C);
      printf("  %-34s %-24s %9.1f %6.0f%%  (H=%d, %s)\n", s->what, dims, r / 1e9, 100 * r / peak_at, H, core);
      jn += snprintf(json + jn, sizeof json - (size_t)jn,
                     "%s{\"H\": %d, \"what\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"flops\": %.4g}", first ? "" : ", ",
                     H, s->what, s->M, s->N, s->K, r);
      first = 0;
      if (bli) {
        double rb = gemm_rate(s, gemm_blis, (void *)bli, A, Bm, C2);
        printf("  %-34s %-24s %9.1f %6.0f%%  (BLIS %s; max |diff| %.1e)\n", "", "", rb / 1e9, 100 * rb / peak_at,
               blis_arch, max_abs_diff(C, C2, nc));
      }
      GemmIsa isa = gemm_isa_default();
      if (isa != GEMM_BLAS && s->ta == CblasNoTrans) {
        GemmPacked pk = {0};
        gemm_pack(&pk, isa, Bm, s->tb == CblasTrans ? s->K : s->N, s->N, s->K, s->tb == CblasTrans);
        double rc = gemm_rate(s, gemm_cellc, &pk, A, Bm, C2);
        printf("  %-34s %-24s %9.1f %6.0f%%  (cellc %s, packed weights; max |diff| %.1e)\n", "", "", rc / 1e9,
               100 * rc / peak_at, gemm_isa_name(isa), max_abs_diff(C, C2, nc));
        jn += snprintf(json + jn, sizeof json - (size_t)jn,
                       ", {\"H\": %d, \"what\": \"%s (cellc %s)\", \"M\": %d, \"N\": %d, \"K\": %d, \"flops\": %.4g}",
                       H, s->what, gemm_isa_name(isa), s->M, s->N, s->K, rc);
        gemm_packed_free(&pk);
      } else if (isa != GEMM_BLAS && s->ta == CblasTrans && s->tb == CblasNoTrans) {
        TnCtx tn = {isa, {0}};
        double rc = gemm_rate(s, gemm_cellc_tn, &tn, A, Bm, C2);
        gemm_scratch_free(&tn.scratch);
        printf("  %-34s %-24s %9.1f %6.0f%%  (cellc %s, A^T B, K in packed blocks; max |diff| %.1e)\n", "", "", rc / 1e9,
               100 * rc / peak_at, gemm_isa_name(isa), max_abs_diff(C, C2, nc));
        jn += snprintf(json + jn, sizeof json - (size_t)jn,
                       ", {\"H\": %d, \"what\": \"%s (cellc %s)\", \"M\": %d, \"N\": %d, \"K\": %d, \"flops\": %.4g}",
                       H, s->what, gemm_isa_name(isa), s->M, s->N, s->K, rc);
      }
      if (proto && width == 512 && s->ta == CblasNoTrans && s->M % 8 == 0 && s->N % 32 == 0) {
        Packed p = pack_panels(Bm, s->N, s->K, s->tb == CblasTrans);
        double rp = gemm_rate(s, gemm_proto, &p, A, Bm, C2);
        printf("  %-34s %-24s %9.1f %6.0f%%  (hand-written 8x32 AVX-512, packed weights; max |diff| %.1e)\n", "", "",
               rp / 1e9, 100 * rp / peak_at, max_abs_diff(C, C2, nc));
        free(p.w);
      }
      if (proto && width == 512 && s->ta == CblasTrans && s->tb == CblasNoTrans && s->M % 8 == 0 && s->N % 32 == 0) {
        double rp = gemm_rate(s, gemm_proto_tn, NULL, A, Bm, C2);
        printf("  %-34s %-24s %9.1f %6.0f%%  (hand-written 8x32 AVX-512, K in chunks of 256; max |diff| %.1e)\n", "",
               "", rp / 1e9, 100 * rp / peak_at, max_abs_diff(C, C2, nc));
      }
      free(A), free(Bm), free(C), free(C2);
    }
  }
  printf("%s]}\n", json);
  return 0;
}
