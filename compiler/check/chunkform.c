/* chunkform.c: recognizes, per state, the gated outer-product recurrence that runs in the
 * chunkwise-parallel form (docs/language.md, "The chunked form"):
 *   S = a * S_prev + sum_i key_i (x) val_i      (per head; a constant along the value axis)
 *   every read of S's new value: a product contracting S's key axis with a state-free vector.
 * It reads the typed graph after the analysis (StateInfo.coef_a, coef_b) and adds no nodes: the
 * pieces are recorded as the graph's own nodes (StateInfo.chunk), so the lowering of every other
 * mode is untouched. */
#include "check.h"

#include <stdio.h>
#include <string.h>

static Node *nd(Cell *c, int id) { return graph_node(&c->g, id); }

static bool is_one(const Cell *c, int dim) {
  long v;
  return dims_is_const(&c->dt, dim, &v) && v == 1;
}

/* Whether node id reaches a previous value or a new value of a state, other than a history's
 * past through LAG (state-free values run before the chunk op, over all rows). */
static bool state_free(Cell *c, int id, signed char *memo) {
  if (memo[id] >= 0) return memo[id];
  Node *n = nd(c, id);
  bool r = true;
  if (n->op == OP_PREV || n->op == OP_NEWVAL) r = false;
  else if (n->op != OP_LAG)
    for (int i = 0; i < op_arity(n->op) && r; i++)
      if (n->a[i] >= 0 && !state_free(c, n->a[i], memo)) r = false;
  memo[id] = r;
  return r;
}

static int all_axes(Cell *c, const Node *n) {
  int m = 0;
  for (int i = 0; i < n->rank; i++)
    if (!is_one(c, n->dim[i])) m |= 1 << i;
  return m;
}

/* The axes of node id's value along which it may vary (bit i: axis i), conservatively: constants
 * vary along none, a broadcast along none of the added axes, an elementwise op along its
 * arguments', a reshape that only adds or drops axes of size 1 along the moved ones; anything else
 * along all (but those of size 1). */
static int vary(Cell *c, int id, int *memo);

/* vary of argument a, aligned to the trailing axes of a value of rank R (broadcast) */
static int vary_to(Cell *c, int a, int R, int *memo) {
  Node *x = nd(c, a);
  int m = vary(c, a, memo), out = 0, off = R - x->rank;
  for (int i = 0; i < x->rank; i++)
    if ((m >> i & 1) && i + off >= 0) out |= 1 << (i + off);
  return out;
}

/* memo: per node, its axes, or -1 (a shared subexpression is looked at once) */
static int vary(Cell *c, int id, int *memo) {
  if (memo[id] >= 0) return memo[id];
  Node n = *nd(c, id);
  int all = all_axes(c, &n), r;
  switch (n.op) {
  case OP_CONST: case OP_DIMVAL: case OP_BCAST: r = 0; break;
  case OP_EXPAND: r = vary_to(c, n.a[0], n.rank, memo) & all; break;
  case OP_RESHAPE: {
    Node x = *nd(c, n.a[0]);
    int xs[MAX_RANK], ns[MAX_RANK], nx = 0, nn = 0; /* the axes of size other than 1, in order */
    for (int i = 0; i < x.rank; i++)
      if (!is_one(c, x.dim[i])) xs[nx++] = i;
    for (int i = 0; i < n.rank; i++)
      if (!is_one(c, n.dim[i])) ns[nn++] = i;
    bool moved = nx == nn;
    for (int i = 0; moved && i < nx; i++) moved = x.dim[xs[i]] == n.dim[ns[i]];
    r = moved ? 0 : all;
    int m = moved ? vary(c, n.a[0], memo) : 0;
    for (int i = 0; moved && i < nx; i++)
      if (m >> xs[i] & 1) r |= 1 << ns[i];
    break;
  }
  default:
    r = op_is_elementwise(n.op) ? 0 : all;
    for (int i = 0; op_is_elementwise(n.op) && i < op_arity(n.op); i++)
      if (n.a[i] >= 0) r |= vary_to(c, n.a[i], n.rank, memo);
    r &= all;
  }
  memo[id] = r;
  return r;
}

