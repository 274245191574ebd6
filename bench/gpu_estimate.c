/* gpu_estimate.c: docs/gpu.md's estimates. For a stdlib cell at B, T, H (D = H), walks the CUDA back
 * end's plan step by step and prints, per step, its launches, the bytes it moves and the FLOPs it
 * does, and its time on an H100 SXM from those alone: max(bytes / 3.35 TB/s, FLOPs / 67 TFLOP/s)
 * plus 3 us a launch (the floor of a small kernel or cuBLAS call, launch and tail). Sequential
 * mode's per-step phases run as the persistent kernel (one launch, a block a batch row on one SM):
 * per step, the block's weight bytes from L2 at 110 GB/s an SM (64 B a clock at 1.75 GHz) or its
 * FLOPs at 0.5 TFLOP/s an SM (67 / 132), whichever is longer, plus 0.5 us of barriers; with
 * --launches, a launch per step and plan step instead (CELLC_CUDA_PERSISTENT=0).
 *   gpu_estimate FILE.cell B T H [--set k=v] [--mode sequential] [--steps] [--launches]
 * Elementwise FLOPs count one per op and element (a transcendental counts one, too). */
#include <string.h>

#include "pipeline.h"
#include "plan.h"
#include "support.h"

#define HBM 3.35e12
#define FLOPS 67e12
#define LAUNCH 3e-6
#define SM_L2 110e9
#define SM_FLOPS (67e12 / 132)
#define STEP_SYNC 0.5e-6

typedef struct Cost {
  double bytes, flops, launches;
  double extra_s;          /* the persistent kernel's time, outside the bandwidth model */
} Cost;

static double secs(Cost c) {
  double m = c.bytes / HBM, f = c.flops / FLOPS;
  return (m > f ? m : f) + c.launches * LAUNCH + c.extra_s;
}

static int width_of(const Plan *pl, int slot) { return pl->arrays[pl->slots[slot].array].width; }

static Cost step_cost(const Plan *pl, const PStep *st, double rows) {
  Program *p = pl->p;
  Graph *g = &p->g;
  Cost c = {0, 0, 1, 0};
  switch (st->kind) {
  case PS_ELEM: {
    Kernel *K = &pl->kernels[st->kernel];
    bool *seen = xcalloc((size_t)g->nnodes, sizeof(bool));
    for (int i = 0; i < K->n; i++) {
      Node *n = graph_node(g, K->nodes[i]);
      c.flops += rows * node_numel(n);
      int ids[3] = {K->nodes[i], n->a[0], n->a[1]};
      for (int j = 0; j < 3; j++) {
        int id = ids[j];
        if (id < 0 || seen[id] || pl->home[id] < 0) continue;
        seen[id] = true;
        if (width_of(pl, pl->home[id])) c.bytes += rows * 4.0 * node_numel(graph_node(g, id));
      }
    }
    free(seen);
    break;
  }
  case PS_GEMM:
  case PS_GEMM_T: {
    Node *n = graph_node(g, st->node), *m = graph_node(g, n->a[0]);
    double nO = st->mat >= 0 ? st->ncols : m->n[0], nI = m->n[1];
    c.flops = 2 * rows * nO * nI;
    c.bytes = 4 * (rows * (nO + nI) + nO * nI + (st->accumulate ? rows * (st->kind == PS_GEMM ? nO : nI) : 0));
    break;
  }
  case PS_OUTER_ACC: {
    Node *o = graph_node(g, st->node);
    c.flops = 2 * rows * o->n[0] * o->n[1];
    c.bytes = 4 * (rows * (o->n[0] + o->n[1]) + 2.0 * o->n[0] * o->n[1]);
    break;
  }
  case PS_COLSUM: {
    double e = node_numel(graph_node(g, st->node));
    c.flops = rows * e, c.bytes = 4 * rows * e;
    break;
  }
  case PS_SCAN:
  case PS_RSCAN: {
    int q = p->spart_of[st->state];
    double parts = p->sparts[q].cplx ? 2 : 1, e = rows * p->sparts[q].size * parts;
    c.bytes = 4 * 5 * e; /* chunks: a, b read; apply: a, b read, h written */
    c.flops = (p->sparts[q].cplx ? 8 : 2) * 2 * e / parts;
    c.launches = 3;
    break;
  }
  case PS_COPY: c.bytes = 8 * rows * node_numel(graph_node(g, st->node)); break;
  case PS_ZERO: c.bytes = 4 * rows * width_of(pl, st->dst); break;
  default: break;
  }
  return c;
}

static const char *kind_name(PStepKind k) {
  static const char *names[] = {"elem", "gemm", "gemm_t", "outer_acc", "colsum", "scan", "rscan", "copy", "zero"};
  return names[k];
}

/* A per-step phase as the persistent kernel: one launch; per step and batch row (a block), the
 * weights its GEMMs read from L2 and its FLOPs on one SM. */
