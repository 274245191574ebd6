/* ops.c: the op table's names and properties, and each elementwise op's scalar meaning printed
 * as C source (op_c_expr) for code generators. */
#include "graph.h"

#include <string.h>

static const struct {
  const char *name, *text, *where, *meaning;
  int arity, props;
  bool elementwise;
} op_table[OP_COUNT] = {
#define X(name, arity, text, where, diff, props) [OP_##name] = {#name, text, #where, NULL, arity, props, false},
#define E(name, arity, text, where, diff, props, meaning) [OP_##name] = {#name, text, #where, #meaning, arity, props, true},
    GRAPH_OPS(X, E)
#undef X
#undef E
};

const char *op_name(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].name;
}
const char *op_text(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].text;
}
int op_arity(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].arity;
}
bool op_is_leaf(Op op) { return op_arity(op) == 0; }
bool op_is_elementwise(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].elementwise;
}
int op_props(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].props;
}
char op_where(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].where[0];
}
const char *op_meaning(Op op) {
  CHECK(op >= 0 && op < OP_COUNT);
  return op_table[op].meaning;
}

/* ---- the scalar meaning as C source ---- */

/* The vocabulary of the meanings (ops.h) spelled in C, double then float. */
static const struct {
  const char *word, *f64, *f32;
} vocabulary[] = {
    {"EXP", "exp", "expf"},   {"LOG", "log", "logf"},    {"LOG1P", "log1p", "log1pf"},
    {"TANH", "tanh", "tanhf"}, {"ERF", "erf", "erff"},   {"SQRT", "sqrt", "sqrtf"},
    {"FABS", "fabs", "fabsf"}, {"SIN", "sin", "sinf"},   {"COS", "cos", "cosf"},
    {"EXPM1", "expm1", "expm1f"}, {"POW", "pow", "powf"},
};

static bool is_ident(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* The end of the parenthesized group that starts at s[0] == '('. */
static const char *group_end(const char *s) {
  int depth = 0;
  for (;; s++) {
    CHECK(*s);
    if (*s == '(') depth++;
    if (*s == ')' && --depth == 0) return s;
  }
}

/* Writes text[0, len) with a and b substituted and the vocabulary spelled out. */
static void emit_meaning(FILE *f, const char *text, size_t len, const char *a, const char *b, bool f32) {
  const char *s = text, *end = text + len;
  while (s < end) {
    if (!is_ident(*s)) {
      fputc(*s++, f);
      continue;
    }
    const char *w = s;
    while (s < end && is_ident(*s)) s++;
    size_t n = (size_t)(s - w);
    if (w[0] >= '0' && w[0] <= '9') { /* a number (0.5, 1e-3: the digits and what follows) */
      while (s < end && (is_ident(*s) || *s == '.' || ((*s == '-' || *s == '+') && (s[-1] == 'e' || s[-1] == 'E')))) s++;
      fwrite(w, 1, (size_t)(s - w), f);
      continue;
    }
    if (n == 1 && (w[0] == 'a' || w[0] == 'b')) {
      CHECK(w[0] == 'a' || b);
      fprintf(f, "(%s)", w[0] == 'a' ? a : b);
      continue;
    }
    if (n == 1 && w[0] == 'K') { /* K(literal) */
      CHECK(*s == '(');
      const char *close = group_end(s);
      fprintf(f, "%.*s%s", (int)(close - s - 1), s + 1, f32 ? "f" : "");
      s = close + 1;
      continue;
    }
    if (n == 3 && !memcmp(w, "OPX", 3)) { /* OPX(NAME, x): op NAME's meaning at x */
      CHECK(*s == '(');
      const char *close = group_end(s), *comma = memchr(s, ',', (size_t)(close - s));
      CHECK(comma);
      int op = -1;
      for (int i = 0; i < OP_COUNT; i++)
        if (strlen(op_table[i].name) == (size_t)(comma - s - 1) && !memcmp(op_table[i].name, s + 1, (size_t)(comma - s - 1))) op = i;
      CHECK(op >= 0 && op_table[op].meaning);
      char *x = NULL;
      size_t xn = 0;
      FILE *xf = open_memstream(&x, &xn);
      emit_meaning(xf, comma + 1, (size_t)(close - comma - 1), a, b, f32);
      fclose(xf);
      const char *arg = x + strspn(x, " ");
      fputc('(', f);
      emit_meaning(f, op_table[op].meaning, strlen(op_table[op].meaning), arg, NULL, f32);
      fputc(')', f);
      free(x);
      s = close + 1;
      continue;
    }
    size_t i = 0, nv = sizeof vocabulary / sizeof vocabulary[0];
    while (i < nv && !(strlen(vocabulary[i].word) == n && !memcmp(vocabulary[i].word, w, n))) i++;
    if (i == nv) UNREACHABLE("op_c_expr: a word outside the vocabulary");
    fputs(f32 ? vocabulary[i].f32 : vocabulary[i].f64, f);
  }
}

char *op_c_expr(Op op, const char *a, const char *b, bool f32) {
  const char *m = op_meaning(op);
  if (!m) UNREACHABLE(op_name(op));
  CHECK(a && (op_arity(op) < 2 || b));
  char *out = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&out, &n);
  fputc('(', f);
  emit_meaning(f, m, strlen(m), a, b, f32);
  fputc(')', f);
  fclose(f);
  return out;
}
