/* test_cuda.c: the CUDA back end's own tests on cuda-emu (its conformance against the interpreter
 * on every cell, at T = 9 and 130, is test_backends.c's): T = 1000 (63 scan chunks) against the
 * interpreter, scan against sequential for every scan cell, read_steps, every generated kernel
 * through the real NVRTC and ptxas -v for sm_80 and sm_90 with no spills, `--backend cuda` without
 * a driver. CELLC_TEST_CUDA_BACKEND=cuda (make test-gpu) runs the same tests on the GPU, and
 * larger ones against the CPU back end. */
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg_cuda.h"
#include "cuda.h"
#include "cuda_api.h"
#include "harness.h"
#include "ptxas.h"
#include "interp.h"
#include "plan.h"
#include "plan_table.h"
#include "stdlib_cells.h"

TestSuite(cuda, .init = h_use_cuda_test_cache);

/* The back end under test: cuda-emu, or $CELLC_TEST_CUDA_BACKEND. */
static const Backend *under_test(void) {
  const char *e = getenv("CELLC_TEST_CUDA_BACKEND");
  const Backend *be = backend_find(e && *e ? e : "cuda-emu");
  cr_assert(be && be->device != DEVICE_CPU, "CELLC_TEST_CUDA_BACKEND=%s: not a CUDA back end", e);
  return be;
}

/* The reference (interp, or cpu for the GPU's larger sizes) and the back end under test on the same
 * inputs, parameters pscale * N(0, 1); the worst relative error below tol. */
static void compare_with(const char *refname, double tol, double pscale, const char *file, const char *set,
                         const char *dims, int T, int B, const char *mode) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, file, set, dims, false, mode);
  char err[2048];
  PipelineOptions ro = {0}, co = {0};
  ro.backend = backend_find(refname), ro.gates = true;
  co.backend = under_test(), co.gates = true;
  Compiled *ref = pipeline_compile(c, &ro, err, sizeof err);
  cr_assert(ref, "compile: %s", err);
  Compiled *cu = pipeline_compile(c, &co, err, sizeof err);
  cr_assert(cu, "compile: %s", err);
  HBufs *R = h_bufs_new(ref->p, T, B, 7, pscale, 0.5), *S = h_bufs_new(cu->p, T, B, 7, pscale, 0.5);
  h_bufs_copy_inputs(S, R, ref->p);
  pipeline_run_f64(ref, &R->io);
  pipeline_run_f64(cu, &S->io);
  const char *what;
  double e = h_compare(R, S, ref->p, &what);
  cr_expect(e < tol, "%s %s T=%d: %s relative error %g", file, cu->opt.scan ? "scan" : "sequential", T, what, e);
  h_bufs_free(R), h_bufs_free(S);
  pipeline_release(ref), pipeline_release(cu);
  cell_free(c);
  arena_free(&arena);
}

static void compare(const char *file, const char *set, const char *dims, int T, int B, const char *mode) {
  compare_with("interp", 1e-4, 0.4, file, set, dims, T, B, mode);
}

/* cuda-emu in scan mode against cuda-emu in sequential mode. */
static void scan_vs_sequential(const char *file, const char *set, const char *dims, int T, int B) {
  Arena arena = {0};
  Cell *cs = h_cell(&arena, file, set, dims, false, NULL);
  Cell *cq = h_cell(&arena, file, set, dims, false, "sequential");
  cr_assert(cs->mode == MODE_SCAN, "%s runs as a scan", file);
  char err[2048];
  PipelineOptions o = {0};
  o.backend = under_test(), o.gates = true;
  Compiled *a = pipeline_compile(cs, &o, err, sizeof err);
  cr_assert(a, "compile: %s", err);
  Compiled *b = pipeline_compile(cq, &o, err, sizeof err);
  cr_assert(b, "compile: %s", err);
  cr_assert(a->opt.scan && !b->opt.scan);
  HBufs *A = h_bufs_new(a->p, T, B, 11, 0.4, 0.5), *Bq = h_bufs_new(b->p, T, B, 11, 0.4, 0.5);
  h_bufs_copy_inputs(Bq, A, a->p);
  pipeline_run_f64(a, &A->io);
  pipeline_run_f64(b, &Bq->io);
  const char *what;
  double e = h_compare(A, Bq, a->p, &what);
  cr_expect(e < 1e-4, "%s T=%d scan vs sequential: %s relative error %g", file, T, what, e);
  h_bufs_free(A), h_bufs_free(Bq);
  pipeline_release(a), pipeline_release(b);
  cell_free(cs), cell_free(cq);
  arena_free(&arena);
}

