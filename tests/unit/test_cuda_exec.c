/* test_cuda_exec.c: the CUDA host's plan executor (compiler/backend/cuda/cellc_exec.h). On its own,
 * with device operations that only count (no device): the workspace layout (sizes, alignment,
 * overlap, what each mode keeps there, CX_SIZE and CX_OVERFLOW), the first failing operation ends
 * the call with its status, and the slot bases and constant rows are uploaded once per workspace
 * and (T, B). Through the cuda-emu back end: one Work run at T = 9, 40 and 9 again (its workspace
 * grown, its cached uploads redone) gives bit for bit what a fresh Work gives each time. */
#include "cg_cuda.h" /* plan.h with plan_table.h, cellc_launch.h */
#include "cellc_exec.h"
#include "cuda.h"
#include "harness.h"

TestSuite(exec, .init = h_use_cuda_test_cache);

/* ---- device operations that count ---- */

typedef struct Counts {
  int calls, launches, gemms, htods, dtods, zeros;
  int ones;                /* fills of one row with 1.0f: the backward's column of ones */
  int fail_at;             /* the call (from 1) that fails with status 7, or 0 */
  int after_fail;          /* calls made after the failing one */
} Counts;

static int count(Counts *n) {
  if (n->fail_at && n->calls >= n->fail_at) n->after_fail++;
  n->calls++;
  return n->fail_at && n->calls == n->fail_at ? 7 : 0;
}

static int c_launch(void *ctx, int k, unsigned gx, unsigned gy, unsigned block, unsigned shared, void **args) {
  (void)gx, (void)gy, (void)block, (void)shared;
  ((Counts *)ctx)->launches++;
  if (k == CX_FIXED(CX_K_FILL) && *(long long *)args[0] == 1 && *(float *)args[2] == 1.0f) ((Counts *)ctx)->ones++;
  return count(ctx);
}

static int c_sgemm(void *ctx, int ta, int tb, int m, int n, int k, unsigned long long A, int lda, unsigned long long B, int ldb,
                   float beta, unsigned long long C, int ldc) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)A, (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
  ((Counts *)ctx)->gemms++;
  return count(ctx);
}

static int c_htod(void *ctx, unsigned long long dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  ((Counts *)ctx)->htods++;
  return count(ctx);
}

static int c_dtod(void *ctx, unsigned long long dst, unsigned long long src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  ((Counts *)ctx)->dtods++;
  return count(ctx);
}

static int c_zero(void *ctx, unsigned long long dst, size_t floats) {
  (void)dst, (void)floats;
  ((Counts *)ctx)->zeros++;
  return count(ctx);
}

static const CxOps counting = {c_launch, c_sgemm, c_htod, c_dtod, c_zero, NULL, NULL};

/* A program's plan table (the cuda-emu back end's), a run over it with counting operations. */
typedef struct Fixture {
  Arena arena;
  Cell *cell;
  Compiled *cu;
  const EtHeader *t;
  int32_t tmp[512];
  CxKernels k;
  Counts n;
  CxRun r;
  unsigned long long *arr, *bases, *uploaded, *off, *ptrs;
} Fixture;

static void fixture_open(Fixture *f, const char *file, const char *dims, const char *mode, int cx_mode) {
  memset(f, 0, sizeof *f);
  f->cell = h_cell(&f->arena, file, NULL, dims, false, mode);
  char err[2048];
  PipelineOptions o = {0};
  o.backend = backend_find("cuda-emu");
  f->cu = pipeline_compile(f->cell, &o, err, sizeof err);
  cr_assert(f->cu, "compile: %s", err);
  size_t n;
  f->t = cuda_compiled_table(f->cu, &n);
  cr_assert(f->t && f->t->magic == ET_MAGIC && (size_t)f->t->bytes == n);
  f->k.nkernels = 512, f->k.tmp = f->tmp;
  f->k.static_tmp[0] = f->k.static_tmp[1] = f->k.step_tmp[0] = f->k.step_tmp[1] = -1;
  size_t na = (size_t)f->t->narrays + 1, ns = (size_t)f->t->nslots + 1;
  f->arr = xcalloc(na, 8), f->off = xcalloc(na, 8), f->bases = xcalloc(ns, 8), f->uploaded = xcalloc(ns, 8);
  f->ptrs = xcalloc(64, 8);
  for (int i = 0; i < 64; i++) f->ptrs[i] = 0x10000000ull * (unsigned long long)(i + 1); /* never dereferenced */
  CxRun *r = &f->r;
  r->t = f->t, r->k = &f->k, r->ops = &counting, r->ctx = &f->n, r->mode = cx_mode;
  r->arr = f->arr, r->bases = f->bases, r->off = f->off, r->uploaded = cx_mode == CX_SEQIO ? f->uploaded : NULL;
  cx_forget(r);
}

