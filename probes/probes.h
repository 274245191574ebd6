/* probes.h: the diagnostics' probes, the public header of probes/: one layer rerun on the host's
 * float64 interpreter with its gates, states and step Jacobians (diag_layer.h), and the numbers
 * and plots made of them (diag_stats.h). `cellc diag` and the gradient probe of `cellc train`
 * ([log] grad_per_step) use them. */
#ifndef CELLC_PROBES_H
#define CELLC_PROBES_H

#include "diag_layer.h"
#include "diag_stats.h"

#endif
