/* test_tasks.c: the data tasks of runtime/tasks: their table, the structure of each task's batches,
 * determinism, disjoint splits, the fixed datasets' order, the file formats and every task_new error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"
#include "tasks.h"

static char err[512];

/* Builds task `name` with keys from kv ("key", "value", ..., NULL); returns task_new's result. */
static int build(const char *name, const char *const *kv, uint64_t seed, Task **t) {
  const TaskDef *d = task_find(name);
  cr_assert_not_null(d, "no task %s", name);
  double num[16];
  const char *str[16];
  cr_assert_leq(d->nkeys, 16);
  task_defaults(d, num, str);
  for (; kv && kv[0]; kv += 2) {
    int i = task_key_index(d, kv[0]);
    cr_assert_geq(i, 0, "%s has no key %s", name, kv[0]);
    switch (d->keys[i].type) {
    case TKEY_BOOL:
      num[i] = strcmp(kv[1], "true") == 0 ? 1 : strcmp(kv[1], "false") == 0 ? 0 : strtod(kv[1], NULL);
      break;
    case TKEY_INT:
    case TKEY_REAL:
      num[i] = strtod(kv[1], NULL);
      break;
    default:
      str[i] = kv[1];
      break;
    }
  }
  err[0] = 0;
  *t = NULL;
  return task_new(d, num, str, seed, t, err, sizeof err);
}

static Task *make(const char *name, const char *const *kv, uint64_t seed) {
  Task *t;
  cr_assert_eq(build(name, kv, seed, &t), 0, "%s: %s", name, err);
  cr_assert_not_null(t);
  return t;
}

