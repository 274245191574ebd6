/* test_cuda_emu.c: the CUDA call layer and cuda-emu: hand-written kernels (saxpy, shared
 * memory reductions, warp shuffles, atomics, dynamic shared memory) on the emulator, its
 * deadlock and out-of-bounds reports, cuBLAS SGEMM against a column-major reference, the
 * real NVRTC to PTX with ptxas -v (no spills), the disk cache, and the missing driver. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"
#include "cuda_internal.h"
#include "harness.h"
#include "ptxas.h"
#include "support.h"

static char err[8192];
static CudaApi api;
static CUcontext ctx;

static void emu_up(void) {
  h_use_cuda_test_cache();
  cuda_api_open_emu(&api);
  CUdevice dev;
  cr_assert_eq(cuda_open_device(&api, 0, &dev, err, sizeof err), 0, "%s", err);
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuCtxCreate, &ctx, NULL, 0, dev), 0, "%s", err);
}

static void emu_down(void) {
  if (ctx) api.cuCtxDestroy(ctx);
  ctx = NULL;
  cuda_api_close(&api);
}

TestSuite(emu, .init = emu_up, .fini = emu_down);

/* Compile source with the table's NVRTC and get kernel name from the loaded module. */
static CUfunction load(const char *src, const char *name) {
  CudaImage img;
  int rc = cuda_compile(&api, src, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err);
  cr_assert_eq(rc, 0, "%s", err);
  CUmodule mod;
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuModuleLoadData, &mod, img.data), 0, "%s", err);
  cuda_image_free(&img);
  CUfunction f;
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuModuleGetFunction, &f, mod, name), 0, "%s", err);
  return f;
}

static CUdeviceptr upload(const void *host, size_t bytes) {
  CUdeviceptr d;
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuMemAlloc, &d, bytes), 0, "%s", err);
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuMemcpyHtoD, d, host, bytes), 0, "%s", err);
  return d;
}

static void download(void *host, CUdeviceptr d, size_t bytes) {
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuMemcpyDtoH, host, d, bytes), 0, "%s", err);
}

static int launch(CUfunction f, unsigned grid, unsigned block, unsigned shared, void **params) {
  return CUDA_CU(&api, err, sizeof err, cuLaunchKernel, f, grid, 1, 1, block, 1, 1, shared, NULL,
                 params, NULL);
}

static const char *SAXPY =
    "#include \"cellc_prelude.h\"\n"
    "extern \"C\" __global__ void saxpy(int n, float a, const float *__restrict__ x,\n"
    "                                   float *__restrict__ y) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

/* One block sums 256 values through shared memory; each block writes its partial sum. */
static const char *BLOCK_SUM =
    "#include \"cellc_prelude.h\"\n"
    "extern \"C\" __global__ void __launch_bounds__(256) block_sum(const float *x, float *out, int n) {\n"
    "  __shared__ float s[256];\n"
    "  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;\n"
    "  s[t] = i < n ? x[i] : 0.0f;\n"
    "  __syncthreads();\n"
    "  for (int w = blockDim.x / 2; w > 0; w /= 2) {\n"
    "    if (t < w) s[t] += s[t + w];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (t == 0) out[blockIdx.x] = s[0];\n"
    "}\n";

Test(emu, saxpy) {
  CUfunction f = load(SAXPY, "saxpy");
  enum { N = 1000 };
  float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = 1.0f;
  CUdeviceptr dx = upload(x, sizeof x), dy = upload(y, sizeof y);
  int n = N;
  float a = 2.0f;
  void *params[] = {&n, &a, &dx, &dy};
  cr_assert_eq(launch(f, (N + 127) / 128, 128, 0, params), 0, "%s", err);
  download(y, dy, sizeof y);
  for (int i = 0; i < N; i++) cr_assert_float_eq(y[i], 2.0f * (float)i + 1.0f, 0, "y[%d]", i);
}

Test(emu, block_reduction_with_shared_memory_and_barriers) {
  CUfunction f = load(BLOCK_SUM, "block_sum");
  enum { N = 1000, BLOCKS = 4 };
  float x[N], out[BLOCKS];
  for (int i = 0; i < N; i++) x[i] = (float)(i % 7);
  CUdeviceptr dx = upload(x, sizeof x), dout;
  cr_assert_eq(api.cuMemAlloc(&dout, sizeof out), CUDA_SUCCESS);
  int n = N;
  void *params[] = {&dx, &dout, &n};
  cr_assert_eq(launch(f, BLOCKS, 256, 0, params), 0, "%s", err);
  download(out, dout, sizeof out);
  for (int b = 0; b < BLOCKS; b++) {
    float want = 0;
    for (int i = b * 256; i < (b + 1) * 256 && i < N; i++) want += x[i];
    cr_assert_float_eq(out[b], want, 0, "block %d", b);
  }
}

