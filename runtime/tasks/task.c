/* task.c: the table of tasks, key checking, task_new/free, batch allocation and the pieces every task
 * shares: per-batch rng streams, hashing and the per-epoch order of fixed datasets. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "task_impl.h"

static const TaskDef *const task_defs[] = {
#define X(id, new_fn) &id##_def,
    TASK_LIST(X)
#undef X
};
static const TaskNewFn task_ctors[] = {
#define X(id, new_fn) new_fn,
    TASK_LIST(X)
#undef X
};
static const char *const task_name_list[] = {
#define X(id, new_fn) #id,
    TASK_LIST(X)
#undef X
};
#define TASK_COUNT ((int)(sizeof task_defs / sizeof task_defs[0]))
_Static_assert(sizeof task_ctors / sizeof task_ctors[0] == sizeof task_defs / sizeof task_defs[0], "task table");

const TaskDef *task_find(const char *name) {
  for (int i = 0; i < TASK_COUNT; i++)
    if (strcmp(task_defs[i]->name, name) == 0)
      return task_defs[i];
  return NULL;
}

int task_names(const char *const **names) {
  *names = task_name_list;
  return TASK_COUNT;
}

int task_key_index(const TaskDef *def, const char *key) {
  for (int i = 0; i < def->nkeys; i++)
    if (strcmp(def->keys[i].name, key) == 0)
      return i;
  return -1;
}

void task_defaults(const TaskDef *def, double *num, const char **str) {
  for (int i = 0; i < def->nkeys; i++) {
    const TaskKey *k = &def->keys[i];
    if (num)
      num[i] = NAN;
    if (str)
      str[i] = NULL;
    switch (k->type) {
    case TKEY_INT:
    case TKEY_REAL:
      if (num && k->def)
        num[i] = strtod(k->def, NULL);
      break;
    case TKEY_BOOL:
      if (num && k->def)
        num[i] = strcmp(k->def, "true") == 0;
      break;
    case TKEY_STRING:
    case TKEY_PATH:
      if (str)
        str[i] = k->def;
      break;
    default:
      UNREACHABLE("task key type");
    }
  }
}

int task_err(const Task *t, char *err, size_t errlen, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (err && errlen)
    snprintf(err, errlen, "%s: %s", t->def->name, msg);
  return -1;
}

/* Checks one key's value against its type and range; -1 with a message naming the key. */
static int check_key(const Task *t, const TaskKey *k, double v, const char *s, char *err, size_t errlen) {
  switch (k->type) {
  case TKEY_INT:
    if (isnan(v) && !k->def)
      return task_err(t, err, errlen, "%s is required (%s)", k->name, k->doc);
    if (!isfinite(v) || v != floor(v))
      return task_err(t, err, errlen, "%s must be an integer, not %g", k->name, v);
    if (v < k->min || v > k->max)
      return task_err(t, err, errlen, "%s %.0f is out of range [%.0f, %.0f]", k->name, v, k->min, k->max);
    return 0;
  case TKEY_REAL:
    if (isnan(v) && !k->def)
      return task_err(t, err, errlen, "%s is required (%s)", k->name, k->doc);
    if (!isfinite(v) || v < k->min || v > k->max)
      return task_err(t, err, errlen, "%s %g is out of range [%g, %g]", k->name, v, k->min, k->max);
    return 0;
  case TKEY_BOOL:
    if (v != 0 && v != 1)
      return task_err(t, err, errlen, "%s must be true or false, not %g", k->name, v);
    return 0;
  case TKEY_STRING:
    if (!s)
      return task_err(t, err, errlen, "%s is required (%s)", k->name, k->doc);
    return 0;
  case TKEY_PATH:
    if (!k->def && (!s || !*s))
      return task_err(t, err, errlen, "%s is required (%s)", k->name, k->doc);
    return 0;
  default:
    UNREACHABLE("task key type");
  }
}

