/* chunkrun.c: a cell in the chunked form (pipeline.h, "The chunked form"): two programs of the
 * back end around the chunk op (compiler/ir/chunkop.c) of each chunked state:
 *   in:  x -> the chunk op's inputs per row (q, k, v, log a per head)
 *   the chunk op, per batch row and head, over the whole sequence: the reads and the final state
 *   out: [x, the reads] -> the cell's output
 * Both programs carry every state of the cell but the chunked ones (their parts a subsequence of
 * the cell's), and the cell's params, gates and noise; the histories run in both (the same
 * values), their final states and dfinal counted in `out` only. The backward runs out, the chunk ops' backward,
 * in; the gradients of the two programs are added. */
#include "pipeline.h"

#include <string.h>

#include "cpu.h"
#include "lower.h"

struct ChunkForm {
  Compiled *in, *out;
  Work *win, *wout;
  int L, nl;
  ChunkLayout lay[CHUNK_LAYOUT_MAX];
  int D;                       /* the cell's input size */
  int threads;                 /* the chunk ops of the heads and batch rows run on so many threads */
  int *full_of;                /* per state: its first part among the whole cell's (the SeqIO's) */
};

static Compiled *compile_part(Cell *cell, const PipelineOptions *o, LowerPart part, char *err, size_t errlen) {
  const Backend *be = o->backend;
  BackendOptions bo = {0};
  bo.scan = be->scans, bo.gates = o->gates, bo.f32 = o->f32, bo.threads = o->threads, bo.portable = o->portable;
  Program *p = lower_cell_part(cell, o->training, bo.scan, part);
  ad_differentiate(p);
  const char *why = be->supports(p, &bo);
  Compiled *c = why ? NULL : be->compile(p, &bo, err, errlen);
  if (why) snprintf(err, errlen, "the %s back end cannot run cell '%s' in chunked mode: %s", be->name, cell->name, why);
  if (!c) {
    program_free(p);
    return NULL;
  }
  p->cell = NULL;
  return c;
}

ChunkForm *chunkform_compile(Cell *cell, const PipelineOptions *o, int L, char *err, size_t errlen) {
  int st;
  char why[320];
  if (chunk_mode_blocker(cell, &st, why, (int)sizeof why)) {
    snprintf(err, errlen, "cannot run cell '%s' in chunked mode: %s", cell->name, why);
    return NULL;
  }
  if (o->backend->device != DEVICE_CPU) {
    snprintf(err, errlen, "the %s back end does not run the chunked form yet (interp and cpu do: docs/architecture.md)", o->backend->name);
    return NULL;
  }
  ChunkForm *f = xcalloc(1, sizeof *f);
  f->L = L > 0 ? L : CHUNK_DEFAULT;
  f->D = cell->input_size;
  /* the cpu's threads (PipelineOptions.threads, 0: CELLC_THREADS or every core, as the back end);
     the interpreter is the float64 reference: one thread; OpenBLAS runs single-threaded inside) */
  f->threads = o->backend->dtype == DT_F64 ? 1 : o->threads > 0 ? o->threads : support_threads();
  f->nl = lower_chunk_layout(cell, f->lay, CHUNK_LAYOUT_MAX);
  f->full_of = xcalloc((size_t)cell->nstates + 1, sizeof(int));
  for (int i = 0, q = 0; i < cell->nstates; q += cell->states[i].cplx ? 2 : 1, i++) f->full_of[i] = q;
  f->in = compile_part(cell, o, LOWER_CHUNK_IN, err, errlen);
  f->out = f->in ? compile_part(cell, o, LOWER_CHUNK_OUT, err, errlen) : NULL;
  if (!f->out) {
    chunkform_free(f);
    return NULL;
  }
  f->win = f->in->be->work_new(f->in), f->wout = f->out->be->work_new(f->out);
  return f;
}

void chunkform_free(ChunkForm *f) {
  if (!f) return;
  for (int i = 0; i < 2; i++) {
    Compiled *c = i ? f->out : f->in;
    Work *w = i ? f->wout : f->win;
    if (!c) continue;
    if (w) c->be->work_free(w);
    Program *p = c->p;
    c->be->free(c);
    program_free(p);
  }
  free(f->full_of);
  free(f);
}

int chunkform_length(const ChunkForm *f) { return f->L; }

