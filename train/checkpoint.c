/* checkpoint.c: the checkpoint format ("cellc-checkpoint-1", docs/cli.md): a safetensors
 * file of the params, the optimizer's moments and step, with the cell, its compiled form
 * (cell_form.h) and the configuration in its metadata; written atomically, read back checked. */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell_form.h"
#include "pipeline.h"
#include "safetensors.h"
#include "support.h"
#include "train_impl.h"

#define CHECKPOINT_FORMAT "cellc-checkpoint-1"

/* ---- the cell a checkpoint was trained with ----
 * A checkpoint records its cell's compiled form (cell_form.h; metadata "cell_program"); loading it
 * compares that form with this run's cell's, and a difference is refused (status 1) unless
 * --allow-changed-cell. */

/* This run's form: the cell's name, then every layer's cell. */
static void run_form(Run *r, CellForm *f) {
  cell_form_add_name(f, model_cell_name(r->model));
  for (int k = 0; k < model_nlayers(r->model); k++) cell_form_add_layer(f, k, model_layer_cell(r->model, k));
}

/* The options of layer k in a configuration: every all-layer entry, then the layer's own (the last
 * one wins), as train/model binds them. */
static int cfg_layer_options(const Cfg *cfg, int k, Binding *out, int max) {
  const CfgEntry *e;
  int n = cfg_entries(cfg, &e), count = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n && count < max; i++)
      if (e[i].kind == CFG_ENTRY_OPTION && (pass == 0 ? e[i].layer < 0 : e[i].layer == k))
        out[count++] = (Binding){e[i].name, e[i].text};
  return count;
}

/* The form of a checkpoint that holds none of this version: its cell_source checked with the
 * options of its configuration, imports found next to this run's cell file, for the layers both
 * have. What the checker prints goes into err (its first line), not to the terminal: 0, or -1. */
static int checkpoint_form(Run *r, const SftFile *f, const char *path, CellForm *out, char *err, size_t errlen) {
  const char *source = sft_meta(f, "cell_source"), *name = sft_meta(f, "cell"), *config = sft_meta(f, "config");
  if (!source || !name || !config) {
    snprintf(err, errlen, "its metadata holds no %s", !source ? "cell_source" : !name ? "cell" : "config");
    return -1;
  }
  char *said = NULL;
  size_t said_len = 0;
  FILE *quiet = open_memstream(&said, &said_len), *was = diag_out;
  CHECK(quiet);
  diag_out = quiet;
  Arena a = {0};
  Cfg *cfg = cfg_parse(src_from_text(&a, arena_printf(&a, "%s (its config)", path), config, strlen(config)), NULL, 0);
  const Cell *now = model_layer_cell(r->model, 0);
  Module *mod = cfg ? check_load_text(&a, now->src->path, source, strlen(source), r->a.stdlib) : NULL;
  const Src *src = NULL;
  const CellAst *ast = mod ? check_find_cell(mod, name, &src) : NULL;
  int rc = ast ? 0 : -1;
  if (mod && !ast) fprintf(quiet, "its cell_source has no cell '%s'\n", name);
  if (!rc) cell_form_add_name(out, name);
  int layers = rc ? 0 : (int)cfg_int(cfg, "model.layers");
  for (int k = 0; k < layers && k < model_nlayers(r->model) && !rc; k++) {
    Binding opts[64];
    CheckOptions o = {0};
    o.sets = opts, o.nsets = cfg_layer_options(cfg, k, opts, 64);
    o.training = true; /* as the run's layer cells (model_layer_cell) */
    Cell *c = check_cell(&a, src, ast, &o);
    if (c) cell_form_add_layer(out, k, c), cell_free(c);
    else rc = -1;
  }
  diag_out = was;
  fclose(quiet);
  if (rc) {
    const char *first = said && *said ? said : "it does not check";
    snprintf(err, errlen, "its cell_source does not check with this cellc (%.*s)", (int)strcspn(first, "\n"), first);
    cell_form_free(out);
  }
  free(said);
  cfg_free(cfg);
  arena_free(&a);
  return rc;
}

/* Whether the checkpoint's cell is this run's (cell_form.h): 0, or 1 after the error;
 * with --allow-changed-cell a difference is a warning. */
