/* cuda_backend.c: the CUDA back ends. Compiles a Program into a plan (compiler/plan), its table
 * (plan_table_build) and its CUDA C source (cg_cuda.c), compiles that with NVRTC (or the
 * emulator's) through the CudaApi table, and runs whole sequences in float32 with the CUDA host's
 * plan executor (cellc_exec.h, the same code every emitted P.cu runs) over device operations on
 * the driver API and cuBLAS, every buffer in device memory. `cuda` opens the real libraries,
 * `cuda-emu` the emulator: the code is the same. */
#include "cuda.h"

#include <string.h>
#include <time.h>

#include "cg_cuda.h" /* plan.h, with plan_table.h, and cellc_launch.h: before cellc_exec.h */
#include "cellc_exec.h"
#include "cuda_api.h"
#include "cuda_dev.h"
#include "support.h"

/* ---- the device: one per kind (real, emulated) per process, shared by every compiled program ---- */

static CudaDev *devices[2]; /* [emulated] */

void cuda_dev_release(CudaDev *d) {
  if (!d || --d->refs > 0) return;
  d->api.cuCtxSetCurrent(d->ctx);
  if (d->blas) d->api.cublasDestroy(d->blas);
  d->api.cuDevicePrimaryCtxRelease(d->dev);
  cuda_api_close(&d->api);
  devices[d->emulated] = NULL;
  free(d);
}

/* The device of a kind, opened on first use: 0, or -1 with what is missing in err. */
CudaDev *cuda_dev_acquire(bool emulated, char *err, size_t errlen) {
  if (devices[emulated]) {
    devices[emulated]->refs++;
    return devices[emulated];
  }
  CudaDev *d = xcalloc(1, sizeof *d);
  d->emulated = emulated;
  d->refs = 1;
  char why[1024];
  if (emulated) cuda_api_open_emu(&d->api);
  else if (cuda_api_open_real(&d->api, why, sizeof why) != 0) {
    snprintf(err, errlen, "the cuda back end cannot run here: %s", why);
    free(d);
    return NULL;
  }
  devices[emulated] = d;
  if (cuda_open_device(&d->api, 0, &d->dev, why, sizeof why) != 0 ||
      CUDA_CU(&d->api, why, sizeof why, cuDevicePrimaryCtxRetain, &d->ctx, d->dev) != 0) {
    snprintf(err, errlen, "the %s back end cannot run here: %s", emulated ? "cuda-emu" : "cuda", why);
    cuda_api_close(&d->api);
    devices[emulated] = NULL;
    free(d);
    return NULL;
  }
  if (CUDA_CU(&d->api, why, sizeof why, cuCtxSetCurrent, d->ctx) != 0 ||
      CUDA_CUBLAS(&d->api, why, sizeof why, cublasCreate, &d->blas) != 0 ||
      (emulated ? (snprintf(d->arch, sizeof d->arch, "sm_90"), 0)
                : cuda_device_arch(&d->api, d->dev, d->arch, sizeof d->arch, why, sizeof why))) {
    snprintf(err, errlen, "the %s back end cannot run here: %s", emulated ? "cuda-emu" : "cuda", why);
    cuda_dev_release(d);
    return NULL;
  }
  return d;
}

/* ---- a compiled program ---- */

typedef struct CudaCell {
  Compiled base;
  CudaDev *d;
  Plan *pl;
  CgCudaInfo info;
  char *source;
  PlanTable table;         /* the plan as cellc_exec.h runs it */
  CxKernels kinfo;         /* ... and the kernels' facts beside it */
  CUmodule mod;
  CUfunction *kfn;         /* per plan kernel */
  CUfunction fixed[CX_NFIXED]; /* the CX_K_* kernels (NULL: absent) */
  int ngates;              /* gate arrays (SeqIO.gates) */
} CudaCell;

/* One sequence in flight: the executor's run over one device workspace, and the SeqIO's pointers
 * as device addresses. */
typedef struct CudaWork {
  Work base;
  CudaCell *c;
  CxRun run;
  CUdeviceptr ws;          /* the workspace (cx_layout) */
  size_t ws_bytes;
  unsigned long long *params, *grads, *states, *out, *gh0, *noise, *gates; /* the SeqIO's, per part / stream / gate */
  double t0;               /* profiling: when the step began */
} CudaWork;

/* A failed CUDA call while running: the call and its error, exit 3 (the run failed). */
static void die(const CudaCell *c, const char *err) {
  fprintf(stderr, "cellc: the %s back end failed: %s\n", c->base.be->name, err);
  exit(3);
}