static const char *WARP_OPS =
    "#include \"cellc_prelude.h\"\n"
    "extern \"C\" __global__ void warp_ops(const float *x, float *sum, float *bcast,\n"
    "                                      unsigned *ballot, float *up, float *xsum) {\n"
    "  int t = threadIdx.x, lane = t % warpSize;\n"
    "  float v = x[t], s = v;\n"
    "  for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(CELLC_FULL_MASK, s, o);\n"
    "  if (lane == 0) sum[t / 32] = s;\n"
    "  float r = v;\n"
    "  for (int o = 1; o < 32; o *= 2) r += __shfl_xor_sync(CELLC_FULL_MASK, r, o);\n"
    "  xsum[t] = r;\n"
    "  bcast[t] = __shfl_sync(CELLC_FULL_MASK, v, 3);\n"
    "  up[t] = __shfl_up_sync(CELLC_FULL_MASK, v, 1);\n"
    "  unsigned b = __ballot_sync(CELLC_FULL_MASK, v > 10.0f);\n"
    "  if (lane == 0) ballot[t / 32] = b;\n"
    "}\n";

Test(emu, warp_shuffles_and_ballot) {
  CUfunction f = load(WARP_OPS, "warp_ops");
  enum { N = 64 };
  float x[N], sum[2], bcast[N], up[N], xsum[N];
  unsigned ballot[2];
  for (int i = 0; i < N; i++) x[i] = (float)(i % 32) + (i >= 32 ? 100.0f : 0.0f);
  CUdeviceptr dx = upload(x, sizeof x), dsum, db, dballot, dup, dxsum;
  cr_assert_eq(api.cuMemAlloc(&dsum, sizeof sum), 0);
  cr_assert_eq(api.cuMemAlloc(&db, sizeof bcast), 0);
  cr_assert_eq(api.cuMemAlloc(&dballot, sizeof ballot), 0);
  cr_assert_eq(api.cuMemAlloc(&dup, sizeof up), 0);
  cr_assert_eq(api.cuMemAlloc(&dxsum, sizeof xsum), 0);
  void *params[] = {&dx, &dsum, &db, &dballot, &dup, &dxsum};
  cr_assert_eq(launch(f, 1, N, 0, params), 0, "%s", err);
  download(sum, dsum, sizeof sum);
  download(bcast, db, sizeof bcast);
  download(ballot, dballot, sizeof ballot);
  download(up, dup, sizeof up);
  download(xsum, dxsum, sizeof xsum);
  cr_assert_float_eq(sum[0], 496.0f, 0);
  cr_assert_float_eq(sum[1], 496.0f + 3200.0f, 0);
  for (int i = 0; i < N; i++) {
    cr_assert_float_eq(xsum[i], sum[i / 32], 0, "xor sum at %d", i);
    cr_assert_float_eq(bcast[i], x[i / 32 * 32 + 3], 0, "broadcast at %d", i);
    cr_assert_float_eq(up[i], i % 32 == 0 ? x[i] : x[i - 1], 0, "up at %d", i);
  }
  cr_assert_eq(ballot[0], 0xffffffffu << 11);
  cr_assert_eq(ballot[1], 0xffffffffu);
}

Test(emu, atomics_across_blocks) {
  const char *src =
      "#include \"cellc_prelude.h\"\n"
      "extern \"C\" __global__ void acc(float *fsum, int *isum, int *imax, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i >= n) return;\n"
      "  atomicAdd(fsum, 0.5f);\n"
      "  atomicAdd(isum, i);\n"
      "  atomicMax(imax, (i * 37) % 1001);\n"
      "}\n";
  CUfunction f = load(src, "acc");
  float fz = 0;
  int iz = 0, mz = -1, n = 3000;
  CUdeviceptr df = upload(&fz, 4), di = upload(&iz, 4), dm = upload(&mz, 4);
  void *params[] = {&df, &di, &dm, &n};
  cr_assert_eq(launch(f, 12, 256, 0, params), 0, "%s", err);
  download(&fz, df, 4);
  download(&iz, di, 4);
  download(&mz, dm, 4);
  cr_assert_float_eq(fz, 1500.0f, 0);
  cr_assert_eq(iz, 3000 * 2999 / 2);
  cr_assert_eq(mz, 1000);
}

