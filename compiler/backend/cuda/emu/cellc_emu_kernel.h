/* cellc_emu_kernel.h: force-included by cuda-emu before a CUDA kernel source compiled for
 * the CPU (as C++): thread indices, shared memory, barriers, warp shuffles, atomics and
 * intrinsics mapped onto the emulator's fibers. The first part (the ABI between the kernel
 * and the emulator) is also read by the host C code with CELLC_EMU_ABI_ONLY defined. */
#ifndef CELLC_EMU_KERNEL_H
#define CELLC_EMU_KERNEL_H

#include <stdint.h>

#define CELLC_EMU 1
#define CELLC_EMU_ABI_VERSION 1

/* The warp operations the emulator performs when every lane of a warp has arrived. */
enum {
  CELLC_WARP_SYNC,   /* __syncwarp */
  CELLC_WARP_IDX,    /* __shfl_sync: value of lane arg (within width) */
  CELLC_WARP_UP,     /* __shfl_up_sync: lane - arg */
  CELLC_WARP_DOWN,   /* __shfl_down_sync: lane + arg */
  CELLC_WARP_XOR,    /* __shfl_xor_sync: lane ^ arg */
  CELLC_WARP_BALLOT, /* __ballot_sync: bit i = value of lane i != 0 */
  CELLC_WARP_ACTIVE  /* __activemask: no barrier */
};

typedef struct CellcEmuDim {
  unsigned x, y, z;
} CellcEmuDim;

/* One per kernel module (defined below, in the module); the emulator sets the indices
 * before it switches to a thread's fiber. */
typedef struct CellcEmuCtx {
  int abi_version;
  CellcEmuDim thread_idx, block_idx, block_dim, grid_dim;
  void *dynamic_shared; /* the block's dynamic shared memory */
  void (*syncthreads)(void);
  uint32_t (*warp_op)(int op, uint32_t mask, uint32_t value, int arg, int width);
  void (*trap)(const char *what); /* ends the launch with an error; does not return */
} CellcEmuCtx;

#ifndef CELLC_EMU_ABI_ONLY

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef __cplusplus
#error "cuda-emu compiles kernels as C++ (CUDA C is C++)"
#endif

extern "C" {
CellcEmuCtx cellc_emu_ctx = {CELLC_EMU_ABI_VERSION, {0, 0, 0}, {0, 0, 0}, {1, 1, 1},
                             {1, 1, 1}, 0, 0, 0, 0};
}

/* Qualifiers. __shared__ variables live in one section the emulator poisons between
 * blocks (a block runs at a time, so static storage is the block's shared memory). */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("cellc_shared")))

extern "C" char __start_cellc_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_cellc_shared[] __attribute__((weak, visibility("hidden")));

/* The module's static shared memory: the emulator poisons it before each block. */
extern "C" void cellc_emu_shared_range(char **begin, unsigned long *size) {
  *begin = __start_cellc_shared;
  *size = __start_cellc_shared ? (unsigned long)(__stop_cellc_shared - __start_cellc_shared) : 0;
}

/* Built-in variables and vector types. */
typedef CellcEmuDim uint3;
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  dim3(CellcEmuDim d) : x(d.x), y(d.y), z(d.z) {}
};
#define threadIdx (cellc_emu_ctx.thread_idx)
#define blockIdx (cellc_emu_ctx.block_idx)
#define blockDim (cellc_emu_ctx.block_dim)
#define gridDim (cellc_emu_ctx.grid_dim)
#define warpSize 32

