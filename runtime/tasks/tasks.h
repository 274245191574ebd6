/* tasks.h: the data tasks of the training runtime (docs/training.md "Tasks", shared/spec/cli.md
 * "Tasks", shared/seeds.md section 3): their table of keys, and deterministic batches of each
 * split, time-major, drawn from a seed or read from files. */
#ifndef CELLC_TASK_H
#define CELLC_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { TASK_LOSS_CE, TASK_LOSS_MSE } TaskLoss;
typedef enum { TASK_READ_ALL, TASK_READ_LAST, TASK_READ_MEAN } TaskReadout;
typedef enum { TASK_TRAIN, TASK_VALID, TASK_TEST } TaskSplit;
typedef enum { TKEY_INT, TKEY_REAL, TKEY_BOOL, TKEY_STRING, TKEY_PATH } TaskKeyType;

/* A configuration key of a task: name, type, default (as text: a number, "true"/"false", a word,
 * "" for an optional path; NULL when the key is required), inclusive range for numbers, a one-line doc. */
typedef struct TaskKey {
  const char *name;
  TaskKeyType type;
  const char *def;
  double min, max;
  const char *doc;
} TaskKey;

typedef struct TaskDef {
  const char *name;
  const TaskKey *keys;
  int nkeys;
  TaskLoss loss;       /* the task's default loss (spec table) */
  TaskReadout readout; /* the task's default readout */
} TaskDef;

const TaskDef *task_find(const char *name);              /* NULL if unknown */
int task_names(const char *const **names);               /* sets *names to every task name; returns their count */
int task_key_index(const TaskDef *def, const char *key); /* index in def->keys, or -1 */

/* Fills num/str (def->nkeys each) with the defaults: numbers (bools 0/1) in num, strings and paths in
 * str (NULL for numbers; NULL for a required key). */
void task_defaults(const TaskDef *def, double *num, const char **str);

typedef struct Task Task;

/* Creates the task: checks every key (range, integrality, required), loads the files of images, text
 * and tokens, builds the fixed splits of temporal_xor and mnist1d. Values of the keys come in the order
 * of def->keys: numbers in num[i] (bools 0/1), strings and paths in str[i] (NULL for numbers); num or
 * str NULL means "all defaults". Returns 0, or -1 with a one-line message naming the task in err
 * (e.g. "images: cannot open 'x.idx': No such file or directory"). */
int task_new(const TaskDef *def, const double *num, const char *const *str, uint64_t seed, Task **out, char *err,
             size_t errlen);
void task_free(Task *t);

typedef struct TaskShape {
  bool token_input;
  int vocab;   /* token inputs: ids in [0, vocab) (0 for real-valued inputs) */
  int in_dim;  /* real-valued inputs: channels per step (0 for token inputs) */
  int out_dim; /* CE: number of classes; MSE: target size */
  int length;  /* T, the sequence length of every batch */
  TaskLoss loss;
  TaskReadout readout;
  bool lengths; /* batches carry each sequence's length (TaskBatch.lengths): some are shorter than length */
  int64_t split_size[3]; /* sequences in train/valid/test for fixed datasets (text/tokens: windows of
                            `context` tokens); 0 = generated fresh from the seed (unbounded stream) */
} TaskShape;

TaskShape task_shape(const Task *t);

/* One batch, time-major. Buffers are owned by the batch (task_batch_free). */
typedef struct TaskBatch {
  int T, B;
  int32_t *tokens; /* [T, B] token ids, when token_input; else NULL */
  float *x;        /* [T, B, in_dim] otherwise; else NULL */
  int32_t *cls;    /* CE targets: [T, B] for readout all (-1 = no loss at this step), [B] for last/mean */
  float *y;        /* MSE targets: [B, out_dim] (readout last/mean) or [T, B, out_dim] (readout all) */
  float *mask;     /* [T, B]: 1 where the loss counts (readout all), else NULL */
  int32_t *lengths; /* [B]: each sequence's length in 1..T when the shape has lengths, else NULL; the
                       steps after it are zeros with no target */
} TaskBatch;

/* Fills batch number `index` (0, 1, 2, ...) of `split`; the same (seed, split, index, B) always gives
 * the same batch. Generated tasks draw each batch from its own rng stream per (split, index), and
 * train/valid/test never share a sequence. Fixed datasets: batch `index` holds sequences
 * [index*B, index*B + B) of the split modulo its size; train in an order shuffled once per epoch
 * (epoch = position / size), valid and test in file order. Not thread-safe on one Task (the train
 * split caches its epoch order). */
void task_batch(Task *t, TaskSplit split, int64_t index, int B, TaskBatch *out);
/* Sequences [first, first + n) of batch `index` of B sequences (a rank's share of the global batch
 * in data-parallel training): exactly those rows of what task_batch(t, split, index, B) fills. */
void task_batch_part(Task *t, TaskSplit split, int64_t index, int B, int first, int n, TaskBatch *out);
void task_batch_free(TaskBatch *b);
/* train.bucket: the train split's batches of a task with lengths are built from sequences of
 * similar lengths (each window of 16 batches of the epoch's shuffled order sorted by length).
 * Nothing changes for a task without lengths. */
void task_set_bucket(Task *t, bool on);

#endif
