/* cell_form.c: the compiled cell form of a model's cell (cell_form.h says what it is and why a
 * checkpoint's is compared with this run's): drawn from each layer's checked step graph, written
 * as the checkpoint's metadata text, read back, and compared. */
#include "cell_form.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "support.h"

/* The first line of the text; a change to what a line's VALUE holds is a new version. */
#define CELL_FORM "cellc-cell-form-1"

static void form_add(CellForm *f, int layer, char *key, char *value, char *shown) {
  VEC_PUSH(f->v, f->n, f->cap, ((CellFormLine){layer, key, value, shown}));
}

void cell_form_free(CellForm *f) {
  for (int i = 0; i < f->n; i++) free(f->v[i].key), free(f->v[i].value), free(f->v[i].shown);
  free(f->v);
  *f = (CellForm){0};
}

void cell_form_add_name(CellForm *f, const char *name) {
  form_add(f, -1, xstrdup("cell"), xstrdup(name), xstrdup(name));
}

/* FNV-1a over a string and its end (0xff, a byte no text holds). */
static uint64_t fnv(uint64_t h, const char *s) { return fnv1a(fnv1a(h, s, strlen(s)), "\xff", 1); }

/* The gate whose value node `id` is, or -1. */
static int gate_at(const Cell *c, int id) {
  for (int g = 0; g < c->ngates; g++)
    if (c->gates[g].node == id) return g;
  return -1;
}

/* A node's expression tree in definition `root` (a gate's node, a state's update, or -1) as a hash:
 * the op, the shape, and the arguments' hashes; leaves by name. A gate, or a state's new value,
 * met below the root is its name, so that a changed gate is one changed line. memo[id] holds the
 * hashes of nodes that are neither (they do not depend on the root: it is never below them). */
static uint64_t node_hash(const Cell *c, int id, int root, uint64_t *memo, bool *have) {
  const Node *n = &c->g.nodes[id];
  uint64_t h = FNV1A_INIT;
  int g = gate_at(c, id);
  if (id != root && g >= 0) return fnv(fnv(h, "gate"), c->gates[g].name);
  if (id != root && n->op == OP_NEWVAL) return fnv(fnv(h, "new"), c->states[n->idx].name);
  if (id == root && n->op == OP_NEWVAL) return node_hash(c, n->a[0], root, memo, have);
  if (have[id]) return memo[id];
  char buf[160];
  h = fnv(h, op_name(n->op));
  cell_shape_text(c, n->rank, n->dim, buf, (int)sizeof buf);
  h = fnv(h, buf);
  if (n->cplx) h = fnv(h, "complex");
  if (n->op == OP_CONST) snprintf(buf, sizeof buf, "%.17g", n->k), h = fnv(h, buf);
  if (n->op == OP_PARAM) h = fnv(h, c->params[n->idx].name);
  if (n->op == OP_PREV) h = fnv(h, c->states[n->idx].name);
  for (int i = 0; i < op_arity(n->op); i++) {
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)node_hash(c, n->a[i], root, memo, have));
    h = fnv(h, buf);
  }
  if (id != root) memo[id] = h, have[id] = true;
  return h;
}

/* The same tree as text, as the source would write it ("sigmoid(Wzx @ x + bz)"), cut at `size`. */
static void node_text(const Cell *c, int id, int root, char *buf, int *len, int size, int prec) {
#define PUT(...) (*len += snprintf(buf + *len, (size_t)(*len < size ? size - *len : 0), __VA_ARGS__))
  if (*len >= size) return;
  const Node *n = &c->g.nodes[id];
  int g = gate_at(c, id), p = 0;
  const char *op = NULL;
  if (id != root && g >= 0) {
    PUT("%s", c->gates[g].name);
    return;
  }
  switch (n->op) {
  case OP_NEWVAL:
    if (id == root) node_text(c, n->a[0], root, buf, len, size, prec);
    else PUT("new(%s)", c->states[n->idx].name);
    return;
  case OP_CONST: PUT("%g", n->k); return;
  case OP_INPUT: PUT("%s", c->input_name); return;
  case OP_PARAM: PUT("%s", c->params[n->idx].name); return;
  case OP_PREV: PUT("%s", c->states[n->idx].name); return;
  case OP_BCAST: node_text(c, n->a[0], root, buf, len, size, prec); return;
  case OP_NEG:
    if (prec > 3) PUT("(");
    PUT("-");
    node_text(c, n->a[0], root, buf, len, size, 3);
    if (prec > 3) PUT(")");
    return;
  case OP_ADD: p = 1, op = " + "; break;
  case OP_SUB: p = 1, op = " - "; break;
  case OP_MUL: p = 2, op = " * "; break;
  case OP_DIV: p = 2, op = " / "; break;
  case OP_MATVEC: p = 4, op = " @ "; break;
  default:
    PUT("%s(", op_text(n->op));
    for (int i = 0; i < op_arity(n->op); i++) {
      if (i) PUT(", ");
      node_text(c, n->a[i], root, buf, len, size, 0);
    }
    PUT(")");
    return;
  }
  if (prec > p) PUT("(");
  node_text(c, n->a[0], root, buf, len, size, p);
  PUT("%s", op);
  node_text(c, n->a[1], root, buf, len, size, p + 1);
  if (prec > p) PUT(")");
#undef PUT
}

