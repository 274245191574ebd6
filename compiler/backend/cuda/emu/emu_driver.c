/* emu_driver.c: the emulated driver API outside launches: one device, contexts, device
 * memory (host memory from malloc, so ASan sees kernels overrun it), synchronous streams,
 * events timed by the host clock. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support.h"
#include "emu.h"

typedef struct EmuAlloc {
  char *ptr;
  size_t size;
} EmuAlloc;

/* A context owns what was made while it was current; destroying it frees them. */
typedef struct EmuContext {
  EmuAlloc *allocs;
  int n_allocs, cap_allocs;
  EmuModule **modules;
  int n_modules, cap_modules;
  void **objects; /* streams and events */
  int n_objects, cap_objects;
} EmuContext;

typedef struct EmuEvent {
  double ms;
  bool recorded;
} EmuEvent;

static struct {
  bool initialized;
  EmuContext *current;
  EmuContext *primary;
  int primary_refs;
  EmuContext **contexts;
  int n_contexts, cap_contexts;
  size_t allocated;
} emu;

static char detail[2048];

void emu_set_detail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
}

const char *emu_detail(void) {
  return detail;
}

CUresult emu_fail(CUresult r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return r;
}

CUresult emu_need_context(const char *call) {
  if (!emu.initialized) return emu_fail(CUDA_ERROR_NOT_INITIALIZED, "%s before cuInit", call);
  if (!emu.current) return emu_fail(CUDA_ERROR_INVALID_CONTEXT, "%s without a current context", call);
  return CUDA_SUCCESS;
}

CUresult emu_cuInit(unsigned flags) {
  if (flags != 0) return emu_fail(CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0");
  emu.initialized = true;
  return CUDA_SUCCESS;
}

CUresult emu_cuDriverGetVersion(int *v) {
  if (!v) return emu_fail(CUDA_ERROR_INVALID_VALUE, "NULL version");
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult emu_cuGetErrorName(CUresult r, const char **s) {
  *s = cuda_cu_result_name(r);
  return CUDA_SUCCESS;
}

CUresult emu_cuGetErrorString(CUresult r, const char **s) {
  *s = cuda_cu_result_name(r);
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetCount(int *n) {
  if (!emu.initialized) return emu_fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit");
  *n = 1;
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGet(CUdevice *dev, int ordinal) {
  if (!emu.initialized) return emu_fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGet before cuInit");
  if (ordinal != 0) return emu_fail(CUDA_ERROR_INVALID_DEVICE, "cuda-emu has one device, 0");
  *dev = 0;
  return CUDA_SUCCESS;
}

static CUresult check_device(CUdevice dev) {
  if (!emu.initialized) return emu_fail(CUDA_ERROR_NOT_INITIALIZED, "device query before cuInit");
  if (dev != 0) return emu_fail(CUDA_ERROR_INVALID_DEVICE, "cuda-emu has one device, 0");
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetName(char *name, int len, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && len > 0) snprintf(name, (size_t)len, "cuda-emu (CPU)");
  return r;
}

/* A quarter of the host's memory. */
static size_t device_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return (size_t)4 << 30;
  return (size_t)pages * (size_t)page / 4;
}

CUresult emu_cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS) *bytes = device_memory();
  return r;
}

static int attribute(CUdevice_attribute a) {
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return EMU_CC_MAJOR;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return EMU_CC_MINOR;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return EMU_SM_COUNT;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return EMU_WARP;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return EMU_MAX_THREADS;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return EMU_SHARED_PER_BLOCK;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return EMU_SHARED_OPTIN;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 228 * 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 * 1024 * 1024;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1000000;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
  default: return -1;
  }
}

CUresult emu_cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  int v = attribute(a);
  if (v < 0) return emu_fail(CUDA_ERROR_NOT_SUPPORTED, "cuda-emu does not model device attribute %d", (int)a);
  *pi = v;
  return CUDA_SUCCESS;
}

/* Contexts. */
static EmuContext *context_new(void) {
  EmuContext *c = xcalloc(1, sizeof *c);
  VEC_PUSH(emu.contexts, emu.n_contexts, emu.cap_contexts, c);
  return c;
}

static bool context_live(CUcontext ctx) {
  for (int i = 0; i < emu.n_contexts; i++)
    if ((CUcontext)emu.contexts[i] == ctx) return true;
  return false;
}

static void context_free(EmuContext *c) {
  for (int i = 0; i < c->n_allocs; i++) free(c->allocs[i].ptr);
  for (int i = 0; i < c->n_allocs; i++) emu.allocated -= c->allocs[i].size;
  for (int i = 0; i < c->n_modules; i++) emu_module_free(c->modules[i]);
  for (int i = 0; i < c->n_objects; i++) free(c->objects[i]);
  free(c->allocs);
  free(c->modules);
  free(c->objects);
  for (int i = 0; i < emu.n_contexts; i++)
    if (emu.contexts[i] == c) emu.contexts[i] = emu.contexts[--emu.n_contexts];
  if (emu.current == c) emu.current = NULL;
  if (emu.primary == c) emu.primary = NULL;
  free(c);
  if (emu.n_contexts == 0) {
    free(emu.contexts);
    emu.contexts = NULL;
    emu.cap_contexts = 0;
  }
}