/* Expects task_new to fail with a message that starts with the task's name and contains `want`. */
static void expect_error(const char *name, const char *const *kv, const char *want) {
  Task *t;
  cr_assert_eq(build(name, kv, 1, &t), -1, "%s accepted", name);
  cr_assert_null(t);
  cr_assert_eq(strncmp(err, name, strlen(name)), 0, "message '%s' does not name %s", err, name);
  cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Input of row b as bytes, hashed (FNV-1a), for comparing sequences across batches. */
static uint64_t row_hash(const Task *t, const TaskBatch *bt, int b) {
  TaskShape s = task_shape(t);
  uint64_t h = FNV1A_INIT;
  for (int i = 0; i < bt->T; i++) {
    if (s.token_input) h = fnv1a(h, &bt->tokens[(size_t)i * bt->B + b], sizeof(int32_t));
    else h = fnv1a(h, &bt->x[((size_t)i * bt->B + b) * s.in_dim], sizeof(float) * (size_t)s.in_dim);
  }
  return h;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Hashes of every row of `nb` batches of B rows of a split, sorted. */
static uint64_t *split_hashes(Task *t, TaskSplit split, int nb, int B) {
  uint64_t *h = malloc(sizeof *h * (size_t)nb * B);
  for (int i = 0; i < nb; i++) {
    TaskBatch bt;
    task_batch(t, split, i, B, &bt);
    for (int b = 0; b < B; b++)
      h[(size_t)i * B + b] = row_hash(t, &bt, b);
    task_batch_free(&bt);
  }
  qsort(h, (size_t)nb * B, sizeof *h, cmp_u64);
  return h;
}

/* Number of values of sorted a that also occur in sorted b. */
static int shared(const uint64_t *a, const uint64_t *b, int n) {
  int count = 0;
  for (int i = 0, j = 0; i < n && j < n;) {
    if (a[i] < b[j])
      i++;
    else if (a[i] > b[j])
      j++;
    else
      count++, i++;
  }
  return count;
}

static void expect_disjoint_splits(Task *t, int nb, int B) {
  uint64_t *h[3];
  for (int s = 0; s < 3; s++)
    h[s] = split_hashes(t, (TaskSplit)s, nb, B);
  int n = nb * B;
  cr_assert_eq(shared(h[0], h[1], n), 0, "train and valid share sequences");
  cr_assert_eq(shared(h[0], h[2], n), 0, "train and test share sequences");
  cr_assert_eq(shared(h[1], h[2], n), 0, "valid and test share sequences");
  for (int s = 0; s < 3; s++)
    free(h[s]);
}

/* True when two batches hold the same inputs and targets. */
static bool same_batch(const Task *t, const TaskBatch *a, const TaskBatch *b) {
  TaskShape s = task_shape(t);
  size_t TB = (size_t)a->T * a->B;
  if (a->T != b->T || a->B != b->B)
    return false;
  if (s.token_input ? memcmp(a->tokens, b->tokens, TB * sizeof(int32_t))
                    : memcmp(a->x, b->x, TB * (size_t)s.in_dim * sizeof(float)))
    return false;
  bool all = s.readout == TASK_READ_ALL;
  if (s.loss == TASK_LOSS_CE)
    return memcmp(a->cls, b->cls, (all ? TB : (size_t)a->B) * sizeof(int32_t)) == 0;
  return memcmp(a->y, b->y, (all ? TB : (size_t)a->B) * (size_t)s.out_dim * sizeof(float)) == 0;
}

/* Writes n bytes to a file under /tmp named after the test; returns its path (static buffer per slot). */
static const char *write_tmp(int slot, const char *tag, const void *data, size_t n) {
  static char paths[8][256];
  snprintf(paths[slot], sizeof paths[slot], "/tmp/cellc_test_tasks_%d_%s", (int)getpid(), tag);
  FILE *f = fopen(paths[slot], "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
  return paths[slot];
}

/* ---- the table ---- */

Test(tasks, table_knows_every_task) {
  const char *const *names;
  int n = task_names(&names);
  const char *want[] = {
      "copying", "selective_copying", "adding", "temporal_xor", "ar2",   "delay_sum", "moving_average",
      "sinmix",  "mnist1d",           "images", "text",         "tokens",   "file"};
  cr_assert_eq(n, 13);
  for (int i = 0; i < n; i++) {
    cr_assert_str_eq(names[i], want[i]);
    const TaskDef *d = task_find(names[i]);
    cr_assert_not_null(d);
    cr_assert_str_eq(d->name, names[i]);
  }
  cr_assert_null(task_find("copy"));
}

Test(tasks, keys_and_defaults_follow_the_spec) {
  struct {
    const char *task, *key, *def;
  } want[] = {
      {"copying", "tokens", "10"},
      {"copying", "memorize", "10"},
      {"copying", "length", "500"},
      {"selective_copying", "tokens", "16"},
      {"selective_copying", "memorize", "16"},
      {"selective_copying", "length", "500"},
      {"adding", "length", "80"},
      {"adding", "noise_channels", "3"},
      {"temporal_xor", "length", "100"},
      {"temporal_xor", "vocab", "10"},
      {"temporal_xor", "easy_fraction", "0"},
      {"temporal_xor", "window", "10"},
      {"temporal_xor", "classes", "2"},
      {"temporal_xor", "treated", "all"},
      {"temporal_xor", "train", "2000"},
      {"temporal_xor", "valid", "400"},
      {"temporal_xor", "test", "400"},
      {"ar2", "length", "120"},
      {"delay_sum", "channels", "2"},
      {"moving_average", "length", "120"},
      {"sinmix", "channels", "4"},
      {"mnist1d", "length", "40"},
      {"mnist1d", "train", "4000"},
      {"mnist1d", "test", "1000"},
      {"images", "permute", "false"},
      {"text", "context", "256"},
      {"tokens", "context", "1024"},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const TaskDef *d = task_find(want[i].task);
    int k = task_key_index(d, want[i].key);
    cr_assert_geq(k, 0, "%s.%s", want[i].task, want[i].key);
    cr_assert_str_eq(d->keys[k].def, want[i].def, "%s.%s", want[i].task, want[i].key);
    cr_assert_not_null(d->keys[k].doc);
  }
  cr_assert_null(task_find("images")->keys[task_key_index(task_find("images"), "path")].def, "path is required");
  cr_assert_null(task_find("tokens")->keys[task_key_index(task_find("tokens"), "vocab")].def, "vocab is required");
  cr_assert_eq(task_key_index(task_find("copying"), "blanks"), -1);
}

Test(tasks, loss_and_readout_follow_the_spec) {
  struct {
    const char *task;
    TaskLoss loss;
    TaskReadout readout;
  } want[] = {
      {"copying", TASK_LOSS_CE, TASK_READ_ALL},
      {"selective_copying", TASK_LOSS_CE, TASK_READ_ALL},
      {"adding", TASK_LOSS_MSE, TASK_READ_LAST},
      {"temporal_xor", TASK_LOSS_CE, TASK_READ_LAST},
      {"ar2", TASK_LOSS_MSE, TASK_READ_LAST},
      {"delay_sum", TASK_LOSS_MSE, TASK_READ_LAST},
      {"moving_average", TASK_LOSS_MSE, TASK_READ_LAST},
      {"sinmix", TASK_LOSS_MSE, TASK_READ_LAST},
      {"mnist1d", TASK_LOSS_CE, TASK_READ_LAST},
      {"images", TASK_LOSS_CE, TASK_READ_LAST},
      {"text", TASK_LOSS_CE, TASK_READ_ALL},
      {"tokens", TASK_LOSS_CE, TASK_READ_ALL},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const TaskDef *d = task_find(want[i].task);
    cr_assert_eq(d->loss, want[i].loss, "%s", want[i].task);
    cr_assert_eq(d->readout, want[i].readout, "%s", want[i].task);
  }
}

Test(tasks, null_values_mean_defaults) {
  Task *t;
  cr_assert_eq(task_new(task_find("copying"), NULL, NULL, 1, &t, err, sizeof err), 0, "%s", err);
  TaskShape s = task_shape(t);
  cr_assert_eq(s.length, 2 * 10 + 500);
  cr_assert_eq(s.vocab, 10);
  task_free(t);
}

/* ---- key checking (every task) ---- */

Test(tasks, integer_key_out_of_range_is_an_error) {
  expect_error("copying", KV("tokens", "2"), "tokens 2 is out of range [3, 65536]");
}

Test(tasks, fractional_integer_key_is_an_error) {
  expect_error("adding", KV("length", "2.5"), "length must be an integer, not 2.5");
}

Test(tasks, real_key_out_of_range_is_an_error) {
  expect_error("temporal_xor", KV("easy_fraction", "1.5"), "easy_fraction 1.5 is out of range [0, 1]");
}

Test(tasks, bool_key_must_be_true_or_false) {
  expect_error("images", KV("path", "a", "labels", "b", "permute", "2"), "permute must be true or false");
}

Test(tasks, missing_required_path_is_an_error) {
  expect_error("images", KV("labels", "b"), "path is required");
  expect_error("text", NULL, "path is required");
}

Test(tasks, missing_required_number_is_an_error) {
  const char *p = write_tmp(0, "req.bin", "\1\0\2\0", 4);
  expect_error("tokens", KV("path", p), "vocab is required");
  unlink(p);
}

Test(tasks, missing_string_is_an_error) {
  const TaskDef *d = task_find("temporal_xor");
  double num[16];
  const char *str[16];
  task_defaults(d, num, str);
  str[task_key_index(d, "treated")] = NULL;
  Task *t;
  cr_assert_eq(task_new(d, num, str, 1, &t, err, sizeof err), -1);
  cr_assert_not_null(strstr(err, "treated is required"), "%s", err);
}

/* ---- copying and selective copying ---- */

Test(copying, shape_is_2m_plus_t_tokens) {
  Task *t = make("copying", KV("tokens", "8", "memorize", "5", "length", "30"), 1);
  TaskShape s = task_shape(t);
  cr_assert(s.token_input);
  cr_assert_eq(s.vocab, 8);
  cr_assert_eq(s.out_dim, 8);
  cr_assert_eq(s.length, 2 * 5 + 30);
  cr_assert_eq(s.loss, TASK_LOSS_CE);
  cr_assert_eq(s.readout, TASK_READ_ALL);
  cr_assert_eq(s.split_size[0] + s.split_size[1] + s.split_size[2], 0);
  task_free(t);
}

Test(copying, targets_are_the_first_m_tokens) {
  int N = 10, M = 10, T = 50, B = 32;
  Task *t = make("copying", KV("length", "50"), 3);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 0, B, &bt);
  for (int b = 0; b < B; b++)
    for (int j = 0; j < M; j++) {
      int tok = bt.tokens[j * B + b];
      cr_assert(tok >= 1 && tok <= N - 2, "token %d", tok);
      cr_assert_eq(bt.cls[(M + T + j) * B + b], tok);
    }
  task_batch_free(&bt);
  task_free(t);
}

Test(copying, blanks_are_zero_and_markers_n_minus_1) {
  int N = 10, M = 10, T = 50, B = 16;
  Task *t = make("copying", KV("length", "50"), 3);
  TaskBatch bt;
  task_batch(t, TASK_VALID, 2, B, &bt);
  for (int b = 0; b < B; b++) {
    for (int i = M; i < M + T; i++)
      cr_assert_eq(bt.tokens[i * B + b], 0);
    for (int i = M + T; i < 2 * M + T; i++)
      cr_assert_eq(bt.tokens[i * B + b], N - 1);
  }
  task_batch_free(&bt);
  task_free(t);
}

Test(copying, loss_only_on_the_last_m_steps) {
  int M = 10, T = 50, B = 8;
  Task *t = make("copying", KV("length", "50"), 3);
  TaskBatch bt;
  task_batch(t, TASK_TEST, 0, B, &bt);
  cr_assert_not_null(bt.mask);
  cr_assert_null(bt.x);
  for (int i = 0; i < 2 * M + T; i++)
    for (int b = 0; b < B; b++) {
      bool last = i >= M + T;
      cr_assert_eq(bt.mask[i * B + b], last ? 1.0f : 0.0f, "step %d", i);
      if (!last)
        cr_assert_eq(bt.cls[i * B + b], -1, "step %d", i);
    }
  task_batch_free(&bt);
  task_free(t);
}

Test(copying, splits_are_disjoint) {
  Task *t = make("copying", KV("length", "5"), 7);
  expect_disjoint_splits(t, 40, 64);
  task_free(t);
}

Test(copying, small_space_splits_are_disjoint) {
  /* tokens 4, memorize 3: 2^3 = 8 distinct sequences; one for valid, one for test, six for train. */
  Task *t = make("copying", KV("tokens", "4", "memorize", "3", "length", "2"), 7);
  uint64_t *h[3];
  int distinct[3];
  for (int s = 0; s < 3; s++) {
    h[s] = split_hashes(t, (TaskSplit)s, 10, 64);
    distinct[s] = 1;
    for (int i = 1; i < 640; i++)
      distinct[s] += h[s][i] != h[s][i - 1];
  }
  cr_assert_eq(distinct[0], 6);
  cr_assert_eq(distinct[1], 1);
  cr_assert_eq(distinct[2], 1);
  cr_assert_eq(shared(h[0], h[1], 640) + shared(h[0], h[2], 640) + shared(h[1], h[2], 640), 0);
  for (int s = 0; s < 3; s++)
    free(h[s]);
  task_free(t);
}

Test(copying, hashed_space_splits_are_disjoint) {
  /* tokens 4, memorize 17: 2^17 sequences, split by hash; 2560 draws per split would share about 50
   * sequences between two splits if they were drawn independently. */
  Task *t = make("copying", KV("tokens", "4", "memorize", "17", "length", "1"), 7);
  expect_disjoint_splits(t, 40, 64);
  task_free(t);
}

Test(copying, too_few_sequences_is_an_error) {
  expect_error("copying", KV("tokens", "4", "memorize", "1"), "only 2 distinct sequences");
}

Test(selective_copying, shape_is_t_plus_m) {
  Task *t = make("selective_copying", KV("length", "40"), 1);
  TaskShape s = task_shape(t);
  cr_assert_eq(s.length, 40 + 16);
  cr_assert_eq(s.vocab, 16);
  task_free(t);
}

Test(selective_copying, targets_are_the_tokens_in_order) {
  int N = 16, M = 16, T = 40, B = 32;
  Task *t = make("selective_copying", KV("length", "40"), 5);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 1, B, &bt);
  for (int b = 0; b < B; b++) {
    int seen = 0;
    for (int i = 0; i < T; i++) {
      int tok = bt.tokens[i * B + b];
      if (tok == 0)
        continue;
      cr_assert(tok >= 1 && tok <= N - 2, "token %d", tok);
      cr_assert_lt(seen, M);
      cr_assert_eq(bt.cls[(T + seen) * B + b], tok, "target %d", seen);
      seen++;
    }
    cr_assert_eq(seen, M, "row %d holds %d tokens", b, seen);
    for (int i = T; i < T + M; i++) {
      cr_assert_eq(bt.tokens[i * B + b], N - 1);
      cr_assert_eq(bt.mask[i * B + b], 1.0f);
    }
    for (int i = 0; i < T; i++)
      cr_assert_eq(bt.mask[i * B + b], 0.0f);
  }
  task_batch_free(&bt);
  task_free(t);
}

Test(selective_copying, positions_are_random) {
  int T = 40, B = 64;
  Task *t = make("selective_copying", KV("length", "40"), 5);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 0, B, &bt);
  int used[40] = {0};
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T; i++)
      used[i] += bt.tokens[i * B + b] != 0;
  for (int i = 0; i < T; i++)
    cr_assert(used[i] > 0 && used[i] < B, "position %d used %d times", i, used[i]);
  task_batch_free(&bt);
  task_free(t);
}