static const char *REVERSE =
    "#include \"cellc_prelude.h\"\n"
    "extern \"C\" __global__ void reverse(float *x) {\n"
    "  CELLC_DYNAMIC_SHARED(float, buf);\n"
    "  int t = threadIdx.x;\n"
    "  buf[t] = x[t];\n"
    "  __syncthreads();\n"
    "  x[t] = buf[blockDim.x - 1 - t];\n"
    "}\n";

Test(emu, dynamic_shared_memory) {
  CUfunction f = load(REVERSE, "reverse");
  enum { N = 96 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)i;
  CUdeviceptr dx = upload(x, sizeof x);
  void *params[] = {&dx};
  cr_assert_eq(launch(f, 1, N, N * sizeof(float), params), 0, "%s", err);
  download(x, dx, sizeof x);
  for (int i = 0; i < N; i++) cr_assert_float_eq(x[i], (float)(N - 1 - i), 0);
  /* More than 48 KiB of dynamic shared memory needs the opt-in, as on a GPU. */
  cr_assert_neq(launch(f, 1, N, 64 * 1024, params), 0);
  cr_assert(strstr(err, "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE"), "%s", err);
  cr_assert_eq(api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024), 0);
  cr_assert_eq(launch(f, 1, N, 64 * 1024, params), 0, "%s", err);
}

Test(emu, two_dimensional_blocks_and_grids) {
  const char *src =
      "#include \"cellc_prelude.h\"\n"
      "extern \"C\" __global__ void index2d(int *out, int w) {\n"
      "  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
      "  out[y * w + x] = y * 1000 + x;\n"
      "}\n";
  CUfunction f = load(src, "index2d");
  enum { W = 16, H = 12 };
  int out[W * H];
  CUdeviceptr d;
  cr_assert_eq(api.cuMemAlloc(&d, sizeof out), 0);
  int w = W;
  void *params[] = {&d, &w};
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuLaunchKernel, f, 2, 3, 1, 8, 4, 1, 0, NULL, params,
                       NULL), 0, "%s", err);
  download(out, d, sizeof out);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) cr_assert_eq(out[y * W + x], y * 1000 + x);
}

Test(emu, barrier_deadlock_is_reported) {
  const char *src =
      "#include \"cellc_prelude.h\"\n"
      "extern \"C\" __global__ void early_exit(float *x) {\n"
      "  if (threadIdx.x == 5) return;\n"
      "  __syncthreads();\n"
      "  x[threadIdx.x] = 1.0f;\n"
      "}\n";
  CUfunction f = load(src, "early_exit");
  CUdeviceptr d;
  cr_assert_eq(api.cuMemAlloc(&d, 64 * sizeof(float)), 0);
  void *params[] = {&d};
  cr_assert_neq(launch(f, 1, 64, 0, params), 0);
  cr_assert(strstr(err, "cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED"), "%s", err);
  cr_assert(strstr(err, "kernel 'early_exit': deadlock"), "%s", err);
  cr_assert(strstr(err, "thread (5,0,0) has exited"), "%s", err);
  /* The emulator is usable after the failed launch. */
  cr_assert_eq(CUDA_CU(&api, err, sizeof err, cuMemsetD32, d, 0, 64), 0, "%s", err);
}

Test(emu, warp_operation_deadlock_is_reported) {
  const char *src =
      "#include \"cellc_prelude.h\"\n"
      "extern \"C\" __global__ void lost_lane(float *x) {\n"
      "  if (threadIdx.x == 31) return;\n"
      "  x[threadIdx.x] = __shfl_down_sync(CELLC_FULL_MASK, x[threadIdx.x], 1);\n"
      "}\n";
  CUfunction f = load(src, "lost_lane");
  CUdeviceptr d;
  cr_assert_eq(api.cuMemAlloc(&d, 32 * sizeof(float)), 0);
  void *params[] = {&d};
  cr_assert_neq(launch(f, 1, 32, 0, params), 0);
  cr_assert(strstr(err, "kernel 'lost_lane': deadlock"), "%s", err);
  cr_assert(strstr(err, "31 in a warp operation, 1 have exited"), "%s", err);
}

