/* cuda_dev.h: the device of a kind (real or emulated), opened once per process and shared by every
 * compiled program (cuda_backend.c) and by the device operations of training (cuda_ops.c). */
#ifndef CELLC_CUDA_DEV_H
#define CELLC_CUDA_DEV_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_api.h"

typedef struct CudaDev {
  CudaApi api;
  bool emulated;
  CUdevice dev;
  CUcontext ctx;
  cublasHandle_t blas;
  char arch[16];
  int refs;
} CudaDev;

/* The device of a kind, opened on first use and counted: NULL with what is missing in err. */
CudaDev *cuda_dev_acquire(bool emulated, char *err, size_t errlen);
void cuda_dev_release(CudaDev *d);

#endif
