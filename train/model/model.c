/* model.c: the model around the compiled cell (model.h): building it from the configuration,
 * initializing it, and the forward and backward of one batch. */
#include "model.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "init.h"
#include "nn.h"
#include "pipeline.h"

typedef enum { NORM_NONE, NORM_LAYER, NORM_RMS, NORM_BATCH } NormKind;
typedef enum { MIX_NONE, MIX_GLU, MIX_MLP } MixKind;

/* One copy of the cell: its programs for training (gumbel noise sampled) and evaluation, compiled
 * for the CPU back end through the pipeline. */
typedef struct Layer {
  Cell *cell[2]; /* [0] training, [1] evaluation */
  Compiled *exe[2];
  Work *work[2];
  Chunker *chunk[2];              /* per program: its chunks (model.chunk), or NULL: whole sequences */
  ChunkForm *form[2];             /* per program: the cell's chunked form, which then runs it (train.mode, use_form) */
  SeqIO seq[2];
  int in, out;      /* its x size and output size */
  int first;        /* its first tensor in the model */
  float **h0;       /* per state part [B, size]: the initial states */
  float **gh0, **final;
  const float **dfinal; /* zeros */
  float **noise;    /* per noise stream of the training program [T, B, size] */
  /* residual blocks */
  int norm_w, mix_w, bn_mean, bn_var; /* tensor indices, -1 when absent */
  float *mixp[6], *dmixp[6];       /* the mixer's params and gradients: NnGlu's or NnMlp's fields in order */
  float *normed, *nmean, *nrstd; /* norm output [rows, C] and caches */
  float *mixed;                   /* mixer output [rows, C] */
  float *mixcache;
  float *y;                       /* the cell's output [rows, out] */
  float *mask;                    /* dropout mask [rows, C] */
  float *dropped;                 /* dropout output [rows, C] */
  /* a bidirectional layer (model.bidirectional), on the forward direction's Layer: */
  float *xr, *gxr;                /* the input reversed within each length, its gradient [rows, in] */
  float *ycat, *dycat;            /* both directions' outputs [2 rows, out]: forward, then reverse (reversed
                                     time), and their gradients */
  float *joined, *jtmp;           /* the joined output before dropout [rows, C]; scratch [rows, out] */
} Layer;

struct Model {
  Arena arena;
  Device *ops;                    /* where every buffer lives and every block runs (backend.h) */
  const Backend *backend;         /* where the cell layers run: the back end that trains on ops->kind */
  char *source;                   /* the .cell text */
  const char *cell_name, *summary;
  ModelTensor *tensors;
  int ntensors, cap;
  float *store;                   /* values and gradients of every tensor (host) */
  float *dstore;                  /* their working copy on a device (NULL on the host) */
  size_t store_floats;            /* values (= gradients) in the store */
  int T, B, rows;
  int part_first, part_B;         /* this batch is rows [part_first, part_first + B) of part_B (model_set_part) */
  int width, nlayers;
  TaskShape task;
  bool embed;                     /* encoder */
  bool enc_none;                  /* model.encoder = none: encoder.weight the identity, not learned */
  bool head_bias;                 /* model.head_bias: head.bias learned (else 0, not learned) */
  int enc_w, enc_b, head_w, head_b;
  int block;                      /* 0 stack, 1 residual */
  NormKind norm;
  MixKind mix;
  int mix_hidden;
  double dropout;
  int chunk;                      /* model.chunk: chunk_length's `asked` */
  NnReadout readout;
  Layer *layers;
  float **act;                    /* (nlayers + 1) layer inputs [rows, C_k], act[nlayers] the top */
  float *dact[2];                 /* ping-pong gradients of the activations */
  float *dtmp[2];                 /* scratch [rows, maxC] */
  float *scratch;                 /* the mixers' backward scratch */
  float *readout_out, *dreadout, *logits, *dlogits;
  int32_t *targets;               /* cross-entropy targets with the rows mask applied (host) */
  float *on;                      /* MSE: 1 where a row counts (host) */
  int32_t *d_ids, *d_targets;     /* the batch where ops work: tokens, masked targets */
  float *d_x, *d_y, *d_on;        /* real inputs, MSE targets, MSE row flags */
  int maxc;
  uint64_t seed;
  bool fold;                      /* the embedding's gradient folded through layer 0 (model_folds_embedding) */
  SeqFold fold_req;               /* ... layer 0's backward's SeqIO.fold: into the embedding's gradient */
  /* Sequences of their own lengths (TaskShape.lengths) and bidirectional layers: the back ends run
   * the padded batch (a cell is causal: the steps after a sequence's length change none of its
   * earlier outputs), and the model reads each sequence's own steps, keeps the padding out of the
   * loss and gathers the reversed sequences, through index arrays built per batch (lengths_set). */
  bool varlen, bidir, join_sum;
  bool own_readout;               /* readout last or mean per sequence (varlen or bidir) */
  Layer *rev;                     /* (nlayers) the reverse direction's cells, or NULL */
  int *lens;                      /* (B) this batch's lengths (host) */
  int32_t *h_idx;                 /* host scratch of 2 rows */
  float *h_w;                     /* host scratch of rows * C */
  int32_t *d_perm;                /* [rows] row r of the sequences reversed within their lengths: P[r] */
  int32_t *d_cat, *d_catinv;      /* [2 rows] the concat join as a gather of ycat's rows, and its inverse */
  int32_t *d_last;                /* [2 B] the rows readout last reads */
  float *d_wmean;                 /* [rows, C] readout mean's weights: T / length within it, 0 after */
  float *dtop;                    /* [2 rows, out] bidirectional top layer, readout last: dL/d(ycat) */
};

/* ---- tensors ---- */

/* Reserves a tensor; its storage is placed once every tensor is known (model_place). */
static int add_tensor(Model *m, const char *name, int rank, const int64_t *n, bool cplx, bool learned) {
  ModelTensor t = {0};
  t.name = arena_strdup(&m->arena, name);
  t.cplx = cplx;
  t.numel = 1;
  for (int i = 0; i < rank; i++) t.shape[i] = n[i], t.numel *= n[i];
  t.ndim = rank;
  if (cplx) t.shape[t.ndim++] = 2;
  t.learned = learned;
  VEC_PUSH(m->tensors, m->ntensors, m->cap, t);
  return m->ntensors - 1;
}

static void model_place(Model *m) {
  size_t total = 0;
  for (int i = 0; i < m->ntensors; i++) total += (size_t)m->tensors[i].numel * (m->tensors[i].cplx ? 2 : 1);
  m->store = memuse_calloc(sizeof(float) * (2 * total + 1));
  if (!device_is_host(m->ops)) m->dstore = m->ops->alloc(m->ops, sizeof(float) * (2 * total + 1));
  float *v = m->store, *g = m->store + total;
  float *dv = m->dstore ? m->dstore : v, *dg = m->dstore ? m->dstore + total : g;
  for (int i = 0; i < m->ntensors; i++) {
    ModelTensor *t = &m->tensors[i];
    for (int part = 0; part < (t->cplx ? 2 : 1); part++) {
      t->val[part] = v, t->grad[part] = g;
      t->dval[part] = dv, t->dgrad[part] = dg;
      v += t->numel, g += t->numel, dv += t->numel, dg += t->numel;
    }
  }
  m->store_floats = total;
}

/* A buffer where the model's blocks run (zeroed). */
static float *dbuf(Model *m, size_t n) { return m->ops->alloc(m->ops, sizeof(float) * (n ? n : 1)); }
static void dfree(Model *m, void *p) {
  if (p) m->ops->free(m->ops, p);
}

/* PyTorch's default for linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
static void init_uniform(ModelTensor *t, uint64_t seed, int fan_in) {
  Rng r;
  rng_seed(&r, seed, rng_stream_of(t->name));
  double bound = 1.0 / sqrt((double)fan_in);
  for (int64_t i = 0; i < t->numel; i++) t->val[0][i] = (float)((2 * rng_uniform(&r) - 1) * bound);
}

static void init_const(ModelTensor *t, float v) {
  for (int64_t i = 0; i < t->numel; i++) t->val[0][i] = v;
}

/* ---- the configuration's cell-dependent entries ---- */


/* The dims a cell declares (including the one its input introduces), for checking dims.NAME. */
static bool has_name(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return true;
  return false;
}

/* A configuration entry naming what the cell lacks: the located error; -1. */
static int no_such(const Cfg *cfg, const char *key, const char *cell, const char *what, const char *name,
                   const char *const *cands, int nc) {
  char owner[160], msg[512];
  snprintf(owner, sizeof owner, "cell '%s'", cell);
  cfg_error(cfg, key, false, "%s", no_such_text(msg, sizeof msg, owner, what, name, cands, nc));
  return -1;
}

/* The cell's dims for a message: "D (the input's size: model.width) and K". */
static const char *dims_text(char *buf, size_t n, const char *const *dims, int ndims, const char *input_dim) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < ndims && used < n; i++) {
    int w = snprintf(buf + used, n - used, "%s%s%s", i == 0 ? "" : i == ndims - 1 ? " and " : ", ", dims[i],
                     !strcmp(dims[i], input_dim) ? " (the input's size: model.width)" : "");
    if (w < 0) break;
    used += (size_t)w;
  }
  return buf;
}

/* Checks every dotted [model] entry against the cell: options, dims, layers. Params are checked per
 * layer once the cell is bound. */
static int check_entries(const Cfg *cfg, const CellAst *ast, const char **dims, int ndims, const char *input_dim,
                         int nlayers) {
  const CfgEntry *e;
  int n = cfg_entries(cfg, &e);
  for (int i = 0; i < n; i++) {
    if (e[i].layer >= nlayers) {
      cfg_error(cfg, e[i].key, false, "layer %d does not exist: model.layers is %d (layers count from 0)", e[i].layer, nlayers);
      return -1;
    }
    if (e[i].kind == CFG_ENTRY_OPTION) {
      const OptionAst *o = NULL;
      const char *names[64];
      int nn = 0;
      for (int k = 0; k < ast->noptions; k++) {
        if (!strcmp(ast->options[k].name, e[i].name)) o = &ast->options[k];
        if (nn < 64) names[nn++] = ast->options[k].name;
      }
      if (!o) return no_such(cfg, e[i].key, ast->name, "option", e[i].name, names, nn);
      if (o->is_bool != e[i].is_bool) {
        cfg_error(cfg, e[i].key, true, "option '%s' of cell '%s' is %s, not %s", o->name, ast->name, o->is_bool ? "a bool (true or false)" : "a number",
                  e[i].is_bool ? "a bool" : "a number");
        return -1;
      }
      if (o->is_int && e[i].num != floor(e[i].num)) {
        cfg_error(cfg, e[i].key, true, "option '%s' of cell '%s' is an int", o->name, ast->name);
        return -1;
      }
    } else if (e[i].kind == CFG_ENTRY_DIM && !has_name(dims, ndims, e[i].name)) {
      char list[512];
      const char *near = edit_nearest(e[i].name, dims, ndims);
      cfg_error(cfg, e[i].key, false, "cell '%s' has no dim '%s': its dims are %s%s%s%s", ast->name, e[i].name,
                dims_text(list, sizeof list, dims, ndims, input_dim), near ? "; did you mean '" : "", near ? near : "",
                near ? "'?" : "");
      return -1;
    }
  }
  return 0;
}

