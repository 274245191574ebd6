/* cpu_features.c: CPUID decoding, the BLAS kernel choice it implies, and applying that
 * choice to OpenBLAS's DYNAMIC_ARCH dispatch at start-up (see cpu_features.h). */
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

/* ---- applying it to OpenBLAS ---- */

/* OpenBLAS entry points, found at run time: openblas_get_corename is public;
 * gotoblas_dynamic_init/quit are exported by every DYNAMIC_ARCH build (Debian's included)
 * and are what the library's own constructor calls. */
typedef char *(*CorenameFn)(void);
typedef void (*VoidFn)(void);

static void *blas_sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

const char *cpu_blas_corename(void) {
  CorenameFn fn = (CorenameFn)blas_sym("openblas_get_corename");
  const char *s = fn ? fn() : NULL;
  return s ? s : "";
}

static void copy_name(char *dst, const char *src) { snprintf(dst, 32, "%s", src); }

/* Re-runs the dispatch with OPENBLAS_CORETYPE=core (unset again after); true when the
 * library now runs a core of `width`. */
static bool blas_switch(VoidFn quit, VoidFn init, const char *core, int width) {
  setenv("OPENBLAS_CORETYPE", core, 1);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
  return cpu_blas_core_width(cpu_blas_corename()) == width;
}

BlasState cpu_blas_apply(const BlasChoice *choice) {
  BlasState s;
  memset(&s, 0, sizeof s);
  s.choice = *choice;
  copy_name(s.core_before, cpu_blas_corename());
  VoidFn quit = (VoidFn)blas_sym("gotoblas_dynamic_quit"), init = (VoidFn)blas_sym("gotoblas_dynamic_init");
  const char *user = getenv("OPENBLAS_CORETYPE");
  if (user && *user) s.applied = BLAS_KEPT_USER;
  else if (!choice->core) s.applied = BLAS_NO_CHOICE;
  else if (cpu_blas_core_width(s.core_before) == choice->width_bits) s.applied = BLAS_KEPT_LIBRARY;
  else if (!quit || !init || !*s.core_before) s.applied = BLAS_UNSUPPORTED;
  else {
    s.applied = BLAS_SWITCHED;
    /* A library that does not know a name falls back to Prescott: try the same-width
     * fallback, and if that fails too, go back to what the library chose itself. */
    if (!blas_switch(quit, init, choice->core, choice->width_bits) &&
        !(choice->fallback && blas_switch(quit, init, choice->fallback, choice->width_bits))) {
      blas_switch(quit, init, s.core_before, cpu_blas_core_width(s.core_before));
      s.applied = BLAS_UNSUPPORTED;
    }
  }
  copy_name(s.core_after, cpu_blas_corename());
  s.width_after = cpu_blas_core_width(s.core_after);
  return s;
}

const BlasState *cpu_blas_setup(void) {
  static BlasState state;
  static bool done;
  if (!done) {
    CpuFeatures f = cpu_features_host();
    BlasChoice c = cpu_blas_choose(&f);
    state = cpu_blas_apply(&c);
    done = true;
  }
  return &state;
}

void cpu_blas_describe(const BlasState *s, char *buf, int size) {
  static const char *how[] = {
      [BLAS_KEPT_USER] = "kept: OPENBLAS_CORETYPE set by the user",
      [BLAS_KEPT_LIBRARY] = "the library's own choice has that width",
      [BLAS_SWITCHED] = "switched from",
      [BLAS_NO_CHOICE] = "no AVX: the library's own choice",
      [BLAS_UNSUPPORTED] = "this BLAS cannot be switched",
  };
  const char *core = *s->core_after ? s->core_after : "unknown BLAS core";
  if (s->applied == BLAS_SWITCHED)
    snprintf(buf, (size_t)size, "kernels: %s (%d-bit; CPU's widest %d-bit; switched from %s)", core, s->width_after,
             s->choice.width_bits, s->core_before);
  else
    snprintf(buf, (size_t)size, "kernels: %s (%d-bit; CPU's widest %d-bit; %s)", core, s->width_after,
             s->choice.width_bits, how[s->applied]);
}
