/* test_cuda_train.c: every kernel of the device operations of training (cellc_train.cu through
 * cuda_ops.c) on cuda-emu against its CPU counterpart (the host device: runtime/nn and
 * runtime/optim) on the same random data: embedding, linear (cuBLAS), readouts, the broadcast and
 * column sums of learned initial states, cross-entropy with masks and MSE with row flags (training
 * and evaluation), the gradient norm, clipping's scale, SGD (with and without momentum), Adam and
 * AdamW, the skip connection, layer and RMS norms, batch norm (training and evaluation), the GLU and
 * MLP mixers, dropout's counter-based mask and the gumbel noise's uniforms (bit for bit); every kernel through the real NVRTC and ptxas -v for sm_80 and sm_90 with no spills;
 * `cuda` without a driver. What the two sides sum in different orders (the products, the
 * embedding's gradient) is checked against float32's rounding bound around the exact value. */
#include <dlfcn.h>
#include <sys/stat.h>

#include "cuda.h"
#include "cuda_api.h"
#include "harness.h"
#include "ptxas.h"
#include "model.h"

static Device *H, *D; /* the host device, cuda-emu's */

static void setup(void) {
  h_use_cuda_test_cache();
  char err[8192];
  H = device_host();
  D = device_open(DEVICE_CUDA_EMU, err, sizeof err);
  cr_assert(D, "cuda-emu ops: %s", err);
}

static void teardown(void) {
  device_release(D);
}

TestSuite(cuda_train, .init = setup, .fini = teardown);

/* A buffer on both sides: host floats h (the host device works on them) and a device copy d. */
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

/* ---- bounds from float32's rounding, for what the two sides sum in different orders ----
 * A product's K terms are summed in one order by the host (runtime/gemm's kernels, the weight
 * gradient's float64 totals) and in another by the device (cuBLAS; on cuda-emu, OpenBLAS's sgemm),
 * both orders set by the CPU's kernels: where the terms cancel, the results differ by more than any
 * fixed fraction of the value (with OpenBLAS's Prescott kernels, which it picks on some Xeons, the
 * GLU's dinp by 1.2e-5 of it). So these checks follow the computation in double: a Re is one of its
 * values in exact arithmetic, v, with e, a bound on the error of any float32 evaluation of the same
 * formula, in units of u = 2^-24, to first order in u (Higham, Accuracy and Stability of Numerical
 * Algorithms, 2nd ed., 2.2, 3.1 and 3.3):
 *   one rounded +, -, *, /:         the operands' errors carried through, plus |result| (its rounding)
 *   a sum of n terms, any order,    the terms' errors carried through, plus n sum |term|
 *   each maybe a product:           (gamma_n = n u / (1 - n u); with or without FMA)
 *   a libm function f(x):           |f'(x)| e_x plus 4 |f| (at most 2 ulp: CUDA's expf and erff; glibc's
 *                                   are within 1; an ulp of f is at most 2 u |f|)
 * A mixer's stages compose these (the forward's cache carries its error into the gates and the
 * backward's products), so u e is K u times the same products evaluated on absolute values,
 * plus what the stages carry. Each side is then within u e of v (the neglected terms, (u e)^2 and
 * n u next to gamma_n, are below 1e-5 of u e here), so the two within 2 u e of each other; each side
 * is checked against v, so two sides that agree on a wrong value fail too. The bound is the worst
 * case (the errors seen here are at most 0.36 of it), and an element off by 1e-4 of its value
 * exceeds it unless its terms cancel to a few hundredths of their magnitudes. */
static const double U32 = 0x1p-24;

typedef struct Re {
  double v; /* the value in exact arithmetic */
  double e; /* a float32 evaluation's error bound / u */
} Re;

static Re re_in(float x) { return (Re){x, 0}; } /* an input: both sides hold the same float */
static Re re_add(Re a, Re b) { return (Re){a.v + b.v, a.e + b.e + fabs(a.v + b.v)}; }
static Re re_sub(Re a, Re b) { return (Re){a.v - b.v, a.e + b.e + fabs(a.v - b.v)}; }
static Re re_mul(Re a, Re b) { return (Re){a.v * b.v, fabs(a.v) * b.e + fabs(b.v) * a.e + fabs(a.v * b.v)}; }
static Re re_div(Re a, Re b) {
  double q = a.v / b.v;
  return (Re){q, a.e / fabs(b.v) + fabs(q) * b.e / fabs(b.v) + fabs(q)};
}
/* f(x) by libm, f'(x) its derivative */
static Re re_libm(Re x, double f, double fprime) { return (Re){f, fabs(fprime) * x.e + 4 * fabs(f)}; }

