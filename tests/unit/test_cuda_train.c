/* test_cuda_train.c: every kernel of the device operations of training (cellc_train.cu through
 * cuda_ops.c) on cuda-emu against its CPU counterpart (the host table: runtime/nn and
 * runtime/optim) on the same random data: embedding, linear (cuBLAS), readouts, the broadcast and
 * column sums of learned initial states, cross-entropy with masks and MSE with row flags (training
 * and evaluation), the gradient norm, clipping's scale, SGD (with and without momentum), Adam and
 * AdamW, the skip connection, layer and RMS norms, batch norm (training and evaluation), the GLU and
 * MLP mixers, dropout's counter-based mask and the gumbel noise's uniforms (bit for bit); every kernel through the real NVRTC and ptxas -v for sm_80 and sm_90 with no spills;
 * `cuda` without a driver. */
#include <dlfcn.h>
#include <sys/stat.h>

#include "cuda.h"
#include "cuda_api.h"
#include "harness.h"
#include "model.h"

static DevOps *H, *D; /* the host table, cuda-emu's */

static void setup(void) {
  h_use_cuda_test_cache();
  char err[8192];
  H = model_host_ops();
  D = cuda_ops_open(true, err, sizeof err);
  cr_assert(D, "cuda-emu ops: %s", err);
}

static void teardown(void) {
  if (D) D->close(D);
}

TestSuite(cuda_train, .init = setup, .fini = teardown);

/* A buffer on both sides: host floats h (the host table works on them) and a device copy d. */
typedef struct Pair {
  float *h;
  float *d;
  size_t n;
} Pair;

static Pair pair(size_t n, uint64_t seed, double scale) {
  Pair p = {xcalloc(n + 1, sizeof(float)), D->alloc(D, sizeof(float) * (n + 1)), n};
  Rng r;
  rng_seed(&r, seed, 7);
  for (size_t i = 0; i < n && scale != 0; i++) p.h[i] = (float)(scale * rng_normal(&r));
  D->upload(D, p.d, p.h, sizeof(float) * n);
  return p;
}

static void pair_free(Pair *p) {
  free(p->h);
  D->free(D, p->d);
}

/* The largest |host - device| / max(|host|, 1e-3 max|host|) over the pair. */
static double err_of(const Pair *p) {
  float *got = xcalloc(p->n + 1, sizeof(float));
  D->download(D, got, p->d, sizeof(float) * p->n);
  double top = 0, worst = 0;
  for (size_t i = 0; i < p->n; i++) top = fmax(top, fabs(p->h[i]));
  for (size_t i = 0; i < p->n; i++) worst = fmax(worst, fabs((double)got[i] - p->h[i]) / fmax(fabs(p->h[i]), 1e-3 * top + 1e-30));
  free(got);
  return worst;
}

#define EXPECT_SAME(p, tol, what) cr_expect(err_of(&(p)) <= (tol), "%s: relative error %g", (what), err_of(&(p)))

static int32_t *ids_of(int n, int V, uint64_t seed, bool some_masked, int32_t **dev) {
  int32_t *ids = xcalloc((size_t)n + 1, sizeof(int32_t));
  Rng r;
  rng_seed(&r, seed, 3);
  for (int i = 0; i < n; i++) ids[i] = some_masked && i % 4 == 1 ? -1 : (int32_t)(rng_uniform(&r) * V) % V;
  *dev = D->alloc(D, sizeof(int32_t) * (size_t)n + 1);
  D->upload(D, *dev, ids, sizeof(int32_t) * (size_t)n);
  return ids;
}

