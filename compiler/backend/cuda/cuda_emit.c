/* cuda_emit.c: `cellc emit --target cuda`: a program's whole-sequence forward and backward as
 * P.cu (CUDA C++ for nvcc: the back end's generated kernels, verbatim, then the CUDA host's executor
 * cellc_exec.h, its runtime-API operations cellc_emit_host.h, and the plan as plan_table.h's table)
 * and P.ptx (the kernels compiled by
 * NVRTC for --arch). The plan and the kernels come from plan_new and cg_cuda_source, as the CUDA
 * back end's compile makes them; docs/emit.md says what P.cu expects of P.h. */
#include "cuda.h"

#include <string.h>

#include "cg_cuda.h"
#include "cuda_api.h"
#include "cuda_internal.h"
#include "support.h"

/* The markers around the back end's kernel source in P.cu (the tests compare what lies between
 * them with the source the back end runs). */
#define KERNELS_BEGIN "/* ---- cellc kernels: begin ---- */\n"
#define KERNELS_END "/* ---- cellc kernels: end ---- */\n"
#define GLUE_END "/* ---- cellc glue kernels: end ---- */\n"

/* The kernel names of the source (each gets the prefix P_ through a #define, so that several
 * emitted cells link into one program), in the order of cellc_exec.h's CX_K_*. */
static const char *const FIXED_KERNELS[] = {"kstatic_fwd", "kstatic_bwd", "kstep_fwd", "kstep_bwd",
                                            "cellc_scan_chunks", "cellc_scan_carry", "cellc_scan_apply",
                                            "cellc_copy", "cellc_fill", "cellc_add_const",
                                            "cellc_emit_unpack", "cellc_emit_pack"};

/* ---- the plan ---- */

/* The plan as plan_table.h's table (the words of its bytes, as this host lays them out: P.cu is
 * built for little-endian hosts, as CUDA's are), the CUDA-only facts beside it (CxKernels) and the
 * kernels, as cellc_emit_host.h's CxHostPlan. */
static void print_plan(FILE *f, const char *P, const Plan *pl, const CgCudaInfo *info) {
  PlanTable t = plan_table_build(pl, pl->p);
  CHECK(t.n % 4 == 0);
  uint32_t *w = xmalloc(t.n);
  memcpy(w, t.data, t.n);
  fprintf(f, "static const uint32_t %s_table_[] = {", P);
  for (size_t i = 0; i < t.n / 4; i++) fprintf(f, "%s0x%08x,", i % 8 ? " " : "\n  ", (unsigned)w[i]);
  fprintf(f, "\n};\n");
  free(w);
  free(t.data);
  fprintf(f, "static const int32_t %s_tmp_[] = {", P);
  for (int k = 0; k < pl->nkernels; k++) fprintf(f, "%d, ", info->tmp_floats[k]);
  fprintf(f, "0};\n");
  fprintf(f, "static const CxKernels %s_kinfo_ = {%d, {%d, %d}, {%d, %d}, %s_tmp_};\n", P, pl->nkernels,
          info->has_static[0] ? info->static_tmp[0] : -1, info->has_static[1] ? info->static_tmp[1] : -1,
          info->has_step[0] ? info->step_tmp[0] : -1, info->has_step[1] ? info->step_tmp[1] : -1, P);
  fprintf(f, "static const void *const %s_kernels_[] = {", P);
  for (int k = 0; k < pl->nkernels; k++) fprintf(f, "CELLC_E_KFN(%s_k%d, k%d), ", P, k, k);
  fprintf(f, "NULL};\n");
  const bool has[4] = {info->has_static[0], info->has_static[1], info->has_step[0], info->has_step[1]};
  fprintf(f, "static const void *const %s_fixed_[] = {", P);
  for (size_t i = 0; i < sizeof FIXED_KERNELS / sizeof FIXED_KERNELS[0]; i++) {
    if (i < 4 && !has[i]) fprintf(f, "NULL, ");
    else fprintf(f, "CELLC_E_KFN(%s_%s, %s), ", P, FIXED_KERNELS[i], FIXED_KERNELS[i]);
  }
  fprintf(f, "NULL};\n");
  fprintf(f, "static const CxHostPlan %s_plan_ = {(const EtHeader *)%s_table_, &%s_kinfo_, %s_kernels_, %s_fixed_};\n\n", P, P,
          P, P, P);
}

