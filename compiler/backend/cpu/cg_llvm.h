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
/* A kernel over nodes that run once (row 0), with the same signature: the static values. Their
 * ops are those a plan kernel holds (elementwise, broadcast, sum, concat, slice) and the products
 * (matrix-vector, transposed, outer) as scalar loops. */
typedef struct CgNodes {
  const char *name;
  const int *nodes;
  int n;
} CgNodes;
/* cg_llvm_build, and a kernel for each of the extra lists. */
CgModule *cg_llvm_build_with(const Plan *pl, const CgNodes *extra, int nextra, char *err, size_t errlen);
void cg_llvm_module_free(CgModule *m);
/* Optimizes the module at O3 for the host CPU and JIT-compiles it, consuming the module;
 * fns[k] = kernel k. NULL with a message on failure (the module is freed either way). */
CgJit *cg_llvm_jit(CgModule *m, KernelFn *fns, char *err, size_t errlen);
void cg_llvm_jit_free(CgJit *j);
/* Optimizes the module for `cpu` (an LLVM CPU name such as x86-64-v3; NULL: the host) and writes
 * it as a position-independent object file. 0, or -1 with a message. The module stays the
 * caller's. */
int cg_llvm_emit_object(CgModule *m, const char *cpu, const char *path, char *err, size_t errlen);

/* What cg_llvm_emit_library links into the module and writes. */
typedef struct CgLibrary {
  const void *bitcode;       /* the standalone executor (LLVM bitcode) */
  size_t bitcode_len;
  const void *table;         /* its plan table, as the constant cellc_table */
  size_t table_len;
  const char *const *kernels; /* cellc_kernels[i] = the function named kernels[i] */
  int nkernels;
  const char *const *exports; /* pairs: the executor's name, the name it gets in the object */
  int nexports;
  const char *cpu;           /* LLVM CPU name; NULL: the host */
  const char *path;          /* the object file */
} CgLibrary;
/* Links the executor into the module with the table and the kernel table, keeps only the exports
 * (renamed) visible, and writes the object for lib->cpu. 0, or -1 with a message. The module stays
 * the caller's (it is changed). */
int cg_llvm_emit_library(CgModule *m, const CgLibrary *lib, char *err, size_t errlen);

#endif