/* The options of layer k: every all-layer entry, then the layer's own (the last one wins). */
static int layer_options(const Cfg *cfg, int k, Binding *out) {
  const CfgEntry *e;
  int n = cfg_entries(cfg, &e), count = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n && count < 64; i++)
      if (e[i].kind == CFG_ENTRY_OPTION && (pass == 0 ? e[i].layer < 0 : e[i].layer == k))
        out[count++] = (Binding){e[i].name, e[i].text};
  return count;
}

/* The initializer override of a param in layer k: the layer's own entry, else the all-layer one. */
static const CfgEntry *init_override(const Cfg *cfg, int k, const char *param) {
  const CfgEntry *e, *found = NULL;
  int n = cfg_entries(cfg, &e);
  for (int i = 0; i < n; i++)
    if (e[i].kind == CFG_ENTRY_INIT && !strcmp(e[i].name, param)) {
      if (e[i].layer == k) return &e[i];
      if (e[i].layer < 0) found = &e[i];
    }
  return found;
}

/* model.unfreeze: each name a frozen param of the cell, which then trains as any param (in both
 * variants of the layer's cell, before they are compiled: the backward then builds its gradient).
 * Every name is checked before any param changes. -1 after the located error. */
static int apply_unfreeze(const Cfg *cfg, Cell *const *cells, int ncells) {
  const char *list = cfg_word(cfg, "model.unfreeze");
  const Cell *c = cells[0];
  for (int pass = 0; pass < 2; pass++)
    for (const char *p = list; p && *p;) {
      while (*p == ' ' || *p == '\t' || *p == ',') p++;
      const char *end = p;
      while (*end && *end != ',') end++;
      const char *last = end;
      while (last > p && (last[-1] == ' ' || last[-1] == '\t')) last--;
      if (last == p) break;
      char name[128];
      snprintf(name, sizeof name, "%.*s", (int)(last - p), p);
      p = end;
      int found = -1;
      const char *frozen[256];
      int nf = 0;
      for (int i = 0; i < c->nparams; i++) {
        if (!strcmp(c->params[i].name, name)) found = i;
        if (c->params[i].frozen && nf < 256) frozen[nf++] = c->params[i].name;
      }
      if (pass == 1) {
        for (int v = 0; v < ncells; v++) cells[v]->params[found].frozen = false;
        continue;
      }
      if (found >= 0 && c->params[found].frozen) continue;
      char owner[160], msg[512];
      snprintf(owner, sizeof owner, "cell '%s'", c->name);
      if (found >= 0 && c->params[found].buffer)
        cfg_error(cfg, "model.unfreeze", true, "'%s' is a buffer of cell '%s': a buffer is never trained", name, c->name);
      else if (found >= 0)
        cfg_error(cfg, "model.unfreeze", true, "param '%s' of cell '%s' is not frozen: it trains already", name, c->name);
      else
        cfg_error(cfg, "model.unfreeze", true, "%s", no_such_text(msg, sizeof msg, owner, "frozen param", name, frozen, nf));
      return -1;
    }
  return 0;
}

/* ---- building ---- */

/* train.mode = auto: whether a cell runs in its chunked form. Where the form applies (every
 * matrix state has it) and the back end runs it (a float32 one), when check's estimates per token
 * (chunk_cheaper) say it is cheaper than the mode the analysis found: the estimates count flops
 * and bytes, which a GPU's balance weighs much as a core's (docs/language.md). */
static bool use_form(const Model *m, const Cell *c) {
  int st;
  char why[320];
  if (m->backend->dtype != DT_F32 || chunk_mode_blocker(c, &st, why, (int)sizeof why)) return false;
  return chunk_cheaper(c, m->chunk > 0 ? m->chunk : CHUNK_DEFAULT);
}

/* Checks layer k's cell for training and evaluation and compiles both. */
static int build_cell(Model *m, Layer *L, int k, const Cfg *cfg, const Src *src, const CellAst *ast,
                      const char *input_dim, bool has_h) {
  Binding opts[64], dims[66];
  int nopts = layer_options(cfg, k, opts), ndims = 0;
  char *in_text = arena_printf(&m->arena, "%d", L->in);
  dims[ndims++] = (Binding){input_dim, in_text};
  if (has_h && strcmp(input_dim, "H")) dims[ndims++] = (Binding){"H", cfg_text(cfg, "model.hidden")};
  const CfgEntry *e;
  int n = cfg_entries(cfg, &e);
  for (int i = 0; i < n && ndims < 66; i++)
    if (e[i].kind == CFG_ENTRY_DIM) {
      if (!strcmp(e[i].name, input_dim)) {
        cfg_error(cfg, e[i].key, false, "dim '%s' is the size of the cell's input: model.width sets it", e[i].name);
        return -1;
      }
      dims[ndims++] = (Binding){e[i].name, e[i].text};
    }
  const char *mode = cfg_word(cfg, "train.mode");
  for (int v = 0; v < 2; v++) {
    CheckOptions o = {0};
    o.sets = opts, o.nsets = nopts, o.dims = dims, o.ndims = ndims;
    o.need_bound = true;
    o.training = v == 0;
    o.force_scan = !strcmp(mode, "scan");
    o.force_sequential = !strcmp(mode, "sequential");
    o.force_chunked = !strcmp(mode, "chunked");
    L->cell[v] = check_cell(&m->arena, src, ast, &o);
    if (!L->cell[v]) return -1;
    if (!strcmp(mode, "auto")) L->cell[v]->chunked = use_form(m, L->cell[v]);
  }
  if (apply_unfreeze(cfg, L->cell, 2) < 0) return -1;
  Cell *c = L->cell[0];
  if (c->input_size != L->in) {
    diag_error(c->input_loc, "the cell's input has %d channels, but layer %d gets %d", c->input_size, k, L->in);
    return -1;
  }
  L->out = c->output_size;
  for (int v = 0; v < 2; v++) {
    PipelineOptions po = {0};
    po.backend = m->backend, po.training = v == 0;
    char err[512];
    if (L->cell[v]->chunked) { /* the program gives the SeqIO's layout; the form runs it */
      /* on cuda and cuda-emu, whose kernels need not take the whole cell's state per row (a scan of
         heads of 64 x 64 does not fit a block), the interpreter's program: the same layout */
      PipelineOptions lo = po;
      if (m->backend->device != DEVICE_CPU) lo.backend = backend_find("interp");
      if (!(L->exe[v] = pipeline_compile(L->cell[v], &lo, err, sizeof err))) {
        diag_plain("cannot compile layer %d of cell '%s': %s", k, ast->name, err);
        return -1;
      }
      if (v == 1 && L->exe[1] == L->exe[0]) L->form[1] = L->form[0]; /* one form for both, as one work below */
      else if (!(L->form[v] = chunkform_compile(L->cell[v], &po, m->chunk, err, sizeof err))) {
        if (strcmp(mode, "auto")) {
          diag_plain("cannot compile layer %d of cell '%s': %s", k, ast->name, err);
          return -1;
        }
        /* auto: a device whose blocks do not fit the form (model.chunk too long for its shared
           memory) keeps the cell's own mode */
        L->cell[v]->chunked = false;
        if (v == 0) L->cell[1]->chunked = false;
        pipeline_release(L->exe[v]), L->exe[v] = NULL;
      }
      if (L->form[v]) continue;
    }
    L->exe[v] = pipeline_compile(L->cell[v], &po, err, sizeof err);
    if (!L->exe[v]) {
      diag_plain("cannot compile layer %d of cell '%s': %s", k, ast->name, err);
      return -1;
    }
    /* without gumbel noise the two programs are one (the pipeline's cache shares it): one set of
     * work arrays serves both, so evaluation needs no memory beyond training's */
    L->work[v] = v == 1 && L->exe[1] == L->exe[0] ? L->work[0] : m->backend->work_new(L->exe[v]);
    int chunk = chunk_length(L->cell[v], m->chunk);
    L->chunk[v] = v == 1 && L->exe[1] == L->exe[0] ? L->chunk[0] : chunk > 0 ? chunker_new(L->exe[v], chunk) : NULL;
  }
  return 0;
}

/* Adds layer k's cell params as tensors and draws their initial values. */
static int init_cell_params(Model *m, Layer *L, int k, const Cfg *cfg, const char *prefix) {
  Cell *c = L->cell[0];
  L->first = m->ntensors;
  for (int i = 0; i < c->nparams; i++) {
    ParamInfo *pi = &c->params[i];
    int64_t n[MAX_RANK] = {pi->n[0], pi->n[1], pi->n[2]};
    /* a buffer, or a param still frozen: saved and restored with the others, never trained */
    int t = add_tensor(m, arena_printf(&m->arena, "%s.%s", prefix, pi->name), pi->rank, n, pi->cplx,
                       !pi->buffer && !pi->frozen);
    m->tensors[t].tags = pi->tags, m->tensors[t].ntags = pi->ntags;
    m->tensors[t].frozen = pi->frozen;
  }
  /* every init.PARAM entry names a param of this layer's cell */
  const CfgEntry *e;
  int ne = cfg_entries(cfg, &e);
  for (int i = 0; i < ne; i++) {
    if (e[i].kind != CFG_ENTRY_INIT || (e[i].layer >= 0 && e[i].layer != k)) continue;
    const char *names[256];
    int nn = 0;
    bool found = false;
    for (int j = 0; j < c->nparams; j++) {
      found = found || !strcmp(c->params[j].name, e[i].name);
      if (nn < 256) names[nn++] = c->params[j].name;
    }
    if (!found) return no_such(cfg, e[i].key, c->name, "param", e[i].name, names, nn);
  }
  return 0;
}

