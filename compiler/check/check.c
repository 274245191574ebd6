/* check.c: names, imports, options and `if`, dims, shapes, real/complex types,
 * the state-update rules and initializers; builds the typed step graph and
 * runs the analysis of language spec section 5. The first error stops the
 * check (a located diagnostic, then NULL to the caller). */
#include "check.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "init.h"

/* ------------------------------------------------------------------ loading */

typedef struct Loader {
  Arena *arena;
  Module *m;
  const char *stdlib_dir;
  const char *stack[32]; /* files being loaded: import cycles */
  const char *shown[32]; /* the same, as their paths are shown in messages */
  int depth;
  const char **done;     /* files already loaded (real paths) */
  int ndone, capdone;
  int ncap;
} Loader;

static bool add_file(Loader *L, const Src *src, bool is_main);

static char *dir_of(Arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return arena_strdup(a, ".");
  return arena_strndup(a, path, (size_t)(slash - path));
}

/* "a" "." "b" in the arena (xasprintf's result would need a free). */
static char *arena_join(Arena *a, const char *x, const char *sep, const char *y) {
  size_t nx = strlen(x), ns = strlen(sep), ny = strlen(y);
  char *p = arena_alloc(a, nx + ns + ny + 1);
  memcpy(p, x, nx);
  memcpy(p + nx, sep, ns);
  memcpy(p + nx + ns, y, ny + 1);
  return p;
}

static bool load_import(Loader *L, const Src *from, const ImportAst *im) {
  char *cands[2];
  int nc = 0;
  if (im->path[0] == '/') cands[nc++] = arena_strdup(L->arena, im->path);
  else {
    cands[nc++] = arena_join(L->arena, dir_of(L->arena, from->path), "/", im->path);
    if (L->stdlib_dir) cands[nc++] = arena_join(L->arena, L->stdlib_dir, "/", im->path);
  }
  for (int i = 0; i < nc; i++) {
    char *real = realpath(cands[i], NULL);
    struct stat st;
    if (real && (stat(real, &st) != 0 || !S_ISREG(st.st_mode))) {
      free(real); /* a directory, or a device such as /dev/zero that would never end */
      real = NULL;
    }
    if (!real) continue;
    for (int d = 0; d < L->depth; d++)
      if (!strcmp(L->stack[d], real)) {
        if (d == L->depth - 1) diag_error(im->loc, "import cycle: '%s' imports itself", im->path);
        else {
          /* the whole cycle: a imports b, which imports ..., which imports a */
          char chain[2048];
          int len = snprintf(chain, sizeof chain, "%s", L->shown[d]);
          for (int e = d + 1; e < L->depth && len < (int)sizeof chain; e++)
            len += snprintf(chain + len, sizeof chain - (size_t)len, "%s%s", e == d + 1 ? " imports " : ", which imports ", L->shown[e]);
          if (len < (int)sizeof chain) snprintf(chain + len, sizeof chain - (size_t)len, ", which imports %s again", L->shown[d]);
          diag_error(im->loc, "import cycle: %s", chain);
        }
        free(real);
        return false;
      }
    for (int d = 0; d < L->ndone; d++)
      if (!strcmp(L->done[d], real)) {
        free(real);
        return true;
      }
    Src *src = src_load(L->arena, cands[i]);
    if (!src) {
      free(real);
      continue;
    }
    if (L->depth == 32) {
      diag_error(im->loc, "imports nest too deeply");
      free(real);
      return false;
    }
    L->shown[L->depth] = src->path;
    L->stack[L->depth++] = arena_strdup(L->arena, real);
    free(real);
    bool ok = add_file(L, src, false);
    L->depth--;
    return ok;
  }
  if (im->path[0] == '/') diag_error(im->loc, "cannot find '%s' (or it is not a regular file)", im->path);
  else
    diag_error(im->loc, "cannot find '%s' (looked next to %s%s)", im->path, from->path,
               L->stdlib_dir ? " and in the standard library" : "");
  return false;
}

static bool add_file(Loader *L, const Src *src, bool is_main) {
  FileAst *f = parse_file(L->arena, src);
  if (!f) return false;
  char *real = realpath(src->path, NULL);
  if (real) {
    const char *r = arena_strdup(L->arena, real);
    free(real);
    VEC_PUSH(L->done, L->ndone, L->capdone, r);
  }
  for (int i = 0; i < f->nimports; i++)
    if (!load_import(L, src, &f->imports[i])) return false;
  Module *m = L->m;
  for (int i = 0; i < f->ncells; i++) {
    const CellAst *c = f->cells[i];
    for (int j = 0; j < m->ncells; j++)
      if (!strcmp(m->cells[j]->name, c->name)) {
        diag_error(c->loc, "cell '%s' is already defined", c->name);
        diag_note(m->cells[j]->loc, "the first definition is here");
        return false;
      }
    if (m->ncells == L->ncap) {
      L->ncap = L->ncap ? 2 * L->ncap : 8;
      const CellAst **cells = arena_alloc(L->arena, sizeof(void *) * (size_t)L->ncap);
      const Src **srcs = arena_alloc(L->arena, sizeof(void *) * (size_t)L->ncap);
      bool *in_main = arena_alloc(L->arena, sizeof(bool) * (size_t)L->ncap);
      for (int j = 0; j < m->ncells; j++) cells[j] = m->cells[j], srcs[j] = m->srcs[j], in_main[j] = m->in_main[j];
      m->cells = cells, m->srcs = srcs, m->in_main = in_main;
    }
    m->cells[m->ncells] = c;
    m->srcs[m->ncells] = src;
    m->in_main[m->ncells] = is_main;
    m->ncells++;
  }
  return true;
}

/* ---- unused params and lets: a warning, found by name anywhere in the cell (any branch of an
 * `if`, initializer arguments), so that a param only a branch not taken uses is not flagged ---- */

static bool expr_uses(const Expr *e, const char *name) {
  if (!e) return false;
  if ((e->kind == EX_NAME) && !strcmp(e->name, name)) return true;
  if (expr_uses(e->a, name) || expr_uses(e->b, name)) return true;
  for (int i = 0; i < e->nargs; i++)
    if (expr_uses(e->args[i], name)) return true;
  return false;
}

static bool stmts_use(Stmt **stmts, int n, const char *name) {
  for (int i = 0; i < n; i++) {
    const Stmt *s = stmts[i];
    if (expr_uses(s->expr, name)) return true;
    for (int j = 0; s->init && j < s->init->nargs; j++)
      if (expr_uses(s->init->args[j], name)) return true;
    if (s->kind == ST_IF && (stmts_use(s->then_body, s->nthen, name) || stmts_use(s->else_body, s->nelse, name)))
      return true;
  }
  return false;
}

/* Once per declaration, however often the cell is checked (train checks each layer twice). */
static bool warned_before(const Stmt *s) {
  static const Stmt *seen[256];
  static int nseen;
  for (int i = 0; i < nseen; i++)
    if (seen[i] == s) return true;
  if (nseen < 256) seen[nseen++] = s;
  return false;
}

static void warn_unused(Stmt **stmts, int n, const CellAst *c) {
  for (int i = 0; i < n; i++) {
    const Stmt *s = stmts[i];
    if ((s->kind == ST_PARAM || s->kind == ST_LET) && !stmts_use(c->body, c->nbody, s->name) && !warned_before(s))
      diag_warning(s->name_loc, "%s '%s' is never used (cell '%s')",
                   s->kind == ST_PARAM ? (s->is_buffer ? "buffer" : "param") : "let", s->name, c->name);
    if (s->kind == ST_IF) {
      warn_unused(s->then_body, s->nthen, c);
      warn_unused(s->else_body, s->nelse, c);
    }
  }
}

static Module *load(Arena *a, Src *src, const char *stdlib_dir) {
  Loader L = {0};
  L.arena = a;
  L.stdlib_dir = stdlib_dir;
  L.m = arena_alloc(a, sizeof(Module));
  char *real = realpath(src->path, NULL);
  L.shown[L.depth] = src->path;
  L.stack[L.depth++] = arena_strdup(a, real ? real : src->path);
  free(real);
  bool ok = add_file(&L, src, true);
  free(L.done);
  return ok ? L.m : NULL;
}

Module *check_load(Arena *a, const char *path, const char *stdlib_dir) {
  Src *src = src_load(a, path);
  if (!src) {
    if (errno == ENODEV) diag_plain("cannot read '%s': it is a device, not a file", path);
    else diag_plain("cannot read '%s': %m", path);
    return NULL;
  }
  return load(a, src, stdlib_dir);
}

Module *check_load_text(Arena *a, const char *path, const char *text, size_t len, const char *stdlib_dir) {
  return load(a, src_from_text(a, path, text, len), stdlib_dir);
}

const CellAst *check_find_cell(const Module *m, const char *name, const Src **src) {
  for (int i = m->ncells - 1; i >= 0; i--)
    if (name ? !strcmp(m->cells[i]->name, name) : m->in_main[i]) {
      if (src) *src = m->srcs[i];
      return m->cells[i];
    }
  return NULL;
}

/* ------------------------------------------------------------ expression text */

static void etext(const Expr *e, char *buf, int *len, int size, int prec) {
#define PUT(...) (*len += snprintf(buf + *len, (size_t)(*len < size ? size - *len : 0), __VA_ARGS__))
  if (*len >= size) return;
  int p = 0;
  const char *op = NULL;
  switch (e->kind) {
  case EX_NUM: PUT("%g", e->num); return;
  case EX_NAME: PUT("%s", e->name); return;
  case EX_CALL:
    PUT("%s(", e->name);
    for (int i = 0; i < e->nargs; i++) {
      if (i) PUT(", ");
      etext(e->args[i], buf, len, size, 0);
    }
    PUT(")");
    return;
  case EX_NEG:
    if (prec > 3) PUT("(");
    PUT("-");
    etext(e->a, buf, len, size, 3);
    if (prec > 3) PUT(")");
    return;
  case EX_ADD: p = 1, op = " + "; break;
  case EX_SUB: p = 1, op = " - "; break;
  case EX_MUL: p = 2, op = " * "; break;
  case EX_DIV: p = 2, op = " / "; break;
  case EX_MATMUL: p = 4, op = " @ "; break;
  case EX_LT: p = 0, op = " < "; break;
  case EX_LE: p = 0, op = " <= "; break;
  case EX_GT: p = 0, op = " > "; break;
  case EX_GE: p = 0, op = " >= "; break;
  case EX_LIST:
    PUT("[");
    for (int i = 0; i < e->nargs; i++) {
      if (i) PUT(", ");
      etext(e->args[i], buf, len, size, 0);
    }
    PUT("]");
    return;
  }
  if (prec > p) PUT("(");
  etext(e->a, buf, len, size, p);
  PUT("%s", op);
  etext(e->b, buf, len, size, p + 1);
  if (prec > p) PUT(")");
#undef PUT
}

char *expr_text(Arena *a, const Expr *e) {
  char buf[256];
  int len = 0;
  buf[0] = 0;
  etext(e, buf, &len, (int)sizeof buf, 0);
  if (len >= (int)sizeof buf) strcpy(buf + sizeof buf - 4, "...");
  return arena_strdup(a, buf);
}

/* ------------------------------------------------------------------ checker */

typedef enum { E_OPTION, E_DIM, E_INPUT, E_PARAM, E_STATE, E_VALUE } EntityKind;

typedef struct Entity {
  const char *name;
  EntityKind kind;
  int idx;        /* option, dim, param, state index; node for values */
  Loc loc;
  bool hidden;    /* defined in only one branch of an `if` */
  bool is_gate;
} Entity;

/* The passes over expressions and graphs recurse, so nesting deeper than
 * this (in one expression, or through lets) is refused with an error rather
 * than a stack overflow. Real cells are a few dozen operations deep. */
#define MAX_DEPTH 1000

typedef struct Checker {
  Arena *arena;
  jmp_buf fail;
  Cell *c;
  const CheckOptions *o;
  Entity *ents;
  int nents, capents;
  bool *dyn;       /* per node: depends on the input, a state or noise */
  int *depth;      /* per node: the longest chain of operations that computes it */
  int capdyn;
  int nest;        /* expression nesting in expr() and check_init_expr() */
  bool has_input, has_output;
  Loc output_loc;
  int nupdates;
  int capparams, capstates, capgates, capdims;
  const char *defining; /* the let or gate whose expression is being checked */
  struct History *hists; /* prev and conv: the values whose past steps are read */
  int nhists, caphists;
} Checker;

/* A value prev or conv reads: its largest lag and the PREV node of its history (a hidden state
 * appended after the declared ones when the body is done). */
typedef struct History {
  const char *name;
  EntityKind kind;
  int value;      /* its typed node */
  int lag;        /* the largest lag read */
  int prev;       /* the history's PREV node (idx and shape set at the end) */
  Loc loc;        /* the first read */
} History;

