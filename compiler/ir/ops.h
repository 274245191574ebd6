/* ops.h: the op table. One row per op of the step graph drives the enum, the names, the arity,
 * the properties, the scalar meaning of the elementwise ops (as double and float functions, and as
 * C source text for code generators), the derivative rules (lower/autodiff.c), the evaluators and
 * the LLVM emitter (backend/cpu/cg_llvm.c). Adding an op is a row here plus what its row names
 * (see docs/architecture.md, "A new op"). */
#ifndef CELLC_OPS_H
#define CELLC_OPS_H

#include <assert.h>
#include <math.h>
#include <stdbool.h>

#include "support.h"

/* Two kinds of rows:
 *   X(name, arity, text, where, diff, props)           leaves, shapes, typed-graph ops
 *   E(name, arity, text, where, diff, props, meaning)  elementwise ops, with their scalar meaning
 * arity: arguments (0: a leaf). text: the source spelling (or how `derive` prints it).
 * where: T (typed graph only: lowering expands it), R (real graph only), B (both).
 * diff: how autodiff propagates an adjoint through it:
 *   RULE  a rule d_<name> in lower/autodiff.c
 *   ZERO  nothing flows to the arguments (leaves; piecewise constant: step, sign, lt)
 *   NONE  never differentiated (typed graph only)
 * props: OPP_CPLX (takes complex values in the typed graph; lowering pairs them up, where an op
 *   without it is real only), OPP_COMM (commutative: operands are ordered for hash-consing).
 * meaning: a C expression over the arguments a and b in a small vocabulary (below), written once:
 *   ops_scalar.h instantiates it as static inline double and float functions (op_f64_<name>,
 *   op_f32_<name>; op_eval_scalar and op_eval_scalar_f32 dispatch on the op), and op_c_expr prints
 *   it as C source text with the arguments substituted (for a CUDA C emitter).
 *
 * Why expressions over a vocabulary (and not hand-written functions, or templates of text): the
 * compiler checks the meaning as C in both types, the text is the very tokens it checked (#meaning),
 * and the numerically stable forms (sigmoid and softplus branch on the sign) are kept as written.
 * Vocabulary: EXP EXPM1 LOG LOG1P POW TANH ERF SQRT FABS SIN COS (libm, in the instance's type), K(lit) (a
 * literal in the instance's type: K(0.5) is 0.5 or 0.5f), OPX(NAME, x) (the meaning of op NAME,
 * unary, at x: an op defined above). Integer literals (0, 1, -1) need no K. */
