/* init_values.c: a checked cell's initial values, drawn from its declared initializers (or a
 * configuration's override): what `cellc run` and the trainer's model both draw. */
#include <string.h>

#include "check.h"

/* The size `standard` scales by: the first state's last dim (1 without a state or for a scalar one). */
static int standard_size(const Cell *c) { return c->nstates ? state_last_dim(&c->states[0]) : 1; }

int cell_draw_param(const Cell *c, int i, const InitText *over, const double *const *earlier, Rng *rng, double *out,
                    char *err, size_t errlen) {
  const ParamInfo *pi = &c->params[i];
  const char *name = pi->init;
  const double *args = pi->args;
  const char *wrap = NULL;
  int nargs = pi->ninit_args, ref = pi->ref;
  if (pi->inner) wrap = name, name = pi->inner, nargs = pi->ninner_args;
  if (over) {
    name = over->name, args = over->args, nargs = over->nargs, ref = -1, wrap = NULL;
    if (over->inner[0]) wrap = over->name, name = over->inner;
    for (int j = 0; over->ref[0] && j < i; j++)
      if (!strcmp(c->params[j].name, over->ref)) ref = j;
    if (over->ref[0] && ref < 0) {
      snprintf(err, errlen, "%s reads param '%s', which must be declared before '%s'", name, over->ref, pi->name);
      return -1;
    }
  }
  return init_fill_wrapped(wrap, name, args, nargs, ref >= 0 ? earlier[ref] : NULL, pi->rank, pi->n, pi->cplx,
                           standard_size(c), rng, out, err, errlen);
}

int cell_draw_state(const Cell *c, int s, Rng *rng, double *out, char *err, size_t errlen) {
  const StateInfo *si = &c->states[s];
  CHECK(si->init && si->param < 0);
  const char *wrap = si->inner ? si->init : NULL, *name = si->inner ? si->inner : si->init;
  int nargs = si->inner ? si->ninner_args : si->ninit_args;
  return init_fill_wrapped(wrap, name, si->args, nargs, NULL, si->rank, si->n, si->cplx, state_last_dim(si), rng,
                           out, err, errlen);
}
