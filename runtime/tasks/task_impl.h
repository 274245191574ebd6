/* task_impl.h: what the task files share inside runtime/tasks: the table of tasks, the Task object,
 * key access, error messages, per-batch rng streams and the epoch order of fixed datasets. */
#ifndef CELLC_TASK_IMPL_H
#define CELLC_TASK_IMPL_H

#include "support.h"
#include "tasks.h"

/* Every task: its def (`copying_def`) and its constructor, in the order task_names lists them. */
#define TASK_LIST(X)                                                                                                   \
  X(copying, copying_new)                                                                                              \
  X(selective_copying, selective_copying_new)                                                                          \
  X(adding, regression_new)                                                                                            \
  X(temporal_xor, temporal_xor_new)                                                                                    \
  X(ar2, regression_new)                                                                                               \
  X(delay_sum, regression_new)                                                                                         \
  X(moving_average, regression_new)                                                                                    \
  X(sinmix, regression_new)                                                                                            \
  X(mnist1d, mnist1d_new)                                                                                              \
  X(images, images_new)                                                                                                \
  X(text, text_new)                                                                                                    \
  X(tokens, tokens_new)                                                                                                \
  X(file, file_new)

/* A constructor: reads its keys from t (task_num, task_str), sets t->shape (length, dims, split sizes;
 * loss and readout come from the def), t->batch and, when it keeps data, t->data and t->free.
 * Returns 0, or -1 after task_err. */
typedef int (*TaskNewFn)(Task *t, char *err, size_t errlen);

#define X(id, new_fn)                                                                                                  \
  extern const TaskDef id##_def;                                                                                       \
  int new_fn(Task *t, char *err, size_t errlen);
TASK_LIST(X)
#undef X

/* Fills a batch that task_batch has allocated for shape (T, B): inputs zeroed, cls -1 (readout all)
 * or 0, mask and y zeroed. */
typedef void (*TaskBatchFn)(Task *t, TaskSplit split, int64_t index, TaskBatch *out);

struct Task {
  const TaskDef *def;
  uint64_t seed;
  double *num; /* (def->nkeys) key values; NaN for strings */
  char **str;  /* (def->nkeys) owned copies of strings and paths; NULL for numbers and absent paths */
  TaskShape shape;
  TaskBatchFn batch;
  void (*free)(Task *t); /* frees data; NULL when there is none */
  void *data;            /* the task's own state */
  /* Fixed datasets: the train order of the two most recent epochs (a batch may straddle two). */
  int64_t perm_epoch[2]; /* -1 = empty slot */
  int64_t *perm[2];      /* (split_size[TASK_TRAIN]) */
  int perm_next;         /* slot to replace next */
  /* train.bucket (task_set_bucket): the train items' lengths (the task's data), windows of
   * bucket_window items of each epoch's order sorted by them; bucket_window 0: off */
  const int32_t *item_len;
  bool bucket;
  int64_t bucket_window;
};

double task_num(const Task *t, const char *key);      /* a number or bool key */
int task_int(const Task *t, const char *key);         /* an integer key */
const char *task_str(const Task *t, const char *key); /* a string or path key; NULL for an absent path */

/* Writes "<task>: <message>" into err; returns -1. */
int task_err(const Task *t, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The rng of batch `index` of `split`, a stream of its own (`salt` separates a task's other uses). */
void task_rng(const Task *t, const char *salt, TaskSplit split, int64_t index, Rng *r);
uint64_t task_mix64(uint64_t x); /* a bijective 64-bit mixer (splitmix64's finalizer) */
uint64_t task_hash(const void *p, size_t n, uint64_t key);

/* Fixed datasets: the item of `split` at position pos (0, 1, 2, ...): pos modulo the split's size,
 * through the epoch's shuffled order for train, in file order for valid and test. */
int64_t task_fixed_item(Task *t, TaskSplit split, int64_t pos);

/* Fills row b of a batch from item `item` of `split` of a fixed dataset. */
typedef void (*TaskItemFn)(Task *t, TaskSplit split, int64_t item, int b, TaskBatch *out);
/* Fixed datasets: fills each row b with item task_fixed_item(split, index*B + b). */
void task_fixed_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out, TaskItemFn fill);

/* A fixed dataset held in memory, per split: n items of T steps (token ids or one channel of
 * values) and a class each. A task's data that starts with one can use the two functions below. */
typedef struct FixedSet {
  int T;
  int32_t *tok[3];   /* (n, T) per split: token inputs; else NULL */
  float *x[3];       /* (n, T) per split: one input channel; else NULL */
  int32_t *label[3]; /* (n) per split */
} FixedSet;
/* Fills a batch from the FixedSet at the start of t->data (a TaskBatchFn). */
void task_set_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out);
/* Frees the FixedSet's arrays and t->data. */
void task_set_free(Task *t);

/* Reads a whole file; on failure writes "<task>: cannot open 'path': <strerror>" and returns NULL. */
char *task_read_file(const Task *t, const char *path, size_t *len, char *err, size_t errlen);

#endif
