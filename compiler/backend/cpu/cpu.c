/* cpu.c: the CPU back end: compiles a Program into a plan (compiler/plan), its table
 * (plan_table.h) and LLVM-generated elementwise kernels (cg_llvm.c), and runs sequences in
 * float32 through the plan executor (exec.c, which binds the SeqIO's buffers and the workspace) on
 * OpenMP threads: here the workspace's one block, the portable evaluator where there is no JIT,
 * the static values, the profile. */
#include "cpu.h"

#include <cblas.h> /* openblas_set_num_threads */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cg_llvm.h"
#include "emit_cpu.h"
#include "exec.h"
#include "gemm.h"
#include "nn.h" /* nn_embedding_backward_ld: SeqIO.fold's sums by token */

/* A compiled program: its plan and the plan's table (what the executor runs; its kstatic_fwd and
 * kstatic_bwd are the static values, run by the portable evaluator), a function per kernel (or
 * NULL: the portable evaluator). */
typedef struct CpuCell {
  Compiled base;
  Plan *pl;
  PlanTable table;
  const EtHeader *tab;
  KernelFn *fns;
  CgJit *jit;
  int nthreads;
  double *step_s, *step_flops; /* CELLC_PROFILE=steps: per plan step (the phases in order), thread 0's
                                  seconds and all threads' operations; printed when the cell is freed */
} CpuCell;

/* One sequence in flight (forward keeps what backward reads): the executor's workspace, and where
 * the last call bound its arrays in it. */
typedef struct CpuWork {
  Work base;
  int T, B;
  void *mem;               /* the workspace (exec_layout), 64-byte aligned */
  size_t cap;
  float **arr;             /* per plan array: its first float */
  float **bases;           /* per slot: where row 0 of its values is (a step-local slot: row 0 of its B rows) */
  GemmPacked *packs;       /* per product of the plan (EtStep.pack): its matrix, packed */
  bool xgrad_left;         /* the last backward left grad_x as the product of step xg (grad_x NULL) */
  float *fold_sums;        /* SeqIO.fold: G's rows summed by token [vocab, cols], fold_n floats */
  size_t fold_n;
  bool warm;               /* a backward has run: the arrays are allocated and touched (CELLC_PROFILE=steps
                              leaves out the first sequence, its page faults) */
} CpuWork;

#define F32(v) ((const float *)(v))

/* ---- the portable evaluator (kernels without JIT, static values): node_eval_f32 of the IR ---- */

typedef struct RowValues {
  float **val;   /* per node: a row's values (kernel temporaries, expanded constants) */
} RowValues;

static float *row_ptr(CpuCell *c, float *const *bases, int slot, int64_t r) {
  const Slot *s = &c->pl->slots[slot];
  int width = c->pl->arrays[s->array].width;
  return bases[slot] + r * width;
}

/* A node's values at row r: its home, or the scratch row (kernel temporaries, constants). */
static const float *value_at(CpuCell *c, float *const *bases, RowValues *sc, int id, int64_t r) {
  Graph *g = &c->base.p->g;
  int home = c->pl->home[id];
  if (home >= 0) return row_ptr(c, bases, home, r);
  Node *n = graph_node(g, id);
  if (!sc->val[id]) {
    sc->val[id] = xcalloc((size_t)node_numel(n), sizeof(float));
    if (n->op == OP_CONST) node_eval_f32(g, id, sc->val[id], NULL, NULL);
  }
  return sc->val[id];
}

static void eval_kernel_rows(CpuCell *c, float *const *bases, int k, int64_t r0, int64_t r1) {
  Graph *g = &c->base.p->g;
  Kernel *K = &c->pl->kernels[k];
  RowValues sc = {xcalloc((size_t)g->nnodes, sizeof(float *))};
  for (int64_t r = r0; r < r1; r++)
    for (int i = 0; i < K->n; i++) {
      int id = K->nodes[i];
      Node *n = graph_node(g, id);
      const float *a = n->a[0] >= 0 ? value_at(c, bases, &sc, n->a[0], r) : NULL;
      const float *b = n->a[1] >= 0 ? value_at(c, bases, &sc, n->a[1], r) : NULL;
      float *out = (float *)value_at(c, bases, &sc, id, r);
      node_eval_f32(g, id, out, a, b);
    }
  for (int i = 0; i < g->nnodes; i++) free(sc.val[i]);
  free(sc.val);
}

