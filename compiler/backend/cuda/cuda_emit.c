/* cuda_emit.c: `cellc emit --target cuda`: a program's whole-sequence forward and backward as
 * P.cu (CUDA C++ for nvcc: the back end's generated kernels, verbatim, then the host executor
 * cellc_emit_host.h and the plan as constant tables it runs) and P.ptx (the kernels compiled by
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
 * emitted cells link into one program), in the order of CellcEPlan's fields from kstatic on. */
static const char *const FIXED_KERNELS[] = {"kstatic_fwd", "kstatic_bwd", "kstep_fwd", "kstep_bwd",
                                            "cellc_scan_chunks", "cellc_scan_carry", "cellc_scan_apply",
                                            "cellc_copy", "cellc_fill", "cellc_add_const",
                                            "cellc_emit_unpack", "cellc_emit_pack"};

/* ---- the tables ---- */

static void print_arrays(FILE *f, const char *P, const Plan *pl) {
  Program *p = pl->p;
  fprintf(f, "static const CellcEArray %s_arrays_[] = {\n", P);
  for (int i = 0; i < pl->narrays; i++) {
    const PlanArray *a = &pl->arrays[i];
    const char *where = "CELLC_E_OWN";
    int index = 0;
    /* an owned array's floats (a T + b) B + c, from plan_array_floats itself */
    long long c = (long long)plan_array_floats(a, 0, 0), b = (long long)plan_array_floats(a, 0, 1) - c;
    long long A = (long long)plan_array_floats(a, 1, 1) - b - c, zero = a->kind == ARR_ACC ? a->numel : 0;
    switch (a->kind) {
    case ARR_PARAM: {
      int param = p->pparts[a->index].param;
      if (p->cell->params[param].cplx) c = a->numel; /* its plane, unpacked from the interleaved param */
      else where = "CELLC_E_PARAM", index = param;
      break;
    }
    case ARR_X: where = "CELLC_E_X"; break;
    case ARR_DY: where = "CELLC_E_DY"; break;
    case ARR_Y: where = "CELLC_E_Y"; break;
    case ARR_GX: where = "CELLC_E_GX", A = a->width; break; /* the caller's dx, or ours when NULL */
    case ARR_GH0: b = a->width; break;                      /* ours, packed into the caller's dh0 */
    default: break;
    }
    fprintf(f, "  {%s, %d, %d, %lldLL, %lldLL, %lldLL, %lldLL},\n", where, index, a->width, A, b, c, zero);
  }
  fprintf(f, "  {0, 0, 0, 0, 0, 0, 0}};\n");
  fprintf(f, "static const CellcESlot %s_slots_[] = {\n", P);
  for (int i = 0; i < pl->nslots; i++)
    fprintf(f, "  {%d, %d, %d},\n", pl->slots[i].array, pl->slots[i].row_off, pl->slots[i].col);
  fprintf(f, "  {0, 0, 0}};\n");
}

/* One plan step as a table row (what cuda_backend.c's run_step reads of it, resolved to slots). */
static void print_step(FILE *f, const Plan *pl, const CgCudaInfo *info, const PStep *st) {
  Program *p = pl->p;
  Graph *g = &p->g;
  int i[6] = {0, 0, 0, 0, 0, 0};
  double k = 0;
  const char *kind = "";
  switch (st->kind) {
  case PS_ELEM: kind = "ELEM", i[0] = st->kernel, i[1] = info->tmp_floats[st->kernel]; break;
  case PS_GEMM:
  case PS_GEMM_T: {
    GemmOperands op = plan_gemm_operands(pl, st);
    kind = st->kind == PS_GEMM ? "GEMM" : "GEMM_T";
    i[0] = op.y, i[1] = op.v, i[2] = op.m, i[3] = op.nO, i[4] = op.nI, i[5] = st->accumulate;
    break;
  }
  case PS_OUTER_ACC: {
    Node *o = graph_node(g, st->node);
    kind = "OUTER_ACC";
    i[0] = pl->home[o->a[0]], i[1] = pl->home[o->a[1]], i[2] = pl->home[p->bounds[st->bound].acc];
    i[3] = o->n[0], i[4] = o->n[1];
    CHECK(i[0] >= 0 && i[1] >= 0 && i[2] >= 0);
    break;
  }
  case PS_COLSUM: {
    Node *n = graph_node(g, st->node);
    kind = "COLSUM";
    i[0] = pl->home[st->node], i[1] = pl->home[p->bounds[st->bound].acc], i[2] = node_numel(n);
    CHECK(i[0] >= 0 || n->op == OP_CONST);
    k = n->k;
    break;
  }
  case PS_SCAN:
  case PS_RSCAN:
    kind = st->kind == PS_SCAN ? "SCAN" : "RSCAN";
    i[0] = p->spart_of[st->state], i[1] = p->sparts[i[0]].cplx;
    break;
  case PS_COPY: {
    Node *n = graph_node(g, st->node);
    kind = "COPY";
    i[0] = pl->home[st->node], i[1] = node_numel(n), i[2] = st->dst;
    CHECK(i[0] >= 0 || n->op == OP_CONST);
    k = n->k;
    break;
  }
  case PS_ZERO: kind = "ZERO", i[0] = st->dst; break;
  default: UNREACHABLE("plan step");
  }
  fprintf(f, "  {CELLC_E_%s, {%d, %d, %d, %d, %d, %d}, %.9ef},\n", kind, i[0], i[1], i[2], i[3], i[4], i[5], (double)(float)k);
}

