/* cuda_api.c: the CUDA call table filled from the real libraries with dlopen/dlsym, error
 * names and the "call: ERROR_NAME" messages every CUDA failure is reported with. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "cuda_api.h"
#include "cuda_internal.h"

#define CUDA_STR_(x) #x
#define CUDA_STR(x) CUDA_STR_(x) /* expands first: the versioned symbol name */

/* The errors a CUDA back end meets; others print as their number. */
#define CU_RESULT_NAMES(X)                                                                  \
  X(CUDA_SUCCESS) X(CUDA_ERROR_INVALID_VALUE) X(CUDA_ERROR_OUT_OF_MEMORY)                   \
  X(CUDA_ERROR_NOT_INITIALIZED) X(CUDA_ERROR_DEINITIALIZED) X(CUDA_ERROR_STUB_LIBRARY)       \
  X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER) X(CUDA_ERROR_DEVICE_UNAVAILABLE)                 \
  X(CUDA_ERROR_NO_DEVICE) X(CUDA_ERROR_INVALID_DEVICE) X(CUDA_ERROR_INVALID_IMAGE)           \
  X(CUDA_ERROR_INVALID_CONTEXT) X(CUDA_ERROR_NO_BINARY_FOR_GPU) X(CUDA_ERROR_INVALID_PTX)   \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION) X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND)                 \
  X(CUDA_ERROR_INVALID_SOURCE) X(CUDA_ERROR_FILE_NOT_FOUND)                                  \
  X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND) X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED)       \
  X(CUDA_ERROR_OPERATING_SYSTEM) X(CUDA_ERROR_INVALID_HANDLE) X(CUDA_ERROR_ILLEGAL_STATE)    \
  X(CUDA_ERROR_NOT_FOUND) X(CUDA_ERROR_NOT_READY) X(CUDA_ERROR_ILLEGAL_ADDRESS)             \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) X(CUDA_ERROR_LAUNCH_TIMEOUT)                        \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED) X(CUDA_ERROR_ASSERT) X(CUDA_ERROR_HARDWARE_STACK_ERROR) \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION) X(CUDA_ERROR_MISALIGNED_ADDRESS)                        \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE) X(CUDA_ERROR_INVALID_PC) X(CUDA_ERROR_LAUNCH_FAILED)  \
  X(CUDA_ERROR_NOT_PERMITTED) X(CUDA_ERROR_NOT_SUPPORTED) X(CUDA_ERROR_SYSTEM_NOT_READY)    \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)         \
  X(CUDA_ERROR_TIMEOUT) X(CUDA_ERROR_UNKNOWN)

const char *cuda_cu_result_name(CUresult r) {
  switch (r) {
#define CU_CASE(name) \
  case name:          \
    return #name;
    CU_RESULT_NAMES(CU_CASE)
#undef CU_CASE
  default:
    return "CUDA_ERROR_(unlisted)";
  }
}

const char *cuda_cublas_status_name(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_(unknown)";
}

/* The emulator's detail, when it has one, as " (detail)". */
static const char *emu_detail(const CudaApi *api) {
  const char *d = api->emu_detail ? api->emu_detail() : NULL;
  return d && *d ? d : NULL;
}

int cuda_cu_check(const CudaApi *api, CUresult r, const char *call, char *err, size_t errlen) {
  if (r == CUDA_SUCCESS) return 0;
  const char *name = NULL;
  if (!api->cuGetErrorName || api->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
    name = cuda_cu_result_name(r);
  const char *d = emu_detail(api);
  if (d) return cuda_fail(err, errlen, "%s: %s (%d): %s", call, name, (int)r, d);
  return cuda_fail(err, errlen, "%s: %s (%d)", call, name, (int)r);
}

int cuda_nvrtc_check(const CudaApi *api, nvrtcResult r, const char *call, char *err,
                     size_t errlen) {
  if (r == NVRTC_SUCCESS) return 0;
  const char *name = api->nvrtcGetErrorString ? api->nvrtcGetErrorString(r) : NULL;
  const char *d = emu_detail(api);
  if (d) return cuda_fail(err, errlen, "%s: %s: %s", call, name ? name : "NVRTC_ERROR", d);
  return cuda_fail(err, errlen, "%s: %s (%d)", call, name ? name : "NVRTC_ERROR", (int)r);
}

int cuda_cublas_check(const CudaApi *api, cublasStatus_t s, const char *call, char *err,
                      size_t errlen) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  const char *name = api->cublasGetStatusName ? api->cublasGetStatusName(s) : NULL;
  if (!name) name = cuda_cublas_status_name(s);
  const char *d = emu_detail(api);
  if (d) return cuda_fail(err, errlen, "%s: %s: %s", call, name, d);
  return cuda_fail(err, errlen, "%s: %s (%d)", call, name, (int)s);
}

/* dlopen the first of names that loads, each tried as given (the loader's search path)
 * and then under the toolkit's lib64 directories. err gets every dlerror on failure. */
static void *open_library(const char *const *names, int n, bool toolkit_dirs, char *err,
                          size_t errlen) {
  static const char *const sub[] = {"lib64"};
  char tried[1024];
  void *h = support_dlopen_toolkit(names, n, sub, toolkit_dirs ? 1 : 0, tried, sizeof tried);
  if (!h) cuda_fail(err, errlen, "%s", tried);
  return h;
}