int task_new(const TaskDef *def, const double *num, const char *const *str, uint64_t seed, Task **out, char *err,
             size_t errlen) {
  CHECK(def && out);
  *out = NULL;
  Task *t = xcalloc(1, sizeof *t);
  t->def = def;
  t->seed = seed;
  t->num = xcalloc((size_t)def->nkeys + 1, sizeof *t->num);
  t->str = xcalloc((size_t)def->nkeys + 1, sizeof *t->str);
  t->perm_epoch[0] = t->perm_epoch[1] = -1;
  const char **dstr = xcalloc((size_t)def->nkeys + 1, sizeof *dstr);
  task_defaults(def, t->num, dstr);
  for (int i = 0; i < def->nkeys; i++) {
    const TaskKey *k = &def->keys[i];
    bool is_str = k->type == TKEY_STRING || k->type == TKEY_PATH;
    if (is_str) {
      const char *s = str ? str[i] : dstr[i];
      if (check_key(t, k, NAN, s, err, errlen))
        goto fail;
      t->num[i] = NAN;
      t->str[i] = s && *s ? xstrdup(s) : NULL;
    } else {
      if (num)
        t->num[i] = num[i];
      if (check_key(t, k, t->num[i], NULL, err, errlen))
        goto fail;
    }
  }
  free(dstr);
  dstr = NULL;
  t->shape.loss = def->loss;
  t->shape.readout = def->readout;
  int i = 0;
  while (task_defs[i] != def) {
    i++;
    CHECK(i < TASK_COUNT); /* def must come from task_find */
  }
  if (task_ctors[i](t, err, errlen))
    goto fail;
  CHECK(t->batch && t->shape.length > 0 && t->shape.out_dim > 0);
  CHECK(t->shape.token_input ? t->shape.vocab > 0 : t->shape.in_dim > 0);
  *out = t;
  return 0;
fail:
  free(dstr);
  task_free(t);
  return -1;
}

void task_free(Task *t) {
  if (!t)
    return;
  if (t->free)
    t->free(t);
  for (int i = 0; i < t->def->nkeys; i++)
    free(t->str[i]);
  free(t->str);
  free(t->num);
  free(t->perm[0]);
  free(t->perm[1]);
  free(t);
}

TaskShape task_shape(const Task *t) { return t->shape; }

void task_batch(Task *t, TaskSplit split, int64_t index, int B, TaskBatch *out) {
  CHECK(t && out && B > 0 && index >= 0);
  CHECK(split == TASK_TRAIN || split == TASK_VALID || split == TASK_TEST);
  const TaskShape *s = &t->shape;
  size_t T = (size_t)s->length, nb = (size_t)B;
  memset(out, 0, sizeof *out);
  out->T = s->length;
  out->B = B;
  if (s->token_input)
    out->tokens = xcalloc(T * nb, sizeof *out->tokens);
  else
    out->x = xcalloc(T * nb * (size_t)s->in_dim, sizeof *out->x);
  bool all = s->readout == TASK_READ_ALL;
  if (s->loss == TASK_LOSS_CE) {
    out->cls = xcalloc(all ? T * nb : nb, sizeof *out->cls);
    if (all)
      for (size_t i = 0; i < T * nb; i++)
        out->cls[i] = -1;
  } else {
    out->y = xcalloc((all ? T * nb : nb) * (size_t)s->out_dim, sizeof *out->y);
  }
  if (all)
    out->mask = xcalloc(T * nb, sizeof *out->mask);
  if (s->lengths)
    out->lengths = xcalloc(nb, sizeof *out->lengths);
  t->batch(t, split, index, out);
}

/* Rows [first, first + n) of each [outer, B, inner] array of g, as a new [outer, n, inner] array
 * (NULL stays NULL). */
static void *slice_rows(const void *g, size_t outer, int B, size_t inner, size_t elem, int first, int n) {
  if (!g)
    return NULL;
  char *out = xcalloc(outer * (size_t)n * inner, elem);
  size_t row = inner * elem;
  for (size_t o = 0; o < outer; o++)
    memcpy(out + o * (size_t)n * row, (const char *)g + (o * (size_t)B + (size_t)first) * row, (size_t)n * row);
  return out;
}

void task_batch_part(Task *t, TaskSplit split, int64_t index, int B, int first, int n, TaskBatch *out) {
  CHECK(first >= 0 && n > 0 && first + n <= B);
  TaskBatch g;
  task_batch(t, split, index, B, &g);
  if (first == 0 && n == B) {
    *out = g;
    return;
  }
  const TaskShape *s = &t->shape;
  size_t T = (size_t)s->length, per = s->readout == TASK_READ_ALL ? T : 1;
  memset(out, 0, sizeof *out);
  out->T = g.T;
  out->B = n;
  out->tokens = slice_rows(g.tokens, T, B, 1, sizeof *g.tokens, first, n);
  out->x = slice_rows(g.x, T, B, (size_t)s->in_dim, sizeof *g.x, first, n);
  out->cls = slice_rows(g.cls, per, B, 1, sizeof *g.cls, first, n);
  out->y = slice_rows(g.y, per, B, (size_t)s->out_dim, sizeof *g.y, first, n);
  out->mask = slice_rows(g.mask, T, B, 1, sizeof *g.mask, first, n);
  out->lengths = slice_rows(g.lengths, 1, B, 1, sizeof *g.lengths, first, n);
  task_batch_free(&g);
}

void task_batch_free(TaskBatch *b) {
  if (!b)
    return;
  free(b->tokens);
  free(b->x);
  free(b->cls);
  free(b->y);
  free(b->mask);
  free(b->lengths);
  memset(b, 0, sizeof *b);
}

/* ---- shared helpers ---- */

