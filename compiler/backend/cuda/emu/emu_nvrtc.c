/* emu_nvrtc.c: emulated NVRTC. Compiling checks the source with the host compiler against
 * cellc_emu_kernel.h (errors surface at this step, with the compiler's messages in the
 * program log) and yields the emulator's image, which emulated cuModuleLoadData takes. */
#include <string.h>

#include "support.h"
#include "emu.h"

typedef struct EmuProgram {
  EmuImage img;
  char *log;
  char *image; /* packed, after a successful compile */
  size_t image_size;
} EmuProgram;

static const char *const result_names[] = {
    "NVRTC_SUCCESS", "NVRTC_ERROR_OUT_OF_MEMORY", "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
    "NVRTC_ERROR_INVALID_INPUT", "NVRTC_ERROR_INVALID_PROGRAM", "NVRTC_ERROR_INVALID_OPTION",
    "NVRTC_ERROR_COMPILATION", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
    "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
    "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
    "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", "NVRTC_ERROR_INTERNAL_ERROR"};

static nvrtcResult fail(nvrtcResult r, const char *what) {
  emu_set_detail("%s", what);
  return r;
}

nvrtcResult emu_nvrtcVersion(int *major, int *minor) {
  *major = CUDA_VERSION / 1000;
  *minor = CUDA_VERSION % 1000 / 10;
  return NVRTC_SUCCESS;
}

const char *emu_nvrtcGetErrorString(nvrtcResult r) {
  size_t i = (size_t)r;
  return i < sizeof result_names / sizeof *result_names ? result_names[i] : "NVRTC_ERROR_UNKNOWN";
}

nvrtcResult emu_nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                   int n_headers, const char *const *headers,
                                   const char *const *include_names) {
  (void)name;
  if (!prog || !src || n_headers < 0 || (n_headers > 0 && (!headers || !include_names)))
    return fail(NVRTC_ERROR_INVALID_INPUT, "nvrtcCreateProgram: NULL program, source or headers");
  EmuProgram *p = xcalloc(1, sizeof *p);
  p->img.source = xstrdup(src);
  p->img.n_headers = n_headers;
  p->img.headers = xcalloc((size_t)n_headers + 1, sizeof(char *));
  p->img.header_names = xcalloc((size_t)n_headers + 1, sizeof(char *));
  for (int i = 0; i < n_headers; i++) {
    p->img.headers[i] = xstrdup(headers[i]);
    p->img.header_names[i] = xstrdup(include_names[i]);
  }
  *prog = (nvrtcProgram)p;
  return NVRTC_SUCCESS;
}

nvrtcResult emu_nvrtcDestroyProgram(nvrtcProgram *prog) {
  if (!prog || !*prog) return fail(NVRTC_ERROR_INVALID_PROGRAM, "nvrtcDestroyProgram: NULL program");
  EmuProgram *p = (EmuProgram *)*prog;
  emu_image_free(&p->img);
  free(p->log);
  free(p->image);
  free(p);
  *prog = NULL;
  return NVRTC_SUCCESS;
}

/* Keep the options that change the source's meaning on the host: -D, -U, -I (joined or
 * split). The rest (architecture, fast math, line info, the C++ dialect) do not apply. */
static void keep_options(EmuProgram *p, int n, const char *const *opts) {
  int cap = 0;
  for (int i = 0; i < n; i++) {
    const char *o = opts[i];
    bool pp = (o[0] == '-' && (o[1] == 'D' || o[1] == 'U' || o[1] == 'I')) ||
              !strncmp(o, "--define-macro=", 15) || !strncmp(o, "--include-path=", 15);
    if (!pp) continue;
    char *kept;
    if (!strncmp(o, "--define-macro=", 15)) kept = xasprintf("-D%s", o + 15);
    else if (!strncmp(o, "--include-path=", 15)) kept = xasprintf("-I%s", o + 15);
    else if (o[2] == 0 && i + 1 < n) kept = xasprintf("%s%s", o, opts[++i]);
    else kept = xstrdup(o);
    VEC_PUSH(p->img.options, p->img.n_options, cap, kept);
  }
}

nvrtcResult emu_nvrtcCompileProgram(nvrtcProgram prog, int n, const char *const *opts) {
  EmuProgram *p = (EmuProgram *)prog;
  if (!p) return fail(NVRTC_ERROR_INVALID_PROGRAM, "nvrtcCompileProgram: NULL program");
  free(p->log);
  free(p->image);
  p->log = NULL;
  p->image = NULL;
  for (int i = 0; i < p->img.n_options; i++) free(p->img.options[i]);
  free(p->img.options);
  p->img.options = NULL;
  p->img.n_options = 0;
  keep_options(p, n, opts);
  if (strstr(p->img.source, "extern __shared__")) {
    p->log = xstrdup("cuda-emu: `extern __shared__` is not C++ on the host: declare dynamic "
                     "shared memory with CELLC_DYNAMIC_SHARED(type, name) from cellc_prelude.h\n");
    return fail(NVRTC_ERROR_COMPILATION, "extern __shared__ in the kernel source (see the program log)");
  }
  if (emu_host_compile(&p->img, NULL, NULL, &p->log) != 0)
    return fail(NVRTC_ERROR_COMPILATION, "the host compiler rejected the kernel source (see the program log)");
  p->image = emu_image_pack(&p->img, &p->image_size);
  return NVRTC_SUCCESS;
}

nvrtcResult emu_nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size) {
  EmuProgram *p = (EmuProgram *)prog;
  if (!p) return fail(NVRTC_ERROR_INVALID_PROGRAM, "nvrtcGetProgramLogSize: NULL program");
  *size = (p->log ? strlen(p->log) : 0) + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult emu_nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
  EmuProgram *p = (EmuProgram *)prog;
  if (!p) return fail(NVRTC_ERROR_INVALID_PROGRAM, "nvrtcGetProgramLog: NULL program");
  strcpy(log, p->log ? p->log : "");
  return NVRTC_SUCCESS;
}

/* The image stands for both PTX and cubin; its size counts the NUL, as PTX's does. */
nvrtcResult emu_nvrtcGetPTXSize(nvrtcProgram prog, size_t *size) {
  EmuProgram *p = (EmuProgram *)prog;
  if (!p || !p->image) return fail(NVRTC_ERROR_INVALID_PROGRAM, "nvrtcGetPTXSize: not compiled");
  *size = p->image_size + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult emu_nvrtcGetPTX(nvrtcProgram prog, char *ptx) {
  EmuProgram *p = (EmuProgram *)prog;
  if (!p || !p->image) return fail(NVRTC_ERROR_INVALID_PROGRAM, "nvrtcGetPTX: not compiled");
  memcpy(ptx, p->image, p->image_size + 1);
  return NVRTC_SUCCESS;
}

nvrtcResult emu_nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size) {
  return emu_nvrtcGetPTXSize(prog, size);
}

nvrtcResult emu_nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) {
  return emu_nvrtcGetPTX(prog, cubin);
}
