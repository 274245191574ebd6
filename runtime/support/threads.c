/* threads.c: how many threads cellc runs its parallel work on. */
#include <stdlib.h>
#include <unistd.h>

#include "base.h"
#include "tuning.h"

int support_threads(void) {
  if (tuning()->threads > 0) return tuning()->threads;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  /* the ranks of a data-parallel run (mpirun) on this machine share its cores */
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local && atoi(local) > 1) ncpu /= atoi(local);
  return ncpu > 0 ? (int)ncpu : 1;
}

int support_threads_for(double units, double per_thread) {
  int nt = support_threads();
  if (units / per_thread < nt) nt = (int)(units / per_thread);
  return nt > 1 ? nt : 1;
}