static const char *region_name(Region r) {
  return r == REG_STEP ? "CELLC_E_STEP" : r == REG_FIRST ? "CELLC_E_FIRST" : "CELLC_E_ALL";
}

/* The steps of the seven phases in order, and the phases as ranges of them. */
static void print_steps(FILE *f, const char *P, const Plan *pl, const CgCudaInfo *info, char *phases, size_t len) {
  const Phase *ph[7] = {&pl->fwd_pre, &pl->fwd_step, &pl->fwd_post, &pl->bwd_pre, &pl->bwd_step, &pl->bwd_post, &pl->bwd_first};
  fprintf(f, "static const CellcEStep %s_steps_[] = {\n", P);
  int at = 0;
  size_t used = 0;
  for (int k = 0; k < 7; k++) {
    for (int j = 0; j < ph[k]->n; j++) print_step(f, pl, info, &ph[k]->steps[j]);
    used += (size_t)snprintf(phases + used, len - used, "%s{%s, %d, %d}", k ? ", " : "", region_name(ph[k]->region), at, ph[k]->n);
    at += ph[k]->n;
  }
  fprintf(f, "  {0, {0, 0, 0, 0, 0, 0}, 0.0f}};\n");
}

static void print_stacks(FILE *f, const char *P, const Plan *pl, int *nstacks) {
  Program *p = pl->p;
  *nstacks = 0;
  fprintf(f, "static const CellcEStack %s_stacks_[] = {\n", P);
  for (int i = 0; i < pl->narrays; i++) {
    if (pl->arrays[i].kind != ARR_STACK) continue;
    int s = pl->arrays[i].index;
    long long at = 0;
    for (int m = 0; m < pl->nstack[s]; m++) {
      int mat = pl->stacks[s][m];
      long long e = node_numel(graph_node(&p->g, mat));
      fprintf(f, "  {%d, %d, %lldLL, %lldLL},\n", i, pl->home[mat], at, e);
      at += e, (*nstacks)++;
    }
  }
  fprintf(f, "  {0, 0, 0, 0}};\n");
}

/* The array of kind `kind` and index `index`, or -1. */
static int find_array(const Plan *pl, ArrayKind kind, int index) {
  for (int i = 0; i < pl->narrays; i++)
    if (pl->arrays[i].kind == kind && pl->arrays[i].index == index) return i;
  return -1;
}

/* The state parts: arrays, dL/dh0, and the scans' coefficients (constant rows numbered as
 * cuda_backend.c's coef_off). */
static int print_parts(FILE *f, const char *P, const Plan *pl) {
  Program *p = pl->p;
  int nconst = 0;
  fprintf(f, "static const CellcEPart %s_parts_[] = {\n", P);
  for (int q = 0; q < p->nsparts; q++) {
    const StatePart *sp = &p->sparts[q];
    int coef[3], cslot[3];
    float cval[3];
    for (int k = 0; k < 3; k++) {
      int id = k == 0 ? sp->a : k == 1 ? sp->b : sp->g;
      coef[k] = cslot[k] = -1, cval[k] = 0;
      if (id < 0 || graph_node(&p->g, id)->op == OP_CONST) {
        coef[k] = nconst, nconst += sp->size;
        cval[k] = id < 0 ? 0.0f : (float)graph_node(&p->g, id)->k;
      } else
        cslot[k] = pl->home[id];
    }
    int dh0 = pl->scan ? find_array(pl, ARR_GH0, q) : pl->dstate_array[q];
    fprintf(f, "  {%d, %d, %d, %d, {%d, %d, %d}, {%.9ef, %.9ef, %.9ef}, {%d, %d, %d}},\n", sp->size, pl->state_array[q],
            pl->dstate_array[q], dh0, coef[0], coef[1], coef[2], (double)cval[0], (double)cval[1], (double)cval[2], cslot[0],
            cslot[1], cslot[2]);
  }
  fprintf(f, "  {0, 0, 0, 0, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}}};\n");
  return nconst;
}

