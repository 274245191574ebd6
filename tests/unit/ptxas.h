/* ptxas.h: the resource check of generated kernels, for the CUDA tests (a test helper, ptxas.c,
 * linked into the tests that use it; not part of cellc): ptxas -v on a PTX module, its report
 * parsed into registers, shared memory, stack and spill bytes per kernel. */
#ifndef CELLC_TEST_PTXAS_H
#define CELLC_TEST_PTXAS_H

#include <stddef.h>

/* What ptxas reports for one kernel of a PTX module. */
typedef struct CudaKernelResources {
  char name[128];
  int registers;
  int shared_bytes;       /* static shared memory */
  int stack_bytes;        /* stack frame */
  int spill_store_bytes;
  int spill_load_bytes;
} CudaKernelResources;

/* Run `ptxas -v -arch=<arch>` on PTX text (ptxas from $CUDA_HOME/bin, /usr/local/cuda/bin
 * or PATH) and parse its report: *out (caller frees) has *n_out entries, one a kernel.
 * 0, or -1 with ptxas's messages in err. */
int cuda_ptxas_check(const char *ptx, const char *arch, CudaKernelResources **out, int *n_out,
                     char *err, size_t errlen);

#endif
