/* safetensors.c: a strict safetensors reader (every offset and size checked against the
 * input) and an atomic writer in the reference layout (sorted names, space-padded header). */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

#define SFT_NDTYPES 10

static const struct {
  const char *name;
  size_t size;
} dtype_info[SFT_NDTYPES] = {
    [SFT_F32] = {"F32", 4}, [SFT_F64] = {"F64", 8}, [SFT_I32] = {"I32", 4}, [SFT_I64] = {"I64", 8},
    [SFT_U8] = {"U8", 1},   [SFT_U16] = {"U16", 2}, [SFT_I8] = {"I8", 1},   [SFT_I16] = {"I16", 2},
    [SFT_F16] = {"F16", 2}, [SFT_BF16] = {"BF16", 2},
};

const char *sft_dtype_name(SftDtype d) {
  CHECK((unsigned)d < SFT_NDTYPES);
  return dtype_info[d].name;
}

size_t sft_dtype_size(SftDtype d) {
  CHECK((unsigned)d < SFT_NDTYPES);
  return dtype_info[d].size;
}

static int dtype_from_name(const char *s, SftDtype *d) {
  for (int i = 0; i < SFT_NDTYPES; i++)
    if (strcmp(s, dtype_info[i].name) == 0) {
      *d = (SftDtype)i;
      return 0;
    }
  return -1;
}

/* ---- reading ---- */

/* What a parse needs to report an error: the input's name and the caller's buffer. */
typedef struct Parse {
  const char *what;
  char *err;
  size_t errlen;
} Parse;

static int parse_fail(Parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int parse_fail(Parse *p, const char *fmt, ...) {
  if (!p->err || p->errlen == 0) return -1;
  int n = snprintf(p->err, p->errlen, "%s: ", p->what);
  if (n < 0 || (size_t)n >= p->errlen) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* A name from the file, made safe for a one-line message: printable ASCII kept,
 * everything else written \xNN, at most about 80 characters. */
static const char *printable(const char *s, char buf[static 128]) {
  size_t n = 0;
  for (; *s && n < 100; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7f && c != '\\') buf[n++] = (char)c;
    else n += (size_t)snprintf(buf + n, 128 - n, "\\x%02x", c);
  }
  if (*s) {
    memcpy(buf + n, "...", 3);
    n += 3;
  }
  buf[n] = 0;
  return buf;
}

/* A JSON number that is an integer in [0, 2^53]; the only kind shapes and offsets hold. */
static bool json_count(const cJSON *j, int64_t *v) {
  if (!cJSON_IsNumber(j)) return false;
  double d = j->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return false;
  *v = (int64_t)d;
  return true;
}

static void shape_string(const SftTensor *t, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < t->ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (n < len) snprintf(buf + n, len - n, "]");
}

/* One tensor entry of the header: dtype, shape and data_offsets, checked against the data
 * section of `data_len` bytes. Fills t (not its name or data) and the offsets. */
static int parse_tensor(Parse *p, const char *name, const cJSON *j, size_t data_len, SftTensor *t,
                        uint64_t *begin, uint64_t *end) {
  char nb[128];
  const char *pn = printable(name, nb);
  if (!cJSON_IsObject(j)) return parse_fail(p, "tensor '%s': entry is not a JSON object", pn);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!dt || !sh || !off)
    return parse_fail(p, "tensor '%s': missing \"%s\"", pn, !dt ? "dtype" : !sh ? "shape" : "data_offsets");

  char db[128];
  if (!cJSON_IsString(dt)) return parse_fail(p, "tensor '%s': dtype is not a string", pn);
  if (dtype_from_name(dt->valuestring, &t->dtype) != 0)
    return parse_fail(p, "tensor '%s': unknown dtype '%s'", pn, printable(dt->valuestring, db));

  if (!cJSON_IsArray(sh)) return parse_fail(p, "tensor '%s': shape is not an array", pn);
  int ndim = cJSON_GetArraySize(sh);
  if (ndim > SFT_MAX_DIMS)
    return parse_fail(p, "tensor '%s': shape has %d dimensions (at most %d)", pn, ndim, SFT_MAX_DIMS);
  t->ndim = ndim;
  int i = 0;
  bool has_zero = false;
  for (const cJSON *e = sh->child; e; e = e->next, i++) {
    if (cJSON_IsNumber(e) && e->valuedouble < 0)
      return parse_fail(p, "tensor '%s': shape entry %d is negative (%g)", pn, i, e->valuedouble);
    if (!json_count(e, &t->shape[i]))
      return parse_fail(p, "tensor '%s': shape entry %d is not a non-negative integer", pn, i);
    has_zero |= t->shape[i] == 0;
  }
  /* numel * size must fit in int64 (so in size_t on 64-bit hosts, and in the file). */
  size_t size = dtype_info[t->dtype].size;
  int64_t numel = 1;
  if (has_zero) numel = 0;
  else
    for (i = 0; i < ndim; i++) {
      if (numel > INT64_MAX / (int64_t)size / t->shape[i])
        return parse_fail(p, "tensor '%s': shape is too large (element count overflows)", pn);
      numel *= t->shape[i];
    }
  t->numel = numel;
  t->nbytes = (size_t)numel * size;

  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
    return parse_fail(p, "tensor '%s': data_offsets is not an array of two integers", pn);
  int64_t b, e;
  if (!json_count(off->child, &b) || !json_count(off->child->next, &e))
    return parse_fail(p, "tensor '%s': data_offsets are not non-negative integers", pn);
  if (b > e) return parse_fail(p, "tensor '%s': data_offsets [%lld, %lld] run backwards", pn, (long long)b, (long long)e);
  if ((uint64_t)e > data_len)
    return parse_fail(p, "tensor '%s': data_offsets [%lld, %lld] run past the end of the data (%zu bytes)", pn,
                      (long long)b, (long long)e, data_len);
  if ((uint64_t)(e - b) != t->nbytes) {
    char sb[256];
    shape_string(t, sb, sizeof sb);
    return parse_fail(p, "tensor '%s': data_offsets [%lld, %lld] do not match dtype %s and shape %s (%zu bytes)",
                      pn, (long long)b, (long long)e, dtype_info[t->dtype].name, sb, t->nbytes);
  }
  *begin = (uint64_t)b;
  *end = (uint64_t)e;
  return 0;
}

