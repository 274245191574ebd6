/* diag_layer.c: one cell layer of `cellc diag` on the float64 interpreter. The layer's program is
 * the cell's evaluation lowering with probes recorded as extra gates (the coefficient that
 * multiplies a state's previous value, the input and state parts of each sigmoid gate's
 * pre-activation), differentiated by the compiler: its backward step applied to the unit vectors
 * of ds_t gives the exact step Jacobian J_t = ds_t / ds_{t-1}. */
#include "diag_layer.h"

#include <math.h>
#include <string.h>

#include "model.h"
#include "support.h"

/* ---- the program ---- */

/* The node that multiplies `prev` in a sum of terms (h = g * h + ...: g), or -1. */
static int prev_coef(Graph *g, int id, int prev) {
  Node *n = graph_node(g, id);
  if (n->op == OP_ADD) {
    int c = prev_coef(g, n->a[0], prev);
    return c >= 0 ? c : prev_coef(g, n->a[1], prev);
  }
  if (n->op == OP_SUB) return prev_coef(g, n->a[0], prev);
  if (n->op == OP_MUL) return n->a[1] == prev ? n->a[0] : n->a[0] == prev ? n->a[1] : -1;
  return -1;
}

/* Whether node id reads a state's previous value (memo: 0 unknown, 1 no, 2 yes). */
static bool reads_state(Graph *g, int id, char *memo) {
  if (id < 0) return false;
  if (memo[id]) return memo[id] == 2;
  Node *n = graph_node(g, id);
  bool r = n->op == OP_PREV;
  for (int i = 0; i < op_arity(n->op) && !r; i++) r = reads_state(g, n->a[i], memo);
  memo[id] = r ? 2 : 1;
  return r;
}

/* Adds node as a recorded probe (an extra gate part); returns its index among the gate parts. */
static int add_probe(Program *p, int node) {
  p->gates = xrealloc(p->gates, sizeof(GatePart) * (size_t)(p->ngates + 1));
  p->gates[p->ngates] = (GatePart){-1, node};
  return p->ngates++;
}

/* The sum of the additive terms of pre that do (want_state) or do not read a state, or -1. */
static int split_terms(Graph *g, int pre, bool want_state, char *memo) {
  Node *n = graph_node(g, pre);
  if (n->op == OP_ADD) {
    int a = n->a[0], b = n->a[1];
    int l = split_terms(g, a, want_state, memo), r = split_terms(g, b, want_state, memo);
    return l < 0 ? r : r < 0 ? l : g_binary(g, OP_ADD, l, r);
  }
  return reads_state(g, pre, memo) == want_state ? pre : -1;
}

/* id without the broadcasts around it (a scalar gate applied to a vector state). */
static int unbcast(Graph *g, int id) {
  while (graph_node(g, id)->op == OP_BCAST) id = graph_node(g, id)->a[0];
  return id;
}

/* Which gate the coefficient c is: "z" for the gate z, "1-z" for 1 - z, else NULL. */
static const char *coef_name(Arena *a, const Program *p, const Cell *cell, int c) {
  Graph *g = (Graph *)&p->g;
  c = unbcast(g, c);
  for (int i = 0; i < cell->ngates; i++) {
    int gn = p->gates[i].node;
    if (c == gn) return cell->gates[i].name;
    Node *n = graph_node(g, c);
    if (n->op == OP_SUB && unbcast(g, n->a[1]) == gn && g_is_const(g, n->a[0], 1.0)) return arena_printf(a, "1-%s", cell->gates[i].name);
  }
  return NULL;
}

/* The predictor: the first state with a coefficient on its previous value (scan form: its a, both
 * parts for a complex state; otherwise found in the update's sum of terms). */
static void find_predictor(DiagLayer *L, Arena *a) {
  Program *p = L->p;
  const Cell *cell = L->cell;
  L->coef[0] = L->coef[1] = -1;
  for (int s = 0; s < cell->nstates && L->coef[0] < 0; s++) {
    StatePart *sp = &p->sparts[p->spart_of[s]];
    int c = -1, c_im = -1;
    if (p->scan_form) {
      if (sp->a >= 0 && !g_is_const(&p->g, sp->a, 0.0)) c = sp->a, c_im = sp->cplx ? sp[1].a : -1;
    } else if (!sp->cplx) {
      c = prev_coef(&p->g, sp->next, sp->prev);
    }
    if (c < 0) continue;
    const char *name = coef_name(a, p, cell, c);
    L->predictor = name ? name : arena_printf(a, "coef(%s)", cell->states[s].name);
    L->coef_state = s;
    L->coef[0] = add_probe(p, c);
    if (c_im >= 0) L->coef[1] = add_probe(p, c_im);
  }
}

