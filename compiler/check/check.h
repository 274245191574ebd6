/* check.h: the checker: a parsed .cell file (and its imports) to a checked,
 * typed step graph per cell, with the analysis of language spec section 5
 * (recurrence class per state, gates that see state, the mode). */
#ifndef CELLC_CHECK_H
#define CELLC_CHECK_H

#include "lang.h"
#include "dims.h"
#include "init.h"
#include "ir.h"

typedef enum { MODE_SCAN, MODE_SEQUENTIAL } Mode;
/* A state's recurrence class (language spec section 9): diagonal-linear (a * S + b, a scan),
 * matrix-linear (affine in S, not diagonal: the delta rule; sequential until a chunked form
 * exists), nonlinear. */
typedef enum { REC_DIAG_LINEAR, REC_NONLINEAR, REC_MATRIX_LINEAR } Recurrence;
static inline const char *recurrence_name(Recurrence r) {
  return r == REC_DIAG_LINEAR ? "diagonal-linear" : r == REC_MATRIX_LINEAR ? "matrix-linear" : "nonlinear";
}
typedef enum { OPT_REAL, OPT_INT, OPT_BOOL } OptType;

typedef struct DimInfo {
  const char *name;
  Loc loc;
  int sym;          /* its symbol in the dim table */
  const DimExpr *def; /* default (dim H = D), or NULL */
  bool from_input;  /* introduced by `input x[D]` */
  long value;       /* -1 until bound */
} DimInfo;

typedef struct OptionInfo {
  const char *name;
  Loc loc;
  OptType type;
  double value;
} OptionInfo;

typedef struct ParamInfo {
  const char *name;
  Loc loc;
  int rank;
  int dim[MAX_RANK];    /* symbolic sizes */
  int n[MAX_RANK];      /* bound sizes */
  bool cplx;
  const char *init;     /* initializer name */
  Loc init_loc;
  const Expr **init_args;
  int ninit_args;
  double args[8];       /* evaluated at binding (of `inner` when there is one) */
  const char *inner;    /* inv_softplus(INIT): INIT's name, whose arguments args[] hold; else NULL */
  int ninner_args;
  int ref;              /* lru_gamma: the param it reads, else -1 */
  const char **tags;
  int ntags;
  int state;            /* the state whose learned initial value this is, else -1 */
  bool buffer;          /* `buffer NAME ~ INIT`: a constant, never trained, no gradient */
  bool frozen;          /* `param ... ~ INIT frozen`: not trained unless a configuration unfreezes it */
} ParamInfo;

/* The chunkwise-parallel form of a matrix state (chunkform.c; docs/language.md, "The chunked
 * form"): S = a * S_prev + sum_i key_i (x) val_i per head, every read of the new value a
 * contraction of S along its key axis with a state-free vector. The nodes are the typed graph's. */
typedef enum { CHUNK_DECAY_NONE, CHUNK_DECAY_SCALAR, CHUNK_DECAY_KEY } ChunkDecay;
#define CHUNK_MAX_TERMS 4
#define CHUNK_MAX_FACTORS 6
#define CHUNK_MAX_READS 4
typedef struct ChunkTerm {
  int sign;                         /* +1 or -1 */
  int nf;
  int factor[CHUNK_MAX_FACTORS];    /* nodes of the state's shape (or broadcastable to it) */
  signed char role[CHUNK_MAX_FACTORS]; /* 0: constant along both axes (per head), 1: varies along
                                          the key axis, 2: along the value axis */
  bool inv[CHUNK_MAX_FACTORS];      /* a divisor */
} ChunkTerm;
typedef struct ChunkRead {
  int node;                         /* the product (MATMUL) that reads the new value */
  int vec;                          /* its state-free vector operand */
  bool state_left;                  /* S (or transpose(S)) is the product's left operand */
  bool transposed;                  /* ... through transpose(S) */
} ChunkRead;
typedef struct ChunkInfo {
  bool applies;
  char why[200];                    /* when not: one line, lower case, no period */
  int key_axis, value_axis;         /* axes of the state: rank - 2 and rank - 1, in some order */
  ChunkDecay decay;
  int decay_node;                   /* the coefficient a (coef_a) */
  int nterms;
  ChunkTerm terms[CHUNK_MAX_TERMS];
  int nreads;
  ChunkRead reads[CHUNK_MAX_READS];
  /* the delta rule (a matrix-linear state): S = a * S_prev + c * (S_prev k) (x) k + k (x) v, the
     projection's term, its per-head factors (coefficient c, sign included) and its key vector (the
     input term's key factor); decay_node: a's one factor, or -1 (a = 1) */
  bool delta;
  ChunkTerm proj;
  int proj_key;
} ChunkInfo;