/* Long sequences: 63 chunks of 16 steps. */
Test(cuda, mgu_auto_t1000) { compare("stdlib/mgu.cell", NULL, "H=7,D=3", 1000, 2, NULL); }
Test(cuda, mgu_sequential_t1000) { compare("stdlib/mgu.cell", NULL, "H=7,D=3", 1000, 2, "sequential"); }
Test(cuda, lru_auto_t1000) { compare("stdlib/lru.cell", NULL, "H=7,D=3", 1000, 2, NULL); }
Test(cuda, lru_sequential_t1000) { compare("stdlib/lru.cell", NULL, "H=7,D=3", 1000, 2, "sequential"); }
/* version 2's cells with heads (stdlib/cells.list's dims): the scan cells in both modes */
#define LONG_RUN(name, dims)                                                                           \
  Test(cuda, name##_auto_t1000) { compare("stdlib/" #name ".cell", NULL, dims, 1000, 2, NULL); }      \
  Test(cuda, name##_sequential_t1000) { compare("stdlib/" #name ".cell", NULL, dims, 1000, 2, "sequential"); }
LONG_RUN(gla, "NH=2,K=3,V=4,D=3")
LONG_RUN(hgrn2, "NH=2,K=3,V=4,D=3")
Test(cuda, mlstm_t1000) { compare("stdlib/mlstm.cell", NULL, "NH=2,K=3,V=4,D=3", 1000, 2, NULL); }
/* sLSTM's exponential gates (exp of a difference with the running maximum m) carry a rounding in
 * exp or log into m and every later gate: at T = 1000 its gates differ from float64 by 4e-5 with
 * the host's libm (cuda-emu) and 1.8e-4 with the GPU's expf/logf (H200); 1e-3 bounds both. */
Test(cuda, slstm_t1000) { compare_with("interp", 1e-3, 0.4, "stdlib/slstm.cell", NULL, "NH=2,P=3,D=3", 1000, 2, NULL); }
Test(cuda, gated_deltanet_t1000) { compare("stdlib/gated_deltanet.cell", NULL, "NH=2,K=3,V=4,D=3", 1000, 2, NULL); }
Test(cuda, rwkv6_t1000) { compare("stdlib/rwkv6.cell", NULL, "NH=2,K=3,V=4,D=3", 1000, 2, NULL); }

/* A cell's plan and CUDA source as the back end makes them (cuda_plan_options). */
typedef struct CellSource {
  Arena arena;
  Cell *c;
  Program *p;
  Plan *pl;
  CgCudaInfo info;
  char *src;
} CellSource;

static void source_open(CellSource *s, const char *file, const char *set, const char *dims, const char *mode) {
  memset(s, 0, sizeof *s);
  s->c = h_cell(&s->arena, file, set, dims, false, mode);
  bool scan = s->c->mode == MODE_SCAN;
  s->p = lower_cell(s->c, false, scan);
  ad_differentiate(s->p);
  PlanOptions po = cuda_plan_options(scan, true);
  s->pl = plan_new(s->p, &po);
  char err[2048];
  s->src = cg_cuda_source(s->pl, &s->info, err, sizeof err);
  cr_assert(s->src, "%s: %s", file, err);
}

static void source_close(CellSource *s) {
  free(s->src);
  cg_cuda_info_free(&s->info);
  plan_free(s->pl);
  program_free(s->p);
  cell_free(s->c);
  arena_free(&s->arena);
}

/* A row whose temporaries pass a block's 48 KiB without the opt-in: gla's elementwise scan at
 * K = V = 64 keeps its 64 x 64 state's terms per row (13184 floats in one kernel). The kernel runs
 * one warp a block and its launch opts in to the shared memory (cellc_needs_optin); the emulator
 * refuses a launch above 48 KiB without it, as a GPU does. */
Test(cuda, temporaries_past_48k) {
  const char *dims = "NH=1,K=64,V=64,D=4";
  CellSource s;
  source_open(&s, "stdlib/gla.cell", NULL, dims, "scan");
  int most = 0;
  for (int k = 0; k < s.pl->nkernels; k++) most = s.info.tmp_floats[k] > most ? s.info.tmp_floats[k] : most;
  cr_assert(4 * most > CELLC_SHARED_BYTES, "the case needs a row past 48 KiB: its largest has %d floats", most);
  source_close(&s);
  compare("stdlib/gla.cell", NULL, dims, 5, 2, "scan");
}

/* Scan and sequential on cuda-emu agree, every scan cell of stdlib/cells.list, across chunks. */
#define IF_scan(...) __VA_ARGS__
#define IF_sequential(...)
#define SCAN_VS_SEQUENTIAL(name, file, set, dims, md)                                                              \
  IF_##md(Test(cuda, scan_vs_sequential_##name) { scan_vs_sequential(file, set, h_dims(dims, 19, 5), 130, 2); })
STDLIB_CELLS(SCAN_VS_SEQUENTIAL)

/* read_steps: h_0 .. h_T of every state part in host memory, equal to the interpreter's; h_0 is h0
 * and h_T the final state. */
static void read_steps_compare(const char *file, Compiled *ref, Compiled *cu) {
  const Program *p = ref->p;
  int T = 4, B = 2, ns = p->nsparts;
  HBufs *h = h_bufs_new(ref->p, T, B, 3, 0.4, 0.5);
  Work *wr = ref->be->work_new(ref);
  ref->be->forward(ref, wr, &h->io);
  /* the SeqIO in the memory of the back end's device */
  const Backend *be = cu->be;
  char derr[1024];
  Device *dv = device_open(be->device, derr, sizeof derr);
  cr_assert(dv, "%s", derr);
  size_t nx = (size_t)T * B * (size_t)p->x_size, ny = (size_t)T * B * (size_t)p->output_size;
  float *xf = xmalloc(sizeof(float) * nx);
  for (size_t i = 0; i < nx; i++) xf[i] = (float)h->x[i];
  void *dp[64], *dh0[16], *dfin[16];
  const void *h0s[16];
  float *h0f[16];
  cr_assert(h->np <= 64 && ns <= 16);
  for (int i = 0; i < h->np; i++) {
    float *pf = xmalloc(sizeof(float) * h->pn[i] + 1);
    for (size_t j = 0; j < h->pn[i]; j++) pf[j] = (float)h->params[i][j];
    dp[i] = dv->alloc(dv, sizeof(float) * h->pn[i]);
    dv->upload(dv, dp[i], pf, sizeof(float) * h->pn[i]);
    free(pf);
  }
  for (int q = 0; q < ns; q++) {
    size_t nh = (size_t)B * (size_t)p->sparts[q].size;
    h0f[q] = xmalloc(sizeof(float) * nh);
    for (size_t j = 0; j < nh; j++) h0f[q][j] = (float)h->h0[q][j];
    dh0[q] = dv->alloc(dv, sizeof(float) * nh), dfin[q] = dv->alloc(dv, sizeof(float) * nh);
    dv->upload(dv, dh0[q], h0f[q], sizeof(float) * nh);
    h0s[q] = dh0[q];
  }
  void *dx = dv->alloc(dv, sizeof(float) * nx), *dy = dv->alloc(dv, sizeof(float) * ny);
  dv->upload(dv, dx, xf, sizeof(float) * nx);
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32, s.x = dx, s.params = (const void **)dp, s.y = dy;
  s.h0 = h0s, s.final = dfin;
  Work *wc = be->work_new(cu);
  be->forward(cu, wc, &s);
  for (int q = 0; q < ns; q++) {
    size_t nh = (size_t)B * (size_t)p->sparts[q].size, n = (size_t)(T + 1) * nh;
    double *sr = xmalloc(sizeof(double) * n);
    float *sc = xmalloc(sizeof(float) * n), *finf = xmalloc(sizeof(float) * nh);
    cr_assert_eq(ref->be->read_steps(ref, wr, STEPS_STATE, q, sr), 0);
    cr_assert_eq(be->read_steps(cu, wc, STEPS_STATE, q, sc), 0);
    dv->download(dv, finf, dfin[q], sizeof(float) * nh);
    for (size_t i = 0; i < n; i++)
      cr_expect(fabs(sr[i] - sc[i]) < 1e-4, "%s part %d element %zu: %g vs %g", file, q, i, sr[i], sc[i]);
    for (size_t j = 0; j < nh; j++) {
      cr_expect(sc[j] == h0f[q][j], "%s part %d: h_0 is h0", file, q);
      cr_expect(sc[(size_t)T * nh + j] == finf[j], "%s part %d: h_T is final", file, q);
    }
    free(sr), free(sc), free(finf), free(h0f[q]);
    dv->free(dv, dh0[q]), dv->free(dv, dfin[q]);
  }
  ref->be->work_free(wr), be->work_free(wc);
  for (int i = 0; i < h->np; i++) dv->free(dv, dp[i]);
  dv->free(dv, dx), dv->free(dv, dy);
  device_release(dv);
  free(xf);
  h_bufs_free(h);
}

static void read_steps_case(const char *file, const char *dims, const char *mode) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, file, NULL, dims, false, mode);
  char err[2048];
  PipelineOptions ro = {0}, co = {0};
  ro.backend = &interp_backend, co.backend = under_test();
  Compiled *ref = pipeline_compile(c, &ro, err, sizeof err), *cu = pipeline_compile(c, &co, err, sizeof err);
  cr_assert(ref && cu, "%s", err);
  read_steps_compare(file, ref, cu);
  pipeline_release(ref), pipeline_release(cu);
  cell_free(c);
  arena_free(&arena);
}

