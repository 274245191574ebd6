/* test_train_chunked.c: cellc train's model running a cell in its chunked form (train.mode =
 * chunked; train/model/model.c, compiler/pipeline/chunkrun.c's chunkform_forward_f32 and
 * chunkform_backward_f32): the loss and every learned tensor's gradient of a batch equal those of
 * the same model in scan mode within float32 rounding, for gla, hgrn2 and mamba2, stacked with
 * dropout, residual with a norm and a mixer, bidirectional, a learned initial state and gumbel
 * noise, and evaluation; the chunk length honored (model.chunk) with results that do not depend
 * on it beyond rounding; auto's choice; the errors. Small sizes (T 12 to 20, B 3 to 4, heads of 4 to 8), float32. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "check.h"
#include "lang.h"
#include "model.h"
#include "support.h"
#include "tasks.h"

static char *diag_buf;
static size_t diag_len;

static void capture(void) {
  if (diag_out) fclose(diag_out);
  free(diag_buf);
  diag_buf = NULL;
  diag_out = open_memstream(&diag_buf, &diag_len);
}

static const char *captured(void) {
  fflush(diag_out);
  return diag_buf ? diag_buf : "";
}

typedef struct Fix {
  Cfg *cfg;
  Task *task;
  TaskShape shape;
  Model *m;
  int B;
} Fix;

/* The model of configuration `text` (t.cfg) around cell_file; NULL after its error (captured). */
static Model *build(Fix *f, const char *cell_file, const char *text) {
  memset(f, 0, sizeof *f);
  capture();
  Src src = {"t.cfg", text, strlen(text)};
  f->cfg = cfg_parse(&src, NULL, 0);
  cr_assert_not_null(f->cfg, "configuration rejected:\n%s\n%s", text, captured());
  f->B = (int)cfg_int(f->cfg, "train.batch");
  uint64_t seed = (uint64_t)cfg_int(f->cfg, "train.seed");
  const TaskDef *def = cfg_task(f->cfg);
  double num[32];
  const char *str[32];
  cfg_task_values(f->cfg, num, str);
  char err[512];
  cr_assert_eq(task_new(def, num, str, seed, &f->task, err, sizeof err), 0, "%s", err);
  f->shape = task_shape(f->task);
  f->m = model_new(f->cfg, cell_file, "stdlib", &f->shape, f->B, seed);
  return f->m;
}

static void fix_free(Fix *f) {
  model_free(f->m);
  if (f->task) task_free(f->task);
  cfg_free(f->cfg);
  memset(f, 0, sizeof *f);
}

#define SC "[task]\nname = selective_copying\ntokens = 6\nmemorize = 3\nlength = 12\n"
#define TRAIN "[train]\nbatch = 3\nseed = 7\n"

/* The summary names the mode each model runs ("cell gla (chunked), ...") */
static void expect_mode(const Model *m, const char *mode) {
  char want[64];
  snprintf(want, sizeof want, "(%s)", mode);
  cr_assert_not_null(strstr(model_summary(m), want), "want %s in: %s", want, model_summary(m));
}

/* Model `text` with train.mode = chunked against train.mode = scan (or `ref`): over `steps`
 * training batches and one evaluation batch, the losses within rtol 1e-5 and every learned
 * tensor's gradient within 3e-5 of its largest (float32 sums over a dozen steps and products of
 * 4 to 8 terms in other orders; 6e-6 seen); returns the largest relative gradient difference seen. */