/* A sum of n terms in an order neither side promises. */
typedef struct ReSum {
  double v, e, abs; /* the terms': sum, carried errors, sum of magnitudes */
  int n;
} ReSum;

static void sum_add(ReSum *s, Re t) { s->v += t.v, s->e += t.e, s->abs += fabs(t.v), s->n++; }
/* a product a b as a term: its rounding is in gamma_n */
static void sum_mul(ReSum *s, Re a, Re b) {
  sum_add(s, (Re){a.v * b.v, fabs(a.v) * b.e + fabs(b.v) * a.e});
}
static Re sum_re(const ReSum *s) { return (Re){s->v, s->e + s->n * s->abs}; }

static Re *re_of(const float *x, size_t n) {
  Re *r = xcalloc(n + 1, sizeof(Re));
  for (size_t i = 0; i < n; i++) r[i] = re_in(x[i]);
  return r;
}

/* runtime/nn's linear layer: out (rows, O) = in (rows, I) W^T + b, W (O, I), b NULL: none */
static void re_linear_fwd(Re *out, const Re *in, const float *w, const float *b, int rows, int nin, int nout) {
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < nout; o++) {
      ReSum s = {0};
      if (b) sum_add(&s, re_in(b[o]));
      for (int i = 0; i < nin; i++) sum_mul(&s, in[(size_t)r * nin + i], re_in(w[(size_t)o * nin + i]));
      out[(size_t)r * nout + o] = sum_re(&s);
    }
}

/* Its backward's terms: dinp (rows, I) += dout W, dw (O, I) += dout^T in, db (O) += dout's column
 * sums, into sums that hold what came before (NULL: skipped). */
static void re_linear_bwd(ReSum *dinp, ReSum *dw, ReSum *db, const Re *dout, const Re *in, const float *w, int rows, int nin,
                          int nout) {
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < nout; o++) {
      Re g = dout[(size_t)r * nout + o];
      if (db) sum_add(&db[o], g);
      for (int i = 0; i < nin; i++) {
        if (dinp) sum_mul(&dinp[(size_t)r * nin + i], g, re_in(w[(size_t)o * nin + i]));
        if (dw) sum_mul(&dw[(size_t)o * nin + i], g, in[(size_t)r * nin + i]);
      }
    }
}

/* Sums of n elements starting from x's values (the buffers the backward adds into; x NULL: 0). */
static ReSum *sums_from(const float *x, size_t n) {
  ReSum *s = xcalloc(n + 1, sizeof(ReSum));
  for (size_t i = 0; x && i < n; i++) sum_add(&s[i], re_in(x[i]));
  return s;
}

static Re *sums_re(const ReSum *s, size_t n) {
  Re *r = xcalloc(n + 1, sizeof(Re));
  for (size_t i = 0; i < n; i++) r[i] = sum_re(&s[i]);
  return r;
}

/* The element and side farthest from v for its bound: |side - v| / (u e) there. */
typedef struct Worst {
  double ratio, got;
  size_t at;
  bool device;
} Worst;

static Worst worst_of(const Pair *p, const Re *want) {
  float *dev = xcalloc(p->n + 1, sizeof(float));
  D->download(D, dev, p->d, sizeof(float) * p->n);
  Worst w = {-1, 0, 0, false};
  for (size_t i = 0; i < p->n; i++)
    for (int side = 0; side < 2; side++) {
      double x = side ? dev[i] : p->h[i], r = fabs(x - want[i].v) / (U32 * want[i].e + 1e-300);
      if (r > w.ratio) w = (Worst){r, x, i, side};
    }
  free(dev);
  return w;
}

/* Each side within the rounding bound of the exact value: |side - v| <= u e (CELLC_BOUND_REPORT
 * prints the largest ratio of each check). */
