/* test_cuda_chunk.c: the chunked form on the CUDA back end (cellc_chunk.cu, compiler/pipeline/
 * chunkdev.c) on cuda-emu: gla, hgrn2, mamba2 and a cell of two terms and two reads
 * (tests/cells/chunk_terms.cell) in --mode chunked against the cpu back end's chunked form (float32)
 * and the float64 interpreter's sequential form: outputs, final states, every param gradient, dx and
 * dh0 within 1e-4 relative (the float32 back ends' bound) at T = 1, 63, 64, 65, 130, chunks of 64 and
 * 16; the issue's T = 2048 (gla at keys and values of 16); the kernels alone against the float64
 * chunk op with decays of 0 and strong ones; the default chunk halved to fit; a chunk op too
 * large for the device's shared memory refused with what it needs; the kernels through the real
 * NVRTC and ptxas -v for sm_80 and sm_90 with no spills; the delta rule's kernels against the
 * float64 chunked delta rule (chunkdelta.h) and gated_deltanet through chunkdev.c as gla.
 * CELLC_TEST_CUDA_BACKEND=cuda (make test-gpu) runs the same on the GPU. */
#include <math.h>
#include <string.h>

#include "cuda.h"
#include "cuda_api.h"
#include "harness.h"
#include "ir.h"
#include "ptxas.h"

TestSuite(cuda_chunk, .init = h_use_cuda_test_cache);

static const Backend *under_test(void) {
  const char *e = getenv("CELLC_TEST_CUDA_BACKEND");
  const Backend *be = backend_find(e && *e ? e : "cuda-emu");
  cr_assert(be && be->device != DEVICE_CPU, "CELLC_TEST_CUDA_BACKEND=%s: not a CUDA back end", e);
  return be;
}

/* The chunked form on the back end under test, on the cpu (chunked) and the interpreter
 * (sequential, float64) on the same inputs: the worst relative differences into *worst. */
static void cases(const char *file, const char *set, const char *dims, const int *Ts, int nT, const int *Ls, int nL, double *worst) {
  Arena a = {0};
  Cell *cs = h_cell(&a, file, set, dims, false, "sequential");
  Cell *cc = h_cell(&a, file, set, dims, false, "chunked");
  PipelineOptions oi = {.backend = backend_find("interp"), .gates = true};
  PipelineOptions oc = {.backend = backend_find("cpu"), .gates = true, .threads = 1};
  PipelineOptions og = {.backend = under_test(), .gates = true};
  char err[2048] = "";
  Compiled *ref = pipeline_compile(cs, &oi, err, sizeof err);
  cr_assert(ref, "%s", err);
  for (int li = 0; li < nL; li++) {
    ChunkForm *fc = chunkform_compile(cc, &oc, Ls[li], err, sizeof err);
    cr_assert(fc, "%s", err);
    ChunkForm *fg = chunkform_compile(cc, &og, Ls[li], err, sizeof err);
    cr_assert(fg, "%s", err);
    for (int i = 0; i < nT; i++) {
      int T = Ts[i], B = 2;
      uint64_t seed = (uint64_t)(T * 23 + Ls[li]);
      HBufs *h1 = h_bufs_new(ref->p, T, B, seed, 0.5, 1), *h2 = h_bufs_new(ref->p, T, B, seed, 0.5, 1);
      HBufs *h3 = h_bufs_new(ref->p, T, B, seed, 0.5, 1);
      pipeline_run_f64(ref, &h1->io);
      chunkform_run_f64(fc, &h2->io);
      chunkform_run_f64(fg, &h3->io);
      const char *what;
      double e = h_compare(h1, h3, ref->p, &what);
      cr_expect_lt(e, 1e-4, "%s on %s T=%d L=%d against the interpreter: %s off by %g", file, og.backend->name, T, Ls[li], what, e);
      worst[0] = e > worst[0] ? e : worst[0];
      e = h_compare(h2, h3, ref->p, &what);
      cr_expect_lt(e, 1e-4, "%s on %s T=%d L=%d against the cpu: %s off by %g", file, og.backend->name, T, Ls[li], what, e);
      worst[1] = e > worst[1] ? e : worst[1];
      /* the comparison sees something: the gradients are not all zero */
      double gsum = 0;
      for (int p = 0; p < h3->np; p++)
        for (size_t j = 0; j < h3->pn[p]; j++) gsum += fabs(h3->gparams[p][j]);
      cr_expect(T == 0 || gsum > 0);
      h_bufs_free(h1), h_bufs_free(h2), h_bufs_free(h3);
    }
    chunkform_free(fc), chunkform_free(fg);
  }
  pipeline_release(ref);
  cell_free(cs), cell_free(cc);
  arena_free(&a);
}

