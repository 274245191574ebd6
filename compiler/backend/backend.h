/* backend.h: the interface every back end implements (interp, cpu, cuda, cuda-emu), and the one
 * sequence-I/O struct they all take. A back end compiles a differentiated Program into a Compiled
 * program, allocates work for it, runs the forward and the backward over whole sequences,
 * reads per-step arrays back for diagnostics, and (where it can) writes its code to files. It runs
 * on a device (runtime/device's Device, of the kind Backend.device): the buffers of a SeqIO are
 * that device's memory, and everything outside the cells runs on the device, not here. The
 * pipeline (compiler/pipeline) lists the back ends and opens the devices; nothing outside a back
 * end's folder reads its internals. */
#ifndef CELLC_BACKEND_H
#define CELLC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "lower.h"

/* The element type of every buffer of a SeqIO. */
typedef enum { DT_F32, DT_F64 } Dtype;

/* A backward's input gradient summed by token, instead of grad_x (an embedding's gradient: the
 * sum of grad_x's rows of each token). In the memory of the back end's device like every SeqIO
 * buffer. */
typedef struct SeqFold {
  const int32_t *ids;      /* [T B]: the token of row r = t B + b, 0 <= ids[r] < vocab */
  int vocab;
  float *out;              /* [vocab, x_size]: row v ADDS the sum of grad_x's rows r with ids[r] = v */
} SeqFold;

/* Whole-sequence buffers of one call, row-major (row r = t B + b), channels innermost; per-part
 * arrays follow the Program's param parts and state parts (a complex value as two real planes).
 * Every pointer is to `dtype` elements in the memory of the back end's device (Backend.device:
 * host memory, or a CUDA device's memory). The caller allocates everything, through that Device
 * (compiler/pipeline's device_open). */
typedef struct SeqIO {
  int T, B;
  Dtype dtype;
  /* forward inputs */
  const void *x;           /* [T, B, x_size] */
  const void **params;     /* per param part: numel */
  const void **h0;         /* per state part: [B, size] */
  const void **noise;      /* per noise stream: [T, B, size] */
  /* forward outputs */
  void *y;                 /* [T, B, output_size] */
  void **final;            /* per state part: [B, size] */
  void **gates;            /* per gate: [T, B, size], or NULL (not recorded) */
  /* backward inputs */
  const void *dy;          /* [T, B, output_size] */
  const void **dfinal;     /* per state part: [B, size] */
  /* backward outputs (overwritten, not accumulated) */
  void **grad_params;      /* per param part: numel */
  void *grad_x;            /* [T, B, x_size]; NULL with fold set: not written, summed by token instead */
  const SeqFold *fold;     /* the input gradient summed by token (Backend.folds); NULL: none */
  void **grad_h0;          /* per state part: [B, size] */
  /* [B] in 1..T, in HOST memory, or NULL: every sequence has T steps. Sequence b's final state is
   * its state after step lengths[b], its y rows past that step are zeros, its dy rows past it are
   * ignored and its grad_x rows past it are zeros (spec/emit.md, ABI 2). The back ends never see
   * it: compiler/pipeline's chunked_forward/chunked_backward run such a sequence in segments
   * (varlen.c), so a back end's forward and backward take it as NULL. */
  const int *lengths;
} SeqIO;

/* How a program is compiled. */
typedef struct BackendOptions {
  bool scan;               /* run the diagonal-linear states as scans (the Program is in scan form) */
  bool gates;              /* record every gate per step into SeqIO.gates */
  bool f32;                /* interp: round every value to float32 */
  int threads;             /* cpu: threads (0: CELLC_THREADS, else all cores) */
  bool portable;           /* cpu: run every kernel in the portable evaluator (no generated code) */
} BackendOptions;

/* What `cellc emit` asks of a back end (spec/emit.md): the program's whole-sequence forward and
 * backward as standalone files named after `name`, written into `dir` (a fresh directory that the
 * command renames into place once every file is complete). */
typedef struct EmitOptions {
  const char *name;        /* the prefix P of every file and symbol */
  const char *dir;         /* where the files go */
  const char *cpu;         /* target cpu: generic | x86-64-v3 | x86-64-v4 | native */
  const char *arch;        /* target cuda: sm_80, sm_90, ... */
  bool train_noise;        /* stochastic built-ins draw noise: P_forward takes a trailing seed */
} EmitOptions;

typedef struct Backend Backend;

/* A compiled program: each back end's own struct starts with this. */
typedef struct Compiled {
  const Backend *be;
  Program *p;
  BackendOptions opt;
} Compiled;

/* Where a forward and backward spent their time, accumulated while Work.profiling is on (set by
 * the caller, or by CELLC_PROFILE=1 in the environment, which also prints it when the work is
 * freed; CELLC_PROFILE=steps also prints the time of each plan step when the compiled cell is freed,
 * where the back end keeps that: cpu). */
/* The products by kind: per time step (the recurrent products and their backward), over all rows
 * at once (the hoisted input products and input gradients), and the weight gradients. */
typedef enum { GEMM_STEPWISE, GEMM_ALL_ROWS, GEMM_WEIGHT_GRAD, GEMM_KINDS } GemmKind;