/* One head of one batch row: the state's [K, V] from (or into) its layout in a state part's row
 * ([V, K] per head where the key axis is the last). */
static void state_get(const ChunkLayout *l, const double *row, int h, double *kv) {
  const double *s = row + (size_t)h * (size_t)l->K * (size_t)l->V;
  for (int k = 0; k < l->K; k++)
    for (int v = 0; v < l->V; v++) kv[(size_t)k * l->V + v] = l->key_last ? s[(size_t)v * l->K + k] : s[(size_t)k * l->V + v];
}

static void state_put(const ChunkLayout *l, double *row, int h, const double *kv) {
  double *s = row + (size_t)h * (size_t)l->K * (size_t)l->V;
  for (int k = 0; k < l->K; k++)
    for (int v = 0; v < l->V; v++) s[l->key_last ? (size_t)v * l->K + k : (size_t)k * l->V + v] = kv[(size_t)k * l->V + v];
}

/* One head of one batch row as the chunk op's sequence, contiguous. A step with M terms and R reads
 * is E = M + R - 1 sub-steps: sub-step m < M adds term m (the decay on sub-step 0 only, log a = 0
 * after), the read r is taken at sub-step M - 1 + r (the reads after M - 1 add nothing): the op's
 * one term and one read a sub-step give the cell's step, in chunks of L E sub-steps. */
typedef struct Sub {
  ChunkOp c;
  int E, M, R, w;
  double *q, *k, *v, *la;      /* [T E, K], [T E, K], [T E, V], [T E, w] */
} Sub;

static Sub sub_new(const ChunkForm *f, const ChunkLayout *l, int T) {
  Sub s = {.M = l->nterms, .R = l->nreads, .w = l->per_key ? l->K : 1};
  s.E = s.M + s.R - 1;
  size_t n = (size_t)T * (size_t)s.E;
  s.q = xcalloc(n * (size_t)l->K + 1, sizeof(double)), s.k = xcalloc(n * (size_t)l->K + 1, sizeof(double));
  s.v = xcalloc(n * (size_t)l->V + 1, sizeof(double)), s.la = xcalloc(n * (size_t)s.w + 1, sizeof(double));
  s.c = (ChunkOp){T * s.E, l->K, l->V, f->L * s.E, l->per_key, s.q, s.k, s.v, s.la, l->K, l->K, l->V, s.w};
  return s;
}

static void sub_free(Sub *s) { free(s->q), free(s->k), free(s->v), free(s->la); }

/* Row t of P_in's output for batch row b: its chunked state's vectors of head h */
static const double *in_row(const double *yin, int nin, int B, int t, int b) { return yin + ((size_t)t * (size_t)B + (size_t)b) * (size_t)nin; }

