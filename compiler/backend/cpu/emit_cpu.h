/* emit_cpu.h: the CPU back end's emit entry (emit_cpu.c) and the executor's bitcode it links
 * (emit_bitcode.c). */
#ifndef CELLC_EMIT_CPU_H
#define CELLC_EMIT_CPU_H

#include "backend.h"

int cpu_emit(Program *p, const BackendOptions *bo, const EmitOptions *o, char *err, size_t errlen);

/* standalone/executor.c as LLVM bitcode: [cellc_executor_bc, cellc_executor_bc_end) */
extern const char cellc_executor_bc[], cellc_executor_bc_end[];

#endif