#define CU(c, fn, ...)                                                                      \
  do {                                                                                      \
    char e_[1024];                                                                          \
    if (CUDA_CU(&(c)->d->api, e_, sizeof e_, fn, __VA_ARGS__) != 0) die((c), e_);           \
  } while (0)
#define CUBLAS(c, fn, ...)                                                                  \
  do {                                                                                      \
    char e_[1024];                                                                          \
    if (CUDA_CUBLAS(&(c)->d->api, e_, sizeof e_, fn, __VA_ARGS__) != 0) die((c), e_);       \
  } while (0)

static void set_current(CudaCell *c) { CU(c, cuCtxSetCurrent, c->d->ctx); }

static CUdeviceptr dev_alloc(CudaCell *c, size_t bytes) {
  CUdeviceptr p;
  char e[1024];
  if (CUDA_CU(&c->d->api, e, sizeof e, cuMemAlloc, &p, bytes ? bytes : 4) != 0) {
    char m[1200];
    snprintf(m, sizeof m, "%s (asking for %zu bytes)", e, bytes);
    die(c, m);
  }
  memuse_add((void *)(uintptr_t)p, bytes);
  return p;
}

static void dev_free(CudaCell *c, CUdeviceptr p) {
  memuse_remove((void *)(uintptr_t)p);
  if (p) CU(c, cuMemFree, p);
}

#define FBYTES(n) (sizeof(float) * (size_t)(n))
#define DEV(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- the executor's device operations (cellc_exec.h CxOps) on the driver API: a failed call
 * ends the run (die), so each returns 0 ---- */

static int op_launch(void *ctx, int k, unsigned gx, unsigned gy, unsigned block, unsigned shared, void **args) {
  CudaCell *c = ((CudaWork *)ctx)->c;
  CUfunction f = k >= 0 ? c->kfn[k] : c->fixed[-1 - k];
  CHECK(f);
  if (cellc_needs_optin(shared)) CU(c, cuFuncSetAttribute, f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared);
  CU(c, cuLaunchKernel, f, gx, gy, 1, block, 1, 1, shared, NULL, args, NULL);
  return 0;
}

static int op_sgemm(void *ctx, int ta, int tb, int m, int n, int k, unsigned long long A, int lda, unsigned long long B, int ldb,
                    float beta, unsigned long long C, int ldc) {
  CudaCell *c = ((CudaWork *)ctx)->c;
  float one = 1.0f;
  CUBLAS(c, cublasSgemm, c->d->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one,
         (const float *)(uintptr_t)A, lda, (const float *)(uintptr_t)B, ldb, &beta, (float *)(uintptr_t)C, ldc);
  return 0;
}

static int op_htod(void *ctx, unsigned long long dst, const void *src, size_t bytes) {
  CU(((CudaWork *)ctx)->c, cuMemcpyHtoD, dst, src, bytes);
  return 0;
}

static int op_dtod(void *ctx, unsigned long long dst, unsigned long long src, size_t bytes) {
  CU(((CudaWork *)ctx)->c, cuMemcpyDtoD, dst, src, bytes);
  return 0;
}