Test(emu, trap_ends_the_launch_naming_the_thread) {
  const char *src =
      "#include \"cellc_prelude.h\"\n"
      "extern \"C\" __global__ void trapper(float *x) {\n"
      "  __syncthreads();\n"
      "  if (blockIdx.x == 1 && threadIdx.x == 7) __trap();\n"
      "  x[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;\n"
      "}\n";
  CUfunction f = load(src, "trapper");
  CUdeviceptr d;
  cr_assert_eq(api.cuMemAlloc(&d, 64 * sizeof(float)), 0);
  void *params[] = {&d};
  cr_assert_neq(launch(f, 2, 32, 0, params), 0);
  cr_assert(strstr(err, "CUDA_ERROR_LAUNCH_FAILED"), "%s", err);
  cr_assert(strstr(err, "kernel 'trapper': __trap() called in thread (7,0,0) of block (1,0,0)"), "%s", err);
  CUfunction g = load(SAXPY, "saxpy");
  int n = 64;
  float a = 1;
  void *p2[] = {&n, &a, &d, &d};
  cr_assert_eq(launch(g, 1, 64, 0, p2), 0, "%s", err);
}

Test(emu, out_of_bounds_write_is_caught) {
#if !defined(__SANITIZE_ADDRESS__)
  cr_skip_test("not an ASan build: out-of-bounds accesses in kernels are caught only under "
               "-fsanitize=address (make SAN=1)");
#else
  const char *src =
      "#include \"cellc_prelude.h\"\n"
      "extern \"C\" __global__ void overrun(float *x, int n) {\n"
      "  x[threadIdx.x + n] = 1.0f; /* one block too far */\n"
      "}\n";
  CUfunction f = load(src, "overrun");
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    CUdeviceptr d;
    api.cuMemAlloc(&d, 32 * sizeof(float));
    int n = 32;
    void *params[] = {&d, &n};
    launch(f, 1, 32, 0, params);
    _exit(0);
  }
  close(fds[1]);
  char *out = xcalloc(1, 1 << 16);
  size_t got = 0;
  for (ssize_t r; (r = read(fds[0], out + got, (1 << 16) - 1 - got)) > 0;) got += (size_t)r;
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the overrun went unnoticed");
  cr_assert(strstr(out, "heap-buffer-overflow"), "%s", out);
  free(out);
#endif
}

static const char *MIXED =
    "#include \"cellc_prelude.h\"\n"
    "struct Pair { int a; float b; };\n"
    "extern \"C\" {\n"
    "__global__ void mixed(int i, float f, const float *__restrict__ x, long long big,\n"
    "                      double d, unsigned u, int64_t s64, Pair p, float *out) {\n"
    "  out[0] = (float)i; out[1] = f; out[2] = x[1]; out[3] = (float)(big >> 32);\n"
    "  out[4] = (float)d; out[5] = (float)u; out[6] = (float)s64; out[7] = p.a + p.b;\n"
    "}\n"
    "}\n";

Test(emu, kernel_parameters_of_mixed_types) {
  CUfunction f = load(MIXED, "mixed");
  float x[2] = {0, 42.5f}, out[8];
  CUdeviceptr dx = upload(x, sizeof x), dout;
  cr_assert_eq(api.cuMemAlloc(&dout, sizeof out), 0);
  int i = -7;
  float fl = 3.25f;
  long long big = 5LL << 32;
  double d = -1.5;
  unsigned u = 4000000000u;
  int64_t s64 = -123456;
  struct { int a; float b; } p = {2, 0.5f};
  void *params[] = {&i, &fl, &dx, &big, &d, &u, &s64, &p, &dout};
  cr_assert_eq(launch(f, 1, 1, 0, params), 0, "%s", err);
  download(out, dout, sizeof out);
  float want[8] = {-7, 3.25f, 42.5f, 5, -1.5f, 4e9f, -123456, 2.5f};
  for (int k = 0; k < 8; k++) cr_assert_float_eq(out[k], want[k], 0, "param %d", k);
}

Test(emu, unsupported_parameter_is_named) {
  const char *src = "extern \"C\" __global__ void byref(float &x) { x = 1; }\n";
  CudaImage img;
  cr_assert_eq(cuda_compile(&api, src, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0, "%s", err);
  CUmodule mod;
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuModuleLoadData, &mod, img.data), 0);
  cuda_image_free(&img);
  cr_assert(strstr(err, "CUDA_ERROR_NOT_SUPPORTED"), "%s", err);
  cr_assert(strstr(err, "kernel 'byref': parameter 1: 'float &x'"), "%s", err);
}

