/* gpu_estimate.c: docs/gpu.md's estimates. For a stdlib cell at B, T, H (D = H), walks the CUDA back
 * end's plan step by step and prints, per step, its launches, the bytes it moves and the FLOPs it
 * does, and its time on an H100 SXM from those alone: max(bytes / 3.35 TB/s, FLOPs / 67 TFLOP/s)
 * plus 3 us a launch (the floor of a small kernel or cuBLAS call, launch and tail). Sequential
 * mode's per-step phases run as the persistent kernel (one launch, a block a batch row on one SM):
 * per step, the block's weight bytes from L2 at 110 GB/s an SM (64 B a clock at 1.75 GHz) or its
 * FLOPs at 0.5 TFLOP/s an SM (67 / 132), whichever is longer, plus 0.5 us of barriers; with
 * --launches, a launch per step and plan step instead (CELLC_CUDA_PERSISTENT=0).
 *   gpu_estimate FILE.cell B T H [--set k=v] [--mode sequential] [--steps] [--launches]
 *                [--dims NAME=N,...] [--chunked L]
 * Elementwise FLOPs count one per op and element (a transcendental counts one, too).
 * --dims binds the cell's dims (instead of H and D = H). --chunked L: the chunked form at chunks of
 * L steps (docs/gpu.md, "The chunked form"): its in and out programs' plans as above, and the chunk
 * ops of cellc_chunk.cu (chunk_op_cost below). */
#include <math.h>
#include <string.h>

#include "cuda.h"
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

/* cellc_chunk.cu's work, per chunked state: per chunk of n sub-steps (P = n (n + 1) / 2 pairs) a
 * block on one SM (its shared memory leaves room for one), each product a loop of threads over its
 * outputs with both operands from shared memory: at most 128 B a clock of shared loads, 16 FMAs a
 * clock at 1.75 GHz (56 GFLOP/s an SM, an eighth of its FP32 peak); every e^{b_i - b_j} of a decay
 * per key an expf on the SFUs, 16 a clock (28 G/s an SM), not overlapped; the B nh nc blocks of a
 * kernel in waves of 132. Per direction a local kernel (the chunk's part of the pass), the pass
 * (a thread per state entry, nc dependent multiply-adds with four chunks' loads in flight, about
 * 0.6 us a load: 0.15 us a chunk, or its bytes at the HBM rate), then the reads or the gradients:
 * six launches. */
#define SM_SMEM_FLOPS 56e9
#define SM_EXPS 28e9
#define PASS_CHUNK_S 0.15e-6
typedef struct OpCost {
  double flops, exps, bytes, blocks, s;
} OpCost;

/* a kernel of `blocks` blocks of flops and exps each, moving bytes */
static double kernel_s(double blocks, double flops, double exps, double bytes) {
  double c = ceil(blocks / 132) * (flops / SM_SMEM_FLOPS + exps / SM_EXPS), m = bytes / HBM;
  return (c > m ? c : m) + LAUNCH;
}

static OpCost chunk_op_cost(const ChunkLayout *l, double B, double T, int L) {
  double E = l->nterms + l->nreads - 1, n = (double)L * E, K = l->K, V = l->V, w = l->per_key ? K : 1, P = n * (n + 1) / 2;
  double nc = ceil(T * E / n), pk = l->per_key, heads = B * l->nh, blocks = heads * nc, kv = K * V;
  double scores = P * (pk ? 3 * K : 2 * K), sexp = pk ? P * K : P, dexp = 2 * n * w;
  double local = 3 * n * kv;
  double reads = scores + n * V * (3 * K + (n + 1));
  double grads = scores + 2 * P * V + n * V * ((n + 1) + 3 * K) + 2 * n * K * (2 * V + 1 + 1.5 * (n + 1)) + 2 * kv;
  double rexp = sexp + dexp, gexp = sexp + (pk ? 2 * P * K : P) + dexp;
  double in = 4 * T * E * (2 * K + V + w), pass_b = 4 * 2 * nc * kv; /* a chunk's inputs; the pass's loc and bnd a head */
  OpCost c = {0};
  c.blocks = blocks;
  c.flops = blocks * (2 * local + reads + grads) + heads * 4 * nc * kv;
  c.exps = blocks * (2 * dexp + rexp + gexp);
  c.bytes = heads * (4 * in + 4 * T * E * 2 * V + 2 * pass_b + 2 * 4 * nc * kv); /* and the reads, their gradients, loc */
  double pass = nc * PASS_CHUNK_S > heads * pass_b / HBM ? nc * PASS_CHUNK_S : heads * pass_b / HBM;
  c.s = kernel_s(blocks, local, dexp, heads * (in + 4 * nc * kv)) + (pass + LAUNCH) +
        kernel_s(blocks, reads, rexp, heads * (in + 4 * (nc + 1) * kv + 4 * T * E * V)) +
        kernel_s(blocks, local, dexp, heads * (in + 4 * T * E * V + 4 * nc * kv)) + (pass + LAUNCH) +
        kernel_s(blocks, grads, gexp, heads * (2 * in + 4 * T * E * V + 4 * (2 * nc + 1) * kv));
  return c;
}

