/* autodiff.c: reverse-mode differentiation of the real step graph.
 * The per-row backward maps (dy, dnew) to dprev, dx and the adjoints of the
 * static nodes the step reads (params, or values computed from params only);
 * those adjoints are summed over every row, then a static backward, run once,
 * maps them to the params' gradients. Each op's rule is keyed by the op table (its diff
 * column); rules reuse forward values where that is cheaper (sigmoid' = s(1 - s),
 * tanh' = 1 - t^2, exp' = exp). Every node goes
 * through the hash-consing builders, so the backward shares subexpressions
 * with the forward and with itself. */
#include <math.h>
#include <string.h>

#include "lower.h"

typedef struct AD {
  Program *p;
  Graph *g;
  int *adj; /* per node: its adjoint, or -1 (zero); grows with the graph */
  int cap;
} AD;

static Node *nd(AD *d, int id) { return graph_node(d->g, id); }

static int adj_of(AD *d, int id) { return id < d->cap ? d->adj[id] : -1; }

static void set_adj(AD *d, int id, int v) {
  if (id >= d->cap) {
    int ncap = 2 * (id + 1) + 1024;
    d->adj = xrealloc(d->adj, sizeof(int) * (size_t)ncap);
    for (int i = d->cap; i < ncap; i++) d->adj[i] = -1;
    d->cap = ncap;
  }
  d->adj[id] = v;
}

static void add_adj(AD *d, int id, int contrib) {
  if (contrib < 0 || g_is_const(d->g, contrib, 0)) return;
  set_adj(d, id, adj_of(d, id) < 0 ? contrib : g_binary(d->g, OP_ADD, adj_of(d, id), contrib));
}

static int k(AD *d, double v) { return g_const(d->g, v, 0, NULL); }
static int mul(AD *d, int a, int b) { return g_binary(d->g, OP_MUL, a, b); }
static int sub(AD *d, int a, int b) { return g_binary(d->g, OP_SUB, a, b); }
static int addn(AD *d, int a, int b) { return g_binary(d->g, OP_ADD, a, b); }
static int divn(AD *d, int a, int b) { return g_binary(d->g, OP_DIV, a, b); }
static int un(AD *d, Op op, int a) { return g_unary(d->g, op, a); }
static int arg(AD *d, int id, int i) { return nd(d, id)->a[i]; }

/* ---- the derivative rules: d_<op>(d, id, G) propagates the adjoint G of node id to its arguments
 * (the op table's diff column: RULE ops have one here; rules reuse forward values where that is
 * cheaper) ---- */

typedef void (*Rule)(AD *d, int id, int G);

/* ZERO: nothing flows (leaves; step, sign and lt are piecewise constant) */
static void d_zero(AD *d, int id, int G) { (void)d, (void)id, (void)G; }
/* NONE: the typed graph's ops never reach autodiff */
static void d_none(AD *d, int id, int G) {
  (void)G;
  UNREACHABLE(op_name(nd(d, id)->op));
}

static void d_NEG(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), un(d, OP_NEG, G)); }
static void d_ADD(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), G), add_adj(d, arg(d, id, 1), G); }
static void d_SUB(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), G), add_adj(d, arg(d, id, 1), un(d, OP_NEG, G)); }
static void d_MUL(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  add_adj(d, a, mul(d, G, b));
  add_adj(d, b, mul(d, G, a));
}
static void d_DIV(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  add_adj(d, a, divn(d, G, b));
  add_adj(d, b, un(d, OP_NEG, divn(d, mul(d, G, id), b)));
}
/* min(a, b) = a when a <= b, max(a, b) = a when a >= b: the adjoint goes to a, or to b where
 * b_wins (1 where b is strictly below a for min, above for max) */