/* s's sequence from P_in's rows (yin), or (back) P_in's rows' gradient from s's (dyin) */
static void sub_move(const ChunkLayout *l, Sub *s, const double *yin, double *dyin, int nin, int T, int B, int b, int h) {
  int K = l->K, V = l->V, w = s->w, E = s->E;
  for (int t = 0; t < T; t++) {
    double *row = (double *)(yin ? in_row(yin, nin, B, t, b) : in_row(dyin, nin, B, t, b));
    for (int r = 0; r < s->R; r++) {
      double *x = row + chunk_q_off(l, r) + h * K, *y = s->q + ((size_t)t * E + (size_t)(s->M - 1 + r)) * K;
      for (int i = 0; i < K; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
    }
    for (int m = 0; m < s->M; m++) {
      double *x = row + chunk_k_off(l, m) + h * K, *y = s->k + ((size_t)t * E + (size_t)m) * K;
      for (int i = 0; i < K; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
      x = row + chunk_v_off(l, m) + h * V, y = s->v + ((size_t)t * E + (size_t)m) * V;
      for (int i = 0; i < V; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
    }
    double *x = row + chunk_la_off(l) + h * w, *y = s->la + (size_t)t * E * w; /* sub-step 0's */
    for (int i = 0; i < w; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
  }
}

/* ---- a float32 back end's buffers: float32 copies of a float64 SeqIO's ---- */

typedef struct Mirror {
  SeqIO s;                    /* float32 */
  const Program *p;
  size_t rows, *pn, *sn, *gn, *zn;
} Mirror;

static float *f32_of(const void *src, size_t n) {
  float *f = memuse_aligned(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; src && i < n; i++) f[i] = (float)((const double *)src)[i];
  return f;
}

static void f64_into(void *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
}

static void **f32_parts_of(const void *const *src, int n, const size_t *numel) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = f32_of(src ? src[i] : NULL, numel[i]);
  return v;
}

static void f32_parts_free(void **v, int n) {
  for (int i = 0; v && i < n; i++) memuse_free(v[i]);
  free(v);
}

/* The forward's inputs copied, every other buffer allocated. */
static Mirror *mirror_new(const Program *p, const SeqIO *d) {
  Mirror *m = xcalloc(1, sizeof *m);
  int np = p->npparts, ns = p->nsparts, ng = p->ngates, nz = p->nnoise;
  m->p = p, m->rows = (size_t)d->T * (size_t)d->B;
  m->pn = xcalloc((size_t)np + 1, sizeof(size_t)), m->sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  m->gn = xcalloc((size_t)ng + 1, sizeof(size_t)), m->zn = xcalloc((size_t)nz + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) m->pn[i] = (size_t)p->pparts[i].numel;
  for (int i = 0; i < ns; i++) m->sn[i] = (size_t)d->B * (size_t)p->sparts[i].size;
  for (int i = 0; i < ng; i++) m->gn[i] = m->rows * (size_t)node_numel(&p->g.nodes[p->gates[i].node]);
  for (int i = 0; i < nz; i++) m->zn[i] = m->rows * (size_t)p->noise_sizes[i];
  SeqIO *s = &m->s;
  s->T = d->T, s->B = d->B, s->dtype = DT_F32;
  s->x = f32_of(d->x, m->rows * (size_t)p->x_size), s->grad_x = f32_of(NULL, m->rows * (size_t)p->x_size);
  s->y = f32_of(NULL, m->rows * (size_t)p->output_size), s->dy = f32_of(NULL, m->rows * (size_t)p->output_size);
  s->params = (const void **)f32_parts_of(d->params, np, m->pn), s->grad_params = f32_parts_of(NULL, np, m->pn);
  s->h0 = (const void **)f32_parts_of(d->h0, ns, m->sn), s->grad_h0 = f32_parts_of(NULL, ns, m->sn);
  s->final = f32_parts_of(NULL, ns, m->sn), s->dfinal = (const void **)f32_parts_of(NULL, ns, m->sn);
  s->noise = d->noise ? (const void **)f32_parts_of(d->noise, nz, m->zn) : NULL;
  s->gates = d->gates ? f32_parts_of(NULL, ng, m->gn) : NULL;
  return m;
}

static void mirror_free(Mirror *m) {
  if (!m) return;
  const Program *p = m->p;
  int np = p->npparts, ns = p->nsparts, ng = p->ngates, nz = p->nnoise;
  SeqIO *s = &m->s;
  memuse_free((void *)s->x), memuse_free(s->grad_x), memuse_free(s->y), memuse_free((void *)s->dy);
  f32_parts_free((void **)s->params, np), f32_parts_free(s->grad_params, np);
  f32_parts_free((void **)s->h0, ns), f32_parts_free(s->grad_h0, ns), f32_parts_free(s->final, ns);
  f32_parts_free((void **)s->dfinal, ns), f32_parts_free((void **)s->noise, s->noise ? nz : 0);
  f32_parts_free(s->gates, s->gates ? ng : 0);
  free(m->pn), free(m->sn), free(m->gn), free(m->zn);
  free(m);
}

/* c's forward over d (float64), through a mirror for a float32 back end (*m, kept for the backward) */
static void prog_forward(Compiled *c, Work *w, const SeqIO *d, Mirror **m) {
  *m = NULL;
  if (c->be->dtype == DT_F64) {
    c->be->forward(c, w, d);
    return;
  }
  const Program *p = c->p;
  Mirror *mm = *m = mirror_new(p, d);
  c->be->forward(c, w, &mm->s);
  f64_into(d->y, mm->s.y, mm->rows * (size_t)p->output_size);
  for (int i = 0; i < p->nsparts; i++) f64_into(d->final[i], mm->s.final[i], mm->sn[i]);
  for (int i = 0; d->gates && i < p->ngates; i++) f64_into(d->gates[i], mm->s.gates[i], mm->gn[i]);
}

static void prog_backward(Compiled *c, Work *w, const SeqIO *d, Mirror *m) {
  if (c->be->dtype == DT_F64) {
    c->be->backward(c, w, d);
    return;
  }
  const Program *p = c->p;
  SeqIO *s = &m->s;
  for (size_t i = 0; i < m->rows * (size_t)p->output_size; i++) ((float *)s->dy)[i] = (float)((const double *)d->dy)[i];
  for (int q = 0; q < p->nsparts; q++)
    for (size_t i = 0; i < m->sn[q]; i++) ((float *)s->dfinal[q])[i] = (float)((const double *)d->dfinal[q])[i];
  c->be->backward(c, w, s);
  f64_into(d->grad_x, s->grad_x, m->rows * (size_t)p->x_size);
  for (int i = 0; i < p->npparts; i++) f64_into(d->grad_params[i], s->grad_params[i], m->pn[i]);
  for (int i = 0; i < p->nsparts; i++) f64_into(d->grad_h0[i], s->grad_h0[i], m->sn[i]);
  mirror_free(m);
}

/* ---- the chunk op: the float64 reference for a float64 back end, the cpu's float32 one (its
 * products through sgemm) for a float32 back end, on float32 copies of one head's rows ---- */

static float *rows32(const double *x, int T, int w, int ld) {
  float *f = xmalloc(sizeof(float) * ((size_t)T * (size_t)w + 1));
  for (int t = 0; t < T; t++)
    for (int i = 0; i < w; i++) f[(size_t)t * w + i] = (float)x[(size_t)t * (size_t)ld + (size_t)i];
  return f;
}

static void rows64(double *x, const float *f, int T, int w, int ld) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < w; i++) x[(size_t)t * (size_t)ld + (size_t)i] = f[(size_t)t * w + i];
}

typedef struct Op32 {
  ChunkOpF32 c;
  float *q, *k, *v, *la;
} Op32;

static Op32 op32(const ChunkOp *c) {
  int w = c->per_key ? c->K : 1;
  Op32 o;
  o.q = rows32(c->q, c->T, c->K, c->ldq), o.k = rows32(c->k, c->T, c->K, c->ldk);
  o.v = rows32(c->v, c->T, c->V, c->ldv), o.la = rows32(c->la, c->T, w, c->ldla);
  o.c = (ChunkOpF32){c->T, c->K, c->V, c->L, c->per_key, o.q, o.k, o.v, o.la, c->K, c->K, c->V, w};
  return o;
}

static void op32_free(Op32 *o) { free(o->q), free(o->k), free(o->v), free(o->la); }

static void op_forward(bool f32, const ChunkOp *c, const double *s0, double *o, int ldo, double *s1) {
  if (!f32) {
    chunkop_forward(c, s0, o, ldo, s1);
    return;
  }
  size_t kv = (size_t)c->K * (size_t)c->V;
  Op32 p = op32(c);
  float *a0 = rows32(s0, 1, (int)kv, 0), *a1 = xmalloc(sizeof(float) * kv + 1), *o32 = xmalloc(sizeof(float) * ((size_t)c->T * c->V + 1));
  cpu_chunkop_forward(&p.c, a0, o32, c->V, a1);
  rows64(o, o32, c->T, c->V, ldo), rows64(s1, a1, 1, (int)kv, 0);
  free(a0), free(a1), free(o32);
  op32_free(&p);
}

static void op_backward(bool f32, const ChunkOp *c, const double *s0, const double *dout, int lddo, const double *dsT,
                        const ChunkOp *g, double *ds0) {
  if (!f32) {
    chunkop_backward(c, s0, dout, lddo, dsT, (double *)g->q, (double *)g->k, (double *)g->v, (double *)g->la, ds0);
    return;
  }
  size_t kv = (size_t)c->K * (size_t)c->V;
  int w = c->per_key ? c->K : 1;
  Op32 p = op32(c);
  float *a0 = rows32(s0, 1, (int)kv, 0), *dT = rows32(dsT, 1, (int)kv, 0), *d32 = rows32(dout, c->T, c->V, lddo);
  float *gq = xmalloc(sizeof(float) * ((size_t)c->T * c->K + 1)), *gk = xmalloc(sizeof(float) * ((size_t)c->T * c->K + 1));
  float *gv = xmalloc(sizeof(float) * ((size_t)c->T * c->V + 1)), *gl = xmalloc(sizeof(float) * ((size_t)c->T * w + 1));
  float *g0 = xmalloc(sizeof(float) * kv + 1);
  cpu_chunkop_backward(&p.c, a0, d32, c->V, dT, gq, gk, gv, gl, g0);
  rows64((double *)g->q, gq, c->T, c->K, g->ldq), rows64((double *)g->k, gk, c->T, c->K, g->ldk);
  rows64((double *)g->v, gv, c->T, c->V, g->ldv), rows64((double *)g->la, gl, c->T, w, g->ldla);
  rows64(ds0, g0, 1, (int)kv, 0);
  free(a0), free(dT), free(d32), free(gq), free(gk), free(gv), free(gl), free(g0);
  op32_free(&p);
}

static double **parts(int n, const size_t *numel) {
  double **v = xcalloc((size_t)n + 1, sizeof(double *));
  for (int i = 0; i < n; i++) v[i] = xcalloc(numel[i] + 1, sizeof(double));
  return v;
}

static void parts_free(double **v, int n) {
  for (int i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

/* A program's per-part array (its parts: the cell's but the chunked states') from the SeqIO's */
static void **mapped(const ChunkForm *f, const Program *p, const void *const *full) {
  void **v = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int q = 0; q < p->nsparts; q++) v[q] = (void *)full[f->full_of[p->sparts[q].state] + p->sparts[q].part];
  return v;
}

void chunkform_run_f64(ChunkForm *f, const SeqIO *d) {
  CHECK(d->dtype == DT_F64);
  const Program *pin = f->in->p, *pout = f->out->p;
  bool f32 = f->in->be->dtype == DT_F32;
  int T = d->T, B = d->B, nin = pin->output_size, xw = pout->x_size, D = f->D;
  int np = pout->npparts, ns = pout->nsparts; /* in's parts are out's */
  size_t rows = (size_t)T * (size_t)B;
  size_t *pn = xcalloc((size_t)np + 1, sizeof(size_t)), *sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) pn[i] = (size_t)pout->pparts[i].numel;
  for (int i = 0; i < ns; i++) sn[i] = (size_t)B * (size_t)pout->sparts[i].size;
  double *yin = xcalloc(rows * (size_t)nin + 1, sizeof(double)), *dyin = xcalloc(rows * (size_t)nin + 1, sizeof(double));
  double *xo = xcalloc(rows * (size_t)xw + 1, sizeof(double)), *gxo = xcalloc(rows * (size_t)xw + 1, sizeof(double));
  double *gxi = xcalloc(rows * (size_t)D + 1, sizeof(double));
  double **fin = parts(ns, sn), **zero = parts(ns, sn), **ghi = parts(ns, sn), **gho = parts(ns, sn);
  double **gpi = parts(np, pn), **gpo = parts(np, pn);
  void **h0 = mapped(f, pout, d->h0), **dfinal = mapped(f, pout, d->dfinal), **final = mapped(f, pout, (const void *const *)d->final);
  void **gh0 = mapped(f, pout, (const void *const *)d->grad_h0);

  /* forward: in, the chunk ops, out */
  SeqIO si = *d;
  si.h0 = (const void **)h0, si.y = yin, si.final = (void **)fin, si.gates = NULL;
  Mirror *mi, *mo;
  prog_forward(f->in, f->win, &si, &mi);
  for (size_t r = 0; r < rows; r++) memcpy(xo + r * (size_t)xw, (const double *)d->x + r * (size_t)D, sizeof(double) * (size_t)D);
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state], sz = l->nh * l->K * l->V;
    /* every head of every batch row on its own: in parallel, each writing its own rows */
#pragma omp parallel for schedule(dynamic) num_threads(f->threads) if (f->threads > 1)
    for (int bh = 0; bh < B * l->nh; bh++) {
      int b = bh / l->nh, h = bh % l->nh;
      double *s0 = xmalloc(sizeof(double) * (size_t)l->K * (size_t)l->V), *s1 = xmalloc(sizeof(double) * (size_t)l->K * (size_t)l->V);
      Sub u = sub_new(f, l, T);
      sub_move(l, &u, yin, NULL, nin, T, B, b, h);
      double *o = xcalloc((size_t)u.c.T * (size_t)l->V + 1, sizeof(double));
      state_get(l, (const double *)d->h0[q] + (size_t)b * (size_t)sz, h, s0);
      op_forward(f32, &u.c, s0, o, l->V, s1);
      for (int t = 0; t < T; t++)
        for (int r = 0; r < u.R; r++)
          memcpy(xo + ((size_t)t * B + b) * (size_t)xw + (size_t)(D + l->out_off + (r * l->nh + h) * l->V),
                 o + ((size_t)t * u.E + (size_t)(u.M - 1 + r)) * l->V, sizeof(double) * (size_t)l->V);
      state_put(l, (double *)d->final[q] + (size_t)b * (size_t)sz, h, s1);
      free(s0), free(s1), free(o);
      sub_free(&u);
    }
  }
  SeqIO so = *d;
  so.x = xo, so.h0 = (const void **)h0, so.final = final;
  prog_forward(f->out, f->wout, &so, &mo);

  /* backward: out, the chunk ops, in */
  so.dfinal = (const void **)dfinal, so.grad_x = gxo, so.grad_params = (void **)gpo, so.grad_h0 = (void **)gho, so.fold = NULL;
  prog_backward(f->out, f->wout, &so, mo);
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state], sz = l->nh * l->K * l->V;
    size_t kv = (size_t)l->K * (size_t)l->V;