/* ---- steps ---- */

static int width_of(CpuCell *c, int slot) { return c->pl->arrays[c->pl->slots[slot].array].width; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Bytes an elementwise kernel moves per row: every per-row array it reads or writes. */
static double kernel_row_bytes(CpuCell *c, int k) {
  Plan *pl = c->pl;
  Graph *g = &c->base.p->g;
  Kernel *K = &pl->kernels[k];
  double bytes = 0;
  bool *seen = xcalloc((size_t)g->nnodes, sizeof(bool));
  for (int i = 0; i < K->n; i++) {
    Node *n = graph_node(g, K->nodes[i]);
    int ids[3] = {K->nodes[i], n->a[0], n->a[1]};
    for (int j = 0; j < 3; j++) {
      int id = ids[j];
      if (id < 0 || seen[id] || pl->home[id] < 0) continue;
      seen[id] = true;
      if (pl->arrays[pl->slots[pl->home[id]].array].width) bytes += sizeof(float) * node_numel(graph_node(g, id));
    }
  }
  free(seen);
  return bytes;
}

static int step_number(const CpuCell *c, const PStep *st);

/* A product step's floating-point operations over all_rows rows (0 for other steps); a group of
 * weight gradients counts at the step that runs it. */
static double profile_flops(CpuCell *c, const PStep *st, int64_t all_rows) {
  if (st->kind == PS_GEMM || st->kind == PS_GEMM_T) {
    GemmOperands op = plan_gemm_operands(c->pl, st);
    return 2.0 * (double)all_rows * op.nO * op.nI;
  }
  if (st->kind != PS_OUTER_ACC) return 0;
  int s = step_number(c, st);
  const EtStep *es = &((const EtStep *)((const char *)c->tab + c->tab->steps))[s];
  const EtGroup *g = &((const EtGroup *)((const char *)c->tab + c->tab->groups))[es->group];
  return g->trigger == s ? 2.0 * (double)all_rows * g->M * g->N : 0;
}

static void profile_step(CpuCell *c, const Phase *ph, int i, double s, double flops);

/* Adds a step's seconds to the work's profile (thread 0's: `rows` its rows), and the products'
 * operations over the step's rows on every thread (`all_rows`). */
static void profile_add(CpuCell *c, CpuWork *w, const Phase *ph, int i, double s, int64_t rows, int64_t all_rows) {
  Profile *pr = &w->base.prof;
  const PStep *st = &ph->steps[i];
  double flops = profile_flops(c, st, all_rows);
  if (w->base.profile_steps && w->warm) profile_step(c, ph, i, s, flops);
  GemmKind kind = ph->region == REG_ALL ? GEMM_ALL_ROWS : GEMM_STEPWISE;
  switch (st->kind) {
  case PS_ELEM:
    pr->elem_s += s;
    pr->elem_bytes += (double)rows * kernel_row_bytes(c, st->kernel);
    return;
  case PS_GEMM: case PS_GEMM_T: break;
  case PS_OUTER_ACC: kind = GEMM_WEIGHT_GRAD; break;
  case PS_SCAN: pr->scan_s += s; return;
  case PS_RSCAN: pr->rscan_s += s; return;
  default: pr->other_s += s; return;
  }
  pr->gemm_s += s, pr->gemm_flops += flops;
  pr->kind_s[kind] += s, pr->kind_flops[kind] += flops;
}

/* The plan's phases in the order the per-step profile numbers their steps. */
enum { NPHASES = 7 };
static const Phase *phase_at(const Plan *pl, int k) {
  const Phase *ph[NPHASES] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  return ph[k];
}

/* CELLC_PROFILE=steps: step i of phase ph took s seconds (thread 0) for `flops` operations (all
 * threads). */
static void profile_step(CpuCell *c, const Phase *ph, int i, double s, double flops) {
  int n = 0, at = -1;
  for (int k = 0; k < NPHASES; k++) {
    const Phase *q = phase_at(c->pl, k);
    if (q == ph) at = n + i;
    n += q->n;
  }
  CHECK(at >= 0);
  if (!c->step_s) c->step_s = xcalloc((size_t)n, sizeof(double)), c->step_flops = xcalloc((size_t)n, sizeof(double));
  c->step_s[at] += s, c->step_flops[at] += flops;
}

static void profile_steps_report(const CpuCell *c) {
  if (!c->step_s) return;
  static const char *const phase[NPHASES] = {"fwd_pre", "fwd_step", "fwd_post", "bwd_pre", "bwd_step", "bwd_post", "bwd_first"};
  static const char *const kind[] = {"elem", "gemm", "gemm_t", "outer_acc", "colsum", "scan", "rscan", "copy", "zero"};
  for (int k = 0, at = 0; k < NPHASES; k++) {
    const Phase *ph = phase_at(c->pl, k);
    for (int i = 0; i < ph->n; i++, at++) {
      fprintf(stderr, "profile: %-9s %2d %-9s node %4d %9.4f s", phase[k], i, kind[ph->steps[i].kind], ph->steps[i].node,
              c->step_s[at]);
      if (c->step_flops[at] > 0 && c->step_s[at] > 0)
        fprintf(stderr, "  %.2f GFLOP, %.1f GFLOP/s", c->step_flops[at] * 1e-9, c->step_flops[at] / c->step_s[at] * 1e-9);
      fputc('\n', stderr);
    }
  }
}

/* A table step's number of the plan step st (the phases' steps in order), and back. */
static int step_number(const CpuCell *c, const PStep *st) {
  for (int k = 0, n = 0; k < NPHASES; n += phase_at(c->pl, k)->n, k++) {
    const Phase *ph = phase_at(c->pl, k);
    if (st >= ph->steps && st < ph->steps + ph->n) return n + (int)(st - ph->steps);
  }
  UNREACHABLE("a step outside the plan");
}

static const Phase *phase_of_step(const CpuCell *c, int s, int *i) {
  for (int k = 0; k < NPHASES; k++) {
    const Phase *ph = phase_at(c->pl, k);
    if (s < ph->n) {
      *i = s;
      return ph;
    }
    s -= ph->n;
  }
  UNREACHABLE("a step number outside the plan");
}

/* ---- the executor's host ---- */

typedef struct Host {
  CpuCell *c;
  CpuWork *w;
  double t0;   /* thread 0's start of the step it runs (the profile) */
} Host;

static void run_static(CpuCell *c, float *const *bases, const bool *which);

static void host_kernel(void *ctx, int k, int64_t r0, int64_t r1, float **bases) {
  CpuCell *c = ((Host *)ctx)->c;
  if (k >= c->pl->nkernels) run_static(c, bases, k == c->tab->kstatic_fwd ? c->pl->static_fwd : c->pl->static_bwd);
  else if (c->fns[k]) c->fns[k](r0, r1, bases);
  else eval_kernel_rows(c, bases, k, r0, r1);
}

static void host_barrier(void *ctx) {
  (void)ctx;
#pragma omp barrier
}

static void host_step(void *ctx, int s, int64_t rows, int64_t all_rows, bool done) {
  Host *h = ctx;
  if (!done) {
    h->t0 = now_s();
    return;
  }
  int i;
  const Phase *ph = phase_of_step(h->c, s, &i);
  profile_add(h->c, h->w, ph, i, now_s() - h->t0, rows, all_rows);
}

/* A forward or backward over the whole sequence on the threads the work pays for
 * (BackendOptions.threads asks for exactly that many); every GEMM runs on one BLAS thread (the
 * threads are ours: cpu_compile makes OpenBLAS single-threaded). */
static void host_run(void *ctx, Exec *e, bool backward) {
  CpuCell *c = ((Host *)ctx)->c;
  bool asked = c->base.opt.threads > 0;
  int nt = exec_threads(e, c->nthreads, asked);
  exec_team(e, nt, asked);
  if (nt == 1) {
    exec_run(e, backward, 0);
    return;
  }
#pragma omp parallel num_threads(nt)
  exec_run(e, backward, omp_get_thread_num());
}

/* Static values (params only), in node order, by the portable evaluator: the generated kernels do
 * not compute every op a static value may have (emit_cpu.c's kernel_op). */
static void run_static(CpuCell *c, float *const *bases, const bool *which) {
  Graph *g = &c->base.p->g;
  RowValues sc = {xcalloc((size_t)g->nnodes, sizeof(float *))};
  for (int id = 0; id < g->nnodes; id++) {
    if (!which[id]) continue;
    Node *n = graph_node(g, id);
    if (n->op == OP_PARAM || n->op == OP_ACC || n->op == OP_CONST) continue;
    const float *a = n->a[0] >= 0 ? value_at(c, bases, &sc, n->a[0], 0) : NULL;
    const float *b = n->a[1] >= 0 ? value_at(c, bases, &sc, n->a[1], 0) : NULL;
    node_eval_f32(g, id, (float *)value_at(c, bases, &sc, id, 0), a, b);
  }
  for (int i = 0; i < g->nnodes; i++) free(sc.val[i]);
  free(sc.val);
}

/* The executor of a call on the work, its workspace laid out for (T, B) and the cell's threads,
 * and grown to that size. */
static void exec_of(CpuCell *c, CpuWork *w, Host *host, const SeqIO *s, Exec *e) {
  CHECK(s->dtype == DT_F32);
  *host = (Host){c, w, 0};
  *e = (Exec){.tab = c->tab, .mode = EXEC_SEQIO, .isa = gemm_isa_default(),
              .host = {host, host_kernel, host_barrier, w->base.profiling ? host_step : NULL, host_run}};
  CHECK(exec_layout(e, s->T, s->B, c->nthreads) == EXEC_OK);
  if (w->cap < e->L.total) {
    memuse_free(w->mem);
    w->cap = (size_t)(e->L.total + 63) / 64 * 64;
    w->mem = memuse_aligned(w->cap);
  }
  w->T = s->T, w->B = s->B;
}

static size_t cpu_work_bytes(const Compiled *cc, int T, int B) {
  const CpuCell *c = (const CpuCell *)cc;
  Exec e = {.tab = c->tab, .mode = EXEC_SEQIO};
  CHECK(exec_layout(&e, T, B, c->nthreads) == EXEC_OK);
  return (size_t)e.L.total;
}

/* The SeqIO's buffers as the executor reads them (EXEC_SEQIO: per part, as SeqIO). */
static ExecIO io_of(const SeqIO *s, bool backward) {
  return (ExecIO){.x = F32(s->x), .dy = F32(s->dy), .y = s->y, .dx = s->grad_x, .params = (const float *const *)s->params,
                  .noise = (const float *const *)s->noise, .gh0 = (float *const *)s->grad_h0, .gates = (float *const *)s->gates,
                  .states = (const float *const *)(backward ? s->dfinal : s->h0),
                  .out = (float *const *)(backward ? s->grad_h0 : s->final), .grads = (float *const *)s->grad_params};
}

/* Where the call bound the arrays, for cpu_read_steps and the fold (cpu_fold). */
static void keep_binding(CpuWork *w, const Exec *e) { w->arr = e->abase, w->bases = e->bases, w->packs = e->packs; }

static void cpu_forward(Compiled *cc, Work *ww, const SeqIO *s) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  Host host;
  Exec e;
  exec_of(c, w, &host, s, &e);
  ExecIO io = io_of(s, false);
  CHECK(exec_forward(&e, &io, w->mem) == EXEC_OK);
  keep_binding(w, &e);
}