typedef struct Profile {
  double elem_s, gemm_s, scan_s, rscan_s, other_s; /* seconds per kind of step */
  double elem_bytes;       /* bytes the elementwise kernels read and wrote in per-row arrays */
  double gemm_flops;       /* the products' floating-point operations (2 per multiply-add) */
  double kind_s[GEMM_KINDS], kind_flops[GEMM_KINDS]; /* gemm_s and gemm_flops by kind of product */
} Profile;

/* The arrays of one sequence in flight (the forward keeps what the backward reads): each back
 * end's own struct starts with this. One Work serves one Compiled at a time. */
typedef struct Work {
  const Backend *be;
  bool profiling;
  bool profile_steps;      /* also per plan step, where the back end keeps that (CELLC_PROFILE=steps) */
  Profile prof;
} Work;

/* What read_steps returns. */
typedef enum {
  STEPS_STATE,             /* a state part's values h_0 .. h_T: [T + 1, B, size] */
  STEPS_DSTATE,            /* after a backward: dL/dh_0 .. dL/dh_T of a state part, [T + 1, B, size]
                              (the interpreter only; cellc diag's gradient per time step) */
} StepArray;

struct Backend {
  const char *name;
  Dtype dtype;             /* its SeqIO element type */
  bool scans;              /* it runs scan mode (else every program is lowered in plain form) */
  DeviceKind device;       /* the device it runs on (device.h; zero: the host): compiler/pipeline's
                              device_open(device) gives the memory its SeqIO pointers take */
  /* NULL when it can run p with these options, else why not. */
  const char *(*supports)(const Program *p, const BackendOptions *o);
  /* NULL with a message in err on failure. */
  Compiled *(*compile)(Program *p, const BackendOptions *o, char *err, size_t errlen);
  void (*free)(Compiled *c);
  Work *(*work_new)(Compiled *c);
  void (*work_free)(Work *w);
  void (*forward)(Compiled *c, Work *w, const SeqIO *s);
  /* after forward on the same Work and sequence */
  void (*backward)(Compiled *c, Work *w, const SeqIO *s);
  /* Copies a per-step array the last forward left in w into out (dtype elements, host memory); 0,
   * or -1 when this back end does not keep it. After a forward with SeqIO.lengths the work holds
   * the last segment's run only (varlen.c). */
  int (*read_steps)(Compiled *c, Work *w, StepArray what, int part, void *out);
  /* Writes p's forward and backward as the target's standalone code files (cpu: P.o and libP.so;
   * cuda: P.cu and P.ptx) into o->dir; the command writes P.h, P.json and P_torch.py. 0, or -1 with
   * a message in err. NULL for a back end that cannot emit. */
  int (*emit)(Program *p, const BackendOptions *bo, const EmitOptions *o, char *err, size_t errlen);
  /* Whether c's backward takes SeqIO.fold (grad_x NULL): the input gradient summed by token with
   * a fast path. cpu: where c's grad_x is one product G M over all rows (G [T B, cols] the adjoints
   * of the input products side by side, M [cols, x_size] the input weights stacked), it skips that
   * product and multiplies G's rows summed by token by M: one product row per token instead of
   * per row, the same sums in another order. NULL entry or false: the caller passes grad_x and sums
   * its rows itself (Device.embed_bwd). */
  bool (*folds)(const Compiled *c);
  /* The bytes of the workspace a Work of c takes for a sequence of T steps and B rows (what
   * forward and backward allocate besides the SeqIO's buffers); NULL where not known. */
  size_t (*work_bytes)(const Compiled *c, int T, int B);
};

/* The entry points of a back end whose functions follow the naming <prefix>_supports,
 * <prefix>_compile, <prefix>_free, <prefix>_work_new, ... (each back end's `const Backend`). */
/* A back end's work_new: the base of its Work, profiling when Tuning.profile asks (CELLC_PROFILE). */
static inline void work_init(Work *w, const Compiled *c) {
  w->be = c->be;
  w->profiling = tuning()->profile != TUNING_PROFILE_OFF;
  w->profile_steps = tuning()->profile == TUNING_PROFILE_STEPS;
}

/* A back end's work_free: the profile to stderr when Tuning.profile asks (a Work profiled for its
 * caller, pipeline_run_f64's, prints nothing). */
static inline void work_profile_report(const Work *w) {
  if (tuning()->profile == TUNING_PROFILE_OFF) return;
  const Profile *pr = &w->prof;
  fprintf(stderr, "profile: elem %.4f s, gemm %.4f s, scan %.4f s, rscan %.4f s, other %.4f s\n", pr->elem_s, pr->gemm_s,
          pr->scan_s, pr->rscan_s, pr->other_s);
  static const char *const kind[GEMM_KINDS] = {"per step", "all rows", "weight grad"};
  for (int k = 0; k < GEMM_KINDS; k++)
    if (pr->kind_s[k] > 0)
      fprintf(stderr, "profile: gemm %-11s %.4f s, %.1f GFLOP/s\n", kind[k], pr->kind_s[k], pr->kind_flops[k] / pr->kind_s[k] * 1e-9);
}

#define BACKEND_ENTRY_POINTS(prefix)                                                               \
  .supports = prefix##_supports, .compile = prefix##_compile, .free = prefix##_free,               \
  .work_new = prefix##_work_new, .work_free = prefix##_work_free, .forward = prefix##_forward,      \
  .backward = prefix##_backward, .read_steps = prefix##_read_steps

#endif
