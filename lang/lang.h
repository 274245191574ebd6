/* lang.h: the front end's public header: the AST of a .cell file (ast.h), the located
 * diagnostics (diag.h) and the parser's entry point. */
#ifndef CELLC_LANG_H
#define CELLC_LANG_H

#include "ast.h"
#include "diag.h"

#endif