static void cpu_fold(CpuCell *c, CpuWork *w, const SeqIO *s);

static void cpu_backward(Compiled *cc, Work *ww, const SeqIO *s) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  CHECK(w->T == s->T && w->B == s->B);
  w->xgrad_left = s->grad_x == NULL;
  CHECK(!w->xgrad_left || (s->fold && c->tab->xgrad_step >= 0)); /* grad_x NULL: folded (cpu_folds) */
  Host host;
  Exec e;
  exec_of(c, w, &host, s, &e);
  ExecIO io = io_of(s, true);
  CHECK(exec_backward(&e, &io, w->mem) == EXEC_OK);
  keep_binding(w, &e);
  if (s->fold) cpu_fold(c, w, s);
  w->warm = true;
}

/* h_0 .. h_T of a state part: its state array, [(T + 1) B, size] (column offset 0); h0 throughout
 * for a still history; a shifted history's steps from their rows (Plan.shift). */
static int cpu_read_steps(Compiled *cc, Work *ww, StepArray what, int part, void *out) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  Program *p = c->base.p;
  if (what != STEPS_STATE) return -1;
  CHECK(part >= 0 && part < p->nsparts && w->arr);
  plan_state_steps(c->pl, part, p->sparts[part].size, w->arr[c->pl->state_array[part]], w->T, w->B, out);
  return 0;
}

