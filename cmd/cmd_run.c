/* cmd_run.c: `cellc run` (one cell on data, forward and backward, every
 * tensor of the CLI spec's table written out) and `cellc derive`. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "cli.h"
#include "init.h"
#include "pipeline.h"
#include "safetensors.h"

/* ---- tensors in planar form: a complex value as its (re, im) parts ---- */

typedef struct Tensor {
  const char *name;
  int ndim;
  int64_t shape[6];  /* as written in the file: up to [T, B, 3 dims] or [B, 3 dims, 2] (complex) */
  bool cplx;
  int64_t numel;     /* per part */
  double *part[2];
} Tensor;

static void tensor_init(Tensor *t, const char *name, int ndim, const int64_t *shape, bool cplx) {
  memset(t, 0, sizeof *t);
  t->name = name;
  t->ndim = ndim + (cplx ? 1 : 0);
  t->numel = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->numel *= shape[i];
  }
  if (cplx) t->shape[ndim] = 2;
  t->cplx = cplx;
  for (int p = 0; p < (cplx ? 2 : 1); p++) t->part[p] = xcalloc((size_t)t->numel + 1, sizeof(double));
}

static void tensor_free(Tensor *t) {
  free(t->part[0]);
  free(t->part[1]);
  t->part[0] = t->part[1] = NULL;
}

static char *shape_text(const int64_t *shape, int ndim) {
  char buf[128];
  int len = snprintf(buf, sizeof buf, "[");
  for (int i = 0; i < ndim && len < (int)sizeof buf; i++) len += snprintf(buf + len, sizeof buf - (size_t)len, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (len < (int)sizeof buf) snprintf(buf + len, sizeof buf - (size_t)len, "]");
  return xstrdup(buf);
}

/* Fills t from the input file when it holds a tensor of that name: 1 taken,
 * 0 absent, -1 error (printed). */
static int tensor_take(Tensor *t, const SftFile *in, const char *path) {
  if (!in) return 0;
  const SftTensor *s = sft_find(in, t->name);
  if (!s) return 0;
  bool ok = s->ndim == t->ndim;
  for (int i = 0; ok && i < t->ndim; i++) ok = s->shape[i] == t->shape[i];
  if (!ok) {
    char *got = shape_text(s->shape, s->ndim), *want = shape_text(t->shape, t->ndim);
    diag_plain("%s: tensor '%s' has shape %s, expected %s", path, t->name, got, want);
    free(got);
    free(want);
    return -1;
  }
  if (s->dtype != SFT_F32 && s->dtype != SFT_F64) {
    diag_plain("%s: tensor '%s' is %s; inputs are F32 or F64", path, t->name, sft_dtype_name(s->dtype));
    return -1;
  }
  int parts = t->cplx ? 2 : 1;
  for (int64_t i = 0; i < t->numel; i++)
    for (int p = 0; p < parts; p++) {
      double v = sft_get(s, i * parts + p);
      if (!isfinite(v)) {
        diag_plain("%s: tensor '%s' holds a value that is not finite (element %lld)", path, t->name, (long long)i);
        return -1;
      }
      t->part[p][i] = v;
    }
  return 1;
}

static void tensor_write(SftWriter *w, const Tensor *t, SftDtype dt) {
  int parts = t->cplx ? 2 : 1;
  double *buf = xmalloc(sizeof(double) * (size_t)(t->numel * parts + 1));
  for (int64_t i = 0; i < t->numel; i++)
    for (int p = 0; p < parts; p++) buf[i * parts + p] = t->part[p][i];
  sft_add_f64_as(w, t->name, dt, t->ndim, t->shape, buf);
  free(buf);
}

static void fill_normal(Tensor *t, uint64_t seed, const char *stream) {
  Rng r;
  rng_seed(&r, seed, rng_stream_of(stream));
  for (int64_t i = 0; i < t->numel; i++)
    for (int p = 0; p < (t->cplx ? 2 : 1); p++) t->part[p][i] = rng_normal(&r);
}

/* ---- arguments ---- */

typedef struct RunArgs {
  CellArgs cell;
  int T, B;
  size_t peak_bytes; /* the run's data buffers at their high-water mark (memuse.h) */
  bool has_T, has_B;
  uint64_t seed;
  const char *inputs, *out, *backend, *precision;
  const char *lengths;  /* --lengths 5,3,7: one per row, or NULL */
  bool train;
} RunArgs;

static int parse_int(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s takes an integer in [%ld, %ld], not '%%s'", flag, lo, hi);
    return cli_usage_error(msg, v);
  }
  *out = x;
  return 0;
}

