/* export_gen.c: a cell layer's evaluation step as C and as Python over torch (export_gen.h). Every
 * op of the forward real graph has the meaning of compiler/ir/eval_node.h; the elementwise ops'
 * C text is the op table's own (op_c_expr), so the C step computes what the interpreter computes,
 * in float32. */
#include "export_gen.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static int numel_of(const Program *p, int id) { return node_numel(&p->g.nodes[id]); }
static const Node *nd(const StepGen *g, int id) { return &g->p->g.nodes[id]; }

/* A view's counts and strides as three axes, the leading ones of length 1 */
static void view_axes(const Node *x, int vn[MAX_RANK], int st[MAX_RANK]) {
  for (int d = 0; d < MAX_RANK; d++) vn[d] = 1, st[d] = 0;
  for (int d = 0; d < x->rank; d++) vn[MAX_RANK - x->rank + d] = x->n[d], st[MAX_RANK - x->rank + d] = x->st[d];
}

/* A reduction over axis x->idx of its operand y as [outer, len, inner] */
static void reduce_axes(const Node *x, const Node *y, int *outer, int *len, int *inner) {
  *outer = 1, *inner = 1, *len = y->n[x->idx];
  for (int d = 0; d < x->idx; d++) *outer *= y->n[d];
  for (int d = x->idx + 1; d < y->rank; d++) *inner *= y->n[d];
}

static void mark_front(StepGen *g, int id) {
  if (nd(g, id)->op == OP_SLICE) mark_front(g, nd(g, id)->a[0]);
  else g->front[id] = true;
}

static void mark_live(StepGen *g, int id) {
  if (g->live[id]) return;
  g->live[id] = true;
  for (int i = 0; i < op_arity(nd(g, id)->op); i++) mark_live(g, nd(g, id)->a[i]);
}

static StepGen *stepgen_make(Program *p, bool gates, char *err, size_t errlen) {
  StepGen *g = xcalloc(1, sizeof *g);
  g->p = p;
  g->gates = gates;
  g->nn = p->nforward > 0 ? p->nforward : p->g.nnodes;
  int n = p->g.nnodes;
  g->kind = xcalloc((size_t)n + 1, 1);
  g->live = xcalloc((size_t)n + 1, sizeof(bool));
  g->front = xcalloc((size_t)n + 1, sizeof(bool));
  g->off = xcalloc((size_t)n + 1, sizeof(int));
  g->toff = xcalloc((size_t)n + 1, sizeof(int));
  g->spart_off = xcalloc((size_t)p->nsparts + 1, sizeof(int));
  for (int q = 0; q < p->nsparts; q++) g->spart_off[q] = g->state_size, g->state_size += p->sparts[q].size;
  mark_live(g, p->output);
  for (int q = 0; q < p->nsparts; q++) mark_live(g, p->sparts[q].next);
  for (int i = 0; gates && i < p->ngates; i++) mark_live(g, p->gates[i].node);
  for (int id = 0; id < n; id++) {
    const Node *x = nd(g, id);
    g->toff[id] = -1;
    if (!g->live[id]) continue;
    char k = 'S';
    switch (x->op) {
    case OP_INPUT: k = 'I'; break;
    case OP_PREV: k = 'X'; break;
    case OP_PARAM: case OP_CONST: k = 'S'; break;
    case OP_NOISE: case OP_DY: case OP_DNEW: case OP_ACC:
      snprintf(err, errlen, "the evaluation step reads %s, which an export cannot supply", op_name(x->op));
      stepgen_free(g);
      return NULL;
    default:
      if (op_is_elementwise(x->op)) break;
      switch (x->op) {
      case OP_BCAST: case OP_SUM: case OP_CONCAT: case OP_SLICE: case OP_MATVEC: case OP_MATVEC_T: case OP_OUTER:
      case OP_VIEW: case OP_RSUM: case OP_RMAX: case OP_BMM: break;
      default:
        snprintf(err, errlen, "op %s has no exported form", op_name(x->op));
        stepgen_free(g);
        return NULL;
      }
    }
    for (int i = 0; i < op_arity(x->op); i++) {
      char a = g->kind[x->a[i]];
      if (a == 'X' || (a == 'I' && k == 'S')) k = a;
    }
    g->kind[id] = k;
  }
  /* the frontier: input nodes the state part reads, and outputs that read no state */
  for (int id = 0; id < n; id++) {
    if (!g->live[id] || g->kind[id] != 'X') continue;
    for (int i = 0; i < op_arity(nd(g, id)->op); i++)
      if (g->kind[nd(g, id)->a[i]] == 'I') mark_front(g, nd(g, id)->a[i]);
  }
  if (g->kind[p->output] == 'I') mark_front(g, p->output);
  for (int q = 0; q < p->nsparts; q++)
    if (g->kind[p->sparts[q].next] == 'I') mark_front(g, p->sparts[q].next);
  for (int i = 0; gates && i < p->ngates; i++)
    if (g->kind[p->gates[i].node] == 'I') mark_front(g, p->gates[i].node);
  for (int id = 0; id < n; id++) {
    const Node *x = nd(g, id);
    if (!g->live[id] || x->op == OP_SLICE || x->op == OP_PARAM || x->op == OP_PREV) continue;
    int e = numel_of(p, id);
    if (g->kind[id] == 'S') g->off[id] = g->static_size, g->static_size += e;
    else if (g->front[id]) g->off[id] = g->front_size, g->front_size += e;
    else if (x->op != OP_INPUT) g->off[id] = g->scratch_size, g->scratch_size += e;
    /* a product of a static matrix per row: its transposed copy, made once */
    if (x->op == OP_MATVEC && g->kind[id] != 'S' && g->kind[x->a[0]] == 'S' && g->toff[x->a[0]] < 0) {
      g->static_size = (g->static_size + 15) / 16 * 16; /* on a cache line, as the 64-byte aligned S is */
      g->toff[x->a[0]] = g->static_size;
      g->static_size += numel_of(p, x->a[0]);
    }
  }
  g->scratch_size += g->state_size; /* the new states, gathered before they replace the old */
  return g;
}

