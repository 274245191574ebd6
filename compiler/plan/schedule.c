/* schedule.c: a Program's execution plan (see plan.h). Phases by
 * dependence (on previous states, on the next step's gradient), levels by
 * GEMM and scan depth, one fused elementwise kernel per level, arrays only
 * for the values that cross kernels. plan_new is the list of passes. */
#include "plan.h"

#include <string.h>

enum { R_NONE = -1, R_FWD_PRE, R_FWD_STEP, R_FWD_POST, R_BWD_PRE, R_BWD_STEP, R_BWD_POST, R_BWD_FIRST, R_COUNT };

/* Several GEMMs done as one, against their matrices stacked (Plan.stacks). */
typedef struct StackInfo {
  int first;        /* the member whose step runs the one GEMM */
  int mat;          /* the stacked matrix's slot */
  int cols;         /* the stacked output's width */
} StackInfo;

typedef struct Sched {
  Plan *pl;
  Program *p;
  Graph *g;
  int nn;
  bool gates;       /* the gates are roots */
  bool *dyn;
  bool *vis;        /* per-row nodes the plan computes */
  bool *needs_acc;  /* static nodes that wait for the summed adjoints */
  int *region;
  int *level;
  int maxL[R_COUNT]; /* per region: its last level */
  int *scan_next;   /* node -> state part whose scanned new value it is (scan mode), or -1 */
  int *scan_dtot;   /* node -> state part whose reverse-scanned dtotal it is (scan mode), or -1 */
  bool *must_store; /* needs an array */
  int *sum_root;    /* a GEMM product (or partial sum) that adds into this sum node, else -1 */
  int *nusers;      /* per node: how many plan nodes read it */
  bool first_pass;  /* visiting the scan-mode dprev roots */
  int arr_x, arr_dy, arr_y, arr_gx; /* the caller's arrays */
  int *stacked_in;  /* per GEMM node: its stack, or -1 */
  StackInfo *stack; /* per stack */
  bool hybrid;      /* scan mode with sequential parts: histories (seq_part) */
  bool *view;       /* per node: a slice read in place from its leaf's array (PlanOptions.slice_views) */
  bool dot_sums;    /* PlanOptions.dot_sums */
  struct Shift *shift; /* per state part (PlanOptions.shift_histories), or NULL */
} Sched;

static Node *N(Sched *s, int id) { return graph_node(s->g, id); }

/* A state part that runs step by step in a scan-mode plan: a history of prev and conv (in scan
 * form, the one kind of state without coefficients). Its loop runs between the phases over all
 * rows: the values it reads are computed before, its reads (prev, conv) after it, and so on in
 * the backward, as in a sequential plan; everything else runs over all rows, the scans included. */
static bool seq_part(Sched *s, int q) { return s->pl->scan && s->p->sparts[q].a < 0; }

/* A history that never changes (PlanOptions.still): the chunked form's OUT holds a history that
 * only IN reads as new = prev. Shifting it step by step would copy B rows forward and its adjoint
 * back, every step, for nothing: its final state is h0 and its dL/dh0 is dL/dfinal, which the
 * executor hands over itself. */
static bool still_part(Sched *s, int q) { return s->pl->still[q]; }

/* A history in the shift layout (PlanOptions.shift_histories): a history of K steps of a value w
 * of n floats whose new value is (its previous one less the oldest step, then w). Its state array
 * holds w's rows once, [(T + K) B, n], h0's K steps first: step j of the history at step t (oldest
 * first) is row t + j (in units of B rows), its new value's last step row t + K. So the forward
 * runs no step: w is computed over all rows into its place and the history's reads are its rows
 * at offsets. Its dstate array is the same shape: the adjoint of step j at step t is row t + j, so
 * dprev's step j (dnew's step j - 1, plus the adjoints of the reads of step j) is summed in place,
 * one row of n a step instead of the K n of a new dprev row. */
typedef struct Shift {
  int K, n;         /* steps and their width; K 0: not in the shift layout */
  int w;            /* the new step's value */
  int *dprev;       /* [K]: dprev's step j (a constant 0 where nothing reaches it) */
} Shift;

static bool shift_part(Sched *s, int q) { return s->shift && s->shift[q].K > 0; }

/* The node whose value part q's new state is: a shifted history's new step alone */
static int next_root(Sched *s, int q) { return shift_part(s, q) ? s->shift[q].w : s->p->sparts[q].next; }

/* The dprev roots of part q into r (at most 1 or K): how many */
static int dprev_roots(Sched *s, int q, const int **r) {
  if (shift_part(s, q)) {
    *r = s->shift[q].dprev;
    return s->shift[q].K;
  }
  *r = &s->p->sparts[q].dprev;
  return 1;
}

static bool is_gemm(Sched *s, int id) {
  Node *n = N(s, id);
  return (n->op == OP_MATVEC || n->op == OP_MATVEC_T) && s->dyn[id];
}

/* The end of state `state`'s parts: they are p->sparts[p->spart_of[state] .. end). */
static int parts_end(const Program *p, int state) {
  int q = p->spart_of[state];
  while (q < p->nsparts && p->sparts[q].state == state) q++;
  return q;
}

static int max_int(int a, int b) { return a > b ? a : b; }

static int *int_array(int n, int value) {
  int *v = xmalloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) v[i] = value;
  return v;
}

static int add_array(Plan *pl, ArrayKind kind, int width, int numel, int index) {
  PlanArray a = {kind, width, numel, index, 1};
  VEC_PUSH(pl->arrays, pl->narrays, pl->caparrays, a);
  return pl->narrays - 1;
}

static int add_slot(Plan *pl, int array, int row_off, int col) {
  Slot s = {array, row_off, col};
  VEC_PUSH(pl->slots, pl->nslots, pl->capslots, s);
  return pl->nslots - 1;
}

/* The row stride of an array of our own per-row values `cols` wide: one cache line more where
 * its rows would lie a multiple of 4 KB apart. There a GEMM's micro-tile writes 8 rows that fall
 * on one L1 set, and its stores alias the next loads 4 KB away: the LSTM's hoisted product at
 * H = 256 (1024 gate columns) ran at 76% of the FMA peak instead of 93%
 * (docs/performance.md). */
static int rows_stride(int cols) { return cols > 0 && cols % 1024 == 0 ? cols + 16 : cols; }

/* A slot at the start of a new array. */
static int add_array_slot(Plan *pl, ArrayKind kind, int width, int numel, int index) {
  return add_slot(pl, add_array(pl, kind, width, numel, index), 0, 0);
}

static Phase *phase_of(Plan *pl, int region) {
  Phase *phases[R_COUNT] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  return phases[region];
}

/* A step of that kind on node; every other field unset (-1, no accumulation). */
static PStep new_step(PStepKind kind, int node) {
  return (PStep){.kind = kind, .kernel = -1, .node = node, .out = -1, .mat = -1, .state = -1, .bound = -1, .dst = -1};
}

static void push_step(Phase *ph, PStep st) { VEC_PUSH(ph->steps, ph->n, ph->cap, st); }

/* Node id (zeros when id < 0) into slot dst: computed straight there when `direct` and it has no
 * home yet, else copied there by a step of ph. */
static void deliver(Sched *s, int id, int dst, Phase *ph, bool direct) {
  PStep st = new_step(id < 0 ? PS_ZERO : PS_COPY, id);
  st.dst = dst;
  if (id >= 0 && direct && s->pl->home[id] < 0) s->pl->home[id] = dst;
  else push_step(ph, st);
}

/* ... where a per-row value is computed straight into the slot when it can be. */
static void deliver_row(Sched *s, int id, int dst, Phase *ph) { deliver(s, id, dst, ph, id >= 0 && s->dyn[id]); }

/* The terms of a boundary's per-row adjoint, in the order the steps take them: a matrix adjoint is
 * a sum (ADDs of rank 2) of outer products, each one a GEMM over all rows; any other is one term.
 * xmalloc'ed, *n of them. */
static int *adjoint_terms(Sched *s, int adj, int *n) {
  int *stack = NULL, top = 0, cap = 0, *terms = NULL, nterms = 0, capterms = 0;
  VEC_PUSH(stack, top, cap, adj);
  while (top) {
    int id = stack[--top];
    Node *nd = N(s, id);
    if (nd->op == OP_ADD && nd->rank == 2) {
      VEC_PUSH(stack, top, cap, nd->a[0]);
      VEC_PUSH(stack, top, cap, nd->a[1]);
    } else
      VEC_PUSH(terms, nterms, capterms, id);
  }
  free(stack);
  *n = nterms;
  return terms;
}

/* ---- which nodes, in which phase ---- */

static void visit_static(Sched *s, int id) {
  if (id < 0 || s->vis[id]) return;
  s->vis[id] = true;
  Node *n = N(s, id);
  if (s->needs_acc[id]) s->pl->static_bwd[id] = true;
  else s->pl->static_fwd[id] = true;
  for (int i = 0; i < op_arity(n->op); i++) visit_static(s, n->a[i]);
}