static const int Ts[] = {1, 63, 64, 65, 130}, Ls[] = {64, 16};

static void small_cases(const char *file, const char *dims) {
  double worst[2] = {0, 0};
  cases(file, NULL, dims, Ts, 5, Ls, 2, worst);
  cr_log_info("%s: worst relative difference %g against the interpreter, %g against the cpu", file, worst[0], worst[1]);
  cr_expect_gt(worst[0], 0); /* float32 compared with float64 */
}

Test(cuda_chunk, gla) { small_cases("stdlib/gla.cell", "NH=2,K=3,V=4,D=5"); }
Test(cuda_chunk, hgrn2) { small_cases("stdlib/hgrn2.cell", "NH=2,K=3,V=4,D=5"); }
Test(cuda_chunk, mamba2) { small_cases("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5"); }
/* two terms and two reads: three sub-steps a step in the kernels' indexing */
Test(cuda_chunk, terms_and_reads) {
  static const int Lt[] = {16, 5};
  double worst[2] = {0, 0};
  cases("tests/cells/chunk_terms.cell", NULL, "NH=2,K=3,V=4,D=5", Ts, 5, Lt, 2, worst);
  cr_expect_gt(worst[0], 0);
}

/* The default chunk where 64 steps of three sub-steps do not fit a block (A and dA of 192 x 192):
 * the longest that does, 32; a chunk of 64 asked for is refused, naming what it needs. */
Test(cuda_chunk, default_chunk_fits_the_device) {
  Arena a = {0};
  Cell *cc = h_cell(&a, "tests/cells/chunk_terms.cell", NULL, "NH=2,K=3,V=4,D=5", false, "chunked");
  PipelineOptions o = {.backend = under_test()};
  char err[1024] = "";
  ChunkForm *f = chunkform_compile(cc, &o, 0, err, sizeof err);
  cr_assert(f, "%s", err);
  cr_expect_eq(chunkform_length(f), 32);
  chunkform_free(f);
  cr_expect_null(chunkform_compile(cc, &o, 64, err, sizeof err));
  cr_expect(strstr(err, "a chunk of 192 sub-steps") && strstr(err, "shorter chunk"), "%s", err);
  cell_free(cc);
  arena_free(&a);
}

/* The issue's longest length, 32 chunks of 64 (128 of 16), at keys and values of 16 */
Test(cuda_chunk, issue_lengths) {
  static const int Tl[] = {2048};
  double worst[2] = {0, 0};
  cases("stdlib/gla.cell", NULL, "NH=2,K=16,V=16,D=8", Tl, 1, Ls, 2, worst);
  cr_log_info("cuda_chunk issue_lengths: worst relative difference %g against the interpreter, %g against the cpu", worst[0],
              worst[1]);
}

/* A chunk op whose block does not fit the device's shared memory: refused when compiling, saying
 * what it needs and that a shorter chunk fits; the shorter chunk then runs. */
Test(cuda_chunk, too_large_for_shared_memory) {
  Arena a = {0};
  Cell *cc = h_cell(&a, "stdlib/gla.cell", NULL, "NH=1,K=128,V=128,D=4", false, "chunked");
  PipelineOptions o = {.backend = under_test()};
  char err[1024] = "";
  cr_assert_null(chunkform_compile(cc, &o, 64, err, sizeof err));
  cr_expect(strstr(err, "cannot run the chunked form") && strstr(err, "bytes of shared memory") && strstr(err, "shorter chunk"),
            "%s", err);
  ChunkForm *f = chunkform_compile(cc, &o, 8, err, sizeof err);
  cr_expect(f, "%s", err);
  chunkform_free(f);
  cell_free(cc);
  arena_free(&a);
}

