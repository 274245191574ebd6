/* schedule.c: a Program's execution plan (see schedule.h). Phases by
 * dependence (on previous states, on the next step's gradient), levels by
 * GEMM and scan depth, one fused elementwise kernel per level, arrays only
 * for the values that cross kernels. */
#include "plan.h"

#include <string.h>

enum { R_NONE = -1, R_FWD_PRE, R_FWD_STEP, R_FWD_POST, R_BWD_PRE, R_BWD_STEP, R_BWD_POST, R_BWD_FIRST, R_COUNT };

typedef struct Sched {
  Plan *pl;
  Program *p;
  Graph *g;
  int nn;
  bool *dyn;
  bool *vis;        /* per-row nodes the plan computes */
  bool *needs_acc;  /* static nodes that wait for the summed adjoints */
  int *region;
  int *level;
  int *scan_next;   /* node -> state part whose scanned new value it is (scan mode), or -1 */
  int *scan_dtot;   /* node -> state part whose reverse-scanned dtotal it is (scan mode), or -1 */
  int *prev_part;   /* PREV leaf -> state part */
  bool *must_store; /* needs an array */
  int *sum_root;    /* a GEMM product (or partial sum) that adds into this sum node, else -1 */
  int *nusers;      /* per node: how many plan nodes read it */
  bool first_pass;  /* visiting the scan-mode dprev roots */
} Sched;

static Node *N(Sched *s, int id) { return graph_node(s->g, id); }

static bool is_gemm(Sched *s, int id) {
  Node *n = N(s, id);
  return (n->op == OP_MATVEC || n->op == OP_MATVEC_T) && s->dyn[id];
}

static int add_array(Plan *pl, ArrayKind kind, int width, int numel, int index) {
  PlanArray a = {kind, width, numel, index};
  VEC_PUSH(pl->arrays, pl->narrays, pl->caparrays, a);
  return pl->narrays - 1;
}

static int add_slot(Plan *pl, int array, int row_off, int col) {
  Slot s = {array, row_off, col};
  VEC_PUSH(pl->slots, pl->nslots, pl->capslots, s);
  return pl->nslots - 1;
}

static void push_step(Phase *ph, PStep st) { VEC_PUSH(ph->steps, ph->n, ph->cap, st); }

/* ---- which nodes, in which phase ---- */

static void visit_static(Sched *s, int id) {
  if (id < 0 || s->vis[id]) return;
  s->vis[id] = true;
  Node *n = N(s, id);
  if (s->needs_acc[id]) s->pl->static_bwd[id] = true;
  else s->pl->static_fwd[id] = true;
  for (int i = 0; i < op_arity(n->op); i++) visit_static(s, n->a[i]);
}

static void visit(Sched *s, int id, int region_hint);

static void visit_state_coefs(Sched *s, int state, int region_hint) {
  Program *p = s->p;
  int first = p->spart_of[state];
  for (int q = first; q < p->nsparts && p->sparts[q].state == state; q++) {
    visit(s, p->sparts[q].a, region_hint);
    visit(s, p->sparts[q].b, region_hint);
  }
}

