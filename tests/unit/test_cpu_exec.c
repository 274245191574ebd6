/* test_cpu_exec.c: the CPU's plan executor (compiler/backend/cpu/exec.c) on its own, over a table
 * written here, whose steps only copy: a complex state carried from h0 to the final state and
 * written to y at every step, dL/dfinal carried back to dL/dh0, dy copied to dx, and a complex
 * param whose gradient is its own value. The two conventions of the caller's buffers (EXEC_SEQIO:
 * planes per part, the caller's y and dx; EXEC_CAPI: interleaved values, y in the workspace) give
 * the same values; what each mode keeps in the workspace; a workspace at any alignment; the size's
 * overflow, EXEC_SEQIO's NULL dx without a product to leave, and the thread policy. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"

TestSuite(cpu_exec);

enum { NP = 3, SIZE = 2, X = 2 }; /* the param's elements, the state's size, x's and y's width */

/* Arrays, slots and steps of the table. */
enum { A_PRE, A_PIM, A_H, A_HIM, A_Y, A_X, A_D, A_DIM, A_GX, A_DY, NARR };
enum { S_H0, S_H1, S_HIM0, S_HIM1, S_Y, S_PRE, S_PIM, S_D0, S_D1, S_DIM0, S_DIM1, S_X, S_GX, S_DY, NSLOT };

typedef struct Table {
  EtHeader h;
  EtArray arrays[NARR];
  EtSlot slots[NSLOT];
  EtStep steps[6];
  EtParamPart pp[2];
  EtStatePart sp[2];
} Table;

#define OFF(field) ((int32_t)offsetof(Table, field))

static EtStep copy(int src, int dst, int n) { return (EtStep){.kind = ET_COPY, .src = src, .dst = dst, .numel = n, .group = -1, .pack = -1}; }

static void table_init(Table *t) {
  memset(t, 0, sizeof *t);
  EtArray state = {.kind = ET_OWNED, .width = SIZE, .rows = SIZE, .per_b = SIZE};
  t->arrays[A_PRE] = (EtArray){.kind = ET_PARAM, .index = 0};
  t->arrays[A_PIM] = (EtArray){.kind = ET_PARAM, .index = 1};
  t->arrays[A_H] = t->arrays[A_HIM] = t->arrays[A_D] = t->arrays[A_DIM] = state;
  t->arrays[A_Y] = (EtArray){.kind = ET_OWNED, .width = X, .rows = X};
  t->arrays[A_X] = (EtArray){.kind = ET_X, .width = X};
  t->arrays[A_GX] = (EtArray){.kind = ET_GX, .width = X};
  t->arrays[A_DY] = (EtArray){.kind = ET_DY, .width = X};
  int slot_array[NSLOT] = {A_H, A_H, A_HIM, A_HIM, A_Y, A_PRE, A_PIM, A_D, A_D, A_DIM, A_DIM, A_X, A_GX, A_DY};
  for (int s = 0; s < NSLOT; s++) /* row_off 1: the next step's rows */
    t->slots[s] = (EtSlot){slot_array[s], s == S_H1 || s == S_HIM1 || s == S_D1 || s == S_DIM1, 0};
  /* forward, each step: h(t + 1) = h(t), y(t) = re h(t + 1); backward, each step in reverse:
   * d(t) = d(t + 1), dx(t) = dy(t) */
  t->steps[0] = copy(S_H0, S_H1, SIZE), t->steps[1] = copy(S_HIM0, S_HIM1, SIZE), t->steps[2] = copy(S_H1, S_Y, X);
  t->steps[3] = copy(S_D1, S_D0, SIZE), t->steps[4] = copy(S_DIM1, S_DIM0, SIZE), t->steps[5] = copy(S_DY, S_GX, X);
  for (int k = 0; k < 2; k++) {
    t->pp[k] = (EtParamPart){.param = 0, .part = k, .cplx = 1, .numel = NP, .array = A_PRE + k, .plane = k * (NP + 16),
                             .grad = S_PRE + k};
    t->sp[k] = (EtStatePart){.state = 0, .part = k, .cplx = 1, .size = SIZE, .arr = A_H + k, .darr = A_D + k, .gh0 = -1};
  }
  t->h = (EtHeader){.magic = ET_MAGIC, .bytes = (int32_t)sizeof *t, .x_size = X, .output_size = X, .y_array = A_Y,
                    .nparams = 1, .nstates = 1, .kstatic_fwd = -1, .kstatic_bwd = -1, .planes = 2 * (NP + 16),
                    .narrays = NARR, .arrays = OFF(arrays), .nslots = NSLOT, .slots = OFF(slots), .nsteps = 6, .steps = OFF(steps),
                    .npparts = 2, .pparts = OFF(pp), .nsparts = 2, .sparts = OFF(sp), .stack = OFF(steps), .floats = OFF(steps),
                    .groups = OFF(steps), .xgrad_step = -1};
  for (int f = 0; f < ET_NPHASES; f++) t->h.phases[f] = (EtPhase){ET_REG_ALL, 0, 0};
  t->h.phases[ET_FWD_STEP] = (EtPhase){ET_REG_STEP, 0, 3};
  t->h.phases[ET_BWD_STEP] = (EtPhase){ET_REG_STEP, 3, 3};
}