static _Noreturn void fail(Checker *k, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void fail(Checker *k, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(loc, fmt, ap);
  va_end(ap);
  longjmp(k->fail, 1);
}

static const char *kind_word(EntityKind k) {
  switch (k) {
  case E_OPTION: return "an option";
  case E_DIM: return "a dim";
  case E_INPUT: return "the input";
  case E_PARAM: return "a param";
  case E_STATE: return "a state";
  case E_VALUE: return "a value";
  default: UNREACHABLE("entity kind");
  }
}

static Entity *lookup(Checker *k, const char *name) {
  for (int i = k->nents - 1; i >= 0; i--)
    if (!k->ents[i].hidden && !strcmp(k->ents[i].name, name)) return &k->ents[i];
  return NULL;
}

/* The nearest visible name (only dims and int options when dims_only). */
static const char *nearest_entity(Checker *k, const char *name, bool dims_only) {
  const char **cands = xmalloc(sizeof(char *) * (size_t)(k->nents + 1));
  int n = 0;
  for (int i = 0; i < k->nents; i++) {
    const Entity *e = &k->ents[i];
    bool is_size = e->kind == E_DIM || (e->kind == E_OPTION && k->c->options[e->idx].type == OPT_INT);
    if (!e->hidden && (!dims_only || is_size)) cands[n++] = e->name;
  }
  const char *best = edit_nearest(name, cands, n);
  free(cands);
  return best;
}

static _Noreturn void unknown_name(Checker *k, Loc loc, const char *name, const char *what) {
  for (int i = 0; i < k->nents; i++)
    if (k->ents[i].hidden && !strcmp(k->ents[i].name, name))
      fail(k, loc, "unknown %s '%s': it is defined in only one branch of an `if`, so it is not visible after it",
           what, name);
  if (k->defining && !strcmp(k->defining, name))
    fail(k, loc, "'%s' is used in its own definition (a let or gate can only use names defined before it)", name);
  const char *near = nearest_entity(k, name, false);
  if (near) fail(k, loc, "unknown %s '%s'; did you mean '%s'?", what, name, near);
  fail(k, loc, "unknown %s '%s'", what, name);
}

static void declare(Checker *k, const char *name, Loc loc, EntityKind kind, int idx) {
  Entity *prev = lookup(k, name);
  if (prev) {
    bool buf = prev->kind == E_PARAM && k->c->params[prev->idx].buffer;
    diag_error(loc, "'%s' is already declared (as %s)", name, buf ? "a buffer" : kind_word(prev->kind));
    diag_note(prev->loc, "the first declaration is here");
    longjmp(k->fail, 1);
  }
  Entity e = {name, kind, idx, loc, false, false};
  VEC_PUSH(k->ents, k->nents, k->capents, e);
}

/* ---- dims ---- */

static int dimexpr(Checker *k, const DimExpr *d, bool declare_names) {
  Cell *c = k->c;
  int r = -1;
  switch (d->kind) {
  case DX_INT:
    if (d->value > 1e9) fail(k, d->loc, "size %g is too large", d->value);
    return dims_const(&c->dt, (long)d->value);
  case DX_NAME: {
    Entity *e = lookup(k, d->name);
    if (!e && declare_names) {
      /* `input x[D]`: the input's size symbol is declared by the input */
      DimInfo di = {0};
      di.name = d->name;
      di.loc = d->loc;
      di.sym = c->ndims;
      di.from_input = true;
      di.value = -1;
      VEC_PUSH(c->dims, c->ndims, k->capdims, di);
      declare(k, d->name, d->loc, E_DIM, c->ndims - 1);
      return dims_var(&c->dt, di.sym);
    }
    if (!e) {
      const char *near = nearest_entity(k, d->name, true);
      if (near) fail(k, d->loc, "unbound dim '%s': no dim of that name is declared; did you mean '%s'?", d->name, near);
      fail(k, d->loc, "unbound dim '%s': declare it with `dim %s` (and bind it with --dims %s=...)", d->name, d->name, d->name);
    }
    if (e->kind == E_OPTION) {
      OptionInfo *o = &c->options[e->idx];
      if (o->type != OPT_INT) fail(k, d->loc, "option '%s' is not an int, so it cannot be a size", d->name);
      return dims_const(&c->dt, (long)o->value);
    }
    if (e->kind != E_DIM) fail(k, d->loc, "'%s' is %s, not a dim", d->name, kind_word(e->kind));
    return dims_var(&c->dt, c->dims[e->idx].sym);
  }
  case DX_ADD: r = dims_add(&c->dt, dimexpr(k, d->a, false), dimexpr(k, d->b, false)); break;
  case DX_SUB: r = dims_sub(&c->dt, dimexpr(k, d->a, false), dimexpr(k, d->b, false)); break;
  case DX_MUL: r = dims_mul(&c->dt, dimexpr(k, d->a, false), dimexpr(k, d->b, false)); break;
  }
  if (r < 0) fail(k, d->loc, "size expression is too complex or too large");
  long v;
  if (dims_is_const(&c->dt, r, &v) && (v < 1 || v > 1000000000))
    fail(k, d->loc, "size is %ld; sizes must be between 1 and 10^9", v);
  return r;
}

/* A whole size (of a shape, or a dim's default): a constant one must be in
 * range too, as `[0]` or `[n]` with an option n = -3 would not be. */
static int size_expr(Checker *k, const DimExpr *d, bool declare_names) {
  int r = dimexpr(k, d, declare_names);
  long v;
  if (dims_is_const(&k->c->dt, r, &v) && (v < 1 || v > 1000000000))
    fail(k, d->loc, "size is %ld; sizes must be between 1 and 10^9", v);
  return r;
}

static void shape_of(Checker *k, const ShapeAst *s, int *rank, int *dim, bool input) {
  if (!s) {
    *rank = 0;
    return;
  }
  if (s->n > MAX_RANK) fail(k, s->loc, "a shape has at most %d sizes, this one has %d", MAX_RANK, s->n);
  *rank = s->n;
  for (int i = 0; i < s->n; i++) dim[i] = size_expr(k, s->dims[i], input);
}

void cell_dim_text(const Cell *c, int dim, char *buf, int size) {
  dims_print(&c->dt, dim, c->dim_names, buf, size);
}

void cell_shape_text(const Cell *c, int rank, const int *dim, char *buf, int size) {
  int len = snprintf(buf, (size_t)size, "[");
  for (int i = 0; i < rank && len < size; i++) {
    if (i) len += snprintf(buf + len, (size_t)(size - len), ", ");
    if (len < size) cell_dim_text(c, dim[i], buf + len, size - len);
    len = (int)strlen(buf);
  }
  if (len < size) snprintf(buf + len, (size_t)(size - len), "]");
}

static const char *shape_str(Checker *k, const Node *n) {
  char buf[160];
  k->c->dim_names = NULL;
  const char **names = arena_alloc(k->arena, sizeof(char *) * (size_t)(k->c->ndims + 1));
  for (int i = 0; i < k->c->ndims; i++) names[i] = k->c->dims[i].name;
  k->c->dim_names = names;
  cell_shape_text(k->c, n->rank, n->dim, buf, (int)sizeof buf);
  if (n->cplx) strncat(buf, " complex", sizeof buf - strlen(buf) - 1);
  return arena_strdup(k->arena, buf);
}

/* ---- nodes ---- */

static bool is_dyn(Checker *k, int id) { return k->dyn[id]; }

static int mk(Checker *k, Op op, Loc loc, const Expr *ast, int rank, const int *dim, bool cplx, int a0, int a1) {
  Node n = {0};
  n.op = op;
  n.rank = rank;
  for (int i = 0; i < rank; i++) n.dim[i] = dim[i];
  n.n[0] = n.n[1] = n.n[2] = -1;
  n.cplx = cplx;
  n.a[0] = a0;
  n.a[1] = a1;
  n.loc = loc;
  n.ast = ast;
  int id = graph_add(&k->c->g, n);
  if (id >= k->capdyn) {
    k->capdyn = 2 * id + 64;
    k->dyn = xrealloc(k->dyn, sizeof(bool) * (size_t)k->capdyn);
    k->depth = xrealloc(k->depth, sizeof(int) * (size_t)k->capdyn);
  }
  bool d = op == OP_INPUT || op == OP_PREV || op == OP_NOISE;
  int depth = 0;
  for (int i = 0; i < op_arity(op); i++)
    if (n.a[i] >= 0) {
      if (k->dyn[n.a[i]]) d = true;
      if (k->depth[n.a[i]] > depth) depth = k->depth[n.a[i]];
    }
  k->dyn[id] = d;
  k->depth[id] = depth + 1;
  if (depth + 1 > MAX_DEPTH)
    fail(k, loc, "this value is more than %d operations deep, counting through lets and gates; split the computation", MAX_DEPTH);
  return id;
}

static Node *N(Checker *k, int id) { return graph_node(&k->c->g, id); }

static bool numel1(Checker *k, const Node *n) {
  long v;
  for (int i = 0; i < n->rank; i++)
    if (!dims_is_const(&k->c->dt, n->dim[i], &v) || v != 1) return false;
  return true;
}

static bool same_shape(const Node *a, const Node *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i] != b->dim[i]) return false;
  return true;
}

static int bcast_to(Checker *k, int a, const Node *like, Loc loc) {
  Node *x = N(k, a);
  if (same_shape(x, like)) return a;
  return mk(k, OP_BCAST, loc, x->ast, like->rank, like->dim, x->cplx, a, -1);
}

/* ---- version 2: broadcasting as PyTorch's (trailing dims align; a 1 stretches) ---- */

static bool dim_is(Checker *k, int sym, long want) {
  long v;
  return dims_is_const(&k->c->dt, sym, &v) && v == want;
}

static bool broadcast_shape(Checker *k, const Node *x, const Node *y, int *rank, int *dim) {
  *rank = x->rank > y->rank ? x->rank : y->rank;
  for (int i = 0; i < *rank; i++) {
    int xi = i - (*rank - x->rank), yi = i - (*rank - y->rank);
    int dx = xi >= 0 ? x->dim[xi] : -1, dy = yi >= 0 ? y->dim[yi] : -1;
    if (dx < 0 || dx == dy || (dy >= 0 && dim_is(k, dx, 1))) dim[i] = dy >= 0 ? dy : dx;
    else if (dy < 0 || dim_is(k, dy, 1)) dim[i] = dx;
    else return false;
  }
  return true;
}

static int expand_to(Checker *k, int a, int rank, const int *dim, Loc loc) {
  Node *x = N(k, a);
  Node like = {.rank = rank};
  for (int i = 0; i < rank; i++) like.dim[i] = dim[i];
  if (same_shape(x, &like)) return a;
  return mk(k, OP_EXPAND, loc, x->ast, rank, dim, x->cplx, a, -1);
}

/* An elementwise binary op with broadcasting and complex promotion. */
static int binary(Checker *k, Op op, Loc loc, const Expr *ast, int a, int b) {
  Node *x = N(k, a), *y = N(k, b);
  if (!same_shape(x, y)) {
    if (numel1(k, x) && !numel1(k, y)) a = bcast_to(k, a, y, loc);
    else if (numel1(k, y) && !numel1(k, x)) b = bcast_to(k, b, x, loc);
    else if (numel1(k, x) && numel1(k, y)) {
      if (x->rank < y->rank) a = bcast_to(k, a, y, loc);
      else b = bcast_to(k, b, x, loc);
    } else {
      int rank, dim[MAX_RANK];
      if (!broadcast_shape(k, x, y, &rank, dim))
        fail(k, loc, "shape mismatch in '%s': %s and %s do not broadcast", op_text(op), shape_str(k, x), shape_str(k, y));
      a = expand_to(k, a, rank, dim, loc);
      b = expand_to(k, b, rank, dim, loc);
    }
    x = N(k, a), y = N(k, b);
  }
  bool cplx = x->cplx || y->cplx;
  if (cplx && (op == OP_MIN || op == OP_MAX))
    fail(k, loc, "%s takes real arguments, got %s and %s", op_text(op), shape_str(k, x), shape_str(k, y));
  return mk(k, op, loc, ast, x->rank, x->dim, cplx, a, b);
}

static int konst(Checker *k, double v, Loc loc, const Expr *ast) {
  int id = mk(k, OP_CONST, loc, ast, 0, NULL, false, -1, -1);
  N(k, id)->k = v;
  return id;
}

/* ---- built-in functions ---- */

typedef enum { F_REAL1, F_ANY1, F_ABS, F_MINMAX, F_COMPLEX, F_PART, F_CONJ, F_CIS, F_REDUCE, F_CONCAT, F_NORM, F_GUMBEL, F_CLAMP, F_WHERE } FnKind;
static const struct {
  const char *name;
  int nargs;
  FnKind kind;
  Op op;
} builtins[] = {
    {"sigmoid", 1, F_REAL1, OP_SIGMOID}, {"tanh", 1, F_REAL1, OP_TANH},       {"relu", 1, F_REAL1, OP_RELU},
    {"silu", 1, F_REAL1, OP_SILU},       {"gelu", 1, F_REAL1, OP_GELU},       {"exp", 1, F_ANY1, OP_EXP},
    {"log", 1, F_REAL1, OP_LOG},         {"softplus", 1, F_REAL1, OP_SOFTPLUS}, {"logsigmoid", 1, F_REAL1, OP_LOGSIGMOID},
    {"sqrt", 1, F_REAL1, OP_SQRT},       {"abs", 1, F_ABS, OP_ABS},           {"square", 1, F_ANY1, OP_SQUARE},
    {"min", 2, F_MINMAX, OP_MIN},        {"max", 2, F_MINMAX, OP_MAX},        {"complex", 2, F_COMPLEX, OP_CPLX},
    {"re", 1, F_PART, OP_RE},            {"im", 1, F_PART, OP_IM},            {"conj", 1, F_CONJ, OP_CONJ},
    {"cis", 1, F_CIS, OP_CIS},           {"sum", 1, F_REDUCE, OP_SUM},        {"mean", 1, F_REDUCE, OP_MEAN},
    {"concat", 2, F_CONCAT, OP_CONCAT},  {"layernorm", 1, F_NORM, OP_LAYERNORM}, {"rmsnorm", 1, F_NORM, OP_RMSNORM},
    {"gumbel_sigmoid", 2, F_GUMBEL, OP_GUMBEL},
    /* version 2 */
    {"expm1", 1, F_REAL1, OP_EXPM1},     {"log1p", 1, F_REAL1, OP_LOG1P},     {"erf", 1, F_REAL1, OP_ERF},
    {"pow", 2, F_MINMAX, OP_POW},        {"clamp", 3, F_CLAMP, OP_MIN},       {"where", 3, F_WHERE, OP_MASK},
};
#define NBUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

static int expr(Checker *k, const Expr *e);
static int name_ref(Checker *k, const Expr *e);

static void need_real(Checker *k, const Expr *call, int arg, int id) {
  if (N(k, id)->cplx)
    fail(k, call->args[arg]->loc, "%s takes a real argument, got %s", call->name, shape_str(k, N(k, id)));
}

