/* eval_dump.c: a test tool (build/eval_dump, built by `make all`) that writes the batches `cellc
 * eval` evaluates (the test split, as run_evaluate draws it from TASK.cfg's [task] keys,
 * train.seed, train.batch and eval.batches) into a safetensors file, for checking an exported model
 * (tests/suite_export.sh) against `cellc eval` outside cellc.
 *
 *   build/eval_dump TASK.cfg OUT.safetensors
 *
 * Tensors, for batch i = 0, 1, ...: `x.i` I32 [T, B] (token inputs) or F32 [T, B, C]; `cls.i` I32
 * (cross-entropy targets: [T, B] with -1 where no loss counts, or [B]) or `y.i` F32 (MSE targets:
 * [T, B, K] or [B, K]) with `mask.i` F32 [T, B] where the task has one; metadata "batches" and
 * "rows" (a comma list: the rows of each batch that count). Exit status: 0, 1 on bad input, 2 on
 * bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "safetensors.h"
#include "tasks.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: eval_dump TASK.cfg OUT.safetensors\n");
    return 2;
  }
  Cfg *c = cfg_load(argv[1], NULL, 0);
  if (!c) return 1;
  const TaskDef *def = cfg_task(c);
  double *num = calloc((size_t)def->nkeys + 1, sizeof(double));
  const char **str = calloc((size_t)def->nkeys + 1, sizeof(char *));
  cfg_task_values(c, num, str);
  char err[1024];
  Task *t = NULL;
  int rc = task_new(def, num, str, (uint64_t)cfg_int(c, "train.seed"), &t, err, sizeof err);
  free(num), free(str);
  if (rc < 0) {
    fprintf(stderr, "eval_dump: [task] %s\n", err);
    cfg_free(c);
    return 1;
  }
  TaskShape sh = task_shape(t);
  int B = (int)cfg_int(c, "train.batch");
  int64_t size = sh.split_size[TASK_TEST], n = cfg_int(c, "eval.batches");
  if (size > 0) n = (size + B - 1) / B;
  SftWriter *w = sft_writer_new();
  TaskBatch *bs = calloc((size_t)n + 1, sizeof(TaskBatch));
  char *rows = calloc((size_t)n * 12 + 2, 1), name[64];
  for (int64_t i = 0; i < n; i++) {
    TaskBatch *b = &bs[i];
    task_batch(t, TASK_TEST, i, B, b);
    int valid = size > 0 && (i + 1) * B > size ? (int)(size - i * B) : B;
    sprintf(rows + strlen(rows), "%s%d", i ? "," : "", valid);
    int64_t s3[3] = {b->T, b->B, sh.in_dim};
    snprintf(name, sizeof name, "x.%lld", (long long)i);
    if (sh.token_input) sft_add(w, name, SFT_I32, 2, s3, b->tokens);
    else sft_add(w, name, SFT_F32, 3, s3, b->x);
    bool all = sh.readout == TASK_READ_ALL;
    int64_t ts[3] = {b->T, b->B, sh.out_dim}, ls[2] = {b->B, sh.out_dim};
    if (sh.loss == TASK_LOSS_CE) {
      snprintf(name, sizeof name, "cls.%lld", (long long)i);
      sft_add(w, name, SFT_I32, all ? 2 : 1, all ? ts : ts + 1, b->cls);
    } else {
      snprintf(name, sizeof name, "y.%lld", (long long)i);
      sft_add(w, name, SFT_F32, all ? 3 : 2, all ? ts : ls, b->y);
    }
    if (b->mask) {
      snprintf(name, sizeof name, "mask.%lld", (long long)i);
      sft_add(w, name, SFT_F32, 2, ts, b->mask);
    }
  }
  snprintf(name, sizeof name, "%lld", (long long)n);
  sft_set_meta(w, "batches", name);
  sft_set_meta(w, "rows", rows);
  rc = sft_write(w, argv[2], err, sizeof err) < 0 ? 1 : 0;
  if (rc) fprintf(stderr, "eval_dump: %s\n", err);
  sft_writer_free(w);
  for (int64_t i = 0; i < n; i++) task_batch_free(&bs[i]);
  free(bs), free(rows);
  task_free(t);
  cfg_free(c);
  return rc;
}
