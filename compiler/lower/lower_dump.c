/* lower_dump.c: a Program as text (`cellc check --dump lower|ad`): its interface (input, output,
 * param and state parts, gates, noise), then its real step graph one node a line; once
 * differentiated, the backward nodes after a "backward" line and what they feed. */
#include "lower.h"

static void node_line(Graph *g, int id, FILE *f) {
  fprintf(f, "  ");
  graph_dump_node(g, id, f);
}

static const char *part_name(int part, bool cplx) { return !cplx ? "" : part ? ".im" : ".re"; }

void program_dump(const Program *p, FILE *f) {
  const Cell *c = p->cell;
  fprintf(f, "program %s: %s form%s, %d nodes (%d forward)\n", c ? c->name : "?", p->scan_form ? "scan" : "sequential",
          p->training ? ", training" : "", p->g.nnodes, p->nforward);
  fprintf(f, "input %%%d [%d]\n", p->x, p->x_size);
  fprintf(f, "output %%%d [%d]\n", p->output, p->output_size);
  for (int i = 0; i < p->npparts; i++) {
    const ParamPart *pp = &p->pparts[i];
    bool cplx = c && c->params[pp->param].cplx;
    fprintf(f, "param %s%s %%%d", c ? c->params[pp->param].name : "?", part_name(pp->part, cplx), pp->leaf);
    if (p->differentiated) fprintf(f, " grad %%%d", pp->grad);
    fprintf(f, "\n");
  }
  for (int i = 0; i < p->nsparts; i++) {
    const StatePart *sp = &p->sparts[i];
    fprintf(f, "state %s%s prev %%%d next %%%d", c ? c->states[sp->state].name : "?", part_name(sp->part, sp->cplx), sp->prev,
            sp->next);
    if (p->scan_form) fprintf(f, " a %%%d b %%%d", sp->a, sp->b);
    if (p->differentiated) fprintf(f, " dnew %%%d dtotal %%%d dprev %%%d", sp->dnew, sp->dtotal, sp->dprev);
    fprintf(f, "\n");
  }
  for (int i = 0; i < p->ngates; i++) fprintf(f, "gate %s %%%d\n", c ? c->gates[p->gates[i].gate].name : "?", p->gates[i].node);
  for (int i = 0; i < p->nnoise; i++) fprintf(f, "noise #%d [%d]\n", i, p->noise_sizes[i]);
  fprintf(f, "forward:\n");
  Graph *g = (Graph *)&p->g; /* graph_node's CHECK takes a mutable graph; nothing is changed */
  for (int id = 0; id < p->nforward && id < g->nnodes; id++) node_line(g, id, f);
  if (!p->differentiated) return;
  fprintf(f, "backward: dy %%%d dx %%%d\n", p->dy, p->dx);
  for (int id = p->nforward; id < g->nnodes; id++) node_line(g, id, f);
  for (int i = 0; i < p->nbounds; i++)
    fprintf(f, "bound %%%d adj %%%d acc %%%d\n", p->bounds[i].node, p->bounds[i].adj, p->bounds[i].acc);
}
