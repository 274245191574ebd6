/* file.c: a dataset the user brings (shared/spec/cli.md "Tasks", `file`; docs/training.md "Your
 * own data"): per split a safetensors file of `x`, `y` and optional `lengths` (or one file of
 * `train.x`, `valid.x`, ...), or JSON lines `{"x": [...], "y": ...}`. The loss and the readout
 * follow from y: integers are classes (CE), floats targets (MSE); one y per sequence is read out
 * at each sequence's last step, one per step at every step. Every tensor is checked whole before
 * training starts; an error names the file, the tensor and the shape expected. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "task_impl.h"

static const TaskKey file_keys[] = {
    {"train", TKEY_PATH, "", 0, 0, "the train split's file (x, y, optional lengths)"},
    {"valid", TKEY_PATH, "", 0, 0, "the valid split's file (unset: the last 10% of train)"},
    {"test", TKEY_PATH, "", 0, 0, "the test split's file (unset: 10% of train, before valid's)"},
    {"path", TKEY_PATH, "", 0, 0, "one safetensors file holding train.x, train.y, valid.x, ... instead"},
    {"format", TKEY_STRING, "safetensors", 0, 0, "safetensors | jsonl"},
    {"vocab", TKEY_INT, "0", 0, 1 << 24, "token inputs: ids in [0, vocab) (0: the largest id + 1)"},
};
const TaskDef file_def = {"file", file_keys, 6, TASK_LOSS_CE, TASK_READ_LAST};

#define MAX_T (1 << 20)

static const char *const split_names[3] = {"train", "valid", "test"};

/* One split in memory, padded to its own T_s (copied into batches of the task's T). */
typedef struct Split {
  int64_t n;
  int T;
  int32_t *tok;   /* (n, T) token ids, or NULL */
  float *x;       /* (n, T, D) values, or NULL */
  int32_t *len;   /* (n) each sequence's length, 1..T */
  int32_t *cls;   /* (n) or (n, T) classes, or NULL */
  float *y;       /* (n, O) or (n, T, O) targets, or NULL */
} Split;

typedef struct FileData {
  Split s[3];
  bool per_step;
  int D, O;
} FileData;

static void split_free(Split *s) {
  free(s->tok), free(s->x), free(s->len), free(s->cls), free(s->y);
  memset(s, 0, sizeof *s);
}

static void file_free(Task *t) {
  FileData *d = t->data;
  for (int i = 0; i < 3; i++) split_free(&d->s[i]);
  free(d);
}

/* ---- the shape of what a split holds, before it is compared across splits ---- */

typedef struct Kind {
  bool tokens;    /* x holds token ids */
  int D;          /* real inputs: channels */
  bool classes;   /* y holds integers */
  bool per_step;  /* y has a value per step */
  int O;          /* float y: values per target (1 for [N] or [N, T]) */
} Kind;

