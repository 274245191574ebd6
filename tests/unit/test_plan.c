/* test_plan.c: the execution plan (compiler/plan) of every stdlib cell in each mode it runs in:
 * planning twice gives the same plan, and every array and slot the plan holds is used. */
#include "harness.h"
#include "plan.h"
#include "stdlib_cells.h"

/* Everything a plan holds, as text: two plans are the same when their texts are. */
static char *plan_text(const Plan *pl) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  plan_dump(pl, f);
  for (int i = 0; i < pl->narrays; i++)
    fprintf(f, "a%d %d %d %d %d\n", i, pl->arrays[i].kind, pl->arrays[i].width, pl->arrays[i].numel, pl->arrays[i].index);
  for (int i = 0; i < pl->nslots; i++) fprintf(f, "s%d %d %d %d\n", i, pl->slots[i].array, pl->slots[i].row_off, pl->slots[i].col);
  for (int i = 0; i < pl->p->g.nnodes; i++)
    fprintf(f, "%%%d %d %d %d %d\n", i, pl->home[i], pl->kernel_of[i], pl->static_fwd[i], pl->static_bwd[i]);
  const Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  for (int i = 0; i < 7; i++)
    for (int j = 0; j < phases[i]->n; j++) {
      const PStep *s = &phases[i]->steps[j];
      fprintf(f, "%d: %d %d %d %d %d %d %d %d %d %d\n", i, s->kind, s->kernel, s->node, s->out, s->accumulate, s->mat, s->ncols,
              s->state, s->bound, s->dst);
    }
  for (int i = 0; i < pl->nstacks; i++)
    for (int j = 0; j < pl->nstack[i]; j++) fprintf(f, "stack %d: %d\n", i, pl->stacks[i][j]);
  fclose(f);
  return buf;
}

/* Every array has a slot; every slot is some node's home or a step's destination or stacked matrix. */
static void expect_all_used(const Plan *pl, const char *what) {
  bool *array_used = xcalloc((size_t)pl->narrays + 1, sizeof(bool)), *slot_used = xcalloc((size_t)pl->nslots + 1, sizeof(bool));
  for (int i = 0; i < pl->nslots; i++) array_used[pl->slots[i].array] = true;
  for (int i = 0; i < pl->p->g.nnodes; i++)
    if (pl->home[i] >= 0) slot_used[pl->home[i]] = true;
  const Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  for (int i = 0; i < 7; i++)
    for (int j = 0; j < phases[i]->n; j++) {
      if (phases[i]->steps[j].dst >= 0) slot_used[phases[i]->steps[j].dst] = true;
      if (phases[i]->steps[j].mat >= 0) slot_used[phases[i]->steps[j].mat] = true;
    }
  for (int i = 0; i < pl->narrays; i++) cr_expect(array_used[i], "%s: array %d has no slot", what, i);
  for (int i = 0; i < pl->nslots; i++) cr_expect(slot_used[i], "%s: slot %d is not used", what, i);
  free(array_used), free(slot_used);
}

/* The caller's grad_h0 (ARR_GH0) holds B rows: only the phase of the first step's rows writes it.
 * A kernel over all rows that computed a value there would write T B rows into B. */
static void expect_gh0_first_rows(const Plan *pl, int slot, const Phase *ph, const char *what, const char *step) {
  if (slot < 0 || pl->arrays[pl->slots[slot].array].kind != ARR_GH0) return;
  cr_expect(ph->region == REG_FIRST, "%s: %s writes grad_h0 over more than the first step's rows", what, step);
}