/* ---- the interface ---- */

static const char *cpu_supports(const Program *p, const BackendOptions *o) {
  (void)p, (void)o; /* every program, in either mode; float32 always */
  return NULL;
}

/* ---- the input gradient summed by token (SeqIO.fold, Backend.folds) ---- */

/* The plan step of the table's xgrad_step: grad_x = G M over all rows. */
static const PStep *xgrad_pstep(const CpuCell *c) {
  int i;
  const Phase *ph = phase_of_step(c, c->tab->xgrad_step, &i);
  return &ph->steps[i];
}

static bool cpu_folds(const Compiled *cc) { return ((const CpuCell *)cc)->tab->xgrad_step >= 0; }

/* After a backward that skipped the product (grad_x NULL): fold->out += (G's rows summed by
 * token) M, the sums by runtime/nn's embedding backward (its order, whatever the threads). */
static void cpu_fold(CpuCell *c, CpuWork *w, const SeqIO *s) {
  const SeqFold *f = s->fold;
  CHECK(c->tab->xgrad_step >= 0 && w->xgrad_left && f->vocab > 0);
  GemmOperands g = plan_gemm_operands(c->pl, xgrad_pstep(c));
  int cols = g.nO, ld = width_of(c, g.v);
  size_t n = (size_t)f->vocab * (size_t)cols;
  if (w->fold_n < n) free(w->fold_sums), w->fold_sums = xmalloc(sizeof(float) * n), w->fold_n = n;
  Device *host = device_host(); /* its zero splits a large buffer over the threads */
  host->zero(host, w->fold_sums, sizeof(float) * n);
  nn_embedding_backward_ld(w->fold_sums, w->bases[g.v], (size_t)ld, f->ids, s->T * s->B, f->vocab, cols);
  const EtStep *st = &((const EtStep *)((const char *)c->tab + c->tab->steps))[c->tab->xgrad_step];
  gemm_run(&w->packs[st->pack], f->vocab, w->fold_sums, cols, f->out, c->base.p->x_size, true);
}