/* A lowered program's plan, forward and backward over T B rows (the chunked form's in or out) */
static Cost program_cost(Program *p, double B, double T) {
  ad_differentiate(p);
  PlanOptions po = cuda_plan_options(true, false);
  Plan *pl = plan_new(p, &po);
  double all = T * B;
  const Phase *ph[4] = {&pl->fwd_pre, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_post};
  Cost t = {0};
  for (int i = 0; i < 4; i++) {
    Cost c = phase_cost(pl, ph[i], all, 1, "", false);
    t.bytes += c.bytes, t.flops += c.flops, t.launches += c.launches;
  }
  const Phase *st[2] = {&pl->fwd_step, &pl->bwd_step};
  for (int i = 0; i < 2; i++) {
    Cost c = persistent_cost(pl, st[i], B, T, "", false);
    t.flops += c.flops, t.launches += c.launches, t.extra_s += c.extra_s;
  }
  plan_free(pl);
  program_free(p);
  return t;
}

/* --chunked: one table row (docs/gpu.md, "The chunked form") */
static void chunked_row(Cell *c, const char *dims, int B, int T, int L) {
  double all = (double)T * B;
  Cost in = program_cost(lower_cell_part(c, false, true, LOWER_CHUNK_IN), B, T);
  Cost out = program_cost(lower_cell_part(c, false, true, LOWER_CHUNK_OUT), B, T);
  ChunkLayout lay[CHUNK_LAYOUT_MAX];
  int nl = lower_chunk_layout(c, lay, CHUNK_LAYOUT_MAX);
  OpCost op = {0};
  for (int i = 0; i < nl; i++) {
    OpCost o = chunk_op_cost(&lay[i], B, T, L);
    op.flops += o.flops, op.exps += o.exps, op.bytes += o.bytes, op.blocks += o.blocks, op.s += o.s;
  }
  double prog = secs(in) + secs(out), total = prog + op.s;
  printf("| %s | %s | %d | %d | %d | %.0f | %.0f | %.0f | %.3f | %.0f | %.0f | %.0f | %.3f | %.3f | %.3f | %.2f |\n", c->name, dims, T,
         B, L, in.launches + out.launches, (in.bytes + out.bytes) / all, (in.flops + out.flops) / all, 1e3 * prog, op.blocks,
         op.flops / all, op.exps / all, 1e3 * op.flops / FLOPS, 1e3 * op.s, 1e3 * total, all / total / 1e6);
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
  const char *dimarg = NULL;
  int chunk = 0;
  for (int i = 5; i < argc; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      char *kv = argv[++i], *eq = strchr(kv, '=');
      *eq = 0;
      sets[nsets++] = (Binding){kv, eq + 1};
    } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) seq = !strcmp(argv[++i], "sequential");
    else if (!strcmp(argv[i], "--steps")) steps = true;
    else if (!strcmp(argv[i], "--launches")) launches = true;
    else if (!strcmp(argv[i], "--dims") && i + 1 < argc) dimarg = argv[++i];
    else if (!strcmp(argv[i], "--chunked") && i + 1 < argc) chunk = atoi(argv[++i]);
  }
  Arena arena = {0};
  Module *m = check_load(&arena, argv[1], "stdlib");
  if (!m) return 1;
  const Src *src;
  const CellAst *ast = check_find_cell(m, NULL, &src);
  char hs[16];
  snprintf(hs, sizeof hs, "%d", H);
  Binding dims[8] = {{"H", hs}, {"D", hs}};
  int ndims = 2;
  char dbuf[256];
  if (dimarg) { /* NAME=N,... */
    snprintf(dbuf, sizeof dbuf, "%s", dimarg);
    ndims = 0;
    for (char *save = NULL, *tok = strtok_r(dbuf, ",", &save); tok && ndims < 8; tok = strtok_r(NULL, ",", &save)) {
      char *eq = strchr(tok, '=');
      if (!eq) return 2;
      *eq = 0;
      dims[ndims++] = (Binding){tok, eq + 1};
    }
  }
  CheckOptions o = {0};
  o.sets = sets, o.nsets = nsets, o.dims = dims, o.ndims = ndims, o.need_bound = true, o.force_sequential = seq;
  o.force_chunked = chunk > 0;
  Cell *c = check_cell(&arena, src, ast, &o);
  if (!c) return 1;
  if (chunk > 0) {
    chunked_row(c, dimarg ? dimarg : "", B, T, chunk);
    cell_free(c);
    arena_free(&arena);
    return 0;
  }
  bool scan = c->mode == MODE_SCAN;
  Program *p = lower_cell(c, false, scan);
  ad_differentiate(p);
  PlanOptions po = cuda_plan_options(scan, false);
  Plan *pl = plan_new(p, &po);
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
