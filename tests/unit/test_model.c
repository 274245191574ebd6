/* test_model.c: the whole model around a cell (train/model/model.c): the gradient of every learned
 * tensor against central finite differences of the loss, for each encoder, block, norm, mixer,
 * readout and loss, with dropout and gumbel noise on; determinism; and the configuration errors
 * model_new reports. Small sizes (T 6, B 3, width 4-6), float32. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "lang.h"
#include "model.h"
#include "nn.h"
#include "support.h"
#include "tasks.h"

/* The library's threads for what follows (Tuning.threads, CELLC_THREADS; 0: every core). */
static void set_threads(int n) {
  Tuning t = *tuning();
  t.threads = n;
  tuning_set(&t);
}

static char *diag_buf;
static size_t diag_len;

/* Sends diagnostics to a memory buffer (each test runs in its own process). */
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

/* ---- building a model from a configuration text ---- */

typedef struct Fix {
  Cfg *cfg;
  Task *task;
  TaskShape shape;
  Model *m;
  int B;
  uint64_t seed;
} Fix;

/* Parses `text` as t.cfg and builds its task and the model around `cell_file`; returns the model,
 * or NULL after cfg_parse (when `cfg_may_fail`) or model_new printed its error (into the captured
 * diagnostics). */
static Model *build(Fix *f, const char *cell_file, const char *text, bool cfg_may_fail) {
  memset(f, 0, sizeof *f);
  capture();
  Src src = {"t.cfg", text, strlen(text)};
  f->cfg = cfg_parse(&src, NULL, 0);
  if (!f->cfg && cfg_may_fail) return NULL;
  cr_assert_not_null(f->cfg, "configuration rejected:\n%s\n%s", text, captured());
  f->B = (int)cfg_int(f->cfg, "train.batch");
  f->seed = (uint64_t)cfg_int(f->cfg, "train.seed");
  const TaskDef *def = cfg_task(f->cfg);
  double num[32];
  const char *str[32];
  cr_assert_leq(def->nkeys, 32);
  cfg_task_values(f->cfg, num, str);
  char err[512];
  cr_assert_eq(task_new(def, num, str, f->seed, &f->task, err, sizeof err), 0, "%s", err);
  f->shape = task_shape(f->task);
  f->m = model_new(f->cfg, cell_file, "stdlib", &f->shape, f->B, f->seed);
  return f->m;
}

static Model *build_ok(Fix *f, const char *cell_file, const char *text) {
  Model *m = build(f, cell_file, text, false);
  cr_assert_not_null(m, "model_new failed:\n%s", captured());
  return m;
}

static void fix_free(Fix *f) {
  model_free(f->m);
  if (f->task) task_free(f->task);
  cfg_free(f->cfg);
  memset(f, 0, sizeof *f);
}

static ModelTensor *find_tensor(Model *m, const char *name) {
  for (int i = 0; i < model_ntensors(m); i++)
    if (!strcmp(model_tensor(m, i)->name, name)) return model_tensor(m, i);
  return NULL;
}

/* ---- the gradient check ---- */

