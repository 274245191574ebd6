/* support.h: the support layer every folder may use: checked allocation, arenas, growable arrays,
 * the internal-error check (base.h), the counter-based random numbers (rng.h), file output
 * (fsout.h) and FNV-1a hashing (hash.h). */
#ifndef CELLC_SUPPORT_H
#define CELLC_SUPPORT_H

#include "base.h"
#include "cpu_features.h"
#include "fsout.h"
#include "hash.h"
#include "rng.h"

#endif
