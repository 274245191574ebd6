/* test_cuda_emit.c: `cellc emit --target cuda` (cuda_emit.c), driven through Backend.emit. For every
 * stdlib cell: P.cu compiles with nvcc and P.ptx passes ptxas for sm_80 and sm_90; P.cu's kernels
 * are the CUDA back end's source, byte for byte; and P.cu's host code, compiled with the host C++
 * compiler against a runtime-API shim over cuda-emu (emit_shim.c), gives exactly the cuda-emu back
 * end's outputs and gradients on the same inputs (nonzero h0 and dfinal, T = 9 and 130, both modes);
 * P.cu carries the back end's executor (cellc_exec.h) and plan table, word for word.
 * Then the C API's NULL arguments and its statuses. */
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cg_cuda.h"
#include "cuda.h"
#include "cuda_api.h"
#include "cuda_internal.h"
#include "emit_shim.h"
#include "harness.h"
#include "stdlib_cells.h"
#include "ptxas.h"

#define KERNELS_BEGIN "/* ---- cellc kernels: begin ---- */\n"
#define KERNELS_END "/* ---- cellc kernels: end ---- */\n"
#define GLUE_END "/* ---- cellc glue kernels: end ---- */\n"

TestSuite(emit, .init = h_use_cuda_test_cache);

static const char *cuda_home(void) {
  const char *h = getenv("CUDA_HOME");
  return h && *h ? h : "/usr/local/cuda";
}

/* A program compiled for a back end (gates off, as emit plans), and its cell. */
typedef struct Subject {
  Arena arena;
  Cell *cell;
  Compiled *cu;
} Subject;

static void subject_open(Subject *s, const char *file, const char *set, const char *dims, const char *mode, const char *be) {
  memset(s, 0, sizeof *s);
  s->cell = h_cell(&s->arena, file, set, dims, false, mode);
  char err[2048];
  PipelineOptions o = {0};
  o.backend = backend_find(be);
  s->cu = pipeline_compile(s->cell, &o, err, sizeof err);
  cr_assert(s->cu, "compile: %s", err);
}

static void subject_close(Subject *s) {
  pipeline_release(s->cu);
  cell_free(s->cell);
  arena_free(&s->arena);
}

/* Backend.emit into a fresh directory (the caller removes it). */
static char *emit_to(const Subject *s, const char *name, const char *arch) {
  char *dir = cuda_make_temp_dir("cellc-test-emit");
  cr_assert(dir);
  EmitOptions eo = {0};
  eo.name = name, eo.dir = dir, eo.arch = arch;
  char err[8192];
  cr_assert(s->cu->be->emit, "cuda-emu has an emit entry");
  s->cu->p->cell = s->cell; /* emit names the API after the cell; the pipeline clears it after compiling */
  int rc = s->cu->be->emit(s->cu->p, &s->cu->opt, &eo, err, sizeof err);
  s->cu->p->cell = NULL;
  cr_assert_eq(rc, 0, "emit: %s", err);
  return dir;
}

static char *read_emitted(const char *dir, const char *name, const char *ext) {
  char *path = xasprintf("%s/%s.%s", dir, name, ext);
  size_t len;
  char *text = read_file(path, &len);
  cr_assert(text, "%s exists", path);
  free(path);
  return text;
}

/* The text of `text` from the marker `from` (included) to the end of the marker `to`. */
static char *between(const char *text, const char *from, const char *to) {
  const char *a = strstr(text, from), *b = a ? strstr(a, to) : NULL;
  cr_assert(a && b, "P.cu has the markers %s and %s", from, to);
  b += strlen(to);
  char *out = xmalloc((size_t)(b - a) + 1);
  memcpy(out, a, (size_t)(b - a));
  out[b - a] = 0;
  return out;
}

static int run_tool(char *const argv[], char **out) { return cuda_run_tool(argv, out); }

/* ---- running P.cu's host code ---- */

/* What the C API needs of a program (kept after the back end is released). */
typedef struct Shape {
  int np, ns, x_size, output_size;
  int *pcplx, *ppart, *scplx, *spart;
  size_t *pnumel, *ssize;
} Shape;

static Shape shape_of(const Program *p, const Cell *cell) {
  Shape sh = {0};
  sh.np = cell->nparams, sh.ns = p->nstates, sh.x_size = p->x_size, sh.output_size = p->output_size;
  sh.pcplx = xcalloc((size_t)sh.np, sizeof(int)), sh.ppart = xcalloc((size_t)sh.np, sizeof(int));
  sh.scplx = xcalloc((size_t)sh.ns, sizeof(int)), sh.spart = xcalloc((size_t)sh.ns, sizeof(int));
  sh.pnumel = xcalloc((size_t)sh.np, sizeof(size_t)), sh.ssize = xcalloc((size_t)sh.ns, sizeof(size_t));
  for (int i = 0; i < sh.np; i++) {
    sh.ppart[i] = p->ppart_of[i], sh.pcplx[i] = cell->params[i].cplx, sh.pnumel[i] = (size_t)p->pparts[sh.ppart[i]].numel;
  }
  for (int i = 0; i < sh.ns; i++) {
    sh.spart[i] = p->spart_of[i], sh.scplx[i] = p->sparts[sh.spart[i]].cplx, sh.ssize[i] = (size_t)p->sparts[sh.spart[i]].size;
  }
  return sh;
}

static void shape_free(Shape *sh) {
  free(sh->pcplx), free(sh->ppart), free(sh->scplx), free(sh->spart), free(sh->pnumel), free(sh->ssize);
}

typedef int (*FwdFn)(const void *, int, int, const float *, const void *, float *, void *, void *, void *);
typedef int (*BwdFn)(const void *, int, int, const float *, const void *, const float *, const void *, void *, void *, float *,
                     void *, void *);

typedef struct Options {
  const int *lengths;
  int threads;
} Options;
typedef int (*FwdExFn)(const void *, int, int, const float *, const void *, float *, void *, void *, const Options *, void *);
typedef int (*BwdExFn)(const void *, int, int, const float *, const void *, const float *, const void *, void *, const Options *,
                       void *, float *, void *, void *);

