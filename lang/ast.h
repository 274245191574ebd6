/* ast.h: the syntax tree of a .cell file, as the parser builds it. No checks
 * live here; the checker (compiler/check/check.c) gives it meaning. */
#ifndef CELLC_AST_H
#define CELLC_AST_H

#include <stdbool.h>

#include "support.h"
#include "diag.h"

/* A list built by grammar actions (arena memory). */
typedef struct List {
  void **items;
  int n, cap;
} List;
void ast_push(Arena *a, List *l, void *item);

typedef enum {
  EX_NUM,    /* num (is_int when written without '.' or exponent) */
  EX_NAME,   /* name */
  EX_CALL,   /* name(args) */
  EX_NEG,    /* -a */
  EX_ADD,    /* a + b */
  EX_SUB,
  EX_MUL,
  EX_DIV,
  EX_MATMUL, /* a @ b */
  EX_LT,     /* a < b: only as where's first argument (the checker says so elsewhere) */
  EX_LE,
  EX_GT,
  EX_GE,
  EX_LIST,   /* [a, b, ...] (args): only as reshape's shape (the checker says so elsewhere) */
} ExprKind;

typedef struct Expr Expr;
struct Expr {
  ExprKind kind;
  Loc loc;           /* the name, number or operator token */
  double num;
  bool is_int;
  const char *name;
  Expr *a, *b;
  Expr **args;
  int nargs;
};

typedef enum { DX_INT, DX_NAME, DX_ADD, DX_SUB, DX_MUL } DimExprKind;
typedef struct DimExpr DimExpr;
struct DimExpr {
  DimExprKind kind;
  Loc loc;
  double value; /* DX_INT (as written; the checker bounds it) */
  const char *name;
  DimExpr *a, *b;
};

typedef struct ShapeAst {
  Loc loc; /* the '[' */
  DimExpr **dims;
  int n;
} ShapeAst;

/* `~ name(args)` of a param, or `= name(args)` of a state. */
typedef struct InitAst {
  Loc loc;
  const char *name;
  Expr **args;
  int nargs;
  bool has_parens;
} InitAst;

typedef enum {
  ST_INPUT,  /* input NAME shape */
  ST_DIM,    /* dim NAME (= dimexpr)? */
  ST_PARAM,  /* param NAME shape? kind? ~ init tags? */
  ST_STATE,  /* state NAME shape? kind? (= init)? */
  ST_LET,    /* let NAME = expr */
  ST_GATE,   /* gate NAME = expr */
  ST_UPDATE, /* NAME = expr */
  ST_OUTPUT, /* output expr */
  ST_IF,     /* if NAME { then } else { els } */
} StmtKind;

typedef struct Stmt Stmt;
struct Stmt {
  StmtKind kind;
  Loc loc;      /* the keyword (or the name, for an update) */
  const char *name;
  Loc name_loc;
  ShapeAst *shape;      /* NULL: scalar */
  const char *kind_name; /* "real" / "complex" as written, or NULL */
  Loc kind_loc;
  DimExpr *dim_value;   /* ST_DIM default */
  InitAst *init;
  const char **tags;
  Loc *tag_locs;
  int ntags;
  Expr *expr;
  Stmt **then_body, **else_body;
  int nthen, nelse;
  bool has_else;
};

typedef struct OptionAst {
  const char *name;
  Loc loc;
  const char *type_name; /* "real" | "int" | "bool" as written */
  Loc type_loc;
  double value;   /* numbers; true = 1, false = 0 */
  bool is_bool, is_int;
  Loc value_loc;
} OptionAst;

typedef struct CellAst {
  const char *name;
  Loc loc;
  OptionAst *options;
  int noptions;
  Stmt **body;
  int nbody;
} CellAst;

typedef struct ImportAst {
  const char *path;
  Loc loc;
} ImportAst;

typedef struct FileAst {
  const Src *src;
  ImportAst *imports;
  int nimports;
  CellAst **cells;
  int ncells;
} FileAst;

/* Parse one source. Prints located diagnostics; returns NULL on error. */
FileAst *parse_file(Arena *arena, const Src *src);

/* Make a Src from a path (NULL if unreadable) or from text in memory. */
Src *src_load(Arena *arena, const char *path);
Src *src_from_text(Arena *arena, const char *path, const char *text, size_t len);

const char *ast_stmt_kind_name(StmtKind k);

#endif
