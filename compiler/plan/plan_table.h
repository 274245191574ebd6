/* plan_table.h: the plan of one program as a flat, pointer-free table (plan_table_build writes
 * it), the one form every executor of a plan reads: the CPU's plan executor
 * (compiler/backend/cpu/exec.c) runs it both in cellc (cpu.c) and in the object `cellc emit`
 * writes (the table embedded next to the generated kernels, the executor linked in as LLVM
 * bitcode); the CUDA host's executor (compiler/backend/cuda/cellc_exec.h) runs it in the CUDA back
 * ends and in every emitted P.cu. Every part of it is an array of the structs below at a byte
 * offset from the table's start; slots, kernels and steps keep the plan's numbering.
 * Freestanding: stdint only. */
#ifndef CELLC_PLAN_TABLE_H
#define CELLC_PLAN_TABLE_H

#include <stdint.h>

#define ET_MAGIC 0x6c6c6563 /* "cell" */

/* Where an array's memory comes from at run time. Two conventions of the caller's buffers (the
 * executors' SeqIO and C API modes: cellc_exec.h CX_SEQIO / CX_CAPI, exec.h EXEC_SEQIO / EXEC_CAPI)
 * differ in some: a SeqIO holds y, the noise, dL/dh0 and (optionally) the gates itself. */
enum {
  ET_OWNED,      /* the workspace: rows * T * B + per_b * B + fixed floats (y: the SeqIO's, else owned:
                    the C API's backward reads it) */
  ET_PARAM,      /* a param part (index): the caller's array, or its plane in the workspace (complex) */
  ET_X, ET_DY,   /* the caller's x and dy */
  ET_GX,         /* the caller's dx, or the workspace when dx is NULL (C API) */
  ET_GH0,        /* state part (index): the SeqIO's dL/dh0, or the workspace, copied to the caller's dh0 */
  ET_NOISE,      /* noise stream (index): the SeqIO's, or the workspace (rows = width), drawn from the seed
                    by the forward */
};

typedef struct EtArray {
  int32_t kind, index, width;
  int32_t rows, per_b, fixed;  /* ET_OWNED: floats = rows * T * B + per_b * B + fixed */
  int32_t zero_bwd;            /* zeroed before each backward (the adjoints summed over rows) */
  /* ---- for the CUDA host's executor (compiler/backend/cuda/cellc_exec.h) ---- */
  int32_t gate;                /* ET_OWNED: the rows of gate `index`, which the caller may supply */
  /* ---- for the CPU executor (compiler/backend/cpu/exec.c) ---- */
  int32_t local;               /* step-local (plan_step_local): ET_OWNED with B rows, not T B */
} EtArray;

typedef struct EtSlot {
  int32_t array, row_off, col;
} EtSlot;

/* A scan coefficient: a slot's rows, or a constant row of `size` floats (fill: offset in the
 * table's floats), or zero (slot -1, fill -1). */
typedef struct EtCoef {
  int32_t slot, fill;
} EtCoef;

enum { ET_ELEM, ET_GEMM, ET_GEMM_T, ET_OUTER_ACC, ET_COLSUM, ET_SCAN, ET_RSCAN, ET_COPY, ET_ZERO };
enum { ET_REG_ALL, ET_REG_STEP, ET_REG_FIRST };

typedef struct EtStep {
  int32_t kind;
  int32_t kernel;              /* ET_ELEM */
  int32_t y, v, m, nO, nI;     /* ET_GEMM(_T): slots and sizes; ET_OUTER_ACC: y = acc, v = V, m = G, nO x nI */
  int32_t accumulate;
  int32_t src, dst, numel;     /* ET_COPY (src -1: the constant k), ET_ZERO, ET_COLSUM (dst: acc) */
  float k;
  int32_t part, cplx, size;    /* ET_SCAN / ET_RSCAN: the state's first part */
  int32_t arr0, arr1;          /* ... its state (dtotal) arrays, arr1 -1 when real */
  EtCoef a[2], b[2];           /* ... a, and b (forward) or g (reverse), per part */
  /* the CPU executor's */
  int32_t group;               /* ET_OUTER_ACC: its weight-gradient group; ET_COLSUM: the group that sums
                                  it while it packs G, or -1 */
  int32_t pack;                /* ET_GEMM(_T): its packed matrix (0 .. npacks), else -1 */
  int32_t src2;                /* ET_COLSUM: a second slot: the sum of src's rows times src2's
                                  (PStep.dot), or -1 */
} EtStep;