/* The C API's params and states: their parts, a complex param's planes and each part's gradient. */
static void print_users(FILE *f, const char *P, const Plan *pl) {
  Program *p = pl->p;
  const Cell *cell = p->cell;
  fprintf(f, "static const CellcEUser %s_params_[] = {\n", P);
  for (int i = 0; i < cell->nparams; i++) {
    int q = p->ppart_of[i], cplx = cell->params[i].cplx, arr[2] = {-1, -1}, gslot[2] = {-1, -1};
    float gk[2] = {0, 0};
    for (int j = 0; j <= cplx; j++) {
      const ParamPart *pp = &p->pparts[q + j];
      if (cplx) arr[j] = find_array(pl, ARR_PARAM, q + j);
      if (pp->grad < 0) continue;
      gslot[j] = pl->home[pp->grad];
      if (gslot[j] < 0) {
        CHECK(graph_node(&p->g, pp->grad)->op == OP_CONST);
        gk[j] = (float)graph_node(&p->g, pp->grad)->k;
      }
    }
    fprintf(f, "  {%d, %d, %dLL, {%d, %d}, {%d, %d}, {%.9ef, %.9ef}},\n", q, cplx, p->pparts[q].numel, arr[0], arr[1], gslot[0],
            gslot[1], (double)gk[0], (double)gk[1]);
  }
  fprintf(f, "  {0, 0, 0, {0, 0}, {0, 0}, {0, 0}}};\n");
  fprintf(f, "static const CellcEUser %s_states_[] = {\n", P);
  for (int s = 0; s < p->nstates; s++) {
    int q = p->spart_of[s];
    fprintf(f, "  {%d, %d, %dLL, {-1, -1}, {-1, -1}, {0, 0}},\n", q, (int)p->sparts[q].cplx, p->sparts[q].size);
  }
  fprintf(f, "  {0, 0, 0, {0, 0}, {0, 0}, {0, 0}}};\n");
}

/* Every table and the plan that ties them. */
static void print_plan(FILE *f, const char *P, const Plan *pl, const CgCudaInfo *info) {
  Program *p = pl->p;
  char phases[1024];
  int nstacks;
  print_arrays(f, P, pl);
  print_steps(f, P, pl, info, phases, sizeof phases);
  print_stacks(f, P, pl, &nstacks);
  int nconst = print_parts(f, P, pl);
  print_users(f, P, pl);
  fprintf(f, "static const void *const %s_kernels_[] = {", P);
  for (int k = 0; k < pl->nkernels; k++) fprintf(f, "CELLC_E_KFN(%s_k%d, k%d), ", P, k, k);
  fprintf(f, "NULL};\n");
  fprintf(f, "static const CellcEPlan %s_plan_ = {\n", P);
  fprintf(f, "  %d, %d, %d, %d, %d, %d, %d, %d,\n", pl->narrays, pl->nslots, nstacks, p->nsparts, p->cell->nparams, p->nstates,
          nconst, (int)pl->scan);
  fprintf(f, "  %s_arrays_, %s_slots_, %s_steps_, {%s}, %s_stacks_, %s_parts_, %s_params_, %s_states_,\n", P, P, P, phases, P, P,
          P, P);
  fprintf(f, "  {%d, %d}, {%d, %d},\n", info->static_tmp[0], info->static_tmp[1], info->step_tmp[0], info->step_tmp[1]);
  fprintf(f, "  %s_kernels_,\n", P);
  const bool has[4] = {info->has_static[0], info->has_static[1], info->has_step[0], info->has_step[1]};
  fprintf(f, " ");
  for (size_t i = 0; i < sizeof FIXED_KERNELS / sizeof FIXED_KERNELS[0]; i++) {
    const char *open = i == 0 || i == 2 ? " {" : " ", *close = i == 1 || i == 3 ? "}," : ",";
    if (i < 4 && !has[i]) fprintf(f, "%sNULL%s", open, close);
    else fprintf(f, "%sCELLC_E_KFN(%s_%s, %s)%s", open, P, FIXED_KERNELS[i], FIXED_KERNELS[i], i + 1 < 12 ? close : "};\n\n");
  }
}

/* ---- the C API ---- */

