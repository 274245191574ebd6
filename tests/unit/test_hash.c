/* test_hash.c: FNV-1a (runtime/support/hash.c), the one byte hash: the published test vectors,
 * and every hash built on it giving the values the code computed before it was shared (random
 * streams, task data keys): a change there changes every drawn number and every dataset. */
#include <criterion/criterion.h>
#include <string.h>

#include "support.h"
#include "task_impl.h" /* task_hash */

/* FNV-1a written out, from any start, over bytes (the reference the shared function must match) */
static uint64_t ref_fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

Test(hash, published_vectors) {
  /* FNV-1a 64 of "", "a", "foobar" (the reference implementation's test suite) */
  cr_assert_eq(fnv1a(FNV1A_INIT, "", 0), 0xcbf29ce484222325ull);
  cr_assert_eq(fnv1a(FNV1A_INIT, "a", 1), 0xaf63dc4c8601ec8cull);
  cr_assert_eq(fnv1a(FNV1A_INIT, "foobar", 6), 0x85944171f73967e8ull);
}

Test(hash, str_feeds_the_terminating_nul) {
  cr_assert_eq(fnv1a_str(FNV1A_INIT, "foobar"), fnv1a(FNV1A_INIT, "foobar", 7));
  cr_assert_neq(fnv1a_str(fnv1a_str(FNV1A_INIT, "ab"), "c"), fnv1a_str(fnv1a_str(FNV1A_INIT, "a"), "bc"));
  /* feeding in pieces is feeding at once */
  cr_assert_eq(fnv1a(fnv1a(FNV1A_INIT, "foo", 3), "bar", 3), fnv1a(FNV1A_INIT, "foobar", 6));
}

Test(hash, rng_streams_unchanged) {
  const char *names[] = {"", "init", "data", "gumbel", "dropout.layer3"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    cr_assert_eq(rng_stream_of(names[i]), ref_fnv(1469598103934665603ull, names[i], strlen(names[i])), "%s", names[i]);
  /* a value pinned: the streams of every past run depend on it */
  cr_assert_eq(rng_stream_of("init"), ref_fnv(1469598103934665603ull, "init", 4));
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Test(hash, task_hash_unchanged) {
  unsigned char bytes[37];
  for (int i = 0; i < 37; i++) bytes[i] = (unsigned char)(i * 29 + 3);
  for (uint64_t key = 0; key < 5; key++)
    for (size_t n = 0; n <= sizeof bytes; n += 9)
      cr_assert_eq(task_hash(bytes, n, key), mix64(ref_fnv(1469598103934665603ull ^ mix64(key + 0x9e3779b97f4a7c15ull), bytes, n)),
                   "key %d n %d", (int)key, (int)n);
}
