/* test_gradients.c: the derived backward against central finite differences,
 * in float64 on the interpreter, for every stdlib cell (and a cell that uses
 * every built-in), with nonzero initial states and several sequence lengths. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "harness.h"
#include "stdlib_cells.h"
#include "interp.h"

typedef struct Case {
  Arena arena;
  Cell *cell;
  Program *p;
  Compiled *exe;  /* the interpreter, run directly on the program (scan form included) */
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
  c->h = h_bufs_new(c->p, T, B, 42, 0.5, 0.5);
  return c;
}

static void case_free(Case *c) {
  interp_backend.free(c->exe);
  h_bufs_free(c->h);
  program_free(c->p);
  cell_free(c->cell);
  arena_free(&c->arena);
  free(c);
}

static void check_cell_grads(const char *file, const char *sets, const char *dims, int T, int B, bool training, bool scan_form) {
  Case *c = case_new(file, sets, dims, T, B, training, scan_form);
  char what[64];
  double e = h_fd_worst(c->exe, c->h, what, sizeof what);
  cr_expect(e < 1e-6, "%s T=%d: %s: relative error %g", file, T, what, e);
  case_free(c);
}

#define GRAD_TEST(name, file, sets, dims)                                                \
  Test(gradients, name##_T1) { check_cell_grads(file, sets, dims, 1, 2, false, false); }       \
  Test(gradients, name##_T5) { check_cell_grads(file, sets, dims, 5, 2, false, false); }

/* every stdlib cell (stdlib/cells.list) at H = 4, D = 3 */
#define STDLIB_GRAD(name, file, set, dims, md) GRAD_TEST(name, file, set, h_dims(dims, 4, 3))
STDLIB_CELLS(STDLIB_GRAD)
GRAD_TEST(ops, "tests/cells/ops.cell", NULL, "H=3,D=2")
GRAD_TEST(ops_v2, "tests/cells/ops_v2.cell", NULL, "H=3,D=2")
/* buffers and a frozen param: their gradients exactly zero, the others' against finite differences */
GRAD_TEST(buffer_frozen, "tests/cells/buffer_frozen.cell", NULL, "H=3,D=2")
/* the frozen param unfrozen (as model.unfreeze does: before lowering): its gradient is built again */
Test(gradients, buffer_frozen_unfrozen) {
  Arena arena = {0};
  Cell *cell = h_cell(&arena, "tests/cells/buffer_frozen.cell", NULL, "H=3,D=2", false, NULL);
  int frozen = 0;
  for (int i = 0; i < cell->nparams; i++) frozen += cell->params[i].frozen, cell->params[i].frozen = false;
  cr_assert(frozen == 1, "the cell has %d frozen params", frozen);
  Program *p = lower_cell(cell, false, false);
  ad_differentiate(p);
  int with_grad = 0;
  for (int i = 0; i < p->npparts; i++) with_grad += p->pparts[i].grad >= 0;
  cr_expect(with_grad == 3, "%d params with a gradient (W, b, A_log)", with_grad);
  BackendOptions o = {0};
  char err[128], what[64];
  Compiled *exe = interp_backend.compile(p, &o, err, sizeof err);
  cr_assert(exe, "compile: %s", err);
  HBufs *h = h_bufs_new(p, 5, 2, 42, 0.5, 0.5);
  double e = h_fd_worst(exe, h, what, sizeof what);
  cr_expect(e < 1e-6, "unfrozen: %s: relative error %g", what, e);
  interp_backend.free(exe);
  h_bufs_free(h);
  program_free(p);
  cell_free(cell);
  arena_free(&arena);
}
GRAD_TEST(ops_v2_scan, "tests/cells/ops_v2_scan.cell", NULL, "H=3,D=2")
GRAD_TEST(scan_outside_read, "tests/cells/scan_outside_read.cell", NULL, "H=3,D=2")
/* version 2's tensors: views, reductions over axes, batched products, a per-head matrix state */
GRAD_TEST(tensor_gla, "tests/cells/tensor_gla.cell", NULL, "NH=2,K=3,V=2,D=3")
GRAD_TEST(tensor_ops, "tests/cells/tensor_ops.cell", NULL, "D=3")

/* prev and conv: the histories' gradients (grad.hist) from nonzero histories, in both forms */
GRAD_TEST(qrnn_conv, "tests/cells/qrnn_conv.cell", NULL, "H=3,D=2")
GRAD_TEST(rglru_conv, "tests/cells/rglru_conv.cell", NULL, "H=3,D=2")
GRAD_TEST(prev_chain, "tests/cells/prev_chain.cell", NULL, "H=3,D=2")
GRAD_TEST(prev_shapes, "tests/cells/prev_shapes.cell", NULL, "H=3,D=2")
Test(gradients, qrnn_conv_scan_form) { check_cell_grads("tests/cells/qrnn_conv.cell", NULL, "H=3,D=2", 5, 2, false, true); }
Test(gradients, rglru_conv_scan_form) { check_cell_grads("tests/cells/rglru_conv.cell", NULL, "H=3,D=2", 5, 2, false, true); }

Test(gradients, gumbel_through_noise) { check_cell_grads("tests/cells/ops.cell", "use_gumbel=true", "H=3,D=2", 3, 2, true, false); }

/* the scan form (new = a * prev + b from the analysis' coefficients) of every scan cell */
#define IF_scan(...) __VA_ARGS__
#define IF_sequential(...)
#define SCAN_FORM_TEST(name, file, sets, dims, md) \
  IF_##md(Test(gradients, name##_scan_form) { check_cell_grads(file, sets, h_dims(dims, 4, 3), 5, 2, false, true); })
STDLIB_CELLS(SCAN_FORM_TEST)

/* abs of a complex 0 (zero initial states in ops.cell) takes the subgradient 0: no NaN */
Test(gradients, complex_abs_at_zero_is_finite) {
  Case *c = case_new("tests/cells/ops.cell", NULL, "H=3,D=2", 3, 2, false, false);
  Program *p = c->p;
  for (int i = 0; i < p->nsparts; i++) memset(c->h->h0[i], 0, sizeof(double) * c->h->sn[i]);
  h_loss(c->exe, c->h);
  for (int i = 0; i < p->npparts; i++)
    for (int j = 0; j < p->pparts[i].numel; j++) cr_assert(isfinite(c->h->gparams[i][j]), "param part %d", i);
  for (int i = 0; i < p->nsparts; i++)
    for (size_t j = 0; j < c->h->sn[i]; j++) cr_assert(isfinite(c->h->gh0[i][j]), "h0 part %d", i);
  case_free(c);
}
