/* cmd_check.c: `cellc check` (the analysis report, human or --json). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pipeline.h"

/* --set names no cell of the module has are errors. */
static bool sets_known(const Module *m, const CellArgs *a) {
  for (int i = 0; i < a->nsets; i++) {
    bool found = false;
    const char *cands[256];
    int nc = 0;
    for (int c = 0; c < m->ncells; c++)
      for (int o = 0; o < m->cells[c]->noptions; o++) {
        if (!strcmp(m->cells[c]->options[o].name, a->sets[i].name)) found = true;
        if (nc < 256) cands[nc++] = m->cells[c]->options[o].name;
      }
    if (!found) {
      const char *near = edit_nearest(a->sets[i].name, cands, nc);
      if (near) diag_plain("--set %s=%s: no cell has an option '%s'; did you mean '%s'?", a->sets[i].name, a->sets[i].value, a->sets[i].name, near);
      else diag_plain("--set %s=%s: no cell has an option '%s'", a->sets[i].name, a->sets[i].value, a->sets[i].name);
      return false;
    }
  }
  return true;
}

/* A param's initializer as written: "chrono(100)", "glorot" (in the arena). */
static const char *init_text(Arena *a, const ParamInfo *p) {
  if (!p->ninit_args) return p->init;
  char buf[512];
  int len = snprintf(buf, sizeof buf, "%s(", p->init);
  for (int i = 0; i < p->ninit_args && len < (int)sizeof buf; i++)
    len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s", i ? ", " : "", expr_text(a, p->init_args[i]));
  if (len < (int)sizeof buf) snprintf(buf + len, sizeof buf - (size_t)len, ")");
  return arena_strdup(a, buf);
}

static Arena text_arena; /* the initializers' text, for the life of the command */

/* A history (prev, conv) is no recurrence: it holds earlier steps of a value */
static const char *rec_name(const StateInfo *s) { return s->hist_lag ? "history" : recurrence_name(s->rec); }
static const char *mode_name(Mode m) { return m == MODE_SCAN ? "scan" : "sequential"; }

static void shape_json(const Cell *c, cJSON *arr, int rank, const int *dim, const int *n) {
  for (int i = 0; i < rank; i++) {
    if (c->bound) cJSON_AddItemToArray(arr, cJSON_CreateNumber(n[i]));
    else {
      char buf[128];
      long v;
      if (dims_is_const(&c->dt, dim[i], &v)) cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)v));
      else {
        cell_dim_text(c, dim[i], buf, (int)sizeof buf);
        cJSON_AddItemToArray(arr, cJSON_CreateString(buf));
      }
    }
  }
}

/* A state's bytes per batch row and token: float32, both parts of a complex one. */
static long state_bytes(const StateInfo *s) { return (long)state_numel(s) * (s->cplx ? 2 : 1) * (long)sizeof(float); }

/* The chunk length of the chunked form: the run's (--set chunk=L), else the default. */
static int form_chunk(int asked) { return asked > 0 ? asked : CHUNK_DEFAULT; }
static const char *decay_name(ChunkDecay d) {
  return d == CHUNK_DECAY_KEY ? "per key" : d == CHUNK_DECAY_SCALAR ? "scalar per head" : "none";
}
static const char *const way_names[3] = {"sequential", "scan", "chunked"};

