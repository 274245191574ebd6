/* cuda_api.h: the one table through which the CUDA back end calls the driver, NVRTC and
 * cuBLAS, filled from the real libraries (dlopen, never linked) or from the CPU emulator
 * (cuda-emu); error messages that name the call and the error; the NVRTC compile helper
 * with its disk cache; the ptxas resource check. */
#ifndef CELLC_CUDA_API_H
#define CELLC_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>

/* Types and enums only: the toolkit headers are on every build machine, the libraries
 * are not (they are opened at run time). */
#include <cublas_v2.h>
#include <cuda.h>
#include <nvrtc.h>

/* The calls, each once. cuda.h and cublas_v2.h map many names to versioned symbols
 * (cuMemAlloc -> cuMemAlloc_v2, cuCtxCreate -> cuCtxCreate_v4, cublasSgemm ->
 * cublasSgemm_v2); a field is declared with the header's name, so `api->cuMemAlloc(...)`
 * reads as the CUDA call and the symbol looked up is the one the header chose. */
#define CUDA_DRIVER_CALLS(X)                                                                \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                     \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)             \
  X(cuDeviceTotalMem)                                                                       \
  X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize)  \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                                  \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo)                                                \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD)                                           \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)                            \
  X(cuMemsetD8) X(cuMemsetD32) X(cuMemsetD8Async) X(cuMemsetD32Async)                       \
  X(cuModuleLoadData) X(cuModuleGetFunction) X(cuModuleUnload)                              \
  X(cuLaunchKernel) X(cuFuncGetAttribute) X(cuFuncSetAttribute)                             \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                               \
  X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)             \
  X(cuEventDestroy)

#define CUDA_NVRTC_CALLS(X)                                                                 \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)       \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)                    \
  X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)

#define CUDA_CUBLAS_CALLS(X)                                                                \
  X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetMathMode)                  \
  X(cublasSetPointerMode) X(cublasGetStatusName) X(cublasSgemm)                             \
  X(cublasSgemmStridedBatched)

#define CUDA_API_FIELD(name) __typeof__(name) *name;

typedef struct CudaApi {
  bool emulated;      /* filled by cuda_api_open_emu */
  void *libcuda;      /* dlopen handles; NULL when emulated or not opened */
  void *libnvrtc;
  void *libcublas;
  /* The emulator's detail on its last failure ("kernel 'f': ..."), NULL for the real
   * libraries; cuda_cu_check appends it to the message. */
  const char *(*emu_detail)(void);
  void (*emu_close)(void); /* frees what the emulator still holds; NULL for the real ones */
  CUDA_DRIVER_CALLS(CUDA_API_FIELD)
  CUDA_NVRTC_CALLS(CUDA_API_FIELD)
  CUDA_CUBLAS_CALLS(CUDA_API_FIELD)
} CudaApi;

/* The real libraries: libcuda.so.1 (the driver), libnvrtc, libcublas, looked up by the
 * loader's path and then under $CUDA_HOME/lib64 and /usr/local/cuda/lib64. 0, or -1 with
 * a message naming the missing library or symbol; the table is then closed. */
int cuda_api_open_real(CudaApi *api, char *err, size_t errlen);
/* NVRTC alone: compiling kernels to PTX needs no driver and no GPU. */
int cuda_api_open_nvrtc(CudaApi *api, char *err, size_t errlen);
/* The CPU emulator (see docs/cuda-emu.md). Never fails. */
void cuda_api_open_emu(CudaApi *api);
/* The table is zeroed and the emulator's state freed; the real libraries stay loaded for
 * the life of the process (they are not made to be unloaded). */
void cuda_api_close(CudaApi *api);

/* "CUDA_ERROR_OUT_OF_MEMORY" for every CUresult of cuda.h, without a driver. */
const char *cuda_cu_result_name(CUresult r);
/* "CUBLAS_STATUS_INVALID_VALUE", without cuBLAS. */
const char *cuda_cublas_status_name(cublasStatus_t s);

/* 0 on success; else -1 and err = "<call>: <ERROR_NAME>" (plus the emulator's detail). */
int cuda_cu_check(const CudaApi *api, CUresult r, const char *call, char *err, size_t errlen);
int cuda_nvrtc_check(const CudaApi *api, nvrtcResult r, const char *call, char *err,
                     size_t errlen);
int cuda_cublas_check(const CudaApi *api, cublasStatus_t s, const char *call, char *err,
                      size_t errlen);

/* Call and check in one: CUDA_CU(api, err, errlen, cuMemAlloc, &p, bytes) is 0 or -1
 * with "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY" in err. */
#define CUDA_CU(api, err, errlen, fn, ...) \
  cuda_cu_check((api), (api)->fn(__VA_ARGS__), #fn, (err), (errlen))
#define CUDA_NVRTC(api, err, errlen, fn, ...) \
  cuda_nvrtc_check((api), (api)->fn(__VA_ARGS__), #fn, (err), (errlen))
#define CUDA_CUBLAS(api, err, errlen, fn, ...) \
  cuda_cublas_check((api), (api)->fn(__VA_ARGS__), #fn, (err), (errlen))

/* cuInit and device `ordinal`: 0, or -1 with a message that says what is missing (no GPU,
 * no such device) or which call failed. */
int cuda_open_device(const CudaApi *api, int ordinal, CUdevice *dev, char *err, size_t errlen);

/* "sm_90" for a device's compute capability. 0 or -1 with a message. */
int cuda_device_arch(const CudaApi *api, CUdevice dev, char *arch, size_t archlen, char *err,
                     size_t errlen);

/* The portable kernel prelude (cellc_prelude.h): every generated kernel source starts with
 * #include "cellc_prelude.h"; cuda_compile hands it to NVRTC (and to the emulator) as an
 * in-memory header. */
const char *cuda_prelude_text(void);
#define CUDA_PRELUDE_NAME "cellc_prelude.h"

/* A compiled module image: PTX text (NUL-terminated) or a cubin, what cuModuleLoadData
 * takes. Under the emulator both kinds are the emulator's own image. */
typedef enum CudaImageKind { CUDA_IMAGE_PTX, CUDA_IMAGE_CUBIN } CudaImageKind;

typedef struct CudaImage {
  char *data;       /* size bytes, followed by a NUL */
  size_t size;
  CudaImageKind kind;
  bool from_cache;  /* found on disk: NVRTC did not run */
  char *log;        /* NVRTC's log (warnings); NULL when empty or from the cache */
} CudaImage;

/* Compile kernel source for arch ("sm_80", "sm_90", ...) with extra NVRTC options. The
 * result is cached on disk under cuda_cache_dir() by a hash of the source, the prelude,
 * the options, the kind and the NVRTC version; entries are written atomically and a
 * corrupted one is ignored. 0, or -1 with "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION"
 * and the compiler's log in err. Either way the caller ends with cuda_image_free. */
int cuda_compile(const CudaApi *api, const char *source, const char *arch, CudaImageKind kind,
                 const char *const *options, int n_options, CudaImage *out, char *err,
                 size_t errlen);
void cuda_image_free(CudaImage *img);

/* $XDG_CACHE_HOME/cellc, else $HOME/.cache/cellc (created); NULL when neither is usable.
 * Caller frees. */
char *cuda_cache_dir(void);

#endif