static int op_zero(void *ctx, unsigned long long dst, size_t floats) {
  CU(((CudaWork *)ctx)->c, cuMemsetD32, dst, 0, floats);
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Profiling (CELLC_PROFILE) synchronizes after every step and adds its time to its kind's. */
static void op_step_begin(void *ctx) {
  CudaWork *w = ctx;
  if (w->base.profiling) w->t0 = now_s();
}

static void op_step_end(void *ctx, int kind) {
  CudaWork *w = ctx;
  if (!w->base.profiling) return;
  CU(w->c, cuCtxSynchronize);
  double s = now_s() - w->t0;
  Profile *pr = &w->base.prof;
  switch (kind) {
  case ET_ELEM: pr->elem_s += s; break;
  case ET_GEMM: case ET_GEMM_T: case ET_OUTER_ACC: pr->gemm_s += s; break;
  case ET_SCAN: pr->scan_s += s; break;
  case ET_RSCAN: pr->rscan_s += s; break;
  default: pr->other_s += s; break;
  }
}

static const CxOps driver_ops = {op_launch, op_sgemm, op_htod, op_dtod, op_zero, op_step_begin, op_step_end};

/* ---- a SeqIO as the executor's CxIO (cx_bind binds the arrays) ---- */

/* n pointers as device addresses into buf, or NULL when p is. */
static const unsigned long long *addrs(unsigned long long *buf, const void *const *p, int n) {
  if (!p) return NULL;
  for (int i = 0; i < n; i++) buf[i] = (unsigned long long)(uintptr_t)p[i];
  return buf;
}

/* The run for the SeqIO's T and B (the workspace grown to its layout), and its pointers as io; the
 * per-state pointers are the forward's (h0, final) or the backward's (dfinal, grad_h0). */
static void work_io(CudaCell *c, CudaWork *w, const SeqIO *s, bool backward, CxIO *io) {
  Program *p = c->base.p;
  CxRun *r = &w->run;
  const EtHeader *t = (const EtHeader *)c->table.data;
  if (!w->c) {
    w->c = c;
    r->t = t, r->k = &c->kinfo, r->ops = &driver_ops, r->ctx = w, r->mode = CX_SEQIO;
    r->arr = xcalloc((size_t)t->narrays + 1, sizeof *r->arr);
    r->off = xcalloc((size_t)t->narrays + 1, sizeof *r->off);
    r->bases = xcalloc((size_t)t->nslots + 1, sizeof *r->bases);
    r->uploaded = xcalloc((size_t)t->nslots + 1, sizeof *r->uploaded);
    w->params = xcalloc((size_t)p->npparts + 1, sizeof *w->params);
    w->grads = xcalloc((size_t)p->npparts + 1, sizeof *w->grads);
    w->states = xcalloc((size_t)p->nsparts + 1, sizeof *w->states);
    w->out = xcalloc((size_t)p->nsparts + 1, sizeof *w->out);
    w->gh0 = xcalloc((size_t)p->nsparts + 1, sizeof *w->gh0);
    w->noise = xcalloc((size_t)p->nnoise + 1, sizeof *w->noise);
    w->gates = xcalloc((size_t)c->ngates + 1, sizeof *w->gates);
    cx_forget(r);
  }
  /* the tuning options (docs/tuning.md): the scans' chunk length, the per-step phases step by step */
  r->chunk = tuning()->cuda_scan_chunk;
  r->no_persistent = tuning()->cuda_no_persistent;
  r->T = s->T, r->B = s->B, r->status = 0;
  if (cx_layout(r, s->T, s->B) != CX_OK) die(c, "T * B is too large: a size overflows");
  if (r->L.total > w->ws_bytes) {
    dev_free(c, w->ws);
    w->ws = dev_alloc(c, (size_t)r->L.total);
    w->ws_bytes = (size_t)r->L.total;
    cx_forget(r);
  }
  memset(io, 0, sizeof *io);
  io->x = DEV(s->x), io->dy = DEV(s->dy), io->y = DEV(s->y), io->dx = DEV(s->grad_x);
  io->params = addrs(w->params, (const void *const *)s->params, p->npparts);
  io->noise = addrs(w->noise, (const void *const *)s->noise, p->nnoise);
  io->gates = addrs(w->gates, (const void *const *)s->gates, c->ngates);
  io->gh0 = addrs(w->gh0, (const void *const *)s->grad_h0, p->nsparts);
  io->grads = addrs(w->grads, (const void *const *)s->grad_params, p->npparts);
  io->states = addrs(w->states, backward ? (const void *const *)s->dfinal : (const void *const *)s->h0, p->nsparts);
  io->out = backward ? io->gh0 : addrs(w->out, (const void *const *)s->final, p->nsparts);
}

static void cuda_forward(Compiled *cc, Work *ww, const SeqIO *s) {
  CudaCell *c = (CudaCell *)cc;
  CudaWork *w = (CudaWork *)ww;
  CxIO io;
  CHECK(s->dtype == DT_F32);
  set_current(c);
  work_io(c, w, s, false, &io);
  CHECK(cx_forward(&w->run, &io, w->ws) == CX_OK);
  CU(c, cuCtxSynchronize);
}

static void cuda_backward(Compiled *cc, Work *ww, const SeqIO *s) {
  CudaCell *c = (CudaCell *)cc;
  CudaWork *w = (CudaWork *)ww;
  CxIO io;
  CHECK(s->dtype == DT_F32);
  CHECK(w->c && w->run.T == s->T && w->run.B == s->B);
  set_current(c);
  work_io(c, w, s, true, &io);
  CHECK(cx_backward(&w->run, &io, w->ws) == CX_OK);
  CU(c, cuCtxSynchronize);
}

/* h_0 .. h_T of a state part into host memory, [(T + 1) B, size]: its state array; h0 throughout for
 * a still history; a shifted history's steps from their rows (Plan.shift: step j of row r at row
 * r + j B, n floats), as cpu_read_steps. */
static int cuda_read_steps(Compiled *cc, Work *ww, StepArray what, int part, void *out) {
  CudaCell *c = (CudaCell *)cc;
  CudaWork *w = (CudaWork *)ww;
  Program *p = c->base.p;
  if (what != STEPS_STATE) return -1;
  CHECK(part >= 0 && part < p->nsparts && w->c);
  set_current(c);
  int size = p->sparts[part].size, T = w->run.T, B = w->run.B;
  size_t need = plan_state_steps_floats(c->pl, part, size, T, B);
  float *src = xmalloc(FBYTES(need));
  CU(c, cuMemcpyDtoH, src, w->run.arr[c->pl->state_array[part]], FBYTES(need));
  plan_state_steps(c->pl, part, size, src, T, B, out);
  free(src);
  return 0;
}

/* ---- the interface ---- */

static const char *cuda_supports(const Program *p, const BackendOptions *o) {
  (void)p, (void)o; /* every program, in either mode, float32 (or a compile-time message) */
  return NULL;
}

static void cuda_free(Compiled *cc) {
  CudaCell *c = (CudaCell *)cc;
  if (!c) return;
  if (c->d) {
    c->d->api.cuCtxSetCurrent(c->d->ctx);
    if (c->mod) c->d->api.cuModuleUnload(c->mod);
    cuda_dev_release(c->d);
  }
  if (c->pl) plan_free(c->pl);
  cg_cuda_info_free(&c->info);
  free(c->kfn);
  free(c->table.data);
  free(c->source);
  free(c);
}

static int get_function(CudaCell *c, CUfunction *f, const char *name, char *err, size_t errlen) {
  return CUDA_CU(&c->d->api, err, errlen, cuModuleGetFunction, f, c->mod, name);
}

/* Whether this device gives every kernel the shared memory its rows' temporaries need (the code
 * allows up to CELLC_SHARED_OPTIN_BYTES a block; a device of an older generation has less). */
static int shared_fits(CudaCell *c, char *err, size_t errlen) {
  int optin = 0;
  if (CUDA_CU(&c->d->api, err, errlen, cuDeviceGetAttribute, &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
              c->d->dev) != 0)
    return -1;
  for (int k = -4; k < c->pl->nkernels; k++) { /* -4, -3: kstep_fwd, kstep_bwd; -2, -1: kstatic_* */
    int tmp = k >= 0 ? c->kinfo.tmp[k] : k >= -2 ? c->kinfo.static_tmp[k + 2] : c->kinfo.step_tmp[k + 4];
    if (4ll * tmp > optin) {
      snprintf(err, errlen, "a kernel's rows need %d floats of temporaries (%lld bytes of shared memory), more than this "
               "GPU gives a block (%d bytes)", tmp, 4ll * tmp, optin);
      return -1;
    }
  }
  return 0;
}

PlanOptions cuda_plan_options(bool scan, bool gates) {
  return (PlanOptions){.scan = scan, .gates = gates, .still = true, .slice_views = true, .shift_histories = true,
                       .shift_passes = true};
}

static Compiled *compile_on(bool emulated, const Backend *be, Program *p, const BackendOptions *o, char *err, size_t errlen) {
  CHECK(p->differentiated && (!o->scan || p->scan_form));
  CudaCell *c = xcalloc(1, sizeof *c);
  c->base.be = be, c->base.p = p, c->base.opt = *o;
  c->d = cuda_dev_acquire(emulated, err, errlen);
  if (!c->d) {
    free(c);
    return NULL;
  }
  PlanOptions po = cuda_plan_options(o->scan, o->gates);
  c->pl = plan_new(p, &po);
  char why[8192];
  c->source = cg_cuda_source(c->pl, &c->info, why, sizeof why);
  if (!c->source) {
    snprintf(err, errlen, "the %s back end: %s", be->name, why);
    cuda_free(&c->base);
    return NULL;
  }
  c->table = plan_table_build(c->pl, p);
  c->kinfo.nkernels = c->pl->nkernels, c->kinfo.tmp = c->info.tmp_floats;
  for (int i = 0; i < 2; i++) {
    c->kinfo.static_tmp[i] = c->info.has_static[i] ? c->info.static_tmp[i] : -1;
    c->kinfo.step_tmp[i] = c->info.has_step[i] ? c->info.step_tmp[i] : -1;
  }
  for (int i = 0; i < c->pl->narrays; i++)
    if (c->pl->arrays[i].kind == ARR_GATE && c->pl->arrays[i].index >= c->ngates) c->ngates = c->pl->arrays[i].index + 1;
  CudaImage img;
  CudaImageKind kind = emulated ? CUDA_IMAGE_PTX : CUDA_IMAGE_CUBIN;
  int rc = cuda_compile(&c->d->api, c->source, c->d->arch, kind, NULL, 0, &img, why, sizeof why);
  if (rc == 0) {
    rc = CUDA_CU(&c->d->api, why, sizeof why, cuCtxSetCurrent, c->d->ctx);
    if (rc == 0) rc = CUDA_CU(&c->d->api, why, sizeof why, cuModuleLoadData, &c->mod, img.data);
    cuda_image_free(&img);
  }
  c->kfn = xcalloc((size_t)c->pl->nkernels + 1, sizeof(CUfunction));
  for (int k = 0; k < c->pl->nkernels && rc == 0; k++) {
    char name[32];
    snprintf(name, sizeof name, "k%d", k);
    rc = get_function(c, &c->kfn[k], name, why, sizeof why);
  }
  /* the CX_K_* kernels of the source (all but the emitted code's unpack and pack) */
  static const char *const fixed[CX_K_UNPACK] = {"kstatic_fwd", "kstatic_bwd", "kstep_fwd", "kstep_bwd",
                                                 "cellc_scan_chunks", "cellc_scan_carry", "cellc_scan_apply",
                                                 "cellc_copy", "cellc_fill", "cellc_add_const"};
  const bool has[4] = {c->info.has_static[0], c->info.has_static[1], c->info.has_step[0], c->info.has_step[1]};
  for (int i = 0; i < CX_K_UNPACK && rc == 0; i++)
    if (i >= 4 || has[i]) rc = get_function(c, &c->fixed[i], fixed[i], why, sizeof why);
  if (rc == 0) rc = shared_fits(c, why, sizeof why);
  if (rc != 0) {
    snprintf(err, errlen, "the %s back end: %s", be->name, why);
    cuda_free(&c->base);
    return NULL;
  }
  return &c->base;
}

static Compiled *cuda_compile_real(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  return compile_on(false, &cuda_backend, p, o, err, errlen);
}

static Compiled *cuda_compile_emu(Program *p, const BackendOptions *o, char *err, size_t errlen) {
  return compile_on(true, &cuda_emu_backend, p, o, err, errlen);
}

const char *cuda_compiled_source(const Compiled *c) {
  if (!c || (c->be != &cuda_backend && c->be != &cuda_emu_backend)) return NULL;
  return ((const CudaCell *)c)->source;
}

const void *cuda_compiled_table(const Compiled *c, size_t *n) {
  if (!c || (c->be != &cuda_backend && c->be != &cuda_emu_backend)) return NULL;
  *n = ((const CudaCell *)c)->table.n;
  return ((const CudaCell *)c)->table.data;
}

static Work *cuda_work_new(Compiled *c) {
  CudaWork *w = xcalloc(1, sizeof *w);
  work_init(&w->base, c);
  return &w->base;
}

/* The work's device arrays go with the compiled program's context: work_free needs it current,
 * which the last forward or backward left it (one thread drives a back end). */
static void cuda_work_free(Work *ww) {
  CudaWork *w = (CudaWork *)ww;
  if (!w) return;
  const CudaDev *d = devices[w->base.be == &cuda_emu_backend];
  work_profile_report(&w->base);
  if (d && w->ws) {
    d->api.cuCtxSetCurrent(d->ctx);
    memuse_remove((void *)(uintptr_t)w->ws);
    d->api.cuMemFree(w->ws);
  }
  free(w->run.arr), free(w->run.off), free(w->run.bases), free(w->run.uploaded);
  free(w->params), free(w->grads), free(w->states), free(w->out), free(w->gh0), free(w->noise), free(w->gates);
  free(w);
}

/* The two back ends differ only in the CudaApi their compile opens: the real libraries or the
 * emulator. */
#define CUDA_BACKEND(label, compile_fn, kind)                                                             \
  {                                                                                                \
    .name = label, .dtype = DT_F32, .scans = true, .device = kind,                                   \
    .supports = cuda_supports,                                                                      \
    .compile = compile_fn, .free = cuda_free, .work_new = cuda_work_new, .work_free = cuda_work_free, \
    .forward = cuda_forward, .backward = cuda_backward, .read_steps = cuda_read_steps,               \
    .emit = cuda_emit                                                                               \
  }

const Backend cuda_backend = CUDA_BACKEND("cuda", cuda_compile_real, DEVICE_CUDA);
const Backend cuda_emu_backend = CUDA_BACKEND("cuda-emu", cuda_compile_emu, DEVICE_CUDA_EMU);