/* Look every symbol of a list up in one library; the first missing one is the error. */
#define LOOKUP(name)                                                                        \
  if (!(api->name = (__typeof__(api->name))dlsym(lib, CUDA_STR(name))))                     \
    return cuda_fail(err, errlen, "%s: symbol %s not found (%s)", libname, CUDA_STR(name),  \
                     what);

static int lookup_driver(CudaApi *api, void *lib, const char *libname, const char *what,
                         char *err, size_t errlen) {
  CUDA_DRIVER_CALLS(LOOKUP)
  return 0;
}

static int lookup_nvrtc(CudaApi *api, void *lib, const char *libname, const char *what,
                        char *err, size_t errlen) {
  CUDA_NVRTC_CALLS(LOOKUP)
  return 0;
}

static int lookup_cublas(CudaApi *api, void *lib, const char *libname, const char *what,
                         char *err, size_t errlen) {
  CUDA_CUBLAS_CALLS(LOOKUP)
  return 0;
}
#undef LOOKUP

static int open_nvrtc_part(CudaApi *api, char *err, size_t errlen) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so"};
  char why[1024];
  api->libnvrtc = open_library(names, 2, true, why, sizeof why);
  if (!api->libnvrtc)
    return cuda_fail(err, errlen, "libnvrtc.so.13 (NVRTC, the CUDA runtime compiler) not found: %s",
                     why);
  return lookup_nvrtc(api, api->libnvrtc, "libnvrtc", "NVRTC too old for CUDA 13?", err,
                      errlen);
}

int cuda_api_open_nvrtc(CudaApi *api, char *err, size_t errlen) {
  memset(api, 0, sizeof *api);
  if (open_nvrtc_part(api, err, errlen) != 0) {
    cuda_api_close(api);
    return -1;
  }
  return 0;
}

int cuda_api_open_real(CudaApi *api, char *err, size_t errlen) {
  memset(api, 0, sizeof *api);
  static const char *const cuda_names[] = {"libcuda.so.1"};
  static const char *const cublas_names[] = {"libcublas.so.13", "libcublas.so"};
  char why[1024];
  api->libcuda = open_library(cuda_names, 1, false, why, sizeof why);
  if (!api->libcuda) {
    cuda_fail(err, errlen, "libcuda.so.1 (the NVIDIA driver) not found: %s", why);
    goto fail;
  }
  if (lookup_driver(api, api->libcuda, "libcuda.so.1", "driver older than CUDA 13?", err,
                    errlen) != 0)
    goto fail;
  if (open_nvrtc_part(api, err, errlen) != 0) goto fail;
  api->libcublas = open_library(cublas_names, 2, true, why, sizeof why);
  if (!api->libcublas) {
    cuda_fail(err, errlen, "libcublas.so.13 (cuBLAS) not found: %s", why);
    goto fail;
  }
  if (lookup_cublas(api, api->libcublas, "libcublas", "cuBLAS older than CUDA 13?", err,
                    errlen) != 0)
    goto fail;
  return 0;
fail:
  cuda_api_close(api);
  return -1;
}

int cuda_api_probe(const char *path, int part, char *err, size_t errlen) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return cuda_fail(err, errlen, "%s", dlerror());
  CudaApi api = {0};
  int rc = part == 0   ? lookup_driver(&api, lib, path, "probe", err, errlen)
           : part == 1 ? lookup_nvrtc(&api, lib, path, "probe", err, errlen)
                       : lookup_cublas(&api, lib, path, "probe", err, errlen);
  (void)lib; /* stays loaded: see cuda_api_close */
  return rc;
}

/* NVIDIA's libraries stay loaded for the life of the process: they are not made to be
 * unloaded (the C++ runtime inside them leaks its pools on dlclose, and the driver keeps
 * threads). A later open finds them already there. */
void cuda_api_close(CudaApi *api) {
  if (api->emu_close) api->emu_close();
  memset(api, 0, sizeof *api);
}

int cuda_open_device(const CudaApi *api, int ordinal, CUdevice *dev, char *err, size_t errlen) {
  CUresult r = api->cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE)
    return cuda_fail(err, errlen, "no CUDA device: the driver is installed but sees no GPU "
                     "(cuInit: CUDA_ERROR_NO_DEVICE)");
  if (cuda_cu_check(api, r, "cuInit", err, errlen) != 0) return -1;
  int n = 0;
  if (CUDA_CU(api, err, errlen, cuDeviceGetCount, &n) != 0) return -1;
  if (ordinal < 0 || ordinal >= n)
    return cuda_fail(err, errlen, "no CUDA device %d: the machine has %d", ordinal, n);
  return CUDA_CU(api, err, errlen, cuDeviceGet, dev, ordinal);
}

int cuda_device_arch(const CudaApi *api, CUdevice dev, char *arch, size_t archlen, char *err,
                     size_t errlen) {
  int major = 0, minor = 0;
  if (CUDA_CU(api, err, errlen, cuDeviceGetAttribute, &major,
              CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != 0 ||
      CUDA_CU(api, err, errlen, cuDeviceGetAttribute, &minor,
              CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != 0)
    return -1;
  snprintf(arch, archlen, "sm_%d%d", major, minor);
  return 0;
}

const char *cuda_prelude_text(void) {
  return cellc_cuda_prelude_h;
}