static void visit(Sched *s, int id) {
  if (id < 0 || s->vis[id]) return;
  Program *p = s->p;
  if (!s->dyn[id]) {
    visit_static(s, id);
    return;
  }
  s->vis[id] = true;
  if (s->first_pass) s->region[id] = R_BWD_FIRST;
  Node *n = N(s, id);
  if (s->scan_next[id] >= 0) { /* a scan's output: its coefficients */
    int state = p->sparts[s->scan_next[id]].state;
    for (int q = p->spart_of[state]; q < parts_end(p, state); q++) visit(s, p->sparts[q].a), visit(s, p->sparts[q].b);
  } else if (s->scan_dtot[id] >= 0) { /* a reverse scan's output: g and the coefficients a */
    int state = p->sparts[s->scan_dtot[id]].state;
    for (int q = p->spart_of[state]; q < parts_end(p, state); q++) visit(s, p->sparts[q].g), visit(s, p->sparts[q].a);
  } else if (n->op == OP_PREV) {
    if (s->pl->scan && !seq_part(s, n->idx)) visit(s, p->sparts[n->idx].next);
  } else
    for (int i = 0; i < op_arity(n->op); i++) visit(s, n->a[i]);
}

/* ---- levels: GEMMs and scans start a new level ---- */

static bool is_gemm_sum(Sched *s, int id);

static int level(Sched *s, int id) {
  if (s->level[id] >= 0) return s->level[id];
  Program *p = s->p;
  Node *n = N(s, id);
  int R = s->region[id], L = 0;
  s->level[id] = 0; /* (no cycles: args come first) */
#define IN_REGION(a) ((a) >= 0 && s->dyn[a] && s->region[a] == R && !op_is_leaf(N(s, a)->op))
  if (is_gemm(s, id)) {
    int v = n->a[1];
    L = IN_REGION(v) ? level(s, v) + 1 : 0;
  } else if (is_gemm_sum(s, id)) {
    L = max_int(level(s, n->a[0]), level(s, n->a[1]));
  } else if (s->scan_next[id] >= 0) {
    int state = p->sparts[s->scan_next[id]].state;
    for (int q = p->spart_of[state]; q < parts_end(p, state); q++) {
      if (IN_REGION(p->sparts[q].a)) L = max_int(L, level(s, p->sparts[q].a) + 1);
      if (IN_REGION(p->sparts[q].b)) L = max_int(L, level(s, p->sparts[q].b) + 1);
    }
    if (L == 0) L = 1;
  } else if (s->scan_dtot[id] >= 0) {
    int state = p->sparts[s->scan_dtot[id]].state;
    for (int q = p->spart_of[state]; q < parts_end(p, state); q++)
      if (IN_REGION(p->sparts[q].g)) L = max_int(L, level(s, p->sparts[q].g) + 1);
    if (L == 0) L = 1;
  } else if (n->op == OP_PREV && s->pl->scan && !seq_part(s, n->idx)) {
    L = level(s, p->sparts[n->idx].next);
  } else {
    for (int i = 0; i < op_arity(n->op); i++) {
      int a = n->a[i];
      if (a >= 0 && s->dyn[a] && s->region[a] == R) L = max_int(L, level(s, a));
    }
  }
#undef IN_REGION
  s->level[id] = L;
  return L;
}

/* A sum of GEMM products: ADD nodes whose arguments are products (or such
 * sums) read only here; the GEMMs accumulate straight into the sum. */
static bool is_gemm_sum(Sched *s, int id) {
  Node *n = N(s, id);
  if (n->op != OP_ADD || !s->dyn[id] || !s->vis[id]) return false;
  for (int i = 0; i < 2; i++) {
    int a = n->a[i];
    if (!(is_gemm(s, a) || is_gemm_sum(s, a)) || s->nusers[a] != 1 || s->region[a] != s->region[id]) return false;
  }
  return n->a[0] != n->a[1];
}

/* computed by a fused elementwise kernel */
static bool is_elem(Sched *s, int id) {
  Node *n = N(s, id);
  return s->vis[id] && s->dyn[id] && !op_is_leaf(n->op) && !s->view[id] && !is_gemm(s, id) && s->scan_next[id] < 0 &&
         s->scan_dtot[id] < 0 && n->op != OP_OUTER && !is_gemm_sum(s, id);
}

/* ---- the passes of plan_new, in order ---- */

/* Allocates the plan and the scheduler's per-node tables; every phase gets its region. */
static void sched_init(Sched *s, Program *p, bool scan, bool gates) {
  static const Region regions[R_COUNT] = {REG_ALL, REG_STEP, REG_ALL, REG_ALL, REG_STEP, REG_ALL, REG_FIRST};
  Plan *pl = xcalloc(1, sizeof(Plan));
  int nn = p->g.nnodes;
  pl->p = p, pl->scan = scan;
  *s = (Sched){.pl = pl, .p = p, .g = &p->g, .nn = nn, .gates = gates, .dyn = p->dyn};
  s->vis = xcalloc((size_t)nn, sizeof(bool));
  s->needs_acc = p->needs_acc; /* computed once with the program (lower) */
  s->must_store = xcalloc((size_t)nn, sizeof(bool));
  s->region = int_array(nn, R_NONE), s->level = int_array(nn, -1);
  s->scan_next = int_array(nn, -1), s->scan_dtot = int_array(nn, -1);
  s->sum_root = int_array(nn, -1), s->nusers = int_array(nn, 0), s->stacked_in = int_array(nn, -1);
  s->view = xcalloc((size_t)nn, sizeof(bool));
  pl->home = int_array(nn, -1), pl->kernel_of = int_array(nn, -1);
  pl->static_fwd = xcalloc((size_t)nn, sizeof(bool));
  pl->static_bwd = xcalloc((size_t)nn, sizeof(bool));
  pl->still = xcalloc((size_t)p->nsparts + 1, sizeof(bool));
  for (int r = 0; r < R_COUNT; r++) phase_of(pl, r)->region = regions[r];
}

/* Scan mode: which nodes the scans produce (not a state whose coefficient a is 0). */
static void mark_scanned(Sched *s) {
  Program *p = s->p;
  for (int st = 0; st < p->nstates; st++) {
    int first = p->spart_of[st], end = parts_end(p, st);
    bool scanned = false;
    if (first == end) continue; /* no parts: a state the chunked form's chunk op runs */
    if (seq_part(s, first)) {
      s->hybrid = true;
      continue;
    }
    for (int q = first; q < end; q++) {
      Node *a = N(s, p->sparts[q].a);
      if (!(a->op == OP_CONST && a->k == 0)) scanned = true;
    }
    for (int q = first; q < end && scanned; q++) {
      s->scan_next[p->sparts[q].next] = q;
      s->scan_dtot[p->sparts[q].dtotal] = q;
    }
  }
}

/* PlanOptions.dot_sums: an adjoint's term that is the product of two per-row values of its size,
 * summed over the rows from its factors (PStep.dot; where nothing else computes the product): a
 * kernel storing a * b for the sum to read back writes a row of floats per term for nothing.
 * Mamba-2's conv weights: 12 of 64 floats a row (their taps times the convs' adjoints). */
static bool dot_term(Sched *s, int id) {
  Node *n = N(s, id);
  if (!s->dot_sums || n->op != OP_MUL || !s->dyn[n->a[0]] || !s->dyn[n->a[1]]) return false;
  return node_numel(N(s, n->a[0])) == node_numel(n) && node_numel(N(s, n->a[1])) == node_numel(n);
}

/* A boundary's per-row adjoint: every term computed and stored (an outer product: both factors;
 * a dot_term: both factors). */
static void visit_adjoint(Sched *s, int b) {
  int nterms, *terms = adjoint_terms(s, s->p->bounds[b].adj, &nterms);
  for (int i = 0; i < nterms; i++) {
    Node *n = N(s, terms[i]);
    if (dot_term(s, terms[i])) /* (stored at the end of visit_roots) */
      visit(s, n->a[0]), visit(s, n->a[1]);
    else if (n->op == OP_OUTER) {
      visit(s, n->a[0]), visit(s, n->a[1]);
      s->must_store[n->a[0]] = s->must_store[n->a[1]] = true;
    } else { /* summed over rows as a flat row of its elements, whatever its shape */
      visit(s, terms[i]);
      s->must_store[terms[i]] = true;
    }
  }
  free(terms);
}

/* Which nodes the plan computes: from the roots, forward then backward; in scan mode the dprev
 * roots last, in the region of the first B rows. */
