/* exec.c: the plan executor of the CPU (exec.h), for cellc's own runs and the emitted objects. */
#include "exec.h"

#include "scan.h"

#define AT(e, type, off) ((const type *)((const char *)(e)->tab + (off)))

static const EtStep *steps_of(const Exec *e) { return AT(e, EtStep, e->tab->steps); }
static const EtSlot *slot_of(const Exec *e, int slot) { return &AT(e, EtSlot, e->tab->slots)[slot]; }
static const EtArray *array_of(const Exec *e, int array) { return &AT(e, EtArray, e->tab->arrays)[array]; }
static int width_of(const Exec *e, int slot) { return array_of(e, slot_of(e, slot)->array)->width; }

static float *row_ptr(const Exec *e, float *const *bases, int slot, int64_t r) { return bases[slot] + r * width_of(e, slot); }

/* What one thread runs: its number i of n, its batch rows [b0, b1), its slot bases. */
typedef struct Share {
  int i, n;
  int b0, b1;
  float **bases;
} Share;

/* Part i of n of [lo, hi). */
static void share_of(int64_t lo, int64_t hi, int i, int n, int64_t *a, int64_t *b) {
  *a = lo + (hi - lo) * i / n;
  *b = lo + (hi - lo) * (i + 1) / n;
}

static void barrier(const Exec *e, const Share *sh) {
  if (sh->n > 1) e->host.barrier(e->host.ctx);
}

/* ---- products ---- */

static GemmIsa pack_isa(const Exec *e, const EtStep *st) {
  int K = st->kind == ET_GEMM ? st->nI : st->nO;
  return K < EXEC_GEMM_MIN_K ? GEMM_BLAS : e->isa;
}

/* The packed matrices one after another in step order, each gemm_pack_floats of its kind. */
static size_t pack_floats_of(const EtStep *st, GemmIsa isa) {
  bool trans = st->kind == ET_GEMM;
  int N = trans ? st->nO : st->nI, K = trans ? st->nI : st->nO;
  return gemm_pack_floats(K < EXEC_GEMM_MIN_K ? GEMM_BLAS : isa, N, K);
}

size_t exec_pack_floats(const EtHeader *tab, GemmIsa isa) {
  const EtStep *steps = (const EtStep *)((const char *)tab + tab->steps);
  size_t n = 0;
  for (int s = 0; s < tab->nsteps; s++)
    if (steps[s].kind == ET_GEMM || steps[s].kind == ET_GEMM_T) n += pack_floats_of(&steps[s], isa);
  return n;
}

void exec_pack(Exec *e, bool backward) {
  const EtStep *steps = steps_of(e);
  int first = e->tab->phases[backward ? ET_BWD_PRE : ET_FWD_PRE].first;
  int last = backward ? e->tab->phases[ET_BWD_FIRST].first + e->tab->phases[ET_BWD_FIRST].n
                      : e->tab->phases[ET_FWD_POST].first + e->tab->phases[ET_FWD_POST].n;
  size_t off = 0;
  for (int s = 0; s < e->tab->nsteps; s++) {
    const EtStep *st = &steps[s];
    if (st->kind != ET_GEMM && st->kind != ET_GEMM_T) continue;
    size_t n = pack_floats_of(st, e->isa);
    if (s >= first && s < last) {
      bool trans = st->kind == ET_GEMM;
      int N = trans ? st->nO : st->nI, K = trans ? st->nI : st->nO;
      gemm_pack_into(&e->packs[st->pack], pack_isa(e, st), e->bases[st->m], st->nI, N, K, trans, e->pack_mem + off);
    }
    off += n;
  }
}

static void run_gemm(const Exec *e, float *const *bases, const EtStep *st, int64_t r0, int64_t r1) {
  gemm_run(&e->packs[st->pack], (int)(r1 - r0), row_ptr(e, bases, st->v, r0), width_of(e, st->v), row_ptr(e, bases, st->y, r0),
           width_of(e, st->y), st->accumulate);
}

/* ---- the weight-gradient groups ---- */

static const EtGroup *group_of(const Exec *e, int g) { return &AT(e, EtGroup, e->tab->groups)[g]; }

/* The group's blocks for sizing: G blocks' and V blocks' widths (pointers and strides do not
 * matter to gemm_tn_floats). */