typedef struct Rec {
  Cell *c;
  StateInfo *s;
  int key, val;      /* bits of the key and value axes */
  signed char *free; /* state_free's memo */
  int *vmemo;        /* vary's */
  char why[200];
} Rec;

static bool add_factor(Rec *r, ChunkTerm *t, int id, bool inv) {
  int m = vary_to(r->c, id, r->s->rank, r->vmemo) & (r->key | r->val);
  Node n = *nd(r->c, id);
  if (m == (r->key | r->val)) {
    if (n.op == OP_MUL) return add_factor(r, t, n.a[0], inv) && add_factor(r, t, n.a[1], inv);
    if (n.op == OP_DIV) return add_factor(r, t, n.a[0], inv) && add_factor(r, t, n.a[1], !inv);
    if (n.op == OP_NEG) {
      t->sign = -t->sign;
      return add_factor(r, t, n.a[0], inv);
    }
    snprintf(r->why, sizeof r->why, "a term of its update is not a product of per-key and per-value factors (%s)", op_text(n.op));
    return false;
  }
  if (t->nf == CHUNK_MAX_FACTORS) {
    snprintf(r->why, sizeof r->why, "a term of its update has more than %d factors", CHUNK_MAX_FACTORS);
    return false;
  }
  t->factor[t->nf] = id, t->role[t->nf] = m == 0 ? 0 : m == r->key ? 1 : 2, t->inv[t->nf] = inv;
  t->nf++;
  return true;
}

static bool add_terms(Rec *r, int id, int sign) {
  Node n = *nd(r->c, id);
  if (n.op == OP_ADD) return add_terms(r, n.a[0], sign) && add_terms(r, n.a[1], sign);
  if (n.op == OP_SUB) return add_terms(r, n.a[0], sign) && add_terms(r, n.a[1], -sign);
  if (n.op == OP_NEG) return add_terms(r, n.a[0], -sign);
  ChunkInfo *ci = &r->s->chunk;
  if (ci->nterms == CHUNK_MAX_TERMS) {
    snprintf(r->why, sizeof r->why, "its update adds more than %d terms", CHUNK_MAX_TERMS);
    return false;
  }
  ChunkTerm *t = &ci->terms[ci->nterms++];
  memset(t, 0, sizeof *t);
  t->sign = sign;
  return add_factor(r, t, id, false);
}

/* vec as the state-free vector of a product contracting an axis of size `dim` of a [NH, m, n]
 * value: [dim], or per head [NH, dim, 1] (right operand) / [NH, 1, dim] (left operand) */
static bool is_vector(Rec *r, int vec, int dim, bool right) {
  Node *v = nd(r->c, vec);
  if (!state_free(r->c, vec, r->free)) return false;
  if (v->rank == 1) return v->dim[0] == dim;
  if (v->rank != r->s->rank) return false;
  int R = v->rank;
  return right ? v->dim[R - 2] == dim && is_one(r->c, v->dim[R - 1]) : v->dim[R - 1] == dim && is_one(r->c, v->dim[R - 2]);
}

/* A read of the new value through node `user` (its argument `arg`, S or transpose(S)); sets the
 * key axis it contracts. */
static bool add_read(Rec *r, int user, int arg, bool transposed, int *key_axis) {
  Node u = *nd(r->c, user);
  int R = r->s->rank;
  ChunkInfo *ci = &r->s->chunk;
  if (u.op != OP_MATMUL || (u.a[0] == arg) == (u.a[1] == arg)) {
    snprintf(r->why, sizeof r->why, "its new value is read other than by a product with a state-free vector (%s)", op_text(u.op));
    return false;
  }
  bool left = u.a[0] == arg;
  int vec = left ? u.a[1] : u.a[0];
  /* S @ w contracts S's last axis, w @ S its second last; transpose swaps them */
  int axis = left ? R - 1 : R - 2;
  if (transposed) axis = axis == R - 1 ? R - 2 : R - 1;
  if (!is_vector(r, vec, r->s->dim[axis], left)) {
    snprintf(r->why, sizeof r->why, "its new value is read by a product whose other operand is not a state-free vector");
    return false;
  }
  if (*key_axis >= 0 && *key_axis != axis) {
    snprintf(r->why, sizeof r->why, "its reads contract different axes");
    return false;
  }
  if (ci->nreads == CHUNK_MAX_READS) {
    snprintf(r->why, sizeof r->why, "its new value is read more than %d times", CHUNK_MAX_READS);
    return false;
  }
  *key_axis = axis;
  ci->reads[ci->nreads++] = (ChunkRead){user, vec, left, transposed};
  return true;
}

