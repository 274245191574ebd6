/* exec.h: the one executor of a plan on the CPU: lays out the workspace, binds the caller's
 * buffers and the workspace to the arrays of the table of plan_table.h, copies the initial states
 * in and the outputs out, and runs the phases on each thread's share of a forward or backward, with
 * cellc's GEMM kernels (gemm_core.h), the scans of scan.h and the weight-gradient groups.
 * Freestanding (stdint, stddef, stdbool; no allocation, no globals, no I/O): the CPU back end
 * (cpu.c: OpenMP threads, JIT or portable kernels, the profile) and the object `cellc emit
 * --target cpu` writes (standalone/executor.c: pthreads, the linked kernels, the C API's checks)
 * are its two hosts. The host gives one workspace of exec_layout's size, the elementwise kernels, a
 * team of threads and its barrier, and optionally a hook around each step (the profile). */
#ifndef CELLC_EXEC_H
#define CELLC_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../plan/plan_table.h" /* freestanding, unlike plan.h */
#include "gemm.h"                   /* gemm_core.h's freestanding part only */

/* How the caller's values are laid out (cellc_exec.h's CX_SEQIO and CX_CAPI, for the CPU):
 * EXEC_SEQIO as the back ends' SeqIO (cellc's own runs: a complex value as two planes, one pointer
 * per part; y, the noise, the gates, dx and dL/dh0 in the caller's buffers), EXEC_CAPI as
 * docs/emit.md's C API (the emitted object: a complex value interleaved, one pointer per param or
 * state; y, the noise, dL/dh0, the complex params' planes and a missing dx in the workspace). */
enum { EXEC_SEQIO, EXEC_CAPI };

/* exec_layout's, exec_forward's and exec_backward's statuses. */
enum {
  EXEC_OK,
  EXEC_E_SIZE, /* the workspace's size overflows */
  EXEC_E_DX,   /* EXEC_SEQIO: dx is NULL where grad_x is not one product the caller may take */
};

/* The caller's buffers of one call, row-major (row t B + b), channels innermost. */
typedef struct ExecIO {
  const float *x, *dy;
  float *y;                     /* the forward's outputs */
  float *dx;                    /* the backward's dL/dx, or NULL: EXEC_SEQIO leaves it to the caller as
                                   the product of step tab->xgrad_step (the fold: SeqIO.fold), EXEC_CAPI
                                   writes it to the workspace */
  const float *const *params;   /* EXEC_SEQIO: per param part; EXEC_CAPI: per param */
  const float *const *noise;    /* EXEC_SEQIO: per noise stream (EXEC_CAPI draws them from seed) */
  float *const *gh0;            /* EXEC_SEQIO in scan mode: per state part, where dL/dh0 goes */
  float *const *gates;          /* EXEC_SEQIO: per gate, where the gates go, or NULL: the workspace */
  const float *const *states;   /* the forward's h0, the backward's dL/dfinal: EXEC_SEQIO per state
                                   part, EXEC_CAPI per state; NULL (or a NULL member): zeros */
  float *const *out;            /* the forward's final states, the backward's dL/dh0: as states; NULL
                                   (or a NULL member): not wanted */
  float *const *grads;          /* the backward's param gradients (overwritten), as params */
  uint64_t seed;                /* EXEC_CAPI: the noise streams' seed (tab->train_noise) */
} ExecIO;

/* The workspace of one (T, B, threads): a pointer table (the slot bases, then the arrays'), every
 * array the workspace holds in the mode (a step-local one: B rows), the complex params' planes
 * (EXEC_CAPI), dx's stand-in (EXEC_CAPI), the packed weights, then each thread's buffers (its slot
 * bases, the weight gradients' blocks and float64 totals; the most any instruction set takes), each
 * part 64-byte aligned; byte offsets from the aligned start. total counts 64 bytes of slack for a
 * workspace of any alignment. */
typedef struct ExecLayout {
  uint64_t arrays, planes, gx, packs, pack_mem, threads, total;
  uint64_t owned;              /* floats of the arrays the workspace holds (the threads' measure) */
  int maxt;                    /* the threads it serves */
  uint64_t th_bytes;           /* one thread's buffers */
  size_t at, bt, blk, tot;     /* floats (tot: doubles) of a thread's buffers */
} ExecLayout;

typedef struct Exec Exec;

