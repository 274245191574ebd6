/* cg_llvm.h: the CPU back end's code generation through the LLVM-C API, in three separate steps:
 * build one module holding a function per fused elementwise kernel of a plan (verified), then
 * either JIT-compile it for the host CPU (ORC LLJIT) or write it as an object file for a named
 * CPU. A kernel is  void kN(i64 r0, i64 r1, float **bases)  over rows [r0, r1). */
#ifndef CELLC_CG_LLVM_H
#define CELLC_CG_LLVM_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

typedef void (*KernelFn)(int64_t r0, int64_t r1, float **bases);

typedef struct CgModule CgModule;
typedef struct CgJit CgJit;

/* The module of pl's kernels (named k0, k1, ...). NULL with a message on failure. */
CgModule *cg_llvm_build(const Plan *pl, char *err, size_t errlen);
void cg_llvm_module_free(CgModule *m);
/* Optimizes the module at O3 for the host CPU and JIT-compiles it, consuming the module;
 * fns[k] = kernel k. NULL with a message on failure (the module is freed either way). */
CgJit *cg_llvm_jit(CgModule *m, KernelFn *fns, char *err, size_t errlen);
void cg_llvm_jit_free(CgJit *j);
/* Optimizes the module for `cpu` (an LLVM CPU name such as x86-64-v3; NULL: the host) and writes
 * it as a position-independent object file. 0, or -1 with a message. The module stays the
 * caller's. */
int cg_llvm_emit_object(CgModule *m, const char *cpu, const char *path, char *err, size_t errlen);

#endif
