/* parser.y: the grammar of .cell files (language spec section 3). Actions only
 * build nodes; every check lives in compiler/check.c. */
%define api.pure full
%define api.prefix {parse_}
%define api.token.prefix {TOK_}
%define parse.error detailed
%expect 0
%param {Lexer *lx}

%code requires {
#include "ast.h"
typedef struct Lexer Lexer;
typedef struct Tok { Loc loc; const char *s; double num; } Tok;
}

%code provides {
struct Lexer {
  const Src *src;
  const char *cur, *tok, *lim, *line_start;
  int line;
  Arena *arena;
  Loc last;        /* the last token returned: where a syntax error points */
  FileAst *file;
};
int parse_lex(PARSE_STYPE *val, Lexer *lx);
void parse_error(Lexer *lx, const char *msg);
}

%code {
#include <string.h>

#define A (lx->arena)
static Expr *mk_expr(Lexer *lx, ExprKind k, Loc loc, Expr *a, Expr *b) {
  Expr *e = arena_alloc(A, sizeof(Expr));
  e->kind = k; e->loc = loc; e->a = a; e->b = b;
  return e;
}
static DimExpr *mk_dim(Lexer *lx, DimExprKind k, Loc loc, DimExpr *a, DimExpr *b) {
  DimExpr *d = arena_alloc(A, sizeof(DimExpr));
  d->kind = k; d->loc = loc; d->a = a; d->b = b;
  return d;
}
static Stmt *mk_stmt(Lexer *lx, StmtKind k, Tok kw, Tok name) {
  Stmt *s = arena_alloc(A, sizeof(Stmt));
  s->kind = k; s->loc = kw.loc; s->name = name.s; s->name_loc = name.loc;
  return s;
}
#define ITEMS(T, l) ((T)(l).items)
}

%union {
  Tok tok;
  Expr *expr;
  DimExpr *dim;
  Stmt *stmt;
  ShapeAst *shape;
  InitAst *init;
  CellAst *cell;
  OptionAst *option;
  List list;
}

%token <tok> IDENT "identifier" NUMBER "number" INTEGER "integer" STRING "string"
%token <tok> CELL "cell" IMPORT "import" INPUT "input" DIM "dim" PARAM "param"
%token <tok> STATE "state" LET "let" GATE "gate" OUTPUT "output" IF "if" ELSE "else"
%token <tok> TAG "tag" TRUE "true" FALSE "false"
%token <tok> '{' '}' '(' ')' '[' ']' ',' ':' ';' '=' '~' '@' '+' '-' '*' '/'
%token <tok> '<' '>' LE "<=" GE ">="

%type <expr> expr term unary mat postfix carg
%type <dim> dimsum dimprod dimatom
%type <stmt> stmt
%type <shape> shape opt_shape
%type <init> init opt_state_init
%type <cell> cell
%type <option> option
%type <list> stmts options opt_options option_list args cargs dims opt_tags tag_list
%type <tok> opt_kind literal

%%

/* file = item* */
file:
    %empty
  | file IMPORT STRING {
      ImportAst *im = arena_alloc(A, sizeof(ImportAst));
      im->path = $3.s; im->loc = $3.loc;
      FileAst *f = lx->file;
      ImportAst *n = arena_alloc(A, sizeof(ImportAst) * (size_t)(f->nimports + 1));
      for (int i = 0; i < f->nimports; i++) n[i] = f->imports[i];
      n[f->nimports++] = *im;
      f->imports = n;
    }
  | file cell {
      FileAst *f = lx->file;
      CellAst **n = arena_alloc(A, sizeof(CellAst *) * (size_t)(f->ncells + 1));
      for (int i = 0; i < f->ncells; i++) n[i] = f->cells[i];
      n[f->ncells++] = $2;
      f->cells = n;
    }
  ;