Test(emu, nvrtc_syntax_error_has_the_compiler_message) {
  const char *src = "extern \"C\" __global__ void broken(float *x) {\n  x[0] = 1.0f\n}\n";
  CudaImage img;
  cr_assert_neq(cuda_compile(&api, src, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0);
  cr_assert(strstr(err, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION"), "%s", err);
  cr_assert(strstr(err, "cellc_kernels.cu:2"), "%s", err);
  cr_assert(strstr(err, "expected ';'"), "%s", err);
  cr_assert(img.log && strstr(img.log, "error"), "%s", img.log ? img.log : "(no log)");
  cuda_image_free(&img);
}

Test(emu, construct_the_emulator_lacks_fails_to_compile) {
  const char *src = "#include \"cellc_prelude.h\"\n"
                    "extern \"C\" __global__ void k(float *x) { extern __shared__ float s[]; x[0] = s[0]; }\n";
  CudaImage img;
  cr_assert_neq(cuda_compile(&api, src, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0);
  cr_assert(strstr(err, "CELLC_DYNAMIC_SHARED"), "%s", err);
  cuda_image_free(&img);
  const char *half = "extern \"C\" __global__ void h(__half *x) { x[0] = x[1]; }\n";
  cr_assert_neq(cuda_compile(&api, half, "sm_90", CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0);
  cr_assert(strstr(err, "__half"), "%s", err);
  cuda_image_free(&img);
}

Test(emu, launch_and_memory_checks) {
  CUfunction f = load(SAXPY, "saxpy");
  CUdeviceptr d;
  cr_assert_eq(api.cuMemAlloc(&d, 16), 0);
  float big[8] = {0};
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuMemcpyHtoD, d, big, sizeof big), 0);
  cr_assert(strstr(err, "cuMemcpyHtoD: CUDA_ERROR_INVALID_VALUE"), "%s", err);
  cr_assert(strstr(err, "not inside one device allocation"), "%s", err);
  int n = 0;
  float a = 1;
  void *params[] = {&n, &a, &d, &d};
  cr_assert_neq(launch(f, 1, 2048, 0, params), 0);
  cr_assert(strstr(err, "out of the device's limits"), "%s", err);
  cr_assert_neq(launch(f, 1, 32, 0, NULL), 0);
  cr_assert(strstr(err, "takes 4 parameters but kernelParams is NULL"), "%s", err);
  CUdevice dev;
  cr_assert_neq(cuda_open_device(&api, 1, &dev, err, sizeof err), 0);
  cr_assert(strstr(err, "no CUDA device 1: the machine has 1"), "%s", err);
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuMemFree, d + 4), 0);
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuMemAlloc, &d, (size_t)1 << 62), 0);
  cr_assert(strstr(err, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY"), "%s", err);
  CUmodule m;
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuModuleLoadData, &m, "//\n.version 8.0\n"), 0);
  cr_assert(strstr(err, "CUDA_ERROR_INVALID_IMAGE"), "%s", err);
}

Test(emu, device_attributes_events_and_streams) {
  int major, minor, sms, shared, warp;
  char arch[16];
  cr_assert_eq(cuda_device_arch(&api, 0, arch, sizeof arch, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(arch, "sm_90");
  api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
  api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
  api.cuDeviceGetAttribute(&shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 0);
  api.cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0);
  cr_assert(major == 9 && minor == 0 && sms > 0 && shared == 48 * 1024 && warp == 32);
  size_t total, free_bytes;
  cr_assert_eq(api.cuDeviceTotalMem(&total, 0), 0);
  cr_assert_eq(api.cuMemGetInfo(&free_bytes, &total), 0);
  cr_assert(free_bytes <= total && total > 0);
  CUstream s;
  CUevent a, b;
  cr_assert_eq(api.cuStreamCreate(&s, 0), 0);
  cr_assert_eq(api.cuEventCreate(&a, 0), 0);
  cr_assert_eq(api.cuEventCreate(&b, 0), 0);
  float ms;
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuEventElapsedTime, &ms, a, b), 0);
  cr_assert_eq(api.cuEventRecord(a, s), 0);
  cr_assert_eq(api.cuEventRecord(b, s), 0);
  cr_assert_eq(api.cuStreamSynchronize(s), 0);
  cr_assert_eq(api.cuEventElapsedTime(&ms, a, b), 0);
  cr_assert(ms >= 0);
  cr_assert_eq(api.cuEventDestroy(a), 0);
  cr_assert_eq(api.cuStreamDestroy(s), 0);
  /* b is left for cuCtxDestroy to free, as the driver does. */
}

