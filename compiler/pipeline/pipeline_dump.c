/* pipeline_dump.c: the graph after each pass as text (`cellc check --dump`), the passes run as
 * pipeline_compile runs them. */
#include "pipeline.h"

#include <string.h>

#include "lower.h"
#include "plan.h"

static const char *const dump_names[] = {"typed", "lower", "ad", "plan"};

bool pipeline_dump_known(const char *name) {
  for (size_t i = 0; i < sizeof dump_names / sizeof dump_names[0]; i++)
    if (!strcmp(name, dump_names[i])) return true;
  return false;
}

const char *pipeline_dump_names(void) { return "typed, lower, ad, plan"; }

void pipeline_dump(Cell *c, const char *name, FILE *f) {
  CHECK(pipeline_dump_known(name));
  if (!strcmp(name, "typed")) {
    cell_dump(c, f);
    return;
  }
  bool scan = c->mode == MODE_SCAN;
  Program *p = lower_cell(c, false, scan);
  if (strcmp(name, "lower")) ad_differentiate(p);
  if (!strcmp(name, "plan")) {
    PlanOptions po = {.scan = scan, .gates = false};
    Plan *pl = plan_new(p, &po);
    plan_dump(pl, f);
    plan_free(pl);
  } else
    program_dump(p, f);
  program_free(p);
}

TrainMemory pipeline_train_memory(Cell *c, int asked) {
  bool scan = c->mode == MODE_SCAN;
  Program *p = lower_cell(c, true, scan);
  ad_differentiate(p);
  PlanOptions po = {.scan = scan, .gates = false};
  Plan *pl = plan_new(p, &po);
  TrainMemory m = {plan_bytes_per_row(pl), 0, chunk_length(c, asked)};
  if (m.chunk > 0) {
    size_t io = plan_io_bytes_per_row(pl), states = 0;
    for (int q = 0; q < p->nsparts; q++) states += sizeof(float) * (size_t)p->sparts[q].size;
    m.per_chunk = (size_t)m.chunk * (m.per_token - io) + 3 * states;
    m.per_token = io + (states + (size_t)m.chunk - 1) / (size_t)m.chunk;
  }
  plan_free(pl);
  program_free(p);
  return m;
}
