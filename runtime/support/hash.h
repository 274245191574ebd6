/* hash.h: FNV-1a (64 bits), the one byte hash of cellc: cache keys of compiled CUDA images and
 * emulator modules, the cell form's expression hashes, random-stream names, task data keys. */
#ifndef CELLC_HASH_H
#define CELLC_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a's offset basis: where a hash starts. */
#define FNV1A_INIT 0xcbf29ce484222325ull

/* h with the n bytes at data fed in, one at a time: h = (h ^ byte) * FNV prime. */
uint64_t fnv1a(uint64_t h, const void *data, size_t n);
/* h with the bytes of s and its terminating NUL fed in (the NUL keeps "ab","c" apart from "a","bc"). */
uint64_t fnv1a_str(uint64_t h, const char *s);

#endif
