/* test_cpu.c: the CPU back end (float32) against the interpreter (float64)
 * for every stdlib cell: outputs, final states and every gradient, with
 * nonzero initial states, in auto mode and (for scan cells) sequential mode,
 * with generated code and with the portable evaluator. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "cpu.h"
#include "interp.h"
#include "rng.h"

typedef struct Run {
  double *y, *gx, **final, **gp, **gh0, **gates;
} Run;

static Cell *load_cell(Arena *a, const char *file, const char *set, const char *dims) {
  Module *m = check_load(a, file, "stdlib");
  cr_assert(m);
  const Src *src;
  const CellAst *ast = check_find_cell(m, NULL, &src);
  Binding setb[2], dimb[4];
  int nset = 0, ndim = 0;
  char buf[128];
  if (set) {
    strcpy(buf, set);
    char *eq = strchr(buf, '=');
    *eq = 0;
    setb[nset++] = (Binding){arena_strdup(a, buf), arena_strdup(a, eq + 1)};
  }
  strcpy(buf, dims);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    *eq = 0;
    dimb[ndim++] = (Binding){arena_strdup(a, tok), arena_strdup(a, eq + 1)};
  }
  CheckOptions o = {0};
  o.sets = setb, o.nsets = nset, o.dims = dimb, o.ndims = ndim, o.need_bound = true;
  Cell *c = check_cell(a, src, ast, &o);
  cr_assert(c);
  return c;
}

static double rel_err(const double *ref, const float *got, size_t n) {
  double maxd = 0, maxr = 1e-30;
  for (size_t i = 0; i < n; i++) {
    maxd = fmax(maxd, fabs(ref[i] - (double)got[i]));
    maxr = fmax(maxr, fabs(ref[i]));
    if (isnan(got[i])) return INFINITY;
  }
  return maxd / maxr;
}

static float *to_f32(const double *v, size_t n) {
  float *f = xmalloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) f[i] = (float)v[i];
  return f;
}

static void compare(const char *file, const char *set, const char *dims, int T, int B, bool force_seq, bool jit) {
  Arena arena = {0};
  Cell *c = load_cell(&arena, file, set, dims);
  Program *ref = lower_cell(c, false, false);
  ad_differentiate(ref);
  bool scan = c->mode == MODE_SCAN && !force_seq;
  Program *p = lower_cell(c, false, scan);
  ad_differentiate(p);
  /* data */
  Rng r;
  rng_seed(&r, 7, 3);
  size_t rows = (size_t)T * (size_t)B;
  int X = p->x_size, O = p->output_size, np = p->npparts, ns = p->nsparts, ng = p->ngates;
  double *x = xmalloc(sizeof(double) * rows * (size_t)X), *dy = xmalloc(sizeof(double) * rows * (size_t)O);
  for (size_t i = 0; i < rows * (size_t)X; i++) x[i] = rng_normal(&r);
  for (size_t i = 0; i < rows * (size_t)O; i++) dy[i] = rng_normal(&r);
  double **params = xcalloc((size_t)np, sizeof(double *)), **h0 = xcalloc((size_t)ns, sizeof(double *)),
         **dfinal = xcalloc((size_t)ns, sizeof(double *));
  for (int i = 0; i < np; i++) {
    params[i] = xmalloc(sizeof(double) * (size_t)p->pparts[i].numel);
    for (int j = 0; j < p->pparts[i].numel; j++) params[i][j] = 0.4 * rng_normal(&r);
  }
  for (int i = 0; i < ns; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size;
    h0[i] = xmalloc(sizeof(double) * n), dfinal[i] = xmalloc(sizeof(double) * n);
    for (size_t j = 0; j < n; j++) h0[i][j] = 0.5 * rng_normal(&r), dfinal[i][j] = rng_normal(&r);
  }
  /* the oracle, float64 */
  Run R = {xmalloc(sizeof(double) * rows * (size_t)O), xmalloc(sizeof(double) * rows * (size_t)X),
           xcalloc((size_t)ns, sizeof(double *)), xcalloc((size_t)np, sizeof(double *)), xcalloc((size_t)ns, sizeof(double *)),
           xcalloc((size_t)ng + 1, sizeof(double *))};
  for (int i = 0; i < ns; i++) {
    R.final[i] = xmalloc(sizeof(double) * (size_t)B * (size_t)p->sparts[i].size);
    R.gh0[i] = xmalloc(sizeof(double) * (size_t)B * (size_t)p->sparts[i].size);
  }
  for (int i = 0; i < np; i++) R.gp[i] = xmalloc(sizeof(double) * (size_t)p->pparts[i].numel);
  for (int i = 0; i < ng; i++) R.gates[i] = xmalloc(sizeof(double) * rows * (size_t)node_numel(graph_node(&p->g, p->gates[i].node)));
  SeqData d = {0};
  d.T = T, d.B = B, d.x = x, d.params = (const double **)params, d.h0 = (const double **)h0, d.dy = dy;
  d.dfinal = (const double **)dfinal, d.y = R.y, d.final = R.final, d.gates = R.gates, d.grad_params = R.gp;
  d.grad_x = R.gx, d.grad_h0 = R.gh0;
  interp_run(ref, &d);
  /* the back end, float32 */
  char err[256];
  CpuCell *cc = cpu_compile(p, scan, true, jit, err, sizeof err);
  cr_assert(cc, "compile: %s", err);
  CpuSeq s = {0};
  s.T = T, s.B = B;
  s.x = to_f32(x, rows * (size_t)X);
  s.dy = to_f32(dy, rows * (size_t)O);
  const float **fp = xcalloc((size_t)np, sizeof(float *)), **fh0 = xcalloc((size_t)ns, sizeof(float *)),
              **fdf = xcalloc((size_t)ns, sizeof(float *));
  for (int i = 0; i < np; i++) fp[i] = to_f32(params[i], (size_t)p->pparts[i].numel);
  for (int i = 0; i < ns; i++) {
    fh0[i] = to_f32(h0[i], (size_t)B * (size_t)p->sparts[i].size);
    fdf[i] = to_f32(dfinal[i], (size_t)B * (size_t)p->sparts[i].size);
  }
  s.params = fp, s.h0 = fh0, s.dfinal = fdf;
  s.y = xmalloc(sizeof(float) * rows * (size_t)O);
  s.grad_x = xmalloc(sizeof(float) * rows * (size_t)X);
  s.final = xcalloc((size_t)ns, sizeof(float *)), s.grad_h0 = xcalloc((size_t)ns, sizeof(float *));
  s.grad_params = xcalloc((size_t)np, sizeof(float *)), s.gates = xcalloc((size_t)ng + 1, sizeof(float *));
  for (int i = 0; i < ns; i++) {
    s.final[i] = xmalloc(sizeof(float) * (size_t)B * (size_t)p->sparts[i].size);
    s.grad_h0[i] = xmalloc(sizeof(float) * (size_t)B * (size_t)p->sparts[i].size);
  }
  for (int i = 0; i < np; i++) s.grad_params[i] = xmalloc(sizeof(float) * (size_t)p->pparts[i].numel);
  for (int i = 0; i < ng; i++) s.gates[i] = xmalloc(sizeof(float) * rows * (size_t)node_numel(graph_node(&p->g, p->gates[i].node)));
  CpuWork *w = cpu_work_new();
  cpu_forward(cc, w, &s);
  cpu_backward(cc, w, &s);
  const char *what = scan ? "scan" : "sequential";
  double tol = 1e-4;
  cr_expect(rel_err(R.y, s.y, rows * (size_t)O) < tol, "%s %s: y %g", file, what, rel_err(R.y, s.y, rows * (size_t)O));
  cr_expect(rel_err(R.gx, s.grad_x, rows * (size_t)X) < tol, "%s %s: grad.x %g", file, what, rel_err(R.gx, s.grad_x, rows * (size_t)X));
  for (int i = 0; i < ns; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size;
    cr_expect(rel_err(R.final[i], s.final[i], n) < tol, "%s %s: final %d %g", file, what, i, rel_err(R.final[i], s.final[i], n));
    cr_expect(rel_err(R.gh0[i], s.grad_h0[i], n) < tol, "%s %s: grad.h0 %d %g", file, what, i, rel_err(R.gh0[i], s.grad_h0[i], n));
  }
  for (int i = 0; i < np; i++) {
    size_t n = (size_t)p->pparts[i].numel;
    double e = rel_err(R.gp[i], s.grad_params[i], n);
    cr_expect(e < tol, "%s %s: grad.param %s part %d: %g", file, what, c->params[p->pparts[i].param].name, p->pparts[i].part, e);
  }
  for (int i = 0; i < ng; i++) {
    size_t n = rows * (size_t)node_numel(graph_node(&p->g, p->gates[i].node));
    cr_expect(rel_err(R.gates[i], s.gates[i], n) < tol, "%s %s: gate %d", file, what, i);
  }
  cpu_work_free(w);
  cpu_free(cc);
  program_free(p);
  program_free(ref);
  cell_free(c);
  arena_free(&arena);
}