static void fixture_close(Fixture *f) {
  free(f->arr), free(f->off), free(f->bases), free(f->uploaded), free(f->ptrs);
  pipeline_release(f->cu);
  cell_free(f->cell);
  arena_free(&f->arena);
}

/* Every pointer of a call's io: distinct fake device addresses. */
static CxIO io_of(Fixture *f) {
  CxIO io;
  memset(&io, 0, sizeof io);
  io.x = 0x1000, io.dy = 0x2000, io.y = 0x3000, io.dx = 0x4000;
  io.params = io.noise = io.gh0 = io.states = io.out = io.grads = f->ptrs;
  return io;
}

/* ---- the layout ---- */

static void layout_holds(const char *file, const char *mode, int cx_mode) {
  Fixture f;
  fixture_open(&f, file, "H=7,D=3", mode, cx_mode);
  CxRun *r = &f.r;
  const EtArray *a = CX_TABLE(f.t, EtArray, arrays);
  cr_expect_eq(cx_layout(r, 0, 2), CX_SIZE, "T = 0");
  cr_expect_eq(cx_layout(r, 3, 0), CX_SIZE, "B = 0");
  cr_expect_eq(cx_layout(r, 1 << 30, 1 << 30), CX_OVERFLOW, "T B past INT_MAX");
  int T = 9, B = 3;
  cr_assert_eq(cx_layout(r, T, B), CX_OK);
  /* each region 256-aligned and inside the total, no two overlapping */
  unsigned long long lo[600], hi[600];
  int n = 0;
  for (int i = 0; i < f.t->narrays; i++) {
    unsigned long long floats = 0;
    int bad = 0, in = cx_in_workspace(r, i, &floats, T, B, &bad);
    cr_expect(!bad);
    if (a[i].kind == ET_GX || a[i].kind == ET_GH0)
      cr_expect_eq(in, cx_mode == CX_CAPI, "array %d (kind %d) is in the workspace only for the C API", i, a[i].kind);
    if (i == f.t->y_array || a[i].kind == ET_PARAM || a[i].kind == ET_X || a[i].kind == ET_DY)
      cr_expect(!in, "array %d is the caller's", i);
    if (!in) continue;
    cr_assert(n < 600);
    lo[n] = r->L.off[i], hi[n++] = r->L.off[i] + 4 * floats;
  }
  unsigned long long tail[][2] = {{r->L.planes, cx_mode == CX_CAPI ? 4ull * (unsigned long long)f.t->planes : 0},
                                  {r->L.bases, 8ull * (unsigned long long)f.t->nslots},
                                  {r->L.consts, 4ull * (unsigned long long)f.t->nfloats},
                                  {r->L.ones, 4ull * (unsigned long long)T * (unsigned long long)B}};
  for (size_t j = 0; j < sizeof tail / sizeof tail[0]; j++) lo[n] = tail[j][0], hi[n++] = tail[j][0] + tail[j][1];
  for (int i = 0; i < n; i++) {
    cr_expect_eq(lo[i] % 256, 0, "region %d at %llu is 256-aligned", i, lo[i]);
    cr_expect(hi[i] + 256 <= r->L.total, "region %d ends inside the total with the slack", i);
    for (int j = 0; j < i; j++)
      cr_expect(hi[i] <= lo[j] || hi[j] <= lo[i] || lo[i] == hi[i] || lo[j] == hi[j], "regions %d and %d overlap", i, j);
  }
  fixture_close(&f);
}

Test(exec, layout_lru_scan_capi) { layout_holds("stdlib/lru.cell", NULL, CX_CAPI); }
Test(exec, layout_lru_scan_seqio) { layout_holds("stdlib/lru.cell", NULL, CX_SEQIO); }
Test(exec, layout_gru_seqio) { layout_holds("stdlib/gru.cell", NULL, CX_SEQIO); }
Test(exec, layout_lru_sequential_capi) { layout_holds("stdlib/lru.cell", "sequential", CX_CAPI); }

/* ---- failures ---- */

