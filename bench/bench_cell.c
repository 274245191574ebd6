/* bench_cell.c: times cellc's CPU back end (or --backend cuda) on one cell, forward + backward per
 * batch, and reports the machine's limits measured in the same run: the
 * sgemm rate and the copy bandwidth (--machine-gpu: the GPU's device-to-device copy), with each
 * phase's share.
 *   bench_cell FILE.cell H D T B [--set k=v] [--mode sequential|chunked] [--reps N] [--backend NAME]
 *              [--dims NAME=N,...] [--chunk L]
 * --mode chunked times the chunked form (chunkrun.c, cpu only): forward + backward together, and
 * its parts (in, the chunk ops, out) from the best run.
 * --dims binds the cell's dims in place of H (D stays bound), for cells without an H: gla's
 * NH, K, V, mamba2's NH, P, N. Prints one JSON object per line. */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cuda_api.h"
#include "pipeline.h"
#include "support.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the process's CPU time (all its threads): at one thread, a step's time without the waits for a
 * core that other jobs on a shared machine add to the wall clock */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *randn(Rng *r, size_t n, float scale) {
  float *v = xmalloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) v[i] = scale * (float)rng_normal(r);
  return v;
}

/* The best of several runs of a copy of 64 MiB: bytes moved (read + write) per second. */
static double copy_bandwidth(void) {
  size_t n = (size_t)16 << 20;
  float *a = xmalloc(sizeof(float) * n), *b = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 0;
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    memcpy(b, a, sizeof(float) * n);
    double t = now() - t0;
    if (t < best) best = t;
  }
  volatile float sink = b[n / 2];
  (void)sink;
  free(a), free(b);
  return 2.0 * (double)n * sizeof(float) / best;
}

/* STREAM's copy (a plain loop, b[i] = a[i]; 8 bytes counted per element), best of 5. */
__attribute__((optimize("O3"))) static double stream_copy(void) {
  size_t n = (size_t)16 << 20;
  float *restrict a = xmalloc(sizeof(float) * n), *restrict b = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 0;
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    for (size_t i = 0; i < n; i++) b[i] = a[i];
    double t = now() - t0;
    if (t < best) best = t;
  }
  volatile float sink = b[n / 3];
  (void)sink;
  free(a), free(b);
  return 2.0 * (double)n * sizeof(float) / best;
}

/* sgemm FLOP/s at the shape of a hoisted input projection. */
static double gemm_rate(int M, int N, int K) {
  Rng r;
  rng_seed(&r, 1, 1);
  float *A = randn(&r, (size_t)M * K, 1), *Bm = randn(&r, (size_t)N * K, 1), *C = xmalloc(sizeof(float) * (size_t)M * N);
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, A, K, Bm, K, 0, C, N);
    double t = now() - t0;
    if (t < best) best = t;
  }
  free(A), free(Bm), free(C);
  return 2.0 * M * N * K / best;
}

/* The GPU's copy bandwidth: the best of 5 device-to-device copies of 256 MiB, bytes read + written
 * per second (0 with a message when there is no GPU). */
static double gpu_copy_bandwidth(void) {
  CudaApi api;
  char err[1024];
  CUdevice dev;
  CUcontext ctx;
  if (cuda_api_open_real(&api, err, sizeof err) != 0 || cuda_open_device(&api, 0, &dev, err, sizeof err) != 0 ||
      CUDA_CU(&api, err, sizeof err, cuDevicePrimaryCtxRetain, &ctx, dev) != 0 ||
      CUDA_CU(&api, err, sizeof err, cuCtxSetCurrent, ctx) != 0) {
    fprintf(stderr, "bench_cell: %s\n", err);
    return 0;
  }
  size_t bytes = (size_t)256 << 20;
  CUdeviceptr a, b;
  if (CUDA_CU(&api, err, sizeof err, cuMemAlloc, &a, bytes) != 0 || CUDA_CU(&api, err, sizeof err, cuMemAlloc, &b, bytes) != 0) {
    fprintf(stderr, "bench_cell: %s\n", err);
    return 0;
  }
  api.cuMemsetD32(a, 0, bytes / 4);
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    api.cuCtxSynchronize();
    double t0 = now();
    api.cuMemcpyDtoD(b, a, bytes);
    api.cuCtxSynchronize();
    double t = now() - t0;
    if (rep && t < best) best = t; /* the first warms up */
  }
  api.cuMemFree(a), api.cuMemFree(b);
  return 2.0 * (double)bytes / best;
}

