/* test_lengths.c: SeqIO.lengths through chunked_forward and chunked_backward (compiler/pipeline/
 * varlen.c), the calls the model's layers make, on the cpu back end's float32 buffers: the input
 * gradient summed by token (SeqIO.fold) with lengths gives grad_x's rows by token, to the bit, and
 * nothing for the rows past a length; the weight gradients are those of the run with grad_x, to
 * the bit; in chunks of 3 steps (a Chunker) the results are those of whole segments within float32
 * rounding of the weight gradients' sums; y past a length is zero. (tests/suite_lengths.sh checks
 * every cell, back end and mode against each row run alone.) */
#include "harness.h"

TestSuite(lengths);

static float *f32_random(Rng *r, size_t n) {
  float *v = xmalloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) v[i] = (float)rng_uniform(r) - 0.5f;
  return v;
}

typedef struct Run {
  SeqIO s;
  float *gx, *out;
  void **g;
} Run;

enum { T = 9, B = 5 };
static const int LENS[B] = {4, 9, 1, 4, 7};

/* One forward and backward with lengths: grad_x written, or (fold) summed by one token per row. */
static void run(Compiled *c, const SeqIO *in, Run *r, bool fold, int chunk) {
  const Program *p = c->p;
  size_t rows = (size_t)T * B;
  r->s = *in;
  r->s.y = xcalloc(rows * (size_t)p->output_size, sizeof(float));
  r->s.final = xcalloc((size_t)p->nsparts + 1, sizeof(void *)), r->s.grad_h0 = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int i = 0; i < p->nsparts; i++) {
    r->s.final[i] = xcalloc((size_t)B * (size_t)p->sparts[i].size, sizeof(float));
    r->s.grad_h0[i] = xcalloc((size_t)B * (size_t)p->sparts[i].size, sizeof(float));
  }
  r->g = xcalloc((size_t)p->npparts + 1, sizeof(void *));
  for (int i = 0; i < p->npparts; i++) r->g[i] = xcalloc((size_t)p->pparts[i].numel, sizeof(float));
  r->s.grad_params = r->g;
  r->gx = xcalloc(rows * (size_t)p->x_size, sizeof(float)), r->out = xcalloc(rows * (size_t)p->x_size, sizeof(float));
  static int32_t ids[T * B];
  static SeqFold f;
  for (int i = 0; i < T * B; i++) ids[i] = T * B - 1 - i;
  f = (SeqFold){ids, T * B, r->out};
  r->s.grad_x = fold ? NULL : r->gx, r->s.fold = fold ? &f : NULL;
  Work *w = c->be->work_new(c);
  Chunker *k = chunk ? chunker_new(c, chunk) : NULL;
  chunked_forward(c, w, &r->s, k);
  chunked_backward(c, w, &r->s, k);
  chunker_free(k);
  c->be->work_free(w);
}

static void run_free(const Program *p, Run *r) {
  for (int i = 0; i < p->nsparts; i++) free(r->s.final[i]), free(r->s.grad_h0[i]);
  for (int i = 0; i < p->npparts; i++) free(r->g[i]);
  free(r->s.final), free(r->s.grad_h0), free(r->g), free(r->s.y), free(r->gx), free(r->out);
}

static double rel(const float *a, const float *b, size_t n) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)a[i]));
  return e / fmax(1.0, m);
}

static void lengths_case(const char *file, const char *dims, const char *mode) {
  Arena arena = {0};
  Cell *cell = h_cell(&arena, file, NULL, dims, false, mode);
  char err[256];
  PipelineOptions o = {0};
  o.backend = backend_find("cpu"), o.threads = 2;
  Compiled *c = pipeline_compile(cell, &o, err, sizeof err);
  cr_assert(c, "compile: %s", err);
  const Program *p = c->p;
  Rng rg;
  rng_seed(&rg, 5, 0);
  size_t rows = (size_t)T * B, nx = rows * (size_t)p->x_size, ny = rows * (size_t)p->output_size;
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32, s.lengths = LENS;
  s.x = f32_random(&rg, nx), s.dy = f32_random(&rg, ny);
  void **params = xcalloc((size_t)p->npparts + 1, sizeof(void *)), **h0 = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  void **df = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int i = 0; i < p->npparts; i++) params[i] = f32_random(&rg, (size_t)p->pparts[i].numel);
  for (int i = 0; i < p->nsparts; i++) {
    h0[i] = f32_random(&rg, (size_t)B * (size_t)p->sparts[i].size), df[i] = f32_random(&rg, (size_t)B * (size_t)p->sparts[i].size);
  }
  s.params = (const void **)params, s.h0 = (const void **)h0, s.dfinal = (const void **)df;
  Run a, f, k;
  run(c, &s, &a, false, 0);
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++)
      for (int j = 0; t >= LENS[b] && j < p->output_size; j++)
        cr_assert_eq(((float *)a.s.y)[((size_t)t * B + (size_t)b) * (size_t)p->output_size + (size_t)j], 0.0f, "%s: y past a length", file);
  if (c->be->folds(c)) {
    run(c, &s, &f, true, 0);
    for (size_t i = 0; i < rows; i++)
      cr_assert_eq(memcmp(f.out + (size_t)(T * B - 1 - (int)i) * (size_t)p->x_size, a.gx + i * (size_t)p->x_size,
                          sizeof(float) * (size_t)p->x_size), 0, "%s: row %zu of the fold differs from grad_x's", file, i);
    for (int i = 0; i < p->npparts; i++)
      cr_assert_eq(memcmp(a.g[i], f.g[i], sizeof(float) * (size_t)p->pparts[i].numel), 0, "%s: param part %d with a fold", file, i);
    run_free(p, &f);
  }
  run(c, &s, &k, false, 3);
  double e = fmax(rel(a.s.y, k.s.y, ny), rel(a.gx, k.gx, nx));
  for (int i = 0; i < p->nsparts; i++) {
    size_t n = (size_t)B * (size_t)p->sparts[i].size;
    e = fmax(e, fmax(rel(a.s.final[i], k.s.final[i], n), rel(a.s.grad_h0[i], k.s.grad_h0[i], n)));
  }
  for (int i = 0; i < p->npparts; i++) e = fmax(e, rel(a.g[i], k.g[i], (size_t)p->pparts[i].numel));
  cr_expect(e < 1e-5, "%s: in chunks of 3 with lengths, relative error %g", file, e);
  run_free(p, &a), run_free(p, &k);
  for (int i = 0; i < p->npparts; i++) free(params[i]);
  for (int i = 0; i < p->nsparts; i++) free(h0[i]), free(df[i]);
  free(params), free(h0), free(df), free((void *)s.x), free((void *)s.dy);
  pipeline_release(c);
  cell_free(cell);
  arena_free(&arena);
}

Test(lengths, fold_and_chunks_gru) { lengths_case("stdlib/gru.cell", "H=19,D=5", NULL); }
Test(lengths, fold_and_chunks_lstm) { lengths_case("stdlib/lstm.cell", "H=7,D=5", NULL); }
Test(lengths, fold_and_chunks_mgu_scan) { lengths_case("stdlib/mgu.cell", "H=7,D=5", NULL); }
Test(lengths, chunks_mamba2) { lengths_case("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5", NULL); }