StepGen *stepgen_new(Program *p, char *err, size_t errlen) { return stepgen_make(p, false, err, errlen); }

StepGen *stepgen_new_gates(Program *p, char *err, size_t errlen) { return stepgen_make(p, true, err, errlen); }

void stepgen_free(StepGen *g) {
  if (!g) return;
  free(g->kind), free(g->live), free(g->front), free(g->off), free(g->toff), free(g->spart_off);
  free(g);
}

/* ---- C ---- */

/* Where node id's value is, seen from part `part` ('S', 'I', 'X'), as a C pointer expression. */
static void loc_c(const StepGen *g, int id, char part, char *buf, size_t n) {
  const Node *x = nd(g, id);
  if (x->op == OP_PARAM) {
    snprintf(buf, n, "P[%d]", x->idx);
  } else if (x->op == OP_PREV) {
    snprintf(buf, n, "(h + %d)", g->spart_off[x->idx]);
  } else if (x->op == OP_SLICE) {
    char a[256];
    loc_c(g, x->a[0], part, a, sizeof a);
    snprintf(buf, n, "(%.200s + %d)", a, x->idx);
  } else if (g->kind[id] == 'S') {
    snprintf(buf, n, "(S + %d)", g->off[id]);
  } else if (g->kind[id] == 'I') {
    if (x->op == OP_INPUT && part == 'I') snprintf(buf, n, "x");
    else if (g->front[id]) snprintf(buf, n, "(F + %d)", g->off[id]);
    else snprintf(buf, n, "(W + %d)", g->off[id]);
  } else {
    snprintf(buf, n, "(W + %d)", g->off[id]);
  }
}

