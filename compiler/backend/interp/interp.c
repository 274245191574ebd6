/* interp.c: the reference interpreter. Static nodes (params only) are
 * computed once; the forward step runs for every (t, b) row, keeping every
 * per-row value; the backward runs rows in reverse time, sums the static
 * adjoints over all rows, then the static backward runs once. */
#include "interp.h"

#include <string.h>

/* A sequence in flight: every per-row forward value is kept for the backward. */
typedef struct Interp {
  Work base;
  Program *p;
  const SeqIO *d;
  bool f32;
  int t, b;
  int T, B;          /* the sizes the arrays below were allocated for (0: none) */
  int *numel;
  double **stat;     /* static nodes: their values */
  double **store;    /* per-row forward nodes: [T * B * numel] */
  double **tmp;      /* per-row backward nodes: numel */
  double **acc;      /* per boundary: the adjoint summed over rows */
  double **dnew;     /* per state part: [B, size] */
  double **cur;      /* per state part: the current state [B, size] */
  double **dsteps;   /* per state part: dL/dh_0 .. dL/dh_T of the last backward [T + 1, B, size], the
                        whole adjoint of each value (dtotal of the step that made it) */
  bool *fwd, *bwd, *post; /* the nodes each phase evaluates */
} Interp;

#define F64(v) ((const double *)(v))
#define OUT64(v) ((double *)(v))

static double rnd(Interp *I, double v) { return I->f32 ? (double)(float)v : v; }

static double *slot(Interp *I, int id) {
  Program *p = I->p;
  if (!p->dyn[id]) return I->stat[id];
  if (id < p->nforward) return I->store[id] + ((size_t)I->t * (size_t)I->d->B + (size_t)I->b) * (size_t)I->numel[id];
  return I->tmp[id];
}

static void eval(Interp *I, int id) {
  Program *p = I->p;
  const SeqIO *d = I->d;
  Node *n = graph_node(&p->g, id);
  double *out = slot(I, id);
  int e = I->numel[id];
  size_t row = (size_t)I->t * (size_t)d->B + (size_t)I->b;
  const double *a = n->a[0] >= 0 ? slot(I, n->a[0]) : NULL;
  const double *b = n->a[1] >= 0 ? slot(I, n->a[1]) : NULL;
  switch (n->op) {
  case OP_INPUT: for (int i = 0; i < e; i++) out[i] = rnd(I, F64(d->x)[row * (size_t)e + (size_t)i]); return;
  case OP_PREV: return; /* filled by the step loop */
  case OP_PARAM: for (int i = 0; i < e; i++) out[i] = rnd(I, F64(d->params[n->idx])[i]); return;
  case OP_NOISE: for (int i = 0; i < e; i++) out[i] = rnd(I, F64(d->noise[n->idx])[row * (size_t)e + (size_t)i]); return;
  case OP_DY: for (int i = 0; i < e; i++) out[i] = rnd(I, F64(d->dy)[row * (size_t)e + (size_t)i]); return;
  case OP_DNEW: memcpy(out, I->dnew[n->idx] + (size_t)I->b * (size_t)e, sizeof(double) * (size_t)e); return;
  case OP_ACC: memcpy(out, I->acc[n->idx], sizeof(double) * (size_t)e); return;
  default:
    node_eval_f64(&p->g, id, out, a, b);
    for (int i = 0; i < e && I->f32; i++) out[i] = rnd(I, out[i]);
    return;
  }
}

/* Marks the nodes reachable from `id`. */
static void mark(Program *p, int id, bool *m) {
  if (id < 0 || m[id]) return;
  m[id] = true;
  Node *n = graph_node(&p->g, id);
  for (int i = 0; i < op_arity(n->op); i++) mark(p, n->a[i], m);
}

/* ---- the interface ---- */

/* Every program: a scan-form one too (its a * prev + b runs row by row like any update). */
static const char *interp_supports(const Program *p, const BackendOptions *o) {
  (void)p, (void)o;
  return NULL;
}

static Compiled *interp_compile(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  (void)err, (void)errlen;
  CHECK(p->differentiated);
  Compiled *c = xcalloc(1, sizeof *c);
  c->be = &interp_backend, c->p = p, c->opt = *o;
  return c;
}

static void interp_free(Compiled *c) { free(c); }

/* Frees the arrays of the last sequence. */
static void release(Interp *I) {
  if (!I->numel) return;
  Program *p = I->p;
  for (int id = 0; id < p->g.nnodes; id++) {
    free(I->stat[id]);
    free(I->store[id]);
    free(I->tmp[id]);
  }
  for (int i = 0; i < p->nbounds; i++) free(I->acc[i]);
  for (int i = 0; i < p->nsparts; i++) free(I->dnew[i]), free(I->cur[i]), free(I->dsteps[i]);
  free(I->acc), free(I->dnew), free(I->cur), free(I->dsteps), free(I->numel), free(I->stat), free(I->store), free(I->tmp);
  free(I->fwd), free(I->bwd), free(I->post);
  I->numel = NULL;
  I->T = I->B = 0;
}