/* A small deterministic generator for the test's own choices (coordinates, directions). */
static uint64_t mix_state;
static uint64_t mix_next(void) {
  mix_state ^= mix_state << 13;
  mix_state ^= mix_state >> 7;
  mix_state ^= mix_state << 17;
  return mix_state;
}
static double mix_normal(void) {
  double u1 = ((double)(mix_next() >> 11) + 0.5) / 9007199254740992.0;
  double u2 = ((double)(mix_next() >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

#define FD_EPS 3e-3
/* |fd - analytic| <= FD_ATOL + FD_RTOL max(|fd|, |analytic|). The float32 loss carries noise of
 * about 1e-8, 3e-6 on a difference quotient; the truncation error of eps = 1e-2 reached 0.8% on
 * the largest gradients (about 1) and 3.5% on lru's theta_log (the phase, through cos and sin of
 * an exponential) under the counter-based dropout masks: eps = 3e-3 cuts it about tenfold. */
#define FD_ATOL 1e-5
#define FD_RTOL 3e-2

/* The training-mode loss: it draws the same dropout mask and gumbel noise on every call with
 * the same step; the gradients it writes are ignored. */
static double loss_at(Fix *f, const TaskBatch *b, int64_t step) { return model_batch(f->m, b, true, step, f->B).loss; }

static bool close_enough(double fd, double an) { return fabs(fd - an) <= FD_ATOL + FD_RTOL * fmax(fabs(fd), fabs(an)); }

/* What a check found. */
typedef struct GradReport {
  int checked, bad;
  char text[4096];
  size_t len;
} GradReport;

static void report(GradReport *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(GradReport *r, const char *fmt, ...) {
  if (r->len >= sizeof r->text - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
  va_end(ap);
  if (n > 0) r->len += (size_t)n < sizeof r->text - r->len ? (size_t)n : sizeof r->text - r->len - 1;
}

/* Checks every learned tensor's gradient at `step` (training: dropout and noise on) against
 * central differences of the loss: along one random unit direction over the whole tensor part,
 * at the coordinate of the largest analytic gradient, and at two random coordinates.
 * `scale_tensor`, when given, names a tensor whose analytic gradient is scaled by `scale` before
 * the comparison (the test of the check itself). */
static GradReport grad_check(Fix *f, int64_t step, const char *scale_tensor, double scale) {
  GradReport r = {0};
  Model *m = f->m;
  TaskBatch b = {0};
  task_batch(f->task, TASK_TRAIN, step, f->B, &b);
  int nt = model_ntensors(m);
  float **saved = calloc((size_t)nt * 2, sizeof(float *));
  ModelLoss l0 = model_batch(m, &b, true, step, f->B);
  cr_assert(isfinite(l0.loss) && l0.counted > 0, "loss %g counted %lld", l0.loss, (long long)l0.counted);
  for (int i = 0; i < nt; i++) {
    ModelTensor *t = model_tensor(m, i);
    for (int part = 0; part < (t->cplx ? 2 : 1); part++) {
      saved[2 * i + part] = malloc(sizeof(float) * (size_t)t->numel);
      memcpy(saved[2 * i + part], t->grad[part], sizeof(float) * (size_t)t->numel);
      if (scale_tensor && !strcmp(t->name, scale_tensor))
        for (int64_t j = 0; j < t->numel; j++) saved[2 * i + part][j] *= (float)scale;
    }
  }
  for (int i = 0; i < nt; i++) {
    ModelTensor *t = model_tensor(m, i);
    if (!t->learned) continue;
    for (int part = 0; part < (t->cplx ? 2 : 1); part++) {
      float *val = t->val[part], *g = saved[2 * i + part];
      int64_t n = t->numel;
      mix_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(i * 2 + part + 1) * 0xD1B54A32D192ED03ull;
      float *orig = malloc(sizeof(float) * (size_t)n);
      double *v = malloc(sizeof(double) * (size_t)n);
      memcpy(orig, val, sizeof(float) * (size_t)n);
      /* along a random unit direction */
      double norm = 0, an = 0;
      for (int64_t j = 0; j < n; j++) v[j] = mix_normal(), norm += v[j] * v[j];
      norm = sqrt(norm);
      for (int64_t j = 0; j < n; j++) v[j] /= norm, an += v[j] * g[j];
      for (int64_t j = 0; j < n; j++) val[j] = (float)(orig[j] + FD_EPS * v[j]);
      double lp = loss_at(f, &b, step);
      for (int64_t j = 0; j < n; j++) val[j] = (float)(orig[j] - FD_EPS * v[j]);
      double lm = loss_at(f, &b, step);
      memcpy(val, orig, sizeof(float) * (size_t)n);
      /* the perturbation as float32 holds it */
      double fd = (lp - lm) / (2 * FD_EPS);
      r.checked++;
      if (!close_enough(fd, an) || !isfinite(fd)) {
        r.bad++;
        report(&r, "%s%s direction: analytic %.6g, finite differences %.6g\n", t->name, part ? " (im)" : "", an, fd);
      }
      /* coordinates: the largest gradient and two at random */
      int64_t coords[3] = {0, (int64_t)(mix_next() % (uint64_t)n), (int64_t)(mix_next() % (uint64_t)n)};
      for (int64_t j = 1; j < n; j++)
        if (fabsf(g[j]) > fabsf(g[coords[0]])) coords[0] = j;
      for (int c = 0; c < 3; c++) {
        int64_t j = coords[c];
        val[j] = (float)(orig[j] + FD_EPS);
        double up = (double)val[j];
        lp = loss_at(f, &b, step);
        val[j] = (float)(orig[j] - FD_EPS);
        double down = (double)val[j];
        lm = loss_at(f, &b, step);
        val[j] = orig[j];
        fd = (lp - lm) / (up - down);
        r.checked++;
        if (!close_enough(fd, g[j]) || !isfinite(fd)) {
          r.bad++;
          report(&r, "%s%s[%lld]: analytic %.6g, finite differences %.6g\n", t->name, part ? " (im)" : "", (long long)j,
                 (double)g[j], fd);
        }
      }
      free(orig), free(v);
    }
  }
  /* the values are restored: the loss is what it was */
  double again = loss_at(f, &b, step);
  cr_assert_eq(again, l0.loss, "the check left the model changed: %.17g then %.17g", l0.loss, again);
  for (int i = 0; i < 2 * nt; i++) free(saved[i]);
  free(saved);
  task_batch_free(&b);
  return r;
}

/* Builds the model and checks its gradients at two steps (two dropout masks and noise draws). */
static void expect_gradients(const char *cell_file, const char *text) {
  Fix f;
  build_ok(&f, cell_file, text);
  for (int64_t step = 0; step < 2; step++) {
    GradReport r = grad_check(&f, step * 7 + 3, NULL, 1);
    cr_assert_gt(r.checked, 8);
    cr_assert_eq(r.bad, 0, "%s: %d of %d gradient checks failed at step %lld:\n%s", model_summary(f.m), r.bad, r.checked,
                 (long long)(step * 7 + 3), r.text);
  }
  fix_free(&f);
}

/* Tasks at small sizes: T = 2 M + length = 6 for copying; T = 6 for the others. */
#define COPYING "[task]\nname = copying\ntokens = 5\nmemorize = 2\nlength = 2\n"
#define ADDING "[task]\nname = adding\nlength = 6\nnoise_channels = 2\n"
#define XOR "[task]\nname = temporal_xor\nlength = 6\nvocab = 4\nwindow = 3\ntrain = 24\nvalid = 6\ntest = 6\n"
#define TRAIN "[train]\nbatch = 3\nseed = 5\n"

/* ---- gradients: stacked layers ---- */

Test(model_grad, embed_stack_gru_dropout_readout_all) {
  expect_gradients("stdlib/gru.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\ndropout = 0.25\n" TRAIN);
}

Test(model_grad, embed_stack_mgu_scan) {
  Fix f;
  build_ok(&f, "stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 5\nhidden = 4\n" TRAIN);
  cr_assert_not_null(strstr(model_summary(f.m), "(scan)"), "%s", model_summary(f.m));
  fix_free(&f);
  expect_gradients("stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 5\nhidden = 4\ndropout = 0.2\n" TRAIN);
}

Test(model_grad, embed_stack_mgu_sees_h_sequential) {
  expect_gradients("stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\noption.see_h = true\n" TRAIN);
}

Test(model_grad, embed_stack_mgu_forced_sequential) {
  expect_gradients("stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\ndropout = 0.1\n"
                                              "[train]\nbatch = 3\nseed = 5\nmode = sequential\n");
}

Test(model_grad, drawn_initial_state) {
  expect_gradients("tests/cells/learned_gate.cell",
                   COPYING "[model]\ncell = drawn_state\nlayers = 2\nwidth = 4\nhidden = 5\n" TRAIN);
}

Test(model_grad, embed_stack_lstm_two_states) {
  expect_gradients("stdlib/lstm.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 4\ndropout = 0.1\n" TRAIN);
}

Test(model_grad, linear_stack_lru_complex_mse_last) {
  expect_gradients("stdlib/lru.cell", ADDING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\ndropout = 0.2\n" TRAIN);
}

Test(model_grad, linear_stack_lru_mse_mean) {
  expect_gradients("stdlib/lru.cell", ADDING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\nreadout = mean\n" TRAIN);
}

Test(model_grad, learned_state_and_gumbel_noise) {
  Fix f;
  build_ok(&f, "tests/cells/learned_gate.cell",
           COPYING "[model]\ncell = learned_gate\nlayers = 2\nwidth = 4\nhidden = 5\n" TRAIN);
  ModelTensor *h0 = find_tensor(f.m, "layer.1.h.init");
  cr_assert_not_null(h0, "no layer.1.h.init");
  cr_assert(h0->learned && h0->numel == 5);
  fix_free(&f);
  expect_gradients("tests/cells/learned_gate.cell",
                   COPYING "[model]\ncell = learned_gate\nlayers = 2\nwidth = 4\nhidden = 5\ndropout = 0.2\n" TRAIN);
}

Test(model_grad, learned_complex_state_scan) {
  expect_gradients("tests/cells/learned_gate.cell",
                   XOR "[model]\ncell = learned_scan\nlayers = 2\nwidth = 4\nhidden = 3\nreadout = mean\n" TRAIN);
}

/* A learned initial state must move the loss: after one step of training its gradient is not zero. */
Test(model_grad, learned_state_has_a_gradient) {
  Fix f;
  build_ok(&f, "tests/cells/learned_gate.cell", XOR "[model]\ncell = learned_gate\nlayers = 1\nwidth = 4\nhidden = 4\n" TRAIN);
  TaskBatch b = {0};
  task_batch(f.task, TASK_TRAIN, 0, f.B, &b);
  model_batch(f.m, &b, true, 0, f.B);
  ModelTensor *t = find_tensor(f.m, "layer.0.h.init");
  cr_assert_not_null(t);
  double s = 0;
  for (int64_t j = 0; j < t->numel; j++) s += fabsf(t->grad[0][j]);
  cr_assert_gt(s, 0);
  task_batch_free(&b);
  fix_free(&f);
}

/* ---- gradients: residual blocks, each norm and mixer ---- */

Test(model_grad, residual_layer_norm_glu_dropout) {
  expect_gradients("stdlib/gru.cell", XOR "[model]\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\nnorm = layer\n"
                                          "mixer = glu\ndropout = 0.2\n" TRAIN);
}

Test(model_grad, residual_rms_norm_mlp_mean) {
  expect_gradients("stdlib/mgu.cell", XOR "[model]\nlayers = 2\nwidth = 5\nhidden = 5\nblock = residual\nnorm = rms\n"
                                          "mixer = mlp\nreadout = mean\ndropout = 0.1\n" TRAIN);
}

Test(model_grad, residual_batch_norm_glu_lru) {
  expect_gradients("stdlib/lru.cell", ADDING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\nblock = residual\nnorm = batch\n"
                                             "mixer = glu\ndropout = 0.2\n" TRAIN);
}

Test(model_grad, residual_batch_norm_mlp_readout_all) {
  expect_gradients("stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\nnorm = batch\n"
                                              "mixer = mlp\n" TRAIN);
}

Test(model_grad, residual_no_norm_no_mixer) {
  expect_gradients("stdlib/gru.cell",
                   COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\ndropout = 0.3\n" TRAIN);
}

Test(model_grad, residual_layer_norm_no_mixer) {
  expect_gradients("stdlib/mgu.cell",
                   ADDING "[model]\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\nnorm = layer\n" TRAIN);
}

Test(model_grad, residual_no_norm_mlp) {
  expect_gradients("stdlib/mgu.cell", ADDING "[model]\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\nmixer = mlp\n"
                                             "dropout = 0.2\n" TRAIN);
}

Test(model_grad, residual_hgru_complex_per_layer_option) {
  expect_gradients("stdlib/hgru.cell", XOR "[model]\nlayers = 2\nwidth = 4\nblock = residual\nnorm = rms\nmixer = glu\n"
                                           "layer.1.option.lb = 0.5\n" TRAIN);
}

/* The check itself: a gradient 10% off, or one coordinate wrong, fails it. */
Test(model_grad, check_detects_a_wrong_gradient) {
  Fix f;
  build_ok(&f, "stdlib/gru.cell",
           XOR "[model]\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\nnorm = layer\nmixer = glu\n" TRAIN);
  const char *names[] = {"layer.0.Whz", "layer.1.norm.weight", "layer.0.mixer.w1", "embed.weight", "head.bias"};
  for (int i = 0; i < 5; i++) {
    cr_assert_not_null(find_tensor(f.m, names[i]), "no %s", names[i]);
    GradReport r = grad_check(&f, 3, names[i], 1.1);
    cr_assert_gt(r.bad, 0, "a gradient of %s scaled by 1.1 passed the check", names[i]);
    cr_assert_not_null(strstr(r.text, names[i]), "%s", r.text);
  }
  fix_free(&f);
  /* complex params and a learned complex initial state */
  build_ok(&f, "tests/cells/learned_gate.cell",
           ADDING "[model]\ncell = learned_scan\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\nnorm = batch\n" TRAIN);
  const char *cplx[] = {"layer.0.h.init", "layer.1.Bm", "layer.0.th", "encoder.weight", "layer.1.norm.bias"};
  for (int i = 0; i < 5; i++) {
    cr_assert_not_null(find_tensor(f.m, cplx[i]), "no %s", cplx[i]);
    GradReport r = grad_check(&f, 3, cplx[i], 1.1);
    cr_assert_gt(r.bad, 0, "a gradient of %s scaled by 1.1 passed the check", cplx[i]);
  }
  GradReport r = grad_check(&f, 3, NULL, 1);
  cr_assert_eq(r.bad, 0, "%s", r.text);
  fix_free(&f);
}

/* ---- the model's behaviour ---- */

static void losses(Fix *f, double *out, int n) {
  for (int s = 0; s < n; s++) {
    TaskBatch b = {0};
    task_batch(f->task, TASK_TRAIN, s, f->B, &b);
    out[s] = model_batch(f->m, &b, true, s, f->B).loss;
    task_batch_free(&b);
  }
}

/* The embedding's gradient folded through layer 0 (model.c, plan_embedding_fold: the layer's input
 * adjoints summed by token, then times its input weights) against the layer's input gradient summed
 * by token (Tuning.no_embed_fold, CELLC_EMBED_FOLD=0): every gradient within float32 rounding, the losses equal, on a
 * sequential, an LSTM's, a scan and a two-layer model; a residual model does not fold. (The finite
 * differences of model_grad check the folded gradients too: their copying task folds.) */
static void fold_against_product(const char *cell_file, const char *text) {
  Fix a, b;
  build_ok(&a, cell_file, text);
  Tuning was = *tuning(), t = was;
  t.no_embed_fold = true;
  tuning_set(&t);
  build_ok(&b, cell_file, text);
  tuning_set(&was);
  cr_assert(model_folds_embedding(a.m) && !model_folds_embedding(b.m), "%s", model_summary(a.m));
  for (int step = 0; step < 2; step++) {
    TaskBatch batch = {0};
    task_batch(a.task, TASK_TRAIN, step, a.B, &batch);
    double la = model_batch(a.m, &batch, true, step, a.B).loss, lb = model_batch(b.m, &batch, true, step, b.B).loss;
    task_batch_free(&batch);
    cr_assert_eq(la, lb, "step %d: loss %.17g folded, %.17g not", step, la, lb);
    for (int i = 0; i < model_ntensors(a.m); i++) {
      ModelTensor *ta = model_tensor(a.m, i), *tb = model_tensor(b.m, i);
      if (!ta->learned) continue;
      double scale = 0, worst = 0;
      for (int64_t j = 0; j < ta->numel; j++) scale = fmax(scale, fabs(tb->grad[0][j]));
      for (int64_t j = 0; j < ta->numel; j++) worst = fmax(worst, fabs(ta->grad[0][j] - tb->grad[0][j]));
      cr_assert(worst <= 1e-5 * scale + 1e-12, "%s, step %d: folded and not differ by %g (largest %g)", ta->name, step, worst, scale);
    }
  }
  fix_free(&a), fix_free(&b);
}

Test(model, embedding_gradient_folded_through_layer_0) {
  fold_against_product("stdlib/gru.cell", COPYING "[model]\nlayers = 1\nwidth = 6\nhidden = 5\n" TRAIN);
  fold_against_product("stdlib/lstm.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\n" TRAIN);
  fold_against_product("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 5\nhidden = 4\n" TRAIN);
  fold_against_product("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 5\nhidden = 4\noption.see_h = true\n" TRAIN);
  Fix r;
  build_ok(&r, "stdlib/gru.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nhidden = 4\nblock = residual\n" TRAIN);
  cr_assert(!model_folds_embedding(r.m));
  fix_free(&r);
}

/* The same seed and configuration give bit-identical params and losses; dropout, noise and batch
 * norm included. */
Test(model, same_seed_same_losses) {
  const char *text = COPYING "[model]\ncell = learned_gate\nlayers = 2\nwidth = 4\nhidden = 4\nblock = residual\n"
                             "norm = batch\nmixer = glu\ndropout = 0.3\n" TRAIN;
  Fix a, b;
  build_ok(&a, "tests/cells/learned_gate.cell", text);
  double la[4], lb[4];
  losses(&a, la, 4);
  build_ok(&b, "tests/cells/learned_gate.cell", text);
  cr_assert_eq(model_ntensors(a.m), model_ntensors(b.m));
  losses(&b, lb, 4);
  for (int s = 0; s < 4; s++) cr_assert_eq(memcmp(&la[s], &lb[s], sizeof(double)), 0, "step %d: %.17g vs %.17g", s, la[s], lb[s]);
  for (int i = 0; i < model_ntensors(a.m); i++) {
    ModelTensor *ta = model_tensor(a.m, i), *tb = model_tensor(b.m, i);
    cr_assert_str_eq(ta->name, tb->name);
    for (int part = 0; part < (ta->cplx ? 2 : 1); part++) {
      cr_assert_eq(memcmp(ta->val[part], tb->val[part], sizeof(float) * (size_t)ta->numel), 0, "%s differs", ta->name);
      cr_assert_eq(memcmp(ta->grad[part], tb->grad[part], sizeof(float) * (size_t)ta->numel), 0, "grad %s differs", ta->name);
    }
  }
  /* the steps draw different masks and noise: the losses are not all equal */
  cr_assert(la[0] != la[1] || la[1] != la[2]);
  fix_free(&a);
  fix_free(&b);
}

Test(model, other_seed_other_params) {
  Fix a, b;
  build_ok(&a, "stdlib/gru.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nhidden = 4\n[train]\nbatch = 3\nseed = 5\n");
  build_ok(&b, "stdlib/gru.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nhidden = 4\n[train]\nbatch = 3\nseed = 6\n");
  ModelTensor *ta = find_tensor(a.m, "layer.0.Wxz"), *tb = find_tensor(b.m, "layer.0.Wxz");
  cr_assert(ta && tb);
  cr_assert_neq(memcmp(ta->val[0], tb->val[0], sizeof(float) * (size_t)ta->numel), 0);
  fix_free(&a);
  fix_free(&b);
}

/* Dropout, gumbel noise and batch statistics are training only: without them, evaluation and
 * training compute the same loss; with dropout they differ. */
Test(model, evaluation_equals_training_without_randomness) {
  Fix f;
  build_ok(&f, "stdlib/gru.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\n" TRAIN);
  TaskBatch b = {0};
  task_batch(f.task, TASK_VALID, 0, f.B, &b);
  double tr = model_batch(f.m, &b, true, 0, f.B).loss, ev = model_batch(f.m, &b, false, 0, f.B).loss;
  cr_assert_float_eq(tr, ev, 1e-5 * fabs(tr) + 1e-7, "training %.9g, evaluation %.9g", tr, ev);
  task_batch_free(&b);
  fix_free(&f);

  build_ok(&f, "stdlib/gru.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\ndropout = 0.5\n" TRAIN);
  task_batch(f.task, TASK_VALID, 0, f.B, &b);
  tr = model_batch(f.m, &b, true, 0, f.B).loss;
  double ev1 = model_batch(f.m, &b, false, 0, f.B).loss, ev2 = model_batch(f.m, &b, false, 9, f.B).loss;
  cr_assert_neq(tr, ev1);
  cr_assert_eq(ev1, ev2, "evaluation depends on the step: %.17g vs %.17g", ev1, ev2);
  task_batch_free(&b);
  fix_free(&f);
}

/* Evaluation uses batch norm's running statistics and leaves them alone; training updates them. */
Test(model, batch_norm_running_statistics) {
  Fix f;
  build_ok(&f, "stdlib/mgu.cell", ADDING "[model]\nlayers = 1\nwidth = 4\nhidden = 4\nblock = residual\nnorm = batch\n" TRAIN);
  ModelTensor *mean = find_tensor(f.m, "layer.0.norm.running_mean"), *var = find_tensor(f.m, "layer.0.norm.running_var");
  cr_assert(mean && var);
  cr_assert(!mean->learned && !var->learned);
  cr_assert_eq(mean->val[0][0], 0.0f);
  cr_assert_eq(var->val[0][0], 1.0f);
  TaskBatch b = {0};
  task_batch(f.task, TASK_TRAIN, 0, f.B, &b);
  model_batch(f.m, &b, false, 0, f.B);
  cr_assert_eq(mean->val[0][0], 0.0f);
  cr_assert_eq(var->val[0][0], 1.0f);
  model_batch(f.m, &b, true, 0, f.B);
  cr_assert_neq(mean->val[0][0], 0.0f);
  cr_assert_neq(var->val[0][0], 1.0f);
  task_batch_free(&b);
  fix_free(&f);
}

/* An evaluation's last, partial batch: only the first `rows` sequences count, whatever the others
 * hold. */
Test(model, partial_batch_counts_its_rows) {
  Fix f;
  build_ok(&f, "stdlib/gru.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 5\n" TRAIN);
  TaskBatch b = {0};
  task_batch(f.task, TASK_TEST, 0, f.B, &b);
  ModelLoss all = model_batch(f.m, &b, false, 0, f.B), two = model_batch(f.m, &b, false, 0, 2);
  cr_assert_eq(all.counted, 3 * 2); /* M = 2 marker steps per sequence */
  cr_assert_eq(two.counted, 2 * 2);
  for (int t = 0; t < b.T; t++) b.tokens[t * b.B + 2] = (b.tokens[t * b.B + 2] + 1) % 5;
  ModelLoss changed = model_batch(f.m, &b, false, 0, 2);
  cr_assert_eq(changed.loss, two.loss);
  task_batch_free(&b);
  fix_free(&f);
}

/* init.PARAM for every layer, layer.K.init.PARAM for one (it wins). */
Test(model, init_overrides) {
  Fix f;
  build_ok(&f, "stdlib/mgu.cell",
           COPYING "[model]\nlayers = 3\nwidth = 4\nhidden = 4\ninit.bz = zeros\nlayer.1.init.bz = const(0.25)\n" TRAIN);
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "layer.%d.bz", k);
    ModelTensor *t = find_tensor(f.m, name);
    cr_assert_not_null(t);
    for (int64_t j = 0; j < t->numel; j++)
      cr_assert_eq(t->val[0][j], k == 1 ? 0.25f : 0.0f, "%s[%lld] = %g", name, (long long)j, t->val[0][j]);
  }
  fix_free(&f);
}

Test(model, tensor_names) {
  Fix f;
  build_ok(&f, "stdlib/lru.cell",
           ADDING "[model]\nlayers = 2\nwidth = 4\nhidden = 3\nblock = residual\nnorm = layer\nmixer = glu\n" TRAIN);
  const char *want[] = {"encoder.weight",   "encoder.bias",        "layer.0.nu_log",    "layer.0.B",
                        "layer.1.C",        "layer.1.norm.weight", "layer.1.norm.bias", "layer.0.mixer.w1",
                        "layer.0.mixer.b3", "head.weight",         "head.bias"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert_not_null(find_tensor(f.m, want[i]), "no %s", want[i]);
  ModelTensor *B = find_tensor(f.m, "layer.0.B");
  cr_assert(B->cplx && B->ndim == 3 && B->shape[0] == 3 && B->shape[1] == 4 && B->shape[2] == 2);
  ModelTensor *hw = find_tensor(f.m, "head.weight");
  cr_assert(hw->ndim == 2 && hw->shape[0] == 1 && hw->shape[1] == 4);
  cr_assert_null(find_tensor(f.m, "embed.weight"));
  fix_free(&f);
}

/* ---- configuration errors ---- */

/* Expects the configuration to be rejected, by model_new or already by cfg_parse (for what it can
 * check without the cell), with one error that contains each of the NULL-terminated needles. */
static void expect_model_error(const char *cell_file, const char *text, const char *const *needles) {
  Fix f;
  Model *m = build(&f, cell_file, text, true);
  const char *got = captured();
  cr_assert_null(m, "accepted:\n%s", text);
  for (; *needles; needles++) cr_assert_not_null(strstr(got, *needles), "want '%s' in:\n%s", *needles, got);
  int errors = 0;
  for (const char *p = strstr(got, "error"); p; p = strstr(p + 1, "error")) errors++;
  cr_assert_eq(errors, 1, "want one error:\n%s", got);
  fix_free(&f);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(model_errors, unknown_option_suggests) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\noption.see_hh = true\n" TRAIN,
                     NEEDLES("t.cfg:9:", "cell 'mgu' has no option 'see_hh'", "did you mean 'see_h'"));
}

Test(model_errors, option_of_a_cell_without_options) {
  expect_model_error("stdlib/gru.cell", COPYING "[model]\nlayers = 1\nwidth = 4\noption.see_h = true\n" TRAIN,
                     NEEDLES("t.cfg:9:", "cell 'gru' has no options"));
}

Test(model_errors, option_of_the_wrong_type) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\noption.see_h = 0.5\n" TRAIN,
                     NEEDLES("t.cfg:9:", "option 'see_h' of cell 'mgu' is a bool"));
}

Test(model_errors, init_of_an_unknown_param_suggests) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 4\ninit.bzz = ugi\n" TRAIN,
                     NEEDLES("t.cfg:9:", "cell 'mgu' has no param 'bzz'", "did you mean 'bz'"));
}

Test(model_errors, unknown_initializer_suggests) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\ninit.bz = gumbell(0, 1)\n" TRAIN,
                     NEEDLES("t.cfg:9:", "unknown initializer 'gumbell'", "did you mean 'gumbel'"));
}

