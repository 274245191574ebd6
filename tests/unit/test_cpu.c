/* test_cpu.c: the CPU back end's own tests (its conformance against the interpreter on every
 * cell is test_backends.c's): threads splitting the weight gradients and the rows, the input
 * gradient left as a product, scan cells whose grad_h0 shares its node with the backward, the
 * profile's products, the scan kernel's blocks, and the pipeline's cache of compiled programs. */
#include "cpu.h"
#include "gemm.h"
#include "harness.h"
#include "interp.h"
#include "nn.h"
#include "scan.h"

/* T B = 9000 rows: the weight gradients split across threads at superblocks (3 of 4096 rows);
 * T B = 1800 (one superblock): the threads split the outputs' rows instead. Either way 3 threads
 * give the same results as 1, to the bit, and both follow the interpreter. The products of one V
 * are grouped (gru: the input weights, and z and n's recurrent ones; lstm: all eight). */
static void compare_threads(const char *file, const char *set, const char *dims, const char *mode, int T, int B) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, file, set, dims, false, mode);
  char err[256];
  PipelineOptions ro = {0}, o1 = {0}, o3 = {0};
  ro.backend = backend_find("interp"), ro.gates = true;
  o1.backend = o3.backend = backend_find("cpu"), o1.gates = o3.gates = true, o1.threads = 1, o3.threads = 3;
  Compiled *ref = pipeline_compile(c, &ro, err, sizeof err), *c1 = pipeline_compile(c, &o1, err, sizeof err),
           *c3 = pipeline_compile(c, &o3, err, sizeof err);
  cr_assert(ref && c1 && c3, "compile: %s", err);
  HBufs *R = h_bufs_new(ref->p, T, B, 7, 0.4, 0.5), *S1 = h_bufs_new(c1->p, T, B, 7, 0.4, 0.5),
        *S3 = h_bufs_new(c3->p, T, B, 7, 0.4, 0.5);
  h_bufs_copy_inputs(S1, R, ref->p), h_bufs_copy_inputs(S3, R, ref->p);
  pipeline_run_f64(ref, &R->io), pipeline_run_f64(c1, &S1->io), pipeline_run_f64(c3, &S3->io);
  const char *what;
  double e = h_compare(S1, S3, c1->p, &what);
  /* cellc's kernels sum each element in the same order on any split; OpenBLAS (the fallback
   * without AVX2, or CELLC_GEMM=blas) blocks its sums by the call's shape */
  if (gemm_isa_default() != GEMM_BLAS) cr_expect(e == 0, "%s: 3 threads against 1: %s relative difference %g", file, what, e);
  else cr_expect(e < 1e-5, "%s: 3 threads against 1 (BLAS): %s relative difference %g", file, what, e);
  e = h_compare(R, S3, ref->p, &what);
  cr_expect(e < 1e-4, "%s, 3 threads: %s relative error %g", file, what, e);
  h_bufs_free(R), h_bufs_free(S1), h_bufs_free(S3);
  pipeline_release(ref), pipeline_release(c1), pipeline_release(c3);
  cell_free(c);
  arena_free(&arena);
}

Test(cpu, threads_split_weight_gradients) {
  for (int T = 100; T >= 20; T -= 80) {
    compare_threads("stdlib/gru.cell", NULL, "H=19,D=5", NULL, T, 90);
    compare_threads("stdlib/lstm.cell", NULL, "H=19,D=5", NULL, T, 90);
    compare_threads("stdlib/mgu.cell", "see_h=true", "H=19,D=5", NULL, T, 90);
    compare_threads("stdlib/lru.cell", NULL, "H=19,D=5", NULL, T, 90);
  }
}

/* Fewer batch rows than threads: the time loop runs on 2 threads (a row each), the products and
 * kernels over all rows on 3 (the third waits out the loop); 5000 x 2 rows: the weight gradients
 * split at superblocks, 50 x 2: by output rows. The same bits as 1 thread. */
