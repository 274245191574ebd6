/* lower.c: typed graph -> real graph. Complex values become (re, im) pairs of
 * real nodes; mean, layernorm, rmsnorm and gumbel_sigmoid expand into
 * primitive ops; the scan coefficients of diagonal-linear states are lowered
 * with the rest. Building through the g_* functions hash-conses and simplifies. */
#include "lower.h"

#include <math.h>
#include <string.h>

typedef struct Pair {
  int re, im; /* im = -1: a real value */
} Pair;

typedef struct Lowerer {
  Program *p;
  Cell *c;
  Pair *memo;
  bool *done;
  int *noise_index; /* per typed node: its noise stream (gumbel_sigmoid in training) */
} Lowerer;

static Node *T(Lowerer *L, int id) { return graph_node(&L->c->g, id); }
static Node *R(Lowerer *L, int id) { return graph_node(&L->p->g, id); }

static int zeros_like(Lowerer *L, int id) {
  Node *n = R(L, id);
  return g_const(&L->p->g, 0, n->rank, n->n);
}

static int im_of(Lowerer *L, Pair v) { return v.im >= 0 ? v.im : zeros_like(L, v.re); }

static Pair real(int re) { return (Pair){re, -1}; }

static Pair lower(Lowerer *L, int id);

static Pair cmul(Lowerer *L, Pair a, Pair b) {
  Graph *g = &L->p->g;
  if (a.im < 0 && b.im < 0) return real(g_binary(g, OP_MUL, a.re, b.re));
  if (b.im < 0) return (Pair){g_binary(g, OP_MUL, a.re, b.re), g_binary(g, OP_MUL, a.im, b.re)};
  if (a.im < 0) return (Pair){g_binary(g, OP_MUL, a.re, b.re), g_binary(g, OP_MUL, a.re, b.im)};
  int re = g_binary(g, OP_SUB, g_binary(g, OP_MUL, a.re, b.re), g_binary(g, OP_MUL, a.im, b.im));
  int im = g_binary(g, OP_ADD, g_binary(g, OP_MUL, a.re, b.im), g_binary(g, OP_MUL, a.im, b.re));
  return (Pair){re, im};
}

static Pair cdiv(Lowerer *L, Pair a, Pair b) {
  Graph *g = &L->p->g;
  if (b.im < 0) {
    if (a.im < 0) return real(g_binary(g, OP_DIV, a.re, b.re));
    return (Pair){g_binary(g, OP_DIV, a.re, b.re), g_binary(g, OP_DIV, a.im, b.re)};
  }
  int den = g_binary(g, OP_ADD, g_binary(g, OP_MUL, b.re, b.re), g_binary(g, OP_MUL, b.im, b.im));
  Pair num = cmul(L, a, (Pair){b.re, g_unary(g, OP_NEG, b.im)});
  return (Pair){g_binary(g, OP_DIV, num.re, den), g_binary(g, OP_DIV, im_of(L, num), den)};
}

static Pair addsub(Lowerer *L, Op op, Pair a, Pair b) {
  Graph *g = &L->p->g;
  int re = g_binary(g, op, a.re, b.re);
  if (a.im < 0 && b.im < 0) return real(re);
  return (Pair){re, g_binary(g, op, im_of(L, a), im_of(L, b))};
}

static int sum_of(Lowerer *L, int v) { return g_sum(&L->p->g, v); }

static int mean_of(Lowerer *L, int v) {
  Graph *g = &L->p->g;
  return g_binary(g, OP_MUL, sum_of(L, v), g_const(g, 1.0 / node_numel(R(L, v)), 0, NULL));
}

static int norm(Lowerer *L, int v, bool center) {
  Graph *g = &L->p->g;
  Node *x = R(L, v);
  int rank = x->rank, n[2] = {x->n[0], x->n[1]};
  int d = center ? g_binary(g, OP_SUB, v, g_bcast(g, mean_of(L, v), rank, n)) : v;
  int var = mean_of(L, g_binary(g, OP_MUL, d, d));
  int den = g_unary(g, OP_SQRT, g_binary(g, OP_ADD, var, g_const(g, 1e-5, 0, NULL)));
  return g_binary(g, OP_DIV, d, g_bcast(g, den, rank, n));
}

