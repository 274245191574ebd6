/* emu_parse.c: finds the extern "C" __global__ kernels of a CUDA source and their parameter
 * types, so the emulator can generate for each a trampoline that takes cuLaunchKernel's
 * void **kernelParams exactly as the driver does. A small tokenizer, not a C++ parser. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "support.h"
#include "cuda_internal.h"
#include "emu.h"

typedef enum { T_IDENT, T_PUNCT, T_STRING, T_OTHER } TokKind;

typedef struct Tok {
  TokKind kind;
  const char *s;
  int len;
  int line;
} Tok;

typedef struct Toks {
  Tok *v;
  int n, cap;
} Toks;

static bool is(const Tok *t, const char *text) {
  return (int)strlen(text) == t->len && strncmp(t->s, text, (size_t)t->len) == 0;
}

/* Skip a comment or a preprocessor line at p; returns the new position or p. */
static const char *skip_noise(const char *p, int *line, bool line_start) {
  if (p[0] == '/' && p[1] == '/') {
    while (*p && *p != '\n') p++;
  } else if (p[0] == '/' && p[1] == '*') {
    for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++) *line += *p == '\n';
    if (*p) p += 2;
  } else if (*p == '#' && line_start) {
    for (; *p && *p != '\n'; p++)
      if (p[0] == '\\' && p[1] == '\n') p++, (*line)++;
  }
  return p;
}

static void tokenize(const char *src, Toks *out) {
  int line = 1;
  bool line_start = true;
  for (const char *p = src; *p;) {
    const char *q = skip_noise(p, &line, line_start);
    if (q != p) {
      p = q;
      continue;
    }
    if (isspace((unsigned char)*p)) {
      if (*p == '\n') line++, line_start = true;
      p++;
      continue;
    }
    line_start = false;
    Tok t = {T_PUNCT, p, 1, line};
    if (isalpha((unsigned char)*p) || *p == '_') {
      t.kind = T_IDENT;
      while (isalnum((unsigned char)p[t.len]) || p[t.len] == '_') t.len++;
    } else if (*p == '"' || *p == '\'') {
      t.kind = *p == '"' ? T_STRING : T_OTHER;
      while (p[t.len] && p[t.len] != *p) t.len += p[t.len] == '\\' && p[t.len + 1] ? 2 : 1;
      if (p[t.len]) t.len++;
    } else if (isdigit((unsigned char)*p)) {
      t.kind = T_OTHER;
      while (isalnum((unsigned char)p[t.len]) || p[t.len] == '.' || p[t.len] == '_') t.len++;
    }
    VEC_PUSH(out->v, out->n, out->cap, t);
    p += t.len;
  }
}

/* The index of the token that closes the bracket at i, or -1. */
static int matching(const Toks *ts, int i) {
  char open = ts->v[i].s[0], close = open == '(' ? ')' : open == '[' ? ']' : '}';
  int depth = 0;
  for (int j = i; j < ts->n; j++) {
    if (ts->v[j].kind != T_PUNCT) continue;
    if (ts->v[j].s[0] == open) depth++;
    if (ts->v[j].s[0] == close && --depth == 0) return j;
  }
  return -1;
}

static bool is_qualifier(const Tok *t) {
  return is(t, "const") || is(t, "volatile") || is(t, "__restrict__") || is(t, "__restrict") ||
         is(t, "restrict");
}

/* One parameter, tokens [a, b): its type as text, the name and restrict dropped. NULL with
 * a message for what the emulator cannot pass. */
static char *param_type(const Toks *ts, int a, int b, const char *kernel, int index, char *err,
                        size_t errlen) {
  for (int i = a; i < b; i++) {
    const Tok *t = &ts->v[i];
    if (is(t, "&") || is(t, "[") || is(t, "(") || is(t, "=") || is(t, ".")) {
      cuda_fail(err, errlen,
                "kernel '%s': parameter %d: '%.*s' (references, arrays, function pointers, "
                "default arguments and variadic kernels are not supported by cuda-emu)",
                kernel, index + 1, (int)(ts->v[b - 1].s + ts->v[b - 1].len - ts->v[a].s), ts->v[a].s);
      return NULL;
    }
  }
  int end = b;
  int typeish = 0; /* tokens other than qualifiers before the last one */
  for (int i = a; i < b - 1; i++) typeish += !is_qualifier(&ts->v[i]);
  if (ts->v[b - 1].kind == T_IDENT && typeish > 0 && !is_qualifier(&ts->v[b - 1])) end = b - 1;
  char *type = xstrdup("");
  for (int i = a; i < end; i++) {
    const Tok *t = &ts->v[i];
    if (is(t, "__restrict__") || is(t, "__restrict") || is(t, "restrict")) continue;
    char *next = xasprintf("%s%s%.*s", type, *type ? " " : "", t->len, t->s);
    free(type);
    type = next;
  }
  return type;
}