static void node_c(const StepGen *g, FILE *f, int id, char part) {
  const Node *x = nd(g, id);
  const Program *p = g->p;
  int e = numel_of(p, id);
  char o[256], a[256] = "", b[256] = "";
  loc_c(g, id, part, o, sizeof o);
  if (x->op == OP_INPUT) snprintf(o, sizeof o, "(F + %d)", g->off[id]); /* its copy in the frontier (computed_in) */
  if (op_arity(x->op) > 0) loc_c(g, x->a[0], part, a, sizeof a);
  if (op_arity(x->op) > 1) loc_c(g, x->a[1], part, b, sizeof b);
  bool packed = x->op == OP_MATVEC && g->toff[x->a[0]] >= 0 && part != 'S';
  fprintf(f, "  { /* %d: %s */\n    float *o = %s;", id, op_name(x->op), o);
  if (op_arity(x->op) > 0 && !packed) fprintf(f, " const float *a = %s;", a);
  if (op_arity(x->op) > 1) fprintf(f, " const float *b = %s;", b);
  fprintf(f, "\n");
  switch (x->op) {
  case OP_INPUT: fprintf(f, "    memcpy(o, x, sizeof(float) * %d);\n", e); break;
  case OP_CONST: fprintf(f, "    for (int i = 0; i < %d; i++) o[i] = (float)%.17g;\n", e, x->k); break;
  case OP_BCAST: fprintf(f, "    for (int i = 0; i < %d; i++) o[i] = a[0];\n", e); break;
  case OP_SUM:
    fprintf(f, "    float s = 0;\n    for (int i = 0; i < %d; i++) s += a[i];\n    o[0] = s;\n", numel_of(p, x->a[0]));
    break;
  case OP_CONCAT: {
    int na = numel_of(p, x->a[0]);
    fprintf(f, "    memcpy(o, a, sizeof(float) * %d);\n    memcpy(o + %d, b, sizeof(float) * %d);\n", na, na, e - na);
    break;
  }
  case OP_MATVEC: {
    const Node *m = nd(g, x->a[0]);
    if (packed)
      fprintf(f, "    mv_t(o, S + %d, b, %d, %d);\n", g->toff[x->a[0]], m->n[0], m->n[1]);
    else
      fprintf(f, "    for (int r = 0; r < %d; r++) {\n      float s = 0;\n      for (int i = 0; i < %d; i++) s += a[r * %d + i] * b[i];\n"
                 "      o[r] = s;\n    }\n", m->n[0], m->n[1], m->n[1]);
    break;
  }
  case OP_MATVEC_T: {
    const Node *m = nd(g, x->a[0]);
    fprintf(f, "    for (int r = 0; r < %d; r++) {\n      float s = 0;\n      for (int i = 0; i < %d; i++) s += a[i * %d + r] * b[i];\n"
               "      o[r] = s;\n    }\n", m->n[1], m->n[0], m->n[1]);
    break;
  }
  case OP_OUTER:
    fprintf(f, "    for (int i = 0; i < %d; i++)\n      for (int j = 0; j < %d; j++) o[i * %d + j] = a[i] * b[j];\n", x->n[0], x->n[1], x->n[1]);
    break;
  case OP_VIEW: {
    int vn[MAX_RANK], st[MAX_RANK];
    view_axes(x, vn, st);
    fprintf(f, "    int j = 0;\n    for (int c0 = 0; c0 < %d; c0++)\n      for (int c1 = 0; c1 < %d; c1++)\n"
               "        for (int c2 = 0; c2 < %d; c2++) o[j++] = a[%d + c0 * %d + c1 * %d + c2 * %d];\n",
            vn[0], vn[1], vn[2], x->idx, st[0], st[1], st[2]);
    break;
  }
  case OP_RSUM:
  case OP_RMAX: {
    int outer, len, inner;
    reduce_axes(x, nd(g, x->a[0]), &outer, &len, &inner);
    fprintf(f, "    for (int u = 0; u < %d; u++)\n      for (int i = 0; i < %d; i++) {\n        const float *q = a + u * %d + i;\n"
               "        float s = q[0];\n        for (int l = 1; l < %d; l++) { float v = q[l * %d]; s = %s; }\n"
               "        o[u * %d + i] = s;\n      }\n",
            outer, inner, len * inner, len, inner, x->op == OP_RSUM ? "s + v" : "v > s ? v : s", inner);
    break;
  }
  case OP_BMM: {
    const Node *y = nd(g, x->a[0]);
    int nb = x->n[0], m = x->n[1], k = y->n[2], nn = x->n[2];
    fprintf(f, "    for (int bi = 0; bi < %d; bi++)\n      for (int i = 0; i < %d; i++)\n        for (int j = 0; j < %d; j++) {\n"
               "          float s = 0;\n          for (int l = 0; l < %d; l++) s += a[(bi * %d + i) * %d + l] * b[(bi * %d + l) * %d + j];\n"
               "          o[(bi * %d + i) * %d + j] = s;\n        }\n",
            nb, m, nn, k, m, k, k, nn, m, nn);
    break;
  }
  default: {
    /* the sigmoid with nothing left to branch on, so that its loop vectorizes */
    char *ex = x->op == OP_SIGMOID ? xstrdup("cx_sigmoidf(a[i])") : op_c_expr(x->op, "a[i]", "b[i]", true);
    fprintf(f, "    for (int i = 0; i < %d; i++) o[i] = ", e);
    /* exp and tanh as the helpers' (vectorizable) forms; every other function as the op table has it */
    for (const char *c = ex; *c; c++) {
      bool word = c == ex || !(isalnum((unsigned char)c[-1]) || c[-1] == '_');
      if (word && !strncmp(c, "expf(", 5)) fputs("cx_expf(", f), c += 4;
      else if (word && !strncmp(c, "tanhf(", 6)) fputs("cx_tanhf(", f), c += 5;
      else fputc(*c, f);
    }
    fputs(";\n", f);
    free(ex);
  }
  }
  fprintf(f, "  }\n");
}

