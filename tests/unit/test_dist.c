/* test_dist.c: runtime/dist without mpirun (a world of one: the collectives leave their buffers as
 * they are, MPI is not initialized) and its NCCL implementation's library: where the CUDA toolkit
 * has libnccl.so.2 it opens and every call resolves, else the message names the library; the NCCL
 * types dist_nccl.c declares match nccl.h where the toolkit has it. The allreduce itself runs
 * under mpirun in tests/suite_mpi.sh (MPI) and on GPUs only (NCCL). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"

Test(dist, without_mpirun_the_world_is_this_process) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  char err[256] = "";
  cr_assert_eq(dist_init(err, sizeof err), 0, "%s", err);
  cr_assert_eq(dist_size(), 1);
  cr_assert_eq(dist_rank(), 0);
  cr_assert_eq(dist_local_rank(), 0);
  float f[3] = {1, 2, 3};
  double d[2] = {0.5, -4};
  dist_allreduce_sum(f, 3, DIST_F32);
  dist_allreduce_sum(d, 2, DIST_F64);
  cr_assert(f[0] == 1 && f[1] == 2 && f[2] == 3 && d[0] == 0.5 && d[1] == -4);
  int x = 7;
  dist_bcast(&x, sizeof x, 0);
  cr_assert_eq(x, 7);
  cr_assert(dist_any(true));
  cr_assert(!dist_any(false));
  dist_finalize();
}

static bool toolkit_has_nccl(void) {
  return access("/usr/local/cuda/lib64/libnccl.so.2", R_OK) == 0 || access("/usr/local/cuda/lib/libnccl.so.2", R_OK) == 0;
}

Test(dist, nccl_opens_and_resolves_or_names_the_library) {
  char err[1024] = "";
  DistNccl *n = dist_nccl_open(err, sizeof err);
  if (toolkit_has_nccl()) cr_assert_not_null(n, "libnccl.so.2 is in the toolkit but did not open: %s", err);
  else {
    cr_assert_null(n);
    cr_assert(strstr(err, "libnccl.so.2") != NULL, "%s", err);
  }
  dist_nccl_close(n);
}

#if __has_include(<nccl.h>)
#include <nccl.h>
Test(dist, nccl_types_match_the_header) {
  /* dist_nccl.c declares these itself (no toolkit header outside compiler/backend/cuda) */
  cr_assert_eq(sizeof(ncclUniqueId), 128);
  cr_assert_eq((int)ncclFloat32, 7);
  cr_assert_eq((int)ncclSum, 0);
  cr_assert_eq((int)ncclSuccess, 0);
}
#endif