static int check_cell_form(Run *r, const SftFile *f, const char *path) {
  CellForm was = {0}, now = {0};
  char err[1024];
  const char *stored = sft_meta(f, "cell_program");
  int rc = stored && cell_form_read(stored, &was) == 0 ? 0 : checkpoint_form(r, f, path, &was, err, sizeof err);
  char *msg = NULL;
  int count = 0;
  if (rc < 0) msg = xasprintf("cannot tell whether the cell changed since the checkpoint was written: %s", err);
  else {
    run_form(r, &now);
    char *d = cell_form_diff(&was, &now, &count);
    char more[64] = "";
    if (count > 1) snprintf(more, sizeof more, " (and %d more difference%s)", count - 1, count > 2 ? "s" : "");
    if (d) msg = xasprintf("the cell differs from the one the checkpoint was trained with: %s%s", d, more);
    free(d);
  }
  int status = 0;
  if (msg && r->a.allow_changed_cell) {
    fflush(stdout);
    fprintf(stderr, "cellc: warning: %s: %s; loading it anyway (--allow-changed-cell)\n", path, msg);
  } else if (msg) {
    diag_plain("%s: %s; --allow-changed-cell loads it anyway", path, msg);
    status = 1;
  }
  free(msg);
  cell_form_free(&was), cell_form_free(&now);
  return status;
}

/* ---- checkpoints ---- */

/* A tensor's planes as the file holds them: complex interleaved [..., 2]. */
static float *interleave(const ModelTensor *t, float *const *planes) {
  int parts = t->cplx ? 2 : 1;
  float *buf = xmalloc(sizeof(float) * (size_t)(t->numel * parts + 1));
  for (int64_t j = 0; j < t->numel; j++)
    for (int part = 0; part < parts; part++) buf[j * parts + part] = planes[part][j];
  return buf;
}

static void moment_planes(const Run *r, int i, float *m_or_v, float **planes) {
  const ModelTensor *t = model_tensor(r->model, i);
  planes[0] = m_or_v + r->moff[i];
  planes[1] = planes[0] + t->numel;
}

/* A device's params and moments copied to the host mirrors a checkpoint is written from, and back
 * after one is read. */
static void state_to_host(Run *r) {
  model_to_host(r->model);
  if (!device_is_host(r->ops)) r->ops->download(r->ops, r->opt->state, r->state, sizeof(float) * opt_state_size(r->opt));
}

static void state_to_device(Run *r) {
  model_to_device(r->model);
  if (!device_is_host(r->ops)) r->ops->upload(r->ops, r->state, r->opt->state, sizeof(float) * opt_state_size(r->opt));
}

int checkpoint_write(Run *r, const char *path) {
  state_to_host(r);
  SftWriter *w = sft_writer_new();
  float **bufs = xcalloc((size_t)(3 * model_ntensors(r->model) + 1), sizeof(float *));
  int nb = 0;
  for (int i = 0; i < model_ntensors(r->model); i++) {
    ModelTensor *t = model_tensor(r->model, i);
    bufs[nb] = interleave(t, t->val);
    sft_add(w, t->name, SFT_F32, t->ndim, t->shape, bufs[nb++]);
    if (r->moff[i] == SIZE_MAX) continue;
    float *planes[2];
    moment_planes(r, i, r->opt->m, planes);
    bufs[nb] = interleave(t, planes);
    char *name = xasprintf("optim.m.%s", t->name);
    sft_add(w, name, SFT_F32, t->ndim, t->shape, bufs[nb++]);
    free(name);
    if (r->opt->v) {
      moment_planes(r, i, r->opt->v, planes);
      bufs[nb] = interleave(t, planes);
      name = xasprintf("optim.v.%s", t->name);
      sft_add(w, name, SFT_F32, t->ndim, t->shape, bufs[nb++]);
      free(name);
    }
  }
  int64_t step = r->step;
  sft_add(w, "optim.step", SFT_I64, 0, NULL, &step);
  char *cfgtext = cfg_write_string(r->cfg), num[64];
  sft_set_meta(w, "format", CHECKPOINT_FORMAT);
  sft_set_meta(w, "cell", model_cell_name(r->model));
  sft_set_meta(w, "cell_source", model_cell_source(r->model));
  CellForm form = {0};
  run_form(r, &form);
  char *formtext = cell_form_write(&form);
  cell_form_free(&form);
  sft_set_meta(w, "cell_program", formtext);
  free(formtext);
  sft_set_meta(w, "config", cfgtext);
  snprintf(num, sizeof num, "%lld", (long long)r->step);
  sft_set_meta(w, "step", num);
  snprintf(num, sizeof num, "%.17g", r->elapsed0 + (r->t0 > 0 ? run_now() - r->t0 : 0));
  sft_set_meta(w, "elapsed_s", num);
  char err[PATH_MAX + 512];
  run_hold_signals(SIG_BLOCK);
  int rc = sft_write(w, path, err, sizeof err);
  run_hold_signals(SIG_UNBLOCK);
  if (rc < 0) diag_plain("%s", err);
  sft_writer_free(w);
  for (int i = 0; i < nb; i++) free(bufs[i]);
  free(bufs), free(cfgtext);
  return rc;
}