static Cost persistent_cost(const Plan *pl, const Phase *ph, double B, double T, const char *name, bool print) {
  Cost total = {0, 0, ph->n ? 1 : 0, 0};
  if (!ph->n) return total;
  double wbytes = 0, flops = 0;
  for (int i = 0; i < ph->n; i++) {
    const PStep *st = &ph->steps[i];
    Cost c = step_cost(pl, st, 1);
    flops += c.flops;
    if (st->kind == PS_GEMM || st->kind == PS_GEMM_T) {
      Node *n = graph_node(&pl->p->g, st->node), *m = graph_node(&pl->p->g, n->a[0]);
      wbytes += 4.0 * (st->mat >= 0 ? st->ncols : m->n[0]) * m->n[1];
    }
  }
  double a = wbytes / SM_L2, f = flops / SM_FLOPS, step = (a > f ? a : f) + STEP_SYNC;
  double waves = B > 132 ? (B + 131) / 132 : 1;
  total.flops = flops * B * T;
  total.extra_s = T * step * waves;
  total.bytes = 0; /* HBM traffic of the step's rows is small next to the L2-bound weights */
  if (print)
    printf("  %-9s persistent launches 1  weights %.0f KB a step from L2  %.3f us a step  %8.3f ms\n", name, wbytes / 1e3,
           1e6 * step, 1e3 * secs(total));
  return total;
}

/* A phase's cost (times `times`, rows each), printed per step with --steps. */
static Cost phase_cost(const Plan *pl, const Phase *ph, double rows, double times, const char *name, bool print) {
  Cost total = {0};
  for (int i = 0; i < ph->n; i++) {
    Cost c = step_cost(pl, &ph->steps[i], rows);
    c.bytes *= times, c.flops *= times, c.launches *= times;
    if (print)
      printf("  %-9s %-9s k%-3d launches %6.0f  %8.2f MB  %8.3f GFLOP  %8.3f ms\n", name, kind_name(ph->steps[i].kind),
             ph->steps[i].kind == PS_ELEM ? ph->steps[i].kernel : -1, c.launches, c.bytes / 1e6, c.flops / 1e9,
             1e3 * secs(c));
    total.bytes += c.bytes, total.flops += c.flops, total.launches += c.launches;
  }
  return total;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: gpu_estimate FILE.cell B T H [--set k=v] [--mode sequential] [--steps]\n");
    return 2;
  }
  int B = atoi(argv[2]), T = atoi(argv[3]), H = atoi(argv[4]);
  Binding sets[2];
  int nsets = 0;
  bool seq = false, steps = false, launches = false;
  for (int i = 5; i < argc; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      char *kv = argv[++i], *eq = strchr(kv, '=');
      *eq = 0;
      sets[nsets++] = (Binding){kv, eq + 1};
    } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) seq = !strcmp(argv[++i], "sequential");
    else if (!strcmp(argv[i], "--steps")) steps = true;
    else if (!strcmp(argv[i], "--launches")) launches = true;
  }
  Arena arena = {0};
  Module *m = check_load(&arena, argv[1], "stdlib");
  if (!m) return 1;
  const Src *src;
  const CellAst *ast = check_find_cell(m, NULL, &src);
  char hs[16];
  snprintf(hs, sizeof hs, "%d", H);
  Binding dims[2] = {{"H", hs}, {"D", hs}};
  CheckOptions o = {0};
  o.sets = sets, o.nsets = nsets, o.dims = dims, o.ndims = 2, o.need_bound = true, o.force_sequential = seq;
  Cell *c = check_cell(&arena, src, ast, &o);
  if (!c) return 1;
  bool scan = c->mode == MODE_SCAN;
  Program *p = lower_cell(c, false, scan);
  ad_differentiate(p);
  Plan *pl = plan_new(p, &(PlanOptions){.scan = scan});
  double all = (double)T * B;
  Cost f[3], b[4];
  f[0] = phase_cost(pl, &pl->fwd_pre, all, 1, "fwd_pre", steps);
  f[1] = launches ? phase_cost(pl, &pl->fwd_step, B, T, "fwd_step", steps)
                  : persistent_cost(pl, &pl->fwd_step, B, T, "fwd_step", steps);
  f[2] = phase_cost(pl, &pl->fwd_post, all, 1, "fwd_post", steps);
  b[0] = phase_cost(pl, &pl->bwd_pre, all, 1, "bwd_pre", steps);
  b[1] = launches ? phase_cost(pl, &pl->bwd_step, B, T, "bwd_step", steps)
                  : persistent_cost(pl, &pl->bwd_step, B, T, "bwd_step", steps);
  b[2] = phase_cost(pl, &pl->bwd_post, all, 1, "bwd_post", steps);
  b[3] = phase_cost(pl, &pl->bwd_first, B, 1, "bwd_first", steps);
  Cost F = {0}, Bk = {0};
  for (int i = 0; i < 3; i++)
    F.bytes += f[i].bytes, F.flops += f[i].flops, F.launches += f[i].launches, F.extra_s += f[i].extra_s;
  for (int i = 0; i < 4; i++)
    Bk.bytes += b[i].bytes, Bk.flops += b[i].flops, Bk.launches += b[i].launches, Bk.extra_s += b[i].extra_s;
  printf("| %s | %s%s | %d | %d | %.0f | %.1f | %.0f | %.3f | %.0f | %.1f | %.0f | %.3f | %.0f |\n", c->name,
         scan ? "scan" : "sequential", !scan && launches ? " (launches)" : "", T, H, F.launches, F.bytes / all, F.flops / all, 1e3 * secs(F), Bk.launches,
         Bk.bytes / all, Bk.flops / all, 1e3 * secs(Bk), all / (secs(F) + secs(Bk)) / 1e6);
  plan_free(pl);
  program_free(p);
  cell_free(c);
  arena_free(&arena);
  return 0;
}