/* The k-th device operation fails: the call returns its status and issues nothing after it. */
Test(exec, the_first_failure_ends_the_call) {
  Fixture f;
  fixture_open(&f, "stdlib/gru.cell", "H=7,D=3", NULL, CX_CAPI);
  CxIO io = io_of(&f);
  f.r.T = 5, f.r.B = 2;
  cr_assert_eq(cx_layout(&f.r, 5, 2), CX_OK);
  cr_assert_eq(cx_forward(&f.r, &io, 0x40000000ull), CX_OK);
  int total = f.n.calls;
  cr_assert(total > 4 && f.n.launches > 0 && f.n.gemms > 0, "a forward launches kernels and GEMMs");
  for (int k = 1; k <= total; k += total / 4) {
    memset(&f.n, 0, sizeof f.n);
    f.n.fail_at = k;
    f.r.status = 0;
    cx_forget(&f.r);
    cr_expect_eq(cx_forward(&f.r, &io, 0x40000000ull), 7, "operation %d fails: the forward returns its status", k);
    cr_expect_eq(f.n.calls, k, "operation %d fails: nothing is issued after it (%d calls)", k, f.n.calls);
  }
  fixture_close(&f);
}

/* ---- the cached uploads ---- */

/* The back end's run keeps what the device holds: the bases and the constant rows go up, and the
 * backward's ones are filled, once per workspace and (T, B), and again after either changes. */
static int uploads_once(const char *file) {
  Fixture f;
  fixture_open(&f, file, "H=7,D=3", NULL, CX_SEQIO);
  int both = 1 + (f.t->nfloats > 0); /* the bases, and the constant rows when there are any */
  CxIO io = io_of(&f);
  unsigned long long ws = 0x40000000ull;
  int htods[5], ones[5];
  int Ts[5] = {9, 9, 12, 12, 12};
  for (int i = 0; i < 5; i++) {
    memset(&f.n, 0, sizeof f.n);
    f.r.T = Ts[i], f.r.B = 2, f.r.status = 0;
    cr_assert_eq(cx_layout(&f.r, Ts[i], 2), CX_OK);
    if (i == 4) ws += 0x1000000ull; /* another workspace */
    cr_assert_eq(cx_forward(&f.r, &io, ws), CX_OK);
    htods[i] = f.n.htods;
    cr_assert_eq(cx_backward(&f.r, &io, ws), CX_OK);
    ones[i] = f.n.ones;
  }
  cr_expect_eq(htods[0], both, "%s: the first forward uploads the bases and the constants", file);
  cr_expect_eq(htods[1], 0, "%s: the same T, B and workspace: nothing uploaded", file);
  cr_expect_eq(htods[2], both, "%s: a new T: both again", file);
  cr_expect_eq(htods[3], 0, "%s: then nothing", file);
  cr_expect_eq(htods[4], both, "%s: a new workspace: both again", file);
  for (int i = 0; i < 5; i++)
    cr_expect_eq(ones[i], i == 0 || i == 2 || i == 4, "%s: call %d fills the ones %d times", file, i, ones[i]);
  int nfloats = f.t->nfloats;
  fixture_close(&f);
  return nfloats;
}

Test(exec, uploads_once_per_workspace_and_size) {
  int consts = uploads_once("stdlib/gru.cell") + uploads_once("stdlib/mingru.cell") + uploads_once("stdlib/lru.cell") +
               uploads_once("stdlib/hgru.cell") + uploads_once("stdlib/leaky.cell") + uploads_once("stdlib/mgu.cell") +
               uploads_once("tests/cells/scan_dprev_scale.cell");
  cr_expect(consts > 0, "one of the cells has constant scan coefficients");
}

/* ---- one back-end Work across lengths ---- */

/* Forward and backward of the cuda-emu back end on w (NULL: a fresh Work) over h's inputs into h's
 * outputs, every buffer through the back end's device memory. */
