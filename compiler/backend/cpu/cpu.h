/* cpu.h: the CPU back end: runs a Program's plan over whole sequences in float32, with GEMMs
 * through OpenBLAS, scans, and fused elementwise kernels generated through the LLVM-C API and
 * JIT-compiled. CELLC_THREADS (default: all cores) sets the threads of BackendOptions.threads 0. */
#ifndef CELLC_CPU_H
#define CELLC_CPU_H

#include "backend.h"

extern const Backend cpu_backend;

#endif