static int parse_run_args(int argc, char **argv, RunArgs *a) {
  a->T = 16;
  a->B = 3;
  a->seed = 0;
  a->backend = "cpu";
  a->precision = NULL;
  for (int i = 0; i < argc; i++) {
    int r = cli_cell_arg(&a->cell, argc, argv, &i);
    if (r < 0) return 2;
    if (r) continue;
    const char *f = argv[i];
    bool takes = !strcmp(f, "--T") || !strcmp(f, "--B") || !strcmp(f, "--seed") || !strcmp(f, "--inputs") ||
                 !strcmp(f, "--out") || !strcmp(f, "--backend") || !strcmp(f, "--precision") || !strcmp(f, "--lengths");
    if (takes && i + 1 >= argc) return cli_usage_error("%s needs a value", f);
    long v;
    if (!strcmp(f, "--T")) {
      if (parse_int(f, argv[++i], 1, 1000000, &v)) return 2;
      a->T = (int)v, a->has_T = true;
    } else if (!strcmp(f, "--B")) {
      if (parse_int(f, argv[++i], 1, 1000000, &v)) return 2;
      a->B = (int)v, a->has_B = true;
    } else if (!strcmp(f, "--seed")) {
      if (parse_int(f, argv[++i], 0, 2147483647L, &v)) return 2;
      a->seed = (uint64_t)v;
    } else if (!strcmp(f, "--inputs")) a->inputs = argv[++i];
    else if (!strcmp(f, "--out")) a->out = argv[++i];
    else if (!strcmp(f, "--backend")) {
      a->backend = argv[++i];
      if (!backend_find(a->backend)) {
        char msg[160];
        snprintf(msg, sizeof msg, "--backend is one of %s, not '%%s'", backend_names());
        return cli_usage_error(msg, a->backend);
      }
    } else if (!strcmp(f, "--precision")) {
      a->precision = argv[++i];
      if (strcmp(a->precision, "f32") && strcmp(a->precision, "f64"))
        return cli_usage_error("--precision is f32 or f64, not '%s'", a->precision);
    } else if (!strcmp(f, "--lengths")) a->lengths = argv[++i];
    else if (!strcmp(f, "--train")) a->train = true;
    else if (f[0] == '-' && f[1]) return cli_usage_error("unknown flag '%s'", f);
    else if (!a->cell.file) a->cell.file = f;
    else return cli_usage_error("unexpected argument '%s'", f);
  }
  if (!a->cell.file) return cli_usage_error("%s", "run needs a .cell file");
  if (!a->out || !a->out[0]) return cli_usage_error("%s", "run needs --out OUT.safetensors");
  if (!a->precision) a->precision = "f32";
  return 0;
}

int cmd_derive(int argc, char **argv) {
  CellArgs a = {0};
  for (int i = 0; i < argc; i++) {
    int r = cli_cell_arg(&a, argc, argv, &i);
    if (r < 0) return 2;
    if (r) continue;
    if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("unknown flag '%s'", argv[i]);
    if (a.file) return cli_usage_error("unexpected argument '%s'", argv[i]);
    a.file = argv[i];
  }
  if (!a.file) return cli_usage_error("%s", "derive needs a .cell file");
  /* the math does not depend on the sizes: dims the user leaves unbound get 3 */
  Arena arena = {0};
  Module *m = check_load(&arena, a.file, cli_stdlib_dir());
  if (!m) return arena_free(&arena), 1;
  const CellAst *ast = check_find_cell(m, a.cell, NULL);
  DeclaredDim dd[64];
  int ndd = ast ? check_declared_dims(ast, dd, 64) : 0;
  for (int d = 0; d < ndd && a.ndims < 60; d++) {
    bool given = dd[d].has_default;
    for (int i = 0; i < a.ndims; i++) given = given || !strcmp(a.dims[i].name, dd[d].name);
    if (!given) a.dims[a.ndims++] = (Binding){dd[d].name, "3"};
  }
  Cell *c = cli_compile_cell(&arena, &a, false);
  if (!c) return arena_free(&arena), 1;
  Program *p = pipeline_derive(c);
  ad_print(p, stdout);
  program_free(p);
  cell_free(c);
  arena_free(&arena);
  return 0;
}

/* The shape of a per-part interface value with leading dims. */
static int lead_shape(int64_t *shape, int nlead, const int64_t *lead, int rank, const int *n) {
  for (int i = 0; i < nlead; i++) shape[i] = lead[i];
  for (int i = 0; i < rank; i++) shape[nlead + i] = n[i];
  return nlead + rank;
}

