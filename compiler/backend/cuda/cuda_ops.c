/* cuda_ops.c: the device operations of training (device.h's Device) on the cuda and cuda-emu
 * devices: the kernels of cellc_train.cu (compiled once by NVRTC or the emulator), cuBLAS for the
 * linear layers' products, the driver's copies and memsets. One host thread drives it. */
#include <string.h>

#include "cuda.h"
#include "cuda_dev.h"
#include "cuda_internal.h"
#include "support.h"

#define TR_KERNELS(X)                                                                                     \
  X(tr_embed_fwd) X(tr_embed_bwd) X(tr_bcast_rows) X(tr_colsum_add) X(tr_readout_fwd) X(tr_readout_bwd)     \
  X(tr_ce_rows) X(tr_mse_rows) X(tr_sum) X(tr_sumsq) X(tr_scale) X(tr_sgd) X(tr_adam) X(tr_add) X(tr_acc)      \
  X(tr_norm_fwd) X(tr_norm_bwd_dx) X(tr_norm_bwd_dwdb) X(tr_bn_stats) X(tr_bn_apply) X(tr_bn_bwd_sums)          \
  X(tr_bn_bwd_dx) X(tr_glu_gate) X(tr_glu_gate_bwd) X(tr_gelu) X(tr_gelu_bwd) X(tr_dropout) X(tr_mul_acc) X(tr_uniform_open)
#define TR_FIELD(name) CUfunction name;
#define BLOCK 256u
#define MAX_BLOCKS 4096u

typedef struct CudaOps {
  Device base;
  CudaDev *d;
  CUmodule mod;
  struct { TR_KERNELS(TR_FIELD) } k;
  CUdeviceptr scratch; /* doubles: per-row losses and hits, the norm's partial sums, the results */
  size_t scratch_n;
} CudaOps;

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

static void die(const CudaOps *o, const char *err) {
  fprintf(stderr, "cellc: train.device = %s failed: %s\n", o->base.name, err);
  exit(3);
}

#define CU(o, fn, ...)                                                                       \
  do {                                                                                       \
    char e_[1024];                                                                           \
    if (CUDA_CU(&(o)->d->api, e_, sizeof e_, fn, __VA_ARGS__) != 0) die((o), e_);            \
  } while (0)
#define CUBLAS(o, fn, ...)                                                                   \
  do {                                                                                       \
    char e_[1024];                                                                           \
    if (CUDA_CUBLAS(&(o)->d->api, e_, sizeof e_, fn, __VA_ARGS__) != 0) die((o), e_);        \
  } while (0)

static CudaOps *cur(Device *b) {
  CudaOps *o = (CudaOps *)b;
  CU(o, cuCtxSetCurrent, o->d->ctx);
  return o;
}

static int load_kernels(CudaOps *o, char *err, size_t errlen);
static int c_prepare(Device *b, char *err, size_t errlen);

/* cur, with the training kernels loaded (the first training operation loads them unless
 * Device.prepare did: exit 3 naming why when they cannot be). */
static CudaOps *kern(Device *b) {
  CudaOps *o = cur(b);
  char err[8192];
  if (!o->mod && load_kernels(o, err, sizeof err) != 0) die(o, err);
  return o;
}