static void minmax(AD *d, int a, int b, int b_wins, int G) {
  add_adj(d, a, mul(d, G, sub(d, k(d, 1), b_wins)));
  add_adj(d, b, mul(d, G, b_wins));
}
static void d_MIN(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  minmax(d, a, b, g_binary(d->g, OP_LT, b, a), G);
}
static void d_MAX(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  minmax(d, a, b, g_binary(d->g, OP_LT, a, b), G);
}
static void d_SIGMOID(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, mul(d, id, sub(d, k(d, 1), id)))); }
static void d_TANH(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, sub(d, k(d, 1), mul(d, id, id)))); }
static void d_RELU(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, un(d, OP_STEP, arg(d, id, 0)))); }
static void d_SILU(AD *d, int id, int G) {
  int a = arg(d, id, 0), s = un(d, OP_SIGMOID, a);
  add_adj(d, a, mul(d, G, mul(d, s, addn(d, k(d, 1), mul(d, a, sub(d, k(d, 1), s))))));
}
static void d_GELU(AD *d, int id, int G) {
  int a = arg(d, id, 0);
  int cdf = mul(d, k(d, 0.5), addn(d, k(d, 1), un(d, OP_ERF, mul(d, a, k(d, M_SQRT1_2)))));
  int pdf = mul(d, k(d, 0.5 * M_2_SQRTPI * M_SQRT1_2), un(d, OP_EXP, mul(d, k(d, -0.5), mul(d, a, a))));
  add_adj(d, a, mul(d, G, addn(d, cdf, mul(d, a, pdf))));
}
static void d_EXP(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, id)); }
static void d_LOG(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), divn(d, G, arg(d, id, 0))); }
static void d_SOFTPLUS(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, un(d, OP_SIGMOID, arg(d, id, 0)))); }
static void d_LOGSIGMOID(AD *d, int id, int G) {
  add_adj(d, arg(d, id, 0), mul(d, G, sub(d, k(d, 1), un(d, OP_SIGMOID, arg(d, id, 0)))));
}
/* at 0 the subgradient 0 (so |z| of a complex 0 has gradient 0) */
static void d_SQRT(AD *d, int id, int G) {
  int pos = un(d, OP_STEP, id);
  add_adj(d, arg(d, id, 0), divn(d, mul(d, mul(d, G, k(d, 0.5)), pos), addn(d, id, sub(d, k(d, 1), pos))));
}
static void d_ABS(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, un(d, OP_SIGN, arg(d, id, 0)))); }
static void d_SQUARE(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, mul(d, k(d, 2), arg(d, id, 0)))); }
static void d_SIN(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, un(d, OP_COS, arg(d, id, 0)))); }
static void d_COS(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), un(d, OP_NEG, mul(d, G, un(d, OP_SIN, arg(d, id, 0))))); }
static void d_ERF(AD *d, int id, int G) {
  int a = arg(d, id, 0);
  add_adj(d, a, mul(d, G, mul(d, k(d, M_2_SQRTPI), un(d, OP_EXP, un(d, OP_NEG, mul(d, a, a))))));
}
static void d_EXPM1(AD *d, int id, int G) { add_adj(d, arg(d, id, 0), mul(d, G, addn(d, id, k(d, 1)))); }
static void d_LOG1P(AD *d, int id, int G) {
  add_adj(d, arg(d, id, 0), divn(d, G, addn(d, k(d, 1), arg(d, id, 0))));
}
/* 1 where x != 0 (NaN included), else 0 */
static int nonzero(AD *d, int x) { return g_binary(d->g, OP_LT, k(d, 0), un(d, OP_ABS, x)); }
/* mask(m, v), or v itself where m is a constant that keeps it (a constant exponent or base) */
static int mask_by(AD *d, int m, int v) {
  const Node *n = nd(d, m);
  return n->op == OP_CONST && n->k > 0 ? v : g_binary(d->g, OP_MASK, m, v);
}
/* As torch.pow: d/da = b a^(b-1), 0 where b == 0 (so pow(0, 0) has gradient 0, not 0 * inf);
 * d/db = a^b log a, 0 where a == 0 (log 0 = -inf would give NaN). A negative base gives NaN
 * through log, as PyTorch's does. */