static void expect_bounded(const Pair *p, const Re *want, const char *what) {
  Worst w = worst_of(p, want);
  if (getenv("CELLC_BOUND_REPORT")) printf("bound %-28s largest error / bound %.3g\n", what, w.ratio);
  cr_expect(w.ratio <= 1, "%s[%zu]: %s %.9g, exact %.9g, bound %.3g: %.3g times the bound", what, w.at,
            w.device ? "device" : "host", w.got, want[w.at].v, U32 * want[w.at].e, w.ratio);
}

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
  ReSum *sdwte = sums_from(dwte.h, dwte.n); /* the rows of each id, in an order neither side promises */
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) sum_add(&sdwte[(size_t)ids[r] * C + c], re_in(dout.h[(size_t)r * C + c]));
  Re *rdwte = sums_re(sdwte, dwte.n);
  H->embed_bwd(H, dwte.h, dout.h, ids, rows, V, C), D->embed_bwd(D, dwte.d, dout.d, dids, rows, V, C);
  expect_bounded(&dwte, rdwte, "embedding backward");
  pair_free(&wte), pair_free(&out), pair_free(&dout), pair_free(&dwte);
  free(sdwte), free(rdwte);
  free(ids), D->free(D, dids);
}

static void linear_case(bool bias) {
  int rows = 11, nin = 6, nout = 5;
  Pair inp = pair((size_t)rows * nin, 1, 1), w = pair((size_t)nout * nin, 2, 0.5), b = pair((size_t)nout, 3, 1),
       out = pair((size_t)rows * nout, 4, 1), dout = pair((size_t)rows * nout, 5, 1), dinp = pair((size_t)rows * nin, 6, 1),
       dw = pair((size_t)nout * nin, 7, 1), db = pair((size_t)nout, 8, 1);
  Re *rin = re_of(inp.h, inp.n), *rdout = re_of(dout.h, dout.n), *rout = xcalloc(out.n, sizeof(Re));
  re_linear_fwd(rout, rin, w.h, bias ? b.h : NULL, rows, nin, nout);
  ReSum *sdinp = sums_from(NULL, dinp.n), *sdw = sums_from(dw.h, dw.n), *sdb = sums_from(db.h, db.n); /* dinp written */
  re_linear_bwd(sdinp, sdw, bias ? sdb : NULL, rdout, rin, w.h, rows, nin, nout);
  Re *rdinp = sums_re(sdinp, dinp.n), *rdw = sums_re(sdw, dw.n), *rdb = sums_re(sdb, db.n);
  H->linear_fwd(H, out.h, inp.h, w.h, bias ? b.h : NULL, rows, nin, nout);
  D->linear_fwd(D, out.d, inp.d, w.d, bias ? b.d : NULL, rows, nin, nout);
  expect_bounded(&out, rout, "linear forward");
  H->linear_bwd(H, dinp.h, dw.h, bias ? db.h : NULL, dout.h, inp.h, w.h, rows, nin, nout);
  D->linear_bwd(D, dinp.d, dw.d, bias ? db.d : NULL, dout.d, inp.d, w.d, rows, nin, nout);
  expect_bounded(&dinp, rdinp, "linear dinp");
  expect_bounded(&dw, rdw, "linear dw");
  expect_bounded(&db, rdb, "linear db");
  Pair *all[] = {&inp, &w, &b, &out, &dout, &dinp, &dw, &db};
  for (int i = 0; i < 8; i++) pair_free(all[i]);
  void *re[] = {rin, rdout, rout, sdinp, sdw, sdb, rdinp, rdw, rdb};
  for (int i = 0; i < 9; i++) free(re[i]);
}

/* The bounds hold for any order of the sums: the host's products are checked with each of its
 * kernels (Tuning.gemm lowers the CPUID choice; blas: OpenBLAS's, as the device's). */
static void each_host_gemm(void (*check)(bool), bool arg) {
  static const TuningGemm gemm[] = {TUNING_GEMM_HOST, TUNING_GEMM_AVX2, TUNING_GEMM_BLAS};
  Tuning was = *tuning(), t = was;
  for (int i = 0; i < 3; i++) {
    t.gemm = i ? gemm[i] : was.gemm; /* first the kernel CELLC_GEMM gave the test */
    tuning_set(&t);
    check(arg);
  }
  tuning_set(&was);
}

Test(cuda_train, linear_with_bias) { each_host_gemm(linear_case, true); }
Test(cuda_train, linear_without_bias) { each_host_gemm(linear_case, false); }

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

