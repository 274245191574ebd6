/* test_gradients.c: the derived backward against central finite differences,
 * in float64 on the interpreter, for every stdlib cell (and a cell that uses
 * every built-in), with nonzero initial states and several sequence lengths. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "harness.h"
#include "interp.h"

typedef struct Case {
  Arena arena;
  Cell *cell;
  Program *p;
  Compiled *exe;  /* the interpreter, run directly on the program (scan form included) */
  Work *work;
  HBufs *h;
} Case;

static Case *case_new(const char *file, const char *sets, const char *dims, int T, int B, bool training, bool scan_form) {
  Case *c = xcalloc(1, sizeof(Case));
  c->cell = h_cell(&c->arena, file, sets, dims, training, NULL);
  c->p = lower_cell(c->cell, training, scan_form);
  ad_differentiate(c->p);
  BackendOptions o = {0};
  char err[128];
  c->exe = interp_backend.compile(c->p, &o, err, sizeof err);
  cr_assert(c->exe, "compile: %s", err);
  c->work = interp_backend.work_new(c->exe);
  c->h = h_bufs_new(c->p, T, B, 42, 0.5, 0.5);
  return c;
}

static void case_free(Case *c) {
  interp_backend.work_free(c->work);
  interp_backend.free(c->exe);
  h_bufs_free(c->h);
  program_free(c->p);
  cell_free(c->cell);
  arena_free(&c->arena);
  free(c);
}

/* L = sum(y * dy) + sum(final * dfinal) */
static double loss(Case *c) {
  Program *p = c->p;
  HBufs *h = c->h;
  interp_backend.forward(c->exe, c->work, &h->io);
  interp_backend.backward(c->exe, c->work, &h->io);
  size_t rows = (size_t)h->T * (size_t)h->B;
  double L = 0;
  for (size_t i = 0; i < rows * (size_t)p->output_size; i++) L += h->y[i] * h->dy[i];
  for (int i = 0; i < p->nsparts; i++)
    for (size_t j = 0; j < h->sn[i]; j++) L += h->final[i][j] * h->dfinal[i][j];
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
  HBufs *h = c->h;
  size_t rows = (size_t)h->T * (size_t)h->B;
  *gp = xcalloc((size_t)p->npparts, sizeof(double *));
  for (int i = 0; i < p->npparts; i++) {
    (*gp)[i] = xmalloc(sizeof(double) * (size_t)p->pparts[i].numel);
    memcpy((*gp)[i], h->gparams[i], sizeof(double) * (size_t)p->pparts[i].numel);
  }
  *gx = xmalloc(sizeof(double) * rows * (size_t)p->x_size);
  memcpy(*gx, h->gx, sizeof(double) * rows * (size_t)p->x_size);
  *gh = xcalloc((size_t)p->nsparts, sizeof(double *));
  for (int i = 0; i < p->nsparts; i++) {
    (*gh)[i] = xmalloc(sizeof(double) * h->sn[i]);
    memcpy((*gh)[i], h->gh0[i], sizeof(double) * h->sn[i]);
  }
}

static void check_cell_grads(const char *file, const char *sets, const char *dims, int T, int B, bool training, bool scan_form) {
  Case *c = case_new(file, sets, dims, T, B, training, scan_form);
  Program *p = c->p;
  loss(c);
  double **gp, *gx, **gh;
  copy_grads(c, &gp, &gx, &gh);
  for (int i = 0; i < p->npparts; i++) {
    double e = fd_error(c, c->h->params[i], p->pparts[i].numel, gp[i]);
    cr_expect(e < 1e-6, "%s T=%d: param part %d (%s): relative error %g", file, T, i,
              c->cell->params[p->pparts[i].param].name, e);
  }
  double ex = fd_error(c, c->h->x, T * B * p->x_size, gx);
  cr_expect(ex < 1e-6, "%s T=%d: x: relative error %g", file, T, ex);
  for (int i = 0; i < p->nsparts; i++) {
    double e = fd_error(c, c->h->h0[i], B * p->sparts[i].size, gh[i]);
    cr_expect(e < 1e-6, "%s T=%d: h0 part %d: relative error %g", file, T, i, e);
  }
  for (int i = 0; i < p->npparts; i++) free(gp[i]);
  for (int i = 0; i < p->nsparts; i++) free(gh[i]);
  free(gp), free(gx), free(gh);
  case_free(c);
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
  for (int i = 0; i < p->nsparts; i++) memset(c->h->h0[i], 0, sizeof(double) * c->h->sn[i]);
  loss(c);
  for (int i = 0; i < p->npparts; i++)
    for (int j = 0; j < p->pparts[i].numel; j++) cr_assert(isfinite(c->h->gparams[i][j]), "param part %d", i);
  for (int i = 0; i < p->nsparts; i++)
    for (size_t j = 0; j < c->h->sn[i]; j++) cr_assert(isfinite(c->h->gh0[i][j]), "h0 part %d", i);
  case_free(c);
}
