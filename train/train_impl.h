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

#endif