/* The kernels through the real NVRTC and ptxas: no spills */
Test(cuda_chunk, ptxas_sm80_sm90) {
  CudaApi api;
  char err[8192];
  if (cuda_api_open_nvrtc(&api, err, sizeof err) != 0) cr_skip_test("no NVRTC: %s", err);
  const char *arch[2] = {"sm_80", "sm_90"};
  char *src = cuda_chunk_source();
  for (int a = 0; a < 2; a++) {
    CudaImage img;
    cr_assert_eq(cuda_compile(&api, src, arch[a], CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0, "%s: %s", arch[a], err);
    CudaKernelResources *res = NULL;
    int nres = 0;
    cr_assert_eq(cuda_ptxas_check(img.data, arch[a], &res, &nres, err, sizeof err), 0, "%s", err);
    cr_expect_eq(nres, 9, "%s: ptxas reports %d kernels, cellc_chunk.cu has 9", arch[a], nres);
    for (int k = 0; k < nres; k++) {
      cr_expect(res[k].spill_store_bytes == 0 && res[k].spill_load_bytes == 0, "%s %s: %d bytes spill stores, %d spill loads",
                arch[a], res[k].name, res[k].spill_store_bytes, res[k].spill_load_bytes);
      if (getenv("CELLC_PTXAS_REPORT"))
        printf("ptxas chunk %s %s: %d registers, %d B shared, %d B stack, spills %d/%d\n", arch[a], res[k].name, res[k].registers,
               res[k].shared_bytes, res[k].stack_bytes, res[k].spill_store_bytes, res[k].spill_load_bytes);
    }
    free(res);
    cuda_image_free(&img);
  }
  free(src);
  cuda_api_close(&api);
}

/* ---- the kernels alone against the float64 chunk op (compiler/ir/chunkop.c) ---- */

/* max |got - want| / max(floor, max |want|) over rows of wd values at stride ld; infinite at a NaN */
static double rel_at(const float *got, const double *want, int rows, int ld, int wd, double floor) {
  double m = floor, e = 0;
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < wd; j++) {
      double y = want[(size_t)r * ld + j], g = got[(size_t)r * ld + j];
      m = fmax(m, fabs(y)), e = isnan(g) ? INFINITY : fmax(e, fabs(g - y));
    }
  return e / m;
}

/* One head of one batch row on the device: float32 copies of its rows yin ([T, nin]), S_0, dS_T
 * (ds) and the reads' gradient (dout, [T, V]); the kernels run on them (rig_run) and their results
 * come back: the reads ho, the final state hf, the rows' gradient hg, dS_0 hgh. */
typedef struct Rig {
  Device *dv;
  CudaChunk *ck;
  size_t ny, nx, kv;
  float *dy, *ddy, *dxo, *ddo, *dh0, *dfin, *ddf, *dgh, *dbnd, *dloc, *ddec, *dkeep;
  float *ho, *hf, *hg, *hgh;
} Rig;

static void rig_open(Rig *g, const double *yin, int T, int nin, int K, int V, int L, int w, const double *s0, const double *ds,
                     const double *dout) {
  char err[8192];
  const Backend *be = under_test();
  g->dv = device_open(be->device, err, sizeof err);
  cr_assert(g->dv, "%s", err);
  g->ck = cuda_chunk_open(be->device == DEVICE_CUDA_EMU, err, sizeof err);
  cr_assert(g->ck, "%s", err);
  Device *dv = g->dv;
  size_t nc = (size_t)((T + L - 1) / L + 1), ny = (size_t)T * nin, nx = (size_t)T * V, kv = (size_t)K * V, nb = kv * nc;
  g->ny = ny, g->nx = nx, g->kv = kv;
  float *hy = xcalloc(ny + 1, sizeof(float)), *hs0 = xcalloc(kv, sizeof(float)), *hds = xcalloc(kv, sizeof(float));
  float *hdo = xcalloc(nx + 1, sizeof(float));
  for (size_t i = 0; i < ny; i++) hy[i] = (float)yin[i];
  for (size_t i = 0; i < kv; i++) hs0[i] = (float)s0[i], hds[i] = (float)ds[i];
  for (size_t i = 0; i < nx; i++) hdo[i] = (float)dout[i];
  g->dy = dv->alloc(dv, 4 * ny + 4), g->ddy = dv->alloc(dv, 4 * ny + 4), g->dxo = dv->alloc(dv, 4 * nx + 4);
  g->ddo = dv->alloc(dv, 4 * nx + 4), g->dh0 = dv->alloc(dv, 4 * kv), g->dfin = dv->alloc(dv, 4 * kv), g->ddf = dv->alloc(dv, 4 * kv);
  g->dgh = dv->alloc(dv, 4 * kv), g->dbnd = dv->alloc(dv, 4 * nb), g->dloc = dv->alloc(dv, 4 * nb);
  g->ddec = dv->alloc(dv, 4 * (size_t)w * nc), g->dkeep = dv->alloc(dv, 4 * nx + 4);
  dv->upload(dv, g->dy, hy, 4 * ny), dv->upload(dv, g->ddo, hdo, 4 * nx), dv->upload(dv, g->dh0, hs0, 4 * kv);
  dv->upload(dv, g->ddf, hds, 4 * kv);
  free(hy), free(hs0), free(hds), free(hdo);
}

