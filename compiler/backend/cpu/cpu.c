/* cpu.c: the CPU back end: compiles a Program into a plan (compiler/plan) and LLVM-generated
 * elementwise kernels (cg_llvm.c), and runs the plan's phases in order over whole sequences in
 * float32: GEMMs through gemm.c (the weights packed once per forward or backward; the weight
 * gradients' outer products unpacked, gemm_tn_acc), scans, the fused kernels. */
#include "cpu.h"

#include <cblas.h> /* openblas_set_num_threads */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cg_llvm.h"
#include "emit_cpu.h"
#include "gemm.h"
#include "scan.h"

/* Weight-gradient steps that run as one product: PS_OUTER_ACC steps of a run of a phase's steps
 * with no kinds but PS_OUTER_ACC and PS_COLSUM, the same V and their G side by side in one array (a
 * GRU's three input-weight gradients share x and the stacked gate adjoints): A^T V with A the G's
 * columns together, M their rows in all, so V is read once; and where other V meet the same G
 * (an LSTM's four gate adjoints times x and times h), those V's columns beside the first's, so G
 * is read once too; and the column sums of the run's PS_COLSUM steps over those G, taken while G
 * is packed. */
typedef struct OuterGroup {
  const PStep **steps;  /* na * nv: G block i (by G's column) times V block j at i * nv + j */
  int na, nv;
  int M, N;             /* the G blocks' widths in all, the V blocks' */
  const PStep *trigger; /* the group runs at this step, the first of its steps in the phase */
  const PStep **sums;   /* per G block: the run's PS_COLSUM of it (the bias gradient), done with it, or NULL */
  bool any_sum;
} OuterGroup;

/* A compiled program: its plan, a function per kernel (or NULL: the portable evaluator), and the
 * weight-gradient groups. */
typedef struct CpuCell {
  Compiled base;
  Plan *pl;
  KernelFn *fns;
  CgJit *jit;
  int nthreads;
  OuterGroup *groups;
  int ngroups;
  int *local_slots;        /* the slots of step-local arrays (plan_step_local): B rows, not T * B */
  int nlocal;
  bool *local;             /* per array: step-local */
  const PStep *xg;         /* the one step that writes grad_x, where it is a product G M (Backend.xgrad_cols), or NULL */
  double *step_s, *step_flops; /* CELLC_PROFILE=steps: per plan step (the phases in order), thread 0's
                                  seconds and all threads' operations; printed when the cell is freed */
} CpuCell;

/* The arrays of one sequence in flight (forward keeps what backward reads). */
typedef struct CpuWork {
  Work base;
  int T, B;
  int narr;
  float **arr;             /* per plan array */
  bool *owned;
  size_t *size;
  float **bases;           /* per slot: where row 0 of its values is (a step-local slot: row 0 of its B rows) */
  float **tbases;          /* per thread: its copy of bases, step-local slots moved to the step it runs */
  int ntbases;
  GemmPacked *packs;       /* per PS_GEMM / PS_GEMM_T step of the plan: its matrix, packed */
  const PStep **pack_step; /* ... and that step */
  int npacks;
  GemmScratch *scratch;    /* per thread: the weight gradients' buffers */
  int nscratch;
  bool xgrad_left;         /* the last backward left grad_x as the product of step xg (grad_x NULL) */
  bool warm;               /* a backward has run: the arrays are allocated and touched (CELLC_PROFILE=steps
                              leaves out the first sequence, its page faults) */
} CpuWork;

#define F32(v) ((const float *)(v))

/* ---- the portable evaluator (kernels without JIT, static values): node_eval_f32 of the IR ---- */

typedef struct Scratch {
  float **val;   /* per node: a row's values (kernel temporaries, expanded constants) */
} Scratch;

static float *row_ptr(CpuCell *c, float *const *bases, int slot, int64_t r) {
  const Slot *s = &c->pl->slots[slot];
  int width = c->pl->arrays[s->array].width;
  return bases[slot] + r * width;
}