static int draw_cell_params(Model *m, Layer *L, int k, const Cfg *cfg) {
  Cell *c = L->cell[0];
  double **vals = xcalloc((size_t)c->nparams + 1, sizeof(double *));
  int status = 0;
  for (int i = 0; i < c->nparams && !status; i++) {
    ParamInfo *pi = &c->params[i];
    ModelTensor *t = &m->tensors[L->first + i];
    int parts = pi->cplx ? 2 : 1;
    vals[i] = xcalloc((size_t)(t->numel * parts + 1), sizeof(double));
    InitText it;
    const CfgEntry *ov = init_override(cfg, k, pi->name);
    char err[256];
    int off, len;
    if (ov && init_parse(ov->text, &it, err, sizeof err, &off, &len) < 0) {
      cfg_error(cfg, ov->key, true, "%s", err);
      status = 1;
      break;
    }
    Rng rng;
    rng_seed(&rng, m->seed, rng_stream_of(t->name));
    if (cell_draw_param(c, i, ov ? &it : NULL, (const double *const *)vals, &rng, vals[i], err, sizeof err) < 0) {
      if (ov) cfg_error(cfg, ov->key, true, "cannot initialize param '%s': %s", pi->name, err);
      else diag_error(pi->init_loc, "cannot initialize param '%s': %s", pi->name, err);
      status = 1;
      break;
    }
    for (int64_t j = 0; j < t->numel; j++)
      for (int part = 0; part < parts; part++) t->val[part][j] = (float)vals[i][j * parts + part];
  }
  for (int i = 0; i < c->nparams; i++) free(vals[i]);
  free(vals);
  return status ? -1 : 0;
}

/* The initial states of layer k, broadcast over the batch (learned ones are refreshed per batch). */
static int init_states(Model *m, Layer *L, const char *prefix) {
  Program *p = L->exe[0]->p;
  Cell *c = L->cell[0];
  L->h0 = xcalloc((size_t)p->nsparts + 1, sizeof(float *));
  L->gh0 = xcalloc((size_t)p->nsparts + 1, sizeof(float *));
  L->final = xcalloc((size_t)p->nsparts + 1, sizeof(float *));
  L->dfinal = xcalloc((size_t)p->nsparts + 1, sizeof(float *));
  for (int q = 0; q < p->nsparts; q++) {
    size_t n = (size_t)m->B * (size_t)p->sparts[q].size;
    L->h0[q] = dbuf(m, n), L->gh0[q] = dbuf(m, n), L->final[q] = dbuf(m, n), L->dfinal[q] = dbuf(m, n);
  }
  int status = 0;
  for (int s = 0; s < c->nstates; s++) {
    StateInfo *si = &c->states[s];
    if (!si->init || si->param >= 0) continue;
    int size = state_numel(si), parts = si->cplx ? 2 : 1;
    double *v = xcalloc((size_t)(parts * size + 1), sizeof(double));
    Rng rng;
    char err[256];
    rng_seed(&rng, m->seed, rng_stream_of(arena_printf(&m->arena, "%s.h0.%s", prefix, si->name)));
    if (cell_draw_state(c, s, &rng, v, err, sizeof err) < 0) {
      diag_error(si->init_loc, "cannot initialize state '%s': %s", si->name, err);
      free(v);
      return -1;
    }
    float *h = xcalloc((size_t)size * (size_t)m->B + 1, sizeof(float));
    for (int part = 0; part < parts; part++) {
      for (int b = 0; b < m->B; b++)
        for (int j = 0; j < size; j++) h[(size_t)b * size + j] = (float)v[j * parts + part];
      m->ops->upload(m->ops, L->h0[p->spart_of[s] + part], h, sizeof(float) * (size_t)size * (size_t)m->B);
    }
    free(h), free(v);
  }
  return status;
}

/* Points a layer's two sequences at the model's buffers. */
static void wire_layer(Model *m, Layer *L, int k) {
  size_t rows = (size_t)m->rows;
  L->y = dbuf(m, rows * (size_t)L->out);
  for (int v = 0; v < 2; v++) {
    Program *p = L->exe[v]->p;
    SeqIO *s = &L->seq[v];
    s->T = m->T, s->B = m->B, s->dtype = DT_F32;
    s->params = xcalloc((size_t)p->npparts + 1, sizeof(void *));
    s->grad_params = xcalloc((size_t)p->npparts + 1, sizeof(void *));
    for (int i = 0; i < p->npparts; i++) {
      ModelTensor *t = &m->tensors[L->first + p->pparts[i].param];
      s->params[i] = t->dval[p->pparts[i].part];
      s->grad_params[i] = t->dgrad[p->pparts[i].part];
    }
    s->h0 = (const void **)L->h0, s->final = (void **)L->final, s->dfinal = (const void **)L->dfinal;
    s->grad_h0 = (void **)L->gh0;
    s->y = L->y;
    s->noise = xcalloc((size_t)p->nnoise + 1, sizeof(void *));
    if (v == 0) {
      L->noise = xcalloc((size_t)p->nnoise + 1, sizeof(float *));
      for (int i = 0; i < p->nnoise; i++) s->noise[i] = L->noise[i] = dbuf(m, rows * (size_t)p->noise_sizes[i]);
    }
  }
  (void)k;
}

static void add_block_tensors(Model *m, Layer *L, int k) {
  int C = m->width;
  int64_t c1[1] = {C};
  if (m->norm != NORM_NONE) {
    L->norm_w = add_tensor(m, arena_printf(&m->arena, "layer.%d.norm.weight", k), 1, c1, false, true);
    add_tensor(m, arena_printf(&m->arena, "layer.%d.norm.bias", k), 1, c1, false, true);
    if (m->norm == NORM_BATCH) {
      L->bn_mean = add_tensor(m, arena_printf(&m->arena, "layer.%d.norm.running_mean", k), 1, c1, false, false);
      L->bn_var = add_tensor(m, arena_printf(&m->arena, "layer.%d.norm.running_var", k), 1, c1, false, false);
    }
  }
  if (m->mix != MIX_NONE) {
    int Hm = m->mix_hidden;
    int64_t hc[2] = {Hm, C}, ch[2] = {C, Hm}, h1[1] = {Hm};
    L->mix_w = add_tensor(m, arena_printf(&m->arena, "layer.%d.mixer.w1", k), 2, hc, false, true);
    add_tensor(m, arena_printf(&m->arena, "layer.%d.mixer.b1", k), 1, h1, false, true);
    if (m->mix == MIX_GLU) {
      add_tensor(m, arena_printf(&m->arena, "layer.%d.mixer.w2", k), 2, hc, false, true);
      add_tensor(m, arena_printf(&m->arena, "layer.%d.mixer.b2", k), 1, h1, false, true);
    }
    add_tensor(m, arena_printf(&m->arena, "layer.%d.mixer.%s", k, m->mix == MIX_GLU ? "w3" : "w2"), 2, ch, false, true);
    add_tensor(m, arena_printf(&m->arena, "layer.%d.mixer.%s", k, m->mix == MIX_GLU ? "b3" : "b2"), 1, c1, false, true);
  }
}

static void init_block_tensors(Model *m, Layer *L) {
  size_t rows = (size_t)m->rows;
  int C = m->width;
  if (L->norm_w >= 0) {
    init_const(&m->tensors[L->norm_w], 1.0f);
    init_const(&m->tensors[L->norm_w + 1], 0.0f);
    if (L->bn_var >= 0) init_const(&m->tensors[L->bn_var], 1.0f);
    L->normed = dbuf(m, rows * (size_t)C);
    L->nmean = dbuf(m, rows > (size_t)C ? rows : (size_t)C);
    L->nrstd = dbuf(m, rows > (size_t)C ? rows : (size_t)C);
  }
  if (L->mix_w >= 0) {
    int Hm = m->mix_hidden, w = L->mix_w;
    /* weights and biases alternate: w1 b1 (w2 b2) w3 b3; fan-in C for the first ones, Hm for the last */
    int n = m->mix == MIX_GLU ? 6 : 4;
    for (int i = 0; i < n; i++) init_uniform(&m->tensors[w + i], m->seed, i < n - 2 ? C : Hm);
    for (int i = 0; i < n; i++) L->mixp[i] = m->tensors[w + i].dval[0], L->dmixp[i] = m->tensors[w + i].dgrad[0];
    L->mixcache = dbuf(m, m->mix == MIX_GLU ? nn_glu_cache_size(m->rows, Hm) : nn_mlp_cache_size(m->rows, Hm));
    L->mixed = dbuf(m, rows * (size_t)C);
  }
}

static int choose(const Cfg *cfg, const char *key, const char *const *names, int n) {
  const char *w = cfg_word(cfg, key);
  for (int i = 0; w && i < n; i++)
    if (!strcmp(w, names[i])) return i;
  return 0;
}

/* The model's shape from the configuration: encoder, block, norm, mixer, dropout, readout. 0, or -1
 * after a located error. */
static int configure(Model *m, const Cfg *cfg, const TaskShape *shape) {
  static const char *const blocks[] = {"stack", "residual"};
  static const char *const norms[] = {"none", "layer", "rms", "batch"}, *const mixers[] = {"none", "glu", "mlp"};
  const char *enc = cfg_word(cfg, "model.encoder");
  if (enc && !strcmp(enc, "auto")) enc = NULL;
  m->embed = enc ? !strcmp(enc, "embed") : shape->token_input;
  m->enc_none = enc && !strcmp(enc, "none");
  m->head_bias = cfg_bool(cfg, "model.head_bias");
  if (m->enc_none && !shape->token_input && m->width != shape->in_dim) {
    cfg_error(cfg, "model.encoder", true, "encoder 'none' feeds the task's %d input channels to layer 0 as they are: "
              "set model.width = %d (it is %d)", shape->in_dim, shape->in_dim, m->width);
    return -1;
  }
  if (m->embed != shape->token_input) {
    cfg_error(cfg, "model.encoder", true, "encoder '%s' needs %s inputs, but task '%s' gives %s", enc,
              m->embed ? "token" : "real-valued", cfg_word(cfg, "task.name"), shape->token_input ? "tokens" : "real values");
    return -1;
  }
  m->block = choose(cfg, "model.block", blocks, 2);
  m->norm = (NormKind)choose(cfg, "model.norm", norms, 4);
  m->mix = (MixKind)choose(cfg, "model.mixer", mixers, 3);
  m->mix_hidden = m->mix == MIX_MLP ? 4 * m->width : m->width;
  m->dropout = cfg_real(cfg, "model.dropout");
  m->chunk = (int)cfg_int(cfg, "model.chunk");
  m->varlen = shape->lengths;
  m->bidir = cfg_bool(cfg, "model.bidirectional");
  m->join_sum = !strcmp(cfg_word(cfg, "model.join"), "sum");
  if (m->varlen && m->norm == NORM_BATCH) { /* the only block that mixes rows: its statistics would see the padding */
    cfg_error(cfg, "model.norm", true, "batch norm's statistics would include the padding of task '%s', whose sequences "
              "have lengths: use layer or rms", cfg_word(cfg, "task.name"));
    return -1;
  }
  if (m->bidir && m->block) {
    cfg_error(cfg, "model.bidirectional", true, "bidirectional layers are stacked: set model.block = stack");
    return -1;
  }
  if (!m->block && (m->norm != NORM_NONE || m->mix != MIX_NONE)) {
    cfg_error(cfg, m->norm != NORM_NONE ? "model.norm" : "model.mixer", true, "norms and mixers belong to residual blocks: set model.block = residual");
    return -1;
  }
  NnReadout task_readout = shape->readout == TASK_READ_ALL ? NN_READOUT_ALL : shape->readout == TASK_READ_LAST ? NN_READOUT_LAST : NN_READOUT_MEAN;
  m->readout = task_readout;
  const char *ro = cfg_word(cfg, "model.readout");
  if (ro && strcmp(ro, "auto")) {
    nn_readout_from_name(ro, &m->readout);
    if ((m->readout == NN_READOUT_ALL) != (task_readout == NN_READOUT_ALL)) {
      cfg_error(cfg, "model.readout", true, "task '%s' has %s targets: readout %s", cfg_word(cfg, "task.name"),
                task_readout == NN_READOUT_ALL ? "per-step" : "per-sequence", task_readout == NN_READOUT_ALL ? "must be 'all'" : "must be 'last' or 'mean'");
      return -1;
    }
  }
  m->own_readout = m->readout != NN_READOUT_ALL && (m->varlen || m->bidir);
  return 0;
}