typedef struct StateInfo {
  const char *name;
  Loc loc;
  int rank, dim[MAX_RANK], n[MAX_RANK];
  bool cplx;
  const char *init;     /* NULL (zeros), "learned", or an initializer name */
  Loc init_loc;
  const Expr **init_args;
  int ninit_args;
  double args[8];
  const char *inner;    /* as ParamInfo's */
  int ninner_args;
  int param;            /* learned: the param holding the initial value, else -1 */
  int update;           /* its NEWVAL node */
  int order;            /* position among the updates in the body */
  Recurrence rec;
  int coef_a, coef_b;   /* diagonal-linear: new = a * prev + b (typed-graph nodes; -1 = zero) */
  int culprit;          /* nonlinear: the node that reads a previous value */
  /* a history (hidden: prev and conv read it): the last hist_lag steps of a named value, oldest
     first, [hist_lag * size]; hist_lag 0 for a declared state */
  int hist_lag;
  int hist_of;          /* ... the typed node of the value */
  const char *hist_name; /* ... the value's name (the state's is "hist.NAME") */
  ChunkInfo chunk;      /* the chunkwise-parallel form, for a state of rank 2 or 3 */
} StateInfo;

/* The elements of a state (of one part of a complex one). */
static inline int state_numel(const StateInfo *s) {
  int e = 1;
  for (int i = 0; i < s->rank; i++) e *= s->n[i];
  return e;
}
/* The size initializers scale by (`standard`'s H): a state's last dim (1 for a scalar). */
static inline int state_last_dim(const StateInfo *s) { return s->rank ? s->n[s->rank - 1] : 1; }

typedef struct GateInfo {
  const char *name;
  Loc loc;
  int node;
  bool sees_state;
} GateInfo;

typedef struct Cell {
  const char *name;
  Loc loc;
  const Src *src;
  Graph g;              /* the typed step graph */
  DimTable dt;
  DimInfo *dims;
  int ndims;
  const char **dim_names; /* by symbol */
  OptionInfo *options;
  int noptions;
  ParamInfo *params;
  int nparams;
  StateInfo *states;
  int nstates;
  GateInfo *gates;
  int ngates;
  const char *input_name;
  Loc input_loc;
  int input_dim;        /* symbolic size of the input */
  int input_size;       /* bound */
  int output;           /* node */
  int output_dim;       /* symbolic size of the output (rank 0: const 1) */
  int output_size;
  Mode mode;            /* scan when every state is diagonal-linear */
  int scan_blocker;     /* sequential although every state is diagonal-linear: the PREV node of a
                           state read outside its own update (check.c, outside_read), else -1 */
  bool bound;           /* every dim has a value: n[] fields are valid */
  bool chunked;         /* --mode chunked, and the chunked form applies (chunk_mode_blocker) */
} Cell;

/* A file and its imports, parsed: every cell, imported ones first. */
typedef struct Module {
  const CellAst **cells;
  const Src **srcs;     /* the file of each cell */
  bool *in_main;        /* defined in the file named on the command line */
  int ncells;
} Module;

typedef struct Binding {
  const char *name;
  const char *value;    /* as written: "128", "true", "0.5" */
} Binding;