static void mark(Cell *c, int id, bool *live) {
  if (id < 0 || live[id]) return;
  live[id] = true;
  Node *n = nd(c, id);
  for (int i = 0; i < op_arity(n->op); i++) mark(c, n->a[i], live);
}

/* ---- the delta rule: a matrix-linear update as terms linear in S_prev ---- */

typedef struct Lin {
  int nid, nproj;
  ChunkTerm id;          /* a * S_prev: a's factors */
  int col, row;          /* the projection's vectors: (S_prev @ col) @ row, or col @ (row @ S_prev) */
  int axis;              /* the state axis the projection contracts */
  bool *seen;            /* the nodes of the update the expansion went through */
} Lin;

/* node id with its reshapes (unsqueeze, flatten) and broadcasts taken off: two values of the same
 * shape with the same base hold the same elements in the same places (a reshape keeps the
 * row-major order) */
static int base(Cell *c, int id) {
  while (nd(c, id)->op == OP_RESHAPE || nd(c, id)->op == OP_EXPAND) id = nd(c, id)->a[0];
  return id;
}

static bool lin_factor(Rec *r, ChunkTerm *t, int id, bool inv) {
  if (t->nf == CHUNK_MAX_FACTORS) return snprintf(r->why, sizeof r->why, "a term of its update has more than %d factors", CHUNK_MAX_FACTORS), false;
  if (vary_to(r->c, id, r->s->rank, r->vmemo) & (r->key | r->val))
    return snprintf(r->why, sizeof r->why, "matrix-linear, but a coefficient of its previous value varies along its last two axes"), false;
  t->factor[t->nf] = id, t->role[t->nf] = 0, t->inv[t->nf] = inv, t->nf++;
  return true;
}

/* id, times the factors fac (inv: divisors) and sign: its terms into x (S_prev, the projection) and
 * r->s->chunk (the state-free terms) */
static bool expand(Rec *r, Lin *x, int id, int sign, const int *fac, const bool *inv, int nf) {
  Cell *c = r->c;
  Node n = *nd(c, id);
  x->seen[id] = true;
  if (state_free(c, id, r->free)) {
    if (!add_terms(r, id, sign)) return false;
    ChunkTerm *t = &r->s->chunk.terms[r->s->chunk.nterms - 1];
    for (int i = 0; i < nf; i++)
      if (!add_factor(r, t, fac[i], inv[i])) return false;
    return true;
  }
  int f2[CHUNK_MAX_FACTORS + 1];
  bool i2[CHUNK_MAX_FACTORS + 1];
  for (int i = 0; i < nf; i++) f2[i] = fac[i], i2[i] = inv[i];
  switch (n.op) {
  case OP_ADD: return expand(r, x, n.a[0], sign, fac, inv, nf) && expand(r, x, n.a[1], sign, fac, inv, nf);
  case OP_SUB: return expand(r, x, n.a[0], sign, fac, inv, nf) && expand(r, x, n.a[1], -sign, fac, inv, nf);
  case OP_NEG: return expand(r, x, n.a[0], -sign, fac, inv, nf);
  case OP_MUL: case OP_DIV: {
    bool free0 = state_free(c, n.a[0], r->free), free1 = state_free(c, n.a[1], r->free);
    if (nf == CHUNK_MAX_FACTORS) break;
    if (free1) f2[nf] = n.a[1], i2[nf] = n.op == OP_DIV;
    else if (free0 && n.op == OP_MUL) f2[nf] = n.a[0], i2[nf] = false;
    else break;
    return expand(r, x, free1 ? n.a[0] : n.a[1], sign, f2, i2, nf + 1);
  }
  case OP_PREV: {
    if (n.idx != (int)(r->s - c->states)) break;
    x->nid++;
    memset(&x->id, 0, sizeof x->id);
    x->id.sign = sign;
    for (int i = 0; i < nf; i++)
      if (!lin_factor(r, &x->id, fac[i], inv[i])) return false;
    return true;
  }
  case OP_MATMUL: { /* (S_prev @ col) @ row, or col @ (row @ S_prev) */
    Node a = *nd(c, n.a[0]), b = *nd(c, n.a[1]);
    int R = r->s->rank;
    bool right = a.op == OP_MATMUL && nd(c, a.a[0])->op == OP_PREV && nd(c, a.a[0])->idx == (int)(r->s - c->states);
    bool left = b.op == OP_MATMUL && nd(c, b.a[1])->op == OP_PREV && nd(c, b.a[1])->idx == (int)(r->s - c->states);
    if (!right && !left) break;
    x->nproj++;
    x->col = right ? a.a[1] : n.a[0], x->row = right ? n.a[1] : b.a[0];
    x->axis = right ? R - 1 : R - 2;
    x->seen[right ? n.a[0] : n.a[1]] = true;
    memset(&r->s->chunk.proj, 0, sizeof r->s->chunk.proj);
    r->s->chunk.proj.sign = sign;
    for (int i = 0; i < nf; i++)
      if (!lin_factor(r, &r->s->chunk.proj, fac[i], inv[i])) return false;
    return true;
  }
  default: break;
  }
  snprintf(r->why, sizeof r->why, "matrix-linear, but not the delta rule (a decay, a projection (S @ k) @ k^T and outer products): it reads its previous value through %s",
           op_text(n.op));
  return false;
}