/* The input and state parts of every sigmoid gate's pre-activation. */
static void find_splits(DiagLayer *L) {
  Program *p = L->p;
  char *memo = xcalloc((size_t)p->g.nnodes + 1, 1);
  L->pre_in = xmalloc(sizeof(int) * (size_t)(L->ngates + 1));
  L->pre_st = xmalloc(sizeof(int) * (size_t)(L->ngates + 1));
  for (int i = 0; i < L->ngates; i++) {
    L->pre_in[i] = L->pre_st[i] = -1;
    Node *n = graph_node(&p->g, p->gates[i].node);
    if (n->op != OP_SIGMOID) continue;
    int pre = n->a[0];
    int in = split_terms(&p->g, pre, false, memo);
    memo = xrealloc(memo, (size_t)p->g.nnodes + 1); /* split_terms may add nodes */
    memset(memo, 0, (size_t)p->g.nnodes + 1);
    int st = split_terms(&p->g, pre, true, memo);
    memo = xrealloc(memo, (size_t)p->g.nnodes + 1);
    memset(memo, 0, (size_t)p->g.nnodes + 1);
    if (in >= 0) L->pre_in[i] = add_probe(p, in);
    if (st >= 0) L->pre_st[i] = add_probe(p, st);
  }
  free(memo);
}

int diag_layer_open(DiagLayer *L, Cell *cell, Arena *a, char *err, size_t errlen) {
  memset(L, 0, sizeof *L);
  L->cell = cell;
  L->p = lower_cell(cell, false, cell->mode == MODE_SCAN);
  L->ngates = L->p->ngates;
  L->coef_state = -1;
  find_predictor(L, a);
  find_splits(L);
  L->p->nforward = L->p->g.nnodes;
  program_mark_dyn(L->p);
  ad_differentiate(L->p);
  L->be = backend_find("interp");
  BackendOptions bo = {0};
  bo.gates = true;
  L->exe = L->be->compile(L->p, &bo, err, errlen);
  if (!L->exe) return -1;
  L->work = L->be->work_new(L->exe);
  for (int q = 0; q < L->p->nsparts; q++) L->S += L->p->sparts[q].size;
  return 0;
}

void diag_layer_close(DiagLayer *L) {
  if (L->work) L->be->work_free(L->work);
  if (L->exe) L->be->free(L->exe);
  program_free(L->p);
  free(L->pre_in), free(L->pre_st);
  memset(L, 0, sizeof *L);
}

int diag_numel(const DiagLayer *L, int gate_part) { return node_numel(graph_node(&L->p->g, L->p->gates[gate_part].node)); }

/* ---- running it ---- */

void diag_seq_alloc(const DiagLayer *L, DiagSeq *s, int T, int B) {
  const Program *p = L->p;
  memset(s, 0, sizeof *s);
  s->T = T, s->B = B;
  size_t rows = (size_t)T * (size_t)B;
  s->x = xcalloc(rows * (size_t)p->x_size + 1, sizeof(double));
  s->y = xcalloc(rows * (size_t)p->output_size + 1, sizeof(double));
  s->dy = xcalloc(rows * (size_t)p->output_size + 1, sizeof(double));
  s->gx = xcalloc(rows * (size_t)p->x_size + 1, sizeof(double));
  s->params = xcalloc((size_t)p->npparts + 1, sizeof(double *));
  s->gparams = xcalloc((size_t)p->npparts + 1, sizeof(double *));
  for (int i = 0; i < p->npparts; i++) {
    s->params[i] = xcalloc((size_t)p->pparts[i].numel + 1, sizeof(double));
    s->gparams[i] = xcalloc((size_t)p->pparts[i].numel + 1, sizeof(double));
  }
  double ***sp[] = {&s->h0, &s->final, &s->dfinal, &s->gh0};
  for (int k = 0; k < 4; k++) {
    *sp[k] = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
    for (int q = 0; q < p->nsparts; q++) (*sp[k])[q] = xcalloc((size_t)B * (size_t)p->sparts[q].size + 1, sizeof(double));
  }
  s->states = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  s->dstates = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  for (int q = 0; q < p->nsparts; q++) {
    s->states[q] = xcalloc((rows + (size_t)B) * (size_t)p->sparts[q].size + 1, sizeof(double));
    s->dstates[q] = xcalloc((rows + (size_t)B) * (size_t)p->sparts[q].size + 1, sizeof(double));
  }
  s->gates = xcalloc((size_t)p->ngates + 1, sizeof(double *));
  for (int i = 0; i < p->ngates; i++) s->gates[i] = xcalloc(rows * (size_t)diag_numel(L, i) + 1, sizeof(double));
}