void exec_thread_floats(const EtHeader *tab, GemmIsa isa, size_t *at, size_t *bt, size_t *blk, size_t *total) {
  Exec e0 = {.tab = tab}, *e = &e0;
  *at = *bt = *blk = *total = 0;
  const EtStep *steps = steps_of(e);
  for (int i = 0; i < tab->ngroups; i++) {
    const EtGroup *g = group_of(e, i);
    const int32_t *gs = AT(e, int32_t, g->steps);
    GemmCols cols[g->na + g->nv];
    for (int m = 0; m < g->na; m++) cols[m] = (GemmCols){0, 1, steps[gs[m * g->nv]].nO};
    for (int j = 0; j < g->nv; j++) cols[g->na + j] = (GemmCols){0, 1, steps[gs[j]].nI};
    size_t a, b, c, t = (size_t)g->M * (size_t)g->N + (g->any_sum ? (size_t)g->M : 0);
    gemm_tn_floats(isa, cols, g->na, cols + g->na, g->nv, &a, &b, &c);
    if (a > *at) *at = a;
    if (b > *bt) *bt = b;
    if (c > *blk) *blk = c;
    if (t > *total) *total = t;
  }
}

/* Each group's acc[bound] += G^T V over all rows, when step s is its first step (the others are
 * done then). The threads split the rows at superblocks (GEMM_TN_ROWS), each summing its rows of
 * every output in float64 (gemm_tn_total_into: each thread reads only its rows of G and V), and
 * the outputs' rows too where there are more threads than superblocks; after a barrier they split
 * the outputs' rows and add the threads' sums in thread order (a thread's zeros where it had other
 * rows), so the sums are those of one thread. */
static void run_outer_acc(const Exec *e, int s, int64_t rows, const Share *sh) {
  const EtStep *steps = steps_of(e);
  const EtGroup *g = group_of(e, steps[s].group);
  if (g->trigger != s) return;
  const int32_t *gs = AT(e, int32_t, g->steps), *sums = AT(e, int32_t, g->sums);
  size_t mn = (size_t)g->M * (size_t)g->N, len = mn + (g->any_sum ? (size_t)g->M : 0);
  double *part = e->th[sh->i].total; /* the product, then the column sums */
  for (size_t j = 0; j < len; j++) part[j] = 0;
  /* superblocks to groups of threads; with more threads than superblocks (short sequences, many
   * cores), each group also splits the outputs' rows (at multiples of 8) */
  int64_t nsb = (rows + GEMM_TN_ROWS - 1) / GEMM_TN_ROWS, s0 = 0, s1 = 0;
  int mparts = sh->n > nsb ? (int)(sh->n / nsb) : 1, groups = sh->n / mparts, mp = sh->i % mparts;
  if (sh->i < groups * mparts) share_of(0, nsb, sh->i / mparts, groups, &s0, &s1);
  int m0 = (int)((int64_t)g->M * mp / mparts) / 8 * 8;
  int m1 = mp + 1 == mparts ? g->M : (int)((int64_t)g->M * (mp + 1) / mparts) / 8 * 8;
  int64_t k0 = s0 * GEMM_TN_ROWS, k1 = s1 * GEMM_TN_ROWS < rows ? s1 * GEMM_TN_ROWS : rows;
  if (k1 > k0 && m1 > m0) {
    GemmCols a[g->na + g->nv], *v = a + g->na;
    int na = 0;
    for (int m = 0, off = 0; m < g->na; off += steps[gs[m * g->nv]].nO, m++) {
      const EtStep *st = &steps[gs[m * g->nv]];
      int n = st->nO, lo = m0 > off ? m0 : off, hi = m1 < off + n ? m1 : off + n;
      if (hi <= lo) continue;
      a[na++] = (GemmCols){e->bases[st->m] + k0 * width_of(e, st->m) + (lo - off), width_of(e, st->m), hi - lo};
    }
    for (int j = 0; j < g->nv; j++) {
      const EtStep *st = &steps[gs[j]];
      v[j] = (GemmCols){e->bases[st->v] + k0 * width_of(e, st->v), width_of(e, st->v), st->nI};
    }
    gemm_tn_total_into(e->isa, a, na, v, g->nv, (int)(k1 - k0), part + (size_t)m0 * g->N, g->any_sum ? part + mn + m0 : NULL,
                       &e->th[sh->i].tn);
  }
  barrier(e, sh);
  int64_t i0, i1;
  share_of(0, g->M, sh->i, sh->n, &i0, &i1);
  int k = 0, first = 0; /* the G block that holds row i, and its first row in the group */
  for (int64_t i = i0; i < i1; i++) {
    while (i >= first + steps[gs[k * g->nv]].nO) first += steps[gs[k++ * g->nv]].nO;
    for (int l = 0, n0 = 0; l < g->nv; l++) { /* each V block's columns: its step's outputs */
      const EtStep *st = &steps[gs[k * g->nv + l]];
      int nl = st->nI;
      float *acc = e->bases[st->y] + (i - first) * nl;
      for (int j = 0; j < nl; j++) {
        double sum = 0;
        for (int t = 0; t < sh->n; t++) sum += e->th[t].total[(size_t)i * (size_t)g->N + (size_t)(n0 + j)];
        acc[j] += (float)sum;
      }
      n0 += nl;
    }
    if (sums[k] >= 0) {
      double sum = 0;
      for (int t = 0; t < sh->n; t++) sum += e->th[t].total[mn + (size_t)i];
      e->bases[steps[sums[k]].dst][i - first] += (float)sum;
    }
  }
}