Test(cpu, threads_more_than_batch_rows) {
  for (int T = 5000; T >= 50; T -= 4950) {
    compare_threads("stdlib/gru.cell", NULL, "H=19,D=5", NULL, T, 2);
    compare_threads("stdlib/mgu.cell", "see_h=true", "H=19,D=5", NULL, T, 2);
    compare_threads("stdlib/hgru.cell", "lb=0.25", "D=13", "sequential", T, 2);
    compare_threads("stdlib/lru.cell", NULL, "H=19,D=5", NULL, T, 2);
  }
}

/* SeqIO.fold (Backend.folds): where grad_x is one product G M, a backward with grad_x NULL and a
 * fold request adds grad_x's rows summed by token into fold.out. With one token per row the sums
 * are grad_x itself, to the bit; with repeated tokens, grad_x's rows summed by token (runtime/nn's
 * embedding backward) added to what out held, within float32 rounding (another order of the same
 * sums); the other gradients are those of a backward that writes grad_x, to the bit. A cell whose
 * input gradient is not one product (lru: x also read elementwise through complex parts) does not
 * fold, nor does a back end with no fast path (interp). */
static float *f32_random(Rng *r, size_t n) {
  float *v = xmalloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) v[i] = (float)rng_uniform(r) - 0.5f;
  return v;
}

