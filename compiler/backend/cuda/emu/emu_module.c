/* emu_module.c: emulated modules. Loading an image compiles its source with the host C++
 * compiler into a shared object (cached on disk by a hash of the image and the compiler
 * flags), with a trampoline per kernel, and dlopens it; kernels are looked up by name. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support.h"
#include "cuda_internal.h"
#include "emu.h"

/* Compile image + trampolines to path (atomically: a temporary name, then a rename). */
static CUresult compile_so(const EmuImage *img, const char *tramp, const char *path) {
  char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
  char *log;
  int rc = emu_host_compile(img, tramp, tmp, &log);
  if (rc == 0 && rename(tmp, path) != 0) rc = -1;
  CUresult r = CUDA_SUCCESS;
  if (rc != 0) {
    unlink(tmp);
    r = emu_fail(CUDA_ERROR_INVALID_SOURCE, "cuda-emu: compiling the kernels for the host failed:\n%s",
                 log ? log : "(no message)");
  }
  free(log);
  free(tmp);
  return r;
}

/* Where the shared object goes: the cache directory, else a private temporary one
 * (*tmpdir, removed by the caller once the object is open). */
static char *so_path(const char *image, const char *tramp, char **tmpdir) {
  uint64_t h = fnv1a_str(FNV1A_INIT, "cuda-emu module 1");
  h = fnv1a_str(h, image);
  h = fnv1a_str(h, tramp);
  h = fnv1a_str(h, emu_host_flags());
  h = fnv1a_str(h, cellc_emu_kernel_h);
  *tmpdir = NULL;
  char *dir = cuda_cache_dir();
  if (!dir) {
    *tmpdir = dir = cuda_make_temp_dir("cellc-emu-so");
    if (!dir) return NULL;
    dir = xstrdup(dir);
  }
  char *path = xasprintf("%s/emu-%016llx.so", dir, (unsigned long long)h);
  free(dir);
  return path;
}