/* C = alpha op(A) op(B) + beta C, column-major, in double. */
static void gemm_ref(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        double a = ta ? A[p + i * lda] : A[i + p * lda];
        double b = tb ? B[j + p * ldb] : B[p + j * ldb];
        s += a * b;
      }
      C[i + j * ldc] = (float)(alpha * s + beta * C[i + j * ldc]);
    }
}

static void fill(float *v, int n, int seed) {
  for (int i = 0; i < n; i++) v[i] = (float)((i * 7 + seed * 13) % 17) / 8.0f - 1.0f;
}

Test(emu, sgemm_column_major_all_transposes) {
  cublasHandle_t h;
  cr_assert_eq(CUDA_CUBLAS(&api, err, sizeof err, cublasCreate, &h), 0, "%s", err);
  cr_assert_eq(api.cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), 0);
  cr_assert_eq(api.cublasSetStream(h, NULL), 0);
  enum { M = 5, N = 4, K = 3, LD = 9 };
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    int lda = LD, ldb = LD + 1, ldc = LD + 2;
    float A[LD * 8], B[(LD + 1) * 8], C[(LD + 2) * N], ref[(LD + 2) * N];
    fill(A, LD * 8, 1), fill(B, (LD + 1) * 8, 2), fill(C, (LD + 2) * N, 3);
    memcpy(ref, C, sizeof C);
    float alpha = 1.5f, beta = -0.5f;
    gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, ref, ldc);
    /* exactly as large as the operands reach */
    size_t na = (size_t)((ta ? M : K) - 1) * lda + (ta ? K : M);
    size_t nb = (size_t)((tb ? K : N) - 1) * ldb + (tb ? N : K);
    size_t nc = (size_t)(N - 1) * ldc + M;
    CUdeviceptr dA = upload(A, na * 4), dB = upload(B, nb * 4), dC = upload(C, nc * 4);
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cr_assert_eq(CUDA_CUBLAS(&api, err, sizeof err, cublasSgemm, h, oa, ob, M, N, K, &alpha,
                             (const float *)dA, lda, (const float *)dB, ldb, &beta, (float *)dC, ldc),
                 0, "%s", err);
    download(C, dC, nc * 4);
    for (int j = 0; j < N; j++)
      for (int i = 0; i < M; i++)
        cr_assert_float_eq(C[i + j * ldc], ref[i + j * ldc], 1e-5, "trans %d (%d,%d)", t, i, j);
  }
  api.cublasDestroy(h);
}

Test(emu, sgemm_rejects_bad_arguments) {
  cublasHandle_t h;
  cr_assert_eq(api.cublasCreate(&h), 0);
  CUdeviceptr d;
  cr_assert_eq(api.cuMemAlloc(&d, 64 * 4), 0);
  float one = 1, zero = 0, *p = (float *)d;
  /* op(A) = A is 4 x 2, so lda must be >= 4 */
  cublasStatus_t s = api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, p, 3, p, 2, &zero, p, 4);
  cr_assert_eq(s, CUBLAS_STATUS_INVALID_VALUE);
  cr_assert_neq(cuda_cublas_check(&api, s, "cublasSgemm", err, sizeof err), 0);
  cr_assert(strstr(err, "cublasSgemm: CUBLAS_STATUS_INVALID_VALUE"), "%s", err);
  cr_assert(strstr(err, "lda"), "%s", err);
  /* op(A) = A^T with A stored 2 x 4: lda 2 is right */
  cr_assert_eq(api.cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 2, 2, &one, p, 2, p, 2, &zero, p + 32, 4), 0);
  cr_assert_eq(api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 2, &one, p, 4, p, 2, &zero, p, 4),
               CUBLAS_STATUS_INVALID_VALUE);
  cr_assert_eq(api.cublasSgemm(h, (cublasOperation_t)7, CUBLAS_OP_N, 4, 2, 2, &one, p, 4, p, 2, &zero, p, 4),
               CUBLAS_STATUS_INVALID_VALUE);
  cr_assert_eq(api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, p, 4, p, 1, &zero, p, 4),
               CUBLAS_STATUS_INVALID_VALUE);
  cr_assert_eq(api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, p, 4, p, 2, &zero, p, 3),
               CUBLAS_STATUS_INVALID_VALUE);
  /* a leading dimension that runs past the allocation fails as on a GPU */
  s = api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, p, 61, p, 2, &zero, p, 4);
  cr_assert_eq(s, CUBLAS_STATUS_EXECUTION_FAILED);
  api.cublasDestroy(h);
}