static double against(const char *cell_file, const char *text, const char *ref, int steps) {
  char a_text[4096], b_text[4096];
  snprintf(a_text, sizeof a_text, "%s%s", text, "mode = chunked\n");
  snprintf(b_text, sizeof b_text, "%smode = %s\n", text, ref);
  Fix a, b;
  cr_assert_not_null(build(&a, cell_file, a_text), "chunked model failed:\n%s", captured());
  cr_assert_not_null(build(&b, cell_file, b_text), "%s model failed:\n%s", ref, captured());
  expect_mode(a.m, "chunked"), expect_mode(b.m, ref);
  cr_assert_eq(model_ntensors(a.m), model_ntensors(b.m));
  double worst_all = 0;
  for (int step = 0; step <= steps; step++) {
    bool training = step < steps;
    TaskBatch batch = {0};
    task_batch(a.task, training ? TASK_TRAIN : TASK_VALID, step, a.B, &batch);
    double la = model_batch(a.m, &batch, training, step, a.B).loss, lb = model_batch(b.m, &batch, training, step, b.B).loss;
    task_batch_free(&batch);
    cr_assert(isfinite(la) && fabs(la - lb) <= 1e-5 * fabs(lb), "%s step %d: loss %.9g chunked, %.9g %s", cell_file, step, la, lb, ref);
    for (int i = 0; training && i < model_ntensors(a.m); i++) {
      ModelTensor *ta = model_tensor(a.m, i), *tb = model_tensor(b.m, i);
      cr_assert_str_eq(ta->name, tb->name);
      if (!ta->learned) continue;
      double scale = 0, worst = 0;
      for (int64_t j = 0; j < ta->numel; j++) scale = fmax(scale, fabs(tb->grad[0][j]));
      for (int64_t j = 0; j < ta->numel; j++) worst = fmax(worst, fabs(ta->grad[0][j] - tb->grad[0][j]));
      cr_assert(scale > 0 || strstr(ta->name, "h0"), "%s: %s has no gradient", cell_file, ta->name);
      cr_assert(worst <= 3e-5 * scale + 1e-9, "%s step %d: %s differs by %g (largest %g)", cell_file, step, ta->name, worst, scale);
      if (scale > 0) worst_all = fmax(worst_all, worst / scale);
    }
  }
  fix_free(&a), fix_free(&b);
  return worst_all;
}

#define GLA "[model]\nwidth = 8\nencoder = embed\ndims.NH = 2\ndims.K = 4\ndims.V = 4\n"
#define HGRN2 "[model]\nwidth = 8\nencoder = embed\ndims.NH = 2\ndims.K = 4\ndims.V = 8\n"
#define MAMBA2 "[model]\nwidth = 8\nencoder = embed\ndims.NH = 2\ndims.P = 4\ndims.N = 4\n"

Test(train_chunked, gla_stacked_dropout) {
  against("stdlib/gla.cell", SC GLA "layers = 2\ndropout = 0.2\nchunk = 5\n" TRAIN, "scan", 3);
}

Test(train_chunked, hgrn2_stacked) {
  against("stdlib/hgrn2.cell", SC HGRN2 "layers = 2\nchunk = 4\n" TRAIN, "scan", 3);
}

Test(train_chunked, mamba2_stacked) {
  against("stdlib/mamba2.cell", SC MAMBA2 "layers = 2\nchunk = 5\n" TRAIN, "scan", 3);
}

Test(train_chunked, mamba2_against_sequential) {
  against("stdlib/mamba2.cell", SC MAMBA2 "layers = 1\n" TRAIN, "sequential", 2);
}

Test(train_chunked, gla_residual_norm_mixer_dropout) {
  against("stdlib/gla.cell", SC GLA "layers = 2\nblock = residual\nnorm = rms\nmixer = glu\ndropout = 0.1\nchunk = 7\n" TRAIN,
          "scan", 2);
}

Test(train_chunked, hgrn2_bidirectional) {
  against("stdlib/hgrn2.cell", SC HGRN2 "layers = 2\nbidirectional = true\nchunk = 3\n" TRAIN, "scan", 2);
  against("stdlib/gla.cell", SC GLA "layers = 1\nbidirectional = true\njoin = sum\n" TRAIN, "scan", 2);
}

/* A learned initial state (its gradient from the chunk op's dS_0) and gumbel noise in both
 * programs (tests/cells/learned_gla.cell) */