static void visit_roots(Sched *s) {
  Program *p = s->p;
  visit(s, p->output);
  for (int q = 0; q < p->nsparts; q++) visit(s, next_root(s, q));
  if (s->gates)
    for (int i = 0; i < p->ngates; i++) visit(s, p->gates[i].node);
  visit(s, p->dx);
  for (int b = 0; b < p->nbounds; b++) visit_adjoint(s, b);
  for (int i = 0; i < p->npparts; i++)
    if (p->pparts[i].grad >= 0) visit_static(s, p->pparts[i].grad);
  if (s->pl->scan) {
    for (int q = 0; q < p->nsparts; q++) visit(s, p->sparts[q].g);
    for (int q = 0; q < p->nsparts; q++) {
      const int *r;
      for (int i = 0, nr = dprev_roots(s, q, &r); seq_part(s, q) && i < nr; i++) visit(s, r[i]);
    }
    s->first_pass = true;
  }
  for (int q = 0; q < p->nsparts; q++)
    if (!shift_part(s, q)) visit(s, p->sparts[q].dprev); /* (a shifted history's steps: above) */
  s->first_pass = false;
  for (int b = 0; s->dot_sums && b < p->nbounds; b++) { /* a product something else computes: stored, summed as it is */
    int nterms, *terms = adjoint_terms(s, p->bounds[b].adj, &nterms);
    for (int i = 0; i < nterms; i++) {
      Node *n = N(s, terms[i]);
      if (!dot_term(s, terms[i])) continue;
      if (s->vis[terms[i]]) s->must_store[terms[i]] = true;
      else s->must_store[n->a[0]] = s->must_store[n->a[1]] = true;
    }
    free(terms);
  }
}

/* PlanOptions.slice_views: the slices of the leaves that live in arrays of their own rows (x, dy,
 * the state arrays' previous values and dnews) are read where the leaf lies (place_leaves gives
 * each a slot at its offset): a kernel copying them would write, per row, what is there already.
 * Mamba-2's conv reads each step of its width-4 history, three slices of 64 per conv, which the
 * backward reads again: 9 x 64 floats a row that no kernel writes now. */
static void mark_views(Sched *s) {
  for (int id = 0; id < s->nn; id++) {
    Node *n = N(s, id);
    if (!s->vis[id] || !s->dyn[id] || n->op != OP_SLICE) continue;
    Op a = N(s, n->a[0])->op;
    s->view[id] = a == OP_INPUT || a == OP_DY || a == OP_PREV || a == OP_DNEW;
  }
}

/* Per node: whether it reads a PREV (depP) or a DNEW (depD) leaf, directly or not. */
static void mark_reads_leaf(Sched *s, bool *depP, bool *depD) {
  for (int id = 0; id < s->nn; id++) {
    Node *n = N(s, id);
    /* a hybrid plan's loops run the sequential parts only */
    depP[id] = n->op == OP_PREV && (!s->hybrid || seq_part(s, n->idx));
    depD[id] = n->op == OP_DNEW && (!s->hybrid || seq_part(s, n->idx));
    for (int i = 0; i < op_arity(n->op); i++) depP[id] |= depP[n->a[i]], depD[id] |= depD[n->a[i]];
  }
}

/* Per node: whether a new state value (ancN) or a dprev (ancD) reads it, directly or not. */
static void mark_feeds_state(Sched *s, bool *ancN, bool *ancD) {
  Program *p = s->p;
  for (int q = 0; q < p->nsparts; q++) {
    if (s->hybrid && !seq_part(s, q)) continue;
    if (next_root(s, q) >= 0) ancN[next_root(s, q)] = true;
    const int *r;
    for (int i = 0, nr = dprev_roots(s, q, &r); i < nr; i++)
      if (r[i] >= 0) ancD[r[i]] = true;
  }
  for (int id = s->nn - 1; id >= 0; id--) {
    Node *n = N(s, id);
    for (int i = 0; i < op_arity(n->op); i++) {
      if (ancN[id]) ancN[n->a[i]] = true;
      if (ancD[id]) ancD[n->a[i]] = true;
    }
  }
}

/* Regions: scan mode runs everything over all rows; sequential mode runs per step what reads the
 * previous state (the next step's gradient) and feeds the new state (dprev), after the loop what
 * only reads it, before the loop the rest. Leaves computed nowhere: the earliest region. */
static void assign_regions(Sched *s) {
  int nn = s->nn;
  bool *depP = xcalloc((size_t)nn, sizeof(bool)), *depD = xcalloc((size_t)nn, sizeof(bool));
  bool *ancN = xcalloc((size_t)nn, sizeof(bool)), *ancD = xcalloc((size_t)nn, sizeof(bool));
  mark_reads_leaf(s, depP, depD);
  mark_feeds_state(s, ancN, ancD);
  for (int id = 0; id < nn; id++) {
    if (!s->vis[id] || !s->dyn[id] || s->region[id] == R_BWD_FIRST) continue;
    bool fwd = id < s->p->nforward;
    if (s->pl->scan && !s->hybrid) s->region[id] = fwd ? R_FWD_PRE : R_BWD_PRE;
    else if (fwd) s->region[id] = !depP[id] ? R_FWD_PRE : ancN[id] ? R_FWD_STEP : R_FWD_POST;
    else s->region[id] = !depD[id] ? R_BWD_PRE : ancD[id] ? R_BWD_STEP : R_BWD_POST;
  }
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && op_is_leaf(N(s, id)->op) && s->region[id] != R_BWD_FIRST) s->region[id] = R_FWD_PRE;
  /* a scanned state's previous value is ready after its scan: in a hybrid plan the scan may run
     after the sequential loop, and its readers wait for it there */
  for (int q = 0; s->hybrid && q < s->p->nsparts; q++) {
    StatePart *sp = &s->p->sparts[q];
    if (!seq_part(s, q) && s->vis[sp->prev] && s->region[sp->next] == R_FWD_POST) s->region[sp->prev] = R_FWD_POST;
  }
  free(depP), free(depD), free(ancN), free(ancD);
}

/* The nodes marked in move (xmalloc'ed; freed) go from before their loop into its step. */
static void move_into_steps(Sched *s, bool *move) {
  for (int id = 0; id < s->nn; id++)
    if (move[id]) s->region[id] = s->region[id] == R_FWD_PRE ? R_FWD_STEP : R_BWD_STEP;
  free(move);
}

/* Sequential mode: an elementwise node before the loop (forward or backward) that nothing before
 * the loop reads moves into the loop's step, where it joins the kernel of its first reader. Each
 * row is still computed once, but the values it reads (stored anyway for that kernel) are read
 * there, instead of a pass over all rows that writes an array the step reads back: an LSTM's
 * backward reads 15 fewer floats per hidden unit and row. Moved: the greatest set where every
 * reader in the region is moved and every elementwise argument in the region is moved. */
static void sink_into_steps(Sched *s) {
  if (s->pl->scan) return;
  int nn = s->nn;
  bool *move = xcalloc((size_t)nn, sizeof(bool));
  for (int id = 0; id < nn; id++)
    move[id] = s->vis[id] && (s->region[id] == R_FWD_PRE || s->region[id] == R_BWD_PRE) && is_elem(s, id);
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = 0; id < nn; id++) {
      if (!s->vis[id] || !s->dyn[id]) continue;
      Node *n = N(s, id);
      for (int i = 0; i < op_arity(n->op); i++) {
        int a = n->a[i];
        if (a < 0 || s->region[a] != s->region[id]) continue;
        if (move[a] && !move[id]) move[a] = false, changed = true;                 /* read before the loop */
        else if (move[id] && is_elem(s, a) && !move[a]) move[id] = false, changed = true; /* reads a value that stays */
      }
    }
  }
  move_into_steps(s, move);
}

/* A hybrid plan (PlanOptions.sink_hybrid): an elementwise node before its histories' loop that only
 * the loop reads (and nodes moved so) moves into the loop's step, as sink_into_steps, where it
 * reads what is stored anyway (the adjoints' terms). Not moved: what a step over all rows reads
 * without an argument's edge (a scan's coefficients, the terms summed after the loop, the
 * outputs). Mamba-2's backward summed each conv's adjoints into a 192-float row per history,
 * which the loop read back; the loop now computes them from the conv's 64-float adjoint. */
static void sink_into_hybrid_steps(Sched *s) {
  if (!s->hybrid) return;
  Program *p = s->p;
  int nn = s->nn;
  bool *move = xcalloc((size_t)nn, sizeof(bool));
  for (int id = 0; id < nn; id++)
    move[id] = s->vis[id] && (s->region[id] == R_FWD_PRE || s->region[id] == R_BWD_PRE) && is_elem(s, id) && !s->must_store[id];
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    int roles[] = {sp->next, sp->dprev, sp->a, sp->b, sp->g, sp->dtotal, next_root(s, q)};
    for (int i = 0; i < 7; i++)
      if (roles[i] >= 0) move[roles[i]] = false;
    const int *r;
    for (int i = 0, nr = dprev_roots(s, q, &r); i < nr; i++)
      if (r[i] >= 0) move[r[i]] = false;
  }
  move[p->output] = false;
  if (p->dx >= 0) move[p->dx] = false;
  for (int i = 0; i < p->ngates; i++) move[p->gates[i].node] = false;
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = 0; id < nn; id++) {
      if (!s->vis[id] || !s->dyn[id]) continue;
      Node *n = N(s, id);
      for (int i = 0; i < op_arity(n->op); i++) {
        int a = n->a[i];
        if (a < 0 || !move[a] || move[id]) continue;
        int step = s->region[a] == R_FWD_PRE ? R_FWD_STEP : R_BWD_STEP;
        if (s->region[id] != step) move[a] = false, changed = true; /* read elsewhere */
      }
      for (int i = 0; move[id] && i < op_arity(n->op); i++) {
        int a = n->a[i];
        if (a >= 0 && s->region[a] == s->region[id] && is_elem(s, a) && !move[a] && !s->must_store[a])
          move[id] = false, changed = true; /* reads a value that stays, stored only for it */
      }
    }
  }
  move_into_steps(s, move);
}

