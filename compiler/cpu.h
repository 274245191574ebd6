/* cpu.h: the CPU back end: runs a Plan over whole sequences in float32, with
 * GEMMs through OpenBLAS, scans, and fused elementwise kernels compiled by
 * the LLVM back end (cg_llvm.c). */
#ifndef CELLC_CPU_H
#define CELLC_CPU_H

#include "schedule.h"

/* Whole-sequence buffers, float32, row-major; per-part arrays follow the
 * Program's param parts and state parts. */
typedef struct CpuSeq {
  int T, B;
  const float *x;          /* [T, B, x_size] */
  const float **params;    /* per param part */
  const float **h0;        /* per state part [B, size] */
  const float **noise;     /* per noise stream [T, B, size] */
  float *y;                /* [T, B, O] */
  float **final;           /* per state part [B, size] */
  float **gates;           /* per gate [T, B, size], or NULL */
  /* backward */
  const float *dy;         /* [T, B, O] */
  const float **dfinal;    /* per state part [B, size] */
  float **grad_params;     /* per param part (overwritten) */
  float *grad_x;           /* [T, B, x_size] */
  float **grad_h0;         /* per state part [B, size] */
} CpuSeq;

typedef void (*KernelFn)(int64_t r0, int64_t r1, float **bases);

typedef struct CpuCode CpuCode;

typedef struct CpuCell {
  Program *p;
  Plan *pl;
  KernelFn *fns;           /* per kernel: generated code, or NULL (portable evaluator) */
  void *jit;               /* the LLVM back end's state */
  int nthreads;
  CpuCode *code;           /* the cached plan and code this cell shares (NULL: not cached) */
} CpuCell;

/* The arrays of one sequence in flight (forward keeps what backward reads). */
typedef struct CpuWork {
  int T, B;
  int narr;
  float **arr;             /* per plan array */
  bool *owned;
  size_t *size;
  float **bases;           /* per slot: where row 0 of its values is */
} CpuWork;

/* Compiles a differentiated Program (scan mode: p in scan form). jit: generate
 * code with LLVM (else the portable evaluator runs the kernels). NULL with a
 * message in err on failure. */
CpuCell *cpu_compile(Program *p, bool scan, bool gates, bool jit, char *err, size_t errlen);
/* Compiled plans and code are cached in the process by a hash of the lowered
 * graph (which encodes the cell, its dims and options) and the mode: an equal
 * program reuses them. How many compilations the cache saved so far: */
int cpu_cache_hits(void);
void cpu_free(CpuCell *c);
CpuWork *cpu_work_new(void);
void cpu_work_free(CpuWork *w);
void cpu_forward(CpuCell *c, CpuWork *w, CpuSeq *s);
void cpu_backward(CpuCell *c, CpuWork *w, CpuSeq *s);

/* Seconds spent per step kind (PStepKind) since the last reset, when profiling
 * is on (cpu_set_profiling, or CELLC_PROFILE=1 in the environment). */
void cpu_set_profiling(bool on);
void cpu_profile_reset(void);
const double *cpu_profile_times(void);
/* Bytes the elementwise kernels read and wrote in per-row arrays (profiled). */
double cpu_profile_elem_bytes(void);

#endif