static void visit(Sched *s, int id, int region_hint) {
  if (id < 0 || s->vis[id]) return;
  Program *p = s->p;
  if (!s->dyn[id]) {
    visit_static(s, id);
    return;
  }
  s->vis[id] = true;
  if (s->first_pass) s->region[id] = R_BWD_FIRST;
  Node *n = N(s, id);
  if (s->scan_next[id] >= 0) {
    visit_state_coefs(s, p->sparts[s->scan_next[id]].state, region_hint);
    return;
  }
  if (s->scan_dtot[id] >= 0) {
    int state = p->sparts[s->scan_dtot[id]].state;
    for (int q = p->spart_of[state]; q < p->nsparts && p->sparts[q].state == state; q++) {
      visit(s, p->sparts[q].g, region_hint);
      visit(s, p->sparts[q].a, region_hint);
    }
    return;
  }
  if (n->op == OP_PREV) {
    if (s->pl->scan) visit(s, p->sparts[n->idx].next, region_hint);
    return;
  }
  for (int i = 0; i < op_arity(n->op); i++) visit(s, n->a[i], region_hint);
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
    L = level(s, n->a[0]) > level(s, n->a[1]) ? level(s, n->a[0]) : level(s, n->a[1]);
  } else if (s->scan_next[id] >= 0) {
    int state = p->sparts[s->scan_next[id]].state;
    for (int q = p->spart_of[state]; q < p->nsparts && p->sparts[q].state == state; q++) {
      if (IN_REGION(p->sparts[q].a)) L = L > level(s, p->sparts[q].a) + 1 ? L : level(s, p->sparts[q].a) + 1;
      if (IN_REGION(p->sparts[q].b)) L = L > level(s, p->sparts[q].b) + 1 ? L : level(s, p->sparts[q].b) + 1;
    }
    if (L == 0) L = 1;
  } else if (s->scan_dtot[id] >= 0) {
    int state = p->sparts[s->scan_dtot[id]].state;
    for (int q = p->spart_of[state]; q < p->nsparts && p->sparts[q].state == state; q++)
      if (IN_REGION(p->sparts[q].g)) L = L > level(s, p->sparts[q].g) + 1 ? L : level(s, p->sparts[q].g) + 1;
    if (L == 0) L = 1;
  } else if (n->op == OP_PREV && s->pl->scan) {
    L = level(s, p->sparts[n->idx].next);
  } else {
    for (int i = 0; i < op_arity(n->op); i++) {
      int a = n->a[i];
      if (a >= 0 && s->dyn[a] && s->region[a] == R) {
        int la = level(s, a);
        if (la > L) L = la;
      }
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
  return s->vis[id] && s->dyn[id] && !op_is_leaf(n->op) && !is_gemm(s, id) && s->scan_next[id] < 0 &&
         s->scan_dtot[id] < 0 && n->op != OP_OUTER && !is_gemm_sum(s, id);
}

Plan *plan_new(Program *p, bool scan, bool gates) {
  CHECK(p->differentiated);
  CHECK(!scan || p->scan_form);
  Plan *pl = xcalloc(1, sizeof(Plan));
  pl->p = p;
  pl->scan = scan;
  Graph *g = &p->g;
  int nn = g->nnodes;
  Sched S = {0};
  Sched *s = &S;
  s->pl = pl, s->p = p, s->g = g, s->nn = nn, s->dyn = p->dyn;
  s->vis = xcalloc((size_t)nn, sizeof(bool));
  s->needs_acc = p->needs_acc;
  s->region = xmalloc(sizeof(int) * (size_t)nn);
  s->level = xmalloc(sizeof(int) * (size_t)nn);
  s->scan_next = xmalloc(sizeof(int) * (size_t)nn);
  s->scan_dtot = xmalloc(sizeof(int) * (size_t)nn);
  s->must_store = xcalloc((size_t)nn, sizeof(bool));
  s->sum_root = xmalloc(sizeof(int) * (size_t)nn);
  s->nusers = xcalloc((size_t)nn, sizeof(int));
  for (int i = 0; i < nn; i++) s->sum_root[i] = -1;
  for (int i = 0; i < nn; i++) s->region[i] = R_NONE, s->level[i] = -1, s->scan_next[i] = s->scan_dtot[i] = -1;
  pl->home = xmalloc(sizeof(int) * (size_t)nn);
  pl->kernel_of = xmalloc(sizeof(int) * (size_t)nn);
  for (int i = 0; i < nn; i++) pl->home[i] = -1, pl->kernel_of[i] = -1;
  pl->static_fwd = xcalloc((size_t)nn, sizeof(bool));
  pl->static_bwd = xcalloc((size_t)nn, sizeof(bool));
  /* scan mode: which nodes the scans produce (not a state whose coefficient a is 0) */
  if (scan)
    for (int st = 0; st < p->nstates; st++) {
      int first = p->spart_of[st], nparts = p->sparts[first].cplx ? 2 : 1;
      bool scanned = false;
      for (int q = first; q < first + nparts; q++) {
        Node *a = graph_node(g, p->sparts[q].a);
        if (!(a->op == OP_CONST && a->k == 0)) scanned = true;
      }
      for (int q = first; q < first + nparts && scanned; q++) {
        s->scan_next[p->sparts[q].next] = q;
        s->scan_dtot[p->sparts[q].dtotal] = q;
      }
    }
  /* the roots, forward then backward */
  visit(s, p->output, 0);
  for (int q = 0; q < p->nsparts; q++) visit(s, p->sparts[q].next, 0);
  if (gates)
    for (int i = 0; i < p->ngates; i++) visit(s, p->gates[i].node, 0);
  visit(s, p->dx, 0);
  for (int b = 0; b < p->nbounds; b++) {
    Boundary *bd = &p->bounds[b];
    /* a matrix adjoint is a sum of outer products: each one a GEMM over all rows */
    int stack[256], top = 0;
    stack[top++] = bd->adj;
    while (top) {
      int id = stack[--top];
      Node *n = N(s, id);
      if (n->op == OP_ADD && n->rank == 2) {
        CHECK(top + 2 <= 256);
        stack[top++] = n->a[0];
        stack[top++] = n->a[1];
      } else if (n->op == OP_OUTER) {
        visit(s, n->a[0], 0), visit(s, n->a[1], 0);
        s->must_store[n->a[0]] = s->must_store[n->a[1]] = true;
      } else {
        CHECK(n->rank < 2);
        visit(s, id, 0);
        s->must_store[id] = true;
      }
    }
  }
  for (int i = 0; i < p->npparts; i++)
    if (p->pparts[i].grad >= 0) visit_static(s, p->pparts[i].grad);
  if (!scan)
    for (int q = 0; q < p->nsparts; q++) visit(s, p->sparts[q].dprev, 0);
  else {
    for (int q = 0; q < p->nsparts; q++) visit(s, p->sparts[q].g, 0);
    s->first_pass = true;
    for (int q = 0; q < p->nsparts; q++) visit(s, p->sparts[q].dprev, 0);
    s->first_pass = false;
  }

  /* phases */
  bool *depP = xcalloc((size_t)nn, sizeof(bool)), *depD = xcalloc((size_t)nn, sizeof(bool));
  bool *ancN = xcalloc((size_t)nn, sizeof(bool)), *ancD = xcalloc((size_t)nn, sizeof(bool));
  for (int id = 0; id < nn; id++) {
    Node *n = &g->nodes[id];
    depP[id] = n->op == OP_PREV;
    depD[id] = n->op == OP_DNEW;
    for (int i = 0; i < op_arity(n->op); i++) depP[id] |= depP[n->a[i]], depD[id] |= depD[n->a[i]];
  }
  for (int q = 0; q < p->nsparts; q++) {
    if (p->sparts[q].next >= 0) ancN[p->sparts[q].next] = true;
    if (p->sparts[q].dprev >= 0) ancD[p->sparts[q].dprev] = true;
  }
  for (int id = nn - 1; id >= 0; id--) {
    Node *n = &g->nodes[id];
    for (int i = 0; i < op_arity(n->op); i++) {
      if (ancN[id]) ancN[n->a[i]] = true;
      if (ancD[id]) ancD[n->a[i]] = true;
    }
  }
  for (int id = 0; id < nn; id++) {
    if (!s->vis[id] || !s->dyn[id] || s->region[id] == R_BWD_FIRST) continue;
    bool fwd = id < p->nforward;
    if (scan) s->region[id] = fwd ? R_FWD_PRE : R_BWD_PRE;
    else if (fwd) s->region[id] = !depP[id] ? R_FWD_PRE : ancN[id] ? R_FWD_STEP : R_FWD_POST;
    else s->region[id] = !depD[id] ? R_BWD_PRE : ancD[id] ? R_BWD_STEP : R_BWD_POST;
  }
  /* leaves computed nowhere: their region is the earliest */
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && op_is_leaf(N(s, id)->op) && s->region[id] != R_BWD_FIRST) s->region[id] = R_FWD_PRE;

  /* levels and kernels, phase by phase */
  Phase *phases[R_COUNT] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  Region regs[R_COUNT] = {REG_ALL, REG_STEP, REG_ALL, REG_ALL, REG_STEP, REG_ALL, REG_FIRST};
  for (int r = 0; r < R_COUNT; r++) phases[r]->region = regs[r];
  /* readers of each value (interface roles count as readers) */
  for (int id = 0; id < nn; id++) {
    if (!s->vis[id]) continue;
    Node *n = N(s, id);
    for (int i = 0; i < op_arity(n->op); i++) s->nusers[n->a[i]]++;
  }
  s->nusers[p->output]++;
  if (p->dx >= 0) s->nusers[p->dx]++;
  for (int i = 0; i < p->ngates; i++) s->nusers[p->gates[i].node]++;
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    s->nusers[sp->next]++;
    if (sp->dprev >= 0) s->nusers[sp->dprev]++;
    if (sp->g >= 0) s->nusers[sp->g]++;
    if (sp->a >= 0) s->nusers[sp->a]++;
    if (sp->b >= 0) s->nusers[sp->b]++;
  }
  for (int id = 0; id < nn; id++)
    if (s->must_store[id]) s->nusers[id]++;
  /* sums of GEMM products: the products write into the outermost sum */
  for (int id = 0; id < nn; id++)
    if (is_gemm_sum(s, id)) s->sum_root[N(s, id)->a[0]] = s->sum_root[N(s, id)->a[1]] = id;
  for (int id = 0; id < nn; id++) {
    int r = s->sum_root[id];
    while (r >= 0 && s->sum_root[r] >= 0) r = s->sum_root[r];
    s->sum_root[id] = r;
  }
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && s->region[id] >= 0) level(s, id);
  /* as late as possible: an elementwise node joins the kernel of its first reader */
  {
    int *cap = xmalloc(sizeof(int) * (size_t)nn);
    for (int i = 0; i < nn; i++) cap[i] = 1 << 30;
    for (int id = nn - 1; id >= 0; id--) {
      if (!s->vis[id] || !s->dyn[id] || s->region[id] < 0) continue;
      Node *n = N(s, id);
      if (is_elem(s, id) && cap[id] != 1 << 30 && cap[id] > s->level[id]) s->level[id] = cap[id];
      int deps[8], nd = 0, L = s->level[id], c;
      if (is_gemm(s, id)) deps[nd++] = n->a[1], c = L - 1;
      else if (s->scan_next[id] >= 0 || s->scan_dtot[id] >= 0) {
        int q0 = s->scan_next[id] >= 0 ? s->scan_next[id] : s->scan_dtot[id], st = p->sparts[q0].state;
        for (int q = p->spart_of[st]; q < p->nsparts && p->sparts[q].state == st && nd < 6; q++) {
          if (s->scan_next[id] >= 0) deps[nd++] = p->sparts[q].a, deps[nd++] = p->sparts[q].b;
          else deps[nd++] = p->sparts[q].g;
        }
        c = L - 1;
      } else if (n->op == OP_PREV) c = L;
      else {
        for (int i = 0; i < op_arity(n->op); i++) deps[nd++] = n->a[i];
        c = L;
      }
      for (int i = 0; i < nd; i++) {
        int d = deps[i];
        if (d < 0 || !s->dyn[d] || s->region[d] != s->region[id] || op_is_leaf(N(s, d)->op)) continue;
        if (c < cap[d]) cap[d] = c;
      }
    }
    free(cap);
  }
  int maxL[R_COUNT] = {0};
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && s->region[id] >= 0 && s->level[id] > maxL[s->region[id]]) maxL[s->region[id]] = s->level[id];
  /* which values must live in arrays: used outside their kernel */
  for (int id = 0; id < nn; id++) {
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
  }
  /* arrays for states and their gradients */
  pl->state_array = xmalloc(sizeof(int) * (size_t)(p->nsparts + 1));
  pl->dstate_array = xmalloc(sizeof(int) * (size_t)(p->nsparts + 1));
  for (int q = 0; q < p->nsparts; q++) {
    pl->state_array[q] = add_array(pl, ARR_STATE, p->sparts[q].size, 0, q);
    pl->dstate_array[q] = add_array(pl, scan ? ARR_DTOTAL : ARR_DSTATE, p->sparts[q].size, 0, q);
  }
  /* homes: fixed places first (leaves, states, interface values), then arrays of rows */
  int ax = add_array(pl, ARR_X, p->x_size, 0, 0), ady = add_array(pl, ARR_DY, p->output_size, 0, 0);
  int ay = add_array(pl, ARR_Y, p->output_size, 0, 0), agx = add_array(pl, ARR_GX, p->x_size, 0, 0);
  for (int id = 0; id < nn; id++) {
    Node *n = N(s, id);
    if (!s->vis[id]) continue;
    if (!s->dyn[id]) {
      if (n->op == OP_CONST) continue;
      int arr = n->op == OP_PARAM ? add_array(pl, ARR_PARAM, 0, node_numel(n), n->idx)
                : n->op == OP_ACC ? add_array(pl, ARR_ACC, 0, node_numel(n), n->idx)
                                  : add_array(pl, ARR_STATIC, 0, node_numel(n), id);
      pl->home[id] = add_slot(pl, arr, 0, 0);
      continue;
    }
    switch (n->op) {
    case OP_INPUT: pl->home[id] = add_slot(pl, ax, 0, 0); break;
    case OP_DY: pl->home[id] = add_slot(pl, ady, 0, 0); break;
    case OP_NOISE: pl->home[id] = add_slot(pl, add_array(pl, ARR_NOISE, node_numel(n), 0, n->idx), 0, 0); break;
    case OP_PREV: pl->home[id] = add_slot(pl, pl->state_array[n->idx], 0, 0); break;
    case OP_DNEW: pl->home[id] = add_slot(pl, pl->dstate_array[n->idx], 1, 0); break;
    default: break;
    }
  }
  Phase *fcopy = scan ? &pl->fwd_pre : &pl->fwd_post;
  /* new state values: into the state arrays (scans write there themselves) */
  for (int q = 0; q < p->nsparts; q++) {
    int id = p->sparts[q].next;
    int dst = add_slot(pl, pl->state_array[q], 1, 0);
    if (s->scan_next[id] >= 0) {
      if (pl->home[id] < 0) pl->home[id] = dst;
      continue;
    }
    if (pl->home[id] < 0 && s->dyn[id]) pl->home[id] = dst;
    else push_step(scan ? &pl->fwd_pre : (s->region[id] == R_FWD_STEP || !s->dyn[id] ? &pl->fwd_step : &pl->fwd_step),
                   (PStep){PS_COPY, -1, id, -1, false, -1, 0, -1, -1, dst});
  }
  for (int q = 0; q < p->nsparts; q++) {
    StatePart *sp = &p->sparts[q];
    if (scan) {
      if (s->scan_dtot[sp->dtotal] >= 0) pl->home[sp->dtotal] = add_slot(pl, pl->dstate_array[q], 0, 0);
      int gh = add_array(pl, ARR_GH0, sp->size, 0, q);
      int dst = add_slot(pl, gh, 0, 0);
      if (sp->dprev >= 0 && pl->home[sp->dprev] < 0 && is_elem(s, sp->dprev)) pl->home[sp->dprev] = dst;
      else if (sp->dprev >= 0) push_step(&pl->bwd_first, (PStep){PS_COPY, -1, sp->dprev, -1, false, -1, 0, -1, -1, dst});
      else push_step(&pl->bwd_first, (PStep){PS_ZERO, -1, -1, -1, false, -1, 0, -1, -1, dst});
    } else {
      int dst = add_slot(pl, pl->dstate_array[q], 0, 0);
      if (sp->dprev >= 0 && pl->home[sp->dprev] < 0 && s->dyn[sp->dprev]) pl->home[sp->dprev] = dst;
      else if (sp->dprev >= 0) push_step(&pl->bwd_step, (PStep){PS_COPY, -1, sp->dprev, -1, false, -1, 0, -1, -1, dst});
      else push_step(&pl->bwd_step, (PStep){PS_ZERO, -1, -1, -1, false, -1, 0, -1, -1, dst});
    }
  }
  /* y, the gates and dx: computed into the caller's arrays where possible */
  {
    int dst = add_slot(pl, ay, 0, 0);
    if (pl->home[p->output] < 0 && s->dyn[p->output]) pl->home[p->output] = dst;
    else push_step(fcopy, (PStep){PS_COPY, -1, p->output, -1, false, -1, 0, -1, -1, dst});
  }
  if (gates)
    for (int i = 0; i < p->ngates; i++) {
      int id = p->gates[i].node;
      int dst = add_slot(pl, add_array(pl, ARR_GATE, node_numel(N(s, id)), 0, i), 0, 0);
      if (pl->home[id] < 0 && s->dyn[id]) pl->home[id] = dst;
      else push_step(fcopy, (PStep){PS_COPY, -1, id, -1, false, -1, 0, -1, -1, dst});
    }
  {
    int dst = add_slot(pl, agx, 0, 0);
    Phase *bph = scan ? &pl->bwd_pre : &pl->bwd_post;
    if (p->dx < 0) push_step(bph, (PStep){PS_ZERO, -1, -1, -1, false, -1, 0, -1, -1, dst});
    else if (pl->home[p->dx] < 0 && s->dyn[p->dx]) pl->home[p->dx] = dst;
    else push_step(bph, (PStep){PS_COPY, -1, p->dx, -1, false, -1, 0, -1, -1, dst});
  }
  /* products of one vector by several matrices at one level: one GEMM with the matrices stacked */
  int *stacked_in = xmalloc(sizeof(int) * (size_t)nn), *stack_first = NULL, *stack_mat = NULL, *stack_cols = NULL;
  for (int i = 0; i < nn; i++) stacked_in[i] = -1;
  for (int id = 0; id < nn; id++) {
    if (!s->vis[id] || !is_gemm(s, id) || N(s, id)->op != OP_MATVEC || s->sum_root[id] >= 0 || stacked_in[id] >= 0 ||
        pl->home[id] >= 0)
      continue;
    int members[64], nm = 0, cols = 0;
    for (int j = id; j < nn && nm < 64; j++) {
      if (!s->vis[j] || !is_gemm(s, j) || N(s, j)->op != OP_MATVEC || s->sum_root[j] >= 0 || stacked_in[j] >= 0 ||
          pl->home[j] >= 0 || s->region[j] != s->region[id] || s->level[j] != s->level[id] || N(s, j)->a[1] != N(s, id)->a[1])
        continue;
      members[nm++] = j;
      cols += N(s, j)->n[0];
    }
    if (nm < 2) continue;
    int st = pl->nstacks++;
    pl->stacks = xrealloc(pl->stacks, sizeof(int *) * (size_t)pl->nstacks);
    pl->nstack = xrealloc(pl->nstack, sizeof(int) * (size_t)pl->nstacks);
    stack_first = xrealloc(stack_first, sizeof(int) * (size_t)pl->nstacks);
    stack_mat = xrealloc(stack_mat, sizeof(int) * (size_t)pl->nstacks);
    stack_cols = xrealloc(stack_cols, sizeof(int) * (size_t)pl->nstacks);
    pl->stacks[st] = xmalloc(sizeof(int) * (size_t)nm);
    pl->nstack[st] = nm;
    int in = N(s, id)->n[0] ? node_numel(N(s, N(s, id)->a[1])) : 0;
    stack_mat[st] = add_slot(pl, add_array(pl, ARR_STACK, 0, cols * in, st), 0, 0);
    stack_cols[st] = cols;
    stack_first[st] = members[0];
    int arr = add_array(pl, ARR_ROWS, cols, 0, members[0]), col = 0;
    for (int m = 0; m < nm; m++) {
      pl->stacks[st][m] = N(s, members[m])->a[0];
      stacked_in[members[m]] = st;
      pl->home[members[m]] = add_slot(pl, arr, 0, col);
      col += N(s, members[m])->n[0];
    }
  }
  /* a sum of M_i^T g_i: the g_i side by side in one array, one GEMM against the stacked M_i */
  for (int root = 0; root < nn; root++) {
    if (!is_gemm_sum(s, root) || s->sum_root[root] >= 0) continue;
    int leaves[64], nl = 0, cols = 0;
    bool ok = true;
    for (int id = 0; id < nn && ok; id++) {
      if (s->sum_root[id] != root || !is_gemm(s, id)) continue;
      Node *n = N(s, id);
      int gv = n->a[1];
      ok = nl < 64 && n->op == OP_MATVEC_T && is_elem(s, gv) && s->level[id] == s->level[root] &&
           node_numel(N(s, gv)) == N(s, n->a[0])->n[0];
      for (int k = 0; ok && k < nl; k++) ok = N(s, leaves[k])->a[1] != gv;
      if (ok) leaves[nl++] = id, cols += N(s, n->a[0])->n[0];
    }
    if (!ok || nl < 2) continue;
    /* the g_i: all without a home yet, or already side by side in this order (another sum's stack) */
    int placed = 0;
    for (int m = 0; m < nl; m++) placed += pl->home[N(s, leaves[m])->a[1]] >= 0;
    if (placed && placed != nl) continue;
    if (placed) {
      const Slot *first = &pl->slots[pl->home[N(s, leaves[0])->a[1]]];
      int col = first->col;
      for (int m = 0; m < nl && ok; m++) {
        const Slot *sl = &pl->slots[pl->home[N(s, leaves[m])->a[1]]];
        ok = sl->array == first->array && sl->row_off == 0 && sl->col == col &&
             pl->arrays[sl->array].width == cols && first->col == 0;
        col += node_numel(N(s, N(s, leaves[m])->a[1]));
      }
      if (!ok) continue;
    }
    int st = pl->nstacks++;
    pl->stacks = xrealloc(pl->stacks, sizeof(int *) * (size_t)pl->nstacks);
    pl->nstack = xrealloc(pl->nstack, sizeof(int) * (size_t)pl->nstacks);
    stack_first = xrealloc(stack_first, sizeof(int) * (size_t)pl->nstacks);
    stack_mat = xrealloc(stack_mat, sizeof(int) * (size_t)pl->nstacks);
    stack_cols = xrealloc(stack_cols, sizeof(int) * (size_t)pl->nstacks);
    pl->stacks[st] = xmalloc(sizeof(int) * (size_t)nl);
    pl->nstack[st] = nl;
    int in = N(s, N(s, leaves[0])->a[0])->n[1];
    stack_mat[st] = add_slot(pl, add_array(pl, ARR_STACK, 0, cols * in, st), 0, 0);
    stack_cols[st] = cols;
    stack_first[st] = leaves[0];
    int arr = placed ? -1 : add_array(pl, ARR_ROWS, cols, 0, leaves[0]), col = 0;
    for (int m = 0; m < nl; m++) {
      int gv = N(s, leaves[m])->a[1];
      pl->stacks[st][m] = N(s, leaves[m])->a[0];
      stacked_in[leaves[m]] = st;
      if (!placed) pl->home[gv] = add_slot(pl, arr, 0, col);
      col += node_numel(N(s, gv));
    }
  }
  for (int id = 0; id < nn; id++)
    if (s->vis[id] && s->dyn[id] && s->must_store[id] && pl->home[id] < 0)
      pl->home[id] = add_slot(pl, add_array(pl, ARR_ROWS, node_numel(N(s, id)), 0, id), 0, 0);

  /* steps: per phase, per level: GEMMs, scans, then the kernel */
  bool *first_write = xcalloc((size_t)nn, sizeof(bool));
  for (int r = 0; r < R_COUNT; r++) {
    Phase *ph = phases[r];
    PStep *tail = ph->steps;
    int ntail = ph->n;
    ph->steps = NULL, ph->n = ph->cap = 0;
    for (int L = 0; L <= maxL[r]; L++) {
      for (int id = 0; id < nn; id++)
        if (s->vis[id] && s->region[id] == r && level(s, id) == L && is_gemm(s, id)) {
          int root = s->sum_root[id];
          if (stacked_in[id] >= 0 && stack_first[stacked_in[id]] != id) continue; /* done by its stack's GEMM */
          PStep st = {N(s, id)->op == OP_MATVEC ? PS_GEMM : PS_GEMM_T, -1, id, root >= 0 ? root : id, false, -1, 0, -1, -1, -1};
          if (stacked_in[id] >= 0) {
            st.mat = stack_mat[stacked_in[id]];
            st.ncols = stack_cols[stacked_in[id]];
            if (st.kind == PS_GEMM_T) st.accumulate = false; /* the one GEMM computes the whole sum */
          }
          if (root >= 0) { /* the first product into a sum overwrites, the rest add */
            st.accumulate = first_write[root];
            first_write[root] = true;
          }
          push_step(ph, st);
        }
      for (int id = 0; id < nn; id++) {
        if (!s->vis[id] || s->region[id] != r || level(s, id) != L) continue;
        if (s->scan_next[id] >= 0 && p->sparts[s->scan_next[id]].part == 0)
          push_step(ph, (PStep){PS_SCAN, -1, id, -1, false, -1, 0, p->sparts[s->scan_next[id]].state, -1, -1});
        if (s->scan_dtot[id] >= 0 && p->sparts[s->scan_dtot[id]].part == 0)
          push_step(ph, (PStep){PS_RSCAN, -1, id, -1, false, -1, 0, p->sparts[s->scan_dtot[id]].state, -1, -1});
      }
      Kernel k = {0};
      for (int id = 0; id < nn; id++)
        if (is_elem(s, id) && s->region[id] == r && level(s, id) == L) {
          VEC_PUSH(k.nodes, k.n, k.cap, id);
          pl->kernel_of[id] = pl->nkernels;
        }
      if (k.n) {
        VEC_PUSH(pl->kernels, pl->nkernels, pl->capkernels, k);
        push_step(ph, (PStep){PS_ELEM, pl->nkernels - 1, -1, -1, false, -1, 0, -1, -1, -1});
      }
    }
    for (int i = 0; i < ntail; i++) push_step(ph, tail[i]);
    free(tail);
  }
  free(first_write);
  free(stacked_in), free(stack_first), free(stack_mat), free(stack_cols);
  /* the adjoints of static nodes, summed over all rows */
  for (int b = 0; b < p->nbounds; b++) {
    Boundary *bd = &p->bounds[b];
    int stack[256], top = 0;
    stack[top++] = bd->adj;
    while (top) {
      int id = stack[--top];
      Node *n = N(s, id);
      if (n->op == OP_ADD && n->rank == 2) {
        stack[top++] = n->a[0];
        stack[top++] = n->a[1];
      } else if (n->op == OP_OUTER) push_step(&pl->bwd_post, (PStep){PS_OUTER_ACC, -1, id, -1, false, -1, 0, -1, b, -1});
      else push_step(&pl->bwd_post, (PStep){PS_COLSUM, -1, id, -1, false, -1, 0, -1, b, -1});
    }
  }
  /* bound ACC leaves used by the static backward need arrays even when unused elsewhere */
  for (int b = 0; b < p->nbounds; b++) {
    int id = p->bounds[b].acc;
    if (pl->home[id] < 0) {
      pl->home[id] = add_slot(pl, add_array(pl, ARR_ACC, 0, node_numel(N(s, id)), b), 0, 0);
      pl->static_bwd[id] = true;
    }
  }
  free(depP), free(depD), free(ancN), free(ancD);
  free(s->vis), free(s->region), free(s->level), free(s->scan_next), free(s->scan_dtot), free(s->must_store), free(s->sum_root), free(s->nusers);
  return pl;
}

void plan_free(Plan *pl) {
  if (!pl) return;
  Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  for (int i = 0; i < 7; i++) free(phases[i]->steps);
  for (int i = 0; i < pl->nkernels; i++) free(pl->kernels[i].nodes);
  free(pl->kernels), free(pl->arrays), free(pl->slots), free(pl->home), free(pl->kernel_of);
  free(pl->static_fwd), free(pl->static_bwd), free(pl->state_array), free(pl->dstate_array);
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