static void need_vector(Checker *k, const Expr *call, int arg, int id) {
  if (N(k, id)->rank > 1)
    fail(k, call->args[arg]->loc, "%s takes a vector, got %s", call->name, shape_str(k, N(k, id)));
}

static bool is_comparison(const Expr *e) { return e->kind == EX_LT || e->kind == EX_LE || e->kind == EX_GT || e->kind == EX_GE; }

/* where(c, x, y), c a comparison l < r (<=, >, >=): a 0/1 mask m = lt(l, r) (operands swapped for
 * > and <=, and x, y swapped for <= and >=: l <= r is not (r < l)), then mask(m, x) + mask(1 - m, y).
 * Exact: the value chosen plus a zero (a NaN or inf in the branch not chosen does not leak), and
 * the derivative goes to the chosen branch only. */
static int where(Checker *k, const Expr *e) {
  const Expr *c = e->args[0];
  if (!is_comparison(c)) fail(k, c->loc, "where's first argument must be a comparison (a < b, a <= b, a > b, a >= b)");
  int l = expr(k, c->a), r = expr(k, c->b);
  int x = expr(k, e->args[1]), y = expr(k, e->args[2]);
  const Expr *parts[4] = {c->a, c->b, e->args[1], e->args[2]};
  int ids[4] = {l, r, x, y};
  for (int i = 0; i < 4; i++)
    if (N(k, ids[i])->cplx) fail(k, parts[i]->loc, "where takes real arguments, got %s", shape_str(k, N(k, ids[i])));
  bool swap_lr = c->kind == EX_GT || c->kind == EX_LE, swap_xy = c->kind == EX_LE || c->kind == EX_GE;
  int m = binary(k, OP_LT, c->loc, c, swap_lr ? r : l, swap_lr ? l : r);
  if (swap_xy) {
    int t = x;
    x = y, y = t;
  }
  int notm = binary(k, OP_SUB, c->loc, c, konst(k, 1, c->loc, c), m);
  return binary(k, OP_ADD, e->loc, e, binary(k, OP_MASK, e->loc, e, m, x), binary(k, OP_MASK, e->loc, e, notm, y));
}

/* ---- time: prev(NAME, k) and conv(NAME, W) (language spec section 9) ---- */

/* A node under id that reads a state (its previous or its new value), or -1. A history's read
 * (LAG) is a value of past steps of the input and params, not a state's. */
static int reads_state(Checker *k, int id, signed char *seen) {
  if (id < 0 || seen[id]) return -1;
  seen[id] = 1;
  Node *n = N(k, id);
  if (n->op == OP_LAG) return -1;
  if (n->op == OP_PREV || n->op == OP_NEWVAL) return id;
  for (int i = 0; i < op_arity(n->op); i++) {
    int r = reads_state(k, n->a[i], seen);
    if (r >= 0) return r;
  }
  return -1;
}

/* prev's and conv's first argument: a named input, let or gate that reads no state. */
static int time_value(Checker *k, const Expr *call, const Expr *arg, EntityKind *kind) {
  if (arg->kind != EX_NAME)
    fail(k, arg->loc, "%s takes a named input, let or gate as its first argument, got '%s'", call->name,
         expr_text(k->arena, arg));
  Entity *ent = lookup(k, arg->name);
  if (!ent) unknown_name(k, arg->loc, arg->name, "name");
  if (ent->kind == E_STATE)
    fail(k, arg->loc, "'%s' is a state; %s takes a named input, let or gate (a state's previous value is the state itself, read before its update)",
         arg->name, call->name);
  if (ent->kind != E_INPUT && ent->kind != E_VALUE)
    fail(k, arg->loc, "'%s' is %s; %s takes a named input, let or gate", arg->name, kind_word(ent->kind), call->name);
  int v = name_ref(k, arg);
  signed char *seen = arena_alloc(k->arena, (size_t)k->c->g.nnodes + 1);
  memset(seen, 0, (size_t)k->c->g.nnodes + 1);
  int r = reads_state(k, v, seen);
  if (r >= 0) {
    Node *rn = N(k, r);
    fail(k, arg->loc,
         "%s(%s, ...): '%s' depends on the %s value of state '%s'; %s reads values computed from the input and params only (one that depends on a previous state is a recurrence: use a state)",
         call->name, arg->name, arg->name, rn->op == OP_PREV ? "previous" : "new", k->c->states[rn->idx].name, call->name);
  }
  if (N(k, v)->rank > 1 && strcmp(call->name, "prev"))
    fail(k, arg->loc, "%s takes a vector or a scalar, got %s", call->name, shape_str(k, N(k, v)));
  if (N(k, v)->rank > 2) /* its history in files would be [B, K, a, b, c]: five dims */
    fail(k, arg->loc, "prev takes a value of rank 2 at most, got %s (flatten or reshape it)", shape_str(k, N(k, v)));
  if (N(k, v)->cplx) fail(k, arg->loc, "%s takes a real value, got %s (read re() and im() apart)", call->name, shape_str(k, N(k, v)));
  *kind = ent->kind;
  return v;
}

/* The value of `name` (node v) at step t - lag: a read of its history, made (or widened) here. */
static int lag_read(Checker *k, const char *name, EntityKind kind, int v, int lag, Loc loc, const Expr *ast) {
  History *h = NULL;
  for (int i = 0; i < k->nhists; i++)
    if (!strcmp(k->hists[i].name, name) && k->hists[i].kind == kind && (kind == E_INPUT || k->hists[i].value == v))
      h = &k->hists[i];
  if (!h) {
    int dim = dims_const(&k->c->dt, 1); /* (finish_histories sets its size) */
    int prev = mk(k, OP_PREV, loc, NULL, 1, &dim, N(k, v)->cplx, -1, -1);
    History nh = {name, kind, v, 0, prev, loc};
    VEC_PUSH(k->hists, k->nhists, k->caphists, nh);
    h = &k->hists[k->nhists - 1];
  }
  if (lag > h->lag) h->lag = lag;
  Node *x = N(k, v);
  int id = mk(k, OP_LAG, loc, ast, x->rank, x->dim, x->cplx, h->prev, -1);
  N(k, id)->idx = lag;
  return id;
}

#define MAX_LAG 4096

static int time_call(Checker *k, const Expr *e) {
  if (e->nargs != 2) fail(k, e->loc, "%s takes 2 arguments, got %d", e->name, e->nargs);
  EntityKind kind;
  const char *name = e->args[0]->name;
  int v = time_value(k, e, e->args[0], &kind);
  if (!strcmp(e->name, "prev")) {
    const Expr *l = e->args[1];
    double lag = NAN;
    if (l->kind == EX_NUM) lag = l->num;
    else if (l->kind == EX_NAME) {
      Entity *ent = lookup(k, l->name);
      if (ent && ent->kind == E_OPTION && k->c->options[ent->idx].type == OPT_INT) lag = k->c->options[ent->idx].value;
    }
    if (isnan(lag))
      fail(k, l->loc, "prev's lag must be a constant: a whole number >= 1 or an int option, got '%s'", expr_text(k->arena, l));
    if (lag < 1 || lag != floor(lag) || lag > MAX_LAG)
      fail(k, l->loc, "prev's lag must be a whole number from 1 to %d, got %g", MAX_LAG, lag);
    return lag_read(k, name, kind, v, (int)lag, e->loc, e);
  }
  /* conv(v, W) = sum_j W[:, j] * prev(v, j), prev(v, 0) = v: W's column j is W @ e_j */
  int w = expr(k, e->args[1]);
  Node *W = N(k, w), *x = N(k, v);
  long width;
  int C = x->rank ? x->dim[0] : dims_const(&k->c->dt, 1);
  if (W->rank != 2 || W->dim[0] != C) {
    char ws[160], xs[160];
    snprintf(ws, sizeof ws, "%s", shape_str(k, W));
    snprintf(xs, sizeof xs, "%s", shape_str(k, x));
    const char *wt = expr_text(k->arena, e->args[1]);
    fail(k, e->args[1]->loc, "conv(%s, %s): '%s' is %s and '%s' is %s; the weight must be [C, K] with C the size of '%s'", name,
         wt, wt, ws, name, xs, name);
  }
  if (is_dyn(k, w)) fail(k, e->args[1]->loc, "conv's weight must not depend on the input or a state");
  if (W->cplx) fail(k, e->args[1]->loc, "conv's weight must be real, got %s", shape_str(k, W));
  if (!dims_is_const(&k->c->dt, W->dim[1], &width) || width < 1 || width > MAX_LAG + 1)
    fail(k, e->args[1]->loc, "conv's weight is %s: its width (the last dim, the steps it reads) must be a number from 1 to %d",
         shape_str(k, W), MAX_LAG + 1);
  int sum = -1;
  for (int j = 0; j < (int)width; j++) {
    int ej = -1; /* the one-hot [K] of column j */
    long parts[3] = {j, 1, width - j - 1};
    for (int q = 0; q < 3; q++) {
      if (parts[q] == 0) continue;
      int d = dims_const(&k->c->dt, parts[q]);
      int c = mk(k, OP_CONST, e->loc, e, 1, &d, false, -1, -1);
      N(k, c)->k = q == 1 ? 1 : 0;
      if (ej < 0) ej = c;
      else {
        int dd = dims_add(&k->c->dt, N(k, ej)->dim[0], d);
        ej = mk(k, OP_CONCAT, e->loc, e, 1, &dd, false, ej, c);
      }
    }
    int col = mk(k, OP_MATVEC, e->loc, e, 1, &C, false, w, ej);
    int term = binary(k, OP_MUL, e->loc, e, col, j == 0 ? v : lag_read(k, name, kind, v, j, e->loc, e));
    sum = sum < 0 ? term : binary(k, OP_ADD, e->loc, e, sum, term);
  }
  return sum;
}

/* The histories as hidden states after the declared ones: [K * size], oldest first; each step
 * drops the oldest and appends the value. */
static void finish_histories(Checker *k) {
  Cell *c = k->c;
  for (int i = 0; i < k->nhists; i++) {
    History *h = &k->hists[i];
    Node *x = N(k, h->value);
    int dim = dims_const(&c->dt, h->lag); /* K times the value's elements */
    for (int d = 0; d < x->rank && dim >= 0; d++) dim = dims_mul(&c->dt, dim, x->dim[d]);
    if (dim < 0) fail(k, h->loc, "size expression is too complex");
    StateInfo st = {.name = arena_join(k->arena, "hist", ".", h->name), .loc = h->loc, .rank = 1, .dim = {dim, 0}};
    st.cplx = x->cplx;
    st.param = -1;
    st.coef_a = st.coef_b = st.culprit = -1;
    st.hist_lag = h->lag, st.hist_of = h->value, st.hist_name = h->name;
    int idx = c->nstates;
    Node *pn = N(k, h->prev);
    pn->idx = idx, pn->dim[0] = dim;
    int nv = mk(k, OP_HISTNEW, h->loc, NULL, 1, &dim, st.cplx, h->prev, h->value);
    st.update = mk(k, OP_NEWVAL, h->loc, NULL, 1, &dim, st.cplx, nv, -1);
    N(k, st.update)->idx = idx;
    st.order = k->nupdates++;
    VEC_PUSH(c->states, c->nstates, k->capstates, st);
  }
}

/* ---- version 2's tensor built-ins ---- */

/* An integer constant argument (an axis): a number written without a point, maybe negated. */
static long const_int(Checker *k, const Expr *e, const char *fn, const char *what) {
  bool neg = false;
  const Expr *x = e;
  if (x->kind == EX_NEG) neg = true, x = x->a;
  if (x->kind != EX_NUM || !x->is_int || x->num > 1e6)
    fail(k, e->loc, "%s's %s must be an integer constant", fn, what);
  return neg ? -(long)x->num : (long)x->num;
}

/* An axis of a value of rank `rank` (negative counts from the end), as 0..rank-1. */
static int axis_arg(Checker *k, const Expr *call, int arg, int rank) {
  long a = const_int(k, call->args[arg], call->name, "axis");
  if (a < -rank || a >= rank)
    fail(k, call->args[arg]->loc, "axis %ld is out of range for a value of rank %d (axes -%d to %d)", a, rank, rank,
         rank - 1);
  return (int)(a < 0 ? a + rank : a);
}

/* unsqueeze's axis: a place among the rank + 1 dims of the result (torch.unsqueeze), named
 * with the rank of the value it is given, not of the result. */
static int insert_axis_arg(Checker *k, const Expr *call, int arg, int rank) {
  long a = const_int(k, call->args[arg], call->name, "axis");
  if (a < -(rank + 1) || a > rank)
    fail(k, call->args[arg]->loc,
         "unsqueeze's axis %ld is out of range for a value of rank %d (it inserts a dim: axes -%d to %d)", a, rank,
         rank + 1, rank);
  return (int)(a < 0 ? a + rank + 1 : a);
}

/* A size argument: a constant expression over integers, dims and int options, as a dim. */
static int size_arg(Checker *k, const Expr *e, const char *fn) {
  int a, b, r = -1;
  switch (e->kind) {
  case EX_NUM:
    if (!e->is_int || e->num > 1e9) fail(k, e->loc, "%s takes a whole number here, got %g", fn, e->num);
    return dims_const(&k->c->dt, (long)e->num);
  case EX_NAME: {
    Entity *ent = lookup(k, e->name);
    if (!ent) unknown_name(k, e->loc, e->name, "dim");
    if (ent->kind == E_DIM) return dims_var(&k->c->dt, k->c->dims[ent->idx].sym);
    if (ent->kind == E_OPTION && k->c->options[ent->idx].type == OPT_INT)
      return dims_const(&k->c->dt, (long)k->c->options[ent->idx].value);
    fail(k, e->loc, "%s takes a size here (a number, a dim or an int option); '%s' is %s", fn, e->name,
         kind_word(ent->kind));
  }
  case EX_ADD: case EX_SUB: case EX_MUL:
    a = size_arg(k, e->a, fn), b = size_arg(k, e->b, fn);
    r = e->kind == EX_ADD ? dims_add(&k->c->dt, a, b) : e->kind == EX_SUB ? dims_sub(&k->c->dt, a, b) : dims_mul(&k->c->dt, a, b);
    if (r < 0) fail(k, e->loc, "size expression is too complex");
    return r;
  default: fail(k, e->loc, "%s takes a size here: a number, a dim, or +, -, * of them", fn);
  }
}