Test(cuda, read_steps_states) { read_steps_case("stdlib/gru.cell", "H=5,D=3", NULL); }

/* The chunked form's out program: its histories that only the in program reads are still (no step
 * writes them), read back as h0 at every step, as the interpreter's steps give them. */
Test(cuda, read_steps_still_histories) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, "stdlib/mamba2.cell", NULL, "NH=2,P=4,N=3,D=5", false, "chunked");
  Compiled *cc[2];
  const Backend *be[2] = {&interp_backend, under_test()};
  for (int i = 0; i < 2; i++) {
    Program *p = lower_cell_part(c, false, true, LOWER_CHUNK_OUT);
    ad_differentiate(p);
    char err[512] = "";
    cc[i] = be[i]->compile(p, &(BackendOptions){.scan = true, .f32 = true}, err, sizeof err);
    cr_assert(cc[i], "%s", err);
  }
  size_t n;
  const EtHeader *t = cuda_compiled_table(cc[1], &n);
  const EtStatePart *sp = (const EtStatePart *)((const char *)t + t->sparts);
  int still = 0;
  for (int q = 0; q < t->nsparts; q++) still += sp[q].still;
  cr_expect_eq(still, 3, "the out program's still histories: %d", still);
  read_steps_compare("mamba2's out program", cc[0], cc[1]);
  for (int i = 0; i < 2; i++) {
    Program *p = cc[i]->p;
    cc[i]->be->free(cc[i]);
    program_free(p);
  }
  cell_free(c);
  arena_free(&arena);
}