Test(selective_copying, splits_are_disjoint) {
  Task *t = make("selective_copying", KV("length", "20", "memorize", "4", "tokens", "6"), 9);
  expect_disjoint_splits(t, 20, 64);
  task_free(t);
}

Test(selective_copying, memorize_beyond_length_is_an_error) {
  expect_error("selective_copying", KV("length", "10"), "memorize 16 exceeds length 10");
}

/* ---- determinism (every generated and fixed task that needs no file) ---- */

static const char *const generated[] = {"copying",   "selective_copying", "adding", "temporal_xor", "ar2",
                                        "delay_sum", "moving_average",    "sinmix", "mnist1d"};

Test(tasks, same_seed_and_index_give_the_same_batch) {
  for (size_t i = 0; i < sizeof generated / sizeof generated[0]; i++) {
    Task *a = make(generated[i], NULL, 11), *b = make(generated[i], NULL, 11);
    for (int s = 0; s < 3; s++) {
      TaskBatch x, y;
      task_batch(a, (TaskSplit)s, 4, 8, &x);
      task_batch(b, (TaskSplit)s, 4, 8, &y);
      cr_assert(same_batch(a, &x, &y), "%s split %d", generated[i], s);
      task_batch_free(&y);
      task_batch(a, (TaskSplit)s, 4, 8, &y); /* and again from the same task */
      cr_assert(same_batch(a, &x, &y), "%s split %d, second call", generated[i], s);
      task_batch_free(&x);
      task_batch_free(&y);
    }
    task_free(a);
    task_free(b);
  }
}

Test(tasks, different_index_gives_a_different_batch) {
  for (size_t i = 0; i < sizeof generated / sizeof generated[0]; i++) {
    Task *t = make(generated[i], NULL, 11);
    for (int s = 0; s < 3; s++) {
      TaskBatch x, y;
      task_batch(t, (TaskSplit)s, 0, 8, &x);
      task_batch(t, (TaskSplit)s, 1, 8, &y);
      cr_assert_not(same_batch(t, &x, &y), "%s split %d", generated[i], s);
      task_batch_free(&x);
      task_batch_free(&y);
    }
    task_free(t);
  }
}

Test(tasks, different_seed_gives_a_different_batch) {
  for (size_t i = 0; i < sizeof generated / sizeof generated[0]; i++) {
    Task *a = make(generated[i], NULL, 1), *b = make(generated[i], NULL, 2);
    TaskBatch x, y;
    task_batch(a, TASK_TRAIN, 0, 8, &x);
    task_batch(b, TASK_TRAIN, 0, 8, &y);
    cr_assert_not(same_batch(a, &x, &y), "%s", generated[i]);
    task_batch_free(&x);
    task_batch_free(&y);
    task_free(a);
    task_free(b);
  }
}

Test(tasks, regression_splits_are_disjoint) {
  const char *names[] = {"adding", "ar2", "delay_sum", "moving_average", "sinmix"};
  for (size_t i = 0; i < 5; i++) {
    Task *t = make(names[i], KV("length", "40"), 13);
    expect_disjoint_splits(t, 20, 32);
    task_free(t);
  }
}

/* ---- adding ---- */

Test(adding, shape_has_noise_and_marker_channels) {
  Task *t = make("adding", KV("noise_channels", "5", "length", "120"), 1);
  TaskShape s = task_shape(t);
  cr_assert_not(s.token_input);
  cr_assert_eq(s.in_dim, 6);
  cr_assert_eq(s.out_dim, 1);
  cr_assert_eq(s.length, 120);
  cr_assert_eq(s.loss, TASK_LOSS_MSE);
  cr_assert_eq(s.readout, TASK_READ_LAST);
  task_free(t);
}

Test(adding, two_markers_one_per_half_and_target_is_their_sum) {
  int T = 80, C = 4, B = 64;
  Task *t = make("adding", NULL, 2);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 0, B, &bt);
  cr_assert_null(bt.mask);
  cr_assert_not_null(bt.y);
  for (int b = 0; b < B; b++) {
    int first = 0, second = 0;
    double sum = 0;
    for (int i = 0; i < T; i++) {
      float m = bt.x[(i * B + b) * C + C - 1];
      cr_assert(m == 0 || m == 1);
      if (m == 1) {
        if (i < T / 2)
          first++;
        else
          second++;
        sum += bt.x[(i * B + b) * C];
      }
    }
    cr_assert_eq(first, 1, "row %d", b);
    cr_assert_eq(second, 1, "row %d", b);
    cr_assert_float_eq(bt.y[b], sum, 1e-6);
  }
  task_batch_free(&bt);
  task_free(t);
}

Test(adding, noise_is_uniform_in_0_1) {
  int T = 80, C = 4, B = 64;
  Task *t = make("adding", NULL, 2);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 0, B, &bt);
  double mean = 0;
  for (int i = 0; i < T * B; i++)
    for (int c = 0; c < C - 1; c++) {
      float v = bt.x[i * C + c];
      cr_assert(v >= 0 && v < 1);
      mean += v / (T * B * (C - 1));
    }
  cr_assert_float_eq(mean, 0.5, 0.01);
  task_batch_free(&bt);
  task_free(t);
}

/* ---- ar2, delay_sum, moving_average, sinmix ---- */

Test(ar2, target_has_the_stationary_variance) {
  /* x_t = 1.6 x_{t-1} - 0.7 x_{t-2} + N(0, 0.05^2): var = 1.7 * 0.0025 / (0.3 * 0.33) = 0.04293. */
  Task *t = make("ar2", KV("length", "20"), 3);
  double sq = 0, mean = 0;
  int n = 0;
  for (int i = 0; i < 40; i++) {
    TaskBatch bt;
    task_batch(t, TASK_TRAIN, i, 256, &bt);
    for (int b = 0; b < 256; b++, n++) {
      mean += bt.y[b];
      sq += bt.y[b] * bt.y[b];
    }
    task_batch_free(&bt);
  }
  mean /= n;
  cr_assert_float_eq(mean, 0, 0.01);
  cr_assert_float_eq(sq / n - mean * mean, 1.7 * 0.0025 / (0.3 * 0.33), 0.004);
  task_free(t);
}