static const char *shape_text(char *buf, size_t n, const SftTensor *x) {
  size_t used = (size_t)snprintf(buf, n, "%s [", sft_dtype_name(x->dtype));
  for (int i = 0; i < x->ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)x->shape[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

static bool is_int(SftDtype d) {
  return d == SFT_I32 || d == SFT_I64 || d == SFT_U8 || d == SFT_U16 || d == SFT_I8 || d == SFT_I16;
}
static bool is_float(SftDtype d) { return d == SFT_F32 || d == SFT_F64 || d == SFT_F16 || d == SFT_BF16; }

/* Reads split `s` from tensors `<pre>x`, `<pre>y`, `<pre>lengths` of f (file `path`). */
static int split_from_sft(Task *t, const SftFile *f, const char *path, const char *pre, Split *s, Kind *k, char *err,
                          size_t errlen) {
  char nx[64], ny[64], nl[64], sh[160];
  snprintf(nx, sizeof nx, "%sx", pre), snprintf(ny, sizeof ny, "%sy", pre), snprintf(nl, sizeof nl, "%slengths", pre);
  const SftTensor *x = sft_find(f, nx), *y = sft_find(f, ny), *l = sft_find(f, nl);
  if (!x || !y)
    return task_err(t, err, errlen, "'%s' has no tensor '%s' (expected %s: %s)", path, !x ? nx : ny, !x ? nx : ny,
                    !x ? "F32 [N, T, D] values or integer [N, T] tokens" : "[N] or [N, O] per sequence, [N, T] or [N, T, O] per step");
  if (x->dtype == SFT_F32 && x->ndim == 3) k->tokens = false, k->D = (int)x->shape[2];
  else if (is_int(x->dtype) && x->ndim == 2) k->tokens = true, k->D = 0;
  else
    return task_err(t, err, errlen, "'%s': tensor '%s' is %s; expected F32 [N, T, D] (real-valued inputs) or an integer "
                    "type [N, T] (token ids)", path, nx, shape_text(sh, sizeof sh, x));
  int64_t N = x->shape[0], T = x->shape[1];
  if (N < 1 || T < 1 || T > MAX_T || (!k->tokens && (k->D < 1 || k->D > (1 << 20))))
    return task_err(t, err, errlen, "'%s': tensor '%s' is %s; expected N >= 1 sequences of 1 to %d steps%s", path, nx,
                    shape_text(sh, sizeof sh, x), MAX_T, k->tokens ? "" : " of D >= 1 channels");
  /* y: integers are classes ([N] or [N, T]); floats targets ([N], [N, O], [N, T], [N, T, O]) */
  k->classes = is_int(y->dtype);
  bool ok = y->ndim >= 1 && y->shape[0] == N && (is_int(y->dtype) || is_float(y->dtype));
  if (ok && k->classes) {
    ok = y->ndim == 1 || (y->ndim == 2 && y->shape[1] == T);
    k->per_step = y->ndim == 2, k->O = 1;
  } else if (ok) {
    /* a float y of [N, T] with x's T is per step (per-sequence targets of T values: [N, 1, T] is not
     * accepted either, so such targets need a T different from their size) */
    if (y->ndim == 1) k->per_step = false, k->O = 1;
    else if (y->ndim == 2 && y->shape[1] == T) k->per_step = true, k->O = 1;
    else if (y->ndim == 2) k->per_step = false, k->O = (int)y->shape[1];
    else if (y->ndim == 3 && y->shape[1] == T) k->per_step = true, k->O = (int)y->shape[2];
    else ok = false;
    ok = ok && k->O >= 1 && k->O <= (1 << 20);
  }
  if (!ok)
    return task_err(t, err, errlen, "'%s': tensor '%s' is %s; expected, for x's N = %lld and T = %lld: integer classes [N] "
                    "or [N, T], or float targets [N], [N, O], [N, T] or [N, T, O]", path, ny, shape_text(sh, sizeof sh, y),
                    (long long)N, (long long)T);
  if (l && !(is_int(l->dtype) && l->ndim == 1 && l->shape[0] == N))
    return task_err(t, err, errlen, "'%s': tensor '%s' is %s; expected an integer type [%lld] (N, as x)", path, nl,
                    shape_text(sh, sizeof sh, l), (long long)N);
  s->n = N, s->T = (int)T;
  size_t nt = (size_t)N * (size_t)T;
  s->len = xmalloc(sizeof(int32_t) * (size_t)N);
  for (int64_t i = 0; i < N; i++) {
    double v = l ? sft_get(l, i) : (double)T;
    if (!(v >= 1 && v <= (double)T))
      return task_err(t, err, errlen, "'%s': tensor '%s': lengths[%lld] = %.0f is not in 1..T = %lld", path, nl,
                      (long long)i, v, (long long)T);
    s->len[i] = (int32_t)v;
  }
  /* the steps past a sequence's length are never read: they may hold anything, NaN included */
  if (k->tokens) {
    s->tok = xcalloc(nt, sizeof(int32_t));
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < s->len[i]; j++) {
        double v = sft_get(x, i * T + j);
        if (v < 0 || v > (double)INT32_MAX)
          return task_err(t, err, errlen, "'%s': tensor '%s': token id %.0f at [%lld, %lld] is negative or too large", path,
                          nx, v, (long long)i, (long long)j);
        s->tok[i * T + j] = (int32_t)v;
      }
  } else {
    size_t D = (size_t)k->D;
    s->x = xcalloc(nt * D, sizeof(float));
    const float *src = x->data;
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < s->len[i]; j++)
        for (size_t c = 0; c < D; c++) {
          float v = src[((size_t)i * T + j) * D + c];
          if (!isfinite(v))
            return task_err(t, err, errlen, "'%s': tensor '%s' holds %s at [%lld, %lld, %zu] (within the sequence's length)",
                            path, nx, isnan(v) ? "NaN" : "an infinity", (long long)i, (long long)j, c);
          s->x[((size_t)i * T + j) * D + c] = v;
        }
  }
  int64_t per = k->per_step ? T : 1;
  if (k->classes) s->cls = xcalloc((size_t)N * (size_t)per, sizeof(int32_t));
  else s->y = xcalloc((size_t)N * (size_t)per * (size_t)k->O, sizeof(float));
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < (k->per_step ? s->len[i] : 1); j++)
      for (int o = 0; o < k->O; o++) {
        int64_t at = (i * per + j) * k->O + o;
        double v = sft_get(y, at);
        if (k->classes && (v < 0 || v > (double)(1 << 24)))
          return task_err(t, err, errlen, "'%s': tensor '%s': class %.0f at element %lld is not in 0..%d", path, ny, v,
                          (long long)at, 1 << 24);
        if (!k->classes && !isfinite(v))
          return task_err(t, err, errlen, "'%s': tensor '%s' holds %s at element %lld", path, ny,
                          isnan(v) ? "NaN" : "an infinity", (long long)at);
        if (k->classes) s->cls[at] = (int32_t)v;
        else s->y[at] = (float)v;
      }
  return 0;
}