static unsigned blocks_for(long long n) {
  long long b = (n + BLOCK - 1) / BLOCK;
  return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

static void launch(CudaOps *o, CUfunction f, long long n, void **args) {
  if (n <= 0) return;
  CU(o, cuLaunchKernel, f, blocks_for(n), 1, 1, BLOCK, 1, 1, 0, NULL, args, NULL);
}

/* ---- memory ---- */

static size_t c_mem_free_bytes(Device *b) {
  CudaOps *o = cur(b);
  size_t fr = 0, total = 0;
  CU(o, cuMemGetInfo, &fr, &total);
  return fr;
}

static void *c_alloc(Device *b, size_t bytes) {
  CudaOps *o = cur(b);
  CUdeviceptr p;
  if (bytes == 0) bytes = 4;
  CUresult r = o->d->api.cuMemAlloc(&p, bytes);
  if (r != CUDA_SUCCESS) {
    size_t fr = 0, total = 0;
    o->d->api.cuMemGetInfo(&fr, &total);
    fprintf(stderr, "cellc: train.device = %s: not enough device memory: the run asks for %zu more bytes, the device has %zu "
            "free of %zu (%s)\n", o->base.name, bytes, fr, total, cuda_cu_result_name(r));
    exit(3);
  }
  CU(o, cuMemsetD8, p, 0, bytes);
  memuse_add((void *)(uintptr_t)p, bytes);
  return (void *)(uintptr_t)p;
}

static void c_free(Device *b, void *p) {
  CudaOps *o = cur(b);
  memuse_remove(p);
  if (p) CU(o, cuMemFree, DP(p));
}

static void c_upload(Device *b, void *dst, const void *src, size_t bytes) {
  CudaOps *o = cur(b);
  if (bytes) CU(o, cuMemcpyHtoD, DP(dst), src, bytes);
}

static void c_download(Device *b, void *dst, const void *src, size_t bytes) {
  CudaOps *o = cur(b);
  if (bytes) CU(o, cuMemcpyDtoH, dst, DP(src), bytes);
}

static void c_zero(Device *b, void *p, size_t bytes) {
  CudaOps *o = cur(b);
  if (bytes) CU(o, cuMemsetD8, DP(p), 0, bytes);
}

static void c_copy(Device *b, void *dst, const void *src, size_t bytes) {
  CudaOps *o = cur(b);
  if (bytes && dst != src) CU(o, cuMemcpyDtoD, DP(dst), DP(src), bytes);
}

/* n doubles of scratch (grown as needed) */
static CUdeviceptr scratch(CudaOps *o, size_t n) {
  if (n > o->scratch_n) {
    if (o->scratch) CU(o, cuMemFree, o->scratch);
    o->scratch_n = n < 4096 ? 4096 : n;
    CU(o, cuMemAlloc, &o->scratch, o->scratch_n * sizeof(double));
  }
  return o->scratch;
}

/* sum of n doubles at x, on the host */
static double dsum(CudaOps *o, CUdeviceptr x, long long n, CUdeviceptr out) {
  void *args[] = {&x, &n, &out};
  CU(o, cuLaunchKernel, o->k.tr_sum, 1, 1, 1, BLOCK, 1, 1, 0, NULL, args, NULL);
  double v;
  CU(o, cuMemcpyDtoH, &v, out, sizeof v);
  return v;
}

/* ---- the blocks ---- */

static void c_embed_fwd(Device *b, float *out, const int32_t *ids, const float *wte, int rows, int V, int C) {
  CudaOps *o = kern(b);
  (void)V;
  CUdeviceptr po = DP(out), pi = DP(ids), pw = DP(wte);
  long long r = rows;
  void *args[] = {&po, &pi, &pw, &r, &C};
  launch(o, o->k.tr_embed_fwd, r * C, args);
}

static void c_embed_bwd(Device *b, float *dwte, const float *dout, const int32_t *ids, int rows, int V, int C) {
  CudaOps *o = kern(b);
  (void)V;
  if (!dwte) return;
  CUdeviceptr pw = DP(dwte), pd = DP(dout), pi = DP(ids);
  long long r = rows;
  void *args[] = {&pw, &pd, &pi, &r, &C};
  launch(o, o->k.tr_embed_bwd, r * C, args);
}

static void c_bcast_rows(Device *b, float *out, const float *v, int rows, int n) {
  CudaOps *o = kern(b);
  CUdeviceptr po = DP(out), pv = DP(v);
  long long r = rows;
  void *args[] = {&po, &pv, &r, &n};
  launch(o, o->k.tr_bcast_rows, r * n, args);
}

static void c_colsum_add(Device *b, float *acc, const float *x, int rows, int n) {
  CudaOps *o = kern(b);
  CUdeviceptr pa = DP(acc), px = DP(x);
  long long r = rows;
  void *args[] = {&pa, &px, &r, &n};
  launch(o, o->k.tr_colsum_add, n, args);
}

/* Row-major out (rows, nout) = inp (rows, nin) W^T (+ b): column-major out^T = W^T inp^T, one Sgemm
 * (docs/gpu.md's table). */
static void c_linear_fwd(Device *bo, float *out, const float *inp, const float *w, const float *b, int rows, int nin,
                         int nout) {
  CudaOps *o = kern(bo);
  if (rows <= 0 || nout <= 0) return;
  if (b) c_bcast_rows(bo, out, b, rows, nout);
  else c_zero(bo, out, sizeof(float) * (size_t)rows * (size_t)nout);
  if (nin <= 0) return;
  const float one = 1.0f;
  CUBLAS(o, cublasSgemm, o->d->blas, CUBLAS_OP_T, CUBLAS_OP_N, nout, rows, nin, &one, (const float *)w, nin, inp, nin, &one,
         out, nout);
}

/* nn_linear_backward: dinp written (add_dinp false: the Device entry) or added to (the blocks') */
static void linear_bwd(Device *bo, float *dinp, bool add_dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int rows, int nin, int nout) {
  CudaOps *o = kern(bo);
  if (rows <= 0 || nout <= 0) return;
  if (db) c_colsum_add(bo, db, dout, rows, nout);
  if (nin <= 0) return;
  const float one = 1.0f;
  /* dw (nout, nin) += dout^T inp: column-major dw^T (nin x nout) += inp^T (nin x rows) dout (rows x nout) */
  if (dw) CUBLAS(o, cublasSgemm, o->d->blas, CUBLAS_OP_N, CUBLAS_OP_T, nin, nout, rows, &one, inp, nin, dout, nout, &one, dw, nin);
  /* dinp (rows, nin) (+)= dout W: column-major dinp^T (nin x rows) (+)= W^T (nin x nout) dout^T (nout x rows) */
  const float beta = add_dinp ? 1.0f : 0.0f;
  if (dinp)
    CUBLAS(o, cublasSgemm, o->d->blas, CUBLAS_OP_N, CUBLAS_OP_N, nin, rows, nout, &one, w, nin, dout, nout, &beta, dinp, nin);
}

static void c_linear_bwd(Device *bo, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                         int rows, int nin, int nout) {
  linear_bwd(bo, dinp, false, dw, db, dout, inp, w, rows, nin, nout);
}

static void c_readout(Device *b, bool bwd, int mode, float *dst, const float *src, int T, int B, int C) {
  CudaOps *o = kern(b);
  CUdeviceptr pd = DP(dst), ps = DP(src);
  long long bc = (long long)B * C;
  void *args[] = {&mode, &pd, &ps, &T, &bc};
  launch(o, bwd ? o->k.tr_readout_bwd : o->k.tr_readout_fwd, mode == 0 ? T * bc : bc, args);
}
static void c_readout_fwd(Device *b, int mode, float *out, const float *inp, int T, int B, int C) {
  c_readout(b, false, mode, out, inp, T, B, C);
}
static void c_readout_bwd(Device *b, int mode, float *dinp, const float *dout, int T, int B, int C) {
  c_readout(b, true, mode, dinp, dout, T, B, C);
}

/* ---- residual blocks ---- */

static void c_add(Device *bo, float *out, const float *a, const float *b, size_t n) {
  CudaOps *o = kern(bo);
  CUdeviceptr po = DP(out), pa = DP(a), pb = DP(b);
  long long nn = (long long)n;
  void *args[] = {&po, &pa, &pb, &nn};
  launch(o, o->k.tr_add, nn, args);
}

static void c_acc(Device *bo, float *y, const float *x, size_t n) {
  CudaOps *o = kern(bo);
  CUdeviceptr py = DP(y), px = DP(x);
  long long nn = (long long)n;
  void *args[] = {&py, &px, &nn};
  launch(o, o->k.tr_acc, nn, args);
}

static void c_norm_fwd(Device *bo, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                       int rows, int C) {
  CudaOps *o = kern(bo);
  CUdeviceptr po = DP(out), pm = DP(mean), pr = DP(rstd), pi = DP(inp), pw = DP(w), pb = DP(b);
  long long r = rows;
  void *args[] = {&po, &pm, &pr, &pi, &pw, &pb, &r, &C};
  launch(o, o->k.tr_norm_fwd, r, args);
}

static void c_norm_bwd(Device *bo, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int rows, int C) {
  CudaOps *o = kern(bo);
  CUdeviceptr pdx = DP(dinp), pdw = DP(dw), pdb = DP(db), pg = DP(dout), pi = DP(inp), pw = DP(w), pm = DP(mean),
              pr = DP(rstd);
  long long r = rows;
  if (dinp) {
    void *args[] = {&pdx, &pg, &pi, &pw, &pm, &pr, &r, &C};
    launch(o, o->k.tr_norm_bwd_dx, r, args);
  }
  if (dw || db) {
    void *args[] = {&pdw, &pdb, &pg, &pi, &pm, &pr, &r, &C};
    launch(o, o->k.tr_norm_bwd_dwdb, C, args);
  }
}

static void c_bn_fwd(Device *bo, float *out, float *mean, float *rstd, float *rmean, float *rvar, const float *inp,
                     const float *w, const float *b, int rows, int C, bool training) {
  CudaOps *o = kern(bo);
  CUdeviceptr po = DP(out), pm = DP(mean), pr = DP(rstd), prm = DP(rmean), prv = DP(rvar), pi = DP(inp), pw = DP(w), pb = DP(b);
  long long r = rows;
  int tr = training;
  void *sargs[] = {&pm, &pr, &prm, &prv, &pi, &r, &C, &tr};
  launch(o, o->k.tr_bn_stats, C, sargs);
  void *aargs[] = {&po, &pi, &pm, &pr, &pw, &pb, &r, &C};
  launch(o, o->k.tr_bn_apply, r * C, aargs);
}

static void c_bn_bwd(Device *bo, float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                     const float *w, const float *mean, const float *rstd, int rows, int C, bool training) {
  CudaOps *o = kern(bo);
  CUdeviceptr psg = DP(scratch), psgn = DP(scratch + C), pdw = DP(dw), pdb = DP(db), pg = DP(dout), pi = DP(inp), pw = DP(w),
              pm = DP(mean), pr = DP(rstd), pdx = DP(dinp);
  long long r = rows;
  int tr = training;
  void *sargs[] = {&psg, &psgn, &pdw, &pdb, &pg, &pi, &pw, &pm, &pr, &r, &C, &tr};
  launch(o, o->k.tr_bn_bwd_sums, C, sargs);
  if (!dinp) return;
  void *dargs[] = {&pdx, &pg, &pi, &pw, &pm, &pr, &psg, &psgn, &r, &C};
  launch(o, o->k.tr_bn_bwd_dx, r * C, dargs);
}

/* The mixers: runtime/nn's compositions of linear layers and elementwise kernels (nn.h). */
static void c_glu_fwd(Device *bo, float *out, float *cache, const float *inp, float *const *p, int rows, int C, int H) {
  CudaOps *o = kern(bo);
  long long n = (long long)rows * H;
  float *a = cache, *s = cache + n, *g = cache + 2 * n;
  c_linear_fwd(bo, a, inp, p[0], p[1], rows, C, H);
  c_linear_fwd(bo, s, inp, p[2], p[3], rows, C, H);
  CUdeviceptr pa = DP(a), ps = DP(s), pg = DP(g);
  void *args[] = {&pa, &ps, &pg, &n};
  launch(o, o->k.tr_glu_gate, n, args);
  c_linear_fwd(bo, out, g, p[4], p[5], rows, H, C);
}

static void c_glu_bwd(Device *bo, float *dinp, float *const *d, float *scratch, const float *dout, const float *inp, float *cache,
                      float *const *p, int rows, int C, int H) {
  CudaOps *o = kern(bo);
  long long n = (long long)rows * H;
  float *a = cache, *s = cache + n, *g = cache + 2 * n, *dg = scratch, *da = scratch + n;
  linear_bwd(bo, dg, false, d[4], d[5], dout, g, p[4], rows, H, C);
  CUdeviceptr pdg = DP(dg), pda = DP(da), pa = DP(a), ps = DP(s);
  void *args[] = {&pdg, &pda, &pa, &ps, &n};
  launch(o, o->k.tr_glu_gate_bwd, n, args);
  linear_bwd(bo, dinp, true, d[2], d[3], dg, inp, p[2], rows, C, H);
  linear_bwd(bo, dinp, true, d[0], d[1], da, inp, p[0], rows, C, H);
}

static void c_mlp_fwd(Device *bo, float *out, float *cache, const float *inp, float *const *p, int rows, int C, int H) {
  CudaOps *o = kern(bo);
  long long n = (long long)rows * H;
  float *h = cache, *a = cache + n;
  c_linear_fwd(bo, h, inp, p[0], p[1], rows, C, H);
  CUdeviceptr pa = DP(a), ph = DP(h);
  void *args[] = {&pa, &ph, &n};
  launch(o, o->k.tr_gelu, n, args);
  c_linear_fwd(bo, out, a, p[2], p[3], rows, H, C);
}

static void c_mlp_bwd(Device *bo, float *dinp, float *const *d, float *scratch, const float *dout, const float *inp, float *cache,
                      float *const *p, int rows, int C, int H) {
  CudaOps *o = kern(bo);
  long long n = (long long)rows * H;
  float *h = cache, *a = cache + n, *da = scratch;
  linear_bwd(bo, da, false, d[2], d[3], dout, a, p[2], rows, H, C);
  CUdeviceptr pd = DP(da), ph = DP(h);
  void *args[] = {&pd, &ph, &n};
  launch(o, o->k.tr_gelu_bwd, n, args);
  linear_bwd(bo, dinp, true, d[0], d[1], da, inp, p[0], rows, C, H);
}

static void c_dropout_fwd(Device *bo, float *out, float *mask, const float *inp, size_t n, float p, uint64_t key,
                          DrawSlice slice, bool training) {
  CudaOps *o = kern(bo);
  CUdeviceptr po = DP(out), pm = DP(mask), pi = DP(inp);
  long long nn = (long long)n;
  int on = training && p > 0.0f;
  float scale = 1.0f / (1.0f - p);
  unsigned long long k = key, row = slice.row, grow = slice.global_row, first = slice.first;
  void *args[] = {&po, &pm, &pi, &nn, &p, &scale, &k, &row, &grow, &first, &on};
  launch(o, o->k.tr_dropout, nn, args);
}

static void c_uniform_open(Device *bo, float *out, size_t n, uint64_t key, DrawSlice slice) {
  CudaOps *o = kern(bo);
  CUdeviceptr po = DP(out);
  long long nn = (long long)n;
  unsigned long long k = key, row = slice.row, grow = slice.global_row, first = slice.first;
  void *args[] = {&po, &nn, &k, &row, &grow, &first};
  launch(o, o->k.tr_uniform_open, nn, args);
}

static void c_dropout_bwd(Device *bo, float *dinp, const float *dout, const float *mask, size_t n) {
  CudaOps *o = kern(bo);
  if (!dinp) return;
  CUdeviceptr pd = DP(dinp), pg = DP(dout), pm = DP(mask);
  long long nn = (long long)n;
  void *args[] = {&pd, &pg, &pm, &nn};
  launch(o, o->k.tr_mul_acc, nn, args);
}

/* ---- losses: per-row kernels, then their sums in double ---- */

static void c_crossentropy(Device *b, float *dlogits, const float *logits, const int32_t *targets, int N, int V,
                           int64_t counted, double *loss_sum, int64_t *correct) {
  CudaOps *o = kern(b);
  CUdeviceptr s = scratch(o, 2 * (size_t)N + 1), loss = s, hit = s + sizeof(double) * (size_t)N,
              out = s + sizeof(double) * 2 * (size_t)N;
  CUdeviceptr pd = DP(dlogits), pl = DP(logits), pt = DP(targets);
  long long n = N;
  double inv = counted ? 1.0 / (double)counted : 0.0;
  void *args[] = {&pd, &pl, &pt, &n, &V, &inv, &loss, &hit};
  launch(o, o->k.tr_ce_rows, n, args);
  *loss_sum = dsum(o, loss, n, out);
  *correct = (int64_t)(dsum(o, hit, n, out) + 0.5);
}

static void c_mse(Device *b, float *dpred, const float *pred, const float *target, const float *on, int N, int K,
                  int64_t counted, double *sq_sum) {
  CudaOps *o = kern(b);
  CUdeviceptr s = scratch(o, (size_t)N + 1), loss = s, out = s + sizeof(double) * (size_t)N;
  CUdeviceptr pd = DP(dpred), pp = DP(pred), pt = DP(target), pon = DP(on);
  long long n = N;
  double scale = 1.0 / (double)counted;
  void *args[] = {&pd, &pp, &pt, &pon, &n, &K, &scale, &loss};
  launch(o, o->k.tr_mse_rows, n, args);
  *sq_sum = dsum(o, loss, n, out);
}

/* ---- the optimizer ---- */

static double c_sumsq(Device *b, const float *x, size_t n) {
  CudaOps *o = kern(b);
  long long nn = (long long)n;
  unsigned blocks = blocks_for(nn);
  CUdeviceptr s = scratch(o, blocks + 1), out = s + sizeof(double) * blocks, px = DP(x);
  void *args[] = {&px, &nn, &s};
  if (nn <= 0) return 0;
  launch(o, o->k.tr_sumsq, nn, args);
  return dsum(o, s, blocks, out);
}

static void c_scale(Device *b, float *x, float c, size_t n) {
  CudaOps *o = kern(b);
  CUdeviceptr px = DP(x);
  long long nn = (long long)n;
  void *args[] = {&px, &c, &nn};
  launch(o, o->k.tr_scale, nn, args);
}

static void c_sgd(Device *b, float *p, const float *g, float *buf, size_t n, float lr, float wd, float mu) {
  CudaOps *o = kern(b);
  CUdeviceptr pp = DP(p), pg = DP(g), pb = DP(buf);
  long long nn = (long long)n;
  void *args[] = {&pp, &pg, &pb, &nn, &lr, &wd, &mu};
  launch(o, o->k.tr_sgd, nn, args);
}

static void c_adam(Device *b, float *p, const float *g, float *m, float *v, size_t n, const DevAdam *k) {
  CudaOps *o = kern(b);
  CUdeviceptr pp = DP(p), pg = DP(g), pm = DP(m), pv = DP(v);
  long long nn = (long long)n;
  DevAdam a = *k;
  int dec = a.decoupled;
  void *args[] = {&pp, &pg, &pm, &pv, &nn, &a.one_b1, &a.b2, &a.one_b2, &a.eps, &a.wd, &a.step_size, &a.bc2_sqrt, &a.decay, &dec};
  launch(o, o->k.tr_adam, nn, args);
}

/* ---- opening ---- */

static void c_close(Device *b) {
  CudaOps *o = (CudaOps *)b;
  if (!o) return;
  if (o->d) {
    o->d->api.cuCtxSetCurrent(o->d->ctx);
    if (o->scratch) o->d->api.cuMemFree(o->scratch);
    if (o->mod) o->d->api.cuModuleUnload(o->mod);
    cuda_dev_release(o->d);
  }
  free(o);
}

static const Device cuda_ops_table = {
    .close = c_close, .prepare = c_prepare, .alloc = c_alloc, .free = c_free, .upload = c_upload, .download = c_download,
    .zero = c_zero, .copy = c_copy, .mem_free_bytes = c_mem_free_bytes, .embed_fwd = c_embed_fwd,
    .embed_bwd = c_embed_bwd, .linear_fwd = c_linear_fwd, .linear_bwd = c_linear_bwd, .readout_fwd = c_readout_fwd,
    .readout_bwd = c_readout_bwd, .bcast_rows = c_bcast_rows, .colsum_add = c_colsum_add, .add = c_add, .acc = c_acc,
    .norm_fwd = c_norm_fwd, .norm_bwd = c_norm_bwd, .batchnorm_fwd = c_bn_fwd, .batchnorm_bwd = c_bn_bwd,
    .glu_fwd = c_glu_fwd, .glu_bwd = c_glu_bwd, .mlp_fwd = c_mlp_fwd, .mlp_bwd = c_mlp_bwd, .dropout_fwd = c_dropout_fwd, .uniform_open = c_uniform_open,
    .dropout_bwd = c_dropout_bwd, .crossentropy = c_crossentropy, .mse = c_mse, .sumsq = c_sumsq, .scale = c_scale, .sgd = c_sgd, .adam = c_adam,
};

const char *cuda_train_source(void) { return cellc_train_cu; }

/* The training kernels, compiled (or read from the cache) and loaded once: 0, or -1 with why. */
static int load_kernels(CudaOps *o, char *err, size_t errlen) {
  if (o->mod) return 0;
  char why[8192];
  CudaImage img;
  int rc = cuda_compile(&o->d->api, cellc_train_cu, o->d->arch, o->d->emulated ? CUDA_IMAGE_PTX : CUDA_IMAGE_CUBIN, NULL, 0,
                        &img, why, sizeof why);
  if (rc == 0) {
    rc = CUDA_CU(&o->d->api, why, sizeof why, cuCtxSetCurrent, o->d->ctx);
    if (rc == 0) rc = CUDA_CU(&o->d->api, why, sizeof why, cuModuleLoadData, &o->mod, img.data);
    cuda_image_free(&img);
  }
#define TR_GET(name) \
  if (rc == 0) rc = CUDA_CU(&o->d->api, why, sizeof why, cuModuleGetFunction, &o->k.name, o->mod, #name);
  TR_KERNELS(TR_GET)
#undef TR_GET
  if (rc != 0) {
    snprintf(err, errlen, "the training kernels: %s", why);
    if (o->mod) o->d->api.cuModuleUnload(o->mod);
    o->mod = NULL;
    return -1;
  }
  return 0;
}

static int c_prepare(Device *b, char *err, size_t errlen) { return load_kernels(cur(b), err, errlen); }

/* The device's memory is usable at once (the back ends' SeqIO buffers need no more); its training
 * kernels load on Device.prepare or the first training operation, so that `cellc run` on a GPU
 * does not compile them. */
Device *cuda_device_open(bool emulated, char *err, size_t errlen) {
  CudaOps *o = xcalloc(1, sizeof *o);
  o->base = cuda_ops_table;
  o->base.name = emulated ? "cuda-emu" : "cuda";
  o->base.kind = emulated ? DEVICE_CUDA_EMU : DEVICE_CUDA;
  o->d = cuda_dev_acquire(emulated, err, errlen);
  if (!o->d) return free(o), NULL;
  return &o->base;
}