/* A host buffer in the memory of a back end's device (freed with the process). */
static void *on_device(Device *dv, const void *host, size_t bytes) {
  if (device_is_host(dv)) return (void *)host;
  void *d = dv->alloc(dv, bytes);
  dv->upload(dv, d, host, bytes);
  return d;
}

int main(int argc, char **argv) {
  int rc = cli_read_env("bench_cell"); /* CELLC_THREADS, CELLC_GEMM, CELLC_PROFILE, ... */
  if (rc) return rc;
  if (argc < 6) {
    fprintf(stderr, "usage: bench_cell FILE.cell H D T B [--set k=v] [--mode sequential] [--reps N] [--machine] "
                    "[--dims NAME=N,...]\n");
    return 2;
  }
  const char *file = argv[1];
  int H = atoi(argv[2]), D = atoi(argv[3]), T = atoi(argv[4]), B = atoi(argv[5]), reps = 5;
  Binding sets[4];
  int nsets = 0;
  bool force_seq = false, force_chunked = false, machine = false, machine_gpu = false;
  int chunk = 0;
  const char *backend = "cpu";
  Binding dims[9];
  int ndims = 0;
  for (int i = 6; i < argc; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      char *kv = argv[++i], *eq = strchr(kv, '=');
      *eq = 0;
      sets[nsets++] = (Binding){kv, eq + 1};
    } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
      force_seq = !strcmp(argv[++i], "sequential");
      force_chunked = !strcmp(argv[i], "chunked");
    } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--machine")) machine = true;
    else if (!strcmp(argv[i], "--machine-gpu")) machine_gpu = true;
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!strcmp(argv[i], "--dims") && i + 1 < argc) {
      for (char *kv = strtok(argv[++i], ","); kv && ndims < 8; kv = strtok(NULL, ",")) {
        char *eq = strchr(kv, '=');
        if (!eq) {
          fprintf(stderr, "bench_cell: --dims %s: NAME=N expected\n", kv);
          return 2;
        }
        *eq = 0;
        dims[ndims++] = (Binding){kv, eq + 1};
      }
    }
  }
  if (machine_gpu) {
    printf("{\"gpu_copy_bytes_per_s\": %.4g}\n", gpu_copy_bandwidth());
    return 0;
  }
  if (machine) {
    printf("{\"copy_bytes_per_s\": %.4g, \"stream_copy_bytes_per_s\": %.4g, \"sgemm_flops\": %.4g}\n", copy_bandwidth(),
           stream_copy(), gemm_rate(T * B, 3 * H, D));
    return 0;
  }
  Arena arena = {0};
  Module *m = check_load(&arena, file, "stdlib");
  if (!m) return 1;
  const Src *src;
  const CellAst *ast = check_find_cell(m, NULL, &src);
  char hs[16], ds[16];
  snprintf(hs, sizeof hs, "%d", H);
  snprintf(ds, sizeof ds, "%d", D);
  if (!ndims) dims[ndims++] = (Binding){"H", hs};
  dims[ndims++] = (Binding){"D", ds};
  CheckOptions o = {0};
  o.sets = sets, o.nsets = nsets, o.dims = dims, o.ndims = ndims, o.need_bound = true;
  o.force_sequential = force_seq;
  o.force_chunked = force_chunked;
  Cell *c = check_cell(&arena, src, ast, &o);
  if (!c) return 1;
  bool scan = c->mode == MODE_SCAN;
  char err[256];
  PipelineOptions po = {0};
  po.backend = backend_find(backend);
  if (!po.backend) {
    fprintf(stderr, "bench_cell: no back end '%s'\n", backend);
    return 2;
  }
  /* in chunked mode the program gives the buffers' layout only: on a CUDA back end, whose kernels
     need not take the whole cell's state per row, the interpreter's (the same layout) */
  PipelineOptions lo = po;
  if (force_chunked && po.backend->device != DEVICE_CPU) lo.backend = backend_find("interp");
  double t0 = now();
  Compiled *cc = pipeline_compile(c, &lo, err, sizeof err);
  double tcompile = now() - t0;
  if (!cc) {
    fprintf(stderr, "%s\n", err);
    return 70;
  }
  const Backend *be = po.backend;
  Program *p = cc->p;
  Rng r;
  rng_seed(&r, 3, 3);
  size_t rows = (size_t)T * B;
  SeqIO s = {0};
  s.T = T, s.B = B, s.dtype = DT_F32;
  s.x = randn(&r, rows * p->x_size, 1);
  s.dy = randn(&r, rows * p->output_size, 1);
  void **params = xcalloc((size_t)p->npparts, sizeof(void *)), **gp = xcalloc((size_t)p->npparts, sizeof(void *));
  for (int i = 0; i < p->npparts; i++) {
    params[i] = randn(&r, (size_t)p->pparts[i].numel, 1.0f / sqrtf((float)(p->pparts[i].rank == 2 ? p->pparts[i].n[1] : 8)));
    gp[i] = xmalloc(sizeof(float) * (size_t)p->pparts[i].numel);
  }
  void **h0 = xcalloc((size_t)p->nsparts, sizeof(void *)), **df = xcalloc((size_t)p->nsparts, sizeof(void *));
  void **fin = xcalloc((size_t)p->nsparts, sizeof(void *)), **gh = xcalloc((size_t)p->nsparts, sizeof(void *));
  for (int i = 0; i < p->nsparts; i++) {
    size_t n = (size_t)B * p->sparts[i].size;
    h0[i] = randn(&r, n, 0.1f), df[i] = randn(&r, n, 0.1f);
    fin[i] = xmalloc(sizeof(float) * n), gh[i] = xmalloc(sizeof(float) * n);
  }
  s.params = (const void **)params, s.h0 = (const void **)h0, s.dfinal = (const void **)df, s.final = fin, s.grad_h0 = gh;
  s.grad_params = gp;
  s.y = xmalloc(sizeof(float) * rows * p->output_size);
  s.grad_x = xmalloc(sizeof(float) * rows * p->x_size);
  char derr[1024];
  Device *dv = device_open(be->device, derr, sizeof derr); /* held with the process */
  if (!dv) {
    fprintf(stderr, "bench_cell: %s\n", derr);
    return 1;
  }
  if (!device_is_host(dv)) {
    for (int i = 0; i < p->npparts; i++) {
      size_t e = sizeof(float) * (size_t)p->pparts[i].numel;
      params[i] = on_device(dv, params[i], e), gp[i] = on_device(dv, gp[i], e);
    }
    for (int i = 0; i < p->nsparts; i++) {
      size_t n = sizeof(float) * (size_t)B * p->sparts[i].size;
      h0[i] = on_device(dv, h0[i], n), df[i] = on_device(dv, df[i], n), fin[i] = on_device(dv, fin[i], n);
      gh[i] = on_device(dv, gh[i], n);
    }
    s.x = on_device(dv, s.x, sizeof(float) * rows * p->x_size), s.dy = on_device(dv, s.dy, sizeof(float) * rows * p->output_size);
    s.y = on_device(dv, s.y, sizeof(float) * rows * p->output_size);
    s.grad_x = on_device(dv, s.grad_x, sizeof(float) * rows * p->x_size);
  }
  if (force_chunked) {
    ChunkForm *f = chunkform_compile(c, &po, chunk, err, sizeof err);
    if (!f) {
      fprintf(stderr, "%s\n", err);
      return 70;
    }
    chunkform_run_f32(f, &s); /* warm up */
    double best = 1e30, best_cpu = 1e30, parts[CHUNK_TIMES] = {0};
    for (int rep = 0; rep < reps; rep++) {
      double a = now(), ca = cpu_now();
      chunkform_run_f32(f, &s);
      double t = now() - a, ct = cpu_now() - ca;
      if (t < best) best = t, chunkform_times(f, parts);
      if (ct < best_cpu) best_cpu = ct;
    }
    chunkform_profile(f, true); /* one more run, profiled: the programs' products */
    chunkform_run_f32(f, &s);
    Profile pf = chunkform_profile(f, false);
    printf("{\"backend\": \"%s\", \"cell\": \"%s\", \"mode\": \"chunked\", \"L\": %d, \"D\": %d, \"T\": %d, \"B\": %d, "
           "\"total_s\": %.6f, \"cpu_s\": %.6f, \"forward_s\": %.6f, \"backward_s\": %.6f, \"in_s\": %.6f, \"op_s\": %.6f, \"out_s\": %.6f, "
           "\"op_forward_s\": %.6f, \"op_backward_s\": %.6f, \"compile_s\": %.4f, \"prog_gemm_s\": %.6f, \"prog_gemm_flops\": %.6g, "
           "\"prog_elem_s\": %.6f}\n",
           be->name, c->name, chunkform_length(f), D, T, B, best, best_cpu, parts[0] + parts[1] + parts[2], parts[3] + parts[4] + parts[5],
           parts[0] + parts[5], parts[1] + parts[4], parts[2] + parts[3], parts[1], parts[4], tcompile, pf.gemm_s, pf.gemm_flops,
           pf.elem_s);
    chunkform_free(f);
    pipeline_release(cc);
    return 0;
  }
  Work *w = be->work_new(cc);
  be->forward(cc, w, &s); /* warm up: allocations, page faults */
  be->backward(cc, w, &s);
  double best_f = 1e30, best_b = 1e30, best_cpu = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    double a = now(), ca = cpu_now();
    be->forward(cc, w, &s);
    double b = now();
    be->backward(cc, w, &s);
    double e = now(), ct = cpu_now() - ca;
    if (b - a < best_f) best_f = b - a;
    if (e - b < best_b) best_b = e - b;
    if (ct < best_cpu) best_cpu = ct;
  }
  /* one more run, profiled: time per kind of step, and what the scans move */
  w->profiling = true;
  memset(&w->prof, 0, sizeof w->prof);
  be->forward(cc, w, &s);
  be->backward(cc, w, &s);
  const Profile *pt = &w->prof;
  double prof_total = pt->elem_s + pt->gemm_s + pt->scan_s + pt->rscan_s + pt->other_s;
  double scan_bytes = 0, rscan_bytes = 0;
  for (int i = 0; i < c->nstates; i++) {
    double e = (double)rows * (c->states[i].rank ? c->states[i].n[0] : 1) * (c->states[i].cplx ? 2 : 1) * sizeof(float);
    scan_bytes += 3 * e;  /* a, b read; new written (prev is the row just written: in cache) */
    rscan_bytes += 3 * e; /* g, a read; dtotal written */
  }
  printf("{\"backend\": \"%s\", \"cell\": \"%s\", \"mode\": \"%s\", \"H\": %d, \"D\": %d, \"T\": %d, \"B\": %d, \"forward_s\": %.6f, "
         "\"backward_s\": %.6f, \"total_s\": %.6f, \"cpu_s\": %.6f, \"compile_s\": %.4f, \"elem_s\": %.6f, \"gemm_s\": %.6f, "
         "\"scan_s\": %.6f, \"scan_bytes\": %.0f, \"rscan_s\": %.6f, \"rscan_bytes\": %.0f, \"elem_bytes\": %.0f, \"gemm_flops\": %.6g, \"profiled_s\": %.6f, "
         "\"gemm_step_s\": %.6f, \"gemm_step_flops\": %.6g, \"gemm_all_s\": %.6f, \"gemm_all_flops\": %.6g, "
         "\"gemm_wgrad_s\": %.6f, \"gemm_wgrad_flops\": %.6g}\n",
         be->name, c->name, scan ? "scan" : "sequential", H, D, T, B, best_f, best_b, best_f + best_b, best_cpu, tcompile, pt->elem_s,
         pt->gemm_s, pt->scan_s, scan ? scan_bytes : 0, pt->rscan_s, scan ? rscan_bytes : 0, pt->elem_bytes, pt->gemm_flops, prof_total,
         pt->kind_s[GEMM_STEPWISE], pt->kind_flops[GEMM_STEPWISE], pt->kind_s[GEMM_ALL_ROWS], pt->kind_flops[GEMM_ALL_ROWS],
         pt->kind_s[GEMM_WEIGHT_GRAD], pt->kind_flops[GEMM_WEIGHT_GRAD]);
  be->work_free(w);
  pipeline_release(cc);
  return 0;
}