Test(train_chunked, learned_state_and_noise) {
  against("tests/cells/learned_gla.cell", SC GLA "layers = 2\nchunk = 5\n" TRAIN, "scan", 3);
  Fix f;
  cr_assert_not_null(build(&f, "tests/cells/learned_gla.cell", SC GLA "layers = 1\n" TRAIN "mode = chunked\n"), "%s", captured());
  bool found = false;
  for (int i = 0; i < model_ntensors(f.m); i++) found = found || !strcmp(model_tensor(f.m, i)->name, "layer.0.S.init");
  cr_assert(found, "no learned initial state");
  fix_free(&f);
}

/* The chunk length changes the order of the sums only: L = 1 (every step a chunk), a length
 * that does not divide T, one longer than T */
Test(train_chunked, any_chunk_length) {
  const char *ls[] = {"1", "5", "64"};
  for (int i = 0; i < 3; i++) {
    char text[1024];
    snprintf(text, sizeof text, SC GLA "layers = 1\nchunk = %s\n" TRAIN, ls[i]);
    against("stdlib/gla.cell", text, "scan", 1);
  }
}

/* auto takes the form where check's estimates make it cheaper (chunk_cheaper): GLA's heads of
 * 16 x 16 (a scan moves 6 K V floats a token per head, the form about 2 K + 2 V) */
Test(train_chunked, auto_takes_the_form_where_cheaper) {
  Fix f;
  cr_assert_not_null(build(&f, "stdlib/gla.cell", SC "[model]\nwidth = 8\ndims.NH = 2\ndims.K = 16\ndims.V = 16\n" TRAIN),
                     "%s", captured());
  expect_mode(f.m, "chunked");
  const Cell *c = model_layer_cell(f.m, 0);
  cr_assert(chunk_cheaper(c, 64));
  fix_free(&f);
  /* a model in scan mode stays in it; a cell without the form keeps its mode */
  cr_assert_not_null(build(&f, "stdlib/gla.cell", SC "[model]\nwidth = 8\ndims.NH = 2\ndims.K = 16\ndims.V = 16\n" TRAIN
                                                  "mode = scan\n"), "%s", captured());
  expect_mode(f.m, "scan");
  fix_free(&f);
  cr_assert_not_null(build(&f, "stdlib/gru.cell", SC "[model]\nwidth = 8\nhidden = 8\n" TRAIN), "%s", captured());
  expect_mode(f.m, "sequential");
  fix_free(&f);
}

/* chunk_cheaper follows the estimates: heads of 2 x 2 in chunks of 256 do 2 L (K + V) flops a
 * token in the form for 5 K V in a scan, which the bytes saved do not pay for */
Test(train_chunked, auto_keeps_the_scan_where_not_cheaper) {
  Fix f;
  cr_assert_not_null(build(&f, "stdlib/gla.cell", SC "[model]\nwidth = 8\ndims.NH = 1\ndims.K = 2\ndims.V = 2\nchunk = 256\n" TRAIN),
                     "%s", captured());
  const Cell *c = model_layer_cell(f.m, 0);
  cr_assert(!chunk_cheaper(c, 256) && chunk_cheaper(c, 16));
  expect_mode(f.m, "scan");
  fix_free(&f);
}

Test(train_chunked, a_cell_without_the_form_is_a_located_error) {
  Fix f;
  cr_assert_null(build(&f, "stdlib/mamba.cell", SC "[model]\nwidth = 8\ndims.E = 8\ndims.N = 4\n" TRAIN "mode = chunked\n"));
  const char *got = captured();
  cr_assert_not_null(strstr(got, "stdlib/mamba.cell:"), "%s", got);
  cr_assert_not_null(strstr(got, "cannot run cell 'mamba' in chunked mode"), "%s", got);
  cr_assert_not_null(strstr(got, "its decay varies along both"), "%s", got);
  fix_free(&f);
  cr_assert_null(build(&f, "stdlib/gru.cell", SC "[model]\nwidth = 8\nhidden = 8\n" TRAIN "mode = chunked\n"));
  cr_assert_not_null(strstr(captured(), "cannot run cell 'gru' in chunked mode"), "%s", captured());
  fix_free(&f);
}