/* prev(v, k) and a history's update (real values). A history holds the last K steps of a value
 * of size n, oldest first: step t - k is the slice at (K - k) n; the new history drops the oldest
 * step and appends v (a: the history's PREV; b: v for the update). */
static Pair lower_history(Lowerer *L, const Node *n, Pair a, Pair b) {
  Graph *g = &L->p->g;
  int size = node_numel(R(L, a.re));
  if (n->op == OP_LAG) {
    int vn = n->rank ? n->n[0] : 1;
    int v = g_slice(g, a.re, size - n->idx * vn, vn);
    return real(n->rank ? v : g_sum(g, v));
  }
  int one = 1, vn = node_numel(R(L, b.re));
  int v = R(L, b.re)->rank ? b.re : g_bcast(g, b.re, 1, &one);
  return real(size == vn ? v : g_concat(g, g_slice(g, a.re, vn, size - vn), v));
}

static Pair lower_node(Lowerer *L, int id) {
  Program *p = L->p;
  Graph *g = &p->g;
  Node *n = T(L, id);
  int rank = n->rank, sz[2] = {n->n[0], n->n[1]};
  switch (n->op) {
  case OP_CONST: return real(g_const(g, n->k, rank, sz));
  case OP_INPUT: return real(p->x);
  case OP_PREV: {
    StatePart *s = &p->sparts[p->spart_of[n->idx]];
    return (Pair){s[0].prev, L->c->states[n->idx].cplx ? s[1].prev : -1};
  }
  case OP_PARAM: {
    ParamPart *pp = &p->pparts[p->ppart_of[n->idx]];
    return (Pair){pp[0].leaf, L->c->params[n->idx].cplx ? pp[1].leaf : -1};
  }
  case OP_NEWVAL: {
    StateInfo *si = &L->c->states[n->idx];
    if (p->scan_form && si->rec == REC_DIAG_LINEAR) {
      /* new = a * prev + b, from the analysis' coefficients */
      StatePart *sp = &p->sparts[p->spart_of[n->idx]];
      Pair prev = {sp[0].prev, si->cplx ? sp[1].prev : -1};
      Pair a = si->coef_a >= 0 ? lower(L, si->coef_a) : real(g_const(g, 0, rank, sz));
      Pair b = si->coef_b >= 0 ? lower(L, si->coef_b) : real(g_const(g, 0, rank, sz));
      a = (Pair){g_bcast(g, a.re, rank, sz), a.im < 0 ? -1 : g_bcast(g, a.im, rank, sz)};
      b = (Pair){g_bcast(g, b.re, rank, sz), b.im < 0 ? -1 : g_bcast(g, b.im, rank, sz)};
      Pair v = addsub(L, OP_ADD, cmul(L, a, prev), b);
      if (n->cplx && v.im < 0) v.im = zeros_like(L, v.re);
      return v;
    }
    Pair v = lower(L, n->a[0]);
    if (n->cplx && v.im < 0) v.im = zeros_like(L, v.re);
    return v;
  }
  default: break;
  }
  Pair a = lower(L, n->a[0]);
  Pair b = op_arity(n->op) > 1 ? lower(L, n->a[1]) : (Pair){-1, -1};
  switch (n->op) {
  case OP_NEG: return (Pair){g_unary(g, OP_NEG, a.re), a.im < 0 ? -1 : g_unary(g, OP_NEG, a.im)};
  case OP_ADD:
  case OP_SUB: return addsub(L, n->op, a, b);
  case OP_MUL: return cmul(L, a, b);
  case OP_DIV: return cdiv(L, a, b);
  case OP_EXP:
    if (a.im < 0) return real(g_unary(g, OP_EXP, a.re));
    else {
      int e = g_unary(g, OP_EXP, a.re);
      return (Pair){g_binary(g, OP_MUL, e, g_unary(g, OP_COS, a.im)), g_binary(g, OP_MUL, e, g_unary(g, OP_SIN, a.im))};
    }
  case OP_ABS:
    if (a.im < 0) return real(g_unary(g, OP_ABS, a.re));
    return real(g_unary(g, OP_SQRT, g_binary(g, OP_ADD, g_binary(g, OP_MUL, a.re, a.re), g_binary(g, OP_MUL, a.im, a.im))));
  case OP_SQUARE:
    if (a.im < 0) return real(g_unary(g, OP_SQUARE, a.re));
    return cmul(L, a, a);
  case OP_BCAST:
    return (Pair){g_bcast(g, a.re, rank, sz), a.im < 0 ? -1 : g_bcast(g, a.im, rank, sz)};
  case OP_SUM: return (Pair){sum_of(L, a.re), a.im < 0 ? -1 : sum_of(L, a.im)};
  case OP_MEAN: return (Pair){mean_of(L, a.re), a.im < 0 ? -1 : mean_of(L, a.im)};
  case OP_CONCAT: {
    /* scalars concatenate as size-1 vectors */
    int one = 1;
    int ar = R(L, a.re)->rank ? a.re : g_bcast(g, a.re, 1, &one);
    int br = R(L, b.re)->rank ? b.re : g_bcast(g, b.re, 1, &one);
    if (a.im < 0 && b.im < 0) return real(g_concat(g, ar, br));
    int ai = im_of(L, (Pair){ar, a.im >= 0 && R(L, a.im)->rank == 0 ? g_bcast(g, a.im, 1, &one) : a.im});
    int bi = im_of(L, (Pair){br, b.im >= 0 && R(L, b.im)->rank == 0 ? g_bcast(g, b.im, 1, &one) : b.im});
    return (Pair){g_concat(g, ar, br), g_concat(g, ai, bi)};
  }
  case OP_MATVEC: {
    if (a.im < 0 && b.im < 0) return real(g_matvec(g, a.re, b.re));
    int rr = g_matvec(g, a.re, b.re);
    if (a.im < 0) return (Pair){rr, g_matvec(g, a.re, b.im)};
    if (b.im < 0) return (Pair){rr, g_matvec(g, a.im, b.re)};
    return (Pair){g_binary(g, OP_SUB, rr, g_matvec(g, a.im, b.im)),
                  g_binary(g, OP_ADD, g_matvec(g, a.re, b.im), g_matvec(g, a.im, b.re))};
  }
  case OP_LAYERNORM: return real(norm(L, a.re, true));
  case OP_RMSNORM: return real(norm(L, a.re, false));
  case OP_GUMBEL: {
    if (!p->training) return real(g_unary(g, OP_SIGMOID, g_binary(g, OP_DIV, a.re, b.re)));
    Node *x = R(L, a.re);
    int idx = L->noise_index[id]; /* numbered in source order */
    p->noise_sizes[idx] = node_numel(x);
    int u = g_leaf(g, OP_NOISE, idx, x->rank, x->n);
    int one = g_const(g, 1, x->rank, x->n);
    int logit = g_binary(g, OP_SUB, g_unary(g, OP_LOG, u), g_unary(g, OP_LOG, g_binary(g, OP_SUB, one, u)));
    return real(g_unary(g, OP_SIGMOID, g_binary(g, OP_DIV, g_binary(g, OP_ADD, a.re, logit), b.re)));
  }
  case OP_CPLX: return (Pair){a.re, b.re};
  case OP_RE: return real(a.re);
  case OP_IM: return real(im_of(L, a));
  case OP_CONJ: return a.im < 0 ? a : (Pair){a.re, g_unary(g, OP_NEG, a.im)};
  case OP_CIS: return (Pair){g_unary(g, OP_COS, a.re), g_unary(g, OP_SIN, a.re)};
  case OP_LAG:
  case OP_HISTNEW: return lower_history(L, n, a, b);
  default:
    /* an elementwise op of real values only (the op table: no OPP_CPLX): as it is */
    if (!op_is_elementwise(n->op) || (op_props(n->op) & OPP_CPLX)) UNREACHABLE(op_name(n->op));
    return real(op_arity(n->op) == 1 ? g_unary(g, n->op, a.re) : g_binary(g, n->op, a.re, b.re));
  }
}