/* ---- JSON lines ---- */

/* A JSON value of numbers nested at most two deep: its numbers in order, the size of each level. */
typedef struct JVal {
  int depth;        /* 0 a number, 1 a list of numbers, 2 a list of lists */
  int64_t n0, n1;   /* outer and inner list sizes (the inner ones all equal) */
  double *v;
  int64_t nv, cap;
  bool all_int;     /* every number written without '.', 'e', 'E' */
} JVal;

typedef struct JParse {
  const char *p;
  const char *err; /* what went wrong, or NULL */
} JParse;

static void jskip(JParse *j) {
  while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r') j->p++;
}

static bool jnum(JParse *j, JVal *v) {
  jskip(j);
  const char *s = j->p;
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  if (end == s || !(*s == '-' || isdigit((unsigned char)*s))) return j->err = "a number expected", false;
  for (const char *c = s; c < end; c++)
    if (*c == '.' || *c == 'e' || *c == 'E') v->all_int = false;
  if (v->nv == v->cap) v->cap = v->cap ? 2 * v->cap : 64, v->v = xrealloc(v->v, sizeof(double) * (size_t)v->cap);
  v->v[v->nv++] = d;
  j->p = end;
  return true;
}

/* A list of numbers; its size in *n. */
static bool jlist(JParse *j, JVal *v, int64_t *n) {
  jskip(j);
  if (*j->p != '[') return j->err = "'[' expected", false;
  j->p++, jskip(j);
  *n = 0;
  if (*j->p == ']') return j->p++, true;
  for (;;) {
    if (!jnum(j, v)) return false;
    (*n)++;
    jskip(j);
    if (*j->p == ']') return j->p++, true;
    if (*j->p != ',') return j->err = "',' or ']' expected", false;
    j->p++;
  }
}

static bool jvalue(JParse *j, JVal *v) {
  memset(v, 0, sizeof *v);
  v->all_int = true;
  jskip(j);
  if (*j->p != '[') return v->depth = 0, jnum(j, v);
  const char *q = j->p + 1;
  while (*q == ' ' || *q == '\t') q++;
  if (*q != '[') return v->depth = 1, jlist(j, v, &v->n0);
  v->depth = 2;
  j->p = q;
  for (;;) {
    int64_t n;
    if (!jlist(j, v, &n)) return false;
    if (v->n0 && n != v->n1) return j->err = "inner lists of different sizes", false;
    v->n1 = n, v->n0++;
    jskip(j);
    if (*j->p == ']') return j->p++, true;
    if (*j->p != ',') return j->err = "',' or ']' expected", false;
    j->p++, jskip(j);
  }
}