static void expect_first_rows_only(const Plan *pl, const char *what) {
  const Phase *phases[] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  for (int i = 0; i < 7; i++)
    for (int j = 0; j < phases[i]->n; j++) {
      const PStep *st = &phases[i]->steps[j];
      char step[64];
      snprintf(step, sizeof step, "phase %d step %d", i, j);
      if (st->kind == PS_ELEM) {
        const Kernel *k = &pl->kernels[st->kernel];
        for (int n = 0; n < k->n; n++) expect_gh0_first_rows(pl, pl->home[k->nodes[n]], phases[i], what, step);
      } else if (st->kind == PS_GEMM || st->kind == PS_GEMM_T)
        expect_gh0_first_rows(pl, plan_gemm_operands(pl, st).y, phases[i], what, step);
      else if (st->kind == PS_COPY || st->kind == PS_ZERO)
        expect_gh0_first_rows(pl, st->dst, phases[i], what, step);
    }
}

static void check_plans(const char *file, const char *set, const char *dims) {
  for (int sequential = 0; sequential < 2; sequential++) {
    Arena arena = {0};
    Cell *c = h_cell(&arena, file, set, dims, true, sequential ? "sequential" : NULL);
    bool scan = c->mode == MODE_SCAN;
    if (sequential || scan) {
      Program *p = lower_cell(c, true, scan);
      ad_differentiate(p);
      for (int opts = 0; opts < 3; opts++) { /* and with the cpu back end's options, and the cuda's */
        bool cpu = opts == 1, cuda = opts == 2;
        char what[256];
        snprintf(what, sizeof what, "%s (%s mode%s)", file, scan ? "scan" : "sequential", cpu ? ", cpu" : cuda ? ", cuda" : "");
        PlanOptions po = {.scan = scan, .gates = true, .still = cpu || cuda, .slice_views = cpu || cuda, .sink_hybrid = cpu,
                          .dot_sums = cpu, .shift_histories = cpu || cuda, .shift_passes = cuda};
        Plan *a = plan_new(p, &po), *b = plan_new(p, &po);
        char *ta = plan_text(a), *tb = plan_text(b);
        cr_expect(!strcmp(ta, tb), "%s: two plans of one program differ", what);
        expect_all_used(a, what);
        expect_first_rows_only(a, what);
        free(ta), free(tb);
        plan_free(a), plan_free(b);
      }
      program_free(p);
    }
    cell_free(c);
    arena_free(&arena);
  }
}

/* every stdlib cell (stdlib/cells.list) at H = 7, D = 3 */
#define STDLIB_PLANS(name, file, set, dims, md) \
  Test(plan, name) { check_plans(file, set, h_dims(dims, 7, 3)); }
STDLIB_CELLS(STDLIB_PLANS)
Test(plan, ops) { check_plans("tests/cells/ops.cell", NULL, "H=5,D=3"); }
/* scan cells whose dprev is also read on every row by the rest of the backward */
Test(plan, scan_dprev_sqrt) { check_plans("tests/cells/scan_dprev_sqrt.cell", NULL, "H=5,D=4"); }
Test(plan, scan_dprev_scale) { check_plans("tests/cells/scan_dprev_scale.cell", NULL, "H=5,D=4"); }
Test(plan, scan_dprev_gate) { check_plans("tests/cells/scan_dprev_gate.cell", NULL, "H=5,D=4"); }
Test(plan, prev_chain) { check_plans("tests/cells/prev_chain.cell", NULL, "H=5,D=3"); }

/* The sequential plan of a stdlib cell (H = 7, D = 3); *arena and the program are the caller's. */
static Plan *sequential_plan(Arena *arena, const char *file, const char *set, Program **p) {
  Cell *c = h_cell(arena, file, set, "H=7,D=3", true, "sequential");
  *p = lower_cell(c, true, false);
  ad_differentiate(*p);
  cell_free(c);
  return plan_new(*p, &(PlanOptions){.scan = false, .gates = true});
}

/* Elementwise work that only the time loop reads runs inside the loop's kernels (sink_into_steps):
 * the backward of an LSTM, a GRU and mgu with see_h has no pass over all rows before its loop, and
 * the forward of mgu with see_h (whose input candidate Wix x + bh reads no state) none either. */