typedef struct ExecHost {
  void *ctx;
  /* Elementwise kernel k over the rows [r0, r1), bases per slot (k is tab->kstatic_fwd or
   * kstatic_bwd for the static values, over row 0). */
  void (*kernel)(void *ctx, int k, int64_t r0, int64_t r1, float **bases);
  /* Every thread of the run meets here (called only with more than one thread). */
  void (*barrier)(void *ctx);
  /* Or NULL: thread 0 is about to run step `step` (done false), or has run it and its barrier
   * (done true); rows: thread 0's rows of it, all_rows: the step's rows on every thread. */
  void (*step)(void *ctx, int step, int64_t rows, int64_t all_rows, bool done);
  /* Runs exec_run(e, backward, i) on threads i = 0 .. n - 1 and returns when all are done, after
   * exec_team(e, n, ...) (n at most exec_threads' count). */
  void (*run)(void *ctx, Exec *e, bool backward);
} ExecHost;

/* A thread's buffers: its slot bases (nslots), the weight gradients' packed blocks and its float64
 * totals. */
typedef struct ExecThread {
  float **bases;
  GemmTnBuf tn;
  double *total;
} ExecThread;

/* One forward or backward in flight, shared by its threads. The host sets tab, mode, isa and host,
 * then calls exec_layout; exec_forward and exec_backward bind the rest. */
struct Exec {
  const EtHeader *tab;
  int mode;              /* EXEC_SEQIO, EXEC_CAPI */
  GemmIsa isa;           /* the products' kernels (gemm_core.h) */
  ExecHost host;
  int T, B;
  ExecLayout L;
  float **bases;         /* per slot: row 0 of its values (a step-local slot: row 0 of its B rows) */
  float **abase;         /* per array: its first float */
  GemmPacked *packs;     /* per packed matrix (tab->npacks), filled by exec_pack */
  float *pack_mem;
  ExecThread *th;        /* per thread the workspace serves */
  int nthreads;          /* threads in all (the steps over all rows) */
  int nloop;             /* of them, those that run the time loop (each a part of the batch) */
  int skip;              /* a step number left out (grad_x left to the caller), or -1 */
};

/* Below this inner dimension cblas_sgemm is as fast as the kernels (both store-bound): measured at
 * 64 x 384, AVX-512: K = 1 cblas 1.3-1.6 us, kernel 1.5 us; K = 2 2.0 / 1.6; K = 8 4.9 / 2.6. */
#define EXEC_GEMM_MIN_K 2

/* The rows a thread runs a run of row-local steps over before the next tile (exec.c's run_rows):
 * a tile of a program's arrays stays in a core's L2 (256 rows of 300 floats: 300 KB). */
#define EXEC_TILE_ROWS 256

/* Below these sizes another thread does not pay: each thread's batch rows of a step (its per-step
 * GEMMs get that many rows), and the floats a sequence's arrays hold. A workspace laid out for as
 * many threads as pay serves at most EXEC_MAX_THREADS. */
#define EXEC_MIN_ROWS_PER_THREAD 8
#define EXEC_MIN_FLOATS_PER_THREAD (1 << 16)
#define EXEC_MAX_THREADS 64

/* The workspace for T and B (at least 1 each) serving maxt threads (0: as many as the arrays pay,
 * at most EXEC_MAX_THREADS) into e->L; e->T, e->B. EXEC_OK or EXEC_E_SIZE. A forward and the
 * backward after it need the same layout and workspace. */
int exec_layout(Exec *e, int T, int B, int maxt);
/* The threads that pay out of n (the cores, or the count asked: asked counts are not cut to what
 * pays), at most what the workspace serves; at least 1. */
int exec_threads(const Exec *e, int n, bool asked);
/* A team of n threads (at most e->L.maxt): e->nthreads, and e->nloop, those that run the time loop
 * (EXEC_MIN_ROWS_PER_THREAD batch rows each unless the count was asked, at least one row): with
 * 16 cores and a batch of 64, the loop runs on 8 threads and the products over all rows (the
 * hoisted ones, the weight gradients) on 16. */
void exec_team(Exec *e, int n, bool asked);
/* The forward over the workspace work (e->L.total bytes, any alignment): binds io, draws the noise
 * (EXEC_CAPI), computes the static values, copies h0 in, runs the forward's phases on the host's
 * team, copies y (EXEC_CAPI) and the final states out. EXEC_OK. */
int exec_forward(Exec *e, const ExecIO *io, void *work);
/* The backward after a forward on the same workspace: binds io, zeroes the sums, copies dL/dfinal
 * in, runs the backward's phases, computes the static values' gradients, writes the param gradients
 * and dL/dh0. EXEC_OK or EXEC_E_DX. */
int exec_backward(Exec *e, const ExecIO *io, void *work);
/* Thread i's share of the forward's phases (pre, every step, post) or the backward's (pre, every
 * step in reverse, post, first): the batch rows [b0, b1) of every step (a thread owns its
 * sequences from the first step to the last, so the time loop needs no barrier; a thread with no
 * rows waits it out), and part i of n of each step over all rows (rows, channels or output rows,
 * by the kind of step), with a barrier after each of those. The host's run calls it. */
void exec_run(Exec *e, bool backward, int i);

#endif