/* One line: {"x": ..., "y": ...} in either order. */
static bool jline(JParse *j, JVal *x, JVal *y) {
  bool gx = false, gy = false;
  jskip(j);
  if (*j->p != '{') return j->err = "'{' expected", false;
  j->p++;
  for (;;) {
    jskip(j);
    if (*j->p != '"') return j->err = "a key \"x\" or \"y\" expected", false;
    const char *k = ++j->p;
    while (*j->p && *j->p != '"' && *j->p != '\n') j->p++;
    if (*j->p != '"') return j->err = "an unterminated key", false;
    size_t kl = (size_t)(j->p - k);
    j->p++, jskip(j);
    if (*j->p != ':') return j->err = "':' expected", false;
    j->p++;
    bool isx = kl == 1 && *k == 'x', isy = kl == 1 && *k == 'y';
    if (!isx && !isy) return j->err = "a key other than \"x\" and \"y\"", false;
    JVal *v = isx ? x : y;
    if ((isx && gx) || (isy && gy)) return j->err = "a key given twice", false;
    if (!jvalue(j, v)) return false;
    gx = gx || isx, gy = gy || isy;
    jskip(j);
    if (*j->p == '}') {
      j->p++, jskip(j);
      if (*j->p && *j->p != '\n') return j->err = "text after the object", false;
      if (!gx || !gy) return j->err = !gx ? "no \"x\"" : "no \"y\"", false;
      return true;
    }
    if (*j->p != ',') return j->err = "',' or '}' expected", false;
    j->p++;
  }
}

/* Reads a JSON lines file into split s: x a list of token ids (depth 1) or of steps of D values
 * (depth 2); y a number (an integer: a class), a list (per step when as long as x, else the O
 * values of one target) or a list of lists (per step). */
