/* emit_shim.c: the CUDA runtime API and cuBLAS calls of an emitted P.cu's host part, on cuda-emu
 * (emit_shim.h). test_cuda_emit.c compiles it with P.cu (CELLC_EMIT_HOST_ONLY) into a shared
 * object. Streams are ignored: the emulator runs every call when it is made. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "emit_shim.h"

static EmitShimApi *A;

void emit_shim_set(EmitShimApi *api) { A = api; }

cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
  (void)s;
  CUfunction f;
  if (A->get_function(&f, A->mod, (const char *)func) != CUDA_SUCCESS) return cudaErrorInvalidDeviceFunction;
  if (A->launches < 8) strncpy(A->first_kernels[A->launches], (const char *)func, 31);
  A->launches++;
  CUresult r = A->launch(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shared, NULL, args, NULL);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
}

/* the kernel's attribute on the emulator (which, as a GPU, refuses launches past 48 KiB of shared
 * memory without MaxDynamicSharedMemorySize) */
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  CUfunction f;
  if (A->get_function(&f, A->mod, (const char *)func) != CUDA_SUCCESS) return cudaErrorInvalidDeviceFunction;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return A->set_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value) == CUDA_SUCCESS ? cudaSuccess
                                                                                                     : cudaErrorInvalidValue;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)s;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  A->copies++;
  if (kind == cudaMemcpyHostToDevice) r = A->htod((CUdeviceptr)(uintptr_t)dst, src, n);
  else if (kind == cudaMemcpyDeviceToDevice) r = A->dtod((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n);
  else if (kind == cudaMemcpyDeviceToHost) r = A->dtoh(dst, (CUdeviceptr)(uintptr_t)src, n);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  (void)s;
  A->memsets++;
  return A->memset8((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n) == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  CUdeviceptr d = 0;
  if (A->alloc(&d, n) != CUDA_SUCCESS) return cudaErrorMemoryAllocation;
  *p = (void *)(uintptr_t)d;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (p) A->release((CUdeviceptr)(uintptr_t)p);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  return cudaSuccess;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  A->creates++;
  return A->create(h);
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  A->destroys++;
  return A->destroy(h);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  (void)h, (void)s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *Am, int lda, const float *Bm, int ldb, const float *beta,
                              float *C, int ldc) {
  A->gemms++;
  return A->sgemm(h, ta, tb, m, n, k, alpha, Am, lda, Bm, ldb, beta, C, ldc);
}
