/* diag.c: the one place that prints diagnostics, with the source line and a caret. */
#include "diag.h"

#include <string.h>

#include "base.h"

FILE *diag_out;
static int nerrors;

int diag_count(void) { return nerrors; }

static FILE *out(void) { return diag_out ? diag_out : stderr; }

/* Columns count characters, not bytes: skip UTF-8 continuation bytes. */
static int display_col(const char *line, int bytecol) {
  int c = 1;
  for (int i = 0; i < bytecol - 1 && line[i]; i++)
    if (((unsigned char)line[i] & 0xC0) != 0x80) c++;
  return c;
}

static void show(Loc loc, const char *kind, const char *fmt, va_list ap) {
  FILE *f = out();
  fflush(stdout);
  if (!loc.src) {
    fprintf(f, "error: ");
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    return;
  }
  const char *text = loc.src->text;
  int off = loc.off < 0 ? 0 : (size_t)loc.off > loc.src->len ? (int)loc.src->len : loc.off;
  int start = off;
  while (start > 0 && text[start - 1] != '\n') start--;
  int end = off;
  while ((size_t)end < loc.src->len && text[end] != '\n' && text[end] != '\r') end++;
  int col = display_col(text + start, off - start + 1);
  fprintf(f, "%s:%d:%d: %s: ", loc.src->path, loc.line, col, kind);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  fputs("  ", f);
  for (int i = start; i < end; i++) {
    unsigned char c = (unsigned char)text[i];
    fputc(c == 0 || (c < 0x20 && c != '\t') ? ' ' : c, f);
  }
  fputs("\n  ", f);
  for (int i = start; i < off; i++) {
    unsigned char c = (unsigned char)text[i];
    if ((c & 0xC0) == 0x80) continue;
    fputc(c == '\t' ? '\t' : ' ', f);
  }
  fputc('^', f);
  int len = loc.len;
  if (off + len > end) len = end - off;
  for (int i = 1; i < len; i++)
    if (((unsigned char)text[off + i] & 0xC0) != 0x80) fputc('~', f);
  fputc('\n', f);
}

void diag_verror(Loc loc, const char *fmt, va_list ap) {
  nerrors++;
  show(loc, "error", fmt, ap);
}

void diag_error(Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(loc, fmt, ap);
  va_end(ap);
}

void diag_warning(Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  show(loc, "warning", fmt, ap);
  va_end(ap);
}

void diag_note(Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  show(loc, "note", fmt, ap);
  va_end(ap);
}

void diag_plain(const char *fmt, ...) {
  va_list ap;
  nerrors++;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(out(), "cellc: error: ");
  vfprintf(out(), fmt, ap);
  fputc('\n', out());
  va_end(ap);
}

const char *diag_nearest(const char *name, const char *const *cands, int n) {
  const char *best = NULL;
  int bestd = 1 << 30;
  for (int i = 0; i < n; i++) {
    if (!cands[i] || !strcmp(cands[i], name)) continue;
    int d = edit_distance(name, cands[i]);
    int longer = (int)(strlen(name) > strlen(cands[i]) ? strlen(name) : strlen(cands[i]));
    if (d >= longer) continue; /* nothing in common: 'K' is not a near miss of 'D' */
    if (d < bestd) bestd = d, best = cands[i];
  }
  int len = (int)strlen(name);
  int limit = len <= 2 ? 1 : len <= 5 ? 2 : 3;
  return bestd <= limit ? best : NULL;
}