Test(model_errors, layer_out_of_range) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nlayer.2.option.see_h = true\n" TRAIN,
                     NEEDLES("t.cfg:9:", "layer 2", "model.layers"));
}

Test(model_errors, layer_init_out_of_range) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nlayer.1.init.bz = zeros\n" TRAIN,
                     NEEDLES("t.cfg:9:", "layer 1", "model.layers"));
}

Test(model_errors, linear_encoder_on_tokens) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nencoder = linear\n" TRAIN,
                     NEEDLES("t.cfg:9:", "encoder 'linear' needs real-valued inputs", "task 'copying' gives tokens"));
}

Test(model_errors, embed_encoder_on_real_values) {
  expect_model_error("stdlib/mgu.cell", ADDING "[model]\nlayers = 1\nwidth = 4\nencoder = embed\n" TRAIN,
                     NEEDLES("t.cfg:8:", "encoder 'embed' needs token inputs", "task 'adding' gives real values"));
}

Test(model_errors, residual_cell_output_differs_from_width) {
  expect_model_error(
      "stdlib/mgu.cell", COPYING "[model]\nlayers = 2\nwidth = 4\nhidden = 6\nblock = residual\n" TRAIN,
      NEEDLES("residual blocks add the cell's output to its input", "outputs 6 values per step", "model.width is 4"));
}