/* ---- the C API ---- */

/* A struct member's name: a param's or state's name with every character that C does not allow in
 * an identifier as '_' (a history hist.NAME is the member hist_NAME; docs/emit.md), as P.h has it. */
static const char *field(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s", name);
  for (char *c = buf; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) *c = '_';
  return buf;
}

/* The declarations P.h holds (docs/emit.md): P.cu carries them too, under P.h's guard. */
static void print_header_block(FILE *f, const char *P, const Program *p) {
  const Cell *c = p->cell;
  fprintf(f, "#ifndef %s_H_\n#define %s_H_\n#include <stddef.h>\n\n#define %s_ABI 2\nenum { ", P, P, P);
  bool has_o = false;
  for (int i = 0; i < c->ndims; i++) {
    fprintf(f, "%s_%s = %ld, ", P, c->dims[i].name, c->dims[i].value);
    has_o = has_o || !strcmp(c->dims[i].name, "O");
  }
  if (!has_o) fprintf(f, "%s_O = %d ", P, p->output_size);
  fprintf(f, "};\ntypedef struct {");
  char buf[160];
  for (int i = 0; i < c->nparams; i++) fprintf(f, "%s float *%s;", i ? "" : "", field(c->params[i].name, buf, sizeof buf));
  fprintf(f, " } %s_params;\ntypedef struct {", P);
  for (int i = 0; i < c->nstates; i++) fprintf(f, " float *%s;", field(c->states[i].name, buf, sizeof buf));
  fprintf(f, " } %s_states;\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n", P);
  fprintf(f, "size_t %s_workspace_bytes(int T, int B);\n", P);
  fprintf(f, "int %s_forward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, float *y,\n"
             "               %s_states *final, void *work, void *stream);\n", P, P, P, P);
  fprintf(f, "int %s_backward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, const float *dy,\n"
             "                const %s_states *dfinal, void *work, %s_params *grad, float *dx, %s_states *dh0, void *stream);\n",
          P, P, P, P, P, P);
  fprintf(f, "/* ABI 2: opt NULL is the call without _ex; lengths in host memory, threads ignored. */\n"
             "typedef struct {\n  const int *lengths; /* [B] in 1..T, or NULL: every row has T steps */\n"
             "  int threads;         /* ignored by cuda */\n} %s_options;\n", P);
  fprintf(f, "int %s_forward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0, float *y,\n"
             "                  %s_states *final, void *work, const %s_options *opt, void *stream);\n", P, P, P, P, P);
  fprintf(f, "int %s_backward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0, const float *dy,\n"
             "                   const %s_states *dfinal, void *work, const %s_options *opt, %s_params *grad, float *dx,\n"
             "                   %s_states *dh0, void *stream);\n", P, P, P, P, P, P, P);
  fprintf(f, "const char *%s_strerror(int status);\nvoid %s_release(void);\n", P, P);
  fprintf(f, "#ifdef __cplusplus\n}\n#endif\n#endif\n\n");
}

/* `unsigned long long name[] = {s ? (device address of s->m0) : 0, ..., 0};` over a struct's members. */
static void print_members(FILE *f, const char *decl, const char *s, const char *const *names, int n) {
  fprintf(f, "  unsigned long long %s[] = {", decl);
  char buf[160];
  for (int i = 0; i < n; i++)
    fprintf(f, "%s ? (unsigned long long)(uintptr_t)%s->%s : 0, ", s, s, field(names[i], buf, sizeof buf));
  fprintf(f, "0};\n");
}

