/* text.c: language modelling on a file: next-byte prediction on a text file (text) or next-token
 * prediction on little-endian uint16 token ids (tokens), a target at every step. */
#include <string.h>

#include "task_impl.h"

#define MAX_CONTEXT (1 << 20)

static const TaskKey text_keys[] = {
    {"path", TKEY_PATH, NULL, 0, 0, "a text file; its bytes are the tokens (vocab 256)"},
    {"context", TKEY_INT, "256", 1, MAX_CONTEXT, "steps per sequence"},
};
const TaskDef text_def = {"text", text_keys, 2, TASK_LOSS_CE, TASK_READ_ALL};

static const TaskKey tokens_keys[] = {
    {"path", TKEY_PATH, NULL, 0, 0, "a binary file of little-endian uint16 token ids"},
    {"vocab", TKEY_INT, NULL, 1, 65536, "the number of token ids, above the largest id in the file"},
    {"context", TKEY_INT, "1024", 1, MAX_CONTEXT, "steps per sequence"},
};
const TaskDef tokens_def = {"tokens", tokens_keys, 3, TASK_LOSS_CE, TASK_READ_ALL};

typedef struct CorpusData {
  int32_t *ids; /* (n) the whole corpus */
  int64_t n;
  int ctx;
  int64_t start[3], len[3]; /* the contiguous chunk of each split */
} CorpusData;

/* Window of the split's chunk at offset `at`: inputs ids[at, at+ctx), targets ids[at+1, at+ctx+1).
 * Train: random offsets, an rng stream per batch. Valid, test: consecutive non-overlapping windows,
 * window (index*B + b) modulo their count. */
static void corpus_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) {
  CorpusData *d = t->data;
  int B = out->B, ctx = d->ctx;
  Rng r;
  task_rng(t, "window", split, index, &r);
  for (int b = 0; b < B; b++) {
    int64_t at;
    if (split == TASK_TRAIN)
      at = (int64_t)rng_below(&r, (uint64_t)(d->len[split] - ctx));
    else
      at = (index * B + b) % t->shape.split_size[split] * ctx;
    const int32_t *w = d->ids + d->start[split] + at;
    for (int s = 0; s < ctx; s++) {
      size_t i = (size_t)s * B + b;
      out->tokens[i] = w[s];
      out->cls[i] = w[s + 1];
      out->mask[i] = 1;
    }
  }
}

static void corpus_free(Task *t) {
  CorpusData *d = t->data;
  free(d->ids);
  free(d);
}

/* Splits the corpus 90/5/5 into contiguous chunks, each at least context + 1 long; split_size counts
 * the non-overlapping windows of each chunk (for train, the windows of one epoch). */
static int corpus_split(Task *t, CorpusData *d, const char *path, const char *unit, char *err, size_t errlen) {
  static const char *const names[3] = {"train", "valid", "test"};
  static const char *const where[3] = {"the first 90%", "the next 5%", "the last 5%"};
  d->len[0] = d->n * 9 / 10;
  d->len[1] = d->n / 20;
  d->len[2] = d->n - d->len[0] - d->len[1];
  for (int s = 0; s < 3; s++) {
    d->start[s] = s == 0 ? 0 : d->start[s - 1] + d->len[s - 1];
    if (d->len[s] < (int64_t)d->ctx + 1)
      return task_err(t, err, errlen,
                      "'%s' is too short: its %s split (%s, %lld %s) is shorter than context + 1 = %d %s", path,
                      names[s], where[s], (long long)d->len[s], unit, d->ctx + 1, unit);
    t->shape.split_size[s] = (d->len[s] - 1) / d->ctx;
  }
  t->shape.token_input = true;
  t->shape.length = d->ctx;
  t->batch = corpus_batch;
  return 0;
}

int text_new(Task *t, char *err, size_t errlen) {
  const char *path = task_str(t, "path");
  size_t len;
  char *buf = task_read_file(t, path, &len, err, errlen);
  if (!buf)
    return -1;
  CorpusData *d = xcalloc(1, sizeof *d);
  t->data = d;
  t->free = corpus_free;
  d->n = (int64_t)len;
  d->ctx = task_int(t, "context");
  d->ids = xmalloc((len + 1) * sizeof *d->ids);
  for (size_t i = 0; i < len; i++)
    d->ids[i] = (unsigned char)buf[i];
  free(buf);
  t->shape.vocab = 256;
  t->shape.out_dim = 256;
  return corpus_split(t, d, path, "bytes", err, errlen);
}

int tokens_new(Task *t, char *err, size_t errlen) {
  const char *path = task_str(t, "path");
  int vocab = task_int(t, "vocab");
  size_t len;
  char *buf = task_read_file(t, path, &len, err, errlen);
  if (!buf)
    return -1;
  if (len % 2) {
    free(buf);
    return task_err(t, err, errlen, "'%s' has an odd size (%zu bytes); expected little-endian uint16 ids", path, len);
  }
  CorpusData *d = xcalloc(1, sizeof *d);
  t->data = d;
  t->free = corpus_free;
  d->n = (int64_t)(len / 2);
  d->ctx = task_int(t, "context");
  d->ids = xmalloc((len / 2 + 1) * sizeof *d->ids);
  const unsigned char *p = (const unsigned char *)buf;
  for (int64_t i = 0; i < d->n; i++) {
    d->ids[i] = p[2 * i] | p[2 * i + 1] << 8;
    if (d->ids[i] >= vocab) {
      int32_t id = d->ids[i];
      free(buf);
      return task_err(t, err, errlen, "'%s': token id %d at position %lld is not below vocab %d", path, id,
                      (long long)i, vocab);
    }
  }
  free(buf);
  t->shape.vocab = vocab;
  t->shape.out_dim = vocab;
  return corpus_split(t, d, path, "tokens", err, errlen);
}
