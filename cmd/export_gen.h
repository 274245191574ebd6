/* export_gen.h: one cell layer's evaluation step written out as code, for `cellc export`
 * (cmd_export.c): C for the streaming library, Python with torch ops for the PyTorch module. Both
 * come from the same lowered program (sequential form, evaluation: no noise), split in three parts:
 *   static  the nodes that read params only, computed once (at load, or once per forward);
 *   input   the nodes that read the step's input but no state (the frontier: those the state part
 *           reads, and the output or new states where they read no state);
 *   state   the nodes that read a previous state: the output and the new states.
 * A token model's layer 0 can then take its input part from a table over the vocabulary. */
#ifndef CELLC_EXPORT_GEN_H
#define CELLC_EXPORT_GEN_H

#include <stdbool.h>
#include <stdio.h>

#include "lower.h"

typedef struct StepGen {
  Program *p;
  int nn;            /* nodes considered: the forward's */
  char *kind;        /* per node: 'S' static, 'I' input, 'X' state part */
  bool *live;        /* needed for the output or a new state */
  bool *front;       /* an input node the state part (or an output) reads */
  int *off;          /* static nodes: offset in the static area; input/state nodes: in F (front) or the scratch */
  int *toff;         /* static matrices read by a product: their transposed copy in the static area, or -1 */
  int static_size, front_size, scratch_size;
  int state_size;    /* floats of every state part, in part order */
  int *spart_off;    /* per state part: its offset in the layer's state */
  bool gates;        /* the gates are computed too (stepgen_new_gates) */
} StepGen;

/* Lowers nothing: analyses p (lowered with training false, scan_form false). NULL with err set
 * when the program holds what an export cannot write (noise, an op without a form here). */
StepGen *stepgen_new(Program *p, char *err, size_t errlen);
/* The same, the gates live too (an input-part gate in the frontier): stepgen_py's state function
 * then returns (y, new h list, gate list), for `cellc emit --torch-ops` (docs/emit.md). */
StepGen *stepgen_new_gates(Program *p, char *err, size_t errlen);
void stepgen_free(StepGen *g);

/* C: three functions `static void PFX_static(const float *const *P, float *S)`,
 * `PFX_input(const float *const *P, const float *S, const float *x, float *F, float *W)` and
 * `PFX_state(const float *const *P, const float *S, const float *F, float *h, float *y, float *W)`
 * (P: the param parts, S the static area, F the frontier, h the state updated in place, W the
 * scratch). Needs the helper mv_t (export_c_helpers). */
void stepgen_c(const StepGen *g, FILE *f, const char *pfx);
/* The C helpers the generated functions call (mv_t: y = W v from W's transposed copy). */
void stepgen_c_helpers(FILE *f);

/* Python: `def PFX_static(P)` -> list S, `def PFX_input(P, S, x)` -> dict Fr ([R, numel] each, x
 * [R, D]), `def PFX_state(P, S, Fr, h)` -> (y, new h list) (Fr and h [B, numel]). */
void stepgen_py(const StepGen *g, FILE *f, const char *pfx);
/* The Python helpers the generated functions call (_mv, _cat, _rows, ...; cmd_export.c). */
extern const char export_py_helpers[];

/* emit_ops.c: P_ops.py of `cellc emit --torch-ops` for a bound cell; NULL with err set when the
 * step has no exported form. xmalloc'ed. */
char *emit_ops_text(Cell *c, char *err, size_t errlen);

#endif