/* ---- a host on the calling thread ---- */

static void no_kernel(void *ctx, int k, int64_t r0, int64_t r1, float **bases) {
  (void)ctx, (void)k, (void)r0, (void)r1, (void)bases;
  cr_assert_fail("the table has no kernels");
}

static void no_barrier(void *ctx) { (void)ctx; }

static void run_one(void *ctx, Exec *e, bool backward) {
  ++*(int *)ctx;
  exec_team(e, 1, false);
  exec_run(e, backward, 0);
}

static Exec exec_for(const Table *t, int mode, int *runs) {
  return (Exec){.tab = &t->h, .mode = mode, .isa = GEMM_BLAS, .host = {runs, no_kernel, no_barrier, NULL, run_one}};
}

enum { T = 4, B = 3, ROWS = T * B };

/* Distinct values: v(i) = base + i / 8. */
static void fill(float *v, int n, float base) {
  for (int i = 0; i < n; i++) v[i] = base + (float)i / 8;
}

/* A complex value as the C API's interleaved (re, im) from two planes, and back. */
static void interleave(float *out, const float *re, const float *im, int n) {
  for (int i = 0; i < n; i++) out[2 * i] = re[i], out[2 * i + 1] = im[i];
}

static bool equal(const float *a, const float *b, int n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

/* Whether [p, p + n floats) lies in the workspace [w, w + bytes). */
static bool inside(const void *p, int n, const void *w, uint64_t bytes) {
  const char *c = p, *s = w;
  return c >= s && c + sizeof(float) * (size_t)n <= s + bytes;
}

Test(cpu_exec, both_conventions_give_the_same_values) {
  Table t;
  table_init(&t);
  float pre[NP], pim[NP], hre[B * SIZE], him[B * SIZE], dre[B * SIZE], dim[B * SIZE], x[ROWS * X], dy[ROWS * X];
  fill(pre, NP, 1), fill(pim, NP, -1), fill(hre, B * SIZE, 2), fill(him, B * SIZE, -2), fill(dre, B * SIZE, 3);
  fill(dim, B * SIZE, -3), fill(x, ROWS * X, 4), fill(dy, ROWS * X, 5);

  /* EXEC_SEQIO: per part */
  int runs = 0;
  Exec e = exec_for(&t, EXEC_SEQIO, &runs);
  cr_assert_eq(exec_layout(&e, T, B, 1), EXEC_OK);
  char *work = malloc(e.L.total + 1);
  float y[ROWS * X], fre[B * SIZE], fim[B * SIZE], gre[NP], gim[NP], dx[ROWS * X], hre0[B * SIZE], him0[B * SIZE];
  const float *params[2] = {pre, pim}, *h0[2] = {hre, him}, *dfinal[2] = {dre, dim};
  float *final[2] = {fre, fim}, *grads[2] = {gre, gim}, *dh0[2] = {hre0, him0};
  cr_assert_eq(exec_forward(&e, &(ExecIO){.x = x, .y = y, .params = params, .states = h0, .out = final}, work + 1), EXEC_OK);
  cr_assert_eq(runs, 1);
  cr_assert(equal(fre, hre, B * SIZE) && equal(fim, him, B * SIZE), "final = h0");
  for (int r = 0; r < ROWS; r++) cr_assert(equal(y + r * X, hre + r % B * SIZE, X), "y row %d = re h0 of its batch entry", r);
  cr_assert(!inside(e.abase[A_Y], 1, work, e.L.total + 1) && e.abase[A_Y] == y, "EXEC_SEQIO writes the caller's y");
  cr_assert(inside(e.abase[A_H], (T + 1) * B * SIZE, work, e.L.total + 1), "the states in the workspace");
  cr_assert_eq((uintptr_t)e.abase[A_H] % 64, 0, "aligned in a workspace at an odd address");
  cr_assert_eq(exec_backward(&e, &(ExecIO){.x = x, .dy = dy, .dx = dx, .params = params, .states = dfinal, .out = dh0, .grads = grads},
                             work + 1),
               EXEC_OK);
  cr_assert(equal(hre0, dre, B * SIZE) && equal(him0, dim, B * SIZE), "dh0 = dfinal");
  cr_assert(equal(gre, pre, NP) && equal(gim, pim, NP), "the gradient is the param");
  cr_assert(equal(dx, dy, ROWS * X), "dx = dy");
  cr_assert_eq(exec_backward(&e, &(ExecIO){.x = x, .dy = dy, .params = params, .states = dfinal, .out = dh0, .grads = grads}, work),
               EXEC_E_DX, "dx NULL with no product to leave to the caller");

  /* EXEC_CAPI: interleaved, the workspace's y */
  int runs2 = 0;
  Exec c = exec_for(&t, EXEC_CAPI, &runs2);
  cr_assert_eq(exec_layout(&c, T, B, 0), EXEC_OK);
  cr_assert_gt(c.L.total, e.L.total, "the C API's workspace also holds y, the planes and dx's stand-in");
  cr_assert_eq(c.L.owned, e.L.owned + ROWS * X, "the threads' measure counts y in the workspace");
  char *cwork = malloc(c.L.total + 7);
  float p[2 * NP], h[2 * B * SIZE], d[2 * B * SIZE], fin[2 * B * SIZE], g[2 * NP], dh[2 * B * SIZE], cy[ROWS * X], cdx[ROWS * X];
  interleave(p, pre, pim, NP), interleave(h, hre, him, B * SIZE), interleave(d, dre, dim, B * SIZE);
  const float *cp[1] = {p}, *ch0[1] = {h}, *cdf[1] = {d};
  float *cfin[1] = {fin}, *cg[1] = {g}, *cdh[1] = {dh};
  cr_assert_eq(exec_forward(&c, &(ExecIO){.x = x, .y = cy, .params = cp, .states = ch0, .out = cfin}, cwork + 7), EXEC_OK);
  cr_assert(inside(c.abase[A_Y], ROWS * X, cwork, c.L.total + 7), "EXEC_CAPI keeps y in the workspace");
  cr_assert(equal(cy, y, ROWS * X), "y as EXEC_SEQIO's");
  cr_assert(equal(fin, h, 2 * B * SIZE), "final = h0, interleaved");
  cr_assert(inside(c.abase[A_PRE], NP, cwork, c.L.total + 7) && equal(c.abase[A_PRE], pre, NP) && equal(c.abase[A_PIM], pim, NP),
            "the complex param split into planes in the workspace");
  memset(cdx, 0, sizeof cdx);
  cr_assert_eq(exec_backward(&c, &(ExecIO){.x = x, .dy = dy, .params = cp, .states = cdf, .out = cdh, .grads = cg}, cwork + 7),
               EXEC_OK);
  cr_assert(inside(c.abase[A_GX], ROWS * X, cwork, c.L.total + 7), "dx NULL: its stand-in in the workspace");
  cr_assert(equal(c.abase[A_GX], dx, ROWS * X));
  cr_assert(equal(dh, d, 2 * B * SIZE) && equal(g, p, 2 * NP), "dh0 = dfinal, the gradient = the param, interleaved");
  cr_assert_eq(exec_backward(&c, &(ExecIO){.x = x, .dy = dy, .dx = cdx, .params = cp, .states = NULL, .out = cdh, .grads = cg},
                             cwork + 7),
               EXEC_OK);
  float zeros[2 * B * SIZE] = {0};
  cr_assert(equal(cdx, dy, ROWS * X) && equal(dh, zeros, 2 * B * SIZE), "the caller's dx; dfinal NULL is zeros");
  cr_assert_eq(runs2, 3);
  free(work), free(cwork);
}

Test(cpu_exec, layout_sizes_and_threads) {
  Table t;
  table_init(&t);
  int runs = 0;
  Exec e = exec_for(&t, EXEC_CAPI, &runs);
  cr_assert_eq(exec_layout(&e, 1 << 30, 1 << 30, 0), EXEC_E_SIZE, "T * B * width overflows");
  cr_assert_eq(exec_layout(&e, T, B, 0), EXEC_OK);
  cr_assert_eq(e.L.maxt, 1, "a small sequence pays for one thread");
  cr_assert_eq(exec_threads(&e, 16, false), 1);
  cr_assert_eq(exec_threads(&e, 16, true), 1, "at most what the workspace serves");
  /* floats per step and batch row: 4 state arrays of 2, y 2: 10; T B = 2^16 / 10 * 8 rows pay for 8 */
  cr_assert_eq(exec_layout(&e, 8 * 6554, 64, 0), EXEC_OK);
  cr_assert_eq(e.L.maxt, EXEC_MAX_THREADS);
  cr_assert_eq(exec_layout(&e, 6554, 8, 0), EXEC_OK);
  cr_assert_eq(e.L.maxt, 8);
  cr_assert_eq(exec_threads(&e, 16, false), 8, "as many as the arrays pay for");
  cr_assert_eq(exec_threads(&e, 3, false), 3);
  exec_team(&e, 8, false);
  cr_assert_eq(e.nloop, 1, "8 batch rows: the time loop on one thread");
  exec_team(&e, 8, true);
  cr_assert_eq(e.nloop, 8, "asked: a batch row each");
  Exec s = exec_for(&t, EXEC_SEQIO, &runs);
  cr_assert_eq(exec_layout(&s, 6554, 8, 16), EXEC_OK);
  cr_assert_eq(s.L.maxt, 16, "the host's count");
  cr_assert_eq(exec_threads(&s, 16, true), 16, "an asked count is not cut to what pays");
  cr_assert_eq(exec_threads(&s, 16, false), 6, "8 floats a row in the workspace (y is the caller's)");
}

/* ET_COLSUM with a second source (PStep.dot): acc += the column sums of a * b over all rows, each
 * product rounded to a float and summed in row order, bit for bit as a kernel storing a * b and the
 * plain column sum (which runs chunks of 64 columns over the rows in order); a read through a slot
 * at a column of a wider array (a history's step). 150 rows and 150 columns: neither a multiple of
 * the executor's blocks. */
Test(cpu_exec, dot_colsum_as_stored_products) {
  enum { DT = 50, DB = 3, DR = DT * DB, N = 150, XW = 200, COL = 30 };
  enum { D_X, D_DY, D_ACC, D_NARR };
  struct {
    EtHeader h;
    EtArray arrays[D_NARR];
    EtSlot slots[D_NARR];
    EtStep steps[1];
    EtParamPart pp[1];
  } t;
  memset(&t, 0, sizeof t);
  t.arrays[D_X] = (EtArray){.kind = ET_X, .width = XW};
  t.arrays[D_DY] = (EtArray){.kind = ET_DY, .width = N};
  t.arrays[D_ACC] = (EtArray){.kind = ET_OWNED, .fixed = N, .zero_bwd = 1};
  t.slots[D_X] = (EtSlot){D_X, 0, COL}, t.slots[D_DY] = (EtSlot){D_DY, 0, 0}, t.slots[D_ACC] = (EtSlot){D_ACC, 0, 0};
  t.steps[0] = (EtStep){.kind = ET_COLSUM, .src = D_X, .src2 = D_DY, .dst = D_ACC, .numel = N, .group = -1, .pack = -1};
  t.pp[0] = (EtParamPart){.numel = N, .array = -1, .grad = D_ACC};
  t.h = (EtHeader){.magic = ET_MAGIC, .bytes = (int32_t)sizeof t, .x_size = XW, .output_size = N, .y_array = -1, .nparams = 1,
                   .kstatic_fwd = -1, .kstatic_bwd = -1, .narrays = D_NARR, .arrays = (int32_t)offsetof(__typeof__(t), arrays),
                   .nslots = D_NARR, .slots = (int32_t)offsetof(__typeof__(t), slots), .nsteps = 1,
                   .steps = (int32_t)offsetof(__typeof__(t), steps), .npparts = 1, .pparts = (int32_t)offsetof(__typeof__(t), pp),
                   .sparts = (int32_t)offsetof(__typeof__(t), pp), .stack = (int32_t)offsetof(__typeof__(t), steps),
                   .floats = (int32_t)offsetof(__typeof__(t), steps), .groups = (int32_t)offsetof(__typeof__(t), steps),
                   .xgrad_step = -1};
  for (int f = 0; f < ET_NPHASES; f++) t.h.phases[f] = (EtPhase){ET_REG_ALL, 0, 0};
  t.h.phases[ET_BWD_POST] = (EtPhase){ET_REG_ALL, 0, 1};
  static float x[DR * XW], dy[DR * N], dx[DR * XW];
  uint32_t z = 12345; /* values of many magnitudes: the sums depend on their order */
  for (int i = 0; i < DR * XW; i++) z = z * 1664525u + 1013904223u, x[i] = (float)(z >> 8) / 16777216.0f * (float)(1 + i % 7 * 100);
  for (int i = 0; i < DR * N; i++) z = z * 1664525u + 1013904223u, dy[i] = (float)(z >> 8) / 16777216.0f - 0.5f;
  int runs = 0;
  Exec e = {.tab = &t.h, .mode = EXEC_SEQIO, .isa = GEMM_BLAS, .host = {&runs, no_kernel, no_barrier, NULL, run_one}};
  cr_assert_eq(exec_layout(&e, DT, DB, 1), EXEC_OK);
  char *work = malloc(e.L.total);
  float grad[N];
  const float *params[1] = {NULL};
  float *grads[1] = {grad};
  cr_assert_eq(exec_backward(&e, &(ExecIO){.x = x, .dy = dy, .dx = dx, .params = params, .grads = grads}, work), EXEC_OK);
  for (int j = 0; j < N; j++) {
    float product[DR], sum = 0;
    for (int r = 0; r < DR; r++) product[r] = x[r * XW + COL + j] * dy[r * N + j]; /* the stored products */
    for (int r = 0; r < DR; r++) sum += product[r];
    cr_assert(!memcmp(&grad[j], &sum, sizeof sum), "column %d: %.9g, stored products %.9g", j, grad[j], sum);
  }
  free(work);
}

/* A run of ET_COLSUM steps (the executor sums them in one pass over blocks of rows, in vectors of
 * the products' instruction set): each column summed in row order, then added to its acc in step
 * order, bit for bit as one step after the other; two products into one acc, a plain sum, and one
 * of 4100 columns (more than the executor's pieces hold at once: split over passes); widths not a
 * multiple of its vectors; on every instruction set this CPU has. */
Test(cpu_exec, a_run_of_colsums_as_one_by_one) {
  enum { DT = 50, DB = 3, DR = DT * DB, N = 150, WIDE = 4100, XW = 4200, C0 = 30, C1 = 1001 };
  enum { R_X0, R_X1, R_XW, R_DY, R_ACC, R_ACC2, R_ACC3, R_NARR };
  struct {
    EtHeader h;
    EtArray arrays[R_NARR];
    EtSlot slots[R_NARR];
    EtStep steps[4];
    EtParamPart pp[3];
  } t;
  memset(&t, 0, sizeof t);
  t.arrays[R_X0] = t.arrays[R_X1] = t.arrays[R_XW] = (EtArray){.kind = ET_X, .width = XW};
  t.arrays[R_DY] = (EtArray){.kind = ET_DY, .width = N};
  t.arrays[R_ACC] = t.arrays[R_ACC2] = (EtArray){.kind = ET_OWNED, .fixed = N, .zero_bwd = 1};
  t.arrays[R_ACC3] = (EtArray){.kind = ET_OWNED, .fixed = WIDE, .zero_bwd = 1};
  t.slots[R_X0] = (EtSlot){R_X0, 0, C0}, t.slots[R_X1] = (EtSlot){R_X1, 0, C1}, t.slots[R_XW] = (EtSlot){R_XW, 0, 0};
  for (int s = R_DY; s < R_NARR; s++) t.slots[s] = (EtSlot){s, 0, 0};
  t.steps[0] = (EtStep){.kind = ET_COLSUM, .src = R_X0, .src2 = R_DY, .dst = R_ACC, .numel = N, .group = -1, .pack = -1};
  t.steps[1] = (EtStep){.kind = ET_COLSUM, .src = R_DY, .src2 = -1, .dst = R_ACC2, .numel = N, .group = -1, .pack = -1};
  t.steps[2] = (EtStep){.kind = ET_COLSUM, .src = R_X1, .src2 = R_DY, .dst = R_ACC, .numel = N, .group = -1, .pack = -1};
  t.steps[3] = (EtStep){.kind = ET_COLSUM, .src = R_XW, .src2 = -1, .dst = R_ACC3, .numel = WIDE, .group = -1, .pack = -1};
  t.pp[0] = (EtParamPart){.numel = N, .array = -1, .grad = R_ACC};
  t.pp[1] = (EtParamPart){.param = 1, .numel = N, .array = -1, .grad = R_ACC2};
  t.pp[2] = (EtParamPart){.param = 2, .numel = WIDE, .array = -1, .grad = R_ACC3};
  t.h = (EtHeader){.magic = ET_MAGIC, .bytes = (int32_t)sizeof t, .x_size = XW, .output_size = N, .y_array = -1, .nparams = 3,
                   .kstatic_fwd = -1, .kstatic_bwd = -1, .narrays = R_NARR, .arrays = (int32_t)offsetof(__typeof__(t), arrays),
                   .nslots = R_NARR, .slots = (int32_t)offsetof(__typeof__(t), slots), .nsteps = 4,
                   .steps = (int32_t)offsetof(__typeof__(t), steps), .npparts = 3, .pparts = (int32_t)offsetof(__typeof__(t), pp),
                   .sparts = (int32_t)offsetof(__typeof__(t), pp), .stack = (int32_t)offsetof(__typeof__(t), steps),
                   .floats = (int32_t)offsetof(__typeof__(t), steps), .groups = (int32_t)offsetof(__typeof__(t), steps),
                   .xgrad_step = -1};
  for (int f = 0; f < ET_NPHASES; f++) t.h.phases[f] = (EtPhase){ET_REG_ALL, 0, 0};
  t.h.phases[ET_BWD_POST] = (EtPhase){ET_REG_ALL, 0, 4};
  static float x[DR * XW], dy[DR * N], dx[DR * XW];
  uint32_t z = 777;
  for (int i = 0; i < DR * XW; i++) z = z * 1664525u + 1013904223u, x[i] = (float)(z >> 8) / 16777216.0f * (float)(1 + i % 7 * 100);
  for (int i = 0; i < DR * N; i++) z = z * 1664525u + 1013904223u, dy[i] = (float)(z >> 8) / 16777216.0f - 0.5f;
  /* one step after the other: the stored products, each column in row order, then into acc */
  static float want[N], want2[N], want3[WIDE];
  for (int j = 0; j < N; j++) {
    float s0 = 0, s1 = 0, s2 = 0;
    for (int r = 0; r < DR; r++) {
      float p0 = x[r * XW + C0 + j] * dy[r * N + j], p2 = x[r * XW + C1 + j] * dy[r * N + j];
      s0 += p0, s1 += dy[r * N + j], s2 += p2;
    }
    float acc = 0;
    acc += s0, acc += s2, want[j] = acc, want2[j] = s1;
  }
  for (int j = 0; j < WIDE; j++) {
    float s = 0;
    for (int r = 0; r < DR; r++) s += x[r * XW + j];
    want3[j] = s;
  }
  GemmIsa host = gemm_isa_host();
  for (int isa = GEMM_BLAS; isa <= (int)host; isa++) {
    int runs = 0;
    Exec e = {.tab = &t.h, .mode = EXEC_SEQIO, .isa = (GemmIsa)isa, .host = {&runs, no_kernel, no_barrier, NULL, run_one}};
    cr_assert_eq(exec_layout(&e, DT, DB, 1), EXEC_OK);
    char *work = malloc(e.L.total);
    static float grad[N], grad2[N], grad3[WIDE];
    const float *params[3] = {NULL, NULL, NULL};
    float *grads[3] = {grad, grad2, grad3};
    cr_assert_eq(exec_backward(&e, &(ExecIO){.x = x, .dy = dy, .dx = dx, .params = params, .grads = grads}, work), EXEC_OK);
    cr_assert(equal(grad, want, N), "isa %d: two products into one acc", isa);
    cr_assert(equal(grad2, want2, N), "isa %d: a plain column sum", isa);
    cr_assert(equal(grad3, want3, WIDE), "isa %d: 4100 columns", isa);
    free(work);
  }
}
