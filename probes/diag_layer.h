/* diag_layer.h: one cell layer of `cellc diag` on the float64 interpreter (diag_layer.c): the
 * cell's program with its probes, whole sequences forward and backward, and exact step Jacobians. */
#ifndef CELLC_DIAG_LAYER_H
#define CELLC_DIAG_LAYER_H

#include "model.h"
#include "pipeline.h"

typedef struct DiagLayer {
  Cell *cell;
  Program *p;            /* the evaluation lowering, probes added, differentiated */
  const Backend *be;     /* the interpreter */
  Compiled *exe;
  Work *work;
  int ngates;            /* gate parts [0, ngates) are the cell's gates, in its order */
  const char *predictor; /* the gate (or "1-g", or "coef(h)") multiplying a state's previous value, or NULL */
  int coef_state;        /* the state it multiplies, or -1 */
  int coef[2];           /* gate parts of its value (re; im for a complex state, else -1), or -1 */
  int *pre_in, *pre_st;  /* per cell gate: gate parts of its pre-activation's input and state parts, or -1 */
  int S;                 /* every state part's size summed: the size of s */
} DiagLayer;

/* 0, or -1 with a message in err. */
int diag_layer_open(DiagLayer *L, Cell *cell, Arena *a, char *err, size_t errlen);
void diag_layer_close(DiagLayer *L);
int diag_numel(const DiagLayer *L, int gate_part);

/* The float64 buffers of one sequence batch [T, B] (rows t B + b). */
typedef struct DiagSeq {
  int T, B;
  double *x, *y, *dy, *gx;
  double **params, **gparams;                 /* per param part */
  double **h0, **final, **dfinal, **gh0;      /* per state part [B, size] */
  double **states, **dstates;                 /* per state part: h_0..h_T and dL/dh_0..dL/dh_T [T + 1, B, size] */
  double **gates;                             /* per gate part (probes included) [T, B, numel] */
} DiagSeq;

void diag_seq_alloc(const DiagLayer *L, DiagSeq *s, int T, int B);
void diag_seq_free(const DiagLayer *L, DiagSeq *s);
/* The forward (states and gates read back) and, when asked, the backward from s->dy and s->dfinal. */
void diag_seq_run(const DiagLayer *L, DiagSeq *s, bool backward);
/* The first s->B sequences of layer k of the model (of batch B) after a training batch: its input,
 * its output's gradient, its params and initial states. */
void diag_seq_fill(const DiagLayer *L, DiagSeq *s, Model *m, int k, int B);
/* ||dL/dh_t|| (every state concatenated) of each sequence after a backward, t = 1..T: out [T, B]. */
void diag_grad_norms(const DiagLayer *L, const DiagSeq *s, double *out);
/* J = d s_{t+1} / d s_t (S x S, row-major) at row b of `full` (after its forward), through `one`,
 * a sequence of T = 1, B = S. */
void diag_step_jacobian(const DiagLayer *L, const DiagSeq *full, int t, int b, DiagSeq *one, double *J);

/* The training-time probe of `[log] grad_per_step` (grad_probe.c). */
typedef struct GradProbe GradProbe;
/* For a model training on batches of B sequences of length T; NULL with a message in err. */
GradProbe *grad_probe_new(Model *m, int T, int B, char *err, size_t errlen);
/* After a training model_batch, before the params change: the largest ||dL/dh_t|| so far. */
void grad_probe_update(GradProbe *g, Model *m, int B);
/* grad_per_step.json and grad_per_step.svg into dir: 0, or -1 with a message in err. */
int grad_probe_write(const GradProbe *g, const char *dir, char *err, size_t errlen);
void grad_probe_free(GradProbe *g);

#endif
