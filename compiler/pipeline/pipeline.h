/* pipeline.h: the compiler's one compile pipeline and its public face for the runtime and the
 * commands. A checked cell (check.h: load, find, check) and its options go to a compiled program
 * on a back end found by name:
 *   lower (scan form when the back end scans and the cell's mode is scan) -> differentiate
 *   -> the back end's compile,
 * with compiled programs cached in the process by their signature (the lowered program, the back
 * end and its options): an equal request shares the compiled program. */
#ifndef CELLC_PIPELINE_H
#define CELLC_PIPELINE_H

#include "backend.h"
#include "check.h"

/* The back ends: the one list of them (pipeline.c), in the order help and messages name them,
 * each with whether `cellc train` runs on it (a train.device). The commands' flags and help, the
 * configuration's train.device and the tests read it; a new back end is one entry there. */
int backend_count(void);
const Backend *backend_at(int i);
bool backend_trains(const Backend *be);
/* By name: "interp", "cpu", "cuda", "cuda-emu". NULL when there is none of that name. */
const Backend *backend_find(const char *name);
/* Their names, for messages: "interp, cpu, cuda, cuda-emu". */
const char *backend_names(void);
/* Their names joined by sep into buf ("interp|cpu|cuda|cuda-emu"); only the devices of training
 * when trains_only. */
void backend_join(char *buf, size_t n, const char *sep, bool trains_only);
/* The names of the devices of training, NULL-terminated (train.device's choices): the back ends
 * that train, each named after the device it runs on. */
const char *const *backend_device_names(void);
/* The back end that trains on (runs the model's cell layers on) a device of kind k. */
const Backend *backend_on_device(DeviceKind k);

/* The devices (device.h): one per kind per process, opened on first use (a CUDA device: its
 * context and its training kernels) and shared by every holder until the last releases it; the
 * memory of the back ends whose Backend.device is that kind. NULL with what is missing in err when
 * it cannot run here. The host device never fails and is never closed. */
Device *device_open(DeviceKind k, char *err, size_t errlen);
void device_release(Device *d);
/* The kind of a device by name ("cpu", "cuda", "cuda-emu": train.device's words): false for none. */
bool device_kind_find(const char *name, DeviceKind *k);

typedef struct PipelineOptions {
  const Backend *backend;
  bool training;           /* lowered for training: gumbel_sigmoid draws noise */
  bool gates;              /* record every gate per step */
  bool f32;                /* interp: round every value to float32 */
  int threads;             /* cpu: 0 = CELLC_THREADS, else all cores */
  bool portable;           /* cpu: every kernel in the portable evaluator, no generated code (tests) */
} PipelineOptions;

/* Compiles a checked cell whose dims are bound (its mode decides scan or sequential). The result is
 * shared with every other holder of an equal request: release it, never free it. NULL with a
 * message in err when the back end cannot run it or its compilation fails. */
Compiled *pipeline_compile(Cell *c, const PipelineOptions *o, char *err, size_t errlen);
void pipeline_release(Compiled *c);
/* How many compilations the cache saved so far. */
int pipeline_cache_hits(void);

/* Writes the cell's forward and backward as the back end's standalone files (cellc emit; the
 * back end's emit entry) into eo->dir. 0, or -1 with a message in err. */
int pipeline_emit(Cell *c, const PipelineOptions *o, const EmitOptions *eo, char *err, size_t errlen);

/* Forward then backward of a whole sequence on c's back end, from and into float64 buffers
 * (d->dtype DT_F64), converted to float32 and back for a float32 back end (and copied to and from
 * the device for a device-memory one). */
void pipeline_run_f64(Compiled *c, const SeqIO *d);
/* pipeline_run_f64 in chunks of `chunk` steps, the states kept at chunk boundaries only (chunked.h;
 * 0: the whole sequence at once). */
void pipeline_run_f64_chunked(Compiled *c, const SeqIO *d, int chunk);
/* pipeline_run_f64 with the work profiling (Work.profiling): where its time went, into *prof. */
void pipeline_run_f64_profiled(Compiled *c, const SeqIO *d, Profile *prof);