/* Readers of each value; the interface roles (outputs, state parts, stored values) count as readers. */
static void count_users(Sched *s) {
  Program *p = s->p;
  for (int id = 0; id < s->nn; id++) {
    if (!s->vis[id]) continue;
    Node *n = N(s, id);
    for (int i = 0; i < op_arity(n->op); i++) s->nusers[n->a[i]]++;
  }
  s->nusers[p->output]++;
  if (p->dx >= 0) s->nusers[p->dx]++;
  for (int i = 0; i < p->ngates; i++) s->nusers[p->gates[i].node]++;
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    int roles[] = {next_root(s, q), sp->g, sp->a, sp->b};
    for (int i = 0; i < 4; i++)
      if (roles[i] >= 0) s->nusers[roles[i]]++;
    const int *r;
    for (int i = 0, nr = dprev_roots(s, q, &r); i < nr; i++)
      if (r[i] >= 0) s->nusers[r[i]]++;
  }
  for (int id = 0; id < s->nn; id++)
    if (s->must_store[id]) s->nusers[id]++;
}

/* Sums of GEMM products: every product (and partial sum) writes into the outermost sum. */
static void find_gemm_sums(Sched *s) {
  for (int id = 0; id < s->nn; id++)
    if (is_gemm_sum(s, id)) s->sum_root[N(s, id)->a[0]] = s->sum_root[N(s, id)->a[1]] = id;
  for (int id = 0; id < s->nn; id++) {
    int r = s->sum_root[id];
    while (r >= 0 && s->sum_root[r] >= 0) r = s->sum_root[r];
    s->sum_root[id] = r;
  }
}

/* The nodes of id's region that id waits for, and the latest level (*cap) each may take: one
 * before id's for what a GEMM or a scan reads, id's own for what a kernel reads. How many. */
static int region_deps(Sched *s, int id, int deps[8], int *cap) {
  Program *p = s->p;
  Node *n = N(s, id);
  int nd = 0, L = s->level[id];
  if (is_gemm(s, id)) deps[nd++] = n->a[1], *cap = L - 1;
  else if (s->scan_next[id] >= 0 || s->scan_dtot[id] >= 0) {
    int q0 = s->scan_next[id] >= 0 ? s->scan_next[id] : s->scan_dtot[id], st = p->sparts[q0].state;
    for (int q = p->spart_of[st]; q < parts_end(p, st) && nd < 6; q++) {
      if (s->scan_next[id] >= 0) deps[nd++] = p->sparts[q].a, deps[nd++] = p->sparts[q].b;
      else deps[nd++] = p->sparts[q].g;
    }
    *cap = L - 1;
  } else if (n->op == OP_PREV) *cap = L;
  else {
    for (int i = 0; i < op_arity(n->op); i++) deps[nd++] = n->a[i];
    *cap = L;
  }
  int kept = 0;
  for (int i = 0; i < nd; i++) {
    int d = deps[i];
    if (d >= 0 && s->dyn[d] && s->region[d] == s->region[id] && !op_is_leaf(N(s, d)->op)) deps[kept++] = d;
  }
  return kept;
}

/* Levels: as early as the arguments allow, then as late as possible for an elementwise node (it
 * joins the kernel of its first reader); each region's last level. */
static void assign_levels(Sched *s) {
  int nn = s->nn, *cap = int_array(nn, 1 << 30);
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && s->region[id] >= 0) level(s, id);
  for (int id = nn - 1; id >= 0; id--) {
    if (!s->vis[id] || !s->dyn[id] || s->region[id] < 0) continue;
    if (is_elem(s, id) && cap[id] != 1 << 30 && cap[id] > s->level[id]) s->level[id] = cap[id];
    int deps[8], c, nd = region_deps(s, id, deps, &c);
    for (int i = 0; i < nd; i++) cap[deps[i]] = c < cap[deps[i]] ? c : cap[deps[i]];
  }
  free(cap);
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && s->region[id] >= 0) s->maxL[s->region[id]] = max_int(s->maxL[s->region[id]], s->level[id]);
}

/* Which values must live in arrays: those used outside their kernel, GEMM and scan operands and results. */
static void mark_stored(Sched *s) {
  Program *p = s->p;
  for (int id = 0; id < s->nn; id++) {
    if (!s->vis[id] || !s->dyn[id]) continue;
    Node *n = N(s, id);
    if ((is_gemm(s, id) && s->sum_root[id] < 0) || is_gemm_sum(s, id) || s->scan_next[id] >= 0 || s->scan_dtot[id] >= 0)
      s->must_store[id] = true;
    if (is_gemm(s, id)) s->must_store[n->a[1]] = true;
    if (!is_elem(s, id)) continue;
    for (int i = 0; i < op_arity(n->op); i++) {
      int a = n->a[i];
      if (!s->dyn[a]) continue;
      if (!is_elem(s, a) || s->region[a] != s->region[id] || level(s, a) != level(s, id)) s->must_store[a] = true;
    }
  }
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    if (s->scan_next[sp->next] >= 0) {
      s->must_store[sp->a] = s->dyn[sp->a];
      s->must_store[sp->b] = s->dyn[sp->b];
      if (sp->g >= 0) s->must_store[sp->g] = s->dyn[sp->g];
    }
    /* scan mode: a dprev computed over all rows (hash-consing made it a value the rest of the
     * backward reads too) keeps an array of its own; the first rows' phase copies grad_h0 from it */
    if (s->pl->scan && !seq_part(s, q) && sp->dprev >= 0 && s->dyn[sp->dprev] && s->region[sp->dprev] != R_BWD_FIRST)
      s->must_store[sp->dprev] = true;
  }
}

/* Arrays for the states and their gradients, then the caller's x, dy, y and grad_x. */
static void add_fixed_arrays(Sched *s) {
  Plan *pl = s->pl;
  Program *p = s->p;
  pl->state_array = xmalloc(sizeof(int) * (size_t)(p->nsparts + 1));
  pl->dstate_array = xmalloc(sizeof(int) * (size_t)(p->nsparts + 1));
  pl->shift = xcalloc((size_t)p->nsparts + 1, sizeof(int));
  for (int q = 0; q < p->nsparts; q++) {
    bool shifted = shift_part(s, q);
    int width = shifted ? s->shift[q].n : p->sparts[q].size;
    pl->state_array[q] = add_array(pl, ARR_STATE, width, 0, q);
    pl->dstate_array[q] = add_array(pl, pl->scan && !seq_part(s, q) ? ARR_DTOTAL : ARR_DSTATE, width, 0, q);
    if (shifted) {
      pl->shift[q] = s->shift[q].n;
      pl->arrays[pl->state_array[q]].blocks = pl->arrays[pl->dstate_array[q]].blocks = s->shift[q].K;
    }
  }
  s->arr_x = add_array(pl, ARR_X, p->x_size, 0, 0), s->arr_dy = add_array(pl, ARR_DY, p->output_size, 0, 0);
  s->arr_y = add_array(pl, ARR_Y, p->output_size, 0, 0), s->arr_gx = add_array(pl, ARR_GX, p->x_size, 0, 0);
}

/* Homes of the leaves and of the static nodes (constants have none). */
static void place_leaves(Sched *s) {
  Plan *pl = s->pl;
  for (int id = 0; id < s->nn; id++) {
    Node *n = N(s, id);
    if (!s->vis[id]) continue;
    if (!s->dyn[id]) {
      if (n->op == OP_CONST) continue;
      ArrayKind kind = n->op == OP_PARAM ? ARR_PARAM : n->op == OP_ACC ? ARR_ACC : ARR_STATIC;
      pl->home[id] = add_array_slot(pl, kind, 0, node_numel(n), kind == ARR_STATIC ? id : n->idx);
      continue;
    }
    switch (n->op) {
    case OP_INPUT: pl->home[id] = add_slot(pl, s->arr_x, 0, 0); break;
    case OP_DY: pl->home[id] = add_slot(pl, s->arr_dy, 0, 0); break;
    case OP_NOISE: pl->home[id] = add_array_slot(pl, ARR_NOISE, node_numel(n), 0, n->idx); break;
    case OP_PREV: pl->home[id] = add_slot(pl, pl->state_array[n->idx], 0, 0); break;
    case OP_DNEW: pl->home[id] = add_slot(pl, pl->dstate_array[n->idx], 1, 0); break;
    default: break;
    }
  }
  for (int id = 0; id < s->nn; id++) {
    if (!s->view[id]) continue;
    Node *n = N(s, id), *leaf = N(s, n->a[0]);
    Slot at = pl->slots[pl->home[n->a[0]]];
    int width = 0, step = 0; /* a shifted history's step j: j blocks of B rows on (no view spans two: reject_shifts) */
    if ((leaf->op == OP_PREV || leaf->op == OP_DNEW) && shift_part(s, leaf->idx)) width = s->shift[leaf->idx].n, step = n->idx / width;
    pl->home[id] = add_slot(pl, at.array, at.row_off + step, at.col + n->idx - step * width);
  }
}

