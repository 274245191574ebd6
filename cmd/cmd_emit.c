/* cmd_emit.c: `cellc emit` (spec/emit.md): one cell, every dim bound, as files another project
 * links. The back end writes its code files (cpu: P.o, libP.so; cuda: P.cu, P.ptx); this command
 * writes P.h, P.json and, with --torch, P_torch.py. Everything goes into a fresh directory next to
 * --out, which becomes --out only once every file is complete (docs/emit.md). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "emit_text.h"
#include "export_gen.h"
#include "pipeline.h"

typedef struct EmitArgs {
  CellArgs cell;
  const char *out, *target, *name, *cpu, *arch;
  bool torch;
  bool torch_ops;       /* --torch-ops: P_ops.py, the step as torch ops (emit_ops.c) */
  bool train_noise;     /* --set train_noise=true: gumbel_sigmoid draws noise from a seed */
} EmitArgs;

static bool is_identifier(const char *s) {
  if (!*s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
  return true;
}

static bool one_of(const char *v, const char *const *names) {
  for (; *names; names++)
    if (!strcmp(v, *names)) return true;
  return false;
}

static int parse_emit_args(int argc, char **argv, EmitArgs *a) {
  static const char *const targets[] = {"cpu", "cuda", NULL};
  static const char *const cpus[] = {"generic", "x86-64-v3", "x86-64-v4", "native", NULL};
  a->target = "cpu", a->cpu = "x86-64-v3", a->arch = "sm_80";
  for (int i = 0; i < argc; i++) {
    int r = cli_cell_arg(&a->cell, argc, argv, &i);
    if (r < 0) return 2;
    if (r) continue;
    const char *f = argv[i];
    bool takes = !strcmp(f, "--out") || !strcmp(f, "--target") || !strcmp(f, "--name") || !strcmp(f, "--cpu") ||
                 !strcmp(f, "--arch");
    if (takes && i + 1 >= argc) return cli_usage_error("%s needs a value", f);
    if (!strcmp(f, "--out")) a->out = argv[++i];
    else if (!strcmp(f, "--target")) a->target = argv[++i];
    else if (!strcmp(f, "--name")) a->name = argv[++i];
    else if (!strcmp(f, "--cpu")) a->cpu = argv[++i];
    else if (!strcmp(f, "--arch")) a->arch = argv[++i];
    else if (!strcmp(f, "--torch")) a->torch = true;
    else if (!strcmp(f, "--torch-ops")) a->torch_ops = true;
    else if (f[0] == '-' && f[1]) return cli_usage_error("unknown flag '%s'", f);
    else if (!a->cell.file) a->cell.file = f;
    else return cli_usage_error("unexpected argument '%s'", f);
  }
  if (!a->cell.file) return cli_usage_error("%s", "emit needs a .cell file");
  if (!a->out || !a->out[0]) return cli_usage_error("%s", "emit needs --out DIR");
  if (!one_of(a->target, targets)) return cli_usage_error("--target is cpu or cuda, not '%s'", a->target);
  if (!one_of(a->cpu, cpus)) return cli_usage_error("--cpu is generic, x86-64-v3, x86-64-v4 or native, not '%s'", a->cpu);
  if (strncmp(a->arch, "sm_", 3) || !a->arch[3] || strspn(a->arch + 3, "0123456789") != strlen(a->arch + 3))
    return cli_usage_error("--arch is sm_ and a number (sm_80, sm_90), not '%s'", a->arch);
  if (a->name && (!is_identifier(a->name) || strlen(a->name) > 64))
    return cli_usage_error("--name is a C identifier of at most 64 characters, not '%s'", a->name);
  for (int i = 0; i < a->cell.nsets; i++) { /* train_noise is emit's own setting, not a cell option */
    if (strcmp(a->cell.sets[i].name, "train_noise")) continue;
    const char *v = a->cell.sets[i].value;
    if (strcmp(v, "true") && strcmp(v, "false")) return cli_usage_error("--set train_noise is true or false, not '%s'", v);
    a->train_noise = !strcmp(v, "true");
    a->cell.sets[i--] = a->cell.sets[--a->cell.nsets];
  }
  if (a->torch && strcmp(a->target, "cpu")) return cli_usage_error("--torch needs --target cpu (it loads libP.so), not '%s'", a->target);
  return 0;
}

/* ---- the output directory: a fresh one beside --out, moved into place at the end ---- */

/* ---- P.json ---- */

static cJSON *shape_of(int rank, const int *n, bool lead_b) {
  cJSON *s = cJSON_CreateArray();
  if (lead_b) cJSON_AddItemToArray(s, cJSON_CreateString("B"));
  for (int i = 0; i < rank; i++) cJSON_AddItemToArray(s, cJSON_CreateNumber(n[i]));
  return s;
}

static char *json_text(const Cell *c, const EmitArgs *a) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "abi", 2); /* P_forward_ex, P_backward_ex (cuda: with the stream) */
  cJSON_AddStringToObject(j, "cell", c->name);
  cJSON_AddStringToObject(j, "name", a->name);
  cJSON_AddStringToObject(j, "target", a->target);
  if (!strcmp(a->target, "cpu")) cJSON_AddStringToObject(j, "cpu", a->cpu);
  else cJSON_AddStringToObject(j, "arch", a->arch);
  cJSON_AddStringToObject(j, "mode", c->mode == MODE_SCAN ? "scan" : "sequential");
  cJSON_AddBoolToObject(j, "train_noise", a->train_noise);
  cJSON *dims = cJSON_AddObjectToObject(j, "dims"), *opts = cJSON_AddObjectToObject(j, "options");
  for (int i = 0; i < c->ndims; i++) cJSON_AddNumberToObject(dims, c->dims[i].name, (double)c->dims[i].value);
  for (int i = 0; i < c->noptions; i++) {
    const OptionInfo *o = &c->options[i];
    if (o->type == OPT_BOOL) cJSON_AddBoolToObject(opts, o->name, o->value != 0);
    else cJSON_AddNumberToObject(opts, o->name, o->value);
  }
  cJSON *ps = cJSON_AddArrayToObject(j, "params"), *ss = cJSON_AddArrayToObject(j, "states");
  for (int i = 0; i < c->nparams; i++) {
    cJSON *p = cJSON_CreateObject();
    char buf[128];
    cJSON_AddStringToObject(p, "name", c->params[i].name);
    cJSON_AddStringToObject(p, "field", emit_field(c->params[i].name, buf, sizeof buf));
    cJSON_AddItemToObject(p, "shape", shape_of(c->params[i].rank, c->params[i].n, false));
    cJSON_AddBoolToObject(p, "complex", c->params[i].cplx);
    if (c->params[i].buffer) cJSON_AddBoolToObject(p, "buffer", true); /* only where true, as in check --json */
    if (c->params[i].frozen) cJSON_AddBoolToObject(p, "frozen", true);
    cJSON_AddItemToArray(ps, p);
  }
  for (int i = 0; i < c->nstates; i++) {
    cJSON *s = cJSON_CreateObject();
    char buf[128];
    cJSON_AddStringToObject(s, "name", c->states[i].name);
    cJSON_AddStringToObject(s, "field", emit_field(c->states[i].name, buf, sizeof buf));
    if (c->states[i].param >= 0) cJSON_AddStringToObject(s, "learned", c->params[c->states[i].param].name);
    if (c->states[i].hist_lag) { /* prev and conv: the last `steps` steps of `of`, oldest first */
      cJSON *h = cJSON_AddObjectToObject(s, "history");
      cJSON_AddStringToObject(h, "of", c->states[i].hist_name);
      cJSON_AddNumberToObject(h, "steps", c->states[i].hist_lag);
      const Node *v = &c->g.nodes[c->states[i].hist_of];
      cJSON_AddItemToObject(h, "shape", shape_of(v->rank, v->n, false)); /* the value's: [K * its elements] in all */
    }
    cJSON_AddItemToObject(s, "shape", shape_of(c->states[i].rank, c->states[i].n, false));
    cJSON_AddBoolToObject(s, "complex", c->states[i].cplx);
    cJSON_AddItemToArray(ss, s);
  }
  cJSON_AddNumberToObject(j, "input", c->input_size);
  cJSON_AddNumberToObject(j, "output", c->output_size);
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  size_t n = strlen(text);
  text = realloc(text, n + 2);
  CHECK(text);
  strcpy(text + n, "\n");
  return text;
}