/* ---- cellc run: the tensors of one run, as passes ---- */

/* Every tensor of a run (spec cli.md, `cellc run`), float64 planes, and where its inputs come from. */
typedef struct RunData {
  RunArgs *a;
  Arena *arena;
  Cell *c;
  Program *p;
  const SftFile *in;    /* the --inputs file, or NULL */
  int T, B;
  size_t peak_bytes;    /* the run's data buffers at their high-water mark (memuse.h) */
  ChunkForm *cf;        /* --mode chunked: the cell's chunked form, which runs instead of the program */
  Tensor *params, *gparams, *h0, *dfinal, *final, *gh0, *gates, *noise;
  Tensor x, dy, y, gx;
  int *lengths;         /* [B] in 1..T (--lengths or the input file's `lengths`), or NULL */
  const char **known;   /* every name the input file may hold */
  int nknown;
} RunData;

/* --inputs: read, and T and B taken from its x. 0 or the exit status. */
static int read_inputs(RunArgs *a, SftFile *in) {
  char err[512];
  if (sft_read(a->inputs, in, err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 1;
  }
  const SftTensor *x = sft_find(in, "x");
  if (!x || x->ndim != 3) return 0;
  if ((a->has_T && x->shape[0] != a->T) || (a->has_B && x->shape[1] != a->B)) {
    diag_plain("%s: x is [%lld, %lld, ...] but --T %d --B %d were given", a->inputs, (long long)x->shape[0],
               (long long)x->shape[1], a->T, a->B);
    return 1;
  }
  if (x->shape[0] < 1 || x->shape[1] < 1) {
    diag_plain("%s: x must have at least one step and one row", a->inputs);
    return 1;
  }
  a->T = (int)x->shape[0];
  a->B = (int)x->shape[1];
  return 0;
}

/* What the run holds, roughly (inputs, outputs, their gradients, and for the interpreter every
 * value): a run past 64 GiB is refused (status 1); below it, an allocation that fails names the
 * run's sizes (status 3). */
static int check_size(RunData *r) {
  Program *p = r->p;
  double per_row = 4.0 * (p->x_size + p->output_size) + 4.0 * p->g.nnodes;
  for (int i = 0; i < p->nsparts; i++) per_row += 4.0 * p->sparts[i].size;
  double bytes = per_row * 8.0 * r->T * r->B;
  if (bytes > 64.0 * (1 << 30)) {
    diag_plain("--T %d --B %d: the run would need about %.0f GiB; use a smaller T or B", r->T, r->B, bytes / (1 << 30));
    return 1;
  }
  static char purpose[1200];
  int len = snprintf(purpose, sizeof purpose, "the run's tensors (--T %d --B %d, dims", r->T, r->B);
  for (int i = 0; i < r->c->ndims && len < 1100; i++)
    len += snprintf(purpose + len, sizeof purpose - (size_t)len, " %s=%ld", r->c->dims[i].name, r->c->dims[i].value);
  snprintf(purpose + len, sizeof purpose - (size_t)len, ")");
  base_alloc_for(purpose);
  return 0;
}

static Tensor *add_tensor(RunData *r, Tensor *t, const char *name, int ndim, const int64_t *shape, bool cplx) {
  tensor_init(t, name, ndim, shape, cplx);
  r->known[r->nknown++] = t->name;
  return t;
}

/* Every tensor with its name and shape (values zero). */
static void shape_tensors(RunData *r) {
  Cell *c = r->c;
  Program *p = r->p;
  int np = c->nparams, ns = c->nstates, ng = c->ngates;
  r->params = xcalloc((size_t)np + 1, sizeof(Tensor)), r->gparams = xcalloc((size_t)np + 1, sizeof(Tensor));
  r->h0 = xcalloc((size_t)ns + 1, sizeof(Tensor)), r->dfinal = xcalloc((size_t)ns + 1, sizeof(Tensor));
  r->final = xcalloc((size_t)ns + 1, sizeof(Tensor)), r->gh0 = xcalloc((size_t)ns + 1, sizeof(Tensor));
  r->gates = xcalloc((size_t)ng + 1, sizeof(Tensor)), r->noise = xcalloc((size_t)p->nnoise + 1, sizeof(Tensor));
  r->known = xcalloc((size_t)(2 * np + 4 * ns + ng + p->nnoise + 8), sizeof(char *));
  int64_t xs[3] = {r->T, r->B, p->x_size}, ys[3] = {r->T, r->B, p->output_size}, lead[2] = {r->T, r->B}, shape[6];
  add_tensor(r, &r->x, "x", 3, xs, false), add_tensor(r, &r->dy, "dy", 3, ys, false);
  add_tensor(r, &r->y, "y", 3, ys, false), add_tensor(r, &r->gx, "grad.x", 3, xs, false);
  r->known[r->nknown++] = "lengths";
  for (int i = 0; i < np; i++) {
    ParamInfo *pi = &c->params[i];
    int64_t ps[MAX_RANK] = {pi->n[0], pi->n[1], pi->n[2]};
    add_tensor(r, &r->params[i], arena_printf(r->arena, "%s.%s", pi->buffer ? "buffer" : "param", pi->name), pi->rank,
               ps, pi->cplx);
    /* a buffer or frozen param has no gradient: its tensor stays zero and is neither read nor written */
    if (pi->buffer || pi->frozen) tensor_init(&r->gparams[i], "", pi->rank, ps, pi->cplx);
    else add_tensor(r, &r->gparams[i], arena_printf(r->arena, "grad.param.%s", pi->name), pi->rank, ps, pi->cplx);
  }
  for (int i = 0; i < ns; i++) {
    StateInfo *si = &c->states[i];
    int nd = lead_shape(shape, 1, lead + 1, si->rank, si->n);
    /* a history (prev, conv) is hist.NAME [B, K, size] (its initial value), oldest step first */
    const char *h0name = si->hist_lag ? "" : "h0.", *gname = si->hist_lag ? "grad." : "grad.h0.";
    if (si->hist_lag) {
      const Node *v = graph_node(&c->g, si->hist_of);
      nd = 2 + v->rank;
      shape[1] = si->hist_lag;
      for (int d = 0; d < v->rank; d++) shape[2 + d] = v->n[d];
    }
    add_tensor(r, &r->h0[i], arena_printf(r->arena, "%s%s", h0name, si->name), nd, shape, si->cplx);
    add_tensor(r, &r->dfinal[i], arena_printf(r->arena, "dfinal.%s", si->name), nd, shape, si->cplx);
    add_tensor(r, &r->final[i], arena_printf(r->arena, "final.%s", si->name), nd, shape, si->cplx);
    add_tensor(r, &r->gh0[i], arena_printf(r->arena, "%s%s", gname, si->name), nd, shape, si->cplx);
  }
  for (int i = 0; i < ng; i++) {
    Node *gn = graph_node(&p->g, p->gates[i].node);
    int nd = lead_shape(shape, 2, lead, gn->rank, gn->n);
    add_tensor(r, &r->gates[i], arena_printf(r->arena, "gate.%s", c->gates[i].name), nd, shape, false);
  }
  for (int i = 0; i < p->nnoise; i++) {
    int64_t s3[3] = {r->T, r->B, p->noise_sizes[i]};
    add_tensor(r, &r->noise[i], arena_printf(r->arena, "noise.%d", i), 3, s3, false);
  }
}

/* A value drawn row by row into tensor t's planes from v ((re, im) interleaved, `row` values),
 * repeated `times` times. */
static void fill_rows(Tensor *t, const double *v, int64_t row, int64_t times) {
  int parts = t->cplx ? 2 : 1;
  for (int64_t k = 0; k < times; k++)
    for (int part = 0; part < parts; part++)
      for (int64_t j = 0; j < row; j++) t->part[part][k * row + j] = v[j * parts + part];
}

/* params: given, or drawn from their initializers in declaration order. 0 or 1. */
static int take_params(RunData *r) {
  char err[512];
  for (int i = 0; i < r->c->nparams; i++) {
    ParamInfo *pi = &r->c->params[i];
    Tensor *t = &r->params[i];
    int got = tensor_take(t, r->in, r->a->inputs);
    if (got < 0) return 1;
    if (got) continue;
    Rng rng;
    rng_seed(&rng, r->a->seed, rng_stream_of(t->name));
    double *buf = xmalloc(sizeof(double) * (size_t)(2 * t->numel + 1));
    const double **earlier = xcalloc((size_t)i + 1, sizeof(double *));
    for (int j = 0; j < i; j++) earlier[j] = r->params[j].part[0];
    int rc = cell_draw_param(r->c, i, NULL, earlier, &rng, buf, err, sizeof err);
    if (rc < 0) diag_error(pi->init_loc, "cannot initialize param '%s': %s", pi->name, err);
    else fill_rows(t, buf, t->numel, 1);
    free(earlier), free(buf);
    if (rc < 0) return 1;
  }
  return 0;
}

/* h0 given, or the declared initial state (a learned one's param, or drawn), the same for every
 * row; dfinal given or zero. 0 or 1. */
static int take_states(RunData *r) {
  char err[512];
  for (int i = 0; i < r->c->nstates; i++) {
    StateInfo *si = &r->c->states[i];
    int got = tensor_take(&r->h0[i], r->in, r->a->inputs);
    if (got < 0) return 1;
    if (!got && si->init) {
      int size = state_numel(si), parts = si->cplx ? 2 : 1;
      double *v = xcalloc((size_t)(2 * size + 1), sizeof(double));
      int rc = 0;
      if (si->param >= 0) {
        for (int part = 0; part < parts; part++)
          for (int j = 0; j < size; j++) v[j * parts + part] = r->params[si->param].part[part][j];
      } else {
        Rng rng;
        rng_seed(&rng, r->a->seed, rng_stream_of(r->h0[i].name));
        if ((rc = cell_draw_state(r->c, i, &rng, v, err, sizeof err)) < 0)
          diag_error(si->init_loc, "cannot initialize state '%s': %s", si->name, err);
      }
      if (!rc) fill_rows(&r->h0[i], v, size, r->B);
      free(v);
      if (rc < 0) return 1;
    }
    if (tensor_take(&r->dfinal[i], r->in, r->a->inputs) < 0) return 1;
  }
  return 0;
}

/* gumbel_sigmoid's noise: given (in (0, 1)), or drawn. 0 or 1. */
static int take_noise(RunData *r) {
  for (int i = 0; i < r->p->nnoise; i++) {
    Tensor *t = &r->noise[i];
    int got = tensor_take(t, r->in, r->a->inputs);
    if (got < 0) return 1;
    if (!got) {
      Rng rng;
      rng_seed(&rng, r->a->seed, rng_stream_of(t->name));
      for (int64_t j = 0; j < t->numel; j++) t->part[0][j] = rng_uniform_open(&rng);
      continue;
    }
    for (int64_t j = 0; j < t->numel; j++)
      if (!(t->part[0][j] > 0 && t->part[0][j] < 1)) {
        diag_plain("%s: noise.%d must lie in (0, 1)", r->a->inputs, i);
        return 1;
      }
  }
  return 0;
}

/* The sequences' lengths (spec/emit.md, ABI 2): --lengths (a usage error, status 2, when it is not
 * B integers in 1..T) or the input file's `lengths` ([B] I32 or I64 in 1..T, else status 1); not
 * both. None: every sequence has T steps. 0 or the status. */
static int take_lengths(RunData *r) {
  const char *flag = r->a->lengths, *path = r->a->inputs;
  const SftTensor *t = r->in ? sft_find(r->in, "lengths") : NULL;
  if (!flag && !t) return 0;
  if (flag && t) return cli_usage_error("--lengths and the lengths in %s: give one of them", path);
  r->lengths = xcalloc((size_t)r->B + 1, sizeof(int));
  if (flag) {
    const char *c = flag;
    int n = 0;
    for (;;) {
      char *end;
      long v = strtol(c, &end, 10);
      if (end == c || (*end && *end != ',') || v < 1 || v > r->T) {
        char msg[200];
        snprintf(msg, sizeof msg, "--lengths takes %d integers in [1, %d] separated by commas (one per row), not '%%s'", r->B, r->T);
        return cli_usage_error(msg, flag);
      }
      if (n < r->B) r->lengths[n] = (int)v;
      n++;
      if (!*end) break;
      c = end + 1;
    }
    if (n != r->B) {
      char msg[200];
      snprintf(msg, sizeof msg, "--lengths gives %d lengths for a batch of %d rows: '%%s'", n, r->B);
      return cli_usage_error(msg, flag);
    }
    return 0;
  }
  if (t->dtype != SFT_I32 && t->dtype != SFT_I64) {
    diag_plain("%s: tensor 'lengths' is %s; lengths are I32 or I64", path, sft_dtype_name(t->dtype));
    return 1;
  }
  if (t->ndim != 1 || t->shape[0] != r->B) {
    char *got = shape_text(t->shape, t->ndim);
    diag_plain("%s: tensor 'lengths' has shape %s, expected [%d] (one per row)", path, got, r->B);
    free(got);
    return 1;
  }
  for (int b = 0; b < r->B; b++) {
    double v = sft_get(t, b);
    if (!(v >= 1 && v <= r->T)) {
      diag_plain("%s: tensor 'lengths' holds %.0f at row %d; lengths lie in [1, %d] (T)", path, v, b, r->T);
      return 1;
    }
    r->lengths[b] = (int)v;
  }
  return 0;
}

/* An input tensor the run does not know is a mistake worth naming. 0 or 1. */
static int check_unknown_inputs(RunData *r) {
  for (int i = 0; r->in && i < r->in->n; i++) {
    const char *name = r->in->tensors[i].name;
    bool ok = false;
    for (int j = 0; j < r->nknown; j++) ok = ok || !strcmp(r->known[j], name);
    if (ok) continue;
    if (!strncmp(name, "noise.", 6) && !r->a->train) {
      diag_plain("%s: tensor '%s' is gumbel_sigmoid noise, used only in training mode: add --train", r->a->inputs, name);
      return 1;
    }
    const char *near = edit_nearest(name, r->known, r->nknown);
    /* param.NAME for a buffer (or buffer.NAME for a param): the other prefix is the likely meaning */
    const char *dot = strchr(name, '.');
    for (int j = 0; dot && j < r->nknown; j++) {
      const char *kd = strchr(r->known[j], '.');
      if (kd && !strcmp(kd, dot) && (!strncmp(name, "param.", 6) || !strncmp(name, "buffer.", 7)) &&
          (!strncmp(r->known[j], "param.", 6) || !strncmp(r->known[j], "buffer.", 7)))
        near = r->known[j];
    }
    if (near) diag_plain("%s: unexpected tensor '%s' (cell '%s' has no such input); did you mean '%s'?", r->a->inputs, name, r->c->name, near);
    else diag_plain("%s: unexpected tensor '%s' (cell '%s' has no such input)", r->a->inputs, name, r->c->name);
    return 1;
  }
  return 0;
}

/* The part planes of tensors per program part (params or states). */
static void **part_planes(int n, Tensor *const *of, const int *part) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = of[i]->part[part[i]];
  return v;
}