static int numel_dim(Checker *k, const Node *x, Loc loc) {
  int e = dims_const(&k->c->dt, 1);
  for (int i = 0; i < x->rank; i++)
    if ((e = dims_mul(&k->c->dt, e, x->dim[i])) < 0) fail(k, loc, "size expression is too complex");
  return e;
}

static int reshaped(Checker *k, int a, int rank, const int *dim, Loc loc, const Expr *ast) {
  Node *x = N(k, a);
  Node like = {.rank = rank};
  for (int i = 0; i < rank; i++) like.dim[i] = dim[i];
  if (same_shape(x, &like)) return a;
  return mk(k, OP_RESHAPE, loc, ast, rank, dim, x->cplx, a, -1);
}

/* torch.matmul for ranks 1 to 3: a vector operand gets a dim of 1 (dropped from the result), a
 * batch dim of 1 or a missing one broadcasts. */
static int matmul(Checker *k, const Expr *e, int a, int b) {
  Node *A = N(k, a), *B = N(k, b);
  if (A->rank < 1 || B->rank < 1) fail(k, e->loc, "'@' takes tensors of rank 1 to 3, got %s @ %s", shape_str(k, A), shape_str(k, B));
  int ka = A->dim[A->rank - 1], kb = B->rank == 1 ? B->dim[0] : B->dim[B->rank - 2];
  if (ka != kb) fail(k, e->loc, "shape mismatch in '@': %s @ %s (inner sizes differ)", shape_str(k, A), shape_str(k, B));
  int ba = A->rank == 3 ? A->dim[0] : -1, bb = B->rank == 3 ? B->dim[0] : -1, batch = ba >= 0 ? ba : bb;
  if (ba >= 0 && bb >= 0 && ba != bb) {
    if (dim_is(k, ba, 1)) batch = bb;
    else if (!dim_is(k, bb, 1))
      fail(k, e->loc, "shape mismatch in '@': %s @ %s (batch sizes differ)", shape_str(k, A), shape_str(k, B));
  }
  int rank = 0, dim[MAX_RANK];
  if (batch >= 0) dim[rank++] = batch;
  if (A->rank >= 2) dim[rank++] = A->dim[A->rank - 2];
  if (B->rank >= 2) dim[rank++] = B->dim[B->rank - 1];
  return mk(k, OP_MATMUL, e->loc, e, rank, dim, A->cplx || B->cplx, a, b);
}

static const char *const v2_names[] = {"transpose", "reshape", "unsqueeze", "flatten", "slice", "eye",
                                       "outer", "amax", "amin", "softmax", "groupnorm"};
#define NV2 ((int)(sizeof v2_names / sizeof v2_names[0]))

static void v2_nargs(Checker *k, const Expr *e, int lo, int hi) {
  if (e->nargs < lo || e->nargs > hi) {
    if (lo == hi) fail(k, e->loc, "%s takes %d argument%s, got %d", e->name, lo, lo == 1 ? "" : "s", e->nargs);
    fail(k, e->loc, "%s takes %d to %d arguments, got %d", e->name, lo, hi, e->nargs);
  }
}

/* Version 2's built-ins over tensors and axes, or -1 when e is none of them. */
static int call_v2(Checker *k, const Expr *e) {
  const char *f = e->name;
  bool axis_form = (!strcmp(f, "sum") || !strcmp(f, "mean") || !strcmp(f, "layernorm") || !strcmp(f, "rmsnorm")) && e->nargs == 2;
  bool v2 = axis_form;
  for (int i = 0; i < NV2; i++) v2 |= !strcmp(f, v2_names[i]);
  if (!v2) return -1;
  Cell *c = k->c;
  if (!strcmp(f, "eye")) {
    v2_nargs(k, e, 1, 1);
    int n = size_arg(k, e->args[0], f), dim[2] = {n, n};
    return mk(k, OP_EYE, e->loc, e, 2, dim, false, -1, -1);
  }
  if (!strcmp(f, "slice")) v2_nargs(k, e, 3, 4);
  else if (!strcmp(f, "transpose") || !strcmp(f, "flatten")) v2_nargs(k, e, 1, 1);
  else v2_nargs(k, e, 2, 2);
  int a = expr(k, e->args[0]);
  Node *x = N(k, a);
  int rank = x->rank, dim[MAX_RANK] = {x->dim[0], x->dim[1], x->dim[2]};
  if (!strcmp(f, "transpose")) {
    if (rank < 2) fail(k, e->args[0]->loc, "transpose takes a matrix or a rank-3 tensor, got %s", shape_str(k, x));
    int t = dim[rank - 1];
    dim[rank - 1] = dim[rank - 2], dim[rank - 2] = t;
    return mk(k, OP_TRANSPOSE, e->loc, e, rank, dim, x->cplx, a, -1);
  }
  if (!strcmp(f, "flatten")) {
    int n = numel_dim(k, x, e->loc);
    return reshaped(k, a, 1, &n, e->loc, e);
  }
  if (!strcmp(f, "reshape")) {
    const Expr *l = e->args[1];
    if (l->kind != EX_LIST) fail(k, l->loc, "reshape's shape is a list of sizes: reshape(v, [a, b])");
    if (l->nargs > MAX_RANK) fail(k, l->loc, "a shape has at most %d sizes, this one has %d", MAX_RANK, l->nargs);
    int r = l->nargs, d[MAX_RANK];
    for (int i = 0; i < r; i++) d[i] = size_arg(k, l->args[i], f);
    Node like = {.rank = r};
    for (int i = 0; i < r; i++) like.dim[i] = d[i];
    int want = numel_dim(k, x, e->loc), got = numel_dim(k, &like, e->loc);
    if (want != got) {
      char ws[64], gs[64];
      const char *xs = shape_str(k, x); /* sets the dims' names for cell_dim_text */
      cell_dim_text(c, want, ws, (int)sizeof ws);
      cell_dim_text(c, got, gs, (int)sizeof gs);
      fail(k, l->loc, "reshape: %s has %s elements, the shape %s", xs, ws, gs);
    }
    return reshaped(k, a, r, d, e->loc, e);
  }
  if (!strcmp(f, "unsqueeze")) {
    if (rank >= MAX_RANK) fail(k, e->args[0]->loc, "unsqueeze: %s has %d dims already, the most a value has", shape_str(k, x), MAX_RANK);
    int ax = insert_axis_arg(k, e, 1, rank), d[MAX_RANK];
    for (int i = 0, j = 0; i <= rank; i++) d[i] = i == ax ? dims_const(&c->dt, 1) : dim[j++];
    return reshaped(k, a, rank + 1, d, e->loc, e);
  }
  if (!strcmp(f, "slice")) {
    if (rank < 1) fail(k, e->args[0]->loc, "slice takes a vector or a tensor, got %s", shape_str(k, x));
    int ax = e->nargs == 4 ? axis_arg(k, e, 3, rank) : rank - 1;
    int start = size_arg(k, e->args[1], f);
    dim[ax] = size_arg(k, e->args[2], f);
    int id = mk(k, OP_AXSLICE, e->loc, e, rank, dim, x->cplx, a, -1);
    N(k, id)->idx = ax;
    N(k, id)->st[0] = start;
    return id;
  }
  if (!strcmp(f, "outer")) {
    int b = expr(k, e->args[1]);
    Node *y = N(k, b);
    x = N(k, a);
    if (x->rank < 1 || x->rank > 2 || y->rank != x->rank || (x->rank == 2 && x->dim[0] != y->dim[0]))
      fail(k, e->loc, "outer takes two vectors, or two matrices [h, m] and [h, n]; got %s and %s", shape_str(k, x), shape_str(k, y));
    int one = dims_const(&c->dt, 1), r = x->rank + 1, da[MAX_RANK], db[MAX_RANK];
    for (int i = 0; i + 1 < x->rank; i++) da[i] = db[i] = x->dim[i];
    da[r - 2] = x->dim[x->rank - 1], da[r - 1] = one;
    db[r - 2] = one, db[r - 1] = y->dim[y->rank - 1];
    return binary(k, OP_MUL, e->loc, e, reshaped(k, a, r, da, e->loc, e), reshaped(k, b, r, db, e->loc, e));
  }
  if (!strcmp(f, "groupnorm")) {
    need_real(k, e, 0, a);
    if (rank < 1) fail(k, e->args[0]->loc, "groupnorm takes a vector or a tensor, got %s", shape_str(k, x));
    int id = mk(k, OP_GROUPNORM, e->loc, e, rank, dim, false, a, -1);
    N(k, id)->st[0] = size_arg(k, e->args[1], f);
    return id;
  }
  /* over one axis */
  if (rank < 1) fail(k, e->args[0]->loc, "%s over an axis takes a vector or a tensor, got %s", f, shape_str(k, x));
  /* a sum or mean over an axis is linear: a complex value's real and imaginary parts reduce apart */
  bool linear = !strcmp(f, "sum") || !strcmp(f, "mean");
  if (!linear) need_real(k, e, 0, a);
  int ax = axis_arg(k, e, 1, rank);
  int id;
  if (!strcmp(f, "softmax") || !strcmp(f, "layernorm") || !strcmp(f, "rmsnorm")) {
    Op op = f[0] == 's' ? OP_SOFTMAX : f[0] == 'l' ? OP_LAYERNORM : OP_RMSNORM;
    id = mk(k, op, e->loc, e, rank, dim, false, a, -1);
    N(k, id)->idx = op == OP_SOFTMAX ? ax : ax + 1; /* the norms: 0 is version 1's "over everything" */
    return id;
  }
  for (int i = ax; i + 1 < rank; i++) dim[i] = dim[i + 1];
  if (!strcmp(f, "amin")) {
    int neg = mk(k, OP_NEG, e->loc, e, x->rank, x->dim, false, a, -1);
    id = mk(k, OP_RMAX, e->loc, e, rank - 1, dim, false, neg, -1);
    N(k, id)->idx = ax;
    return mk(k, OP_NEG, e->loc, e, rank - 1, dim, false, id, -1);
  }
  Op op = !strcmp(f, "sum") ? OP_RSUM : !strcmp(f, "mean") ? OP_RMEAN : OP_RMAX;
  id = mk(k, op, e->loc, e, rank - 1, dim, linear && x->cplx, a, -1);
  N(k, id)->idx = ax;
  return id;
}

static int call(Checker *k, const Expr *e) {
  if (!strcmp(e->name, "prev") || !strcmp(e->name, "conv")) return time_call(k, e);
  int v2 = call_v2(k, e);
  if (v2 >= 0) return v2;
  int f = -1;
  for (int i = 0; i < NBUILTINS; i++)
    if (!strcmp(builtins[i].name, e->name)) f = i;
  if (f < 0) {
    Entity *ent = lookup(k, e->name);
    if (ent) fail(k, e->loc, "'%s' is %s, not a function", e->name, kind_word(ent->kind));
    const char *names[NBUILTINS + NV2];
    for (int i = 0; i < NBUILTINS; i++) names[i] = builtins[i].name;
    for (int i = 0; i < NV2; i++) names[NBUILTINS + i] = v2_names[i];
    const char *near = edit_nearest(e->name, names, NBUILTINS + NV2);
    if (near) fail(k, e->loc, "unknown function '%s'; did you mean '%s'?", e->name, near);
    fail(k, e->loc, "unknown function '%s'", e->name);
  }
  if (e->nargs != builtins[f].nargs)
    fail(k, e->loc, "%s takes %d argument%s, got %d", e->name, builtins[f].nargs, builtins[f].nargs == 1 ? "" : "s",
         e->nargs);
  if (builtins[f].kind == F_WHERE) return where(k, e);
  int a = expr(k, e->args[0]);
  int b = e->nargs > 1 ? expr(k, e->args[1]) : -1;
  Node *x = N(k, a);
  Op op = builtins[f].op;
  switch (builtins[f].kind) {
  case F_CLAMP: {
    /* torch.clamp: min(max(a, lo), hi); the min and max derivatives give a the gradient 1 on
     * [lo, hi], bounds included, as PyTorch's */
    int hi = expr(k, e->args[2]);
    need_real(k, e, 0, a);
    need_real(k, e, 1, b);
    need_real(k, e, 2, hi);
    return binary(k, OP_MIN, e->loc, e, binary(k, OP_MAX, e->loc, e, a, b), hi);
  }
  case F_WHERE: UNREACHABLE("where");
  case F_REAL1:
    need_real(k, e, 0, a);
    return mk(k, op, e->loc, e, x->rank, x->dim, false, a, -1);
  case F_ANY1: return mk(k, op, e->loc, e, x->rank, x->dim, x->cplx, a, -1);
  case F_ABS: return mk(k, op, e->loc, e, x->rank, x->dim, false, a, -1);
  case F_MINMAX:
    need_real(k, e, 0, a);
    need_real(k, e, 1, b);
    return binary(k, op, e->loc, e, a, b);
  case F_COMPLEX: {
    need_real(k, e, 0, a);
    need_real(k, e, 1, b);
    int id = binary(k, OP_CPLX, e->loc, e, a, b);
    N(k, id)->cplx = true;
    return id;
  }
  case F_PART: return mk(k, op, e->loc, e, x->rank, x->dim, false, a, -1);
  case F_CONJ: return mk(k, op, e->loc, e, x->rank, x->dim, x->cplx, a, -1);
  case F_CIS:
    need_real(k, e, 0, a);
    return mk(k, op, e->loc, e, x->rank, x->dim, true, a, -1);
  case F_REDUCE: return mk(k, op, e->loc, e, 0, NULL, x->cplx, a, -1); /* over every element */
  case F_CONCAT: {
    need_vector(k, e, 0, a);
    need_vector(k, e, 1, b);
    Node *y = N(k, b);
    int one = dims_const(&k->c->dt, 1);
    int d = dims_add(&k->c->dt, x->rank ? x->dim[0] : one, y->rank ? y->dim[0] : one);
    if (d < 0) fail(k, e->loc, "size expression is too complex");
    bool cplx = x->cplx || y->cplx;
    return mk(k, op, e->loc, e, 1, &d, cplx, a, b);
  }
  case F_NORM:
    need_real(k, e, 0, a);
    need_vector(k, e, 0, a);
    return mk(k, op, e->loc, e, x->rank, x->dim, false, a, -1);
  case F_GUMBEL: {
    need_real(k, e, 0, a);
    need_real(k, e, 1, b);
    int id = binary(k, OP_GUMBEL, e->loc, e, a, b);
    return id;
  }
  }
  UNREACHABLE("builtin kind");
}