/* The mixers' elementwise steps as runtime/nn and cellc_train.cu write them, in Re. */
static Re re_sigmoid(Re z) { /* 1 / (1 + expf(-z)) */
  Re e = re_libm((Re){-z.v, z.e}, exp(-z.v), exp(-z.v));
  return re_div(re_in(1.0f), re_add(re_in(1.0f), e));
}

static Re re_erf_half(Re x) { /* 1 + erff(x (float)sqrt(1/2)) */
  Re arg = re_mul(x, re_in((float)0.70710678118654752440));
  return re_add(re_in(1.0f), re_libm(arg, erf(arg.v), 1.12837916709551257390 * exp(-arg.v * arg.v)));
}

static Re re_gelu(Re x) { return re_mul(re_mul(re_in(0.5f), x), re_erf_half(x)); } /* 0.5f x (1 + erff(..)) */

static Re re_gelu_grad(Re x) { /* Phi(x) + x phi(x): 0.5f (1 + erff(..)) + x ((float)(1/sqrt(2 pi)) expf(-0.5f x x)) */
  Re y = re_mul(re_mul(re_in(-0.5f), x), x);
  Re pdf = re_mul(re_in((float)0.39894228040143267794), re_libm(y, exp(y.v), exp(y.v)));
  return re_add(re_mul(re_in(0.5f), re_erf_half(x)), re_mul(x, pdf));
}

/* nn.h's GLU and MLP mixers, forward (out and the cache) and backward (dx and the parameters'
 * gradients, added to what dx and d hold), in Re; p and d as the Device take them. */
static void re_mixer(bool glu, Re *out, Re *cache, Re *dx, Re **dparam, const float *x, float *const *p, float *const *d,
                     const float *dout, const float *dx0, int rows, int C, int Hd) {
  size_t n = (size_t)rows * Hd, np = glu ? 6 : 4;
  Re *rx = re_of(x, (size_t)rows * C), *rdout = re_of(dout, (size_t)rows * C), *g1 = xcalloc(n, sizeof(Re)),
     *g2 = xcalloc(n, sizeof(Re));
  ReSum *sdx = sums_from(dx0, (size_t)rows * C), *sd[6], *sg = sums_from(NULL, n);
  for (size_t i = 0; i < np; i++) sd[i] = sums_from(d[i], i % 2 == 0 ? (size_t)C * Hd : i == np - 1 ? (size_t)C : (size_t)Hd);
  if (glu) { /* cache: a, s, g; g1 = da, g2 = dz */
    Re *a = cache, *s = cache + n, *g = cache + 2 * n;
    re_linear_fwd(a, rx, p[0], p[1], rows, C, Hd);
    re_linear_fwd(s, rx, p[2], p[3], rows, C, Hd);
    for (size_t i = 0; i < n; i++) s[i] = re_sigmoid(s[i]), g[i] = re_mul(a[i], s[i]);
    re_linear_fwd(out, g, p[4], p[5], rows, Hd, C);
    re_linear_bwd(sg, sd[4], sd[5], rdout, g, p[4], rows, Hd, C);
    for (size_t i = 0; i < n; i++) {
      Re dg = sum_re(&sg[i]);
      g1[i] = re_mul(dg, s[i]);
      g2[i] = re_mul(re_mul(re_mul(dg, a[i]), s[i]), re_sub(re_in(1.0f), s[i]));
    }
    re_linear_bwd(sdx, sd[2], sd[3], g2, rx, p[2], rows, C, Hd);
    re_linear_bwd(sdx, sd[0], sd[1], g1, rx, p[0], rows, C, Hd);
  } else { /* cache: h, a; g1 = dh */
    Re *h = cache, *a = cache + n;
    re_linear_fwd(h, rx, p[0], p[1], rows, C, Hd);
    for (size_t i = 0; i < n; i++) a[i] = re_gelu(h[i]);
    re_linear_fwd(out, a, p[2], p[3], rows, Hd, C);
    re_linear_bwd(sg, sd[2], sd[3], rdout, a, p[2], rows, Hd, C);
    for (size_t i = 0; i < n; i++) g1[i] = re_mul(sum_re(&sg[i]), re_gelu_grad(h[i]));
    re_linear_bwd(sdx, sd[0], sd[1], g1, rx, p[0], rows, C, Hd);
  }
  for (size_t i = 0; i < (size_t)rows * C; i++) dx[i] = sum_re(&sdx[i]);
  for (size_t i = 0; i < np; i++) {
    size_t m = i % 2 == 0 ? (size_t)C * Hd : i == np - 1 ? (size_t)C : (size_t)Hd;
    for (size_t j = 0; j < m; j++) dparam[i][j] = sum_re(&sd[i][j]);
    free(sd[i]);
  }
  free(rx), free(rdout), free(g1), free(g2), free(sdx), free(sg);
}

