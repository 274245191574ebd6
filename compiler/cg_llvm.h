/* cg_llvm.h: the LLVM back end: one LLVM module per compiled cell holding its
 * fused elementwise kernels, built through the LLVM-C API, verified,
 * optimized at O3 for the host CPU and JIT-compiled with ORC (LLJIT). */
#ifndef CELLC_CG_LLVM_H
#define CELLC_CG_LLVM_H

#include <stddef.h>

typedef struct CpuCell CpuCell;

/* Fills c->fns with a function per kernel of c->pl. 0, or -1 with a message. */
int cg_llvm_compile(CpuCell *c, char *err, size_t errlen);
void cg_llvm_free(CpuCell *c);

#endif