Test(ar2, inputs_are_distractor_channels) {
  Task *t = make("ar2", KV("channels", "3"), 3);
  TaskShape s = task_shape(t);
  cr_assert_eq(s.in_dim, 3);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 0, 128, &bt);
  /* The target is uncorrelated with the last inputs. */
  double xy = 0, xx = 0, yy = 0;
  for (int b = 0; b < 128; b++) {
    double x = bt.x[((size_t)(s.length - 1) * 128 + b) * 3];
    xy += x * bt.y[b];
    xx += x * x;
    yy += bt.y[b] * bt.y[b];
  }
  cr_assert_lt(fabs(xy / sqrt(xx * yy)), 0.35);
  task_batch_free(&bt);
  task_free(t);
}

Test(delay_sum, target_is_the_mean_of_four_delayed_inputs) {
  int T = 120, C = 2, B = 32;
  Task *t = make("delay_sum", NULL, 4);
  cr_assert_eq(task_shape(t).in_dim, C);
  TaskBatch bt;
  task_batch(t, TASK_VALID, 0, B, &bt);
  const int d[4] = {4, 12, 24, 36};
  for (int b = 0; b < B; b++) {
    double s = 0;
    for (int i = 0; i < 4; i++)
      s += bt.x[((T - 1 - d[i]) * B + b) * C];
    cr_assert_float_eq(bt.y[b], s / 4, 1e-6);
  }
  task_batch_free(&bt);
  task_free(t);
}

Test(delay_sum, length_below_37_is_an_error) {
  expect_error("delay_sum", KV("length", "36"), "length 36 is out of range [37,");
}

Test(moving_average, target_is_the_mean_of_the_last_8_inputs) {
  int T = 120, C = 2, B = 32;
  Task *t = make("moving_average", NULL, 4);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 3, B, &bt);
  for (int b = 0; b < B; b++) {
    double s = 0;
    for (int i = T - 8; i < T; i++)
      s += bt.x[(i * B + b) * C];
    cr_assert_float_eq(bt.y[b], s / 8, 1e-6);
  }
  task_batch_free(&bt);
  task_free(t);
}

Test(sinmix, target_compares_the_quarters) {
  int T = 120, C = 4, B = 32, q = T / 4;
  Task *t = make("sinmix", NULL, 6);
  cr_assert_eq(task_shape(t).in_dim, 4);
  TaskBatch bt;
  task_batch(t, TASK_TRAIN, 0, B, &bt);
  for (int b = 0; b < B; b++) {
    double s1a = 0, s1b = 0, s2a = 0, s2b = 0, noise = 0;
    for (int i = 0; i < T; i++) {
      const float *x = &bt.x[(i * B + b) * C];
      cr_assert(fabsf(x[0]) <= 1 && fabsf(x[1]) <= 1);
      cr_assert_eq(x[3], 0.0f, "the mask channel is unused");
      noise += x[2] * x[2];
      if (i < q)
        s1a += x[0], s2a += x[1];
      if (i >= T - q)
        s1b += x[0], s2b += x[1];
    }
    cr_assert_float_eq(bt.y[b], (s1b - s1a) / q + (s2a - s2b) / q, 1e-5);
    cr_assert_float_eq(sqrt(noise / T), 0.1, 0.04);
  }
  task_batch_free(&bt);
  task_free(t);
}

/* ---- temporal_xor ---- */

/* Train batch 0 with B = the split size holds every training sample once (epoch 0). */
static TaskBatch whole_split(Task *t, TaskSplit s) {
  TaskBatch bt;
  task_batch(t, s, 0, (int)task_shape(t).split_size[s], &bt);
  return bt;
}

Test(temporal_xor, shape_and_split_sizes) {
  Task *t = make("temporal_xor", NULL, 1);
  TaskShape s = task_shape(t);
  cr_assert(s.token_input);
  cr_assert_eq(s.vocab, 10);
  cr_assert_eq(s.out_dim, 2);
  cr_assert_eq(s.length, 100);
  cr_assert_eq(s.split_size[0], 2000);
  cr_assert_eq(s.split_size[1], 400);
  cr_assert_eq(s.split_size[2], 400);
  task_free(t);
}

Test(temporal_xor, hard_label_is_a_xor_b) {
  Task *t = make("temporal_xor", NULL, 2);
  TaskBatch bt = whole_split(t, TASK_TEST);
  int B = bt.B, T = bt.T, ones = 0;
  for (int b = 0; b < B; b++) {
    int a = bt.tokens[b], c = bt.tokens[(T - 1) * B + b];
    cr_assert(a == 0 || a == 1);
    cr_assert(c == 0 || c == 1);
    for (int i = 1; i < T - 1; i++) {
      int f = bt.tokens[i * B + b];
      cr_assert(f >= 2 && f <= 9, "filler %d", f);
    }
    cr_assert_eq(bt.cls[b], a ^ c);
    ones += bt.cls[b];
  }
  cr_assert(ones > B / 4 && ones < 3 * B / 4, "labels unbalanced: %d of %d", ones, B);
  task_batch_free(&bt);
  task_free(t);
}

Test(temporal_xor, easy_fraction_applies_to_train_only) {
  Task *t = make("temporal_xor", KV("easy_fraction", "0.4"), 3);
  for (int s = 0; s < 3; s++) {
    TaskBatch bt = whole_split(t, (TaskSplit)s);
    int easy = 0;
    for (int b = 0; b < bt.B; b++)
      easy += bt.tokens[b] >= 2;
    if (s == TASK_TRAIN)
      cr_assert_float_eq((double)easy / bt.B, 0.4, 0.01);
    else
      cr_assert_eq(easy, 0, "split %d has easy samples", s);
    task_batch_free(&bt);
  }
  task_free(t);
}

Test(temporal_xor, easy_samples_hold_both_tokens_in_the_window) {
  int W = 10;
  Task *t = make("temporal_xor", KV("easy_fraction", "0.5"), 4);
  TaskBatch bt = whole_split(t, TASK_TRAIN);
  int B = bt.B, T = bt.T, easy = 0;
  for (int b = 0; b < B; b++) {
    if (bt.tokens[b] < 2)
      continue;
    easy++;
    int pos[3], val[3], n = 0;
    for (int i = 0; i < T; i++) {
      int v = bt.tokens[i * B + b];
      if (v < 2 && n < 3)
        pos[n] = i, val[n++] = v;
    }
    cr_assert_eq(n, 2, "row %d holds %d informative tokens", b, n);
    cr_assert_geq(pos[0], T - W);
    cr_assert_eq(bt.cls[b], val[0] ^ val[1]);
  }
  cr_assert_eq(easy, 1000);
  task_batch_free(&bt);
  task_free(t);
}

Test(temporal_xor, splits_are_disjoint_in_a_small_space) {
  /* length 6, vocab 4: 4 * 2^4 = 64 hard sequences; train takes about half of them. */
  Task *t = make("temporal_xor",
                 KV("length", "6", "vocab", "4", "window", "3", "train", "40", "valid", "10", "test", "10"), 5);
  TaskBatch s[3];
  for (int k = 0; k < 3; k++)
    s[k] = whole_split(t, (TaskSplit)k);
  for (int p = 0; p < 3; p++)
    for (int q = p + 1; q < 3; q++)
      for (int i = 0; i < s[p].B; i++)
        for (int j = 0; j < s[q].B; j++) {
          bool same = true;
          for (int k = 0; k < 6 && same; k++)
            same = s[p].tokens[k * s[p].B + i] == s[q].tokens[k * s[q].B + j];
          cr_assert_not(same, "splits %d and %d share a sequence", p, q);
        }
  for (int k = 0; k < 3; k++)
    task_batch_free(&s[k]);
  task_free(t);
}

Test(temporal_xor, too_small_space_is_an_error) {
  /* length 3, vocab 3: only 4 hard sequences, all taken by train. */
  expect_error("temporal_xor", KV("length", "3", "vocab", "3", "window", "2"), "cannot draw 400 valid sequences");
}