/* Forward and backward on the compiled program; a learned initial state's param then gets the sum
 * of grad.h0 over the batch. */
static void run_program(RunData *r, Compiled *comp) {
  Program *p = r->p;
  int npp = p->npparts, nsp = p->nsparts, ng = p->ngates, nz = p->nnoise;
  Tensor **pt = xcalloc((size_t)npp + 1, sizeof(Tensor *)), **gpt = xcalloc((size_t)npp + 1, sizeof(Tensor *));
  int *ppart = xcalloc((size_t)npp + 1, sizeof(int)), *spart = xcalloc((size_t)nsp + 1, sizeof(int));
  for (int i = 0; i < npp; i++) pt[i] = &r->params[p->pparts[i].param], gpt[i] = &r->gparams[p->pparts[i].param], ppart[i] = p->pparts[i].part;
  Tensor **h0 = xcalloc((size_t)nsp + 1, sizeof(Tensor *)), **df = xcalloc((size_t)nsp + 1, sizeof(Tensor *));
  Tensor **fin = xcalloc((size_t)nsp + 1, sizeof(Tensor *)), **gh = xcalloc((size_t)nsp + 1, sizeof(Tensor *));
  for (int i = 0; i < nsp; i++) {
    int s = p->sparts[i].state;
    h0[i] = &r->h0[s], df[i] = &r->dfinal[s], fin[i] = &r->final[s], gh[i] = &r->gh0[s], spart[i] = p->sparts[i].part;
  }
  Tensor **gt = xcalloc((size_t)ng + 1, sizeof(Tensor *)), **zt = xcalloc((size_t)nz + 1, sizeof(Tensor *));
  int *zero = xcalloc((size_t)(ng + nz) + 1, sizeof(int));
  for (int i = 0; i < ng; i++) gt[i] = &r->gates[i];
  for (int i = 0; i < nz; i++) zt[i] = &r->noise[i];
  SeqIO d = {0};
  d.T = r->T, d.B = r->B, d.dtype = DT_F64;
  d.x = r->x.part[0], d.dy = r->dy.part[0], d.y = r->y.part[0], d.grad_x = r->gx.part[0];
  d.params = (const void **)part_planes(npp, pt, ppart), d.grad_params = part_planes(npp, gpt, ppart);
  d.h0 = (const void **)part_planes(nsp, h0, spart), d.dfinal = (const void **)part_planes(nsp, df, spart);
  d.final = part_planes(nsp, fin, spart), d.grad_h0 = part_planes(nsp, gh, spart);
  d.gates = part_planes(ng, gt, zero), d.noise = (const void **)part_planes(nz, zt, zero);
  d.lengths = r->lengths;
  memuse_reset_peak();
  size_t before = memuse_in_use();
  if (r->cf) chunkform_run_f64_lengths(r->cf, p, &d);
  else pipeline_run_f64_chunked(comp, &d, chunk_length(r->c, cli_chunk(&r->a->cell)));
  r->peak_bytes = memuse_peak() - before;
  free(d.params), free(d.grad_params), free(d.h0), free(d.dfinal), free(d.final), free(d.grad_h0), free(d.gates), free(d.noise);
  free(pt), free(gpt), free(ppart), free(spart), free(h0), free(df), free(fin), free(gh), free(gt), free(zt), free(zero);
  for (int i = 0; i < r->c->nstates; i++) {
    StateInfo *si = &r->c->states[i];
    if (si->param < 0) continue;
    int size = state_numel(si);
    for (int part = 0; part < (si->cplx ? 2 : 1); part++)
      for (int b = 0; b < r->B; b++)
        for (int j = 0; j < size; j++) r->gparams[si->param].part[part][j] += r->gh0[i].part[part][(int64_t)b * size + j];
  }
}