/* Whether node id gets code of its own in part `part`. */
static bool computed_in(const StepGen *g, int id, char part) {
  const Node *x = nd(g, id);
  if (!g->live[id] || g->kind[id] != part || x->op == OP_SLICE || x->op == OP_PARAM || x->op == OP_PREV) return false;
  if (x->op == OP_INPUT) return g->front[id];
  return true;
}

void stepgen_c_helpers(FILE *f) {
  fputs("/* y = W v for W [O, I], from W packed by mv_pack: panels of 128 outputs (then 16, then 1), each\n"
        " * panel [I, width] contiguous, so that a panel streams through the cache in order; each y[o] is\n"
        " * summed in i order (as the naive loop sums), the panel's sums kept in registers. */\n"
        "typedef float mv_v16 __attribute__((vector_size(64), aligned(4)));\n"
        "static void mv_pack(float *dst, const float *w, int O, int I) {\n"
        "  int o = 0;\n"
        "  for (int width = 128; width >= 1; width = width == 128 ? 16 : width == 16 ? 1 : 0)\n"
        "    for (; o + width <= O; o += width)\n"
        "      for (int i = 0; i < I; i++)\n"
        "        for (int j = 0; j < width; j++) *dst++ = w[(size_t)(o + j) * I + i];\n"
        "}\n"
        "static void mv_t(float *y, const float *p, const float *v, int O, int I) {\n"
        "  int o = 0;\n"
        "  for (; o + 128 <= O; o += 128, p += (size_t)128 * I) {\n"
        "    mv_v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0};\n"
        "    for (int i = 0; i < I; i++) {\n"
        "      const float *w = p + (size_t)i * 128;\n"
        "      float c = v[i];\n"
        "      s0 += *(const mv_v16 *)(w) * c, s1 += *(const mv_v16 *)(w + 16) * c;\n"
        "      s2 += *(const mv_v16 *)(w + 32) * c, s3 += *(const mv_v16 *)(w + 48) * c;\n"
        "      s4 += *(const mv_v16 *)(w + 64) * c, s5 += *(const mv_v16 *)(w + 80) * c;\n"
        "      s6 += *(const mv_v16 *)(w + 96) * c, s7 += *(const mv_v16 *)(w + 112) * c;\n"
        "    }\n"
        "    *(mv_v16 *)(y + o) = s0, *(mv_v16 *)(y + o + 16) = s1, *(mv_v16 *)(y + o + 32) = s2, *(mv_v16 *)(y + o + 48) = s3;\n"
        "    *(mv_v16 *)(y + o + 64) = s4, *(mv_v16 *)(y + o + 80) = s5, *(mv_v16 *)(y + o + 96) = s6, *(mv_v16 *)(y + o + 112) = s7;\n"
        "  }\n"
        "  for (; o + 16 <= O; o += 16, p += (size_t)16 * I) {\n"
        "    mv_v16 s = {0};\n"
        "    for (int i = 0; i < I; i++) s += *(const mv_v16 *)(p + (size_t)i * 16) * v[i];\n"
        "    *(mv_v16 *)(y + o) = s;\n"
        "  }\n"
        "  for (; o < O; o++, p += I) {\n"
        "    float s = 0;\n"
        "    for (int i = 0; i < I; i++) s += p[i] * v[i];\n"
        "    y[o] = s;\n"
        "  }\n"
        "}\n\n"
        "/* exp, sigmoid and tanh without branches or calls, so that the elementwise loops vectorize: exp\n"
        " * to about 2 ulp (2^n times a degree-6 polynomial on [-ln2/2, ln2/2]), the sigmoid as the op\n"
        " * table's stable form (e^-|x| on either side), tanh to about 1e-7 (its series below 0.3,\n"
        " * 1 - 2 / (e^2|x| + 1) above). */\n"
        "static inline float cx_expf(float x) {\n"
        "  x = x < -87.3f ? -87.3f : x > 88.7f ? 88.7f : x;\n"
        "  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest, no call */\n"
        "  float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;\n"
        "  float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667163372039795f + r * (0.041666645556688308716f +\n"
        "            r * (0.0083333803713321685791f + r * 0.0013888889225199818611f)))));\n"
        "  int e = ((int)n + 127) << 23;\n"
        "  float s;\n"
        "  memcpy(&s, &e, sizeof s);\n"
        "  return p * s;\n"
        "}\n"
        "static inline float cx_sigmoidf(float x) {\n"
        "  float e = cx_expf(x < 0 ? x : -x), p = 1.0f / (1.0f + e);\n"
        "  return x >= 0 ? p : e * p;\n"
        "}\n"
        "static inline float cx_tanhf(float x) {\n"
        "  float a = x < 0 ? -x : x, a2 = a * a;\n"
        "  float small = a + a * a2 * (-0.333333333333f + a2 * (0.133333333333f + a2 * (-0.053968253968f + a2 * 0.021869488536f)));\n"
        "  float big = 1.0f - 2.0f / (cx_expf(2.0f * a) + 1.0f);\n"
        "  float t = a < 0.3f ? small : big;\n"
        "  return x < 0 ? -t : t;\n"
        "}\n\n",
        f);
}