/* A matrix-linear state as the delta rule: S = a * S_prev + c * (S_prev @ k) @ k^T + outer(v, k)
 * (or its transpose, k^T S_prev), a and c per head, the one input term's key the projection's k. */
static bool recognize_delta(Rec *r, const bool *live, int key_axis) {
  Cell *c = r->c;
  StateInfo *s = r->s;
  ChunkInfo *ci = &s->chunk;
  int si = (int)(s - c->states);
  Lin x = {.seen = xcalloc((size_t)c->g.nnodes + 1, sizeof(bool))};
  bool ok = expand(r, &x, nd(c, s->update)->a[0], 1, NULL, NULL, 0);
  for (int id = 0; ok && id < c->g.nnodes; id++) { /* S_prev read only by the update */
    if (!live[id] || x.seen[id] || id == s->update) continue;
    Node *u = nd(c, id);
    for (int i = 0; i < op_arity(u->op); i++)
      if (u->a[i] >= 0 && nd(c, u->a[i])->op == OP_PREV && nd(c, u->a[i])->idx == si) {
        snprintf(r->why, sizeof r->why, "its previous value is read outside its update");
        ok = false;
      }
  }
  free(x.seen);
  if (!ok) return false;
  int K = s->dim[key_axis];
  if (x.nid != 1 || x.id.sign < 0 || x.id.nf > 1 || (x.id.nf && x.id.inv[0]))
    return snprintf(r->why, sizeof r->why, "matrix-linear, but its previous value is not kept as one decay a * S (a per head)"), false;
  if (x.nproj != 1 || x.axis != key_axis)
    return snprintf(r->why, sizeof r->why, "matrix-linear, but not one projection (S @ k) @ k^T along the axis its reads contract"), false;
  if (!is_vector(r, x.col, K, true) || !is_vector(r, x.row, K, false) || base(c, x.col) != base(c, x.row))
    return snprintf(r->why, sizeof r->why, "matrix-linear, but its projection is not (S @ k) @ k^T with one state-free k"), false;
  int nkey = 0;
  bool same = ci->nterms == 1;
  for (int f = 0; same && f < ci->terms[0].nf; f++)
    if (ci->terms[0].role[f] == 1) nkey++, same = !ci->terms[0].inv[f] && base(c, ci->terms[0].factor[f]) == base(c, x.col);
  if (!same || nkey != 1)
    return snprintf(r->why, sizeof r->why, "matrix-linear, but it adds other than one outer product with the projection's k"), false;
  ci->delta = true;
  ci->proj_key = base(c, x.col);
  ci->decay = x.id.nf ? CHUNK_DECAY_SCALAR : CHUNK_DECAY_NONE;
  ci->decay_node = x.id.nf ? x.id.factor[0] : -1;
  return true;
}