static void d_POW(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  int da = mul(d, G, mul(d, b, g_binary(d->g, OP_POW, a, sub(d, b, k(d, 1)))));
  add_adj(d, a, mask_by(d, nonzero(d, b), da));
  add_adj(d, b, mask_by(d, nonzero(d, a), mul(d, G, mul(d, id, un(d, OP_LOG, a)))));
}
/* the mask (a comparison) gets nothing; the selected value gets the adjoint where selected */
static void d_MASK(AD *d, int id, int G) { add_adj(d, arg(d, id, 1), g_binary(d->g, OP_MASK, arg(d, id, 0), G)); }
static void d_BCAST(AD *d, int id, int G) {
  Node *x = nd(d, arg(d, id, 0));
  add_adj(d, arg(d, id, 0), g_bcast(d->g, g_sum(d->g, G), x->rank, x->n));
}
static void d_SUM(AD *d, int id, int G) {
  Node *x = nd(d, arg(d, id, 0));
  add_adj(d, arg(d, id, 0), g_bcast(d->g, G, x->rank, x->n));
}
static void d_CONCAT(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  int na = node_numel(nd(d, a)), nb = node_numel(nd(d, b));
  add_adj(d, a, g_slice(d->g, G, 0, na));
  add_adj(d, b, g_slice(d->g, G, na, nb));
}
/* a slice's adjoint: G in place, zeros around it */
static void d_SLICE(AD *d, int id, int G) {
  int a = arg(d, id, 0), off = nd(d, id)->idx, len = node_numel(nd(d, id)), rest = node_numel(nd(d, a)) - off - len;
  int v = G;
  if (off > 0) v = g_concat(d->g, g_const(d->g, 0, 1, &off), v);
  if (rest > 0) v = g_concat(d->g, v, g_const(d->g, 0, 1, &rest));
  add_adj(d, a, v);
}
/* y = M @ v: dv = M^T @ G, dM = G outer v */
static void d_MATVEC(AD *d, int id, int G) {
  int m = arg(d, id, 0), v = arg(d, id, 1);
  add_adj(d, v, g_matvec_t(d->g, m, G));
  add_adj(d, m, g_outer(d->g, G, v));
}
/* y = M^T @ v: dv = M @ G, dM = v outer G */
static void d_MATVEC_T(AD *d, int id, int G) {
  int m = arg(d, id, 0), v = arg(d, id, 1);
  add_adj(d, v, g_matvec(d->g, m, G));
  add_adj(d, m, g_outer(d->g, v, G));
}
/* Y = u outer v: du = G @ v, dv = G^T @ u */
static void d_OUTER(AD *d, int id, int G) {
  int u = arg(d, id, 0), v = arg(d, id, 1);
  add_adj(d, u, g_matvec(d->g, G, v));
  add_adj(d, v, g_matvec_t(d->g, G, u));
}

/* A node's shape, copied: adding nodes may move the node array. */
typedef struct Dims {
  int rank, n[MAX_RANK];
} Dims;
static Dims dims_of(AD *d, int id) {
  Node *x = nd(d, id);
  return (Dims){x->rank, {x->n[0], x->n[1], x->n[2]}};
}

/* A view's adjoint: summed over its broadcast dims (stride 0), then scattered back. */
static void d_VIEW(AD *d, int id, int G) {
  Node *v = nd(d, id);
  int a = arg(d, id, 0), rank = v->rank, off = v->idx, n[MAX_RANK], st[MAX_RANK];
  for (int i = 0; i < rank; i++) n[i] = v->n[i], st[i] = v->st[i];
  Dims x = dims_of(d, a);
  for (int i = rank - 1; i >= 0; i--) {
    if (n[i] == 1 || st[i] != 0) continue;
    G = g_rsum(d->g, G, i);
    for (int j = i; j + 1 < rank; j++) n[j] = n[j + 1], st[j] = st[j + 1];
    rank--;
  }
  int r = g_reshape(d->g, G, rank, n);
  add_adj(d, a, g_viewt(d->g, r, x.rank, x.n, off, st));
}
/* a scatter's adjoint: the gather of the same places */
static void d_VIEWT(AD *d, int id, int G) {
  Node *t = nd(d, id);
  int a = arg(d, id, 0), off = t->idx, st[MAX_RANK] = {t->st[0], t->st[1], t->st[2]};
  Dims v = dims_of(d, a);
  add_adj(d, a, g_view(d->g, G, v.rank, v.n, off, st));
}
static int spread(AD *d, int G, Dims x, int axis) { return g_spread(d->g, G, x.rank, x.n, axis); }
static void d_RSUM(AD *d, int id, int G) {
  int a = arg(d, id, 0), axis = nd(d, id)->idx;
  add_adj(d, a, spread(d, G, dims_of(d, a), axis));
}
/* amax: the adjoint shared equally by the maxima (as torch.amax) */
static void d_RMAX(AD *d, int id, int G) {
  int a = arg(d, id, 0), axis = nd(d, id)->idx;
  Dims x = dims_of(d, a);
  int mb = spread(d, id, x, axis);
  int one = g_const(d->g, 1, x.rank, x.n);
  int eq = g_binary(d->g, OP_SUB, g_binary(d->g, OP_SUB, one, g_binary(d->g, OP_LT, a, mb)), g_binary(d->g, OP_LT, mb, a));
  int share = g_binary(d->g, OP_DIV, G, g_rsum(d->g, eq, axis));
  add_adj(d, a, g_binary(d->g, OP_MUL, eq, spread(d, share, x, axis)));
}
/* [b, r, c] with its last two dims swapped, as a view */
static int swap_last(AD *d, int m) {
  Dims x = dims_of(d, m);
  int n[MAX_RANK] = {x.n[0], x.n[2], x.n[1]}, st[MAX_RANK] = {x.n[1] * x.n[2], 1, x.n[2]};
  return g_view(d->g, m, 3, n, 0, st);
}
/* C = A @ B: dA = G @ B^T, dB = A^T @ G */
static void d_BMM(AD *d, int id, int G) {
  int a = arg(d, id, 0), b = arg(d, id, 1);
  int bt = swap_last(d, b);
  add_adj(d, a, g_bmm(d->g, G, bt));
  int at = swap_last(d, a);
  add_adj(d, b, g_bmm(d->g, at, G));
}

