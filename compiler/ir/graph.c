/* graph.c: the step graph: node creation with hash-consing
 * (common-subexpression elimination), local simplification and constant folding (through the
 * ops' scalar meaning, ops.h), and printing. */
#include "graph.h"

#include <math.h>
#include <string.h>

void graph_init(Graph *g, bool cse) {
  memset(g, 0, sizeof *g);
  g->cse = cse;
}

void graph_free(Graph *g) {
  free(g->nodes);
  free(g->htab);
  memset(g, 0, sizeof *g);
}

int node_numel(const Node *n) {
  int e = 1;
  for (int i = 0; i < n->rank; i++) e *= n->n[i];
  return e;
}

static uint64_t node_hash(const Node *n) {
  uint64_t h = 1469598103934665603ull;
#define MIX(v) h = (h ^ (uint64_t)(v)) * 1099511628211ull
  MIX(n->op);
  MIX(n->rank);
  for (int i = 0; i < n->rank; i++) MIX(n->n[i]);
  for (int i = 0; i < op_arity(n->op); i++) MIX(n->a[i]);
  for (int i = 0; i < MAX_RANK; i++) MIX(n->st[i]);
  MIX(n->idx);
  uint64_t kb;
  memcpy(&kb, &n->k, sizeof kb);
  MIX(kb);
#undef MIX
  return h;
}

static bool node_equal(const Node *x, const Node *y) {
  if (x->op != y->op || x->rank != y->rank || x->idx != y->idx) return false;
  if (memcmp(&x->k, &y->k, sizeof x->k) != 0) return false;
  for (int i = 0; i < x->rank; i++)
    if (x->n[i] != y->n[i]) return false;
  for (int i = 0; i < MAX_RANK; i++)
    if (x->st[i] != y->st[i]) return false;
  for (int i = 0; i < op_arity(x->op); i++)
    if (x->a[i] != y->a[i]) return false;
  return true;
}

static void rehash(Graph *g) {
  free(g->htab);
  g->hcap = g->hcap ? g->hcap * 2 : 1024;
  g->htab = xcalloc((size_t)g->hcap, sizeof(int));
  for (int id = 0; id < g->nnodes; id++) {
    if (g->nodes[id].op == OP_NOISE) continue;
    uint64_t h = node_hash(&g->nodes[id]);
    int slot = (int)(h & (uint64_t)(g->hcap - 1));
    while (g->htab[slot]) slot = (slot + 1) & (g->hcap - 1);
    g->htab[slot] = id + 1;
  }
}

static int append(Graph *g, Node n) {
  VEC_PUSH(g->nodes, g->nnodes, g->cap, n);
  return g->nnodes - 1;
}

int graph_add(Graph *g, Node n) {
  for (int i = op_arity(n.op); i < 2; i++) n.a[i] = -1;
  if (!g->cse) return append(g, n);
  if (2 * (g->nnodes + 1) > g->hcap) rehash(g);
  uint64_t h = node_hash(&n);
  int slot = (int)(h & (uint64_t)(g->hcap - 1));
  while (g->htab[slot]) {
    int id = g->htab[slot] - 1;
    if (node_equal(&g->nodes[id], &n)) return id;
    slot = (slot + 1) & (g->hcap - 1);
  }
  int id = append(g, n);
  g->htab[slot] = id + 1;
  return id;
}

/* ---- real-graph builders: shapes from the arguments, folding, identities ---- */

static Node shaped(Op op, int rank, const int *n) {
  Node x = {0};
  x.op = op;
  x.rank = rank;
  for (int i = 0; i < rank; i++) x.n[i] = n[i];
  x.a[0] = x.a[1] = -1;
  return x;
}

int g_const(Graph *g, double k, int rank, const int *n) {
  Node x = shaped(OP_CONST, rank, n);
  x.k = k == 0 ? 0 : k; /* one zero: -0 and 0 share a node */
  return graph_add(g, x);
}

int g_leaf(Graph *g, Op op, int idx, int rank, const int *n) {
  CHECK(op_is_leaf(op));
  Node x = shaped(op, rank, n);
  x.idx = idx;
  return graph_add(g, x);
}

bool g_is_const(Graph *g, int id, double k) {
  Node *n = graph_node(g, id);
  return n->op == OP_CONST && n->k == k;
}

