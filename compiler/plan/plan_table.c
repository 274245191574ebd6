/* plan_table.c: the plan of one program as the flat, pointer-free table of plan_table.h, the one
 * form in which every executor of a plan reads it. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct Blob {
  char *data;
  size_t n, cap;
} Blob;

/* Appends n bytes (8-byte aligned); their offset. */
static int32_t blob_add(Blob *b, const void *p, size_t n) {
  size_t off = (b->n + 7) / 8 * 8;
  if (off + n > b->cap) {
    b->cap = (off + n) * 2 + 256;
    b->data = xrealloc(b->data, b->cap);
  }
  memset(b->data + b->n, 0, off - b->n);
  if (n) memcpy(b->data + off, p, n);
  b->n = off + n;
  CHECK(b->n < (size_t)INT32_MAX);
  return (int32_t)off;
}

/* What the table is built from, and the constant rows of the scans. */
typedef struct Builder {
  const Plan *pl;
  Program *p;
  float *floats;
  int nfloats, capfloats;
  int npacks;
} Builder;

static int32_t const_row(Builder *b, float k, int size) {
  int32_t off = b->nfloats;
  for (int j = 0; j < size; j++) VEC_PUSH(b->floats, b->nfloats, b->capfloats, k);
  return off;
}

static EtArray array_of(Builder *b, int i, EtHeader *h) {
  const PlanArray *a = &b->pl->arrays[i];
  EtArray e = {.kind = ET_OWNED, .index = a->index, .width = a->width};
  switch (a->kind) {
  case ARR_ROWS: e.rows = a->width; break;
  case ARR_GATE: e.rows = a->width, e.gate = 1; break;
  case ARR_Y: e.rows = a->width, h->y_array = i; break;
  case ARR_STATE: case ARR_DSTATE: case ARR_DTOTAL: e.rows = a->width, e.per_b = a->width * a->blocks; break;
  case ARR_STATIC: case ARR_STACK: e.fixed = a->numel; break;
  case ARR_ACC: e.fixed = a->numel, e.zero_bwd = 1; break;
  case ARR_PARAM: e.kind = ET_PARAM; break;
  case ARR_X: e.kind = ET_X; break;
  case ARR_DY: e.kind = ET_DY; break;
  case ARR_GX: e.kind = ET_GX; break;
  case ARR_GH0: e.kind = ET_GH0; break;
  case ARR_NOISE: e.kind = ET_NOISE, e.rows = a->width, h->train_noise = 1; break;
  }
  return e;
}

static EtCoef coef_of(Builder *b, int id, int size) {
  if (id < 0) return (EtCoef){-1, const_row(b, 0.0f, size)};
  Node *n = graph_node(&b->p->g, id);
  if (n->op == OP_CONST) return (EtCoef){-1, const_row(b, (float)n->k, size)};
  CHECK(b->pl->home[id] >= 0);
  return (EtCoef){b->pl->home[id], -1};
}

static EtStep step_of(Builder *b, const PStep *st) {
  const Plan *pl = b->pl;
  Program *p = b->p;
  EtStep e = {.kind = ET_ELEM + (int)st->kind - PS_ELEM, .kernel = st->kernel, .accumulate = st->accumulate, .arr1 = -1,
              .group = -1, .pack = -1, .src2 = -1};
  switch (st->kind) {
  case PS_ELEM: break;
  case PS_GEMM: case PS_GEMM_T: {
    GemmOperands op = plan_gemm_operands(pl, st);
    e.y = op.y, e.v = op.v, e.m = op.m, e.nO = op.nO, e.nI = op.nI;
    e.pack = b->npacks++;
    break;
  }
  case PS_OUTER_ACC: {
    Node *o = graph_node(&p->g, st->node);
    e.m = pl->home[o->a[0]], e.v = pl->home[o->a[1]], e.y = pl->home[p->bounds[st->bound].acc];
    e.nO = o->n[0], e.nI = o->n[1];
    CHECK(e.m >= 0 && e.v >= 0 && e.y >= 0);
    break;
  }
  case PS_COLSUM: case PS_COPY: {
    Node *n = graph_node(&p->g, st->node);
    e.src = pl->home[st->node], e.numel = node_numel(n), e.k = (float)n->k;
    if (st->dot) {
      e.src = pl->home[n->a[0]], e.src2 = pl->home[n->a[1]];
      CHECK(e.src2 >= 0);
    }
    e.dst = st->kind == PS_COPY ? st->dst : pl->home[p->bounds[st->bound].acc];
    CHECK(e.src >= 0 || n->op == OP_CONST);
    break;
  }
  case PS_ZERO: e.dst = st->dst; break;
  case PS_SCAN: case PS_RSCAN: {
    bool rev = st->kind == PS_RSCAN;
    int q = p->spart_of[st->state];
    const int *arrs = rev ? pl->dstate_array : pl->state_array;
    e.part = q, e.cplx = p->sparts[q].cplx, e.size = p->sparts[q].size;
    e.arr0 = arrs[q], e.arr1 = e.cplx ? arrs[q + 1] : -1;
    for (int k = 0; k < (e.cplx ? 2 : 1); k++) {
      e.a[k] = coef_of(b, p->sparts[q + k].a, e.size);
      e.b[k] = coef_of(b, rev ? p->sparts[q + k].g : p->sparts[q + k].b, e.size);
    }
    break;
  }
  }
  return e;
}

