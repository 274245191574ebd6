/* test_cpu_features.c: the BLAS kernel choice from CPUID features: synthetic CPUs (AVX2 only,
 * AMD family 25 with AVX-512, Intel family 6 model 207) get kernels of their widest vector
 * width, never SSE with AVX2; this machine's choice matches its features and, given to a new
 * process as OPENBLAS_CORETYPE, makes OpenBLAS run a core of that width. The environment's
 * OPENBLAS_CORETYPE is never changed. */
#include "support.h"

#include <cblas.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* CPUID leaf 1 eax from display family and model (the extended fields as the SDM/APM define) */
static uint32_t signature(int family, int model, int stepping) {
  uint32_t base_family = family >= 0xf ? 0xf : (uint32_t)family, ext_family = family >= 0xf ? (uint32_t)family - 0xf : 0;
  uint32_t ext_model = (family == 6 || family >= 0xf) ? (uint32_t)model >> 4 : 0, base_model = (uint32_t)model & 0xf;
  return (ext_family << 20) | (ext_model << 16) | (base_family << 8) | (base_model << 4) | (uint32_t)stepping;
}

enum {
  ECX1_FMA = 1u << 12, ECX1_OSXSAVE = 1u << 27, ECX1_AVX = 1u << 28,
  EBX7_AVX2 = 1u << 5, EBX7_F = 1u << 16, EBX7_DQ = 1u << 17, EBX7_BW = 1u << 30, EBX7_VL = 1u << 31,
  EDX7_AMX_BF16 = 1u << 22, EDX7_AMX_TILE = 1u << 24, EDX7_AMX_INT8 = 1u << 25,
  EAX71_BF16 = 1u << 5,
};
#define XCR0_YMM 0x7ull         /* x87, SSE, AVX state */
#define XCR0_ZMM 0xe7ull        /* and opmask, ZMM_Hi256, Hi16_ZMM */
#define XCR0_AMX 0x600e7ull     /* and TILECFG, TILEDATA */
#define AVX512 (EBX7_F | EBX7_DQ | EBX7_BW | EBX7_VL)

static CpuidLeaves cpu(const char vendor[13], uint32_t sig, uint32_t ebx7, uint32_t edx7, uint32_t eax7_1, uint64_t xcr0) {
  CpuidLeaves l;
  memset(&l, 0, sizeof l);
  l.leaf0[0] = 0x1f;
  memcpy(&l.leaf0[1], vendor + 0, 4); /* ebx, edx, ecx */
  memcpy(&l.leaf0[3], vendor + 4, 4);
  memcpy(&l.leaf0[2], vendor + 8, 4);
  l.leaf1[0] = sig;
  l.leaf1[2] = ECX1_FMA | ECX1_OSXSAVE | ECX1_AVX;
  l.leaf7[0] = 1;
  l.leaf7[1] = ebx7;
  l.leaf7[3] = edx7;
  l.leaf7_1[0] = eax7_1;
  l.xcr0 = xcr0;
  return l;
}

/* Haswell-E (family 6 model 63): AVX2 + FMA, no AVX-512 */
static CpuidLeaves intel_avx2(void) { return cpu("GenuineIntel", signature(6, 63, 2), EBX7_AVX2, 0, 0, XCR0_YMM); }
/* Zen 2 (family 23 model 49): AVX2 + FMA */
static CpuidLeaves amd_avx2(void) { return cpu("AuthenticAMD", signature(23, 49, 0), EBX7_AVX2, 0, 0, XCR0_YMM); }
/* Zen 4 (family 25 model 17): AVX-512 and AVX512-BF16 */
static CpuidLeaves amd_zen4(void) {
  return cpu("AuthenticAMD", signature(25, 17, 1), EBX7_AVX2 | AVX512, 0, EAX71_BF16, XCR0_ZMM);
}
/* Intel family 6 model 207 (the Xeon OpenBLAS 0.3.21 calls Prescott): AVX-512, BF16, AMX */
static CpuidLeaves intel_207(void) {
  return cpu("GenuineIntel", signature(6, 207, 2), EBX7_AVX2 | AVX512, EDX7_AMX_BF16 | EDX7_AMX_TILE | EDX7_AMX_INT8,
             EAX71_BF16, XCR0_AMX);
}