Test(cuda_train, embedding) {
  int rows = 14, V = 7, C = 5;
  int32_t *dids, *ids = ids_of(rows, V, 1, false, &dids);
  Pair wte = pair((size_t)V * C, 2, 1), out = pair((size_t)rows * C, 0, 0), dout = pair((size_t)rows * C, 3, 1),
       dwte = pair((size_t)V * C, 4, 1);
  H->embed_fwd(H, out.h, ids, wte.h, rows, V, C), D->embed_fwd(D, out.d, dids, wte.d, rows, V, C);
  EXPECT_SAME(out, 0, "embedding forward");
  H->embed_bwd(H, dwte.h, dout.h, ids, rows, V, C), D->embed_bwd(D, dwte.d, dout.d, dids, rows, V, C);
  EXPECT_SAME(dwte, 1e-6, "embedding backward");
  pair_free(&wte), pair_free(&out), pair_free(&dout), pair_free(&dwte);
  free(ids), D->free(D, dids);
}

static void linear_case(bool bias) {
  int rows = 11, nin = 6, nout = 5;
  Pair inp = pair((size_t)rows * nin, 1, 1), w = pair((size_t)nout * nin, 2, 0.5), b = pair((size_t)nout, 3, 1),
       out = pair((size_t)rows * nout, 4, 1), dout = pair((size_t)rows * nout, 5, 1), dinp = pair((size_t)rows * nin, 6, 1),
       dw = pair((size_t)nout * nin, 7, 1), db = pair((size_t)nout, 8, 1);
  H->linear_fwd(H, out.h, inp.h, w.h, bias ? b.h : NULL, rows, nin, nout);
  D->linear_fwd(D, out.d, inp.d, w.d, bias ? b.d : NULL, rows, nin, nout);
  EXPECT_SAME(out, 1e-5, "linear forward");
  H->linear_bwd(H, dinp.h, dw.h, bias ? db.h : NULL, dout.h, inp.h, w.h, rows, nin, nout);
  D->linear_bwd(D, dinp.d, dw.d, bias ? db.d : NULL, dout.d, inp.d, w.d, rows, nin, nout);
  EXPECT_SAME(dinp, 1e-5, "linear dinp");
  EXPECT_SAME(dw, 1e-5, "linear dw");
  EXPECT_SAME(db, 1e-6, "linear db");
  Pair *all[] = {&inp, &w, &b, &out, &dout, &dinp, &dw, &db};
  for (int i = 0; i < 8; i++) pair_free(all[i]);
}

Test(cuda_train, linear_with_bias) { linear_case(true); }
Test(cuda_train, linear_without_bias) { linear_case(false); }

Test(cuda_train, readouts) {
  int T = 5, B = 3, C = 4;
  for (int mode = 0; mode < 3; mode++) {
    int R = mode == 0 ? T * B : B;
    Pair inp = pair((size_t)T * B * C, 1, 1), out = pair((size_t)R * C, 2, 1), dout = pair((size_t)R * C, 3, 1),
         dinp = pair((size_t)T * B * C, 4, 1);
    H->readout_fwd(H, mode, out.h, inp.h, T, B, C), D->readout_fwd(D, mode, out.d, inp.d, T, B, C);
    EXPECT_SAME(out, 0, mode == 0 ? "readout all" : mode == 1 ? "readout last" : "readout mean");
    H->readout_bwd(H, mode, dinp.h, dout.h, T, B, C), D->readout_bwd(D, mode, dinp.d, dout.d, T, B, C);
    EXPECT_SAME(dinp, 0, mode == 0 ? "readout all backward" : mode == 1 ? "readout last backward" : "readout mean backward");
    pair_free(&inp), pair_free(&out), pair_free(&dout), pair_free(&dinp);
  }
}

Test(cuda_train, learned_states) {
  int B = 6, n = 9;
  Pair v = pair((size_t)n, 1, 1), out = pair((size_t)B * n, 2, 1), x = pair((size_t)B * n, 3, 1), acc = pair((size_t)n, 4, 1);
  H->bcast_rows(H, out.h, v.h, B, n), D->bcast_rows(D, out.d, v.d, B, n);
  EXPECT_SAME(out, 0, "broadcast over rows");
  H->colsum_add(H, acc.h, x.h, B, n), D->colsum_add(D, acc.d, x.d, B, n);
  EXPECT_SAME(acc, 0, "column sums");
  pair_free(&v), pair_free(&out), pair_free(&x), pair_free(&acc);
}

