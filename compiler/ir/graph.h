/* graph.h: the step graph, the IR every pass after the checker shares. One
 * node array per graph; nodes refer to earlier nodes by index. The checker
 * builds a typed graph (symbolic shapes, complex values); lowering turns it
 * into a real graph (concrete sizes, real values only) that autodiff extends
 * with the backward step and every back end runs. One op table drives all. */
#ifndef CELLC_GRAPH_H
#define CELLC_GRAPH_H

#include <assert.h>
#include <stdbool.h>

#include "lang.h"
#include "support.h"

/* X(name, arity, text, where): where = T (typed graph only), R (real graph
 * only), B (both). Arity -1: leaf. */
#define GRAPH_OPS(X)                                                                 \
  /* leaves */                                                                       \
  X(CONST, 0, "const", B)       /* k, broadcast to the node's shape */             \
  X(INPUT, 0, "x", B)           /* the step's input vector */                      \
  X(PREV, 0, "prev", B)         /* idx: state (part); its value before the update */ \
  X(PARAM, 0, "param", B)       /* idx: param (part) */                            \
  X(NOISE, 0, "noise", R)       /* idx: noise stream; U(0,1) per element per step */ \
  X(DY, 0, "dy", R)             /* gradient of the step's output */                \
  X(DNEW, 0, "dnew", R)         /* idx: gradient of a state part's new value */    \
  X(ACC, 0, "acc", R)           /* idx: a static node's adjoint summed over rows */ \
  /* elementwise */                                                                  \
  X(NEG, 1, "-", B)                                                                  \
  X(ADD, 2, "+", B)                                                                  \
  X(SUB, 2, "-", B)                                                                  \
  X(MUL, 2, "*", B)                                                                  \
  X(DIV, 2, "/", B)                                                                  \
  X(MIN, 2, "min", B)                                                                \
  X(MAX, 2, "max", B)                                                                \
  X(SIGMOID, 1, "sigmoid", B)                                                        \
  X(TANH, 1, "tanh", B)                                                              \
  X(RELU, 1, "relu", B)                                                              \
  X(SILU, 1, "silu", B)                                                              \
  X(GELU, 1, "gelu", B)                                                              \
  X(EXP, 1, "exp", B)                                                                \
  X(LOG, 1, "log", B)                                                                \
  X(SOFTPLUS, 1, "softplus", B)                                                      \
  X(LOGSIGMOID, 1, "logsigmoid", B)                                                  \
  X(SQRT, 1, "sqrt", B)                                                              \
  X(ABS, 1, "abs", B)                                                                \
  X(SQUARE, 1, "square", B)                                                          \
  X(SIN, 1, "sin", R)                                                                \
  X(COS, 1, "cos", R)                                                                \
  X(ERF, 1, "erf", R)                                                                \
  X(STEP, 1, "step", R)         /* x > 0 ? 1 : 0 */                                \
  X(SIGN, 1, "sign", R)         /* -1, 0, 1 */                                     \
  X(LT, 2, "lt", R)             /* a < b ? 1 : 0 */                                \
  /* shapes */                                                                       \
  X(BCAST, 1, "bcast", B)       /* a size-1 value to the node's shape */           \
  X(SUM, 1, "sum", B)           /* a vector's (or matrix's) elements summed */     \
  X(CONCAT, 2, "concat", B)                                                          \
  X(SLICE, 1, "slice", R)       /* idx: offset; the node's size elements */        \
  X(MATVEC, 2, "@", B)          /* [O, I] @ [I] -> [O] */                          \
  X(MATVEC_T, 2, "@T", R)       /* [O, I]^T @ [O] -> [I] */                        \
  X(OUTER, 2, "outer", R)       /* [O] x [I] -> [O, I] */                          \
  /* typed graph only: lowering expands these */                                     \
  X(NEWVAL, 1, "new", T)        /* idx: state; marks its updated value */          \
  X(MEAN, 1, "mean", T)                                                              \
  X(LAYERNORM, 1, "layernorm", T)                                                    \
  X(RMSNORM, 1, "rmsnorm", T)                                                        \
  X(GUMBEL, 2, "gumbel_sigmoid", T)                                                  \
  X(CPLX, 2, "complex", T)                                                           \
  X(RE, 1, "re", T)                                                                  \
  X(IM, 1, "im", T)                                                                  \
  X(CONJ, 1, "conj", T)                                                              \
  X(CIS, 1, "cis", T)

typedef enum {
#define X(name, arity, text, where) OP_##name,
  GRAPH_OPS(X)
#undef X
  OP_COUNT
} Op;

static_assert(OP_COUNT == 50, "update the op table's users when adding ops");

const char *op_name(Op op);  /* "ADD" */
const char *op_text(Op op);  /* "+" */
int op_arity(Op op);
bool op_is_leaf(Op op);

/* A node: an op, its arguments and its shape. Scalars have rank 0; vectors
 * [n[0]]; matrices [n[0], n[1]]. In the typed graph dim[] hold symbolic sizes
 * (ids of dims_poly) and n[] the sizes once dims are bound (-1 before). */
typedef struct Node {
  Op op;
  int rank;
  bool cplx;         /* typed graph: a complex value */
  int a[3];          /* arguments (node ids) */
  int n[2];
  int dim[2];
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
bool g_is_const(Graph *g, int id, double k);
/* The scalar meaning of an elementwise op (folding and the interpreter share it). */
double op_eval_scalar(Op op, double a, double b);

/* Print a node as math (for `cellc derive` and debugging). */
void graph_dump(Graph *g, FILE *f);

#endif
