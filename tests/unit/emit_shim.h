/* emit_shim.h: the calls an emitted P.cu's host code makes (the CUDA runtime API and cuBLAS),
 * served by cuda-emu: test_cuda_emit.c fills this table from the emulator's CudaApi and hands it
 * to emit_shim.c, which it compiles into a shared object with P.cu's host part
 * (CELLC_EMIT_HOST_ONLY: kernels named by their names). Toolkit types only. */
#ifndef CELLC_EMIT_SHIM_H
#define CELLC_EMIT_SHIM_H

#include <cuda.h>
#include <cublas_v2.h>

typedef struct EmitShimApi {
  CUmodule mod;            /* the kernels: P.cu's kernel section, compiled by the emulator */
  CUresult (*get_function)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*launch)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, CUstream s, void **params, void **extra);
  CUresult (*set_attribute)(CUfunction f, CUfunction_attribute a, int v);
  CUresult (*htod)(CUdeviceptr dst, const void *src, size_t n);
  CUresult (*dtod)(CUdeviceptr dst, CUdeviceptr src, size_t n);
  CUresult (*dtoh)(void *dst, CUdeviceptr src, size_t n);
  CUresult (*memset8)(CUdeviceptr dst, unsigned char v, size_t n);
  CUresult (*alloc)(CUdeviceptr *p, size_t n);   /* cudaMalloc, cudaFree: a call with lengths */
  CUresult (*release)(CUdeviceptr p);
  cublasStatus_t (*create)(cublasHandle_t *h);
  cublasStatus_t (*destroy)(cublasHandle_t h);
  cublasStatus_t (*sgemm)(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                          int ldc);
  /* counts, read back by the test */
  int launches, gemms, copies, memsets, creates, destroys;
  char first_kernels[8][32]; /* the first kernels launched, by name */
} EmitShimApi;

/* The shared object's entry: the table it uses from now on (the pointer is kept). */
typedef void (*EmitShimSet)(EmitShimApi *api);

#endif