static int split_from_jsonl(Task *t, const char *path, Split *s, Kind *k, char *err, size_t errlen) {
  size_t len;
  char *buf = task_read_file(t, path, &len, err, errlen);
  if (!buf) return -1;
  int64_t cap = 0, n = 0;
  JVal *xs = NULL, *ys = NULL;
  int rc = 0, T = 0;
  int64_t line = 0;
  for (const char *p = buf; *p && !rc;) {
    line++;
    const char *eol = strchr(p, '\n');
    const char *q = p;
    while (*q == ' ' || *q == '\t' || *q == '\r') q++;
    if (*q == '\n' || !*q) { /* a blank line */
      p = eol ? eol + 1 : q;
      continue;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      xs = xrealloc(xs, sizeof(JVal) * (size_t)cap), ys = xrealloc(ys, sizeof(JVal) * (size_t)cap);
    }
    JParse j = {p, NULL};
    memset(&xs[n], 0, sizeof xs[n]), memset(&ys[n], 0, sizeof ys[n]);
    bool ok = jline(&j, &xs[n], &ys[n]);
    n++;
    if (!ok) {
      rc = task_err(t, err, errlen, "'%s' line %lld: %s (expected {\"x\": [...], \"y\": ...})", path, (long long)line, j.err);
      break;
    }
    JVal *x = &xs[n - 1], *y = &ys[n - 1];
    bool tokens = x->depth == 1;
    int64_t steps = x->n0;
    if (x->depth == 0 || steps < 1 || steps > MAX_T || (x->depth == 2 && x->n1 < 1)) {
      rc = task_err(t, err, errlen, "'%s' line %lld: \"x\" must be a list of 1 to %d token ids or of steps of D >= 1 values",
                    path, (long long)line, MAX_T);
      break;
    }
    bool per_step = y->depth == 2 || (y->depth == 1 && y->n0 == steps);
    int O = y->depth == 2 ? (int)y->n1 : y->depth == 1 && !per_step ? (int)y->n0 : 1;
    bool classes = y->all_int && y->depth < 2 && (y->depth == 0 || per_step);
    if (O < 1 || O > (1 << 20)) {
      rc = task_err(t, err, errlen, "'%s' line %lld: \"y\" is an empty list; expected a number, a list of 1 or more "
                    "values or a list of steps", path, (long long)line);
      break;
    }
    if (y->depth == 2 && y->n0 != steps) {
      rc = task_err(t, err, errlen, "'%s' line %lld: \"y\" has %lld steps, \"x\" %lld", path, (long long)line,
                    (long long)y->n0, (long long)steps);
      break;
    }
    if (n == 1) k->tokens = tokens, k->D = tokens ? 0 : (int)x->n1, k->classes = classes, k->per_step = per_step, k->O = O;
    else if (tokens != k->tokens || (!tokens && x->n1 != k->D) || classes != k->classes || per_step != k->per_step ||
             O < 1 || (!classes && O != k->O)) {
      rc = task_err(t, err, errlen, "'%s' line %lld: its \"x\" or \"y\" is not of the kind of line 1's (tokens or values, D, "
                    "classes or targets, per step or per sequence, O)", path, (long long)line);
      break;
    }
    for (int64_t i = 0; i < x->nv && !rc; i++)
      if (tokens ? (x->v[i] < 0 || x->v[i] != floor(x->v[i]) || x->v[i] > INT32_MAX) : !isfinite(x->v[i]))
        rc = task_err(t, err, errlen, "'%s' line %lld: \"x\" holds %g, not %s", path, (long long)line, x->v[i],
                      tokens ? "a token id (an integer >= 0)" : "a finite value");
    for (int64_t i = 0; i < y->nv && !rc; i++)
      if (classes ? (y->v[i] < 0 || y->v[i] > (1 << 24)) : !isfinite(y->v[i]))
        rc = task_err(t, err, errlen, "'%s' line %lld: \"y\" holds %g, not %s", path, (long long)line, y->v[i],
                      classes ? "a class (an integer >= 0)" : "a finite value");
    if (steps > T) T = (int)steps;
    p = eol ? eol + 1 : p + strlen(p);
  }
  if (!rc && n == 0) rc = task_err(t, err, errlen, "'%s' holds no lines", path);
  if (!rc) {
    s->n = n, s->T = T;
    size_t nt = (size_t)n * (size_t)T, per = k->per_step ? (size_t)T : 1;
    s->len = xmalloc(sizeof(int32_t) * (size_t)n);
    if (k->tokens) s->tok = xcalloc(nt, sizeof(int32_t));
    else s->x = xcalloc(nt * (size_t)k->D, sizeof(float));
    if (k->classes) s->cls = xcalloc((size_t)n * per, sizeof(int32_t));
    else s->y = xcalloc((size_t)n * per * (size_t)k->O, sizeof(float));
    for (int64_t i = 0; i < n; i++) {
      s->len[i] = (int32_t)xs[i].n0;
      for (int64_t e = 0; e < xs[i].nv; e++) {
        if (k->tokens) s->tok[(size_t)i * T + (size_t)e] = (int32_t)xs[i].v[e];
        else s->x[(size_t)i * T * (size_t)k->D + (size_t)e] = (float)xs[i].v[e];
      }
      for (int64_t e = 0; e < ys[i].nv; e++) {
        size_t at = (size_t)i * per * (size_t)k->O + (size_t)e;
        if (k->classes) s->cls[at] = (int32_t)ys[i].v[e];
        else s->y[at] = (float)ys[i].v[e];
      }
    }
  }
  for (int64_t i = 0; i < n; i++) free(xs[i].v), free(ys[i].v);
  free(xs), free(ys), free(buf);
  return rc;
}

/* ---- the task ---- */

