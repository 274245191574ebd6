/* ast.c: list building for grammar actions, and loading sources. */
#include "ast.h"

#include <string.h>

void ast_push(Arena *a, List *l, void *item) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 4;
    void **items = arena_alloc(a, sizeof(void *) * (size_t)cap);
    if (l->n) memcpy(items, l->items, sizeof(void *) * (size_t)l->n);
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = item;
}

Src *src_from_text(Arena *arena, const char *path, const char *text, size_t len) {
  Src *s = arena_alloc(arena, sizeof(Src));
  s->path = arena_strdup(arena, path);
  s->text = arena_strndup(arena, text, len);
  s->len = len;
  return s;
}

Src *src_load(Arena *arena, const char *path) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return NULL;
  Src *s = src_from_text(arena, path, text, len);
  free(text);
  return s;
}

const char *ast_stmt_kind_name(StmtKind k) {
  switch (k) {
  case ST_INPUT: return "input";
  case ST_DIM: return "dim";
  case ST_PARAM: return "param";
  case ST_STATE: return "state";
  case ST_LET: return "let";
  case ST_GATE: return "gate";
  case ST_UPDATE: return "update";
  case ST_OUTPUT: return "output";
  case ST_IF: return "if";
  default: UNREACHABLE("statement kind");
  }
}