static void print_api(FILE *f, const char *P, const Program *p, const Plan *pl) {
  const Cell *c = p->cell;
  int np = c->nparams, ns = c->nstates;
  const char **pn = xcalloc((size_t)np + 1, sizeof *pn), **sn = xcalloc((size_t)ns + 1, sizeof *sn);
  for (int i = 0; i < np; i++) pn[i] = c->params[i].name;
  for (int i = 0; i < ns; i++) sn[i] = c->states[i].name;
  char store[160];
  snprintf(store, sizeof store, "  unsigned long long arr[%d], bases[%d], off[%d];\n", pl->narrays + 1, pl->nslots + 1,
           pl->narrays + 1);
  fprintf(f, "extern \"C\" size_t %s_workspace_bytes(int T, int B) {\n%s"
             "  return cellc_e_workspace(&%s_plan_, T, B, arr, bases, off);\n}\n\n", P, store, P);
  fprintf(f, "extern \"C\" int %s_forward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, float *y,\n"
             "                           %s_states *final, void *work, void *stream) {\n  if (!w) return CELLC_E_NULL;\n", P, P, P, P);
  print_members(f, "wp", "w", pn, np);
  print_members(f, "h0p", "h0", sn, ns);
  print_members(f, "fp", "final", sn, ns);
  fprintf(f, "%s  CxIO io;\n  memset(&io, 0, sizeof io);\n", store);
  fprintf(f, "  io.x = (unsigned long long)(uintptr_t)x, io.y = (unsigned long long)(uintptr_t)y, io.params = wp;\n"
             "  io.states = h0 ? h0p : NULL, io.out = final ? fp : NULL;\n");
  fprintf(f, "  return cellc_e_run(&%s_plan_, 0, T, B, &io, work, stream, arr, bases, off);\n}\n\n", P);
  fprintf(f, "extern \"C\" int %s_backward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, const float *dy,\n"
             "                            const %s_states *dfinal, void *work, %s_params *grad, float *dx, %s_states *dh0,\n"
             "                            void *stream) {\n  (void)h0;\n  if (!w || !grad) return CELLC_E_NULL;\n", P, P, P, P, P, P);
  print_members(f, "wp", "w", pn, np);
  print_members(f, "gp", "grad", pn, np);
  print_members(f, "dfp", "dfinal", sn, ns);
  print_members(f, "dhp", "dh0", sn, ns);
  fprintf(f, "%s  CxIO io;\n  memset(&io, 0, sizeof io);\n", store);
  fprintf(f, "  io.x = (unsigned long long)(uintptr_t)x, io.dy = (unsigned long long)(uintptr_t)dy;\n"
             "  io.dx = (unsigned long long)(uintptr_t)dx, io.params = wp, io.grads = gp;\n"
             "  io.states = dfinal ? dfp : NULL, io.out = dh0 ? dhp : NULL;\n");
  fprintf(f, "  return cellc_e_run(&%s_plan_, 1, T, B, &io, work, stream, arr, bases, off);\n}\n\n", P);
  /* ABI 2: the calls with lengths over the two above (cellc_emit_host.h), the structs as pointer arrays */
  fprintf(f, "static int %s_fwd_(const float *const *w, int T, int B, const float *x, const float *const *h0, float *y,\n"
             "                   float *const *final, void *work, void *stream) {\n"
             "  return %s_forward((const %s_params *)(const void *)w, T, B, x, (const %s_states *)(const void *)h0, y,\n"
             "                    (%s_states *)(void *)final, work, stream);\n}\n\n", P, P, P, P, P);
  fprintf(f, "static int %s_bwd_(const float *const *w, int T, int B, const float *x, const float *const *h0, const float *dy,\n"
             "                   const float *const *dfinal, void *work, float *const *grad, float *dx, float *const *dh0,\n"
             "                   void *stream) {\n"
             "  return %s_backward((const %s_params *)(const void *)w, T, B, x, (const %s_states *)(const void *)h0, dy,\n"
             "                     (const %s_states *)(const void *)dfinal, work, (%s_params *)(void *)grad, dx,\n"
             "                     (%s_states *)(void *)dh0, stream);\n}\n\n", P, P, P, P, P, P, P);
  fprintf(f, "extern \"C\" int %s_forward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0, float *y,\n"
             "                              %s_states *final, void *work, const %s_options *opt, void *stream) {\n"
             "  return cellc_e_forward_ex(&%s_plan_, %s_fwd_, (const float *const *)(const void *)w, T, B, x,\n"
             "                            (const float *const *)(const void *)h0, y, (float *const *)(void *)final, work,\n"
             "                            opt ? opt->lengths : NULL, opt ? opt->threads : 0, stream);\n}\n\n", P, P, P, P, P, P, P);
  fprintf(f, "extern \"C\" int %s_backward_ex(const %s_params *w, int T, int B, const float *x, const %s_states *h0,\n"
             "                               const float *dy, const %s_states *dfinal, void *work, const %s_options *opt,\n"
             "                               %s_params *grad, float *dx, %s_states *dh0, void *stream) {\n"
             "  return cellc_e_backward_ex(&%s_plan_, %s_fwd_, %s_bwd_, (const float *const *)(const void *)w, T, B, x,\n"
             "                             (const float *const *)(const void *)h0, dy, (const float *const *)(const void *)dfinal,\n"
             "                             work, opt ? opt->lengths : NULL, opt ? opt->threads : 0,\n"
             "                             (float *const *)(void *)grad, dx, (float *const *)(void *)dh0, stream);\n}\n\n",
          P, P, P, P, P, P, P, P, P, P);
  fprintf(f, "extern \"C\" const char *%s_strerror(int status) { return cellc_e_strerror(status); }\n\n", P);
  fprintf(f, "extern \"C\" void %s_release(void) { cellc_e_release(); }\n", P);
  free(pn), free(sn);
}

