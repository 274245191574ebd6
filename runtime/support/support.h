/* support.h: the support layer every folder may use: checked allocation, arenas, growable arrays,
 * the internal-error check (base.h) and the counter-based random numbers (rng.h). */
#ifndef CELLC_SUPPORT_H
#define CELLC_SUPPORT_H

#include "base.h"
#include "cpu_features.h"
#include "fsout.h"
#include "rng.h"

#endif