/* New state values into the state arrays (scans write there themselves), then each dprev into
 * the caller's grad_h0 (scan mode) or the dstate array (sequential), zeros where there is none.
 * grad_h0 holds B rows: a dprev is computed straight there only where it is computed for the
 * first rows alone (R_BWD_FIRST), else copied there from its own array; 0.5 * dtotal is also
 * sqrt's derivative in h = 0.5 * h + sqrt(u), read on every row. */
static void place_states(Sched *s) {
  Plan *pl = s->pl;
  Program *p = s->p;
  for (int q = 0; q < p->nsparts; q++) {
    if (still_part(s, q)) continue;
    if (shift_part(s, q)) { /* its new step, computed over all rows into its rows */
      deliver_row(s, s->shift[q].w, add_slot(pl, pl->state_array[q], s->shift[q].K, 0), &pl->fwd_pre);
      continue;
    }
    int id = p->sparts[q].next, dst = add_slot(pl, pl->state_array[q], 1, 0);
    Phase *ph = !pl->scan || seq_part(s, q) ? &pl->fwd_step : s->hybrid ? &pl->fwd_post : &pl->fwd_pre;
    if (s->scan_next[id] < 0) deliver_row(s, id, dst, ph);
    else if (pl->home[id] < 0) pl->home[id] = dst;
  }
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    if (still_part(s, q)) continue;
    if (shift_part(s, q)) { /* each step into its rows (where it is not dnew's there already), then to dL/dh0 */
      const Shift *h = &s->shift[q];
      int gh0 = add_array(pl, ARR_GH0, sp->size, 0, q);
      for (int j = 0; j < h->K; j++) {
        int d = h->dprev[j], home = pl->home[d];
        Slot at = {pl->dstate_array[q], j, 0};
        if (home < 0 || memcmp(&pl->slots[home], &at, sizeof at)) deliver_row(s, d, add_slot(pl, at.array, at.row_off, at.col), &pl->bwd_step);
        deliver(s, d, add_slot(pl, gh0, 0, j * h->n), &pl->bwd_first, false);
      }
      continue;
    }
    if (seq_part(s, q)) { /* as sequential, then its rows 0 to dL/dh0 */
      deliver_row(s, sp->dprev, add_slot(pl, pl->dstate_array[q], 0, 0), &pl->bwd_step);
      deliver(s, sp->dprev, add_array_slot(pl, ARR_GH0, sp->size, 0, q), &pl->bwd_first, false);
    } else if (pl->scan) {
      if (s->scan_dtot[sp->dtotal] >= 0) pl->home[sp->dtotal] = add_slot(pl, pl->dstate_array[q], 0, 0);
      int dst = add_array_slot(pl, ARR_GH0, sp->size, 0, q);
      bool first_rows_only = sp->dprev >= 0 && s->region[sp->dprev] == R_BWD_FIRST;
      deliver(s, sp->dprev, dst, &pl->bwd_first, first_rows_only && is_elem(s, sp->dprev));
    } else
      deliver_row(s, sp->dprev, add_slot(pl, pl->dstate_array[q], 0, 0), &pl->bwd_step);
  }
}

/* y, the gates and dx: computed into the caller's arrays where possible. */
static void place_outputs(Sched *s) {
  Plan *pl = s->pl;
  Program *p = s->p;
  Phase *fcopy = pl->scan && !s->hybrid ? &pl->fwd_pre : &pl->fwd_post;
  deliver_row(s, p->output, add_slot(pl, s->arr_y, 0, 0), fcopy);
  if (s->gates)
    for (int i = 0; i < p->ngates; i++) {
      int id = p->gates[i].node;
      deliver_row(s, id, add_array_slot(pl, ARR_GATE, node_numel(N(s, id)), 0, i), fcopy);
    }
  deliver_row(s, p->dx, add_slot(pl, s->arr_gx, 0, 0), pl->scan && !s->hybrid ? &pl->bwd_pre : &pl->bwd_post);
}

/* A new stack of the matrices of the GEMMs members[0..n): its stacked matrix (cols x in) gets a
 * slot, members[0]'s step runs the one GEMM. */
static int new_stack(Sched *s, const int *members, int n, int cols, int in) {
  Plan *pl = s->pl;
  int st = pl->nstacks++;
  pl->stacks = xrealloc(pl->stacks, sizeof(int *) * (size_t)pl->nstacks);
  pl->nstack = xrealloc(pl->nstack, sizeof(int) * (size_t)pl->nstacks);
  s->stack = xrealloc(s->stack, sizeof(StackInfo) * (size_t)pl->nstacks);
  pl->stacks[st] = xmalloc(sizeof(int) * (size_t)n);
  pl->nstack[st] = n;
  s->stack[st].mat = add_array_slot(pl, ARR_STACK, 0, cols * in, st);
  s->stack[st].cols = cols;
  s->stack[st].first = members[0];
  for (int m = 0; m < n; m++) {
    pl->stacks[st][m] = N(s, members[m])->a[0];
    s->stacked_in[members[m]] = st;
  }
  return st;
}

/* A product M @ v that may join a stack: a GEMM not in a sum, a stack or a home yet. */
static bool stackable(Sched *s, int id) {
  return s->vis[id] && is_gemm(s, id) && N(s, id)->op == OP_MATVEC && s->sum_root[id] < 0 && s->stacked_in[id] < 0 &&
         s->pl->home[id] < 0;
}

/* Products of one vector by several matrices at one level: one GEMM with the matrices stacked,
 * its output one array with the products side by side. */
static void stack_products(Sched *s) {
  Plan *pl = s->pl;
  for (int id = 0; id < s->nn; id++) {
    if (!stackable(s, id)) continue;
    int members[64], nm = 0, cols = 0;
    for (int j = id; j < s->nn && nm < 64; j++) {
      if (!stackable(s, j) || s->region[j] != s->region[id] || s->level[j] != s->level[id] || N(s, j)->a[1] != N(s, id)->a[1])
        continue;
      members[nm++] = j;
      cols += N(s, j)->n[0];
    }
    if (nm < 2) continue;
    int in = N(s, id)->n[0] ? node_numel(N(s, N(s, id)->a[1])) : 0;
    new_stack(s, members, nm, cols, in);
    int arr = add_array(pl, ARR_ROWS, rows_stride(cols), 0, members[0]), col = 0;
    for (int m = 0; m < nm; m++) {
      pl->home[members[m]] = add_slot(pl, arr, 0, col);
      col += N(s, members[m])->n[0];
    }
  }
}

/* The products M_i^T g_i of sum `root` if they can be one GEMM: each g_i computed by a kernel,
 * distinct, as wide as its M_i's rows. How many (into leaves, their width into *cols), or -1. The
 * products may stand at different levels (mgu's input gradient: one g_i from the backward loop,
 * one from a kernel after it); the stack then runs at the sum's level, the latest. */
static int sum_products(Sched *s, int root, int leaves[64], int *cols) {
  int nl = 0;
  *cols = 0;
  for (int id = 0; id < s->nn; id++) {
    if (s->sum_root[id] != root || !is_gemm(s, id)) continue;
    Node *n = N(s, id);
    int gv = n->a[1];
    bool ok = nl < 64 && n->op == OP_MATVEC_T && is_elem(s, gv) && node_numel(N(s, gv)) == N(s, n->a[0])->n[0];
    for (int k = 0; ok && k < nl; k++) ok = N(s, leaves[k])->a[1] != gv;
    if (!ok) return -1;
    leaves[nl++] = id, *cols += N(s, n->a[0])->n[0];
  }
  return nl;
}

/* Where the g_i of products leaves[0..nl) stand: 0 when none has a home yet, 1 when all are already
 * side by side in this order from column 0 of one array `cols` wide (another sum's stack), -1 else. */
static int sum_operands_placed(Sched *s, const int *leaves, int nl, int cols) {
  Plan *pl = s->pl;
  int placed = 0;
  for (int m = 0; m < nl; m++) placed += pl->home[N(s, leaves[m])->a[1]] >= 0;
  if (!placed) return 0;
  if (placed != nl) return -1;
  const Slot *first = &pl->slots[pl->home[N(s, leaves[0])->a[1]]];
  for (int m = 0, col = first->col; m < nl; m++) {
    const Slot *sl = &pl->slots[pl->home[N(s, leaves[m])->a[1]]];
    if (sl->array != first->array || sl->row_off != 0 || sl->col != col || first->col != 0 ||
        pl->arrays[sl->array].width != rows_stride(cols))
      return -1;
    col += node_numel(N(s, N(s, leaves[m])->a[1]));
  }
  return 1;
}

