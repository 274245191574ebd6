/* emit_cpu.c: the CPU back end's `emit` (cellc emit --target cpu, spec/emit.md): the program's plan
 * as a flat table (compiler/plan/plan_table.h, plan_table_build), its kernels and static values as LLVM functions (cg_llvm.c), and
 * the standalone executor (standalone/executor.c, LLVM bitcode embedded at build time) linked into
 * one module, written as P.o for the chosen CPU; libP.so is P.o linked by the system's cc. */
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

#include "cg_llvm.h"
#include "cpu.h"
#include "emit_cpu.h"

extern char **environ;

/* ---- the static values as two more kernels ---- */

static bool kernel_op(Op op) {
  return op_is_elementwise(op) || op == OP_BCAST || op == OP_SUM || op == OP_CONCAT || op == OP_SLICE || op == OP_MATVEC ||
         op == OP_MATVEC_T || op == OP_OUTER || op == OP_VIEW || op == OP_VIEWT || op == OP_RSUM || op == OP_RMAX ||
         op == OP_BMM;
}

/* The static nodes of one side (forward: before the sequence; backward: after the sums), or -1
 * with a message when one is an op the generated kernels do not compute. */
/* What the kernels are built from. */
typedef struct Builder {
  const Plan *pl;
  Program *p;
  char *err;
  size_t errlen;
} Builder;

static int static_nodes(Builder *b, const bool *sel, int *nodes) {
  Graph *g = &b->p->g;
  int n = 0;
  for (int id = 0; id < g->nnodes; id++) {
    Op op = graph_node(g, id)->op;
    if (!sel[id] || op == OP_PARAM || op == OP_ACC || op == OP_CONST) continue;
    if (!kernel_op(op)) {
      snprintf(b->err, b->errlen, "emit: a static value of op %s is not supported in emitted code yet", op_name(op));
      return -1;
    }
    nodes[n++] = id;
  }
  return n;
}

/* ---- libP.so ---- */

static int run_cc(const char *so, const char *obj, char *err, size_t errlen) {
  char *argv[] = {"cc", "-shared", "-o", (char *)so, (char *)obj, "-lopenblas", "-lm", NULL};
  pid_t pid;
  int st = 0;
  if (posix_spawnp(&pid, "cc", NULL, NULL, argv, environ) != 0) {
    snprintf(err, errlen, "cannot run cc to link %s (a C compiler is needed for the shared library)", so);
    return -1;
  }
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(err, errlen, "cc -shared failed to link %s from %s", so, obj);
    return -1;
  }
  return 0;
}

/* ---- the entry ---- */

static const char *cpu_name(const char *cpu) {
  if (!cpu || !strcmp(cpu, "x86-64-v3")) return "x86-64-v3";
  if (!strcmp(cpu, "generic")) return "x86-64";
  if (!strcmp(cpu, "native")) return NULL;
  return cpu;
}

/* The functions of the module: the plan's kernels k0, k1, ..., then the static values' kernels
 * (kstatic_fwd, kstatic_bwd: numbers nkernels and on, where there are any). */
typedef struct Kernels {
  int *nodes[2], n[2];     /* the static nodes, forward and backward */
  CgNodes extra[2];
  int nextra;
  char **names;            /* cellc_kernels[i] is the function named names[i] */
  int nnames;
} Kernels;

static int kernels_new(Builder *b, Kernels *k) {
  const Plan *pl = b->pl;
  memset(k, 0, sizeof *k);
  k->names = xcalloc((size_t)pl->nkernels + 3, sizeof(char *));
  for (int i = 0; i < pl->nkernels; i++) {
    k->names[k->nnames] = xmalloc(32);
    snprintf(k->names[k->nnames++], 32, "k%d", i);
  }
  for (int s = 0; s < 2; s++) {
    k->nodes[s] = xmalloc(sizeof(int) * ((size_t)b->p->g.nnodes + 1));
    if ((k->n[s] = static_nodes(b, s ? pl->static_bwd : pl->static_fwd, k->nodes[s])) < 0) return -1;
    if (!k->n[s]) continue;
    const char *name = s ? "kstatic_bwd" : "kstatic_fwd";
    k->extra[k->nextra++] = (CgNodes){name, k->nodes[s], k->n[s]};
    k->names[k->nnames++] = xstrdup(name);
  }
  return 0;
}

static void kernels_free(Kernels *k) {
  for (int i = 0; i < k->nnames; i++) free(k->names[i]);
  free(k->names), free(k->nodes[0]), free(k->nodes[1]);
}

/* P.o: the module with the executor linked in, its entry points renamed P_forward, ... */
static int write_object(CgModule *m, const Kernels *k, const PlanTable *table, const EmitOptions *o, const char *obj, char *err,
                        size_t errlen) {
  enum { NEX = 6 };
  char ex[NEX][2][96];
  const char *exports[2 * NEX];
  const char *what[NEX] = {"forward", "forward_ex", "backward", "backward_ex", "workspace_bytes", "strerror"};
  for (int i = 0; i < NEX; i++) {
    snprintf(ex[i][0], sizeof ex[i][0], "cellc_exec_%s%s", what[i], i < 2 && o->train_noise ? "_seeded" : "");
    snprintf(ex[i][1], sizeof ex[i][1], "%s_%s", o->name, what[i]);
    exports[2 * i] = ex[i][0], exports[2 * i + 1] = ex[i][1];
  }
  CgLibrary lib = {cellc_executor_bc, (size_t)(cellc_executor_bc_end - cellc_executor_bc), table->data, table->n,
                   (const char *const *)k->names, k->nnames, exports, NEX, cpu_name(o->cpu), obj};
  return cg_llvm_emit_library(m, &lib, err, errlen);
}

/* plan -> table and kernels -> P.o (executor linked in) -> libP.so. */
int cpu_emit(Program *p, const BackendOptions *bo, const EmitOptions *o, char *err, size_t errlen) {
  CHECK(!p->nnoise || o->train_noise); /* lowered for evaluation unless train_noise */
  Plan *pl = plan_new(p, &(PlanOptions){.scan = bo->scan, .gates = false});
  Builder b = {.pl = pl, .p = p, .err = err, .errlen = errlen};
  Kernels k;
  PlanTable table = {0};
  CgModule *m = NULL;
  int rc = kernels_new(&b, &k);
  if (!rc) {
    table = plan_table_build(pl, p);
    EtHeader *h = (EtHeader *)table.data;
    h->kstatic_fwd = k.n[0] > 0 ? pl->nkernels : -1;
    h->kstatic_bwd = k.n[1] > 0 ? pl->nkernels + (k.n[0] > 0) : -1;
    if (h->y_array < 0) snprintf(err, errlen, "emit: the cell's output is not computed per step"), rc = -1;
  }
  if (!rc && !(m = cg_llvm_build_with(pl, k.extra, k.nextra, err, errlen))) rc = -1;
  char *obj = xmalloc(strlen(o->dir) + strlen(o->name) + 16), *so = xmalloc(strlen(o->dir) + strlen(o->name) + 16);
  sprintf(obj, "%s/%s.o", o->dir, o->name), sprintf(so, "%s/lib%s.so", o->dir, o->name);
  if (!rc) rc = write_object(m, &k, &table, o, obj, err, errlen);
  if (!rc) rc = run_cc(so, obj, err, errlen);
  cg_llvm_module_free(m);
  kernels_free(&k);
  free(obj), free(so), free(table.data);
  plan_free(pl);
  return rc;
}