static bool recognize(Rec *r, const bool *live) {
  Cell *c = r->c;
  StateInfo *s = r->s;
  ChunkInfo *ci = &s->chunk;
  if (s->rank < 2) return snprintf(r->why, sizeof r->why, "not a matrix state"), false;
  if (s->cplx) return snprintf(r->why, sizeof r->why, "complex"), false;
  if (s->rec != REC_DIAG_LINEAR && s->rec != REC_MATRIX_LINEAR) return snprintf(r->why, sizeof r->why, "nonlinear"), false;
  if (c->scan_blocker >= 0 && c->g.nodes[c->scan_blocker].idx == (int)(s - c->states))
    return snprintf(r->why, sizeof r->why, "its previous value is read outside its update"), false;
  /* the reads of the new value, among the values the cell computes */
  int key_axis = -1;
  for (int id = 0; id < c->g.nnodes; id++) {
    if (!live[id]) continue;
    Node u = *nd(c, id);
    for (int i = 0; i < op_arity(u.op); i++) {
      if (u.a[i] != s->update) continue;
      if (u.op == OP_TRANSPOSE) {
        for (int j = 0; j < c->g.nnodes; j++) {
          if (!live[j]) continue;
          Node *w = nd(c, j);
          if ((w->a[0] == id && op_arity(w->op) > 0) || (w->a[1] == id && op_arity(w->op) > 1))
            if (!add_read(r, j, id, true, &key_axis)) return false;
        }
      } else if (!add_read(r, id, s->update, false, &key_axis))
        return false;
      break;
    }
  }
  if (key_axis < 0) return snprintf(r->why, sizeof r->why, "its new value is never read"), false;
  int R = s->rank;
  ci->key_axis = key_axis, ci->value_axis = key_axis == R - 1 ? R - 2 : R - 1;
  r->key = 1 << ci->key_axis, r->val = 1 << ci->value_axis;
  if (s->rec == REC_MATRIX_LINEAR) {
    if (ci->nreads != 1) return snprintf(r->why, sizeof r->why, "the delta rule's new value is read more than once"), false;
    return recognize_delta(r, live, key_axis);
  }
  /* the decay: constant along the value axis */
  ci->decay_node = s->coef_a;
  if (s->coef_a < 0) ci->decay = CHUNK_DECAY_NONE;
  else {
    if (!state_free(c, s->coef_a, r->free)) return snprintf(r->why, sizeof r->why, "its decay reads a state"), false;
    int m = vary_to(c, s->coef_a, R, r->vmemo) & (r->key | r->val);
    if (m == (r->key | r->val)) return snprintf(r->why, sizeof r->why, "its decay varies along both of its last two axes"), false;
    if (m == r->val) return snprintf(r->why, sizeof r->why, "its decay varies along the value axis, not the key axis its reads contract"), false;
    ci->decay = m ? CHUNK_DECAY_KEY : CHUNK_DECAY_SCALAR;
  }
  /* the input: a sum of rank-1 terms */
  if (s->coef_b < 0) return snprintf(r->why, sizeof r->why, "its update adds nothing"), false;
  if (!state_free(c, s->coef_b, r->free)) return snprintf(r->why, sizeof r->why, "its input term reads a state"), false;
  return add_terms(r, s->coef_b, 1);
}

void chunk_analyze(Cell *c) {
  int nn = c->g.nnodes;
  bool *live = xcalloc((size_t)nn + 1, sizeof(bool));
  signed char *memo = xmalloc((size_t)nn + 1);
  memset(memo, -1, (size_t)nn + 1);
  int *vmemo = xmalloc(sizeof(int) * ((size_t)nn + 1));
  for (int i = 0; i <= nn; i++) vmemo[i] = -1;
  if (c->output >= 0) mark(c, c->output, live);
  for (int i = 0; i < c->nstates; i++) mark(c, c->states[i].update, live);
  for (int i = 0; i < c->ngates; i++) mark(c, c->gates[i].node, live);
  for (int i = 0; i < c->nstates; i++) {
    StateInfo *s = &c->states[i];
    memset(&s->chunk, 0, sizeof s->chunk);
    s->chunk.key_axis = s->chunk.value_axis = s->chunk.decay_node = -1;
    if (s->hist_lag) continue;
    Rec r = {c, s, 0, 0, memo, vmemo, ""};
    s->chunk.applies = recognize(&r, live);
    if (!s->chunk.applies) {
      s->chunk.nterms = s->chunk.nreads = 0;
      memcpy(s->chunk.why, r.why, sizeof r.why);
    }
  }
  free(live);
  free(memo);
  free(vmemo);
}