struct __attribute__((aligned(8))) float2 { float x, y; };
struct float3 { float x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return {x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return {x, y}; }

static inline void *cellc_emu_dynamic_shared(void) { return cellc_emu_ctx.dynamic_shared; }

/* Barriers and warps: each call is a switch to the emulator's scheduler. */
static inline void __syncthreads(void) { cellc_emu_ctx.syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  cellc_emu_ctx.warp_op(CELLC_WARP_SYNC, mask, 0, 0, 32);
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __trap(void) { cellc_emu_ctx.trap("__trap() called"); }

template <typename T>
static inline T cellc_emu_shfl(int op, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cuda-emu: shuffles move 4 or 8 bytes");
  uint32_t w[2] = {0, 0};
  memcpy(w, &v, sizeof(T));
  for (unsigned i = 0; i < sizeof(T) / 4; i++)
    w[i] = cellc_emu_ctx.warp_op(op, mask, w[i], arg, width);
  memcpy(&v, w, sizeof(T));
  return v;
}
template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return cellc_emu_shfl(CELLC_WARP_IDX, mask, v, src, width);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cellc_emu_shfl(CELLC_WARP_UP, mask, v, (int)delta, width);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cellc_emu_shfl(CELLC_WARP_DOWN, mask, v, (int)delta, width);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return cellc_emu_shfl(CELLC_WARP_XOR, mask, v, lane_mask, width);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
  return cellc_emu_ctx.warp_op(CELLC_WARP_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, !pred) == 0; }
static inline unsigned __activemask(void) {
  return cellc_emu_ctx.warp_op(CELLC_WARP_ACTIVE, 0xffffffffu, 0, 0, 32);
}

/* Atomics: real atomics, so blocks may one day run in parallel. */
#define CELLC_EMU_ATOMIC_INT(T)                                                               \
  static inline T atomicAdd(T *a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); } \
  static inline T atomicSub(T *a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); } \
  static inline T atomicExch(T *a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); } \
  static inline T atomicAnd(T *a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); } \
  static inline T atomicOr(T *a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }   \
  static inline T atomicXor(T *a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); } \
  static inline T atomicCAS(T *a, T cmp, T v) {                                              \
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);       \
    return cmp;                                                                               \
  }                                                                                           \
  static inline T atomicMax(T *a, T v) {                                                      \
    T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                             \
    while (old < v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED,        \
                                                   __ATOMIC_RELAXED)) {}                      \
    return old;                                                                               \
  }                                                                                           \
  static inline T atomicMin(T *a, T v) {                                                      \
    T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                             \
    while (old > v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED,        \
                                                   __ATOMIC_RELAXED)) {}                      \
    return old;                                                                               \
  }
CELLC_EMU_ATOMIC_INT(int)
CELLC_EMU_ATOMIC_INT(unsigned)
CELLC_EMU_ATOMIC_INT(unsigned long long)
CELLC_EMU_ATOMIC_INT(long long)

/* Floating-point atomicAdd/atomicExch through a compare-and-swap on the bits. */
template <typename F, typename U>
static inline F cellc_emu_atomic_fadd(F *a, F v) {
  U *bits = (U *)a, old = __atomic_load_n(bits, __ATOMIC_RELAXED), next;
  F f;
  do {
    memcpy(&f, &old, sizeof f);
    F sum = f + v;
    memcpy(&next, &sum, sizeof next);
  } while (!__atomic_compare_exchange_n(bits, &old, next, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
  return f;
}
static inline float atomicAdd(float *a, float v) { return cellc_emu_atomic_fadd<float, uint32_t>(a, v); }
static inline double atomicAdd(double *a, double v) { return cellc_emu_atomic_fadd<double, uint64_t>(a, v); }
static inline float atomicExch(float *a, float v) {
  float old;
  __atomic_exchange((uint32_t *)a, (uint32_t *)&v, (uint32_t *)&old, __ATOMIC_RELAXED);
  return old;
}

/* Intrinsics: the fast variants are the exact ones here (results differ from a GPU's by
 * rounding only). */
/* glibc declares __expf and friends itself: the CUDA names are redirected. */
#define __expf cellc_emu_expf
#define __exp10f cellc_emu_exp10f
#define __logf cellc_emu_logf
#define __log2f cellc_emu_log2f
#define __log10f cellc_emu_log10f
#define __sinf cellc_emu_sinf
#define __cosf cellc_emu_cosf
#define __tanf cellc_emu_tanf
#define __powf cellc_emu_powf
static inline float cellc_emu_expf(float x) { return expf(x); }
static inline float cellc_emu_exp10f(float x) { return exp10f(x); }
static inline float cellc_emu_logf(float x) { return logf(x); }
static inline float cellc_emu_log2f(float x) { return log2f(x); }
static inline float cellc_emu_log10f(float x) { return log10f(x); }
static inline float cellc_emu_sinf(float x) { return sinf(x); }
static inline float cellc_emu_cosf(float x) { return cosf(x); }
static inline float cellc_emu_tanf(float x) { return tanf(x); }
static inline float cellc_emu_powf(float x, float y) { return powf(x, y); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline float __int2float_rn(int i) { return (float)i; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename A, typename B>
static inline auto min(A a, B b) -> decltype(a + b) { return b < a ? b : a; }
template <typename A, typename B>
static inline auto max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }

#endif /* CELLC_EMU_ABI_ONLY */
#endif
