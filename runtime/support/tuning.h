/* tuning.h: the process's tuning options (docs/tuning.md): thread count, GEMM kernel, profiling,
 * debugging dumps and back-end knobs that change how fast cellc runs or what it prints to stderr,
 * never what it computes. Library code reads them from here and never from the environment: the
 * program's edge (cmd/env.c for cellc; bench and test programs likewise) fills a Tuning, from
 * the CELLC_* variables or otherwise, and installs it with tuning_set before its first library
 * call. A program that installs none gets the defaults, the zero Tuning. */
#ifndef CELLC_TUNING_H
#define CELLC_TUNING_H

#include <stdbool.h>

/* The highest of cellc's GEMM kernels to use (runtime/gemm picks the host's best up to it). */
typedef enum { TUNING_GEMM_HOST, TUNING_GEMM_AVX2, TUNING_GEMM_BLAS } TuningGemm;

/* What the back ends' Work reports to stderr when it is freed. */
typedef enum { TUNING_PROFILE_OFF, TUNING_PROFILE_TOTALS, TUNING_PROFILE_STEPS } TuningProfile;

/* Every field's zero is its default. */
typedef struct Tuning {
  int threads;             /* cellc's own parallel work: 0: every online core (shared by mpirun's local ranks) */
  TuningGemm gemm;
  TuningProfile profile;
  bool dump_ir;            /* cpu: the optimized LLVM module of every compiled cell to stderr */
  int cuda_scan_chunk;     /* cuda: the scans' chunk length; 0: chosen from T */
  bool cuda_no_persistent; /* cuda: a launch per step and plan step, not the persistent kernel */
  const char *emu_cxx;     /* cuda-emu: the host compiler of the kernels; NULL: gcc */
  const char *emu_cflags;  /* cuda-emu: flags added to its command line, split at blanks; NULL: none */
  bool no_embed_fold;      /* the model: never fold the embedding's gradient through layer 0 */
} Tuning;

/* Install t (copied; its strings must outlive the process's library calls). Call it before the
 * library's threads start: the library reads the options without locks. */
void tuning_set(const Tuning *t);
/* The installed options (the zero Tuning until tuning_set). */
const Tuning *tuning(void);

#endif
