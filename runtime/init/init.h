/* init.h: the parameter initializers of the cell language (spec section 6): their table
 * (names and argument counts) and the function that draws a param's initial values. */
#ifndef CELLC_INIT_H
#define CELLC_INIT_H

#include <stdbool.h>
#include <stddef.h>

#include "support.h"

typedef struct InitDef {
  const char *name;
  int min_args, max_args;
  bool ref_param; /* lru_gamma: its one argument names another param, not a number */
} InitDef;

const InitDef *init_find(const char *name); /* NULL if unknown */
int init_names(const char *const **names);  /* sets *names to all names; returns their count */

/* An initializer as a configuration writes it: NAME or NAME(ARG, ...), each argument a number, or
 * for a ref_param initializer the name of another param. */
typedef struct InitText {
  char name[32];
  double args[8];
  int nargs;
  char ref[64];   /* lru_gamma(NAME): NAME; "" otherwise */
} InitText;

/* Parses and checks an initializer's text (the one grammar of initializer text: task.cfg entries
 * and their --set). 0, or -1 with why and the offending span [*off, *off + *len) of text. */
int init_parse(const char *text, InitText *out, char *why, size_t n, int *off, int *len);

/* Fill `out` with the initial values of a param.
 *   rank 0 (scalar), 1 ([d]) or 2 ([O, I]); shape: (rank) sizes; numel = their product.
 *   cplx: out holds 2*numel doubles, (re, im) interleaved per element, row-major; else numel.
 *   args: (nargs) evaluated numeric arguments (none for a ref_param initializer).
 *   ref: for lru_gamma, the referenced param's (numel) real values; else NULL.
 *   H: the size of the cell's first state (for `standard`).
 * Draws from rng in row-major order, re then im per element for complex params.
 * Returns 0, or -1 with a one-line message in err when the arguments make no sense. */
int init_fill(const char *name, const double *args, int nargs, const double *ref, int rank, const int *shape,
              bool cplx, int H, Rng *rng, double *out, char *err, size_t errlen);

#endif