Test(plan, elementwise_runs_in_the_step) {
  const char *cells[][2] = {{"stdlib/lstm.cell", NULL}, {"stdlib/gru.cell", NULL}, {"stdlib/mgu.cell", "see_h=true"}};
  for (int i = 0; i < 3; i++) {
    Arena arena = {0};
    Program *p;
    Plan *pl = sequential_plan(&arena, cells[i][0], cells[i][1], &p);
    for (int j = 0; j < pl->bwd_pre.n; j++) cr_expect(pl->bwd_pre.steps[j].kind != PS_ELEM, "%s: a kernel before the backward loop", cells[i][0]);
    for (int j = 0; j < pl->fwd_pre.n; j++) cr_expect(pl->fwd_pre.steps[j].kind != PS_ELEM, "%s: a kernel before the forward loop", cells[i][0]);
    expect_all_used(pl, cells[i][0]);
    plan_free(pl), program_free(p), arena_free(&arena);
  }
}

/* Products that read no state stay before the loop: the input projection X W^T of an LSTM is one
 * stacked product over all rows. */
Test(plan, hoisted_products_stay_hoisted) {
  Arena arena = {0};
  Program *p;
  Plan *pl = sequential_plan(&arena, "stdlib/lstm.cell", NULL, &p);
  int gemms = 0;
  for (int j = 0; j < pl->fwd_pre.n; j++) gemms += pl->fwd_pre.steps[j].kind == PS_GEMM;
  cr_expect_eq(gemms, 1, "the LSTM's input products: one stacked GEMM before the loop, got %d", gemms);
  plan_free(pl), program_free(p), arena_free(&arena);
}

/* The input gradient of mgu with see_h, Wzx^T dz + Wix^T dxt, is one product after the loop
 * against the stacked matrices, although dz comes out of the backward loop and dxt out of a
 * kernel after it (sums at two levels: the stack runs at the later one); hgru's (scan mode) too.
 * Both adjoints then lie side by side in one array. */
Test(plan, input_gradient_one_product) {
  Arena arena = {0};
  Program *p;
  Plan *pl = sequential_plan(&arena, "stdlib/mgu.cell", "see_h=true", &p);
  int gemms = 0, kernel_at = -1, gemm_at = -1;
  for (int j = 0; j < pl->bwd_post.n; j++) {
    if (pl->bwd_post.steps[j].kind == PS_GEMM_T) gemms++, gemm_at = j;
    if (pl->bwd_post.steps[j].kind == PS_ELEM && kernel_at < 0) kernel_at = j;
  }
  cr_expect_eq(gemms, 1, "mgu's input gradient: one product after the loop, got %d", gemms);
  cr_expect(kernel_at >= 0 && gemm_at > kernel_at, "the product runs after the kernel that makes dxt");
  GemmOperands o = plan_gemm_operands(pl, &pl->bwd_post.steps[gemm_at]);
  cr_expect_eq(o.nO, 14, "K: both adjoints (2 H), got %d", o.nO);
  cr_expect_eq(pl->arrays[pl->slots[o.v].array].width, 14, "both adjoints in one array 2 H wide");
  expect_all_used(pl, "mgu");
  plan_free(pl), program_free(p), arena_free(&arena);
  Cell *c = h_cell(&arena, "stdlib/hgru.cell", "lb=0.25", "D=5", true, NULL);
  p = lower_cell(c, true, true);
  ad_differentiate(p);
  cell_free(c);
  pl = plan_new(p, &(PlanOptions){.scan = true, .gates = true});
  gemms = 0; /* scan mode: the products after the reverse scan, before the weight gradients */
  for (int j = 0, after = 0; j < pl->bwd_pre.n; j++) {
    after |= pl->bwd_pre.steps[j].kind == PS_RSCAN;
    gemms += after && pl->bwd_pre.steps[j].kind == PS_GEMM_T;
  }
  cr_expect_eq(gemms, 1, "hgru's input gradient: one product (of four), got %d", gemms);
  expect_all_used(pl, "hgru");
  plan_free(pl), program_free(p), arena_free(&arena);
}

