/* cli.c: the argument parsing every command shares: the usage errors, the standard library's
 * directory, the flags of a cell (--set, --dims, --cell, --mode) and the cell they choose. */
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int cli_usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "cellc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n\n");
  cli_print_usage(stderr);
  return 2;
}

int cli_command_usage(const char *cmd, const char *const *synopses, const char *fmt, const char *arg) {
  fprintf(stderr, "cellc %s: ", cmd);
  fprintf(stderr, fmt, arg);
  for (int i = 0; synopses[i]; i++) fprintf(stderr, "\n%s cellc %s", i ? "      " : "usage:", cli_help(synopses[i])->usage);
  fprintf(stderr, "\n(cellc %s --help for more)\n", cmd);
  return 2;
}

static char stdlib_buf[PATH_MAX];

const char *cli_stdlib_dir(void) {
  const char *env = cli_env_stdlib();
  if (env) return env;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "stdlib";
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  const char *cands[] = {"%s/../stdlib", "%s/../share/cellc/stdlib", "%s/../../stdlib"};
  for (int i = 0; i < 3; i++) {
    snprintf(stdlib_buf, sizeof stdlib_buf, cands[i], exe);
    if (access(stdlib_buf, R_OK) == 0) return stdlib_buf;
  }
  return "stdlib";
}

/* The split --set and --dims bindings: they live as long as the program. */
static Arena binding_arena;

static int split_binding(const char *text, Binding *out) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text || !eq[1]) return -1;
  out->name = arena_strndup(&binding_arena, text, (size_t)(eq - text));
  out->value = arena_strdup(&binding_arena, eq + 1);
  return 0;
}

int cli_cell_arg(CellArgs *a, int argc, char **argv, int *i) {
  const char *f = argv[*i];
  bool has_value = *i + 1 < argc;
  if (!strcmp(f, "--set") || !strcmp(f, "--dims") || !strcmp(f, "--cell") || !strcmp(f, "--mode")) {
    if (!has_value) {
      cli_usage_error("%s needs a value", f);
      return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(f, "--set")) {
      if (a->nsets == 64) return cli_usage_error("too many --set flags (64 at most): '%s'", v), -1;
      if (split_binding(v, &a->sets[a->nsets]) < 0) return cli_usage_error("--set takes NAME=VALUE, not '%s'", v), -1;
      if (!strcmp(a->sets[a->nsets].name, "chunk")) { /* the run's chunk length, not a cell option */
        const char *cv = a->sets[a->nsets].value;
        char *end = NULL;
        long L = strtol(cv, &end, 10);
        if (!*cv || *end || L < 0 || L > 1000000000)
          return cli_usage_error("--set chunk takes a whole number of steps (0: the whole sequence), not '%s'", cv), -1;
        a->chunk_set = true, a->chunk = (int)L;
        return 1;
      }
      a->nsets++;
    } else if (!strcmp(f, "--dims")) {
      char *copy = strdup(v), *save = NULL;
      for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->ndims == 64 || split_binding(tok, &a->dims[a->ndims]) < 0) {
          free(copy);
          return cli_usage_error("--dims takes NAME=VALUE,... (64 at most), not '%s'", v), -1;
        }
        a->ndims++;
      }
      free(copy);
    } else if (!strcmp(f, "--cell")) {
      a->cell = v;
    } else {
      if (strcmp(v, "auto") && strcmp(v, "scan") && strcmp(v, "sequential") && strcmp(v, "chunked"))
        return cli_usage_error("--mode is auto, scan, sequential or chunked, not '%s'", v), -1;
      a->mode = v;
    }
    return 1;
  }
  return 0;
}

/* Loads the module and checks the chosen cell; NULL after a diagnostic. */
Cell *cli_compile_cell(Arena *arena, const CellArgs *a, bool training) {
  Module *m = check_load(arena, a->file, cli_stdlib_dir());
  if (!m) return NULL;
  const Src *src = NULL;
  const CellAst *ast = check_find_cell(m, a->cell, &src);
  if (!ast) {
    const char *cands[256], *near = NULL;
    int nc = 0;
    for (int i = 0; i < m->ncells && nc < 256; i++) cands[nc++] = m->cells[i]->name;
    if (a->cell) near = edit_nearest(a->cell, cands, nc);
    if (near) diag_plain("no cell named '%s' in %s; did you mean '%s'?", a->cell, a->file, near);
    else if (a->cell) diag_plain("no cell named '%s' in %s", a->cell, a->file);
    else diag_plain("%s defines no cell", a->file);
    return NULL;
  }
  for (int i = 0; i < a->nsets; i++) {
    bool found = false;
    for (int o = 0; o < ast->noptions; o++)
      if (!strcmp(ast->options[o].name, a->sets[i].name)) found = true;
    if (!found) {
      const char *cands[64];
      int nc = 0;
      for (int o = 0; o < ast->noptions && nc < 64; o++) cands[nc++] = ast->options[o].name;
      char owner[160], msg[512];
      snprintf(owner, sizeof owner, "cell '%s'", ast->name);
      diag_plain("--set %s=%s: %s", a->sets[i].name, a->sets[i].value,
                 no_such_text(msg, sizeof msg, owner, "option", a->sets[i].name, cands, nc));
      return NULL;
    }
  }
  CheckOptions o = {0};
  o.sets = a->sets;
  o.nsets = a->nsets;
  o.dims = a->dims;
  o.ndims = a->ndims;
  o.need_bound = true;
  o.training = training;
  o.force_scan = a->mode && !strcmp(a->mode, "scan");
  o.force_sequential = a->mode && !strcmp(a->mode, "sequential");
  o.force_chunked = a->mode && !strcmp(a->mode, "chunked");
  Cell *c = check_cell(arena, src, ast, &o); /* a --dims name the cell lacks is its error */
  if (c && c->chunked && !a->runs_chunked) { /* cellc run runs it; derive, emit, a dump do not yet */
    diag_plain("--mode chunked: cellc check and run take it; this command does not yet (docs/language.md)");
    cell_free(c);
    return NULL;
  }
  return c;
}