static int parse_metadata(Parse *p, const cJSON *j, SftFile *out) {
  if (!cJSON_IsObject(j)) return parse_fail(p, "__metadata__ is not a JSON object");
  int n = cJSON_GetArraySize(j);
  out->meta_keys = xcalloc((size_t)n, sizeof(char *));
  out->meta_vals = xcalloc((size_t)n, sizeof(char *));
  char kb[128];
  for (const cJSON *e = j->child; e; e = e->next) {
    if (!cJSON_IsString(e))
      return parse_fail(p, "__metadata__ value of '%s' is not a string", printable(e->string, kb));
    out->meta_keys[out->nmeta] = xstrdup(e->string);
    out->meta_vals[out->nmeta] = xstrdup(e->valuestring);
    out->nmeta++;
  }
  return 0;
}

/* For sorting tensors by name (duplicates) and by data offset (layout). */
typedef struct Span {
  const char *name;
  uint64_t begin, end;
} Span;

static int span_by_name(const void *a, const void *b) { return strcmp(((const Span *)a)->name, ((const Span *)b)->name); }

static int span_by_offset(const void *a, const void *b) {
  const Span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int strptr_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The tensors must tile the data section exactly: no gaps, no overlaps, nothing after. */
static int check_layout(Parse *p, SftFile *out, Span *spans, size_t data_len) {
  char nb[128];
  int n = out->n;
  qsort(spans, (size_t)n, sizeof *spans, span_by_name);
  for (int i = 1; i < n; i++)
    if (strcmp(spans[i - 1].name, spans[i].name) == 0)
      return parse_fail(p, "duplicate tensor name '%s'", printable(spans[i].name, nb));
  if (out->nmeta > 1) {
    char **keys = xmalloc(sizeof(char *) * (size_t)out->nmeta);
    memcpy(keys, out->meta_keys, sizeof(char *) * (size_t)out->nmeta);
    qsort(keys, (size_t)out->nmeta, sizeof *keys, strptr_cmp);
    int dup = -1;
    for (int i = 1; i < out->nmeta && dup < 0; i++)
      if (strcmp(keys[i - 1], keys[i]) == 0) dup = i;
    if (dup >= 0) parse_fail(p, "duplicate __metadata__ key '%s'", printable(keys[dup], nb));
    free(keys);
    if (dup >= 0) return -1;
  }
  qsort(spans, (size_t)n, sizeof *spans, span_by_offset);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (spans[i].begin < at)
      return parse_fail(p, "tensor '%s': data [%llu, %llu] overlaps the tensor before it", printable(spans[i].name, nb),
                        (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
    if (spans[i].begin > at)
      return parse_fail(p, "tensor '%s': data starts at %llu, leaving a gap after byte %llu",
                        printable(spans[i].name, nb), (unsigned long long)spans[i].begin, (unsigned long long)at);
    at = spans[i].end;
  }
  if (at != data_len)
    return parse_fail(p, "the tensors cover %llu bytes of data but the file holds %zu", (unsigned long long)at, data_len);
  return 0;
}

static int parse_header(Parse *p, const cJSON *root, const unsigned char *data, size_t data_len, SftFile *out) {
  int count = 0;
  bool have_meta = false;
  for (const cJSON *e = root->child; e; e = e->next) {
    if (strcmp(e->string, "__metadata__") != 0) count++;
    else if (have_meta) return parse_fail(p, "duplicate __metadata__");
    else have_meta = true;
  }
  out->tensors = xcalloc((size_t)count, sizeof(SftTensor));
  Span *spans = xcalloc((size_t)count, sizeof(Span));
  int rc = 0;
  for (const cJSON *e = root->child; e && rc == 0; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      rc = parse_metadata(p, e, out);
      continue;
    }
    SftTensor *t = &out->tensors[out->n];
    Span *s = &spans[out->n];
    rc = parse_tensor(p, e->string, e, data_len, t, &s->begin, &s->end);
    if (rc != 0) break;
    t->name = xstrdup(e->string);
    s->name = t->name;
    t->data = xmalloc(t->nbytes);
    if (t->nbytes) memcpy(t->data, data + s->begin, t->nbytes);
    out->n++;
  }
  if (rc == 0) rc = check_layout(p, out, spans, data_len);
  free(spans);
  return rc;
}

int sft_parse(const void *bytes, size_t len, const char *what, SftFile *out, char *err, size_t errlen) {
  Parse p = {what, err, errlen};
  memset(out, 0, sizeof *out);
  const unsigned char *b = bytes;
  if (len < 8) return parse_fail(&p, "file is %zu bytes, too short for the 8-byte header length", len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
  if (hlen > len - 8)
    return parse_fail(&p, "header length %llu exceeds the %zu bytes after the length field", (unsigned long long)hlen,
                      len - 8);
  /* cJSON wants a NUL-terminated string; a NUL byte is never valid JSON text anyway. */
  char *text = xmalloc((size_t)hlen + 1);
  memcpy(text, b + 8, (size_t)hlen);
  text[hlen] = 0;
  int rc = 0;
  cJSON *root = NULL;
  const char *end = NULL;
  if (memchr(text, 0, (size_t)hlen)) rc = parse_fail(&p, "header contains a NUL byte");
  else if (!(root = cJSON_ParseWithOpts(text, &end, 0)))
    rc = parse_fail(&p, "header is not valid JSON (error near byte %zu)", end ? (size_t)(end - text) : (size_t)0);
  else {
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') end++;
    if (*end) rc = parse_fail(&p, "header has bytes after its JSON value (at byte %zu)", (size_t)(end - text));
    else if (!cJSON_IsObject(root)) rc = parse_fail(&p, "header is not a JSON object");
    else rc = parse_header(&p, root, b + 8 + hlen, len - 8 - (size_t)hlen, out);
  }
  cJSON_Delete(root);
  free(text);
  if (rc != 0) sft_free(out);
  return rc;
}

int sft_read(const char *path, SftFile *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  size_t len = 0;
  errno = 0;
  char *bytes = read_file(path, &len);
  if (!bytes) {
    Parse p = {path, err, errlen};
    return parse_fail(&p, "cannot read: %s", errno == ENODEV ? "it is a device, not a file" : errno ? strerror(errno) : "read error");
  }
  int rc = sft_parse(bytes, len, path, out, err, errlen);
  free(bytes);
  return rc;
}

const SftTensor *sft_find(const SftFile *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}

const char *sft_meta(const SftFile *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
  return NULL;
}

static double half_to_double(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = ldexp(mant, -24); /* zero or subnormal */
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = ldexp(mant | 0x400, exp - 25);
  return sign ? -v : v;
}

static double bf16_to_double(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

double sft_get(const SftTensor *t, int64_t i) {
  CHECK(i >= 0 && i < t->numel);
  switch (t->dtype) {
  case SFT_F32: return ((const float *)t->data)[i];
  case SFT_F64: return ((const double *)t->data)[i];
  case SFT_I32: return ((const int32_t *)t->data)[i];
  case SFT_I64: return (double)((const int64_t *)t->data)[i];
  case SFT_U8: return ((const uint8_t *)t->data)[i];
  case SFT_U16: return ((const uint16_t *)t->data)[i];
  case SFT_I8: return ((const int8_t *)t->data)[i];
  case SFT_I16: return ((const int16_t *)t->data)[i];
  case SFT_F16: return half_to_double(((const uint16_t *)t->data)[i]);
  case SFT_BF16: return bf16_to_double(((const uint16_t *)t->data)[i]);
  default: UNREACHABLE("sft_get: unknown dtype");
  }
}

void sft_free(SftFile *f) {
  for (int i = 0; i < f->n; i++) {
    free(f->tensors[i].name);
    free(f->tensors[i].data);
  }
  free(f->tensors);
  for (int i = 0; i < f->nmeta; i++) {
    free(f->meta_keys[i]);
    free(f->meta_vals[i]);
  }
  free(f->meta_keys);
  free(f->meta_vals);
  memset(f, 0, sizeof *f);
}

/* ---- writing ---- */

typedef struct WTensor {
  char *name;
  SftDtype dtype;
  int ndim;
  int64_t shape[SFT_MAX_DIMS]; /* (ndim) */
  size_t nbytes;
  unsigned char *data;         /* (nbytes), owned */
} WTensor;

typedef struct WMeta {
  char *key, *val;
} WMeta;

struct SftWriter {
  WTensor *items; /* (n), in the order added */
  int n, cap;
  WMeta *meta;    /* (nmeta) */
  int nmeta, capmeta;
};

SftWriter *sft_writer_new(void) { return xcalloc(1, sizeof(SftWriter)); }

static WTensor *writer_push(SftWriter *w, const char *name, SftDtype dtype, int ndim, const int64_t *shape) {
  CHECK((unsigned)dtype < SFT_NDTYPES);
  CHECK(ndim >= 0 && ndim <= SFT_MAX_DIMS);
  CHECK(strcmp(name, "__metadata__") != 0);
  for (int i = 0; i < w->n; i++) CHECK(strcmp(w->items[i].name, name) != 0);
  WTensor t = {.name = xstrdup(name), .dtype = dtype, .ndim = ndim};
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    CHECK(shape[i] >= 0);
    t.shape[i] = shape[i];
    numel *= shape[i];
  }
  t.nbytes = (size_t)numel * dtype_info[dtype].size;
  t.data = xmalloc(t.nbytes);
  VEC_PUSH(w->items, w->n, w->cap, t);
  return &w->items[w->n - 1];
}

void sft_add(SftWriter *w, const char *name, SftDtype dtype, int ndim, const int64_t *shape, const void *data) {
  WTensor *t = writer_push(w, name, dtype, ndim, shape);
  if (t->nbytes) memcpy(t->data, data, t->nbytes);
}

void sft_add_f64_as(SftWriter *w, const char *name, SftDtype dtype, int ndim, const int64_t *shape,
                    const double *data) {
  CHECK(dtype == SFT_F32 || dtype == SFT_F64);
  WTensor *t = writer_push(w, name, dtype, ndim, shape);
  size_t numel = t->nbytes / dtype_info[dtype].size;
  if (dtype == SFT_F64) {
    if (t->nbytes) memcpy(t->data, data, t->nbytes);
  } else {
    float *f = (float *)t->data;
    for (size_t i = 0; i < numel; i++) f[i] = (float)data[i];
  }
}

void sft_set_meta(SftWriter *w, const char *key, const char *value) {
  for (int i = 0; i < w->nmeta; i++)
    if (strcmp(w->meta[i].key, key) == 0) {
      free(w->meta[i].val);
      w->meta[i].val = xstrdup(value);
      return;
    }
  WMeta m = {xstrdup(key), xstrdup(value)};
  VEC_PUSH(w->meta, w->nmeta, w->capmeta, m);
}

void sft_writer_free(SftWriter *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    free(w->items[i].name);
    free(w->items[i].data);
  }
  free(w->items);
  for (int i = 0; i < w->nmeta; i++) {
    free(w->meta[i].key);
    free(w->meta[i].val);
  }
  free(w->meta);
  free(w);
}

/* A growable byte buffer for the header text. */
typedef struct Buf {
  char *s;
  size_t n, cap;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
    b->s = xrealloc(b->s, b->cap);
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void buf_puts(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_json_string(Buf *b, const char *s) {
  buf_puts(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c;
      buf_put(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      buf_puts(b, esc);
    } else buf_put(b, (const char *)&c, 1);
  }
  buf_puts(b, "\"");
}

static int wtensor_by_name(const void *a, const void *b) {
  return strcmp((*(WTensor *const *)a)->name, (*(WTensor *const *)b)->name);
}

static int meta_by_key(const void *a, const void *b) { return strcmp(((const WMeta *)a)->key, ((const WMeta *)b)->key); }

/* The header: {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}
 * with tensors in `order`, padded with spaces to a multiple of 8 bytes. */
static Buf build_header(SftWriter *w, WTensor **order) {
  Buf b = {0};
  buf_puts(&b, "{");
  if (w->nmeta) {
    qsort(w->meta, (size_t)w->nmeta, sizeof *w->meta, meta_by_key);
    buf_puts(&b, "\"__metadata__\":{");
    for (int i = 0; i < w->nmeta; i++) {
      if (i) buf_puts(&b, ",");
      buf_json_string(&b, w->meta[i].key);
      buf_puts(&b, ":");
      buf_json_string(&b, w->meta[i].val);
    }
    buf_puts(&b, "}");
  }
  size_t at = 0;
  char num[64];
  for (int i = 0; i < w->n; i++) {
    WTensor *t = order[i];
    if (i || w->nmeta) buf_puts(&b, ",");
    buf_json_string(&b, t->name);
    buf_puts(&b, ":{\"dtype\":\"");
    buf_puts(&b, dtype_info[t->dtype].name);
    buf_puts(&b, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      buf_puts(&b, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", at, at + t->nbytes);
    buf_puts(&b, num);
    at += t->nbytes;
  }
  buf_puts(&b, "}");
  while (b.n % 8) buf_puts(&b, " ");
  return b;
}

int sft_write(SftWriter *w, const char *path, char *err, size_t errlen) {
  Parse p = {path, err, errlen};
  WTensor **order = xmalloc(sizeof(WTensor *) * (size_t)(w->n ? w->n : 1));
  for (int i = 0; i < w->n; i++) order[i] = &w->items[i];
  qsort(order, (size_t)w->n, sizeof *order, wtensor_by_name);
  Buf hdr = build_header(w, order);

  int rc = 0;
  FsOut o;
  if (fsout_begin(&o, path, err, errlen) < 0) rc = -1;
  else {
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.n >> (8 * i));
    bool ok = fsout_write_all(o.fd, len8, 8) == 0 && fsout_write_all(o.fd, hdr.s, hdr.n) == 0;
    for (int i = 0; ok && i < w->n; i++) ok = fsout_write_all(o.fd, order[i]->data, order[i]->nbytes) == 0;
    if (!ok) {
      rc = parse_fail(&p, "cannot write: %s", strerror(errno));
      fsout_abort(&o);
    } else rc = fsout_commit(&o, err, errlen);
  }
  free(hdr.s);
  free(order);
  return rc;
}
