/* tuning.c: the process's tuning options (tuning.h). */
#include "tuning.h"

static Tuning current;

void tuning_set(const Tuning *t) { current = *t; }

const Tuning *tuning(void) { return &current; }