static void ce_case(bool training) {
  int N = 13, V = 6;
  int32_t *dt, *t = ids_of(N, V, 5, true, &dt);
  int64_t counted = 0;
  for (int i = 0; i < N; i++) counted += t[i] >= 0;
  Pair z = pair((size_t)N * V, 1, 2), dz = pair((size_t)N * V, 2, 1);
  double lh, ld;
  int64_t ch, cd;
  H->crossentropy(H, training ? dz.h : NULL, z.h, t, N, V, counted, &lh, &ch);
  D->crossentropy(D, training ? dz.d : NULL, z.d, dt, N, V, counted, &ld, &cd);
  cr_expect(fabs(lh - ld) <= 1e-6 * fabs(lh), "cross-entropy loss: host %.9g device %.9g", lh, ld);
  cr_expect_eq(ch, cd, "arg-max hits: host %lld device %lld", (long long)ch, (long long)cd);
  cr_expect(ch > 0 && lh > 0, "a meaningful case: %lld hits, loss %g", (long long)ch, lh);
  if (training) EXPECT_SAME(dz, 1e-6, "cross-entropy dlogits (masked rows 0)");
  pair_free(&z), pair_free(&dz);
  free(t), D->free(D, dt);
}

Test(cuda_train, crossentropy_training) { ce_case(true); }
Test(cuda_train, crossentropy_eval) { ce_case(false); }

Test(cuda_train, mse_with_row_flags) {
  int N = 9, K = 3;
  Pair pred = pair((size_t)N * K, 1, 1), y = pair((size_t)N * K, 2, 1), on = pair((size_t)N, 0, 0), dp = pair((size_t)N * K, 3, 1);
  int64_t counted = 0;
  for (int r = 0; r < N; r++) on.h[r] = r % 3 != 2, counted += r % 3 != 2 ? K : 0;
  D->upload(D, on.d, on.h, sizeof(float) * (size_t)N);
  double sh, sd;
  H->mse(H, dp.h, pred.h, y.h, on.h, N, K, counted, &sh);
  D->mse(D, dp.d, pred.d, y.d, on.d, N, K, counted, &sd);
  cr_expect(fabs(sh - sd) <= 1e-9 * sh, "mse sum: host %.12g device %.12g", sh, sd);
  EXPECT_SAME(dp, 0, "mse dpred (rows off: 0)");
  pair_free(&pred), pair_free(&y), pair_free(&on), pair_free(&dp);
}

Test(cuda_train, grad_norm_and_scale) {
  size_t n = 300001; /* more than one block's share: the partial sums */
  Pair g = pair(n, 1, 1);
  double a = H->sumsq(H, g.h, n), b = D->sumsq(D, g.d, n);
  cr_expect(fabs(a - b) <= 1e-12 * a, "sum of squares: host %.15g device %.15g", a, b);
  H->scale(H, g.h, 0.37f, n), D->scale(D, g.d, 0.37f, n);
  EXPECT_SAME(g, 0, "scale");
  pair_free(&g);
}

static void sgd_case(float mu) {
  size_t n = 1000;
  Pair p = pair(n, 1, 1), g = pair(n, 2, 1), buf = pair(n, 0, 0);
  for (int step = 0; step < 3; step++) {
    H->sgd(H, p.h, g.h, buf.h, n, 0.1f, 0.01f, mu);
    D->sgd(D, p.d, g.d, buf.d, n, 0.1f, 0.01f, mu);
  }
  EXPECT_SAME(p, 0, "sgd params");
  EXPECT_SAME(buf, 0, "sgd momentum buffer");
  pair_free(&p), pair_free(&g), pair_free(&buf);
}

Test(cuda_train, sgd) { sgd_case(0.0f); }
Test(cuda_train, sgd_momentum) { sgd_case(0.9f); }