void stepgen_c(const StepGen *g, FILE *f, const char *pfx) {
  const Program *p = g->p;
  fprintf(f, "static void %s_static(const float *const *P, float *S) {\n  (void)P, (void)S;\n", pfx);
  for (int id = 0; id < g->nn; id++)
    if (computed_in(g, id, 'S')) node_c(g, f, id, 'S');
  for (int id = 0; id < g->nn; id++)
    if (g->toff[id] >= 0) {
      char m[256];
      loc_c(g, id, 'S', m, sizeof m);
      const Node *x = nd(g, id);
      int O = x->rank == 2 ? x->n[0] : 1, I = x->rank == 2 ? x->n[1] : numel_of(p, id);
      fprintf(f, "  mv_pack(S + %d, %s, %d, %d);\n", g->toff[id], m, O, I);
    }
  fprintf(f, "}\n\n");
  fprintf(f, "static void %s_input(const float *const *P, const float *S, const float *x, float *F, float *W) {\n"
             "  (void)P, (void)S, (void)x, (void)F, (void)W;\n", pfx);
  for (int id = 0; id < g->nn; id++)
    if (computed_in(g, id, 'I')) node_c(g, f, id, 'I');
  fprintf(f, "}\n\n");
  fprintf(f, "static void %s_state(const float *const *P, const float *S, const float *F, float *h, float *y, float *W) {\n"
             "  (void)P, (void)S, (void)F, (void)h, (void)W;\n", pfx);
  for (int id = 0; id < g->nn; id++)
    if (computed_in(g, id, 'X')) node_c(g, f, id, 'X');
  char src[256];
  loc_c(g, p->output, 'X', src, sizeof src);
  fprintf(f, "  memcpy(y, %s, sizeof(float) * %d);\n", src, p->output_size);
  int tmp = g->scratch_size - g->state_size;
  for (int q = 0; q < p->nsparts; q++) {
    loc_c(g, p->sparts[q].next, 'X', src, sizeof src);
    fprintf(f, "  memcpy(W + %d, %s, sizeof(float) * %d);\n", tmp + g->spart_off[q], src, p->sparts[q].size);
  }
  fprintf(f, "  memcpy(h, W + %d, sizeof(float) * %d);\n}\n\n", tmp, g->state_size);
}