/* Moves the last `take` sequences of `from` into `to` (a split the files do not give). */
static void carve(Split *from, Split *to, int64_t take, const Kind *k) {
  int T = from->T;
  size_t per = k->per_step ? (size_t)T : 1, first = (size_t)(from->n - take);
  to->n = take, to->T = T;
  size_t nt = (size_t)take * (size_t)T;
#define MOVE(f, count)                                                                                                 \
  if (from->f) {                                                                                                       \
    to->f = xmalloc(sizeof *from->f * (count) + 1);                                                                    \
    memcpy(to->f, from->f + first * ((count) / (size_t)take), sizeof *from->f * (count));                              \
  }
  MOVE(tok, nt)
  MOVE(x, nt * (size_t)k->D)
  MOVE(len, (size_t)take)
  MOVE(cls, (size_t)take * per)
  MOVE(y, (size_t)take * per * (size_t)k->O)
#undef MOVE
  from->n -= take;
}

static void file_item(Task *t, TaskSplit split, int64_t item, int b, TaskBatch *out) {
  const FileData *d = t->data;
  const Split *s = &d->s[split];
  int B = out->B, len = s->len[item], D = d->D, O = d->O;
  size_t T = (size_t)s->T;
  for (int j = 0; j < len; j++) {
    size_t to = (size_t)j * B + b, from = (size_t)item * T + j;
    if (s->tok) out->tokens[to] = s->tok[from];
    else memcpy(out->x + to * D, s->x + from * D, sizeof(float) * (size_t)D);
    if (d->per_step) {
      if (s->cls) out->cls[to] = s->cls[from];
      else memcpy(out->y + to * O, s->y + from * O, sizeof(float) * (size_t)O);
      out->mask[to] = 1;
    }
  }
  if (!d->per_step) {
    if (s->cls) out->cls[b] = s->cls[item];
    else memcpy(out->y + (size_t)b * O, s->y + (size_t)item * O, sizeof(float) * (size_t)O);
  }
  if (out->lengths) out->lengths[b] = len;
}

static void file_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) {
  task_fixed_batch(t, split, index, out, file_item);
}