CUresult emu_cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned flags, CUdevice dev) {
  (void)params;
  (void)flags;
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  emu.current = context_new();
  *pctx = (CUcontext)emu.current;
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxDestroy(CUcontext ctx) {
  if (!context_live(ctx)) return emu_fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxDestroy: not a live context");
  context_free((EmuContext *)ctx);
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxSetCurrent(CUcontext ctx) {
  if (ctx && !context_live(ctx)) return emu_fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: not a live context");
  emu.current = (EmuContext *)ctx;
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxGetCurrent(CUcontext *pctx) {
  *pctx = (CUcontext)emu.current;
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxSynchronize(void) {
  return emu_need_context("cuCtxSynchronize");
}

CUresult emu_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  if (!emu.primary) emu.primary = context_new();
  emu.primary_refs++;
  *pctx = (CUcontext)emu.primary;
  return CUDA_SUCCESS;
}

CUresult emu_cuDevicePrimaryCtxRelease(CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  if (!emu.primary) return emu_fail(CUDA_ERROR_INVALID_CONTEXT, "primary context not retained");
  if (--emu.primary_refs == 0) context_free(emu.primary);
  return CUDA_SUCCESS;
}

/* Device memory. Allocations are 256-byte aligned like the driver's, and exactly as long
 * as asked, so ASan's redzone starts right after the last byte. */
CUresult emu_cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  CUresult r = emu_need_context("cuMemAlloc");
  if (r != CUDA_SUCCESS) return r;
  if (bytes == 0) return emu_fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes");
  void *mem = NULL;
  if (emu.allocated + bytes > device_memory() || posix_memalign(&mem, 256, bytes) != 0)
    return emu_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc of %zu bytes (%zu in use)", bytes, emu.allocated);
  EmuAlloc a = {mem, bytes};
  VEC_PUSH(emu.current->allocs, emu.current->n_allocs, emu.current->cap_allocs, a);
  emu.allocated += bytes;
  *p = (CUdeviceptr)(uintptr_t)mem;
  return CUDA_SUCCESS;
}

CUresult emu_cuMemFree(CUdeviceptr p) {
  CUresult r = emu_need_context("cuMemFree");
  if (r != CUDA_SUCCESS) return r;
  EmuContext *c = emu.current;
  for (int i = 0; i < c->n_allocs; i++)
    if ((CUdeviceptr)(uintptr_t)c->allocs[i].ptr == p) {
      free(c->allocs[i].ptr);
      emu.allocated -= c->allocs[i].size;
      c->allocs[i] = c->allocs[--c->n_allocs];
      return CUDA_SUCCESS;
    }
  return emu_fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree of 0x%llx, not the start of a live allocation",
                  (unsigned long long)p);
}

CUresult emu_cuMemGetInfo(size_t *free_bytes, size_t *total) {
  CUresult r = emu_need_context("cuMemGetInfo");
  if (r != CUDA_SUCCESS) return r;
  *total = device_memory();
  *free_bytes = *total - emu.allocated;
  return CUDA_SUCCESS;
}

bool emu_device_range(const void *p, size_t bytes) {
  if (!emu.current) return false;
  const char *q = p;
  for (int i = 0; i < emu.current->n_allocs; i++) {
    const EmuAlloc *a = &emu.current->allocs[i];
    if (q >= a->ptr && q <= a->ptr + a->size && bytes <= (size_t)(a->ptr + a->size - q)) return true;
  }
  return false;
}

/* The driver checks both ends of a copy against the allocations. */
static CUresult check_range(const char *call, const char *what, const void *p, size_t bytes) {
  CUresult r = emu_need_context(call);
  if (r != CUDA_SUCCESS || bytes == 0) return r;
  if (!emu_device_range(p, bytes))
    return emu_fail(CUDA_ERROR_INVALID_VALUE, "%s: %s [%p, +%zu bytes) is not inside one device allocation",
                    call, what, p, bytes);
  return CUDA_SUCCESS;
}

#define DPTR(d) ((void *)(uintptr_t)(d))

CUresult emu_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  CUresult r = check_range("cuMemcpyHtoD", "destination", DPTR(dst), n);
  if (r == CUDA_SUCCESS && n) memcpy(DPTR(dst), src, n);
  return r;
}

CUresult emu_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  CUresult r = check_range("cuMemcpyDtoH", "source", DPTR(src), n);
  if (r == CUDA_SUCCESS && n) memcpy(dst, DPTR(src), n);
  return r;
}

