/* base.h: the few helpers every module shares: checked allocation, arenas,
 * growable arrays and the internal-error check (exit 70, file:line). */
#ifndef CELLC_BASE_H
#define CELLC_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Internal failure: a bug, never a user error. Prints file:line and exits 70. */
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) base_fail(__FILE__, __LINE__, #cond);                       \
  } while (0)
#define UNREACHABLE(what) base_fail(__FILE__, __LINE__, what)

_Noreturn void base_fail(const char *file, int line, const char *what);

/* Checked allocation. Failure is out of memory: exit 3 with the bytes asked for and what they
 * were for (base_alloc_for); a size that overflows is a bug (exit 70). */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
/* n bytes (rounded up to a multiple of align, a power of two), aligned to align, not zeroed */
void *xaligned(size_t align, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* dlopen (RTLD_NOW | RTLD_LOCAL) the first of the n names that loads: each as given (the loader's
 * search path), then under $CUDA_HOME and /usr/local/cuda in each of the nsub subdirectories
 * (lib64, lib, ...). On failure NULL, with every dlerror in tried. */
void *support_dlopen_toolkit(const char *const *names, int n, const char *const *subdirs, int nsub, char *tried,
                             size_t triedlen);
/* Names what the allocations from now on are for, in the out-of-memory message ("the model's
 * tensors (model.hidden = 128, ...)"); `what` must outlive them. Returns the previous name. */
const char *base_alloc_for(const char *what);

/* An arena: everything of one compilation, freed at once. */
typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
  ArenaBlock *head;
} Arena;

void *arena_alloc(Arena *a, size_t n); /* zeroed, 16-byte aligned */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* A scratch: the buffers of one call, given back together at the next call's scratch_begin, its
 * memory kept (a thread's, for an op it runs again and again: no fresh pages each call, each a
 * fault on a VM). A call's takes beyond the block are allocations of their own; the next
 * scratch_begin frees them and makes the block as large as the call before took. */
typedef struct Scratch {
  char *mem;
  size_t cap, used, want; /* want: the bytes the calls since the last begin took */
  void **extra;
  int nextra, capextra;
} Scratch;

void scratch_begin(Scratch *s);
void *scratch_take(Scratch *s, size_t n); /* 64-byte aligned, not zeroed */
void *scratch_zeros(Scratch *s, size_t n); /* the same, zeroed */
void scratch_free(Scratch *s);
/* A call's scratch: the caller's (given) where it keeps one, else own (zeroed, scratch_free'd by
 * the call at its end); begun */
Scratch *scratch_for_call(Scratch *given, Scratch *own);

/* Growable array of T: `T *items; int n, cap;` fields, grown by vec_push. */
#define VEC_PUSH(items, n, cap, value)                                       \
  do {                                                                       \
    if ((n) == (cap)) {                                                      \
      (cap) = (cap) ? 2 * (cap) : 8;                                         \
      (items) = xrealloc((items), sizeof(*(items)) * (size_t)(cap));         \
    }                                                                        \
    (items)[(n)++] = (value);                                                \
  } while (0)

/* Read a whole file; NULL (errno set) when it cannot be read, or is a directory (EISDIR) or a
 * device (ENODEV). */
char *read_file(const char *path, size_t *len);

/* The threads cellc's own parallel work uses: Tuning.threads (tuning.h), else every online core (shared out
 * among the ranks of an mpirun job on this machine, OMPI_COMM_WORLD_LOCAL_SIZE). cellc owns
 * its parallelism: OpenBLAS runs single-threaded inside it (one pool of threads, not two that
 * spin against each other). */
int support_threads(void);
/* The threads that `units` of work pay for, at least `per_thread` units each: between 1 and
 * support_threads(). */
int support_threads_for(double units, double per_thread);

/* Levenshtein distance, for "did you mean" suggestions. */
int edit_distance(const char *a, const char *b);
/* The candidate nearest to name, when it is near enough to be a likely misspelling; else NULL. */
const char *edit_nearest(const char *name, const char *const *cands, int n);
/* The message for a name not among `cands`: "<owner> has no <what> '<name>'", with "; did you mean
 * '<near>'?" when one is near, or "<owner> has no <what>s" when there are none. Into buf. */
char *no_such_text(char *buf, size_t n, const char *owner, const char *what, const char *name, const char *const *cands,
                   int nc);

#endif
