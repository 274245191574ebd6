/* emu_image.c: the emulator's module image (what emulated NVRTC hands out as "PTX": the
 * source, its in-memory headers and preprocessor options) and its compilation with the
 * host C++ compiler against cellc_emu_kernel.h. */
#include <stdio.h>
#include <string.h>

#include "support.h"
#include "cuda_internal.h"
#include "emu.h"

#define IMAGE_MAGIC "//CELLC-EMU-IMAGE 1\n"

/* Records: "@source LEN\n" BYTES "\n", "@header NAMELEN LEN\n" NAME BYTES "\n",
 * "@option LEN\n" BYTES "\n", then "@end\n". */
static void put(char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
  while (*n + len + 1 > *cap) *buf = xrealloc(*buf, *cap = *cap ? *cap * 2 : 4096);
  memcpy(*buf + *n, s, len);
  *n += len;
  (*buf)[*n] = 0;
}

static void put_record(char **buf, size_t *n, size_t *cap, const char *tag, const char *name,
                       const char *body) {
  char head[128];
  if (name)
    snprintf(head, sizeof head, "@%s %zu %zu\n", tag, strlen(name), strlen(body));
  else
    snprintf(head, sizeof head, "@%s %zu\n", tag, strlen(body));
  put(buf, n, cap, head, strlen(head));
  if (name) put(buf, n, cap, name, strlen(name));
  put(buf, n, cap, body, strlen(body));
  put(buf, n, cap, "\n", 1);
}

char *emu_image_pack(const EmuImage *img, size_t *size) {
  char *buf = NULL;
  size_t n = 0, cap = 0;
  put(&buf, &n, &cap, IMAGE_MAGIC, strlen(IMAGE_MAGIC));
  put_record(&buf, &n, &cap, "source", NULL, img->source);
  for (int i = 0; i < img->n_headers; i++)
    put_record(&buf, &n, &cap, "header", img->header_names[i], img->headers[i]);
  for (int i = 0; i < img->n_options; i++) put_record(&buf, &n, &cap, "option", NULL, img->options[i]);
  put(&buf, &n, &cap, "@end\n", 5);
  *size = n;
  return buf;
}

static char *take(const char **p, size_t len) {
  char *s = xmalloc(len + 1);
  memcpy(s, *p, len);
  s[len] = 0;
  *p += len;
  return s;
}

int emu_image_unpack(const char *data, EmuImage *img) {
  memset(img, 0, sizeof *img);
  if (strncmp(data, IMAGE_MAGIC, strlen(IMAGE_MAGIC)) != 0) return -1;
  const char *p = data + strlen(IMAGE_MAGIC);
  int cap_h = 0, cap_o = 0;
  for (;;) {
    size_t a = 0, b = 0;
    int used = 0;
    if (strncmp(p, "@end\n", 5) == 0) break;
    if (sscanf(p, "@source %zu\n%n", &a, &used) == 1 && used && !img->source) {
      p += used;
      if (strnlen(p, a) < a) goto bad;
      img->source = take(&p, a);
    } else if (sscanf(p, "@header %zu %zu\n%n", &a, &b, &used) == 2 && used) {
      p += used;
      if (strnlen(p, a + b) < a + b) goto bad;
      char *name = take(&p, a), *body = take(&p, b);
      int n = img->n_headers, cap = cap_h;
      VEC_PUSH(img->header_names, n, cap, name);
      VEC_PUSH(img->headers, img->n_headers, cap_h, body);
    } else if (sscanf(p, "@option %zu\n%n", &a, &used) == 1 && used) {
      p += used;
      if (strnlen(p, a) < a) goto bad;
      char *opt = take(&p, a);
      VEC_PUSH(img->options, img->n_options, cap_o, opt);
    } else {
      goto bad;
    }
    if (*p++ != '\n') goto bad;
  }
  if (img->source) return 0;
bad:
  emu_image_free(img);
  return -1;
}

void emu_image_free(EmuImage *img) {
  free(img->source);
  for (int i = 0; i < img->n_headers; i++) free(img->header_names[i]), free(img->headers[i]);
  for (int i = 0; i < img->n_options; i++) free(img->options[i]);
  free(img->header_names);
  free(img->headers);
  free(img->options);
  memset(img, 0, sizeof *img);
}

/* The host compiler: Tuning.emu_cxx (CELLC_EMU_CXX; default gcc, with -x c++: C++ without libstdc++, which
 * kernels do not need and which would leak its startup pool on every dlclose), C++17, and
 * the sanitizers of this build so ASan sees kernels overrun device memory.
 * Tuning.emu_cflags (CELLC_EMU_CFLAGS) adds flags (say -O0 -g to debug a kernel). */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_OPT "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", \
                "-fno-omit-frame-pointer"
#define EMU_OPT_TEXT "-O1 -fsanitize=address,undefined"
#else
#define EMU_OPT "-O2"
#define EMU_OPT_TEXT "-O2"
#endif