/* Allocates the arrays of a sequence of T x B rows and marks what each phase evaluates. */
static void prepare(Interp *I, Program *p, int T, int B) {
  release(I);
  int nn = p->g.nnodes;
  I->p = p, I->T = T, I->B = B;
  I->numel = xmalloc(sizeof(int) * (size_t)nn);
  I->stat = xcalloc((size_t)nn, sizeof(double *));
  I->store = xcalloc((size_t)nn, sizeof(double *));
  I->tmp = xcalloc((size_t)nn, sizeof(double *));
  size_t rows = (size_t)T * (size_t)B;
  for (int id = 0; id < nn; id++) {
    Node *n = graph_node(&p->g, id);
    I->numel[id] = node_numel(n);
    size_t e = (size_t)I->numel[id];
    if (!p->dyn[id]) I->stat[id] = xcalloc(e, sizeof(double));
    else if (id < p->nforward) I->store[id] = xcalloc(rows * e, sizeof(double));
    else I->tmp[id] = xcalloc(e, sizeof(double));
  }
  I->acc = xcalloc((size_t)p->nbounds + 1, sizeof(double *));
  for (int i = 0; i < p->nbounds; i++) I->acc[i] = xcalloc((size_t)I->numel[p->bounds[i].node], sizeof(double));
  I->dnew = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  I->cur = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  I->dsteps = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)B * (size_t)p->sparts[i].size;
    I->dnew[i] = xcalloc(sz, sizeof(double));
    I->cur[i] = xcalloc(sz, sizeof(double));
    I->dsteps[i] = xcalloc(((size_t)T + 1) * sz, sizeof(double));
  }
  I->fwd = xcalloc((size_t)nn, sizeof(bool)), I->bwd = xcalloc((size_t)nn, sizeof(bool));
  I->post = xcalloc((size_t)nn, sizeof(bool));
  mark(p, p->output, I->fwd);
  for (int i = 0; i < p->nsparts; i++) mark(p, p->sparts[i].next, I->fwd);
  for (int i = 0; i < p->ngates; i++) mark(p, p->gates[i].node, I->fwd);
  for (int i = 0; i < p->nsparts; i++) mark(p, p->sparts[i].dprev, I->bwd), mark(p, p->sparts[i].dtotal, I->bwd);
  mark(p, p->dx, I->bwd);
  for (int i = 0; i < p->nbounds; i++) mark(p, p->bounds[i].adj, I->bwd);
  for (int i = 0; i < p->npparts; i++) mark(p, p->pparts[i].grad, I->post);
}

static Work *interp_work_new(Compiled *c) {
  Interp *I = xcalloc(1, sizeof *I);
  I->base.be = c->be;
  return &I->base;
}

static void interp_work_free(Work *w) {
  if (!w) return;
  release((Interp *)w);
  free(w);
}

/* One row (t, b) of the forward step: the state parts in, every per-row node, the outputs out. */
static void forward_row(Interp *I, int t, int b) {
  Program *p = I->p;
  const SeqIO *d = I->d;
  I->t = t, I->b = b;
  for (int i = 0; i < p->nsparts; i++) {
    int sz = p->sparts[i].size;
    memcpy(slot(I, p->sparts[i].prev), I->cur[i] + (size_t)b * (size_t)sz, sizeof(double) * (size_t)sz);
  }
  for (int id = 0; id < p->nforward; id++)
    if (p->dyn[id] && (I->fwd[id] || I->bwd[id]) && graph_node(&p->g, id)->op != OP_PREV) eval(I, id);
  for (int i = 0; i < p->nsparts; i++) {
    int sz = p->sparts[i].size;
    memcpy(I->cur[i] + (size_t)b * (size_t)sz, slot(I, p->sparts[i].next), sizeof(double) * (size_t)sz);
  }
  size_t row = (size_t)t * (size_t)d->B + (size_t)b;
  int O = p->output_size;
  memcpy(OUT64(d->y) + row * (size_t)O, slot(I, p->output), sizeof(double) * (size_t)O);
  for (int i = 0; i < p->ngates && d->gates; i++) {
    int e = I->numel[p->gates[i].node];
    memcpy(OUT64(d->gates[i]) + row * (size_t)e, slot(I, p->gates[i].node), sizeof(double) * (size_t)e);
  }
}

static void interp_forward(Compiled *c, Work *w, const SeqIO *d) {
  Interp *I = (Interp *)w;
  Program *p = c->p;
  CHECK(d->dtype == DT_F64);
  prepare(I, p, d->T, d->B);
  I->d = d, I->f32 = c->opt.f32;
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)d->B * (size_t)p->sparts[i].size;
    for (size_t j = 0; j < sz; j++) I->cur[i][j] = rnd(I, F64(d->h0[i])[j]);
  }
  /* static values, once (those that do not wait for the summed adjoints) */
  for (int id = 0; id < p->g.nnodes; id++)
    if (!p->dyn[id] && !p->needs_acc[id]) eval(I, id);
  for (int t = 0; t < d->T; t++)
    for (int b = 0; b < d->B; b++) forward_row(I, t, b);
  for (int i = 0; i < p->nsparts; i++)
    memcpy(d->final[i], I->cur[i], sizeof(double) * (size_t)d->B * (size_t)p->sparts[i].size);
}

