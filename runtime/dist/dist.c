/* dist.c: the world of a data-parallel run over Open MPI, or a world of one without mpirun. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "support.h"

static struct {
  bool tried, mpi; /* dist_init ran; it initialized MPI */
  int size, rank, local_rank;
} world = {false, false, 1, 0, 0};

/* mpirun (Open MPI) sets these for every process it starts; a plain run has none of them. */
static bool under_mpirun(void) {
  const char *s = getenv("OMPI_COMM_WORLD_SIZE");
  return s && *s;
}

int dist_init(char *err, size_t errlen) {
  if (world.tried) return 0;
  world.tried = true;
  if (!under_mpirun()) return 0;
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    snprintf(err, errlen, "MPI_Init failed (started by mpirun: OMPI_COMM_WORLD_SIZE=%s)", getenv("OMPI_COMM_WORLD_SIZE"));
    return -1;
  }
  world.mpi = true;
  /* errors in a collective (a peer died) return to the caller's check rather than abort silently */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  world.local_rank = lr ? atoi(lr) : world.rank;
  return 0;
}

void dist_finalize(void) {
  if (world.mpi) MPI_Finalize();
  world.mpi = false;
}

int dist_size(void) { return world.size; }
int dist_rank(void) { return world.rank; }
int dist_local_rank(void) { return world.local_rank; }

/* A collective that failed (a rank died): every rank must stop, none can go on alone. */
static void collective(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fprintf(stderr, "cellc: rank %d: %s failed: %s; stopping every rank\n", world.rank, what, msg);
  dist_abort(3);
}

void dist_allreduce_sum(void *buf, size_t n, DistType type) {
  if (!world.mpi || world.size == 1) return;
  CHECK(n <= INT32_MAX);
  collective(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, type == DIST_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
             "MPI_Allreduce");
}

void dist_bcast(void *buf, size_t bytes, int root) {
  if (!world.mpi || world.size == 1) return;
  CHECK(bytes <= INT32_MAX);
  collective(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

bool dist_any(bool flag) {
  if (!world.mpi || world.size == 1) return flag;
  int in = flag, out = 0;
  collective(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD), "MPI_Allreduce");
  return out != 0;
}

_Noreturn void dist_abort(int status) {
  fflush(stdout), fflush(stderr);
  if (world.mpi) MPI_Abort(MPI_COMM_WORLD, status);
  exit(status);
}