/* states[].chunked: where the state is a matrix (rank 2 or 3) */
static void chunk_json(const Cell *c, const StateInfo *s, int L, cJSON *j) {
  if (s->hist_lag || s->rank < 2) return;
  const ChunkInfo *ci = &s->chunk;
  cJSON *o = cJSON_AddObjectToObject(j, "chunked");
  cJSON_AddBoolToObject(o, "applies", ci->applies);
  if (ci->applies) cJSON_AddNullToObject(o, "why");
  else cJSON_AddStringToObject(o, "why", ci->why);
  if (ci->applies) cJSON_AddStringToObject(o, "update", ci->delta ? "delta" : "outer");
  else cJSON_AddNullToObject(o, "update");
  if (ci->applies) cJSON_AddStringToObject(o, "decay", ci->decay == CHUNK_DECAY_KEY ? "key" : ci->decay == CHUNK_DECAY_SCALAR ? "scalar" : "none");
  else cJSON_AddNullToObject(o, "decay");
  cJSON_AddNumberToObject(o, "chunk", L);
  if (ci->applies && c->bound) {
    ChunkCost k = chunk_cost(c, s, L);
    cJSON *fl = cJSON_AddObjectToObject(o, "flops_per_token"), *by = cJSON_AddObjectToObject(o, "bytes_per_token");
    for (int w = 0; w < 3; w++)
      if (k.flops[w] < 0) cJSON_AddNullToObject(fl, way_names[w]), cJSON_AddNullToObject(by, way_names[w]);
      else cJSON_AddNumberToObject(fl, way_names[w], k.flops[w]), cJSON_AddNumberToObject(by, way_names[w], k.bytes[w]);
  } else cJSON_AddNullToObject(o, "flops_per_token"), cJSON_AddNullToObject(o, "bytes_per_token");
}

static void chunk_human(const Cell *c, const StateInfo *s, int L, FILE *f) {
  if (s->hist_lag || s->rank < 2) return;
  const ChunkInfo *ci = &s->chunk;
  if (!ci->applies) {
    fprintf(f, "      chunked form does not apply: %s\n", ci->why);
    return;
  }
  fprintf(f, "      chunked form applies (%sdecay %s, chunk %d)\n", ci->delta ? "the delta rule, " : "", decay_name(ci->decay), L);
  if (!c->bound) return;
  ChunkCost k = chunk_cost(c, s, L);
  fprintf(f, "      per token (forward):");
  for (int w = 0; w < 3; w++)
    if (k.flops[w] < 0) fprintf(f, "%s %s n/a", w ? ";" : "", way_names[w]);
    else fprintf(f, "%s %s %.0f flops %.0f bytes", w ? ";" : "", way_names[w], k.flops[w], k.bytes[w]);
  fprintf(f, "\n");
}