/* ---- the files ---- */

/* The back end's kernel source with its prelude inlined (P.cu includes no cellc header). */
static void print_kernels(FILE *f, const char *source) {
  const char *inc = "#include \"" CUDA_PRELUDE_NAME "\"\n";
  size_t n = strlen(inc);
  CHECK(!strncmp(source, inc, n));
  fputs(KERNELS_BEGIN, f);
  fputs(cuda_prelude_text(), f);
  fputs(source + n, f);
  fputs(KERNELS_END, f);
  fputs(cellc_emit_kernels_h, f);
  fputs(GLUE_END, f);
}

/* The kernels' renames (`#define k0 P_k0`), or with P NULL their #undefs: the renames hold over
 * the kernels alone, so that a param named k0 stays k0 in the API's code. */
static void print_renames(FILE *f, const char *P, int nkernels) {
  if (P) fprintf(f, "/* every kernel's symbol starts with %s_ */\n", P);
  for (int k = 0; k < nkernels; k++)
    P ? fprintf(f, "#define k%d %s_k%d\n", k, P, k) : fprintf(f, "#undef k%d\n", k);
  for (size_t i = 0; i < sizeof FIXED_KERNELS / sizeof FIXED_KERNELS[0]; i++)
    P ? fprintf(f, "#define %s %s_%s\n", FIXED_KERNELS[i], P, FIXED_KERNELS[i]) : fprintf(f, "#undef %s\n", FIXED_KERNELS[i]);
  fputc('\n', f);
}

