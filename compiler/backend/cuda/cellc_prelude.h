/* cellc_prelude.h: the portable kernel prelude every generated CUDA source includes first;
 * the same text compiles under NVRTC and under cuda-emu (host C++ with cellc_emu_kernel.h
 * force-included, which defines CELLC_EMU). */
#ifndef CELLC_PRELUDE_H
#define CELLC_PRELUDE_H

#ifdef CELLC_EMU
/* Host C++ has no `extern __shared__`: the emulator hands each block its buffer. Use at
 * function scope, once per kernel. */
#define CELLC_DYNAMIC_SHARED(type, name) type *const name = (type *)cellc_emu_dynamic_shared()
#else
#define CELLC_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#if defined(__CUDACC_RTC__)
/* NVRTC has no C library headers. */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif
#endif

#define CELLC_FULL_MASK 0xffffffffu

/* Before a loop: keep it rolled (a generated kernel's loops over a node's elements, where unrolling
 * every node of a long kernel would spill registers). The host compiler decides for itself. */
#ifdef CELLC_EMU
#define CELLC_NO_UNROLL
#else
#define CELLC_NO_UNROLL _Pragma("unroll 1")
#endif

/* Before a step kernel's product loop: four iterations' loads in flight. Each step of a sequential
 * phase waits on these loops, and rolled they wait on one memory latency per iteration. */
#ifdef CELLC_EMU
#define CELLC_UNROLL4
#else
#define CELLC_UNROLL4 _Pragma("unroll 4")
#endif

#endif
