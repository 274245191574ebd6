/* task_dump.c: a test tool (build/task_dump, `make task_dump`) that writes the three splits of a
 * fixed dataset exactly as `cellc train` builds them from TASK.cfg (its [task] keys and
 * train.seed) into a safetensors file, for training outside cellc (tests/suite_mnist1d.sh trains
 * the reference's baselines on MNIST-1D with PyTorch).
 *
 *   build/task_dump TASK.cfg OUT.safetensors [--set KEY=VALUE]...
 *
 * Tensors, for SPLIT in train, valid, test: `x_SPLIT` F32 [N, T, C] (real-valued inputs) or I32
 * [N, T] (token inputs), `y_SPLIT` I32 [N] (the class of each sequence) or [N, T] (a class per
 * step, -1 where none counts), or F32 [N, O] or [N, T, O] (MSE targets), and for a task with
 * lengths `lengths_SPLIT` I32 [N]. train is in its first epoch's order, valid and test in the
 * task's order. Only tasks with fixed splits can be dumped. Exit status: 0, 1 on bad input, 2
 * on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "safetensors.h"
#include "tasks.h"

static const char *const split_name[3] = {"train", "valid", "test"};

/* Adds split s of task t (n sequences) to w as x_<split>, y_<split>. */
static void add_split(SftWriter *w, Task *t, const TaskShape *sh, int s, int n) {
  TaskBatch b;
  task_batch(t, (TaskSplit)s, 0, n, &b);
  int T = b.T, C = sh->token_input ? 1 : sh->in_dim;
  size_t elem = sh->token_input ? sizeof(int32_t) : sizeof(float);
  char *x = malloc((size_t)n * T * C * elem);
  const char *src = sh->token_input ? (const char *)b.tokens : (const char *)b.x;
  for (int i = 0; i < n; i++) /* time-major [T, B, C] -> [B, T, C] */
    for (int k = 0; k < T; k++)
      memcpy(x + (((size_t)i * T + k) * C) * elem, src + (((size_t)k * n + i) * C) * elem, C * elem);
  char name[32];
  snprintf(name, sizeof name, "x_%s", split_name[s]);
  int64_t xshape[3] = {n, T, C};
  sft_add(w, name, sh->token_input ? SFT_I32 : SFT_F32, sh->token_input ? 2 : 3, xshape, x);
  snprintf(name, sizeof name, "y_%s", split_name[s]);
  if (sh->loss == TASK_LOSS_MSE) { /* [B, O] as it is, or [T, B, O] -> [N, T, O] */
    int O = sh->out_dim;
    if (sh->readout == TASK_READ_ALL) {
      float *y = malloc(sizeof(float) * (size_t)n * T * O);
      for (int i = 0; i < n; i++)
        for (int k = 0; k < T; k++) memcpy(y + ((size_t)i * T + k) * O, b.y + ((size_t)k * n + i) * O, sizeof(float) * O);
      int64_t yshape[3] = {n, T, O};
      sft_add(w, name, SFT_F32, 3, yshape, y);
      free(y);
    } else {
      int64_t yshape[2] = {n, O};
      sft_add(w, name, SFT_F32, 2, yshape, b.y);
    }
  } else if (sh->readout == TASK_READ_ALL) { /* [T, B] -> [N, T] */
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n * T);
    for (int i = 0; i < n; i++)
      for (int k = 0; k < T; k++) y[(size_t)i * T + k] = b.cls[(size_t)k * n + i];
    int64_t yshape[2] = {n, T};
    sft_add(w, name, SFT_I32, 2, yshape, y);
    free(y);
  } else {
    int64_t yshape[1] = {n};
    sft_add(w, name, SFT_I32, 1, yshape, b.cls);
  }
  if (b.lengths) {
    snprintf(name, sizeof name, "lengths_%s", split_name[s]);
    int64_t lshape[1] = {n};
    sft_add(w, name, SFT_I32, 1, lshape, b.lengths);
  }
  free(x);
  task_batch_free(&b);
}

/* Builds the task of the loaded configuration c and writes its splits to out; returns the exit status. */
static int dump(Cfg *c, const char *out) {
  const TaskDef *def = cfg_task(c);
  double *num = calloc((size_t)def->nkeys + 1, sizeof(double));
  const char **str = calloc((size_t)def->nkeys + 1, sizeof(char *));
  cfg_task_values(c, num, str);
  char err[1024];
  Task *t = NULL;
  int rc = task_new(def, num, str, (uint64_t)cfg_int(c, "train.seed"), &t, err, sizeof err);
  free(num), free(str);
  if (rc < 0) {
    fprintf(stderr, "task_dump: [task] %s\n", err);
    return 1;
  }
  TaskShape sh = task_shape(t);
  int fixed = sh.split_size[0] > 0 && sh.split_size[1] > 0 && sh.split_size[2] > 0;
  if (!fixed || sh.split_size[0] > 100000000) {
    fprintf(stderr, "task_dump: task '%s' has no fixed splits\n", def->name);
    task_free(t);
    return 1;
  }
  SftWriter *w = sft_writer_new();
  sft_set_meta(w, "task", def->name);
  sft_set_meta(w, "seed", cfg_text(c, "train.seed"));
  for (int s = 0; s < 3; s++)
    add_split(w, t, &sh, s, (int)sh.split_size[s]);
  rc = sft_write(w, out, err, sizeof err);
  if (rc < 0) fprintf(stderr, "task_dump: %s\n", err);
  sft_writer_free(w);
  task_free(t);
  return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *sets[64];
  int nsets = 0;
  for (int i = 3; i < argc; i++) {
    if (strcmp(argv[i], "--set") || i + 1 >= argc || nsets == 64) {
      fprintf(stderr, "usage: task_dump TASK.cfg OUT.safetensors [--set KEY=VALUE]...\n");
      return 2;
    }
    sets[nsets++] = argv[++i];
  }
  if (argc < 3) {
    fprintf(stderr, "usage: task_dump TASK.cfg OUT.safetensors [--set KEY=VALUE]...\n");
    return 2;
  }
  Cfg *c = cfg_load(argv[1], sets, nsets);
  if (!c) return 1;
  int rc = dump(c, argv[2]);
  cfg_free(c);
  return rc;
}
