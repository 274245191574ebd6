/* base.c: allocation, arenas, file reading and the internal-error exit. */
#include "base.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <stddef.h>
#include <string.h>

_Noreturn void base_fail(const char *file, int line, const char *what) {
  fflush(stdout);
  fprintf(stderr, "%s:%d: internal error: %s\n", file, line, what);
  exit(70);
}

static const char *alloc_purpose;

const char *base_alloc_for(const char *what) {
  const char *old = alloc_purpose;
  alloc_purpose = what;
  return old;
}

/* An allocation that failed: out of memory (the user's sizes: exit 3, naming the bytes and what
 * they were for), unless the size is one no correct computation asks for (a bug: exit 70). */
static _Noreturn void out_of_memory(size_t count, size_t size) {
  if (size && count > (size_t)PTRDIFF_MAX / size) base_fail(__FILE__, __LINE__, "allocation size overflows");
  double n = (double)count * (double)size;
  fflush(stdout);
  fprintf(stderr, "cellc: error: out of memory: %.0f bytes (%.3g GiB) could not be allocated for %s\n", n,
          n / (1024.0 * 1024.0 * 1024.0), alloc_purpose ? alloc_purpose : "cellc's work");
  exit(3);
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) out_of_memory(n, 1);
  return p;
}

void *xcalloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) out_of_memory(count, size);
  return p;
}

void *xaligned(size_t align, size_t n) {
  n = (n + align - 1) / align * align;
  void *p = aligned_alloc(align, n ? n : align);
  if (!p) out_of_memory(n, 1);
  return p;
}

void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) out_of_memory(n, 1);
  return p;
}

char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

char *xasprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = xmalloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

struct ArenaBlock {
  ArenaBlock *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  ArenaBlock *b = a->head;
  if (!b || b->used + n > b->size) {
    size_t size = n > 65536 ? n : 65536;
    b = xmalloc(sizeof(ArenaBlock) + size);
    b->used = 0;
    b->size = size;
    b->next = a->head;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  return memset(p, 0, n);
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = arena_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

void arena_free(Arena *a) {
  for (ArenaBlock *b = a->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  a->head = NULL;
}

static void scratch_extras_free(Scratch *s) {
  for (int i = 0; i < s->nextra; i++) free(s->extra[i]);
  s->nextra = 0;
}

void scratch_begin(Scratch *s) {
  if (s->nextra) {
    scratch_extras_free(s);
    free(s->mem);
    s->mem = xaligned(64, s->want), s->cap = s->want;
  }
  s->used = s->want = 0;
}

void *scratch_take(Scratch *s, size_t n) {
  size_t r = n ? (n + 63) & ~(size_t)63 : 64; /* a take of nothing still a pointer of its own */
  CHECK(r >= n);
  s->want += r;
  if (r <= s->cap - s->used) {
    void *p = s->mem + s->used;
    s->used += r;
    return p;
  }
  void *p = xaligned(64, r);
  VEC_PUSH(s->extra, s->nextra, s->capextra, p);
  return p;
}

void *scratch_zeros(Scratch *s, size_t n) { return memset(scratch_take(s, n), 0, n); }

Scratch *scratch_for_call(Scratch *given, Scratch *own) {
  Scratch *s = given ? given : own;
  scratch_begin(s);
  return s;
}

void scratch_free(Scratch *s) {
  scratch_extras_free(s);
  free(s->extra), free(s->mem);
  *s = (Scratch){0};
}

char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  /* a directory or a device (/dev/zero would never end) is not a file to read; a pipe is */
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
    fclose(f);
    errno = S_ISDIR(st.st_mode) ? EISDIR : ENODEV;
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = xmalloc(cap);
  for (;;) {
    if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}

int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 1000;
  int prev[65], cur[65];
  for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (lb + 1));
  }
  return prev[lb];
}

const char *edit_nearest(const char *name, const char *const *cands, int n) {
  const char *best = NULL;
  int bestd = 1 << 30;
  for (int i = 0; i < n; i++) {
    if (!cands[i] || !strcmp(cands[i], name)) continue;
    int d = edit_distance(name, cands[i]);
    int longer = (int)(strlen(name) > strlen(cands[i]) ? strlen(name) : strlen(cands[i]));
    if (d >= longer) continue; /* nothing in common: 'K' is not a near miss of 'D' */
    if (d < bestd) bestd = d, best = cands[i];
  }
  int len = (int)strlen(name);
  int limit = len <= 2 ? 1 : len <= 5 ? 2 : 3;
  return bestd <= limit ? best : NULL;
}

char *no_such_text(char *buf, size_t n, const char *owner, const char *what, const char *name, const char *const *cands,
                   int nc) {
  const char *near = edit_nearest(name, cands, nc);
  if (!nc) snprintf(buf, n, "%s has no %ss", owner, what);
  else if (near) snprintf(buf, n, "%s has no %s '%s'; did you mean '%s'?", owner, what, name, near);
  else snprintf(buf, n, "%s has no %s '%s'", owner, what, name);
  return buf;
}

void *support_dlopen_toolkit(const char *const *names, int n, const char *const *subdirs, int nsub, char *tried,
                             size_t triedlen) {
  const char *home = getenv("CUDA_HOME");
  const char *dirs[] = {home && *home ? home : NULL, "/usr/local/cuda"};
  if (triedlen) tried[0] = 0;
  for (int place = 0; place < 1 + 2 * nsub; place++) { /* as given, then dirs x subdirs */
    const char *dir = place ? dirs[(place - 1) / nsub] : NULL;
    if (place && !dir) continue;
    for (int i = 0; i < n; i++) {
      char *path = place ? xasprintf("%s/%s/%s", dir, subdirs[(place - 1) % nsub], names[i]) : xstrdup(names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!h && triedlen) {
        const char *e = dlerror();
        size_t used = strlen(tried);
        snprintf(tried + used, triedlen - used, "%s%s", used ? "; " : "", e ? e : path);
      }
      free(path);
      if (h) return h;
    }
  }
  return NULL;
}