Test(model_errors, norm_needs_residual_blocks) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nnorm = layer\n" TRAIN,
                     NEEDLES("t.cfg:9:", "norms and mixers belong to residual blocks"));
}

Test(model_errors, readout_mismatched_with_task) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\nlayers = 1\nwidth = 4\nreadout = last\n" TRAIN,
                     NEEDLES("t.cfg:9:", "task 'copying' has per-step targets"));
  expect_model_error("stdlib/mgu.cell", ADDING "[model]\nlayers = 1\nwidth = 4\nreadout = all\n" TRAIN,
                     NEEDLES("t.cfg:8:", "task 'adding' has per-sequence targets"));
}

Test(model_errors, unknown_cell) {
  expect_model_error("stdlib/mgu.cell", COPYING "[model]\ncell = mug\nlayers = 1\nwidth = 4\n" TRAIN,
                     NEEDLES("t.cfg:7:", "has no cell named 'mug'"));
}

Test(model_errors, unknown_dim_suggests) {
  expect_model_error("tests/cells/learned_gate.cell", COPYING "[model]\nlayers = 1\nwidth = 4\ndims.HH = 3\n" TRAIN,
                     NEEDLES("t.cfg:9:", "has no dim 'HH'", "did you mean 'H'"));
}

Test(model_errors, missing_cell_file) {
  expect_model_error("tests/cells/no_such.cell", COPYING "[model]\nlayers = 1\nwidth = 4\n" TRAIN, NEEDLES("no_such.cell"));
}