/* The parameters between the parentheses at open and close. */
static int parse_params(const Toks *ts, int open, int close, EmuKernelDecl *d, char *err,
                        size_t errlen) {
  if (close == open + 1 || (close == open + 2 && is(&ts->v[open + 1], "void"))) return 0;
  int cap = 0, start = open + 1, depth = 0;
  for (int i = open + 1; i <= close; i++) {
    const Tok *t = &ts->v[i];
    if (t->kind == T_PUNCT && strchr("(<[", t->s[0])) depth++;
    if (t->kind == T_PUNCT && strchr(")>]", t->s[0]) && i < close) depth--;
    if (i < close && (depth > 0 || !is(t, ","))) continue;
    if (i == start) return cuda_fail(err, errlen, "kernel '%s': empty parameter", d->name);
    char *type = param_type(ts, start, i, d->name, d->n_params, err, errlen);
    if (!type) return -1;
    VEC_PUSH(d->types, d->n_params, cap, type);
    start = i + 1;
  }
  return 0;
}

/* Is the declaration that ends at i (the __global__ token) preceded by extern "C"? */
static bool extern_c_before(const Toks *ts, int i) {
  for (int j = i - 1; j >= 1; j--) {
    const Tok *t = &ts->v[j];
    if (t->kind == T_PUNCT) return false;
    if (t->kind == T_STRING && is(t, "\"C\"") && is(&ts->v[j - 1], "extern")) return true;
  }
  return false;
}

/* The kernel whose __global__ is at i: name, parameters; *next is where to go on. 1 when
 * a definition was found, 0 when skipped (a declaration, or not extern "C"), -1 on error. */
static int parse_kernel(const Toks *ts, int i, bool in_extern_c, EmuKernelDecl *d, int *next,
                        char *err, size_t errlen) {
  int j = i + 1;
  *next = j;
  for (; j < ts->n && !is(&ts->v[j], "(") && !is(&ts->v[j], ";") && !is(&ts->v[j], "{"); j++)
    if (is(&ts->v[j], "__launch_bounds__") && j + 1 < ts->n && is(&ts->v[j + 1], "(")) {
      j = matching(ts, j + 1);
      if (j < 0) return 0;
    }
  if (j >= ts->n || !is(&ts->v[j], "(") || ts->v[j - 1].kind != T_IDENT) return 0;
  int close = matching(ts, j);
  if (close < 0) return 0;
  int k = close + 1;
  while (k < ts->n && ts->v[k].kind == T_IDENT) k++; /* trailing qualifiers */
  *next = close + 1;
  if (k >= ts->n || !is(&ts->v[k], "{")) return 0;
  if (!in_extern_c && !extern_c_before(ts, i)) return 0; /* not findable by name, as on a GPU */
  d->name = xasprintf("%.*s", ts->v[j - 1].len, ts->v[j - 1].s);
  if (parse_params(ts, j, close, d, err, errlen) != 0) return -1;
  return 1;
}

static void decl_free(EmuKernelDecl *d) {
  for (int j = 0; j < d->n_params; j++) free(d->types[j]);
  free(d->types);
  free(d->name);
}

int emu_parse_kernels(const char *src, EmuKernelDecl **out, int *n_out, char *err, size_t errlen) {
  Toks ts = {0};
  tokenize(src, &ts);
  EmuKernelDecl *ds = NULL;
  int n = 0, cap = 0, rc = 0;
  bool braces[256] = {false}; /* per brace depth: opened by extern "C" { */
  int depth = 0;
  for (int i = 0; i < ts.n && rc == 0;) {
    const Tok *t = &ts.v[i];
    if (is(t, "{") || is(t, "}")) {
      bool ext = is(t, "{") && i >= 2 && is(&ts.v[i - 1], "\"C\"") && is(&ts.v[i - 2], "extern");
      if (is(t, "{") && depth < 255) {
        braces[depth + 1] = ext || braces[depth];
        depth++;
      }
      if (is(t, "}") && depth > 0) depth--;
      i++;
      continue;
    }
    if (!is(t, "__global__")) {
      i++;
      continue;
    }
    EmuKernelDecl d = {0};
    int next;
    rc = parse_kernel(&ts, i, braces[depth], &d, &next, err, errlen);
    if (rc == 1) {
      VEC_PUSH(ds, n, cap, d);
      rc = 0;
    } else if (rc < 0) {
      decl_free(&d);
    }
    i = next;
  }
  free(ts.v);
  if (rc != 0) {
    emu_kernel_decls_free(ds, n);
    return -1;
  }
  *out = ds;
  *n_out = n;
  return 0;
}

void emu_kernel_decls_free(EmuKernelDecl *d, int n) {
  for (int i = 0; i < n; i++) decl_free(&d[i]);
  free(d);
}

char *emu_trampolines(const EmuKernelDecl *d, int n) {
  char *text = xstrdup("\n/* cuda-emu: launch trampolines */\n");
  for (int i = 0; i < n; i++) {
    char *call = xstrdup("");
    for (int j = 0; j < d[i].n_params; j++) {
      char *next = xasprintf("%s%s*(%s *)p[%d]", call, j ? ", " : "", d[i].types[j], j);
      free(call);
      call = next;
    }
    char *next = xasprintf("%sextern \"C\" void cellc_emu_launch_%s(void **p) { (void)p; %s(%s); }\n",
                           text, d[i].name, d[i].name, call);
    free(text);
    free(call);
    text = next;
  }
  return text;
}