/* acc[j0, j1) += the sum of the rows' columns j0 .. j1 - 1 (row stride ld): in chunks of columns
 * held in a local array, which the compiler keeps in vector registers (acc and the rows may not
 * alias, so it need not store acc after every row). */
static void colsum_rows(const float *v, int ld, int64_t rows, float *acc, int64_t j0, int64_t j1) {
  enum { CW = 64 };
  for (int64_t c0 = j0; c0 < j1; c0 += CW) {
    int n = j1 - c0 < CW ? (int)(j1 - c0) : CW;
    float sum[CW] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *row = v + r * ld + c0;
      if (n == CW)
        for (int j = 0; j < CW; j++) sum[j] += row[j]; /* a constant count: vectorized at -O2 */
      else
        for (int j = 0; j < n; j++) sum[j] += row[j];
    }
    for (int j = 0; j < n; j++) acc[c0 + j] += sum[j];
  }
}

/* acc += the sum over all rows of the source (or rows times its constant), on this thread's share
 * of the columns. */
static void run_colsum(const Exec *e, const EtStep *st, int64_t rows, const Share *sh) {
  float *acc = e->bases[st->dst];
  int64_t j0, j1;
  share_of(0, st->numel, sh->i, sh->n, &j0, &j1);
  if (st->src < 0) { /* a constant adjoint */
    for (int64_t j = j0; j < j1; j++) acc[j] += st->k * (float)rows;
    return;
  }
  colsum_rows(e->bases[st->src], width_of(e, st->src), rows, acc, j0, j1);
}

/* ---- the other steps ---- */

/* The source's values (or its constant) copied to slot dst over rows [r0, r1). */
static void run_copy(const Exec *e, float *const *bases, const EtStep *st, int64_t r0, int64_t r1) {
  int n = st->numel, h = st->src;
  if (h >= 0 && width_of(e, h) == n && width_of(e, st->dst) == n) { /* rows one after another: one copy */
    if (r1 > r0) __builtin_memcpy(row_ptr(e, bases, st->dst, r0), row_ptr(e, bases, h, r0), sizeof(float) * (size_t)(r1 - r0) * (size_t)n);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    float *dst = row_ptr(e, bases, st->dst, r);
    if (h < 0)
      for (int j = 0; j < n; j++) dst[j] = st->k;
    else __builtin_memcpy(dst, row_ptr(e, bases, h, r), sizeof(float) * (size_t)n);
  }
}

static Coef coef(const Exec *e, const EtCoef *c) {
  Coef k = {0};
  if (c->slot >= 0) k.base = e->bases[c->slot], k.ld = width_of(e, c->slot);
  else k.base = AT(e, float, e->tab->floats) + c->fill; /* a row of constants */
  return k;
}

/* The scan of a state over all rows; the threads split the batch entries where there are enough,
 * else the channels. */
static void run_scan(const Exec *e, const EtStep *st, bool reverse, const Share *sh) {
  Coef a[2], b[2];
  for (int k = 0; k < (st->cplx ? 2 : 1); k++) a[k] = coef(e, &st->a[k]), b[k] = coef(e, &st->b[k]);
  int64_t b0 = 0, b1 = e->B, j0 = 0, j1 = st->size, rows = (int64_t)e->T * e->B;
  if (e->B >= sh->n) share_of(0, e->B, sh->i, sh->n, &b0, &b1);
  else share_of(0, st->size, sh->i, sh->n, &j0, &j1);
  float *S0 = e->abase[st->arr0], *S1 = st->arr1 >= 0 ? e->abase[st->arr1] : NULL;
  if (reverse) scan_reverse(rows, e->B, st->size, (int)b0, (int)b1, (int)j0, (int)j1, a, b, S0, S1);
  else scan_forward(rows, e->B, st->size, (int)b0, (int)b1, (int)j0, (int)j1, a, b, S0, S1);
}