/* dlopen the module's object, compiling it when it is not there or does not load. */
static CUresult open_so(const EmuImage *img, const char *image, const char *tramp, void **so) {
  char *tmpdir;
  char *path = so_path(image, tramp, &tmpdir);
  if (!path) return emu_fail(CUDA_ERROR_OPERATING_SYSTEM, "cuda-emu: no directory for the kernel objects");
  CUresult r = CUDA_SUCCESS;
  *so = access(path, R_OK) == 0 ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!*so) {
    r = compile_so(img, tramp, path);
    if (r == CUDA_SUCCESS && !(*so = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
      r = emu_fail(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "cuda-emu: %s", dlerror());
  }
  if (tmpdir) {
    cuda_remove_dir(tmpdir);
    free(tmpdir);
  }
  free(path);
  return r;
}

/* The kernels of a loaded object: each declaration's trampoline. */
static CUresult bind_kernels(EmuModule *m, const EmuKernelDecl *d, int n) {
  m->kctx = dlsym(m->so, "cellc_emu_ctx");
  m->shared_range = (void (*)(char **, unsigned long *))dlsym(m->so, "cellc_emu_shared_range");
  if (!m->kctx || !m->shared_range || m->kctx->abi_version != CELLC_EMU_ABI_VERSION)
    return emu_fail(CUDA_ERROR_INVALID_IMAGE, "cuda-emu: the kernel object lacks cellc_emu_kernel.h "
                    "(or another version of it)");
  m->kernels = xcalloc((size_t)n + 1, sizeof *m->kernels);
  for (int i = 0; i < n; i++) {
    char *sym = xasprintf("cellc_emu_launch_%s", d[i].name);
    EmuKernel *k = &m->kernels[m->n_kernels++];
    k->name = xstrdup(d[i].name);
    k->module = m;
    k->n_params = d[i].n_params;
    k->entry = (void (*)(void **))dlsym(m->so, sym);
    free(sym);
    if (!k->entry) return emu_fail(CUDA_ERROR_NOT_FOUND, "cuda-emu: no trampoline for kernel '%s'", d[i].name);
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuModuleLoadData(CUmodule *module, const void *image) {
  CUresult r = emu_need_context("cuModuleLoadData");
  if (r != CUDA_SUCCESS) return r;
  EmuImage img;
  if (!image || emu_image_unpack(image, &img) != 0)
    return emu_fail(CUDA_ERROR_INVALID_IMAGE, "cuda-emu: not an emulator image (PTX or a cubin from "
                    "the real NVRTC cannot run on the emulator)");
  EmuKernelDecl *decls = NULL;
  int n = 0;
  char err[1024];
  if (emu_parse_kernels(img.source, &decls, &n, err, sizeof err) != 0) {
    emu_image_free(&img);
    return emu_fail(CUDA_ERROR_NOT_SUPPORTED, "cuda-emu: %s", err);
  }
  char *tramp = emu_trampolines(decls, n);
  EmuModule *m = xcalloc(1, sizeof *m);
  r = open_so(&img, image, tramp, &m->so);
  if (r == CUDA_SUCCESS) r = bind_kernels(m, decls, n);
  emu_kernel_decls_free(decls, n);
  free(tramp);
  emu_image_free(&img);
  if (r != CUDA_SUCCESS) {
    emu_module_free(m);
    return r;
  }
  emu_context_add_module(m);
  *module = (CUmodule)m;
  return CUDA_SUCCESS;
}

void emu_module_free(EmuModule *m) {
  for (int i = 0; i < m->n_kernels; i++) free(m->kernels[i].name);
  free(m->kernels);
  if (m->so) dlclose(m->so);
  free(m);
}

CUresult emu_cuModuleUnload(CUmodule module) {
  CUresult r = emu_need_context("cuModuleUnload");
  if (r != CUDA_SUCCESS) return r;
  EmuModule *m = (EmuModule *)module;
  if (!m || !emu_context_remove_module(m))
    return emu_fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload: not a module of the current context");
  emu_module_free(m);
  return CUDA_SUCCESS;
}

CUresult emu_cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name) {
  CUresult r = emu_need_context("cuModuleGetFunction");
  if (r != CUDA_SUCCESS) return r;
  EmuModule *m = (EmuModule *)module;
  if (!m) return emu_fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction: NULL module");
  for (int i = 0; i < m->n_kernels; i++)
    if (strcmp(m->kernels[i].name, name) == 0) {
      *f = (CUfunction)&m->kernels[i];
      return CUDA_SUCCESS;
    }
  return emu_fail(CUDA_ERROR_NOT_FOUND, "no extern \"C\" __global__ kernel '%s' in the module", name);
}

static int static_shared(const EmuKernel *k) {
  char *begin;
  unsigned long size;
  k->module->shared_range(&begin, &size);
  return (int)size;
}

CUresult emu_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  const EmuKernel *k = (const EmuKernel *)f;
  if (!k) return emu_fail(CUDA_ERROR_INVALID_HANDLE, "cuFuncGetAttribute: NULL function");
  switch (a) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = EMU_MAX_THREADS; break;
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = static_shared(k); break;
  case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
  case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 0; break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
  case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = EMU_CC_MAJOR * 10 + EMU_CC_MINOR; break;
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = EMU_CC_MAJOR * 10 + EMU_CC_MINOR; break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    *v = k->max_dynamic_shared ? k->max_dynamic_shared : EMU_SHARED_PER_BLOCK - static_shared(k);
    break;
  default:
    return emu_fail(CUDA_ERROR_NOT_SUPPORTED, "cuda-emu does not model function attribute %d", (int)a);
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  EmuKernel *k = (EmuKernel *)f;
  if (!k) return emu_fail(CUDA_ERROR_INVALID_HANDLE, "cuFuncSetAttribute: NULL function");
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (v < 0 || v + static_shared(k) > EMU_SHARED_OPTIN)
      return emu_fail(CUDA_ERROR_INVALID_VALUE, "kernel '%s': %d bytes of dynamic shared memory "
                      "exceed the device's %d", k->name, v, EMU_SHARED_OPTIN);
    k->max_dynamic_shared = v;
    return CUDA_SUCCESS;
  }
  if (a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) return CUDA_SUCCESS;
  return emu_fail(CUDA_ERROR_NOT_SUPPORTED, "cuda-emu does not model function attribute %d", (int)a);
}
