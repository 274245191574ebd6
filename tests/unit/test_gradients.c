/* test_gradients.c: the derived backward against central finite differences,
 * in float64 on the interpreter, for every stdlib cell (and a cell that uses
 * every built-in), with nonzero initial states and several sequence lengths. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "interp.h"
#include "rng.h"

typedef struct Case {
  Arena arena;
  Cell *cell;
  Program *p;
  SeqData d;
  double *x, *dy, *y, *gx;
  double **params, **gparams, **h0, **dfinal, **final, **gh0, **gates, **noise;
} Case;

static Case *case_new(const char *file, const char *sets, const char *dims, int T, int B, bool training, bool scan_form) {
  Case *c = xcalloc(1, sizeof(Case));
  Module *m = check_load(&c->arena, file, "stdlib");
  cr_assert(m, "load %s", file);
  const Src *src;
  const CellAst *ast = check_find_cell(m, NULL, &src);
  Binding setb[4], dimb[4];
  int nset = 0, ndim = 0;
  char buf[256];
  if (sets) {
    strcpy(buf, sets);
    char *eq = strchr(buf, '=');
    *eq = 0;
    setb[nset++] = (Binding){arena_strdup(&c->arena, buf), arena_strdup(&c->arena, eq + 1)};
  }
  strcpy(buf, dims);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    *eq = 0;
    dimb[ndim++] = (Binding){arena_strdup(&c->arena, tok), arena_strdup(&c->arena, eq + 1)};
  }
  CheckOptions o = {0};
  o.sets = setb, o.nsets = nset, o.dims = dimb, o.ndims = ndim, o.need_bound = true, o.training = training;
  c->cell = check_cell(&c->arena, src, ast, &o);
  cr_assert(c->cell, "check %s", file);
  c->p = lower_cell(c->cell, training, scan_form);
  ad_differentiate(c->p);
  Program *p = c->p;
  Rng r;
  rng_seed(&r, 42, 1);
  size_t rows = (size_t)T * (size_t)B;
  c->x = xcalloc(rows * (size_t)p->x_size, sizeof(double));
  c->gx = xcalloc(rows * (size_t)p->x_size, sizeof(double));
  c->dy = xcalloc(rows * (size_t)p->output_size, sizeof(double));
  c->y = xcalloc(rows * (size_t)p->output_size, sizeof(double));
  for (size_t i = 0; i < rows * (size_t)p->x_size; i++) c->x[i] = rng_normal(&r);
  for (size_t i = 0; i < rows * (size_t)p->output_size; i++) c->dy[i] = rng_normal(&r);
  c->params = xcalloc((size_t)p->npparts, sizeof(double *));
  c->gparams = xcalloc((size_t)p->npparts, sizeof(double *));
  for (int i = 0; i < p->npparts; i++) {
    c->params[i] = xcalloc((size_t)p->pparts[i].numel, sizeof(double));
    c->gparams[i] = xcalloc((size_t)p->pparts[i].numel, sizeof(double));
    for (int j = 0; j < p->pparts[i].numel; j++) c->params[i][j] = 0.5 * rng_normal(&r);
  }
  int ns = p->nsparts;
  c->h0 = xcalloc((size_t)ns, sizeof(double *));
  c->dfinal = xcalloc((size_t)ns, sizeof(double *));
  c->final = xcalloc((size_t)ns, sizeof(double *));
  c->gh0 = xcalloc((size_t)ns, sizeof(double *));
  for (int i = 0; i < ns; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size;
    c->h0[i] = xcalloc(n, sizeof(double));
    c->dfinal[i] = xcalloc(n, sizeof(double));
    c->final[i] = xcalloc(n, sizeof(double));
    c->gh0[i] = xcalloc(n, sizeof(double));
    for (size_t j = 0; j < n; j++) c->h0[i][j] = 0.5 * rng_normal(&r), c->dfinal[i][j] = rng_normal(&r);
  }
  c->gates = xcalloc((size_t)p->ngates + 1, sizeof(double *));
  for (int i = 0; i < p->ngates; i++)
    c->gates[i] = xcalloc(rows * (size_t)node_numel(graph_node(&p->g, p->gates[i].node)), sizeof(double));
  c->noise = xcalloc((size_t)p->nnoise + 1, sizeof(double *));
  for (int i = 0; i < p->nnoise; i++) {
    c->noise[i] = xcalloc(rows * (size_t)p->noise_sizes[i], sizeof(double));
    for (size_t j = 0; j < rows * (size_t)p->noise_sizes[i]; j++) c->noise[i][j] = rng_uniform_open(&r);
  }
  SeqData *d = &c->d;
  d->T = T, d->B = B;
  d->x = c->x, d->params = (const double **)c->params, d->h0 = (const double **)c->h0, d->dy = c->dy;
  d->dfinal = (const double **)c->dfinal, d->noise = (const double **)c->noise;
  d->y = c->y, d->final = c->final, d->gates = c->gates, d->grad_params = c->gparams, d->grad_x = c->gx, d->grad_h0 = c->gh0;
  return c;
}

/* L = sum(y * dy) + sum(final * dfinal) */
static double loss(Case *c) {
  Program *p = c->p;
  interp_run(p, &c->d);
  size_t rows = (size_t)c->d.T * (size_t)c->d.B;
  double L = 0;
  for (size_t i = 0; i < rows * (size_t)p->output_size; i++) L += c->y[i] * c->dy[i];
  for (int i = 0; i < p->nsparts; i++)
    for (int j = 0; j < c->d.B * p->sparts[i].size; j++) L += c->final[i][j] * c->dfinal[i][j];
  return L;
}