typedef struct EtPhase {
  int32_t region, first, n;    /* steps [first, first + n) */
} EtPhase;

typedef struct EtParamPart {
  int32_t param, part, cplx, numel;
  int32_t array;               /* its ET_PARAM array, or -1 */
  int32_t plane;               /* complex: offset of its plane in the workspace's plane area */
  int32_t grad;                /* the gradient's slot, or -1: the constant grad_k (zero when none) */
  float grad_k;
} EtParamPart;

typedef struct EtStatePart {
  int32_t state, part, cplx, size;
  int32_t arr, darr, gh0;      /* state array, dstate / dtotal array, ET_GH0 array (or -1) */
  int32_t still;               /* a still history (PlanOptions.still): no step writes its arrays; its
                                  final state is h0 (arr's row 0), its dL/dh0 dL/dfinal (darr's row T) */
  int32_t shift;               /* a history in the shift layout (PlanOptions.shift_histories): the width
                                  n of its size / n steps; step j of its value at step t is row t + j of
                                  arr [(T + size / n) B, n] (h0: rows j, the final state: rows T + j), and
                                  so of dL/dstate in darr; else 0 */
} EtStatePart;

typedef struct EtStackCopy {
  int32_t array, offset, src, numel; /* src slot's numel floats to array + offset */
} EtStackCopy;

/* Weight-gradient steps that run as one product (the CPU executor's): ET_OUTER_ACC steps of a run
 * of a phase's steps with no kinds but ET_OUTER_ACC and ET_COLSUM, the same V and their G side by
 * side in one array (a GRU's three input-weight gradients share x and the stacked gate adjoints):
 * A^T V with A the G's columns together, M their rows in all, so V is read once; and where other V
 * meet the same G (an LSTM's four gate adjoints times x and times h), those V's columns beside the
 * first's, so G is read once too; and the column sums of the run's ET_COLSUM steps over those G,
 * taken while G is packed. */
typedef struct EtGroup {
  int32_t na, nv;              /* G blocks, V blocks */
  int32_t M, N;                /* the G blocks' widths in all, the V blocks' */
  int32_t trigger;             /* the step that runs the group: the first of its steps in the phase */
  int32_t steps;               /* byte offset of na * nv step numbers: G block i times V block j at i nv + j */
  int32_t sums;                /* byte offset of na step numbers: the ET_COLSUM of G block i, or -1 */
  int32_t any_sum;
} EtGroup;

enum { ET_FWD_PRE, ET_FWD_STEP, ET_FWD_POST, ET_BWD_PRE, ET_BWD_STEP, ET_BWD_POST, ET_BWD_FIRST, ET_NPHASES };

typedef struct EtHeader {
  int32_t magic, bytes;
  int32_t train_noise;         /* the forward draws the noise streams from its seed */
  int32_t scan;                /* scan mode: dh0 comes from ET_GH0 arrays, else from the dstate arrays */
  int32_t x_size, output_size;
  int32_t y_array;             /* the outputs' array (C API: copied to the caller's y after the forward) */
  int32_t nparams, nstates;    /* the cell's, in the C API */
  int32_t kstatic_fwd, kstatic_bwd; /* kernel numbers of the static values, or -1 */
  int32_t planes;              /* floats of the complex params' planes */
  int32_t narrays, arrays;     /* count, byte offset */
  int32_t nslots, slots;
  int32_t nsteps, steps;
  int32_t npparts, pparts;
  int32_t nsparts, sparts;
  int32_t nstack, stack;
  int32_t nfloats, floats;
  EtPhase phases[ET_NPHASES];
  /* the CPU executor's */
  int32_t ngroups, groups;     /* the weight-gradient groups */
  int32_t npacks;              /* ET_GEMM(_T) steps: each packs its matrix before the sequence */
  int32_t xgrad_step;          /* the one step that writes grad_x where it is a product G M over all rows
                                  that overwrites it (SeqIO.fold skips it), or -1 */
} EtHeader;

#endif
