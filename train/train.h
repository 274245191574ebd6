/* train.h: the training library, the public header of train/: a run (its configuration, task,
 * model, optimizer and device, set up from a cell and a task.cfg), its checkpoints, its run
 * directory, the data-parallel averaging of its gradients and the training loop. `cellc train`,
 * `cellc eval` and `cellc diag` are drivers around it:
 *
 *   run_start (or run_load) -> [run_prepare -> train_loop -> run_finish] -> run_teardown
 *
 * The files: setup.c (the run, the signal flag), checkpoint.c (the checkpoint format, with
 * cell_form.c, the record of the cell it was trained with), rundir.c (the run directory),
 * average.c (the ranks of a data-parallel run, through runtime/dist), loop.c (the training loop,
 * evaluation, metrics and progress). */
#ifndef CELLC_TRAIN_H
#define CELLC_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dist.h"
#include "model.h"

#define TRAIN_MAX_SETS 256 /* --set entries of one run */

/* How training reports its progress (--progress): auto is a bar on a terminal, lines otherwise
 * (under mpirun too: a rank's stdout is a terminal of mpirun's wherever mpirun writes). */
typedef enum { PROGRESS_AUTO, PROGRESS_BAR, PROGRESS_LINES, PROGRESS_NONE } ProgressMode;

/* What a run is started from: the command line of train, eval or diag. */
typedef struct RunOptions {
  const char *cell, *cfg, *out, *checkpoint;
  const char *sets[TRAIN_MAX_SETS];
  int nsets;
  bool resume, force, dry_run;
  bool allow_changed_cell; /* load a checkpoint of a cell that differs from this one (a warning) */
  ProgressMode progress;
  const char *stdlib;      /* the standard library's directory, for the cell's imports */
} RunOptions;

/* A probe the training loop calls after the backward pass of each step that is logged (log.every,
 * and the last step), before the gradients are averaged and applied: the commands' gradient probe
 * ([log] grad_per_step), which lives above the library. */
typedef struct RunProbe {
  void (*update)(void *ctx, Model *m, int rows);
  void *ctx;
} RunProbe;

/* Everything a run holds. */
typedef struct Run {
  RunOptions a;
  Cfg *cfg;
  Task *task;
  TaskShape shape;
  Model *model;
  Opt *opt;
  Device *ops;      /* the device of train.device (model_device) */
  float *state;     /* the optimizer's moments where the ops work: opt->state on the host, else a device copy */
  size_t *moff;     /* per tensor: where its moments start (part 0; part 1 follows), or SIZE_MAX */
  OptSchedule sched;
  int64_t steps, step;
  int B;            /* train.batch: the global batch */
  int world, rank;  /* data-parallel: ranks (1 without mpirun) and this one's rank */
  int Bl;           /* this rank's share of every batch, B / world: rows [rank * Bl, rank * Bl + Bl) */
  float *gbuf;      /* world > 1: the one buffer of a step's allreduce (gradients, then the loss sums) */
  size_t ngrad;     /* learned floats in gbuf */
  DistNccl *nccl;   /* world > 1 on cuda: the gradient sum through NCCL, on dbuf (device memory) */
  float *dbuf;
  uint64_t seed;
  char *dir;
  FILE *metrics;
  FILE *csv;        /* log.csv: metrics.csv, the same rows */
  bool bar;         /* progress as one line redrawn in place (\r, ESC[K) */
  bool lines;       /* progress as plain lines: one per log interval and per evaluation */
  double t0;        /* when training started (this process) */
  double elapsed0;  /* elapsed seconds carried over from a resumed run */
  RunProbe probe;   /* none when update is NULL */
} Run;

/* ---- the run (setup.c) ---- */

/* Raised by SIGINT and SIGTERM once run_catch_signals was called: the training loop stops at the
 * next step (writing its checkpoint), diag at the next batch. */
extern volatile sig_atomic_t run_interrupted;
/* From here SIGINT and SIGTERM only raise run_interrupted. */
void run_catch_signals(void);
/* Seconds on the monotonic clock. */
double run_now(void);

/* What train and eval start with, r->a filled in: denormals flushed, the ranks of a data-parallel
 * run joined (rank 0 alone keeps stdout), for training the signals caught, then run_setup. 0 or
 * the exit status; run_teardown after either. */
int run_start(Run *r, bool eval);
/* Loads the configuration (with --set entries), the device, the task, the model at its seed's
 * initialization and the optimizer. 0 or the exit status after a located message. */
int run_setup(Run *r);
/* A run for reading its model (cellc diag): denormals flushed, run_setup, then the params of
 * r->a.checkpoint when given (checked as eval checks it). 0 or the exit status; run_teardown
 * after either. */
int run_load(Run *r);
void run_teardown(Run *r);
/* "[3, 4]" (malloc'd). */
char *run_shape_text(const int64_t *shape, int ndim);

/* ---- checkpoints (checkpoint.c) ---- */

/* Writes the params, the optimizer's moments and step, the cell and the configuration into a
 * safetensors file, atomically (signals held back while it is written). 0 or -1 after the error. */
int checkpoint_write(Run *r, const char *path);
/* Reads a checkpoint into the model (and the optimizer, when `with_opt`): its cell must be this
 * run's (cell_form.h) unless r->a.allow_changed_cell. 0 or the exit status after the error. */
int checkpoint_read(Run *r, const char *path, bool with_opt);

/* ---- the run directory (rundir.c) and the loop (loop.c) ---- */

/* Before training: config.cfg pinned to the cell and its options, the run directory taken (made,
 * or checked against --resume and --force, the checkpoint read on --resume), config.cfg and
 * metrics.jsonl written and the first line printed. *complete when a resumed run was already
 * complete (its test line printed): nothing more to do. 0 or the exit status. */
int run_prepare(Run *r, bool *complete);
/* The steps from r->step to train.steps, evaluating and checkpointing every eval.every. 0, 130
 * after an interrupt (the checkpoint written), 3 after a value that is not finite. */
int train_loop(Run *r);

typedef struct EvalResult {
  double loss, accuracy;
  int64_t bad;      /* the first batch whose loss is not finite (this rank's share), or -1 */
  int bad_rows;     /* its rows that count */
} EvalResult;

/* The mean loss and accuracy over a split (every rank its share, the sums added). */
EvalResult run_evaluate(Run *r, TaskSplit split, int64_t batches);
/* "final: step=... loss=... accuracy=..." */
void run_print_final(Run *r, EvalResult e);
/* After training: the test split evaluated, its metric written and the final line printed. */
void run_finish(Run *r);

#endif