/* The cell's dims against the configuration: its input dim (*input_dim) and whether it has an H.
 * 0, or -1 after a located error. */
static int cell_dims(Model *m, const Cfg *cfg, const char *cell_file, const CellAst *ast, const char **input_dim, bool *has_h) {
  const char *dims[64];
  int ndims = 0;
  DeclaredDim dd[64];
  int ndd = check_declared_dims(ast, dd, 64);
  *input_dim = NULL;
  for (int d = 0; d < ndd; d++) {
    dims[ndims++] = dd[d].name;
    if (dd[d].is_input) *input_dim = dd[d].name;
  }
  if (!*input_dim) {
    diag_plain("%s: cell '%s' must take its input as `input NAME[DIM]` with a named dim to be trained", cell_file, ast->name);
    return -1;
  }
  if (check_entries(cfg, ast, dims, ndims, *input_dim, m->nlayers) < 0) return -1;
  *has_h = has_name(dims, ndims, "H");
  /* only a value the user gave: the default 128 stands for the many cells with an H, not for this one */
  if (!*has_h && cfg_is_set(cfg, "model.hidden")) {
    char list[512];
    cfg_error(cfg, "model.hidden", false, "cell '%s' has no dim H for model.hidden to bind: its dims are %s (model.dims.NAME binds a dim)",
              ast->name, dims_text(list, sizeof list, dims, ndims, *input_dim));
    return -1;
  }
  if (!strcmp(*input_dim, "H") && cfg_is_set(cfg, "model.hidden") && cfg_int(cfg, "model.hidden") != m->width) {
    cfg_error(cfg, "model.hidden", true, "cell '%s' takes an input of size H: model.hidden must equal model.width (%d)", ast->name, m->width);
    return -1;
  }
  return 0;
}

/* On a device, before anything is allocated there: whether it has the memory for the params, their
 * gradients and the activations of a batch (a lower bound of what the run needs: the optimizer's
 * moments and the cell layers' work arrays come on top, and fail the same way when they do not
 * fit). Prints the amounts when not. */
static bool fits_device(Model *m) {
  if (!!device_is_host(m->ops)) return true;
  double floats = 0;
  for (int i = 0; i < m->ntensors; i++) floats += 2.0 * (double)m->tensors[i].numel * (m->tensors[i].cplx ? 2 : 1);
  floats += (double)m->rows * (double)m->maxc * (m->nlayers + 5);
  double need = 4 * floats;
  size_t have = m->ops->mem_free_bytes(m->ops);
  if (need <= (double)have) return true;
  diag_plain("train.device = %s: not enough device memory: the model needs at least %.0f bytes (%.2f GiB: params, "
             "gradients and the activations of a batch), the device has %zu bytes (%.2f GiB) free", m->ops->name, need,
             need / 1073741824.0, have, (double)have / 1073741824.0);
  return false;
}

/* The channels a stacked layer hands on: its cell's output, both directions' side by side for a
 * bidirectional layer joined by concat. */
static int layer_width(const Model *m, const Layer *L) { return m->bidir && !m->join_sum ? 2 * L->out : L->out; }

/* The buffers of lengths and bidirectional layers (C: the width the head reads). */
static void alloc_lengths(Model *m, int C) {
  size_t rows = (size_t)m->rows;
  m->lens = xcalloc((size_t)m->B, sizeof(int));
  if (!m->varlen && !m->bidir) return;
  m->h_idx = xcalloc(2 * rows + 2 * (size_t)m->B, sizeof(int32_t));
  m->d_last = m->ops->alloc(m->ops, sizeof(int32_t) * 2 * (size_t)m->B);
  if (m->readout == NN_READOUT_MEAN) {
    m->h_w = xcalloc(rows * (size_t)C + 1, sizeof(float));
    m->d_wmean = dbuf(m, rows * (size_t)C);
  }
  if (!m->bidir) return;
  m->d_perm = m->ops->alloc(m->ops, sizeof(int32_t) * rows);
  m->d_cat = m->ops->alloc(m->ops, sizeof(int32_t) * 2 * rows);
  m->d_catinv = m->ops->alloc(m->ops, sizeof(int32_t) * 2 * rows);
  for (int k = 0; k < m->nlayers; k++) {
    Layer *L = &m->layers[k];
    size_t in = (size_t)L->in, out = (size_t)L->out;
    L->xr = dbuf(m, rows * in), L->gxr = dbuf(m, rows * in);
    L->ycat = dbuf(m, 2 * rows * out), L->dycat = dbuf(m, 2 * rows * out);
    L->joined = dbuf(m, rows * (size_t)layer_width(m, L)), L->jtmp = dbuf(m, rows * out);
  }
  if (m->readout == NN_READOUT_LAST) m->dtop = dbuf(m, 2 * rows * (size_t)m->layers[m->nlayers - 1].out);
}

/* Encoder, layers (each cell checked and compiled), head: the tensors and their places. Returns the
 * width the head reads, or -1 after an error (-3: not enough device memory). */
static int build(Model *m, const Cfg *cfg, const TaskShape *shape, const Src *src, const CellAst *ast, const char *input_dim,
                 bool has_h) {
  int64_t s2[2];
  if (m->embed) {
    s2[0] = shape->vocab, s2[1] = m->width;
    m->enc_w = add_tensor(m, "embed.weight", 2, s2, false, true);
  } else {
    s2[0] = m->width, s2[1] = shape->in_dim;
    /* encoder none: the identity and a zero bias, kept as buffers, so that layer 0 reads x itself
     * (1 x + 0 is x exactly) through the one code path of every back end */
    m->enc_w = add_tensor(m, "encoder.weight", 2, s2, false, !m->enc_none);
    m->enc_b = add_tensor(m, "encoder.bias", 1, s2, false, !m->enc_none);
  }
  m->layers = xcalloc((size_t)m->nlayers, sizeof(Layer));
  if (m->bidir) m->rev = xcalloc((size_t)m->nlayers, sizeof(Layer));
  int C = m->width;
  m->maxc = C;
  for (int k = 0; k < m->nlayers; k++) {
    Layer *L = &m->layers[k];
    L->norm_w = L->mix_w = L->bn_mean = L->bn_var = -1;
    L->in = C;
    if (build_cell(m, L, k, cfg, src, ast, input_dim, has_h) < 0) return -1;
    if (m->block && L->out != m->width) {
      diag_plain("residual blocks add the cell's output to its input: cell '%s' outputs %d values per step, model.width is %d",
                 ast->name, L->out, m->width);
      return -1;
    }
    if (init_cell_params(m, L, k, cfg, arena_printf(&m->arena, "layer.%d", k)) < 0) return -1;
    if (m->block) add_block_tensors(m, L, k);
    if (m->bidir) { /* the reverse direction: the same cell, its own params */
      Layer *R = &m->rev[k];
      R->norm_w = R->mix_w = R->bn_mean = R->bn_var = -1;
      R->in = C;
      if (build_cell(m, R, k, cfg, src, ast, input_dim, has_h) < 0 ||
          init_cell_params(m, R, k, cfg, arena_printf(&m->arena, "layer.%d.reverse", k)) < 0)
        return -1;
    }
    if (!m->block) C = layer_width(m, L);
    if (C > m->maxc) m->maxc = C;
    if (L->out > m->maxc) m->maxc = L->out;
  }
  s2[0] = shape->out_dim, s2[1] = C;
  m->head_w = add_tensor(m, "head.weight", 2, s2, false, true);
  m->head_b = add_tensor(m, "head.bias", 1, s2, false, m->head_bias); /* head_bias false: 0, a buffer */
  if (!fits_device(m)) return -3;
  model_place(m);
  return C;
}

/* Every tensor's initial value from the seed; the layers wired to their buffers. 0 or -1. */
static int draw_initial(Model *m, const Cfg *cfg, const TaskShape *shape, int C) {
  if (m->embed) {
    Rng r;
    ModelTensor *t = &m->tensors[m->enc_w];
    rng_seed(&r, m->seed, rng_stream_of(t->name));
    for (int64_t i = 0; i < t->numel; i++) t->val[0][i] = (float)rng_normal(&r);
  } else if (m->enc_none) {
    ModelTensor *w = &m->tensors[m->enc_w];
    for (int64_t i = 0; i < w->numel; i++) w->val[0][i] = i / shape->in_dim == i % shape->in_dim ? 1.0f : 0.0f;
    memset(m->tensors[m->enc_b].val[0], 0, sizeof(float) * (size_t)m->tensors[m->enc_b].numel);
  } else {
    init_uniform(&m->tensors[m->enc_w], m->seed, shape->in_dim);
    init_uniform(&m->tensors[m->enc_b], m->seed, shape->in_dim);
  }
  for (int k = 0; k < m->nlayers; k++) {
    Layer *L = &m->layers[k];
    if (draw_cell_params(m, L, k, cfg) < 0 || init_states(m, L, arena_printf(&m->arena, "layer.%d", k)) < 0) return -1;
    wire_layer(m, L, k);
    if (m->bidir) {
      Layer *R = &m->rev[k];
      if (draw_cell_params(m, R, k, cfg) < 0 || init_states(m, R, arena_printf(&m->arena, "layer.%d.reverse", k)) < 0)
        return -1;
      wire_layer(m, R, k);
    }
    if (m->block) init_block_tensors(m, L);
  }
  init_uniform(&m->tensors[m->head_w], m->seed, C);
  if (m->head_bias) init_uniform(&m->tensors[m->head_b], m->seed, C);
  else memset(m->tensors[m->head_b].val[0], 0, sizeof(float) * (size_t)m->tensors[m->head_b].numel);
  return 0;
}