/* Mamba-2's three conv histories in the shift layout (the back end's plan option: each step of a
 * history's value kept once, rows (T + K) B), read back as the usual [(T + 1) B, K n] steps; its
 * scan state beside them. */
Test(cuda, read_steps_shifted_histories) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, "stdlib/mamba2.cell", NULL, "NH=2,P=4,N=3,D=5", false, NULL);
  char err[2048];
  PipelineOptions co = {0};
  co.backend = under_test();
  Compiled *cu = pipeline_compile(c, &co, err, sizeof err);
  cr_assert(cu, "%s", err);
  size_t n;
  const EtHeader *t = cuda_compiled_table(cu, &n);
  cr_assert(t);
  const EtStatePart *sp = (const EtStatePart *)((const char *)t + t->sparts);
  int shifted = 0;
  for (int q = 0; q < t->nsparts; q++) shifted += sp[q].shift > 0;
  cr_expect_eq(shifted, 3, "mamba2's conv histories shifted: %d", shifted);
  pipeline_release(cu);
  cell_free(c);
  arena_free(&arena);
  read_steps_case("stdlib/mamba2.cell", "NH=2,P=4,N=3,D=5", NULL);
}

/* On a GPU (make test-gpu): the benchmark's sizes against the CPU back end (both float32). The
 * parameters are small enough for a contracting recurrence: at 0.4 * N(0, 1) and H = 128 the tanh
 * cells are chaotic, and two float32 runs that sum in different orders part ways within tens of
 * steps (the CPU back end against the float64 interpreter too). */
