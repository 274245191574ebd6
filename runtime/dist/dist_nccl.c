/* dist_nccl.c: the GPU implementation of the gradient sum, NCCL's ncclAllReduce, with the library
 * loaded by dlopen at run time (a build without the CUDA toolkit still links; a run without it
 * gets a message naming the library). The few NCCL types used are declared here as nccl.h
 * defines them (ABI-stable since NCCL 2.0; tests/unit/test_dist.c checks them against nccl.h). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "support.h"

typedef int NcclResult; /* ncclResult_t: ncclSuccess = 0 */
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} NcclUniqueId;
typedef void *NcclComm;
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

struct DistNccl {
  void *lib;
  NcclComm comm;
  NcclResult (*GetUniqueId)(NcclUniqueId *);
  NcclResult (*CommInitRank)(NcclComm *, int, NcclUniqueId, int);
  NcclResult (*AllReduce)(const void *, void *, size_t, int, int, NcclComm, void *);
  NcclResult (*CommDestroy)(NcclComm);
  const char *(*GetErrorString)(NcclResult);
};

static void fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* libnccl.so.2 from the loader's path, then the toolkit's library directories. */
static void *open_nccl(char *err, size_t errlen) {
  static const char *const name[] = {"libnccl.so.2"}, *const sub[] = {"lib64", "lib"};
  char tried[1024];
  void *h = support_dlopen_toolkit(name, 1, sub, 2, tried, sizeof tried);
  if (!h) fail(err, errlen, "libnccl.so.2 (NCCL, for averaging gradients across GPUs) not found: %s", tried);
  return h;
}

DistNccl *dist_nccl_open(char *err, size_t errlen) {
  void *lib = open_nccl(err, errlen);
  if (!lib) return NULL;
  DistNccl *n = xcalloc(1, sizeof *n);
  n->lib = lib;
#define LOOKUP(field, sym)                                                                            \
  if (!(*(void **)&n->field = dlsym(lib, sym))) {                                                     \
    fail(err, errlen, "libnccl.so.2: symbol %s not found (NCCL older than 2.0?)", sym);               \
    dist_nccl_close(n);                                                                               \
    return NULL;                                                                                      \
  }
  LOOKUP(GetUniqueId, "ncclGetUniqueId")
  LOOKUP(CommInitRank, "ncclCommInitRank")
  LOOKUP(AllReduce, "ncclAllReduce")
  LOOKUP(CommDestroy, "ncclCommDestroy")
  LOOKUP(GetErrorString, "ncclGetErrorString")
#undef LOOKUP
  return n;
}

static int nccl_check(DistNccl *n, NcclResult rc, const char *call, char *err, size_t errlen) {
  if (rc == 0) return 0;
  fail(err, errlen, "%s: %s (NCCL error %d)", call, n->GetErrorString(rc), rc);
  return -1;
}

int dist_nccl_init(DistNccl *n, char *err, size_t errlen) {
  NcclUniqueId id;
  memset(&id, 0, sizeof id);
  int rc = dist_rank() == 0 ? nccl_check(n, n->GetUniqueId(&id), "ncclGetUniqueId", err, errlen) : 0;
  /* rank 0's failure reaches every rank before any waits in ncclCommInitRank */
  if (dist_any(rc != 0)) {
    if (!rc) fail(err, errlen, "rank 0 could not create the NCCL unique id");
    return -1;
  }
  dist_bcast(&id, sizeof id, 0);
  return nccl_check(n, n->CommInitRank(&n->comm, dist_size(), id, dist_rank()), "ncclCommInitRank", err, errlen);
}

int dist_nccl_allreduce_sum(DistNccl *n, float *buf, size_t count, void *stream, char *err, size_t errlen) {
  return nccl_check(n, n->AllReduce(buf, buf, count, NCCL_FLOAT32, NCCL_SUM, n->comm, stream), "ncclAllReduce", err, errlen);
}

void dist_nccl_close(DistNccl *n) {
  if (!n) return;
  if (n->comm) n->CommDestroy(n->comm);
  if (n->lib) dlclose(n->lib);
  free(n);
}