/* ---- the workspace formula: libP.so asked at three sizes where alignment adds nothing ---- */

static int workspace_formula(const char *so, const char *name, WsFormula *f) {
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  char sym[96];
  snprintf(sym, sizeof sym, "%s_workspace_bytes", name);
  size_t (*ws)(int, int) = (size_t (*)(int, int))dlsym(h, sym);
  int rc = -1;
  if (ws) {
    double w0 = (double)ws(64, 64), wt = (double)ws(128, 64), wb = (double)ws(64, 128);
    f->per_tb = (wt - w0) / (64.0 * 64.0);
    f->per_b = (wb - w0 - f->per_tb * 64.0 * 64.0) / 64.0;
    f->fixed = w0 - f->per_tb * 64.0 * 64.0 - f->per_b * 64.0;
    f->example = (double)ws(100, 32);
    rc = 0;
  }
  dlclose(h);
  return rc;
}

static int write_text(const char *dir, const char *name, const char *suffix, const char *text) {
  char *path = xmalloc(strlen(dir) + strlen(name) + strlen(suffix) + 2);
  sprintf(path, "%s/%s%s", dir, name, suffix);
  char err[512];
  int rc = fsout_write_file(path, text, strlen(text), err, sizeof err);
  if (rc < 0) diag_plain("%s", err);
  free(path);
  return rc < 0 ? 3 : 0;
}

