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
  int xin;          /* what the typed graph's input lowers to: p->x, or its first part (LOWER_CHUNK_OUT) */
  LowerPart part;
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
  int rank = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
  int d = center ? g_binary(g, OP_SUB, v, g_bcast(g, mean_of(L, v), rank, n)) : v;
  int var = mean_of(L, g_binary(g, OP_MUL, d, d));
  int den = g_unary(g, OP_SQRT, g_binary(g, OP_ADD, var, g_const(g, 1e-5, 0, NULL)));
  return g_binary(g, OP_DIV, d, g_bcast(g, den, rank, n));
}

/* prev(v, k) and a history's update (real values). A history holds the last K steps of a value
 * of n elements (a tensor's flattened), oldest first: step t - k is the slice at (K - k) n; the
 * new history drops the oldest step and appends v (a: the history's PREV; b: v for the update). */
static Pair lower_history(Lowerer *L, const Node *n, Pair a, Pair b) {
  Graph *g = &L->p->g;
  int size = node_numel(R(L, a.re)), one = 1;
  if (n->op == OP_LAG) {
    int vn = 1;
    for (int d = 0; d < n->rank; d++) vn *= n->n[d];
    int v = g_slice(g, a.re, size - n->idx * vn, vn);
    return real(n->rank == 0 ? g_sum(g, v) : n->rank == 1 ? v : g_reshape(g, v, n->rank, n->n));
  }
  Node *x = R(L, b.re);
  int vn = node_numel(x);
  int v = x->rank == 0 ? g_bcast(g, b.re, 1, &one) : x->rank == 1 ? b.re : g_reshape(g, b.re, 1, &vn);
  return real(size == vn ? v : g_concat(g, g_slice(g, a.re, vn, size - vn), v));
}

/* ---- version 2's tensors: views, reductions over an axis, products ---- */

/* v broadcast to (rank, n) as PyTorch's: trailing dims align, a dim of 1 or a missing one stretches */
static int expand(Graph *g, int v, int rank, const int *n) {
  Node *x = graph_node(g, v);
  int xr = x->rank, xn[MAX_RANK] = {x->n[0], x->n[1], x->n[2]}, xst[MAX_RANK], st[MAX_RANK] = {0};
  shape_strides(xr, xn, xst);
  for (int i = 0; i < rank; i++) {
    int xi = i - (rank - xr);
    st[i] = xi < 0 || xn[xi] == 1 ? 0 : xst[xi];
  }
  return g_view(g, v, rank, n, 0, st);
}

static int transpose(Graph *g, int v) {
  Node *x = graph_node(g, v);
  int r = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]}, st[MAX_RANK];
  shape_strides(r, n, st);
  int t = n[r - 1];
  n[r - 1] = n[r - 2], n[r - 2] = t;
  t = st[r - 1];
  st[r - 1] = st[r - 2], st[r - 2] = t;
  return g_view(g, v, r, n, 0, st);
}

static int axslice(Graph *g, int v, int axis, int start, int len) {
  Node *x = graph_node(g, v);
  int r = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]}, st[MAX_RANK];
  shape_strides(r, n, st);
  n[axis] = len;
  return g_view(g, v, r, n, start * st[axis], st);
}

/* torch.matmul: both sides as [batch, rows, cols] (a vector gets a dim of 1, a batch of 1
 * stretches), one batched product, then the result's shape */