/* a's shapes and offsets given: its buffers the rig's, forward and backward, the results back */
static void rig_run(Rig *g, CellcChunkArgs *a) {
  char err[8192];
  a->yin = g->dy, a->dyin = g->ddy, a->xo = g->dxo, a->dxo = g->ddo, a->h0 = g->dh0, a->final = g->dfin, a->dfinal = g->ddf;
  a->dh0 = g->dgh, a->bnd = g->dbnd, a->loc = g->dloc, a->dec = g->ddec, a->ukeep = g->dkeep;
  cr_assert_eq(cuda_chunk_forward(g->ck, a, true, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cuda_chunk_backward(g->ck, a, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cuda_chunk_sync(g->ck, err, sizeof err), 0, "%s", err);
  Device *dv = g->dv;
  g->ho = xcalloc(g->nx + 1, sizeof(float)), g->hf = xcalloc(g->kv, sizeof(float)), g->hg = xcalloc(g->ny + 1, sizeof(float));
  g->hgh = xcalloc(g->kv, sizeof(float));
  dv->download(dv, g->ho, g->dxo, 4 * g->nx), dv->download(dv, g->hf, g->dfin, 4 * g->kv), dv->download(dv, g->hg, g->ddy, 4 * g->ny);
  dv->download(dv, g->hgh, g->dgh, 4 * g->kv);
}

static void rig_close(Rig *g) {
  Device *dv = g->dv;
  float *bufs[] = {g->dy, g->ddy, g->dxo, g->ddo, g->dh0, g->dfin, g->ddf, g->dgh, g->dbnd, g->dloc, g->ddec, g->dkeep};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dv->free(dv, bufs[i]);
  cuda_chunk_close(g->ck);
  device_release(dv);
  free(g->ho), free(g->hf), free(g->hg), free(g->hgh);
}

/* One head of one batch row: yin's rows [q, k, v, la] (one term, one read), decays of exactly 0
 * (log -inf) and strong ones (log -60) among decays near 1, then the reads, final state and every
 * gradient of the kernels against chunkop_forward and chunkop_backward. */
static void kernel_case(bool per_key, int T, int L) {
  int K = 6, V = 5, w = per_key ? K : 1, nin = 2 * K + V + w;
  size_t kv = (size_t)K * V;
  Rng r;
  rng_seed(&r, (uint64_t)(T + 100 * per_key), 3);
  double *yin = xcalloc((size_t)T * nin + 1, sizeof(double)), *s0 = xcalloc(kv, sizeof(double)), *ds = xcalloc(kv, sizeof(double));
  double *dout = xcalloc((size_t)T * V + 1, sizeof(double));
  for (int t = 0; t < T; t++) {
    double *row = yin + (size_t)t * nin;
    for (int i = 0; i < 2 * K + V; i++) row[i] = 0.5 * rng_normal(&r);
    for (int i = 0; i < w; i++) row[2 * K + V + i] = t % 23 == 5 ? -INFINITY : t % 17 == 3 ? -60 : -0.5 * rng_uniform(&r);
  }
  for (size_t i = 0; i < kv; i++) s0[i] = rng_normal(&r), ds[i] = rng_normal(&r);
  for (size_t i = 0; i < (size_t)T * V; i++) dout[i] = rng_normal(&r);
  /* the reference */
  ChunkOp c = {T, K, V, L, per_key, yin, yin + K, yin + 2 * K, yin + 2 * K + V, nin, nin, nin, nin};
  double *o = xcalloc((size_t)T * V + 1, sizeof(double)), *sT = xcalloc(kv, sizeof(double)), *ds0 = xcalloc(kv, sizeof(double));
  double *g = xcalloc((size_t)T * nin + 1, sizeof(double));
  chunkop_forward(&c, s0, o, V, sT);
  chunkop_backward(&c, s0, dout, V, ds, g, g + K, g + 2 * K, g + 2 * K + V, ds0);
  /* the kernels, on float32 copies in device memory */
  Rig rg;
  rig_open(&rg, yin, T, nin, K, V, L, w, s0, ds, dout);
  CellcChunkArgs a = {.T = T, .B = 1, .nh = 1, .K = K, .V = V, .L = L, .M = 1, .R = 1, .E = 1, .per_key = per_key, .nin = nin,
                      .xw = V, .q_off = 0, .k_off = K, .v_off = 2 * K, .la_off = 2 * K + V, .out_off = 0};
  rig_run(&rg, &a);
  const float *ho = rg.ho, *hf = rg.hf, *hg = rg.hg, *hgh = rg.hgh;
  cr_expect_lt(rel_at(ho, o, T, V, V, 1), 1e-4, "reads per_key=%d T=%d L=%d", per_key, T, L);
  cr_expect_lt(rel_at(hf, sT, 1, 0, (int)kv, 1), 1e-4, "final state per_key=%d T=%d L=%d", per_key, T, L);
  cr_expect_lt(rel_at(hgh, ds0, 1, 0, (int)kv, 1), 1e-4, "dS0 per_key=%d T=%d L=%d", per_key, T, L);
  const char *names[3] = {"dq", "dk", "dv"};
  int off[3] = {0, K, 2 * K}, wd[3] = {K, K, V};
  for (int i = 0; i < 3; i++)
    cr_expect_lt(rel_at(hg + off[i], g + off[i], T, nin, wd[i], 1), 1e-4, "%s per_key=%d T=%d L=%d: %g", names[i], per_key, T, L,
                 rel_at(hg + off[i], g + off[i], T, nin, wd[i], 1));
  /* d log a where the decays are positive (it is not defined at a = 0): before the first 0 */
  int T1 = T < 5 ? T : 5;
  cr_expect_lt(rel_at(hg + 2 * K + V, g + 2 * K + V, T1, nin, w, 1), 1e-4, "dla per_key=%d T=%d L=%d", per_key, T, L);
  rig_close(&rg);
  free(yin), free(s0), free(ds), free(dout), free(o), free(sT), free(ds0), free(g);
}

Test(cuda_chunk, kernels_zero_and_strong_decays) {
  for (int pk = 0; pk < 2; pk++) kernel_case(pk, 70, 32), kernel_case(pk, 70, 16), kernel_case(pk, 3, 64);
}

/* ---- the delta rule's kernels against the float64 chunked delta rule (compiler/ir/chunkdelta.c) ---- */

/* One head of one batch row: yin's rows [q, k, v, la, c] as Gated DeltaNet makes them (k of unit
 * norm, c = -a beta with beta in (0, 1)); decays none (log a = 0), or strong ones (log a = -8)
 * among decays near 1. The reads, final state and every gradient (dS_0, dq, dk, dv, d log a, dc)
 * within 2e-4 of each one's largest magnitude. */
static void delta_case(int T, int K, int V, int L, bool strong) {
  int nin = 2 * K + V + 2, la_off = 2 * K + V, c_off = la_off + 1;
  size_t kv = (size_t)K * V;
  Rng r;
  rng_seed(&r, (uint64_t)(T * 7 + K + 3 * V + strong), 5);
  double *yin = xcalloc((size_t)T * nin + 1, sizeof(double)), *s0 = xcalloc(kv, sizeof(double)), *ds = xcalloc(kv, sizeof(double));
  double *dout = xcalloc((size_t)T * V + 1, sizeof(double));
  for (int t = 0; t < T; t++) {
    double *row = yin + (size_t)t * nin, nk = 0;
    for (int i = 0; i < 2 * K + V; i++) row[i] = 0.5 * rng_normal(&r);
    for (int i = 0; i < K; i++) nk += row[K + i] * row[K + i];
    for (int i = 0; i < K; i++) row[K + i] /= sqrt(nk);
    row[la_off] = !strong ? 0 : t % 7 == 3 ? -8 : -0.2 * rng_uniform(&r);
    row[c_off] = -exp(row[la_off]) * (0.05 + 0.9 * rng_uniform(&r));
  }
  for (size_t i = 0; i < kv; i++) s0[i] = rng_normal(&r), ds[i] = rng_normal(&r);
  for (size_t i = 0; i < (size_t)T * V; i++) dout[i] = rng_normal(&r);
  ChunkDelta cd = {T, K, V, L, yin, yin + K, yin + 2 * K, yin + la_off, yin + c_off, nin, nin, nin, nin, nin};
  double *o = xcalloc((size_t)T * V + 1, sizeof(double)), *sT = xcalloc(kv, sizeof(double)), *ds0 = xcalloc(kv, sizeof(double));
  double *g = xcalloc((size_t)T * nin + 1, sizeof(double));
  chunkdelta_forward(&cd, s0, o, V, sT);
  chunkdelta_backward(&cd, s0, dout, V, ds, g, g + K, g + 2 * K, g + la_off, g + c_off, ds0);
  Rig rg;
  rig_open(&rg, yin, T, nin, K, V, L, 1, s0, ds, dout);
  CellcChunkArgs a = {.T = T, .B = 1, .nh = 1, .K = K, .V = V, .L = L, .M = 1, .R = 1, .E = 1, .nin = nin, .xw = V, .q_off = 0,
                      .k_off = K, .v_off = 2 * K, .la_off = la_off, .out_off = 0, .delta = 1, .c_off = c_off};
  rig_run(&rg, &a);
  const float *ho = rg.ho, *hf = rg.hf, *hg = rg.hg, *hgh = rg.hgh;
  double e;
#define CLOSE(what, got, want, rows, ld, wd)                                                                            \
  e = rel_at(got, want, rows, ld, wd, 1e-30);                                                                          \
  cr_expect_lt(e, 2e-4, "delta rule %s T=%d K=%d V=%d L=%d strong=%d: off by %g of its largest", what, T, K, V, L, strong, e)
  CLOSE("reads", ho, o, T, V, V);
  CLOSE("final state", hf, sT, 1, 0, (int)kv);
  CLOSE("dS0", hgh, ds0, 1, 0, (int)kv);
  CLOSE("dq", hg, g, T, nin, K);
  CLOSE("dk", hg + K, g + K, T, nin, K);
  CLOSE("dv", hg + 2 * K, g + 2 * K, T, nin, V);
  CLOSE("dla", hg + la_off, g + la_off, T, nin, 1);
  CLOSE("dc", hg + c_off, g + c_off, T, nin, 1);
#undef CLOSE
  rig_close(&rg);
  free(yin), free(s0), free(ds), free(dout), free(o), free(sT), free(ds0), free(g);
}

Test(cuda_chunk, delta_kernels) {
  static const int Td[] = {1, 63, 64, 65, 300};
  for (int i = 0; i < 5; i++) delta_case(Td[i], 16, 16, 64, i % 2 == 1);
  delta_case(65, 16, 16, 64, false), delta_case(64, 16, 16, 64, true);
  delta_case(100, 8, 12, 32, true), delta_case(100, 12, 8, 16, false); /* K != V */
  delta_case(130, 64, 64, 64, true); /* the issue's heads: the backward's block near the opt-in limit */
}

/* gated_deltanet through chunkdev.c: against the cpu's chunked form and the interpreter's sequential */
Test(cuda_chunk, gated_deltanet) {
  static const int Tg[] = {1, 64, 65}, Lg[] = {64, 16};
  double worst[2] = {0, 0};
  cases("stdlib/gated_deltanet.cell", NULL, "NH=2,K=3,V=4,D=5", Tg, 3, Lg, 2, worst);
  cr_log_info("gated_deltanet: worst relative difference %g against the interpreter, %g against the cpu", worst[0], worst[1]);
  cr_expect_gt(worst[0], 0);
}

/* The delta rule's block at heads of 80 x 80: a chunk of 64 refused with what it needs, the
 * default chunk halved to the 32 that fits */
Test(cuda_chunk, delta_too_large_for_shared_memory) {
  Arena a = {0};
  Cell *cc = h_cell(&a, "stdlib/gated_deltanet.cell", NULL, "NH=1,K=80,V=80,D=4", false, "chunked");
  PipelineOptions o = {.backend = under_test()};
  char err[1024] = "";
  cr_assert_null(chunkform_compile(cc, &o, 64, err, sizeof err));
  cr_expect(strstr(err, "cannot run the chunked form") && strstr(err, "279360 bytes of shared memory") && strstr(err, "shorter chunk"),
            "%s", err);
  ChunkForm *f = chunkform_compile(cc, &o, 0, err, sizeof err);
  cr_assert(f, "%s", err);
  cr_expect_eq(chunkform_length(f), 32);
  chunkform_free(f);
  cell_free(cc);
  arena_free(&a);
}