/* The declarations P.h holds (docs/emit.md): P.cu carries them too, under P.h's guard. */
static void print_header_block(FILE *f, const char *P, const Program *p) {
  const Cell *c = p->cell;
  fprintf(f, "#ifndef %s_H_\n#define %s_H_\n#include <stddef.h>\n\n#define %s_ABI 1\nenum { ", P, P, P);
  bool has_o = false;
  for (int i = 0; i < c->ndims; i++) {
    fprintf(f, "%s_%s = %ld, ", P, c->dims[i].name, c->dims[i].value);
    has_o = has_o || !strcmp(c->dims[i].name, "O");
  }
  if (!has_o) fprintf(f, "%s_O = %d ", P, p->output_size);
  fprintf(f, "};\ntypedef struct {");
  for (int i = 0; i < c->nparams; i++) fprintf(f, "%s float *%s;", i ? "" : "", c->params[i].name);
  fprintf(f, " } %s_params;\ntypedef struct {", P);
  for (int i = 0; i < c->nstates; i++) fprintf(f, " float *%s;", c->states[i].name);
  fprintf(f, " } %s_states;\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n", P);
  fprintf(f, "size_t %s_workspace_bytes(int T, int B);\n", P);
  fprintf(f, "int %s_forward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, float *y,\n"
             "               %s_states *final, void *work, void *stream);\n", P, P, P, P);
  fprintf(f, "int %s_backward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, const float *dy,\n"
             "                const %s_states *dfinal, void *work, %s_params *grad, float *dx, %s_states *dh0, void *stream);\n",
          P, P, P, P, P, P);
  fprintf(f, "const char *%s_strerror(int status);\nvoid %s_release(void);\n", P, P);
  fprintf(f, "#ifdef __cplusplus\n}\n#endif\n#endif\n\n");
}

/* `const float *name[] = {s ? s->m0 : NULL, ..., NULL};` over a struct's members. */
static void print_members(FILE *f, const char *decl, const char *s, const char *const *names, int n) {
  fprintf(f, "  %s[] = {", decl);
  for (int i = 0; i < n; i++) fprintf(f, "%s ? %s->%s : NULL, ", s, s, names[i]);
  fprintf(f, "NULL};\n");
}

static void print_api(FILE *f, const char *P, const Program *p, const Plan *pl) {
  const Cell *c = p->cell;
  int np = c->nparams, ns = c->nstates;
  const char **pn = xcalloc((size_t)np + 1, sizeof *pn), **sn = xcalloc((size_t)ns + 1, sizeof *sn);
  for (int i = 0; i < np; i++) pn[i] = c->params[i].name;
  for (int i = 0; i < ns; i++) sn[i] = c->states[i].name;
  const char *run = "  unsigned long long arr[%d], bases[%d], off[%d];\n"
                    "  CellcERun r;\n  memset(&r, 0, sizeof r);\n"
                    "  r.pl = &%s_plan_, r.s = (cudaStream_t)stream, r.T = T, r.B = B, r.arr = arr, r.bases = bases;\n";
  fprintf(f, "extern \"C\" size_t %s_workspace_bytes(int T, int B) {\n  unsigned long long off[%d];\n  CellcELayout L;\n"
             "  L.off = off;\n  return cellc_e_layout(&%s_plan_, T, B, &L) ? 0 : (size_t)L.total;\n}\n\n", P, pl->narrays + 1, P);
  fprintf(f, "extern \"C\" int %s_forward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, float *y,\n"
             "                           %s_states *final, void *work, void *stream) {\n  if (!w) return CELLC_E_NULL;\n", P, P, P, P);
  print_members(f, "const float *wp", "w", pn, np);
  print_members(f, "const float *h0p", "h0", sn, ns);
  print_members(f, "float *fp", "final", sn, ns);
  fprintf(f, run, pl->narrays + 1, pl->nslots + 1, pl->narrays + 1, P);
  fprintf(f, "  return cellc_e_forward(&r, wp, x, h0p, y, final ? fp : NULL, work, off);\n}\n\n");
  fprintf(f, "extern \"C\" int %s_backward(const %s_params *w, int T, int B, const float *x, const %s_states *h0, const float *dy,\n"
             "                            const %s_states *dfinal, void *work, %s_params *grad, float *dx, %s_states *dh0,\n"
             "                            void *stream) {\n  (void)h0;\n  if (!w || !grad) return CELLC_E_NULL;\n", P, P, P, P, P, P);
  print_members(f, "const float *wp", "w", pn, np);
  print_members(f, "float *gp", "grad", pn, np);
  print_members(f, "const float *dfp", "dfinal", sn, ns);
  print_members(f, "float *dhp", "dh0", sn, ns);
  fprintf(f, run, pl->narrays + 1, pl->nslots + 1, pl->narrays + 1, P);
  fprintf(f, "  return cellc_e_backward(&r, wp, x, dy, dfinal ? dfp : NULL, work, gp, dx, dh0 ? dhp : NULL, off);\n}\n\n");
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
