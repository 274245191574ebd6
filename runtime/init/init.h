/* init.h: the parameter initializers of the cell language (spec sections 6 and 9): their table
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
  bool wraps;     /* inv_softplus: its one argument is another initializer, whose values it maps */
} InitDef;

const InitDef *init_find(const char *name); /* NULL if unknown */
int init_names(const char *const **names);  /* sets *names to all names; returns their count */

/* An initializer as a configuration writes it: NAME or NAME(ARG, ...), each argument a number, or
 * for a ref_param initializer the name of another param, or for a wrapping one another initializer
 * (inv_softplus(log_uniform(0.001, 0.1)): name "inv_softplus", inner "log_uniform", args theirs). */
typedef struct InitText {
  char name[32];
  double args[8];
  int nargs;
  char ref[64];   /* lru_gamma(NAME): NAME; "" otherwise */
  char inner[32]; /* a wrapping initializer's argument: the wrapped initializer's name; "" otherwise */
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

/* init_fill of `name` (with its args), then, when wrap is not NULL, the wrapping initializer `wrap`
 * (inv_softplus) applied to each value: inv_softplus(log_uniform(0.001, 0.1)) is
 * init_fill_wrapped("inv_softplus", "log_uniform", {0.001, 0.1}, 2, ...). The same draws as `name`
 * alone. Returns 0, or -1 with a one-line message. */
int init_fill_wrapped(const char *wrap, const char *name, const double *args, int nargs, const double *ref, int rank,
                      const int *shape, bool cplx, int H, Rng *rng, double *out, char *err, size_t errlen);

/* The checks of an initializer's arguments that need neither the param's shape nor its values, for
 * the checker to report at the argument (for now the version-2 initializers': log_uniform's lo > 0,
 * hi >= lo). 0, or -1 with a message and *bad the 0-based argument at fault. */
int init_check_args(const char *name, const double *args, int nargs, int *bad, char *err, size_t errlen);

/* log(expm1(x)), the inverse of softplus log1p(exp(y)), for x > 0, without overflow for large x and
 * without cancellation for tiny x. */
double init_inv_softplus(double x);

#endif
