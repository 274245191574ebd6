/* emit_text.h: the text files of `cellc emit` that describe the API: the C header P.h and the
 * PyTorch module P_torch.py (emit_text.c). */
#ifndef CELLC_EMIT_TEXT_H
#define CELLC_EMIT_TEXT_H

#include "check.h"

/* P_workspace_bytes(T, B) = per_tb T B + per_b B + fixed, up to the 64-byte alignment of each array
 * (measured on the emitted library); example: its value at T = 100, B = 32. */
typedef struct WsFormula {
  double per_tb, per_b, fixed, example;
} WsFormula;

typedef struct EmitInfo {
  const Cell *c;
  const char *name, *target, *cpu, *arch;
  const WsFormula *ws;     /* target cpu */
  bool train_noise;        /* P_forward takes a trailing seed */
} EmitInfo;

/* A cell's name of a param or state as a C and Python identifier (h.init -> h_init), in buf. */
const char *emit_field(const char *name, char *buf, size_t n);
char *emit_header_text(const EmitInfo *e); /* xmalloc'ed */
char *emit_torch_text(const EmitInfo *e);

#endif