#define GRAPH_OPS(X, E)                                                                            \
  /* leaves */                                                                                     \
  X(CONST, 0, "const", B, ZERO, 0)          /* k, broadcast to the node's shape */                 \
  X(INPUT, 0, "x", B, ZERO, 0)              /* the step's input vector */                          \
  X(PREV, 0, "prev", B, ZERO, OPP_CPLX)     /* idx: state (part); its value before the update */   \
  X(PARAM, 0, "param", B, ZERO, OPP_CPLX)   /* idx: param (part) */                                \
  X(NOISE, 0, "noise", R, ZERO, 0)          /* idx: noise stream; U(0,1) per element per step */   \
  X(DY, 0, "dy", R, ZERO, 0)                /* gradient of the step's output */                    \
  X(DNEW, 0, "dnew", R, ZERO, 0)            /* idx: gradient of a state part's new value */        \
  X(ACC, 0, "acc", R, ZERO, 0)              /* idx: a static node's adjoint summed over rows */    \
  /* elementwise */                                                                                \
  E(NEG, 1, "-", B, RULE, OPP_CPLX, -a)                                                            \
  E(ADD, 2, "+", B, RULE, OPP_CPLX | OPP_COMM, a + b)                                              \
  E(SUB, 2, "-", B, RULE, OPP_CPLX, a - b)                                                         \
  E(MUL, 2, "*", B, RULE, OPP_CPLX | OPP_COMM, a * b)                                              \
  E(DIV, 2, "/", B, RULE, OPP_CPLX, a / b)                                                         \
  E(MIN, 2, "min", B, RULE, OPP_COMM, a <= b ? a : b)                                              \
  E(MAX, 2, "max", B, RULE, OPP_COMM, a >= b ? a : b)                                              \
  E(SIGMOID, 1, "sigmoid", B, RULE, 0, a >= 0 ? 1 / (1 + EXP(-a)) : EXP(a) / (1 + EXP(a)))         \
  E(TANH, 1, "tanh", B, RULE, 0, TANH(a))                                                          \
  E(RELU, 1, "relu", B, RULE, 0, a > 0 ? a : 0)                                                    \
  E(SILU, 1, "silu", B, RULE, 0, a * OPX(SIGMOID, a))                                              \
  E(GELU, 1, "gelu", B, RULE, 0, K(0.5) * a * (1 + ERF(a * K(0.70710678118654752440))))            \
  E(EXP, 1, "exp", B, RULE, OPP_CPLX, EXP(a))                                                      \
  E(LOG, 1, "log", B, RULE, 0, LOG(a))                                                             \
  E(SOFTPLUS, 1, "softplus", B, RULE, 0, a > 0 ? a + LOG1P(EXP(-a)) : LOG1P(EXP(a)))               \
  E(LOGSIGMOID, 1, "logsigmoid", B, RULE, 0, -OPX(SOFTPLUS, -a))                                   \
  E(SQRT, 1, "sqrt", B, RULE, 0, SQRT(a))                                                          \
  E(ABS, 1, "abs", B, RULE, OPP_CPLX, FABS(a))                                                     \
  E(SQUARE, 1, "square", B, RULE, OPP_CPLX, a * a)                                                 \
  E(SIN, 1, "sin", R, RULE, 0, SIN(a))                                                             \
  E(COS, 1, "cos", R, RULE, 0, COS(a))                                                             \
  E(ERF, 1, "erf", R, RULE, 0, ERF(a))                                                             \
  E(STEP, 1, "step", R, ZERO, 0, a > 0 ? 1 : 0)                                                    \
  E(SIGN, 1, "sign", R, ZERO, 0, a > 0 ? 1 : a < 0 ? -1 : 0)                                       \
  E(LT, 2, "lt", B, ZERO, 0, a < b ? 1 : 0)                                                        \
  E(EXPM1, 1, "expm1", B, RULE, 0, EXPM1(a))                                                       \
  E(LOG1P, 1, "log1p", B, RULE, 0, LOG1P(a))                                                       \
  E(POW, 2, "pow", B, RULE, 0, POW(a, b))                                                          \
  /* where's select: b where a > 0, else 0 (a is a 0/1 mask from lt; no derivative through a) */  \
  E(MASK, 2, "mask", B, RULE, 0, a > 0 ? b : 0)                                                    \
  /* shapes */                                                                                     \
  X(BCAST, 1, "bcast", B, RULE, OPP_CPLX)   /* a size-1 value to the node's shape */               \
  X(SUM, 1, "sum", B, RULE, OPP_CPLX)       /* a vector's (or matrix's) elements summed */         \
  X(CONCAT, 2, "concat", B, RULE, OPP_CPLX)                                                        \
  X(SLICE, 1, "slice", R, RULE, 0)          /* idx: offset; the node's size elements */            \
  X(MATVEC, 2, "@", B, RULE, OPP_CPLX)      /* [O, I] @ [I] -> [O] */                              \
  X(MATVEC_T, 2, "@T", R, RULE, 0)          /* [O, I]^T @ [O] -> [I] */                            \
  X(OUTER, 2, "outer", R, RULE, 0)          /* [O] x [I] -> [O, I] */                              \
  /* version 2's tensors (rank <= 3): the real graph's structural ops */                          \
  X(VIEW, 1, "view", B, RULE, 0)            /* out[c] = a[idx + sum_d c_d st[d]] (c: out coords) */ \
  X(VIEWT, 1, "viewt", R, RULE, 0)          /* an injective VIEW's adjoint: zeros, a scattered */  \
  X(RSUM, 1, "sum", B, RULE, 0)             /* idx: the axis of a summed over (dropped) */          \
  X(RMAX, 1, "amax", B, RULE, 0)            /* idx: the axis of a maximized over (dropped) */      \
  X(BMM, 2, "@", B, RULE, 0)                /* [b, m, k] @ [b, k, n] -> [b, m, n] */               \
  /* typed graph only: lowering expands these */                                                   \
  X(NEWVAL, 1, "new", T, NONE, OPP_CPLX)    /* idx: state; marks its updated value */              \
  X(MEAN, 1, "mean", T, NONE, OPP_CPLX)                                                            \
  X(LAYERNORM, 1, "layernorm", T, NONE, 0)                                                         \
  X(RMSNORM, 1, "rmsnorm", T, NONE, 0)                                                             \
  X(GUMBEL, 2, "gumbel_sigmoid", T, NONE, 0)                                                       \
  X(CPLX, 2, "complex", T, NONE, 0)         /* real arguments, a complex value */                  \
  X(RE, 1, "re", T, NONE, OPP_CPLX)                                                                \
  X(IM, 1, "im", T, NONE, OPP_CPLX)                                                                \
  X(CONJ, 1, "conj", T, NONE, OPP_CPLX)                                                            \
  X(CIS, 1, "cis", T, NONE, 0)                                                                     \
  /* version 2, typed graph only: lowering turns them into VIEW, RSUM, BMM and elementwise ops */  \
  X(EXPAND, 1, "expand", T, NONE, 0)        /* broadcast to the node's shape (trailing dims align) */ \
  X(TRANSPOSE, 1, "transpose", T, NONE, 0)  /* the last two dims swapped */                        \
  X(RESHAPE, 1, "reshape", T, NONE, 0)      /* the same elements, row-major, in the node's shape */ \
  X(AXSLICE, 1, "slice", T, NONE, 0)        /* idx: axis; st[0]: the start (a dim) */              \
  X(MATMUL, 2, "matmul", T, NONE, 0)        /* torch.matmul, ranks 1 to 3 */                       \
  X(RMEAN, 1, "mean", T, NONE, 0)           /* idx: axis */                                        \
  X(SOFTMAX, 1, "softmax", T, NONE, 0)      /* idx: axis */                                        \
  X(GROUPNORM, 1, "groupnorm", T, NONE, 0)  /* st[0]: the groups (a dim) */                        \
  X(EYE, 0, "eye", T, ZERO, 0)              /* the identity, the node's [n, n] */                  \
  X(DIMVAL, 0, "dim", T, ZERO, 0)           /* a dim as a real number: st[0] the dim, k its value */ \
  /* time: a value's history is a hidden state (check.c) holding its last K steps, oldest first */ \
  X(LAG, 1, "prev", T, NONE, 0)             /* idx: lag k; a[0]: the history's PREV; step t - k */ \
  X(HISTNEW, 2, "history", T, NONE, 0)      /* the history's new value: PREV a[0] shifted, a[1] in */