#define CPU_TEST(name, file, set, dims)                                                   \
  Test(cpu, name##_auto) { compare(file, set, dims, 9, 3, false, true); }                 \
  Test(cpu, name##_sequential) { compare(file, set, dims, 9, 3, true, true); }           \
  Test(cpu, name##_portable) { compare(file, set, dims, 4, 2, false, false); }

CPU_TEST(elman, "stdlib/elman.cell", NULL, "H=19,D=5")
CPU_TEST(gru, "stdlib/gru.cell", NULL, "H=19,D=5")
CPU_TEST(lstm, "stdlib/lstm.cell", NULL, "H=19,D=5")
CPU_TEST(mgu, "stdlib/mgu.cell", NULL, "H=19,D=5")
CPU_TEST(mgu_see_h, "stdlib/mgu.cell", "see_h=true", "H=19,D=5")
CPU_TEST(leaky, "stdlib/leaky.cell", "alpha=0.3", "H=19,D=5")
CPU_TEST(scalar_gate, "stdlib/scalar_gate.cell", NULL, "H=19,D=5")
CPU_TEST(multi_gate, "stdlib/multi_gate.cell", NULL, "H=19,D=5")
CPU_TEST(lru, "stdlib/lru.cell", NULL, "H=19,D=5")
CPU_TEST(hgru, "stdlib/hgru.cell", "lb=0.25", "D=13")
CPU_TEST(mingru, "stdlib/mingru.cell", NULL, "H=19,D=5")
CPU_TEST(ops, "tests/cells/ops.cell", NULL, "H=11,D=3")

/* A second compile of an equal program (another layer of the same cell) reuses
 * the cached plan and code; a different dims binding compiles anew. */
Test(cpu, cache_by_program) {
  Arena arena = {0};
  Cell *c1 = load_cell(&arena, "stdlib/gru.cell", NULL, "H=6,D=3");
  Cell *c2 = load_cell(&arena, "stdlib/gru.cell", NULL, "H=6,D=3");
  Cell *c3 = load_cell(&arena, "stdlib/gru.cell", NULL, "H=7,D=3");
  Program *p1 = lower_cell(c1, false, false), *p2 = lower_cell(c2, false, false), *p3 = lower_cell(c3, false, false);
  ad_differentiate(p1), ad_differentiate(p2), ad_differentiate(p3);
  char err[256];
  int before = cpu_cache_hits();
  CpuCell *a = cpu_compile(p1, false, false, true, err, sizeof err);
  CpuCell *b = cpu_compile(p2, false, false, true, err, sizeof err);
  CpuCell *d = cpu_compile(p3, false, false, true, err, sizeof err);
  cr_assert(a && b && d);
  cr_expect_eq(cpu_cache_hits(), before + 1);
  cr_expect(a->fns == b->fns && a->pl == b->pl, "equal programs share code");
  cr_expect(a->fns != d->fns, "other dims compile anew");
  /* the first owner goes away; the second still runs, and a third lookup still hits */
  cpu_free(a);
  program_free(p1);
  CpuCell *e = cpu_compile(p2, false, false, true, err, sizeof err);
  cr_expect_eq(cpu_cache_hits(), before + 2);
  cpu_free(b), cpu_free(e), cpu_free(d);
  program_free(p2), program_free(p3);
  cell_free(c1), cell_free(c2), cell_free(c3);
  arena_free(&arena);
}