Test(temporal_xor, multi_class_labels_by_group) {
  Task *t = make("temporal_xor", KV("classes", "4"), 6);
  TaskShape sh = task_shape(t);
  cr_assert_eq(sh.vocab, 12);
  cr_assert_eq(sh.out_dim, 4);
  cr_assert_eq(sh.split_size[0], 4000);
  cr_assert_eq(sh.split_size[1], 800);
  cr_assert_eq(sh.split_size[2], 800);
  TaskBatch bt = whole_split(t, TASK_VALID);
  int B = bt.B, T = bt.T, count[4] = {0};
  for (int b = 0; b < B; b++) {
    int a = bt.tokens[b], c = bt.tokens[(T - 1) * B + b];
    cr_assert(a >= 0 && a < 4 && c >= 0 && c < 4);
    cr_assert_eq(a / 2, c / 2, "tokens %d and %d from two groups", a, c);
    for (int i = 1; i < T - 1; i++)
      cr_assert_geq(bt.tokens[i * B + b], 4);
    cr_assert_eq(bt.cls[b], 2 * (a / 2) + (a == c));
    count[bt.cls[b]]++;
  }
  for (int k = 0; k < 4; k++)
    cr_assert_gt(count[k], B / 8, "class %d: %d", k, count[k]);
  task_batch_free(&bt);
  task_free(t);
}

Test(temporal_xor, explicit_sizes_are_kept_with_four_classes) {
  Task *t = make("temporal_xor", KV("classes", "4", "vocab", "14", "train", "100", "valid", "50", "test", "60"), 6);
  TaskShape sh = task_shape(t);
  cr_assert_eq(sh.vocab, 14);
  cr_assert_eq(sh.split_size[0], 100);
  cr_assert_eq(sh.split_size[1], 50);
  cr_assert_eq(sh.split_size[2], 60);
  task_free(t);
}

Test(temporal_xor, only_the_treated_group_gets_easy_samples) {
  Task *t = make("temporal_xor", KV("classes", "4", "treated", "1", "easy_fraction", "0.5"), 7);
  TaskBatch bt = whole_split(t, TASK_TRAIN);
  int B = bt.B, T = bt.T, n[2] = {0}, easy[2] = {0};
  for (int b = 0; b < B; b++) {
    int g = -1;
    for (int i = 0; i < T && g < 0; i++)
      if (bt.tokens[i * B + b] < 4)
        g = bt.tokens[i * B + b] / 2;
    cr_assert_geq(g, 0);
    n[g]++;
    easy[g] += bt.tokens[b] >= 4;
  }
  cr_assert_eq(easy[0], 0);
  cr_assert_float_eq((double)easy[1] / n[1], 0.5, 0.01);
  task_batch_free(&bt);
  task_free(t);
}

Test(temporal_xor, bad_keys_are_errors) {
  expect_error("temporal_xor", KV("classes", "3"), "classes must be 2 or 4, not 3");
  expect_error("temporal_xor", KV("length", "10", "window", "20"), "window 20 exceeds length 10");
  expect_error("temporal_xor", KV("classes", "4", "vocab", "4"), "vocab 4 leaves no filler token");
  expect_error("temporal_xor", KV("treated", "x"), "treated must be 'all' or a group index 0..0, not 'x'");
  expect_error("temporal_xor", KV("treated", "1"), "not '1'");
  expect_error("temporal_xor", KV("classes", "4", "treated", "2"), "group index 0..1, not '2'");
}

/* ---- fixed datasets: order of batches ---- */

Test(fixed, valid_batches_run_in_file_order_and_wrap) {
  Task *t = make("temporal_xor", NULL, 8);
  TaskBatch all = whole_split(t, TASK_VALID), bt;
  int n = all.B, B = 300, T = all.T;
  task_batch(t, TASK_VALID, 1, B, &bt); /* items 300..599 modulo 400 */
  for (int b = 0; b < B; b++) {
    int item = (300 + b) % n;
    for (int i = 0; i < T; i++)
      cr_assert_eq(bt.tokens[i * B + b], all.tokens[i * n + item]);
    cr_assert_eq(bt.cls[b], all.cls[item]);
  }
  task_batch_free(&bt);
  task_batch_free(&all);
  task_free(t);
}

/* Sorted hashes of every row of a batch. */
static uint64_t *batch_hashes(const Task *t, const TaskBatch *bt) {
  uint64_t *h = malloc(sizeof *h * (size_t)bt->B);
  for (int b = 0; b < bt->B; b++)
    h[b] = row_hash(t, bt, b);
  return h;
}

Test(fixed, train_epochs_are_shuffled_permutations) {
  Task *t = make("mnist1d", KV("train", "200", "test", "10"), 8);
  int n = (int)task_shape(t).split_size[TASK_TRAIN];
  cr_assert_eq(n, 180);
  TaskBatch e0, e1;
  task_batch(t, TASK_TRAIN, 0, n, &e0);
  task_batch(t, TASK_TRAIN, 1, n, &e1);
  uint64_t *h0 = batch_hashes(t, &e0), *h1 = batch_hashes(t, &e1);
  int same_place = 0;
  for (int b = 0; b < n; b++)
    same_place += h0[b] == h1[b];
  cr_assert_lt(same_place, n / 4, "epoch 1 repeats epoch 0's order");
  qsort(h0, (size_t)n, sizeof *h0, cmp_u64);
  qsort(h1, (size_t)n, sizeof *h1, cmp_u64);
  for (int b = 0; b < n; b++)
    cr_assert_eq(h0[b], h1[b], "the epochs hold different samples");
  for (int b = 1; b < n; b++)
    cr_assert_neq(h0[b], h0[b - 1], "a sample repeats within an epoch");
  /* A batch straddling two epochs: its rows are the end of epoch 0 and the start of epoch 1. */
  TaskBatch mid;
  task_batch(t, TASK_TRAIN, 1, 120, &mid); /* positions 120..239: epoch 0 items 120..179, epoch 1 items 0..59 */
  for (int b = 0; b < 120; b++) {
    const TaskBatch *src = b < 60 ? &e0 : &e1;
    int row = b < 60 ? 120 + b : b - 60;
    for (int i = 0; i < mid.T; i++)
      cr_assert_eq(mid.x[i * 120 + b], src->x[i * n + row]);
  }
  free(h0);
  free(h1);
  task_batch_free(&mid);
  task_batch_free(&e0);
  task_batch_free(&e1);
  task_free(t);
}

/* ---- mnist1d ---- */

Test(mnist1d, shape_and_split_sizes) {
  Task *t = make("mnist1d", NULL, 1);
  TaskShape s = task_shape(t);
  cr_assert_not(s.token_input);
  cr_assert_eq(s.in_dim, 1);
  cr_assert_eq(s.out_dim, 10);
  cr_assert_eq(s.length, 40);
  cr_assert_eq(s.split_size[0], 3600);
  cr_assert_eq(s.split_size[1], 400);
  cr_assert_eq(s.split_size[2], 1000);
  task_free(t);
}

Test(mnist1d, classes_are_balanced) {
  Task *t = make("mnist1d", NULL, 2);
  for (int s = 0; s < 3; s++) {
    TaskBatch bt = whole_split(t, (TaskSplit)s);
    int count[10] = {0};
    for (int b = 0; b < bt.B; b++) {
      cr_assert(bt.cls[b] >= 0 && bt.cls[b] < 10);
      count[bt.cls[b]]++;
    }
    for (int k = 0; k < 10; k++)
      cr_assert_eq(count[k], bt.B / 10, "split %d class %d: %d", s, k, count[k]);
    task_batch_free(&bt);
  }
  task_free(t);
}

Test(mnist1d, standardized_with_train_statistics) {
  Task *t = make("mnist1d", NULL, 3);
  for (int s = 0; s < 3; s++) {
    TaskBatch bt = whole_split(t, (TaskSplit)s);
    size_t n = (size_t)bt.T * bt.B;
    double mean = 0, sq = 0;
    for (size_t i = 0; i < n; i++)
      mean += bt.x[i] / (double)n;
    for (size_t i = 0; i < n; i++)
      sq += (bt.x[i] - mean) * (bt.x[i] - mean) / (double)n;
    double tol = s == TASK_TRAIN ? 1e-4 : 0.1;
    cr_assert_float_eq(mean, 0, tol, "split %d mean %g", s, mean);
    cr_assert_float_eq(sqrt(sq), 1, tol, "split %d sd %g", s, sqrt(sq));
    task_batch_free(&bt);
  }
  task_free(t);
}