/* Lowers and differentiates a cell with no back end (the form `cellc derive` prints). */
Program *pipeline_derive(Cell *c);

/* The graph after a pass, as text (`cellc check --dump NAME`; QBE's -d): "typed" the checked
 * cell's step graph, "lower" the lowered Program, "ad" it differentiated (forward and backward),
 * "plan" its execution plan (phases and steps). The lowering and the plan follow the cell's mode
 * (scan form in scan mode), as a back end that runs scans compiles it; the cell's dims bound. */
bool pipeline_dump_known(const char *name);
/* The names, for messages: "typed, lower, ad, plan". */
const char *pipeline_dump_names(void);
/* Prints dump `name` (one pipeline_dump_known accepts) of a checked, bound cell to f. */
void pipeline_dump(Cell *c, const char *name, FILE *f);
/* Training memory of a checked, bound cell in its mode, as the cpu back end allocates it: a
 * sequence of T steps and B rows takes per_run + B (per_row + T per_token) bytes (the SeqIO's
 * buffers, the back end's workspace, the chunk buffers). Whole sequences (chunk 0) keep every
 * array of the training plan per token; chunks of L = chunk_length(c, asked) steps keep the
 * caller's per-token arrays and a state every L steps, and L steps of the rest per row. The
 * workspace's fixed part (packed weights, per-thread buffers) is for `threads` threads. */
typedef struct TrainMemory {
  size_t per_token, per_row, per_run;
  /* of these, the SeqIO's own buffers (inputs, outputs, their gradients; initial and final states
   * and theirs; params and their gradients), which a caller such as cellc train's model holds */
  size_t seq_token, seq_row, seq_run;
  int chunk, threads;
} TrainMemory;
TrainMemory pipeline_train_memory(Cell *c, int asked);

/* Chunks (chunked.c): a sequence run in chunks of L steps with its states kept only at chunk boundaries
 * (language spec section 10). The forward runs chunk after chunk, each from the previous one's
 * final states, keeping those boundary states; the backward goes through the chunks last to first,
 * runs each chunk's forward again from its boundary (the last one's is still in the work) and
 * then its backward, the gradient of its initial states becoming the previous chunk's dfinal and
 * the weight gradients summed over chunks. The back end's work then holds L steps, not T: the
 * memory a training run keeps per token is the boundaries' (a state every L steps) and the
 * per-token inputs and outputs. The same operations on the same values: the results are those of
 * one whole-sequence run up to the order of the weight gradients' sums over chunks. */

/* The chunk length the compiler chooses for cell c (0: the whole sequence at once): CHUNK_DEFAULT
 * steps where a state is a tensor (rank 2 or 3: per-head matrices, Mamba's [D, N]), whose every
 * step would otherwise be kept; version 1's vector states stay whole. asked >= 0 (`--set
 * chunk=L`, `model.chunk`) overrides: 0 is the whole sequence. */
#define CHUNK_DEFAULT 64
int chunk_length(const Cell *c, int asked);

typedef struct Chunker Chunker;

/* A chunker for compiled program c in chunks of L steps (L >= 1), its buffers in the memory of
 * c's device. */
Chunker *chunker_new(Compiled *c, int L);
void chunker_free(Chunker *k);
int chunker_length(const Chunker *k);

/* c's forward and backward on w over s: in chunks where k is given and shorter than s->T, else
 * the back end's own whole-sequence calls. The backward follows the forward of the same s. */
void chunked_forward(Compiled *c, Work *w, const SeqIO *s, Chunker *k);
void chunked_backward(Compiled *c, Work *w, const SeqIO *s, Chunker *k);

