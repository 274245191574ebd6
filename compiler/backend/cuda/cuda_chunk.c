/* cuda_chunk.c: the chunked form's chunk op on the cuda and cuda-emu devices (cellc_chunk.cu,
 * compiled once per CudaChunk by NVRTC or the emulator), for compiler/pipeline's chunkrun. */
#include <string.h>

#include "cuda.h"
#include "cuda_dev.h"
#include "cuda_internal.h"
#include "support.h"

struct CudaChunk {
  CudaDev *d;
  CUmodule mod;
  CUfunction local, pass, fwd, bwd, cols, dfwd, dreads, dbwd, dgrads; /* d*: the delta rule's */
  int optin; /* the device's shared memory a block with the opt-in, bytes */
};

#define CK_BLOCK 256u

/* The kernels' source: the prelude, the arguments' header (its layout function on the device),
 * the kernels. */
char *cuda_chunk_source(void) {
  static const char head[] = "#include \"cellc_prelude.h\"\n#define CELLC_CHUNK_FN static __device__ __forceinline__\n";
  size_t a = strlen(head), b = strlen(cellc_chunk_h), c = strlen(cellc_chunk_cu);
  char *s = xmalloc(a + b + c + 2);
  memcpy(s, head, a), memcpy(s + a, cellc_chunk_h, b), s[a + b] = '\n', memcpy(s + a + b + 1, cellc_chunk_cu, c + 1);
  return s;
}

CudaChunk *cuda_chunk_open(bool emulated, char *err, size_t errlen) {
  CudaChunk *k = xcalloc(1, sizeof *k);
  k->d = cuda_dev_acquire(emulated, err, errlen);
  if (!k->d) return free(k), NULL;
  char why[8192];
  char *src = cuda_chunk_source();
  CudaImage img;
  int rc = cuda_compile(&k->d->api, src, k->d->arch, emulated ? CUDA_IMAGE_PTX : CUDA_IMAGE_CUBIN, NULL, 0, &img, why, sizeof why);
  free(src);
  if (rc == 0) {
    rc = CUDA_CU(&k->d->api, why, sizeof why, cuCtxSetCurrent, k->d->ctx);
    if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleLoadData, &k->mod, img.data);
    cuda_image_free(&img);
  }
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->local, k->mod, "cellc_chunk_local");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->pass, k->mod, "cellc_chunk_pass");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->fwd, k->mod, "cellc_chunk_fwd");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->bwd, k->mod, "cellc_chunk_bwd");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->cols, k->mod, "cellc_chunk_cols");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->dfwd, k->mod, "cellc_chunk_delta_fwd");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->dreads, k->mod, "cellc_chunk_delta_reads");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->dbwd, k->mod, "cellc_chunk_delta_bwd");
  if (rc == 0) rc = CUDA_CU(&k->d->api, why, sizeof why, cuModuleGetFunction, &k->dgrads, k->mod, "cellc_chunk_delta_grads");
  if (rc == 0)
    rc = CUDA_CU(&k->d->api, why, sizeof why, cuDeviceGetAttribute, &k->optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                 k->d->dev);
  if (rc != 0) {
    snprintf(err, errlen, "the chunk op's kernels: %s", why);
    cuda_chunk_close(k);
    return NULL;
  }
  return k;
}

void cuda_chunk_close(CudaChunk *k) {
  if (!k) return;
  if (k->mod) {
    k->d->api.cuCtxSetCurrent(k->d->ctx);
    k->d->api.cuModuleUnload(k->mod);
  }
  cuda_dev_release(k->d);
  free(k);
}

/* the delta rule's block for one of its kernels (CELLC_DELTA_*), bytes */
static size_t delta_shared(int K, int V, int L, int kernel) {
  return sizeof(float) * (size_t)cellc_chunk_delta_smem(K, V, L, kernel).total;
}

size_t cuda_chunk_shared(int K, int V, int L, bool per_key, bool delta, bool backward) {
  /* the delta rule's backward: its gradients kernel's block, the larger of its two */
  if (delta) return delta_shared(K, V, L, backward ? CELLC_DELTA_GRADS : CELLC_DELTA_FWD);
  return sizeof(float) * (size_t)cellc_chunk_smem(K, V, L, per_key, backward).total;
}

int cuda_chunk_fits(const CudaChunk *k, int K, int V, int L, bool per_key, bool delta, char *err, size_t errlen) {
  size_t need = cuda_chunk_shared(K, V, L, per_key, delta, true);
  if (need <= (size_t)k->optin) return 0;
  snprintf(err, errlen, "its chunk op (K = %d, V = %d, a chunk of %d sub-steps) needs %zu bytes of shared memory a block, the "
           "device has %d: a shorter chunk (--set chunk=L) fits", K, V, L, need, k->optin);
  return -1;
}