/* ---- Python ---- */

/* The value of node id seen from part `part`, as a Python expression: static values [numel],
 * per-row ones [R, numel]. */
static void loc_py(const StepGen *g, int id, char part, char *buf, size_t n) {
  const Node *x = nd(g, id);
  if (x->op == OP_PARAM) snprintf(buf, n, "P[%d]", x->idx);
  else if (x->op == OP_PREV) snprintf(buf, n, "h[%d]", x->idx);
  else if (x->op == OP_SLICE) {
    char a[256];
    loc_py(g, x->a[0], part, a, sizeof a);
    snprintf(buf, n, "%.200s[..., %d:%d]", a, x->idx, x->idx + numel_of(g->p, id));
  } else if (g->kind[id] == 'S' && part != 'S') snprintf(buf, n, "S[%d]", id);
  else if (g->kind[id] == 'I' && part == 'X') snprintf(buf, n, "Fr[%d]", id);
  else if (x->op == OP_INPUT) snprintf(buf, n, "x");
  else snprintf(buf, n, "v%d", id);
}

static const char *py_elementwise(Op op) {
  switch (op) {
  case OP_NEG: return "-({a})";
  case OP_ADD: return "({a}) + ({b})";
  case OP_SUB: return "({a}) - ({b})";
  case OP_MUL: return "({a}) * ({b})";
  case OP_DIV: return "({a}) / ({b})";
  case OP_MIN: return "torch.where(({a}) <= ({b}), {a}, {b})";
  case OP_MAX: return "torch.where(({a}) >= ({b}), {a}, {b})";
  case OP_SIGMOID: return "torch.sigmoid({a})";
  case OP_TANH: return "torch.tanh({a})";
  case OP_RELU: return "torch.relu({a})";
  case OP_SILU: return "F.silu({a})";
  case OP_GELU: return "F.gelu({a})";
  case OP_EXP: return "torch.exp({a})";
  case OP_LOG: return "torch.log({a})";
  case OP_SOFTPLUS: return "_softplus({a})";
  case OP_LOGSIGMOID: return "-_softplus(-({a}))";
  case OP_SQRT: return "torch.sqrt({a})";
  case OP_ABS: return "torch.abs({a})";
  case OP_SQUARE: return "({a}) * ({a})";
  case OP_SIN: return "torch.sin({a})";
  case OP_COS: return "torch.cos({a})";
  case OP_ERF: return "torch.erf({a})";
  case OP_STEP: return "(({a}) > 0).to(({a}).dtype)";
  case OP_SIGN: return "torch.sign({a})";
  case OP_LT: return "(({a}) < ({b})).to(({a}).dtype)";
  case OP_EXPM1: return "torch.expm1({a})";
  case OP_LOG1P: return "torch.log1p({a})";
  case OP_POW: return "torch.pow({a}, {b})";
  case OP_MASK: return "torch.where(({a}) > 0, {b}, torch.zeros_like({b}))";
  default: return NULL;
  }
}

/* A template with {a} and {b} filled in. */
static void fill(FILE *f, const char *t, const char *a, const char *b) {
  for (; *t; t++) {
    if (t[0] == '{' && (t[1] == 'a' || t[1] == 'b') && t[2] == '}') fputs(t[1] == 'a' ? a : b, f), t += 2;
    else fputc(*t, f);
  }
}

