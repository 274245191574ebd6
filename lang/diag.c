/* diag.c: the one place that prints diagnostics, with the source line and a caret. */
#include "diag.h"

#include <string.h>

#include "support.h"

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

/* The length of the well-formed UTF-8 sequence of 2 to 4 bytes at s[0..n), or 0. */
static int utf8_len(const unsigned char *s, int n) {
  int len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
  if (len == 0 || len > n) return 0;
  for (int i = 1; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

/* One character of an excerpt at s[0..n): its bytes (returned) and its columns (*width), a byte
 * that is not printable text counting as the four of \xNN. */
static int char_size(const unsigned char *s, int n, int *width) {
  *width = 1;
  if (s[0] == '\t' || (s[0] >= 0x20 && s[0] < 0x7F)) return 1;
  int len = s[0] >= 0x80 ? utf8_len(s, n) : 0;
  if (len) return len;
  *width = 4;
  return 1;
}

/* Prints that character (\xNN for a byte that is not printable text); returns its bytes. */
static int put_char(FILE *f, const unsigned char *s, int n) {
  int width, len = char_size(s, n, &width);
  if (width == 4) fprintf(f, "\\x%02X", s[0]);
  else fwrite(s, 1, (size_t)len, f);
  return len;
}

/* A message, its bytes that are not printable text (from names in the input) as \xNN. */
static void put_text(FILE *f, const char *msg) {
  const unsigned char *u = (const unsigned char *)msg;
  for (int i = 0, n = (int)strlen(msg); i < n;) i += put_char(f, u + i, n - i);
}

/* The character that begins at or after byte i (not inside a UTF-8 sequence). */
static int char_start(const char *text, int i, int end) {
  while (i < end && ((unsigned char)text[i] & 0xC0) == 0x80) i++;
  return i;
}

enum { EXCERPT_BEFORE = 60, EXCERPT_WIDTH = 120, MESSAGE_MAX = 1000 };

static void show(Loc loc, const char *kind, const char *fmt, va_list ap) {
  FILE *f = out();
  fflush(stdout);
  /* the message: a long one (a name of a million characters) keeps its start and its end */
  char msg[4096];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t mlen = strlen(msg);
  if (mlen > MESSAGE_MAX) {
    memmove(msg + 600, msg + mlen - 300, 301);
    memcpy(msg + 597, "...", 3);
  }
  if (!loc.src) {
    fputs("error: ", f);
    put_text(f, msg);
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
  put_text(f, msg);
  fputc('\n', f);
  /* the excerpt: the line, or EXCERPT_WIDTH bytes of it around the caret, marked "..." */
  int ws = start, we = end;
  if (end - start > EXCERPT_WIDTH) {
    ws = off - EXCERPT_BEFORE > start ? off - EXCERPT_BEFORE : start;
    we = ws + EXCERPT_WIDTH < end ? ws + EXCERPT_WIDTH : end;
    if (we - ws < EXCERPT_WIDTH) ws = we - EXCERPT_WIDTH > start ? we - EXCERPT_WIDTH : start;
    ws = char_start(text, ws, off);
    we = char_start(text, we, end);
  }
  const unsigned char *u = (const unsigned char *)text;
  fputs(ws > start ? "  ..." : "  ", f);
  for (int i = ws; i < we;) i += put_char(f, u + i, we - i);
  fputs(we < end ? "...\n  " : "\n  ", f);
  if (ws > start) fputs("   ", f);
  /* the caret under the offending character, a tab kept a tab so that it lines up */
  int w;
  for (int i = ws; i < off && i < we;) {
    int k = char_size(u + i, we - i, &w);
    if (u[i] == '\t') fputc('\t', f);
    else
      for (int j = 0; j < w; j++) fputc(' ', f);
    i += k;
  }
  fputc('^', f);
  int tok_end = off + (loc.len > 1 ? loc.len : 1);
  if (tok_end > we) tok_end = we;
  if (off < we) {
    int i = off + char_size(u + off, we - off, &w);
    for (int j = 1; j < w; j++) fputc('~', f);
    while (i < tok_end) {
      i += char_size(u + i, we - i, &w);
      for (int j = 0; j < w; j++) fputc('~', f);
    }
  }
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