/* A node's values at row r: its home, or the scratch row (kernel temporaries, constants). */
static const float *value_at(CpuCell *c, float *const *bases, Scratch *sc, int id, int64_t r) {
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
  Scratch sc = {xcalloc((size_t)g->nnodes, sizeof(float *))};
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

/* ---- arrays ---- */

static void work_bind(CpuCell *c, CpuWork *w, const SeqIO *s) {
  Plan *pl = c->pl;
  if (!w->arr) {
    w->arr = xcalloc((size_t)pl->narrays, sizeof(float *));
    w->owned = xcalloc((size_t)pl->narrays, sizeof(bool));
    w->size = xcalloc((size_t)pl->narrays, sizeof(size_t));
    w->bases = xcalloc((size_t)pl->nslots, sizeof(float *));
    w->narr = pl->narrays;
  }
  w->T = s->T, w->B = s->B;
  for (int i = 0; i < pl->narrays; i++) {
    const PlanArray *a = &pl->arrays[i];
    float *ext = NULL;
    switch (a->kind) {
    case ARR_PARAM: ext = (float *)s->params[a->index]; break;
    case ARR_X: ext = (float *)s->x; break;
    case ARR_DY: ext = (float *)s->dy; break;
    case ARR_NOISE: ext = (float *)s->noise[a->index]; break;
    case ARR_Y: ext = (float *)s->y; break;
    case ARR_GX: ext = (float *)s->grad_x; break;
    case ARR_GH0: ext = (float *)s->grad_h0[a->index]; break;
    case ARR_GATE: ext = s->gates ? (float *)s->gates[a->index] : NULL; break;
    default: break;
    }
    if (ext || a->kind == ARR_PARAM || a->kind == ARR_X || a->kind == ARR_DY || a->kind == ARR_Y || a->kind == ARR_GX ||
        a->kind == ARR_GH0 || a->kind == ARR_NOISE) {
      if (w->owned[i]) free(w->arr[i]);
      w->owned[i] = false;
      w->arr[i] = ext;
      continue;
    }
    size_t need = plan_array_floats(a, c->local[i] ? 1 : s->T, s->B);
    if (!w->owned[i] || w->size[i] < need) {
      if (w->owned[i]) free(w->arr[i]);
      w->arr[i] = xmalloc(sizeof(float) * (need ? need : 1));
      w->owned[i] = true;
      w->size[i] = need;
    }
  }
  for (int i = 0; i < pl->nslots; i++) {
    const Slot *sl = &pl->slots[i];
    const PlanArray *a = &pl->arrays[sl->array];
    float *base = w->arr[sl->array];
    w->bases[i] = base ? base + ((size_t)sl->row_off * (size_t)s->B) * (size_t)a->width + (size_t)sl->col : NULL;
  }
}

/* ---- steps ---- */

static int width_of(CpuCell *c, int slot) { return c->pl->arrays[c->pl->slots[slot].array].width; }

/* A GEMM step's operands: Y[rows, nO] (+)= V[rows, nI] M^T (PS_GEMM) or Y[rows, nI] (+)= V[rows, nO] M
 * (PS_GEMM_T), M row-major [nO, nI]. */
typedef struct GemmArgs {
  int hy, hv;
  const float *M;
  int nO, nI;
} GemmArgs;

static GemmArgs gemm_args(CpuCell *c, CpuWork *w, const PStep *st) {
  GemmOperands op = plan_gemm_operands(c->pl, st);
  return (GemmArgs){op.y, op.v, w->bases[op.m], op.nO, op.nI};
}

/* Below this inner dimension cblas_sgemm is as fast as the kernels (both store-bound): measured at
 * 64 x 384, AVX-512: K = 1 cblas 1.3-1.6 us, kernel 1.5 us; K = 2 2.0 / 1.6; K = 8 4.9 / 2.6. */
#define GEMM_MIN_K 2

/* Packs the matrix of every GEMM step of the phases (the forward's or the backward's) once,
 * before the sequence: the weights do not change while it runs. */
static void pack_gemms(CpuCell *c, CpuWork *w, const Phase *const *phases, int nphases) {
  GemmIsa isa = gemm_isa_default();
  for (int f = 0; f < nphases; f++)
    for (int i = 0; i < phases[f]->n; i++) {
      const PStep *st = &phases[f]->steps[i];
      if (st->kind != PS_GEMM && st->kind != PS_GEMM_T) continue;
      int e = 0;
      while (e < w->npacks && w->pack_step[e] != st) e++;
      if (e == w->npacks) {
        w->packs = xrealloc(w->packs, sizeof(GemmPacked) * (size_t)(e + 1));
        w->pack_step = xrealloc(w->pack_step, sizeof(PStep *) * (size_t)(e + 1));
        memset(&w->packs[e], 0, sizeof(GemmPacked));
        w->pack_step[e] = st, w->npacks++;
      }
      GemmArgs a = gemm_args(c, w, st);
      bool trans = st->kind == PS_GEMM;
      int N = trans ? a.nO : a.nI, K = trans ? a.nI : a.nO;
      gemm_pack(&w->packs[e], K < GEMM_MIN_K ? GEMM_BLAS : isa, a.M, a.nI, N, K, trans);
    }
}

static void run_gemm(CpuCell *c, CpuWork *w, float *const *bases, const PStep *st, int64_t r0, int64_t r1) {
  GemmArgs a = gemm_args(c, w, st);
  int e = 0;
  while (e < w->npacks && w->pack_step[e] != st) e++;
  CHECK(e < w->npacks);
  gemm_run(&w->packs[e], (int)(r1 - r0), row_ptr(c, bases, a.hv, r0), width_of(c, a.hv), row_ptr(c, bases, a.hy, r0),
           width_of(c, a.hy), st->accumulate);
}

static Coef coef_of(CpuCell *c, CpuWork *w, int id, int size) {
  Coef k = {0};
  Node *n = graph_node(&c->base.p->g, id);
  if (id < 0 || n->op == OP_CONST) {
    k.fill = xmalloc(sizeof(float) * (size_t)size);
    for (int j = 0; j < size; j++) k.fill[j] = id < 0 ? 0.0f : (float)n->k;
    k.base = k.fill;
    return k;
  }
  int h = c->pl->home[id];
  CHECK(h >= 0);
  k.base = w->bases[h];
  k.ld = width_of(c, h);
  return k;
}


/* The scan of a state over all rows, on the channels [j0, j1) of its parts' batch entries [b0, b1). */
static void run_scan(CpuCell *c, CpuWork *w, int state, bool reverse, int b0, int b1, int j0, int j1) {
  Program *p = c->base.p;
  int q = p->spart_of[state];
  bool cplx = p->sparts[q].cplx;
  int B = w->B, size = p->sparts[q].size, parts = cplx ? 2 : 1;
  int64_t rows = (int64_t)w->T * B;
  Coef a[2], b[2];
  for (int k = 0; k < parts; k++) {
    a[k] = coef_of(c, w, p->sparts[q + k].a, size);
    b[k] = coef_of(c, w, reverse ? p->sparts[q + k].g : p->sparts[q + k].b, size);
  }
  if (!reverse)
    scan_forward(rows, B, size, b0, b1, j0, j1, a, b, w->arr[c->pl->state_array[q]],
                 cplx ? w->arr[c->pl->state_array[q + 1]] : NULL);
  else
    scan_reverse(rows, B, size, b0, b1, j0, j1, a, b, w->arr[c->pl->dstate_array[q]],
                 cplx ? w->arr[c->pl->dstate_array[q + 1]] : NULL);
  for (int k = 0; k < parts; k++) free(a[k].fill), free(b[k].fill);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What one of n threads runs of a sequence: the batch rows [b0, b1) of every step (a thread owns
 * its sequences from the first step to the last, so the time loop needs no barrier; a thread may
 * have none, when the batch gives fewer threads rows than there are: it waits out the loop), and
 * share i of n of each step over all rows (rows, channels or output rows, by the kind of step),
 * with a barrier after each of those. */
typedef struct Share {
  int i, n;
  int b0, b1;
  float **bases;  /* the thread's slot bases (CpuWork.tbases) */
} Share;

/* Part i of n of [lo, hi). */
static void share_of(int64_t lo, int64_t hi, const Share *sh, int64_t *a, int64_t *b) {
  *a = lo + (hi - lo) * sh->i / sh->n;
  *b = lo + (hi - lo) * (sh->i + 1) / sh->n;
}

static void barrier(const Share *sh) {
  if (sh->n > 1) {
#pragma omp barrier
  }
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

static const OuterGroup *outer_group_of(const CpuCell *c, const PStep *st);

/* A product step's floating-point operations over all_rows rows (0 for other steps); a group of
 * weight gradients counts at the step that runs it. */
static double profile_flops(CpuCell *c, const PStep *st, int64_t all_rows) {
  if (st->kind == PS_GEMM || st->kind == PS_GEMM_T) {
    GemmOperands op = plan_gemm_operands(c->pl, st);
    return 2.0 * (double)all_rows * op.nO * op.nI;
  }
  if (st->kind != PS_OUTER_ACC) return 0;
  const OuterGroup *g = outer_group_of(c, st);
  return g->trigger == st ? 2.0 * (double)all_rows * g->M * g->N : 0;
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

/* The G and V slots of a PS_OUTER_ACC step. */
static void outer_operands(const CpuCell *c, const PStep *st, int *hG, int *hV) {
  Node *o = graph_node(&c->base.p->g, st->node);
  *hG = c->pl->home[o->a[0]], *hV = c->pl->home[o->a[1]];
  CHECK(*hG >= 0 && *hV >= 0);
}

/* The order that puts a run's weight-gradient steps of one V next to each other, their G by column
 * (qsort_r's comparison; `cell` is the CpuCell). */
static int outer_cmp(const void *x, const void *y, void *cell) {
  const CpuCell *c = cell;
  const PStep *a = *(const PStep *const *)x, *b = *(const PStep *const *)y;
  int aG, aV, bG, bV;
  outer_operands(c, a, &aG, &aV);
  outer_operands(c, b, &bG, &bV);
  const Slot *sa = &c->pl->slots[aG], *sb = &c->pl->slots[bG];
  int ka[] = {aV, sa->array, sa->row_off, sa->col}, kb[] = {bV, sb->array, sb->row_off, sb->col};
  for (int i = 0; i < 4; i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

/* Whether step `st` (PS_OUTER_ACC) joins the group (while it has one V): the same V. */
static bool outer_extends(const CpuCell *c, const OuterGroup *g, const PStep *st) {
  int gG, gV, hG, hV;
  outer_operands(c, g->steps[0], &gG, &gV);
  outer_operands(c, st, &hG, &hV);
  return hV == gV && graph_node(&c->base.p->g, st->node)->n[1] == g->N;
}

/* Whether groups a and b (one V each) have the same G blocks in the same order. */
static bool outer_same_g(const CpuCell *c, const OuterGroup *a, const OuterGroup *b) {
  if (a->na != b->na || a->M != b->M) return false;
  for (int i = 0; i < a->na; i++) {
    int aG, aV, bG, bV;
    outer_operands(c, a->steps[i * a->nv], &aG, &aV);
    outer_operands(c, b->steps[i], &bG, &bV);
    if (aG != bG) return false;
  }
  return true;
}

/* Group b's V (its one V block) becomes a's last; b is emptied. */
static void outer_merge(OuterGroup *a, OuterGroup *b) {
  const PStep **steps = xmalloc(sizeof(PStep *) * (size_t)a->na * (size_t)(a->nv + 1));
  for (int i = 0; i < a->na; i++) {
    memcpy(steps + (size_t)i * (a->nv + 1), a->steps + (size_t)i * a->nv, sizeof(PStep *) * (size_t)a->nv);
    steps[(size_t)i * (a->nv + 1) + a->nv] = b->steps[i];
  }
  free(a->steps), free(b->steps);
  a->steps = steps, a->nv++, a->N += b->N;
  if (b->trigger < a->trigger) a->trigger = b->trigger;
}

/* The groups of one run of steps (PS_OUTER_ACC and PS_COLSUM only: the products are independent
 * of each other, their inputs ready before the run): its PS_OUTER_ACC steps sorted, then grouped. */
static void outer_groups_of_run(CpuCell *c, const PStep *run, int n) {
  const PStep **st = xmalloc(sizeof(PStep *) * (size_t)(n ? n : 1));
  int m = 0, first = c->ngroups;
  for (int i = 0; i < n; i++)
    if (run[i].kind == PS_OUTER_ACC) st[m++] = &run[i];
  qsort_r(st, (size_t)m, sizeof *st, outer_cmp, c);
  OuterGroup *g = NULL;
  for (int i = 0; i < m; i++) {
    Node *o = graph_node(&c->base.p->g, st[i]->node);
    if (g && outer_extends(c, g, st[i])) {
      g->steps = xrealloc(g->steps, sizeof(PStep *) * (size_t)(g->na + 1));
      g->steps[g->na++] = st[i];
      g->M += o->n[0];
    } else {
      c->groups = xrealloc(c->groups, sizeof(OuterGroup) * (size_t)(c->ngroups + 1));
      g = &c->groups[c->ngroups++];
      *g = (OuterGroup){.steps = xmalloc(sizeof(PStep *)), .na = 1, .nv = 1, .M = o->n[0], .N = o->n[1], .trigger = st[i]};
      g->steps[0] = st[i];
    }
    if (st[i] < g->trigger) g->trigger = st[i]; /* the first of the group in the phase's order */
  }
  free(st);
  int last = first; /* groups with the same G blocks: one, their V side by side */
  for (int i = first; i < c->ngroups; i++) {
    int j = first;
    while (j < last && !outer_same_g(c, &c->groups[j], &c->groups[i])) j++;
    if (j < last) outer_merge(&c->groups[j], &c->groups[i]);
    else c->groups[last++] = c->groups[i];
  }
  c->ngroups = last;
  for (int i = first; i < c->ngroups; i++) c->groups[i].sums = xcalloc((size_t)c->groups[i].na, sizeof(PStep *));
  for (int i = 0; i < n; i++) { /* each PS_COLSUM to the first G block it sums */
    bool done = run[i].kind != PS_COLSUM;
    for (int j = first; j < c->ngroups && !done; j++)
      for (int k = 0; k < c->groups[j].na && !done; k++) {
        OuterGroup *h = &c->groups[j];
        if (graph_node(&c->base.p->g, h->steps[k * h->nv]->node)->a[0] == run[i].node && !h->sums[k])
          h->sums[k] = &run[i], h->any_sum = done = true;
      }
  }
}

/* Whether a PS_COLSUM step is done by its weight-gradient group. */
static bool colsum_fused(const CpuCell *c, const PStep *st) {
  for (int i = 0; i < c->ngroups; i++)
    for (int k = 0; k < c->groups[i].na; k++)
      if (c->groups[i].sums[k] == st) return true;
  return false;
}

/* The weight-gradient groups of every phase. */
static void outer_groups(CpuCell *c) {
  const Plan *pl = c->pl;
  const Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  for (int f = 0; f < 7; f++) {
    const Phase *ph = phases[f];
    for (int i = 0; i < ph->n;) {
      int j = i;
      while (j < ph->n && (ph->steps[j].kind == PS_OUTER_ACC || ph->steps[j].kind == PS_COLSUM)) j++;
      if (j > i) outer_groups_of_run(c, &ph->steps[i], j - i);
      i = j > i ? j : i + 1;
    }
  }
}

static const OuterGroup *outer_group_of(const CpuCell *c, const PStep *st) {
  for (int i = 0; i < c->ngroups; i++)
    for (int k = 0; k < c->groups[i].na * c->groups[i].nv; k++)
      if (c->groups[i].steps[k] == st) return &c->groups[i];
  UNREACHABLE("a weight-gradient step outside the groups");
}

/* Each group's acc[bound] += G^T V over all rows, when `st` is its first step (the others are done
 * then). The threads split the rows at superblocks (GEMM_TN_ROWS), each summing its rows of every
 * output in float64 (gemm_tn_total: each thread reads only its rows of G and V), and the outputs'
 * rows too where there are more threads than superblocks; after a barrier they split the outputs'
 * rows and add the threads' sums in thread order (a thread's zeros where it had other rows), so
 * the sums are those of one thread. */
static void run_outer_acc(CpuCell *c, CpuWork *w, const PStep *st, int64_t rows, const Share *sh) {
  const OuterGroup *g = outer_group_of(c, st);
  if (g->trigger != st) return;
  Graph *gr = &c->base.p->g;
  size_t mn = (size_t)g->M * (size_t)g->N, len = mn + (g->any_sum ? (size_t)g->M : 0);
  double *part = gemm_scratch_total(&w->scratch[sh->i], len); /* the product, then the column sums */
  memset(part, 0, sizeof(double) * len);
  /* superblocks to groups of threads; with more threads than superblocks (short sequences, many
   * cores), each group also splits the outputs' rows (at multiples of 8) */
  int64_t nsb = (rows + GEMM_TN_ROWS - 1) / GEMM_TN_ROWS, s0 = 0, s1 = 0;
  int mparts = sh->n > nsb ? (int)(sh->n / nsb) : 1, groups = sh->n / mparts, mp = sh->i % mparts;
  if (sh->i < groups * mparts) share_of(0, nsb, &(Share){sh->i / mparts, groups, 0, 0, NULL}, &s0, &s1);
  int m0 = (int)((int64_t)g->M * mp / mparts) / 8 * 8;
  int m1 = mp + 1 == mparts ? g->M : (int)((int64_t)g->M * (mp + 1) / mparts) / 8 * 8;
  int64_t k0 = s0 * GEMM_TN_ROWS, k1 = s1 * GEMM_TN_ROWS < rows ? s1 * GEMM_TN_ROWS : rows;
  if (k1 > k0 && m1 > m0) {
    GemmCols *a = xmalloc(sizeof(GemmCols) * (size_t)(g->na + g->nv)), *v = a + g->na;
    int na = 0;
    for (int m = 0, off = 0; m < g->na; off += graph_node(gr, g->steps[m * g->nv]->node)->n[0], m++) {
      int n = graph_node(gr, g->steps[m * g->nv]->node)->n[0], lo = m0 > off ? m0 : off, hi = m1 < off + n ? m1 : off + n;
      if (hi <= lo) continue;
      int mG, mV;
      outer_operands(c, g->steps[m * g->nv], &mG, &mV);
      a[na++] = (GemmCols){w->bases[mG] + k0 * width_of(c, mG) + (lo - off), width_of(c, mG), hi - lo};
    }
    for (int j = 0; j < g->nv; j++) {
      int hG, hV;
      outer_operands(c, g->steps[j], &hG, &hV);
      v[j] = (GemmCols){w->bases[hV] + k0 * width_of(c, hV), width_of(c, hV), graph_node(gr, g->steps[j]->node)->n[1]};
    }
    gemm_tn_total(gemm_isa_default(), a, na, v, g->nv, (int)(k1 - k0), part + (size_t)m0 * g->N,
                  g->any_sum ? part + mn + m0 : NULL, &w->scratch[sh->i]);
    free(a);
  }
  barrier(sh);
  int64_t i0, i1;
  share_of(0, g->M, sh, &i0, &i1);
  int k = 0, first = 0; /* the G block that holds row i, and its first row in the group */
  for (int64_t i = i0; i < i1; i++) {
    while (i >= first + graph_node(gr, g->steps[k * g->nv]->node)->n[0]) first += graph_node(gr, g->steps[k++ * g->nv]->node)->n[0];
    for (int l = 0, n0 = 0; l < g->nv; l++) { /* each V block's columns: its step's outputs */
      const PStep *s = g->steps[k * g->nv + l];
      int nl = graph_node(gr, s->node)->n[1];
      float *acc = w->bases[c->pl->home[c->base.p->bounds[s->bound].acc]] + (i - first) * nl;
      for (int j = 0; j < nl; j++) {
        double sum = 0;
        for (int t = 0; t < sh->n; t++) sum += w->scratch[t].total[(size_t)i * (size_t)g->N + (size_t)(n0 + j)];
        acc[j] += (float)sum;
      }
      n0 += nl;
    }
    if (g->sums[k]) {
      double sum = 0;
      for (int t = 0; t < sh->n; t++) sum += w->scratch[t].total[mn + (size_t)i];
      w->bases[c->pl->home[c->base.p->bounds[g->sums[k]->bound].acc]][i - first] += (float)sum;
    }
  }
}

/* acc[j0, j1) += the sum of the rows' columns j0 .. j1 - 1 (row stride ld): in chunks of columns
 * held in a local array, which the compiler keeps in vector registers (acc and the rows may not
 * alias, so it need not store acc after every row). */
static void colsum_rows(const float *v, int ld, int64_t rows, float *acc, int64_t j0, int64_t j1) {
  enum { CW = 64 };
  for (int64_t c0 = j0; c0 < j1; c0 += CW) {
    int n = j1 - c0 < CW ? (int)(j1 - c0) : CW;
    float sum[CW] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *row = v + r * ld + c0;
      if (n == CW)
        for (int j = 0; j < CW; j++) sum[j] += row[j]; /* a constant count: vectorized at -O2 */
      else
        for (int j = 0; j < n; j++) sum[j] += row[j];
    }
    for (int j = 0; j < n; j++) acc[c0 + j] += sum[j];
  }
}

/* acc[bound] += the sum over all rows of the node, on this thread's share of the columns. */
static void run_colsum(CpuCell *c, CpuWork *w, const PStep *st, int64_t rows, const Share *sh) {
  Graph *g = &c->base.p->g;
  int h = c->pl->home[st->node], hacc = c->pl->home[c->base.p->bounds[st->bound].acc];
  float *acc = w->bases[hacc];
  int64_t j0, j1;
  share_of(0, node_numel(graph_node(g, st->node)), sh, &j0, &j1);
  if (h < 0) { /* a constant adjoint */
    float k = (float)graph_node(g, st->node)->k;
    for (int64_t j = j0; j < j1; j++) acc[j] += k * (float)rows;
    return;
  }
  colsum_rows(w->bases[h], width_of(c, h), rows, acc, j0, j1);
}

/* The node's values (or its constant) copied to slot `dst` over rows [r0, r1). */
static void run_copy(CpuCell *c, float *const *bases, const PStep *st, int64_t r0, int64_t r1) {
  Node *n = graph_node(&c->base.p->g, st->node);
  int e = node_numel(n), h = c->pl->home[st->node];
  if (h >= 0 && width_of(c, h) == e && width_of(c, st->dst) == e) { /* rows one after another: one copy */
    if (r1 > r0) memcpy(row_ptr(c, bases, st->dst, r0), row_ptr(c, bases, h, r0), sizeof(float) * (size_t)(r1 - r0) * (size_t)e);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    float *dst = row_ptr(c, bases, st->dst, r);
    if (h < 0) {
      CHECK(n->op == OP_CONST);
      for (int j = 0; j < e; j++) dst[j] = (float)n->k;
    } else memcpy(dst, row_ptr(c, bases, h, r), sizeof(float) * (size_t)e);
  }
}

/* One step of a phase on this thread's rows [r0, r1) (steps over all rows split by kind). */
static void run_step(CpuCell *c, CpuWork *w, const PStep *st, Region region, int64_t r0, int64_t r1, const Share *sh) {
  int64_t rows = (int64_t)w->T * w->B;
  bool all = region == REG_ALL;
  switch (st->kind) {
  case PS_ELEM:
    if (c->fns[st->kernel]) c->fns[st->kernel](r0, r1, sh->bases);
    else eval_kernel_rows(c, sh->bases, st->kernel, r0, r1);
    break;
  case PS_GEMM:
  case PS_GEMM_T:
    if (r1 > r0) run_gemm(c, w, sh->bases, st, r0, r1);
    break;
  case PS_SCAN:
  case PS_RSCAN: {
    /* the threads split the batch entries where there are enough, else the channels */
    CHECK(all);
    int size = c->base.p->sparts[c->base.p->spart_of[st->state]].size;
    int64_t b0 = 0, b1 = w->B, j0 = 0, j1 = size;
    if (w->B >= sh->n) share_of(0, w->B, sh, &b0, &b1);
    else share_of(0, size, sh, &j0, &j1);
    run_scan(c, w, st->state, st->kind == PS_RSCAN, (int)b0, (int)b1, (int)j0, (int)j1);
    break;
  }
  case PS_OUTER_ACC: CHECK(all); run_outer_acc(c, w, st, rows, sh); break;
  case PS_COLSUM:
    CHECK(all);
    if (!colsum_fused(c, st)) run_colsum(c, w, st, rows, sh);
    break;
  case PS_COPY: run_copy(c, sh->bases, st, r0, r1); break;
  case PS_ZERO: {
    int e = width_of(c, st->dst); /* whole rows: one memset */
    if (r1 > r0) memset(row_ptr(c, sh->bases, st->dst, r0), 0, sizeof(float) * (size_t)(r1 - r0) * (size_t)e);
    break;
  }
  default: UNREACHABLE("plan step");
  }
}

/* A phase on this thread's share: the batch rows of step t (REG_STEP) or of the first step
 * (REG_FIRST), or its part of all rows with a barrier after each step (REG_ALL). Thread 0 keeps
 * the profile. */
static void run_phase(CpuCell *c, CpuWork *w, const Phase *ph, int t, const Share *sh) {
  bool profiling = w->base.profiling && sh->i == 0;
  int64_t r0, r1, all_rows = ph->region == REG_ALL ? (int64_t)w->T * w->B : w->B;
  if (ph->region == REG_ALL) share_of(0, (int64_t)w->T * w->B, sh, &r0, &r1);
  else if (ph->region == REG_STEP) r0 = (int64_t)t * w->B + sh->b0, r1 = (int64_t)t * w->B + sh->b1;
  else r0 = sh->b0, r1 = sh->b1;
  if (ph->region == REG_STEP)
    for (int i = 0; i < c->nlocal; i++) { /* row r of step t at row r - t B of the slot's B rows */
      int slot = c->local_slots[i];
      sh->bases[slot] = w->bases[slot] - (int64_t)t * w->B * width_of(c, slot);
    }
  for (int i = 0; i < ph->n; i++) {
    if (w->xgrad_left && &ph->steps[i] == c->xg) continue; /* grad_x left to the caller (every thread skips it) */
    double t0 = profiling ? now_s() : 0;
    run_step(c, w, &ph->steps[i], ph->region, r0, r1, sh);
    if (ph->region == REG_ALL) barrier(sh);
    if (profiling) profile_add(c, w, ph, i, now_s() - t0, r1 - r0, all_rows);
  }
}

/* The phases of a forward (pre, every step, post) or a backward (pre, every step in reverse, post,
 * first) on this thread's share. */
static void run_phases(CpuCell *c, CpuWork *w, bool backward, const Share *sh) {
  const Plan *pl = c->pl;
  memcpy(sh->bases, w->bases, sizeof(float *) * (size_t)pl->nslots);
  int T = sh->b1 > sh->b0 ? w->T : 0; /* a thread without batch rows skips the time loop */
  if (!backward) {
    run_phase(c, w, &pl->fwd_pre, 0, sh);
    for (int t = 0; t < T && pl->fwd_step.n; t++) run_phase(c, w, &pl->fwd_step, t, sh);
    barrier(sh);
    run_phase(c, w, &pl->fwd_post, 0, sh);
    return;
  }
  run_phase(c, w, &pl->bwd_pre, 0, sh);
  for (int t = T - 1; t >= 0 && pl->bwd_step.n; t--) run_phase(c, w, &pl->bwd_step, t, sh);
  barrier(sh);
  run_phase(c, w, &pl->bwd_post, 0, sh);
  run_phase(c, w, &pl->bwd_first, 0, sh);
}

/* Below these sizes another thread does not pay: each thread's batch rows of a step (sequential
 * mode: its per-step GEMMs get that many rows), and the floats a sequence's arrays hold. */
#define MIN_ROWS_PER_THREAD 8
#define MIN_FLOATS_PER_THREAD (1 << 16)

/* The threads of a sequence: BackendOptions.threads asks for exactly that many; otherwise as many
 * as pay, up to CELLC_THREADS or the cores. *loop: how many of them run the time loop (each with
 * a batch row at least, MIN_ROWS_PER_THREAD unless asked): with 16 cores and a batch of 64, the
 * loop runs on 8 threads and the products over all rows (the hoisted ones, the weight gradients)
 * on 16. */
static int threads_for(CpuCell *c, CpuWork *w, int *loop) {
  bool asked = c->base.opt.threads > 0;
  int nt = c->nthreads, rows = w->B / (asked ? 1 : MIN_ROWS_PER_THREAD);
  if (!asked) {
    double floats = 0;
    for (int i = 0; i < w->narr; i++) floats += (double)w->size[i];
    if (floats / MIN_FLOATS_PER_THREAD < nt) nt = floats >= MIN_FLOATS_PER_THREAD ? (int)(floats / MIN_FLOATS_PER_THREAD) : 1;
  }
  bool has_loop = c->pl->fwd_step.n || c->pl->bwd_step.n;
  *loop = has_loop && rows < nt ? (rows > 1 ? rows : 1) : nt;
  return nt;
}

/* A forward or backward over the whole sequence on the threads the work pays for; every GEMM runs
 * on one BLAS thread (the threads are ours: cpu_compile makes OpenBLAS single-threaded). */
static void run_sequence(CpuCell *c, CpuWork *w, bool backward) {
  const Plan *pl = c->pl;
  const Phase *fwd[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post};
  const Phase *bwd[] = {&pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  if (backward) pack_gemms(c, w, bwd, 4);
  else pack_gemms(c, w, fwd, 3);
  int nl, nt = threads_for(c, w, &nl);
  if (w->nscratch < nt) {
    w->scratch = xrealloc(w->scratch, sizeof(GemmScratch) * (size_t)nt);
    memset(w->scratch + w->nscratch, 0, sizeof(GemmScratch) * (size_t)(nt - w->nscratch));
    w->nscratch = nt;
  }
  if (w->ntbases < nt) {
    w->tbases = xrealloc(w->tbases, sizeof(float *) * (size_t)nt * (size_t)(c->pl->nslots + 1));
    w->ntbases = nt;
  }
  if (nt == 1) {
    Share sh = {0, 1, 0, w->B, w->tbases};
    run_phases(c, w, backward, &sh);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int i = omp_get_thread_num();
    int b0 = i < nl ? w->B * i / nl : w->B, b1 = i < nl ? w->B * (i + 1) / nl : w->B;
    Share sh = {i, nt, b0, b1, w->tbases + (size_t)i * (size_t)(c->pl->nslots + 1)};
    run_phases(c, w, backward, &sh);
  }
}

/* Static values (params only), in node order. */
static void run_static(CpuCell *c, CpuWork *w, const bool *which) {
  Graph *g = &c->base.p->g;
  Scratch sc = {xcalloc((size_t)g->nnodes, sizeof(float *))};
  for (int id = 0; id < g->nnodes; id++) {
    if (!which[id]) continue;
    Node *n = graph_node(g, id);
    if (n->op == OP_PARAM || n->op == OP_ACC || n->op == OP_CONST) continue;
    const float *a = n->a[0] >= 0 ? value_at(c, w->bases, &sc, n->a[0], 0) : NULL;
    const float *b = n->a[1] >= 0 ? value_at(c, w->bases, &sc, n->a[1], 0) : NULL;
    node_eval_f32(g, id, (float *)value_at(c, w->bases, &sc, id, 0), a, b);
  }
  for (int i = 0; i < g->nnodes; i++) free(sc.val[i]);
  free(sc.val);
}

/* The work bound to the buffers of a forward or backward call; its plan. */
static Plan *bind_call(CpuCell *c, CpuWork *w, const SeqIO *s) {
  CHECK(s->dtype == DT_F32);
  work_bind(c, w, s);
  return c->pl;
}

static void cpu_forward(Compiled *cc, Work *ww, const SeqIO *s) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  Program *p = c->base.p;
  Plan *pl = bind_call(c, w, s);
  run_static(c, w, pl->static_fwd);
  for (int i = 0; i < pl->narrays; i++) {
    if (pl->arrays[i].kind != ARR_STACK) continue;
    float *dst = w->arr[i];
    int st = pl->arrays[i].index;
    for (int m = 0; m < pl->nstack[st]; m++) {
      int mat = pl->stacks[st][m];
      size_t e = (size_t)node_numel(graph_node(&p->g, mat));
      memcpy(dst, w->bases[pl->home[mat]], sizeof(float) * e);
      dst += e;
    }
  }
  for (int q = 0; q < p->nsparts; q++)
    memcpy(w->arr[pl->state_array[q]], s->h0[q], sizeof(float) * (size_t)s->B * (size_t)p->sparts[q].size);
  run_sequence(c, w, false);
  for (int q = 0; q < p->nsparts; q++) {
    size_t sz = (size_t)s->B * (size_t)p->sparts[q].size;
    memcpy(s->final[q], w->arr[pl->state_array[q]] + (size_t)s->T * sz, sizeof(float) * sz);
  }
}

static void cpu_backward(Compiled *cc, Work *ww, const SeqIO *s) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  Program *p = c->base.p;
  CHECK(w->T == s->T && w->B == s->B);
  w->xgrad_left = s->grad_x == NULL;
  CHECK(!w->xgrad_left || c->xg);
  Plan *pl = bind_call(c, w, s);
  for (int i = 0; i < pl->narrays; i++)
    if (pl->arrays[i].kind == ARR_ACC) memset(w->arr[i], 0, sizeof(float) * (size_t)pl->arrays[i].numel);
  for (int q = 0; q < p->nsparts; q++) {
    size_t sz = (size_t)s->B * (size_t)p->sparts[q].size;
    memcpy(w->arr[pl->dstate_array[q]] + (size_t)s->T * sz, s->dfinal[q], sizeof(float) * sz);
  }
  run_sequence(c, w, true);
  run_static(c, w, pl->static_bwd);
  Scratch sc = {xcalloc((size_t)p->g.nnodes, sizeof(float *))};
  for (int i = 0; i < p->npparts; i++) {
    size_t e = (size_t)p->pparts[i].numel;
    if (p->pparts[i].grad < 0) memset(s->grad_params[i], 0, sizeof(float) * e);
    else memcpy(s->grad_params[i], value_at(c, w->bases, &sc, p->pparts[i].grad, 0), sizeof(float) * e);
  }
  for (int i = 0; i < p->g.nnodes; i++) free(sc.val[i]);
  free(sc.val);
  if (!pl->scan)
    for (int q = 0; q < p->nsparts; q++)
      memcpy(s->grad_h0[q], w->arr[pl->dstate_array[q]], sizeof(float) * (size_t)s->B * (size_t)p->sparts[q].size);
  w->warm = true;
}

/* h_0 .. h_T of a state part: its state array, [(T + 1) B, size] (column offset 0). */
static int cpu_read_steps(Compiled *cc, Work *ww, StepArray what, int part, void *out) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  Program *p = c->base.p;
  if (what != STEPS_STATE) return -1;
  CHECK(part >= 0 && part < p->nsparts && w->arr);
  const PlanArray *a = &c->pl->arrays[c->pl->state_array[part]];
  size_t size = (size_t)p->sparts[part].size, rows = ((size_t)w->T + 1) * (size_t)w->B;
  const float *src = w->arr[c->pl->state_array[part]];
  for (size_t r = 0; r < rows; r++) memcpy((float *)out + r * size, src + r * (size_t)a->width, sizeof(float) * size);
  return 0;
}

/* ---- the interface ---- */

static const char *cpu_supports(const Program *p, const BackendOptions *o) {
  (void)p, (void)o; /* every program, in either mode; float32 always */
  return NULL;
}

/* Whether slot `slot` lies in the caller's grad_x. */
static bool in_grad_x(const Plan *pl, int slot) { return slot >= 0 && pl->arrays[pl->slots[slot].array].kind == ARR_GX; }

/* The step that writes grad_x where it is the only one and a product G M over all rows that
 * overwrites it (Backend.xgrad_cols), else NULL. */
static const PStep *xgrad_step(const Plan *pl) {
  const PStep *found = NULL;
  int writers = 0;
  for (int k = 0; k < NPHASES; k++) {
    const Phase *ph = phase_at(pl, k);
    for (int i = 0; i < ph->n; i++) {
      const PStep *st = &ph->steps[i];
      bool writes = false;
      if (st->kind == PS_GEMM || st->kind == PS_GEMM_T) writes = in_grad_x(pl, plan_gemm_operands(pl, st).y);
      else if (st->kind == PS_COPY || st->kind == PS_ZERO) writes = in_grad_x(pl, st->dst);
      else if (st->kind == PS_ELEM) {
        const Kernel *K = &pl->kernels[st->kernel];
        for (int j = 0; j < K->n; j++) writes = writes || in_grad_x(pl, pl->home[K->nodes[j]]);
      }
      if (!writes) continue;
      writers++;
      if (st->kind == PS_GEMM_T && !st->accumulate && ph->region == REG_ALL) found = st;
    }
  }
  return writers == 1 ? found : NULL;
}

static int cpu_xgrad_cols(Compiled *cc) {
  CpuCell *c = (CpuCell *)cc;
  return c->xg ? plan_gemm_operands(c->pl, c->xg).nO : 0;
}

static const float *cpu_xgrad_rows(Compiled *cc, Work *ww, int *ld) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  CHECK(c->xg && w->xgrad_left);
  int v = plan_gemm_operands(c->pl, c->xg).v;
  *ld = width_of(c, v);
  return w->bases[v];
}

static void cpu_xgrad_mul(Compiled *cc, Work *ww, const float *rows, int n, int ld, float *out, int ldo) {
  CpuCell *c = (CpuCell *)cc;
  CpuWork *w = (CpuWork *)ww;
  CHECK(c->xg && w->xgrad_left);
  int e = 0;
  while (e < w->npacks && w->pack_step[e] != c->xg) e++;
  CHECK(e < w->npacks);
  gemm_run(&w->packs[e], n, rows, ld, out, ldo, true);
}

static int threads_of(const BackendOptions *o) { return o->threads > 0 ? o->threads : support_threads(); }

static void cpu_free(Compiled *cc);

static Compiled *cpu_compile(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  CHECK(p->differentiated && (!o->scan || p->scan_form));
  openblas_set_num_threads(1); /* cellc owns the threads (support_threads) */
  CpuCell *c = xcalloc(1, sizeof(CpuCell));
  c->base.be = &cpu_backend, c->base.p = p, c->base.opt = *o;
  c->nthreads = threads_of(o);
  c->pl = plan_new(p, &(PlanOptions){.scan = o->scan, .gates = o->gates});
  outer_groups(c);
  c->xg = xgrad_step(c->pl);
  c->local = plan_step_local(c->pl);
  c->local_slots = xmalloc(sizeof(int) * (size_t)(c->pl->nslots + 1));
  for (int i = 0; i < c->pl->nslots; i++)
    if (c->local[c->pl->slots[i].array]) c->local_slots[c->nlocal++] = i;
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
  for (int i = 0; i < c->ngroups; i++) free(c->groups[i].steps), free(c->groups[i].sums);
  free(c->groups);
  free(c->local), free(c->local_slots);
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
  for (int i = 0; i < w->narr; i++)
    if (w->owned[i]) free(w->arr[i]);
  free(w->arr);
  free(w->owned);
  free(w->size);
  free(w->bases);
  free(w->tbases);
  for (int i = 0; i < w->npacks; i++) gemm_packed_free(&w->packs[i]);
  free(w->packs);
  free(w->pack_step);
  for (int i = 0; i < w->nscratch; i++) gemm_scratch_free(&w->scratch[i]);
  free(w->scratch);
  free(w);
}

const Backend cpu_backend = {.name = "cpu", .dtype = DT_F32, .scans = true, BACKEND_ENTRY_POINTS(cpu),
                           .emit = cpu_emit, .xgrad_cols = cpu_xgrad_cols, .xgrad_rows = cpu_xgrad_rows,
                           .xgrad_mul = cpu_xgrad_mul};
