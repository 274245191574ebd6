/* lower.h: a checked cell, its dims bound, lowered to the real step graph
 * (complex values become (re, im) pairs; mean, the norms and gumbel_sigmoid
 * expand into primitive ops), and then differentiated (autodiff.c). The
 * Program is what the interpreter and every back end run. */
#ifndef CELLC_LOWER_H
#define CELLC_LOWER_H

#include "check.h"
#include "ir.h"

/* A real part of a param or state: complex ones have two (re, im), stored as
 * separate planes by the runtime. */
typedef struct ParamPart {
  int param, part;     /* part 0 = re (or the real value), 1 = im */
  int rank, n[MAX_RANK], numel;
  int leaf;            /* PARAM node */
  int grad;            /* backward: dL/d(this part), a node of the static backward, or -1 (zero) */
  bool no_grad;        /* a buffer, or a frozen param: the backward builds no gradient for it (grad -1) */
} ParamPart;

typedef struct StatePart {
  int state, part;
  bool cplx;           /* its state is complex: parts 0 and 1 pair up */
  int size;            /* numel */
  int prev;            /* PREV leaf */
  int next;            /* node of the new value */
  int a, b;            /* scan: new = a * prev + b as real nodes; complex states pair up parts 0 and 1:
                          (a_re, a_im) on parts 0/1 .a, (b_re, b_im) on .b; -1 = zero */
  int dnew;            /* backward: DNEW leaf */
  int g;               /* backward: the new value's adjoint from its users within the step, or -1 */
  int dtotal;          /* backward: g + dnew, the new value's whole adjoint */
  int dprev;           /* backward: dL/d(prev), a per-row node, or -1 (zero) */
} StatePart;

typedef struct GatePart {
  int gate;
  int node;
} GatePart;

/* A static node (params only) whose adjoint the per-row backward produces;
 * its adjoint is summed over all rows, then the static backward runs once. */
typedef struct Boundary {
  int node;            /* the static forward node */
  int adj;             /* per-row adjoint expression */
  int acc;             /* ACC leaf: the adjoint summed over rows */
} Boundary;

typedef struct Program {
  Cell *cell;          /* the cell it was lowered from; valid while it is compiled only (a cached
                          program outlives it): nothing after compilation reads it */
  Graph g;             /* real graph, hash-consed */
  bool training;
  bool scan_form;      /* diagonal-linear updates written as a * prev + b (scan mode) */
  int x, x_size;
  int output, output_size;
  ParamPart *pparts;
  int npparts;
  int *ppart_of;       /* param index -> its first part */
  StatePart *sparts;
  int nsparts;
  int nstates;         /* the cell's states (each one or two parts) */
  int *spart_of;       /* state index -> its first part */
  GatePart *gates;
  int ngates;
  int *noise_sizes;    /* NOISE leaves, by index */
  int nnoise;
  int nforward;        /* nodes [0, nforward) are the forward step */
  int chunk_shared;    /* the chunked form's programs: the values LOWER_CHUNK_IN computes for
                          LOWER_CHUNK_OUT, the last so many of IN's output and of OUT's input */
  /* backward (autodiff) */
  bool differentiated;
  int dy;              /* DY leaf */
  int dx;              /* dL/dx per row, or -1 */
  Boundary *bounds;
  int nbounds;
  bool *dyn;           /* per node: varies per row (input, states, noise, gradients) */
  bool *needs_acc;     /* per node: depends on an ACC leaf (a static node of the static backward,
                          which waits for the adjoints summed over rows) */
} Program;

/* Lowers a bound cell. training: gumbel_sigmoid draws noise. scan_form: every
 * diagonal-linear state's new value is built as a * prev + b from its
 * coefficients (the form scan mode runs); otherwise as the body wrote it. */
Program *lower_cell(Cell *c, bool training, bool scan_form);
/* The chunked form's two programs around the chunk op (docs/architecture.md, "The chunked form"):
 * LOWER_CHUNK_IN computes the chunk op's inputs (lower_chunk_layout) as its output; LOWER_CHUNK_OUT
 * takes the input followed by the chunk op's reads and computes the cell's output. Neither has
 * parts for the chunked states (spart_of gives such a state no parts); the others' are the
 * whole cell's, in its order. The values both would compute (a dynamic value of IN that OUT
 * reads, Mamba-2's u) IN computes once and passes on (Program.chunk_shared); a state that OUT
 * then no longer reads keeps its value there (next = prev: IN's final state is the one). */
typedef enum { LOWER_WHOLE, LOWER_CHUNK_IN, LOWER_CHUNK_OUT } LowerPart;
Program *lower_cell_part(Cell *c, bool training, bool scan_form, LowerPart part);
/* Per chunked state (StateInfo.chunk.applies), in state order: its sizes, and where its vectors lie
 * in a row of LOWER_CHUNK_IN's output, from in_off: the reads' vectors q_r [nh, K] (nreads), the
 * terms' key factors k_m [nh, K] and value factors v_m [nh, V] (nterms each), log a ([nh, K] per
 * key, else [nh]); and its reads o_r [nh, V] in LOWER_CHUNK_OUT's input (from the cell's input size
 * plus out_off). key_last: the key axis is the state's last (its [V, K] per head, Mamba-2). */
#define CHUNK_LAYOUT_MAX 8
typedef struct ChunkLayout {
  int state, nh, K, V, nterms, nreads;
  bool per_key, key_last;
  bool delta;         /* the delta rule (compiler/ir/chunkdelta.h): after log a, c per head */
  int in_off, out_off;
} ChunkLayout;
/* Offsets within a chunked state's part of a LOWER_CHUNK_IN row */
static inline int chunk_q_off(const ChunkLayout *l, int r) { return l->in_off + r * l->nh * l->K; }
static inline int chunk_k_off(const ChunkLayout *l, int m) { return l->in_off + (l->nreads + m) * l->nh * l->K; }
static inline int chunk_v_off(const ChunkLayout *l, int m) {
  return l->in_off + (l->nreads + l->nterms) * l->nh * l->K + m * l->nh * l->V;
}
static inline int chunk_la_off(const ChunkLayout *l) { return chunk_v_off(l, l->nterms); }
static inline int chunk_c_off(const ChunkLayout *l) { return chunk_la_off(l) + l->nh; }
int lower_chunk_layout(const Cell *c, ChunkLayout *out, int max);
void program_free(Program *p);
/* Recomputes p->dyn and p->needs_acc for every node. */
void program_mark_dyn(Program *p);
/* Everything compiled code depends on, as numbers (nodes, parts, bounds, gates, noise): two
 * programs with equal signatures compile to the same code. xmalloc'ed; *len numbers. */
uint64_t *program_signature(const Program *p, size_t *len);

/* autodiff.c: adds the backward step (per-row and static parts). */
void ad_differentiate(Program *p);
/* Prints the backward step as math (`cellc derive`). */
void ad_print(Program *p, FILE *f);

/* lower_dump.c: the program as text, one node a line, the backward after the forward once
 * differentiated (`cellc check --dump lower|ad`). */
void program_dump(const Program *p, FILE *f);

#endif
