/* copying.c: the copying and selective-copying tasks (docs/training.md "Tasks"; shared/seeds.md
 * section 3): remember M tokens across blanks and reproduce them, in order, on the M marker steps
 * at the end. */
#include <string.h>

#include "task_impl.h"

static const TaskKey copying_keys[] = {
    {"tokens", TKEY_INT, "10", 3, 65536, "alphabet size N: blank 0, tokens 1..N-2, marker N-1"},
    {"memorize", TKEY_INT, "10", 1, 100000, "M, the number of tokens to remember"},
    {"length", TKEY_INT, "500", 0, 1000000, "T, the number of blanks between the tokens and the markers"},
};
const TaskDef copying_def = {"copying", copying_keys, 3, TASK_LOSS_CE, TASK_READ_ALL};

static const TaskKey selective_keys[] = {
    {"tokens", TKEY_INT, "16", 3, 65536, "alphabet size N: blank 0, tokens 1..N-2, marker N-1"},
    {"memorize", TKEY_INT, "16", 1, 100000, "M, the number of tokens to remember"},
    {"length", TKEY_INT, "500", 1, 1000000, "T, the steps among which the M tokens are placed"},
};
const TaskDef selective_copying_def = {"selective_copying", selective_keys, 3, TASK_LOSS_CE, TASK_READ_ALL};

/* Train, valid and test never share a sequence: the content (the M tokens, base N-2) decides its split.
 * Small content spaces (at most SMALL_SPACE sequences) get an exact table, shuffled from the seed, with
 * about 10% valid, 10% test (at least one each); larger ones split by a keyed hash of the content:
 * 8 of 10 buckets train, one valid, one test. Each split draws uniformly from its own part (rejection). */
#define SMALL_SPACE 65536

typedef struct CopyData {
  int N, M, T;
  bool selective;
  int64_t space;    /* (N-2)^M when at most SMALL_SPACE, else -1 */
  uint8_t *part;    /* (space) the split of each content index, small spaces only */
  uint64_t key;     /* the content hash's key, large spaces */
  int32_t *content; /* (M) scratch */
  uint8_t *taken;   /* (T) scratch: positions of selective copying */
} CopyData;

static TaskSplit split_of_hash(uint64_t h) {
  int bucket = (int)(h % 10);
  return bucket < 8 ? TASK_TRAIN : bucket == 8 ? TASK_VALID : TASK_TEST;
}

/* Draws the M tokens of one sequence of `split` into d->content. */
static void draw_content(CopyData *d, TaskSplit split, Rng *r) {
  uint64_t base = (uint64_t)d->N - 2;
  if (d->part) {
    uint64_t k;
    do
      k = rng_below(r, (uint64_t)d->space);
    while (d->part[k] != split);
    for (int j = 0; j < d->M; j++, k /= base)
      d->content[j] = (int32_t)(1 + k % base);
    return;
  }
  do {
    for (int j = 0; j < d->M; j++)
      d->content[j] = (int32_t)(1 + rng_below(r, base));
  } while (split_of_hash(task_hash(d->content, (size_t)d->M * sizeof(int32_t), d->key)) != split);
}

/* Copying: tokens on steps [0, M), blanks on [M, M+T), markers on [M+T, 2M+T), targets there.
 * Selective copying: the M tokens at distinct random positions of [0, T) (in increasing order), blanks
 * elsewhere in [0, T), markers on [T, T+M), targets there: the tokens in the order they appeared. */
static void copying_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) {
  CopyData *d = t->data;
  int B = out->B, Tlen = out->T, M = d->M;
  Rng r;
  task_rng(t, "batch", split, index, &r);
  for (int b = 0; b < B; b++) {
    draw_content(d, split, &r);
    int first_marker = Tlen - M;
    if (!d->selective) {
      for (int j = 0; j < M; j++)
        out->tokens[(size_t)j * B + b] = d->content[j];
    } else {
      /* Floyd's sampling of M distinct positions in [0, T), then written in increasing order. */
      memset(d->taken, 0, (size_t)d->T);
      for (int j = d->T - M; j < d->T; j++) {
        int p = (int)rng_below(&r, (uint64_t)j + 1);
        d->taken[d->taken[p] ? j : p] = 1;
      }
      for (int p = 0, j = 0; p < d->T; p++)
        if (d->taken[p])
          out->tokens[(size_t)p * B + b] = d->content[j++];
    }
    for (int j = 0; j < M; j++) {
      size_t at = (size_t)(first_marker + j) * B + b;
      out->tokens[at] = d->N - 1;
      out->cls[at] = d->content[j];
      out->mask[at] = 1;
    }
  }
}

static void copying_free(Task *t) {
  CopyData *d = t->data;
  free(d->part);
  free(d->content);
  free(d->taken);
  free(d);
}

static int copy_new(Task *t, bool selective, char *err, size_t errlen) {
  int N = task_int(t, "tokens"), M = task_int(t, "memorize"), T = task_int(t, "length");
  if (selective && M > T)
    return task_err(t, err, errlen, "memorize %d exceeds length %d (the tokens take distinct steps among the first %d)",
                    M, T, T);
  int64_t space = 1;
  for (int j = 0; j < M && space <= SMALL_SPACE; j++)
    space *= N - 2;
  if (space > SMALL_SPACE)
    space = -1;
  if (space >= 0 && space < 3)
    return task_err(t, err, errlen,
                    "tokens %d and memorize %d give only %lld distinct sequences, too few to keep train, valid and "
                    "test apart",
                    N, M, (long long)space);
  CopyData *d = xcalloc(1, sizeof *d);
  t->data = d;
  t->free = copying_free;
  d->N = N;
  d->M = M;
  d->T = T;
  d->selective = selective;
  d->space = space;
  d->content = xcalloc((size_t)M, sizeof *d->content);
  d->taken = xcalloc((size_t)T + 1, 1);
  Rng r;
  task_rng(t, "parts", TASK_TRAIN, 0, &r);
  d->key = rng_next(&r);
  if (space > 0) {
    /* A seeded shuffle of the content indices: the first nv go to valid, the next nv to test. */
    int64_t *order = xmalloc((size_t)space * sizeof *order);
    for (int64_t i = 0; i < space; i++)
      order[i] = i;
    for (int64_t i = space - 1; i > 0; i--) {
      int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1), tmp = order[i];
      order[i] = order[j];
      order[j] = tmp;
    }
    int64_t nv = space / 10 > 1 ? space / 10 : 1;
    d->part = xmalloc((size_t)space);
    for (int64_t i = 0; i < space; i++)
      d->part[order[i]] = i < nv ? TASK_VALID : i < 2 * nv ? TASK_TEST : TASK_TRAIN;
    free(order);
  }
  t->shape.token_input = true;
  t->shape.vocab = N;
  t->shape.out_dim = N;
  t->shape.length = selective ? T + M : 2 * M + T;
  t->batch = copying_batch;
  return 0;
}

int copying_new(Task *t, char *err, size_t errlen) { return copy_new(t, false, err, errlen); }
int selective_copying_new(Task *t, char *err, size_t errlen) { return copy_new(t, true, err, errlen); }