/* The file's metadata: the cell, its dims and options, and how it ran. */
static void set_meta(SftWriter *w, const RunData *r) {
  const Cell *c = r->c;
  char buf[1024];
  int len = 0;
  buf[0] = 0;
  for (int i = 0; i < c->ndims; i++)
    len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s=%ld", i ? "," : "", c->dims[i].name, c->dims[i].value);
  sft_set_meta(w, "cell", c->name);
  sft_set_meta(w, "dims", buf);
  len = 0;
  buf[0] = 0;
  for (int i = 0; i < c->noptions && len < (int)sizeof buf; i++) {
    const OptionInfo *o = &c->options[i];
    if (o->type == OPT_BOOL) len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s=%s", i ? "," : "", o->name, o->value ? "true" : "false");
    else len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s=%.17g", i ? "," : "", o->name, o->value);
  }
  sft_set_meta(w, "options", buf);
  sft_set_meta(w, "mode", c->mode == MODE_SCAN ? "scan" : "sequential");
  sft_set_meta(w, "backend", r->a->backend);
  sft_set_meta(w, "precision", r->a->precision);
  snprintf(buf, sizeof buf, "%d", r->T);
  sft_set_meta(w, "T", buf);
  snprintf(buf, sizeof buf, "%d", r->B);
  sft_set_meta(w, "B", buf);
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->a->seed);
  sft_set_meta(w, "seed", buf);
  sft_set_meta(w, "training", r->a->train ? "true" : "false");
  snprintf(buf, sizeof buf, "%zu", r->peak_bytes);
  sft_set_meta(w, "peak_bytes", buf);
  if (r->lengths) {
    size_t n = (size_t)r->B * 12 + 1;
    char *l = xmalloc(n);
    len = 0;
    l[0] = 0;
    for (int b = 0; b < r->B; b++) len += snprintf(l + len, n - (size_t)len, "%s%d", b ? "," : "", r->lengths[b]);
    sft_set_meta(w, "lengths", l);
    free(l);
  }
}