/* Step s on this thread's rows [r0, r1) (steps over all rows split by kind). */
static void run_step(const Exec *e, int s, int64_t r0, int64_t r1, const Share *sh) {
  const EtStep *st = &steps_of(e)[s];
  int64_t rows = (int64_t)e->T * e->B;
  switch (st->kind) {
  case ET_ELEM: e->host.kernel(e->host.ctx, st->kernel, r0, r1, sh->bases); break;
  case ET_GEMM:
  case ET_GEMM_T:
    if (r1 > r0) run_gemm(e, sh->bases, st, r0, r1);
    break;
  case ET_SCAN: run_scan(e, st, false, sh); break;
  case ET_RSCAN: run_scan(e, st, true, sh); break;
  case ET_OUTER_ACC: run_outer_acc(e, s, rows, sh); break;
  case ET_COLSUM:
    if (st->group < 0) run_colsum(e, st, rows, sh); /* else its group sums it */
    break;
  case ET_COPY: run_copy(e, sh->bases, st, r0, r1); break;
  case ET_ZERO: {
    int w = width_of(e, st->dst); /* whole rows: one memset */
    if (r1 > r0) __builtin_memset(row_ptr(e, sh->bases, st->dst, r0), 0, sizeof(float) * (size_t)(r1 - r0) * (size_t)w);
    break;
  }
  default: break;
  }
}

/* A phase on this thread's share: the batch rows of step t (ET_REG_STEP) or of the first step
 * (ET_REG_FIRST), or its part of all rows with a barrier after each step (ET_REG_ALL). */
static void run_phase(const Exec *e, int which, int t, const Share *sh) {
  const EtPhase *ph = &e->tab->phases[which];
  bool hook = e->host.step && sh->i == 0;
  int64_t r0, r1, all_rows = ph->region == ET_REG_ALL ? (int64_t)e->T * e->B : e->B;
  if (ph->region == ET_REG_ALL) share_of(0, (int64_t)e->T * e->B, sh->i, sh->n, &r0, &r1);
  else if (ph->region == ET_REG_STEP) r0 = (int64_t)t * e->B + sh->b0, r1 = (int64_t)t * e->B + sh->b1;
  else r0 = sh->b0, r1 = sh->b1;
  if (ph->region == ET_REG_STEP)
    for (int s = 0; s < e->tab->nslots; s++) /* row r of step t at row r - t B of a step-local slot's B rows */
      if (array_of(e, slot_of(e, s)->array)->local) sh->bases[s] = e->bases[s] - (int64_t)t * e->B * width_of(e, s);
  for (int i = 0; i < ph->n; i++) {
    int s = ph->first + i;
    if (s == e->skip) continue; /* grad_x left to the caller (every thread skips it) */
    if (hook) e->host.step(e->host.ctx, s, r1 - r0, all_rows, false);
    run_step(e, s, r0, r1, sh);
    if (ph->region == ET_REG_ALL) barrier(e, sh);
    if (hook) e->host.step(e->host.ctx, s, r1 - r0, all_rows, true);
  }
}

void exec_run(Exec *e, bool backward, int i) {
  int nl = e->nloop, B = e->B;
  Share sh = {i, e->nthreads, 0, B, e->th[i].bases};
  if (e->nthreads > 1) sh.b0 = i < nl ? B * i / nl : B, sh.b1 = i < nl ? B * (i + 1) / nl : B;
  for (int s = 0; s < e->tab->nslots; s++) sh.bases[s] = e->bases[s];
  int T = sh.b1 > sh.b0 ? e->T : 0; /* a thread without batch rows skips the time loop */
  if (!backward) {
    run_phase(e, ET_FWD_PRE, 0, &sh);
    for (int t = 0; t < T && e->tab->phases[ET_FWD_STEP].n; t++) run_phase(e, ET_FWD_STEP, t, &sh);
    barrier(e, &sh);
    run_phase(e, ET_FWD_POST, 0, &sh);
    return;
  }
  run_phase(e, ET_BWD_PRE, 0, &sh);
  for (int t = T - 1; t >= 0 && e->tab->phases[ET_BWD_STEP].n; t--) run_phase(e, ET_BWD_STEP, t, &sh);
  barrier(e, &sh);
  run_phase(e, ET_BWD_POST, 0, &sh);
  run_phase(e, ET_BWD_FIRST, 0, &sh);
}
