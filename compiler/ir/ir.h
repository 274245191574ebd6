/* ir.h: the IR's public header: the op table and the step graph every pass after the checker
 * shares (graph.h). */
#ifndef CELLC_IR_H
#define CELLC_IR_H

#include "graph.h"

#endif