/* plan_step_local: an LSTM's per-step product h U^T is made and read within a step (step-local);
 * the states, the gates' adjoints (read by the weight gradients after the loop) and the hoisted
 * product (made before the loop) are not. */
Test(plan, step_local_arrays) {
  Arena arena = {0};
  Program *p;
  Plan *pl = sequential_plan(&arena, "stdlib/lstm.cell", NULL, &p);
  bool *local = plan_step_local(pl);
  int nlocal = 0, step_gemm_array = -1, pre_gemm_array = -1;
  for (int a = 0; a < pl->narrays; a++) nlocal += local[a];
  for (int j = 0; j < pl->fwd_step.n; j++)
    if (pl->fwd_step.steps[j].kind == PS_GEMM) step_gemm_array = pl->slots[plan_gemm_operands(pl, &pl->fwd_step.steps[j]).y].array;
  for (int j = 0; j < pl->fwd_pre.n; j++)
    if (pl->fwd_pre.steps[j].kind == PS_GEMM) pre_gemm_array = pl->slots[plan_gemm_operands(pl, &pl->fwd_pre.steps[j]).y].array;
  cr_assert(step_gemm_array >= 0 && pre_gemm_array >= 0);
  cr_expect(local[step_gemm_array], "the per-step product's array is step-local");
  cr_expect(!local[pre_gemm_array], "the hoisted product's array is not step-local");
  cr_expect_eq(nlocal, 1, "one step-local array in an LSTM's plan, got %d", nlocal);
  for (int q = 0; q < p->nsparts; q++) cr_expect(!local[pl->state_array[q]] && !local[pl->dstate_array[q]]);
  for (int j = 0; j < pl->bwd_post.n; j++)
    if (pl->bwd_post.steps[j].kind == PS_OUTER_ACC) {
      Node *o = graph_node(&p->g, pl->bwd_post.steps[j].node);
      cr_expect(!local[pl->slots[pl->home[o->a[0]]].array], "a weight gradient's G is not step-local");
    }
  free(local);
  plan_free(pl), program_free(p), arena_free(&arena);
}

/* Arrays of our own per-row values whose rows would lie a multiple of 4 KB apart get one cache line
 * more per row: an LSTM at H = 256 stacks its four gates' products (1024 columns) in three (the
 * hoisted input products, the per-step recurrent ones, the gates' adjoints); at H = 7 nothing is
 * padded. Padded or not, the plan uses every array and slot it holds. */
Test(plan, rows_off_4k) {
  const char *dims[] = {"H=256,D=3", "H=7,D=3"};
  for (int d = 0; d < 2; d++) {
    Arena arena = {0};
    Cell *c = h_cell(&arena, "stdlib/lstm.cell", NULL, dims[d], true, "sequential");
    Program *p = lower_cell(c, true, false);
    ad_differentiate(p);
    Plan *pl = plan_new(p, &(PlanOptions){.scan = false, .gates = true});
    int padded = 0;
    for (int a = 0; a < pl->narrays; a++) {
      const PlanArray *arr = &pl->arrays[a];
      if (arr->kind != ARR_ROWS) continue;
      int cols = 0; /* its columns: the furthest slot's end */
      for (int s = 0; s < pl->nslots; s++) {
        if (pl->slots[s].array != a) continue;
        for (int id = 0; id < p->g.nnodes; id++)
          if (pl->home[id] == s && pl->slots[s].col + node_numel(graph_node(&p->g, id)) > cols)
            cols = pl->slots[s].col + node_numel(graph_node(&p->g, id));
      }
      cr_expect(arr->width % 1024 != 0, "%s: array %d's rows %d floats apart", dims[d], a, arr->width);
      cr_expect(arr->width == cols || (cols % 1024 == 0 && arr->width == cols + 16), "%s: array %d: %d columns, width %d",
                dims[d], a, cols, arr->width);
      padded += arr->width != cols;
    }
    cr_expect_eq(padded, d == 0 ? 3 : 0, "%s: %d padded arrays", dims[d], padded);
    expect_all_used(pl, dims[d]);
    plan_free(pl), program_free(p), cell_free(c), arena_free(&arena);
  }
}