static int threads_of(const BackendOptions *o) { return o->threads > 0 ? o->threads : support_threads(); }

static void cpu_free(Compiled *cc);

static Compiled *cpu_compile(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  CHECK(p->differentiated && (!o->scan || p->scan_form));
  openblas_set_num_threads(1); /* cellc owns the threads (support_threads) */
  CpuCell *c = xcalloc(1, sizeof(CpuCell));
  c->base.be = &cpu_backend, c->base.p = p, c->base.opt = *o;
  c->nthreads = threads_of(o);
  c->pl = plan_new(p, &(PlanOptions){.scan = o->scan, .gates = o->gates, .still = true, .slice_views = true, .sink_hybrid = true, .dot_sums = true,
                                             .shift_histories = true});
  c->table = plan_table_build(c->pl, p);
  EtHeader *h = (EtHeader *)c->table.data;
  h->kstatic_fwd = c->pl->nkernels, h->kstatic_bwd = c->pl->nkernels + 1; /* host_kernel: run_static */
  c->tab = h;
  c->fns = xcalloc((size_t)c->pl->nkernels + 1, sizeof(KernelFn));
  if (o->portable) return &c->base; /* every fns[k] NULL: the portable evaluator runs the kernels */
  CgModule *m = cg_llvm_build(c->pl, err, errlen);
  if (m) c->jit = cg_llvm_jit(m, c->fns, err, errlen);
  if (!c->jit) {
    cpu_free(&c->base);
    return NULL;
  }
  return &c->base;
}

static void cpu_free(Compiled *cc) {
  CpuCell *c = (CpuCell *)cc;
  if (!c) return;
  free(c->table.data);
  profile_steps_report(c);
  free(c->step_s), free(c->step_flops);
  cg_llvm_jit_free(c->jit);
  plan_free(c->pl);
  free(c->fns);
  free(c);
}

static Work *cpu_work_new(Compiled *c) {
  CpuWork *w = xcalloc(1, sizeof(CpuWork));
  work_init(&w->base, c);
  return &w->base;
}

static void cpu_work_free(Work *ww) {
  CpuWork *w = (CpuWork *)ww;
  if (!w) return;
  work_profile_report(&w->base);
  memuse_free(w->mem);
  free(w->fold_sums);
  free(w);
}

const Backend cpu_backend = {.name = "cpu", .dtype = DT_F32, .scans = true, .device = DEVICE_CPU, BACKEND_ENTRY_POINTS(cpu),
                           .emit = cpu_emit, .folds = cpu_folds, .work_bytes = cpu_work_bytes};
