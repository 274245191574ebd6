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
#include "cellc_chunk.h"
#include "plan.h"

extern const Backend cuda_backend, cuda_emu_backend;

/* The plan options the CUDA back ends plan a program with (docs/architecture.md): the CPU's that
 * move fewer bytes and run fewer steps, but dot_sums (this host has no column sum of products,
 * ET_COLSUM's src2) and sink_hybrid (whose gain, a loop's rows kept in cache, is the CPU's); and
 * shift_passes, for the GPU. */
PlanOptions cuda_plan_options(bool scan, bool gates);

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

/* The chunked form's chunk op on a CUDA device (cellc_chunk.cu; docs/gpu.md, "The chunked form"):
 * its kernels compiled and loaded for the device of a kind; NULL with why in err. */
typedef struct CudaChunk CudaChunk;
CudaChunk *cuda_chunk_open(bool emulated, char *err, size_t errlen);
void cuda_chunk_close(CudaChunk *k);
/* The kernels' CUDA C source (malloc'd), for the tests' NVRTC and ptxas checks. */
char *cuda_chunk_source(void);
/* The shared memory a block of the forward (or the backward) takes, bytes; delta: the delta rule's
 * op (CellcChunkArgs.delta). */
size_t cuda_chunk_shared(int K, int V, int L, bool per_key, bool delta, bool backward);
/* 0 where the device gives a block the shared memory of the chunk op (K, V, a chunk of L sub-steps);
 * else -1 with what it needs and has in err. */
int cuda_chunk_fits(const CudaChunk *k, int K, int V, int L, bool per_key, bool delta, char *err, size_t errlen);
/* One chunked state's chunk op over every head and batch row (asynchronous; the pointers device
 * memory, a->loc and a->dec scratch, unused by the delta rule's): the forward writes the boundary states into a->bnd, the reads
 * (with_reads) and a->final; the backward, with a->bnd as the forward left it, dyin's chunk op
 * inputs and a->dh0. 0, or -1 with err. */
int cuda_chunk_forward(CudaChunk *k, const CellcChunkArgs *a, bool with_reads, char *err, size_t errlen);
int cuda_chunk_backward(CudaChunk *k, const CellcChunkArgs *a, char *err, size_t errlen);
/* dst[r, j] = a[r, j] (+ b[r, j] where b is not NULL) for r < rows, j < n, row strides ldd, lda, ldb. */
int cuda_chunk_cols(CudaChunk *k, float *dst, int ldd, const float *a, int lda, const float *b, int ldb, long long rows, int n,
                    char *err, size_t errlen);
/* Waits for the launches (the times of chunkform_times). */
int cuda_chunk_sync(CudaChunk *k, char *err, size_t errlen);

#endif

#if defined(__has_include_next)
#if __has_include_next(<cuda.h>)
#include_next <cuda.h>
#endif
#endif