/* The host device's zero on a buffer large enough to split over threads (three asked for), at a
 * length that is no multiple of the slices: every byte zeroed, none past the end touched. */
Test(host_ops, zero_splits_over_threads) {
  set_threads(3);
  size_t n = (size_t)13 << 20 | 37;
  unsigned char *p = malloc(n + 64);
  memset(p, 0xab, n + 64);
  Device *o = device_host();
  o->zero(o, p, n);
  for (size_t i = 0; i < n; i++)
    if (p[i]) cr_assert_fail("byte %zu not zeroed", i);
  for (size_t i = n; i < n + 64; i++) cr_assert_eq(p[i], 0xab, "byte %zu past the end", i);
  set_threads(0);
  free(p);
}

/* The host device's mse is nn_mse, bit for bit: the sum and every gradient value, on values whose
 * float and double roundings differ. */
Test(mse, host_ops_are_nn_mse) {
  int N = 37, K = 3;
  float *p = calloc((size_t)N * K, sizeof(float)), *y = calloc((size_t)N * K, sizeof(float)), *on = calloc((size_t)N, sizeof(float));
  float *d1 = calloc((size_t)N * K, sizeof(float)), *d2 = calloc((size_t)N * K, sizeof(float));
  for (int i = 0; i < N * K; i++) p[i] = sinf(0.37f * (float)i), y[i] = cosf(1.3f * (float)i) / 3.0f;
  for (int r = 0; r < N; r++) on[r] = r % 3 != 1;
  Device *o = device_host();
  double sum = 0;
  o->mse(o, d1, p, y, on, N, K, 1000, &sum);
  NnLoss L = nn_mse(d2, p, y, on, N, K, 1000);
  cr_assert(memcmp(&sum, &L.sum, sizeof sum) == 0);
  cr_assert(memcmp(d1, d2, sizeof(float) * (size_t)N * K) == 0);
  free(p), free(y), free(on), free(d1), free(d2);
}

