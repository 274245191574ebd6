/* exec.c: the plan executor of the CPU (exec.h), for cellc's own runs and the emitted objects: the
 * workspace, the binding of the caller's buffers, the copies before and after, the phases. */
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

static size_t exec_pack_floats(const EtHeader *tab, GemmIsa isa) {
  const EtStep *steps = (const EtStep *)((const char *)tab + tab->steps);
  size_t n = 0;
  for (int s = 0; s < tab->nsteps; s++)
    if (steps[s].kind == ET_GEMM || steps[s].kind == ET_GEMM_T) n += pack_floats_of(&steps[s], isa);
  return n;
}

/* Packs the matrix of every product of the forward's (or the backward's) phases, before the
 * threads start: the weights do not change while the sequence runs. */
static void exec_pack(Exec *e, bool backward) {
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

/* Each thread's buffers: floats of tn.at, tn.bt, tn.blk, doubles of total (the group's blocks
 * for sizing: G blocks' and V blocks' widths; pointers and strides do not matter to
 * gemm_tn_floats). */
static void exec_thread_floats(const EtHeader *tab, GemmIsa isa, size_t *at, size_t *bt, size_t *blk, size_t *total) {
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

/* The column sums of a run of ET_COLSUM steps: each acc[j] += the sum over all rows of its
 * source's column j (or of the product of its two sources', each product rounded to a float as a
 * kernel storing it would), on this thread's share of each one's columns. The steps of a run mostly
 * read the same rows (a conv's taps: one gradient and the lagged rows of one value), so they run
 * together in one pass over blocks of CS_RB rows; a column is still summed in the order of the
 * rows, then added to acc in the order of the steps: the sums of the steps one by one, bit for bit.
 * Pieces of at most CS_WIDTH columns, so many at once that their sums fit a local array; 64 or 16
 * columns at a time in vector registers. */
enum { CS_RB = 64, CS_WIDTH = 4096, CS_PIECES = 64 };

typedef struct ColPiece {
  const float *a, *b;          /* b: the second factor's rows, or NULL */
  int lda, ldb;
  float *acc;
  int64_t j0, j1;              /* columns; the sums at sums[off + j - j0] */
  int off;
} ColPiece;

#define INLINE static inline __attribute__((always_inline))

typedef float V16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias)); /* 16 floats anywhere */
#define V16_AT(p) (*(const V16u *)(const void *)(p))

/* One piece's columns c0 .. c0 + 63 over rows [r0, r1), the sums in four vectors (a local array of
 * sums the compiler stores back after every row) */
INLINE void colsum_v4(const ColPiece *p, int64_t c0, int64_t r0, int64_t r1, float *keep) {
  V16 s0 = V16_AT(keep), s1 = V16_AT(keep + 16), s2 = V16_AT(keep + 32), s3 = V16_AT(keep + 48);
  for (int64_t r = r0; r < r1; r++) {
    const float *x = p->a + r * p->lda + c0;
    if (p->b) {
      const float *y = p->b + r * p->ldb + c0;
      V16 q0 = V16_AT(x) * V16_AT(y), q1 = V16_AT(x + 16) * V16_AT(y + 16); /* (apart: never a fused multiply-add) */
      V16 q2 = V16_AT(x + 32) * V16_AT(y + 32), q3 = V16_AT(x + 48) * V16_AT(y + 48);
      s0 += q0, s1 += q1, s2 += q2, s3 += q3;
    } else
      s0 += V16_AT(x), s1 += V16_AT(x + 16), s2 += V16_AT(x + 32), s3 += V16_AT(x + 48);
  }
  __builtin_memcpy(keep, &s0, sizeof s0), __builtin_memcpy(keep + 16, &s1, sizeof s1);
  __builtin_memcpy(keep + 32, &s2, sizeof s2), __builtin_memcpy(keep + 48, &s3, sizeof s3);
}

/* The same for columns c0 .. c0 + 15 */
INLINE void colsum_v1(const ColPiece *p, int64_t c0, int64_t r0, int64_t r1, float *keep) {
  V16 s0 = V16_AT(keep);
  for (int64_t r = r0; r < r1; r++) {
    const float *x = p->a + r * p->lda + c0;
    if (p->b) {
      V16 q = V16_AT(x) * V16_AT(p->b + r * p->ldb + c0);
      s0 += q;
    } else s0 += V16_AT(x);
  }
  __builtin_memcpy(keep, &s0, sizeof s0);
}