static void run_device(Compiled *c, Work *w, HBufs *h) {
  const Backend *be = c->be;
  const Program *p = c->p;
  int T = h->T, B = h->B;
  size_t rows = (size_t)T * (size_t)B;
  bool fresh = !w;
  if (fresh) w = be->work_new(c);
  void *params[32], *grads[32], *h0[32], *dfin[32], *fin[32], *gh0[32];
  cr_assert(p->npparts < 32 && p->nsparts < 32 && !p->nnoise);
  float *tmp = xmalloc(sizeof(float) * (rows * (size_t)(p->x_size + p->output_size) + 4096));
  char derr[1024];
  Device *dv = device_open(be->device, derr, sizeof derr);
  cr_assert(dv, "%s", derr);
#define UP(dst, src, n)                                                                          \
  do {                                                                                           \
    for (size_t j_ = 0; j_ < (n); j_++) tmp[j_] = (float)(src)[j_];                              \
    dst = dv->alloc(dv, sizeof(float) * (n));                                                 \
    dv->upload(dv, dst, tmp, sizeof(float) * (n));                                            \
  } while (0)
#define DOWN(dst, src, n)                                                                        \
  do {                                                                                           \
    dv->download(dv, tmp, src, sizeof(float) * (n));                                          \
    for (size_t j_ = 0; j_ < (n); j_++) (dst)[j_] = tmp[j_];                                     \
    dv->free(dv, src);                                                                        \
  } while (0)
  for (int i = 0; i < p->npparts; i++) {
    UP(params[i], h->params[i], h->pn[i]);
    grads[i] = dv->alloc(dv, sizeof(float) * h->pn[i]);
  }
  for (int i = 0; i < p->nsparts; i++) {
    UP(h0[i], h->h0[i], h->sn[i]);
    UP(dfin[i], h->dfinal[i], h->sn[i]);
    fin[i] = dv->alloc(dv, sizeof(float) * h->sn[i]), gh0[i] = dv->alloc(dv, sizeof(float) * h->sn[i]);
  }
  void *x, *dy, *y = dv->alloc(dv, sizeof(float) * rows * (size_t)p->output_size);
  void *gx = dv->alloc(dv, sizeof(float) * rows * (size_t)p->x_size);
  UP(x, h->x, rows * (size_t)p->x_size);
  UP(dy, h->dy, rows * (size_t)p->output_size);
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32, s.x = x, s.dy = dy, s.y = y, s.grad_x = gx;
  s.params = (const void **)params, s.grad_params = grads, s.h0 = (const void **)h0, s.dfinal = (const void **)dfin;
  s.final = fin, s.grad_h0 = gh0;
  be->forward(c, w, &s);
  be->backward(c, w, &s);
  DOWN(h->y, y, rows * (size_t)p->output_size);
  DOWN(h->gx, gx, rows * (size_t)p->x_size);
  dv->free(dv, x), dv->free(dv, dy);
  for (int i = 0; i < p->npparts; i++) {
    DOWN(h->gparams[i], grads[i], h->pn[i]);
    dv->free(dv, params[i]);
  }
  for (int i = 0; i < p->nsparts; i++) {
    DOWN(h->final[i], fin[i], h->sn[i]);
    DOWN(h->gh0[i], gh0[i], h->sn[i]);
    dv->free(dv, h0[i]), dv->free(dv, dfin[i]);
  }
#undef UP
#undef DOWN
  device_release(dv);
  free(tmp);
  if (fresh) be->work_free(w);
}

static void same(const double *a, const double *b, size_t n, const char *what, int T) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof a[i])) {
      cr_expect(false, "T = %d: %s[%zu] is %.9g with the reused Work, %.9g with a fresh one", T, what, i, a[i], b[i]);
      return;
    }
}

static void work_reused(const char *file, const char *mode) {
  Arena arena = {0};
  Cell *cell = h_cell(&arena, file, NULL, "H=7,D=3", false, mode);
  char err[2048];
  PipelineOptions o = {0};
  o.backend = backend_find("cuda-emu");
  Compiled *c = pipeline_compile(cell, &o, err, sizeof err);
  cr_assert(c, "compile: %s", err);
  Work *w = c->be->work_new(c);
  const int Ts[] = {9, 40, 9};
  for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
    int T = Ts[k], B = 3;
    HBufs *a = h_bufs_new(c->p, T, B, 11 + k, 0.4, 0.5), *b = h_bufs_new(c->p, T, B, 11 + k, 0.4, 0.5);
    run_device(c, w, a);
    run_device(c, NULL, b);
    size_t rows = (size_t)T * (size_t)B;
    same(a->y, b->y, rows * (size_t)c->p->output_size, "y", T);
    same(a->gx, b->gx, rows * (size_t)c->p->x_size, "dx", T);
    for (int i = 0; i < a->np; i++) same(a->gparams[i], b->gparams[i], a->pn[i], "a param gradient", T);
    for (int i = 0; i < a->ns; i++) {
      same(a->final[i], b->final[i], a->sn[i], "a final state", T);
      same(a->gh0[i], b->gh0[i], a->sn[i], "dL/dh0", T);
    }
    h_bufs_free(a), h_bufs_free(b);
  }
  c->be->work_free(w);
  pipeline_release(c);
  cell_free(cell);
  arena_free(&arena);
}

Test(exec, one_work_across_lengths_gru, .timeout = 600) { work_reused("stdlib/gru.cell", NULL); }
Test(exec, one_work_across_lengths_lru_scan, .timeout = 600) { work_reused("stdlib/lru.cell", NULL); }
Test(exec, one_work_across_lengths_lru_sequential, .timeout = 600) { work_reused("stdlib/lru.cell", "sequential"); }
