/* cpu_features.h: what the CPU can do, from CPUID and XGETBV (never from its model name),
 * and the OpenBLAS core type of the widest vector width the CPU and the OS support.
 *
 * cellc's own GEMM kernels (runtime/gemm) are chosen from these features; OpenBLAS only runs
 * the fallbacks (CPUs without AVX2, K = 1 products, float64 in diag). Nothing here changes
 * OpenBLAS's dispatch inside a running process: the library picks its core in its constructor
 * and starts its worker threads there, so re-running the dispatch later races with them. A
 * program that wants the chosen core in OpenBLAS (bench/ for its peers) sets OPENBLAS_CORETYPE
 * to cpu_blas_choose's core in the environment the process starts with. */
#ifndef CELLC_CPU_FEATURES_H
#define CELLC_CPU_FEATURES_H

#include <stdbool.h>
#include <stdint.h>

/* The raw CPUID leaves the decoding reads, and XCR0; a test fills these by hand to
 * stand for a CPU it does not run on. Registers in the order eax, ebx, ecx, edx. */
typedef struct CpuidLeaves {
  uint32_t leaf0[4];   /* max basic leaf; vendor string in ebx, edx, ecx */
  uint32_t leaf1[4];   /* family/model/stepping in eax; FMA, OSXSAVE, AVX in ecx */
  uint32_t leaf7[4];   /* subleaf 0: AVX2, AVX-512 F/DQ/BW/VL in ebx; AMX in edx */
  uint32_t leaf7_1[4]; /* subleaf 1: AVX512-BF16 in eax */
  uint64_t xcr0;       /* XGETBV(0): the register state the OS saves; 0 without OSXSAVE */
} CpuidLeaves;

typedef enum CpuVendor { CPU_VENDOR_OTHER, CPU_VENDOR_INTEL, CPU_VENDOR_AMD } CpuVendor;

typedef struct CpuFeatures {
  CpuVendor vendor;
  char vendor_id[13];             /* "GenuineIntel", "AuthenticAMD", ... */
  int family, model;              /* display family and model (extended fields added) */
  bool avx, avx2, fma;            /* the instructions exist */
  bool avx512f, avx512bw, avx512vl, avx512dq, avx512_bf16;
  bool amx_tile, amx_bf16, amx_int8;
  bool os_ymm;                    /* the OS saves YMM state (XCR0 bits 1, 2) */
  bool os_zmm;                    /* and opmask and ZMM state (XCR0 bits 5, 6, 7) */
  bool os_amx;                    /* and AMX tile state (XCR0 bits 17, 18) */
} CpuFeatures;

/* The BLAS kernels for a CPU: an OpenBLAS core type name (as OPENBLAS_CORETYPE takes it)
 * and the vector width of its single-precision GEMM kernels. core is NULL when nothing
 * should be forced (no AVX: the library's own choice is as good). */
typedef struct BlasChoice {
  const char *core;     /* "Cooperlake", "SkylakeX", "Zen", "Haswell", "SandyBridge" or NULL */
  const char *fallback; /* a core of the same width for a library that lacks `core`, or NULL */
  int width_bits;       /* 512, 256 or 128: the widest usable vector width */
} BlasChoice;

/* Reads CPUID and XGETBV on this machine (zeros on a non-x86 build). */
CpuidLeaves cpu_cpuid_read(void);
/* Decodes leaves into features; pure. */
CpuFeatures cpu_features_decode(const CpuidLeaves *l);
/* cpu_features_decode(cpu_cpuid_read()). */
CpuFeatures cpu_features_host(void);
/* The widest vector width both the CPU and the OS support for FMA work: 512, 256 or 128. */
int cpu_fma_width(const CpuFeatures *f);
/* Maps features to the BLAS kernels of their widest width; pure, never SSE on AVX2. */
BlasChoice cpu_blas_choose(const CpuFeatures *f);
/* The vector width of an OpenBLAS core's sgemm kernels by its name (case-insensitive):
 * 512, 256, 128, or 0 for a name it does not know. */
int cpu_blas_core_width(const char *core);

/* The core OpenBLAS runs in this process (openblas_get_corename), "" when it cannot be asked. */
const char *cpu_blas_corename(void);
/* One line for logs and `make bench`: the core OpenBLAS runs, its width, the CPU's widest and
 * where the core came from ("kernels: Prescott (128-bit; CPU's widest 512-bit; the library's
 * own choice)"). */
void cpu_blas_describe(char *buf, int size);

#endif