/* cell = "cell" IDENT options? "{" stmt* "}" */
cell: CELL IDENT opt_options '{' stmts '}' {
      $$ = arena_alloc(A, sizeof(CellAst));
      $$->name = $2.s; $$->loc = $2.loc;
      $$->noptions = $3.n;
      $$->options = arena_alloc(A, sizeof(OptionAst) * (size_t)($3.n + 1));
      for (int i = 0; i < $3.n; i++) $$->options[i] = *(OptionAst *)$3.items[i];
      $$->body = ITEMS(Stmt **, $5); $$->nbody = $5.n;
    }
  ;

opt_options: %empty { $$ = (List){0}; } | options ;
options: '(' option_list ')' { $$ = $2; } ;
option_list:
    option { $$ = (List){0}; ast_push(A, &$$, $1); }
  | option_list ',' option { $$ = $1; ast_push(A, &$$, $3); }
  ;

/* option = IDENT ":" ("real" | "int" | "bool") "=" literal */
option: IDENT ':' IDENT '=' literal {
      $$ = arena_alloc(A, sizeof(OptionAst));
      $$->name = $1.s; $$->loc = $1.loc;
      $$->type_name = $3.s; $$->type_loc = $3.loc;
      $$->value = $5.num; $$->value_loc = $5.loc;
      $$->is_bool = $5.s && ($5.s[0] == 't' || $5.s[0] == 'f');
      $$->is_int = $5.s && $5.s[0] == 'i';
    }
  ;

/* literal: its Tok.s says what was written: "t"rue, "f"alse, "i"nteger, "n"umber */
literal:
    NUMBER { $$ = $1; $$.s = "n"; }
  | INTEGER { $$ = $1; $$.s = "i"; }
  | '-' NUMBER { $$ = $2; $$.num = -$2.num; $$.loc = $1.loc; $$.s = "n"; }
  | '-' INTEGER { $$ = $2; $$.num = -$2.num; $$.loc = $1.loc; $$.s = "i"; }
  | TRUE { $$ = $1; $$.num = 1; $$.s = "t"; }
  | FALSE { $$ = $1; $$.num = 0; $$.s = "f"; }
  ;

stmts:
    %empty { $$ = (List){0}; }
  | stmts stmt { $$ = $1; ast_push(A, &$$, $2); }
  | stmts ';' { $$ = $1; }
  ;

stmt:
    INPUT IDENT shape { $$ = mk_stmt(lx, ST_INPUT, $1, $2); $$->shape = $3; }
  | DIM IDENT { $$ = mk_stmt(lx, ST_DIM, $1, $2); }
  | DIM IDENT '=' dimsum { $$ = mk_stmt(lx, ST_DIM, $1, $2); $$->dim_value = $4; }
  | PARAM IDENT opt_shape opt_kind '~' init opt_tags {
      $$ = mk_stmt(lx, ST_PARAM, $1, $2);
      $$->shape = $3; $$->kind_name = $4.s; $$->kind_loc = $4.loc; $$->init = $6;
      $$->tags = ITEMS(const char **, $7); $$->ntags = $7.n;
      $$->tag_locs = arena_alloc(A, sizeof(Loc) * (size_t)($7.n + 1));
      for (int i = 0; i < $7.n; i++) {
        Tok *t = $7.items[i];
        $$->tags[i] = t->s; $$->tag_locs[i] = t->loc;
      }
    }
  | STATE IDENT opt_shape opt_kind opt_state_init {
      $$ = mk_stmt(lx, ST_STATE, $1, $2);
      $$->shape = $3; $$->kind_name = $4.s; $$->kind_loc = $4.loc; $$->init = $5;
    }
  | LET IDENT '=' expr { $$ = mk_stmt(lx, ST_LET, $1, $2); $$->expr = $4; }
  | GATE IDENT '=' expr { $$ = mk_stmt(lx, ST_GATE, $1, $2); $$->expr = $4; }
  | IDENT '=' expr { $$ = mk_stmt(lx, ST_UPDATE, $1, $1); $$->expr = $3; }
  | OUTPUT expr { $$ = mk_stmt(lx, ST_OUTPUT, $1, $1); $$->name = NULL; $$->expr = $2; }
  | IF IDENT '{' stmts '}' {
      $$ = mk_stmt(lx, ST_IF, $1, $2);
      $$->then_body = ITEMS(Stmt **, $4); $$->nthen = $4.n;
    }
  | IF IDENT '{' stmts '}' ELSE '{' stmts '}' {
      $$ = mk_stmt(lx, ST_IF, $1, $2);
      $$->then_body = ITEMS(Stmt **, $4); $$->nthen = $4.n;
      $$->else_body = ITEMS(Stmt **, $8); $$->nelse = $8.n; $$->has_else = true;
    }
  ;