static Pair lower(Lowerer *L, int id) {
  if (id < 0) return (Pair){-1, -1};
  if (!L->done[id]) {
    L->memo[id] = lower_node(L, id);
    L->done[id] = true;
  }
  return L->memo[id];
}

void program_mark_dyn(Program *p) {
  free(p->dyn), free(p->needs_acc);
  p->dyn = xcalloc((size_t)p->g.nnodes + 1, sizeof(bool));
  p->needs_acc = xcalloc((size_t)p->g.nnodes + 1, sizeof(bool));
  for (int id = 0; id < p->g.nnodes; id++) {
    Node *n = &p->g.nodes[id];
    bool d = n->op == OP_INPUT || n->op == OP_PREV || n->op == OP_NOISE || n->op == OP_DY || n->op == OP_DNEW;
    bool acc = n->op == OP_ACC;
    for (int i = 0; i < op_arity(n->op); i++) d = d || p->dyn[n->a[i]], acc = acc || p->needs_acc[n->a[i]];
    p->dyn[id] = d;
    p->needs_acc[id] = acc;
  }
}

Program *lower_cell(Cell *c, bool training, bool scan_form) {
  CHECK(c->bound);
  Program *p = xcalloc(1, sizeof(Program));
  p->cell = c;
  p->training = training;
  p->scan_form = scan_form;
  graph_init(&p->g, true);
  Graph *g = &p->g;
  p->x_size = c->input_size;
  p->x = g_leaf(g, OP_INPUT, 0, 1, &p->x_size);
  p->ppart_of = xcalloc((size_t)c->nparams + 1, sizeof(int));
  for (int i = 0; i < c->nparams; i++) {
    ParamInfo *pi = &c->params[i];
    p->ppart_of[i] = p->npparts;
    for (int part = 0; part < (pi->cplx ? 2 : 1); part++) {
      ParamPart pp = {.param = i, .part = part, .rank = pi->rank, .n = {pi->n[0], pi->n[1]}, .grad = -1};
      pp.numel = pi->rank == 0 ? 1 : pi->rank == 1 ? pi->n[0] : pi->n[0] * pi->n[1];
      pp.leaf = g_leaf(g, OP_PARAM, p->npparts, pi->rank, pi->n);
      p->pparts = xrealloc(p->pparts, sizeof(ParamPart) * (size_t)(p->npparts + 1));
      p->pparts[p->npparts++] = pp;
    }
  }
  p->spart_of = xcalloc((size_t)c->nstates + 1, sizeof(int));
  p->nstates = c->nstates;
  for (int i = 0; i < c->nstates; i++) {
    StateInfo *si = &c->states[i];
    p->spart_of[i] = p->nsparts;
    for (int part = 0; part < (si->cplx ? 2 : 1); part++) {
      StatePart sp = {.state = i, .part = part, .cplx = si->cplx, .size = si->rank ? si->n[0] : 1};
      sp.prev = g_leaf(g, OP_PREV, p->nsparts, si->rank, si->n);
      sp.next = sp.a = sp.b = sp.dnew = sp.dprev = sp.g = sp.dtotal = -1;
      p->sparts = xrealloc(p->sparts, sizeof(StatePart) * (size_t)(p->nsparts + 1));
      p->sparts[p->nsparts++] = sp;
    }
  }
  Lowerer L = {p, c, xcalloc((size_t)c->g.nnodes + 1, sizeof(Pair)), xcalloc((size_t)c->g.nnodes + 1, sizeof(bool)),
               xcalloc((size_t)c->g.nnodes + 1, sizeof(int))};
  if (training)
    for (int id = 0; id < c->g.nnodes; id++)
      if (c->g.nodes[id].op == OP_GUMBEL) L.noise_index[id] = p->nnoise++;
  p->noise_sizes = xcalloc((size_t)p->nnoise + 1, sizeof(int));
  for (int i = 0; i < c->nstates; i++) {
    StateInfo *si = &c->states[i];
    Pair v = lower(&L, si->update);
    StatePart *sp = &p->sparts[p->spart_of[i]];
    sp[0].next = v.re;
    if (si->cplx) sp[1].next = im_of(&L, v);
  }
  Pair out = lower(&L, c->output);
  CHECK(out.im < 0);
  p->output = out.re;
  if (graph_node(g, p->output)->rank == 0) {
    int one = 1;
    Node y = {0};
    y.op = OP_BCAST;
    y.rank = 1;
    y.n[0] = 1;
    y.a[0] = p->output;
    p->output = graph_add(g, y);
    (void)one;
  }
  p->output_size = node_numel(graph_node(g, p->output));
  for (int i = 0; i < c->ngates; i++) {
    GatePart gp = {i, lower(&L, c->gates[i].node).re};
    p->gates = xrealloc(p->gates, sizeof(GatePart) * (size_t)(p->ngates + 1));
    p->gates[p->ngates++] = gp;
  }
  /* scan coefficients */
  for (int i = 0; i < c->nstates; i++) {
    StateInfo *si = &c->states[i];
    if (si->rec != REC_DIAG_LINEAR) continue;
    StatePart *sp = &p->sparts[p->spart_of[i]];
    int rank = si->rank, *n = si->n;
    Pair a = si->coef_a >= 0 ? lower(&L, si->coef_a) : real(g_const(g, 0, rank, n));
    Pair b = si->coef_b >= 0 ? lower(&L, si->coef_b) : real(g_const(g, 0, rank, n));
    sp[0].a = g_bcast(g, a.re, rank, n);
    sp[0].b = g_bcast(g, b.re, rank, n);
    if (si->cplx) {
      sp[1].a = g_bcast(g, im_of(&L, a), rank, n);
      sp[1].b = g_bcast(g, im_of(&L, b), rank, n);
    }
  }
  free(L.memo);
  free(L.done);
  free(L.noise_index);
  p->nforward = g->nnodes;
  p->dx = p->dy = -1;
  program_mark_dyn(p);
  return p;
}

