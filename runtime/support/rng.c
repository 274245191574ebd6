/* rng.c: xoshiro256** with splitmix64 seeding. */
#include "rng.h"

#include <math.h>
#include <string.h>

#include "hash.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (stream + 0x632be59bd9b4e019ull);
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(Rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rng_uniform(Rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

double rng_uniform_open(Rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * 0x1.0p-53; }

double rng_normal(Rng *r) {
  double u1 = rng_uniform_open(r), u2 = rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(Rng *r, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng_next(r);
  while (x >= limit);
  return x % n;
}

uint64_t rng_stream_of(const char *name) {
  /* FNV-1a of the bytes (no NUL) from a start a digit short of FNV's offset basis: every stream,
   * and so every drawn number, depends on it */
  return fnv1a(1469598103934665603ull, name, strlen(name));
}

uint64_t rng_key(uint64_t seed, uint64_t step, uint64_t stream) {
  uint64_t x = seed ^ (step * 0x9E3779B97F4A7C15ull) ^ (stream * 0xD1B54A32D192ED03ull);
  splitmix64(&x);
  return splitmix64(&x);
}

/* Philox4x32-10 (Salmon et al., SC'11) of the counter (lo, hi, 0, 0) under the key (lo, hi): the
 * first word. cellc_train.cu's philox is the same. */
static uint32_t philox(uint64_t key, uint64_t counter) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return c0;
}

float rng_philox_uniform(uint64_t key, uint64_t counter) { return (float)(philox(key, counter) >> 8) * 0x1.0p-24f; }

float rng_philox_uniform_open(uint64_t key, uint64_t counter) {
  return ((float)(philox(key, counter) >> 8) + 0.5f) * 0x1.0p-24f;
}
