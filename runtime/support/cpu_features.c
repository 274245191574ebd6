/* cpu_features.c: CPUID decoding, the BLAS kernel choice it implies, and what OpenBLAS runs
 * (see cpu_features.h). */
#include "cpu_features.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CPU_X86 1
#else
#define CPU_X86 0
#endif

/* ---- CPUID ---- */

#if CPU_X86
static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) { __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]); }

static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

CpuidLeaves cpu_cpuid_read(void) {
  CpuidLeaves l;
  memset(&l, 0, sizeof l);
#if CPU_X86
  cpuid(0, 0, l.leaf0);
  uint32_t max = l.leaf0[0];
  if (max >= 1) cpuid(1, 0, l.leaf1);
  if (max >= 7) {
    cpuid(7, 0, l.leaf7);
    if (l.leaf7[0] >= 1) cpuid(7, 1, l.leaf7_1); /* eax of subleaf 0: the last subleaf */
  }
  if (l.leaf1[2] & (1u << 27)) l.xcr0 = xgetbv0(); /* OSXSAVE: XGETBV is enabled */
#endif
  return l;
}

static bool bit(uint32_t r, int b) { return (r >> b) & 1u; }

CpuFeatures cpu_features_decode(const CpuidLeaves *l) {
  CpuFeatures f;
  memset(&f, 0, sizeof f);
  memcpy(f.vendor_id + 0, &l->leaf0[1], 4); /* ebx, edx, ecx spell the vendor */
  memcpy(f.vendor_id + 4, &l->leaf0[3], 4);
  memcpy(f.vendor_id + 8, &l->leaf0[2], 4);
  f.vendor_id[12] = 0;
  if (!strcmp(f.vendor_id, "GenuineIntel")) f.vendor = CPU_VENDOR_INTEL;
  else if (!strcmp(f.vendor_id, "AuthenticAMD") || !strcmp(f.vendor_id, "HygonGenuine")) f.vendor = CPU_VENDOR_AMD;
  else f.vendor = CPU_VENDOR_OTHER;

  uint32_t max = l->leaf0[0], eax = l->leaf1[0], ecx1 = l->leaf1[2];
  int base_family = (int)((eax >> 8) & 0xf), base_model = (int)((eax >> 4) & 0xf);
  f.family = base_family == 0xf ? base_family + (int)((eax >> 20) & 0xff) : base_family;
  f.model = (base_family == 0x6 || base_family == 0xf) ? base_model + (int)(((eax >> 16) & 0xf) << 4) : base_model;

  f.fma = bit(ecx1, 12);
  f.avx = bit(ecx1, 28);
  if (bit(ecx1, 27)) { /* OSXSAVE: XCR0 says which register state the OS saves */
    f.os_ymm = (l->xcr0 & 0x6) == 0x6;
    f.os_zmm = f.os_ymm && (l->xcr0 & 0xe0) == 0xe0;
    f.os_amx = f.os_ymm && (l->xcr0 & 0x60000) == 0x60000;
  }
  if (max >= 7) {
    uint32_t ebx = l->leaf7[1], edx = l->leaf7[3];
    f.avx2 = bit(ebx, 5);
    f.avx512f = bit(ebx, 16);
    f.avx512dq = bit(ebx, 17);
    f.avx512bw = bit(ebx, 30);
    f.avx512vl = bit(ebx, 31);
    f.amx_bf16 = bit(edx, 22);
    f.amx_tile = bit(edx, 24);
    f.amx_int8 = bit(edx, 25);
    f.avx512_bf16 = bit(l->leaf7_1[0], 5);
  }
  return f;
}

CpuFeatures cpu_features_host(void) {
  CpuidLeaves l = cpu_cpuid_read();
  return cpu_features_decode(&l);
}

/* ---- the choice ---- */

/* AVX-512 as OpenBLAS's SkylakeX kernels use it (F, DQ, BW, VL) with ZMM state saved. */
static bool has_avx512(const CpuFeatures *f) {
  return f->avx512f && f->avx512dq && f->avx512bw && f->avx512vl && f->os_zmm;
}
static bool has_avx2_fma(const CpuFeatures *f) { return f->avx && f->avx2 && f->fma && f->os_ymm; }

int cpu_fma_width(const CpuFeatures *f) {
  if (has_avx512(f)) return 512;
  if (f->avx && f->fma && f->os_ymm) return 256;
  return 128;
}

BlasChoice cpu_blas_choose(const CpuFeatures *f) {
  if (has_avx512(f)) {
    /* Cooperlake is SkylakeX plus the bfloat16 kernels; its sgemm is SkylakeX's. */
    if (f->avx512_bf16) return (BlasChoice){"Cooperlake", "SkylakeX", 512};
    return (BlasChoice){"SkylakeX", NULL, 512};
  }
  if (has_avx2_fma(f)) {
    if (f->vendor == CPU_VENDOR_AMD) return (BlasChoice){"Zen", "Haswell", 256};
    return (BlasChoice){"Haswell", NULL, 256};
  }
  if (f->avx && f->os_ymm) return (BlasChoice){"SandyBridge", NULL, 256};
  return (BlasChoice){NULL, NULL, 128};
}

int cpu_blas_core_width(const char *core) {
  static const struct {
    const char *name;
    int width;
  } cores[] = {
      {"SapphireRapids", 512}, {"Cooperlake", 512}, {"SkylakeX", 512},  {"Haswell", 256},
      {"Zen", 256},            {"SandyBridge", 256}, {"Excavator", 128}, {"Steamroller", 128},
      {"Piledriver", 128},     {"Bulldozer", 128},  {"Nehalem", 128},   {"Dunnington", 128},
      {"Penryn", 128},         {"Core2", 128},      {"Atom", 128},      {"Nano", 128},
      {"Barcelona", 128},      {"Bobcat", 128},     {"Opteron(SSE3)", 128}, {"Opteron", 128},
      {"Prescott", 128},       {"Northwood", 128},  {"Banias", 128},    {"Athlon", 128},
      {"Coppermine", 128},     {"Katmai", 128},
  };
  if (!core) return 0;
  for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
    if (!strcasecmp(core, cores[i].name)) return cores[i].width;
  return 0;
}

/* ---- what OpenBLAS runs ---- */

/* openblas_get_corename is looked up at run time so that any BLAS links. */
typedef char *(*CorenameFn)(void);

const char *cpu_blas_corename(void) {
  CorenameFn fn = (CorenameFn)dlsym(RTLD_DEFAULT, "openblas_get_corename");
  const char *s = fn ? fn() : NULL;
  return s ? s : "";
}

void cpu_blas_describe(char *buf, int size) {
  CpuFeatures f = cpu_features_host();
  BlasChoice c = cpu_blas_choose(&f);
  const char *core = cpu_blas_corename(), *env = getenv("OPENBLAS_CORETYPE");
  char from[96];
  if (env && *env) snprintf(from, sizeof from, "OPENBLAS_CORETYPE=%s", env);
  else snprintf(from, sizeof from, "the library's own choice");
  snprintf(buf, (size_t)size, "kernels: %s (%d-bit; CPU's widest %d-bit; %s)", *core ? core : "unknown BLAS core",
           cpu_blas_core_width(core), c.width_bits, from);
}