/* A sum of M_i^T g_i: the g_i side by side in one array, one GEMM against the stacked M_i. */
static void stack_sums(Sched *s) {
  Plan *pl = s->pl;
  for (int root = 0; root < s->nn; root++) {
    if (!is_gemm_sum(s, root) || s->sum_root[root] >= 0) continue;
    int leaves[64], cols, nl = sum_products(s, root, leaves, &cols);
    if (nl < 2) continue;
    int placed = sum_operands_placed(s, leaves, nl, cols);
    if (placed < 0) continue;
    new_stack(s, leaves, nl, cols, N(s, N(s, leaves[0])->a[0])->n[1]);
    for (int m = 0; m < nl; m++) s->level[leaves[m]] = s->level[root];
    if (placed) continue;
    int arr = add_array(pl, ARR_ROWS, rows_stride(cols), 0, leaves[0]), col = 0;
    for (int m = 0; m < nl; m++) {
      int gv = N(s, leaves[m])->a[1];
      pl->home[gv] = add_slot(pl, arr, 0, col);
      col += node_numel(N(s, gv));
    }
  }
}

/* Every other value that must be stored: an array of its own. */
static void place_stored(Sched *s) {
  for (int id = 0; id < s->nn; id++)
    if (s->vis[id] && s->dyn[id] && s->must_store[id] && s->pl->home[id] < 0)
      s->pl->home[id] = add_array_slot(s->pl, ARR_ROWS, rows_stride(node_numel(N(s, id))), 0, id);
}

/* The GEMMs of region r at level L; a stack's one GEMM stands for all its members; the first
 * product into a sum overwrites it, the rest add (first_write per sum). */
static void emit_gemms(Sched *s, Phase *ph, int r, int L, bool *first_write) {
  for (int id = 0; id < s->nn; id++) {
    if (!s->vis[id] || s->region[id] != r || level(s, id) != L || !is_gemm(s, id)) continue;
    int root = s->sum_root[id], in = s->stacked_in[id];
    if (in >= 0 && s->stack[in].first != id) continue; /* done by its stack's GEMM */
    PStep st = new_step(N(s, id)->op == OP_MATVEC ? PS_GEMM : PS_GEMM_T, id);
    st.out = root >= 0 ? root : id;
    if (in >= 0) st.mat = s->stack[in].mat, st.ncols = s->stack[in].cols; /* a stacked sum: one GEMM computes it all */
    if (root >= 0) {
      st.accumulate = first_write[root];
      first_write[root] = true;
    }
    push_step(ph, st);
  }
}

/* The scans and reverse scans of region r at level L, one per state (on its part 0). */
static void emit_scans(Sched *s, Phase *ph, int r, int L) {
  Program *p = s->p;
  for (int id = 0; id < s->nn; id++) {
    if (!s->vis[id] || s->region[id] != r || level(s, id) != L) continue;
    int qs[2] = {s->scan_next[id], s->scan_dtot[id]};
    PStepKind kinds[2] = {PS_SCAN, PS_RSCAN};
    for (int i = 0; i < 2; i++)
      if (qs[i] >= 0 && p->sparts[qs[i]].part == 0) {
        PStep st = new_step(kinds[i], id);
        st.state = p->sparts[qs[i]].state;
        push_step(ph, st);
      }
  }
}

/* The fused elementwise kernel of region r at level L, when it has nodes. */
static void emit_kernel(Sched *s, Phase *ph, int r, int L) {
  Plan *pl = s->pl;
  Kernel k = {0};
  for (int id = 0; id < s->nn; id++)
    if (is_elem(s, id) && s->region[id] == r && level(s, id) == L) {
      VEC_PUSH(k.nodes, k.n, k.cap, id);
      pl->kernel_of[id] = pl->nkernels;
    }
  if (!k.n) return;
  VEC_PUSH(pl->kernels, pl->nkernels, pl->capkernels, k);
  PStep st = new_step(PS_ELEM, -1);
  st.kernel = pl->nkernels - 1;
  push_step(ph, st);
}

/* Steps: per phase, per level: GEMMs, scans, then the kernel; the copies placed so far after them. */
static void emit_steps(Sched *s) {
  bool *first_write = xcalloc((size_t)s->nn, sizeof(bool));
  for (int r = 0; r < R_COUNT; r++) {
    Phase *ph = phase_of(s->pl, r);
    PStep *tail = ph->steps;
    int ntail = ph->n;
    ph->steps = NULL, ph->n = ph->cap = 0;
    for (int L = 0; L <= s->maxL[r]; L++) {
      emit_gemms(s, ph, r, L, first_write);
      emit_scans(s, ph, r, L);
      emit_kernel(s, ph, r, L);
    }
    for (int i = 0; i < ntail; i++) push_step(ph, tail[i]);
    free(tail);
  }
  free(first_write);
}

/* Piece j of the loop's dprev sums: id and its operands in the loop's kernels (loop[k]), into
 * piece[]; false where a node would belong to two pieces. */
static bool mark_piece(Sched *s, const bool *loop, int *piece, int id, int j) {
  if (id < 0 || s->pl->kernel_of[id] < 0 || !loop[s->pl->kernel_of[id]]) return true;
  if (piece[id] >= 0) return piece[id] == j;
  piece[id] = j;
  Node *n = N(s, id);
  for (int i = 0; i < 2; i++)
    if (n->a[i] >= 0 && !mark_piece(s, loop, piece, n->a[i], j)) return false;
  return true;
}

/* PlanOptions.shift_passes: a backward loop that holds nothing but the shifted histories' dprev sums
 * (piece j >= 1 adds step j's adjoints at step t into dnew's step j - 1, in place at row t + j) runs
 * as one pass over all rows a piece, j ascending, at the head of bwd_post. No two rows of a pass
 * meet, and a row's adds come in the loop's order: step r - 1's piece 1, then step r - 2's piece 2. */
static void shift_passes(Sched *s) {
  Plan *pl = s->pl;
  Phase *ph = &pl->bwd_step;
  if (!s->shift || !ph->n || pl->fwd_step.n) return;
  bool *loop = xcalloc((size_t)pl->nkernels + 1, sizeof(bool));
  int *piece = int_array(s->nn, -1), K = 0;
  bool ok = true;
  for (int i = 0; i < ph->n; i++) {
    ok = ok && ph->steps[i].kind == PS_ELEM;
    if (ok) loop[ph->steps[i].kernel] = true;
  }
  for (int q = 0; ok && q < s->p->nsparts; q++)
    for (int j = 1; shift_part(s, q) && j < s->shift[q].K && ok; j++) {
      ok = mark_piece(s, loop, piece, s->shift[q].dprev[j], j);
      K = max_int(K, s->shift[q].K);
    }
  for (int i = 0; ok && i < ph->n; i++) {
    const Kernel *k = &pl->kernels[ph->steps[i].kernel];
    for (int m = 0; m < k->n; m++) ok = ok && piece[k->nodes[m]] >= 1;
  }
  if (ok) {
    /* the loop's nodes in order; piece j's into the first loop kernel (j = 1) or a new one */
    Kernel all = {0};
    for (int i = 0; i < ph->n; i++) {
      Kernel *k = &pl->kernels[ph->steps[i].kernel];
      for (int m = 0; m < k->n; m++) VEC_PUSH(all.nodes, all.n, all.cap, k->nodes[m]);
      k->n = 0; /* the loop's other kernels are left empty */
    }
    PStep *head = NULL;
    int nhead = 0, cap = 0, reuse = ph->steps[0].kernel;
    for (int j = 1; j < K; j++) {
      Kernel kj = {0};
      for (int m = 0; m < all.n; m++)
        if (piece[all.nodes[m]] == j) VEC_PUSH(kj.nodes, kj.n, kj.cap, all.nodes[m]);
      if (!kj.n) continue;
      int at = reuse >= 0 ? reuse : pl->nkernels;
      if (reuse >= 0) {
        free(pl->kernels[at].nodes);
        pl->kernels[at] = kj, reuse = -1;
      } else VEC_PUSH(pl->kernels, pl->nkernels, pl->capkernels, kj);
      for (int m = 0; m < kj.n; m++) pl->kernel_of[kj.nodes[m]] = at;
      PStep st = new_step(PS_ELEM, -1);
      st.kernel = at;
      VEC_PUSH(head, nhead, cap, st);
    }
    free(all.nodes);
    for (int i = 0; i < pl->bwd_post.n; i++) VEC_PUSH(head, nhead, cap, pl->bwd_post.steps[i]);
    free(pl->bwd_post.steps);
    pl->bwd_post.steps = head, pl->bwd_post.n = nhead, pl->bwd_post.cap = cap;
    ph->n = 0;
  }
  free(loop);
  free(piece);
}

/* The adjoints of static nodes, summed over all rows: a GEMM per outer product, a column sum per
 * other term. */
static void emit_adjoint_sums(Sched *s) {
  for (int b = 0; b < s->p->nbounds; b++) {
    int nterms, *terms = adjoint_terms(s, s->p->bounds[b].adj, &nterms);
    for (int i = 0; i < nterms; i++) {
      PStep st = new_step(N(s, terms[i])->op == OP_OUTER ? PS_OUTER_ACC : PS_COLSUM, terms[i]);
      st.bound = b;
      st.dot = dot_term(s, terms[i]) && !s->vis[terms[i]];
      push_step(&s->pl->bwd_post, st);
    }
    free(terms);
  }
}