/* Every tensor, in the run's precision, to --out. 0 or 3. */
static int write_outputs(const RunData *r) {
  SftDtype dt = !strcmp(r->a->precision, "f32") ? SFT_F32 : SFT_F64;
  SftWriter *w = sft_writer_new();
  for (int i = 0; i < r->c->nparams; i++) {
    tensor_write(w, &r->params[i], dt);
    if (!r->c->params[i].buffer && !r->c->params[i].frozen) tensor_write(w, &r->gparams[i], dt);
  }
  tensor_write(w, &r->x, dt), tensor_write(w, &r->dy, dt), tensor_write(w, &r->y, dt), tensor_write(w, &r->gx, dt);
  for (int i = 0; i < r->c->nstates; i++) {
    tensor_write(w, &r->h0[i], dt), tensor_write(w, &r->dfinal[i], dt);
    tensor_write(w, &r->final[i], dt), tensor_write(w, &r->gh0[i], dt);
  }
  for (int i = 0; i < r->c->ngates; i++) tensor_write(w, &r->gates[i], dt);
  for (int i = 0; i < r->p->nnoise; i++) tensor_write(w, &r->noise[i], dt);
  if (r->lengths) {
    int32_t *l = xcalloc((size_t)r->B, sizeof(int32_t));
    for (int b = 0; b < r->B; b++) l[b] = r->lengths[b];
    int64_t shape[1] = {r->B};
    sft_add(w, "lengths", SFT_I32, 1, shape, l);
    free(l);
  }
  set_meta(w, r);
  char err[PATH_MAX + 512];
  int status = 0;
  /* the directories above the file (above a link's target, for a link) made as for every output */
  char *target = fsout_target(r->a->out, err, sizeof err);
  if (!target || fsout_make_parents(target, err, sizeof err) < 0 || sft_write(w, r->a->out, err, sizeof err) < 0) {
    diag_plain("%s", err);
    status = 3;
  }
  free(target);
  sft_writer_free(w);
  return status;
}