static void node_py(const StepGen *g, FILE *f, int id, char part) {
  const Node *x = nd(g, id);
  const Program *p = g->p;
  int e = numel_of(p, id);
  char o[64], a[256] = "", b[256] = "";
  snprintf(o, sizeof o, "v%d", id);
  if (op_arity(x->op) > 0) loc_py(g, x->a[0], part, a, sizeof a);
  if (op_arity(x->op) > 1) loc_py(g, x->a[1], part, b, sizeof b);
  fprintf(f, "    %s = ", o);
  switch (x->op) {
  case OP_INPUT: fprintf(f, "x\n"); break;
  case OP_CONST: fprintf(f, "torch.full((%d,), %.17g, dtype=dt)\n", e, x->k); break;
  case OP_BCAST: fprintf(f, "%s[..., 0:1].expand(*%s.shape[:-1], %d)\n", a, a, e); break;
  case OP_SUM: fprintf(f, "%s.sum(-1, keepdim=True)\n", a); break;
  case OP_CONCAT: fprintf(f, "_cat(%s, %s)\n", a, b); break;
  case OP_MATVEC: fprintf(f, "_mv(%s, %s, %d, %d)\n", a, b, nd(g, x->a[0])->n[0], nd(g, x->a[0])->n[1]); break;
  case OP_MATVEC_T: fprintf(f, "_mvt(%s, %s, %d, %d)\n", a, b, nd(g, x->a[0])->n[0], nd(g, x->a[0])->n[1]); break;
  case OP_OUTER: fprintf(f, "(%s.unsqueeze(-1) * %s.unsqueeze(-2)).flatten(-2)\n", a, b); break;
  case OP_VIEW: {
    int vn[MAX_RANK], st[MAX_RANK];
    view_axes(x, vn, st);
    fprintf(f, "%s[..., _vidx(%d, %d, %d, %d, %d, %d, %d)]\n", a, x->idx, vn[0], vn[1], vn[2], st[0], st[1], st[2]);
    break;
  }
  case OP_RSUM:
  case OP_RMAX: {
    int outer, len, inner;
    reduce_axes(x, nd(g, x->a[0]), &outer, &len, &inner);
    fprintf(f, "%s.reshape(*%s.shape[:-1], %d, %d, %d).%s(-2).flatten(-2)\n", a, a, outer, len, inner,
            x->op == OP_RSUM ? "sum" : "amax");
    break;
  }
  case OP_BMM: {
    const Node *y = nd(g, x->a[0]);
    fprintf(f, "_bmm(%s, %s, %d, %d, %d, %d)\n", a, b, x->n[0], x->n[1], y->n[2], x->n[2]);
    break;
  }
  default:
    fill(f, py_elementwise(x->op), a, b);
    fputc('\n', f);
  }
}

void stepgen_py(const StepGen *g, FILE *f, const char *pfx) {
  const Program *p = g->p;
  fprintf(f, "def %s_static(P, dt):\n    S = {}\n", pfx);
  for (int id = 0; id < g->nn; id++)
    if (computed_in(g, id, 'S')) node_py(g, f, id, 'S'), fprintf(f, "    S[%d] = v%d\n", id, id);
  fprintf(f, "    return S\n\n\ndef %s_input(P, S, x):\n    dt = x.dtype\n    Fr = {}\n", pfx);
  for (int id = 0; id < g->nn; id++)
    if (computed_in(g, id, 'I')) {
      node_py(g, f, id, 'I');
      if (g->front[id]) fprintf(f, "    Fr[%d] = _rows(v%d, x.shape[0])\n", id, id);
    }
  fprintf(f, "    return Fr\n\n\ndef %s_state(P, S, Fr, h):\n    dt = h[0].dtype if h else None\n", pfx);
  for (int id = 0; id < g->nn; id++)
    if (computed_in(g, id, 'X')) node_py(g, f, id, 'X');
  char src[256];
  loc_py(g, p->output, 'X', src, sizeof src);
  fprintf(f, "    y = %s\n    return y, [", src);
  for (int q = 0; q < p->nsparts; q++) {
    loc_py(g, p->sparts[q].next, 'X', src, sizeof src);
    fprintf(f, "%s%s", q ? ", " : "", src);
  }
  fprintf(f, "]");
  if (g->gates) {
    fprintf(f, ", [");
    for (int i = 0; i < p->ngates; i++) {
      loc_py(g, p->gates[i].node, 'X', src, sizeof src);
      fprintf(f, "%s%s", i ? ", " : "", src);
    }
    fprintf(f, "]");
  }
  fprintf(f, "\n\n\n");
}