static int matmul(Graph *g, int a, int b, int rank, const int *n) {
  Node *x = graph_node(g, a);
  int xr = x->rank, an[MAX_RANK];
  if (xr == 1) an[0] = 1, an[1] = 1, an[2] = x->n[0];
  else if (xr == 2) an[0] = 1, an[1] = x->n[0], an[2] = x->n[1];
  else an[0] = x->n[0], an[1] = x->n[1], an[2] = x->n[2];
  Node *y = graph_node(g, b);
  int yr = y->rank, bn[MAX_RANK];
  if (yr == 1) bn[0] = 1, bn[1] = y->n[0], bn[2] = 1;
  else if (yr == 2) bn[0] = 1, bn[1] = y->n[0], bn[2] = y->n[1];
  else bn[0] = y->n[0], bn[1] = y->n[1], bn[2] = y->n[2];
  int batch = an[0] > bn[0] ? an[0] : bn[0];
  int A = g_reshape(g, a, 3, an), B = g_reshape(g, b, 3, bn);
  an[0] = bn[0] = batch;
  A = expand(g, A, 3, an), B = expand(g, B, 3, bn);
  return g_reshape(g, g_bmm(g, A, B), rank, n);
}

static int reduce_mean(Graph *g, int v, int axis) {
  int len = graph_node(g, v)->n[axis];
  int s = g_rsum(g, v, axis);
  Node *y = graph_node(g, s);
  int yn[MAX_RANK] = {y->n[0], y->n[1], y->n[2]};
  return g_binary(g, OP_MUL, s, g_const(g, 1.0 / len, y->rank, yn));
}

/* softmax over an axis, the maximum subtracted first (the result does not depend on it) */
static int softmax(Graph *g, int v, int axis) {
  Node *x = graph_node(g, v);
  int r = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
  int e = g_unary(g, OP_EXP, g_binary(g, OP_SUB, v, g_spread(g, g_rmax(g, v, axis), r, n, axis)));
  return g_binary(g, OP_DIV, e, g_spread(g, g_rsum(g, e, axis), r, n, axis));
}

/* layernorm (center) or rmsnorm over an axis: no affine part, eps 1e-5, biased variance */
static int norm_axis(Graph *g, int v, int axis, bool center) {
  Node *x = graph_node(g, v);
  int r = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
  int d = center ? g_binary(g, OP_SUB, v, g_spread(g, reduce_mean(g, v, axis), r, n, axis)) : v;
  int var = reduce_mean(g, g_binary(g, OP_MUL, d, d), axis);
  Node *y = graph_node(g, var);
  int yn[MAX_RANK] = {y->n[0], y->n[1], y->n[2]};
  int den = g_unary(g, OP_SQRT, g_binary(g, OP_ADD, var, g_const(g, 1e-5, y->rank, yn)));
  return g_binary(g, OP_DIV, d, g_spread(g, den, r, n, axis));
}

/* groupnorm: the last dim in `groups` groups, each normalized as layernorm */
static int groupnorm(Graph *g, int v, int groups) {
  Node *x = graph_node(g, v);
  int r = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]}, e = node_numel(x);
  int gn[2] = {e / (n[r - 1] / groups), n[r - 1] / groups};
  return g_reshape(g, norm_axis(g, g_reshape(g, v, 2, gn), 1, true), r, n);
}

/* A view-like op of a maybe complex value: the same on both parts. */
static Pair both(Graph *g, Pair a, int (*f)(Graph *, int, int, const int *), int rank, const int *n) {
  return (Pair){f(g, a.re, rank, n), a.im < 0 ? -1 : f(g, a.im, rank, n)};
}