Test(emu, sgemm_strided_batched) {
  cublasHandle_t h;
  cr_assert_eq(api.cublasCreate(&h), 0);
  enum { M = 3, N = 2, K = 4, BATCH = 3 };
  float A[BATCH * M * K], B[BATCH * K * N], C[BATCH * M * N] = {0}, ref[BATCH * M * N] = {0};
  fill(A, BATCH * M * K, 4), fill(B, BATCH * K * N, 5);
  for (int b = 0; b < BATCH; b++)
    gemm_ref(false, true, M, N, K, 1, A + b * M * K, M, B + b * K * N, N, 0, ref + b * M * N, M);
  CUdeviceptr dA = upload(A, sizeof A), dB = upload(B, sizeof B), dC = upload(C, sizeof C);
  float one = 1, zero = 0;
  cr_assert_eq(CUDA_CUBLAS(&api, err, sizeof err, cublasSgemmStridedBatched, h, CUBLAS_OP_N, CUBLAS_OP_T,
                           M, N, K, &one, (const float *)dA, M, M * K, (const float *)dB, N, K * N,
                           &zero, (float *)dC, M, M * N, BATCH), 0, "%s", err);
  download(C, dC, sizeof C);
  for (int i = 0; i < BATCH * M * N; i++) cr_assert_float_eq(C[i], ref[i], 1e-5, "%d", i);
  api.cublasDestroy(h);
}

Test(emu, errors_without_context_and_before_init) {
  CUdeviceptr d;
  cr_assert_eq(api.cuCtxSetCurrent(NULL), 0);
  cr_assert_neq(CUDA_CU(&api, err, sizeof err, cuMemAlloc, &d, 4), 0);
  cr_assert(strstr(err, "cuMemAlloc: CUDA_ERROR_INVALID_CONTEXT"), "%s", err);
  cuda_api_close(&api); /* frees every context, forgets cuInit */
  ctx = NULL;
  CudaApi e;
  cuda_api_open_emu(&e);
  cr_assert_neq(CUDA_CU(&e, err, sizeof err, cuMemAlloc, &d, 4), 0);
  cr_assert(strstr(err, "cuMemAlloc: CUDA_ERROR_NOT_INITIALIZED"), "%s", err);
  cuda_api_close(&e);
}

/* The real libraries. */

Test(real, open_fails_without_the_driver_naming_it) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h) {
    dlclose(h);
    cr_skip_test("this machine has an NVIDIA driver: nothing to check");
  }
  CudaApi r;
  cr_assert_neq(cuda_api_open_real(&r, err, sizeof err), 0);
  cr_assert(strstr(err, "libcuda.so.1 (the NVIDIA driver) not found"), "%s", err);
  cr_assert_null(r.libcuda);
}