/* Reads a checkpoint into the model (and the optimizer, when `with_opt`). */
int checkpoint_read(Run *r, const char *path, bool with_opt) {
  SftFile f = {0};
  char err[512];
  if (sft_read(path, &f, err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 1;
  }
  int status = 0;
  const char *fmt = sft_meta(&f, "format");
  if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT)) {
    diag_plain("%s: not a cellc checkpoint (no \"format\": \"%s\" in its metadata)", path, CHECKPOINT_FORMAT);
    status = 1;
  }
  if (!status) status = check_cell_form(r, &f, path);
  for (int i = 0; i < model_ntensors(r->model) && !status; i++) {
    ModelTensor *t = model_tensor(r->model, i);
    for (int which = 0; which < (with_opt && r->moff[i] != SIZE_MAX ? (r->opt->v ? 3 : 2) : 1) && !status; which++) {
      char *name = which == 0 ? xstrdup(t->name) : xasprintf("optim.%s.%s", which == 1 ? "m" : "v", t->name);
      const SftTensor *s = sft_find(&f, name);
      bool ok = s && s->ndim == t->ndim;
      for (int d = 0; ok && d < t->ndim; d++) ok = s->shape[d] == t->shape[d];
      if (!s) {
        diag_plain("%s: no tensor '%s': the checkpoint was written for another model or configuration", path, name);
        status = 1;
      } else if (!ok) {
        char *got = run_shape_text(s->shape, s->ndim), *want = run_shape_text(t->shape, t->ndim);
        diag_plain("%s: tensor '%s' has shape %s, but this model's is %s: the checkpoint was written for another "
                   "model or configuration", path, name, got, want);
        free(got), free(want);
        status = 1;
      } else if (s->dtype != SFT_F32 && s->dtype != SFT_F64) {
        diag_plain("%s: tensor '%s' is %s; a checkpoint holds F32 or F64 tensors", path, name, sft_dtype_name(s->dtype));
        status = 1;
      } else {
        float *planes[2];
        if (which == 0) planes[0] = t->val[0], planes[1] = t->val[1];
        else moment_planes(r, i, which == 1 ? r->opt->m : r->opt->v, planes);
        int parts = t->cplx ? 2 : 1;
        for (int64_t j = 0; j < t->numel && !status; j++)
          for (int part = 0; part < parts; part++) {
            double v = sft_get(s, j * parts + part);
            if (!isfinite(v) || !isfinite((float)v)) {
              diag_plain("%s: tensor '%s' holds a value that is not finite (%s at element %lld): the checkpoint is "
                         "not usable", path, name, isnan(v) ? "NaN" : "infinite", (long long)(j * parts + part));
              status = 1;
              break;
            }
            planes[part][j] = (float)v;
          }
      }
      free(name);
    }
  }
  /* a tensor this model does not have: the checkpoint belongs to another model or configuration */
  for (int k = 0; k < f.n && !status; k++) {
    const char *name = f.tensors[k].name;
    if (!strcmp(name, "optim.step")) continue;
    if (!strncmp(name, "optim.m.", 8) || !strncmp(name, "optim.v.", 8)) name += 8;
    bool known = false;
    for (int i = 0; i < model_ntensors(r->model) && !known; i++) known = !strcmp(model_tensor(r->model, i)->name, name);
    if (!known) {
      diag_plain("%s: tensor '%s' is not part of this model: the checkpoint was written for another model or configuration",
                 path, f.tensors[k].name);
      status = 1;
    }
  }
  const SftTensor *st = sft_find(&f, "optim.step");
  if (!status && (!st || st->numel != 1)) {
    diag_plain("%s: no optim.step", path);
    status = 1;
  }
  if (!status && !(sft_get(st, 0) >= 0 && sft_get(st, 0) <= 1e15)) {
    diag_plain("%s: optim.step is %g, not a step count", path, sft_get(st, 0));
    status = 1;
  }
  if (!status) {
    state_to_device(r);
    r->step = (int64_t)sft_get(st, 0);
    if (with_opt) r->opt->step = r->step;
    const char *el = sft_meta(&f, "elapsed_s");
    r->elapsed0 = el ? atof(el) : 0;
  }
  sft_free(&f);
  return status;
}

int run_checkpoint(Run *r, const char *path) {
  return run_rank0_status(r->rank == 0 ? checkpoint_write(r, path) : 0);
}
