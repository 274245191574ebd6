/* memuse.c: memuse.h's counters: a table from address to size under one lock. Buffers are few
 * (tens to thousands per run) and allocated outside the hot loops, so the lock costs nothing. */
#include "memuse.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "base.h"

typedef struct Slot {
  uintptr_t key; /* 0: empty; TOMB: removed */
  size_t bytes;
} Slot;

#define TOMB ((uintptr_t)1)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Slot *slots;
static size_t cap, used, in_use, peak; /* used: slots not empty (live and removed) */

static size_t slot_of(uintptr_t k) { return (size_t)((k >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

static void put(uintptr_t k, size_t bytes) {
  size_t i = slot_of(k), tomb = SIZE_MAX;
  for (; slots[i].key; i = (i + 1) & (cap - 1)) {
    if (slots[i].key == k) break;
    if (slots[i].key == TOMB && tomb == SIZE_MAX) tomb = i;
  }
  if (slots[i].key == k) in_use -= slots[i].bytes; /* an address reused without its free seen */
  else if (tomb != SIZE_MAX) i = tomb;
  else used++;
  slots[i] = (Slot){k, bytes};
}

static void grow(void) {
  Slot *old = slots;
  size_t n = cap;
  cap = cap ? 2 * cap : 256;
  slots = xcalloc(cap, sizeof(Slot));
  used = 0;
  for (size_t i = 0; i < n; i++)
    if (old[i].key > TOMB) put(old[i].key, old[i].bytes);
  free(old);
}

void memuse_add(const void *p, size_t bytes) {
  uintptr_t k = (uintptr_t)p;
  if (k <= TOMB) return;
  pthread_mutex_lock(&lock);
  if (2 * (used + 1) > cap) grow();
  put(k, bytes);
  in_use += bytes;
  if (in_use > peak) peak = in_use;
  pthread_mutex_unlock(&lock);
}

void memuse_remove(const void *p) {
  uintptr_t k = (uintptr_t)p;
  if (k <= TOMB) return;
  pthread_mutex_lock(&lock);
  if (cap)
    for (size_t i = slot_of(k); slots[i].key; i = (i + 1) & (cap - 1))
      if (slots[i].key == k) {
        in_use -= slots[i].bytes;
        slots[i] = (Slot){TOMB, 0};
        break;
      }
  pthread_mutex_unlock(&lock);
}

size_t memuse_in_use(void) {
  pthread_mutex_lock(&lock);
  size_t v = in_use;
  pthread_mutex_unlock(&lock);
  return v;
}

size_t memuse_peak(void) {
  pthread_mutex_lock(&lock);
  size_t v = peak;
  pthread_mutex_unlock(&lock);
  return v;
}

void memuse_reset_peak(void) {
  pthread_mutex_lock(&lock);
  peak = in_use;
  pthread_mutex_unlock(&lock);
}

void *memuse_calloc(size_t bytes) {
  void *p = xcalloc(bytes ? bytes : 1, 1);
  memuse_add(p, bytes);
  return p;
}

void *memuse_aligned(size_t bytes) {
  void *p = xaligned(64, bytes);
  memuse_add(p, bytes);
  return p;
}

void memuse_free(void *p) {
  memuse_remove(p);
  free(p);
}