static bool param_is_complex(const Program *p, int param) {
  for (int i = 0; i < p->npparts; i++)
    if (p->pparts[i].param == param && p->pparts[i].part == 1) return true;
  return false;
}

static int find_array(const Plan *pl, ArrayKind kind, int index) {
  for (int i = 0; i < pl->narrays; i++)
    if (pl->arrays[i].kind == kind && pl->arrays[i].index == index) return i;
  return -1;
}

static void add_parts(Builder *b, Blob *t, EtHeader *h) {
  Program *p = b->p;
  const Plan *pl = b->pl;
  EtParamPart *pp = xcalloc((size_t)p->npparts + 1, sizeof *pp);
  for (int i = 0; i < p->npparts; i++) {
    const ParamPart *src = &p->pparts[i];
    EtParamPart *e = &pp[i];
    e->param = src->param, e->part = src->part, e->cplx = param_is_complex(p, src->param), e->numel = src->numel;
    e->array = find_array(pl, ARR_PARAM, i);
    if (e->cplx) e->plane = h->planes, h->planes += src->numel + 16;
    e->grad = src->grad >= 0 ? pl->home[src->grad] : -1;
    if (src->grad >= 0 && e->grad < 0) {
      CHECK(graph_node(&p->g, src->grad)->op == OP_CONST);
      e->grad_k = (float)graph_node(&p->g, src->grad)->k;
    }
  }
  h->npparts = p->npparts, h->pparts = blob_add(t, pp, sizeof *pp * (size_t)p->npparts);
  free(pp);
  EtStatePart *sp = xcalloc((size_t)p->nsparts + 1, sizeof *sp);
  for (int q = 0; q < p->nsparts; q++) {
    const StatePart *s = &p->sparts[q];
    sp[q] = (EtStatePart){s->state, s->part, s->cplx, s->size, pl->state_array[q], pl->dstate_array[q], find_array(pl, ARR_GH0, q),
                            pl->still[q], pl->shift[q]};
  }
  h->nsparts = p->nsparts, h->sparts = blob_add(t, sp, sizeof *sp * (size_t)p->nsparts);
  free(sp);
}

static void add_stacks(Builder *b, Blob *t, EtHeader *h) {
  const Plan *pl = b->pl;
  EtStackCopy *sc = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < pl->narrays; i++) {
    if (pl->arrays[i].kind != ARR_STACK) continue;
    int st = pl->arrays[i].index, off = 0;
    for (int m = 0; m < pl->nstack[st]; m++) {
      int mat = pl->stacks[st][m], numel = node_numel(graph_node(&b->p->g, mat));
      CHECK(pl->home[mat] >= 0);
      VEC_PUSH(sc, n, cap, ((EtStackCopy){i, off, pl->home[mat], numel}));
      off += numel;
    }
  }
  h->nstack = n, h->stack = blob_add(t, sc, sizeof *sc * (size_t)n);
  free(sc);
}

static void add_groups(Builder *b, Blob *t, EtHeader *h, EtStep *steps);

static void add_steps(Builder *b, Blob *t, EtHeader *h) {
  const Plan *pl = b->pl;
  const Phase *phases[ET_NPHASES] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre,
                                     &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  int total = 0;
  for (int f = 0; f < ET_NPHASES; f++) total += phases[f]->n;
  EtStep *steps = xcalloc((size_t)total + 1, sizeof *steps);
  int n = 0;
  for (int f = 0; f < ET_NPHASES; f++) {
    const Phase *ph = phases[f];
    h->phases[f] = (EtPhase){ph->region == REG_ALL ? ET_REG_ALL : ph->region == REG_STEP ? ET_REG_STEP : ET_REG_FIRST, n, ph->n};
    for (int i = 0; i < ph->n; i++) steps[n++] = step_of(b, &ph->steps[i]);
  }
  add_groups(b, t, h, steps);
  h->npacks = b->npacks;
  h->nsteps = n, h->steps = blob_add(t, steps, sizeof *steps * (size_t)n);
  free(steps);
}