static int launch(CudaChunk *k, CUfunction f, unsigned grid, unsigned gy, size_t shared, void **args, char *err, size_t errlen) {
  const CudaApi *api = &k->d->api;
  if (CUDA_CU(api, err, errlen, cuCtxSetCurrent, k->d->ctx) != 0) return -1;
  if (shared > 48 * 1024 &&
      CUDA_CU(api, err, errlen, cuFuncSetAttribute, f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared) != 0)
    return -1;
  return CUDA_CU(api, err, errlen, cuLaunchKernel, f, grid, gy, 1, CK_BLOCK, 1, 1, (unsigned)shared, NULL, args, NULL);
}

/* the pass's blocks a head: a thread per state entry */
static unsigned entries(const CellcChunkArgs *a) { return (unsigned)((a->K * a->V + (int)CK_BLOCK - 1) / (int)CK_BLOCK); }

/* the chunks of a's sequence */
static unsigned chunks(const CellcChunkArgs *a) { return (unsigned)((a->T * a->E + a->L - 1) / a->L); }

int cuda_chunk_forward(CudaChunk *k, const CellcChunkArgs *a, bool with_reads, char *err, size_t errlen) {
  unsigned bh = (unsigned)(a->B * a->nh), nc = chunks(a);
  if (bh == 0) return 0;
  CellcChunkArgs v = *a;
  int dir = 0;
  void *args[] = {&v, &dir};
  if (a->delta) { /* the walk a block per head, then every chunk's reads a block each */
    void *one[] = {&v};
    CHECK(a->E == 1 && !a->per_key);
    if (launch(k, k->dfwd, bh, 1, delta_shared(a->K, a->V, a->L, CELLC_DELTA_FWD), one, err, errlen) != 0) return -1;
    return with_reads && nc ? launch(k, k->dreads, bh, nc, delta_shared(a->K, a->V, a->L, CELLC_DELTA_FWD), one, err, errlen) : 0;
  }
  size_t sh = cuda_chunk_shared(a->K, a->V, a->L, a->per_key, false, false);
  if (nc && launch(k, k->local, bh, nc, sh, args, err, errlen) != 0) return -1;
  if (launch(k, k->pass, bh, entries(a), 0, args, err, errlen) != 0) return -1;
  void *one[] = {&v};
  return with_reads && nc ? launch(k, k->fwd, bh, nc, sh, one, err, errlen) : 0;
}

int cuda_chunk_backward(CudaChunk *k, const CellcChunkArgs *a, char *err, size_t errlen) {
  unsigned bh = (unsigned)(a->B * a->nh), nc = chunks(a);
  if (bh == 0) return 0;
  CellcChunkArgs v = *a;
  int dir = 1;
  void *args[] = {&v, &dir};
  if (a->delta) { /* the walk a block per head, then every chunk's gradients a block each */
    void *one[] = {&v};
    if (launch(k, k->dbwd, bh, 1, delta_shared(a->K, a->V, a->L, CELLC_DELTA_WALK), one, err, errlen) != 0) return -1;
    return nc ? launch(k, k->dgrads, bh, nc, delta_shared(a->K, a->V, a->L, CELLC_DELTA_GRADS), one, err, errlen) : 0;
  }
  size_t sh = cuda_chunk_shared(a->K, a->V, a->L, a->per_key, false, true);
  if (nc && launch(k, k->local, bh, nc, sh, args, err, errlen) != 0) return -1;
  if (launch(k, k->pass, bh, entries(a), 0, args, err, errlen) != 0) return -1;
  void *one[] = {&v};
  return nc ? launch(k, k->bwd, bh, nc, sh, one, err, errlen) : 0;
}

int cuda_chunk_cols(CudaChunk *k, float *dst, int ldd, const float *a, int lda, const float *b, int ldb, long long rows, int n,
                    char *err, size_t errlen) {
  if (rows <= 0 || n <= 0) return 0;
  long long nb = (rows * n + CK_BLOCK - 1) / CK_BLOCK;
  unsigned grid = (unsigned)(nb > 4096 ? 4096 : nb);
  void *args[] = {&dst, &ldd, &a, &lda, &b, &ldb, &rows, &n};
  return launch(k, k->cols, grid, 1, 0, args, err, errlen);
}

int cuda_chunk_sync(CudaChunk *k, char *err, size_t errlen) { return CUDA_CU(&k->d->api, err, errlen, cuCtxSynchronize); }
