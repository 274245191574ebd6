/* pipeline_dump.c: the graph after each pass as text (`cellc check --dump`), the passes run as
 * pipeline_compile runs them. */
#include "pipeline.h"

#include <string.h>

#include "cpu.h"
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

/* The cpu's workspace for (T, B), of a program compiled without generated code. */
static size_t ws(const Compiled *cc, int T, int B) { return cpu_backend.work_bytes(cc, T, B); }

TrainMemory pipeline_train_memory(Cell *c, int asked) {
  bool scan = c->mode == MODE_SCAN;
  Program *p = lower_cell(c, true, scan);
  ad_differentiate(p);
  char err[512];
  Compiled *cc = cpu_backend.compile(p, &(BackendOptions){.scan = scan, .portable = true}, err, sizeof err);
  CHECK(cc); /* the portable evaluator compiles every program */
  /* the workspace is fixed + B (row + T token), but for each array's padding: measured where the
   * padding is the same (T B and B multiples of 64) */
  size_t n = 64, wa = ws(cc, (int)n, (int)n), token = (ws(cc, 2 * (int)n, (int)n) - wa) / (n * n);
  size_t row = (ws(cc, (int)n, 2 * (int)n) - wa) / n - n * token, fixed = wa - n * (row + n * token);
  size_t states = 0, params = 0;
  for (int q = 0; q < p->nsparts; q++) states += sizeof(float) * (size_t)p->sparts[q].size;
  for (int i = 0; i < p->npparts; i++) params += sizeof(float) * (size_t)p->pparts[i].numel;
  Plan *pl = plan_new(p, &(PlanOptions){.scan = scan, .gates = false});
  size_t io = plan_io_bytes_per_row(pl);
  TrainMemory m = {.chunk = chunk_length(c, asked), .threads = support_threads()}; /* the cpu back end's default */
  /* the sequence's initial and final states and their gradients; the params and their gradients */
  m.seq_token = io, m.seq_row = 4 * states, m.seq_run = 2 * params;
  m.per_row = m.seq_row, m.per_run = fixed + m.seq_run;
  if (m.chunk > 0) {
    /* a state kept every L steps; one chunk's workspace, the gradient handed between chunks (two
     * in turn) and a recomputed final state; one chunk's weight gradients */
    m.per_token = io + (states + (size_t)m.chunk - 1) / (size_t)m.chunk;
    m.per_row += row + (size_t)m.chunk * token + 3 * states;
    m.per_run += params;
  } else {
    m.per_token = io + token;
    m.per_row += row;
  }
  plan_free(pl);
  cpu_backend.free(cc);
  program_free(p);
  return m;
}
