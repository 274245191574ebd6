/* interp.h: the reference interpreter, a back end: runs a Program's forward and backward step
 * graphs over whole sequences, row by row, in float64 (or rounding every value to float32 when
 * BackendOptions.f32). The oracle every other back end is tested against. */
#ifndef CELLC_INTERP_H
#define CELLC_INTERP_H

#include "backend.h"

extern const Backend interp_backend;

#endif