static int write_ops(Cell *c, const EmitArgs *a, const char *tmp) {
  char err[512];
  char *t = emit_ops_text(c, err, sizeof err);
  if (!t) return diag_plain("cellc emit --torch-ops: %s", err), 1;
  int rc = write_text(tmp, a->name, "_ops.py", t);
  free(t);
  return rc;
}

/* The back end's files, then P.h, P.json and P_torch.py, into tmp. 0 or the exit status. */
static int emit_files(Cell *c, EmitArgs *a, const char *tmp) {
  char err[1024];
  PipelineOptions po = {.backend = backend_find(a->target), .training = a->train_noise};
  CHECK(po.backend);
  EmitOptions eo = {.name = a->name, .dir = tmp, .cpu = a->cpu, .arch = a->arch, .train_noise = a->train_noise};
  if (pipeline_emit(c, &po, &eo, err, sizeof err) < 0) {
    diag_plain("%s", err);
    return 3;
  }
  WsFormula f = {0};
  bool cpu = !strcmp(a->target, "cpu");
  if (cpu) {
    char *so = xmalloc(strlen(tmp) + strlen(a->name) + 16);
    sprintf(so, "%s/lib%s.so", tmp, a->name);
    int r = workspace_formula(so, a->name, &f);
    free(so);
    if (r < 0) return diag_plain("internal: the emitted lib%s.so does not load or lacks %s_workspace_bytes", a->name, a->name), 70;
  }
  EmitInfo info = {c, a->name, a->target, a->cpu, a->arch, cpu ? &f : NULL, a->train_noise};
  char *h = emit_header_text(&info), *j = json_text(c, a);
  int rc = write_text(tmp, a->name, ".h", h);
  if (!rc) rc = write_text(tmp, a->name, ".json", j);
  free(h), free(j);
  if (!rc && a->torch) {
    char *t = emit_torch_text(&info);
    rc = write_text(tmp, a->name, "_torch.py", t);
    free(t);
  }
  if (!rc && a->torch_ops) rc = write_ops(c, a, tmp);
  return rc;
}

/* cellc emit: arguments -> check (every dim bound) -> the files in a fresh directory -> --out. */
/* Two states whose C fields coincide (a history hist.u and a declared state hist_u): located. */
static bool state_fields_clash(const Cell *c) {
  for (int i = 0; i < c->nstates; i++)
    for (int j = 0; j < i; j++) {
      char fi[128], fj[128];
      if (strcmp(emit_field(c->states[i].name, fi, sizeof fi), emit_field(c->states[j].name, fj, sizeof fj))) continue;
      const StateInfo *h = c->states[i].hist_lag ? &c->states[i] : &c->states[j];
      const StateInfo *o = h == &c->states[i] ? &c->states[j] : &c->states[i];
      diag_error(o->loc, "cellc emit: state '%s' and the history '%s' (of prev/conv) are both the C field '%s'; rename the state", o->name,
                 h->name, fi);
      return true;
    }
  return false;
}

int cmd_emit(int argc, char **argv) {
  EmitArgs a = {0};
  int rc = parse_emit_args(argc, argv, &a);
  if (rc) return rc;
  Arena arena = {0};
  Cell *c = cli_compile_cell(&arena, &a.cell, a.train_noise);
  if (!c) return arena_free(&arena), 1;
  if (state_fields_clash(c)) return cell_free(c), arena_free(&arena), 1;
  if (!a.name) a.name = c->name;
  char err[PATH_MAX + 256];
  char *tmp = fsout_dir_begin(a.out, err, sizeof err);
  rc = tmp ? emit_files(c, &a, tmp) : (diag_plain("%s", err), 3);
  if (!rc && fsout_dir_commit(tmp, a.out, true, err, sizeof err) < 0) rc = (diag_plain("%s", err), 3);
  if (tmp) fsout_remove_dir(tmp); /* gone already after a rename of the whole directory */
  if (!rc) printf("emitted %s (cell '%s', target %s) into %s\n", a.name, c->name, a.target, a.out);
  free(tmp);
  cell_free(c);
  arena_free(&arena);
  return rc;
}