/* The line of a formula: its hash, and its text (cut with "..." past 200 characters). */
static void form_formula(CellForm *f, int layer, char *key, const Cell *c, int id, int root, uint64_t *memo, bool *have) {
  char text[204];
  int len = 0;
  text[0] = 0;
  node_text(c, id, root, text, &len, 201, 0);
  if (len > 200) strcpy(text + 197, "...");
  form_add(f, layer, key, xasprintf("%016llx", (unsigned long long)node_hash(c, id, root, memo, have)), xstrdup(text));
}

/* A param's or state's declaration: its shape, complex, and the rest ("tag recurrent", "init
 * learned"), one text for both VALUE and SHOWN. */
static char *decl_text(const Cell *c, int rank, const int *dim, bool cplx, const char *rest) {
  char shape[160];
  cell_shape_text(c, rank, dim, shape, (int)sizeof shape);
  return xasprintf("%s%s%s", shape, cplx ? " complex" : "", rest);
}

void cell_form_add_layer(CellForm *f, int k, const Cell *c) {
  Arena a = {0};
  for (int i = 0; i < c->noptions; i++) {
    const OptionInfo *o = &c->options[i];
    char *shown = o->type == OPT_BOOL ? xstrdup(o->value ? "true" : "false")
                  : o->type == OPT_INT ? xasprintf("%.0f", o->value)
                                       : xasprintf("%g", o->value);
    form_add(f, k, xasprintf("option %s", o->name), xasprintf("%.17g", o->value), shown);
  }
  char dim[160];
  cell_dim_text(c, c->input_dim, dim, (int)sizeof dim);
  form_add(f, k, xstrdup("input"), xasprintf("[%s]", dim), xasprintf("%s[%s]", c->input_name, dim));
  for (int i = 0; i < c->nparams; i++) {
    const ParamInfo *p = &c->params[i];
    char tags[512] = "";
    for (int t = 0; t < p->ntags && strlen(tags) < 400; t++) snprintf(tags + strlen(tags), sizeof tags - strlen(tags), " tag %s", p->tags[t]);
    /* what is trained belongs to the program: a checkpoint of a frozen param resumes only frozen */
    if (p->buffer) snprintf(tags + strlen(tags), sizeof tags - strlen(tags), " buffer");
    if (p->frozen) snprintf(tags + strlen(tags), sizeof tags - strlen(tags), " frozen");
    char *d = decl_text(c, p->rank, p->dim, p->cplx, tags);
    form_add(f, k, xasprintf("param %s", p->name), d, xstrdup(d));
  }
  for (int i = 0; i < c->nstates; i++) {
    const StateInfo *s = &c->states[i];
    char init[512] = " init zeros";
    if (s->init) {
      int len = snprintf(init, sizeof init, " init %s", s->init);
      for (int j = 0; j < s->ninit_args && len < 400; j++)
        len += snprintf(init + len, sizeof init - (size_t)len, "%s%s", j ? ", " : "(", expr_text(&a, s->init_args[j]));
      if (s->ninit_args) snprintf(init + len, sizeof init - (size_t)len, ")");
    }
    char *d = decl_text(c, s->rank, s->dim, s->cplx, init);
    form_add(f, k, xasprintf("state %s", s->name), d, xstrdup(d));
  }
  uint64_t *memo = xcalloc((size_t)c->g.nnodes + 1, sizeof(uint64_t));
  bool *have = xcalloc((size_t)c->g.nnodes + 1, sizeof(bool));
  for (int g = 0; g < c->ngates; g++) form_formula(f, k, xasprintf("gate %s", c->gates[g].name), c, c->gates[g].node, c->gates[g].node, memo, have);
  for (int i = 0; i < c->nstates; i++)
    form_formula(f, k, xasprintf("update %s", c->states[i].name), c, c->states[i].update, c->states[i].update, memo, have);
  form_formula(f, k, xstrdup("output"), c, c->output, -1, memo, have);
  free(memo), free(have);
  arena_free(&a);
}