#pragma omp parallel for schedule(dynamic) num_threads(f->threads) if (f->threads > 1)
    for (int bh = 0; bh < B * l->nh; bh++) {
      int b = bh / l->nh, h = bh % l->nh;
      double *s0 = xmalloc(sizeof(double) * kv), *ds = xmalloc(sizeof(double) * kv), *ds0 = xmalloc(sizeof(double) * kv);
      Sub u = sub_new(f, l, T), gu = sub_new(f, l, T);
      sub_move(l, &u, yin, NULL, nin, T, B, b, h);
      double *dout = xcalloc((size_t)u.c.T * (size_t)l->V + 1, sizeof(double)); /* 0 but at the reads */
      for (int t = 0; t < T; t++)
        for (int r = 0; r < u.R; r++)
          memcpy(dout + ((size_t)t * u.E + (size_t)(u.M - 1 + r)) * l->V,
                 gxo + ((size_t)t * B + b) * (size_t)xw + (size_t)(D + l->out_off + (r * l->nh + h) * l->V), sizeof(double) * (size_t)l->V);
      state_get(l, (const double *)d->h0[q] + (size_t)b * (size_t)sz, h, s0);
      state_get(l, (const double *)d->dfinal[q] + (size_t)b * (size_t)sz, h, ds);
      op_backward(f32, &u.c, s0, dout, l->V, ds, &gu.c, ds0);
      sub_move(l, &gu, NULL, dyin, nin, T, B, b, h);
      state_put(l, (double *)d->grad_h0[q] + (size_t)b * (size_t)sz, h, ds0);
      free(s0), free(ds), free(ds0), free(dout);
      sub_free(&u), sub_free(&gu);
    }
  }
  si.dy = dyin, si.dfinal = (const void **)zero, si.grad_x = gxi, si.grad_params = (void **)gpi, si.grad_h0 = (void **)ghi;
  si.fold = NULL;
  prog_backward(f->in, f->win, &si, mi);
  for (size_t r = 0; r < rows; r++)
    for (int j = 0; j < D; j++) ((double *)d->grad_x)[r * (size_t)D + (size_t)j] = gxo[r * (size_t)xw + (size_t)j] + gxi[r * (size_t)D + (size_t)j];
  for (int i = 0; i < np; i++)
    for (size_t j = 0; j < pn[i]; j++) ((double *)d->grad_params[i])[j] = gpo[i][j] + gpi[i][j];
  for (int q = 0; q < ns; q++)
    for (size_t j = 0; j < sn[q]; j++) ((double *)gh0[q])[j] = gho[q][j] + ghi[q][j];
  free(yin), free(dyin), free(xo), free(gxo), free(gxi), free(pn), free(sn);
  free(h0), free(dfinal), free(final), free(gh0);
  parts_free(fin, ns), parts_free(zero, ns), parts_free(ghi, ns), parts_free(gho, ns), parts_free(gpi, np), parts_free(gpo, np);
}