opt_shape: %empty { $$ = NULL; } | shape ;
/* shape = "[" dimexpr ("," dimexpr)* "]" */
shape: '[' dims ']' {
      $$ = arena_alloc(A, sizeof(ShapeAst));
      $$->loc = $1.loc; $$->dims = ITEMS(DimExpr **, $2); $$->n = $2.n;
    }
  ;
dims:
    dimsum { $$ = (List){0}; ast_push(A, &$$, $1); }
  | dims ',' dimsum { $$ = $1; ast_push(A, &$$, $3); }
  ;

/* kind = ":" ("real" | "complex") */
opt_kind: %empty { $$ = (Tok){0}; } | ':' IDENT { $$ = $2; } ;

/* init = IDENT ("(" expr ("," expr)* ")")? */
init:
    IDENT {
      $$ = arena_alloc(A, sizeof(InitAst));
      $$->name = $1.s; $$->loc = $1.loc;
    }
  | IDENT '(' args ')' {
      $$ = arena_alloc(A, sizeof(InitAst));
      $$->name = $1.s; $$->loc = $1.loc; $$->has_parens = true;
      $$->args = ITEMS(Expr **, $3); $$->nargs = $3.n;
    }
  ;
opt_state_init: %empty { $$ = NULL; } | '=' init { $$ = $2; } ;

/* tags = "tag" IDENT ("," IDENT)* */
opt_tags: %empty { $$ = (List){0}; } | TAG tag_list { $$ = $2; } ;
tag_list:
    IDENT { $$ = (List){0}; Tok *t = arena_alloc(A, sizeof(Tok)); *t = $1; ast_push(A, &$$, t); }
  | tag_list ',' IDENT { $$ = $1; Tok *t = arena_alloc(A, sizeof(Tok)); *t = $3; ast_push(A, &$$, t); }
  ;

/* dimexpr = INT | IDENT | dimexpr ("+" | "-" | "*") dimexpr | "(" dimexpr ")" */
dimsum:
    dimprod
  | dimsum '+' dimprod { $$ = mk_dim(lx, DX_ADD, $2.loc, $1, $3); }
  | dimsum '-' dimprod { $$ = mk_dim(lx, DX_SUB, $2.loc, $1, $3); }
  ;
dimprod:
    dimatom
  | dimprod '*' dimatom { $$ = mk_dim(lx, DX_MUL, $2.loc, $1, $3); }
  ;
dimatom:
    INTEGER { $$ = mk_dim(lx, DX_INT, $1.loc, NULL, NULL); $$->value = $1.num; }
  | IDENT { $$ = mk_dim(lx, DX_NAME, $1.loc, NULL, NULL); $$->name = $1.s; }
  | '(' dimsum ')' { $$ = $2; }
  ;

/* expr = expr ("+" | "-") term | term */
expr:
    term
  | expr '+' term { $$ = mk_expr(lx, EX_ADD, $2.loc, $1, $3); }
  | expr '-' term { $$ = mk_expr(lx, EX_SUB, $2.loc, $1, $3); }
  ;
