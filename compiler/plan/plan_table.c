/* plan_table.c: the plan of one program as the flat, pointer-free table of plan_table.h, the one
 * form in which every executor of a plan reads it. */
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
  case ARR_STATE: case ARR_DSTATE: case ARR_DTOTAL: e.rows = e.per_b = a->width; break;
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
  EtStep e = {.kind = ET_ELEM + (int)st->kind - PS_ELEM, .kernel = st->kernel, .accumulate = st->accumulate, .arr1 = -1};
  switch (st->kind) {
  case PS_ELEM: break;
  case PS_GEMM: case PS_GEMM_T: {
    GemmOperands op = plan_gemm_operands(pl, st);
    e.y = op.y, e.v = op.v, e.m = op.m, e.nO = op.nO, e.nI = op.nI;
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
    sp[q] = (EtStatePart){s->state, s->part, s->cplx, s->size, pl->state_array[q], pl->dstate_array[q], find_array(pl, ARR_GH0, q)};
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
  h->nsteps = n, h->steps = blob_add(t, steps, sizeof *steps * (size_t)n);
  free(steps);
}

/* The plan as a table (h is filled, then written first). */
PlanTable plan_table_build(const Plan *pl, Program *p) {
  Builder bb = {.pl = pl, .p = p}, *b = &bb;
  Blob t = {0};
  EtHeader h = {.magic = ET_MAGIC, .scan = pl->scan, .x_size = p->x_size, .output_size = p->output_size, .y_array = -1};
  blob_add(&t, &h, sizeof h);
  EtArray *arr = xcalloc((size_t)pl->narrays + 1, sizeof *arr);
  for (int i = 0; i < pl->narrays; i++) arr[i] = array_of(b, i, &h);
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

