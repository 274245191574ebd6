/* plan.h: the execution plan of a differentiated Program over a whole
 * sequence (shared/design.md, "Execution of a layer over a sequence"). Every per-row
 * node gets a phase (before, inside or after the time loop, forward or
 * backward) and a level; each level is a set of GEMMs over all rows (or over
 * the B rows of one step), scans, then one fused elementwise kernel. Values
 * that cross kernels live in arrays of rows; the rest stay in registers and
 * row-local temporaries of the generated code. Back ends run the plan. */
#ifndef CELLC_PLAN_H
#define CELLC_PLAN_H

#include "lower.h"
#include "plan_table.h"

typedef enum {
  ARR_ROWS,    /* [T*B, width]: a per-row value */
  ARR_STATE,   /* [(T+1)*B, width]: state part: rows [0,B) = h0, prev at row r, new at row r + B */
  ARR_DSTATE,  /* [(T+1)*B, width]: sequential backward: dprev at row r, dnew at r + B; last B rows = dfinal */
  ARR_DTOTAL,  /* [(T+1)*B, width]: scan backward: the reverse scan's output; last B rows = dfinal */
  ARR_STATIC,  /* [width]: a static node (params only), row stride 0 */
  ARR_PARAM,   /* the caller's param part (index), row stride 0 */
  ARR_ACC,     /* [width]: a boundary adjoint summed over rows (index: bound), row stride 0 */
  ARR_X,       /* the caller's x [T*B, x_size] */
  ARR_DY,      /* the caller's dy [T*B, O] */
  ARR_NOISE,   /* the caller's noise stream (index) [T*B, width] */
  ARR_Y,       /* the caller's y [T*B, O] */
  ARR_GX,      /* the caller's grad_x [T*B, x_size] */
  ARR_GATE,    /* gate (index) [T*B, width]: the caller's or ours */
  ARR_GH0,     /* the caller's grad_h0 of state part (index) [B, width] */
  ARR_STACK,   /* [numel]: matrices stacked by rows (index: stack), filled before the forward */
} ArrayKind;

typedef struct PlanArray {
  ArrayKind kind;
  int width;     /* row stride in floats (0 for static kinds) */
  int numel;     /* static kinds: elements */
  int index;     /* node / param part / state part / noise / gate / bound */
  int blocks;    /* ARR_STATE, ARR_DSTATE, ARR_DTOTAL: its blocks of B rows besides the T steps'
                    (1; a shifted history's: K, Plan.shift) */
} PlanArray;

/* A place a node's values live: row r at array + (r + row_off * B) * width + col. */
typedef struct Slot {
  int array;
  int row_off;   /* in units of B rows */
  int col;
} Slot;

typedef enum { REG_ALL, REG_STEP, REG_FIRST } Region; /* all T*B rows; the B rows of one step; rows [0, B) */

typedef enum {
  PS_ELEM,       /* kernel: the fused elementwise kernel */
  PS_GEMM,       /* node = M @ v over the region's rows */
  PS_GEMM_T,     /* node = M^T @ g over the region's rows */
  PS_OUTER_ACC,  /* acc[bound] += G^T V over all rows (node: the OUTER term) */
  PS_COLSUM,     /* acc[bound] += sum over all rows of node */
  PS_SCAN,       /* state: new = a * prev + b over t, forward (complex: parts pair up) */
  PS_RSCAN,      /* state: dtotal = g + conj(a[t+1]) * dtotal[t+1], backward */
  PS_COPY,       /* node's home -> slot `dst`, over the region's rows */
  PS_ZERO,       /* slot `dst` = 0 over the region's rows */
} PStepKind;

typedef struct PStep {
  PStepKind kind;
  int kernel;
  int node;
  int out;       /* PS_GEMM / PS_GEMM_T: where the product goes (a sum's node), accumulating when `accumulate` */
  bool accumulate;
  int mat;       /* PS_GEMM of stacked products: the stacked matrix's slot (else -1) */
  int ncols;     /* ... and the stacked output's width */
  int state;     /* PS_SCAN / PS_RSCAN: the state (its parts) */
  int bound;
  int dst;       /* PS_COPY / PS_ZERO: a slot */
  bool dot;      /* PS_COLSUM: the sum of the product of its node's two factors, which no kernel
                    computes (PlanOptions.dot_sums) */
} PStep;

typedef struct Phase {
  Region region;
  PStep *steps;
  int n, cap;
} Phase;

/* A fused elementwise kernel: nodes in order; each computed per row. */
typedef struct Kernel {
  int *nodes;
  int n, cap;
} Kernel;