/* Bound ACC leaves read by the static backward need arrays even when unused elsewhere. */
static void place_accs(Sched *s) {
  Plan *pl = s->pl;
  for (int b = 0; b < s->p->nbounds; b++) {
    int id = s->p->bounds[b].acc;
    if (pl->home[id] >= 0) continue;
    pl->home[id] = add_array_slot(pl, ARR_ACC, 0, node_numel(N(s, id)), b);
    pl->static_bwd[id] = true;
  }
}

/* ---- histories in the shift layout (Shift) ---- */

static bool dnew_view(Graph *g, int dnew, int id) {
  Node *n = graph_node(g, id);
  return id == dnew || (n->op == OP_SLICE && n->a[0] == dnew);
}

enum { PIECE_ZERO = -2 };

/* Columns [c0, c0 + m) of x, a history's dprev as the autodiff builds it (sums of pieces padded
 * with zeros, slices of dnew), as a node: the same sums in the same order less the zeros (the
 * values of the whole dprev's columns, bit for bit but for the sign of a zero), dnew's slices new
 * slices of it; PIECE_ZERO where nothing reaches them; -1 where x is not so built. */
static int piece_of(Graph *g, int dnew, int x, int c0, int m) {
  Node n = *graph_node(g, x); /* (a copy: adding nodes moves the graph) */
  if (n.op == OP_CONST && n.k == 0) return PIECE_ZERO;
  if (dnew_view(g, dnew, x)) return g_slice(g, dnew, (x == dnew ? 0 : n.idx) + c0, m);
  if (n.op == OP_ADD && n.rank == 1) {
    int a = piece_of(g, dnew, n.a[0], c0, m), b = a == -1 ? -1 : piece_of(g, dnew, n.a[1], c0, m);
    if (a == -1 || b == -1) return -1;
    return a == PIECE_ZERO ? b : b == PIECE_ZERO ? a : g_binary(g, OP_ADD, a, b);
  }
  if (n.op == OP_CONCAT) {
    int na = node_numel(graph_node(g, n.a[0]));
    if (c0 + m <= na) return piece_of(g, dnew, n.a[0], c0, m);
    return c0 >= na ? piece_of(g, dnew, n.a[1], c0 - na, m) : -1;
  }
  if (c0 == 0 && node_numel(&n) == m) return n.rank == 1 ? x : g_reshape(g, x, 1, &m);
  return n.op == OP_SLICE ? piece_of(g, dnew, n.a[0], n.idx + c0, m) : -1;
}

/* The histories that may take the shift layout by their graph (scan form: the parts without
 * coefficients), each dprev cut into its steps (new nodes: the program's dyn marks are redone);
 * reject_shifts checks the rest once the plan knows what it computes where. */
static Shift *shift_candidates(Program *p) {
  Graph *g = &p->g;
  Shift *sh = xcalloc((size_t)p->nsparts + 1, sizeof(Shift));
  int before = g->nnodes;
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    if (sp->a >= 0 || sp->cplx || sp->next < 0 || sp->next == sp->prev || sp->dnew < 0) continue;
    Node nx = *graph_node(g, sp->next);
    int K = 1, n = sp->size, w = sp->next;
    Node *a = nx.op == OP_CONCAT ? graph_node(g, nx.a[0]) : NULL;
    if (a && a->op == OP_SLICE && a->a[0] == sp->prev) { /* (prev's steps 1 .. K - 1, w) */
      n = node_numel(graph_node(g, nx.a[1])), w = nx.a[1];
      if (a->idx != n || sp->size % n) continue;
      K = sp->size / n;
    } else
      for (int i = 0; i < op_arity(nx.op); i++)
        if (nx.a[i] == sp->prev) K = 0;
    if (!K) continue;
    int *d = xmalloc(sizeof(int) * (size_t)K);
    bool ok = true;
    for (int j = 0; j < K && ok; j++) {
      d[j] = sp->dprev < 0 ? PIECE_ZERO : piece_of(g, sp->dnew, sp->dprev, j * n, n);
      if (d[j] == PIECE_ZERO) d[j] = g_const(g, 0, 1, &n);
      ok = d[j] >= 0;
    }
    if (!ok) {
      free(d);
      continue;
    }
    sh[q] = (Shift){K, n, w, d};
  }
  if (g->nnodes != before) program_mark_dyn(p);
  return sh;
}

static void drop_shift(Shift *h) {
  free(h->dprev);
  *h = (Shift){0};
}

/* Whether node v is read (by the nodes the plan computes) only by the sums that make dprev's step
 * root, root itself included: the sums of its spine (ADDs down from it) read only by one another.
 * A view of dnew's step j - 1 must be so: dprev's step j overwrites it in place, and every read
 * of it comes first. */
static bool read_in_spine(Sched *s, int v, int root) {
  bool *spine = xcalloc((size_t)s->nn + 1, sizeof(bool));
  int *stack = NULL, top = 0, cap = 0;
  VEC_PUSH(stack, top, cap, root);
  while (top) {
    int id = stack[--top];
    if (spine[id] || N(s, id)->op != OP_ADD) continue;
    spine[id] = true;
    VEC_PUSH(stack, top, cap, N(s, id)->a[0]);
    VEC_PUSH(stack, top, cap, N(s, id)->a[1]);
  }
  bool ok = v == root || spine[root];
  for (int id = 0; ok && id < s->nn; id++) {
    if (!s->vis[id] || spine[id]) continue;
    Node *n = N(s, id);
    for (int i = 0; i < op_arity(n->op); i++) /* outside the spine: reads neither v nor a sum of it but root */
      if (n->a[i] == v || (spine[n->a[i]] && n->a[i] != root)) ok = false;
  }
  bool reached = v == root;
  for (int id = 0; !reached && id < s->nn; id++)
    reached = spine[id] && (N(s, id)->a[0] == v || N(s, id)->a[1] == v);
  free(spine), free(stack);
  return ok && reached;
}

/* Drops the shift layout of the candidates the plan cannot run so: w must be computed before the
 * histories' loop (it reads no previous step); every read of prev or dnew a view of one step; a
 * view of dnew's step j < K - 1 (overwritten by dprev's step j + 1 in the same step) read within
 * that sum alone (read_in_spine). Whether it dropped any (then the nodes are chosen again). */
static bool reject_shifts(Sched *s) {
  bool any = false;
  for (int q = 0; q < s->p->nsparts; q++) {
    if (!shift_part(s, q)) continue;
    Shift *h = &s->shift[q];
    StatePart *sp = &s->p->sparts[q];
    bool ok = seq_part(s, q) && !still_part(s, q) && s->dyn[h->w] && s->region[h->w] == R_FWD_PRE;
    for (int id = 0; ok && h->K > 1 && id < s->nn; id++) {
      if (!s->vis[id] || !s->dyn[id]) continue;
      Node *n = N(s, id);
      for (int i = 0; ok && i < op_arity(n->op); i++) {
        if (n->a[i] != sp->prev && n->a[i] != sp->dnew) continue;
        int j = n->idx / h->n;
        ok = s->view[id] && (n->idx + node_numel(n) - 1) / h->n == j;
        if (ok && n->a[i] == sp->dnew && j < h->K - 1) ok = read_in_spine(s, id, h->dprev[j + 1]);
      }
    }
    if (!ok) drop_shift(h), any = true;
  }
  return any;
}

static void sched_free(Sched *s) {
  free(s->vis), free(s->region), free(s->level), free(s->scan_next), free(s->scan_dtot);
  free(s->must_store), free(s->sum_root), free(s->nusers), free(s->stacked_in), free(s->stack), free(s->view);
  for (int q = 0; s->shift && q < s->p->nsparts; q++) free(s->shift[q].dprev);
  free(s->shift);
}

/* Which nodes the plan computes, and their regions. */
static void choose_nodes(Sched *s, const PlanOptions *o) {
  visit_roots(s);
  if (o->slice_views) mark_views(s);
  assign_regions(s);
}

/* ... forgotten, to choose them again */
static void unchoose_nodes(Sched *s) {
  size_t nn = (size_t)s->nn;
  memset(s->vis, 0, nn), memset(s->view, 0, nn), memset(s->must_store, 0, nn);
  memset(s->pl->static_fwd, 0, nn), memset(s->pl->static_bwd, 0, nn);
  for (size_t id = 0; id < nn; id++) s->region[id] = R_NONE;
}

Plan *plan_new(Program *p, const PlanOptions *o) {
  CHECK(p->differentiated);
  CHECK(!o->scan || p->scan_form);
  Sched s;
  Shift *shift = o->scan && o->shift_histories && o->slice_views ? shift_candidates(p) : NULL;
  sched_init(&s, p, o->scan, o->gates);
  s.shift = shift;
  s.dot_sums = o->dot_sums;
  for (int q = 0; o->scan && o->still && q < p->nsparts; q++) /* (and nothing else reads it: dprev is dnew) */
    s.pl->still[q] = seq_part(&s, q) && p->sparts[q].next == p->sparts[q].prev &&
                     (p->sparts[q].dprev < 0 || graph_node(&p->g, p->sparts[q].dprev)->op == OP_DNEW);
  if (o->scan) mark_scanned(&s);
  choose_nodes(&s, o);
  while (s.shift && reject_shifts(&s)) unchoose_nodes(&s), choose_nodes(&s, o);
  sink_into_steps(&s);
  if (o->sink_hybrid) sink_into_hybrid_steps(&s);
  count_users(&s);
  find_gemm_sums(&s);
  assign_levels(&s);
  mark_stored(&s);
  add_fixed_arrays(&s);
  place_leaves(&s);
  place_states(&s);
  place_outputs(&s);
  stack_products(&s);
  stack_sums(&s);
  place_stored(&s);
  emit_steps(&s);
  if (o->shift_passes) shift_passes(&s);
  emit_adjoint_sums(&s);
  place_accs(&s);
  sched_free(&s);
  return s.pl;
}

