/* emu.h: the parts of cuda-emu (driver, NVRTC, modules, launches, cuBLAS) as seen by each
 * other and by cuda_emu.c, which puts them in the CudaApi table. One host thread drives
 * the emulator at a time. */
#ifndef CELLC_CUDA_EMU_H
#define CELLC_CUDA_EMU_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_api.h"
#define CELLC_EMU_ABI_ONLY
#include "cellc_emu_kernel.h"

/* The emulated device, modelled on an sm_90 part. */
#define EMU_CC_MAJOR 9
#define EMU_CC_MINOR 0
#define EMU_SM_COUNT 132
#define EMU_WARP 32
#define EMU_MAX_THREADS 1024
#define EMU_SHARED_PER_BLOCK (48 * 1024)
#define EMU_SHARED_OPTIN (227 * 1024)

/* Every failure of an emulated call sets a detail ("kernel 'f': ..."), which
 * cuda_cu_check appends to its message; emu_fail returns the code it is given. */
void emu_set_detail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *emu_detail(void);
CUresult emu_fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Driver state (emu_driver.c). */
bool emu_device_range(const void *p, size_t bytes); /* inside one live allocation */
CUresult emu_need_context(const char *call);        /* CUDA_SUCCESS when one is current */
void emu_shutdown(void);                             /* free everything still held */
void emu_launch_release(void);                       /* the fiber stacks */

/* A loaded module and its kernels (emu_module.c). CUfunction points to an EmuKernel. */
typedef struct EmuModule EmuModule;
typedef struct EmuKernel {
  char *name;
  void (*entry)(void **params); /* the trampoline: unpacks kernelParams, calls the kernel */
  EmuModule *module;
  int n_params;
  int max_dynamic_shared;       /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
} EmuKernel;
struct EmuModule {
  void *so;
  CellcEmuCtx *kctx;
  void (*shared_range)(char **begin, unsigned long *size);
  EmuKernel *kernels;
  int n_kernels;
};
void emu_module_free(EmuModule *m);
void emu_context_add_module(EmuModule *m);     /* owned by the current context */
bool emu_context_remove_module(EmuModule *m); /* false when not the current context's */

/* Kernel declarations found in a source (emu_parse.c): extern "C" __global__ definitions
 * with their parameter types, as text. */
typedef struct EmuKernelDecl {
  char *name;
  char **types;
  int n_params;
} EmuKernelDecl;
int emu_parse_kernels(const char *src, EmuKernelDecl **out, int *n_out, char *err, size_t errlen);
void emu_kernel_decls_free(EmuKernelDecl *d, int n);
/* "extern \"C\" void cellc_emu_launch_<name>(void **p) { <name>(*(T0 *)p[0], ...); }" */
char *emu_trampolines(const EmuKernelDecl *d, int n);

/* The emulator's module image, what emulated NVRTC returns as "PTX" (emu_image.c). */
typedef struct EmuImage {
  char *source;
  char **header_names, **headers;
  int n_headers;
  char **options; /* -D, -U and -I options kept for the host compiler */
  int n_options;
} EmuImage;
char *emu_image_pack(const EmuImage *img, size_t *size);
int emu_image_unpack(const char *data, EmuImage *img); /* 0, or -1 when not an emulator image */
void emu_image_free(EmuImage *img);
/* Compile an image (plus extra source) with the host C++ compiler against
 * cellc_emu_kernel.h: to a shared object at so_path, or only checked when so_path is NULL.
 * 0, or -1 with the compiler's messages in *log (malloc'd, possibly NULL on success). */
int emu_host_compile(const EmuImage *img, const char *extra, const char *so_path, char **log);
/* The host compiler and flags, for cache keys. */
const char *emu_host_flags(void);

/* The calls themselves, one per field of CudaApi they fill. */
#define EMU_DECLARE(name) __typeof__(name) emu_##name;
CUDA_DRIVER_CALLS(EMU_DECLARE)
CUDA_NVRTC_CALLS(EMU_DECLARE)
CUDA_CUBLAS_CALLS(EMU_DECLARE)
#undef EMU_DECLARE

#endif