INLINE void colsum_body(const ColPiece *p, int np, int64_t rows) {
  float sums[CS_WIDTH];
  int width = np ? p[np - 1].off + (int)(p[np - 1].j1 - p[np - 1].j0) : 0;
  for (int j = 0; j < width; j++) sums[j] = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += CS_RB) {
    int64_t r1 = rows - r0 < CS_RB ? rows : r0 + CS_RB;
    for (int k = 0; k < np; k++) {
      int64_t c0 = p[k].j0;
      float *keep = sums + p[k].off;
      for (; c0 + 64 <= p[k].j1; c0 += 64, keep += 64) colsum_v4(&p[k], c0, r0, r1, keep);
      for (; c0 + 16 <= p[k].j1; c0 += 16, keep += 16) colsum_v1(&p[k], c0, r0, r1, keep);
      for (int64_t r = r0; c0 < p[k].j1 && r < r1; r++) {
        const float *x = p[k].a + r * p[k].lda, *y = p[k].b ? p[k].b + r * p[k].ldb : NULL;
        for (int64_t j = c0; j < p[k].j1; j++) {
          float q = y ? x[j] * y[j] : x[j];
          keep[j - c0] += q;
        }
      }
    }
  }
  for (int k = 0; k < np; k++)
    for (int64_t j = p[k].j0; j < p[k].j1; j++) p[k].acc[j] += sums[p[k].off + (j - p[k].j0)];
}

/* colsum_body compiled for the products' instruction set (vector registers of 16 floats hold the
 * local sums; the baseline's 4 wide ones do not) */
__attribute__((target("avx512f"))) static void colsum_pieces512(const ColPiece *p, int np, int64_t rows) { colsum_body(p, np, rows); }
__attribute__((target("avx2"))) static void colsum_pieces256(const ColPiece *p, int np, int64_t rows) { colsum_body(p, np, rows); }
static void colsum_pieces_base(const ColPiece *p, int np, int64_t rows) { colsum_body(p, np, rows); }

static void colsum_pieces(const Exec *e, const ColPiece *p, int np, int64_t rows) {
  if (e->isa == GEMM_AVX512) colsum_pieces512(p, np, rows);
  else if (e->isa == GEMM_AVX2) colsum_pieces256(p, np, rows);
  else colsum_pieces_base(p, np, rows);
}

/* Whether step s is a column sum colsum_steps takes (over rows of a source, not summed by a
 * group of products) */
static bool colsum_alone(const Exec *e, int s) {
  const EtStep *st = &steps_of(e)[s];
  return st->kind == ET_COLSUM && st->group < 0 && st->src >= 0 && s != e->skip;
}

/* Steps s .. s + m - 1, all colsum_alone, on this thread's share of each one's columns */
static void colsum_steps(const Exec *e, int s, int m, int64_t rows, const Share *sh) {
  ColPiece p[CS_PIECES];
  int np = 0, width = 0;
  for (int i = 0; i < m; i++) {
    const EtStep *st = &steps_of(e)[s + i];
    int64_t j0, j1;
    share_of(0, st->numel, sh->i, sh->n, &j0, &j1);
    for (int64_t c = j0; c < j1;) {
      int64_t n = j1 - c < CS_WIDTH ? j1 - c : CS_WIDTH;
      if (np == CS_PIECES || width + n > CS_WIDTH) colsum_pieces(e, p, np, rows), np = 0, width = 0;
      ColPiece *q = &p[np++];
      q->a = e->bases[st->src], q->lda = width_of(e, st->src), q->acc = e->bases[st->dst];
      q->b = st->src2 >= 0 ? e->bases[st->src2] : NULL, q->ldb = st->src2 >= 0 ? width_of(e, st->src2) : 0;
      q->j0 = c, q->j1 = c + n, q->off = width;
      width += (int)n, c += n;
    }
  }
  colsum_pieces(e, p, np, rows);
}

/* acc += rows times the step's constant (a constant adjoint's column sum), on this thread's share
 * of the columns. */