#define DIFF_RULE(name) d_##name
#define DIFF_ZERO(name) d_zero
#define DIFF_NONE(name) d_none
static const Rule rules[OP_COUNT] = {
#define X(name, arity, text, where, diff, ...) [OP_##name] = DIFF_##diff(name),
    GRAPH_OPS(X, X)
#undef X
};

static void rule(AD *d, int id, int G) { rules[nd(d, id)->op](d, id, G); }

void ad_differentiate(Program *p) {
  CHECK(!p->differentiated);
  Graph *g = &p->g;
  AD d = {p, g, NULL, 0};
  int nfwd = p->nforward;

  p->dy = g_leaf(g, OP_DY, 0, 1, &p->output_size);
  add_adj(&d, p->output, p->dy);
  for (int i = 0; i < p->nsparts; i++) {
    StatePart *s = &p->sparts[i];
    Node *x = graph_node(g, s->prev);
    int rank = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
    s->dnew = g_leaf(g, OP_DNEW, i, rank, n);
  }
  /* per-row backward: dynamic nodes in reverse order; stop at static ones */
  program_mark_dyn(p);
  bool *is_dyn = xcalloc((size_t)nfwd + 1, sizeof(bool));
  memcpy(is_dyn, p->dyn, sizeof(bool) * (size_t)nfwd);
  for (int id = nfwd - 1; id >= 0; id--) {
    /* a new state value: its adjoint from this step's users is complete here;
       the next step's gradient (dnew) joins it now */
    for (int i = 0; i < p->nsparts; i++) {
      StatePart *s = &p->sparts[i];
      if (s->next != id) continue;
      s->g = adj_of(&d, id);
      set_adj(&d, id, -1);
      add_adj(&d, id, s->g);
      add_adj(&d, id, s->dnew);
      s->dtotal = adj_of(&d, id);
    }
    if (adj_of(&d, id) < 0 || !is_dyn[id]) continue;
    rule(&d, id, adj_of(&d, id));
  }
  p->dx = adj_of(&d, p->x);
  for (int i = 0; i < p->nsparts; i++) p->sparts[i].dprev = adj_of(&d, p->sparts[i].prev);
  /* static nodes the per-row backward reached: their adjoints are summed over rows */
  for (int id = 0; id < nfwd; id++) {
    if (is_dyn[id] || adj_of(&d, id) < 0) continue;
    Node *x = graph_node(g, id);
    if (x->op == OP_CONST) continue;
    Boundary bd = {id, adj_of(&d, id), -1};
    int rank = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
    bd.acc = g_leaf(g, OP_ACC, p->nbounds, rank, n);
    p->bounds = xrealloc(p->bounds, sizeof(Boundary) * (size_t)(p->nbounds + 1));
    p->bounds[p->nbounds++] = bd;
  }
  /* static backward, once: from the summed adjoints to the params */
  for (int i = 0; i < nfwd; i++) set_adj(&d, i, -1);
  for (int i = 0; i < p->nbounds; i++) set_adj(&d, p->bounds[i].node, p->bounds[i].acc);
  for (int id = nfwd - 1; id >= 0; id--) {
    if (adj_of(&d, id) < 0 || is_dyn[id]) continue;
    rule(&d, id, adj_of(&d, id));
  }
  for (int i = 0; i < p->npparts; i++) p->pparts[i].grad = adj_of(&d, p->pparts[i].leaf);
  free(is_dyn);
  free(d.adj);
  p->differentiated = true;
  program_mark_dyn(p);
}

