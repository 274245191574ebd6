/* probes.h: the diagnostics' probes, the public header of probes/: one layer rerun on the host's
 * float64 interpreter with its gates, states and step Jacobians (diag_layer.h), the numbers and
 * plots made of them (diag_stats.h), and what `cellc diag` measures on a run of the training
 * library (diag_run.c). The gradient probe of `cellc train` ([log] grad_per_step) is in
 * diag_layer.h. */
#ifndef CELLC_PROBES_H
#define CELLC_PROBES_H

#include "diag_layer.h"
#include "diag_stats.h"
#include "train.h"

/* ---- cellc diag (diag_run.c) ---- */

typedef struct DiagOptions {
  const char *out;     /* the directory to write, or NULL: runs/diag-<cell>-<task>-<time> */
  const char *compare; /* a directory diag wrote, drawn beside this one in the plots, or NULL */
  int batches;         /* validation batches to measure */
  bool by_token;       /* the statistics per input token (token tasks) */
  int sequences;       /* --sequences: the Jacobian statistics over the first N sequences of the
                        * first batch (0: 1) */
  int starts;          /* --starts: start times k of the products per sequence (0: 16; -1: every one) */
} DiagOptions;

typedef struct Diag Diag;

/* The probes of every layer of run's model (which outlives the Diag). Sets *out either way
 * (diag_close after); 0 or the exit status after the error. */
int diag_open(Diag **out, Run *run, const DiagOptions *o);
/* Measures validation batch `index`. */
void diag_batch(Diag *d, int64_t index);
/* diag.json, jacobians.safetensors and the plots into a fresh directory renamed into place once
 * complete, then the summary on stdout: 0, 3, or 130 when interrupted (nothing written). */
int diag_write(Diag *d);
void diag_close(Diag *d);

#endif
