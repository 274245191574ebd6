/* dist.h: the processes of a data-parallel run (spec cli.md "Data-parallel training on several
 * processes", docs/distributed.md). The trainer sees a world of `dist_size()` ranks and four
 * collectives; under `mpirun` they are Open MPI's, otherwise the world is this one process and
 * the collectives do nothing (MPI is never initialized: a plain run needs no MPI at run time).
 * Gradients on the GPU are averaged by the second implementation, NCCL (dist_nccl_*), loaded
 * with dlopen and set up over MPI. */
#ifndef CELLC_DIST_H
#define CELLC_DIST_H

#include <stdbool.h>
#include <stddef.h>

/* Joins the world: MPI_Init when the environment says mpirun started this process
 * (OMPI_COMM_WORLD_SIZE), nothing otherwise. Idempotent. 0, or -1 with a message in err. */
int dist_init(char *err, size_t errlen);
/* Leaves it (MPI_Finalize when dist_init initialized MPI). */
void dist_finalize(void);
int dist_size(void);       /* ranks in the world (1 without mpirun) */
int dist_rank(void);       /* this process's rank, 0 .. size-1 */
int dist_local_rank(void); /* its rank among the ranks on this machine (its GPU) */

typedef enum { DIST_F32, DIST_F64 } DistType;
/* Every rank's buf summed element-wise, in place, on every rank: one collective call. */
void dist_allreduce_sum(void *buf, size_t n, DistType type);
/* root's `bytes` bytes of buf copied to every rank. */
void dist_bcast(void *buf, size_t bytes, int root);
/* true on every rank when flag is true on any. */
bool dist_any(bool flag);
/* Stops every rank now with `status` (MPI_Abort; exit without mpirun). */
_Noreturn void dist_abort(int status);

/* ---- NCCL: sums of float32 device buffers across the ranks' GPUs ---- */
typedef struct DistNccl DistNccl;
/* Loads libnccl.so.2 (the loader's path, then $CUDA_HOME and /usr/local/cuda) and resolves the
 * calls used here. NULL with a message naming the library or the symbol in err. */
DistNccl *dist_nccl_open(char *err, size_t errlen);
/* The communicator of the world: rank 0 draws the unique id, dist_bcast hands it to every rank,
 * each joins with its rank. The caller has made its GPU (dist_local_rank()) current. 0 or -1. */
int dist_nccl_init(DistNccl *n, char *err, size_t errlen);
/* buf (n floats in device memory) summed across the ranks in place, queued on `stream`
 * (a cudaStream_t / CUstream; NULL: the default stream). 0 or -1. */
int dist_nccl_allreduce_sum(DistNccl *n, float *buf, size_t count, void *stream, char *err, size_t errlen);
void dist_nccl_close(DistNccl *n);

#endif
