/* chunkdev.h: the chunked form (chunkrun.c) on a CUDA back end: the in and out programs are that
 * back end's programs (device buffers), the chunk ops cellc_chunk.cu's kernels (cuda.h). */
#ifndef CELLC_CHUNKDEV_H
#define CELLC_CHUNKDEV_H

#include "lower.h"
#include "pipeline.h"

typedef struct ChunkDev ChunkDev;

/* What chunkrun.c's ChunkForm knows, for a run */
typedef struct ChunkDevForm {
  Compiled *in, *out;
  Work *win, *wout;
  int L, nl, D;
  const ChunkLayout *lay;
  const int *full_of;          /* per state: its first part among the SeqIO's */
} ChunkDevForm;

/* The chunk op's kernels on the back end's device, each chunked state's block checked against the
 * device's shared memory at chunks of L steps; L <= 0 (the default): *chosen = CHUNK_DEFAULT, halved
 * until the blocks fit. NULL with why in err. */
ChunkDev *chunkdev_open(const Backend *be, const ChunkLayout *lay, int nl, int L, int *chosen, char *err, size_t errlen);
void chunkdev_close(ChunkDev *k);
/* The forward and the backward on a float32 SeqIO in device memory (chunkrun.c's
 * chunkform_forward_f32 and chunkform_backward_f32), the backward after the forward of the same
 * sequence: P_in's rows, out's input and the chunk ops' boundary states stay in k between them. The
 * seconds per part into times (CHUNK_TIMES, chunkform_times' order: the forward the first three,
 * the backward the last three). */
void chunkdev_forward(ChunkDev *k, const ChunkDevForm *f, const SeqIO *d, double *times);
void chunkdev_backward(ChunkDev *k, const ChunkDevForm *f, const SeqIO *d, double *times);

/* The parts of the SeqIO between the two programs (chunkrun.c, any device): a state part's final
 * value and its gradient belong to OUT's run (fin_out, df_out), but those of a part OUT keeps
 * unchanged (lower.h) to IN's (fin_in, df_in: IN's scratch and zeros otherwise), swapped per part;
 * chunk_ptrs: a copy of a pointer array to swap in. The values IN passes to OUT
 * (Program.chunk_shared) follow the chunk op's inputs in IN's rows and the reads in OUT's. */
void chunk_own_finals(const Program *pout, void **fin_out, void **fin_in, const void **df_out, const void **df_in);
void **chunk_ptrs(void *const *v, int n);

/* A float32 SeqIO in host memory: its element counts (per part: params, the whole cell's state
 * parts, noise, out's gates) */
typedef struct ChunkDevSizes {
  size_t x, y;
  int np, ns, nz, ng;
  const size_t *pn, *sn, *zn, *gn;
} ChunkDevSizes;
/* run(f, the SeqIO copied to the device): inputs uploaded, outputs allocated and downloaded */
void chunkdev_on_device(ChunkDev *k, const SeqIO *h, const ChunkDevSizes *z, void (*run)(void *f, const SeqIO *d), void *f);

#endif