Test(real, symbol_names_resolve_in_the_toolkit) {
  cr_assert_eq(cuda_api_probe("/usr/local/cuda/lib64/stubs/libcuda.so", 0, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cuda_api_probe("/usr/local/cuda/lib64/libnvrtc.so", 1, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cuda_api_probe("/usr/local/cuda/lib64/libcublas.so", 2, err, sizeof err), 0, "%s", err);
}

static void check_ptx(CudaApi *r, const char *src, const char *arch, const char *kernel, bool shared) {
  CudaImage img;
  cr_assert_eq(cuda_compile(r, src, arch, CUDA_IMAGE_PTX, NULL, 0, &img, err, sizeof err), 0, "%s", err);
  cr_assert(strstr(img.data, ".entry"), "not PTX");
  cr_assert(strstr(img.data, kernel));
  CudaKernelResources *ks;
  int n;
  cr_assert_eq(cuda_ptxas_check(img.data, arch, &ks, &n, err, sizeof err), 0, "%s", err);
  cr_assert_eq(n, 1);
  cr_assert_str_eq(ks[0].name, kernel);
  cr_assert_gt(ks[0].registers, 0);
  cr_assert_eq(ks[0].spill_store_bytes, 0, "%s %s spills", kernel, arch);
  cr_assert_eq(ks[0].spill_load_bytes, 0, "%s %s spills", kernel, arch);
  if (shared) cr_assert_eq(ks[0].shared_bytes, 1024);
  free(ks);
  cuda_image_free(&img);
}

Test(real, nvrtc_to_ptx_and_ptxas_reports_no_spills) {
  h_use_cuda_test_cache();
  CudaApi r;
  if (cuda_api_open_nvrtc(&r, err, sizeof err) != 0) cr_skip_test("no NVRTC: %s", err);
  /* the very sources the emulator runs */
  const char *srcs[] = {SAXPY, BLOCK_SUM, WARP_OPS, REVERSE, MIXED};
  const char *names[] = {"saxpy", "block_sum", "warp_ops", "reverse", "mixed"};
  for (int i = 0; i < 5; i++) {
    check_ptx(&r, srcs[i], "sm_80", names[i], i == 1);
    check_ptx(&r, srcs[i], "sm_90", names[i], i == 1);
  }
  CudaImage img;
  cr_assert_eq(cuda_compile(&r, SAXPY, "sm_90", CUDA_IMAGE_CUBIN, NULL, 0, &img, err, sizeof err), 0, "%s", err);
  cr_assert(img.size > 4 && memcmp(img.data, "\177ELF", 4) == 0, "a cubin is an ELF file");
  cuda_image_free(&img);
  cr_assert_neq(cuda_compile(&r, "__global__ void f( {", "sm_80", CUDA_IMAGE_PTX, NULL, 0, &img, err,
                             sizeof err), 0);
  cr_assert(strstr(err, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION"), "%s", err);
  cuda_image_free(&img);
  cuda_api_close(&r);
}

Test(cache, second_compile_hits_and_a_corrupted_entry_is_ignored) {
  char *dir = cuda_make_temp_dir("cellc-cache-test");
  cr_assert_not_null(dir);
  setenv("XDG_CACHE_HOME", dir, 1);
  CudaApi e;
  cuda_api_open_emu(&e);
  CudaImage a, b, c;
  cr_assert_eq(cuda_compile(&e, SAXPY, "sm_80", CUDA_IMAGE_PTX, NULL, 0, &a, err, sizeof err), 0, "%s", err);
  cr_assert(!a.from_cache);
  cr_assert_eq(cuda_compile(&e, SAXPY, "sm_80", CUDA_IMAGE_PTX, NULL, 0, &b, err, sizeof err), 0, "%s", err);
  cr_assert(b.from_cache);
  cr_assert(a.size == b.size && memcmp(a.data, b.data, a.size) == 0);
  /* another option is another entry */
  const char *opt[] = {"-DSCALE=2"};
  cr_assert_eq(cuda_compile(&e, SAXPY, "sm_80", CUDA_IMAGE_PTX, opt, 1, &c, err, sizeof err), 0, "%s", err);
  cr_assert(!c.from_cache);
  cuda_image_free(&c);
  /* flip one byte of every entry's payload */
  char *cdir = cuda_cache_dir();
  cr_assert(cdir && strstr(cdir, dir) == cdir);
  char *cmd = xasprintf("for f in '%s'/*.ptx; do printf 'X' | dd of=\"$f\" bs=1 seek=60 conv=notrunc 2>/dev/null; done", cdir);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(cuda_compile(&e, SAXPY, "sm_80", CUDA_IMAGE_PTX, NULL, 0, &c, err, sizeof err), 0, "%s", err);
  cr_assert(!c.from_cache, "a corrupted entry was used");
  cr_assert(c.size == a.size && memcmp(c.data, a.data, a.size) == 0);
  cuda_image_free(&c);
  cr_assert_eq(cuda_compile(&e, SAXPY, "sm_80", CUDA_IMAGE_PTX, NULL, 0, &c, err, sizeof err), 0, "%s", err);
  cr_assert(c.from_cache, "the entry was not rewritten");
  cuda_image_free(&a), cuda_image_free(&b), cuda_image_free(&c);
  cuda_api_close(&e);
  free(cmd);
  char *rm = xasprintf("rm -rf '%s'", dir);
  cr_assert_eq(system(rm), 0);
  free(rm);
  free(cdir);
  free(dir);
}