void diag_seq_free(const DiagLayer *L, DiagSeq *s) {
  const Program *p = L->p;
  for (int i = 0; i < p->npparts; i++) free(s->params[i]), free(s->gparams[i]);
  for (int q = 0; q < p->nsparts; q++)
    free(s->h0[q]), free(s->final[q]), free(s->dfinal[q]), free(s->gh0[q]), free(s->states[q]), free(s->dstates[q]);
  for (int i = 0; i < p->ngates; i++) free(s->gates[i]);
  free(s->x), free(s->y), free(s->dy), free(s->gx), free(s->params), free(s->gparams), free(s->h0), free(s->final);
  free(s->dfinal), free(s->gh0), free(s->states), free(s->dstates), free(s->gates);
  memset(s, 0, sizeof *s);
}

void diag_seq_run(const DiagLayer *L, DiagSeq *s, bool backward) {
  const Program *p = L->p;
  SeqIO io = {0};
  io.T = s->T, io.B = s->B, io.dtype = DT_F64;
  io.x = s->x, io.params = (const void **)s->params, io.h0 = (const void **)s->h0;
  io.y = s->y, io.final = (void **)s->final, io.gates = (void **)s->gates;
  io.dy = s->dy, io.dfinal = (const void **)s->dfinal;
  io.grad_params = (void **)s->gparams, io.grad_x = s->gx, io.grad_h0 = (void **)s->gh0;
  L->be->forward(L->exe, L->work, &io);
  for (int q = 0; q < p->nsparts; q++) CHECK(L->be->read_steps(L->exe, L->work, STEPS_STATE, q, s->states[q]) == 0);
  if (!backward) return;
  L->be->backward(L->exe, L->work, &io);
  for (int q = 0; q < p->nsparts; q++) CHECK(L->be->read_steps(L->exe, L->work, STEPS_DSTATE, q, s->dstates[q]) == 0);
}

/* J (S x S, row-major) of the step from state row b at time t of `full`: a one-step sequence of S
 * copies, backward from the unit vectors of ds_{t+1}; row i of J is the gradient of s_{t+1}[i]. */
void diag_step_jacobian(const DiagLayer *L, const DiagSeq *full, int t, int b, DiagSeq *one, double *J) {
  const Program *p = L->p;
  int S = L->S, X = p->x_size;
  for (int i = 0; i < S; i++) memcpy(one->x + (size_t)i * X, full->x + ((size_t)t * full->B + b) * X, sizeof(double) * X);
  for (int q = 0; q < p->npparts; q++) memcpy(one->params[q], full->params[q], sizeof(double) * (size_t)p->pparts[q].numel);
  int off = 0;
  for (int q = 0; q < p->nsparts; q++) {
    int n = p->sparts[q].size;
    const double *h = full->states[q] + ((size_t)t * full->B + b) * n;
    for (int i = 0; i < S; i++) {
      memcpy(one->h0[q] + (size_t)i * n, h, sizeof(double) * n);
      for (int j = 0; j < n; j++) one->dfinal[q][(size_t)i * n + j] = i == off + j ? 1.0 : 0.0;
    }
    off += n;
  }
  memset(one->dy, 0, sizeof(double) * (size_t)S * (size_t)p->output_size);
  diag_seq_run(L, one, true);
  off = 0;
  for (int q = 0; q < p->nsparts; q++) {
    int n = p->sparts[q].size;
    for (int i = 0; i < S; i++) memcpy(J + (size_t)i * S + off, one->gh0[q] + (size_t)i * n, sizeof(double) * n);
    off += n;
  }
}

void diag_seq_fill(const DiagLayer *L, DiagSeq *s, Model *m, int k, int B) {
  ModelLayerView v;
  model_layer_view(m, k, &v);
  const Program *p = L->p;
  for (int t = 0; t < s->T; t++)
    for (int b = 0; b < s->B; b++) {
      size_t src = (size_t)t * B + b, dst = (size_t)t * s->B + b;
      for (int j = 0; j < v.in; j++) s->x[dst * v.in + j] = v.x[src * v.in + j];
      for (int j = 0; j < v.out; j++) s->dy[dst * v.out + j] = v.dy[src * v.out + j];
    }
  for (int q = 0; q < p->npparts; q++) {
    ModelTensor *t = model_tensor(m, v.first + p->pparts[q].param);
    for (int j = 0; j < p->pparts[q].numel; j++) s->params[q][j] = t->val[p->pparts[q].part][j];
  }
  for (int q = 0; q < p->nsparts; q++)
    for (int j = 0; j < s->B * p->sparts[q].size; j++) s->h0[q][j] = v.h0[q][j];
}

void diag_grad_norms(const DiagLayer *L, const DiagSeq *s, double *out) {
  const Program *p = L->p;
  for (int t = 1; t <= s->T; t++)
    for (int b = 0; b < s->B; b++) {
      double g2 = 0;
      for (int q = 0; q < p->nsparts; q++) {
        int n = p->sparts[q].size;
        const double *dh = s->dstates[q] + ((size_t)t * s->B + b) * n;
        for (int j = 0; j < n; j++) g2 += dh[j] * dh[j];
      }
      out[(size_t)(t - 1) * s->B + b] = sqrt(g2);
    }
}
