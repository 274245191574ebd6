/* diag.h: located diagnostics. One function prints them, in the form
 *   FILE:LINE:COL: error: MESSAGE
 *     <the source line>
 *     <a caret under the offending token>
 */
#ifndef CELLC_DIAG_H
#define CELLC_DIAG_H

#include <stdarg.h>
#include <stdio.h>

/* A source text: a .cell or .cfg file held in memory for the whole compilation. */
typedef struct Src {
  const char *path;
  const char *text; /* NUL-terminated copy; len excludes the NUL */
  size_t len;
} Src;

/* A place in a source: byte offset, 1-based line and byte column, token length. */
typedef struct Loc {
  const Src *src;
  int off, line, col, len;
} Loc;

/* Where diagnostics go (stderr unless a test redirects them). */
extern FILE *diag_out;

void diag_error(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_verror(Loc loc, const char *fmt, va_list ap);
/* A warning (same form, "warning:"); not counted as an error, the exit status is unchanged. */
void diag_warning(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A note attached to the previous error (same form, "note:"). */
void diag_note(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error with no location (a file that cannot be opened, a bad flag value). */
void diag_plain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* How many errors since the start. */
int diag_count(void);


#endif
