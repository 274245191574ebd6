/* train_impl.h: what the files of train/ share and nothing above them uses. */
#ifndef CELLC_TRAIN_IMPL_H
#define CELLC_TRAIN_IMPL_H

#include "train.h"

/* SIGINT and SIGTERM held back (how = SIG_BLOCK) or let through again (SIG_UNBLOCK) while a
 * checkpoint is written: a signal then neither interrupts a write nor runs the handler. */
void run_hold_signals(int how);
/* Rank 0 alone writes the run's files; what came of it, on every rank. */
int run_rank0_status(int rc);
/* The checkpoint, written by rank 0; 0 or -1 on every rank. */
int run_checkpoint(Run *r, const char *path);
/* After rank 0 read the checkpoint of --resume: its state on every rank. */
void run_share_state(Run *r);
/* The step's one allreduce of the gradients and the loss sums; true when any rank was interrupted. */
bool run_average_gradients(Run *r, ModelLoss *l);

/* The fields of a metrics row after step and split, in the order metrics.jsonl and metrics.csv
 * write them. */
#define RUN_METRIC_FIELDS 6
extern const char *const run_metric_fields[RUN_METRIC_FIELDS];
/* log.csv: one row of metrics.csv, the numbers as metrics.jsonl writes them (%.9g), a value that is
 * not finite as an empty field (null in the JSON). */
void run_csv_row(FILE *f, int64_t step, const char *split, const double *v);
/* train.keep = best on --resume: the best validation loss and accuracy of the rows metrics.jsonl
 * kept, on every rank; NaN (none yet) where best.safetensors is absent. */
void run_best_so_far(Run *r, double *loss, double *acc);

#endif
