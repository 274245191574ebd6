/* cmd_run.c: `cellc run` (one cell on data, forward and backward, every
 * tensor of the CLI spec's table written out) and `cellc derive`. */
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
  int64_t shape[4];  /* as written in the file (complex: trailing 2) */
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
  bool has_T, has_B;
  uint64_t seed;
  const char *inputs, *out, *backend, *precision;
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
                 !strcmp(f, "--out") || !strcmp(f, "--backend") || !strcmp(f, "--precision");
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
    } else if (!strcmp(f, "--train")) a->train = true;
    else if (f[0] == '-' && f[1]) return cli_usage_error("unknown flag '%s'", f);
    else if (!a->cell.file) a->cell.file = f;
    else return cli_usage_error("unexpected argument '%s'", f);
  }
  if (!a->cell.file) return cli_usage_error("%s", "run needs a .cell file");
  if (!a->out) return cli_usage_error("%s", "run needs --out OUT.safetensors");
  if (!a->precision) a->precision = "f32";
  return 0;
}

/* Loads the module and checks the chosen cell; NULL after a diagnostic. */
static Cell *compile_cell(Arena *arena, const CellArgs *a, bool training) {
  Module *m = check_load(arena, a->file, cli_stdlib_dir());
  if (!m) return NULL;
  const Src *src = NULL;
  const CellAst *ast = check_find_cell(m, a->cell, &src);
  if (!ast) {
    if (a->cell) diag_plain("no cell named '%s' in %s", a->cell, a->file);
    else diag_plain("%s defines no cell", a->file);
    return NULL;
  }
  for (int i = 0; i < a->nsets; i++) {
    bool found = false;
    for (int o = 0; o < ast->noptions; o++)
      if (!strcmp(ast->options[o].name, a->sets[i].name)) found = true;
    if (!found) {
      const char *cands[64];
      int nc = 0;
      for (int o = 0; o < ast->noptions && nc < 64; o++) cands[nc++] = ast->options[o].name;
      const char *near = diag_nearest(a->sets[i].name, cands, nc);
      if (near) diag_plain("--set %s: cell '%s' has no option '%s'; did you mean '%s'?", a->sets[i].name, ast->name, a->sets[i].name, near);
      else diag_plain("--set %s: cell '%s' has no option '%s'", a->sets[i].name, ast->name, a->sets[i].name);
      return NULL;
    }
  }
  CheckOptions o = {0};
  o.sets = a->sets;
  o.nsets = a->nsets;
  o.dims = a->dims;
  o.ndims = a->ndims;
  o.need_bound = true;
  o.training = training;
  o.force_scan = a->mode && !strcmp(a->mode, "scan");
  o.force_sequential = a->mode && !strcmp(a->mode, "sequential");
  return check_cell(arena, src, ast, &o);
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
  for (int s = 0; ast && s < ast->nbody && a.ndims < 60; s++) {
    const Stmt *st = ast->body[s];
    const char *name = NULL;
    if (st->kind == ST_DIM && !st->dim_value) name = st->name;
    if (st->kind == ST_INPUT && st->shape && st->shape->n == 1 && st->shape->dims[0]->kind == DX_NAME)
      name = st->shape->dims[0]->name;
    bool given = false;
    for (int i = 0; name && i < a.ndims; i++) given = given || !strcmp(a.dims[i].name, name);
    if (name && !given) a.dims[a.ndims++] = (Binding){name, "3"};
  }
  Cell *c = compile_cell(&arena, &a, false);
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

int cmd_run(int argc, char **argv) {
  RunArgs a = {0};
  int rc = parse_run_args(argc, argv, &a);
  if (rc) return rc;
  const Backend *be = backend_find(a.backend);
  CHECK(be); /* parse_run_args checked the name */
  if (be->dtype == DT_F32 && !strcmp(a.precision, "f64"))
    return cli_usage_error("--precision f64 needs --backend interp (the %s back end runs float32)", a.backend);
  bool f32 = !strcmp(a.precision, "f32");
  SftFile in = {0};
  bool have_in = false;
  char err[512];
  if (a.inputs) {
    if (sft_read(a.inputs, &in, err, sizeof err) < 0) {
      diag_plain("%s", err);
      return 1;
    }
    have_in = true;
    const SftTensor *x = sft_find(&in, "x");
    if (x && x->ndim == 3) {
      if ((a.has_T && x->shape[0] != a.T) || (a.has_B && x->shape[1] != a.B)) {
        diag_plain("%s: x is [%lld, %lld, ...] but --T %d --B %d were given", a.inputs, (long long)x->shape[0],
                   (long long)x->shape[1], a.T, a.B);
        sft_free(&in);
        return 1;
      }
      if (x->shape[0] < 1 || x->shape[1] < 1) {
        diag_plain("%s: x must have at least one step and one row", a.inputs);
        sft_free(&in);
        return 1;
      }
      a.T = (int)x->shape[0];
      a.B = (int)x->shape[1];
    }
  }
  Arena arena = {0};
  Cell *c = compile_cell(&arena, &a.cell, a.train);
  if (!c) {
    if (have_in) sft_free(&in);
    arena_free(&arena);
    return 1;
  }
  PipelineOptions po = {0};
  po.backend = be, po.training = a.train, po.gates = true, po.f32 = f32;
  Compiled *comp = pipeline_compile(c, &po, err, sizeof err);
  if (!comp) {
    diag_plain("%s", err);
    cell_free(c);
    arena_free(&arena);
    if (have_in) sft_free(&in);
    return 3;
  }
  Program *p = comp->p;
  int T = a.T, B = a.B;
  {
    /* what the run holds per row, roughly: inputs, outputs, their gradients, and (interp) every value */
    double per_row = 4.0 * (p->x_size + p->output_size) + 4.0 * p->g.nnodes;
    for (int i = 0; i < p->nsparts; i++) per_row += 4.0 * p->sparts[i].size;
    double bytes = per_row * 8.0 * T * B;
    if (bytes > 64.0 * (1 << 30)) {
      diag_plain("--T %d --B %d: the run would need about %.0f GiB; use a smaller T or B", T, B, bytes / (1 << 30));
      pipeline_release(comp);
      cell_free(c);
      arena_free(&arena);
      if (have_in) sft_free(&in);
      return 1;
    }
  }
  const SftFile *IN = have_in ? &in : NULL;
  int status = 0;
  int np = c->nparams, ns = c->nstates, ng = c->ngates;
  Tensor *params = xcalloc((size_t)np + 1, sizeof(Tensor));
  Tensor *h0 = xcalloc((size_t)ns + 1, sizeof(Tensor)), *dfinal = xcalloc((size_t)ns + 1, sizeof(Tensor));
  Tensor *final = xcalloc((size_t)ns + 1, sizeof(Tensor)), *gh0 = xcalloc((size_t)ns + 1, sizeof(Tensor));
  Tensor *gparams = xcalloc((size_t)np + 1, sizeof(Tensor)), *gates = xcalloc((size_t)ng + 1, sizeof(Tensor));
  Tensor *noise = xcalloc((size_t)p->nnoise + 1, sizeof(Tensor));
  Tensor x, dy, y, gx;
  int64_t lead2[2] = {T, B}, lead1[1] = {B}, shape[4];
  int64_t xs[3] = {T, B, p->x_size}, ys[3] = {T, B, p->output_size};
  tensor_init(&x, "x", 3, xs, false);
  tensor_init(&dy, "dy", 3, ys, false);
  tensor_init(&y, "y", 3, ys, false);
  tensor_init(&gx, "grad.x", 3, xs, false);
  /* every name the input file may hold */
  const char **known = xcalloc((size_t)(4 * np + 6 * ns + 2 * ng + p->nnoise + 8), sizeof(char *));
  int nknown = 0;
  known[nknown++] = "x", known[nknown++] = "dy", known[nknown++] = "y", known[nknown++] = "grad.x";
  /* params: given, or drawn from their initializers in declaration order */
  for (int i = 0; i < np && !status; i++) {
    ParamInfo *pi = &c->params[i];
    int64_t ps[2] = {pi->n[0], pi->n[1]};
    tensor_init(&params[i], arena_printf(&arena, "param.%s", pi->name), pi->rank, ps, pi->cplx);
    tensor_init(&gparams[i], arena_printf(&arena, "grad.param.%s", pi->name), pi->rank, ps, pi->cplx);
    known[nknown++] = params[i].name, known[nknown++] = gparams[i].name;
    int r = tensor_take(&params[i], IN, a.inputs);
    if (r < 0) status = 1;
    if (r != 0) continue;
    Rng rng;
    rng_seed(&rng, a.seed, rng_stream_of(params[i].name));
    int64_t numel = params[i].numel;
    double *buf = xmalloc(sizeof(double) * (size_t)(2 * numel + 1));
    const double *ref = pi->ref >= 0 ? params[pi->ref].part[0] : NULL;
    int H = c->states[0].rank ? c->states[0].n[0] : 1;
    if (init_fill(pi->init, pi->args, pi->ninit_args, ref, pi->rank, pi->n, pi->cplx, H, &rng, buf, err, sizeof err) < 0) {
      diag_error(pi->init_loc, "cannot initialize param '%s': %s", pi->name, err);
      status = 1;
    }
    for (int64_t j = 0; j < numel; j++)
      for (int part = 0; part < (pi->cplx ? 2 : 1); part++) params[i].part[part][j] = buf[j * (pi->cplx ? 2 : 1) + part];
    free(buf);
  }
  if (!status && tensor_take(&x, IN, a.inputs) == 0) fill_normal(&x, a.seed, "x");
  if (!status && tensor_take(&dy, IN, a.inputs) == 0) fill_normal(&dy, a.seed, "dy");
  for (int i = 0; i < ns && !status; i++) {
    StateInfo *si = &c->states[i];
    int nd = lead_shape(shape, 1, lead1, si->rank, si->n);
    tensor_init(&h0[i], arena_printf(&arena, "h0.%s", si->name), nd, shape, si->cplx);
    tensor_init(&dfinal[i], arena_printf(&arena, "dfinal.%s", si->name), nd, shape, si->cplx);
    tensor_init(&final[i], arena_printf(&arena, "final.%s", si->name), nd, shape, si->cplx);
    tensor_init(&gh0[i], arena_printf(&arena, "grad.h0.%s", si->name), nd, shape, si->cplx);
    known[nknown++] = h0[i].name, known[nknown++] = dfinal[i].name;
    known[nknown++] = final[i].name, known[nknown++] = gh0[i].name;
    int r = tensor_take(&h0[i], IN, a.inputs);
    if (r < 0) status = 1;
    else if (r == 0 && si->init) {
      /* the declared initial state, the same for every row */
      int size = si->rank ? si->n[0] : 1;
      double *v = xcalloc((size_t)(2 * size + 1), sizeof(double));
      if (si->param >= 0) {
        for (int part = 0; part < (si->cplx ? 2 : 1); part++)
          for (int j = 0; j < size; j++) v[j * (si->cplx ? 2 : 1) + part] = params[si->param].part[part][j];
      } else {
        Rng rng;
        rng_seed(&rng, a.seed, rng_stream_of(h0[i].name));
        if (init_fill(si->init, si->args, si->ninit_args, NULL, si->rank, si->n, si->cplx, size, &rng, v, err, sizeof err) < 0) {
          diag_error(si->init_loc, "cannot initialize state '%s': %s", si->name, err);
          status = 1;
        }
      }
      for (int b = 0; b < B; b++)
        for (int part = 0; part < (si->cplx ? 2 : 1); part++)
          for (int j = 0; j < size; j++) h0[i].part[part][(int64_t)b * size + j] = v[j * (si->cplx ? 2 : 1) + part];
      free(v);
    }
    if (!status && tensor_take(&dfinal[i], IN, a.inputs) < 0) status = 1;
  }
  for (int i = 0; i < ng; i++) {
    Node *gn = graph_node(&p->g, p->gates[i].node);
    int nd = lead_shape(shape, 2, lead2, gn->rank, gn->n);
    tensor_init(&gates[i], arena_printf(&arena, "gate.%s", c->gates[i].name), nd, shape, false);
    known[nknown++] = gates[i].name;
  }
  for (int i = 0; i < p->nnoise && !status; i++) {
    int64_t s3[3] = {T, B, p->noise_sizes[i]};
    tensor_init(&noise[i], arena_printf(&arena, "noise.%d", i), 3, s3, false);
    known[nknown++] = noise[i].name;
    int r = tensor_take(&noise[i], IN, a.inputs);
    if (r < 0) status = 1;
    else if (r == 0) {
      Rng rng;
      rng_seed(&rng, a.seed, rng_stream_of(noise[i].name));
      for (int64_t j = 0; j < noise[i].numel; j++) noise[i].part[0][j] = rng_uniform_open(&rng);
    } else {
      for (int64_t j = 0; j < noise[i].numel && !status; j++)
        if (!(noise[i].part[0][j] > 0 && noise[i].part[0][j] < 1)) {
          diag_plain("%s: noise.%d must lie in (0, 1)", a.inputs, i);
          status = 1;
        }
    }
  }
  /* an input tensor the run does not know is a mistake worth naming */
  for (int i = 0; IN && !status && i < in.n; i++) {
    bool ok = false;
    for (int j = 0; j < nknown; j++)
      if (!strcmp(known[j], in.tensors[i].name)) ok = true;
    if (!ok && !strncmp(in.tensors[i].name, "noise.", 6) && !a.train) {
      diag_plain("%s: tensor '%s' is gumbel_sigmoid noise, used only in training mode: add --train", a.inputs, in.tensors[i].name);
      status = 1;
    } else if (!ok) {
      const char *near = diag_nearest(in.tensors[i].name, known, nknown);
      if (near) diag_plain("%s: unexpected tensor '%s' (cell '%s' has no such input); did you mean '%s'?", a.inputs, in.tensors[i].name, c->name, near);
      else diag_plain("%s: unexpected tensor '%s' (cell '%s' has no such input)", a.inputs, in.tensors[i].name, c->name);
      status = 1;
    }
  }
  if (!status) {
    SeqIO d = {0};
    d.T = T, d.B = B, d.dtype = DT_F64;
    int npp = p->npparts, nsp = p->nsparts;
    const double **pp = xcalloc((size_t)npp + 1, sizeof(double *));
    double **gpp = xcalloc((size_t)npp + 1, sizeof(double *));
    for (int i = 0; i < npp; i++) {
      pp[i] = params[p->pparts[i].param].part[p->pparts[i].part];
      gpp[i] = gparams[p->pparts[i].param].part[p->pparts[i].part];
    }
    const double **sh0 = xcalloc((size_t)nsp + 1, sizeof(double *)), **sdf = xcalloc((size_t)nsp + 1, sizeof(double *));
    double **sfin = xcalloc((size_t)nsp + 1, sizeof(double *)), **sgh = xcalloc((size_t)nsp + 1, sizeof(double *));
    for (int i = 0; i < nsp; i++) {
      int s = p->sparts[i].state, part = p->sparts[i].part;
      sh0[i] = h0[s].part[part], sdf[i] = dfinal[s].part[part];
      sfin[i] = final[s].part[part], sgh[i] = gh0[s].part[part];
    }
    double **sg = xcalloc((size_t)ng + 1, sizeof(double *));
    for (int i = 0; i < ng; i++) sg[i] = gates[i].part[0];
    const double **sn = xcalloc((size_t)p->nnoise + 1, sizeof(double *));
    for (int i = 0; i < p->nnoise; i++) sn[i] = noise[i].part[0];
    d.x = x.part[0], d.params = (const void **)pp, d.h0 = (const void **)sh0, d.dy = dy.part[0];
    d.dfinal = (const void **)sdf, d.noise = (const void **)sn;
    d.y = y.part[0], d.final = (void **)sfin, d.gates = (void **)sg, d.grad_params = (void **)gpp;
    d.grad_x = gx.part[0], d.grad_h0 = (void **)sgh;
    pipeline_run_f64(comp, &d);
    /* a learned initial state: its param's gradient sums grad.h0 over the batch */
    for (int i = 0; i < ns; i++) {
      StateInfo *si = &c->states[i];
      if (si->param < 0) continue;
      int size = si->rank ? si->n[0] : 1;
      for (int part = 0; part < (si->cplx ? 2 : 1); part++)
        for (int b = 0; b < B; b++)
          for (int j = 0; j < size; j++) gparams[si->param].part[part][j] += gh0[i].part[part][(int64_t)b * size + j];
    }
    free(pp), free(gpp), free(sh0), free(sdf), free(sfin), free(sgh), free(sg), free(sn);
    /* the outputs, in the run's precision */
    SftDtype dt = f32 ? SFT_F32 : SFT_F64;
    SftWriter *w = sft_writer_new();
    for (int i = 0; i < np; i++) tensor_write(w, &params[i], dt), tensor_write(w, &gparams[i], dt);
    tensor_write(w, &x, dt), tensor_write(w, &dy, dt), tensor_write(w, &y, dt), tensor_write(w, &gx, dt);
    for (int i = 0; i < ns; i++) {
      tensor_write(w, &h0[i], dt), tensor_write(w, &dfinal[i], dt);
      tensor_write(w, &final[i], dt), tensor_write(w, &gh0[i], dt);
    }
    for (int i = 0; i < ng; i++) tensor_write(w, &gates[i], dt);
    for (int i = 0; i < p->nnoise; i++) tensor_write(w, &noise[i], dt);
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
      OptionInfo *o = &c->options[i];
      if (o->type == OPT_BOOL) len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s=%s", i ? "," : "", o->name, o->value ? "true" : "false");
      else len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s=%.17g", i ? "," : "", o->name, o->value);
    }
    sft_set_meta(w, "options", buf);
    sft_set_meta(w, "mode", c->mode == MODE_SCAN ? "scan" : "sequential");
    sft_set_meta(w, "backend", a.backend);
    sft_set_meta(w, "precision", a.precision);
    snprintf(buf, sizeof buf, "%d", T);
    sft_set_meta(w, "T", buf);
    snprintf(buf, sizeof buf, "%d", B);
    sft_set_meta(w, "B", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)a.seed);
    sft_set_meta(w, "seed", buf);
    sft_set_meta(w, "training", a.train ? "true" : "false");
    if (sft_write(w, a.out, err, sizeof err) < 0) {
      diag_plain("%s", err);
      status = 3;
    }
    sft_writer_free(w);
  }
  for (int i = 0; i < np; i++) tensor_free(&params[i]), tensor_free(&gparams[i]);
  for (int i = 0; i < ns; i++) tensor_free(&h0[i]), tensor_free(&dfinal[i]), tensor_free(&final[i]), tensor_free(&gh0[i]);
  for (int i = 0; i < ng; i++) tensor_free(&gates[i]);
  for (int i = 0; i < p->nnoise; i++) tensor_free(&noise[i]);
  tensor_free(&x), tensor_free(&dy), tensor_free(&y), tensor_free(&gx);
  free(params), free(gparams), free(h0), free(dfinal), free(final), free(gh0), free(gates), free(noise), free(known);
  pipeline_release(comp);
  cell_free(c);
  arena_free(&arena);
  if (have_in) sft_free(&in);
  return status;
}