static int name_ref(Checker *k, const Expr *e) {
  Entity *ent = lookup(k, e->name);
  Cell *c = k->c;
  if (!ent) unknown_name(k, e->loc, e->name, "name");
  switch (ent->kind) {
  case E_OPTION: return konst(k, c->options[ent->idx].value, e->loc, e);
  case E_DIM: { /* version 2: a dim as a real constant (1 / sqrt(K)), its value once bound */
    int id = mk(k, OP_DIMVAL, e->loc, e, 0, NULL, false, -1, -1);
    N(k, id)->st[0] = dims_var(&c->dt, c->dims[ent->idx].sym);
    return id;
  }
  case E_INPUT: {
    int d = c->input_dim;
    return mk(k, OP_INPUT, e->loc, e, 1, &d, false, -1, -1);
  }
  case E_PARAM: {
    ParamInfo *p = &c->params[ent->idx];
    int id = mk(k, OP_PARAM, e->loc, e, p->rank, p->dim, p->cplx, -1, -1);
    N(k, id)->idx = ent->idx;
    return id;
  }
  case E_STATE: {
    StateInfo *s = &c->states[ent->idx];
    if (s->update >= 0) return s->update; /* the new value, after its update */
    int id = mk(k, OP_PREV, e->loc, e, s->rank, s->dim, s->cplx, -1, -1);
    N(k, id)->idx = ent->idx;
    return id;
  }
  case E_VALUE: return ent->idx;
  }
  UNREACHABLE("entity kind");
}

static int expr_node(Checker *k, const Expr *e) {
  switch (e->kind) {
  case EX_NUM:
    if (!isfinite(e->num)) fail(k, e->loc, "number out of range");
    return konst(k, e->num, e->loc, e);
  case EX_NAME: return name_ref(k, e);
  case EX_CALL: return call(k, e);
  case EX_NEG: {
    int a = expr(k, e->a);
    Node *x = N(k, a);
    return mk(k, OP_NEG, e->loc, e, x->rank, x->dim, x->cplx, a, -1);
  }
  case EX_ADD: return binary(k, OP_ADD, e->loc, e, expr(k, e->a), expr(k, e->b));
  case EX_SUB: return binary(k, OP_SUB, e->loc, e, expr(k, e->a), expr(k, e->b));
  case EX_MUL: return binary(k, OP_MUL, e->loc, e, expr(k, e->a), expr(k, e->b));
  case EX_DIV: return binary(k, OP_DIV, e->loc, e, expr(k, e->a), expr(k, e->b));
  case EX_LT:
  case EX_LE:
  case EX_GT:
  case EX_GE: fail(k, e->loc, "a comparison is allowed only as where's first argument");
  case EX_LIST: fail(k, e->loc, "a list of sizes is allowed only as reshape's shape");
  case EX_MATMUL: {
    int m = expr(k, e->a), v = expr(k, e->b);
    Node *M = N(k, m), *V = N(k, v);
    /* a fixed matrix times a vector: version 1's product, a GEMM over the batch */
    if (M->rank == 2 && V->rank == 1 && !is_dyn(k, m)) {
      if (M->dim[1] != V->dim[0])
        fail(k, e->loc, "shape mismatch in '@': %s @ %s", shape_str(k, M), shape_str(k, V));
      int d = M->dim[0];
      return mk(k, OP_MATVEC, e->loc, e, 1, &d, M->cplx || V->cplx, m, v);
    }
    return matmul(k, e, m, v);
  }
  }
  UNREACHABLE("expression kind");
}

static void nest(Checker *k, const Expr *e) {
  if (++k->nest > MAX_DEPTH) fail(k, e->loc, "expression nested more than %d levels deep", MAX_DEPTH);
}

static int expr(Checker *k, const Expr *e) {
  nest(k, e);
  int id = expr_node(k, e);
  k->nest--;
  return id;
}

/* ---- initializer arguments: constant expressions over numbers, dims, options ---- */

static void check_init_expr(Checker *k, const Expr *e);

/* An initializer where a number belongs: only a wrapping initializer (inv_softplus) takes one. */
static _Noreturn void nested_init(Checker *k, const Expr *e) {
  const char *const *names;
  int n = init_names(&names);
  for (int i = 0; i < n; i++)
    if (init_find(names[i])->wraps)
      fail(k, e->loc, "'%s' is an initializer; only %s takes an initializer as its argument", e->name, names[i]);
  fail(k, e->loc, "'%s' is an initializer, not a number", e->name);
}

static void check_init_expr_node(Checker *k, const Expr *e) {
  switch (e->kind) {
  case EX_NUM: return;
  case EX_NAME: {
    Entity *ent = lookup(k, e->name);
    if (!ent && init_find(e->name)) nested_init(k, e);
    if (!ent) unknown_name(k, e->loc, e->name, "name");
    if (ent->kind != E_DIM && ent->kind != E_OPTION)
      fail(k, e->loc, "initializer arguments are constants: numbers, dims and options; '%s' is %s", e->name,
           kind_word(ent->kind));
    return;
  }
  case EX_CALL: {
    static const char *const ok[] = {"sqrt", "log", "exp", "abs", "min", "max", "square", "tanh", "sigmoid"};
    int nok = (int)(sizeof ok / sizeof ok[0]);
    bool found = false;
    for (int i = 0; i < nok; i++)
      if (!strcmp(ok[i], e->name)) found = true;
    if (!found && init_find(e->name)) nested_init(k, e);
    if (!found) fail(k, e->loc, "'%s' cannot be used in an initializer argument", e->name);
    int want = (!strcmp(e->name, "min") || !strcmp(e->name, "max")) ? 2 : 1;
    if (e->nargs != want) fail(k, e->loc, "%s takes %d argument%s, got %d", e->name, want, want == 1 ? "" : "s", e->nargs);
    for (int i = 0; i < e->nargs; i++) check_init_expr(k, e->args[i]);
    return;
  }
  case EX_MATMUL: fail(k, e->loc, "'@' cannot be used in an initializer argument");
  default:
    check_init_expr(k, e->a);
    if (e->b) check_init_expr(k, e->b);
  }
}

static void check_init_expr(Checker *k, const Expr *e) {
  nest(k, e);
  check_init_expr_node(k, e);
  k->nest--;
}

