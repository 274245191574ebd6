/* cg_cuda.h: the CUDA back end's code generator (cg_cuda.c): a plan as one CUDA C source text, the
 * same text NVRTC compiles for a GPU and cuda-emu compiles for the CPU. Private to the back end
 * (and its tests). */
#ifndef CELLC_CG_CUDA_H
#define CELLC_CG_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "cellc_launch.h"
#include "plan.h"

/* Threads of an elementwise kernel's block: a warp a row, CG_CUDA_WARPS warps a block (fewer when
 * the rows' temporaries need more shared memory than a block may have): the hosts' launch shapes
 * (cellc_launch.h). */
#define CG_CUDA_WARPS CELLC_WARPS
/* The most shared memory a block may use (with the opt-in), and so the most temporaries one row
 * may have; a device with less says so when the kernels load. */
#define CG_CUDA_MAX_TMP_FLOATS (CELLC_SHARED_OPTIN_BYTES / 4)

/* What the host needs to launch the generated kernels. Names in the source:
 *   k<i>         plan kernel i:  (long long r0, long long r1, float *const *bases), rows [r0, r1)
 *   kstatic_fwd  the static values before the forward, same form, one row
 *   kstatic_bwd  the static values after the backward's sums, same form, one row
 *   kstep_fwd    sequential mode: the forward's per-step phase over all T steps in one launch,
 *                (long long T, int B, float *const *bases), a block a batch row (and kstep_bwd)
 *   cellc_scan_chunks / cellc_scan_carry / cellc_scan_apply  (CellcScan): the chunked scan
 *   cellc_copy, cellc_fill, cellc_add_const: the plan's COPY, ZERO and constant COLSUM */
typedef struct CgCudaInfo {
  int nkernels;
  int *tmp_floats;     /* per plan kernel: the floats of temporaries one row needs (per warp) */
  bool has_static[2];  /* kstatic_fwd, kstatic_bwd exist */
  int static_tmp[2];
  bool has_step[2];    /* kstep_fwd, kstep_bwd exist */
  int step_tmp[2];     /* their temporaries (warp 0's, floats) */
} CgCudaInfo;

/* The plan's kernels and the fixed helpers as CUDA C source (xmalloc'ed), or NULL with a message
 * in err (a node the generator cannot put in a kernel, too many temporaries for shared memory). */
char *cg_cuda_source(const Plan *pl, CgCudaInfo *info, char *err, size_t errlen);
void cg_cuda_info_free(CgCudaInfo *info);

/* The scan kernels' argument, by value: the generated source declares the same struct (pointers
 * as device addresses, 8 bytes each, in this order). */
typedef struct CgCudaScan {
  unsigned long long a0, a1, b0, b1; /* coefficients (re, im): a, and b (forward) or g (reverse) */
  long long lda0, lda1, ldb0, ldb1;  /* their row strides (0: one row for every row) */
  unsigned long long s0, s1;         /* the state (forward) or dtotal (reverse) parts, [(T+1)B, size] */
  unsigned long long carry;          /* [nchunks][B size][6] floats: (A, V) of a chunk, then its carry-in */
  long long T;
  int B, size, L, nchunks, cplx, reverse;
} CgCudaScan;

/* `cellc emit --target cuda` (cuda_emit.c): the Backend.emit of both CUDA back ends. */
int cuda_emit(Program *p, const BackendOptions *bo, const EmitOptions *o, char *err, size_t errlen);

#endif