static void fold_case(const char *file, const char *set, const char *mode, int threads) {
  enum { T = 9, B = 5 };
  Arena arena = {0};
  Cell *cell = h_cell(&arena, file, set, "H=19,D=5", false, mode);
  char err[256];
  PipelineOptions o = {0};
  o.backend = backend_find("cpu"), o.threads = threads;
  Compiled *c = pipeline_compile(cell, &o, err, sizeof err);
  cr_assert(c, "compile: %s", err);
  const Backend *be = c->be;
  Program *p = c->p;
  cr_assert(be->folds(c), "%s", file);
  Rng r;
  rng_seed(&r, 11, 0);
  size_t rows = (size_t)T * B, nx = rows * (size_t)p->x_size;
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32;
  s.x = f32_random(&r, nx), s.dy = f32_random(&r, rows * (size_t)p->output_size);
  s.y = xmalloc(sizeof(float) * rows * (size_t)p->output_size);
  void **params = xcalloc((size_t)p->npparts + 1, sizeof(void *)), **g1 = xcalloc((size_t)p->npparts + 1, sizeof(void *));
  void **g2 = xcalloc((size_t)p->npparts + 1, sizeof(void *));
  for (int i = 0; i < p->npparts; i++) {
    params[i] = f32_random(&r, (size_t)p->pparts[i].numel);
    g1[i] = xmalloc(sizeof(float) * (size_t)p->pparts[i].numel), g2[i] = xmalloc(sizeof(float) * (size_t)p->pparts[i].numel);
  }
  void **h0 = xcalloc((size_t)p->nsparts + 1, sizeof(void *)), **df = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  void **fin = xcalloc((size_t)p->nsparts + 1, sizeof(void *)), **gh = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size;
    h0[i] = f32_random(&r, n), df[i] = f32_random(&r, n), fin[i] = xmalloc(sizeof(float) * n), gh[i] = xmalloc(sizeof(float) * n);
  }
  s.params = (const void **)params, s.h0 = (const void **)h0, s.dfinal = (const void **)df, s.final = fin, s.grad_h0 = gh;
  float *gx = xmalloc(sizeof(float) * nx), *out = xcalloc(nx, sizeof(float));
  int32_t ids[T * B];
  Work *w = be->work_new(c);
  be->forward(c, w, &s);
  s.grad_x = gx, s.grad_params = g1;
  be->backward(c, w, &s);
  /* one token per row: the sums are the rows */
  for (int i = 0; i < T * B; i++) ids[i] = T * B - 1 - i;
  SeqFold f = {ids, T * B, out};
  s.grad_x = NULL, s.grad_params = g2, s.fold = &f;
  be->backward(c, w, &s);
  for (size_t i = 0; i < rows; i++)
    cr_assert_eq(memcmp(out + (size_t)ids[i] * p->x_size, gx + i * p->x_size, sizeof(float) * (size_t)p->x_size), 0,
                 "%s: row %zu of the fold differs from grad_x's", file, i);
  for (int i = 0; i < p->npparts; i++)
    cr_assert_eq(memcmp(g1[i], g2[i], sizeof(float) * (size_t)p->pparts[i].numel), 0, "%s: param part %d", file, i);
  /* four tokens, added to what out holds */
  enum { V = 4 };
  for (int i = 0; i < T * B; i++) ids[i] = (int32_t)(rng_uniform(&r) * V) % V;
  float want[V * 64] = {0};
  cr_assert_leq(p->x_size, 64);
  for (size_t i = 0; i < V * (size_t)p->x_size; i++) out[i] = 0.25f * (float)i, want[i] = out[i];
  nn_embedding_backward(want, gx, ids, T * B, V, p->x_size);
  f = (SeqFold){ids, V, out};
  be->backward(c, w, &s);
  for (size_t i = 0; i < V * (size_t)p->x_size; i++)
    cr_assert(fabsf(out[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "%s: fold element %zu: %g, want %g", file, i, out[i], want[i]);
  be->work_free(w);
  for (int i = 0; i < p->npparts; i++) free(params[i]), free(g1[i]), free(g2[i]);
  for (int i = 0; i < p->nsparts; i++) free(h0[i]), free(df[i]), free(fin[i]), free(gh[i]);
  free(params), free(g1), free(g2), free(h0), free(df), free(fin), free(gh);
  free((void *)s.x), free((void *)s.dy), free(s.y), free(gx), free(out);
  pipeline_release(c);
  cell_free(cell);
  arena_free(&arena);
}

Test(cpu, input_gradient_folded_by_token) {
  fold_case("stdlib/gru.cell", NULL, NULL, 1);
  fold_case("stdlib/lstm.cell", NULL, NULL, 3);
  fold_case("stdlib/mgu.cell", "see_h=true", NULL, 2);
  fold_case("stdlib/mgu.cell", NULL, NULL, 3);   /* scan mode: the product before the reverse scans' phase */
  fold_case("stdlib/elman.cell", NULL, NULL, 1);
  Arena arena = {0};
  Cell *cell = h_cell(&arena, "stdlib/lru.cell", NULL, "H=19,D=5", false, NULL);
  char err[256];
  PipelineOptions o = {0};
  o.backend = backend_find("cpu");
  Compiled *c = pipeline_compile(cell, &o, err, sizeof err);
  cr_assert(c, "compile: %s", err);
  cr_assert(!c->be->folds(c));
  cr_assert_null(backend_find("interp")->folds);
  pipeline_release(c);
  cell_free(cell);
  arena_free(&arena);
}

/* A scan cell's backward writes the caller's grad_h0 in its B rows and nowhere past them (the
 * buffers past them hold a guard value that must stay), with generated code and the portable
 * evaluator, on 1 and 3 threads; the guard lies in the same allocation, so an overrun shows here
 * without a sanitizer (the generated kernels have none). */
static void grad_h0_guard_case(const char *file, const char *dims, bool portable, int threads) {
  enum { T = 6, B = 11 };
  const float guard = 12345.0f;
  Arena arena = {0};
  Cell *cell = h_cell(&arena, file, NULL, dims, false, NULL);
  char err[256];
  PipelineOptions o = {0};
  o.backend = backend_find("cpu"), o.threads = threads, o.portable = portable;
  Compiled *c = pipeline_compile(cell, &o, err, sizeof err);
  cr_assert(c, "compile: %s", err);
  cr_assert(c->opt.scan, "%s runs as a scan", file);
  const Backend *be = c->be;
  Program *p = c->p;
  Rng r;
  rng_seed(&r, 5, 0);
  size_t rows = (size_t)T * B;
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32;
  s.x = f32_random(&r, rows * (size_t)p->x_size), s.dy = f32_random(&r, rows * (size_t)p->output_size);
  s.y = xmalloc(sizeof(float) * rows * (size_t)p->output_size);
  s.grad_x = xmalloc(sizeof(float) * rows * (size_t)p->x_size);
  void **params = xcalloc((size_t)p->npparts + 1, sizeof(void *)), **gp = xcalloc((size_t)p->npparts + 1, sizeof(void *));
  for (int i = 0; i < p->npparts; i++)
    params[i] = f32_random(&r, (size_t)p->pparts[i].numel), gp[i] = xmalloc(sizeof(float) * (size_t)p->pparts[i].numel);
  void **h0 = xcalloc((size_t)p->nsparts + 1, sizeof(void *)), **df = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  void **fin = xcalloc((size_t)p->nsparts + 1, sizeof(void *)), **gh = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size;
    h0[i] = f32_random(&r, n), df[i] = f32_random(&r, n), fin[i] = xmalloc(sizeof(float) * n);
    gh[i] = xmalloc(sizeof(float) * rows * (size_t)p->sparts[i].size); /* B rows, then T - 1 steps of guard */
    for (size_t j = 0; j < rows * (size_t)p->sparts[i].size; j++) ((float *)gh[i])[j] = guard;
  }
  s.params = (const void **)params, s.grad_params = gp, s.h0 = (const void **)h0, s.dfinal = (const void **)df;
  s.final = fin, s.grad_h0 = gh;
  Work *w = be->work_new(c);
  be->forward(c, w, &s);
  be->backward(c, w, &s);
  for (int i = 0; i < p->nsparts; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size, past = 0;
    for (size_t j = n; j < rows * (size_t)p->sparts[i].size; j++) past += ((float *)gh[i])[j] != guard;
    cr_expect_eq(past, 0, "%s%s, %d threads: %zu floats written past grad_h0 part %d", file, portable ? " (portable)" : "",
                 threads, past, i);
    cr_expect(((float *)gh[i])[0] != guard, "%s: grad_h0 part %d written", file, i);
  }
  be->work_free(w);
  for (int i = 0; i < p->npparts; i++) free(params[i]), free(gp[i]);
  for (int i = 0; i < p->nsparts; i++) free(h0[i]), free(df[i]), free(fin[i]), free(gh[i]);
  free(params), free(gp), free(h0), free(df), free(fin), free(gh);
  free((void *)s.x), free((void *)s.dy), free(s.y), free(s.grad_x);
  pipeline_release(c);
  cell_free(cell);
  arena_free(&arena);
}