/* The activations, their gradients and the scratch of one batch. */
static void alloc_activations(Model *m, const TaskShape *shape, int C) {
  size_t rows = (size_t)m->rows;
  m->act = xcalloc((size_t)m->nlayers + 1, sizeof(float *));
  m->act[0] = dbuf(m, rows * (size_t)m->width);
  for (int k = 0; k < m->nlayers; k++) {
    Layer *L = &m->layers[k];
    int Ck = m->block ? m->width : layer_width(m, L);
    m->act[k + 1] = dbuf(m, rows * (size_t)Ck);
    if (m->dropout > 0) L->mask = dbuf(m, rows * (size_t)Ck), L->dropped = dbuf(m, rows * (size_t)Ck);
  }
  for (int i = 0; i < 2; i++) m->dact[i] = dbuf(m, rows * (size_t)m->maxc), m->dtmp[i] = dbuf(m, rows * (size_t)m->maxc);
  size_t sc = m->mix == MIX_GLU ? nn_glu_scratch_size(m->rows, m->mix_hidden) : m->mix == MIX_MLP ? nn_mlp_scratch_size(m->rows, m->mix_hidden) : 0;
  if (m->norm == NORM_BATCH && sc < 2 * (size_t)m->width) sc = 2 * (size_t)m->width;
  m->scratch = dbuf(m, sc);
  int R = nn_readout_rows(m->readout, m->T, m->B);
  m->readout_out = dbuf(m, (size_t)R * (size_t)C);
  m->dreadout = dbuf(m, (size_t)R * (size_t)C);
  m->logits = dbuf(m, (size_t)R * (size_t)shape->out_dim);
  m->dlogits = dbuf(m, (size_t)R * (size_t)shape->out_dim);
  m->targets = xcalloc((size_t)R + 1, sizeof(int32_t));
  m->on = xcalloc((size_t)R + 1, sizeof(float));
  int in = m->embed ? 1 : shape->in_dim;
  if (m->embed) m->d_ids = m->ops->alloc(m->ops, sizeof(int32_t) * rows + 1);
  else m->d_x = dbuf(m, rows * (size_t)in);
  m->d_targets = m->ops->alloc(m->ops, sizeof(int32_t) * (size_t)R + 1);
  m->d_y = dbuf(m, (size_t)R * (size_t)shape->out_dim);
  m->d_on = dbuf(m, (size_t)R);
  alloc_lengths(m, C);
}

/* The embedding's gradient through layer 0, folded: where the embedding feeds layer 0 directly (stacked
 * layers), the gradient of token v's row is the sum of layer 0's input gradient's rows of that
 * token, and a back end that folds (Backend.folds: the cpu, where the input gradient is one product
 * G M) computes those sums in layer 0's backward (SeqIO.fold) with one product row per token
 * instead of per row. Taken where the vocabulary is at most half the rows, unless the tuning says
 * no (CELLC_EMBED_FOLD=0, for comparisons). The same gradient as the input gradient summed by
 * token, summed in another order. */
static void plan_embedding_fold(Model *m) {
  if (!m->embed || m->block || m->bidir || m->nlayers < 1 || tuning()->no_embed_fold) return;
  if (2 * (int64_t)m->task.vocab > (int64_t)m->rows) return;
  if (m->layers[0].form[0]) return; /* the chunked form writes the input gradient itself */
  m->fold = m->backend->folds && m->backend->folds(m->layers[0].exe[0]);
}

bool model_folds_embedding(const Model *m) { return m->fold; }

/* model_new: the cell found -> the model's shape -> dims against the configuration -> tensors
 * (cells compiled) -> initial values -> activations. */
Model *model_new(const Cfg *cfg, const char *cell_file, const char *stdlib_dir, const TaskShape *shape, int batch,
                 uint64_t seed) {
  int status;
  return model_new_on(cfg, cell_file, stdlib_dir, shape, batch, seed, device_host(), &status);
}

Model *model_new_on(const Cfg *cfg, const char *cell_file, const char *stdlib_dir, const TaskShape *shape, int batch,
                    uint64_t seed, Device *dev, int *status) {
  Model *m = xcalloc(1, sizeof *m);
  *status = 1;
  m->ops = dev;
  m->seed = seed;
  m->task = *shape;
  m->T = shape->length, m->B = batch, m->rows = m->T * m->B;
  m->part_first = 0, m->part_B = batch;
  m->width = (int)cfg_int(cfg, "model.width");
  m->nlayers = (int)cfg_int(cfg, "model.layers");
  m->enc_w = m->enc_b = -1;
  m->backend = backend_on_device(dev->kind);
  Module *mod = check_load(&m->arena, cell_file, stdlib_dir);
  if (!mod) return model_free(m), NULL;
  const Src *src = NULL;
  const char *want = cfg_word(cfg, "model.cell");
  const CellAst *ast = check_find_cell(mod, want, &src);
  if (!ast) {
    if (want) cfg_error(cfg, "model.cell", true, "%s has no cell named '%s'", cell_file, want);
    else diag_plain("%s defines no cell", cell_file);
    return model_free(m), NULL;
  }
  m->cell_name = ast->name;
  m->source = xstrdup(src->text);
  const char *input_dim;
  bool has_h;
  int C = -1;
  if (configure(m, cfg, shape) < 0 || cell_dims(m, cfg, cell_file, ast, &input_dim, &has_h) < 0 ||
      (C = build(m, cfg, shape, src, ast, input_dim, has_h)) < 0 || draw_initial(m, cfg, shape, C) < 0) {
    if (C == -3) *status = 3;
    return model_free(m), NULL;
  }
  alloc_activations(m, shape, C);
  plan_embedding_fold(m);
  model_to_device(m);
  *status = 0;
  Cell *c0 = m->layers[0].cell[0];
  m->summary = arena_printf(&m->arena, "cell %s (%s), %d %s layer%s, width %d, %lld params", ast->name,
                            c0->chunked ? "chunked" : c0->mode == MODE_SCAN ? "scan" : "sequential", m->nlayers, m->block ? "residual" : "stacked",
                            m->nlayers == 1 ? "" : "s", m->width, (long long)model_nparams(m));
  return m;
}

static void layer_free(Model *m, Layer *L) {
  {
    int nsp = L->exe[0] ? L->exe[0]->p->nsparts : 0, nno = L->exe[0] ? L->exe[0]->p->nnoise : 0;
    for (int v = 0; v < 2; v++) {
      if (L->work[v] && (v == 0 || L->work[1] != L->work[0])) m->backend->work_free(L->work[v]);
      if (v == 0 || L->chunk[1] != L->chunk[0]) chunker_free(L->chunk[v]);
      if (v == 0 || L->form[1] != L->form[0]) chunkform_free(L->form[v]);
      pipeline_release(L->exe[v]);
      free(L->seq[v].params), free(L->seq[v].grad_params), free(L->seq[v].noise);
      if (L->cell[v]) cell_free(L->cell[v]);
    }
    for (int q = 0; L->h0 && q < nsp; q++) dfree(m, L->h0[q]), dfree(m, L->gh0[q]), dfree(m, L->final[q]), dfree(m, (void *)L->dfinal[q]);
    for (int q = 0; L->noise && q < nno; q++) dfree(m, L->noise[q]);
    free(L->h0), free(L->gh0), free(L->final), free(L->dfinal), free(L->noise);
    dfree(m, L->normed), dfree(m, L->nmean), dfree(m, L->nrstd), dfree(m, L->mixed), dfree(m, L->mixcache), dfree(m, L->y);
    dfree(m, L->mask), dfree(m, L->dropped);
    dfree(m, L->xr), dfree(m, L->gxr), dfree(m, L->ycat), dfree(m, L->dycat), dfree(m, L->joined), dfree(m, L->jtmp);
  }
}

void model_free(Model *m) {
  if (!m) return;
  for (int k = 0; m->layers && k < m->nlayers; k++) layer_free(m, &m->layers[k]);
  for (int k = 0; m->rev && k < m->nlayers; k++) layer_free(m, &m->rev[k]);
  free(m->rev), free(m->lens), free(m->h_idx), free(m->h_w);
  dfree(m, m->d_perm), dfree(m, m->d_cat), dfree(m, m->d_catinv), dfree(m, m->d_last), dfree(m, m->d_wmean), dfree(m, m->dtop);
  for (int k = 0; m->act && k <= m->nlayers; k++) dfree(m, m->act[k]);
  free(m->act);
  for (int i = 0; i < 2; i++) dfree(m, m->dact[i]), dfree(m, m->dtmp[i]);
  dfree(m, m->scratch), dfree(m, m->readout_out), dfree(m, m->dreadout), dfree(m, m->logits), dfree(m, m->dlogits);
  dfree(m, m->d_ids), dfree(m, m->d_targets), dfree(m, m->d_x), dfree(m, m->d_y), dfree(m, m->d_on), dfree(m, m->dstore);
  free(m->targets), free(m->on);
  free(m->layers), free(m->tensors), memuse_free(m->store), free(m->source);
  arena_free(&m->arena);
  free(m);
}

int model_ntensors(const Model *m) { return m->ntensors; }
ModelTensor *model_tensor(Model *m, int i) { return &m->tensors[i]; }
const char *model_cell_name(const Model *m) { return m->cell_name; }
const char *model_cell_source(const Model *m) { return m->source; }
const char *model_summary(const Model *m) { return m->summary; }
int model_nlayers(const Model *m) { return m->nlayers; }
const struct Cell *model_layer_cell(const Model *m, int k) { return m->layers[k].cell[0]; }

void model_layer_view(const Model *m, int k, ModelLayerView *v) {
  const Layer *L = &m->layers[k];
  v->cell = L->cell[1];
  v->first = L->first;
  v->in = L->in, v->out = L->out;
  v->x = L->seq[0].x ? L->seq[0].x : L->seq[1].x;
  v->dy = L->seq[0].dy;
  v->h0 = L->h0;
}

int64_t model_nparams(const Model *m) {
  int64_t n = 0;
  for (int i = 0; i < m->ntensors; i++)
    if (m->tensors[i].learned) n += m->tensors[i].numel * (m->tensors[i].cplx ? 2 : 1);
  return n;
}

/* ---- one batch ---- */

void model_set_part(Model *m, int first, int global_batch) {
  CHECK(first >= 0 && first + m->B <= global_batch);
  m->part_first = first, m->part_B = global_batch;
}

/* The counters of a per-step draw of `per_row` values per row ([T, B, per_row]) for this model's
 * part of the global batch (model_set_part): its slice of the one-process run's values. */
static DrawSlice draw_slice(const Model *m, size_t per_row) {
  return (DrawSlice){(uint64_t)m->B * per_row, (uint64_t)m->part_B * per_row, (uint64_t)m->part_first * per_row};
}

