/* cuda_compile.c: kernel source -> module image through the table's NVRTC (real or
 * emulated), with a disk cache keyed by a hash of everything that decides the image. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "support.h"
#include "cuda_api.h"
#include "cuda_internal.h"

#define CACHE_MAGIC "CELLC-CUDA-CACHE 1\n"

/* mkdir that accepts an existing directory. */
static int make_dir(const char *path) {
  return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

char *cuda_cache_dir(void) {
  const char *xdg = getenv("XDG_CACHE_HOME");
  char *base;
  if (xdg && xdg[0] == '/') {
    base = xstrdup(xdg);
  } else {
    const char *home = getenv("HOME");
    if (!home || home[0] != '/') return NULL;
    base = xasprintf("%s/.cache", home);
  }
  char *dir = xasprintf("%s/cellc", base);
  int ok = make_dir(base) == 0 && make_dir(dir) == 0;
  free(base);
  if (!ok) {
    free(dir);
    return NULL;
  }
  return dir;
}

/* Everything the image depends on: the compiler (NVRTC's version, or the emulator and its
 * kernel header), the kind, the arch, the options, the prelude and the source. */
static uint64_t cache_key(const CudaApi *api, const char *source, const char *arch,
                          CudaImageKind kind, const char *const *options, int n_options) {
  uint64_t h = fnv1a_str(FNV1A_INIT, CACHE_MAGIC);
  if (api->emulated) {
    h = fnv1a_str(h, "cuda-emu");
    h = fnv1a_str(h, cellc_emu_kernel_h);
  } else {
    int v[2] = {0, 0};
    api->nvrtcVersion(&v[0], &v[1]);
    h = fnv1a(h, v, sizeof v);
  }
  int k = (int)kind;
  h = fnv1a(h, &k, sizeof k);
  h = fnv1a_str(h, arch);
  for (int i = 0; i < n_options; i++) h = fnv1a_str(h, options[i]);
  h = fnv1a_str(h, cellc_cuda_prelude_h);
  return fnv1a_str(h, source);
}

static char *cache_path(const char *dir, uint64_t key, CudaImageKind kind) {
  return xasprintf("%s/%016llx.%s", dir, (unsigned long long)key,
                   kind == CUDA_IMAGE_PTX ? "ptx" : "cubin");
}

/* A cache entry: magic, "key checksum size\n", then the image. Anything else is ignored. */
static bool cache_read(const char *path, uint64_t key, CudaImage *out) {
  size_t len;
  char *buf = read_file(path, &len);
  if (!buf) return false;
  size_t mlen = strlen(CACHE_MAGIC);
  unsigned long long k = 0, sum = 0;
  size_t size = 0;
  int used = 0;
  bool ok = len > mlen && memcmp(buf, CACHE_MAGIC, mlen) == 0 &&
            sscanf(buf + mlen, "%16llx %16llx %zu\n%n", &k, &sum, &size, &used) == 3 &&
            used > 0 && k == key && mlen + (size_t)used + size == len &&
            fnv1a(FNV1A_INIT, buf + mlen + used, size) == sum;
  if (ok) {
    out->data = xmalloc(size + 1);
    memcpy(out->data, buf + mlen + used, size);
    out->data[size] = 0;
    out->size = size;
    out->from_cache = true;
  }
  free(buf);
  return ok;
}

static void cache_write(const char *path, uint64_t key, const CudaImage *img) {
  char *head = xasprintf("%s%016llx %016llx %zu\n", CACHE_MAGIC, (unsigned long long)key,
                         (unsigned long long)fnv1a(FNV1A_INIT, img->data, img->size),
                         img->size);
  size_t hlen = strlen(head);
  char *buf = xmalloc(hlen + img->size);
  memcpy(buf, head, hlen);
  memcpy(buf + hlen, img->data, img->size);
  fsout_write_file(path, buf, hlen + img->size, NULL, 0); /* a cache that cannot be written is no error */
  free(buf);
  free(head);
}

/* The program's log, NULL when empty. */
static char *program_log(const CudaApi *api, nvrtcProgram prog) {
  size_t n = 0;
  if (api->nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return NULL;
  char *log = xcalloc(n + 1, 1);
  if (api->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS || !log[0]) {
    free(log);
    return NULL;
  }
  return log;
}

/* Fetch the compiled image of the wanted kind from a compiled program. */
static int program_image(const CudaApi *api, nvrtcProgram prog, CudaImage *out, char *err,
                         size_t errlen) {
  size_t n = 0;
  bool ptx = out->kind == CUDA_IMAGE_PTX;
  if ((ptx ? CUDA_NVRTC(api, err, errlen, nvrtcGetPTXSize, prog, &n)
           : CUDA_NVRTC(api, err, errlen, nvrtcGetCUBINSize, prog, &n)) != 0)
    return -1;
  out->data = xcalloc(n + 1, 1);
  if ((ptx ? CUDA_NVRTC(api, err, errlen, nvrtcGetPTX, prog, out->data)
           : CUDA_NVRTC(api, err, errlen, nvrtcGetCUBIN, prog, out->data)) != 0)
    return -1;
  out->size = ptx ? strlen(out->data) : n; /* PTX size counts its NUL */
  return 0;
}

static int run_nvrtc(const CudaApi *api, const char *source, const char *arch,
                     const char *const *options, int n_options, CudaImage *out, char *err,
                     size_t errlen) {
  const char *headers[] = {cellc_cuda_prelude_h};
  const char *names[] = {CUDA_PRELUDE_NAME};
  nvrtcProgram prog = NULL;
  if (CUDA_NVRTC(api, err, errlen, nvrtcCreateProgram, &prog, source, "cellc_kernels.cu", 1,
                 headers, names) != 0)
    return -1;
  /* PTX alone needs only the virtual architecture: compute_80 for sm_80. */
  char *arch_opt = out->kind == CUDA_IMAGE_PTX && strncmp(arch, "sm_", 3) == 0
                       ? xasprintf("--gpu-architecture=compute_%s", arch + 3)
                       : xasprintf("--gpu-architecture=%s", arch);
  const char **opts = xcalloc((size_t)n_options + 1, sizeof *opts);
  opts[0] = arch_opt;
  for (int i = 0; i < n_options; i++) opts[i + 1] = options[i];
  nvrtcResult r = api->nvrtcCompileProgram(prog, n_options + 1, opts);
  out->log = program_log(api, prog);
  int rc = cuda_nvrtc_check(api, r, "nvrtcCompileProgram", err, errlen);
  if (rc != 0 && out->log) {
    size_t used = strlen(err);
    snprintf(err + used, errlen - used, "\n%s", out->log);
  }
  if (rc == 0) rc = program_image(api, prog, out, err, errlen);
  api->nvrtcDestroyProgram(&prog);
  free(opts);
  free(arch_opt);
  return rc;
}

int cuda_compile(const CudaApi *api, const char *source, const char *arch, CudaImageKind kind,
                 const char *const *options, int n_options, CudaImage *out, char *err,
                 size_t errlen) {
  memset(out, 0, sizeof *out);
  out->kind = kind;
  uint64_t key = cache_key(api, source, arch, kind, options, n_options);
  char *dir = cuda_cache_dir();
  char *path = dir ? cache_path(dir, key, kind) : NULL;
  free(dir);
  if (path && cache_read(path, key, out)) {
    free(path);
    return 0;
  }
  int rc = run_nvrtc(api, source, arch, options, n_options, out, err, errlen);
  if (rc == 0 && path) cache_write(path, key, out);
  if (rc != 0) { /* the log stays for the caller */
    free(out->data);
    out->data = NULL;
    out->size = 0;
  }
  free(path);
  return rc;
}

void cuda_image_free(CudaImage *img) {
  free(img->data);
  free(img->log);
  memset(img, 0, sizeof *img);
}