int file_new(Task *t, char *err, size_t errlen) {
  const char *fmt = task_str(t, "format");
  bool jsonl = !strcmp(fmt, "jsonl");
  if (!jsonl && strcmp(fmt, "safetensors"))
    return task_err(t, err, errlen, "format '%s' is not one of safetensors, jsonl", fmt);
  const char *one = task_str(t, "path");
  const char *paths[3] = {task_str(t, "train"), task_str(t, "valid"), task_str(t, "test")};
  if (one && (paths[0] || paths[1] || paths[2]))
    return task_err(t, err, errlen, "path names one file of every split: give it or train/valid/test, not both");
  if (!one && !paths[0]) return task_err(t, err, errlen, "train is required (a file of x, y and optional lengths), or path");
  FileData *d = xcalloc(1, sizeof *d);
  t->data = d, t->free = file_free;
  Kind kinds[3] = {{0}};
  bool have[3] = {false, false, false};
  const char *where[3] = {NULL, NULL, NULL};
  SftFile f = {0};
  if (one && !jsonl && sft_read(one, &f, err, errlen) < 0) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s", err);
    return task_err(t, err, errlen, "%s", msg);
  }
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    char pre[16];
    snprintf(pre, sizeof pre, "%s.", split_names[i]);
    if (one && !jsonl) {
      char nx[16];
      snprintf(nx, sizeof nx, "%s.x", split_names[i]);
      if (i > 0 && !sft_find(&f, nx)) continue;
      where[i] = one;
      rc = split_from_sft(t, &f, one, pre, &d->s[i], &kinds[i], err, errlen);
    } else if (one || paths[i]) {
      if (one && i > 0) continue; /* JSON lines in one file: the train split, valid and test carved */
      where[i] = one ? one : paths[i];
      if (jsonl) rc = split_from_jsonl(t, where[i], &d->s[i], &kinds[i], err, errlen);
      else {
        SftFile g;
        char e2[600];
        if (sft_read(where[i], &g, e2, sizeof e2) < 0) rc = task_err(t, err, errlen, "%s", e2);
        else {
          rc = split_from_sft(t, &g, where[i], "", &d->s[i], &kinds[i], err, errlen);
          sft_free(&g);
        }
      }
    } else continue;
    have[i] = !rc;
  }
  sft_free(&f);
  if (rc) return -1;
  /* every split of the kind of train's */
  const Kind *k = &kinds[0];
  for (int i = 1; i < 3; i++) {
    const Kind *o = &kinds[i];
    if (!have[i]) continue;
    if (o->tokens != k->tokens || o->D != k->D || o->classes != k->classes || o->per_step != k->per_step ||
        (!k->classes && o->O != k->O))
      return task_err(t, err, errlen, "the %s split ('%s') holds %s x%s and %s y%s, the train split ('%s') %s x%s and %s y%s",
                      split_names[i], where[i], o->tokens ? "token" : "real-valued", "", o->classes ? "class" : "float",
                      o->per_step ? " per step" : " per sequence", where[0], k->tokens ? "token" : "real-valued", "",
                      k->classes ? "class" : "float", k->per_step ? " per step" : " per sequence");
  }
  /* the splits the files do not give: 10% of train each, from its end (valid last) */
  int64_t n0 = d->s[0].n;
  for (int i = 1; i <= 2; i++) {
    if (have[i]) continue;
    int64_t take = n0 / 10 > 0 ? n0 / 10 : 1;
    if (d->s[0].n - take < 1)
      return task_err(t, err, errlen, "'%s' holds %lld sequence%s: too few to carve a %s split from (give %s)", where[0],
                      (long long)d->s[0].n, d->s[0].n == 1 ? "" : "s", split_names[i], split_names[i]);
    carve(&d->s[0], &d->s[i], take, k);
  }
  int T = 0;
  bool lengths = false;
  int64_t maxtok = -1, maxcls = -1;
  for (int i = 0; i < 3; i++) {
    Split *s = &d->s[i];
    if (s->T > T) T = s->T;
    size_t per = k->per_step ? (size_t)s->T : 1;
    for (int64_t n = 0; n < s->n; n++) {
      lengths = lengths || s->len[n] != s->T;
      for (int j = 0; j < s->len[n]; j++)
        if (s->tok && s->tok[n * s->T + j] > maxtok) maxtok = s->tok[n * s->T + j];
      for (size_t j = 0; s->cls && j < (k->per_step ? (size_t)s->len[n] : 1); j++)
        if (s->cls[(size_t)n * per + j] > maxcls) maxcls = s->cls[(size_t)n * per + j];
    }
  }
  for (int i = 0; i < 3; i++) lengths = lengths || d->s[i].T != T;
  int vocab = task_int(t, "vocab");
  for (int i = 0; k->tokens && vocab && maxtok >= vocab && i < 3; i++) {
    const Split *s = &d->s[i];
    for (int64_t n = 0; n < s->n; n++)
      for (int j = 0; j < s->len[n]; j++)
        if (s->tok[n * s->T + j] >= vocab) /* a carved split's items came from train's file */
          return task_err(t, err, errlen, "'%s': tensor '%s%s' holds token id %d (in the %s split), not below vocab = %d",
                          have[i] ? where[i] : where[0], one && !jsonl ? (have[i] ? split_names[i] : "train") : "",
                          one && !jsonl ? ".x" : "x", s->tok[n * s->T + j], split_names[i], vocab);
  }
  d->D = k->D, d->O = k->classes ? 1 : k->O, d->per_step = k->per_step;
  t->shape.token_input = k->tokens;
  t->shape.vocab = k->tokens ? (vocab ? vocab : (int)maxtok + 1) : 0;
  t->shape.in_dim = k->tokens ? 0 : k->D;
  t->shape.loss = k->classes ? TASK_LOSS_CE : TASK_LOSS_MSE;
  t->shape.out_dim = k->classes ? (int)(maxcls + 1 > 1 ? maxcls + 1 : 1) : k->O;
  t->shape.readout = k->per_step ? TASK_READ_ALL : TASK_READ_LAST;
  t->shape.length = T;
  t->shape.lengths = lengths;
  for (int i = 0; i < 3; i++) t->shape.split_size[i] = d->s[i].n;
  if (k->tokens && t->shape.vocab < 1) t->shape.vocab = 1;
  /* the bucketing of train.bucket sorts windows of the train order by these */
  t->item_len = d->s[0].len;
  t->batch = file_batch;
  return 0;
}