/* A mixer (GLU: 6 tensors, MLP: 4) forward and backward on both sides. */
static void mixer_case(bool glu) {
  int rows = 9, C = 4, Hd = glu ? 4 : 16, np = glu ? 6 : 4;
  Pair p[6], d[6];
  float *hp[6], *dp[6], *hd[6], *dd[6];
  Re *rd[6];
  for (int i = 0; i < np; i++) {
    bool weight = i % 2 == 0;
    size_t n = weight ? (size_t)C * Hd : (size_t)(i == np - 1 ? C : Hd);
    p[i] = pair(n, 10 + i, 0.5), d[i] = pair(n, 20 + i, 1);
    hp[i] = p[i].h, dp[i] = p[i].d, hd[i] = d[i].h, dd[i] = d[i].d;
    rd[i] = xcalloc(n, sizeof(Re));
  }
  size_t nc = (glu ? 3 : 2) * (size_t)rows * Hd;
  Pair x = pair((size_t)rows * C, 1, 1), out = pair((size_t)rows * C, 0, 0), cache = pair(nc, 0, 0),
       scratch = pair(2 * (size_t)rows * Hd, 0, 0), dout = pair((size_t)rows * C, 2, 1), dx = pair((size_t)rows * C, 3, 1);
  Re *rout = xcalloc(out.n, sizeof(Re)), *rcache = xcalloc(nc, sizeof(Re)), *rdx = xcalloc(dx.n, sizeof(Re));
  re_mixer(glu, rout, rcache, rdx, rd, x.h, hp, hd, dout.h, dx.h, rows, C, Hd); /* before the host adds to dx and d */
  if (glu) {
    H->glu_fwd(H, out.h, cache.h, x.h, hp, rows, C, Hd), D->glu_fwd(D, out.d, cache.d, x.d, dp, rows, C, Hd);
  } else {
    H->mlp_fwd(H, out.h, cache.h, x.h, hp, rows, C, Hd), D->mlp_fwd(D, out.d, cache.d, x.d, dp, rows, C, Hd);
  }
  expect_bounded(&out, rout, glu ? "glu forward" : "mlp forward");
  expect_bounded(&cache, rcache, glu ? "glu cache" : "mlp cache");
  if (glu) {
    H->glu_bwd(H, dx.h, hd, scratch.h, dout.h, x.h, cache.h, hp, rows, C, Hd);
    D->glu_bwd(D, dx.d, dd, scratch.d, dout.d, x.d, cache.d, dp, rows, C, Hd);
  } else {
    H->mlp_bwd(H, dx.h, hd, scratch.h, dout.h, x.h, cache.h, hp, rows, C, Hd);
    D->mlp_bwd(D, dx.d, dd, scratch.d, dout.d, x.d, cache.d, dp, rows, C, Hd);
  }
  expect_bounded(&dx, rdx, glu ? "glu dinp" : "mlp dinp");
  static const char *names[2][6] = {{"mlp dw1", "mlp db1", "mlp dw2", "mlp db2"},
                                    {"glu dw1", "glu db1", "glu dw2", "glu db2", "glu dw3", "glu db3"}};
  for (int i = 0; i < np; i++) {
    expect_bounded(&d[i], rd[i], names[glu][i]);
    pair_free(&p[i]), pair_free(&d[i]), free(rd[i]);
  }
  pair_free(&x), pair_free(&out), pair_free(&cache), pair_free(&scratch), pair_free(&dout), pair_free(&dx);
  free(rout), free(rcache), free(rdx);
}

Test(cuda_train, glu_mixer) { each_host_gemm(mixer_case, true); }
Test(cuda_train, mlp_mixer) { each_host_gemm(mixer_case, false); }

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
  Device *o = device_open(DEVICE_CUDA, err, sizeof err);
  cr_expect_null(o);
  cr_expect(strstr(err, "libcuda.so.1"), "%s", err);
}