/* The emulator, P.cu's kernels loaded on it and P.cu's host part as a shared object over the shim. */
typedef struct Emu {
  CudaApi api;
  CUcontext ctx;
  EmitShimApi shim;
  void *so;
  size_t (*ws)(int, int);
  FwdFn fwd;
  BwdFn bwd;
  FwdExFn fwd_ex;          /* ABI 2: run_emitted calls these with lengths where set */
  BwdExFn bwd_ex;
  const int *lengths;
  const char *(*strerror)(int);
  void (*release)(void);
} Emu;

static void *sym(void *so, const char *name) {
  void *f = dlsym(so, name);
  cr_assert(f, "P.cu's host part defines %s", name);
  return f;
}

/* ---- device buffers in the C API's layouts ---- */

static CUdeviceptr dev_new(Emu *e, size_t floats) {
  CUdeviceptr d;
  char err[1024];
  cr_assert_eq(CUDA_CU(&e->api, err, sizeof err, cuMemAlloc, &d, 4 * (floats ? floats : 1)), 0, "%s", err);
  return d;
}

static CUdeviceptr dev_of(Emu *e, const double *v, size_t n) {
  float *f = xmalloc(4 * (n + 1));
  for (size_t i = 0; i < n; i++) f[i] = (float)v[i];
  CUdeviceptr d = dev_new(e, n);
  e->api.cuMemcpyHtoD(d, f, 4 * n);
  free(f);
  return d;
}

/* A param or state in the C API's layout (complex interleaved) from the harness's planar parts. */
static CUdeviceptr dev_user(Emu *e, double **parts, int q, int cplx, size_t n) {
  double *v = xmalloc(sizeof(double) * (2 * n + 1));
  for (size_t i = 0; i < n; i++) {
    if (cplx) v[2 * i] = parts[q][i], v[2 * i + 1] = parts[q + 1][i];
    else v[i] = parts[q][i];
  }
  CUdeviceptr d = dev_of(e, v, cplx ? 2 * n : n);
  free(v);
  return d;
}

static void host_of(Emu *e, double *out, CUdeviceptr d, size_t n) {
  float *f = xmalloc(4 * (n + 1));
  e->api.cuMemcpyDtoH(f, d, 4 * n);
  for (size_t i = 0; i < n; i++) out[i] = f[i];
  free(f);
}

static void host_user(Emu *e, double **parts, int q, int cplx, size_t n, CUdeviceptr d) {
  double *v = xmalloc(sizeof(double) * (2 * n + 1));
  host_of(e, v, d, cplx ? 2 * n : n);
  for (size_t i = 0; i < n; i++) {
    if (cplx) parts[q][i] = v[2 * i], parts[q + 1][i] = v[2 * i + 1];
    else parts[q][i] = v[i];
  }
  free(v);
}

/* One forward and backward of the emitted code on h's inputs into h's outputs. NULL flags: pass
 * NULL for h0 (zero states), final, dfinal, dx, dh0. */
enum { NULL_H0 = 1, NULL_FINAL = 2, NULL_DFINAL = 4, NULL_DX = 8, NULL_DH0 = 16 };

/* The most params or states of a cell these tests pass (rwkv6 has 27 params). */
enum { MAX_PARTS = 32 };

static void run_emitted(Emu *e, const Shape *sh, HBufs *h, int flags) {
  int T = h->T, B = h->B;
  size_t rows = (size_t)T * (size_t)B;
  CUdeviceptr w[MAX_PARTS], g[MAX_PARTS], h0[MAX_PARTS], fin[MAX_PARTS], dfin[MAX_PARTS], dh0[MAX_PARTS];
  cr_assert(sh->np <= MAX_PARTS && sh->ns <= MAX_PARTS);
  for (int i = 0; i < sh->np; i++) {
    w[i] = dev_user(e, h->params, sh->ppart[i], sh->pcplx[i], sh->pnumel[i]);
    g[i] = dev_new(e, sh->pnumel[i] * (sh->pcplx[i] ? 2 : 1));
  }
  for (int i = 0; i < sh->ns; i++) {
    size_t n = (size_t)B * sh->ssize[i];
    h0[i] = dev_user(e, h->h0, sh->spart[i], sh->scplx[i], n);
    dfin[i] = dev_user(e, h->dfinal, sh->spart[i], sh->scplx[i], n);
    fin[i] = dev_new(e, n * (sh->scplx[i] ? 2 : 1)), dh0[i] = dev_new(e, n * (sh->scplx[i] ? 2 : 1));
  }
  CUdeviceptr x = dev_of(e, h->x, rows * (size_t)sh->x_size), dy = dev_of(e, h->dy, rows * (size_t)sh->output_size);
  CUdeviceptr y = dev_new(e, rows * (size_t)sh->output_size), dx = dev_new(e, rows * (size_t)sh->x_size);
  size_t wsb = e->ws(T, B);
  cr_assert(wsb > 0);
  CUdeviceptr work = dev_new(e, wsb / 4 + 2); /* given at an odd address: any alignment */
  void *wk = (void *)(uintptr_t)(work + 4);
  int rc;
  if (e->lengths) {
    Options o = {e->lengths, 0};
    rc = e->fwd_ex(w, T, B, (const float *)(uintptr_t)x, flags & NULL_H0 ? NULL : h0, (float *)(uintptr_t)y,
                   flags & NULL_FINAL ? NULL : fin, wk, &o, NULL);
    cr_assert_eq(rc, 0, "P_forward_ex: %s", e->strerror(rc));
    rc = e->bwd_ex(w, T, B, (const float *)(uintptr_t)x, h0, (const float *)(uintptr_t)dy, flags & NULL_DFINAL ? NULL : dfin, wk, &o,
                   g, flags & NULL_DX ? NULL : (float *)(uintptr_t)dx, flags & NULL_DH0 ? NULL : dh0, NULL);
    cr_assert_eq(rc, 0, "P_backward_ex: %s", e->strerror(rc));
  } else {
    rc = e->fwd(w, T, B, (const float *)(uintptr_t)x, flags & NULL_H0 ? NULL : h0, (float *)(uintptr_t)y,
                flags & NULL_FINAL ? NULL : fin, wk, NULL);
    cr_assert_eq(rc, 0, "P_forward: %s", e->strerror(rc));
    rc = e->bwd(w, T, B, (const float *)(uintptr_t)x, h0, (const float *)(uintptr_t)dy, flags & NULL_DFINAL ? NULL : dfin, wk, g,
                flags & NULL_DX ? NULL : (float *)(uintptr_t)dx, flags & NULL_DH0 ? NULL : dh0, NULL);
    cr_assert_eq(rc, 0, "P_backward: %s", e->strerror(rc));
  }
  host_of(e, h->y, y, rows * (size_t)sh->output_size);
  if (!(flags & NULL_DX)) host_of(e, h->gx, dx, rows * (size_t)sh->x_size);
  for (int i = 0; i < sh->np; i++) host_user(e, h->gparams, sh->ppart[i], sh->pcplx[i], sh->pnumel[i], g[i]);
  for (int i = 0; i < sh->ns; i++) {
    size_t n = (size_t)B * sh->ssize[i];
    if (!(flags & NULL_FINAL)) host_user(e, h->final, sh->spart[i], sh->scplx[i], n, fin[i]);
    if (!(flags & NULL_DH0)) host_user(e, h->gh0, sh->spart[i], sh->scplx[i], n, dh0[i]);
  }
  CUdeviceptr all[] = {x, dy, y, dx, work};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) e->api.cuMemFree(all[i]);
  for (int i = 0; i < sh->np; i++) e->api.cuMemFree(w[i]), e->api.cuMemFree(g[i]);
  for (int i = 0; i < sh->ns; i++) e->api.cuMemFree(h0[i]), e->api.cuMemFree(dfin[i]), e->api.cuMemFree(fin[i]), e->api.cuMemFree(dh0[i]);
}