/* max |fd - analytic| / max |analytic| over one tensor */
static double fd_error(Case *c, double *v, int n, const double *analytic) {
  double eps = 1e-6, maxerr = 0, maxg = 1e-12;
  for (int i = 0; i < n; i++) {
    double keep = v[i];
    v[i] = keep + eps;
    double lp = loss(c);
    v[i] = keep - eps;
    double lm = loss(c);
    v[i] = keep;
    double fd = (lp - lm) / (2 * eps);
    maxerr = fmax(maxerr, fabs(fd - analytic[i]));
    maxg = fmax(maxg, fabs(analytic[i]));
  }
  return maxerr / maxg;
}

static void copy_grads(Case *c, double ***gp, double **gx, double ***gh) {
  Program *p = c->p;
  size_t rows = (size_t)c->d.T * (size_t)c->d.B;
  *gp = xcalloc((size_t)p->npparts, sizeof(double *));
  for (int i = 0; i < p->npparts; i++) {
    (*gp)[i] = xmalloc(sizeof(double) * (size_t)p->pparts[i].numel);
    memcpy((*gp)[i], c->gparams[i], sizeof(double) * (size_t)p->pparts[i].numel);
  }
  *gx = xmalloc(sizeof(double) * rows * (size_t)p->x_size);
  memcpy(*gx, c->gx, sizeof(double) * rows * (size_t)p->x_size);
  *gh = xcalloc((size_t)p->nsparts, sizeof(double *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t n = (size_t)c->d.B * (size_t)p->sparts[i].size;
    (*gh)[i] = xmalloc(sizeof(double) * n);
    memcpy((*gh)[i], c->gh0[i], sizeof(double) * n);
  }
}

static void check_cell_grads(const char *file, const char *sets, const char *dims, int T, int B, bool training, bool scan_form) {
  Case *c = case_new(file, sets, dims, T, B, training, scan_form);
  Program *p = c->p;
  loss(c);
  double **gp, *gx, **gh;
  copy_grads(c, &gp, &gx, &gh);
  for (int i = 0; i < p->npparts; i++) {
    double e = fd_error(c, c->params[i], p->pparts[i].numel, gp[i]);
    cr_expect(e < 1e-6, "%s T=%d: param part %d (%s): relative error %g", file, T, i,
              c->cell->params[p->pparts[i].param].name, e);
  }
  double ex = fd_error(c, c->x, T * B * p->x_size, gx);
  cr_expect(ex < 1e-6, "%s T=%d: x: relative error %g", file, T, ex);
  for (int i = 0; i < p->nsparts; i++) {
    double e = fd_error(c, c->h0[i], B * p->sparts[i].size, gh[i]);
    cr_expect(e < 1e-6, "%s T=%d: h0 part %d: relative error %g", file, T, i, e);
  }
}

#define GRAD_TEST(name, file, sets, dims)                                                \
  Test(gradients, name##_T1) { check_cell_grads(file, sets, dims, 1, 2, false, false); }       \
  Test(gradients, name##_T5) { check_cell_grads(file, sets, dims, 5, 2, false, false); }

GRAD_TEST(elman, "stdlib/elman.cell", NULL, "H=4,D=3")
GRAD_TEST(gru, "stdlib/gru.cell", NULL, "H=4,D=3")
GRAD_TEST(lstm, "stdlib/lstm.cell", NULL, "H=4,D=3")
GRAD_TEST(mgu, "stdlib/mgu.cell", NULL, "H=4,D=3")
GRAD_TEST(mgu_see_h, "stdlib/mgu.cell", "see_h=true", "H=4,D=3")
GRAD_TEST(leaky, "stdlib/leaky.cell", "alpha=0.3", "H=4,D=3")
GRAD_TEST(scalar_gate, "stdlib/scalar_gate.cell", NULL, "H=4,D=3")
GRAD_TEST(multi_gate, "stdlib/multi_gate.cell", NULL, "H=4,D=3")
GRAD_TEST(lru, "stdlib/lru.cell", NULL, "H=4,D=3")
GRAD_TEST(hgru, "stdlib/hgru.cell", "lb=0.25", "D=3")
GRAD_TEST(mingru, "stdlib/mingru.cell", NULL, "H=4,D=3")
GRAD_TEST(ops, "tests/cells/ops.cell", NULL, "H=3,D=2")

Test(gradients, gumbel_through_noise) { check_cell_grads("tests/cells/ops.cell", "use_gumbel=true", "H=3,D=2", 3, 2, true, false); }

/* the scan form (new = a * prev + b from the analysis' coefficients) of every scan cell */
#define SCAN_FORM_TEST(name, file, sets, dims) \
  Test(gradients, name##_scan_form) { check_cell_grads(file, sets, dims, 5, 2, false, true); }
SCAN_FORM_TEST(mgu, "stdlib/mgu.cell", NULL, "H=4,D=3")
SCAN_FORM_TEST(lru, "stdlib/lru.cell", NULL, "H=4,D=3")
SCAN_FORM_TEST(hgru, "stdlib/hgru.cell", "lb=0.25", "D=3")
SCAN_FORM_TEST(mingru, "stdlib/mingru.cell", NULL, "H=4,D=3")

/* abs of a complex 0 (zero initial states in ops.cell) takes the subgradient 0: no NaN */
Test(gradients, complex_abs_at_zero_is_finite) {
  Case *c = case_new("tests/cells/ops.cell", NULL, "H=3,D=2", 3, 2, false, false);
  Program *p = c->p;
  for (int i = 0; i < p->nsparts; i++) memset(c->h0[i], 0, sizeof(double) * (size_t)(2 * p->sparts[i].size));
  loss(c);
  for (int i = 0; i < p->npparts; i++)
    for (int j = 0; j < p->pparts[i].numel; j++) cr_assert(isfinite(c->gparams[i][j]), "param part %d", i);
  for (int i = 0; i < p->nsparts; i++)
    for (int j = 0; j < 2 * p->sparts[i].size; j++) cr_assert(isfinite(c->gh0[i][j]), "h0 part %d", i);
}