static void per_batch_draws(Model *m, Layer *L, int k, int64_t step) {
  Program *p = L->exe[0]->p;
  for (int i = 0; i < p->nnoise; i++) {
    uint64_t key = rng_key(m->seed, (uint64_t)step, rng_stream_of("noise") + (uint64_t)(k * 64 + i));
    m->ops->uniform_open(m->ops, L->noise[i], (size_t)m->rows * (size_t)p->noise_sizes[i], key,
                         draw_slice(m, (size_t)p->noise_sizes[i]));
  }
}

/* A learned initial state: its param, broadcast over the batch. */
static void learned_states(Model *m, Layer *L, bool backward) {
  Cell *c = L->cell[0];
  Program *p = L->exe[0]->p;
  for (int s = 0; s < c->nstates; s++) {
    StateInfo *si = &c->states[s];
    if (si->param < 0) continue;
    ModelTensor *t = &m->tensors[L->first + si->param];
    for (int part = 0; part < (si->cplx ? 2 : 1); part++) {
      int q = p->spart_of[s] + part, size = p->sparts[q].size;
      if (backward) m->ops->colsum_add(m->ops, t->dgrad[part], L->gh0[q], m->B, size);
      else m->ops->bcast_rows(m->ops, L->h0[q], t->dval[part], m->B, size);
    }
  }
}

static void norm_forward(Model *m, Layer *L, const float *x, bool training) {
  int C = m->width;
  Device *o = m->ops;
  const float *w = m->tensors[L->norm_w].dval[0], *b = m->tensors[L->norm_w + 1].dval[0];
  if (m->norm != NORM_BATCH) o->norm_fwd(o, L->normed, m->norm == NORM_LAYER ? L->nmean : NULL, L->nrstd, x, w, b, m->rows, C);
  else
    o->batchnorm_fwd(o, L->normed, L->nmean, L->nrstd, m->tensors[L->bn_mean].dval[0], m->tensors[L->bn_var].dval[0], x, w, b,
                     m->rows, C, training);
}

static void norm_backward(Model *m, Layer *L, float *dx, const float *dout, const float *x) {
  int C = m->width;
  const float *w = m->tensors[L->norm_w].dval[0];
  float *dw = m->tensors[L->norm_w].dgrad[0], *db = m->tensors[L->norm_w + 1].dgrad[0];
  Device *o = m->ops;
  if (m->norm != NORM_BATCH) o->norm_bwd(o, dx, dw, db, dout, x, w, m->norm == NORM_LAYER ? L->nmean : NULL, L->nrstd, m->rows, C);
  else o->batchnorm_bwd(o, dx, dw, db, m->scratch, dout, x, w, L->nmean, L->nrstd, m->rows, C, true);
}

/* ---- lengths and bidirectional layers ---- */

/* This batch's lengths (all T without them) and the index arrays built from them: the reversal
 * within each length P (an involution: P[t B + b] = (len_b - 1 - t) B + b for t < len_b, the row
 * itself after), the concat join as a gather of ycat's 2 rows rows, its inverse, the rows readout
 * last reads and readout mean's weights. */
static void lengths_set(Model *m, const TaskBatch *b) {
  int T = m->T, B = m->B, rows = m->rows;
  for (int j = 0; j < B; j++) {
    m->lens[j] = m->varlen && b->lengths ? b->lengths[j] : T;
    CHECK(m->lens[j] >= 1 && m->lens[j] <= T);
  }
  if (!m->varlen && !m->bidir) return;
  Device *o = m->ops;
  int32_t *h = m->h_idx;
  if (m->bidir) {
    for (int r = 0; r < rows; r++) {
      int t = r / B, j = r % B, len = m->lens[j];
      h[r] = t < len ? (len - 1 - t) * B + j : r;
    }
    o->upload(o, m->d_perm, h, sizeof(int32_t) * (size_t)rows);
    int32_t *cat = xmalloc(sizeof(int32_t) * 2 * (size_t)rows);
    for (int r = 0; r < rows; r++) cat[2 * r] = r, cat[2 * r + 1] = rows + h[r];
    o->upload(o, m->d_cat, cat, sizeof(int32_t) * 2 * (size_t)rows);
    for (int i = 0; i < 2 * rows; i++) h[cat[i]] = i;
    o->upload(o, m->d_catinv, h, sizeof(int32_t) * 2 * (size_t)rows);
    free(cat);
  }
  if (m->readout == NN_READOUT_LAST) {
    /* the head reads act[L] at each sequence's last step; a bidirectional top layer: its forward
     * direction's last step and its reverse direction's output at step 0 (the reverse cell's last
     * step, row (len - 1) B + b of ycat's second half), concatenated or summed */
    for (int j = 0; j < B; j++) {
      int last = (m->lens[j] - 1) * B + j;
      if (!m->bidir) h[j] = last;
      else if (!m->join_sum) h[2 * j] = last, h[2 * j + 1] = rows + last;
      else h[j] = last, h[B + j] = rows + last;
    }
    o->upload(o, m->d_last, h, sizeof(int32_t) * (size_t)(m->bidir ? 2 * B : B));
  }
  if (m->readout == NN_READOUT_MEAN) {
    int L = m->nlayers - 1, C = m->block ? m->width : layer_width(m, &m->layers[L]);
    for (int r = 0; r < rows; r++) {
      int t = r / B, len = m->lens[r % B];
      float w = t < len ? (float)T / (float)len : 0.0f;
      for (int c = 0; c < C; c++) m->h_w[(size_t)r * C + c] = w;
    }
    o->upload(o, m->d_wmean, m->h_w, sizeof(float) * (size_t)rows * (size_t)C);
  }
}

/* Readout last or mean over each sequence's own steps (lengths_set's arrays): act[L] -> readout_out. */
static void own_readout_fwd(Model *m, int C) {
  Device *o = m->ops;
  size_t rows = (size_t)m->rows;
  const float *top = m->act[m->nlayers];
  if (m->readout == NN_READOUT_MEAN) { /* the mean over T of act * T / length */
    float *tmp = m->dtmp[0];
    o->zero(o, tmp, sizeof(float) * rows * (size_t)C);
    o->dropout_bwd(o, tmp, top, m->d_wmean, rows * (size_t)C);
    o->readout_fwd(o, NN_READOUT_MEAN, m->readout_out, tmp, m->T, m->B, C);
  } else if (!m->bidir) {
    o->embed_fwd(o, m->readout_out, m->d_last, top, m->B, m->rows, C);
  } else {
    Layer *L = &m->layers[m->nlayers - 1];
    int out = L->out;
    if (!m->join_sum) o->embed_fwd(o, m->readout_out, m->d_last, L->ycat, 2 * m->B, 2 * m->rows, out);
    else { /* dycat is free in the forward, and large enough for any T */
      o->embed_fwd(o, L->dycat, m->d_last, L->ycat, 2 * m->B, 2 * m->rows, out);
      o->add(o, m->readout_out, L->dycat, L->dycat + (size_t)m->B * out, (size_t)m->B * out);
    }
  }
}

/* Its backward: dreadout -> dcur (zeroed; [rows, C]), or for a bidirectional top layer read out
 * last, -> dtop (dL/d(ycat)), which the layer's backward adds. */
static void own_readout_bwd(Model *m, float *dcur, int C) {
  Device *o = m->ops;
  size_t rows = (size_t)m->rows;
  if (m->readout == NN_READOUT_MEAN) {
    float *tmp = m->dtmp[0];
    o->zero(o, tmp, sizeof(float) * rows * (size_t)C);
    o->readout_bwd(o, NN_READOUT_MEAN, tmp, m->dreadout, m->T, m->B, C);
    o->dropout_bwd(o, dcur, tmp, m->d_wmean, rows * (size_t)C);
  } else if (!m->bidir) {
    o->embed_bwd(o, dcur, m->dreadout, m->d_last, m->B, m->rows, C);
  } else {
    int out = m->layers[m->nlayers - 1].out;
    size_t bo = (size_t)m->B * out;
    o->zero(o, m->dtop, sizeof(float) * 2 * rows * (size_t)out);
    const float *d = m->dreadout;
    float *two = m->layers[m->nlayers - 1].dycat; /* free until the top layer's backward */
    if (m->join_sum) { /* both halves take the sum's gradient */
      o->copy(o, two, m->dreadout, sizeof(float) * bo);
      o->copy(o, two + bo, m->dreadout, sizeof(float) * bo);
      d = two;
    }
    o->embed_bwd(o, m->dtop, d, m->d_last, 2 * m->B, 2 * m->rows, out);
  }
}

/* A layer's cell over its sequence: its chunked form, else the back end (in chunks) */
static void cell_forward(Layer *L, int v, const SeqIO *s) {
  if (L->form[v]) chunkform_forward_lengths(L->form[v], L->exe[v]->p, s);
  else chunked_forward(L->exe[v], L->work[v], s, L->chunk[v]);
}

static void cell_backward(Layer *L, const SeqIO *s) {
  if (L->form[0]) chunkform_backward_lengths(L->form[0], L->exe[0]->p, s);
  else chunked_backward(L->exe[0], L->work[0], s, L->chunk[0]);
}

/* A bidirectional layer (stacked): the forward cell over act[k], the reverse cell over act[k]
 * reversed within each length (a gather by P), its output reversed back, the two joined. */
static void bidir_forward(Model *m, int k, bool training, int64_t step) {
  Layer *L = &m->layers[k], *R = &m->rev[k];
  Device *o = m->ops;
  int v = training ? 0 : 1, C = layer_width(m, L), out = L->out;
  size_t rows = (size_t)m->rows;
  if (training) per_batch_draws(m, L, k, step), per_batch_draws(m, R, m->nlayers + k, step);
  learned_states(m, L, false), learned_states(m, R, false);
  o->embed_fwd(o, L->xr, m->d_perm, m->act[k], m->rows, m->rows, L->in);
  L->seq[v].x = m->act[k], L->seq[v].y = L->ycat;
  R->seq[v].x = L->xr, R->seq[v].y = L->ycat + rows * (size_t)out;
  cell_forward(L, v, &L->seq[v]);
  cell_forward(R, v, &R->seq[v]);
  bool drop = m->dropout > 0 && k < m->nlayers - 1;
  float *joined = drop ? L->joined : m->act[k + 1];
  if (!m->join_sum) o->embed_fwd(o, joined, m->d_cat, L->ycat, 2 * m->rows, 2 * m->rows, out);
  else {
    o->embed_fwd(o, L->jtmp, m->d_perm, L->ycat + rows * (size_t)out, m->rows, m->rows, out);
    o->add(o, joined, L->ycat, L->jtmp, rows * (size_t)out);
  }
  if (drop) {
    uint64_t key = rng_key(m->seed, (uint64_t)step, rng_stream_of("dropout") + (uint64_t)k);
    o->dropout_fwd(o, m->act[k + 1], L->mask, joined, rows * (size_t)C, (float)m->dropout, key, draw_slice(m, (size_t)C),
                   training);
  }
}