Test(mnist1d, classes_differ_in_their_mean_curve) {
  /* The templates show through the noise: the class-mean curves of train are far apart. */
  Task *t = make("mnist1d", NULL, 4);
  TaskBatch bt = whole_split(t, TASK_TRAIN);
  int T = bt.T, B = bt.B;
  double mean[10][40] = {{0}};
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T; i++)
      mean[bt.cls[b]][i] += bt.x[i * B + b] / (B / 10);
  for (int a = 0; a < 10; a++)
    for (int c = a + 1; c < 10; c++) {
      double d = 0;
      for (int i = 0; i < T; i++)
        d += pow(mean[a][i] - mean[c][i], 2);
      cr_assert_gt(sqrt(d / T), 0.05, "classes %d and %d look alike", a, c);
    }
  task_batch_free(&bt);
  task_free(t);
}

Test(mnist1d, length_key_sets_the_resampling) {
  Task *t = make("mnist1d", KV("length", "72", "train", "100", "test", "10"), 1);
  TaskBatch bt;
  task_batch(t, TASK_TEST, 0, 4, &bt);
  cr_assert_eq(bt.T, 72);
  task_batch_free(&bt);
  task_free(t);
}

/* ---- images (IDX) ---- */

/* An IDX images file of n images of r x c pixels, pixel (k, p) = (7k + 3p) % 256, and its labels k % 3. */
static void write_idx(int slot, const char *tag, int n, int r, int c, const char **ipath, const char **lpath) {
  size_t np = (size_t)r * c, len = 16 + (size_t)n * np;
  unsigned char *buf = calloc(len, 1);
  unsigned char hdr[16] = {0,
                           0,
                           8,
                           3,
                           (unsigned char)(n >> 24),
                           (unsigned char)(n >> 16),
                           (unsigned char)(n >> 8),
                           (unsigned char)n,
                           0,
                           0,
                           0,
                           (unsigned char)r,
                           0,
                           0,
                           0,
                           (unsigned char)c};
  memcpy(buf, hdr, 16);
  for (int k = 0; k < n; k++)
    for (size_t p = 0; p < np; p++)
      buf[16 + k * np + p] = (unsigned char)((7 * k + 3 * p) % 256);
  char name[64];
  snprintf(name, sizeof name, "%s-images", tag);
  *ipath = write_tmp(slot, name, buf, len);
  unsigned char *lab = calloc(8 + (size_t)n, 1);
  unsigned char lhdr[8] = {
      0, 0, 8, 1, (unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n};
  memcpy(lab, lhdr, 8);
  for (int k = 0; k < n; k++)
    lab[8 + k] = (unsigned char)(k % 3);
  snprintf(name, sizeof name, "%s-labels", tag);
  *lpath = write_tmp(slot + 1, name, lab, 8 + (size_t)n);
  free(buf);
  free(lab);
}

Test(images, pixels_one_per_step_scaled) {
  const char *ip, *lp;
  write_idx(0, "px", 20, 3, 4, &ip, &lp);
  Task *t = make("images", KV("path", ip, "labels", lp), 1);
  TaskShape s = task_shape(t);
  cr_assert_eq(s.length, 12);
  cr_assert_eq(s.in_dim, 1);
  cr_assert_eq(s.out_dim, 3);
  cr_assert_eq(s.split_size[0], 16);
  cr_assert_eq(s.split_size[1], 2);
  cr_assert_eq(s.split_size[2], 2);
  TaskBatch bt;
  task_batch(t, TASK_VALID, 0, 2, &bt); /* images 16 and 17 */
  for (int b = 0; b < 2; b++) {
    int k = 16 + b;
    for (int p = 0; p < 12; p++)
      cr_assert_float_eq(bt.x[p * 2 + b], ((7 * k + 3 * p) % 256) / 255.0, 1e-6);
    cr_assert_eq(bt.cls[b], k % 3);
  }
  task_batch_free(&bt);
  task_batch(t, TASK_TEST, 0, 2, &bt); /* images 18 and 19 */
  cr_assert_eq(bt.cls[0], 18 % 3);
  cr_assert_float_eq(bt.x[0], (7 * 18 % 256) / 255.0, 1e-6);
  task_batch_free(&bt);
  task_free(t);
  unlink(ip);
  unlink(lp);
}

Test(images, test_files_form_the_test_split) {
  const char *ip, *lp, *tip, *tlp;
  write_idx(0, "tr", 20, 2, 2, &ip, &lp);
  write_idx(2, "te", 7, 2, 2, &tip, &tlp);
  Task *t = make("images", KV("path", ip, "labels", lp, "test_path", tip, "test_labels", tlp), 1);
  TaskShape s = task_shape(t);
  cr_assert_eq(s.split_size[0], 18);
  cr_assert_eq(s.split_size[1], 2);
  cr_assert_eq(s.split_size[2], 7);
  TaskBatch bt;
  task_batch(t, TASK_TEST, 0, 7, &bt);
  for (int b = 0; b < 7; b++)
    cr_assert_float_eq(bt.x[1 * 7 + b], ((7 * b + 3) % 256) / 255.0, 1e-6);
  task_batch_free(&bt);
  task_free(t);
  unlink(ip), unlink(lp), unlink(tip), unlink(tlp);
}

Test(images, permute_applies_one_fixed_permutation) {
  const char *ip, *lp;
  write_idx(0, "perm", 20, 4, 4, &ip, &lp);
  Task *plain = make("images", KV("path", ip, "labels", lp), 1);
  Task *perm = make("images", KV("path", ip, "labels", lp, "permute", "true"), 1);
  TaskBatch a, b;
  task_batch(plain, TASK_TEST, 0, 2, &a);
  task_batch(perm, TASK_TEST, 0, 2, &b);
  /* Image 18's pixels are (126 + 3p) % 256: distinct, so each permuted step names its pixel. */
  int from[16], moved = 0;
  for (int s = 0; s < 16; s++) {
    from[s] = -1;
    for (int p = 0; p < 16; p++)
      if (b.x[s * 2] == a.x[p * 2])
        from[s] = p;
    cr_assert_geq(from[s], 0);
    moved += from[s] != s;
    cr_assert_eq(b.x[s * 2 + 1], a.x[from[s] * 2 + 1], "image 19 uses another permutation");
  }
  cr_assert_gt(moved, 8);
  task_batch_free(&a);
  task_batch_free(&b);
  task_free(plain);
  task_free(perm);
  unlink(ip);
  unlink(lp);
}

Test(images, missing_file_is_an_error) {
  expect_error("images", KV("path", "/nonexistent/x.idx", "labels", "y"),
               "cannot open '/nonexistent/x.idx': No such file");
}

Test(images, bad_magic_is_an_error) {
  const char *ip, *lp;
  write_idx(0, "magic", 20, 2, 2, &ip, &lp);
  expect_error("images", KV("path", lp, "labels", lp),
               "is not an IDX images file (magic 0x00000801, expected 0x00000803)");
  expect_error("images", KV("path", ip, "labels", ip), "is not an IDX labels file (magic 0x00000803");
  unlink(ip);
  unlink(lp);
}

Test(images, truncated_file_is_an_error) {
  unsigned char buf[16 + 10] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2}; /* 3 images of 2x2 need 12 bytes */
  const char *p = write_tmp(0, "trunc", buf, sizeof buf);
  expect_error("images", KV("path", p, "labels", "y"), "is truncated: 3 images of 2x2 need 28 bytes, the file has 26");
  const char *h = write_tmp(1, "hdr", buf, 9);
  expect_error("images", KV("path", h, "labels", "y"), "is truncated: its header needs 16 bytes, the file has 9");
  const char *tiny = write_tmp(2, "tiny", buf, 2);
  expect_error("images", KV("path", tiny, "labels", "y"), "is not an IDX file (only 2 bytes)");
  unlink(p), unlink(h), unlink(tiny);
}

