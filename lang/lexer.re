/* lexer.re: the tokens of .cell files (language spec section 2), a table of
 * re2c rules; each token's location is taken at its start. */
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "parser.h"

static Tok tok_here(Lexer *lx) {
  Tok t = {0};
  t.loc.src = lx->src;
  t.loc.off = (int)(lx->tok - lx->src->text);
  t.loc.line = lx->line;
  t.loc.col = (int)(lx->tok - lx->line_start) + 1;
  t.loc.len = (int)(lx->cur - lx->tok);
  return t;
}

static int emit(Lexer *lx, PARSE_STYPE *val, int token) {
  val->tok = tok_here(lx);
  val->tok.s = arena_strndup(lx->arena, lx->tok, (size_t)(lx->cur - lx->tok));
  lx->last = val->tok.loc;
  return token;
}

static int lex_error(Lexer *lx, PARSE_STYPE *val, const char *what) {
  val->tok = tok_here(lx);
  lx->last = val->tok.loc;
  diag_error(val->tok.loc, "%s", what);
  return TOK_PARSE_error;
}

int parse_lex(PARSE_STYPE *val, Lexer *lx) {
  for (;;) {
    lx->tok = lx->cur;
    const char *YYMARKER = NULL;
    /*!re2c
      re2c:define:YYCTYPE = "unsigned char";
      re2c:define:YYCURSOR = "lx->cur";
      re2c:yyfill:enable = 0;
      re2c:flags:utf-8 = 0;

      ident = [A-Za-z_][A-Za-z0-9_]*;
      digits = [0-9]+;
      exp = [eE] [+-]? digits;

      [\x00] {
        if (lx->tok >= lx->lim) {
          lx->cur = lx->tok;
          val->tok = tok_here(lx);
          lx->last = val->tok.loc;
          return TOK_YYEOF;
        }
        return lex_error(lx, val, "unexpected NUL byte");
      }
      "\n" { lx->line++; lx->line_start = lx->cur; continue; }
      [ \t\r\f\v]+ { continue; }
      "#" [^\n\x00]* { continue; }

      "cell"   { return emit(lx, val, TOK_CELL); }
      "import" { return emit(lx, val, TOK_IMPORT); }
      "input"  { return emit(lx, val, TOK_INPUT); }
      "dim"    { return emit(lx, val, TOK_DIM); }
      "param"  { return emit(lx, val, TOK_PARAM); }
      "buffer" { return emit(lx, val, TOK_BUFFER); }
      "frozen" { return emit(lx, val, TOK_FROZEN); }
      "state"  { return emit(lx, val, TOK_STATE); }
      "let"    { return emit(lx, val, TOK_LET); }
      "gate"   { return emit(lx, val, TOK_GATE); }
      "output" { return emit(lx, val, TOK_OUTPUT); }
      "if"     { return emit(lx, val, TOK_IF); }
      "else"   { return emit(lx, val, TOK_ELSE); }
      "tag"    { return emit(lx, val, TOK_TAG); }
      "true"   { return emit(lx, val, TOK_TRUE); }
      "false"  { return emit(lx, val, TOK_FALSE); }
      ident    { return emit(lx, val, TOK_IDENT); }

      digits {
        int t = emit(lx, val, TOK_INTEGER);
        val->tok.num = strtod(val->tok.s, NULL);
        return t;
      }
      digits "." [0-9]* exp? | "." digits exp? | digits exp {
        int t = emit(lx, val, TOK_NUMBER);
        val->tok.num = strtod(val->tok.s, NULL);
        return t;
      }
      digits [A-Za-z_] | digits "." [0-9]* [A-Za-z_] {
        return lex_error(lx, val, "malformed number");
      }

      ["] [^"\n\x00]* ["] {
        int t = emit(lx, val, TOK_STRING);
        val->tok.s = arena_strndup(lx->arena, lx->tok + 1, (size_t)(lx->cur - lx->tok - 2));
        return t;
      }
      ["] { return lex_error(lx, val, "unterminated string"); }

      "<=" { return emit(lx, val, TOK_LE); }
      ">=" { return emit(lx, val, TOK_GE); }
      [{}()[\],:;=~@+*/<>-] { return emit(lx, val, (unsigned char)lx->tok[0]); }

      [\x80-\xff]+ { return lex_error(lx, val, "unexpected character (non-ASCII text is allowed only in comments and strings)"); }
      * { return lex_error(lx, val, "unexpected character"); }
    */
  }
}