static void bidir_backward(Model *m, int k, float *din, const float *dout) {
  Layer *L = &m->layers[k], *R = &m->rev[k];
  Device *o = m->ops;
  int C = layer_width(m, L), out = L->out;
  size_t rows = (size_t)m->rows, ro = rows * (size_t)out;
  const float *d = dout;
  if (m->dropout > 0 && k < m->nlayers - 1) {
    o->zero(o, m->dtmp[0], sizeof(float) * rows * (size_t)C);
    o->dropout_bwd(o, m->dtmp[0], d, L->mask, rows * (size_t)C);
    d = m->dtmp[0];
  }
  if (!m->join_sum) o->embed_fwd(o, L->dycat, m->d_catinv, d, 2 * m->rows, 2 * m->rows, out);
  else {
    o->copy(o, L->dycat, d, sizeof(float) * ro);
    o->embed_fwd(o, L->dycat + ro, m->d_perm, d, m->rows, m->rows, out);
  }
  if (k == m->nlayers - 1 && m->dtop) o->acc(o, L->dycat, m->dtop, 2 * ro);
  L->seq[0].dy = L->dycat, L->seq[0].grad_x = din, L->seq[0].fold = NULL;
  R->seq[0].dy = L->dycat + ro, R->seq[0].grad_x = L->gxr, R->seq[0].fold = NULL;
  cell_backward(L, &L->seq[0]);
  cell_backward(R, &R->seq[0]);
  /* the reverse cell's input gradient, reversed back (xr is free once its backward is done) */
  o->embed_fwd(o, L->xr, m->d_perm, L->gxr, m->rows, m->rows, L->in);
  o->acc(o, din, L->xr, rows * (size_t)L->in);
  learned_states(m, L, true), learned_states(m, R, true);
}

static void layer_forward(Model *m, int k, bool training, int64_t step) {
  if (m->bidir) {
    bidir_forward(m, k, training, step);
    return;
  }
  Layer *L = &m->layers[k];
  int v = training ? 0 : 1, C = m->block ? m->width : L->out;
  size_t n = (size_t)m->rows * (size_t)C;
  const float *x = m->act[k];
  SeqIO *s = &L->seq[v];
  if (training) per_batch_draws(m, L, k, step);
  learned_states(m, L, false);
  if (m->block && L->norm_w >= 0) {
    norm_forward(m, L, x, training);
    s->x = L->normed;
  } else s->x = x;
  bool drop = m->dropout > 0 && (m->block || k < m->nlayers - 1);
  /* a plain stack with nothing after the cell: it writes the next layer's input itself */
  bool direct = !m->block && L->mix_w < 0 && !drop;
  s->y = direct ? m->act[k + 1] : L->y;
  cell_forward(L, v, s);
  if (direct) return;
  const float *branch = L->y;
  if (L->mix_w >= 0) {
    Device *o = m->ops;
    if (m->mix == MIX_GLU) o->glu_fwd(o, L->mixed, L->mixcache, L->y, L->mixp, m->rows, m->width, m->mix_hidden);
    else o->mlp_fwd(o, L->mixed, L->mixcache, L->y, L->mixp, m->rows, m->width, m->mix_hidden);
    branch = L->mixed;
  }
  if (drop) {
    uint64_t key = rng_key(m->seed, (uint64_t)step, rng_stream_of("dropout") + (uint64_t)k);
    m->ops->dropout_fwd(m->ops, L->dropped, L->mask, branch, n, (float)m->dropout, key, draw_slice(m, (size_t)C), training);
    branch = L->dropped;
  }
  if (m->block) m->ops->add(m->ops, m->act[k + 1], x, branch, n);
  else m->ops->copy(m->ops, m->act[k + 1], branch, sizeof(float) * n);
}

/* Given dL/d(act[k+1]) in dout, writes dL/d(act[k]) to din (layer 0 of a folded embedding: adds it
 * summed by token to the embedding's gradient instead, plan_embedding_fold). */
static void layer_backward(Model *m, int k, float *din, const float *dout) {
  if (m->bidir) {
    bidir_backward(m, k, din, dout);
    return;
  }
  Layer *L = &m->layers[k];
  int C = m->block ? m->width : L->out;
  size_t n = (size_t)m->rows * (size_t)C;
  SeqIO *s = &L->seq[0];
  const float *d = dout;
  bool drop = m->dropout > 0 && (m->block || k < m->nlayers - 1);
  if (drop) {
    m->ops->zero(m->ops, m->dtmp[0], sizeof(float) * n);
    m->ops->dropout_bwd(m->ops, m->dtmp[0], d, L->mask, n);
    d = m->dtmp[0];
  }
  if (L->mix_w >= 0) {
    float *dy = m->dtmp[1];
    m->ops->zero(m->ops, dy, sizeof(float) * n);
    Device *o = m->ops;
    if (m->mix == MIX_GLU) o->glu_bwd(o, dy, L->dmixp, m->scratch, d, L->y, L->mixcache, L->mixp, m->rows, m->width, m->mix_hidden);
    else o->mlp_bwd(o, dy, L->dmixp, m->scratch, d, L->y, L->mixcache, L->mixp, m->rows, m->width, m->mix_hidden);
    d = dy;
  }
  s->dy = d;
  if (!m->block) {
    bool fold = k == 0 && m->fold;
    if (fold) m->fold_req = (SeqFold){m->d_ids, m->task.vocab, m->tensors[m->enc_w].dgrad[0]};
    s->grad_x = fold ? NULL : din;
    s->fold = fold ? &m->fold_req : NULL;
    cell_backward(L, s);
  } else if (L->norm_w >= 0) {
    float *dn = d == m->dtmp[0] ? m->dtmp[1] : m->dtmp[0];
    s->grad_x = dn;
    cell_backward(L, s);
    m->ops->copy(m->ops, din, dout, sizeof(float) * n);
    norm_backward(m, L, din, dn, m->act[k]);
  } else {
    s->grad_x = din;
    cell_backward(L, s);
    m->ops->acc(m->ops, din, dout, n);
  }
  learned_states(m, L, true);
}

/* The batch where the blocks run: inputs, and the targets with the rows beyond `valid` masked
 * (cross-entropy: -1; MSE: row flags that also carry the task's per-step mask). Returns how many
 * targets (cross-entropy) or elements (MSE) count. */
static int64_t upload_batch(Model *m, const TaskBatch *b, int valid) {
  Device *o = m->ops;
  int R = nn_readout_rows(m->readout, m->T, m->B), K = m->task.out_dim;
  size_t rows = (size_t)m->rows;
  if (m->embed) o->upload(o, m->d_ids, b->tokens, sizeof(int32_t) * rows);
  else o->upload(o, m->d_x, b->x, sizeof(float) * rows * (size_t)m->task.in_dim);
  int64_t counted = 0;
  bool all = R == m->rows;
  if (m->task.loss == TASK_LOSS_CE) {
    for (int r = 0; r < R; r++) {
      m->targets[r] = (r % m->B) < valid && (!all || r / m->B < m->lens[r % m->B]) ? b->cls[r] : -1;
      counted += m->targets[r] >= 0;
    }
    o->upload(o, m->d_targets, m->targets, sizeof(int32_t) * (size_t)R);
  } else {
    for (int r = 0; r < R; r++) {
      bool on = (r % m->B) < valid && (!b->mask || R != m->rows || b->mask[r] > 0) && (!all || r / m->B < m->lens[r % m->B]);
      m->on[r] = on ? 1.0f : 0.0f;
      counted += on ? K : 0;
    }
    o->upload(o, m->d_on, m->on, sizeof(float) * (size_t)R);
    o->upload(o, m->d_y, b->y, sizeof(float) * (size_t)R * (size_t)K);
  }
  return counted;
}

/* The forward of a batch: the encoder, the layers, the readout, the head and the loss, with the
 * loss's gradient in dlogits when `dlogits`. */
static ModelLoss forward(Model *m, const TaskBatch *b, bool training, int64_t step, int rows, bool dlogits) {
  CHECK(b->T == m->T && b->B == m->B);
  Device *o = m->ops;
  int C = m->block ? m->width : layer_width(m, &m->layers[m->nlayers - 1]);
  int R = nn_readout_rows(m->readout, m->T, m->B), K = m->task.out_dim;
  lengths_set(m, b);
  int64_t counted = upload_batch(m, b, rows);
  ModelTensor *enc = &m->tensors[m->enc_w];
  if (m->embed) o->embed_fwd(o, m->act[0], m->d_ids, enc->dval[0], m->rows, m->task.vocab, m->width);
  else o->linear_fwd(o, m->act[0], m->d_x, enc->dval[0], m->tensors[m->enc_b].dval[0], m->rows, m->task.in_dim, m->width);
  for (int k = 0; k < m->nlayers; k++) layer_forward(m, k, training, step);
  /* readout all: the head reads the last activations in place, and its input gradient goes
   * straight into theirs */
  bool all = m->readout == NN_READOUT_ALL;
  const float *rin = all ? m->act[m->nlayers] : m->readout_out;
  if (m->own_readout) own_readout_fwd(m, C);
  else if (!all) o->readout_fwd(o, (int)m->readout, m->readout_out, m->act[m->nlayers], m->T, m->B, C);
  ModelTensor *hw = &m->tensors[m->head_w], *hb = &m->tensors[m->head_b];
  o->linear_fwd(o, m->logits, rin, hw->dval[0], hb->dval[0], R, C, K);
  ModelLoss out = {0};
  double sum = 0;
  out.counted = counted;
  if (m->task.loss == TASK_LOSS_CE) {
    o->crossentropy(o, dlogits ? m->dlogits : NULL, m->logits, m->d_targets, R, K, counted, &sum, &out.correct);
    out.classify = true;
  } else if (counted) {
    o->mse(o, dlogits ? m->dlogits : NULL, m->logits, m->d_y, m->d_on, R, K, counted, &sum);
  }
  out.loss = counted ? sum / (double)counted : 0.0;
  return out;
}

