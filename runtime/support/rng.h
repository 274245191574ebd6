/* rng.h: the one deterministic random source (xoshiro256**, seeded by
 * splitmix64 from a seed and a stream id), shared by initializers and tasks. */
#ifndef CELLC_RNG_H
#define CELLC_RNG_H

#include <stdint.h>

typedef struct Rng {
  uint64_t s[4];
} Rng;

/* Independent streams: the same (seed, stream) always gives the same numbers. */
void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(Rng *r);
double rng_uniform(Rng *r);           /* [0, 1), 53 bits */
double rng_uniform_open(Rng *r);      /* (0, 1): safe for log(u), log(1 - u) */
double rng_normal(Rng *r);            /* N(0, 1), Box-Muller (no cached spare) */
uint64_t rng_below(Rng *r, uint64_t n); /* uniform integer in [0, n), n > 0 */
/* Counter-based draws, the same on the CPU and on a GPU (dropout, gumbel noise): a key from (seed,
 * step, stream), and the uniform float in [0, 1) (24 bits) of Philox4x32-10 at `counter` under it;
 * _open: in (0, 1), safe for log(u) and log(1 - u). */
uint64_t rng_key(uint64_t seed, uint64_t step, uint64_t stream);
float rng_philox_uniform(uint64_t key, uint64_t counter);
float rng_philox_uniform_open(uint64_t key, uint64_t counter);
/* The counters of a part of a per-step draw laid out [T, B, per_row]: value i of the part takes
 * counter (i / row) global_row + first + i % row, where row = B per_row of the part, global_row =
 * the global batch's B per_row and first = the part's first row times per_row; so a data-parallel
 * rank draws exactly its slice of the one-process run's values. DRAW_ALL (row 0): counter i. */
typedef struct DrawSlice {
  uint64_t row, global_row, first;
} DrawSlice;
#define DRAW_ALL ((DrawSlice){0, 0, 0})
static inline uint64_t draw_counter(DrawSlice s, uint64_t i) {
  return s.row ? i / s.row * s.global_row + s.first + i % s.row : i;
}
/* Hash a string into a stream id (for per-name streams: "param.Wz"). */
uint64_t rng_stream_of(const char *name);

#endif