char *cell_form_write(const CellForm *f) {
  size_t cap = 64, len = 0;
  for (int i = 0; i < f->n; i++) cap += strlen(f->v[i].key) + strlen(f->v[i].value) + strlen(f->v[i].shown) + 32;
  char *s = xmalloc(cap);
  len += (size_t)snprintf(s, cap, "%s\n", CELL_FORM);
  for (int i = 0; i < f->n; i++)
    len += (size_t)snprintf(s + len, cap - len, "%d\t%s\t%s\t%s\n", f->v[i].layer, f->v[i].key, f->v[i].value, f->v[i].shown);
  return s;
}

static char *dup_span(const char *s, const char *end) {
  char *d = xmalloc((size_t)(end - s) + 1);
  memcpy(d, s, (size_t)(end - s));
  d[end - s] = 0;
  return d;
}

int cell_form_read(const char *text, CellForm *f) {
  size_t hl = strlen(CELL_FORM);
  if (strncmp(text, CELL_FORM, hl) || text[hl] != '\n') return -1;
  for (const char *line = text + hl + 1; *line;) {
    const char *end = strchr(line, '\n');
    if (!end) end = line + strlen(line);
    const char *t1 = memchr(line, '\t', (size_t)(end - line));
    const char *t2 = t1 ? memchr(t1 + 1, '\t', (size_t)(end - t1 - 1)) : NULL;
    const char *t3 = t2 ? memchr(t2 + 1, '\t', (size_t)(end - t2 - 1)) : NULL;
    if (!t3) return cell_form_free(f), -1;
    form_add(f, atoi(line), dup_span(t1 + 1, t2), dup_span(t2 + 1, t3), dup_span(t3 + 1, end));
    line = *end ? end + 1 : end;
  }
  return 0;
}

/* What a line names: "option 'see_h'", "the update of state 'h'". */
static void line_what(const CellFormLine *l, char *buf, size_t n) {
  const char *sp = strchr(l->key, ' '), *name = sp ? sp + 1 : "";
  int kl = sp ? (int)(sp - l->key) : (int)strlen(l->key);
  if (!strncmp(l->key, "update", (size_t)kl)) snprintf(buf, n, "the update of state '%s'", name);
  else if (sp) snprintf(buf, n, "%.*s '%s'", kl, l->key, name);
  else snprintf(buf, n, "the %s", l->key);
}

static const CellFormLine *form_find(const CellForm *f, int layer, const char *key) {
  for (int i = 0; i < f->n; i++)
    if (f->v[i].layer == layer && !strcmp(f->v[i].key, key)) return &f->v[i];
  return NULL;
}

char *cell_form_diff(const CellForm *was, const CellForm *now, int *count) {
  int layers_was = 0, layers_now = 0;
  for (int i = 0; i < was->n; i++) layers_was = was->v[i].layer + 1 > layers_was ? was->v[i].layer + 1 : layers_was;
  for (int i = 0; i < now->n; i++) layers_now = now->v[i].layer + 1 > layers_now ? now->v[i].layer + 1 : layers_now;
  int common = layers_was < layers_now ? layers_was : layers_now;
  char *first = NULL, what[320], where[32];
  *count = 0;
  for (int side = 0; side < 2; side++) {
    const CellForm *f = side ? was : now, *other = side ? now : was;
    for (int i = 0; i < f->n; i++) {
      const CellFormLine *l = &f->v[i], *o = form_find(other, l->layer, l->key);
      if (l->layer >= common || (o && (side || !strcmp(o->value, l->value)))) continue;
      ++*count;
      if (first) continue;
      line_what(l, what, sizeof what);
      snprintf(where, sizeof where, l->layer >= 0 ? "layer %d: " : "", l->layer);
      if (o && l->layer < 0) { /* another cell altogether: its definitions' differences say nothing more */
        *count = 1;
        return xasprintf("the checkpoint was written for another model, of cell '%s'; this one is of cell '%s'", o->shown,
                         l->shown);
      }
      if (o) first = xasprintf("%s%s is %s in the checkpoint's cell, %s here", where, what, o->shown, l->shown);
      else if (side) first = xasprintf("%sthe checkpoint's cell has %s (%s), this one has not", where, what, l->shown);
      else first = xasprintf("%s%s (%s) is not in the checkpoint's cell", where, what, l->shown);
    }
  }
  return first;
}