ModelLoss model_batch(Model *m, const TaskBatch *b, bool training, int64_t step, int rows) {
  ModelLoss out = forward(m, b, training, step, rows, training);
  if (!training) return out;

  Device *o = m->ops;
  size_t nrows = (size_t)m->rows;
  int C = m->block ? m->width : layer_width(m, &m->layers[m->nlayers - 1]);
  int R = nn_readout_rows(m->readout, m->T, m->B), K = m->task.out_dim;
  bool all = m->readout == NN_READOUT_ALL;
  const float *rin = all ? m->act[m->nlayers] : m->readout_out;
  ModelTensor *enc = &m->tensors[m->enc_w], *hw = &m->tensors[m->head_w], *hb = &m->tensors[m->head_b];
  o->zero(o, m->tensors[0].dgrad[0], sizeof(float) * m->store_floats);
  float *dcur = m->dact[0], *dnext = m->dact[1];
  /* the head writes its input gradient (all: dcur itself); the readouts add theirs into dcur */
  if (all) o->linear_bwd(o, dcur, hw->dgrad[0], hb->dgrad[0], m->dlogits, rin, hw->dval[0], R, C, K);
  else {
    o->zero(o, dcur, sizeof(float) * nrows * (size_t)C);
    o->linear_bwd(o, m->dreadout, hw->dgrad[0], hb->dgrad[0], m->dlogits, rin, hw->dval[0], R, C, K);
    if (m->own_readout) own_readout_bwd(m, dcur, C);
    else o->readout_bwd(o, (int)m->readout, dcur, m->dreadout, m->T, m->B, C);
  }
  for (int k = m->nlayers - 1; k >= 0; k--) {
    layer_backward(m, k, dnext, dcur);
    float *t = dcur;
    dcur = dnext, dnext = t;
  }
  if (m->fold) { /* layer 0's backward added it (layer_backward) */
  } else if (m->embed) o->embed_bwd(o, enc->dgrad[0], dcur, m->d_ids, m->rows, m->task.vocab, m->width);
  else
    o->linear_bwd(o, NULL, enc->dgrad[0], m->tensors[m->enc_b].dgrad[0], dcur, m->d_x, enc->dval[0], m->rows,
                  m->task.in_dim, m->width);
  return out;
}

/* ---- where the tensors live ---- */

Device *model_device(Model *m) { return m->ops; }

size_t model_work_bytes(const Model *m) {
  if (strcmp(m->backend->name, "cpu")) return 0;
  size_t total = 0;
  for (int k = 0; k < m->nlayers; k++) {
    const Layer *L = &m->layers[k];
    TrainMemory t = pipeline_train_memory(L->cell[0], m->chunk);
    size_t one = t.per_run - t.seq_run + (size_t)m->B * (t.per_row - t.seq_row + (size_t)m->T * (t.per_token - t.seq_token));
    total += (L->work[1] == L->work[0] ? one : 2 * one) * (m->bidir ? 2 : 1); /* evaluation's own work where its program
                                                                                 differs; the reverse direction's */
  }
  return total;
}

void model_to_device(Model *m) {
  if (m->dstore) m->ops->upload(m->ops, m->dstore, m->store, sizeof(float) * m->store_floats);
}

void model_to_host(Model *m) {
  if (m->dstore) m->ops->download(m->ops, m->store, m->dstore, sizeof(float) * m->store_floats);
}

/* ---- where a batch went non-finite ---- */

/* The first of n floats where the model's buffers live that is not finite: its index, or -1, with
 * its value in *v. */
static int64_t first_bad(Model *m, const float *x, size_t n, float *v) {
  float *tmp = NULL;
  const float *h = x;
  if (!device_is_host(m->ops)) {
    tmp = xmalloc(sizeof(float) * n + 1);
    m->ops->download(m->ops, tmp, x, sizeof(float) * n);
    h = tmp;
  }
  int64_t at = -1;
  for (size_t i = 0; i < n && at < 0; i++)
    if (!isfinite(h[i])) at = (int64_t)i, *v = h[i];
  free(tmp);
  return at;
}

static const char *bad_word(float v) { return isnan(v) ? "NaN" : "infinite"; }

/* A tensor's values (grad false) or gradient: "the gradient of layer.0.Wzx (NaN at element 3)" into
 * buf when one of its elements is not finite. */
static bool tensor_bad(Model *m, int i, bool grad, char *buf, size_t n) {
  const ModelTensor *t = &m->tensors[i];
  for (int part = 0; part < (t->cplx ? 2 : 1); part++) {
    float v;
    int64_t at = first_bad(m, grad ? t->dgrad[part] : t->dval[part], (size_t)t->numel, &v);
    if (at < 0) continue;
    snprintf(buf, n, "%s %s (%s at element %lld%s)", grad ? "the gradient of" : t->learned ? "param" : "buffer", t->name,
             bad_word(v), (long long)at, part ? " of its imaginary part" : "");
    return true;
  }
  return false;
}

/* An activation [rows, width]: "layer 1: the mixer's output (NaN at step 3 of 6, sequence 2)". */
static bool act_bad(Model *m, const float *x, int width, const char *what, char *buf, size_t n) {
  float v;
  int64_t at = first_bad(m, x, (size_t)m->rows * (size_t)width, &v);
  if (at < 0) return false;
  int64_t row = at / width;
  snprintf(buf, n, "%s (%s at step %lld of %d, sequence %lld)", what, bad_word(v), (long long)(row / m->B + 1), m->T,
           (long long)(row % m->B + 1));
  return true;
}

/* Layer k's states h_0 .. h_T as the last forward left them, step by step and, at each step, in
 * the order the cell declares them. */
static bool states_bad(Model *m, int k, bool training, char *buf, size_t n) {
  Layer *L = &m->layers[k];
  int v = training ? 0 : 1;
  Program *p = L->exe[v]->p;
  Cell *c = L->cell[v];
  size_t B = (size_t)m->B;
  float **h = xcalloc((size_t)p->nsparts + 1, sizeof(float *));
  bool kept = !L->chunk[v] && !L->form[v]; /* a chunked run keeps the states at chunk boundaries only; the form none */
  for (int q = 0; q < p->nsparts && kept; q++) {
    h[q] = xmalloc(sizeof(float) * ((size_t)m->T + 1) * B * (size_t)p->sparts[q].size + 1);
    kept = m->backend->read_steps(L->exe[v], L->work[v], STEPS_STATE, q, h[q]) == 0;
  }
  bool found = false;
  for (int t = 0; t <= m->T && kept && !found; t++)
    for (int q = 0; q < p->nsparts && !found; q++) {
      size_t size = (size_t)p->sparts[q].size, row = (size_t)t * B * size;
      for (size_t j = 0; j < B * size && !found; j++)
        if (!isfinite(h[q][row + j])) {
          const StateInfo *si = &c->states[p->sparts[q].state];
          char when[64];
          if (t) snprintf(when, sizeof when, "at step %d of %d", t, m->T);
          else snprintf(when, sizeof when, "in its initial value");
          snprintf(buf, n, "layer %d, state '%s'%s (%s %s, sequence %zu)", k, si->name,
                   si->cplx ? (p->sparts[q].part ? " (imaginary part)" : " (real part)") : "", bad_word(h[q][row + j]), when,
                   j / size + 1);
          found = true;
        }
    }
  for (int q = 0; q < p->nsparts; q++) free(h[q]);
  free(h);
  return found;
}

bool model_find_nonfinite(Model *m, const TaskBatch *b, bool training, int64_t step, int rows, char *buf, size_t n) {
  for (int i = 0; i < m->ntensors; i++)
    if (tensor_bad(m, i, false, buf, n)) return true;
  ModelLoss l = forward(m, b, training, step, rows, false);
  if (act_bad(m, m->act[0], m->width, "the encoder's output", buf, n)) return true;
  for (int k = 0; k < m->nlayers; k++) {
    Layer *L = &m->layers[k];
    int C = m->block ? m->width : layer_width(m, L);
    bool drop = m->dropout > 0 && (m->block || k < m->nlayers - 1);
    bool direct = !m->block && L->mix_w < 0 && !drop; /* as layer_forward */
    char what[128];
    snprintf(what, sizeof what, "layer %d: the norm's output", k);
    if (L->norm_w >= 0 && act_bad(m, L->normed, m->width, what, buf, n)) return true;
    if (states_bad(m, k, training, buf, n)) return true;
    snprintf(what, sizeof what, "layer %d: the cell's output", k);
    if (m->bidir) { /* both directions' outputs: 2 T B rows */
      snprintf(what, sizeof what, "layer %d: the forward (rows 1 to %d) or reverse direction's output", k, m->rows);
      float v;
      if (first_bad(m, L->ycat, 2 * (size_t)m->rows * (size_t)L->out, &v) >= 0) {
        snprintf(buf, n, "%s (%s)", what, bad_word(v));
        return true;
      }
      direct = false;
    } else if (act_bad(m, direct ? m->act[k + 1] : L->y, L->out, what, buf, n)) return true;
    snprintf(what, sizeof what, "layer %d: the mixer's output", k);
    if (L->mix_w >= 0 && act_bad(m, L->mixed, m->width, what, buf, n)) return true;
    snprintf(what, sizeof what, "layer %d: the block's output", k);
    if (!direct && act_bad(m, m->act[k + 1], C, what, buf, n)) return true;
  }
  int C = m->block ? m->width : layer_width(m, &m->layers[m->nlayers - 1]), R = nn_readout_rows(m->readout, m->T, m->B);
  float v;
  int64_t at = m->readout == NN_READOUT_ALL ? -1 : first_bad(m, m->readout_out, (size_t)R * (size_t)C, &v);
  if (at >= 0) {
    snprintf(buf, n, "the readout (%s)", bad_word(v));
    return true;
  }
  at = first_bad(m, m->logits, (size_t)R * (size_t)m->task.out_dim, &v);
  if (at >= 0) {
    snprintf(buf, n, "the head's output, the logits (%s at row %lld of %d)", bad_word(v), (long long)(at / m->task.out_dim + 1), R);
    return true;
  }
  if (!isfinite(l.loss)) {
    snprintf(buf, n, "the loss (%s)", isnan(l.loss) ? "NaN" : "infinite");
    return true;
  }
  if (!training) return false;
  /* the gradients, in the order the backward computes them */
  if (tensor_bad(m, m->head_w, true, buf, n) || tensor_bad(m, m->head_b, true, buf, n)) return true;
  for (int k = m->nlayers - 1; k >= 0; k--) {
    Layer *L = &m->layers[k];
    for (int i = 0; L->mix_w >= 0 && i < (m->mix == MIX_GLU ? 6 : 4); i++)
      if (tensor_bad(m, L->mix_w + i, true, buf, n)) return true;
    for (int i = 0; i < L->cell[0]->nparams; i++)
      if (tensor_bad(m, L->first + i, true, buf, n)) return true;
    for (int i = 0; m->bidir && i < m->rev[k].cell[0]->nparams; i++)
      if (tensor_bad(m, m->rev[k].first + i, true, buf, n)) return true;
    for (int i = 0; L->norm_w >= 0 && i < 2; i++)
      if (tensor_bad(m, L->norm_w + i, true, buf, n)) return true;
  }
  return tensor_bad(m, m->enc_w, true, buf, n) || (m->enc_b >= 0 && tensor_bad(m, m->enc_b, true, buf, n));
}