typedef struct CheckOptions {
  const Binding *sets;  /* --set NAME=VALUE (cell options) */
  int nsets;
  const Binding *dims;  /* --dims H=128 */
  int ndims;
  bool need_bound;      /* every dim must have a value (run, train) */
  bool training;        /* gumbel_sigmoid samples noise */
  bool force_scan;      /* --mode scan: an error when a state is nonlinear */
  bool force_sequential;
  bool force_chunked;   /* --mode chunked: an error where the chunked form does not apply */
  bool any_dims;        /* a --dims name the cell lacks is skipped (check of a file with several cells) */
} CheckOptions;

/* Parses a file and its imports (relative to the file, then stdlib_dir).
 * NULL after printing diagnostics. */
Module *check_load(Arena *a, const char *path, const char *stdlib_dir);
Module *check_load_text(Arena *a, const char *path, const char *text, size_t len, const char *stdlib_dir);
/* The main file's cell of that name (or its last cell when name is NULL). */
const CellAst *check_find_cell(const Module *m, const char *name, const Src **src);
/* Checks and analyzes one cell. NULL after printing diagnostics. */
Cell *check_cell(Arena *a, const Src *src, const CellAst *ast, const CheckOptions *o);
void cell_free(Cell *c);

/* chunkform.c: recognizes the chunkwise-parallel form of each state (StateInfo.chunk) after the
 * analysis; NULL when every state may run in chunked mode (every matrix state has the form, the
 * rest are diagonal-linear or histories, at least one has it), else why not, naming the state
 * (in buf). */
void chunk_analyze(Cell *c);
const char *chunk_mode_blocker(const Cell *c, int *state, char *buf, int size);
/* The estimated cost per token of a chunked-form state (bound dims) run each way, forward:
 * sequential, scan, chunked with chunk length L (docs/language.md gives the formulas); -1 for a
 * way that does not apply (the delta rule's scan). */
typedef struct ChunkCost {
  double flops[3], bytes[3];
} ChunkCost;
ChunkCost chunk_cost(const Cell *c, const StateInfo *s, int L);
/* Whether the chunked form (chunk length L) is cheaper than the cell's mode by those estimates,
 * summed over the chunked states, each way's flops plus CHUNK_BALANCE times its bytes (`cellc
 * train`'s train.mode = auto; docs/language.md). */
#define CHUNK_BALANCE 8.0
bool chunk_cheaper(const Cell *c, int L);

/* Text of an expression (for messages): "Whz @ h". */
char *expr_text(Arena *a, const Expr *e);
/* A symbolic size as text ("2*H"), or its value when bound. */
void cell_dim_text(const Cell *c, int dim, char *buf, int size);
void cell_shape_text(const Cell *c, int rank, const int *dim, char *buf, int size);
/* check_dump.c: the typed step graph as text, shapes symbolic (`cellc check --dump typed`). */
void cell_dump(const Cell *c, FILE *f);

/* init_values.c: a cell's initial values (re, im interleaved for complex ones), drawn from rng.
 * A param from its declared initializer, or from `over` (a configuration's override; NULL: the
 * declared one); earlier[j]: the values of param j < i, for an initializer that reads another
 * param (lru_gamma). A state from its declared initializer (not `learned`), one row. 0, or -1 with a
 * one-line message (the caller says where). */
int cell_draw_param(const Cell *c, int i, const InitText *over, const double *const *earlier, Rng *rng, double *out,
                    char *err, size_t errlen);
int cell_draw_state(const Cell *c, int s, Rng *rng, double *out, char *err, size_t errlen);

/* The dims a cell's body declares, in order, `if` branches included: `dim N`, `dim N = ...`
 * (has_default) and the input's `input x[N]` (is_input). Returns how many (at most max). */
typedef struct DeclaredDim {
  const char *name;
  bool has_default;
  bool is_input;
} DeclaredDim;
int check_declared_dims(const CellAst *ast, DeclaredDim *out, int max);

#endif