static void adam_case(bool decoupled) {
  size_t n = 1000;
  Pair p = pair(n, 1, 1), g = pair(n, 2, 1), m = pair(n, 0, 0), v = pair(n, 0, 0);
  OptHyper h = {.lr_scale = 1, .weight_decay = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
  for (int step = 1; step <= 3; step++) {
    OptAdamK k = opt_adam_k(&h, 1e-2, step, decoupled);
    DevAdam dk = {k.one_b1, k.b2, k.one_b2, k.eps, k.wd, k.step_size, k.bc2_sqrt, k.decay, k.decoupled};
    H->adam(H, p.h, g.h, m.h, v.h, n, &dk), D->adam(D, p.d, g.d, m.d, v.d, n, &dk);
  }
  EXPECT_SAME(p, 0, decoupled ? "adamw params" : "adam params");
  EXPECT_SAME(m, 0, "first moment");
  EXPECT_SAME(v, 0, "second moment");
  pair_free(&p), pair_free(&g), pair_free(&m), pair_free(&v);
}

Test(cuda_train, adam) { adam_case(false); }
Test(cuda_train, adamw) { adam_case(true); }

Test(cuda_train, skip_connection) {
  size_t n = 777;
  Pair a = pair(n, 1, 1), b = pair(n, 2, 1), out = pair(n, 3, 1);
  H->add(H, out.h, a.h, b.h, n), D->add(D, out.d, a.d, b.d, n);
  EXPECT_SAME(out, 0, "add");
  H->acc(H, a.h, b.h, n), D->acc(D, a.d, b.d, n);
  EXPECT_SAME(a, 0, "accumulate");
  pair_free(&a), pair_free(&b), pair_free(&out);
}

static void norm_case(bool layer, bool affine) {
  int rows = 10, C = 7;
  Pair x = pair((size_t)rows * C, 1, 2), w = pair((size_t)C, 2, 1), b = pair((size_t)C, 3, 1), out = pair((size_t)rows * C, 0, 0),
       mean = pair((size_t)rows, 0, 0), rstd = pair((size_t)rows, 0, 0), dout = pair((size_t)rows * C, 4, 1),
       dx = pair((size_t)rows * C, 5, 1), dw = pair((size_t)C, 6, 1), db = pair((size_t)C, 7, 1);
  const float *hw = affine ? w.h : NULL, *hb = affine ? b.h : NULL, *dw_ = affine ? w.d : NULL, *db_ = affine ? b.d : NULL;
  H->norm_fwd(H, out.h, layer ? mean.h : NULL, rstd.h, x.h, hw, hb, rows, C);
  D->norm_fwd(D, out.d, layer ? mean.d : NULL, rstd.d, x.d, dw_, db_, rows, C);
  EXPECT_SAME(out, 0, layer ? "layernorm forward" : "rmsnorm forward");
  EXPECT_SAME(rstd, 0, "norm rstd");
  H->norm_bwd(H, dx.h, affine ? dw.h : NULL, affine ? db.h : NULL, dout.h, x.h, hw, layer ? mean.h : NULL, rstd.h, rows, C);
  D->norm_bwd(D, dx.d, affine ? dw.d : NULL, affine ? db.d : NULL, dout.d, x.d, dw_, layer ? mean.d : NULL, rstd.d, rows, C);
  EXPECT_SAME(dx, 0, "norm dinp");
  EXPECT_SAME(dw, 0, "norm dw");
  EXPECT_SAME(db, 0, "norm db");
  Pair *all[] = {&x, &w, &b, &out, &mean, &rstd, &dout, &dx, &dw, &db};
  for (int i = 0; i < 10; i++) pair_free(all[i]);
}

Test(cuda_train, layernorm) { norm_case(true, true); }
Test(cuda_train, rmsnorm) { norm_case(false, true); }
Test(cuda_train, layernorm_no_affine) { norm_case(true, false); }

static void batchnorm_case(bool training) {
  int rows = 12, C = 5;
  Pair x = pair((size_t)rows * C, 1, 2), w = pair((size_t)C, 2, 1), b = pair((size_t)C, 3, 1), out = pair((size_t)rows * C, 0, 0),
       mean = pair((size_t)C, 0, 0), rstd = pair((size_t)C, 0, 0), rm = pair((size_t)C, 4, 0.1), rv = pair((size_t)C, 0, 0),
       dout = pair((size_t)rows * C, 5, 1), dx = pair((size_t)rows * C, 6, 1), dw = pair((size_t)C, 7, 1),
       db = pair((size_t)C, 8, 1), scratch = pair(2 * (size_t)C, 0, 0);
  for (int c = 0; c < C; c++) rv.h[c] = 1.0f + 0.1f * (float)c;
  D->upload(D, rv.d, rv.h, sizeof(float) * (size_t)C);
  H->batchnorm_fwd(H, out.h, mean.h, rstd.h, rm.h, rv.h, x.h, w.h, b.h, rows, C, training);
  D->batchnorm_fwd(D, out.d, mean.d, rstd.d, rm.d, rv.d, x.d, w.d, b.d, rows, C, training);
  EXPECT_SAME(out, 0, "batchnorm forward");
  EXPECT_SAME(rm, 0, "running mean");
  EXPECT_SAME(rv, 0, "running var");
  H->batchnorm_bwd(H, dx.h, dw.h, db.h, scratch.h, dout.h, x.h, w.h, mean.h, rstd.h, rows, C, training);
  D->batchnorm_bwd(D, dx.d, dw.d, db.d, scratch.d, dout.d, x.d, w.d, mean.d, rstd.d, rows, C, training);
  EXPECT_SAME(dx, 0, "batchnorm dinp");
  EXPECT_SAME(dw, 0, "batchnorm dw");
  EXPECT_SAME(db, 0, "batchnorm db");
  Pair *all[] = {&x, &w, &b, &out, &mean, &rstd, &rm, &rv, &dout, &dx, &dw, &db, &scratch};
  for (int i = 0; i < 13; i++) pair_free(all[i]);
}

Test(cuda_train, batchnorm_training) { batchnorm_case(true); }
Test(cuda_train, batchnorm_eval) { batchnorm_case(false); }

/* A mixer (GLU: 6 tensors, MLP: 4) forward and backward on both sides. */
static void mixer_case(bool glu) {
  int rows = 9, C = 4, Hd = glu ? 4 : 16, np = glu ? 6 : 4;
  Pair p[6], d[6];
  float *hp[6], *dp[6], *hd[6], *dd[6];
  for (int i = 0; i < np; i++) {
    bool weight = i % 2 == 0;
    size_t n = weight ? (size_t)C * Hd : (size_t)(i == np - 1 ? C : Hd);
    p[i] = pair(n, 10 + i, 0.5), d[i] = pair(n, 20 + i, 1);
    hp[i] = p[i].h, dp[i] = p[i].d, hd[i] = d[i].h, dd[i] = d[i].d;
  }
  size_t nc = (glu ? 3 : 2) * (size_t)rows * Hd;
  Pair x = pair((size_t)rows * C, 1, 1), out = pair((size_t)rows * C, 0, 0), cache = pair(nc, 0, 0),
       scratch = pair(2 * (size_t)rows * Hd, 0, 0), dout = pair((size_t)rows * C, 2, 1), dx = pair((size_t)rows * C, 3, 1);
  if (glu) {
    H->glu_fwd(H, out.h, cache.h, x.h, hp, rows, C, Hd), D->glu_fwd(D, out.d, cache.d, x.d, dp, rows, C, Hd);
  } else {
    H->mlp_fwd(H, out.h, cache.h, x.h, hp, rows, C, Hd), D->mlp_fwd(D, out.d, cache.d, x.d, dp, rows, C, Hd);
  }
  EXPECT_SAME(out, 1e-5, glu ? "glu forward" : "mlp forward");
  EXPECT_SAME(cache, 1e-5, "mixer cache");
  if (glu) {
    H->glu_bwd(H, dx.h, hd, scratch.h, dout.h, x.h, cache.h, hp, rows, C, Hd);
    D->glu_bwd(D, dx.d, dd, scratch.d, dout.d, x.d, cache.d, dp, rows, C, Hd);
  } else {
    H->mlp_bwd(H, dx.h, hd, scratch.h, dout.h, x.h, cache.h, hp, rows, C, Hd);
    D->mlp_bwd(D, dx.d, dd, scratch.d, dout.d, x.d, cache.d, dp, rows, C, Hd);
  }
  EXPECT_SAME(dx, 1e-5, glu ? "glu dinp" : "mlp dinp");
  for (int i = 0; i < np; i++) {
    EXPECT_SAME(d[i], 1e-5, "mixer param gradient");
    pair_free(&p[i]), pair_free(&d[i]);
  }
  pair_free(&x), pair_free(&out), pair_free(&cache), pair_free(&scratch), pair_free(&dout), pair_free(&dx);
}

Test(cuda_train, glu_mixer) { mixer_case(true); }
Test(cuda_train, mlp_mixer) { mixer_case(false); }

/* The counter-based dropout mask is the same bits on both sides (and keeps about 1 - p). */
static void dropout_case(float p, bool training) {
  size_t n = 50001;
  DrawSlice slice = DRAW_ALL;
  Pair x = pair(n, 1, 1), out = pair(n, 0, 0), mask = pair(n, 0, 0), dy = pair(n, 2, 1), dx = pair(n, 3, 1);
  uint64_t key = rng_key(17, 5, 3);
  H->dropout_fwd(H, out.h, mask.h, x.h, n, p, key, slice, training), D->dropout_fwd(D, out.d, mask.d, x.d, n, p, key, slice, training);
  EXPECT_SAME(mask, 0, "dropout mask");
  EXPECT_SAME(out, 0, "dropout output");
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) kept += mask.h[i] != 0.0f;
  double want = training ? 1.0 - p : 1.0;
  cr_expect(fabs((double)kept / (double)n - want) < 0.01, "kept %zu of %zu, want about %g", kept, n, want);
  H->dropout_bwd(H, dx.h, dy.h, mask.h, n), D->dropout_bwd(D, dx.d, dy.d, mask.d, n);
  EXPECT_SAME(dx, 0, "dropout backward");
  pair_free(&x), pair_free(&out), pair_free(&mask), pair_free(&dy), pair_free(&dx);
}

