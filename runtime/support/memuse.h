/* memuse.h: the high-water mark of cellc's data buffers, the figure `cellc check` predicts for
 * training (spec section 10) and `cellc train` and `cellc run` report: every buffer a device
 * allocates (host or GPU memory), the back ends' workspaces and the host arrays of a run, counted
 * where they are allocated and freed. Small bookkeeping (names, tables, compiled code) is not. */
#ifndef CELLC_MEMUSE_H
#define CELLC_MEMUSE_H

#include <stddef.h>

/* p (any address space: host pointers and device addresses alike) now holds `bytes`. */
void memuse_add(const void *p, size_t bytes);
/* p is freed (NULL and addresses never added are ignored). */
void memuse_remove(const void *p);
/* Bytes counted now, and the most counted at once since the start or memuse_reset_peak. */
size_t memuse_in_use(void);
size_t memuse_peak(void);
/* The high-water mark restarts at what is in use now (to measure one phase). */
void memuse_reset_peak(void);

/* Host allocations counted: zeroed, or 64-byte aligned and not zeroed; and their free. */
void *memuse_calloc(size_t bytes);
void *memuse_aligned(size_t bytes);
void memuse_free(void *p);

#endif