/* ---- printing the backward as math ---- */

typedef struct Printer {
  Program *p;
  FILE *f;
  char **name;   /* per node: its name once printed (t1, t2, ...) */
  int *uses;
  int ntemps;
} Printer;

static void print_expr(Printer *P, int id, int prec);

static const char *leaf_name(Printer *P, Node *n, char *buf, int size) {
  Program *p = P->p;
  Cell *c = p->cell;
  switch (n->op) {
  case OP_INPUT: return c->input_name;
  case OP_PREV: {
    StatePart *s = &p->sparts[n->idx];
    snprintf(buf, (size_t)size, "%s%s", c->states[s->state].name, c->states[s->state].cplx ? (s->part ? ".im" : ".re") : "");
    return buf;
  }
  case OP_PARAM: {
    ParamPart *pp = &p->pparts[n->idx];
    snprintf(buf, (size_t)size, "%s%s", c->params[pp->param].name, c->params[pp->param].cplx ? (pp->part ? ".im" : ".re") : "");
    return buf;
  }
  case OP_DNEW: {
    StatePart *s = &p->sparts[n->idx];
    snprintf(buf, (size_t)size, "d%s'%s", c->states[s->state].name, c->states[s->state].cplx ? (s->part ? ".im" : ".re") : "");
    return buf;
  }
  case OP_DY: return "dy";
  case OP_NOISE: snprintf(buf, (size_t)size, "u%d", n->idx); return buf;
  case OP_ACC: snprintf(buf, (size_t)size, "sum_rows(a%d)", n->idx); return buf;
  default: return NULL;
  }
}

static int prec_of(Op op) {
  switch (op) {
  case OP_ADD: case OP_SUB: return 1;
  case OP_MUL: case OP_DIV: return 2;
  case OP_NEG: return 3;
  default: return 5;
  }
}

static void print_expr(Printer *P, int id, int prec) {
  Node *n = graph_node(&P->p->g, id);
  FILE *f = P->f;
  char buf[128];
  if (P->name[id]) {
    fputs(P->name[id], f);
    return;
  }
  const char *leaf = leaf_name(P, n, buf, (int)sizeof buf);
  if (leaf) {
    fputs(leaf, f);
    return;
  }
  switch (n->op) {
  case OP_CONST: fprintf(f, n->k < 0 && prec > 0 ? "(%.9g)" : "%.9g", n->k); return;
  case OP_NEG:
    if (prec > 3) fputc('(', f);
    fputc('-', f);
    print_expr(P, n->a[0], 4);
    if (prec > 3) fputc(')', f);
    return;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: {
    int p = prec_of(n->op);
    if (prec > p) fputc('(', f);
    print_expr(P, n->a[0], p);
    fprintf(f, " %s ", op_text(n->op));
    print_expr(P, n->a[1], p + 1);
    if (prec > p) fputc(')', f);
    return;
  }
  case OP_MATVEC:
  case OP_MATVEC_T:
    if (prec > 4) fputc('(', f);
    print_expr(P, n->a[0], 5);
    fputs(n->op == OP_MATVEC ? " @ " : "^T @ ", f);
    print_expr(P, n->a[1], 5);
    if (prec > 4) fputc(')', f);
    return;
  case OP_SLICE:
    print_expr(P, n->a[0], 5);
    fprintf(f, "[%d:%d]", n->idx, n->idx + n->n[0]);
    return;
  case OP_BCAST:
    print_expr(P, n->a[0], prec);
    return;
  default:
    fprintf(f, "%s(", op_text(n->op));
    for (int i = 0; i < op_arity(n->op); i++) {
      if (i) fputs(", ", f);
      print_expr(P, n->a[i], 0);
    }
    fputc(')', f);
  }
}

static void count_uses(Printer *P, int id, bool *seen) {
  if (id < 0) return;
  P->uses[id]++;
  if (seen[id]) return;
  seen[id] = true;
  Node *n = graph_node(&P->p->g, id);
  for (int i = 0; i < op_arity(n->op); i++) count_uses(P, n->a[i], seen);
}