const char *chunk_mode_blocker(const Cell *c, int *state, char *buf, int size) {
  bool any = false;
  for (int i = 0; i < c->nstates; i++) {
    const StateInfo *s = &c->states[i];
    if (s->hist_lag) continue;
    *state = i;
    if (s->rank >= 2 && !s->chunk.applies) {
      snprintf(buf, (size_t)size, "the chunked form does not apply to state '%s': %s", s->name, s->chunk.why);
      return buf;
    }
    if (s->rank < 2 && s->rec != REC_DIAG_LINEAR) {
      snprintf(buf, (size_t)size, "state '%s' is %s (a chunked cell's vector states run as scans)", s->name, recurrence_name(s->rec));
      return buf;
    }
    any = any || s->chunk.applies;
  }
  if (!any) {
    *state = -1;
    snprintf(buf, (size_t)size, "no state has the chunked form (a decayed sum of outer products read by products with vectors)");
    return buf;
  }
  return NULL;
}

ChunkCost chunk_cost(const Cell *c, const StateInfo *s, int L) {
  (void)c;
  ChunkCost k = {{0}, {0}};
  const ChunkInfo *ci = &s->chunk;
  double H = s->rank == 3 ? s->n[0] : 1, K = s->n[ci->key_axis], V = s->n[ci->value_axis];
  double ka = ci->decay == CHUNK_DECAY_KEY ? K : ci->decay == CHUNK_DECAY_SCALAR ? 1 : 0;
  double vec = 2 * K + 2 * V + ka; /* q, k, v and o, the decay */
  if (L < 1) L = 1;
  k.flops[0] = H * 5 * K * V;
  k.bytes[0] = 4 * H * (2 * K * V + vec);
  k.flops[1] = H * 5 * K * V;
  k.bytes[1] = 4 * H * (6 * K * V + vec);
  k.flops[2] = H * (2.0 * L * (K + V) + 4 * K * V + (ci->decay == CHUNK_DECAY_KEY ? (double)L * K : 0));
  k.bytes[2] = 4 * H * (vec + 2 * K * V / L);
  if (ci->delta) { /* S^T k, the update and the read a step; no scan (a matrix product a step);
                      chunked: K K^T and Q K^T (causal halves), the solve and P U, K S_0, Q S_0, S's update */
    vec += 1;
    k.flops[0] = H * 7 * K * V, k.bytes[0] = 4 * H * (2 * K * V + vec);
    k.flops[1] = k.bytes[1] = -1;
    k.flops[2] = H * (2.0 * L * (K + V) + 6 * K * V), k.bytes[2] = 4 * H * (vec + 2 * K * V / L);
  }
  return k;
}

bool chunk_cheaper(const Cell *c, int L) {
  /* a way's time per token as flops / F + bytes / W, with F / W the machine's float32 FMA rate
     over its memory bandwidth in flops per byte (CHUNK_BALANCE); the other way is the mode the
     analysis found (scan or sequential) */
  double other = 0, chunked = 0;
  int way = c->mode == MODE_SCAN ? 1 : 0;
  for (int i = 0; i < c->nstates; i++) {
    const StateInfo *s = &c->states[i];
    if (s->hist_lag || !s->chunk.applies) continue;
    ChunkCost k = chunk_cost(c, s, L);
    if (k.flops[way] < 0) way = 0;
    other += k.flops[way] + CHUNK_BALANCE * k.bytes[way];
    chunked += k.flops[2] + CHUNK_BALANCE * k.bytes[2];
  }
  return chunked < other;
}