static bool is_const(Graph *g, int id) { return graph_node(g, id)->op == OP_CONST; }
static double kval(Graph *g, int id) { return graph_node(g, id)->k; }

static bool same_dims(const Node *x, int rank, const int *n) {
  if (x->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (x->n[i] != n[i]) return false;
  return true;
}

int g_unary(Graph *g, Op op, int a) {
  Node *x = graph_node(g, a);
  int rank = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
  if (x->op == OP_CONST) return g_const(g, op_eval_scalar(op, x->k, 0), rank, n);
  if (op == OP_NEG && x->op == OP_NEG) return x->a[0];
  Node y = shaped(op, rank, n);
  y.a[0] = a;
  return graph_add(g, y);
}

int g_bcast(Graph *g, int a, int rank, const int *n) {
  Node *x = graph_node(g, a);
  Node y = shaped(OP_BCAST, rank, n);
  if (same_dims(x, rank, n)) return a;
  CHECK(node_numel(x) == 1);
  if (x->op == OP_CONST) return g_const(g, x->k, rank, n);
  y.a[0] = a;
  return graph_add(g, y);
}

int g_binary(Graph *g, Op op, int a, int b) {
  Node *x = graph_node(g, a), *y = graph_node(g, b);
  int ex = node_numel(x), ey = node_numel(y);
  /* broadcast the size-1 side to the other's shape */
  if (!same_dims(x, y->rank, y->n)) {
    if (ex == 1) a = g_bcast(g, a, y->rank, y->n);
    else if (ey == 1) b = g_bcast(g, b, x->rank, x->n);
    else UNREACHABLE("g_binary: shapes differ");
    x = graph_node(g, a), y = graph_node(g, b);
  }
  int rank = x->rank, n[MAX_RANK] = {x->n[0], x->n[1], x->n[2]};
  if (is_const(g, a) && is_const(g, b)) return g_const(g, op_eval_scalar(op, kval(g, a), kval(g, b)), rank, n);
  switch (op) {
  case OP_ADD:
    if (g_is_const(g, a, 0)) return b;
    if (g_is_const(g, b, 0)) return a;
    if (graph_node(g, b)->op == OP_NEG) return g_binary(g, OP_SUB, a, graph_node(g, b)->a[0]);
    if (graph_node(g, a)->op == OP_NEG) return g_binary(g, OP_SUB, b, graph_node(g, a)->a[0]);
    break;
  case OP_SUB:
    if (g_is_const(g, b, 0)) return a;
    if (g_is_const(g, a, 0)) return g_unary(g, OP_NEG, b);
    if (a == b) return g_const(g, 0, rank, n);
    if (graph_node(g, b)->op == OP_NEG) return g_binary(g, OP_ADD, a, graph_node(g, b)->a[0]);
    break;
  case OP_MUL:
    if (g_is_const(g, a, 0) || g_is_const(g, b, 0)) return g_const(g, 0, rank, n);
    if (g_is_const(g, a, 1)) return b;
    if (g_is_const(g, b, 1)) return a;
    if (g_is_const(g, a, -1)) return g_unary(g, OP_NEG, b);
    if (g_is_const(g, b, -1)) return g_unary(g, OP_NEG, a);
    if (graph_node(g, a)->op == OP_NEG && graph_node(g, b)->op == OP_NEG)
      return g_binary(g, OP_MUL, graph_node(g, a)->a[0], graph_node(g, b)->a[0]);
    break;
  case OP_DIV:
    if (g_is_const(g, b, 1)) return a;
    if (g_is_const(g, a, 0)) return g_const(g, 0, rank, n);
    if (is_const(g, b)) return g_binary(g, OP_MUL, a, g_const(g, 1 / kval(g, b), rank, n));
    break;
  default: break;
  }
  if ((op_props(op) & OPP_COMM) && a > b) {
    int t = a;
    a = b;
    b = t;
  }
  Node z = shaped(op, rank, n);
  z.a[0] = a;
  z.a[1] = b;
  return graph_add(g, z);
}

int g_sum(Graph *g, int a) {
  Node *x = graph_node(g, a);
  if (x->rank == 0) return a;
  if (x->op == OP_CONST) return g_const(g, x->k * node_numel(x), 0, NULL);
  if (x->op == OP_BCAST) {
    int e = node_numel(x), src = x->a[0];
    int s = graph_node(g, src)->rank == 0 ? src : g_sum(g, src);
    return g_binary(g, OP_MUL, s, g_const(g, e, 0, NULL));
  }
  Node y = shaped(OP_SUM, 0, NULL);
  y.a[0] = a;
  return graph_add(g, y);
}

int g_concat(Graph *g, int a, int b) {
  Node *x = graph_node(g, a), *y = graph_node(g, b);
  int n = node_numel(x) + node_numel(y);
  Node z = shaped(OP_CONCAT, 1, &n);
  z.a[0] = a;
  z.a[1] = b;
  return graph_add(g, z);
}

int g_slice(Graph *g, int a, int off, int len) {
  Node *x = graph_node(g, a);
  CHECK(off >= 0 && off + len <= node_numel(x));
  if (off == 0 && len == node_numel(x) && x->rank == 1) return a;
  if (x->op == OP_CONST) return g_const(g, x->k, 1, &len);
  if (x->op == OP_CONCAT) {
    int na = node_numel(graph_node(g, x->a[0]));
    int xa = x->a[0], xb = x->a[1];
    if (off + len <= na) return g_slice(g, xa, off, len);
    if (off >= na) return g_slice(g, xb, off - na, len);
  }
  Node z = shaped(OP_SLICE, 1, &len);
  z.a[0] = a;
  z.idx = off;
  return graph_add(g, z);
}

/* m @ v (op MATVEC), or m^T @ v (MATVEC_T). */
static int matvec(Graph *g, Op op, int m, int v) {
  Node *M = graph_node(g, m), *V = graph_node(g, v);
  int in = op == OP_MATVEC ? 1 : 0; /* the dim of m that v runs along */
  CHECK(M->rank == 2 && node_numel(V) == M->n[in]);
  int n = M->n[1 - in];
  if (g_is_const(g, m, 0) || g_is_const(g, v, 0)) return g_const(g, 0, 1, &n);
  Node z = shaped(op, 1, &n);
  z.a[0] = m;
  z.a[1] = v;
  return graph_add(g, z);
}

int g_matvec(Graph *g, int m, int v) { return matvec(g, OP_MATVEC, m, v); }
int g_matvec_t(Graph *g, int m, int v) { return matvec(g, OP_MATVEC_T, m, v); }

int g_outer(Graph *g, int u, int v) {
  int n[2] = {node_numel(graph_node(g, u)), node_numel(graph_node(g, v))};
  if (g_is_const(g, u, 0) || g_is_const(g, v, 0)) return g_const(g, 0, 2, n);
  Node z = shaped(OP_OUTER, 2, n);
  z.a[0] = u;
  z.a[1] = v;
  return graph_add(g, z);
}

/* ---- version 2's tensors ---- */

void shape_strides(int rank, const int *n, int *st) {
  int s = 1;
  for (int d = rank - 1; d >= 0; d--) st[d] = s, s *= n[d];
}

/* Whether a view reads its source as it lies: every element, in order. */
static bool view_is_identity(const Node *x, int rank, const int *n, int off, const int *st) {
  int want[MAX_RANK];
  shape_strides(rank, n, want);
  int e = 1;
  for (int d = 0; d < rank; d++) {
    e *= n[d];
    if (n[d] > 1 && st[d] != want[d]) return false;
  }
  return off == 0 && e == node_numel(x);
}

int g_view(Graph *g, int a, int rank, const int *n, int off, const int *st) {
  Node *x = graph_node(g, a);
  CHECK(rank >= 0 && rank <= MAX_RANK);
  if (x->op == OP_CONST) return g_const(g, x->k, rank, n);
  if (view_is_identity(x, rank, n, off, st) && same_dims(x, rank, n)) return a;
  Node y = shaped(OP_VIEW, rank, n);
  y.a[0] = a;
  y.idx = off;
  for (int d = 0; d < rank; d++) y.st[d] = n[d] > 1 ? st[d] : 0; /* a size-1 dim's stride is moot */
  return graph_add(g, y);
}

int g_viewt(Graph *g, int v, int rank, const int *n, int off, const int *st) {
  Node *x = graph_node(g, v);
  CHECK(rank >= 0 && rank <= MAX_RANK);
  if (g_is_const(g, v, 0)) return g_const(g, 0, rank, n);
  Node y = shaped(OP_VIEWT, rank, n);
  y.a[0] = v;
  y.idx = off;
  for (int d = 0; d < x->rank; d++) {
    y.st[d] = x->n[d] > 1 ? st[d] : 0;
    CHECK(x->n[d] == 1 || st[d] > 0); /* injective: no broadcast dims */
  }
  return graph_add(g, y);
}

int g_reshape(Graph *g, int a, int rank, const int *n) {
  int st[MAX_RANK];
  shape_strides(rank, n, st);
  int e = 1;
  for (int d = 0; d < rank; d++) e *= n[d];
  CHECK(node_numel(graph_node(g, a)) == e);
  return g_view(g, a, rank, n, 0, st);
}

static int reduce(Graph *g, Op op, int a, int axis) {
  Node *x = graph_node(g, a);
  CHECK(axis >= 0 && axis < x->rank);
  int rank = x->rank - 1, n[MAX_RANK] = {0};
  for (int d = 0, j = 0; d < x->rank; d++)
    if (d != axis) n[j++] = x->n[d];
  if (x->op == OP_CONST) return g_const(g, op == OP_RSUM ? x->k * x->n[axis] : x->k, rank, n);
  if (x->n[axis] == 1) return g_reshape(g, a, rank, n);
  Node y = shaped(op, rank, n);
  y.a[0] = a;
  y.idx = axis;
  return graph_add(g, y);
}

int g_rsum(Graph *g, int a, int axis) { return reduce(g, OP_RSUM, a, axis); }
int g_rmax(Graph *g, int a, int axis) { return reduce(g, OP_RMAX, a, axis); }

int g_spread(Graph *g, int v, int rank, const int *n, int axis) {
  Node *x = graph_node(g, v);
  int xst[MAX_RANK], st[MAX_RANK] = {0};
  CHECK(x->rank == rank - 1);
  shape_strides(x->rank, x->n, xst);
  for (int i = 0, j = 0; i < rank; i++) st[i] = i == axis ? 0 : xst[j++];
  return g_view(g, v, rank, n, 0, st);
}

int g_bmm(Graph *g, int a, int b) {
  Node *x = graph_node(g, a), *y = graph_node(g, b);
  CHECK(x->rank == 3 && y->rank == 3 && x->n[0] == y->n[0] && x->n[2] == y->n[1]);
  int n[MAX_RANK] = {x->n[0], x->n[1], y->n[2]};
  if (g_is_const(g, a, 0) || g_is_const(g, b, 0)) return g_const(g, 0, 3, n);
  Node z = shaped(OP_BMM, 3, n);
  z.a[0] = a;
  z.a[1] = b;
  return graph_add(g, z);
}

void graph_dump_node(Graph *g, int id, FILE *f) {
  Node *n = &g->nodes[id];
  fprintf(f, "%%%d = %s", id, op_name(n->op));
  for (int i = 0; i < op_arity(n->op); i++) fprintf(f, " %%%d", n->a[i]);
  if (n->op == OP_CONST) fprintf(f, " %g", n->k);
  if (op_is_leaf(n->op) && n->op != OP_CONST) fprintf(f, " #%d", n->idx);
  if (n->op == OP_SLICE) fprintf(f, " @%d", n->idx);
  if (n->op == OP_VIEW || n->op == OP_VIEWT) {
    int r = n->op == OP_VIEW ? n->rank : graph_node(g, n->a[0])->rank;
    fprintf(f, " @%d st", n->idx);
    for (int i = 0; i < r; i++) fprintf(f, " %d", n->st[i]);
  }
  if (n->op == OP_RSUM || n->op == OP_RMAX) fprintf(f, " axis %d", n->idx);
  fprintf(f, " : [");
  for (int i = 0; i < n->rank; i++) fprintf(f, i ? ", %d" : "%d", n->n[i]);
  fprintf(f, "]%s\n", n->cplx ? " complex" : "");
}

void graph_dump(Graph *g, FILE *f) {
  for (int id = 0; id < g->nnodes; id++) graph_dump_node(g, id, f);
}