Test(cpu, scan_grad_h0_first_rows_only) {
  const char *cells[][2] = {{"tests/cells/scan_dprev_sqrt.cell", "H=5,D=4"},
                            {"tests/cells/scan_dprev_scale.cell", "H=5,D=4"},
                            {"tests/cells/scan_dprev_gate.cell", "H=19,D=5"},
                            {"stdlib/mingru.cell", "H=19,D=5"}};
  for (int i = 0; i < 4; i++)
    for (int portable = 0; portable < 2; portable++) {
      grad_h0_guard_case(cells[i][0], cells[i][1], portable, 1);
      grad_h0_guard_case(cells[i][0], cells[i][1], portable, 3);
    }
}

/* The profile's products by kind, for a GRU (H = 19, D = 5, T = 7, B = 3; 2 floating-point
 * operations per multiply-add): per time step the recurrent products forward ([Whz; Whr] h, Whh (r h))
 * and their three transposes backward, 6 H H per row; over all rows the hoisted input product and
 * the input gradient, 6 H D; the weight gradients 3 H (D + H). The kinds' seconds and operations sum
 * to the products'. */
Test(cpu, profile_products_by_kind) {
  enum { H = 19, D = 5, T = 7, B = 3 };
  Arena arena = {0};
  Cell *c = h_cell(&arena, "stdlib/gru.cell", NULL, "H=19,D=5", false, NULL);
  char err[256];
  PipelineOptions o = {0};
  o.backend = backend_find("cpu"), o.threads = 1;
  Compiled *cc = pipeline_compile(c, &o, err, sizeof err);
  cr_assert(cc, "compile: %s", err);
  HBufs *S = h_bufs_new(cc->p, T, B, 7, 0.4, 0.5);
  Profile pr;
  pipeline_run_f64_profiled(cc, &S->io, &pr);
  double rows2 = 2.0 * T * B;
  cr_expect_eq(pr.kind_flops[GEMM_STEPWISE], rows2 * 6 * H * H);
  cr_expect_eq(pr.kind_flops[GEMM_ALL_ROWS], rows2 * 6 * H * D);
  cr_expect_eq(pr.kind_flops[GEMM_WEIGHT_GRAD], rows2 * 3 * H * (D + H));
  cr_expect_eq(pr.gemm_flops, pr.kind_flops[0] + pr.kind_flops[1] + pr.kind_flops[2]);
  cr_expect(fabs(pr.gemm_s - (pr.kind_s[0] + pr.kind_s[1] + pr.kind_s[2])) < 1e-9 && pr.kind_s[GEMM_WEIGHT_GRAD] > 0,
            "seconds by kind %g %g %g against %g", pr.kind_s[0], pr.kind_s[1], pr.kind_s[2], pr.gemm_s);
  h_bufs_free(S);
  pipeline_release(cc);
  cell_free(c);
  arena_free(&arena);
}