/* term = term ("*" | "/") unary | unary */
term:
    unary
  | term '*' unary { $$ = mk_expr(lx, EX_MUL, $2.loc, $1, $3); }
  | term '/' unary { $$ = mk_expr(lx, EX_DIV, $2.loc, $1, $3); }
  ;
/* unary = "-" unary | mat */
unary:
    mat
  | '-' unary { $$ = mk_expr(lx, EX_NEG, $1.loc, $2, NULL); }
  ;
/* mat = mat "@" postfix | postfix */
mat:
    postfix
  | mat '@' postfix { $$ = mk_expr(lx, EX_MATMUL, $2.loc, $1, $3); }
  ;
/* postfix = NUMBER | IDENT | IDENT "(" expr ("," expr)* ")" | "(" expr ")" */
postfix:
    NUMBER { $$ = mk_expr(lx, EX_NUM, $1.loc, NULL, NULL); $$->num = $1.num; }
  | INTEGER { $$ = mk_expr(lx, EX_NUM, $1.loc, NULL, NULL); $$->num = $1.num; $$->is_int = true; }
  | IDENT { $$ = mk_expr(lx, EX_NAME, $1.loc, NULL, NULL); $$->name = $1.s; }
  | IDENT '(' cargs ')' {
      $$ = mk_expr(lx, EX_CALL, $1.loc, NULL, NULL);
      $$->name = $1.s; $$->args = ITEMS(Expr **, $3); $$->nargs = $3.n;
    }
  | '(' expr ')' { $$ = $2; }
  ;
args:
    expr { $$ = (List){0}; ast_push(A, &$$, $1); }
  | args ',' expr { $$ = $1; ast_push(A, &$$, $3); }
  ;
/* a call's arguments: expressions, a comparison (version 2: where's condition) or a list of sizes
 * (reshape's shape); the checker refuses the last two anywhere else, with their location */
cargs:
    carg { $$ = (List){0}; ast_push(A, &$$, $1); }
  | cargs ',' carg { $$ = $1; ast_push(A, &$$, $3); }
  ;
carg:
    expr
  | expr '<' expr { $$ = mk_expr(lx, EX_LT, $2.loc, $1, $3); }
  | expr LE expr { $$ = mk_expr(lx, EX_LE, $2.loc, $1, $3); }
  | expr '>' expr { $$ = mk_expr(lx, EX_GT, $2.loc, $1, $3); }
  | expr GE expr { $$ = mk_expr(lx, EX_GE, $2.loc, $1, $3); }
  | '[' args ']' {
      $$ = mk_expr(lx, EX_LIST, $1.loc, NULL, NULL);
      $$->args = ITEMS(Expr **, $2); $$->nargs = $2.n;
    }
  ;

%%

void parse_error(Lexer *lx, const char *msg) {
  /* Bison's stack overflow says only "memory exhausted" */
  if (!strcmp(msg, "memory exhausted")) msg = "nested too deeply (the parser's stack is full)";
  /* a comparison parses only as a call's argument: elsewhere say where it belongs */
  static const char *const cmp[] = {"unexpected '<'", "unexpected '>'", "unexpected \"<=\"", "unexpected \">=\""};
  for (int i = 0; i < 4; i++)
    if (strstr(msg, cmp[i])) {
      diag_error(lx->last, "%s (a comparison is allowed only as where's first argument)", msg);
      return;
    }
  diag_error(lx->last, "%s", msg);
}

FileAst *parse_file(Arena *arena, const Src *src) {
  Lexer lx = {0};
  lx.src = src;
  lx.cur = lx.line_start = src->text;
  lx.lim = src->text + src->len;
  lx.line = 1;
  lx.arena = arena;
  lx.file = arena_alloc(arena, sizeof(FileAst));
  lx.file->src = src;
  int before = diag_count();
  if (parse_parse(&lx) != 0 || diag_count() != before) return NULL;
  return lx.file;
}