Test(cuda_train, dropout_training) { dropout_case(0.3f, true); }
Test(cuda_train, dropout_eval) { dropout_case(0.3f, false); }
Test(cuda_train, dropout_p_zero) { dropout_case(0.0f, true); }

/* A data-parallel rank's part (rows 3..8 of a global batch of 10, T = 7, 4 values per row) draws
 * exactly its slice of the whole batch's mask and noise, on both sides. */
Test(cuda_train, draws_of_a_part) {
  enum { T = 7, GB = 10, B = 6, FIRST = 3, C = 4 };
  size_t nall = (size_t)T * GB * C, n = (size_t)T * B * C;
  DrawSlice slice = {(uint64_t)B * C, (uint64_t)GB * C, (uint64_t)FIRST * C};
  uint64_t key = rng_key(9, 4, 2);
  float *all = xmalloc(sizeof(float) * nall), *allmask = xmalloc(sizeof(float) * nall), *ones = xmalloc(sizeof(float) * nall);
  for (size_t i = 0; i < nall; i++) ones[i] = 1.0f;
  H->uniform_open(H, all, nall, key, DRAW_ALL);
  H->dropout_fwd(H, allmask, allmask, ones, nall, 0.4f, key, DRAW_ALL, true);
  Pair u = pair(n, 0, 0), x = pair(n, 1, 1), out = pair(n, 0, 0), mask = pair(n, 0, 0);
  for (size_t i = 0; i < n; i++) x.h[i] = 1.0f;
  H->uniform_open(H, u.h, n, key, slice), D->uniform_open(D, u.d, n, key, slice);
  H->dropout_fwd(H, out.h, mask.h, x.h, n, 0.4f, key, slice, true), D->dropout_fwd(D, out.d, mask.d, x.d, n, 0.4f, key, slice, true);
  EXPECT_SAME(u, 0, "a part's noise");
  EXPECT_SAME(mask, 0, "a part's dropout mask");
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++)
      for (int j = 0; j < C; j++) {
        size_t i = ((size_t)t * B + (size_t)b) * C + (size_t)j, g = ((size_t)t * GB + (size_t)(FIRST + b)) * C + (size_t)j;
        cr_assert_eq(u.h[i], all[g], "noise of t %d row %d", t, b);
        cr_assert_eq(mask.h[i], allmask[g], "mask of t %d row %d", t, b);
      }
  pair_free(&u), pair_free(&x), pair_free(&out), pair_free(&mask);
  free(all), free(allmask), free(ones);
}