/* The scans (compiler/backend/cpu/scan.h), real and complex, forward and reverse, against the
 * recurrences written out in double: one loop per step's block of batch entries (coefficient rows
 * one after another), a loop per row (rows 3 floats longer than the channels), the batch entries
 * split in three and the channels split in three: all the same bits. */
static void scan_case(bool cplx, bool reverse, int ld, int b0, int b1, int j0, int j1, float *out) {
  enum { T = 7, B = 5, S = 6 };
  int parts = cplx ? 2 : 1;
  int64_t rows = (int64_t)T * B;
  float *coef = xcalloc((size_t)(4 * rows * ld), sizeof(float));
  Coef a[2], b[2];
  for (int k = 0; k < parts; k++) {
    a[k] = (Coef){coef + (2 * k) * rows * ld, ld, NULL}, b[k] = (Coef){coef + (2 * k + 1) * rows * ld, ld, NULL};
    for (int64_t r = 0; r < rows; r++)
      for (int j = 0; j < ld; j++) { /* the value of (row, channel); NaN past the channels */
        int64_t i = r * S + j;
        coef[(2 * k) * rows * ld + r * ld + j] = j < S ? 0.9f * sinf((float)(i * 7 + k)) : NAN;
        coef[(2 * k + 1) * rows * ld + r * ld + j] = j < S ? cosf((float)(i * 3 + k)) : NAN;
      }
  }
  size_t n = (size_t)(rows + B) * S;
  for (int k = 0; k < parts; k++)
    for (size_t i = 0; i < n; i++) out[k * n + i] = (reverse ? i >= (size_t)rows * S : i < (size_t)B * S) ? sinf((float)i) : 0.0f;
  float *S1 = cplx ? out + n : NULL;
  if (reverse) scan_reverse(rows, B, S, b0, b1, j0, j1, a, b, out, S1);
  else scan_forward(rows, B, S, b0, b1, j0, j1, a, b, out, S1);
  free(coef);
}