static void expect_choice(CpuidLeaves l, const char *core, int width) {
  CpuFeatures f = cpu_features_decode(&l);
  BlasChoice c = cpu_blas_choose(&f);
  cr_assert_not_null(c.core);
  cr_expect_str_eq(c.core, core);
  cr_expect_eq(c.width_bits, width);
  cr_expect_eq(cpu_blas_core_width(c.core), width, "%s is a %d-bit core", c.core, width);
  cr_expect_eq(cpu_fma_width(&f), width);
  if (c.fallback) cr_expect_eq(cpu_blas_core_width(c.fallback), width, "fallback %s", c.fallback);
}

Test(cpu_features, decodes_family_model_and_features) {
  CpuidLeaves l = intel_207();
  CpuFeatures f = cpu_features_decode(&l);
  cr_expect_str_eq(f.vendor_id, "GenuineIntel");
  cr_expect_eq(f.vendor, CPU_VENDOR_INTEL);
  cr_expect_eq(f.family, 6);
  cr_expect_eq(f.model, 207);
  cr_expect(f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_bf16);
  cr_expect(f.amx_tile && f.amx_bf16 && f.amx_int8 && f.os_ymm && f.os_zmm && f.os_amx);
  l = amd_zen4();
  f = cpu_features_decode(&l);
  cr_expect_eq(f.vendor, CPU_VENDOR_AMD);
  cr_expect_eq(f.family, 25);
  cr_expect_eq(f.model, 17);
  cr_expect(!f.amx_tile && !f.os_amx && f.os_zmm);
  l = amd_avx2();
  f = cpu_features_decode(&l);
  cr_expect_eq(f.family, 23);
  cr_expect_eq(f.model, 49);
  cr_expect(f.avx2 && !f.avx512f && f.os_ymm && !f.os_zmm);
}

Test(cpu_features, avx2_only_cpus_get_256_bit_kernels) {
  expect_choice(intel_avx2(), "Haswell", 256);
  expect_choice(amd_avx2(), "Zen", 256);
}

Test(cpu_features, amd_family_25_with_avx512_gets_512_bit_kernels) { expect_choice(amd_zen4(), "Cooperlake", 512); }

Test(cpu_features, intel_family_6_model_207_gets_512_bit_kernels) { expect_choice(intel_207(), "Cooperlake", 512); }

Test(cpu_features, avx512_without_bf16_gets_skylakex) {
  expect_choice(cpu("GenuineIntel", signature(6, 85, 4), EBX7_AVX2 | AVX512, 0, 0, XCR0_ZMM), "SkylakeX", 512);
}

/* The width is what the OS saves too: AVX-512 in CPUID but ZMM state off (a hypervisor or
 * kernel that disables it) must give the AVX2 kernels, not faulting AVX-512 ones. */
Test(cpu_features, avx512_without_os_zmm_state_gets_256_bit_kernels) {
  CpuidLeaves l = intel_207();
  l.xcr0 = XCR0_YMM;
  expect_choice(l, "Haswell", 256);
}

/* Never SSE kernels on a CPU with AVX2: every vendor, family and model, with or without
 * AVX-512, gets a core of at least 256 bits when AVX2, FMA and YMM state are there. */
Test(cpu_features, never_sse_with_avx2) {
  const char *vendors[] = {"GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls"};
  int families[] = {6, 23, 25, 26, 0x1f};
  for (int v = 0; v < 4; v++)
    for (int fi = 0; fi < 5; fi++)
      for (int model = 0; model < 256; model += 17)
        for (int avx512 = 0; avx512 < 2; avx512++) {
          CpuidLeaves l = cpu(vendors[v], signature(families[fi], model, 0), EBX7_AVX2 | (avx512 ? AVX512 : 0), 0, 0,
                              avx512 ? XCR0_ZMM : XCR0_YMM);
          CpuFeatures f = cpu_features_decode(&l);
          BlasChoice c = cpu_blas_choose(&f);
          cr_assert_not_null(c.core);
          cr_assert_geq(cpu_blas_core_width(c.core), 256, "%s family %d model %d: %s", vendors[v], families[fi], model,
                        c.core);
          cr_assert_eq(c.width_bits, avx512 ? 512 : 256);
        }
}