/* The gumbel noise: the same bits on both sides, in (0, 1). */
Test(cuda_train, uniform_open_noise) {
  size_t n = 40001;
  Pair u = pair(n, 0, 0);
  uint64_t key = rng_key(3, 11, 7);
  DrawSlice slice = DRAW_ALL;
  H->uniform_open(H, u.h, n, key, slice), D->uniform_open(D, u.d, n, key, slice);
  EXPECT_SAME(u, 0, "uniform noise");
  double mean = 0;
  for (size_t i = 0; i < n; i++) {
    cr_assert(u.h[i] > 0.0f && u.h[i] < 1.0f, "u[%zu] = %g", i, u.h[i]);
    mean += u.h[i];
  }
  cr_expect(fabs(mean / (double)n - 0.5) < 0.01, "mean %g", mean / (double)n);
  pair_free(&u);
}

/* ---- the training kernels through the real NVRTC and ptxas: no spills ---- */

Test(cuda_train, ptxas_sm80_sm90) {
  CudaApi api;
  char err[8192];
  if (cuda_api_open_nvrtc(&api, err, sizeof err) != 0) cr_skip_test("no NVRTC: %s", err);
  const char *arch[2] = {"sm_80", "sm_90"};
  for (int a = 0; a < 2; a++) {
    CudaImage img;
    cr_assert_eq(cuda_compile(&api, cuda_train_source(), arch[a], CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0, "%s: %s",
                 arch[a], err);
    CudaKernelResources *res = NULL;
    int nres = 0;
    cr_assert_eq(cuda_ptxas_check(img.data, arch[a], &res, &nres, err, sizeof err), 0, "%s", err);
    cr_expect_eq(nres, 29, "%s: ptxas reports %d kernels, cellc_train.cu has 29", arch[a], nres);
    for (int k = 0; k < nres; k++) {
      cr_expect(res[k].spill_store_bytes == 0 && res[k].spill_load_bytes == 0, "%s %s: %d bytes spill stores, %d spill loads",
                arch[a], res[k].name, res[k].spill_store_bytes, res[k].spill_load_bytes);
      if (getenv("CELLC_PTXAS_REPORT"))
        printf("ptxas train %s %s: %d registers, %d B shared, %d B stack, spills %d/%d\n", arch[a], res[k].name,
               res[k].registers, res[k].shared_bytes, res[k].stack_bytes, res[k].spill_store_bytes, res[k].spill_load_bytes);
    }
    free(res);
    cuda_image_free(&img);
  }
  cuda_api_close(&api);
}

Test(cuda_train, cuda_without_driver) {
  char err[1024];
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h) {
    dlclose(h);
    cr_skip_test("a driver is installed here");
  }
  DevOps *o = cuda_backend.ops_new(err, sizeof err);
  cr_expect_null(o);
  cr_expect(strstr(err, "libcuda.so.1"), "%s", err);
}