Test(images, trailing_bytes_are_an_error) {
  unsigned char buf[16 + 13] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
  const char *p = write_tmp(0, "trail", buf, sizeof buf);
  expect_error("images", KV("path", p, "labels", "y"), "has 1 bytes after the 3 images");
  unlink(p);
}

Test(images, empty_file_is_an_error) {
  unsigned char buf[16] = {0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2};
  const char *p = write_tmp(0, "empty", buf, sizeof buf);
  expect_error("images", KV("path", p, "labels", "y"), "holds no images");
  unsigned char zero[16] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
  const char *z = write_tmp(1, "zero", zero, sizeof zero);
  expect_error("images", KV("path", z, "labels", "y"), "has images of 0x2 pixels");
  unlink(p), unlink(z);
}

Test(images, label_count_mismatch_is_an_error) {
  const char *ip, *lp, *ip2, *lp2;
  write_idx(0, "a", 20, 2, 2, &ip, &lp);
  write_idx(2, "b", 19, 2, 2, &ip2, &lp2);
  expect_error("images", KV("path", ip, "labels", lp2), "has 19 labels for the 20 images");
  unlink(ip), unlink(lp), unlink(ip2), unlink(lp2);
}

Test(images, too_few_images_is_an_error) {
  const char *ip, *lp;
  write_idx(0, "few", 9, 2, 2, &ip, &lp);
  expect_error("images", KV("path", ip, "labels", lp), "holds 9 images, too few");
  unlink(ip), unlink(lp);
}

Test(images, test_files_must_come_together_and_match) {
  const char *ip, *lp, *tip, *tlp;
  write_idx(0, "m1", 20, 2, 2, &ip, &lp);
  write_idx(2, "m2", 5, 2, 3, &tip, &tlp);
  expect_error("images", KV("path", ip, "labels", lp, "test_path", tip), "test_labels is missing");
  expect_error("images", KV("path", ip, "labels", lp, "test_labels", tlp), "test_path is missing");
  expect_error("images", KV("path", ip, "labels", lp, "test_path", tip, "test_labels", tlp), "holds 2x3 images");
  unlink(ip), unlink(lp), unlink(tip), unlink(tlp);
}

/* ---- text and tokens ---- */

Test(text, targets_are_the_next_byte) {
  char data[2000];
  for (int i = 0; i < 2000; i++)
    data[i] = (char)('a' + (i * 7 + i / 13) % 26);
  const char *p = write_tmp(0, "text.txt", data, sizeof data);
  Task *t = make("text", KV("path", p, "context", "16"), 1);
  TaskShape s = task_shape(t);
  cr_assert(s.token_input);
  cr_assert_eq(s.vocab, 256);
  cr_assert_eq(s.out_dim, 256);
  cr_assert_eq(s.length, 16);
  cr_assert_eq(s.readout, TASK_READ_ALL);
  cr_assert_eq(s.split_size[0], (1800 - 1) / 16);
  cr_assert_eq(s.split_size[1], (100 - 1) / 16);
  TaskBatch bt;
  int B = 8;
  task_batch(t, TASK_TRAIN, 0, B, &bt);
  for (int b = 0; b < B; b++) {
    /* The window lies in the train chunk: find its start there. */
    int start = -1;
    for (int a = 0; a + 16 < 1800 && start < 0; a++) {
      bool ok = true;
      for (int i = 0; i < 16 && ok; i++)
        ok = bt.tokens[i * B + b] == (unsigned char)data[a + i];
      if (ok && bt.cls[15 * B + b] == (unsigned char)data[a + 16])
        start = a;
    }
    cr_assert_geq(start, 0, "row %d is not a window of the train chunk", b);
    for (int i = 0; i < 16; i++) {
      cr_assert_eq(bt.cls[i * B + b], (unsigned char)data[start + i + 1]);
      cr_assert_eq(bt.mask[i * B + b], 1.0f);
    }
  }
  task_batch_free(&bt);
  task_free(t);
  unlink(p);
}

Test(text, valid_windows_are_consecutive) {
  char data[2000];
  for (int i = 0; i < 2000; i++)
    data[i] = (char)(i % 251);
  const char *p = write_tmp(0, "consec.txt", data, sizeof data);
  Task *t = make("text", KV("path", p, "context", "16"), 1);
  int n = (int)task_shape(t).split_size[TASK_VALID];
  TaskBatch bt;
  task_batch(t, TASK_VALID, 1, n - 1, &bt); /* windows n-1, 0, 1, ..., n-3 */
  for (int b = 0; b < n - 1; b++) {
    int w = (n - 1 + b) % n, at = 1800 + 16 * w;
    for (int i = 0; i < 16; i++) {
      cr_assert_eq(bt.tokens[i * (n - 1) + b], (unsigned char)data[at + i]);
      cr_assert_eq(bt.cls[i * (n - 1) + b], (unsigned char)data[at + i + 1]);
    }
  }
  task_batch_free(&bt);
  task_free(t);
  unlink(p);
}

Test(text, train_windows_are_random_and_deterministic) {
  char data[4000];
  for (int i = 0; i < 4000; i++)
    data[i] = (char)(i % 251);
  const char *p = write_tmp(0, "rand.txt", data, sizeof data);
  Task *a = make("text", KV("path", p, "context", "8"), 5), *b = make("text", KV("path", p, "context", "8"), 5);
  TaskBatch x, y, z;
  task_batch(a, TASK_TRAIN, 2, 16, &x);
  task_batch(b, TASK_TRAIN, 2, 16, &y);
  task_batch(a, TASK_TRAIN, 3, 16, &z);
  cr_assert(same_batch(a, &x, &y));
  cr_assert_not(same_batch(a, &x, &z));
  task_batch_free(&x), task_batch_free(&y), task_batch_free(&z);
  task_free(a), task_free(b);
  unlink(p);
}

Test(text, too_short_file_is_an_error) {
  char data[300] = {0};
  const char *p = write_tmp(0, "short.txt", data, sizeof data);
  expect_error("text", KV("path", p), "its valid split (the next 5%, 15 bytes) is shorter than context + 1 = 257");
  unlink(p);
}

Test(text, missing_file_is_an_error) {
  expect_error("text", KV("path", "/nonexistent/corpus.txt"), "cannot open '/nonexistent/corpus.txt'");
}

/* n little-endian uint16 ids (i * 37) % 1000. */
static const char *write_ids(int slot, const char *tag, int n) {
  unsigned char *buf = malloc(2 * (size_t)n);
  for (int i = 0; i < n; i++) {
    int id = (i * 37) % 1000;
    buf[2 * i] = (unsigned char)(id & 255);
    buf[2 * i + 1] = (unsigned char)(id >> 8);
  }
  const char *p = write_tmp(slot, tag, buf, 2 * (size_t)n);
  free(buf);
  return p;
}

Test(tokens, ids_are_little_endian_and_targets_next) {
  const char *p = write_ids(0, "ids.bin", 1000);
  Task *t = make("tokens", KV("path", p, "vocab", "1000", "context", "10"), 1);
  TaskShape s = task_shape(t);
  cr_assert_eq(s.vocab, 1000);
  cr_assert_eq(s.out_dim, 1000);
  cr_assert_eq(s.length, 10);
  TaskBatch bt;
  task_batch(t, TASK_TEST, 0, 3, &bt); /* the test chunk starts at 950 */
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < 10; i++) {
      int at = 950 + 10 * b + i;
      cr_assert_eq(bt.tokens[i * 3 + b], (at * 37) % 1000);
      cr_assert_eq(bt.cls[i * 3 + b], ((at + 1) * 37) % 1000);
    }
  task_batch_free(&bt);
  task_free(t);
  unlink(p);
}