static void colsum_constant(const Exec *e, const EtStep *st, int64_t rows, const Share *sh) {
  float *acc = e->bases[st->dst];
  int64_t j0, j1;
  share_of(0, st->numel, sh->i, sh->n, &j0, &j1);
  for (int64_t j = j0; j < j1; j++) acc[j] += st->k * (float)rows;
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
  case ET_COLSUM: /* (with a group: its group sums it) */
    if (st->group < 0 && st->src < 0) colsum_constant(e, st, rows, sh);
    else if (st->group < 0) colsum_steps(e, s, 1, rows, sh);
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

/* Whether step s reads and writes row r of its arrays only when it runs row r: the kernels, the
 * products with a packed matrix, the copies and zeroings. */
static bool row_local(const Exec *e, int s) {
  switch (steps_of(e)[s].kind) {
  case ET_ELEM: case ET_GEMM: case ET_GEMM_T: case ET_COPY: case ET_ZERO: return true;
  default: return false;
  }
}

/* Steps s .. s + m - 1, all row_local, on this thread's rows [r0, r1) a tile of EXEC_TILE_ROWS rows
 * at a time: each step reads the rows the one before it wrote while they are in this core's cache,
 * instead of every step streaming all rows through memory. No barrier between them: a thread's
 * steps touch its own rows only. */
static void run_rows(const Exec *e, int s, int m, int64_t r0, int64_t r1, int64_t all_rows, const Share *sh, bool hook) {
  for (int64_t a = r0; a < r1; a += EXEC_TILE_ROWS) {
    int64_t b = r1 - a < EXEC_TILE_ROWS ? r1 : a + EXEC_TILE_ROWS, part = all_rows * (b - a) / (r1 - r0);
    for (int k = s; k < s + m; k++) {
      if (k == e->skip) continue; /* grad_x left to the caller (every thread skips it) */
      if (hook) e->host.step(e->host.ctx, k, b - a, part, false);
      run_step(e, k, a, b, sh);
      if (hook) e->host.step(e->host.ctx, k, b - a, part, true);
    }
  }
}

/* A phase on this thread's share: the batch rows of step t (ET_REG_STEP) or of the first step
 * (ET_REG_FIRST), or its part of all rows (ET_REG_ALL): there, runs of row_local steps a tile of
 * rows at a time (run_rows), a barrier after each run and after each other step. */
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
    int s = ph->first + i, m = 1;
    if (ph->region == ET_REG_ALL && row_local(e, s)) {
      while (i + m < ph->n && row_local(e, s + m)) m++;
      run_rows(e, s, m, r0, r1, all_rows, sh, hook);
      barrier(e, sh);
      i += m - 1;
      continue;
    }
    if (s == e->skip) continue; /* grad_x left to the caller (every thread skips it) */
    if (ph->region == ET_REG_ALL && colsum_alone(e, s))
      while (i + m < ph->n && colsum_alone(e, s + m)) m++;
    if (hook) e->host.step(e->host.ctx, s, r1 - r0, all_rows, false);
    if (m > 1) colsum_steps(e, s, m, all_rows, sh); /* one pass (the run's time on its first step) */
    else run_step(e, s, r0, r1, sh);
    if (ph->region == ET_REG_ALL) barrier(e, sh);
    if (hook) e->host.step(e->host.ctx, s, r1 - r0, all_rows, true);
    i += m - 1;
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

/* ---- the workspace ---- */

#define ALIGN 64

static uint64_t aligned_bytes(uint64_t bytes) { return (bytes + ALIGN - 1) / ALIGN * ALIGN; }

/* Reserves `floats` floats (64-byte aligned) at *total: -1 on overflow. */
static int add_floats(uint64_t *total, uint64_t floats) {
  uint64_t b;
  if (__builtin_mul_overflow(floats, (uint64_t)sizeof(float), &b) || b > UINT64_MAX - ALIGN) return -1;
  return __builtin_add_overflow(*total, aligned_bytes(b), total) ? -1 : 0;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Whether array i lives in the workspace in this mode (1, its floats in *floats), not (0), or its
 * size overflows (-1). */
static int in_workspace(const Exec *e, int i, uint64_t T, uint64_t B, uint64_t *floats) {
  const EtArray *a = array_of(e, i);
  bool capi = e->mode == EXEC_CAPI;
  uint64_t rows, x, y;
  switch (a->kind) {
  case ET_OWNED:
    if (!capi && i == e->tab->y_array) return 0; /* the caller's y */
    break;
  case ET_NOISE: if (!capi) return 0; break;     /* rows = width, per_b = fixed = 0 */
  case ET_GH0:
    if (!capi) return 0;
    return __builtin_mul_overflow(B, (uint64_t)a->width, floats) ? -1 : 1;
  default: return 0;
  }
  if (a->local) T = 1;
  if (__builtin_mul_overflow(T, B, &rows) || __builtin_mul_overflow(rows, (uint64_t)a->rows, &x) ||
      __builtin_mul_overflow(B, (uint64_t)a->per_b, &y) || __builtin_add_overflow(x, y, floats) ||
      __builtin_add_overflow(*floats, (uint64_t)a->fixed, floats))
    return -1;
  return 1;
}

/* As many threads as the arrays pay for, at most EXEC_MAX_THREADS. */
static int threads_paid(uint64_t owned) {
  uint64_t n = owned / EXEC_MIN_FLOATS_PER_THREAD;
  return n < 1 ? 1 : n > EXEC_MAX_THREADS ? EXEC_MAX_THREADS : (int)n;
}

int exec_layout(Exec *e, int T, int B, int maxt) {
  const EtHeader *h = e->tab;
  ExecLayout *L = &e->L;
  uint64_t total = 0;
  e->T = T, e->B = B;
  L->owned = 0;
  if (add_floats(&total, ((uint64_t)h->nslots + (uint64_t)h->narrays) * 2)) return EXEC_E_SIZE; /* a float * per slot and array */
  L->arrays = total;
  for (int i = 0; i < h->narrays; i++) {
    uint64_t f;
    int in = in_workspace(e, i, (uint64_t)T, (uint64_t)B, &f);
    if (in < 0 || (in && (add_floats(&total, f) || __builtin_add_overflow(L->owned, f, &L->owned)))) return EXEC_E_SIZE;
  }
  bool capi = e->mode == EXEC_CAPI;
  uint64_t gx;
  L->planes = total;
  if (add_floats(&total, capi ? (uint64_t)h->planes : 0)) return EXEC_E_SIZE;
  L->gx = total;
  if (__builtin_mul_overflow((uint64_t)T * (uint64_t)B, capi ? (uint64_t)h->x_size : 0, &gx) || add_floats(&total, gx))
    return EXEC_E_SIZE;
  /* the packed weights and the threads' buffers: the most any instruction set takes */
  L->packs = total;
  if (add_floats(&total, ((uint64_t)h->npacks * sizeof(GemmPacked) + 3) / 4)) return EXEC_E_SIZE;
  L->pack_mem = total;
  if (add_floats(&total, max_u64(exec_pack_floats(h, GEMM_AVX2), exec_pack_floats(h, GEMM_AVX512)))) return EXEC_E_SIZE;
  L->at = L->bt = L->blk = L->tot = 0;
  for (GemmIsa isa = GEMM_BLAS; isa <= GEMM_AVX512; isa++) {
    size_t at, bt, blk, tot;
    exec_thread_floats(h, isa, &at, &bt, &blk, &tot);
    L->at = max_u64(L->at, at), L->bt = max_u64(L->bt, bt), L->blk = max_u64(L->blk, blk), L->tot = max_u64(L->tot, tot);
  }
  L->th_bytes = 0;
  if (add_floats(&L->th_bytes, ((uint64_t)h->nslots * sizeof(float *) + 3) / 4) || add_floats(&L->th_bytes, L->at) ||
      add_floats(&L->th_bytes, L->bt) || add_floats(&L->th_bytes, L->blk) || add_floats(&L->th_bytes, (uint64_t)L->tot * 2))
    return EXEC_E_SIZE;
  L->maxt = maxt > 0 ? maxt : threads_paid(L->owned);
  L->threads = total;
  uint64_t th;
  if (add_floats(&total, ((uint64_t)L->maxt * sizeof(ExecThread) + 3) / 4) ||
      __builtin_mul_overflow(L->th_bytes, (uint64_t)L->maxt, &th) || __builtin_add_overflow(total, th, &total) ||
      __builtin_add_overflow(total, (uint64_t)ALIGN, &total)) /* aligning the caller's pointer */
    return EXEC_E_SIZE;
  L->total = total;
  return EXEC_OK;
}

int exec_threads(const Exec *e, int n, bool asked) {
  if (!asked) {
    uint64_t paid = e->L.owned / EXEC_MIN_FLOATS_PER_THREAD;
    if (paid < (uint64_t)n) n = paid >= 1 ? (int)paid : 1;
  }
  if (n > e->L.maxt) n = e->L.maxt;
  return n > 1 ? n : 1;
}

void exec_team(Exec *e, int n, bool asked) {
  int rows = e->B / (asked ? 1 : EXEC_MIN_ROWS_PER_THREAD);
  bool has_loop = e->tab->phases[ET_FWD_STEP].n || e->tab->phases[ET_BWD_STEP].n;
  e->nthreads = n;
  e->nloop = has_loop && rows < n ? (rows > 1 ? rows : 1) : n;
}

/* ---- binding a call's buffers ---- */

static const EtParamPart *pparts_of(const Exec *e) { return AT(e, EtParamPart, e->tab->pparts); }
static const EtStatePart *sparts_of(const Exec *e) { return AT(e, EtStatePart, e->tab->sparts); }

/* Every array's and slot's base for this call: the caller's buffers where they are, the workspace
 * for the rest (its layout e->L); the threads' buffers; and (EXEC_CAPI) the complex params split
 * into their (re, im) planes. */
static void bind(Exec *e, const ExecIO *io, void *work) {
  const EtHeader *h = e->tab;
  const ExecLayout *L = &e->L;
  const EtParamPart *pp = pparts_of(e);
  bool capi = e->mode == EXEC_CAPI;
  char *w = (char *)(((uintptr_t)work + ALIGN - 1) / ALIGN * ALIGN);
  e->bases = (float **)w;
  e->abase = e->bases + h->nslots;
  uint64_t at = L->arrays;
  for (int i = 0; i < h->narrays; i++) {
    const EtArray *a = array_of(e, i);
    uint64_t floats;
    float *base = NULL;
    if (in_workspace(e, i, (uint64_t)e->T, (uint64_t)e->B, &floats) > 0) {
      base = (float *)(w + at);
      at += aligned_bytes(floats * sizeof(float));
      if (!capi && a->gate && io->gates && io->gates[a->index]) base = io->gates[a->index];
    } else switch (a->kind) {
      case ET_OWNED: base = io->y; break; /* EXEC_SEQIO's y */
      case ET_PARAM:
        if (!capi) base = (float *)io->params[a->index];
        else if (pp[a->index].cplx) base = (float *)(w + L->planes) + pp[a->index].plane;
        else base = (float *)io->params[pp[a->index].param];
        break;
      case ET_X: base = (float *)io->x; break;
      case ET_DY: base = (float *)io->dy; break;
      case ET_GX: base = io->dx || !capi ? io->dx : (float *)(w + L->gx); break;
      case ET_GH0: base = io->gh0 ? io->gh0[a->index] : NULL; break;
      case ET_NOISE: base = io->noise ? (float *)io->noise[a->index] : NULL; break;
      }
    e->abase[i] = base;
  }
  for (int s = 0; s < h->nslots; s++) {
    const EtSlot *sl = slot_of(e, s);
    float *base = e->abase[sl->array];
    e->bases[s] = base ? base + (int64_t)sl->row_off * e->B * array_of(e, sl->array)->width + sl->col : NULL;
  }
  for (int i = 0; capi && i < h->npparts; i++) {
    if (!pp[i].cplx) continue;
    float *dst = (float *)(w + L->planes) + pp[i].plane;
    const float *src = io->params[pp[i].param];
    for (int j = 0; j < pp[i].numel; j++) dst[j] = src[2 * j + pp[i].part];
  }
  e->packs = (GemmPacked *)(w + L->packs);
  e->pack_mem = (float *)(w + L->pack_mem);
  e->th = (ExecThread *)(w + L->threads);
  char *tb = w + L->threads + aligned_bytes((uint64_t)L->maxt * sizeof(ExecThread));
  for (int i = 0; i < L->maxt; i++, tb += L->th_bytes) {
    char *q = tb;
    ExecThread *th = &e->th[i];
    th->bases = (float **)q, q += aligned_bytes((uint64_t)h->nslots * sizeof(float *));
    th->tn.at = (float *)q, q += aligned_bytes(L->at * sizeof(float));
    th->tn.bt = (float *)q, q += aligned_bytes(L->bt * sizeof(float));
    th->tn.blk = (float *)q, q += aligned_bytes(L->blk * sizeof(float));
    th->total = (double *)q;
  }
  e->skip = -1;
}

/* n values from src (stride `step`, from element `part`: a complex value's part in EXEC_CAPI) to
 * dst, or zeros when src is NULL. */
static void gather(float *dst, const float *src, int64_t n, int step, int part) {
  if (!src) __builtin_memset(dst, 0, sizeof(float) * (size_t)n);
  else if (step == 1) __builtin_memcpy(dst, src, sizeof(float) * (size_t)n);
  else
    for (int64_t j = 0; j < n; j++) dst[j] = src[j * step + part];
}

/* n values from src (or the constant k when src is NULL) to dst (stride `step`, from `part`). */
static void scatter(float *dst, const float *src, float k, int64_t n, int step, int part) {
  if (src && step == 1) __builtin_memcpy(dst, src, sizeof(float) * (size_t)n);
  else
    for (int64_t j = 0; j < n; j++) dst[j * step + part] = src ? src[j] : k;
}

/* State part q's caller's buffer in io's member v (states or out) and its stride: per part in
 * EXEC_SEQIO, the state's interleaved values in EXEC_CAPI. */
static const float *state_buf(const Exec *e, const float *const *v, const EtStatePart *sp, int *step, int *part) {
  bool capi = e->mode == EXEC_CAPI;
  *step = capi && sp->cplx ? 2 : 1, *part = capi ? sp->part : 0;
  if (!v) return NULL;
  return v[capi ? sp->state : (int)(sp - sparts_of(e))];
}

/* Step j of a shifted history's value at step t (EtStatePart.shift), batch entry b, in array arr */
static float *shift_row(const Exec *e, int arr, const EtStatePart *sp, int64_t t, int j, int b) {
  return e->abase[arr] + ((t + j) * e->B + b) * (int64_t)sp->shift;
}

/* Offset of step j of batch entry b in a caller's state buffer of a shifted history */
static int64_t shift_at(const EtStatePart *sp, int j, int b, int step) {
  return ((int64_t)b * sp->size + (int64_t)j * sp->shift) * step;
}

/* Each state part's rows of step `t` of its arrays (darr: the backward's) from io->states. */
static void states_in(Exec *e, const ExecIO *io, bool back, int t) {
  const EtStatePart *sp = sparts_of(e);
  for (int q = 0; q < e->tab->nsparts; q++) {
    int step, part, arr = back ? sp[q].darr : sp[q].arr;
    const float *src = state_buf(e, io->states, &sp[q], &step, &part);
    int64_t n = (int64_t)e->B * sp[q].size;
    if (sp[q].shift)
      for (int b = 0; b < e->B; b++)
        for (int j = 0; j < sp[q].size / sp[q].shift; j++)
          gather(shift_row(e, arr, &sp[q], t, j, b), src ? src + shift_at(&sp[q], j, b, step) : NULL, sp[q].shift, step, part);
    else gather(e->abase[arr] + (int64_t)t * n, src, n, step, part);
  }
}

/* Each state part's rows 0 .. B - 1 of array arr(q) (or zeros where it is -1) to io->out. */
static void states_out(Exec *e, const ExecIO *io, bool back) {
  const EtStatePart *sp = sparts_of(e);
  for (int q = 0; io->out && q < e->tab->nsparts; q++) {
    int step, part;
    float *dst = (float *)state_buf(e, (const float *const *)io->out, &sp[q], &step, &part);
    int64_t n = (int64_t)e->B * sp[q].size;
    if (!dst) continue;
    if (sp[q].still) { /* h0 and dL/dfinal, as states_in put them */
      scatter(dst, e->abase[back ? sp[q].darr : sp[q].arr] + (back ? (int64_t)e->T * n : 0), 0.0f, n, step, part);
      continue;
    }
    if (!back && sp[q].shift) {
      for (int b = 0; b < e->B; b++)
        for (int j = 0; j < sp[q].size / sp[q].shift; j++)
          scatter(dst + shift_at(&sp[q], j, b, step), shift_row(e, sp[q].arr, &sp[q], e->T, j, b), 0.0f, sp[q].shift, step, part);
      continue;
    }
    if (!back) {
      scatter(dst, e->abase[sp[q].arr] + (int64_t)e->T * n, 0.0f, n, step, part);
      continue;
    }
    if (e->tab->scan && e->mode == EXEC_SEQIO) continue; /* the ET_GH0 arrays are the caller's already */
    int arr = e->tab->scan ? sp[q].gh0 : sp[q].darr;
    scatter(dst, arr >= 0 ? e->abase[arr] : NULL, 0.0f, n, step, part);
  }
}

/* The noise of gumbel_sigmoid (train_noise): uniform in (0, 1), a function of the seed, the
 * stream and the element: splitmix64 of (seed ^ (stream + 1) * K) + index, its top 24 bits. */
static uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void draw_noise(Exec *e, uint64_t seed) {
  for (int i = 0; i < e->tab->narrays; i++) {
    const EtArray *a = array_of(e, i);
    if (a->kind != ET_NOISE) continue;
    float *v = e->abase[i];
    uint64_t base = seed ^ ((uint64_t)a->index + 1) * 0xd1b54a32d192ed03ull, n = (uint64_t)e->T * (uint64_t)e->B * (uint64_t)a->width;
    for (uint64_t j = 0; j < n; j++) v[j] = ((float)(splitmix64(base + j) >> 40) + 0.5f) / 16777216.0f;
  }
}

/* ---- forward and backward ---- */

int exec_forward(Exec *e, const ExecIO *io, void *work) {
  const EtHeader *h = e->tab;
  bind(e, io, work);
  if (e->mode == EXEC_CAPI) draw_noise(e, io->seed);
  if (h->kstatic_fwd >= 0) e->host.kernel(e->host.ctx, h->kstatic_fwd, 0, 1, e->bases);
  const EtStackCopy *sc = AT(e, EtStackCopy, h->stack);
  for (int i = 0; i < h->nstack; i++)
    __builtin_memcpy(e->abase[sc[i].array] + sc[i].offset, e->bases[sc[i].src], sizeof(float) * (size_t)sc[i].numel);
  states_in(e, io, false, 0);
  exec_pack(e, false);
  e->host.run(e->host.ctx, e, false);
  if (e->mode == EXEC_CAPI && io->y && h->y_array >= 0) { /* the workspace's y: the backward reads it */
    const float *ys = e->abase[h->y_array];
    int w = array_of(e, h->y_array)->width;
    for (int64_t r = 0; r < (int64_t)e->T * e->B; r++)
      __builtin_memcpy(io->y + r * h->output_size, ys + r * w, sizeof(float) * (size_t)h->output_size);
  }
  states_out(e, io, false);
  return EXEC_OK;
}

int exec_backward(Exec *e, const ExecIO *io, void *work) {
  const EtHeader *h = e->tab;
  if (e->mode == EXEC_SEQIO && !io->dx && h->xgrad_step < 0) return EXEC_E_DX;
  bind(e, io, work);
  if (e->mode == EXEC_SEQIO && !io->dx) e->skip = h->xgrad_step;
  for (int i = 0; i < h->narrays; i++)
    if (array_of(e, i)->zero_bwd) __builtin_memset(e->abase[i], 0, sizeof(float) * (size_t)array_of(e, i)->fixed);
  states_in(e, io, true, e->T);
  exec_pack(e, true);
  e->host.run(e->host.ctx, e, true);
  if (h->kstatic_bwd >= 0) e->host.kernel(e->host.ctx, h->kstatic_bwd, 0, 1, e->bases);
  const EtParamPart *pp = pparts_of(e);
  bool capi = e->mode == EXEC_CAPI;
  for (int i = 0; i < h->npparts; i++)
    scatter(io->grads[capi ? pp[i].param : i], pp[i].grad >= 0 ? e->bases[pp[i].grad] : NULL, pp[i].grad_k, pp[i].numel,
            capi && pp[i].cplx ? 2 : 1, capi ? pp[i].part : 0);
  states_out(e, io, true);
  return EXEC_OK;
}
