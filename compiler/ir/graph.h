/* graph.h: the step graph, the IR every pass after the checker shares. One
 * node array per graph; nodes refer to earlier nodes by index. The checker
 * builds a typed graph (symbolic shapes, complex values); lowering turns it
 * into a real graph (concrete sizes, real values only) that autodiff extends
 * with the backward step and every back end runs. One op table drives all. */
#ifndef CELLC_GRAPH_H
#define CELLC_GRAPH_H

#include <stdbool.h>

#include "lang.h"
#include "ops.h"
#include "support.h"

/* A node: an op, its arguments and its shape. Scalars have rank 0; vectors
 * [n[0]]; matrices [n[0], n[1]]; version 2's tensors [n[0], n[1], n[2]]. In the typed graph dim[] hold symbolic sizes
 * (ids of dims_poly) and n[] the sizes once dims are bound (-1 before). */
#define MAX_RANK 3   /* version 2: values have up to three dims */

typedef struct Node {
  Op op;
  int rank;
  bool cplx;         /* typed graph: a complex value */
  int a[2];          /* arguments (node ids; -1 past the op's arity) */
  int n[MAX_RANK];
  int dim[MAX_RANK];
  int st[MAX_RANK];  /* VIEW, VIEWT: the strides into the viewed value, per dim of the view;
                        typed AXSLICE, GROUPNORM: st[0] a dim (the start, the groups) */
  double k;          /* CONST value */
  int idx;           /* PREV, PARAM, NOISE, DNEW, ACC, NEWVAL index; SLICE offset */
  Loc loc;           /* where in the source (typed graph), for messages */
  const Expr *ast;   /* the expression it came from (typed graph) */
} Node;

typedef struct Graph {
  Node *nodes;
  int nnodes, cap;
  bool cse;          /* hash-cons and simplify on add (the real graph) */
  int *htab;         /* open addressing: node id + 1, 0 = empty */
  int hcap;
} Graph;

void graph_init(Graph *g, bool cse);
void graph_free(Graph *g);
/* Adds a node (with cse: returns an existing equal node, or a simplified one). */
int graph_add(Graph *g, Node n);
static inline Node *graph_node(Graph *g, int id) {
  CHECK(id >= 0 && id < g->nnodes);
  return &g->nodes[id];
}
int node_numel(const Node *n);

/* Real-graph builders (with cse on): shapes come from the arguments. */
int g_const(Graph *g, double k, int rank, const int *n);
int g_leaf(Graph *g, Op op, int idx, int rank, const int *n);
int g_unary(Graph *g, Op op, int a);
int g_binary(Graph *g, Op op, int a, int b); /* equal shapes, or one side size 1 (broadcast) */
int g_bcast(Graph *g, int a, int rank, const int *n);
int g_sum(Graph *g, int a);
int g_concat(Graph *g, int a, int b);
int g_slice(Graph *g, int a, int off, int len);
int g_matvec(Graph *g, int m, int v);
int g_matvec_t(Graph *g, int m, int v);
int g_outer(Graph *g, int u, int v);
/* Version 2's tensors. g_view: the value of shape n[0..rank) whose element c is
 * a[off + sum_d c_d st[d]] (a stride 0 broadcasts); g_viewt: the adjoint of an injective view,
 * into a's shape (rank, n): zeros, v's elements scattered. g_rsum, g_rmax: over one axis (dropped).
 * g_bmm: [b, m, k] @ [b, k, n]. g_reshape: the same elements in another shape (a view). */
int g_view(Graph *g, int a, int rank, const int *n, int off, const int *st);
int g_viewt(Graph *g, int v, int rank, const int *n, int off, const int *st);
int g_rsum(Graph *g, int a, int axis);
int g_rmax(Graph *g, int a, int axis);
int g_bmm(Graph *g, int a, int b);
int g_reshape(Graph *g, int a, int rank, const int *n);
/* v (shape n without `axis`) repeated along `axis` to shape (rank, n): a view with stride 0 there. */
int g_spread(Graph *g, int v, int rank, const int *n, int axis);
/* Row-major strides of a shape. */
void shape_strides(int rank, const int *n, int *st);
bool g_is_const(Graph *g, int id, double k);
/* One node evaluated from its arguments' values (a, b: their elements, constants expanded; NULL
 * for an op with fewer arguments): every op but the leaves other than CONST. Double for the
 * interpreter, float for the CPU back end's portable evaluator; one source (eval_node.h). */
void node_eval_f64(Graph *g, int id, double *out, const double *a, const double *b);
void node_eval_f32(Graph *g, int id, float *out, const float *a, const float *b);

/* Print a node as math (for `cellc derive` and debugging). */
void graph_dump(Graph *g, FILE *f);
/* One node of it as graph_dump prints it: "%id = op %args ... : [shape]", a line. */
void graph_dump_node(Graph *g, int id, FILE *f);

#endif