/* A cell's differentiated scan-mode program, with what it lives in (scan_case_free frees it all). */
typedef struct ScanCase {
  Arena arena;
  Cell *c;
  Program *p;
} ScanCase;

static void scan_case(ScanCase *k, const char *file, const char *dims) {
  *k = (ScanCase){0};
  k->c = h_cell(&k->arena, file, NULL, dims, true, NULL);
  k->p = lower_cell(k->c, true, true);
  ad_differentiate(k->p);
}

static void scan_case_free(ScanCase *k) {
  program_free(k->p);
  cell_free(k->c);
  arena_free(&k->arena);
}

/* PlanOptions.slice_views: Mamba-2's conv reads the steps of its histories (slices of 64 of each
 * 192-float previous value), and its shift the last two, where the state array holds them, in no
 * kernel; without it, kernels
 * copy them into arrays of their own. Either way the slices of x, dy, the previous states and
 * the dnews are the only nodes so placed. */
Test(plan, slice_views) {
  ScanCase k;
  scan_case(&k, "stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5");
  Program *p = k.p;
  for (int views = 0; views < 2; views++) {
    Plan *pl = plan_new(p, &(PlanOptions){.scan = true, .slice_views = views});
    int nprev = 0;
    for (int id = 0; id < p->g.nnodes; id++) {
      Node *n = graph_node(&p->g, id);
      if (n->op != OP_SLICE || pl->home[id] < 0) continue;
      Node *a = graph_node(&p->g, n->a[0]);
      const Slot *at = &pl->slots[pl->home[id]];
      bool leaf = a->op == OP_INPUT || a->op == OP_DY || a->op == OP_PREV || a->op == OP_DNEW;
      if (!views || !leaf) {
        cr_expect(!leaf || pl->kernel_of[id] >= 0 || pl->home[a->a[0]] < 0, "slice %%%d of a leaf copied by no kernel", id);
        cr_expect(!leaf || at->array != pl->slots[pl->home[n->a[0]]].array, "slice %%%d in its leaf's array", id);
        continue;
      }
      const Slot *src = &pl->slots[pl->home[n->a[0]]];
      cr_expect_eq(pl->kernel_of[id], -1, "slice %%%d of a leaf in a kernel", id);
      cr_expect(at->array == src->array && at->row_off == src->row_off && at->col == src->col + n->idx, "slice %%%d's slot", id);
      if (a->op == OP_PREV) nprev++;
    }
    /* the 3 convs' 3 past steps, and the 2 steps each shift keeps */
    if (views) cr_expect_eq(nprev, 12, "slices of previous states read in place: %d", nprev);
    plan_free(pl);
  }
  scan_case_free(&k);
}

/* PlanOptions.sink_hybrid: Mamba-2's backward (a scan plan with its convs' histories) summed each
 * conv's adjoints of the past steps into a row as wide as the history (3 x P x NH = 24 of x's,
 * 3 x N = 15 of B's and C's), stored for the loop that carries the histories' adjoints back; with
 * it the loop computes them itself, and no array of our own rows is that wide. */
