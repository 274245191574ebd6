/* exec.h: the one executor of a plan on the CPU: runs the table of plan_table.h over arrays the
 * host has bound, on one thread's share of a forward or backward, with cellc's GEMM kernels
 * (gemm_core.h), the scans of scan.h and the weight-gradient groups. Freestanding (stdint,
 * stddef, stdbool; no allocation, no globals, no I/O): the CPU back end (cpu.c: OpenMP threads, JIT
 * or portable kernels, CELLC_PROFILE) and the object `cellc emit --target cpu` writes
 * (standalone/executor.c: pthreads, the linked kernels) are its two hosts. The host gives every
 * buffer (exec_pack_floats, exec_thread_floats say how much), the elementwise kernels, a barrier,
 * and optionally a hook around each step (the profile). */
#ifndef CELLC_EXEC_H
#define CELLC_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../plan/plan_table.h" /* freestanding, unlike plan.h */
#include "gemm.h"                   /* gemm_core.h's freestanding part only */

typedef struct ExecHost {
  void *ctx;
  /* Elementwise kernel k over the rows [r0, r1), bases per slot. */
  void (*kernel)(void *ctx, int k, int64_t r0, int64_t r1, float **bases);
  /* Every thread of the run meets here (called only with more than one thread). */
  void (*barrier)(void *ctx);
  /* Or NULL: thread 0 is about to run step `step` (done false), or has run it and its barrier
   * (done true); rows: thread 0's rows of it, all_rows: the step's rows on every thread. */
  void (*step)(void *ctx, int step, int64_t rows, int64_t all_rows, bool done);
} ExecHost;

/* A thread's buffers: its slot bases (nslots), the weight gradients' packed blocks and its float64
 * totals (exec_thread_floats). */
typedef struct ExecThread {
  float **bases;
  GemmTnBuf tn;
  double *total;
} ExecThread;

/* One forward or backward in flight, shared by its threads. */
typedef struct Exec {
  const EtHeader *tab;
  int T, B;
  float *const *bases;   /* per slot: row 0 of its values (a step-local slot: row 0 of its B rows) */
  float *const *abase;   /* per array: its first float */
  GemmIsa isa;           /* the products' kernels (gemm_core.h) */
  GemmPacked *packs;     /* per packed matrix (tab->npacks), filled by exec_pack */
  float *pack_mem;       /* exec_pack_floats floats, 64-byte aligned */
  ExecThread *th;        /* per thread */
  int nthreads;          /* threads in all (the steps over all rows) */
  int nloop;             /* of them, those that run the time loop (each a part of the batch) */
  int skip;              /* a step number left out (grad_x left to the caller), or -1 */
  ExecHost host;
} Exec;

/* Below this inner dimension cblas_sgemm is as fast as the kernels (both store-bound): measured at
 * 64 x 384, AVX-512: K = 1 cblas 1.3-1.6 us, kernel 1.5 us; K = 2 2.0 / 1.6; K = 8 4.9 / 2.6. */
#define EXEC_GEMM_MIN_K 2

/* Floats of the packed matrices (64-byte multiples). */
size_t exec_pack_floats(const EtHeader *tab, GemmIsa isa);
/* Each thread's buffers: floats of tn.at, tn.bt, tn.blk, doubles of total. */
void exec_thread_floats(const EtHeader *tab, GemmIsa isa, size_t *at, size_t *bt, size_t *blk, size_t *total);
/* Packs the matrix of every product of the forward's (or the backward's) phases, before the
 * threads start: the weights do not change while the sequence runs. */
void exec_pack(Exec *e, bool backward);
/* Thread i's share of the forward's phases (pre, every step, post) or the backward's (pre, every
 * step in reverse, post, first): the batch rows [b0, b1) of every step (a thread owns its
 * sequences from the first step to the last, so the time loop needs no barrier; a thread with no
 * rows waits it out), and part i of n of each step over all rows (rows, channels or output rows,
 * by the kind of step), with a barrier after each of those. */
void exec_run(Exec *e, bool backward, int i);

#endif
