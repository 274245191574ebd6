/* dims.h: symbolic sizes. A size is a polynomial with integer coefficients
 * over dim symbols, kept in canonical form and interned, so two sizes are
 * equal exactly when their ids are. */
#ifndef CELLC_DIMS_H
#define CELLC_DIMS_H

#include <stdbool.h>

#define DIMS_MAX_TERMS 8
#define DIMS_MAX_VARS 4

typedef struct Mono {
  long coef;
  int nv;
  int v[DIMS_MAX_VARS]; /* dim symbols, sorted */
} Mono;

typedef struct Poly {
  int nt;
  Mono t[DIMS_MAX_TERMS]; /* sorted, no zero coefficients */
} Poly;

typedef struct DimTable {
  Poly *polys;
  int n, cap;
} DimTable;

void dims_free(DimTable *t);
int dims_const(DimTable *t, long c);
int dims_var(DimTable *t, int sym);
/* -1 when the result would be too large a polynomial or overflow */
int dims_add(DimTable *t, int a, int b);
int dims_sub(DimTable *t, int a, int b);
int dims_mul(DimTable *t, int a, int b);
bool dims_is_const(const DimTable *t, int id, long *c);
/* Evaluate with values[sym] (< 0: unbound). False when a symbol is unbound or
 * the value overflows. */
bool dims_eval(const DimTable *t, int id, const long *values, long *out);
/* Write "2*H + D" (names[sym]) into buf. */
void dims_print(const DimTable *t, int id, const char *const *names, char *buf, int size);

#endif
