/* emit_ops.c: `cellc emit --torch-ops`: P_ops.py, a cell's step as plain torch ops in any dtype,
 * written by export_gen.c from the lowered program's evaluation form (sequential, no noise), with
 * the gates. The Python package runs float64 cells on it, and gates on request, with autograd as
 * the backward (docs/emit.md, docs/python.md). */
#include <stdio.h>
#include <stdlib.h>

#include "export_gen.h"
#include "support.h"

char *emit_ops_text(Cell *c, char *err, size_t errlen) {
  Program *p = lower_cell(c, false, false);
  StepGen *g = stepgen_new_gates(p, err, errlen);
  if (!g) return program_free(p), NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  fprintf(f, "\"\"\"The step of cell '%s' as torch ops (`cellc emit --torch-ops`): step_static(P, dtype) -> S,\n"
             "step_input(P, S, x [R, %d]) -> Fr, step_state(P, S, Fr, h) -> (y [B, %d], new h, gates).\n"
             "P: the param parts (PARAM_PARTS: (param, part) in the order of P, each flattened), h: the state\n"
             "parts [B, size] (STATE_PARTS: (state, part, size)); GATES: (name, shape) in the order returned.\"\"\"\n"
             "import json\nimport os\nimport struct\n\nimport torch\nimport torch.nn.functional as F\n\n\n",
          c->name, p->x_size, p->output_size);
  fputs(export_py_helpers, f);
  fprintf(f, "PARAM_PARTS = [");
  for (int i = 0; i < p->npparts; i++) fprintf(f, "%s(%d, %d)", i ? ", " : "", p->pparts[i].param, p->pparts[i].part);
  fprintf(f, "]\nSTATE_PARTS = [");
  for (int q = 0; q < p->nsparts; q++)
    fprintf(f, "%s(%d, %d, %d)", q ? ", " : "", p->sparts[q].state, p->sparts[q].part, p->sparts[q].size);
  fprintf(f, "]\nGATES = [");
  for (int i = 0; i < p->ngates; i++) {
    const Node *n = &p->g.nodes[p->gates[i].node];
    fprintf(f, "%s(\"%s\", (", i ? ", " : "", c->gates[i].name);
    for (int d = 0; d < n->rank; d++) fprintf(f, "%d,%s", n->n[d], d + 1 < n->rank ? " " : "");
    fprintf(f, "))");
  }
  fprintf(f, "]\nINPUT, OUTPUT = %d, %d\n\n\n", p->x_size, p->output_size);
  stepgen_py(g, f, "step");
  fclose(f);
  stepgen_free(g);
  program_free(p);
  return text;
}