static const char *host_cxx(void) {
  const char *cxx = tuning()->emu_cxx;
  return cxx && *cxx ? cxx : "gcc";
}

const char *emu_host_flags(void) {
  static char flags[1024];
  const char *extra = tuning()->emu_cflags;
  snprintf(flags, sizeof flags, "%s -x c++ -std=c++17 -fPIC -fno-exceptions -fno-threadsafe-statics %s %s", host_cxx(),
           EMU_OPT_TEXT, extra ? extra : "");
  return flags;
}

/* argv for one compile; the strings it owns are listed in owned. */
typedef struct Argv {
  char **v;
  int n, cap;
  char **owned;
  int n_owned, cap_owned;
} Argv;

static void arg(Argv *a, const char *s) {
  VEC_PUSH(a->v, a->n, a->cap, (char *)s);
}

static void arg_own(Argv *a, char *s) {
  arg(a, s);
  VEC_PUSH(a->owned, a->n_owned, a->cap_owned, s);
}

static void build_argv(Argv *a, const EmuImage *img, const char *dir, const char *src,
                       const char *so_path) {
  arg(a, host_cxx());
  const char *fixed[] = {"-x", "c++", "-std=c++17", "-fPIC", "-fno-exceptions", "-fno-threadsafe-statics", EMU_OPT};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) arg(a, fixed[i]);
  char *extra = tuning()->emu_cflags ? xstrdup(tuning()->emu_cflags) : NULL;
  if (extra) {
    VEC_PUSH(a->owned, a->n_owned, a->cap_owned, extra);
    for (char *save, *t = strtok_r(extra, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) arg(a, t);
  }
  arg(a, "-include");
  arg_own(a, xasprintf("%s/cellc_emu_kernel.h", dir));
  arg_own(a, xasprintf("-I%s", dir));
  for (int i = 0; i < img->n_options; i++) arg(a, img->options[i]);
  if (so_path) {
    arg(a, "-shared");
    arg(a, "-o");
    arg(a, so_path);
  } else {
    arg(a, "-fsyntax-only");
  }
  arg(a, src);
  arg(a, NULL);
}

/* The compiler's messages without the temporary directory in every path. */
static char *strip_dir(const char *log, const char *dir) {
  char *prefix = xasprintf("%s/", dir);
  size_t plen = strlen(prefix), n = 0;
  char *out = xmalloc(strlen(log) + 1);
  for (const char *p = log; *p;) {
    if (strncmp(p, prefix, plen) == 0) {
      p += plen;
      continue;
    }
    out[n++] = *p++;
  }
  out[n] = 0;
  free(prefix);
  return out;
}

static int write_inputs(const EmuImage *img, const char *dir, const char *src, const char *extra,
                        char **log) {
  char *hdr = xasprintf("%s/cellc_emu_kernel.h", dir);
  int rc = fsout_write_file(hdr, cellc_emu_kernel_h, strlen(cellc_emu_kernel_h), NULL, 0);
  free(hdr);
  for (int i = 0; rc == 0 && i < img->n_headers; i++) {
    const char *name = img->header_names[i];
    if (strchr(name, '/') || name[0] == '.') {
      *log = xasprintf("cuda-emu: in-memory header \"%s\": only plain file names are supported", name);
      return -1;
    }
    char *path = xasprintf("%s/%s", dir, name);
    rc = fsout_write_file(path, img->headers[i], strlen(img->headers[i]), NULL, 0);
    free(path);
  }
  char *text = xasprintf("%s\n%s", img->source, extra ? extra : "");
  if (rc == 0) rc = fsout_write_file(src, text, strlen(text), NULL, 0);
  free(text);
  if (rc != 0) *log = xasprintf("cuda-emu: cannot write the kernel source under %s", dir);
  return rc;
}

int emu_host_compile(const EmuImage *img, const char *extra, const char *so_path, char **log) {
  *log = NULL;
  char *dir = cuda_make_temp_dir("cellc-emu");
  if (!dir) {
    *log = xstrdup("cuda-emu: cannot make a temporary directory");
    return -1;
  }
  char *src = xasprintf("%s/cellc_kernels.cu", dir);
  int rc = write_inputs(img, dir, src, extra, log);
  if (rc == 0) {
    Argv a = {0};
    build_argv(&a, img, dir, src, so_path);
    char *out;
    int status = cuda_run_tool(a.v, &out);
    *log = out && *out ? strip_dir(out, dir) : NULL;
    free(out);
    if (status != 0) {
      rc = -1;
      if (!*log) *log = xasprintf("cuda-emu: %s failed (exit %d)", host_cxx(), status);
    }
    for (int i = 0; i < a.n_owned; i++) free(a.owned[i]);
    free(a.owned);
    free(a.v);
  }
  free(src);
  cuda_remove_dir(dir);
  free(dir);
  return rc;
}