#define GPU_TEST(name, file, set, dims, mode)                                                    \
  Test(cuda, name##_gpu_large) {                                                                 \
    if (under_test() != &cuda_backend) cr_skip_test("needs CELLC_TEST_CUDA_BACKEND=cuda");       \
    compare_with("cpu", 1e-3, 0.05, file, set, dims, 512, 64, mode);                                   \
  }

GPU_TEST(gru, "stdlib/gru.cell", NULL, "H=128,D=128", NULL)
GPU_TEST(lstm, "stdlib/lstm.cell", NULL, "H=256,D=128", NULL)
GPU_TEST(mgu, "stdlib/mgu.cell", NULL, "H=128,D=128", NULL)
GPU_TEST(mgu_sequential, "stdlib/mgu.cell", NULL, "H=128,D=128", "sequential")
GPU_TEST(lru, "stdlib/lru.cell", NULL, "H=256,D=128", NULL)
GPU_TEST(hgru, "stdlib/hgru.cell", "lb=0.25", "D=128", NULL)

Test(cuda, backends_by_name) {
  cr_expect(backend_find("cuda") == &cuda_backend);
  cr_expect(backend_find("cuda-emu") == &cuda_emu_backend);
  cr_expect(cuda_backend.device == DEVICE_CUDA && cuda_emu_backend.device == DEVICE_CUDA_EMU);
}

/* ---- every generated kernel through the real NVRTC and ptxas: no spills ---- */