GemmOperands plan_gemm_operands(const Plan *pl, const PStep *st) {
  Graph *g = &pl->p->g;
  Node *n = graph_node(g, st->node), *m = graph_node(g, n->a[0]);
  GemmOperands o = {pl->home[st->out], pl->home[n->a[1]], st->mat >= 0 ? st->mat : pl->home[n->a[0]],
                    st->mat >= 0 ? st->ncols : m->n[0], m->n[1]};
  CHECK(o.y >= 0 && o.v >= 0 && o.m >= 0);
  return o;
}

/* Marks in `seen` (per array, a bit per phase) the arrays of slot `slot`, when it is one. */
static void touch(const Plan *pl, unsigned *seen, int slot, int phase) {
  if (slot >= 0) seen[pl->slots[slot].array] |= 1u << phase;
}

/* The arrays a step reads or writes. */
static void touch_step(const Plan *pl, unsigned *seen, const PStep *st, int phase) {
  Program *p = pl->p;
  Graph *g = &p->g;
  switch (st->kind) {
  case PS_ELEM: {
    const Kernel *k = &pl->kernels[st->kernel];
    for (int i = 0; i < k->n; i++) {
      Node *n = graph_node(g, k->nodes[i]);
      touch(pl, seen, pl->home[k->nodes[i]], phase);
      for (int a = 0; a < op_arity(n->op); a++)
        if (n->a[a] >= 0) touch(pl, seen, pl->home[n->a[a]], phase);
    }
    break;
  }
  case PS_GEMM: case PS_GEMM_T: {
    GemmOperands o = plan_gemm_operands(pl, st);
    touch(pl, seen, o.y, phase), touch(pl, seen, o.v, phase), touch(pl, seen, o.m, phase);
    break;
  }
  case PS_OUTER_ACC: {
    Node *n = graph_node(g, st->node);
    touch(pl, seen, pl->home[n->a[0]], phase), touch(pl, seen, pl->home[n->a[1]], phase);
    break;
  }
  case PS_SCAN: case PS_RSCAN:
    for (int q = p->spart_of[st->state]; q < p->nsparts && p->sparts[q].state == st->state; q++) {
      int roles[] = {p->sparts[q].a, p->sparts[q].b, p->sparts[q].g};
      for (int i = 0; i < 3; i++)
        if (roles[i] >= 0) touch(pl, seen, pl->home[roles[i]], phase);
    }
    break;
  default: break; /* PS_COLSUM, PS_COPY, PS_ZERO below */
  }
  if (st->kind == PS_COLSUM && st->dot)
    for (int i = 0; i < 2; i++) touch(pl, seen, pl->home[graph_node(g, st->node)->a[i]], phase);
  else if (st->kind == PS_COLSUM || st->kind == PS_COPY) touch(pl, seen, pl->home[st->node], phase);
  if (st->kind == PS_COPY || st->kind == PS_ZERO) touch(pl, seen, st->dst, phase);
}

bool *plan_step_local(const Plan *pl) {
  const Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  unsigned *seen = xcalloc((size_t)pl->narrays + 1, sizeof(unsigned));
  bool *local = xcalloc((size_t)pl->narrays + 1, sizeof(bool));
  for (int f = 0; f < 7; f++)
    for (int i = 0; i < phases[f]->n; i++) touch_step(pl, seen, &phases[f]->steps[i], f);
  for (int i = 0; i < pl->nslots; i++)
    if (pl->slots[i].row_off) seen[pl->slots[i].array] = ~0u; /* (rows of other steps) */
  for (int a = 0; a < pl->narrays; a++)
    local[a] = pl->arrays[a].kind == ARR_ROWS && (seen[a] == 1u << R_FWD_STEP || seen[a] == 1u << R_BWD_STEP);
  free(seen);
  return local;
}

size_t plan_state_steps_floats(const Plan *pl, int q, int size, int T, int B) {
  size_t n = pl->shift[q] ? (size_t)pl->shift[q] : (size_t)size, width = (size_t)pl->arrays[pl->state_array[q]].width;
  return ((pl->still[q] ? 1 : (size_t)T + 1) + (size_t)size / n - 1) * (size_t)B * width;
}

void plan_state_steps(const Plan *pl, int q, int size, const float *src, int T, int B, float *out) {
  size_t n = pl->shift[q] ? (size_t)pl->shift[q] : (size_t)size, rows = ((size_t)T + 1) * (size_t)B;
  size_t width = (size_t)pl->arrays[pl->state_array[q]].width; /* n: state arrays are not padded */
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < (size_t)size / n; j++)
      memcpy(out + r * (size_t)size + j * n, src + ((pl->still[q] ? r % (size_t)B : r) + j * (size_t)B) * width, sizeof(float) * n);
}

size_t plan_array_floats(const PlanArray *a, int T, int B) {
  size_t rows = (size_t)T * (size_t)B;
  switch (a->kind) {
  case ARR_ROWS: case ARR_GATE: return rows * (size_t)a->width;
  case ARR_STATE: case ARR_DSTATE: case ARR_DTOTAL: return (rows + (size_t)B * (size_t)a->blocks) * (size_t)a->width;
  case ARR_STATIC: case ARR_ACC: case ARR_STACK: return (size_t)a->numel;
  default: return 0;
  }
}

static size_t bytes_per_row(const Plan *pl, bool io_only) {
  size_t floats = 0;
  for (int i = 0; i < pl->narrays; i++) switch (pl->arrays[i].kind) {
    case ARR_ROWS: case ARR_STATE: case ARR_DSTATE: case ARR_DTOTAL:
      if (!io_only) floats += (size_t)pl->arrays[i].width;
      break;
    case ARR_X: case ARR_DY: case ARR_NOISE: case ARR_Y: case ARR_GX: case ARR_GATE:
      floats += (size_t)pl->arrays[i].width;
      break;
    default: break; /* per run, not per row: params, statics, sums, h0's gradient, stacks */
    }
  return floats * sizeof(float);
}

size_t plan_bytes_per_row(const Plan *pl) { return bytes_per_row(pl, false); }
size_t plan_io_bytes_per_row(const Plan *pl) { return bytes_per_row(pl, true); }

void plan_free(Plan *pl) {
  if (!pl) return;
  Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  for (int i = 0; i < 7; i++) free(phases[i]->steps);
  for (int i = 0; i < pl->nkernels; i++) free(pl->kernels[i].nodes);
  free(pl->kernels), free(pl->arrays), free(pl->slots), free(pl->home), free(pl->kernel_of);
  free(pl->static_fwd), free(pl->static_bwd), free(pl->state_array), free(pl->dstate_array), free(pl->still), free(pl->shift);
  for (int i = 0; i < pl->nstacks; i++) free(pl->stacks[i]);
  free(pl->stacks), free(pl->nstack);
  free(pl);
}

static const char *step_name(PStepKind k) {
  switch (k) {
  case PS_ELEM: return "elem";
  case PS_GEMM: return "gemm";
  case PS_GEMM_T: return "gemm_t";
  case PS_OUTER_ACC: return "outer_acc";
  case PS_COLSUM: return "colsum";
  case PS_SCAN: return "scan";
  case PS_RSCAN: return "rscan";
  case PS_COPY: return "copy";
  case PS_ZERO: return "zero";
  default: UNREACHABLE("step kind");
  }
}

void plan_dump(const Plan *pl, FILE *f) {
  const char *names[] = {"fwd_pre", "fwd_step", "fwd_post", "bwd_pre", "bwd_step", "bwd_post", "bwd_first"};
  const Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  fprintf(f, "plan (%s mode): %d arrays, %d kernels\n", pl->scan ? "scan" : "sequential", pl->narrays, pl->nkernels);
  for (int i = 0; i < 7; i++) {
    if (!phases[i]->n) continue;
    fprintf(f, "%s:\n", names[i]);
    for (int j = 0; j < phases[i]->n; j++) {
      const PStep *st = &phases[i]->steps[j];
      fprintf(f, "  %s", step_name(st->kind));
      if (st->kind == PS_ELEM) {
        const Kernel *k = &pl->kernels[st->kernel];
        fprintf(f, " k%d:", st->kernel);
        for (int n = 0; n < k->n; n++) fprintf(f, " %%%d%s", k->nodes[n], pl->home[k->nodes[n]] >= 0 ? "*" : "");
      } else if (st->node >= 0)
        fprintf(f, " %%%d", st->node);
      if (st->state >= 0) fprintf(f, " state %d", st->state);
      fprintf(f, "\n");
    }
  }
}