static void run_data_free(RunData *r) {
  Cell *c = r->c;
  for (int i = 0; r->params && i < c->nparams; i++) tensor_free(&r->params[i]), tensor_free(&r->gparams[i]);
  for (int i = 0; r->h0 && i < c->nstates; i++)
    tensor_free(&r->h0[i]), tensor_free(&r->dfinal[i]), tensor_free(&r->final[i]), tensor_free(&r->gh0[i]);
  for (int i = 0; r->gates && i < c->ngates; i++) tensor_free(&r->gates[i]);
  for (int i = 0; r->noise && i < r->p->nnoise; i++) tensor_free(&r->noise[i]);
  tensor_free(&r->x), tensor_free(&r->dy), tensor_free(&r->y), tensor_free(&r->gx);
  free(r->params), free(r->gparams), free(r->h0), free(r->dfinal), free(r->final), free(r->gh0), free(r->gates);
  free(r->noise), free(r->known), free(r->lengths);
}

/* The back end by name, and a precision it runs. 0 or the usage error's status. */
static int choose_backend(const RunArgs *a, const Backend **be) {
  *be = backend_find(a->backend);
  CHECK(*be); /* parse_run_args took only a known name */
  if ((*be)->dtype == DT_F32 && !strcmp(a->precision, "f64"))
    return cli_usage_error("--precision f64 needs --backend interp (the %s back end runs float32)", a->backend);
  return 0;
}