#ifndef CELLC_EMIT_GPU

static void emu_open(Emu *e, const char *dir) {
  char err[8192];
  /* the host part: P.cu without its kernels, with the shim */
  char *so = xasprintf("%s/libPhost.so", dir), *cu = xasprintf("%s/P.cu", dir), *inc = xasprintf("-I%s/include", cuda_home());
  char *argv[] = {"g++", "-O1", "-shared", "-fPIC", "-Wall", "-Werror", "-DCELLC_EMIT_HOST_ONLY", inc,
                  "-Itests/unit", "-x", "c++", cu, "-x", "c", "tests/unit/emit_shim.c", "-o", so, NULL};
  char *out = NULL;
  int rc = run_tool(argv, &out);
  cr_assert_eq(rc, 0, "g++ P.cu (host part): %s", out ? out : "");
  free(out);
  e->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  cr_assert(e->so, "dlopen: %s", dlerror());
  e->ws = (size_t (*)(int, int))sym(e->so, "P_workspace_bytes");
  e->fwd = (FwdFn)sym(e->so, "P_forward");
  e->bwd = (BwdFn)sym(e->so, "P_backward");
  e->fwd_ex = (FwdExFn)sym(e->so, "P_forward_ex"), e->bwd_ex = (BwdExFn)sym(e->so, "P_backward_ex"), e->lengths = NULL;
  e->strerror = (const char *(*)(int))sym(e->so, "P_strerror");
  e->release = (void (*)(void))sym(e->so, "P_release");
  free(so), free(cu), free(inc);
  /* the emulator and the kernels: P.cu from its first kernel to its last glue kernel */
  cuda_api_open_emu(&e->api);
  CUdevice dev;
  cr_assert_eq(cuda_open_device(&e->api, 0, &dev, err, sizeof err), 0, "%s", err);
  cr_assert_eq(CUDA_CU(&e->api, err, sizeof err, cuCtxCreate, &e->ctx, NULL, 0, dev), 0, "%s", err);
  char *text = read_emitted(dir, "P", "cu"), *section = between(text, KERNELS_BEGIN, GLUE_END);
  /* the emulator takes the prelude as the back end hands it, by its #include (its text names
   * `extern __shared__`, which the emulator refuses to see) */
  size_t skip = strlen(KERNELS_BEGIN) + strlen(cuda_prelude_text());
  cr_assert(!strncmp(section + strlen(KERNELS_BEGIN), cuda_prelude_text(), strlen(cuda_prelude_text())));
  char *kernels = xasprintf("#include \"" CUDA_PRELUDE_NAME "\"\n%s", section + skip);
  free(section);
  CudaImage img;
  cr_assert_eq(cuda_compile(&e->api, kernels, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0, "%s", err);
  memset(&e->shim, 0, sizeof e->shim);
  cr_assert_eq(CUDA_CU(&e->api, err, sizeof err, cuModuleLoadData, &e->shim.mod, img.data), 0, "%s", err);
  cuda_image_free(&img);
  free(text), free(kernels);
  e->shim.get_function = e->api.cuModuleGetFunction, e->shim.launch = e->api.cuLaunchKernel;
  e->shim.set_attribute = e->api.cuFuncSetAttribute;
  e->shim.htod = e->api.cuMemcpyHtoD, e->shim.dtod = e->api.cuMemcpyDtoD, e->shim.dtoh = e->api.cuMemcpyDtoH;
  e->shim.memset8 = e->api.cuMemsetD8, e->shim.alloc = e->api.cuMemAlloc, e->shim.release = e->api.cuMemFree;
  e->shim.create = e->api.cublasCreate, e->shim.destroy = e->api.cublasDestroy;
  e->shim.sgemm = e->api.cublasSgemm;
  ((EmitShimSet)sym(e->so, "emit_shim_set"))(&e->shim);
}

static void emu_close(Emu *e) {
  e->release();
  e->api.cuCtxDestroy(e->ctx);
  cuda_api_close(&e->api);
  dlclose(e->so);
}

/* ---- nvcc and ptxas ---- */

static void build_cell(const char *file, const char *set, const char *dims, const char *mode) {
  Subject s;
  subject_open(&s, file, set, dims, mode, "cuda-emu");
  const char *arch[2] = {"sm_80", "sm_90"};
  for (int a = 0; a < 2; a++) {
    char *dir = emit_to(&s, "cellP", arch[a]);
    char *ptx = read_emitted(dir, "cellP", "ptx");
    char target[32];
    snprintf(target, sizeof target, ".target %s", arch[a]);
    cr_expect(strstr(ptx, target), "%s P.ptx is for %s", file, arch[a]);
    CudaKernelResources *res = NULL;
    int nres = 0;
    char err[8192];
    cr_assert_eq(cuda_ptxas_check(ptx, arch[a], &res, &nres, err, sizeof err), 0, "%s %s ptxas: %s", file, arch[a], err);
    cr_expect(nres >= 9, "%s %s: ptxas reports %d kernels", file, arch[a], nres);
    for (int k = 0; k < nres; k++) cr_expect(!strncmp(res[k].name, "cellP_", 6), "kernel %s has the prefix", res[k].name);
    free(res);
    free(ptx);
    if (a == 1) { /* nvcc -c P.cu once (for sm_80: nvcc takes its time) */
      cuda_remove_dir(dir);
      free(dir);
      continue;
    }
    char *nvcc = xasprintf("%s/bin/nvcc", cuda_home()), *src = xasprintf("%s/cellP.cu", dir), *obj = xasprintf("%s/cellP.o", dir);
    char *gpu = xasprintf("-arch=%s", arch[a]), *out = NULL;
    char *argv[] = {nvcc, gpu, "-c", src, "-o", obj, NULL};
    int rc = run_tool(argv, &out);
    cr_expect_eq(rc, 0, "%s: nvcc -c P.cu (%s) exited %d:\n%s", file, arch[a], rc, out ? out : "");
    struct stat st;
    cr_expect(rc != 0 || (stat(obj, &st) == 0 && st.st_size > 0), "%s: P.o written", file);
    free(out), free(nvcc), free(src), free(obj), free(gpu);
    cuda_remove_dir(dir);
    free(dir);
  }
  subject_close(&s);
}

#define BUILD_TEST(name, file, set, dims) \
  Test(emit, name##_nvcc_ptxas, .timeout = 600) { build_cell(file, set, dims, NULL); }

/* every stdlib cell (stdlib/cells.list) at H = 64, D = 32 */
#define STDLIB_BUILD_TEST(name, file, set, dims, md) BUILD_TEST(name, file, set, h_dims(dims, 64, 32))
STDLIB_CELLS(STDLIB_BUILD_TEST)
BUILD_TEST(names_like_kernels, "tests/cells/emit_names.cell", NULL, "H=8,D=4")
Test(emit, lru_sequential_nvcc_ptxas, .timeout = 600) { build_cell("stdlib/lru.cell", NULL, "H=64,D=32", "sequential"); }

/* Two cells emitted under two names, each P.cu built by nvcc -c, linked into one C program that
 * includes each P.cu's declarations as its header and calls both (no GPU: the calls it makes
 * return before touching the device). */
static char *emit_named(const char *file, const char *set, const char *dims, const char *name) {
  Subject s;
  subject_open(&s, file, set, dims, NULL, "cuda-emu");
  char *dir = emit_to(&s, name, "sm_80");
  subject_close(&s);
  return dir;
}

/* P.cu's declarations (from its guard to the kernels' renames) as dir/P.h. */
static void header_of(const char *dir, const char *name) {
  char *cu = read_emitted(dir, name, "cu"), *guard = xasprintf("#ifndef %s_H_", name);
  char *a = strstr(cu, guard), *b = a ? strstr(a, "/* every kernel's symbol") : NULL;
  cr_assert(a && b, "P.cu declares the API under its guard");
  char *path = xasprintf("%s/%s.h", dir, name), err[1024];
  cr_assert_eq(fsout_write_file(path, a, (size_t)(b - a), err, sizeof err), 0, "%s", err);
  free(path), free(guard), free(cu);
}

static void nvcc_c(const char *dir, const char *name) {
  char *nvcc = xasprintf("%s/bin/nvcc", cuda_home()), *src = xasprintf("%s/%s.cu", dir, name);
  char *obj = xasprintf("%s/%s.o", dir, name), *out = NULL;
  char *argv[] = {nvcc, "-arch=sm_80", "-c", src, "-o", obj, NULL};
  int rc = run_tool(argv, &out);
  cr_assert_eq(rc, 0, "nvcc -c %s.cu: %s", name, out ? out : "");
  free(nvcc), free(src), free(obj), free(out);
}

Test(emit, two_cells_link_into_one_c_program, .timeout = 600) {
  char *da = emit_named("stdlib/gru.cell", NULL, "H=8,D=4", "gruA"), *db = emit_named("stdlib/lru.cell", NULL, "H=8,D=4", "lruB");
  header_of(da, "gruA"), header_of(db, "lruB");
  nvcc_c(da, "gruA"), nvcc_c(db, "lruB");
  char *main_c = xasprintf("%s/main.c", da), err[1024];
  const char *prog_text =
      "#include <stdio.h>\n#include \"gruA.h\"\n#include \"lruB.h\"\n"
      "int main(void) {\n"
      "  gruA_params w = {0};\n"
      "  lruB_states h = {0};\n"
      "  lruB_params v = {0}, g = {0};\n"
      "  int a = gruA_forward(&w, 4, 2, NULL, NULL, NULL, NULL, NULL, NULL);\n"
      "  int b = lruB_backward(&v, 0, 2, NULL, NULL, NULL, &h, NULL, &g, NULL, NULL, NULL);\n"
      "  printf(\"%d %d %zu %zu %d %d|%s|%s\\n\", gruA_ABI, lruB_ABI, gruA_workspace_bytes(10, 2),\n"
      "         lruB_workspace_bytes(0, 2), gruA_H + lruB_H, a != 0 && b != 0, gruA_strerror(a), lruB_strerror(b));\n"
      "  gruA_release();\n  lruB_release();\n  return 0;\n}\n";
  cr_assert_eq(fsout_write_file(main_c, prog_text, strlen(prog_text), err, sizeof err), 0, "%s", err);
  char *main_o = xasprintf("%s/main.o", da), *ia = xasprintf("-I%s", da), *ib = xasprintf("-I%s", db), *out = NULL;
  char *cc[] = {"gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", ia, ib, "-c", main_c, "-o", main_o, NULL};
  int rc = run_tool(cc, &out);
  cr_assert_eq(rc, 0, "gcc main.c with both headers: %s", out ? out : "");
  free(out);
  char *nvcc = xasprintf("%s/bin/nvcc", cuda_home()), *oa = xasprintf("%s/gruA.o", da), *ob = xasprintf("%s/lruB.o", db);
  char *prog = xasprintf("%s/prog", da), *lib = xasprintf("-L%s/lib64", cuda_home());
  char *ld[] = {nvcc, main_o, oa, ob, "-o", prog, lib, "-lcublas", NULL};
  rc = run_tool(ld, &out);
  cr_assert_eq(rc, 0, "one program links both cells: %s", out ? out : "");
  free(out);
  char *run[] = {prog, NULL};
  rc = run_tool(run, &out);
  cr_assert_eq(rc, 0, "the program runs: %s", out ? out : "");
  cr_expect(strstr(out, "2 2 ") == out && strstr(out, " 16 1|a required pointer is NULL") && strstr(out, "|T and B must be at least 1"),
            "the program's output: %s", out);
  size_t ws = 0;
  cr_expect(sscanf(out, "2 2 %zu", &ws) == 1 && ws > 0, "gruA_workspace_bytes(10, 2) > 0: %s", out);
  free(out), free(nvcc), free(oa), free(ob), free(prog), free(lib), free(main_c), free(main_o), free(ia), free(ib);
  cuda_remove_dir(da), cuda_remove_dir(db);
  free(da), free(db);
}

/* ---- the kernels are the back end's ---- */

static void kernels_match(const char *file, const char *set, const char *dims, const char *mode) {
  Subject s;
  subject_open(&s, file, set, dims, mode, "cuda-emu");
  char *dir = emit_to(&s, "P", "sm_80");
  char *cu = read_emitted(dir, "P", "cu"), *got = between(cu, KERNELS_BEGIN, KERNELS_END);
  const char *src = cuda_compiled_source(s.cu), *inc = "#include \"" CUDA_PRELUDE_NAME "\"\n";
  cr_assert(src && !strncmp(src, inc, strlen(inc)));
  char *want = xasprintf("%s%s%s%s", KERNELS_BEGIN, cuda_prelude_text(), src + strlen(inc), KERNELS_END);
  cr_expect(!strcmp(got, want), "%s: P.cu's kernels differ from the back end's source", file);
  free(want), free(got), free(cu);
  cuda_remove_dir(dir);
  free(dir);
  subject_close(&s);
}

Test(emit, kernels_are_the_back_ends) {
  kernels_match("stdlib/gru.cell", NULL, "H=19,D=5", NULL);
  kernels_match("stdlib/lru.cell", NULL, "H=19,D=5", NULL);
  kernels_match("stdlib/lru.cell", NULL, "H=19,D=5", "sequential");
  kernels_match("stdlib/hgru.cell", "lb=0.25", "D=13", NULL);
}

/* ---- the plan is the back end's, run by the same executor ---- */

/* P.cu carries the executor the back end runs (cellc_exec.h, verbatim) and, as the words of
 * P_table_, the very plan table the back end's executor reads; no tables of another format. */
static void table_matches(const char *file, const char *set, const char *dims, const char *mode) {
  Subject s;
  subject_open(&s, file, set, dims, mode, "cuda-emu");
  char *dir = emit_to(&s, "P", "sm_80");
  char *cu = read_emitted(dir, "P", "cu");
  size_t n = 0;
  const unsigned char *want = cuda_compiled_table(s.cu, &n);
  cr_assert(want && n > 0 && n % 4 == 0, "the back end runs a plan table");
  cr_expect(strstr(cu, cellc_exec_h) != NULL, "%s: P.cu carries cellc_exec.h", file);
  cr_expect(!strstr(cu, "CellcEArray") && !strstr(cu, "CellcEStep") && !strstr(cu, "CellcEPlan"), "%s: P.cu has no CellcE* tables",
            file);
  const char *at = strstr(cu, "static const uint32_t P_table_[] = {");
  cr_assert(at, "%s: P.cu has P_table_", file);
  at = strchr(at, '{') + 1;
  size_t words = 0;
  for (;;) {
    char *end;
    unsigned long v = strtoul(at, &end, 16);
    if (end == at) break;
    uint32_t u = (uint32_t)v;
    cr_assert(words * 4 < n, "%s: P_table_ is longer than the back end's table", file);
    cr_expect(!memcmp(want + words * 4, &u, 4), "%s: word %zu of P_table_ differs from the back end's table", file, words);
    words++;
    at = end + strspn(end, ", \n");
  }
  cr_expect_eq(words * 4, n, "%s: P_table_ has the back end's %zu bytes", file, n);
  free(cu);
  cuda_remove_dir(dir);
  free(dir);
  subject_close(&s);
}

Test(emit, table_is_the_back_ends) {
  table_matches("stdlib/gru.cell", NULL, "H=19,D=5", NULL);
  table_matches("stdlib/lru.cell", NULL, "H=19,D=5", NULL);
  table_matches("stdlib/lru.cell", NULL, "H=19,D=5", "sequential");
  table_matches("stdlib/hgru.cell", "lb=0.25", "D=13", NULL);
}

/* The emitted code on cuda-emu against the cuda-emu back end on the same inputs: the same kernels,
 * launches and GEMMs, so the same floats. */
static void emitted_matches(const char *file, const char *set, const char *dims, int T, int B, const char *mode) {
  Subject s;
  subject_open(&s, file, set, dims, mode, "cuda-emu");
  HBufs *R = h_bufs_new(s.cu->p, T, B, 7, 0.4, 0.5), *E = h_bufs_new(s.cu->p, T, B, 7, 0.4, 0.5);
  pipeline_run_f64(s.cu, &R->io);
  char *dir = emit_to(&s, "P", "sm_90");
  Shape sh = shape_of(s.cu->p, s.cell);
  bool scan = s.cu->opt.scan;
  subject_close(&s); /* the back end's emulator goes before ours starts */
  Emu e;
  emu_open(&e, dir);
  run_emitted(&e, &sh, E, 0);
  cr_expect(e.shim.launches > 0 && e.shim.gemms > 0 && e.shim.creates == 1, "launches %d, gemms %d, handles %d", e.shim.launches,
            e.shim.gemms, e.shim.creates);
  const char *what;
  for (int i = 0; i < R->ng; i++) /* not recorded (emit plans without gates): what the back end left there */
    memset(R->gates[i], 0, sizeof(double) * R->gn[i]), memset(E->gates[i], 0, sizeof(double) * E->gn[i]);
  Program sizes = {0}; /* what h_compare reads of the program */
  sizes.x_size = sh.x_size, sizes.output_size = sh.output_size;
  double err = h_compare(R, E, &sizes, &what); /* every output and gradient, exactly */
  cr_expect(err == 0, "%s %s T=%d: %s differs from the back end's by %g (relative)", file, scan ? "scan" : "sequential", T, what, err);
  emu_close(&e);
  shape_free(&sh);
  h_bufs_free(R), h_bufs_free(E);
  cuda_remove_dir(dir);
  free(dir);
}

#define MATCH_TEST(name, file, set, dims)                                                          \
  Test(emit, name##_matches_backend, .timeout = 600) {                                             \
    emitted_matches(file, set, dims, 9, 2, NULL);                                                  \
    emitted_matches(file, set, dims, 130, 3, NULL);                                                \
  }

/* every stdlib cell (stdlib/cells.list) at H = 19, D = 5 */
#define STDLIB_MATCH_TEST(name, file, set, dims, md) MATCH_TEST(name, file, set, h_dims(dims, 19, 5))
STDLIB_CELLS(STDLIB_MATCH_TEST)
Test(emit, names_like_kernels_match_backend, .timeout = 600) { /* the renames do not reach the API's code */
  emitted_matches("tests/cells/emit_names.cell", NULL, "H=6,D=3", 9, 2, NULL);
}
Test(emit, lru_sequential_matches_backend, .timeout = 600) {
  emitted_matches("stdlib/lru.cell", NULL, "H=19,D=5", 9, 2, "sequential");
  emitted_matches("stdlib/lru.cell", NULL, "H=19,D=5", 130, 3, "sequential");
}
Test(emit, mingru_sequential_matches_backend, .timeout = 600) {
  emitted_matches("stdlib/mingru.cell", NULL, "H=19,D=5", 9, 2, "sequential");
}

/* ABI 2's lengths: P_forward_ex and P_backward_ex on cuda-emu against the cuda-emu back end with
 * SeqIO.lengths (compiler/pipeline/varlen.c): the same segments, kernels and GEMMs, so the same
 * floats; lengths all T are P_forward's bits, a length outside 1..T a status with a message. */
static void emitted_lengths_match(const char *file, const char *set, const char *dims, int T, int B, const char *mode) {
  Subject s;
  subject_open(&s, file, set, dims, mode, "cuda-emu");
  int *len = xcalloc((size_t)B, sizeof(int));
  for (int b = 0; b < B; b++) len[b] = b % 3 == 0 ? T / 2 + 1 : b % 3 == 1 ? T : 1 + b % 2;
  HBufs *R = h_bufs_new(s.cu->p, T, B, 7, 0.4, 0.5), *E = h_bufs_new(s.cu->p, T, B, 7, 0.4, 0.5);
  HBufs *F = h_bufs_new(s.cu->p, T, B, 7, 0.4, 0.5), *A = h_bufs_new(s.cu->p, T, B, 7, 0.4, 0.5);
  R->io.lengths = len;
  pipeline_run_f64(s.cu, &R->io);
  char *dir = emit_to(&s, "P", "sm_90");
  Shape sh = shape_of(s.cu->p, s.cell);
  subject_close(&s);
  Emu e;
  emu_open(&e, dir);
  e.lengths = len;
  run_emitted(&e, &sh, E, 0);
  for (int i = 0; i < R->ng; i++) memset(R->gates[i], 0, sizeof(double) * R->gn[i]), memset(E->gates[i], 0, sizeof(double) * E->gn[i]);
  Program sizes = {0};
  sizes.x_size = sh.x_size, sizes.output_size = sh.output_size;
  const char *what;
  double err = h_compare(R, E, &sizes, &what);
  cr_expect(err == 0, "%s T=%d with lengths: %s differs from the back end's by %g (relative)", file, T, what, err);
  /* lengths all T: the bits of P_forward and P_backward */
  int *full = xcalloc((size_t)B, sizeof(int));
  for (int b = 0; b < B; b++) full[b] = T;
  e.lengths = NULL;
  run_emitted(&e, &sh, F, 0);
  e.lengths = full;
  run_emitted(&e, &sh, A, 0);
  err = h_compare(F, A, &sizes, &what);
  cr_expect(err == 0, "%s: lengths all T differ from none: %s by %g", file, what, err);
  full[B - 1] = T + 1;
  Options o = {full, 0};
  int rc = e.fwd_ex(NULL, T, B, NULL, NULL, NULL, NULL, NULL, &o, NULL);
  cr_expect(rc != 0 && strstr(e.strerror(rc), "outside 1..T"), "a length T + 1: status %d (%s)", rc, e.strerror(rc));
  emu_close(&e);
  shape_free(&sh);
  h_bufs_free(R), h_bufs_free(E), h_bufs_free(F), h_bufs_free(A);
  free(len), free(full);
  cuda_remove_dir(dir);
  free(dir);
}

Test(emit, lengths_match_backend, .timeout = 600) {
  emitted_lengths_match("stdlib/gru.cell", NULL, "H=19,D=5", 9, 5, NULL);
  emitted_lengths_match("stdlib/lru.cell", NULL, "H=19,D=5", 9, 5, NULL);
  emitted_lengths_match("stdlib/mamba2.cell", NULL, "NH=2,P=4,N=3,D=5", 9, 4, NULL);
  emitted_lengths_match("stdlib/lstm.cell", NULL, "H=7,D=5", 130, 3, NULL);
}

/* ---- the C API's NULL arguments and statuses ---- */

static HBufs *inputs(const Shape *sh, const Program *p, int T, int B) {
  (void)sh;
  return h_bufs_new(p, T, B, 11, 0.4, 0.5);
}

/* max relative error of y and every param gradient between two runs. */
static double y_and_grads(const HBufs *a, const HBufs *b, const Shape *sh) {
  size_t rows = (size_t)a->T * (size_t)a->B;
  double e = h_rel_err(a->y, b->y, rows * (size_t)sh->output_size);
  for (int i = 0; i < a->np; i++) e = fmax(e, h_rel_err(a->gparams[i], b->gparams[i], a->pn[i]));
  return e;
}

static void null_arguments(const char *file, const char *set, const char *dims, const char *mode) {
  Subject s;
  subject_open(&s, file, set, dims, mode, "cuda-emu");
  int T = 9, B = 2;
  Shape sh = shape_of(s.cu->p, s.cell);
  HBufs *zero = inputs(&sh, s.cu->p, T, B), *null = inputs(&sh, s.cu->p, T, B), *full = inputs(&sh, s.cu->p, T, B);
  HBufs *some = inputs(&sh, s.cu->p, T, B), *again = inputs(&sh, s.cu->p, T, B);
  for (int i = 0; i < zero->ns; i++)
    memset(zero->h0[i], 0, sizeof(double) * zero->sn[i]), memset(zero->dfinal[i], 0, sizeof(double) * zero->sn[i]);
  char *dir = emit_to(&s, "P", "sm_80");
  subject_close(&s);
  Emu e;
  emu_open(&e, dir);
  /* h0 and dfinal NULL: zeros */
  run_emitted(&e, &sh, zero, 0);
  run_emitted(&e, &sh, null, NULL_H0 | NULL_DFINAL);
  const char *what;
  Program sizes = {0};
  sizes.x_size = sh.x_size, sizes.output_size = sh.output_size;
  double err = h_compare(zero, null, &sizes, &what);
  cr_expect(err == 0, "%s: NULL h0 and dfinal differ from zeros: %s by %g", file, what, err);
  /* final, dx, dh0 NULL: not written, the rest as with them */
  run_emitted(&e, &sh, full, 0);
  run_emitted(&e, &sh, some, NULL_FINAL | NULL_DX | NULL_DH0);
  cr_expect(y_and_grads(full, some, &sh) == 0, "%s: NULL final, dx, dh0 change y or the gradients", file);
  double gx = 0, f = 0;
  for (size_t i = 0; i < (size_t)T * B * (size_t)sh.x_size; i++) gx = fmax(gx, fabs(full->gx[i]));
  for (int i = 0; i < full->ns; i++)
    for (size_t j = 0; j < full->sn[i]; j++) f = fmax(f, fabs(full->final[i][j]));
  cr_expect(gx > 0 && f > 0, "%s: dx and final are written when given", file);
  /* statuses: each bad call returns nonzero with a message, before touching memory */
  float *dummy = (float *)(uintptr_t)256;
  void *w[MAX_PARTS], *st[MAX_PARTS];
  for (int i = 0; i < MAX_PARTS; i++) w[i] = dummy, st[i] = dummy;
  struct {
    int rc;
    const char *what;
  } bad[] = {
      {e.fwd(w, 0, B, dummy, NULL, dummy, NULL, dummy, NULL), "T = 0"},
      {e.fwd(w, T, 0, dummy, NULL, dummy, NULL, dummy, NULL), "B = 0"},
      {e.fwd(w, T, B, NULL, NULL, dummy, NULL, dummy, NULL), "x NULL"},
      {e.fwd(NULL, T, B, dummy, NULL, dummy, NULL, dummy, NULL), "w NULL"},
      {e.fwd(w, T, B, dummy, NULL, NULL, NULL, dummy, NULL), "y NULL"},
      {e.fwd(w, T, B, dummy, NULL, dummy, NULL, NULL, NULL), "work NULL"},
      {e.fwd(w, 1 << 30, 1 << 30, dummy, NULL, dummy, NULL, dummy, NULL), "T B overflowing"},
      {e.bwd(w, T, B, dummy, NULL, NULL, NULL, dummy, st, NULL, NULL, NULL), "dy NULL"},
      {e.bwd(w, T, B, dummy, NULL, dummy, NULL, dummy, NULL, NULL, NULL, NULL), "grad NULL"},
      {e.bwd(w, -1, B, dummy, NULL, dummy, NULL, dummy, st, NULL, NULL, NULL), "backward T = -1"},
  };
  w[0] = NULL;
  int nullmember = e.fwd(w, T, B, dummy, NULL, dummy, NULL, dummy, NULL);
  cr_expect(nullmember != 0 && strcmp(e.strerror(nullmember), "success"), "%s: a NULL param is an error", file);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_expect(bad[i].rc != 0, "%s: %s returns a nonzero status", file, bad[i].what);
    const char *m = e.strerror(bad[i].rc);
    cr_expect(m && *m && strcmp(m, "success") && strcmp(m, "unknown status"), "%s: %s: message '%s'", file, bad[i].what, m);
  }
  cr_expect(!strcmp(e.strerror(0), "success"));
  cr_expect(e.ws(0, 1) == 0 && e.ws(1, 0) == 0 && e.ws(1 << 30, 1 << 30) == 0, "P_workspace_bytes of a bad size is 0");
  cr_expect(e.ws(T, B) < e.ws(2 * T, B), "the workspace grows with T");
  /* P_release, then a call creates a handle again */
  cr_expect_eq(e.shim.creates, 1, "one cuBLAS handle for the thread");
  e.release();
  cr_expect_eq(e.shim.destroys, 1, "P_release destroys it");
  run_emitted(&e, &sh, again, 0);
  cr_expect_eq(e.shim.creates, 2, "a call after P_release creates a handle again");
  cr_expect(y_and_grads(full, again, &sh) == 0, "%s: the same results after P_release", file);
  emu_close(&e);
  shape_free(&sh);
  h_bufs_free(zero), h_bufs_free(null), h_bufs_free(full), h_bufs_free(some), h_bufs_free(again);
  cuda_remove_dir(dir);
  free(dir);
}

Test(emit, null_arguments_and_statuses_lru_scan, .timeout = 600) { null_arguments("stdlib/lru.cell", NULL, "H=7,D=3", NULL); }
Test(emit, null_arguments_and_statuses_gru, .timeout = 600) { null_arguments("stdlib/gru.cell", NULL, "H=7,D=3", NULL); }
Test(emit, null_arguments_and_statuses_lru_sequential, .timeout = 600) {
  null_arguments("stdlib/lru.cell", NULL, "H=7,D=3", "sequential");
}
#else

/* ---- on a GPU (make test-gpu: tests/gpu.sh builds this file with CELLC_EMIT_GPU) ---- */

/* P.cu built by nvcc as a shared object with cuBLAS, for the device's arch, in the driver's primary
 * context (the runtime API's). */
static void gpu_open(Emu *e, const char *dir, char *arch, size_t archlen) {
  char err[8192];
  memset(e, 0, sizeof *e);
  cr_assert_eq(cuda_api_open_real(&e->api, err, sizeof err), 0, "%s", err);
  CUdevice dev;
  cr_assert_eq(cuda_open_device(&e->api, 0, &dev, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cuda_device_arch(&e->api, dev, arch, archlen, err, sizeof err), 0, "%s", err);
  cr_assert_eq(CUDA_CU(&e->api, err, sizeof err, cuDevicePrimaryCtxRetain, &e->ctx, dev), 0, "%s", err);
  cr_assert_eq(CUDA_CU(&e->api, err, sizeof err, cuCtxSetCurrent, e->ctx), 0, "%s", err);
  (void)dir;
}

static void gpu_load(Emu *e, const char *dir, const char *arch) {
  char *nvcc = xasprintf("%s/bin/nvcc", cuda_home()), *so = xasprintf("%s/libP.so", dir), *cu = xasprintf("%s/P.cu", dir);
  char *gpu = xasprintf("-arch=%s", arch), *lib = xasprintf("-L%s/lib64", cuda_home()), *out = NULL;
  char *argv[] = {nvcc, gpu, "-shared", "-Xcompiler", "-fPIC", cu, "-o", so, lib, "-lcublas", NULL};
  int rc = run_tool(argv, &out);
  cr_assert_eq(rc, 0, "nvcc -shared P.cu: %s", out ? out : "");
  free(out);
  e->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  cr_assert(e->so, "dlopen: %s", dlerror());
  e->ws = (size_t (*)(int, int))sym(e->so, "P_workspace_bytes");
  e->fwd = (FwdFn)sym(e->so, "P_forward");
  e->bwd = (BwdFn)sym(e->so, "P_backward");
  e->fwd_ex = (FwdExFn)sym(e->so, "P_forward_ex"), e->bwd_ex = (BwdExFn)sym(e->so, "P_backward_ex"), e->lengths = NULL;
  e->strerror = (const char *(*)(int))sym(e->so, "P_strerror");
  e->release = (void (*)(void))sym(e->so, "P_release");
  free(nvcc), free(so), free(cu), free(gpu), free(lib);
}

/* The emitted code on the GPU against the CPU back end on the same inputs (both float32), the
 * parameters 0.1 * N(0, 1): a contracting recurrence at H = 64 (at larger scales the tanh cells are
 * chaotic over 300 steps and no two float32 runs of different summation order agree). */
static void gpu_matches_cpu(const char *file, const char *set, const char *dims, int T, int B, const char *mode) {
  Emu e;
  char arch[16];
  gpu_open(&e, NULL, arch, sizeof arch);
  Subject s, ref;
  subject_open(&s, file, set, dims, mode, "cuda");
  subject_open(&ref, file, set, dims, mode, "cpu");
  HBufs *R = h_bufs_new(ref.cu->p, T, B, 7, 0.1, 0.5), *E = h_bufs_new(s.cu->p, T, B, 7, 0.1, 0.5);
  pipeline_run_f64(ref.cu, &R->io);
  char *dir = emit_to(&s, "P", arch);
  Shape sh = shape_of(s.cu->p, s.cell);
  gpu_load(&e, dir, arch);
  run_emitted(&e, &sh, E, 0);
  cr_expect(e.api.cuCtxSynchronize() == CUDA_SUCCESS, "the stream's work completes");
  for (int i = 0; i < R->ng; i++)
    memset(R->gates[i], 0, sizeof(double) * R->gn[i]), memset(E->gates[i], 0, sizeof(double) * E->gn[i]);
  const char *what;
  double err = h_compare(R, E, s.cu->p, &what);
  cr_expect(err < 1e-4, "%s T=%d B=%d on %s: %s relative error %g against the CPU back end", file, T, B, arch, what, err);
  e.release();
  dlclose(e.so);
  shape_free(&sh);
  h_bufs_free(R), h_bufs_free(E);
  subject_close(&s), subject_close(&ref);
  cuda_remove_dir(dir);
  free(dir);
}

#define GPU_TEST(name, file, set, dims)                                                            \
  Test(emit, name##_gpu, .timeout = 900) {                                                         \
    gpu_matches_cpu(file, set, dims, 9, 2, NULL);                                                  \
    gpu_matches_cpu(file, set, dims, 300, 8, NULL);                                                \
  }

/* every stdlib cell (stdlib/cells.list) at H = 64, D = 32 */
#define STDLIB_GPU_TEST(name, file, set, dims, md) GPU_TEST(name, file, set, h_dims(dims, 64, 32))
STDLIB_CELLS(STDLIB_GPU_TEST)
Test(emit, lru_sequential_gpu, .timeout = 900) { gpu_matches_cpu("stdlib/lru.cell", NULL, "H=64,D=32", 300, 8, "sequential"); }

#endif
