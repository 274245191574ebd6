/* fuzz_frontend.c: a libFuzzer target for the front end. Arbitrary bytes go
 * through loading (lex, parse, imports) as a .cell file, then every cell
 * through the checker and the analysis three times: with no dims bound, with
 * H=3,D=2 bound as `run` needs them (so binding runs), and with scan forced
 * (so the nonlinear-term message is built). Diagnostics go to /dev/null. Any
 * crash, leak, hang or UBSan report is a bug in the front end.
 *
 * Imports resolve next to a path inside an empty private directory, then in
 * the stdlib, and the input is defanged first (an import string may not start
 * with '/' or hold ".."), so no input reads files other than the stdlib's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char *input_path;  /* DIR/input.cell, never written: the text is in memory */
static char *stdlib_dir;  /* absolute, so the cwd cannot matter */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  diag_out = fopen("/dev/null", "w");
  static char dir[] = "/tmp/cellc-fuzz-XXXXXX";
  if (!diag_out || !mkdtemp(dir)) {
    perror("fuzz_frontend: setup");
    exit(1);
  }
  input_path = xasprintf("%s/input.cell", dir);
  const char *env = getenv("CELLC_STDLIB");
  stdlib_dir = realpath(env && *env ? env : "stdlib", NULL);
  if (!stdlib_dir) {
    fprintf(stderr, "fuzz_frontend: no stdlib directory (run from the repository root, or set CELLC_STDLIB)\n");
    exit(1);
  }
  rmdir(dir); /* empty: nothing there to import, and nothing left behind */
  return 0;
}

/* What `cellc check` and the messages print: every shape, every term. */
static void print_cell(Arena *a, const Cell *c) {
  char buf[160];
  for (int i = 0; i < c->nparams; i++) cell_shape_text(c, c->params[i].rank, c->params[i].dim, buf, (int)sizeof buf);
  for (int i = 0; i < c->nstates; i++) cell_shape_text(c, c->states[i].rank, c->states[i].dim, buf, (int)sizeof buf);
  for (int id = 0; id < c->g.nnodes; id++) {
    const Node *n = &c->g.nodes[id];
    cell_shape_text(c, n->rank, n->dim, buf, (int)sizeof buf);
    if (n->ast) expr_text(a, n->ast);
  }
}

static const Binding sets[] = {{"see_h", "true"}};
static const Binding dims[] = {{"H", "3"}, {"D", "2"}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = xmalloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  for (size_t i = 1; i < size; i++) {
    if (text[i - 1] == '"' && text[i] == '/') text[i] = '_';   /* import "/etc/..." */
    if (text[i - 1] == '.' && text[i] == '.') text[i] = '_';   /* import "../..." */
  }
  Arena arena = {0};
  Module *m = check_load_text(&arena, input_path, text, size, stdlib_dir);
  for (int i = 0; m && i < m->ncells; i++) {
    CheckOptions plain = {0};
    CheckOptions bound = {.sets = sets, .nsets = 1, .dims = dims, .ndims = 2, .need_bound = true};
    CheckOptions scan = {.force_scan = true};
    const CheckOptions *runs[] = {&plain, &bound, &scan};
    for (int r = 0; r < 3; r++) {
      Cell *c = check_cell(&arena, m->srcs[i], m->cells[i], runs[r]);
      if (c) print_cell(&arena, c);
      cell_free(c);
    }
  }
  arena_free(&arena);
  free(text);
  return 0;
}