Test(cpu, scan_blocks_rows_and_splits) {
  enum { T = 7, B = 5, S = 6, N = (T + 1) * B * S };
  for (int cplx = 0; cplx < 2; cplx++)
    for (int reverse = 0; reverse < 2; reverse++) {
      float flat[2 * N], rowwise[2 * N], split[2 * N] = {0}, cols[2 * N] = {0}, part[2 * N];
      scan_case(cplx, reverse, S, 0, B, 0, S, flat);
      scan_case(cplx, reverse, S + 3, 0, B, 0, S, rowwise);
      for (int i = 0; i < 3; i++) { /* the threads' shares, each into its own copy, merged */
        scan_case(cplx, reverse, S, B * i / 3, B * (i + 1) / 3, 0, S, part);
        for (int q = 0; q < 2 * N; q++)
          if ((q % N) / S % B >= B * i / 3 && (q % N) / S % B < B * (i + 1) / 3) split[q] = part[q];
        scan_case(cplx, reverse, S, 0, B, S * i / 3, S * (i + 1) / 3, part);
        for (int q = 0; q < 2 * N; q++)
          if (q % S >= S * i / 3 && q % S < S * (i + 1) / 3) cols[q] = part[q];
      }
      /* the recurrence in double, from the same coefficients (rows of S: the flat case's) */
      double ref[2][N];
      int parts = cplx ? 2 : 1;
      for (int k = 0; k < parts; k++)
        for (int q = 0; q < N; q++) ref[k][q] = (reverse ? q >= T * B * S : q < B * S) ? sin((double)(float)q) : 0.0;
      for (int t = reverse ? T - 1 : 0; reverse ? t >= 0 : t < T; t += reverse ? -1 : 1)
        for (int q = t * B * S; q < (t + 1) * B * S; q++) {
          double ar[2], bb[2];
          for (int k = 0; k < 2; k++) {
            int64_t i = reverse ? q + B * S : q; /* reverse: the next step's a */
            ar[k] = k < parts && (!reverse || t + 1 < T) ? 0.9f * sinf((float)(i * 7 + k)) : (k == 0 && reverse ? 1.0 : 0.0);
            bb[k] = k < parts ? cosf((float)(q * 3 + k)) : 0.0;
          }
          double p0 = ref[0][q + (reverse ? B * S : 0)], p1 = cplx ? ref[1][q + (reverse ? B * S : 0)] : 0;
          int o = reverse ? q : q + B * S;
          if (!reverse) {
            ref[0][o] = ar[0] * p0 - ar[1] * p1 + bb[0];
            if (cplx) ref[1][o] = ar[0] * p1 + ar[1] * p0 + bb[1];
          } else {
            ref[0][o] = bb[0] + ar[0] * p0 + ar[1] * p1;
            if (cplx) ref[1][o] = bb[1] + ar[0] * p1 - ar[1] * p0;
          }
        }
      for (int k = 0; k < parts; k++)
        for (int q = 0; q < N; q++) {
          int i = k * N + q;
          cr_expect(flat[i] == rowwise[i] && flat[i] == split[i] && flat[i] == cols[i],
                    "cplx %d reverse %d at %d: %g %g %g %g", cplx, reverse, i, flat[i], rowwise[i], split[i], cols[i]);
          cr_expect(fabs(flat[i] - ref[k][q]) < 1e-4, "cplx %d reverse %d at %d: %g, in double %g", cplx, reverse, i,
                    flat[i], ref[k][q]);
        }
    }
}

/* A second compile of an equal program (another layer of the same cell) shares the compiled
 * program; a different dims binding compiles anew; a release keeps it for the other holders. */
Test(cpu, cache_by_program) {
  Arena arena = {0};
  Cell *c1 = h_cell(&arena, "stdlib/gru.cell", NULL, "H=6,D=3", false, NULL);
  Cell *c2 = h_cell(&arena, "stdlib/gru.cell", NULL, "H=6,D=3", false, NULL);
  Cell *c3 = h_cell(&arena, "stdlib/gru.cell", NULL, "H=7,D=3", false, NULL);
  char err[256];
  PipelineOptions o = {0};
  o.backend = backend_find("cpu");
  int before = pipeline_cache_hits();
  Compiled *a = pipeline_compile(c1, &o, err, sizeof err);
  Compiled *b = pipeline_compile(c2, &o, err, sizeof err);
  Compiled *d = pipeline_compile(c3, &o, err, sizeof err);
  cr_assert(a && b && d);
  cr_expect_eq(pipeline_cache_hits(), before + 1);
  cr_expect(a == b, "equal programs share the compiled program");
  cr_expect(a != d, "other dims compile anew");
  /* the first holder and its cell go away; the second still runs, and a third lookup still hits */
  pipeline_release(a);
  cell_free(c1);
  HBufs *h = h_bufs_new(b->p, 3, 2, 1, 0.3, 0.3);
  pipeline_run_f64(b, &h->io);
  cr_expect(isfinite(h->y[0]));
  h_bufs_free(h);
  Compiled *e = pipeline_compile(c2, &o, err, sizeof err);
  cr_expect_eq(pipeline_cache_hits(), before + 2);
  cr_expect(e == b);
  /* the interpreter and the CPU back end never share */
  PipelineOptions io = {0};
  io.backend = backend_find("interp");
  Compiled *f = pipeline_compile(c2, &io, err, sizeof err);
  cr_expect(f != b && f->be == &interp_backend);
  pipeline_release(b), pipeline_release(e), pipeline_release(d), pipeline_release(f);
  cell_free(c2), cell_free(c3);
  arena_free(&arena);
}