static bool eval_init_expr(Cell *c, const Expr *e, double *out) {
  double a, b;
  switch (e->kind) {
  case EX_NUM: *out = e->num; return true;
  case EX_NAME:
    for (int i = 0; i < c->noptions; i++)
      if (!strcmp(c->options[i].name, e->name)) {
        *out = c->options[i].value;
        return true;
      }
    for (int i = 0; i < c->ndims; i++)
      if (!strcmp(c->dims[i].name, e->name)) {
        *out = (double)c->dims[i].value;
        return c->dims[i].value >= 0;
      }
    return false;
  case EX_CALL: {
    static const struct { const char *name; Op op; } fns[] = {
        {"sqrt", OP_SQRT}, {"log", OP_LOG}, {"exp", OP_EXP}, {"abs", OP_ABS}, {"min", OP_MIN},
        {"max", OP_MAX}, {"square", OP_SQUARE}, {"tanh", OP_TANH}, {"sigmoid", OP_SIGMOID}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
      if (!strcmp(fns[i].name, e->name)) {
        if (!eval_init_expr(c, e->args[0], &a)) return false;
        b = 0;
        if (e->nargs > 1 && !eval_init_expr(c, e->args[1], &b)) return false;
        *out = op_eval_scalar(fns[i].op, a, b);
        return true;
      }
    return false;
  }
  case EX_NEG:
    if (!eval_init_expr(c, e->a, &a)) return false;
    *out = -a;
    return true;
  case EX_MATMUL: return false;
  default:
    if (!eval_init_expr(c, e->a, &a) || !eval_init_expr(c, e->b, &b)) return false;
    *out = e->kind == EX_ADD ? a + b : e->kind == EX_SUB ? a - b : e->kind == EX_MUL ? a * b : a / b;
    return true;
  }
}

/* The suggestion for an unknown initializer name (with `learned` for a state's). */
static _Noreturn void unknown_init(Checker *k, Loc loc, const char *name, bool for_state) {
  const char *const *names;
  int n = init_names(&names);
  const char **cands = arena_alloc(k->arena, sizeof(char *) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) cands[i] = names[i];
  if (for_state) cands[n++] = "learned";
  const char *near = edit_nearest(name, cands, n);
  if (near) fail(k, loc, "unknown initializer '%s'; did you mean '%s'?", name, near);
  fail(k, loc, "unknown initializer '%s'", name);
}

static void check_init_values(Checker *k, const char *name, const Expr **args, int nargs);

/* The argument of a wrapping initializer `outer` (inv_softplus): another initializer, written
 * NAME or NAME(ARGS), that draws values. Sets *inner, *ninner to it. */
static void check_wrapped_init(Checker *k, const char *outer, const Expr *a, const char **inner, int *ninner) {
  bool named = a->kind == EX_CALL || a->kind == EX_NAME;
  const InitDef *def = named ? init_find(a->name) : NULL;
  if (!def) {
    if (named && !(a->kind == EX_NAME && lookup(k, a->name))) unknown_init(k, a->loc, a->name, false);
    fail(k, a->loc, "'%s' takes an initializer as its argument, such as %s(log_uniform(0.001, 0.1))", outer, outer);
  }
  if (def->wraps) fail(k, a->loc, "'%s' cannot take '%s': only one initializer may be nested", outer, a->name);
  if (def->ref_param) fail(k, a->loc, "'%s' takes an initializer that draws values; '%s' reads another param", outer, a->name);
  int n = a->kind == EX_CALL ? a->nargs : 0;
  if (n < def->min_args || n > def->max_args) {
    if (def->min_args == def->max_args)
      fail(k, a->loc, "initializer '%s' takes %d argument%s, got %d", a->name, def->min_args, def->min_args == 1 ? "" : "s", n);
    fail(k, a->loc, "initializer '%s' takes %d to %d arguments, got %d", a->name, def->min_args, def->max_args, n);
  }
  for (int i = 0; i < n; i++) check_init_expr(k, a->args[i]);
  check_init_values(k, a->name, (const Expr **)a->args, n);
  *inner = a->name, *ninner = n;
}

/* The checks of init_check_args on arguments that evaluate now (all of them numbers and options,
 * or the dims bound), reported at the argument at fault. */
static void check_init_values(Checker *k, const char *name, const Expr **args, int nargs) {
  double v[8];
  for (int j = 0; j < nargs; j++)
    if (j >= 8 || !eval_init_expr(k->c, args[j], &v[j]) || !isfinite(v[j])) return;
  char why[200];
  int bad;
  if (init_check_args(name, v, nargs, &bad, why, sizeof why) != 0) fail(k, args[bad]->loc, "%s", why);
}

/* Evaluates an initializer's arguments once the dims are bound (a wrapping one's: its inner
 * initializer's) into out[], and checks what needs no shape, at the argument at fault. */
static void eval_init_args(Checker *k, const char *name, const Expr **args, int nargs, const char *inner, int ninner,
                           double *out) {
  if (inner) name = inner, nargs = ninner, args = (const Expr **)args[0]->args;
  for (int j = 0; j < nargs; j++)
    if (j >= 8 || !eval_init_expr(k->c, args[j], &out[j]) || !isfinite(out[j]))
      fail(k, args[j < 8 ? j : 0]->loc, "this initializer argument does not evaluate to a finite number");
  check_init_values(k, name, args, nargs);
}

static void check_init(Checker *k, const InitAst *in, bool for_state, int *ref, const ParamInfo *self, const char **inner,
                       int *ninner) {
  *ref = -1;
  *inner = NULL, *ninner = 0;
  if (for_state && !strcmp(in->name, "learned")) {
    if (in->has_parens) fail(k, in->loc, "'learned' takes no arguments");
    return;
  }
  const InitDef *def = init_find(in->name);
  if (!def) unknown_init(k, in->loc, in->name, for_state);
  if (in->nargs < def->min_args || in->nargs > def->max_args) {
    if (def->min_args == def->max_args)
      fail(k, in->loc, "initializer '%s' takes %d argument%s, got %d", in->name, def->min_args,
           def->min_args == 1 ? "" : "s", in->nargs);
    fail(k, in->loc, "initializer '%s' takes %d to %d arguments, got %d", in->name, def->min_args, def->max_args,
         in->nargs);
  }
  if (def->ref_param) {
    if (for_state) fail(k, in->loc, "'%s' initializes a param from another param; it cannot give an initial state", in->name);
    const Expr *a = in->args[0];
    if (a->kind != EX_NAME) fail(k, a->loc, "'%s' takes the name of another param", in->name);
    Entity *ent = lookup(k, a->name);
    if (!ent) unknown_name(k, a->loc, a->name, "param");
    if (ent->kind != E_PARAM) fail(k, a->loc, "'%s' is %s; '%s' takes a param", a->name, kind_word(ent->kind), in->name);
    ParamInfo *p = &k->c->params[ent->idx];
    if (p->cplx || p->rank != self->rank || (p->rank > 0 && p->dim[0] != self->dim[0]) ||
        (p->rank > 1 && p->dim[1] != self->dim[1]) || (p->rank > 2 && p->dim[2] != self->dim[2]))
      fail(k, a->loc, "'%s' needs a real param of the same shape as '%s'", in->name, self->name);
    *ref = ent->idx;
    return;
  }
  if (def->wraps) {
    check_wrapped_init(k, in->name, in->args[0], inner, ninner);
    return;
  }
  for (int i = 0; i < in->nargs; i++) check_init_expr(k, in->args[i]);
  check_init_values(k, in->name, (const Expr **)in->args, in->nargs);
}

/* ---- statements ---- */

static void body(Checker *k, Stmt **stmts, int n);

/* Names a branch defines that stay visible after the `if`: its declarations,
 * and the names that both branches of a nested `if` define. */
static bool defines(Stmt **stmts, int n, const char *name) {
  for (int i = 0; i < n; i++) {
    Stmt *s = stmts[i];
    switch (s->kind) {
    case ST_INPUT: case ST_DIM: case ST_PARAM: case ST_STATE: case ST_LET: case ST_GATE:
      if (!strcmp(s->name, name)) return true;
      break;
    case ST_IF:
      if (s->has_else && defines(s->then_body, s->nthen, name) && defines(s->else_body, s->nelse, name)) return true;
      break;
    default: break;
    }
  }
  return false;
}

static void stmt_if(Checker *k, Stmt *s) {
  Entity *e = lookup(k, s->name);
  if (!e) unknown_name(k, s->name_loc, s->name, "option");
  if (e->kind != E_OPTION || k->c->options[e->idx].type != OPT_BOOL)
    fail(k, s->name_loc, "`if` needs a bool option; '%s' is %s", s->name,
         e->kind != E_OPTION ? kind_word(e->kind) : k->c->options[e->idx].type == OPT_INT ? "an int option" : "a real option");
  bool take = k->c->options[e->idx].value != 0;
  int mark = k->nents;
  Stmt **other = take ? s->else_body : s->then_body;
  int nother = take ? s->nelse : s->nthen;
  if (take) body(k, s->then_body, s->nthen);
  else body(k, s->else_body, s->nelse);
  for (int i = mark; i < k->nents; i++)
    if (!defines(other, nother, k->ents[i].name)) k->ents[i].hidden = true;
}

/* A param's or state's kind (`what`): real (the default) or complex. */
static bool is_complex(Checker *k, const Stmt *s, const char *what) {
  if (!s->kind_name || !strcmp(s->kind_name, "real")) return false;
  if (strcmp(s->kind_name, "complex")) fail(k, s->kind_loc, "unknown kind '%s': a %s is real or complex", s->kind_name, what);
  return true;
}

/* What a param and a state declare alike: the initializer as written. */
typedef struct InitUse {
  const char *name;
  Loc loc;
  const Expr **args;
  int nargs;
} InitUse;

static InitUse init_use(const InitAst *in) { return (InitUse){in->name, in->loc, (const Expr **)in->args, in->nargs}; }

/* A buffer: a constant, initialized like a param and never trained; `frozen` is a param's. */
static void check_buffer_or_frozen(Checker *k, const Stmt *s) {
  if (!s->is_buffer) return;
  if (!s->init)
    fail(k, s->name_loc, "buffer '%s' needs an initializer: `buffer %s ~ INIT` (a buffer is a constant)", s->name,
         s->name);
  if (s->frozen)
    fail(k, s->frozen_loc, "a buffer is never trained, so it is not `frozen`; `frozen` follows a param's initializer");
  if (s->ntags > 0)
    fail(k, s->tag_locs[0], "a buffer takes no tags: it is never trained (tags steer training)");
}

static void stmt_param(Checker *k, Stmt *s) {
  Cell *c = k->c;
  check_buffer_or_frozen(k, s);
  ParamInfo p = {.name = s->name, .loc = s->name_loc, .state = -1, .buffer = s->is_buffer, .frozen = s->frozen};
  shape_of(k, s->shape, &p.rank, p.dim, false);
  p.cplx = is_complex(k, s, "param");
  InitUse u = init_use(s->init);
  p.init = u.name, p.init_loc = u.loc, p.init_args = u.args, p.ninit_args = u.nargs;
  p.tags = s->tags;
  p.ntags = s->ntags;
  check_init(k, s->init, false, &p.ref, &p, &p.inner, &p.ninner_args);
  declare(k, s->name, s->name_loc, E_PARAM, c->nparams);
  VEC_PUSH(c->params, c->nparams, k->capparams, p);
}

static void stmt_state(Checker *k, Stmt *s) {
  Cell *c = k->c;
  StateInfo st = {.name = s->name, .loc = s->name_loc};
  shape_of(k, s->shape, &st.rank, st.dim, false);
  st.cplx = is_complex(k, s, "state");
  st.update = -1;
  st.param = -1;
  st.coef_a = st.coef_b = st.culprit = -1;
  if (s->init) {
    int ref;
    ParamInfo fake = {0};
    check_init(k, s->init, true, &ref, &fake, &st.inner, &st.ninner_args);
    InitUse u = init_use(s->init);
    st.init = u.name, st.init_loc = u.loc, st.init_args = u.args, st.ninit_args = u.nargs;
    if (!strcmp(st.init, "learned")) {
      ParamInfo p = {0};
      p.name = arena_join(k->arena, s->name, ".", "init");
      p.loc = s->init->loc;
      p.rank = st.rank;
      for (int i = 0; i < st.rank; i++) p.dim[i] = st.dim[i];
      p.cplx = st.cplx;
      p.init = "zeros";
      p.init_loc = s->init->loc;
      p.ref = -1;
      p.state = c->nstates;
      st.param = c->nparams;
      VEC_PUSH(c->params, c->nparams, k->capparams, p);
    }
  }
  declare(k, s->name, s->name_loc, E_STATE, c->nstates);
  VEC_PUSH(c->states, c->nstates, k->capstates, st);
}

static void stmt_update(Checker *k, Stmt *s) {
  Cell *c = k->c;
  Entity *e = lookup(k, s->name);
  if (!e) unknown_name(k, s->name_loc, s->name, "state");
  if (e->kind != E_STATE) {
    if (e->kind == E_PARAM && c->params[e->idx].buffer)
      fail(k, s->name_loc, "'%s' is a buffer, a constant; only states are updated (use `let` for a new value)", s->name);
    if (e->kind == E_VALUE)
      fail(k, s->name_loc, "'%s' is already defined; lets and gates are assigned once, and only states are updated", s->name);
    fail(k, s->name_loc, "'%s' is %s; only states are updated (use `let %s = ...` for a new value)", s->name,
         kind_word(e->kind), s->name);
  }
  StateInfo *st = &c->states[e->idx];
  if (st->update >= 0) {
    diag_error(s->name_loc, "state '%s' is updated twice", s->name);
    diag_note(graph_node(&c->g, st->update)->loc, "the first update is here");
    longjmp(k->fail, 1);
  }
  int v = expr(k, s->expr);
  Node *x = N(k, v);
  Node like = {0};
  like.rank = st->rank;
  for (int i = 0; i < st->rank; i++) like.dim[i] = st->dim[i];
  if (!same_shape(x, &like)) {
    if (!numel1(k, x)) {
      char want[160];
      const char **names = arena_alloc(k->arena, sizeof(char *) * (size_t)(c->ndims + 1));
      for (int i = 0; i < c->ndims; i++) names[i] = c->dims[i].name;
      c->dim_names = names;
      cell_shape_text(c, st->rank, st->dim, want, (int)sizeof want);
      fail(k, s->loc, "shape mismatch: state '%s' is %s, its update is %s", s->name, want, shape_str(k, x));
    }
    v = bcast_to(k, v, &like, s->loc);
    x = N(k, v);
  }
  if (x->cplx && !st->cplx)
    fail(k, s->loc, "state '%s' is real, its update is complex (declare it `state %s%s : complex`, or take re())", s->name,
         s->name, st->rank ? "[...]" : "");
  /* each update gets its own NEWVAL node, so every state's new value is marked */
  st = &c->states[e->idx];
  st->update = mk(k, OP_NEWVAL, s->name_loc, s->expr, st->rank, st->dim, st->cplx, v, -1);
  N(k, st->update)->idx = e->idx;
  st->order = k->nupdates++;
}

static void body(Checker *k, Stmt **stmts, int n) {
  Cell *c = k->c;
  for (int i = 0; i < n; i++) {
    Stmt *s = stmts[i];
    switch (s->kind) {
    case ST_INPUT: {
      if (k->has_input) {
        diag_error(s->loc, "a cell has exactly one input");
        diag_note(c->input_loc, "the input is declared here");
        longjmp(k->fail, 1);
      }
      if (!s->shape || s->shape->n != 1) fail(k, s->name_loc, "the input is a vector: `input %s[D]`", s->name);
      k->has_input = true;
      c->input_name = s->name;
      c->input_loc = s->name_loc;
      int rank;
      shape_of(k, s->shape, &rank, &c->input_dim, true);
      declare(k, s->name, s->name_loc, E_INPUT, 0);
      break;
    }
    case ST_DIM: {
      DimInfo d = {0};
      d.name = s->name;
      d.loc = s->name_loc;
      d.sym = c->ndims;
      d.def = s->dim_value;
      d.value = -1;
      if (s->dim_value) size_expr(k, s->dim_value, false); /* check the default now */
      VEC_PUSH(c->dims, c->ndims, k->capdims, d);
      declare(k, s->name, s->name_loc, E_DIM, c->ndims - 1);
      break;
    }
    case ST_PARAM: stmt_param(k, s); break;
    case ST_STATE: stmt_state(k, s); break;
    case ST_LET:
    case ST_GATE: {
      k->defining = s->name;
      int v = expr(k, s->expr);
      k->defining = NULL;
      if (s->kind == ST_GATE) {
        if (N(k, v)->cplx) fail(k, s->loc, "gate '%s' is complex; gates are real (their values are recorded)", s->name);
        GateInfo g = {s->name, s->name_loc, v, false};
        VEC_PUSH(c->gates, c->ngates, k->capgates, g);
      }
      declare(k, s->name, s->name_loc, E_VALUE, v);
      k->ents[k->nents - 1].is_gate = s->kind == ST_GATE;
      break;
    }
    case ST_UPDATE: stmt_update(k, s); break;
    case ST_OUTPUT: {
      if (k->has_output) {
        diag_error(s->loc, "a cell has at most one output");
        diag_note(k->output_loc, "the first output is here");
        longjmp(k->fail, 1);
      }
      int v = expr(k, s->expr);
      if (N(k, v)->cplx) fail(k, s->loc, "the output is complex; it must be real (take re(), im() or abs())");
      if (N(k, v)->rank > 1) fail(k, s->loc, "the output is %s; it must be a vector or a scalar (flatten a tensor)", shape_str(k, N(k, v)));
      k->has_output = true;
      k->output_loc = s->loc;
      c->output = v;
      break;
    }
    case ST_IF: stmt_if(k, s); break;
    }
  }
}

/* ---- options ---- */

static bool parse_value(OptType t, const char *text, double *out) {
  if (t == OPT_BOOL) {
    if (!strcmp(text, "true")) return *out = 1, true;
    if (!strcmp(text, "false")) return *out = 0, true;
    return false;
  }
  char *end;
  double v = strtod(text, &end);
  if (!*text || *end || !isfinite(v)) return false;
  if (t == OPT_INT && (v != floor(v) || fabs(v) > 1e9)) return false;
  *out = v;
  return true;
}

static const char *type_word(OptType t) { return t == OPT_BOOL ? "bool" : t == OPT_INT ? "int" : "real"; }

static void options(Checker *k, const CellAst *ast) {
  Cell *c = k->c;
  c->options = arena_alloc(k->arena, sizeof(OptionInfo) * (size_t)(ast->noptions + 1));
  for (int i = 0; i < ast->noptions; i++) {
    const OptionAst *o = &ast->options[i];
    OptionInfo *oi = &c->options[i];
    oi->name = o->name;
    oi->loc = o->loc;
    if (!strcmp(o->type_name, "real")) oi->type = OPT_REAL;
    else if (!strcmp(o->type_name, "int")) oi->type = OPT_INT;
    else if (!strcmp(o->type_name, "bool")) oi->type = OPT_BOOL;
    else fail(k, o->type_loc, "unknown option type '%s': options are real, int or bool", o->type_name);
    if (oi->type == OPT_BOOL && !o->is_bool) fail(k, o->value_loc, "option '%s' is a bool: its default is true or false", o->name);
    if (oi->type != OPT_BOOL && o->is_bool)
      fail(k, o->value_loc, "option '%s' is %s %s: its default is a number", o->name, oi->type == OPT_INT ? "an" : "a",
           type_word(oi->type));
    if (oi->type == OPT_INT && !o->is_int) fail(k, o->value_loc, "option '%s' is an int: its default is an integer", o->name);
    if (!isfinite(o->value) || (oi->type == OPT_INT && fabs(o->value) > 1e9))
      fail(k, o->value_loc, "option '%s': its default is out of range%s", o->name, oi->type == OPT_INT ? " (an int is at most 10^9)" : "");
    oi->value = o->value;
    declare(k, o->name, o->loc, E_OPTION, i);
    c->noptions++;
  }
  for (int i = 0; i < k->o->nsets; i++) {
    const Binding *b = &k->o->sets[i];
    Entity *e = lookup(k, b->name);
    if (!e || e->kind != E_OPTION) continue; /* the caller reports options no cell has */
    OptionInfo *oi = &c->options[e->idx];
    if (!parse_value(oi->type, b->value, &oi->value)) {
      diag_plain("--set %s=%s: option '%s' of cell '%s' is %s %s", b->name, b->value, b->name, c->name,
                 oi->type == OPT_INT ? "an" : "a", type_word(oi->type));
      longjmp(k->fail, 1);
    }
  }
}

/* ---- analysis (language spec section 5) ---- */

typedef struct Decomp {
  bool ok;
  int a, b;      /* new = a * prev + b; -1 = zero */
  int culprit;   /* when !ok */
} Decomp;

typedef struct Analysis {
  Checker *k;
  int state;      /* the state being classified */
  signed char *indep; /* memo: 1 independent, 0 not, -1 unknown */
  Decomp *memo;   /* decompose, per node that existed when the analysis began */
  bool *done;
  int nmemo;
} Analysis;

/* Independent: uses no state's previous value, except through the new value
 * of a diagonal-linear state updated earlier. */
static bool independent(Analysis *an, int id) {
  if (an->indep[id] >= 0) return an->indep[id];
  Node *n = N(an->k, id);
  bool r;
  if (n->op == OP_PREV) r = false;
  else if (n->op == OP_LAG) r = true; /* a past value of the input and params */
  else if (n->op == OP_NEWVAL) r = an->k->c->states[n->idx].rec == REC_DIAG_LINEAR;
  else {
    r = true;
    for (int i = 0; i < op_arity(n->op); i++)
      if (n->a[i] >= 0 && !independent(an, n->a[i])) r = false;
  }
  an->indep[id] = r;
  return r;
}

static int tnode(Checker *k, Op op, int a, int b, Loc loc) {
  if (op == OP_NEG) {
    Node *x = N(k, a);
    return mk(k, OP_NEG, loc, x->ast, x->rank, x->dim, x->cplx, a, -1);
  }
  return binary(k, op, loc, N(k, a)->ast, a, b);
}

static Decomp decompose(Analysis *an, int id);

/* A bare read of a state is a poor culprit: a new value has one node for all
 * its uses, so no place to point at, and `h` says less than `Whf @ h`. Blame
 * the operation `user` that reads it instead (a previous value too when
 * prev_too). */
static Decomp blame(Analysis *an, Decomp d, int user, bool prev_too) {
  if (d.ok) return d;
  Op op = N(an->k, d.culprit)->op;
  if (op == OP_NEWVAL || (prev_too && op == OP_PREV)) d.culprit = user;
  return d;
}

/* A node that is not linear in prev: blame the innermost part that is. */
static Decomp culprit_in(Analysis *an, int id) {
  const Node n = *N(an->k, id); /* a copy: decompose adds nodes, which may move the graph */
  Decomp d = {false, -1, -1, id};
  if (n.op == OP_PREV || n.op == OP_NEWVAL) return d;
  for (int i = 0; i < op_arity(n.op); i++) {
    if (n.a[i] < 0 || independent(an, n.a[i])) continue;
    Decomp s = decompose(an, n.a[i]);
    if (!s.ok) return blame(an, s, id, true);
  }
  return d;
}

static Decomp decompose_node(Analysis *an, int id) {
  Checker *k = an->k;
  const Node n = *N(k, id); /* a copy: tnode adds nodes, which may move the graph */
  Decomp d = {true, -1, -1, -1};
  if (independent(an, id)) {
    d.b = id;
    return d;
  }
  Loc loc = n.loc;
  switch (n.op) {
  case OP_PREV:
    if (n.idx != an->state) return (Decomp){false, -1, -1, id};
    d.a = konst(k, 1, loc, n.ast);
    return d;
  case OP_ADD:
  case OP_SUB: {
    Decomp x = decompose(an, n.a[0]);
    if (!x.ok) return blame(an, x, id, false);
    Decomp y = decompose(an, n.a[1]);
    if (!y.ok) return blame(an, y, id, false);
    Op op = n.op;
    d.a = x.a < 0 ? (y.a < 0 ? -1 : (op == OP_ADD ? y.a : tnode(k, OP_NEG, y.a, -1, loc)))
                  : (y.a < 0 ? x.a : tnode(k, op, x.a, y.a, loc));
    d.b = x.b < 0 ? (y.b < 0 ? -1 : (op == OP_ADD ? y.b : tnode(k, OP_NEG, y.b, -1, loc)))
                  : (y.b < 0 ? x.b : tnode(k, op, x.b, y.b, loc));
    return d;
  }
  case OP_NEG: {
    Decomp x = decompose(an, n.a[0]);
    if (!x.ok) return blame(an, x, id, false);
    d.a = x.a < 0 ? -1 : tnode(k, OP_NEG, x.a, -1, loc);
    d.b = x.b < 0 ? -1 : tnode(k, OP_NEG, x.b, -1, loc);
    return d;
  }
  case OP_MUL:
  case OP_DIV: {
    int f = -1, other = -1;
    if (independent(an, n.a[1])) f = n.a[1], other = n.a[0];
    else if (n.op == OP_MUL && independent(an, n.a[0])) f = n.a[0], other = n.a[1];
    if (f < 0) {
      Decomp x = decompose(an, n.a[0]);
      if (!x.ok) return blame(an, x, id, false);
      Decomp y = decompose(an, n.a[1]);
      if (!y.ok) return blame(an, y, id, false);
      return (Decomp){false, -1, -1, id}; /* prev times something that depends on it */
    }
    Decomp x = decompose(an, other);
    if (!x.ok) return blame(an, x, id, false);
    Op op = n.op;
    if (op == OP_MUL) {
      d.a = x.a < 0 ? -1 : tnode(k, OP_MUL, f, x.a, loc);
      d.b = x.b < 0 ? -1 : tnode(k, OP_MUL, f, x.b, loc);
    } else {
      d.a = x.a < 0 ? -1 : tnode(k, OP_DIV, x.a, f, loc);
      d.b = x.b < 0 ? -1 : tnode(k, OP_DIV, x.b, f, loc);
    }
    return d;
  }
  case OP_BCAST: {
    Decomp x = decompose(an, n.a[0]);
    if (!x.ok) return blame(an, x, id, false);
    return (Decomp){false, -1, -1, id};
  }
  case OP_MASK: {
    /* where's selection by a state-free comparison is a 0/1 factor: where(c, a * h + b, h) is
     * linear in h, its coefficient mask(m, a) + mask(1 - m, 1) */
    if (!independent(an, n.a[0])) return culprit_in(an, id);
    Decomp x = decompose(an, n.a[1]);
    if (!x.ok) return blame(an, x, id, false);
    d.a = x.a < 0 ? -1 : tnode(k, OP_MASK, n.a[0], x.a, loc);
    d.b = x.b < 0 ? -1 : tnode(k, OP_MASK, n.a[0], x.b, loc);
    return d;
  }
  case OP_NEWVAL: return (Decomp){false, -1, -1, id};
  default: return culprit_in(an, id);
  }
}

/* decompose_node, memoized: shared subexpressions are analyzed once (a chain
 * of `let a2 = a1 + a1` would otherwise take exponential time). */
static Decomp decompose(Analysis *an, int id) {
  if (id < an->nmemo && an->done[id]) return an->memo[id];
  Decomp d = decompose_node(an, id);
  if (id < an->nmemo) an->memo[id] = d, an->done[id] = true;
  return d;
}

static bool reaches_prev(Checker *k, int id, signed char *memo) {
  if (memo[id] >= 0) return memo[id];
  Node *n = N(k, id);
  bool r = n->op == OP_PREV;
  for (int i = 0; !r && n->op != OP_LAG && i < op_arity(n->op); i++)
    if (n->a[i] >= 0 && reaches_prev(k, n->a[i], memo)) r = true;
  memo[id] = r;
  return r;
}

/* The read that makes a culprit term of state `self` nonlinear (for the
 * message): with `foreign`, the previous value of another state or the new
 * value of a nonlinear one; without, its own previous value. -1 if none. */
static int culprit_read(Checker *k, int id, int self, bool foreign, signed char *seen) {
  if (seen[id]) return -1;
  seen[id] = 1;
  Node *n = N(k, id);
  if (n->op == OP_PREV) return (n->idx != self) == foreign ? id : -1;
  if (n->op == OP_NEWVAL && n->idx != self)
    return foreign && k->c->states[n->idx].rec != REC_DIAG_LINEAR ? id : -1;
  for (int i = 0; i < op_arity(n->op); i++)
    if (n->a[i] >= 0) {
      int p = culprit_read(k, n->a[i], self, foreign, seen);
      if (p >= 0) return p;
    }
  return -1;
}

/* Whether node id is affine in state an->state's previous value (matrix-linear when it is not
 * diagonal): it reaches the state only through +, -, *, / by state-free values, a product with a
 * state-free operand on either side, transpose, reshape, broadcast, a sum over an axis, a slice,
 * or where's selection by a state-free comparison. */
static bool affine(Analysis *an, int id, signed char *memo) {
  if (memo[id] >= 0) return memo[id];
  Node *n = N(an->k, id);
  bool r = false;
  if (independent(an, id)) r = true;
  else
    switch (n->op) {
    case OP_PREV: r = n->idx == an->state; break;
    case OP_ADD: case OP_SUB: r = affine(an, n->a[0], memo) && affine(an, n->a[1], memo); break;
    case OP_NEG: case OP_TRANSPOSE: case OP_RESHAPE: case OP_EXPAND: case OP_BCAST: case OP_RSUM: case OP_RMEAN:
    case OP_SUM: case OP_MEAN: case OP_AXSLICE: r = affine(an, n->a[0], memo); break;
    case OP_MUL: case OP_MATMUL: case OP_MATVEC:
      r = (independent(an, n->a[0]) && affine(an, n->a[1], memo)) || (independent(an, n->a[1]) && affine(an, n->a[0], memo));
      break;
    case OP_DIV: r = independent(an, n->a[1]) && affine(an, n->a[0], memo); break;
    case OP_MASK: r = independent(an, n->a[0]) && affine(an, n->a[1], memo); break;
    default: r = false;
    }
  memo[id] = r;
  return r;
}

/* A read of state `state`'s previous value that reaches id other than through the state's own new
 * value (the update's a * prev): the PREV node, or -1. A scan's backward hands the step before only
 * a * dtotal, so such a read (the output or another state reading the previous value) needs the
 * sequential plan. */
static int outside_read(Checker *k, int id, int state, signed char *seen) {
  if (id < 0 || seen[id]) return -1;
  seen[id] = 1;
  Node *n = N(k, id);
  if (n->op == OP_PREV) return n->idx == state ? id : -1;
  if (n->op == OP_NEWVAL && n->idx == state) return -1;
  for (int i = 0; i < op_arity(n->op); i++) {
    int r = outside_read(k, n->a[i], state, seen);
    if (r >= 0) return r;
  }
  return -1;
}

/* The first read of a scanned state's previous value outside its update, from the output or the
 * other states' updates (the roots of the loss), or -1. */
static int scan_blocker(Checker *k) {
  Cell *c = k->c;
  signed char *seen = xmalloc((size_t)c->g.nnodes + 1);
  int r = -1;
  for (int s = 0; s < c->nstates && r < 0; s++) {
    if (c->states[s].rec != REC_DIAG_LINEAR || c->states[s].hist_lag) continue;
    memset(seen, 0, (size_t)c->g.nnodes + 1);
    if (c->output >= 0) r = outside_read(k, c->output, s, seen);
    for (int j = 0; j < c->nstates && r < 0; j++)
      if (j != s && c->states[j].update >= 0) r = outside_read(k, c->states[j].update, s, seen);
  }
  free(seen);
  return r;
}

static void analyze(Checker *k) {
  Cell *c = k->c;
  int nn = c->g.nnodes;
  /* classify in update order: a state may use the new value of one before it
   * (in arena memory: an error while building coefficients longjmps out) */
  int *order = arena_alloc(k->arena, sizeof(int) * (size_t)(c->nstates + 1));
  for (int i = 0; i < c->nstates; i++) order[c->states[i].order] = i;
  for (int oi = 0; oi < c->nstates; oi++) {
    StateInfo *s = &c->states[order[oi]];
    if (s->hist_lag > 0) { /* a history shifts by a step: not a scan, but no recurrence either */
      s->rec = REC_NONLINEAR;
      continue;
    }
    Analysis an = {k, order[oi], NULL, NULL, NULL, c->g.nnodes};
    an.indep = arena_alloc(k->arena, (size_t)c->g.nnodes + 4096);
    memset(an.indep, -1, (size_t)c->g.nnodes + 4096);
    an.memo = arena_alloc(k->arena, sizeof(Decomp) * (size_t)(an.nmemo + 1));
    an.done = arena_alloc(k->arena, sizeof(bool) * (size_t)(an.nmemo + 1));
    int update_expr = N(k, s->update)->a[0];
    Decomp d = blame(&an, decompose(&an, update_expr), s->update, false); /* `b = a` */
    s = &c->states[order[oi]];
    if (d.ok) {
      s->rec = REC_DIAG_LINEAR;
      s->coef_a = d.a;
      s->coef_b = d.b;
    } else {
      signed char *memo = arena_alloc(k->arena, (size_t)c->g.nnodes);
      memset(memo, -1, (size_t)c->g.nnodes);
      s->rec = affine(&an, update_expr, memo) ? REC_MATRIX_LINEAR : REC_NONLINEAR;
      s->culprit = d.culprit;
    }
  }
  signed char *memo = xmalloc((size_t)c->g.nnodes);
  memset(memo, -1, (size_t)c->g.nnodes);
  for (int i = 0; i < c->ngates; i++) c->gates[i].sees_state = reaches_prev(k, c->gates[i].node, memo);
  free(memo);
  (void)nn;
  c->mode = MODE_SCAN;
  for (int i = 0; i < c->nstates; i++) /* (a scan-mode plan runs the histories step by step) */
    if (c->states[i].rec != REC_DIAG_LINEAR && !c->states[i].hist_lag) c->mode = MODE_SEQUENTIAL;
  c->scan_blocker = c->mode == MODE_SCAN ? scan_blocker(k) : -1;
  if (c->scan_blocker >= 0) c->mode = MODE_SEQUENTIAL;
  if (k->o->force_sequential) c->mode = MODE_SEQUENTIAL;
  if (k->o->force_scan && c->scan_blocker >= 0) {
    Node *pr = N(k, c->scan_blocker);
    fail(k, pr->loc, "cannot run cell '%s' in scan mode: the previous value of state '%s' is read here, outside its update; a scan's backward takes only the update's own read (write the read after the update, of the new value, or run sequentially)",
         c->name, c->states[pr->idx].name);
  }
  if (k->o->force_scan && c->mode == MODE_SEQUENTIAL) {
    for (int i = 0; i < c->nstates; i++) {
      StateInfo *s = &c->states[i];
      if (s->rec == REC_MATRIX_LINEAR)
        fail(k, s->loc, "cannot run cell '%s' in scan mode: state '%s' is matrix-linear (affine in itself, not diagonal); a scan needs diagonal-linear states",
             c->name, s->name);
      if (s->rec != REC_NONLINEAR || s->hist_lag) continue;
      Node *cu = N(k, s->culprit);
      signed char *seen = arena_alloc(k->arena, (size_t)c->g.nnodes);
      int p = culprit_read(k, s->culprit, i, true, seen);
      if (p < 0) {
        memset(seen, 0, (size_t)c->g.nnodes);
        p = culprit_read(k, s->culprit, i, false, seen);
      }
      const char *term = cu->ast ? expr_text(k->arena, cu->ast) : "?";
      if (p >= 0 && N(k, p)->op == OP_NEWVAL)
        fail(k, cu->loc, "cannot run cell '%s' in scan mode: state '%s' is nonlinear: the term '%s' uses the new value of state '%s', which is %s",
             c->name, s->name, term, c->states[N(k, p)->idx].name, recurrence_name(c->states[N(k, p)->idx].rec));
      const char *prev = p >= 0 ? c->states[N(k, p)->idx].name : s->name;
      fail(k, cu->loc, "cannot run cell '%s' in scan mode: state '%s' is nonlinear: the term '%s' reads the previous value of '%s'",
           c->name, s->name, term, prev);
    }
  }
}

/* ---- binding dims to values ---- */

/* The params of a cell together hold at most PARAMS_MAX elements (a complex param counts its real
 * and imaginary parts): the lowered program, its plan (matrices stacked for one GEMM) and the
 * back ends count a cell's elements in int. One rule for every command: with every dim bound the
 * total is exact; with some unbound (check), the params whose sizes are known already count, so a
 * cell that can never fit is refused by check too, in the same words. */
#define PARAMS_MAX 2147483647L

static void check_params_total(Checker *k, const long *values, bool all) {
  Cell *c = k->c;
  long total = 0, largest = -1;
  int big = -1;
  char unknown[256] = "";
  size_t nu = 0;
  for (int i = 0; i < c->nparams; i++) {
    const ParamInfo *p = &c->params[i];
    long numel = p->cplx ? 2 : 1, v;
    bool known = true;
    for (int j = 0; j < p->rank; j++)
      if (!dims_eval(&c->dt, p->dim[j], values, &v) || v < 1) known = false;
      else if (__builtin_mul_overflow(numel, v, &numel)) numel = LONG_MAX;
    if (!known) {
      if (nu < sizeof unknown) nu += (size_t)snprintf(unknown + nu, sizeof unknown - nu, "%s'%s'", nu ? ", " : "", p->name);
      continue;
    }
    if (__builtin_add_overflow(total, numel, &total)) total = LONG_MAX;
    if (numel > largest) largest = numel, big = i;
  }
  if (total <= PARAMS_MAX) return;
  const ParamInfo *p = &c->params[big];
  char shape[64] = "";
  for (int j = 0, n = 0; j < p->rank; j++) {
    long v;
    dims_eval(&c->dt, p->dim[j], values, &v);
    n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%ld", j ? ", " : "", v);
  }
  const char *sat = total == LONG_MAX ? "or more " : "";
  if (all)
    fail(k, p->loc, "the params of cell '%s' hold %ld %selements together, over the limit of %ld (2^31 - 1) on a cell's params; "
         "the largest is '%s' [%s]%s with %ld", c->name, total, sat, PARAMS_MAX, p->name, shape, p->cplx ? " complex" : "", largest);
  fail(k, p->loc, "the params of cell '%s' hold at least %ld %selements together (not counting %s, sized by unbound dims), "
       "over the limit of %ld (2^31 - 1) on a cell's params; the largest is '%s' [%s]%s with %ld", c->name, total, sat, unknown,
       PARAMS_MAX, p->name, shape, p->cplx ? " complex" : "", largest);
}

static bool bind(Checker *k) {
  Cell *c = k->c;
  long *values = arena_alloc(k->arena, sizeof(long) * (size_t)(c->ndims + 1));
  for (int i = 0; i < c->ndims; i++) values[i] = -1;
  for (int i = 0; i < k->o->ndims; i++) {
    const Binding *b = &k->o->dims[i];
    bool known = false;
    for (int j = 0; j < c->ndims; j++) known = known || !strcmp(c->dims[j].name, b->name);
    if (!known && !k->o->any_dims) {
      const char **names = arena_alloc(k->arena, sizeof(char *) * (size_t)(c->ndims + 1));
      for (int j = 0; j < c->ndims; j++) names[j] = c->dims[j].name;
      char owner[160], msg[512];
      snprintf(owner, sizeof owner, "cell '%s'", c->name);
      diag_plain("--dims %s=%s: %s", b->name, b->value, no_such_text(msg, sizeof msg, owner, "dim", b->name, names, c->ndims));
      longjmp(k->fail, 1);
    }
    for (int j = 0; j < c->ndims; j++)
      if (!strcmp(c->dims[j].name, b->name)) {
        char *end;
        long v = strtol(b->value, &end, 10);
        if (!*b->value || *end || v < 1 || v > 1000000000) {
          diag_plain("--dims %s=%s: a dim is an integer from 1 to 10^9", b->name, b->value);
          longjmp(k->fail, 1);
        }
        values[c->dims[j].sym] = v;
      }
  }
  /* defaults, in declaration order (they refer to earlier dims) */
  for (int i = 0; i < c->ndims; i++) {
    DimInfo *d = &c->dims[i];
    if (values[d->sym] < 0 && d->def) {
      long v;
      int poly = dimexpr(k, d->def, false);
      if (dims_eval(&c->dt, poly, values, &v)) {
        if (v < 1 || v > 1000000000) {
          fail(k, d->def->loc, "dim '%s' would be %ld; a dim is between 1 and 10^9", d->name, v);
        }
        values[d->sym] = v;
      }
    }
  }
  bool all = true;
  for (int i = 0; i < c->ndims; i++) {
    c->dims[i].value = values[c->dims[i].sym];
    if (c->dims[i].value < 0) {
      all = false;
      if (k->o->need_bound && c->dims[i].from_input)
        fail(k, c->dims[i].loc, "unbound dim '%s': the input's size needs a value (--dims %s=..., or `width` in task.cfg)",
             c->dims[i].name, c->dims[i].name);
      if (k->o->need_bound) { /* in task.cfg, `hidden` binds H and `dims.NAME` any other dim */
        const char *name = c->dims[i].name, *cfg = strcmp(name, "H") ? arena_printf(k->arena, "dims.%s", name) : "hidden";
        fail(k, c->dims[i].loc, "unbound dim '%s': give it a value (--dims %s=..., or `%s` in task.cfg) or a default (dim %s = 64)",
             name, name, cfg, name);
      }
    }
  }
  if (!all) {
    check_params_total(k, values, false);
    return false;
  }
  /* every size in the graph and the interface */
  for (int id = 0; id < c->g.nnodes; id++) {
    Node *n = &c->g.nodes[id];
    for (int i = 0; i < n->rank; i++) {
      long v;
      if (!dims_eval(&c->dt, n->dim[i], values, &v) || v < 1 || v > 1000000000) {
        fail(k, n->loc, "a size here evaluates to %ld with the dims given; sizes must be between 1 and 10^9",
             dims_eval(&c->dt, n->dim[i], values, &v) ? v : -1L);
      }
      n->n[i] = (int)v;
    }
    if (n->op == OP_DIMVAL) {
      long v;
      if (!dims_eval(&c->dt, n->st[0], values, &v)) CHECK(0); /* every dim is bound here */
      n->k = (double)v;
    }
    if (n->op == OP_AXSLICE || n->op == OP_GROUPNORM) {
      /* st[0]: the start or the groups as a dim; st[1]: its value */
      long v;
      Node *src = &c->g.nodes[n->a[0]];
      if (!dims_eval(&c->dt, n->st[0], values, &v) || v < 0 || v > 1000000000)
        fail(k, n->loc, "%s: a size here is not a whole number with the dims given", op_text(n->op));
      if (n->op == OP_AXSLICE && v + n->n[n->idx] > src->n[n->idx])
        fail(k, n->loc, "slice: start %ld and length %d pass the end of axis %d (size %d)", v, n->n[n->idx], n->idx,
             src->n[n->idx]);
      if (n->op == OP_GROUPNORM && (v < 1 || n->n[n->rank - 1] % v != 0))
        fail(k, n->loc, "groupnorm: %d channels do not split into %ld groups", n->n[n->rank - 1], v);
      n->st[1] = (int)v;
    }
  }
  for (int i = 0; i < c->nparams; i++) {
    ParamInfo *p = &c->params[i];
    for (int j = 0; j < p->rank; j++) {
      long v;
      if (!dims_eval(&c->dt, p->dim[j], values, &v) || v < 1 || v > 1000000000) {
        fail(k, p->loc, "the shape of param '%s' has a size that is not positive with the dims given", p->name);
      }
      p->n[j] = (int)v;
    }
  }
  check_params_total(k, values, true);
  for (int i = 0; i < c->nparams; i++) {
    ParamInfo *p = &c->params[i];
    if (p->ref < 0) eval_init_args(k, p->init, p->init_args, p->ninit_args, p->inner, p->ninner_args, p->args);
  }
  for (int i = 0; i < c->nstates; i++) {
    StateInfo *s = &c->states[i];
    for (int j = 0; j < s->rank; j++) {
      long v;
      if (!dims_eval(&c->dt, s->dim[j], values, &v) || v < 1) {
        fail(k, s->loc, "the shape of state '%s' has a size that is not positive", s->name);
      }
      s->n[j] = (int)v;
    }
    if (s->init && strcmp(s->init, "learned"))
      eval_init_args(k, s->init, s->init_args, s->ninit_args, s->inner, s->ninner_args, s->args);
  }
  long v;
  if (!dims_eval(&c->dt, c->input_dim, values, &v)) CHECK(0);
  c->input_size = (int)v;
  Node *out = N(k, c->output);
  c->output_size = out->rank ? out->n[0] : 1;
  return true;
}

/* ---- the whole cell ---- */

Cell *check_cell(Arena *a, const Src *src, const CellAst *ast, const CheckOptions *o) {
  Checker k = {0};
  k.arena = a;
  k.o = o;
  Cell *c = arena_alloc(a, sizeof(Cell));
  c->name = ast->name;
  c->loc = ast->loc;
  c->src = src;
  c->output = -1;
  graph_init(&c->g, false);
  k.c = c;
  if (setjmp(k.fail)) {
    free(k.ents);
    free(k.dyn);
    free(k.depth);
    free(k.hists);
    cell_free(c);
    return NULL;
  }
  options(&k, ast);
  body(&k, ast->body, ast->nbody);
  if (!k.has_input) fail(&k, ast->loc, "cell '%s' has no input: declare one with `input x[D]`", ast->name);
  if (c->nstates == 0) fail(&k, ast->loc, "cell '%s' has no state: a recurrent cell carries at least one `state`", ast->name);
  for (int i = 0; i < c->nstates; i++)
    if (c->states[i].update < 0)
      fail(&k, c->states[i].loc, "state '%s' is never updated: add `%s = ...` to the cell", c->states[i].name, c->states[i].name);
  if (!k.has_output) {
    if (c->nstates > 1) fail(&k, ast->loc, "cell '%s' has %d states, so it must say `output`", ast->name, c->nstates);
    if (c->states[0].cplx)
      fail(&k, c->states[0].loc, "the output would be state '%s', which is complex; say `output re(%s)` or similar", c->states[0].name,
           c->states[0].name);
    c->output = c->states[0].update;
  }
  const char **names = arena_alloc(a, sizeof(char *) * (size_t)(c->ndims + 1));
  for (int i = 0; i < c->ndims; i++) names[i] = c->dims[i].name;
  c->dim_names = names;
  Node *out = N(&k, c->output);
  c->output_dim = out->rank ? out->dim[0] : dims_const(&c->dt, 1);
  finish_histories(&k);
  analyze(&k);
  c->bound = bind(&k);
  chunk_analyze(c);
  if (o->force_chunked) {
    char why[320];
    int st = -1;
    if (chunk_mode_blocker(c, &st, why, (int)sizeof why))
      fail(&k, st >= 0 ? c->states[st].loc : c->loc, "cannot run cell '%s' in chunked mode: %s", c->name, why);
    c->chunked = true;
  }
  warn_unused(ast->body, ast->nbody, ast); /* only a cell that checks: an error says enough */
  free(k.hists);
  free(k.ents);
  free(k.dyn);
  free(k.depth);
  return c;
}

void cell_free(Cell *c) {
  if (!c) return;
  graph_free(&c->g);
  dims_free(&c->dt);
  free(c->dims);
  free(c->params);
  free(c->states);
  free(c->gates);
  c->dims = NULL, c->params = NULL, c->states = NULL, c->gates = NULL;
}

static void declared_dims(Stmt *const *body, int n, DeclaredDim *out, int max, int *count) {
  for (int i = 0; i < n && *count < max; i++) {
    const Stmt *st = body[i];
    if (st->kind == ST_DIM) out[(*count)++] = (DeclaredDim){st->name, st->dim_value != NULL, false};
    if (st->kind == ST_INPUT && st->shape && st->shape->n == 1 && st->shape->dims[0]->kind == DX_NAME)
      out[(*count)++] = (DeclaredDim){st->shape->dims[0]->name, false, true};
    if (st->kind == ST_IF) {
      declared_dims(st->then_body, st->nthen, out, max, count);
      declared_dims(st->else_body, st->nelse, out, max, count);
    }
  }
}

int check_declared_dims(const CellAst *ast, DeclaredDim *out, int max) {
  int count = 0;
  declared_dims(ast->body, ast->nbody, out, max, &count);
  return count;
}