static int key_of(const Task *t, const char *key) {
  int i = task_key_index(t->def, key);
  CHECK(i >= 0);
  return i;
}

double task_num(const Task *t, const char *key) {
  int i = key_of(t, key);
  CHECK(t->def->keys[i].type != TKEY_STRING && t->def->keys[i].type != TKEY_PATH);
  return t->num[i];
}

int task_int(const Task *t, const char *key) {
  int i = key_of(t, key);
  CHECK(t->def->keys[i].type == TKEY_INT);
  return (int)t->num[i];
}

const char *task_str(const Task *t, const char *key) {
  int i = key_of(t, key);
  CHECK(t->def->keys[i].type == TKEY_STRING || t->def->keys[i].type == TKEY_PATH);
  return t->str[i];
}

uint64_t task_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t task_hash(const void *p, size_t n, uint64_t key) {
  /* FNV-1a, keyed through its start (a digit short of FNV's offset basis: the data depend on it) */
  return task_mix64(fnv1a(1469598103934665603ull ^ task_mix64(key + 0x9e3779b97f4a7c15ull), p, n));
}

void task_rng(const Task *t, const char *salt, TaskSplit split, int64_t index, Rng *r) {
  uint64_t s = task_mix64(rng_stream_of(t->def->name) ^ task_mix64(rng_stream_of(salt)));
  s = task_mix64(s + (uint64_t)split + 1);
  s = task_mix64(s ^ (uint64_t)index);
  rng_seed(r, t->seed, s);
}

void task_set_bucket(Task *t, bool on) { t->bucket = on && t->shape.lengths && t->item_len; }

/* Sorts each window of w items of p by length, stably (insertion sort: windows are small). */
static void bucket_sort(int64_t *p, int64_t n, int64_t w, const int32_t *len) {
  for (int64_t lo = 0; lo < n; lo += w) {
    int64_t hi = lo + w < n ? lo + w : n;
    for (int64_t i = lo + 1; i < hi; i++) {
      int64_t v = p[i], j = i;
      for (; j > lo && len[p[j - 1]] > len[v]; j--) p[j] = p[j - 1];
      p[j] = v;
    }
  }
}

int64_t task_fixed_item(Task *t, TaskSplit split, int64_t pos) {
  int64_t n = t->shape.split_size[split];
  CHECK(n > 0 && pos >= 0);
  if (split != TASK_TRAIN)
    return pos % n;
  int64_t epoch = pos / n;
  int slot = t->perm_epoch[0] == epoch ? 0 : t->perm_epoch[1] == epoch ? 1 : -1;
  if (slot < 0) {
    slot = t->perm_next;
    t->perm_next ^= 1;
    if (!t->perm[slot])
      t->perm[slot] = xmalloc((size_t)n * sizeof(int64_t));
    int64_t *p = t->perm[slot];
    Rng r;
    task_rng(t, "epoch", TASK_TRAIN, epoch, &r);
    for (int64_t i = 0; i < n; i++)
      p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
      int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
      int64_t tmp = p[i];
      p[i] = p[j];
      p[j] = tmp;
    }
    if (t->bucket_window > 0 && t->item_len)
      bucket_sort(p, n, t->bucket_window, t->item_len);
    t->perm_epoch[slot] = epoch;
  }
  return t->perm[slot][pos % n];
}

void task_fixed_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out, TaskItemFn fill) {
  if (split == TASK_TRAIN && t->bucket && t->bucket_window != 16 * (int64_t)out->B) {
    t->bucket_window = 16 * (int64_t)out->B; /* the epochs' orders cached for another window go */
    t->perm_epoch[0] = t->perm_epoch[1] = -1;
  }
  for (int b = 0; b < out->B; b++)
    fill(t, split, task_fixed_item(t, split, index * out->B + b), b, out);
}

char *task_read_file(const Task *t, const char *path, size_t *len, char *err, size_t errlen) {
  char *buf = read_file(path, len);
  if (!buf)
    task_err(t, err, errlen, "cannot open '%s': %s", path, strerror(errno));
  return buf;
}

static void set_item(Task *t, TaskSplit split, int64_t item, int b, TaskBatch *out) {
  const FixedSet *d = t->data;
  for (int s = 0; s < d->T; s++) {
    size_t from = (size_t)item * d->T + s, to = (size_t)s * out->B + b;
    if (d->tok[split]) out->tokens[to] = d->tok[split][from];
    else out->x[to] = d->x[split][from];
  }
  out->cls[b] = d->label[split][item];
}

void task_set_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) { task_fixed_batch(t, split, index, out, set_item); }

void task_set_free(Task *t) {
  FixedSet *d = t->data;
  for (int s = 0; s < 3; s++) free(d->tok[s]), free(d->x[s]), free(d->label[s]);
  free(d);
}
