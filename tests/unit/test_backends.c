/* test_backends.c: the conformance test of the back ends. Every back end of the registry
 * (pipeline.h) that runs here, in each configuration it runs in (interp in float32; cpu with
 * generated code, with the portable evaluator, on 3 threads; cuda-emu, or the GPU's cuda with
 * CELLC_TEST_CUDA_BACKEND=cuda in make test-gpu), against the float64 interpreter, on every stdlib
 * cell (stdlib/cells.list) and the test cells: outputs, final states, gates and every gradient,
 * with nonzero initial states, in auto mode and in sequential mode. A back end's own tests (its
 * threads' split, kernels, launches, scan chunks) stay in its test file (test_cpu.c, test_cuda.c). */
#include <dirent.h>

#include "harness.h"
#include "stdlib_cells.h"

TestSuite(cuda, .init = h_use_cuda_test_cache);

/* How a back end runs a case. */
typedef struct Config {
  const char *backend;     /* its name in the registry */
  bool f32, portable;
  int threads;
} Config;

static const Config INTERP_F32 = {.backend = "interp", .f32 = true};
static const Config CPU = {.backend = "cpu", .threads = 1};
static const Config CPU_PORTABLE = {.backend = "cpu", .portable = true, .threads = 1};
static const Config CPU_THREADS = {.backend = "cpu", .threads = 3};
static const Config CUDA = {.backend = "cuda-emu"};

/* The back end of a configuration; cuda-emu's may be replaced by $CELLC_TEST_CUDA_BACKEND (the GPU). */
static const Backend *backend_of(const Config *k) {
  const char *e = getenv("CELLC_TEST_CUDA_BACKEND");
  const char *name = !strcmp(k->backend, "cuda-emu") && e && *e ? e : k->backend;
  const Backend *be = backend_find(name);
  cr_assert(be, "no back end '%s' (CELLC_TEST_CUDA_BACKEND?)", name);
  return be;
}

/* The case on the configuration's back end and on the float64 interpreter, the same inputs; every
 * output and gradient within 1e-4 relative error. */
static void conform(const Config *k, const char *file, const char *set, const char *dims, int T, int B, const char *mode) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, file, set, dims, false, mode);
  char err[2048];
  PipelineOptions ro = {0}, co = {0};
  ro.backend = backend_find("interp"), ro.gates = true;
  co.backend = backend_of(k), co.gates = true, co.f32 = k->f32, co.portable = k->portable, co.threads = k->threads;
  Compiled *ref = pipeline_compile(c, &ro, err, sizeof err);
  cr_assert(ref, "compile on interp: %s", err);
  Compiled *be = pipeline_compile(c, &co, err, sizeof err);
  cr_assert(be, "compile on %s: %s", co.backend->name, err);
  HBufs *R = h_bufs_new(ref->p, T, B, 7, 0.4, 0.5), *S = h_bufs_new(be->p, T, B, 7, 0.4, 0.5);
  h_bufs_copy_inputs(S, R, ref->p);
  pipeline_run_f64(ref, &R->io);
  pipeline_run_f64(be, &S->io);
  const char *what;
  double e = h_compare(R, S, ref->p, &what);
  cr_expect(e < 1e-4, "%s on %s%s%s, %s, %d threads, T=%d: %s relative error %g", file, co.backend->name,
            k->f32 ? " (f32)" : "", k->portable ? " (portable)" : "", be->opt.scan ? "scan" : "sequential", k->threads, T,
            what, e);
  h_bufs_free(R), h_bufs_free(S);
  pipeline_release(ref), pipeline_release(be);
  cell_free(c);
  arena_free(&arena);
}

/* A case on every configuration: interp in float32 (which runs no scans: one mode); cpu in both
 * modes, with the portable evaluator, on 3 threads over 11 batch rows (uneven shares: 3, 4, 4);
 * cuda in both modes, with a launch per step instead of the persistent step kernels, and at
 * T = 130 (9 scan chunks of 16 steps). */