Test(tokens, id_out_of_range_is_an_error) {
  const char *p = write_ids(0, "big.bin", 1000);
  expect_error("tokens", KV("path", p, "vocab", "500"), "token id 518 at position 14 is not below vocab 500");
  unlink(p);
}

Test(tokens, odd_size_is_an_error) {
  const char *p = write_tmp(0, "odd.bin", "\1\0\2", 3);
  expect_error("tokens", KV("path", p, "vocab", "10"), "has an odd size (3 bytes)");
  unlink(p);
}

Test(tokens, too_short_file_is_an_error) {
  const char *p = write_ids(0, "shortids.bin", 100);
  expect_error("tokens", KV("path", p, "vocab", "1000"), "is shorter than context + 1 = 1025 tokens");
  unlink(p);
}

/* ---- a rank's share of a batch (data-parallel training) ---- */

/* Row j of part equals row first + j of whole in each [outer, B, inner] array. */
static void expect_rows(const void *part, const void *whole, size_t outer, int n, int B, size_t inner, size_t elem,
                        int first, const char *what) {
  cr_assert_eq(part == NULL, whole == NULL, "%s", what);
  if (!part) return;
  for (size_t o = 0; o < outer; o++)
    cr_assert(!memcmp((const char *)part + (o * (size_t)n) * inner * elem,
                      (const char *)whole + (o * (size_t)B + (size_t)first) * inner * elem, (size_t)n * inner * elem),
              "%s: outer %zu", what, o);
}

Test(tasks, batch_part_is_the_rows_of_the_global_batch) {
  static const char *const with_fixed[] = {"copying", "selective_copying", "adding", "temporal_xor", "ar2",
                                           "delay_sum", "moving_average", "sinmix", "mnist1d"};
  for (size_t i = 0; i < sizeof with_fixed / sizeof with_fixed[0]; i++) {
    Task *t = make(with_fixed[i], NULL, 5);
    TaskShape s = task_shape(t);
    size_t T = (size_t)s.length, per = s.readout == TASK_READ_ALL ? T : 1;
    for (int first = 0; first <= 6; first += 3) {
      TaskBatch whole, part;
      task_batch(t, TASK_TRAIN, 3, 9, &whole);
      task_batch_part(t, TASK_TRAIN, 3, 9, first, 3, &part);
      cr_assert_eq(part.B, 3);
      cr_assert_eq(part.T, whole.T);
      expect_rows(part.tokens, whole.tokens, T, 3, 9, 1, sizeof(int32_t), first, with_fixed[i]);
      expect_rows(part.x, whole.x, T, 3, 9, (size_t)s.in_dim, sizeof(float), first, with_fixed[i]);
      expect_rows(part.cls, whole.cls, per, 3, 9, 1, sizeof(int32_t), first, with_fixed[i]);
      expect_rows(part.y, whole.y, per, 3, 9, (size_t)s.out_dim, sizeof(float), first, with_fixed[i]);
      expect_rows(part.mask, whole.mask, T, 3, 9, 1, sizeof(float), first, with_fixed[i]);
      task_batch_free(&whole);
      task_batch_free(&part);
    }
    task_free(t);
  }
}

/* ---- file: JSON lines here (safetensors files: tests/file_task_cli.py) ---- */

/* n lines of token lists, line i of length 1 + (i * 7) % 16, token j = (i + j) % 5, class i % 3. */
static const char *write_jsonl(int slot, const char *tag, int n) {
  char *buf = malloc((size_t)n * 128 + 1);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    at += (size_t)sprintf(buf + at, "{\"x\": [");
    for (int j = 0; j < 1 + (i * 7) % 16; j++) at += (size_t)sprintf(buf + at, j ? ", %d" : "%d", (i + j) % 5);
    at += (size_t)sprintf(buf + at, "], \"y\": %d}\n", i % 3);
  }
  const char *p = write_tmp(slot, tag, buf, at);
  free(buf);
  return p;
}

Test(file, jsonl_tokens_lengths_and_padding) {
  const char *p = write_jsonl(0, "a.jsonl", 50);
  Task *t = make("file", KV("train", p, "format", "jsonl"), 1);
  TaskShape s = task_shape(t);
  cr_assert(s.token_input && s.lengths);
  cr_assert_eq(s.length, 16);
  cr_assert_eq(s.vocab, 5);
  cr_assert_eq(s.out_dim, 3);
  cr_assert_eq(s.loss, TASK_LOSS_CE);
  cr_assert_eq(s.readout, TASK_READ_LAST);
  cr_assert_eq(s.split_size[0] + s.split_size[1] + s.split_size[2], 50);
  cr_assert_eq(s.split_size[1], 5); /* valid: the last 10% of the file, test the 10% before */
  TaskBatch bt;
  task_batch(t, TASK_VALID, 0, 5, &bt);
  for (int b = 0; b < 5; b++) {
    int i = 45 + b, len = 1 + (i * 7) % 16;
    cr_assert_eq(bt.lengths[b], len);
    cr_assert_eq(bt.cls[b], i % 3);
    for (int j = 0; j < 16; j++) cr_assert_eq(bt.tokens[j * 5 + b], j < len ? (i + j) % 5 : 0, "item %d step %d", i, j);
  }
  TaskBatch part;
  task_batch_part(t, TASK_VALID, 0, 5, 2, 3, &part);
  for (int b = 0; b < 3; b++) cr_assert_eq(part.lengths[b], bt.lengths[2 + b]);
  task_batch_free(&part);
  task_batch_free(&bt);
  task_free(t);
  unlink(p);
}

/* The spread of lengths within the train batches of the first epoch, summed. */
static int spread(Task *t, int B, int nb, int *seen, int n) {
  int total = 0;
  for (int i = 0; i < nb; i++) {
    TaskBatch bt;
    task_batch(t, TASK_TRAIN, i, B, &bt);
    int lo = 1 << 30, hi = 0;
    for (int b = 0; b < B; b++) {
      lo = bt.lengths[b] < lo ? bt.lengths[b] : lo, hi = bt.lengths[b] > hi ? bt.lengths[b] : hi;
      /* the item: its first token and length identify it among these lines */
      for (int k = 0; k < n; k++)
        if (1 + (k * 7) % 16 == bt.lengths[b] && k % 5 == bt.tokens[b]) seen[k]++;
    }
    total += hi - lo;
    task_batch_free(&bt);
  }
  return total;
}

Test(file, bucket_builds_batches_of_similar_lengths) {
  enum { N = 640, B = 4 };
  const char *p = write_jsonl(0, "b.jsonl", N);
  Task *t = make("file", KV("train", p, "format", "jsonl"), 3);
  int64_t n = task_shape(t).split_size[TASK_TRAIN];
  int nb = (int)(n / B), *seen = calloc(N, sizeof(int)), *seen2 = calloc(N, sizeof(int));
  int plain = spread(t, B, nb, seen, N);
  task_set_bucket(t, true);
  int bucketed = spread(t, B, nb, seen2, N);
  cr_assert_lt(bucketed * 4, plain, "bucketed spread %d, plain %d", bucketed, plain);
  for (int k = 0; k < N; k++) cr_assert_eq(seen[k], seen2[k], "an epoch holds the same items either way");
  free(seen), free(seen2);
  task_free(t);
  unlink(p);
}

Test(file, errors_name_the_file) {
  expect_error("file", KV("format", "safetensors"), "train is required");
  expect_error("file", KV("train", "/nonexistent/a.safetensors"), "/nonexistent/a.safetensors");
  expect_error("file", KV("train", "/nonexistent/a.jsonl", "format", "jsonl"), "cannot open '/nonexistent/a.jsonl'");
  expect_error("file", KV("train", "a", "format", "csv"), "format 'csv' is not one of safetensors, jsonl");
  const char *p = write_tmp(0, "bad.jsonl", "{\"x\": [1, 2], \"y\": 0}\n{\"x\": [1], \"z\": 0}\n", 42);
  expect_error("file", KV("train", p, "format", "jsonl"), "line 2: a key other than");
  unlink(p);
}
