/* ir.h: the IR's public header: the op table and the step graph every pass after the checker
 * shares (graph.h), and the float64 chunkwise-parallel forms (chunkop.h, chunkdelta.h). */
#ifndef CELLC_IR_H
#define CELLC_IR_H

#include "chunkdelta.h"
#include "chunkop.h"
#include "graph.h"

#endif