/* mem: pipeline_train_memory of a bound cell */
static cJSON *cell_json(const Cell *c, TrainMemory mem, int L) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", c->name);
  cJSON_AddStringToObject(o, "mode", c->chunked ? "chunked" : mode_name(c->mode));
  cJSON *states = cJSON_AddArrayToObject(o, "states");
  for (int i = 0; i < c->nstates; i++) {
    const StateInfo *s = &c->states[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", s->name);
    cJSON_AddStringToObject(j, "recurrence", rec_name(s));
    cJSON_AddStringToObject(j, "class", rec_name(s)); /* language spec section 10's name */
    if (s->hist_lag) {
      cJSON_AddStringToObject(j, "of", s->hist_name);
      cJSON_AddNumberToObject(j, "steps", s->hist_lag);
    }
    shape_json(c, cJSON_AddArrayToObject(j, "shape"), s->rank, s->dim, s->n);
    if (c->bound) cJSON_AddNumberToObject(j, "bytes_per_token", (double)state_bytes(s));
    else cJSON_AddNullToObject(j, "bytes_per_token");
    cJSON_AddBoolToObject(j, "complex", s->cplx);
    chunk_json(c, s, L, j);
    cJSON_AddItemToArray(states, j);
  }
  if (c->bound) {
    cJSON *mj = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(mj, "train_peak_bytes_per_token", (double)mem.per_token);
    cJSON_AddNumberToObject(mj, "chunk", mem.chunk);
    cJSON_AddNumberToObject(mj, "row_bytes", (double)mem.per_row);
    cJSON_AddNumberToObject(mj, "run_bytes", (double)mem.per_run);
    cJSON_AddNumberToObject(mj, "threads", mem.threads);
  } else cJSON_AddNullToObject(o, "memory");
  cJSON *gates = cJSON_AddArrayToObject(o, "gates");
  for (int i = 0; i < c->ngates; i++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", c->gates[i].name);
    cJSON_AddBoolToObject(j, "sees_state", c->gates[i].sees_state);
    cJSON_AddItemToArray(gates, j);
  }
  cJSON *params = cJSON_AddArrayToObject(o, "params");
  for (int i = 0; i < c->nparams; i++) {
    const ParamInfo *p = &c->params[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", p->name);
    shape_json(c, cJSON_AddArrayToObject(j, "shape"), p->rank, p->dim, p->n);
    cJSON_AddBoolToObject(j, "complex", p->cplx);
    cJSON_AddStringToObject(j, "init", p->init);
    if (p->ninit_args) {
      cJSON *args = cJSON_AddArrayToObject(j, "init_args");
      for (int t = 0; t < p->ninit_args; t++) cJSON_AddItemToArray(args, p->init_args[t]->kind == EX_NUM ? cJSON_CreateNumber(p->init_args[t]->num)
                                                                      : cJSON_CreateString(expr_text(&text_arena, p->init_args[t])));
    }
    cJSON *tags = cJSON_AddArrayToObject(j, "tags");
    for (int t = 0; t < p->ntags; t++) cJSON_AddItemToArray(tags, cJSON_CreateString(p->tags[t]));
    /* only where true, as init_args only where there are some */
    if (p->buffer) cJSON_AddBoolToObject(j, "buffer", true);
    if (p->frozen) cJSON_AddBoolToObject(j, "frozen", true);
    cJSON_AddItemToArray(params, j);
  }
  cJSON *dims = cJSON_AddArrayToObject(o, "dims");
  for (int i = 0; i < c->ndims; i++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", c->dims[i].name);
    if (c->dims[i].value >= 0) cJSON_AddNumberToObject(j, "value", (double)c->dims[i].value);
    else cJSON_AddNullToObject(j, "value");
    cJSON_AddBoolToObject(j, "input", c->dims[i].from_input);
    cJSON_AddItemToArray(dims, j);
  }
  cJSON *opts = cJSON_AddArrayToObject(o, "options");
  for (int i = 0; i < c->noptions; i++) {
    cJSON *j = cJSON_CreateObject();
    const OptionInfo *op = &c->options[i];
    cJSON_AddStringToObject(j, "name", op->name);
    cJSON_AddStringToObject(j, "type", op->type == OPT_BOOL ? "bool" : op->type == OPT_INT ? "int" : "real");
    if (op->type == OPT_BOOL) cJSON_AddBoolToObject(j, "value", op->value != 0);
    else cJSON_AddNumberToObject(j, "value", op->value);
    cJSON_AddItemToArray(opts, j);
  }
  return o;
}

static void shape_human(const Cell *c, int rank, const int *dim, const int *n, bool cplx, char *buf, int size) {
  if (c->bound) {
    int len = snprintf(buf, (size_t)size, "[");
    for (int i = 0; i < rank; i++) len += snprintf(buf + len, (size_t)(size - len), i ? ", %d" : "%d", n[i]);
    snprintf(buf + len, (size_t)(size - len), "]%s", cplx ? " complex" : "");
  } else {
    cell_shape_text(c, rank, dim, buf, size);
    if (cplx) strncat(buf, " complex", (size_t)size - strlen(buf) - 1);
  }
}

static void cell_human(const Cell *c, TrainMemory mem, int L, FILE *f) {
  char buf[256];
  fprintf(f, "cell %s: mode %s\n", c->name, c->chunked ? "chunked" : mode_name(c->mode));
  fprintf(f, "  dims:");
  for (int i = 0; i < c->ndims; i++) {
    fprintf(f, " %s", c->dims[i].name);
    if (c->dims[i].value >= 0) fprintf(f, "=%ld", c->dims[i].value);
    if (c->dims[i].from_input) fprintf(f, " (input)");
  }
  fprintf(f, "\n");
  if (c->noptions) {
    fprintf(f, "  options:");
    for (int i = 0; i < c->noptions; i++) {
      const OptionInfo *o = &c->options[i];
      if (o->type == OPT_BOOL) fprintf(f, " %s=%s", o->name, o->value ? "true" : "false");
      else fprintf(f, " %s=%g", o->name, o->value);
    }
    fprintf(f, "\n");
  }
  long total = 0;
  bool counted = c->bound;
  for (int i = 0; i < c->nparams; i++) {
    long e = 1;
    for (int j = 0; j < c->params[i].rank; j++) e *= c->params[i].n[j];
    total += e * (c->params[i].cplx ? 2 : 1);
  }
  int nbuf = 0, nfrozen = 0;
  for (int i = 0; i < c->nparams; i++) nbuf += c->params[i].buffer, nfrozen += c->params[i].frozen;
  if (counted) fprintf(f, "  params: %d (%ld numbers)", c->nparams, total);
  else fprintf(f, "  params: %d", c->nparams);
  if (nbuf || nfrozen) fprintf(f, "; %d buffer%s, %d frozen", nbuf, nbuf == 1 ? "" : "s", nfrozen);
  fprintf(f, "\n");
  for (int i = 0; i < c->nparams; i++) {
    const ParamInfo *p = &c->params[i];
    shape_human(c, p->rank, p->dim, p->n, p->cplx, buf, (int)sizeof buf);
    fprintf(f, "    %-12s %-20s ~ %s", p->name, buf, init_text(&text_arena, p));
    if (p->frozen) fprintf(f, " frozen");
    if (p->buffer) fprintf(f, "  buffer");
    if (p->ntags) {
      fprintf(f, "  tag");
      for (int t = 0; t < p->ntags; t++) fprintf(f, "%s %s", t ? "," : "", p->tags[t]);
    }
    if (counted) {
      long e = 1;
      for (int j = 0; j < p->rank; j++) e *= p->n[j];
      fprintf(f, "  (%ld)", e * (p->cplx ? 2 : 1));
    }
    fprintf(f, "\n");
  }
  fprintf(f, "  states:\n");
  for (int i = 0; i < c->nstates; i++) {
    const StateInfo *s = &c->states[i];
    shape_human(c, s->rank, s->dim, s->n, s->cplx, buf, (int)sizeof buf);
    if (s->hist_lag)
      fprintf(f, "    %-12s %-20s history: the last %d step%s of %s", s->name, buf, s->hist_lag, s->hist_lag == 1 ? "" : "s",
              s->hist_name);
    else fprintf(f, "    %-12s %-20s %s", s->name, buf, rec_name(s));
    if (c->bound) fprintf(f, "  (%ld bytes/token)", state_bytes(s));
    fprintf(f, "\n");
    chunk_human(c, s, L, f);
  }
  if (c->scan_blocker >= 0)
    fprintf(f, "  sequential: every state is diagonal-linear, but the previous value of '%s' is read outside its update\n",
            c->states[c->g.nodes[c->scan_blocker].idx].name);
  if (c->bound) {
    char kept[64] = "states kept at every step";
    if (mem.chunk) snprintf(kept, sizeof kept, "chunks of %d steps", mem.chunk);
    fprintf(f, "  memory: %zu bytes per batch row and token in training (%s), %zu per batch row and %zu per run on the cpu (%d thread%s)\n",
            mem.per_token, kept, mem.per_row, mem.per_run, mem.threads, mem.threads == 1 ? "" : "s");
  }
  if (c->ngates) {
    fprintf(f, "  gates:\n");
    for (int i = 0; i < c->ngates; i++)
      fprintf(f, "    %-12s %s\n", c->gates[i].name, c->gates[i].sees_state ? "sees state" : "does not see state");
  }
}

/* --dump: the chosen cell, checked as `run` checks it (every dim bound), after the pass named. */
static int check_dump(const CellArgs *a, const char *dump) {
  Arena arena = {0};
  Cell *c = cli_compile_cell(&arena, a, false);
  if (c) pipeline_dump(c, dump, stdout);
  if (c) cell_free(c);
  arena_free(&arena);
  return c ? 0 : 1;
}

int cmd_check(int argc, char **argv) {
  CellArgs a = {0};
  bool json = false;
  const char *dump = NULL;
  for (int i = 0; i < argc; i++) {
    int r = cli_cell_arg(&a, argc, argv, &i);
    if (r < 0) return 2;
    if (r) continue;
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--dump")) {
      if (i + 1 == argc) return cli_usage_error("%s needs a value", "--dump");
      dump = argv[++i];
      if (!pipeline_dump_known(dump)) {
        char fmt[160];
        snprintf(fmt, sizeof fmt, "--dump is one of %s, not '%%s'", pipeline_dump_names());
        return cli_usage_error(fmt, dump);
      }
    }
    else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("unknown flag '%s'", argv[i]);
    else if (!a.file) a.file = argv[i];
    else return cli_usage_error("unexpected argument '%s'", argv[i]);
  }
  if (!a.file) return cli_usage_error("%s", "check needs a .cell file");
  if (dump && json) return cli_usage_error("%s", "--dump prints text: it does not go with --json");
  if (dump) return check_dump(&a, dump);
  Arena arena = {0};
  Module *m = check_load(&arena, a.file, cli_stdlib_dir());
  if (!m || !sets_known(m, &a)) {
    arena_free(&arena);
    return 1;
  }
  CheckOptions o = {0};
  o.sets = a.sets;
  o.nsets = a.nsets;
  o.dims = a.dims;
  o.ndims = a.ndims;
  o.force_scan = a.mode && !strcmp(a.mode, "scan");
  o.force_sequential = a.mode && !strcmp(a.mode, "sequential");
  o.force_chunked = a.mode && !strcmp(a.mode, "chunked");
  o.any_dims = true;
  /* every cell is checked before anything is printed: a bad --dims fails first */
  Cell **checked = xcalloc((size_t)m->ncells + 1, sizeof(Cell *));
  int status = 0, nchecked = 0;
  for (int i = 0; i < m->ncells && status == 0; i++) {
    if (!m->in_main[i] && !a.cell) continue; /* --cell may name an imported cell */
    if (a.cell && strcmp(a.cell, m->cells[i]->name)) continue;
    Cell *c = check_cell(&arena, m->srcs[i], m->cells[i], &o);
    if (!c) status = 1;
    else checked[nchecked++] = c;
  }
  if (status == 0 && a.cell && !check_find_cell(m, a.cell, NULL)) {
    const char *cands[256];
    int nc = 0;
    for (int i = 0; i < m->ncells && nc < 256; i++) cands[nc++] = m->cells[i]->name;
    const char *near = edit_nearest(a.cell, cands, nc);
    if (near) diag_plain("no cell named '%s' in %s; did you mean '%s'?", a.cell, a.file, near);
    else diag_plain("no cell named '%s' in %s", a.cell, a.file);
    status = 1;
  }
  if (status == 0 && nchecked == 0) {
    diag_plain("%s defines no cell", a.file);
    status = 1;
  }
  for (int d = 0; d < a.ndims && status == 0; d++) {
    bool used = false;
    const char *cands[256];
    int nc = 0;
    for (int i = 0; i < nchecked; i++)
      for (int j = 0; j < checked[i]->ndims; j++) {
        used = used || !strcmp(a.dims[d].name, checked[i]->dims[j].name);
        if (nc < 256) cands[nc++] = checked[i]->dims[j].name;
      }
    if (!used) {
      const char *near = edit_nearest(a.dims[d].name, cands, nc);
      if (near) diag_plain("--dims %s=%s: no cell has a dim '%s'; did you mean '%s'?", a.dims[d].name, a.dims[d].value, a.dims[d].name, near);
      else diag_plain("--dims %s=%s: no cell has a dim '%s'", a.dims[d].name, a.dims[d].value, a.dims[d].name);
      status = 1;
    }
  }
  cJSON *root = cJSON_CreateObject();
  cJSON *cells = cJSON_AddArrayToObject(root, "cells");
  for (int i = 0; i < nchecked && status == 0; i++) {
    TrainMemory mem = checked[i]->bound ? pipeline_train_memory(checked[i], cli_chunk(&a)) : (TrainMemory){0};
    int L = form_chunk(cli_chunk(&a));
    if (json) cJSON_AddItemToArray(cells, cell_json(checked[i], mem, L));
    else {
      if (i) printf("\n");
      cell_human(checked[i], mem, L, stdout);
    }
  }
  for (int i = 0; i < nchecked; i++) cell_free(checked[i]);
  free(checked);
  if (status == 0 && json) {
    char *text = cJSON_Print(root);
    printf("%s\n", text);
    free(text);
  }
  cJSON_Delete(root);
  arena_free(&arena);
  arena_free(&text_arena);
  return status;
}