static char *cu_text(const char *P, const Program *p, const Plan *pl, const CgCudaInfo *info, const char *source,
                     const EmitOptions *o) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  fprintf(f, "/* %s.cu: cell %s, emitted by cellc for target cuda (%s, %s mode): the whole-sequence forward and\n"
             " * backward of docs/emit.md's C API. Build: nvcc -c %s.cu; link with -lcublas -lcudart. */\n",
          P, p->cell->name, o->arch, pl->scan ? "scan" : "sequential", P);
  print_header_block(f, P, p);
  print_renames(f, P, pl->nkernels);
  fputs("#ifndef CELLC_EMIT_HOST_ONLY\n", f);
  print_kernels(f, source);
  fputs("#endif\n", f);
  print_renames(f, NULL, pl->nkernels);
  fputs(cellc_launch_h, f);
  fputs(cellc_plan_table_h, f);
  fputs(cellc_exec_h, f);
  fputs(cellc_emit_host_h, f);
  fputc('\n', f);
  print_plan(f, P, pl, info);
  print_api(f, P, p, pl);
  fclose(f);
  return text;
}

/* The kernels alone, as P.ptx compiles them: the renames, the kernel source, the glue. */
static char *ptx_source(const char *P, const Plan *pl, const char *source) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  print_renames(f, P, pl->nkernels);
  print_kernels(f, source);
  fclose(f);
  return text;
}

static int write_out(const char *dir, const char *P, const char *ext, const char *data, char *err, size_t errlen) {
  char *path = xasprintf("%s/%s.%s", dir, P, ext);
  int rc = fsout_write_file(path, data, strlen(data), err, errlen);
  free(path);
  return rc;
}

/* P.ptx: NVRTC (no driver, no GPU needed) for o->arch. */
static int emit_ptx(const EmitOptions *o, const char *src, char *err, size_t errlen) {
  CudaApi api;
  char why[8192];
  if (cuda_api_open_nvrtc(&api, why, sizeof why) != 0) return cuda_fail(err, errlen, "target cuda needs NVRTC: %s", why);
  CudaImage img;
  int rc = cuda_compile(&api, src, o->arch, CUDA_IMAGE_PTX, NULL, 0, &img, why, sizeof why);
  cuda_api_close(&api);
  if (rc != 0) {
    cuda_image_free(&img);
    return cuda_fail(err, errlen, "NVRTC could not compile the kernels for %s: %s", o->arch, why);
  }
  rc = write_out(o->dir, o->name, "ptx", img.data, err, errlen);
  cuda_image_free(&img);
  return rc;
}

int cuda_emit(Program *p, const BackendOptions *bo, const EmitOptions *o, char *err, size_t errlen) {
  CHECK(p->differentiated && (!bo->scan || p->scan_form));
  if (!p->cell) return cuda_fail(err, errlen, "target cuda: the program has no cell");
  if (p->nnoise || o->train_noise)
    return cuda_fail(err, errlen, "target cuda does not emit stochastic built-ins with train_noise=true (cell %s)", p->cell->name);
  if (!p->cell->nparams || !p->nstates)
    return cuda_fail(err, errlen, "target cuda: cell %s needs at least one param and one state", p->cell->name);
  Plan *pl = plan_new(p, &(PlanOptions){.scan = bo->scan, .gates = false});
  CgCudaInfo info;
  char why[8192];
  char *source = cg_cuda_source(pl, &info, why, sizeof why);
  if (!source) {
    plan_free(pl);
    return cuda_fail(err, errlen, "target cuda: %s", why);
  }
  const char *arch = o->arch && *o->arch ? o->arch : "sm_80";
  EmitOptions eo = *o;
  eo.arch = arch;
  char *cu = cu_text(o->name, p, pl, &info, source, &eo), *ptx = ptx_source(o->name, pl, source);
  int rc = write_out(o->dir, o->name, "cu", cu, err, errlen);
  if (rc == 0) rc = emit_ptx(&eo, ptx, err, errlen);
  free(cu), free(ptx), free(source);
  cg_cuda_info_free(&info);
  plan_free(pl);
  return rc;
}
