/* check_dump.c: a checked cell's typed step graph as text (`cellc check --dump typed`): one node a
 * line, shapes symbolic as the cell declares them, leaves by their declared names. */
#include "check.h"

#include <string.h>

/* The name a leaf of the typed graph stands for, or NULL. */
static const char *leaf_name(const Cell *c, const Node *n) {
  switch (n->op) {
  case OP_INPUT: return c->input_name;
  case OP_PREV: return n->idx >= 0 && n->idx < c->nstates ? c->states[n->idx].name : NULL;
  case OP_PARAM: return n->idx >= 0 && n->idx < c->nparams ? c->params[n->idx].name : NULL;
  case OP_NEWVAL: return n->idx >= 0 && n->idx < c->nstates ? c->states[n->idx].name : NULL;
  default: return NULL;
  }
}

void cell_dump(const Cell *c, FILE *f) {
  char buf[256];
  fprintf(f, "typed %s: mode %s, %d nodes\n", c->name, c->mode == MODE_SCAN ? "scan" : "sequential", c->g.nnodes);
  for (int id = 0; id < c->g.nnodes; id++) {
    const Node *n = &c->g.nodes[id];
    fprintf(f, "  %%%d = %s", id, op_name(n->op));
    for (int i = 0; i < op_arity(n->op); i++) fprintf(f, " %%%d", n->a[i]);
    if (n->op == OP_CONST) fprintf(f, " %g", n->k);
    const char *name = leaf_name(c, n);
    if (name) fprintf(f, " '%s'", name);
    else if (op_is_leaf(n->op) && n->op != OP_CONST) fprintf(f, " #%d", n->idx);
    if (n->op == OP_SLICE) fprintf(f, " @%d", n->idx);
    cell_shape_text(c, n->rank, n->dim, buf, (int)sizeof buf);
    fprintf(f, " : %s%s\n", buf, n->cplx ? " complex" : "");
  }
  for (int i = 0; i < c->nstates; i++) {
    const StateInfo *s = &c->states[i];
    fprintf(f, "state %s = %%%d (%s", s->name, s->update, recurrence_name(s->rec));
    if (s->rec == REC_DIAG_LINEAR) {
      if (s->coef_a >= 0) fprintf(f, ", a %%%d", s->coef_a);
      if (s->coef_b >= 0) fprintf(f, ", b %%%d", s->coef_b);
    }
    fprintf(f, ")\n");
  }
  for (int i = 0; i < c->ngates; i++) fprintf(f, "gate %s = %%%d\n", c->gates[i].name, c->gates[i].node);
  fprintf(f, "output = %%%d\n", c->output);
}