Test(plan, sink_hybrid) {
  ScanCase k;
  scan_case(&k, "stdlib/mamba2.cell", "NH=2,P=4,N=5,D=7");
  Program *p = k.p;
  int wide[2] = {0}, step_nodes[2] = {0};
  for (int sink = 0; sink < 2; sink++) {
    Plan *pl = plan_new(p, &(PlanOptions){.scan = true, .sink_hybrid = sink});
    for (int a = 0; a < pl->narrays; a++) wide[sink] += pl->arrays[a].kind == ARR_ROWS && (pl->arrays[a].width == 24 || pl->arrays[a].width == 15);
    for (int j = 0; j < pl->bwd_step.n; j++)
      if (pl->bwd_step.steps[j].kind == PS_ELEM) step_nodes[sink] += pl->kernels[pl->bwd_step.steps[j].kernel].n;
    char *t = plan_text(pl);
    plan_free(pl);
    Plan *again = plan_new(p, &(PlanOptions){.scan = true, .sink_hybrid = sink});
    char *t2 = plan_text(again);
    cr_expect(!strcmp(t, t2), "two plans differ");
    free(t), free(t2);
    plan_free(again);
  }
  cr_expect_gt(wide[0], 0, "without it, the histories' adjoints of the reads are stored");
  cr_expect_eq(wide[1], 0, "%d arrays as wide as a history", wide[1]);
  cr_expect_gt(step_nodes[1], step_nodes[0]);
  scan_case_free(&k);
}

/* PlanOptions.dot_sums: the gradients of Mamba-2's conv weights sum each tap's values times the
 * conv's adjoint over the rows (4 taps of 3 convs; and other elementwise weights' gradients), from
 * the two factors; no kernel computes the
 * products. Without it each product is stored for its column sum. */
Test(plan, dot_sums) {
  ScanCase k;
  scan_case(&k, "stdlib/mamba2.cell", "NH=2,P=4,N=5,D=7");
  Program *p = k.p;
  for (int dot = 0; dot < 2; dot++) {
    Plan *pl = plan_new(p, &(PlanOptions){.scan = true, .dot_sums = dot});
    int ndot = 0;
    for (int j = 0; j < pl->bwd_post.n; j++) {
      const PStep *st = &pl->bwd_post.steps[j];
      if (st->kind != PS_COLSUM || !st->dot) continue;
      Node *n = graph_node(&p->g, st->node);
      ndot++;
      cr_expect_eq(n->op, OP_MUL);
      cr_expect(pl->home[st->node] < 0 && pl->kernel_of[st->node] < 0, "a dot sum's product %%%d computed", st->node);
      cr_expect(pl->home[n->a[0]] >= 0 && pl->home[n->a[1]] >= 0, "a dot sum's factors stored");
    }
    if (dot) cr_expect_geq(ndot, 12, "%d dot sums", ndot); /* and the gate's weights' (norm_w ...) */
    else cr_expect_eq(ndot, 0);
    expect_all_used(pl, "mamba2 dot_sums");
    plan_free(pl);
  }
  scan_case_free(&k);
}

/* The cpu's options on a scan plan with histories (PlanOptions.shift_histories). */
static Plan *cpu_scan_plan(Program *p, bool shift) {
  return plan_new(p, &(PlanOptions){.scan = true, .still = true, .slice_views = true, .sink_hybrid = true, .dot_sums = true,
                                    .shift_histories = shift});
}

/* PlanOptions.shift_histories: Mamba-2's three conv histories (3 past steps of P NH = 8 and N = 5
 * floats) keep each step once, in arrays of [(T + 3) B] rows of its width: no forward step at all,
 * and the backward's step sums the adjoints in place; without it each history's rows are 3 steps
 * wide and the forward runs a step loop. */
