/* cuda.h: the CUDA back ends: `cuda` (NVRTC, the driver API and cuBLAS, opened with dlopen) and
 * `cuda-emu` (the same generated source and host code on the CPU emulator). Their SeqIO buffers
 * are device memory, allocated through their Device (Backend.device, cuda_device_open).
 *
 * This header's name is the toolkit's too: in this folder (and wherever the toolkit's include
 * directory is on the path after this folder's) an `#include <cuda.h>` finds this file first, so
 * it passes on to the toolkit's when there is one. */
#ifndef CELLC_CUDA_BACKEND_H
#define CELLC_CUDA_BACKEND_H

#include "backend.h"

extern const Backend cuda_backend, cuda_emu_backend;

/* The CUDA C source a compiled program runs (for tests and `--debug`), or NULL for another back end. */
const char *cuda_compiled_source(const Compiled *c);
/* The plan table (plan_table.h) a compiled program's executor runs, its bytes in *n (for tests), or
 * NULL for another back end. */
const void *cuda_compiled_table(const Compiled *c, size_t *n);

/* The real device or the emulator as a Device (device.h: memory and the operations of training),
 * the one compiler/pipeline's device_open opens per kind; its memory is the memory the back ends'
 * SeqIO pointers take (the same context). NULL with what is missing in err. */
Device *cuda_device_open(bool emulated, char *err, size_t errlen);
/* The training kernels' CUDA C source (cellc_train.cu), for the tests' NVRTC and ptxas checks. */
const char *cuda_train_source(void);

#endif

#if defined(__has_include_next)
#if __has_include_next(<cuda.h>)
#include_next <cuda.h>
#endif
#endif