/* ---- the weight-gradient groups (EtGroup) ---- */

typedef struct OuterGroup {
  const PStep **steps;  /* na * nv: G block i (by G's column) times V block j at i * nv + j */
  int na, nv;
  int M, N;
  const PStep *trigger;
  const PStep **sums;   /* per G block: the run's PS_COLSUM of it, or NULL */
  bool any_sum;
} OuterGroup;

typedef struct Groups {
  const Plan *pl;
  Program *p;
  OuterGroup *g;
  int n;
} Groups;

/* The G and V slots of a PS_OUTER_ACC step. */
static void outer_operands(const Groups *c, const PStep *st, int *hG, int *hV) {
  Node *o = graph_node(&c->p->g, st->node);
  *hG = c->pl->home[o->a[0]], *hV = c->pl->home[o->a[1]];
  CHECK(*hG >= 0 && *hV >= 0);
}

/* The order that puts a run's weight-gradient steps of one V next to each other, their G by column
 * (qsort_r's comparison; `groups` is the Groups). */
static int outer_cmp(const void *x, const void *y, void *groups) {
  const Groups *c = groups;
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
static bool outer_extends(const Groups *c, const OuterGroup *g, const PStep *st) {
  int gG, gV, hG, hV;
  outer_operands(c, g->steps[0], &gG, &gV);
  outer_operands(c, st, &hG, &hV);
  return hV == gV && graph_node(&c->p->g, st->node)->n[1] == g->N;
}

/* Whether groups a and b (one V each) have the same G blocks in the same order. */
static bool outer_same_g(const Groups *c, const OuterGroup *a, const OuterGroup *b) {
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
static void outer_groups_of_run(Groups *c, const PStep *run, int n) {
  const PStep **st = xmalloc(sizeof(PStep *) * (size_t)(n ? n : 1));
  int m = 0, first = c->n;
  for (int i = 0; i < n; i++)
    if (run[i].kind == PS_OUTER_ACC) st[m++] = &run[i];
  qsort_r(st, (size_t)m, sizeof *st, outer_cmp, c);
  OuterGroup *g = NULL;
  for (int i = 0; i < m; i++) {
    Node *o = graph_node(&c->p->g, st[i]->node);
    if (g && outer_extends(c, g, st[i])) {
      g->steps = xrealloc(g->steps, sizeof(PStep *) * (size_t)(g->na + 1));
      g->steps[g->na++] = st[i];
      g->M += o->n[0];
    } else {
      c->g = xrealloc(c->g, sizeof(OuterGroup) * (size_t)(c->n + 1));
      g = &c->g[c->n++];
      *g = (OuterGroup){.steps = xmalloc(sizeof(PStep *)), .na = 1, .nv = 1, .M = o->n[0], .N = o->n[1], .trigger = st[i]};
      g->steps[0] = st[i];
    }
    if (st[i] < g->trigger) g->trigger = st[i]; /* the first of the group in the phase's order */
  }
  free(st);
  int last = first; /* groups with the same G blocks: one, their V side by side */
  for (int i = first; i < c->n; i++) {
    int j = first;
    while (j < last && !outer_same_g(c, &c->g[j], &c->g[i])) j++;
    if (j < last) outer_merge(&c->g[j], &c->g[i]);
    else c->g[last++] = c->g[i];
  }
  c->n = last;
  for (int i = first; i < c->n; i++) c->g[i].sums = xcalloc((size_t)c->g[i].na, sizeof(PStep *));
  for (int i = 0; i < n; i++) { /* each PS_COLSUM to the first G block it sums */
    bool done = run[i].kind != PS_COLSUM || run[i].dot;
    for (int j = first; j < c->n && !done; j++)
      for (int k = 0; k < c->g[j].na && !done; k++) {
        OuterGroup *h = &c->g[j];
        if (graph_node(&c->p->g, h->steps[k * h->nv]->node)->a[0] == run[i].node && !h->sums[k])
          h->sums[k] = &run[i], h->any_sum = done = true;
      }
  }
}

/* The plan's phases in the table's order. */
static const Phase *phase_at(const Plan *pl, int k) {
  const Phase *ph[ET_NPHASES] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  return ph[k];
}

/* A plan step's number in the table (the phases' steps in order). */
static int32_t step_number(const Plan *pl, const PStep *st) {
  int n = 0;
  for (int k = 0; k < ET_NPHASES; k++) {
    const Phase *ph = phase_at(pl, k);
    if (st >= ph->steps && st < ph->steps + ph->n) return n + (int32_t)(st - ph->steps);
    n += ph->n;
  }
  UNREACHABLE("a step outside the plan");
}

/* The weight-gradient groups of every phase into the table; each member step's `group`. */
static void add_groups(Builder *b, Blob *t, EtHeader *h, EtStep *steps) {
  Groups gg = {.pl = b->pl, .p = b->p}, *c = &gg;
  for (int f = 0; f < ET_NPHASES; f++) {
    const Phase *ph = phase_at(b->pl, f);
    for (int i = 0; i < ph->n;) {
      int j = i;
      while (j < ph->n && (ph->steps[j].kind == PS_OUTER_ACC || ph->steps[j].kind == PS_COLSUM)) j++;
      if (j > i) outer_groups_of_run(c, &ph->steps[i], j - i);
      i = j > i ? j : i + 1;
    }
  }
  EtGroup *eg = xcalloc((size_t)c->n + 1, sizeof *eg);
  for (int i = 0; i < c->n; i++) {
    OuterGroup *g = &c->g[i];
    int32_t *idx = xmalloc(sizeof(int32_t) * (size_t)(g->na * g->nv + g->na));
    for (int k = 0; k < g->na * g->nv; k++) {
      idx[k] = step_number(b->pl, g->steps[k]);
      steps[idx[k]].group = i;
    }
    for (int k = 0; k < g->na; k++) {
      idx[g->na * g->nv + k] = g->sums[k] ? step_number(b->pl, g->sums[k]) : -1;
      if (g->sums[k]) steps[idx[g->na * g->nv + k]].group = i;
    }
    int32_t off = blob_add(t, idx, sizeof(int32_t) * (size_t)(g->na * g->nv + g->na));
    eg[i] = (EtGroup){g->na, g->nv, g->M, g->N, step_number(b->pl, g->trigger), off,
                      off + (int32_t)sizeof(int32_t) * g->na * g->nv, g->any_sum};
    free(idx), free(g->steps), free(g->sums);
  }
  h->ngroups = c->n, h->groups = blob_add(t, eg, sizeof *eg * (size_t)c->n);
  free(eg), free(c->g);
}

/* ---- grad_x as a product a fold may skip (SeqIO.fold, Backend.folds) ---- */

/* Whether slot `slot` lies in the caller's grad_x. */
static bool in_grad_x(const Plan *pl, int slot) { return slot >= 0 && pl->arrays[pl->slots[slot].array].kind == ARR_GX; }

/* The step that writes grad_x where it is the only one and a product G M over all rows that
 * overwrites it, else -1. */
static int32_t xgrad_step(const Plan *pl) {
  const PStep *found = NULL;
  int writers = 0;
  for (int k = 0; k < ET_NPHASES; k++) {
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
  return writers == 1 && found ? step_number(pl, found) : -1;
}

/* The plan as a table (h is filled, then written first). */
PlanTable plan_table_build(const Plan *pl, Program *p) {
  Builder bb = {.pl = pl, .p = p}, *b = &bb;
  Blob t = {0};
  EtHeader h = {.magic = ET_MAGIC, .scan = pl->scan, .x_size = p->x_size, .output_size = p->output_size, .y_array = -1,
                .xgrad_step = xgrad_step(pl)};
  blob_add(&t, &h, sizeof h);
  EtArray *arr = xcalloc((size_t)pl->narrays + 1, sizeof *arr);
  bool *local = plan_step_local(pl);
  for (int i = 0; i < pl->narrays; i++) arr[i] = array_of(b, i, &h), arr[i].local = local[i];
  free(local);
  h.narrays = pl->narrays, h.arrays = blob_add(&t, arr, sizeof *arr * (size_t)pl->narrays);
  free(arr);
  EtSlot *sl = xcalloc((size_t)pl->nslots + 1, sizeof *sl);
  for (int i = 0; i < pl->nslots; i++) sl[i] = (EtSlot){pl->slots[i].array, pl->slots[i].row_off, pl->slots[i].col};
  h.nslots = pl->nslots, h.slots = blob_add(&t, sl, sizeof *sl * (size_t)pl->nslots);
  free(sl);
  add_steps(b, &t, &h);
  add_parts(b, &t, &h);
  add_stacks(b, &t, &h);
  h.nfloats = b->nfloats, h.floats = blob_add(&t, b->floats, sizeof(float) * (size_t)b->nfloats);
  h.nparams = p->cell->nparams, h.nstates = p->cell->nstates;
  h.kstatic_fwd = h.kstatic_bwd = -1;
  h.bytes = (int32_t)t.n;
  memcpy(t.data, &h, sizeof h);
  free(b->floats);
  return (PlanTable){t.data, t.n};
}

