/* eval.c: the one evaluator of a node (eval_node.h), in float64 for the interpreter and in float32
 * for the CPU back end's portable evaluator. */
#include <string.h>

#include "graph.h"

#define NODE_T double
#define NODE_EVAL node_eval_f64
#define NODE_MATVEC matvec_f64
#define NODE_SCALAR op_eval_scalar
#include "eval_node.h"
#undef NODE_T
#undef NODE_EVAL
#undef NODE_MATVEC
#undef NODE_SCALAR

#define NODE_T float
#define NODE_EVAL node_eval_f32
#define NODE_MATVEC matvec_f32
#define NODE_SCALAR op_eval_scalar_f32
#include "eval_node.h"
#undef NODE_T
#undef NODE_EVAL
#undef NODE_MATVEC
#undef NODE_SCALAR