static void ptxas_cell(const char *file, const char *set, const char *dims, const char *mode) {
  CudaApi api;
  char err[8192];
  if (cuda_api_open_nvrtc(&api, err, sizeof err) != 0) cr_skip_test("no NVRTC: %s", err);
  CellSource s;
  source_open(&s, file, set, dims, mode);
  const char *arch[2] = {"sm_80", "sm_90"};
  for (int a = 0; a < 2; a++) {
    CudaImage img;
    cr_assert_eq(cuda_compile(&api, s.src, arch[a], CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0, "%s %s: %s", file,
                 arch[a], err);
    CudaKernelResources *res = NULL;
    int nres = 0;
    cr_assert_eq(cuda_ptxas_check(img.data, arch[a], &res, &nres, err, sizeof err), 0, "%s", err);
    int expect = s.pl->nkernels + s.info.has_static[0] + s.info.has_static[1] + s.info.has_step[0] + s.info.has_step[1] + 6;
    cr_expect_eq(nres, expect, "%s %s: ptxas reports %d kernels, the source has %d", file, arch[a], nres, expect);
    for (int k = 0; k < nres; k++)
      cr_expect(res[k].spill_store_bytes == 0 && res[k].spill_load_bytes == 0,
                "%s %s %s: %d bytes spill stores, %d spill loads", file, arch[a], res[k].name, res[k].spill_store_bytes,
                res[k].spill_load_bytes);
    if (getenv("CELLC_PTXAS_REPORT"))
      for (int k = 0; k < nres; k++)
        printf("ptxas %s %s %s %s: %d registers, %d B shared, %d B stack, spills %d/%d\n", file, mode ? mode : "auto",
               arch[a], res[k].name, res[k].registers, res[k].shared_bytes, res[k].stack_bytes, res[k].spill_store_bytes,
               res[k].spill_load_bytes);
    free(res);
    cuda_image_free(&img);
  }
  source_close(&s);
  cuda_api_close(&api);
}

#define PTXAS_TEST(name, file, set, dims)                                                        \
  Test(cuda, name##_ptxas) { ptxas_cell(file, set, dims, NULL); }                               \
  Test(cuda, name##_ptxas_sequential) { ptxas_cell(file, set, dims, "sequential"); }

#define STDLIB_PTXAS(name, file, set, dims, md) PTXAS_TEST(name, file, set, h_dims(dims, 128, 64))
STDLIB_CELLS(STDLIB_PTXAS)
PTXAS_TEST(ops, "tests/cells/ops.cell", NULL, "H=128,D=64")
PTXAS_TEST(ops_v2, "tests/cells/ops_v2.cell", NULL, "H=128,D=64")
PTXAS_TEST(ops_v2_scan, "tests/cells/ops_v2_scan.cell", NULL, "H=128,D=64")
PTXAS_TEST(tensor_gla, "tests/cells/tensor_gla.cell", NULL, "NH=4,K=16,V=16,D=64")
PTXAS_TEST(tensor_ops, "tests/cells/tensor_ops.cell", NULL, "D=64")

/* ---- no driver ---- */

static bool have_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  return h != NULL; /* stays loaded, as the back end would leave it */
}

/* Without libcuda, compiling for `cuda` fails naming the library. */
Test(cuda, no_driver_message) {
  if (have_driver()) cr_skip_test("this machine has the NVIDIA driver");
  Arena arena = {0};
  Cell *c = h_cell(&arena, "stdlib/gru.cell", NULL, "H=4,D=3", false, NULL);
  char err[2048] = "";
  PipelineOptions o = {0};
  o.backend = &cuda_backend;
  Compiled *cu = pipeline_compile(c, &o, err, sizeof err);
  cr_expect_null(cu);
  cr_expect(strstr(err, "libcuda.so.1") != NULL, "the message names the driver: %s", err);
  cell_free(c);
  arena_free(&arena);
}

/* `cellc run --backend cuda` without libcuda: exit 3, a message naming libcuda.so.1. */
Test(cuda, no_driver_exit_3) {
  if (have_driver()) cr_skip_test("this machine has the NVIDIA driver");
#ifdef __SANITIZE_ADDRESS__
  const char *bin = "build/asan/cellc";
#else
  const char *bin = "bin/cellc";
#endif
  if (access(bin, X_OK) != 0) cr_skip_test("%s is not built", bin);
  const char *tmp = getenv("TMPDIR");
  char *cmd = xasprintf("ASAN_OPTIONS=detect_leaks=0 %s run stdlib/gru.cell --dims H=4,D=3 --backend cuda --out %s/cellc-nodriver.safetensors 2>&1",
                        bin, tmp && *tmp ? tmp : "/tmp");
  FILE *f = popen(cmd, "r");
  cr_assert(f);
  char out[4096] = "";
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  int st = pclose(f);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "exit status %d: %s", WEXITSTATUS(st), out);
  cr_expect(strstr(out, "libcuda.so.1") != NULL, "the message names the driver: %s", out);
  free(cmd);
}