static Pair lower_node(Lowerer *L, int id) {
  Program *p = L->p;
  Graph *g = &p->g;
  Node *n = T(L, id);
  int rank = n->rank, sz[MAX_RANK] = {n->n[0], n->n[1], n->n[2]};
  switch (n->op) {
  case OP_CONST: return real(g_const(g, n->k, rank, sz));
  case OP_INPUT: return real(L->xin);
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
  case OP_DIMVAL: return real(g_const(g, n->k, 0, NULL));
  case OP_EYE: {
    int one = g_const(g, 1, 1, sz), st[MAX_RANK] = {sz[0] + 1};
    return real(g_viewt(g, one, 2, sz, 0, st));
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
  case OP_LAYERNORM: return real(n->idx ? norm_axis(g, a.re, n->idx - 1, true) : norm(L, a.re, true));
  case OP_RMSNORM: return real(n->idx ? norm_axis(g, a.re, n->idx - 1, false) : norm(L, a.re, false));
  case OP_EXPAND: return both(g, a, expand, rank, sz);
  case OP_RESHAPE: return both(g, a, g_reshape, rank, sz);
  case OP_TRANSPOSE: return (Pair){transpose(g, a.re), a.im < 0 ? -1 : transpose(g, a.im)};
  case OP_AXSLICE:
    return (Pair){axslice(g, a.re, n->idx, n->st[1], sz[n->idx]), a.im < 0 ? -1 : axslice(g, a.im, n->idx, n->st[1], sz[n->idx])};
  case OP_MATMUL: {
    if (a.im < 0 && b.im < 0) return real(matmul(g, a.re, b.re, rank, sz));
    /* (ar + i ai)(br + i bi), each part a real batched product */
    int rr = matmul(g, a.re, b.re, rank, sz);
    if (a.im < 0) return (Pair){rr, matmul(g, a.re, b.im, rank, sz)};
    if (b.im < 0) return (Pair){rr, matmul(g, a.im, b.re, rank, sz)};
    return (Pair){g_binary(g, OP_SUB, rr, matmul(g, a.im, b.im, rank, sz)),
                  g_binary(g, OP_ADD, matmul(g, a.re, b.im, rank, sz), matmul(g, a.im, b.re, rank, sz))};
  }
  case OP_RSUM: return (Pair){g_rsum(g, a.re, n->idx), a.im < 0 ? -1 : g_rsum(g, a.im, n->idx)};
  case OP_RMAX: return real(g_rmax(g, a.re, n->idx));
  case OP_RMEAN: return (Pair){reduce_mean(g, a.re, n->idx), a.im < 0 ? -1 : reduce_mean(g, a.im, n->idx)};
  case OP_SOFTMAX: return real(softmax(g, a.re, n->idx));
  case OP_GROUPNORM: return real(groupnorm(g, a.re, n->st[1]));
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

static int chunk_inputs(Lowerer *L);
static int flat(Graph *g, int v);
static bool chunk_state(const Lowerer *L, int i) { return L->part != LOWER_WHOLE && L->c->states[i].chunk.applies; }

Program *lower_cell(Cell *c, bool training, bool scan_form) { return lower_cell_part(c, training, scan_form, LOWER_WHOLE); }

/* The chunked form's split (lower.h): the typed nodes LOWER_CHUNK_IN passes to LOWER_CHUNK_OUT
 * (shared), and the states OUT still reads (live) */
typedef struct ChunkSplit {
  bool *shared, *live;
} ChunkSplit;

static Program *lower_impl(Cell *c, bool training, bool scan_form, LowerPart part, const ChunkSplit *split, bool **done);
static ChunkSplit chunk_split(Cell *c, bool training, bool scan_form);

Program *lower_cell_part(Cell *c, bool training, bool scan_form, LowerPart part) {
  if (part == LOWER_WHOLE) return lower_impl(c, training, scan_form, part, NULL, NULL);
  ChunkSplit sp = chunk_split(c, training, scan_form);
  Program *p = lower_impl(c, training, scan_form, part, &sp, NULL);
  free(sp.shared), free(sp.live);
  return p;
}

/* A node of the typed graph that varies per step, and one worth passing (not a leaf, nor a view
 * of one: those cost OUT nothing) */
static bool typed_dynamic(Cell *c, int id, signed char *memo) {
  if (id < 0) return false;
  if (memo[id]) return memo[id] > 0;
  const Node *n = graph_node(&c->g, id);
  bool d = n->op == OP_INPUT || n->op == OP_PREV || n->op == OP_NEWVAL || n->op == OP_LAG || n->op == OP_HISTNEW ||
           n->op == OP_GUMBEL;
  for (int i = 0; !d && i < op_arity(n->op); i++) d = typed_dynamic(c, n->a[i], memo);
  memo[id] = d ? 1 : -1;
  return d;
}

static bool worth_passing(Cell *c, int id) {
  const Node *n = graph_node(&c->g, id);
  switch (n->op) {
  case OP_CONST: case OP_INPUT: case OP_PREV: case OP_PARAM: case OP_DIMVAL: case OP_EYE: case OP_LAG: return false;
  case OP_RESHAPE: case OP_EXPAND: case OP_TRANSPOSE: case OP_AXSLICE: case OP_BCAST: return worth_passing(c, n->a[0]);
  default: return true;
  }
}

typedef struct SplitWalk {
  Cell *c;
  const bool *in;      /* the typed nodes IN lowers */
  bool *seen, *read;
  signed char *dyn;
  ChunkSplit s;
  bool pass;           /* values IN computes are passed (the output's), else recomputed (the gates':
                          OUT computes them only when asked for) */
} SplitWalk;

static void split_walk(SplitWalk *w, int id);

static void split_live(SplitWalk *w, int st) {
  const StateInfo *si = &w->c->states[st];
  if (w->s.live[st] || si->chunk.applies) return;
  w->s.live[st] = true;
  split_walk(w, si->update), split_walk(w, si->coef_a), split_walk(w, si->coef_b);
}

/* OUT's need of node id: a read is its input, a value IN computes is passed, a previous value
 * keeps its state live */
static void split_walk(SplitWalk *w, int id) {
  if (id < 0 || w->seen[id]) return;
  w->seen[id] = true;
  const Node *n = graph_node(&w->c->g, id);
  if (w->read[id]) return;
  if (w->pass && w->in[id] && !n->cplx && typed_dynamic(w->c, id, w->dyn) && worth_passing(w->c, id)) {
    w->s.shared[id] = true;
    return;
  }
  if (n->op == OP_PREV || n->op == OP_NEWVAL) {
    split_live(w, n->idx);
    if (n->op == OP_PREV || w->c->states[n->idx].chunk.applies) return;
  }
  for (int i = 0; i < op_arity(n->op); i++) split_walk(w, n->a[i]);
}

static ChunkSplit chunk_split(Cell *c, bool training, bool scan_form) {
  int nn = c->g.nnodes;
  bool *in = NULL;
  program_free(lower_impl(c, training, scan_form, LOWER_CHUNK_IN, NULL, &in));
  SplitWalk w = {c, in, xcalloc((size_t)nn + 1, sizeof(bool)), xcalloc((size_t)nn + 1, sizeof(bool)),
                 xcalloc((size_t)nn + 1, 1), {xcalloc((size_t)nn + 1, sizeof(bool)), xcalloc((size_t)c->nstates + 1, sizeof(bool))},
                 true};
  for (int i = 0; i < c->nstates; i++)
    for (int r = 0; c->states[i].chunk.applies && r < c->states[i].chunk.nreads; r++) w.read[c->states[i].chunk.reads[r].node] = true;
  split_walk(&w, c->output);
  w.pass = false;
  for (int i = 0; i < c->ngates; i++) split_walk(&w, c->gates[i].node);
  free(in), free(w.seen), free(w.read), free(w.dyn);
  return w.s;
}

static Program *lower_impl(Cell *c, bool training, bool scan_form, LowerPart part, const ChunkSplit *split, bool **done) {
  CHECK(c->bound);
  Program *p = xcalloc(1, sizeof(Program));
  p->cell = c;
  p->training = training;
  p->scan_form = scan_form;
  graph_init(&p->g, true);
  Graph *g = &p->g;
  p->x_size = c->input_size;
  if (part == LOWER_CHUNK_OUT) { /* the reads follow the input */
    ChunkLayout lay[CHUNK_LAYOUT_MAX];
    int nl = lower_chunk_layout(c, lay, CHUNK_LAYOUT_MAX);
    p->x_size += lay[nl - 1].out_off + lay[nl - 1].nreads * lay[nl - 1].nh * lay[nl - 1].V;
  }
  for (int id = 0; split && id < c->g.nnodes; id++)
    if (split->shared[id]) p->chunk_shared += node_numel(graph_node(&c->g, id));
  if (part == LOWER_CHUNK_OUT) p->x_size += p->chunk_shared; /* then the values IN passes */
  p->x = g_leaf(g, OP_INPUT, 0, 1, &p->x_size);
  p->ppart_of = xcalloc((size_t)c->nparams + 1, sizeof(int));
  for (int i = 0; i < c->nparams; i++) {
    ParamInfo *pi = &c->params[i];
    p->ppart_of[i] = p->npparts;
    for (int part = 0; part < (pi->cplx ? 2 : 1); part++) {
      ParamPart pp = {.param = i, .part = part, .rank = pi->rank, .n = {pi->n[0], pi->n[1], pi->n[2]}, .grad = -1};
      pp.numel = 1;
      for (int d = 0; d < pi->rank; d++) pp.numel *= pi->n[d];
      pp.no_grad = pi->buffer || pi->frozen;
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
    if (part != LOWER_WHOLE && si->chunk.applies) continue; /* the chunk op's: no part here */
    for (int part = 0; part < (si->cplx ? 2 : 1); part++) {
      StatePart sp = {.state = i, .part = part, .cplx = si->cplx, .size = state_numel(si)};
      sp.prev = g_leaf(g, OP_PREV, p->nsparts, si->rank, si->n);
      sp.next = sp.a = sp.b = sp.dnew = sp.dprev = sp.g = sp.dtotal = -1;
      p->sparts = xrealloc(p->sparts, sizeof(StatePart) * (size_t)(p->nsparts + 1));
      p->sparts[p->nsparts++] = sp;
    }
  }
  Lowerer L = {p, c, xcalloc((size_t)c->g.nnodes + 1, sizeof(Pair)), xcalloc((size_t)c->g.nnodes + 1, sizeof(bool)),
               xcalloc((size_t)c->g.nnodes + 1, sizeof(int)), p->x, part};
  if (part == LOWER_CHUNK_OUT) { /* the input's first part, and each read of a chunked state: a slice after it */
    L.xin = g_slice(g, p->x, 0, c->input_size);
    ChunkLayout lay[CHUNK_LAYOUT_MAX];
    int nl = lower_chunk_layout(c, lay, CHUNK_LAYOUT_MAX);
    for (int i = 0; i < nl; i++)
      for (int r = 0; r < lay[i].nreads; r++) {
        int rd = c->states[lay[i].state].chunk.reads[r].node, len = lay[i].nh * lay[i].V;
        Node *rn = graph_node(&c->g, rd);
        L.memo[rd] = real(g_reshape(g, g_slice(g, p->x, c->input_size + lay[i].out_off + r * len, len), rn->rank, rn->n));
        L.done[rd] = true;
      }
    for (int id = 0, off = p->x_size - p->chunk_shared; id < c->g.nnodes; id++) {
      if (!split->shared[id]) continue;
      Node *sn = graph_node(&c->g, id);
      int len = node_numel(sn);
      L.memo[id] = real(g_reshape(g, g_slice(g, p->x, off, len), sn->rank, sn->n));
      L.done[id] = true;
      off += len;
    }
  }
  if (training)
    for (int id = 0; id < c->g.nnodes; id++)
      if (c->g.nodes[id].op == OP_GUMBEL) L.noise_index[id] = p->nnoise++;
  p->noise_sizes = xcalloc((size_t)p->nnoise + 1, sizeof(int));
  for (int i = 0; i < c->nstates; i++) {
    StateInfo *si = &c->states[i];
    if (chunk_state(&L, i)) continue;
    StatePart *sp = &p->sparts[p->spart_of[i]];
    if (part == LOWER_CHUNK_OUT && !split->live[i]) { /* IN's: it keeps its value here */
      for (int k = 0; k < (si->cplx ? 2 : 1); k++) sp[k].next = sp[k].prev;
      continue;
    }
    Pair v = lower(&L, si->update);
    sp[0].next = v.re;
    if (si->cplx) sp[1].next = im_of(&L, v);
  }
  Pair out = part == LOWER_CHUNK_IN ? real(chunk_inputs(&L)) : lower(&L, c->output);
  if (done) { /* chunk_split: what IN computes before the values it passes */
    *done = xmalloc((size_t)c->g.nnodes + 1);
    memcpy(*done, L.done, (size_t)c->g.nnodes);
  }
  for (int id = 0; part == LOWER_CHUNK_IN && split && id < c->g.nnodes; id++)
    if (split->shared[id]) out.re = g_concat(g, out.re, flat(g, lower(&L, id).re));
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
    if (si->rec != REC_DIAG_LINEAR || chunk_state(&L, i)) continue;
    StatePart *sp = &p->sparts[p->spart_of[i]];
    int rank = si->rank, *n = si->n;
    if (part == LOWER_CHUNK_OUT && !split->live[i]) { /* new = 1 * prev + 0 */
      for (int k = 0; k < (si->cplx ? 2 : 1); k++) sp[k].a = g_const(g, k ? 0 : 1, rank, n), sp[k].b = g_const(g, 0, rank, n);
      continue;
    }
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

/* ---- the chunked form's programs (docs/architecture.md, "The chunked form") ---- */

int lower_chunk_layout(const Cell *c, ChunkLayout *out, int max) {
  int n = 0, in_off = 0, out_off = 0;
  for (int i = 0; i < c->nstates && n < max; i++) {
    const StateInfo *s = &c->states[i];
    if (!s->chunk.applies) continue;
    ChunkLayout l = {.state = i, .nh = s->rank == 3 ? s->n[0] : 1, .K = s->n[s->chunk.key_axis],
                     .V = s->n[s->chunk.value_axis], .nterms = s->chunk.nterms, .nreads = s->chunk.nreads,
                     .per_key = s->chunk.decay == CHUNK_DECAY_KEY, .key_last = s->chunk.key_axis == s->rank - 1,
                     .delta = s->chunk.delta, .in_off = in_off, .out_off = out_off};
    in_off = chunk_la_off(&l) + (l.per_key ? l.nh * l.K : l.nh) + (l.delta ? l.nh : 0); /* the qs, ks, vs, log a, c */
    out_off += l.nreads * l.nh * l.V;
    out[n++] = l;
  }
  return n;
}

/* A value of the state's shape (or broadcast to it), constant along the axes other than `axis`
 * (and the head axis): its [nh, len(axis)] (rank 2; [len] for a state of rank 2), a strided view.
 * axis -1: constant along both: [nh]. */
static int along(Lowerer *L, const StateInfo *s, int v, int axis) {
  Graph *g = &L->p->g;
  int rank = s->rank, full = state_numel(s);
  if (node_numel(graph_node(g, v)) != full) v = g_bcast(g, v, rank, s->n); /* a scalar */
  CHECK(node_numel(graph_node(g, v)) == full);
  int st[MAX_RANK], vn[2], vs[2], r = 0, off = 0;
  shape_strides(rank, s->n, st);
  Node *x = graph_node(g, v);
  if (x->op == OP_VIEW && x->rank == rank) { /* a factor spread over the state (unsqueeze): its source's view, so
                                                the K x V spread is never made */
    off = x->idx;
    for (int d = 0; d < rank; d++) st[d] = x->st[d];
    v = x->a[0];
  }
  if (rank == 3) vn[r] = s->n[0], vs[r++] = st[0];
  if (axis >= 0) vn[r] = s->n[axis], vs[r++] = st[axis];
  if (r == 0) vn[r] = 1, vs[r++] = 0;
  return g_view(g, v, r, vn, off, vs);
}

/* flat [nh * len]: a value along an axis (rank 1 or 2) */
static int flat(Graph *g, int v) {
  int n = node_numel(graph_node(g, v));
  return g_reshape(g, v, 1, &n);
}

/* A term's key factor [nh, K] and value factor [nh, V] (its sign and per-head scalars folded in) */
static void chunk_term(Lowerer *L, const StateInfo *s, const ChunkTerm *t, int *kout, int *vout) {
  Graph *g = &L->p->g;
  const ChunkInfo *ci = &s->chunk;
  int nh = s->rank == 3 ? s->n[0] : 1, K = s->n[ci->key_axis], V = s->n[ci->value_axis];
  int hk[2] = {nh, K}, hv[2] = {nh, V};
  int k = -1, v = -1, sc = -1;
  for (int f = 0; f < t->nf; f++) {
    int role = t->role[f];
    int x = along(L, s, lower(L, t->factor[f]).re, role == 1 ? ci->key_axis : role == 2 ? ci->value_axis : -1);
    int *acc = role == 1 ? &k : role == 2 ? &v : &sc;
    if (*acc < 0 && !t->inv[f]) *acc = x;
    else if (*acc < 0) *acc = g_binary(g, OP_DIV, g_const(g, 1, graph_node(g, x)->rank, graph_node(g, x)->n), x);
    else *acc = g_binary(g, t->inv[f] ? OP_DIV : OP_MUL, *acc, x);
  }
  if (k < 0) k = g_const(g, 1, s->rank == 3 ? 2 : 1, s->rank == 3 ? hk : &K);
  if (v < 0) v = g_const(g, 1, s->rank == 3 ? 2 : 1, s->rank == 3 ? hv : &V);
  if (sc >= 0) v = g_binary(g, OP_MUL, v, s->rank == 3 ? g_spread(g, g_reshape(g, sc, 1, &nh), 2, hv, 1) : g_bcast(g, sc, 1, &V));
  if (t->sign < 0) v = g_unary(g, OP_NEG, v);
  *kout = k, *vout = v;
}

/* log a of the decay a (through views: reshapes, spreads): an exp's argument, a sigmoid's
 * logsigmoid, read through the same views: exact where a underflows, and no exp and log per
 * element */
static int log_of(Graph *g, int a) {
  enum { MAX_VIEWS = 8 };
  int views[MAX_VIEWS], nv = 0, src = a;
  while (nv < MAX_VIEWS && graph_node(g, src)->op == OP_VIEW) views[nv++] = src, src = graph_node(g, src)->a[0];
  Node s = *graph_node(g, src);
  int inner = s.op == OP_EXP ? s.a[0] : s.op == OP_SIGMOID ? g_unary(g, OP_LOGSIGMOID, s.a[0]) : -1;
  if (inner < 0) return g_unary(g, OP_LOG, a);
  for (int i = nv - 1; i >= 0; i--) { /* the views again, innermost first, on the log */
    Node v = *graph_node(g, views[i]);
    inner = g_view(g, inner, v.rank, v.n, v.idx, v.st);
  }
  return inner;
}

/* The chunk op's inputs, per chunked state in lower_chunk_layout's order, one row of vectors: the
 * reads' vectors, the terms' key and value factors, the log-decay (lower.h, ChunkLayout). */
static int chunk_inputs(Lowerer *L) {
  Cell *c = L->c;
  Graph *g = &L->p->g;
  ChunkLayout lay[CHUNK_LAYOUT_MAX];
  int nl = lower_chunk_layout(c, lay, CHUNK_LAYOUT_MAX), out = -1;
  for (int i = 0; i < nl; i++) {
    const StateInfo *s = &c->states[lay[i].state];
    const ChunkInfo *ci = &s->chunk;
    int nh = lay[i].nh, K = lay[i].K, M = ci->nterms, R = ci->nreads, hk[2] = {nh, K};
    int parts[CHUNK_MAX_READS + 2 * CHUNK_MAX_TERMS + 1], np = 0;
    for (int r = 0; r < R; r++) { /* a read's vector: [K] shared by the heads, or one per head ([nh, K, 1] or [nh, 1, K]) */
      int q = lower(L, ci->reads[r].vec).re;
      parts[np++] = flat(g, graph_node(g, q)->rank == 1 && s->rank == 3 ? g_spread(g, q, 2, hk, 0) : q);
    }
    int ks[CHUNK_MAX_TERMS], vs[CHUNK_MAX_TERMS];
    for (int m = 0; m < M; m++) chunk_term(L, s, &ci->terms[m], &ks[m], &vs[m]);
    for (int m = 0; m < M; m++) parts[np++] = flat(g, ks[m]);
    for (int m = 0; m < M; m++) parts[np++] = flat(g, vs[m]);
    int la;
    if (ci->decay == CHUNK_DECAY_NONE) la = g_const(g, 0, 1, &nh);
    else la = log_of(g, along(L, s, lower(L, ci->decay_node).re, ci->decay == CHUNK_DECAY_KEY ? ci->key_axis : -1));
    parts[np++] = flat(g, la);
    if (ci->delta) { /* the projection's coefficient c, per head */
      int cf = g_const(g, ci->proj.sign, 1, &nh);
      for (int f = 0; f < ci->proj.nf; f++)
        cf = g_binary(g, ci->proj.inv[f] ? OP_DIV : OP_MUL, cf, flat(g, along(L, s, lower(L, ci->proj.factor[f]).re, -1)));
      parts[np++] = cf;
    }
    for (int j = 0; j < np; j++) out = out < 0 ? parts[j] : g_concat(g, out, parts[j]);
  }
  return out;
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
  size_t cap = 16 + (size_t)p->g.nnodes * 12 + (size_t)p->nsparts * 9 + (size_t)p->npparts * 2 + (size_t)p->nbounds * 3 +
               (size_t)p->ngates + (size_t)p->nnoise, n = 0;
  uint64_t *v = xmalloc(sizeof(uint64_t) * cap);
#define PUT(x) (v[n++] = (uint64_t)(int64_t)(x))
  /* not p->training: it changes the graph (gumbel noise) or nothing, so a training program and an
   * evaluation program without noise are one (cellc train's two runs of a layer share its work) */
  PUT(p->g.nnodes), PUT(p->nforward), PUT(p->output), PUT(p->dx), PUT(p->dy), PUT(p->scan_form);
  PUT(p->nsparts), PUT(p->npparts), PUT(p->nbounds), PUT(p->ngates), PUT(p->nnoise);
  for (int i = 0; i < p->g.nnodes; i++) {
    const Node *x = &p->g.nodes[i];
    uint64_t kb;
    memcpy(&kb, &x->k, sizeof kb);
    PUT(x->op), PUT(x->rank), PUT(x->n[0]), PUT(x->n[1]), PUT(x->n[2]), PUT(x->a[0]), PUT(x->a[1]), PUT(x->idx), v[n++] = kb;
    PUT(x->st[0]), PUT(x->st[1]), PUT(x->st[2]);
  }
  for (int i = 0; i < p->nsparts; i++) {
    const StatePart *x = &p->sparts[i];
    PUT(x->next), PUT(x->a), PUT(x->b), PUT(x->g), PUT(x->dtotal), PUT(x->dprev), PUT(x->dnew), PUT(x->size), PUT(x->cplx);
  }
  for (int i = 0; i < p->npparts; i++) PUT(p->pparts[i].grad);
  for (int i = 0; i < p->npparts; i++)
    if (p->pparts[i].no_grad) PUT(-2 - i); /* only programs with a buffer or frozen param sign it */
  for (int i = 0; i < p->nbounds; i++) PUT(p->bounds[i].node), PUT(p->bounds[i].adj), PUT(p->bounds[i].acc);
  for (int i = 0; i < p->ngates; i++) PUT(p->gates[i].node);
  for (int i = 0; i < p->nnoise; i++) PUT(p->noise_sizes[i]);
#undef PUT
  CHECK(n <= cap);
  *len = n;
  return v;
}