void program_free(Program *p) {
  if (!p) return;
  graph_free(&p->g);
  free(p->pparts);
  free(p->ppart_of);
  free(p->sparts);
  free(p->spart_of);
  free(p->gates);
  free(p->noise_sizes);
  free(p->bounds);
  free(p->dyn);
  free(p->needs_acc);
  free(p);
}

uint64_t *program_signature(const Program *p, size_t *len) {
  size_t cap = 16 + (size_t)p->g.nnodes * 8 + (size_t)p->nsparts * 9 + (size_t)p->npparts + (size_t)p->nbounds * 3 +
               (size_t)p->ngates + (size_t)p->nnoise, n = 0;
  uint64_t *v = xmalloc(sizeof(uint64_t) * cap);
#define PUT(x) (v[n++] = (uint64_t)(int64_t)(x))
  PUT(p->g.nnodes), PUT(p->nforward), PUT(p->output), PUT(p->dx), PUT(p->dy), PUT(p->scan_form), PUT(p->training);
  PUT(p->nsparts), PUT(p->npparts), PUT(p->nbounds), PUT(p->ngates), PUT(p->nnoise);
  for (int i = 0; i < p->g.nnodes; i++) {
    const Node *x = &p->g.nodes[i];
    uint64_t kb;
    memcpy(&kb, &x->k, sizeof kb);
    PUT(x->op), PUT(x->rank), PUT(x->n[0]), PUT(x->n[1]), PUT(x->a[0]), PUT(x->a[1]), PUT(x->idx), v[n++] = kb;
  }
  for (int i = 0; i < p->nsparts; i++) {
    const StatePart *x = &p->sparts[i];
    PUT(x->next), PUT(x->a), PUT(x->b), PUT(x->g), PUT(x->dtotal), PUT(x->dprev), PUT(x->dnew), PUT(x->size), PUT(x->cplx);
  }
  for (int i = 0; i < p->npparts; i++) PUT(p->pparts[i].grad);
  for (int i = 0; i < p->nbounds; i++) PUT(p->bounds[i].node), PUT(p->bounds[i].adj), PUT(p->bounds[i].acc);
  for (int i = 0; i < p->ngates; i++) PUT(p->gates[i].node);
  for (int i = 0; i < p->nnoise; i++) PUT(p->noise_sizes[i]);
#undef PUT
  CHECK(n <= cap);
  *len = n;
  return v;
}