/* The device operations' Adam coefficients are the optimizer's own struct: no conversion between
 * the two (a copy field by field would go stale when a field is added). */
_Static_assert(__builtin_types_compatible_p(DevAdam, OptAdamK), "DevAdam is runtime/optim's OptAdamK");

/* The host device's adam is opt_adam_apply, bit for bit. */
Test(model_ops, host_adam_is_opt_adam_apply) {
  enum { N = 29 };
  float p1[N], p2[N], g[N], m1[N] = {0}, m2[N] = {0}, v1[N] = {0}, v2[N] = {0};
  for (int i = 0; i < N; i++) p1[i] = p2[i] = sinf(0.7f * (float)i), g[i] = cosf(0.3f * (float)i);
  OptHyper h = {.lr_scale = 1, .weight_decay = 0.01, .eps = 1e-8, .beta1 = 0.9, .beta2 = 0.999};
  OptAdamK k = opt_adam_k(&h, 1e-2, 3, true);
  Device *o = device_host();
  o->adam(o, p1, g, m1, v1, N, &k);
  opt_adam_apply(&k, p2, g, m2, v2, N);
  cr_assert(memcmp(p1, p2, sizeof p1) == 0 && memcmp(m1, m2, sizeof m1) == 0 && memcmp(v1, v2, sizeof v1) == 0);
}