#define CONFORMANCE(name, file, set, dims)                                                                      \
  Test(interp_f32, name) { conform(&INTERP_F32, file, set, dims, 9, 3, NULL); }                                 \
  Test(cpu, name##_auto) { conform(&CPU, file, set, dims, 9, 3, NULL); }                                        \
  Test(cpu, name##_sequential) { conform(&CPU, file, set, dims, 9, 3, "sequential"); }                          \
  Test(cpu, name##_portable) { conform(&CPU_PORTABLE, file, set, dims, 4, 2, NULL); }                           \
  Test(cpu, name##_threads) { conform(&CPU_THREADS, file, set, dims, 6, 11, NULL); }                            \
  Test(cpu, name##_threads_sequential) { conform(&CPU_THREADS, file, set, dims, 6, 11, "sequential"); }         \
  Test(cuda, name##_auto) { conform(&CUDA, file, set, dims, 9, 2, NULL); }                                      \
  Test(cuda, name##_sequential) { conform(&CUDA, file, set, dims, 9, 2, "sequential"); }                        \
  Test(cuda, name##_sequential_launches) {                                                                      \
    setenv("CELLC_CUDA_PERSISTENT", "0", 1);                                                                    \
    conform(&CUDA, file, set, dims, 9, 2, "sequential");                                                        \
  }                                                                                                             \
  Test(cuda, name##_auto_t130) { conform(&CUDA, file, set, dims, 130, 2, NULL); }                               \
  Test(cuda, name##_sequential_t130) { conform(&CUDA, file, set, dims, 130, 2, "sequential"); }

/* every stdlib cell at H = 19, D = 5 */
#define STDLIB_CONFORMANCE(name, file, set, dims, md) CONFORMANCE(name, file, set, h_dims(dims, 19, 5))
STDLIB_CELLS(STDLIB_CONFORMANCE)
/* and at T = 1 (the first step alone: no chunk, no scan carry) */
#define STDLIB_T1(name, file, set, dims, md)                                                              \
  Test(cpu, name##_t1) { conform(&CPU, file, set, h_dims(dims, 19, 5), 1, 3, NULL); }                   \
  Test(cuda, name##_t1) { conform(&CUDA, file, set, h_dims(dims, 19, 5), 1, 2, NULL); }
STDLIB_CELLS(STDLIB_T1)

/* the test cells: every op (ops.cell); scan cells whose dprev (a times the reverse scan's output)
 * is also a value the rest of the backward reads on every row: hash-consing makes 0.5 * dtotal
 * sqrt's derivative too (scan_dprev_sqrt), the adjoint of the new term where both terms share the
 * factor 0.5 (scan_dprev_scale) or a per-row gate z (scan_dprev_gate) */
CONFORMANCE(ops, "tests/cells/ops.cell", NULL, "H=11,D=3")
CONFORMANCE(ops_v2, "tests/cells/ops_v2.cell", NULL, "H=11,D=3")
CONFORMANCE(ops_v2_scan, "tests/cells/ops_v2_scan.cell", NULL, "H=11,D=3")
CONFORMANCE(tensor_gla, "tests/cells/tensor_gla.cell", NULL, "NH=2,K=3,V=5,D=4")
CONFORMANCE(tensor_ops, "tests/cells/tensor_ops.cell", NULL, "D=5")

/* ---- chunks (pipeline.h, "Chunks"): a run in chunks of L steps, the states kept at chunk
 * boundaries and each chunk's forward run again in the backward, against the same back end's
 * whole-sequence run: the same outputs, final states, gates and gradients (the weight gradients
 * summed over chunks in another order: float64 1e-12, float32 1e-5 relative). T = 30 in chunks of
 * 7 (the last one 2 steps), with nonzero initial states and dfinal. */
static void chunked_like_whole(const Config *k, const char *file, const char *set, const char *dims, const char *mode) {
  Arena arena = {0};
  Cell *c = h_cell(&arena, file, set, dims, false, mode);
  char err[2048];
  PipelineOptions o = {0};
  o.backend = backend_of(k), o.gates = true, o.threads = k->threads;
  Compiled *be = pipeline_compile(c, &o, err, sizeof err);
  cr_assert(be, "compile on %s: %s", o.backend->name, err);
  int T = 30, B = 3;
  HBufs *W = h_bufs_new(be->p, T, B, 7, 0.4, 0.5), *C = h_bufs_new(be->p, T, B, 7, 0.4, 0.5);
  pipeline_run_f64(be, &W->io);
  pipeline_run_f64_chunked(be, &C->io, 7);
  const char *what;
  double e = h_compare(W, C, be->p, &what), tol = o.backend->dtype == DT_F64 ? 1e-12 : 1e-5;
  cr_expect(e < tol, "%s on %s, %s, chunks of 7 against the whole: %s relative error %g", file, o.backend->name,
            be->opt.scan ? "scan" : "sequential", what, e);
  h_bufs_free(W), h_bufs_free(C);
  pipeline_release(be);
  cell_free(c);
  arena_free(&arena);
}

static const Config INTERP_F64 = {.backend = "interp"};
#define CHUNKS(name, file, set, dims)                                                                          \
  Test(chunks, name##_interp) { chunked_like_whole(&INTERP_F64, file, set, dims, NULL); }                     \
  Test(chunks, name##_cpu) { chunked_like_whole(&CPU, file, set, dims, NULL); }                               \
  Test(chunks, name##_cpu_sequential) { chunked_like_whole(&CPU, file, set, dims, "sequential"); }            \
  Test(chunks, name##_cpu_threads) { chunked_like_whole(&CPU_THREADS, file, set, dims, NULL); }               \
  Test(cuda, name##_chunks) { chunked_like_whole(&CUDA, file, set, dims, NULL); }                             \
  Test(cuda, name##_chunks_sequential) { chunked_like_whole(&CUDA, file, set, dims, "sequential"); }

CHUNKS(tensor_gla, "tests/cells/tensor_gla.cell", NULL, "NH=2,K=3,V=5,D=4")
CHUNKS(gru, "stdlib/gru.cell", NULL, "H=6,D=4")
CHUNKS(lru, "stdlib/lru.cell", NULL, "H=6,D=4")
CHUNKS(tensor_ops, "tests/cells/tensor_ops.cell", NULL, "D=5")

/* an output that reads a previous state value: sequential (compiler/check, analyze) */
CONFORMANCE(output_reads_prev, "tests/cells/output_reads_prev.cell", NULL, "H=5,D=4")
CONFORMANCE(scan_dprev_sqrt, "tests/cells/scan_dprev_sqrt.cell", NULL, "H=5,D=4")
CONFORMANCE(scan_dprev_scale, "tests/cells/scan_dprev_scale.cell", NULL, "H=5,D=4")
CONFORMANCE(scan_dprev_gate, "tests/cells/scan_dprev_gate.cell", NULL, "H=19,D=5")
/* a scanned state's previous value read outside its update: sequential, so every gradient right */
CONFORMANCE(scan_outside_read, "tests/cells/scan_outside_read.cell", NULL, "H=7,D=4")
/* buffers and a frozen param: no gradient on any back end (zero, as the interpreter's) */
CONFORMANCE(buffer_frozen, "tests/cells/buffer_frozen.cell", NULL, "H=19,D=5")
/* prev and conv (histories run step by step inside a scan-mode plan): width-2 convolutions whose
 * histories need no loop, a width-4 one whose history does; T = 1 too (histories longer than the
 * sequence); both cells run in scan mode */
CONFORMANCE(qrnn_conv, "tests/cells/qrnn_conv.cell", NULL, "H=11,D=3")
CONFORMANCE(rglru_conv, "tests/cells/rglru_conv.cell", NULL, "H=11,D=3")
CONFORMANCE(prev_shapes, "tests/cells/prev_shapes.cell", NULL, "H=5,D=3")
/* a history in the shift layout beside one carried step by step (its value reads the first's) */
CONFORMANCE(prev_chain, "tests/cells/prev_chain.cell", NULL, "H=5,D=3")
Test(cpu, prev_chain_t2) { conform(&CPU_THREADS, "tests/cells/prev_chain.cell", NULL, "H=5,D=3", 2, 3, NULL); }
Test(cpu, prev_shapes_t1) { conform(&CPU, "tests/cells/prev_shapes.cell", NULL, "H=5,D=3", 1, 3, NULL); }
Test(cpu, rglru_conv_t1) { conform(&CPU, "tests/cells/rglru_conv.cell", NULL, "H=11,D=3", 1, 3, NULL); }
Test(cpu, rglru_conv_t1_sequential) { conform(&CPU, "tests/cells/rglru_conv.cell", NULL, "H=11,D=3", 1, 3, "sequential"); }
Test(cuda, rglru_conv_t1) { conform(&CUDA, "tests/cells/rglru_conv.cell", NULL, "H=11,D=3", 1, 2, NULL); }
Test(cuda, qrnn_conv_t1_sequential) { conform(&CUDA, "tests/cells/qrnn_conv.cell", NULL, "H=11,D=3", 1, 2, "sequential"); }
Test(cells, conv_cells_run_in_scan_mode) {
  static const char *const files[] = {"tests/cells/qrnn_conv.cell", "tests/cells/rglru_conv.cell", "tests/cells/prev_shapes.cell"};
  for (int i = 0; i < 3; i++) {
    Arena arena = {0};
    Cell *c = h_cell(&arena, files[i], NULL, "H=4,D=3", false, NULL);
    cr_expect_eq(c->mode, MODE_SCAN, "%s: not in scan mode", files[i]);
    cell_free(c);
    arena_free(&arena);
  }
}

/* runs of elementwise ops between products (tests/cells/runs.cell) */
Test(interp_f32, runs) { conform(&INTERP_F32, "tests/cells/runs.cell", NULL, "H=19,D=5", 9, 3, NULL); }
Test(cpu, runs_auto) { conform(&CPU, "tests/cells/runs.cell", NULL, "H=19,D=5", 9, 3, NULL); }
Test(cpu, runs_sequential) { conform(&CPU, "tests/cells/runs.cell", NULL, "H=19,D=5", 9, 3, "sequential"); }
Test(cpu, runs_portable) { conform(&CPU_PORTABLE, "tests/cells/runs.cell", NULL, "H=19,D=5", 4, 2, NULL); }
Test(cpu, runs_threads) { conform(&CPU_THREADS, "tests/cells/runs.cell", NULL, "H=19,D=5", 6, 11, NULL); }
/* 1024 gate columns: the stacked products' arrays have rows one cache line longer than their
 * columns (compiler/plan, rows_stride) */
Test(cpu, lstm_wide_auto) { conform(&CPU, "stdlib/lstm.cell", NULL, "H=256,D=3", 9, 3, NULL); }
Test(cpu, lstm_wide_portable) { conform(&CPU_PORTABLE, "stdlib/lstm.cell", NULL, "H=256,D=3", 4, 2, NULL); }
Test(cpu, lstm_wide_threads) { conform(&CPU_THREADS, "stdlib/lstm.cell", NULL, "H=256,D=3", 6, 11, NULL); }
Test(cuda, lstm_wide_sequential) { conform(&CUDA, "stdlib/lstm.cell", NULL, "H=256,D=3", 3, 2, "sequential"); }

/* ---- the lists these tests read ---- */

/* The mode stdlib/cells.list gives a cell is the one its checker chooses. */
#define LIST_MODE_scan MODE_SCAN
#define LIST_MODE_sequential MODE_SEQUENTIAL
#define MODE_TEST(name, file, set, dims, md)                                                    \
  Test(cells, name##_mode) {                                                                      \
    Arena arena = {0};                                                                            \
    Cell *c = h_cell(&arena, file, set, h_dims(dims, 4, 3), false, NULL);                         \
    cr_expect_eq(c->mode, LIST_MODE_##md, "%s: stdlib/cells.list says %s", file, #md);          \
    cell_free(c);                                                                                 \
    arena_free(&arena);                                                                           \
  }
STDLIB_CELLS(MODE_TEST)

/* Every .cell file of stdlib/ is in stdlib/cells.list: a new cell cannot miss the tests. */
Test(cells, every_stdlib_cell_listed) {
  static const char *const listed[] = {
#define FILE_OF(name, file, set, dims, md) file,
      STDLIB_CELLS(FILE_OF)
#undef FILE_OF
  };
  DIR *d = opendir("stdlib");
  cr_assert_not_null(d);
  int files = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".cell")) continue;
    files++;
    char *path = xasprintf("stdlib/%s", e->d_name);
    bool found = false;
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++) found = found || !strcmp(listed[i], path);
    cr_expect(found, "%s is not in stdlib/cells.list", path);
    free(path);
  }
  closedir(d);
  cr_assert_geq(files, 10);
}

/* Every back end of the registry has a configuration above (cuda through the cuda suite, with
 * CELLC_TEST_CUDA_BACKEND=cuda on a GPU): a new back end fails here until it is given one. */
Test(cells, every_backend_conforms) {
  const Config *configs[] = {&INTERP_F32, &CPU, &CPU_PORTABLE, &CPU_THREADS, &CUDA};
  cr_assert_geq(backend_count(), 4);
  for (int i = 0; i < backend_count(); i++) {
    const Backend *be = backend_at(i);
    bool covered = !strcmp(be->name, "cuda"); /* the GPU's: CELLC_TEST_CUDA_BACKEND=cuda runs the cuda suite */
    for (size_t j = 0; j < sizeof configs / sizeof configs[0]; j++) covered = covered || !strcmp(configs[j]->backend, be->name);
    cr_expect(covered, "back end '%s' has no conformance configuration in test_backends.c", be->name);
    cr_expect(backend_find(be->name) == be);
  }
}

/* The devices: one per kind per process (a second open shares the first, until the last holder
 * releases it), each of the kind asked for, and the back end that trains on each found by kind;
 * train.device's words name them, the back ends that do not train do not. */
Test(devices, one_per_kind) {
  char err[8192];
  cr_expect(device_open(DEVICE_CPU, err, sizeof err) == device_host());
  cr_expect(device_is_host(device_host()) && device_host()->kind == DEVICE_CPU);
  Device *a = device_open(DEVICE_CUDA_EMU, err, sizeof err), *b = device_open(DEVICE_CUDA_EMU, err, sizeof err);
  cr_assert(a, "%s", err);
  cr_expect(a == b && a->kind == DEVICE_CUDA_EMU && !device_is_host(a) && !strcmp(a->name, "cuda-emu"));
  device_release(b);
  /* still open for a: its memory works */
  float x = 3.5f, y = 0;
  void *p = a->alloc(a, sizeof x);
  a->upload(a, p, &x, sizeof x), a->download(a, &y, p, sizeof y), a->free(a, p);
  cr_expect_eq(y, 3.5f);
  cr_expect_eq(a->prepare(a, err, sizeof err), 0, "%s", err); /* the training kernels load */
  cr_expect_eq(device_host()->prepare(device_host(), err, sizeof err), 0);
  device_release(a);
  DeviceKind k;
  for (int i = 0; i < backend_count(); i++) {
    const Backend *be = backend_at(i);
    cr_expect_eq(device_kind_find(be->name, &k), backend_trains(be), "%s", be->name);
    if (backend_trains(be)) cr_expect(k == be->device && backend_on_device(k) == be, "%s", be->name);
  }
  cr_expect(backend_on_device(DEVICE_CPU) == backend_find("cpu"));
  cr_expect(backend_on_device(DEVICE_CUDA_EMU) == backend_find("cuda-emu"));
  cr_expect(!device_kind_find("tpu", &k));
}