typedef struct Plan {
  Program *p;
  bool scan;             /* scan mode */
  PlanArray *arrays;
  int narrays, caparrays;
  Slot *slots;
  int nslots, capslots;
  int *home;             /* per node: its slot, or -1 (a temporary, a constant) */
  int *kernel_of;        /* per node: the kernel computing it, or -1 */
  Kernel *kernels;
  int nkernels, capkernels;
  /* the order the executor runs: fwd_pre, then fwd_step for t = 0..T-1, fwd_post;
     bwd_pre, bwd_step for t = T-1..0, bwd_post, bwd_first */
  Phase fwd_pre, fwd_step, fwd_post, bwd_pre, bwd_step, bwd_post, bwd_first;
  bool *static_fwd;      /* static nodes to evaluate before the forward */
  bool *static_bwd;      /* static nodes to evaluate after the adjoints are summed */
  int *state_array;      /* per state part: its ARR_STATE array */
  int **stacks;          /* per stack: the matrix nodes it stacks, in order */
  int *nstack;
  int nstacks;
  int *dstate_array;     /* per state part: ARR_DSTATE (sequential) or ARR_DTOTAL (scan), or -1 */
  bool *still;           /* per state part: a still history (PlanOptions.still), which no step runs */
  int *shift;            /* per state part: the width n of its steps where it is a history in the shift
                            layout (PlanOptions.shift_histories), else 0 */
} Plan;

typedef struct PlanOptions {
  bool scan;             /* run in scan mode (the Program must be in scan form) */
  bool gates;            /* record every gate per step */
  bool still;            /* scan mode: a history whose new value is its previous one (the chunked
                            form's OUT keeps so the histories only IN reads) runs no steps; the
                            executor gives h0 as its final state and dL/dfinal as its dL/dh0
                            (EtStatePart.still; the CPU's executor does) */
  bool slice_views;      /* a slice of x, dy, a previous state or a dnew is read in place (a slot at
                            its offset in the leaf's array), not copied by a kernel */
  bool sink_hybrid;      /* scan mode with histories: what only their loop reads runs in it
                            (sink_into_steps) */
  bool dot_sums;         /* an adjoint's term a * b of two per-row values (a weight's elementwise
                            gradient) summed over the rows from a and b (PStep.dot), not stored */
  bool shift_histories;  /* scan mode, with slice_views: a history of K steps of n floats of a value
                            computed before its loop keeps each step's value once, its arrays
                            [(T + K) B, n] (step j of the history at step t: row t + j): no forward
                            step, and dprev summed in place (schedule.c, Shift) */
  bool shift_passes;     /* with shift_histories: a backward loop that holds nothing but their dprev
                            sums runs as K - 1 passes over all rows (the same sums in the same order,
                            no steps in order: a GPU's launches or latencies per step) */
} PlanOptions;

Plan *plan_new(Program *p, const PlanOptions *o);
/* The operands of a PS_GEMM or PS_GEMM_T step: the slots of the product (y), of the per-row vector
 * (v) and of the matrix (m: the step's stacked matrix, or the node's), and the matrix's [nO, nI]
 * (nO: the stack's width for a stacked product). */
typedef struct GemmOperands {
  int y, v, m;
  int nO, nI;
} GemmOperands;
GemmOperands plan_gemm_operands(const Plan *pl, const PStep *st);

/* Per array: whether only the steps of the time loop of one direction touch it (an ARR_ROWS array
 * whose values are made and used within one step). A back end may keep B rows of it instead of
 * T * B, rows r of step t at r - t * B: the step's values stay in cache. xmalloc'ed. */
bool *plan_step_local(const Plan *pl);
/* The floats an array the back end owns holds for T steps of B rows (0 for the caller's arrays). */
size_t plan_array_floats(const PlanArray *a, int T, int B);
/* h_0 .. h_T of state part q, [(T + 1) B, size], from its state array's values at src (host memory):
 * the array's rows; h0 throughout for a still history; a shifted history's steps from their rows
 * (step j of row r at row r + j B). The back ends' read_steps. */
void plan_state_steps(const Plan *pl, int q, int size, const float *src, int T, int B, float *out);
/* The floats of the state array plan_state_steps reads: the rows it reads, no more. */
size_t plan_state_steps_floats(const Plan *pl, int q, int size, int T, int B);
void plan_free(Plan *pl);
/* The float32 bytes a training run keeps per batch row and step: every array with a row per token
 * (the executor's values and states, and the caller's x, dy, y, dx, gates and noise). */
size_t plan_bytes_per_row(const Plan *pl);
/* Of those, the caller's: x, dy, y, dx, gates and noise (a chunked run keeps them whole). */
size_t plan_io_bytes_per_row(const Plan *pl);
/* The plan, for --debug output. */
void plan_dump(const Plan *pl, FILE *f);

/* The plan as the flat table every executor reads (plan_table.h): its bytes (malloc'd; free them).
 * kstatic_fwd and kstatic_bwd are -1: a back end that runs the static values as kernels sets them. */
typedef struct PlanTable {
  char *data;
  size_t n;
} PlanTable;
PlanTable plan_table_build(const Plan *pl, Program *p);

#endif