Test(plan, shift_histories) {
  ScanCase k;
  scan_case(&k, "stdlib/mamba2.cell", "NH=2,P=4,N=5,D=7");
  Program *p = k.p;
  for (int shift = 0; shift < 2; shift++) {
    Plan *pl = cpu_scan_plan(p, shift);
    int nshift = 0;
    for (int q = 0; q < p->nsparts; q++) {
      if (!pl->shift[q]) continue;
      nshift++;
      const PlanArray *a = &pl->arrays[pl->state_array[q]], *d = &pl->arrays[pl->dstate_array[q]];
      cr_expect(pl->shift[q] == 8 || pl->shift[q] == 5, "a step of %d floats", pl->shift[q]);
      cr_expect(a->width == pl->shift[q] && d->width == pl->shift[q] && a->blocks == 3 && d->blocks == 3);
      cr_expect_eq(plan_array_floats(a, 10, 2), (size_t)(10 + 3) * 2 * (size_t)pl->shift[q]);
    }
    cr_expect_eq(nshift, shift ? 3 : 0);
    cr_expect_eq(pl->fwd_step.n > 0, !shift, "forward steps: %d", pl->fwd_step.n);
    cr_expect_gt(pl->bwd_step.n, 0);
    expect_all_used(pl, "mamba2 shift_histories");
    expect_first_rows_only(pl, "mamba2 shift_histories");
    plan_free(pl);
  }
  scan_case_free(&k);
}

/* PlanOptions.shift_passes (the CUDA back end's): Mamba-2's backward loop holds nothing but its
 * histories' dprev sums, so it runs as 2 passes over all rows at the head of bwd_post (piece 1 of
 * each history, then piece 2: 3 nodes each); a cell whose loop holds more keeps it. */
Test(plan, shift_passes) {
  ScanCase k;
  scan_case(&k, "stdlib/mamba2.cell", "NH=2,P=4,N=5,D=7");
  Plan *pl = plan_new(k.p, &(PlanOptions){.scan = true, .still = true, .slice_views = true, .shift_histories = true,
                                          .shift_passes = true});
  cr_expect_eq(pl->fwd_step.n, 0);
  cr_expect_eq(pl->bwd_step.n, 0, "backward steps: %d", pl->bwd_step.n);
  cr_assert_geq(pl->bwd_post.n, 2);
  for (int i = 0; i < 2; i++) {
    const PStep *st = &pl->bwd_post.steps[i];
    cr_assert_eq(st->kind, PS_ELEM);
    const Kernel *kk = &pl->kernels[st->kernel];
    cr_expect_eq(kk->n, 3, "pass %d: %d nodes", i + 1, kk->n);
    for (int m = 0; m < kk->n; m++) {
      const Node *n = graph_node(&k.p->g, kk->nodes[m]);
      cr_expect_eq(n->op, OP_ADD, "pass %d: an ADD into dnew's step", i + 1);
      cr_expect_eq(pl->kernel_of[kk->nodes[m]], st->kernel);
    }
  }
  expect_all_used(pl, "mamba2 shift_passes");
  plan_free(pl);
  scan_case_free(&k);
  scan_case(&k, "tests/cells/prev_chain.cell", "H=5,D=3");
  pl = plan_new(k.p, &(PlanOptions){.scan = true, .slice_views = true, .shift_histories = true, .shift_passes = true});
  cr_expect_gt(pl->fwd_step.n, 0);
  cr_expect_gt(pl->bwd_step.n, 0, "prev_chain's v is carried step by step: its loop stays");
  plan_free(pl);
  scan_case_free(&k);
}

/* A history whose value reads another history's previous step keeps its loop; the one it reads
 * is shifted still. */
Test(plan, shift_histories_chain) {
  ScanCase k;
  scan_case(&k, "tests/cells/prev_chain.cell", "H=5,D=3");
  Program *p = k.p;
  Plan *pl = cpu_scan_plan(p, true);
  int sizes[2] = {0};
  for (int q = 0; q < p->nsparts; q++)
    if (p->sparts[q].a < 0) sizes[pl->shift[q] > 0] = p->sparts[q].size;
  cr_expect_eq(sizes[1], 15, "u's history (3 steps of 5) shifted");
  cr_expect_eq(sizes[0], 10, "v's history (2 steps of 5) step by step");
  cr_expect_gt(pl->fwd_step.n, 0);
  plan_free(pl);
  scan_case_free(&k);
}
