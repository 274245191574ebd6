/* python_cuda_emu.c: an emitted P.cu's host part on cuda-emu as a shared library whose device
 * pointers are host pointers, so that the cellc Python package's CUDA path (python/cellc/_cuda.py)
 * can run its ctypes calls with CPU tensors' data_ptr() (tests/python_cuda_emu.py builds it):
 *
 *   g++ -shared -fPIC -DCELLC_EMIT_HOST_ONLY -x c++ P.cu -x c -DCELLC_EMU_PCU='"P.cu"'
 *       tests/python_cuda_emu.c -x none build/libcellc.a -lopenblas ...
 *
 * The kernels are P.cu's kernel section compiled and launched by the emulator (as test_cuda_emit.c
 * runs them); the CUDA runtime calls the host part makes are served here. Unlike emit_shim.c the
 * copies, memsets and GEMMs do not go through the emulator's driver and cuBLAS, which accept only
 * pointers inside their own allocations: a torch tensor is host memory the emulator did not
 * allocate. So the copies are memcpy, the GEMMs cblas_sgemm in column-major order (cuBLAS's), and
 * the stream handed in is recorded and otherwise ignored (everything runs when it is called). */
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_api.h"
#include "support.h"

#define KERNELS_BEGIN "/* ---- cellc kernels: begin ---- */\n"
#define GLUE_END "/* ---- cellc glue kernels: end ---- */\n"

static CudaApi api;
static CUcontext ctx;
static CUmodule mod;
static char failure[8192];
/* read by the test: how many launches and GEMMs ran, and the last stream a call named */
static long launches, gemms, handles;
static void *last_stream;

/* The emulator, and P.cu's kernels on it, when the library is loaded; a failure is kept for
 * cellc_emu_failure (a constructor cannot report otherwise). */
__attribute__((constructor)) static void open_emulator(void) {
  size_t len;
  char *text = read_file(CELLC_EMU_PCU, &len);
  const char *a = text ? strstr(text, KERNELS_BEGIN) : NULL, *b = a ? strstr(a, GLUE_END) : NULL;
  const char *prelude = cuda_prelude_text();
  if (!a || !b || strncmp(a + strlen(KERNELS_BEGIN), prelude, strlen(prelude))) {
    snprintf(failure, sizeof failure, "%s: no kernel section that starts with the prelude", CELLC_EMU_PCU);
    free(text);
    return;
  }
  /* the emulator takes the prelude by its #include, as the back end hands it (test_cuda_emit.c) */
  a += strlen(KERNELS_BEGIN) + strlen(prelude);
  char *kernels = xasprintf("#include \"" CUDA_PRELUDE_NAME "\"\n%.*s", (int)(b + strlen(GLUE_END) - a), a);
  free(text);
  cuda_api_open_emu(&api);
  CUdevice dev;
  CudaImage img = {0};
  CUmodule m = NULL;
  if (!cuda_open_device(&api, 0, &dev, failure, sizeof failure) &&
      !CUDA_CU(&api, failure, sizeof failure, cuCtxCreate, &ctx, NULL, 0, dev) &&
      !cuda_compile(&api, kernels, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, failure, sizeof failure) &&
      !CUDA_CU(&api, failure, sizeof failure, cuModuleLoadData, &m, img.data))
    mod = m;
  cuda_image_free(&img);
  free(kernels);
}

const char *cellc_emu_failure(void) { return mod ? NULL : failure; }
long cellc_emu_launches(void) { return launches; }
long cellc_emu_gemms(void) { return gemms; }
long cellc_emu_handles(void) { return handles; }
void *cellc_emu_last_stream(void) { return last_stream; }

cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
  last_stream = s;
  CUfunction f;
  if (!mod || api.cuModuleGetFunction(&f, mod, (const char *)func) != CUDA_SUCCESS) return cudaErrorInvalidDeviceFunction;
  launches++;
  CUresult r = api.cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shared, NULL, args, NULL);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  CUfunction f;
  if (!mod || api.cuModuleGetFunction(&f, mod, (const char *)func) != CUDA_SUCCESS) return cudaErrorInvalidDeviceFunction;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value) == CUDA_SUCCESS ? cudaSuccess
                                                                                                         : cudaErrorInvalidValue;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)kind;
  last_stream = s;
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  last_stream = s;
  if (n) memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  last_stream = s;
  return cudaSuccess;
}

static int handle_token;

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  handles++;
  *h = (cublasHandle_t)&handle_token;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  (void)h;
  handles--;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  (void)h;
  last_stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
  (void)h;
  gemms++;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (k == 0 || *alpha == 0.0f || *beta == 0.0f) { /* cuBLAS: beta 0 never reads C (it may hold NaN) */
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) C[(size_t)j * ldc + i] = *beta == 0.0f ? 0.0f : *beta * C[(size_t)j * ldc + i];
    if (k == 0 || *alpha == 0.0f) return CUBLAS_STATUS_SUCCESS;
  }
  cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              m, n, k, *alpha, A, lda, B, ldb, *beta == 0.0f ? 1.0f : *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}