/* One row (t, b) of the backward step: every per-row backward node, dx, the boundary adjoints
 * summed, and the row's new dnew (every dprev read before any is overwritten). */
static void backward_row(Interp *I, int t, int b) {
  Program *p = I->p;
  const SeqIO *d = I->d;
  I->t = t, I->b = b;
  for (int id = p->nforward; id < p->g.nnodes; id++)
    if (p->dyn[id] && I->bwd[id]) eval(I, id);
  size_t row = (size_t)t * (size_t)d->B + (size_t)b;
  for (int i = 0; i < p->nsparts; i++) { /* the whole adjoint of h_{t+1}, the step's new value */
    size_t sz = (size_t)p->sparts[i].size;
    memcpy(I->dsteps[i] + (row + (size_t)d->B) * sz, slot(I, p->sparts[i].dtotal), sizeof(double) * sz);
  }
  int X = p->x_size;
  if (p->dx >= 0) memcpy(OUT64(d->grad_x) + row * (size_t)X, slot(I, p->dx), sizeof(double) * (size_t)X);
  else memset(OUT64(d->grad_x) + row * (size_t)X, 0, sizeof(double) * (size_t)X);
  for (int i = 0; i < p->nbounds; i++) {
    const double *v = slot(I, p->bounds[i].adj);
    for (int j = 0; j < I->numel[p->bounds[i].node]; j++) I->acc[i][j] = rnd(I, I->acc[i][j] + v[j]);
  }
  double **next = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)p->sparts[i].size;
    next[i] = xcalloc(sz, sizeof(double));
    if (p->sparts[i].dprev >= 0) memcpy(next[i], slot(I, p->sparts[i].dprev), sizeof(double) * sz);
  }
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)p->sparts[i].size;
    memcpy(I->dnew[i] + (size_t)b * sz, next[i], sizeof(double) * sz);
    free(next[i]);
  }
  free(next);
}

static void interp_backward(Compiled *c, Work *w, const SeqIO *d) {
  Interp *I = (Interp *)w;
  Program *p = c->p;
  CHECK(I->numel && I->T == d->T && I->B == d->B && d->dtype == DT_F64);
  I->d = d;
  for (int i = 0; i < p->nbounds; i++) memset(I->acc[i], 0, sizeof(double) * (size_t)I->numel[p->bounds[i].node]);
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)d->B * (size_t)p->sparts[i].size;
    for (size_t j = 0; j < sz; j++) I->dnew[i][j] = rnd(I, F64(d->dfinal[i])[j]);
  }
  for (int t = d->T - 1; t >= 0; t--)
    for (int b = 0; b < d->B; b++) backward_row(I, t, b);
  for (int i = 0; i < p->nsparts; i++) /* dL/dh_0: h_0 feeds step 0 only */
    memcpy(I->dsteps[i], I->dnew[i], sizeof(double) * (size_t)d->B * (size_t)p->sparts[i].size);
  for (int i = 0; i < p->nsparts; i++)
    memcpy(d->grad_h0[i], I->dnew[i], sizeof(double) * (size_t)d->B * (size_t)p->sparts[i].size);
  /* static backward, once */
  for (int id = 0; id < p->g.nnodes; id++)
    if (!p->dyn[id] && p->needs_acc[id] && I->post[id]) eval(I, id);
  for (int i = 0; i < p->npparts; i++) {
    int e = p->pparts[i].numel;
    if (p->pparts[i].grad >= 0) memcpy(d->grad_params[i], I->stat[p->pparts[i].grad], sizeof(double) * (size_t)e);
    else memset(d->grad_params[i], 0, sizeof(double) * (size_t)e);
  }
}

/* h_0 .. h_T of a state part: h_{t} for t < T is the PREV value the forward stored at step t;
 * or their adjoints, which the last backward kept. */
static int interp_read_steps(Compiled *c, Work *w, StepArray what, int part, void *out) {
  Interp *I = (Interp *)w;
  Program *p = c->p;
  CHECK(part >= 0 && part < p->nsparts && I->numel);
  int prev = p->sparts[part].prev;
  size_t sz = (size_t)p->sparts[part].size, rows = (size_t)I->T * (size_t)I->B;
  if (what == STEPS_DSTATE) {
    memcpy(out, I->dsteps[part], sizeof(double) * (rows + (size_t)I->B) * sz);
    return 0;
  }
  if (!I->store[prev]) return -1;
  memcpy(out, I->store[prev], sizeof(double) * rows * sz);
  memcpy(OUT64(out) + rows * sz, I->cur[part], sizeof(double) * (size_t)I->B * sz);
  return 0;
}

const Backend interp_backend = {.name = "interp", .dtype = DT_F64, .scans = false, BACKEND_ENTRY_POINTS(interp)};