CUresult emu_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CUresult r = check_range("cuMemcpyDtoD", "source", DPTR(src), n);
  if (r == CUDA_SUCCESS) r = check_range("cuMemcpyDtoD", "destination", DPTR(dst), n);
  if (r == CUDA_SUCCESS && n) memmove(DPTR(dst), DPTR(src), n);
  return r;
}

CUresult emu_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  (void)s;
  return emu_cuMemcpyHtoD(dst, src, n);
}

CUresult emu_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  return emu_cuMemcpyDtoH(dst, src, n);
}

CUresult emu_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  return emu_cuMemcpyDtoD(dst, src, n);
}

CUresult emu_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  CUresult r = check_range("cuMemsetD8", "destination", DPTR(dst), n);
  if (r == CUDA_SUCCESS && n) memset(DPTR(dst), v, n);
  return r;
}

CUresult emu_cuMemsetD32(CUdeviceptr dst, unsigned v, size_t n) {
  if (dst % 4) return emu_fail(CUDA_ERROR_INVALID_VALUE, "cuMemsetD32: destination not 4-byte aligned");
  CUresult r = check_range("cuMemsetD32", "destination", DPTR(dst), n * 4);
  unsigned *d = DPTR(dst);
  if (r == CUDA_SUCCESS)
    for (size_t i = 0; i < n; i++) d[i] = v;
  return r;
}

CUresult emu_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  (void)s;
  return emu_cuMemsetD8(dst, v, n);
}

CUresult emu_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  (void)s;
  return emu_cuMemsetD32(dst, v, n);
}

/* Streams and events: work is done when it is issued, so there is nothing to wait for. */
static void *new_object(size_t size) {
  void *o = xcalloc(1, size);
  VEC_PUSH(emu.current->objects, emu.current->n_objects, emu.current->cap_objects, o);
  return o;
}

static CUresult free_object(const char *call, void *o) {
  CUresult r = emu_need_context(call);
  if (r != CUDA_SUCCESS) return r;
  EmuContext *c = emu.current;
  for (int i = 0; i < c->n_objects; i++)
    if (c->objects[i] == o) {
      free(o);
      c->objects[i] = c->objects[--c->n_objects];
      return CUDA_SUCCESS;
    }
  return emu_fail(CUDA_ERROR_INVALID_HANDLE, "%s: not a live handle of the current context", call);
}

CUresult emu_cuStreamCreate(CUstream *s, unsigned flags) {
  (void)flags;
  CUresult r = emu_need_context("cuStreamCreate");
  if (r == CUDA_SUCCESS) *s = new_object(sizeof(int));
  return r;
}

CUresult emu_cuStreamDestroy(CUstream s) {
  return free_object("cuStreamDestroy", s);
}

CUresult emu_cuStreamSynchronize(CUstream s) {
  (void)s;
  return emu_need_context("cuStreamSynchronize");
}

CUresult emu_cuEventCreate(CUevent *e, unsigned flags) {
  (void)flags;
  CUresult r = emu_need_context("cuEventCreate");
  if (r == CUDA_SUCCESS) *e = new_object(sizeof(EmuEvent));
  return r;
}

CUresult emu_cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  CUresult r = emu_need_context("cuEventRecord");
  if (r != CUDA_SUCCESS) return r;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  EmuEvent *ev = (EmuEvent *)e;
  ev->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
  ev->recorded = true;
  return CUDA_SUCCESS;
}

CUresult emu_cuEventSynchronize(CUevent e) {
  (void)e;
  return emu_need_context("cuEventSynchronize");
}

CUresult emu_cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  CUresult r = emu_need_context("cuEventElapsedTime");
  if (r != CUDA_SUCCESS) return r;
  EmuEvent *a = (EmuEvent *)start, *b = (EmuEvent *)end;
  if (!a->recorded || !b->recorded)
    return emu_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event was never recorded");
  *ms = (float)(b->ms - a->ms);
  return CUDA_SUCCESS;
}

CUresult emu_cuEventDestroy(CUevent e) {
  return free_object("cuEventDestroy", e);
}

/* Modules belong to the current context (emu_module.c loads them). */
void emu_context_add_module(EmuModule *m) {
  VEC_PUSH(emu.current->modules, emu.current->n_modules, emu.current->cap_modules, m);
}

bool emu_context_remove_module(EmuModule *m) {
  EmuContext *c = emu.current;
  for (int i = 0; c && i < c->n_modules; i++)
    if (c->modules[i] == m) {
      c->modules[i] = c->modules[--c->n_modules];
      return true;
    }
  return false;
}

void emu_shutdown(void) {
  while (emu.n_contexts > 0) context_free(emu.contexts[emu.n_contexts - 1]);
  emu_launch_release();
  emu.primary_refs = 0;
  emu.initialized = false;
  detail[0] = 0;
}