Test(cpu_features, core_widths_by_name) {
  cr_expect_eq(cpu_blas_core_width("SKYLAKEX"), 512);
  cr_expect_eq(cpu_blas_core_width("Cooperlake"), 512);
  cr_expect_eq(cpu_blas_core_width("Haswell"), 256);
  cr_expect_eq(cpu_blas_core_width("Zen"), 256);
  cr_expect_eq(cpu_blas_core_width("Prescott"), 128);
  cr_expect_eq(cpu_blas_core_width("NoSuchCore"), 0);
  cr_expect_eq(cpu_blas_core_width(NULL), 0);
}

/* ---- this machine ---- */

/* One GEMM through OpenBLAS against a float64 reference: the switched kernels compute. */
static void expect_sgemm_correct(void) {
  enum { M = 64, N = 96, K = 80 };
  static float A[M * K], B[N * K], C[M * N];
  for (int i = 0; i < M * K; i++) A[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  for (int i = 0; i < N * K; i++) B[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += (double)A[i * K + k] * B[j * K + k];
      cr_assert_float_eq(C[i * N + j], s, 1e-4, "C[%d][%d]", i, j);
    }
}

Test(cpu_features, host_choice_matches_host_features) {
  CpuFeatures f = cpu_features_host();
  BlasChoice c = cpu_blas_choose(&f);
  cr_expect_eq(c.width_bits, cpu_fma_width(&f) == 512 ? 512 : (f.avx && f.os_ymm) ? 256 : 128);
  if (f.avx2 && f.fma && f.os_ymm) cr_expect_geq(c.width_bits, 256);
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.os_zmm) cr_expect_eq(c.width_bits, 512);
}

/* The OpenBLAS core this process loaded with computes correctly, and the kernels line names it,
 * its width, the CPU's widest and where the core came from. */
Test(cpu_features, describe_names_the_loaded_core) {
  const char *core = cpu_blas_corename(), *env = getenv("OPENBLAS_CORETYPE");
  if (!*core) cr_skip_test("the BLAS in this process is not OpenBLAS");
  char line[256], want[128];
  cpu_blas_describe(line, sizeof line);
  CpuFeatures f = cpu_features_host();
  snprintf(want, sizeof want, "kernels: %s (%d-bit; CPU's widest %d-bit; ", core, cpu_blas_core_width(core),
           cpu_blas_choose(&f).width_bits);
  cr_expect(!strncmp(line, want, strlen(want)), "'%s' starts with '%s'", line, want);
  cr_expect(strstr(line, env && *env ? "OPENBLAS_CORETYPE=" : "the library's own choice"), "%s", line);
  expect_sgemm_correct();
}

/* What bench/ does for a peer: OPENBLAS_CORETYPE set to this CPU's choice in the environment a
 * process starts with makes the OpenBLAS it loads run a core of the choice's width. */
Test(cpu_features, the_choice_in_a_new_process_runs_at_its_width) {
  CpuFeatures f = cpu_features_host();
  BlasChoice c = cpu_blas_choose(&f);
  if (!c.core) cr_skip_test("no AVX here: nothing to choose");
  if (!*cpu_blas_corename()) cr_skip_test("the BLAS in this process is not OpenBLAS");
  char cmd[512], got[64] = "";
  snprintf(cmd, sizeof cmd,
           "env OPENBLAS_CORETYPE=%s /usr/bin/python3 -c \"import ctypes; l = ctypes.CDLL('libopenblas.so.0'); "
           "l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())\"",
           c.core);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  cr_assert(fgets(got, sizeof got, p), "no answer from %s", cmd);
  pclose(p);
  got[strcspn(got, "\n")] = 0;
  cr_expect_eq(cpu_blas_core_width(got), c.width_bits, "OPENBLAS_CORETYPE=%s loads %s", c.core, got);
}