/* Name every non-leaf node used twice or more (common subexpressions), in id order. */
static void print_temps(Printer *P, int id, bool *done) {
  if (id < 0 || done[id]) return;
  done[id] = true;
  Node *n = graph_node(&P->p->g, id);
  for (int i = 0; i < op_arity(n->op); i++) print_temps(P, n->a[i], done);
  if (op_is_leaf(n->op) || n->op == OP_BCAST || P->uses[id] < 2) return;
  char buf[32];
  snprintf(buf, sizeof buf, "t%d", ++P->ntemps);
  fprintf(P->f, "  %s = ", buf);
  print_expr(P, id, 0);
  fputc('\n', P->f);
  P->name[id] = xstrdup(buf);
}

static void print_out(Printer *P, const char *what, int id, bool *done) {
  print_temps(P, id, done);
  fprintf(P->f, "  %s = ", what);
  if (id < 0) fputs("0", P->f);
  else print_expr(P, id, 0);
  fputc('\n', P->f);
}

void ad_print(Program *p, FILE *f) {
  Cell *c = p->cell;
  int nn = p->g.nnodes;
  Printer P = {p, f, xcalloc((size_t)nn, sizeof(char *)), xcalloc((size_t)nn, sizeof(int)), 0};
  bool *seen = xcalloc((size_t)nn, sizeof(bool));
  /* forward values keep their names (lets and gates read better than their expressions) */
  for (int i = 0; i < p->nsparts; i++) {
    StatePart *s = &p->sparts[i];
    Node *x = graph_node(&p->g, s->next);
    if (!op_is_leaf(x->op))
      P.name[s->next] = xasprintf("%s'%s", c->states[s->state].name, c->states[s->state].cplx ? (s->part ? ".im" : ".re") : "");
  }
  for (int i = 0; i < p->ngates; i++)
    if (!P.name[p->gates[i].node] && !op_is_leaf(graph_node(&p->g, p->gates[i].node)->op))
      P.name[p->gates[i].node] = xstrdup(c->gates[i].name);
  for (int i = 0; i < p->nsparts; i++) count_uses(&P, p->sparts[i].dprev, seen);
  count_uses(&P, p->dx, seen);
  for (int i = 0; i < p->nbounds; i++) count_uses(&P, p->bounds[i].adj, seen);
  for (int i = 0; i < p->npparts; i++) count_uses(&P, p->pparts[i].grad, seen);
  bool *done = xcalloc((size_t)nn, sizeof(bool));
  for (int i = 0; i < nn; i++)
    if (P.name[i]) done[i] = true;
  fprintf(f, "backward step of cell %s (%s mode)\n", c->name, c->mode == MODE_SCAN ? "scan" : "sequential");
  fprintf(f, "given dy (the output's gradient) and d<state>' (the new states' gradients):\n");
  char what[160];
  for (int i = 0; i < p->nsparts; i++) {
    StatePart *s = &p->sparts[i];
    snprintf(what, sizeof what, "d%s%s", c->states[s->state].name, c->states[s->state].cplx ? (s->part ? ".im" : ".re") : "");
    print_out(&P, what, s->dprev, done);
  }
  snprintf(what, sizeof what, "d%s", c->input_name);
  print_out(&P, what, p->dx, done);
  fprintf(f, "per row, summed over all steps and batch rows:\n");
  for (int i = 0; i < p->nbounds; i++) {
    Boundary *b = &p->bounds[i];
    Node *x = graph_node(&p->g, b->node);
    char buf[128];
    const char *nm = leaf_name(&P, x, buf, (int)sizeof buf);
    if (nm) snprintf(what, sizeof what, "a%d (d%s)", i, nm);
    else snprintf(what, sizeof what, "a%d", i);
    print_out(&P, what, b->adj, done);
  }
  fprintf(f, "params (once, from the sums):\n");
  for (int i = 0; i < p->npparts; i++) {
    ParamPart *pp = &p->pparts[i];
    snprintf(what, sizeof what, "d%s%s", c->params[pp->param].name, c->params[pp->param].cplx ? (pp->part ? ".im" : ".re") : "");
    print_out(&P, what, pp->grad, done);
  }
  for (int i = 0; i < nn; i++) free(P.name[i]);
  free(P.name);
  free(P.uses);
  free(seen);
  free(done);
}