/* The back ends by name. */
Test(cpu, backends_by_name) {
  cr_expect(backend_find("cpu") == &cpu_backend);
  cr_expect(backend_find("interp") == &interp_backend);
  cr_expect_null(backend_find("tpu"));
}

/* read_steps: h_0 .. h_T from the CPU back end equal the interpreter's, and h_T equals final. */
Test(cpu, read_steps_states) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, "stdlib/gru.cell", NULL, "H=5,D=3", false, NULL);
  char err[256];
  PipelineOptions ro = {0}, co = {0};
  ro.backend = &interp_backend, co.backend = &cpu_backend;
  Compiled *ref = pipeline_compile(c, &ro, err, sizeof err), *cpu = pipeline_compile(c, &co, err, sizeof err);
  cr_assert(ref && cpu);
  int T = 4, B = 2, size = ref->p->sparts[0].size;
  HBufs *h = h_bufs_new(ref->p, T, B, 3, 0.4, 0.5);
  Work *wr = ref->be->work_new(ref);
  ref->be->forward(ref, wr, &h->io);
  size_t n = (size_t)(T + 1) * (size_t)B * (size_t)size;
  double *sr = xmalloc(sizeof(double) * n);
  cr_assert_eq(ref->be->read_steps(ref, wr, STEPS_STATE, 0, sr), 0);
  float *xf = xmalloc(sizeof(float) * (size_t)T * B * 3), *yf = xmalloc(sizeof(float) * (size_t)T * B * size);
  for (int i = 0; i < T * B * 3; i++) xf[i] = (float)h->x[i];
  float *pf[16], *h0f = xmalloc(sizeof(float) * (size_t)B * size), *finf = xmalloc(sizeof(float) * (size_t)B * size);
  for (int i = 0; i < h->np; i++) {
    pf[i] = xmalloc(sizeof(float) * h->pn[i]);
    for (size_t j = 0; j < h->pn[i]; j++) pf[i][j] = (float)h->params[i][j];
  }
  for (int j = 0; j < B * size; j++) h0f[j] = (float)h->h0[0][j];
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32, s.x = xf, s.params = (const void **)pf, s.y = yf;
  const void *h0s[1] = {h0f};
  void *fins[1] = {finf};
  s.h0 = h0s, s.final = fins;
  Work *wc = cpu->be->work_new(cpu);
  cpu->be->forward(cpu, wc, &s);
  float *sc = xmalloc(sizeof(float) * n);
  cr_assert_eq(cpu->be->read_steps(cpu, wc, STEPS_STATE, 0, sc), 0);
  for (size_t i = 0; i < n; i++) cr_expect(fabs(sr[i] - sc[i]) < 1e-4, "state element %zu: %g vs %g", i, sr[i], sc[i]);
  for (int j = 0; j < B * size; j++) {
    cr_expect(sr[j] == h->h0[0][j], "h_0 is h0");
    cr_expect(sc[(size_t)T * B * size + j] == finf[j], "h_T is final");
  }
  ref->be->work_free(wr), cpu->be->work_free(wc);
  for (int i = 0; i < h->np; i++) free(pf[i]);
  free(sr), free(sc), free(xf), free(yf), free(h0f), free(finf);
  h_bufs_free(h);
  pipeline_release(ref), pipeline_release(cpu);
  cell_free(c);
  arena_free(&arena);
}