/* Variable lengths (varlen.c): SeqIO.lengths given, chunked_forward and chunked_backward (so
 * pipeline_run_f64 and the model's layers) run the batch in segments between its distinct
 * lengths, each segment the rows still running gathered into a smaller SeqIO and run by the back
 * end as any sequence (in chunks with a chunker); the backward runs each segment's forward again
 * from its initial states, kept by a forward sweep, before its backward. Results per row are those
 * of the row run alone up to the order of the weight gradients' sums (SeqIO.lengths has the
 * meaning). Lengths all T run as no lengths, bit for bit. */
/* Whether s has lengths with one below T (each must lie in 1..T). */
bool seq_varlen(const SeqIO *s);
/* One segment's run: its forward, and when `backward` its backward after it. */
typedef void (*VarlenRun)(void *ctx, const SeqIO *s, bool backward);
/* The segments of s (laid out as for program p, its buffers in dv's memory) through run: the
 * forward's outputs; or (backward) the gradients, the forward of each segment run again. */
void varlen_forward(const Program *p, Device *dv, const SeqIO *s, VarlenRun run, void *ctx);
void varlen_backward(const Program *p, Device *dv, const SeqIO *s, VarlenRun run, void *ctx);
/* chunked_forward and chunked_backward of a sequence with lengths (seq_varlen). */
void varlen_backend_forward(Compiled *c, Work *w, const SeqIO *s, Chunker *k);
void varlen_backend_backward(Compiled *c, Work *w, const SeqIO *s, Chunker *k);

/* The chunked form (chunkrun.c; docs/architecture.md, "The chunked form"): a cell checked with
 * --mode chunked (Cell.chunked: every matrix state recognized) run as two programs of the back end
 * around the chunk op of each chunked state, in chunks of L steps (L <= 0: CHUNK_DEFAULT). The
 * SeqIO is laid out as for the cell's program from pipeline_compile (its params, state parts,
 * gates and noise). On interp, cpu, and cuda and cuda-emu (chunkdev.c: the SeqIO's float32
 * buffers in device memory); NULL with a message in err where the back end cannot run it. */
typedef struct ChunkForm ChunkForm;
ChunkForm *chunkform_compile(Cell *c, const PipelineOptions *o, int L, char *err, size_t errlen);
void chunkform_free(ChunkForm *f);
int chunkform_length(const ChunkForm *f);
/* Where its float32 SeqIO's buffers lie (the back end's device) */
DeviceKind chunkform_device(const ChunkForm *f);
/* Forward then backward of a whole sequence, float64 buffers (as pipeline_run_f64). */
void chunkform_run_f64(ChunkForm *f, const SeqIO *d);
/* chunkform_run_f64 of a sequence that may have lengths (varlen.c), its SeqIO laid out as for p
 * (the cell's program from pipeline_compile). */
void chunkform_run_f64_lengths(ChunkForm *f, const Program *p, const SeqIO *d);
/* The same on float32 buffers, for a float32 back end (cpu; cuda, cuda-emu: device memory): no
 * float64 copies */
void chunkform_run_f32(ChunkForm *f, const SeqIO *d);
/* chunkform_run_f32's forward and backward apart, as a back end's (cellc train's layers): the
 * forward writes y and the final states; the backward, after the forward of the same SeqIO (no
 * other run of f between), the gradients (grad_x may be NULL; no SeqIO.fold). The same values as
 * chunkform_run_f32. */
void chunkform_forward_f32(ChunkForm *f, const SeqIO *d);
void chunkform_backward_f32(ChunkForm *f, const SeqIO *d);
/* The two of a float32 sequence that may have lengths (varlen.c), laid out as for p */
void chunkform_forward_lengths(ChunkForm *f, const Program *p, const SeqIO *d);
void chunkform_backward_lengths(ChunkForm *f, const Program *p, const SeqIO *d);
/* The last chunkform_run_f32's seconds per part: in's forward, the chunk ops' forward, out's
 * forward, out's backward, the chunk ops' backward, in's backward */
#define CHUNK_TIMES 6
void chunkform_times(const ChunkForm *f, double *t);
/* The two programs' profile (Work.prof) summed since the last call, then profiling turned on or
 * off and the sums cleared */
Profile chunkform_profile(ChunkForm *f, bool on);

#endif