/* cellc run: arguments -> inputs -> check -> compile -> tensors (given or drawn) -> forward and
 * backward -> every tensor written. */
int cmd_run(int argc, char **argv) {
  RunArgs a = {0};
  const Backend *be;
  int rc = parse_run_args(argc, argv, &a);
  if (!rc) rc = choose_backend(&a, &be);
  if (rc) return rc;
  SftFile in = {0};
  if (a.inputs && (rc = read_inputs(&a, &in))) return sft_free(&in), rc;
  Arena arena = {0};
  RunData r = {.a = &a, .arena = &arena, .in = a.inputs ? &in : NULL, .T = a.T, .B = a.B};
  Compiled *comp = NULL;
  a.cell.runs_chunked = true;
  r.c = cli_compile_cell(&arena, &a.cell, a.train);
  if (!r.c) rc = 1;
  char err[512];
  PipelineOptions po = {.backend = be, .training = a.train, .gates = true, .f32 = !strcmp(a.precision, "f32")};
  /* in chunked mode the program gives the tensors' layout only: on a CUDA back end, whose kernels
     need not take the whole cell's state per row, the interpreter's (the same layout) */
  PipelineOptions lo = po;
  if (!rc && r.c->chunked && be->device != DEVICE_CPU) lo.backend = backend_find("interp");
  if (!rc && !(comp = pipeline_compile(r.c, &lo, err, sizeof err))) {
    diag_plain("%s", err);
    rc = 3;
  }
  /* the program gives the tensors' layout; in chunked mode the chunked form runs on them */
  if (!rc && r.c->chunked && !(r.cf = chunkform_compile(r.c, &po, cli_chunk(&a.cell), err, sizeof err))) {
    diag_plain("%s", err);
    rc = 3;
  }
  if (!rc) r.p = comp->p, rc = check_size(&r);
  if (!rc) {
    shape_tensors(&r);
    rc = take_params(&r);
    if (!rc && tensor_take(&r.x, r.in, a.inputs) == 0) fill_normal(&r.x, a.seed, "x");
    if (!rc && tensor_take(&r.dy, r.in, a.inputs) == 0) fill_normal(&r.dy, a.seed, "dy");
    if (!rc) rc = take_states(&r);
    if (!rc) rc = take_noise(&r);
    if (!rc) rc = take_lengths(&r);
    if (!rc) rc = check_unknown_inputs(&r);
    if (!rc) run_program(&r, comp);
    if (!rc) rc = write_outputs(&r);
    run_data_free(&r);
  }
  chunkform_free(r.cf);
  pipeline_release(comp);
  if (r.c) cell_free(r.c);
  arena_free(&arena);
  if (a.inputs) sft_free(&in);
  return rc;
}
