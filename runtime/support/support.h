/* support.h: the support layer every folder may use: checked allocation, arenas, growable arrays,
 * the internal-error check (base.h), the counter-based random numbers (rng.h), file output
 * (fsout.h), FNV-1a hashing (hash.h), the data buffers' high-water mark (memuse.h) and the
 * process's tuning options (tuning.h). */
#ifndef CELLC_SUPPORT_H
#define CELLC_SUPPORT_H

#include "base.h"
#include "cpu_features.h"
#include "fsout.h"
#include "hash.h"
#include "memuse.h"
#include "rng.h"
#include "tuning.h"

#endif
