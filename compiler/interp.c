/* interp.c: the reference interpreter. Static nodes (params only) are
 * computed once; the forward step runs for every (t, b) row, keeping every
 * per-row value; the backward runs rows in reverse time, sums the static
 * adjoints over all rows, then the static backward runs once. */
#include "interp.h"

#include <string.h>

typedef struct Interp {
  Program *p;
  SeqData *d;
  int t, b;
  int *numel;
  double **stat;     /* static nodes: their values */
  double **store;    /* per-row forward nodes: [T * B * numel] */
  double **tmp;      /* per-row backward nodes: numel */
  double **acc;      /* per boundary: the adjoint summed over rows */
  double **dnew;     /* per state part: [B, size] */
  bool *needs_acc;   /* static node that depends on an ACC leaf */
} Interp;

static double rnd(Interp *I, double v) { return I->d->f32 ? (double)(float)v : v; }

static double *slot(Interp *I, int id) {
  Program *p = I->p;
  if (!p->dyn[id]) return I->stat[id];
  if (id < p->nforward) return I->store[id] + ((size_t)I->t * (size_t)I->d->B + (size_t)I->b) * (size_t)I->numel[id];
  return I->tmp[id];
}

static void eval(Interp *I, int id) {
  Program *p = I->p;
  SeqData *d = I->d;
  Node *n = graph_node(&p->g, id);
  double *out = slot(I, id);
  int e = I->numel[id];
  size_t row = (size_t)I->t * (size_t)d->B + (size_t)I->b;
  const double *a = n->a[0] >= 0 ? slot(I, n->a[0]) : NULL;
  const double *b = n->a[1] >= 0 ? slot(I, n->a[1]) : NULL;
  switch (n->op) {
  case OP_CONST: for (int i = 0; i < e; i++) out[i] = rnd(I, n->k); return;
  case OP_INPUT: for (int i = 0; i < e; i++) out[i] = rnd(I, d->x[row * (size_t)e + (size_t)i]); return;
  case OP_PREV: return; /* filled by the step loop */
  case OP_PARAM: for (int i = 0; i < e; i++) out[i] = rnd(I, d->params[n->idx][i]); return;
  case OP_NOISE: for (int i = 0; i < e; i++) out[i] = rnd(I, d->noise[n->idx][row * (size_t)e + (size_t)i]); return;
  case OP_DY: for (int i = 0; i < e; i++) out[i] = rnd(I, d->dy[row * (size_t)e + (size_t)i]); return;
  case OP_DNEW: memcpy(out, I->dnew[n->idx] + (size_t)I->b * (size_t)e, sizeof(double) * (size_t)e); return;
  case OP_ACC: memcpy(out, I->acc[n->idx], sizeof(double) * (size_t)e); return;
  case OP_BCAST: for (int i = 0; i < e; i++) out[i] = a[0]; return;
  case OP_SUM: {
    double s = 0;
    for (int i = 0; i < I->numel[n->a[0]]; i++) s += a[i];
    out[0] = rnd(I, s);
    return;
  }
  case OP_CONCAT: {
    int na = I->numel[n->a[0]];
    memcpy(out, a, sizeof(double) * (size_t)na);
    memcpy(out + na, b, sizeof(double) * (size_t)(e - na));
    return;
  }
  case OP_SLICE: memcpy(out, a + n->idx, sizeof(double) * (size_t)e); return;
  case OP_MATVEC: {
    Node *m = graph_node(&p->g, n->a[0]);
    int rows = m->n[0], cols = m->n[1];
    for (int i = 0; i < rows; i++) {
      double s = 0;
      for (int j = 0; j < cols; j++) s += a[(size_t)i * (size_t)cols + (size_t)j] * b[j];
      out[i] = rnd(I, s);
    }
    return;
  }
  case OP_MATVEC_T: {
    Node *m = graph_node(&p->g, n->a[0]);
    int rows = m->n[0], cols = m->n[1];
    for (int j = 0; j < cols; j++) {
      double s = 0;
      for (int i = 0; i < rows; i++) s += a[(size_t)i * (size_t)cols + (size_t)j] * b[i];
      out[j] = rnd(I, s);
    }
    return;
  }
  case OP_OUTER: {
    int rows = n->n[0], cols = n->n[1];
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < cols; j++) out[(size_t)i * (size_t)cols + (size_t)j] = rnd(I, a[i] * b[j]);
    return;
  }
  default:
    if (op_arity(n->op) == 1)
      for (int i = 0; i < e; i++) out[i] = rnd(I, op_eval_scalar(n->op, a[i], 0));
    else
      for (int i = 0; i < e; i++) out[i] = rnd(I, op_eval_scalar(n->op, a[i], b[i]));
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

void interp_run(Program *p, SeqData *d) {
  CHECK(p->differentiated);
  int nn = p->g.nnodes;
  Interp I = {0};
  I.p = p;
  I.d = d;
  I.numel = xmalloc(sizeof(int) * (size_t)nn);
  I.stat = xcalloc((size_t)nn, sizeof(double *));
  I.store = xcalloc((size_t)nn, sizeof(double *));
  I.tmp = xcalloc((size_t)nn, sizeof(double *));
  I.needs_acc = xcalloc((size_t)nn, sizeof(bool));
  size_t rows = (size_t)d->T * (size_t)d->B;
  for (int id = 0; id < nn; id++) {
    Node *n = graph_node(&p->g, id);
    I.numel[id] = node_numel(n);
    size_t e = (size_t)I.numel[id];
    bool acc = n->op == OP_ACC;
    for (int i = 0; i < op_arity(n->op); i++) acc = acc || I.needs_acc[n->a[i]];
    I.needs_acc[id] = acc;
    if (!p->dyn[id]) I.stat[id] = xcalloc(e, sizeof(double));
    else if (id < p->nforward) I.store[id] = xcalloc(rows * e, sizeof(double));
    else I.tmp[id] = xcalloc(e, sizeof(double));
  }
  I.acc = xcalloc((size_t)p->nbounds + 1, sizeof(double *));
  for (int i = 0; i < p->nbounds; i++) I.acc[i] = xcalloc((size_t)I.numel[p->bounds[i].node], sizeof(double));
  I.dnew = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  double **cur = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)d->B * (size_t)p->sparts[i].size;
    I.dnew[i] = xcalloc(sz, sizeof(double));
    cur[i] = xcalloc(sz, sizeof(double));
    for (size_t j = 0; j < sz; j++) cur[i][j] = rnd(&I, d->h0[i][j]);
  }
  /* which nodes each phase evaluates */
  bool *fwd = xcalloc((size_t)nn, sizeof(bool)), *bwd = xcalloc((size_t)nn, sizeof(bool)), *post = xcalloc((size_t)nn, sizeof(bool));
  mark(p, p->output, fwd);
  for (int i = 0; i < p->nsparts; i++) mark(p, p->sparts[i].next, fwd);
  for (int i = 0; i < p->ngates; i++) mark(p, p->gates[i].node, fwd);
  for (int i = 0; i < p->nsparts; i++) mark(p, p->sparts[i].dprev, bwd);
  mark(p, p->dx, bwd);
  for (int i = 0; i < p->nbounds; i++) mark(p, p->bounds[i].adj, bwd);
  for (int i = 0; i < p->npparts; i++) mark(p, p->pparts[i].grad, post);

  /* static values, once (those that do not wait for the summed adjoints) */
  for (int id = 0; id < nn; id++)
    if (!p->dyn[id] && !I.needs_acc[id]) eval(&I, id);

  /* forward */
  int O = p->output_size;
  for (int t = 0; t < d->T; t++)
    for (int b = 0; b < d->B; b++) {
      I.t = t, I.b = b;
      for (int i = 0; i < p->nsparts; i++) {
        int sz = p->sparts[i].size;
        memcpy(slot(&I, p->sparts[i].prev), cur[i] + (size_t)b * (size_t)sz, sizeof(double) * (size_t)sz);
      }
      for (int id = 0; id < p->nforward; id++)
        if (p->dyn[id] && (fwd[id] || bwd[id]) && graph_node(&p->g, id)->op != OP_PREV) eval(&I, id);
      for (int i = 0; i < p->nsparts; i++) {
        int sz = p->sparts[i].size;
        memcpy(cur[i] + (size_t)b * (size_t)sz, slot(&I, p->sparts[i].next), sizeof(double) * (size_t)sz);
      }
      size_t row = (size_t)t * (size_t)d->B + (size_t)b;
      memcpy(d->y + row * (size_t)O, slot(&I, p->output), sizeof(double) * (size_t)O);
      for (int i = 0; i < p->ngates; i++) {
        int e = I.numel[p->gates[i].node];
        memcpy(d->gates[i] + row * (size_t)e, slot(&I, p->gates[i].node), sizeof(double) * (size_t)e);
      }
    }
  for (int i = 0; i < p->nsparts; i++)
    memcpy(d->final[i], cur[i], sizeof(double) * (size_t)d->B * (size_t)p->sparts[i].size);

  /* backward, rows in reverse time */
  for (int i = 0; i < p->nsparts; i++) {
    size_t sz = (size_t)d->B * (size_t)p->sparts[i].size;
    for (size_t j = 0; j < sz; j++) I.dnew[i][j] = rnd(&I, d->dfinal[i][j]);
  }
  int X = p->x_size;
  for (int t = d->T - 1; t >= 0; t--) {
    for (int b = 0; b < d->B; b++) {
      I.t = t, I.b = b;
      for (int id = p->nforward; id < nn; id++)
        if (p->dyn[id] && bwd[id]) eval(&I, id);
      size_t row = (size_t)t * (size_t)d->B + (size_t)b;
      if (p->dx >= 0) memcpy(d->grad_x + row * (size_t)X, slot(&I, p->dx), sizeof(double) * (size_t)X);
      else memset(d->grad_x + row * (size_t)X, 0, sizeof(double) * (size_t)X);
      for (int i = 0; i < p->nbounds; i++) {
        const double *v = slot(&I, p->bounds[i].adj);
        for (int j = 0; j < I.numel[p->bounds[i].node]; j++) I.acc[i][j] = rnd(&I, I.acc[i][j] + v[j]);
      }
      /* the new dnew for this row: every dprev first, then overwrite */
      double *tmp[64];
      CHECK(p->nsparts <= 64);
      for (int i = 0; i < p->nsparts; i++) {
        int sz = p->sparts[i].size;
        tmp[i] = xmalloc(sizeof(double) * (size_t)sz);
        if (p->sparts[i].dprev >= 0) memcpy(tmp[i], slot(&I, p->sparts[i].dprev), sizeof(double) * (size_t)sz);
        else memset(tmp[i], 0, sizeof(double) * (size_t)sz);
      }
      for (int i = 0; i < p->nsparts; i++) {
        int sz = p->sparts[i].size;
        memcpy(I.dnew[i] + (size_t)b * (size_t)sz, tmp[i], sizeof(double) * (size_t)sz);
        free(tmp[i]);
      }
    }
  }
  for (int i = 0; i < p->nsparts; i++)
    memcpy(d->grad_h0[i], I.dnew[i], sizeof(double) * (size_t)d->B * (size_t)p->sparts[i].size);

  /* static backward, once */
  for (int id = 0; id < nn; id++)
    if (!p->dyn[id] && I.needs_acc[id] && post[id]) eval(&I, id);
  for (int i = 0; i < p->npparts; i++) {
    int e = p->pparts[i].numel;
    if (p->pparts[i].grad >= 0) memcpy(d->grad_params[i], I.stat[p->pparts[i].grad], sizeof(double) * (size_t)e);
    else memset(d->grad_params[i], 0, sizeof(double) * (size_t)e);
  }

  for (int id = 0; id < nn; id++) {
    free(I.stat[id]);
    free(I.store[id]);
    free(I.tmp[id]);
  }
  for (int i = 0; i < p->nbounds; i++) free(I.acc[i]);
  for (int i = 0; i < p->nsparts; i++) {
    free(I.dnew[i]);
    free(cur[i]);
  }
  free(I.acc);
  free(I.dnew);
  free(cur);
  free(I.numel);
  free(I.stat);
  free(I.store);
  free(I.tmp);
  free(I.needs_acc);
  free(fwd);
  free(bwd);
  free(post);
}