/* Expands a row of either kind to nothing (for a list of one kind only). */
#define OPS_SKIP(...)

enum { OPP_CPLX = 1, OPP_COMM = 2 };

typedef enum {
#define X(name, ...) OP_##name,
  GRAPH_OPS(X, X)
#undef X
  OP_COUNT
} Op;

static_assert(OP_COUNT == 71, "update the op table's users when adding ops");

const char *op_name(Op op);  /* "ADD" */
const char *op_text(Op op);  /* "+" */
int op_arity(Op op);
bool op_is_leaf(Op op);
bool op_is_elementwise(Op op);
int op_props(Op op);         /* OPP_* */
char op_where(Op op);        /* 'T' (typed graph only), 'R' (real graph only), 'B' (both) */
/* The scalar meaning of an elementwise op as written in the table ("a >= 0 ? 1 / ..."), or NULL. */
const char *op_meaning(Op op);
/* The scalar meaning of an elementwise op as a C expression in float (f32) or double, with the
 * arguments' expressions substituted for a and b (b unused by unary ops; each goes in
 * parentheses) and the vocabulary spelled as libm/CUDA functions (expf, log1pf, ...; exp, log1p in
 * double), literals in the type (0.5f): op_c_expr(OP_SIGMOID, "x[i]", NULL, true) is
 * "((x[i]) >= 0 ? 1 / (1 + expf(-(x[i]))) : expf((x[i])) / (1 + expf((x[i]))))". xmalloc'ed. */
char *op_c_expr(Op op, const char *a, const char *b, bool f32);

/* ---- the scalar meanings, instantiated in double and in float (ops_scalar.h) ---- */

/* op_f64_<op>(a, b), and op_eval_scalar(op, a, b): an elementwise op at one element (b ignored by
 * unary ops), for the interpreter and constant folding */
#define OPS_T double
#define OPS_SFX f64
#define OPS_LIBM /* exp, log1p, ... */
#define OPS_DISPATCH op_eval_scalar
#include "ops_scalar.h"

/* op_f32_<op>(a, b), and op_eval_scalar_f32(op, a, b), for the CPU back end's portable evaluator */
#define OPS_T float
#define OPS_SFX f32
#define OPS_LIBM f /* expf, log1pf, ... */
#define OPS_DISPATCH op_eval_scalar_f32
#include "ops_scalar.h"

#endif
