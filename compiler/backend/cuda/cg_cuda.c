/* cg_cuda.c: a plan (compiler/plan) as CUDA C source text. Each fused elementwise kernel of the
 * plan becomes one __global__ function over a range of rows: a warp a row, the lanes over a node's
 * elements (channel-innermost, so coalesced), the kernel's nodes in order with __syncwarp between
 * them; values with a home in global memory, temporaries in the warp's shared memory, constants
 * inline. Each elementwise op's scalar meaning comes from the op table (op_c_expr). Fixed helpers
 * follow: the chunked parallel scan (forward and reverse, real and complex) and the copies. */
#include "cg_cuda.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"
#include "support.h"

/* ---- the fixed helpers ---- */

static const char HELPERS[] =
    "/* The chunked scan: new = a * prev + b over t (forward), dtotal[t] = g[t] + conj(a[t+1])\n"
    " * dtotal[t+1] (reverse; the last step adds dfinal, stored after the last rows), per channel\n"
    " * ch = b * size + j. Three launches: the chunks' compositions (A, V), the carries across the\n"
    " * chunks in order, then each chunk again from its carry-in. Complex states pair parts 0/1. */\n"
    "struct CellcScan {\n"
    "  const float *a0, *a1, *b0, *b1;\n"
    "  long long lda0, lda1, ldb0, ldb1;\n"
    "  float *s0, *s1;\n"
    "  float *carry;\n"
    "  long long T;\n"
    "  int B, size, L, nchunks, cplx, reverse;\n"
    "};\n"
    "\n"
    "__device__ __forceinline__ float2 cellc_cmul(float2 a, float2 b) {\n"
    "  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);\n"
    "}\n"
    "\n"
    "/* The multiplier of step t: a[t] forward; conj(a[t + 1]) reverse, 1 at the last step. */\n"
    "__device__ __forceinline__ float2 cellc_scan_mult(const CellcScan *s, long long t, int b, int j) {\n"
    "  if (s->reverse) {\n"
    "    if (t == s->T - 1) return make_float2(1.0f, 0.0f);\n"
    "    long long r = (t + 1) * s->B + b;\n"
    "    return make_float2(s->a0[r * s->lda0 + j], s->cplx ? -s->a1[r * s->lda1 + j] : 0.0f);\n"
    "  }\n"
    "  long long r = t * s->B + b;\n"
    "  return make_float2(s->a0[r * s->lda0 + j], s->cplx ? s->a1[r * s->lda1 + j] : 0.0f);\n"
    "}\n"
    "\n"
    "/* The additive term of step t: b[t] forward, g[t] reverse. */\n"
    "__device__ __forceinline__ float2 cellc_scan_add(const CellcScan *s, long long t, int b, int j) {\n"
    "  long long r = t * s->B + b;\n"
    "  return make_float2(s->b0[r * s->ldb0 + j], s->cplx ? s->b1[r * s->ldb1 + j] : 0.0f);\n"
    "}\n"
    "\n"
    "/* Phase 1, per (channel, chunk): the chunk as one map h -> A h + V. */\n"
    "extern \"C\" __global__ void cellc_scan_chunks(CellcScan s) {\n"
    "  long long nch = (long long)s.B * s.size;\n"
    "  long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (ch >= nch) return;\n"
    "  int b = (int)(ch / s.size), j = (int)(ch % s.size);\n"
    "  long long t0 = (long long)blockIdx.y * s.L, t1 = t0 + s.L < s.T ? t0 + s.L : s.T;\n"
    "  float2 A = make_float2(1.0f, 0.0f), V = make_float2(0.0f, 0.0f);\n"
    "  for (long long i = 0; i < t1 - t0; i++) {\n"
    "    long long t = s.reverse ? t1 - 1 - i : t0 + i;\n"
    "    float2 m = cellc_scan_mult(&s, t, b, j), v = cellc_scan_add(&s, t, b, j);\n"
    "    A = cellc_cmul(m, A);\n"
    "    V = cellc_cmul(m, V);\n"
    "    V.x += v.x, V.y += v.y;\n"
    "  }\n"
    "  float *o = s.carry + ((long long)blockIdx.y * nch + ch) * 6;\n"
    "  o[0] = A.x, o[1] = A.y, o[2] = V.x, o[3] = V.y;\n"
    "}\n"
    "\n"
    "/* Phase 2, per channel: the carry into each chunk, from h0 (forward) or dfinal (reverse). */\n"
    "extern \"C\" __global__ void cellc_scan_carry(CellcScan s) {\n"
    "  long long nch = (long long)s.B * s.size;\n"
    "  long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (ch >= nch) return;\n"
    "  long long at = s.reverse ? s.T * nch + ch : ch;\n"
    "  float2 h = make_float2(s.s0[at], s.cplx ? s.s1[at] : 0.0f);\n"
    "  for (int k = 0; k < s.nchunks; k++) {\n"
    "    int c = s.reverse ? s.nchunks - 1 - k : k;\n"
    "    float *o = s.carry + ((long long)c * nch + ch) * 6;\n"
    "    o[4] = h.x, o[5] = h.y;\n"
    "    float2 A = make_float2(o[0], o[1]);\n"
    "    h = cellc_cmul(A, h);\n"
    "    h.x += o[2], h.y += o[3];\n"
    "  }\n"
    "}\n"
    "\n"
    "/* Phase 3, per (channel, chunk): the chunk's steps from its carry-in, written out. */\n"
    "extern \"C\" __global__ void cellc_scan_apply(CellcScan s) {\n"
    "  long long nch = (long long)s.B * s.size;\n"
    "  long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (ch >= nch) return;\n"
    "  int b = (int)(ch / s.size), j = (int)(ch % s.size);\n"
    "  long long t0 = (long long)blockIdx.y * s.L, t1 = t0 + s.L < s.T ? t0 + s.L : s.T;\n"
    "  const float *o = s.carry + ((long long)blockIdx.y * nch + ch) * 6;\n"
    "  float2 h = make_float2(o[4], o[5]);\n"
    "  for (long long i = 0; i < t1 - t0; i++) {\n"
    "    long long t = s.reverse ? t1 - 1 - i : t0 + i;\n"
    "    float2 m = cellc_scan_mult(&s, t, b, j), v = cellc_scan_add(&s, t, b, j);\n"
    "    h = cellc_cmul(m, h);\n"
    "    h.x += v.x, h.y += v.y;\n"
    "    long long row = s.reverse ? t * s.B + b : (t + 1) * s.B + b;\n"
    "    s.s0[row * s.size + j] = h.x;\n"
    "    if (s.cplx) s.s1[row * s.size + j] = h.y;\n"
    "  }\n"
    "}\n"
    "\n"
    "/* dst[r, j] = src[r, j] for rows [0, rows), j < e (row strides lds, ldd). */\n"
    "extern \"C\" __global__ void cellc_copy(long long rows, int e, const float *src, long long lds, float *dst,\n"
    "                                      long long ldd) {\n"
    "  long long n = rows * e;\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
    "    long long r = i / e;\n"
    "    int j = (int)(i % e);\n"
    "    dst[r * ldd + j] = src[r * lds + j];\n"
    "  }\n"
    "}\n"
    "\n"
    "/* dst[r, j] = k for rows [0, rows), j < e. */\n"
    "extern \"C\" __global__ void cellc_fill(long long rows, int e, float k, float *dst, long long ldd) {\n"
    "  long long n = rows * e;\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
    "    dst[(i / e) * ldd + (int)(i % e)] = k;\n"
    "}\n"
    "\n"
    "/* acc[j] += k for j < n. */\n"
    "extern \"C\" __global__ void cellc_add_const(int n, float k, float *acc) {\n"
    "  int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (j < n) acc[j] += k;\n"
    "}\n";

/* ---- one elementwise kernel ---- */

typedef struct Emit {
  const Plan *pl;
  Graph *g;
  FILE *f;
  int *tmp_off;        /* per node: its offset in the warp's temporaries, or -1 */
  char *err;
  size_t errlen;
} Emit;

/* A float literal the CUDA and host compilers read alike. */
static void print_const(FILE *f, double k) {
  CHECK(isfinite(k));
  fprintf(f, "(%.9ef)", (double)(float)k);
}

/* The element at index expression `ix` of node id's value at row r: its home, its temporary or
 * its constant. */
static void print_at(Emit *e, int id, const char *ix) {
  Node *n = graph_node(e->g, id);
  int h = e->pl->home[id];
  if (h >= 0) {
    int width = e->pl->arrays[e->pl->slots[h].array].width;
    if (width) fprintf(e->f, "bases[%d][r * %d + (%s)]", h, width, ix);
    else fprintf(e->f, "bases[%d][%s]", h, ix);
  } else if (n->op == OP_CONST) print_const(e->f, n->k);
  else {
    CHECK(e->tmp_off[id] >= 0);
    fprintf(e->f, "t[%d + (%s)]", e->tmp_off[id], ix);
  }
}

/* for (j = lane; j < count; j += 32) */
static void print_lane_loop(Emit *e, const char *var, int count) {
  fprintf(e->f, "    CELLC_NO_UNROLL for (int %s = lane; %s < %d; %s += 32) ", var, var, count, var);
}

static int emit_node(Emit *e, int id) {
  Graph *g = e->g;
  Node *n = graph_node(g, id);
  FILE *f = e->f;
  int numel = node_numel(n);
  int a = n->a[0], b = n->a[1];
  fprintf(f, "    /* %%%d = %s [%d] */\n", id, op_name(n->op), numel);
  switch (n->op) {
  case OP_BCAST:
    fprintf(f, "    {\n      const float a = ");
    print_at(e, a, "0");
    fprintf(f, ";\n  ");
    print_lane_loop(e, "j", numel);
    print_at(e, id, "j");
    fprintf(f, " = a;\n    }\n");
    break;
  case OP_SUM: {
    int na = node_numel(graph_node(g, a));
    fprintf(f, "    {\n      float acc = 0.0f;\n  ");
    print_lane_loop(e, "j", na);
    fprintf(f, "acc += ");
    print_at(e, a, "j");
    fprintf(f, ";\n      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(CELLC_FULL_MASK, acc, o);\n");
    fprintf(f, "      if (lane == 0) ");
    print_at(e, id, "0");
    fprintf(f, " = acc;\n    }\n");
    break;
  }
  case OP_CONCAT: {
    int na = node_numel(graph_node(g, a));
    char ib[64];
    snprintf(ib, sizeof ib, "j - %d", na);
    print_lane_loop(e, "j", numel);
    print_at(e, id, "j");
    fprintf(f, " = j < %d ? ", na);
    print_at(e, a, "j");
    fprintf(f, " : ");
    print_at(e, b, ib);
    fprintf(f, ";\n");
    break;
  }
  case OP_SLICE: {
    char ix[64];
    snprintf(ix, sizeof ix, "j + %d", n->idx);
    print_lane_loop(e, "j", numel);
    print_at(e, id, "j");
    fprintf(f, " = ");
    print_at(e, a, ix);
    fprintf(f, ";\n");
    break;
  }
  case OP_MATVEC:
  case OP_MATVEC_T: {
    Node *m = graph_node(g, a);
    int O = m->n[0], I = m->n[1];
    bool tr = n->op == OP_MATVEC_T;
    print_lane_loop(e, "o", tr ? I : O);
    fprintf(f, "{\n      float acc = 0.0f;\n      for (int i = 0; i < %d; i++) acc += ", tr ? O : I);
    char im[64];
    snprintf(im, sizeof im, tr ? "i * %d + o" : "o * %d + i", I);
    print_at(e, a, im);
    fprintf(f, " * ");
    print_at(e, b, "i");
    fprintf(f, ";\n      ");
    print_at(e, id, "o");
    fprintf(f, " = acc;\n    }\n");
    break;
  }
  case OP_OUTER: {
    char ia[64], ib[64];
    snprintf(ia, sizeof ia, "j / %d", n->n[1]);
    snprintf(ib, sizeof ib, "j %% %d", n->n[1]);
    print_lane_loop(e, "j", numel);
    print_at(e, id, "j");
    fprintf(f, " = ");
    print_at(e, a, ia);
    fprintf(f, " * ");
    print_at(e, b, ib);
    fprintf(f, ";\n");
    break;
  }
  case OP_VIEW:
  case OP_VIEWT: {
    /* view element j at source index idx + sum_d c_d st[d]; VIEWT scatters (injective: no lane
     * writes another's place), after zeroing */
    bool scatter = n->op == OP_VIEWT;
    Node *v = scatter ? graph_node(g, a) : n;
    int vn[MAX_RANK] = {1, 1, 1}, st[MAX_RANK] = {0, 0, 0};
    for (int d = 0; d < v->rank; d++) vn[MAX_RANK - v->rank + d] = v->n[d], st[MAX_RANK - v->rank + d] = n->st[d];
    if (scatter) {
      print_lane_loop(e, "j", numel);
      print_at(e, id, "j");
      fprintf(f, " = 0.0f;\n    __syncwarp();\n");
    }
    print_lane_loop(e, "j", node_numel(v));
    fprintf(f, "{\n      const int k = %d + (j / %d) * %d + (j / %d %% %d) * %d + (j %% %d) * %d;\n      ", n->idx,
            vn[1] * vn[2], st[0], vn[2], vn[1], st[1], vn[2], st[2]);
    print_at(e, id, scatter ? "k" : "j");
    fprintf(f, " = ");
    print_at(e, a, scatter ? "j" : "k");
    fprintf(f, ";\n    }\n");
    break;
  }
  case OP_RSUM:
  case OP_RMAX: {
    /* a as [outer, len, inner]: a lane an output, the axis in order (as the interpreter) */
    Node *x = graph_node(g, a);
    int inner = 1, len = x->n[n->idx];
    for (int d = n->idx + 1; d < x->rank; d++) inner *= x->n[d];
    char ix[96];
    print_lane_loop(e, "o", numel);
    fprintf(f, "{\n      const int base = (o / %d) * %d + o %% %d;\n      float acc = ", inner, len * inner, inner);
    print_at(e, a, "base");
    fprintf(f, ";\n      for (int l = 1; l < %d; l++) {\n        const float v = ", len);
    snprintf(ix, sizeof ix, "base + l * %d", inner);
    print_at(e, a, ix);
    fprintf(f, ";\n        acc = %s;\n      }\n      ", n->op == OP_RSUM ? "acc + v" : "v > acc ? v : acc");
    print_at(e, id, "o");
    fprintf(f, " = acc;\n    }\n");
    break;
  }
  case OP_BMM: {
    /* a lane an output (bb, i, j): sum over l of A[bb, i, l] B[bb, l, j], in l order */
    Node *x = graph_node(g, a);
    int m = n->n[1], k = x->n[2], nn = n->n[2];
    char ia[96], ib[96];
    print_lane_loop(e, "o", numel);
    fprintf(f, "{\n      const int bi = o / %d, jj = o %% %d, bb = bi / %d;\n      float acc = 0.0f;\n", nn, nn, m);
    fprintf(f, "      for (int l = 0; l < %d; l++) acc += ", k);
    snprintf(ia, sizeof ia, "bi * %d + l", k);
    snprintf(ib, sizeof ib, "bb * %d + l * %d + jj", k * nn, nn);
    print_at(e, a, ia);
    fprintf(f, " * ");
    print_at(e, b, ib);
    fprintf(f, ";\n      ");
    print_at(e, id, "o");
    fprintf(f, " = acc;\n    }\n");
    break;
  }
  default:
    if (!op_is_elementwise(n->op)) {
      snprintf(e->err, e->errlen, "the cuda back end cannot put a %s node (%%%d) in a kernel", op_name(n->op), id);
      return -1;
    }
    print_lane_loop(e, "j", numel);
    fprintf(f, "{\n      const float a = ");
    print_at(e, a, "j");
    fprintf(f, ";\n");
    if (op_arity(n->op) > 1) {
      fprintf(f, "      const float b = ");
      print_at(e, b, "j");
      fprintf(f, ";\n");
    }
    char *expr = op_c_expr(n->op, "a", "b", true);
    fprintf(f, "      ");
    print_at(e, id, "j");
    fprintf(f, " = %s;\n    }\n", expr);
    free(expr);
  }
  fprintf(f, "    __syncwarp();\n");
  return 0;
}

/* One kernel over rows [r0, r1) computing nodes[0..n) in order. *tmp_floats: the temporaries a
 * row needs. */
/* The temporaries of nodes[0..n): offsets into the warp's slice; their floats, or -1 with a
 * message when they do not fit in shared memory. */
static int place_temporaries(Emit *e, const char *name, const int *nodes, int n) {
  Graph *g = e->g;
  int tmp = 0;
  for (int i = 0; i < g->nnodes; i++) e->tmp_off[i] = -1;
  for (int i = 0; i < n; i++) {
    int id = nodes[i];
    if (e->pl->home[id] < 0 && graph_node(g, id)->op != OP_CONST && e->tmp_off[id] < 0) {
      e->tmp_off[id] = tmp;
      tmp += node_numel(graph_node(g, id));
    }
  }
  if (tmp > CG_CUDA_MAX_TMP_FLOATS) {
    snprintf(e->err, e->errlen,
             "kernel %s: its rows need %d floats of temporaries, more than the %d of a block's shared memory", name,
             tmp, CG_CUDA_MAX_TMP_FLOATS);
    return -1;
  }
  return tmp;
}

static int emit_kernel(Emit *e, const char *name, const int *nodes, int n, int *tmp_floats) {
  FILE *f = e->f;
  int tmp = place_temporaries(e, name, nodes, n);
  if (tmp < 0) return -1;
  *tmp_floats = tmp;
  fprintf(f, "extern \"C\" __global__ void __launch_bounds__(%d) %s(long long r0, long long r1, float *const *bases) {\n",
          32 * CG_CUDA_WARPS, name);
  fprintf(f, "  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;\n");
  if (tmp) {
    fprintf(f, "  CELLC_DYNAMIC_SHARED(float, cellc_shared);\n");
    fprintf(f, "  float *const t = cellc_shared + (threadIdx.x >> 5) * %d;\n", tmp);
  }
  fprintf(f, "  for (long long r = r0 + (long long)blockIdx.x * warps + (threadIdx.x >> 5); r < r1;\n");
  fprintf(f, "       r += (long long)gridDim.x * warps) {\n");
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) rc = emit_node(e, nodes[i]);
  fprintf(f, "  }\n}\n\n");
  return rc;
}

/* ---- the persistent step kernels (sequential mode) ---- */

/* Whether every step of a per-step phase can run inside the persistent kernel. */
static bool step_phase_ok(const Phase *ph) {
  for (int i = 0; i < ph->n; i++) {
    PStepKind k = ph->steps[i].kind;
    if (k != PS_ELEM && k != PS_GEMM && k != PS_GEMM_T && k != PS_COPY && k != PS_ZERO) return false;
  }
  return ph->n > 0;
}

/* The element ix of slot h at row r, as C source into buf. */
static void slot_at(const Plan *pl, char *buf, size_t n, int h, const char *ix) {
  int width = pl->arrays[pl->slots[h].array].width;
  if (width) snprintf(buf, n, "bases[%d][r * %d + (%s)]", h, width, ix);
  else snprintf(buf, n, "bases[%d][%s]", h, ix);
}

/* One plan step of a per-step phase for the block's row r, by the whole block, then a barrier.
 * GEMM: a warp an output, lanes over the inner dimension (coalesced rows of M), a shuffle sum;
 * GEMM_T: a thread an output, the loop over M's rows (coalesced across threads); the elementwise
 * kernel: warp 0, as in k<i>. */
static int emit_step(Emit *e, const PStep *st, int *tmp_max) {
  const Plan *pl = e->pl;
  Graph *g = e->g;
  FILE *f = e->f;
  char y[160], v[160], m[160];
  switch (st->kind) {
  case PS_GEMM:
  case PS_GEMM_T: {
    GemmOperands op = plan_gemm_operands(pl, st);
    int hy = op.y, hv = op.v, hm = op.m, nO = op.nO, nI = op.nI;
    const char *acc = st->accumulate ? " + " : "";
    if (st->kind == PS_GEMM) {
      fprintf(f, "    /* %%%d: gemm [%d x %d] */\n", st->node, nO, nI);
      slot_at(pl, v, sizeof v, hv, "i");
      slot_at(pl, y, sizeof y, hy, "o");
      snprintf(m, sizeof m, "bases[%d][o * %d + i]", hm, nI);
      fprintf(f, "    CELLC_NO_UNROLL for (int o = threadIdx.x >> 5; o < %d; o += blockDim.x >> 5) {\n", nO);
      fprintf(f, "      float acc = 0.0f;\n");
      fprintf(f, "      CELLC_UNROLL4 for (int i = lane; i < %d; i += 32) acc += %s * %s;\n", nI, m, v);
      fprintf(f, "      for (int k = 16; k > 0; k >>= 1) acc += __shfl_xor_sync(CELLC_FULL_MASK, acc, k);\n");
      fprintf(f, "      if (lane == 0) %s = %s%sacc;\n", y, st->accumulate ? y : "", acc);
      fprintf(f, "    }\n");
    } else {
      fprintf(f, "    /* %%%d: gemm_t [%d x %d]^T */\n", st->node, nO, nI);
      slot_at(pl, v, sizeof v, hv, "o");
      slot_at(pl, y, sizeof y, hy, "i");
      snprintf(m, sizeof m, "bases[%d][o * %d + i]", hm, nI);
      fprintf(f, "    CELLC_NO_UNROLL for (int i = threadIdx.x; i < %d; i += blockDim.x) {\n", nI);
      fprintf(f, "      float acc = 0.0f;\n");
      fprintf(f, "      CELLC_UNROLL4 for (int o = 0; o < %d; o++) acc += %s * %s;\n", nO, m, v);
      fprintf(f, "      %s = %s%sacc;\n", y, st->accumulate ? y : "", acc);
      fprintf(f, "    }\n");
    }
    break;
  }
  case PS_COPY: {
    Node *n = graph_node(g, st->node);
    int h = pl->home[st->node];
    slot_at(pl, y, sizeof y, st->dst, "j");
    fprintf(f, "    /* copy %%%d */\n", st->node);
    fprintf(f, "    for (int j = threadIdx.x; j < %d; j += blockDim.x) %s = ", node_numel(n), y);
    if (h < 0) {
      CHECK(n->op == OP_CONST);
      print_const(f, n->k);
    } else {
      slot_at(pl, v, sizeof v, h, "j");
      fputs(v, f);
    }
    fprintf(f, ";\n");
    break;
  }
  case PS_ZERO:
    slot_at(pl, y, sizeof y, st->dst, "j");
    fprintf(f, "    for (int j = threadIdx.x; j < %d; j += blockDim.x) %s = 0.0f;\n",
            pl->arrays[pl->slots[st->dst].array].width, y);
    break;
  case PS_ELEM: {
    const Kernel *K = &pl->kernels[st->kernel];
    char name[32];
    snprintf(name, sizeof name, "k%d", st->kernel);
    int tmp = place_temporaries(e, name, K->nodes, K->n);
    if (tmp < 0) return -1;
    if (tmp > *tmp_max) *tmp_max = tmp;
    fprintf(f, "    /* k%d */\n    if (threadIdx.x < 32) {\n", st->kernel);
    for (int i = 0; i < K->n; i++)
      if (emit_node(e, K->nodes[i])) return -1;
    fprintf(f, "    }\n");
    break;
  }
  default: UNREACHABLE("persistent step");
  }
  fprintf(f, "    __syncthreads();\n");
  return 0;
}

/* A per-step phase over all T steps in one launch: a block a batch row (the rows of different
 * batch rows never meet inside a step), steps in order (reverse for the backward), the phase's
 * steps in order inside each with a barrier between them. */
static int emit_step_kernel(Emit *e, const char *name, const Phase *ph, bool reverse, int *tmp_floats) {
  FILE *f = e->f;
  fprintf(f, "extern \"C\" __global__ void __launch_bounds__(%d) %s(long long T, int B, float *const *bases) {\n",
          32 * CG_CUDA_WARPS, name);
  fprintf(f, "  const int lane = threadIdx.x & 31;\n");
  fprintf(f, "  CELLC_DYNAMIC_SHARED(float, cellc_shared);\n");
  fprintf(f, "  float *const t = cellc_shared;\n");
  fprintf(f, "  (void)t;\n");
  fprintf(f, "  for (long long s = 0; s < T; s++) {\n");
  fprintf(f, "    const long long r = (%s) * B + blockIdx.x;\n", reverse ? "T - 1 - s" : "s");
  *tmp_floats = 0;
  for (int i = 0; i < ph->n; i++)
    if (emit_step(e, &ph->steps[i], tmp_floats)) return -1;
  fprintf(f, "  }\n}\n\n");
  return 0;
}

char *cg_cuda_source(const Plan *pl, CgCudaInfo *info, char *err, size_t errlen) {
  Program *p = pl->p;
  Graph *g = &p->g;
  memset(info, 0, sizeof *info);
  info->nkernels = pl->nkernels;
  info->tmp_floats = xcalloc((size_t)pl->nkernels + 1, sizeof(int));
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  Emit e = {pl, g, f, xmalloc(sizeof(int) * (size_t)g->nnodes), err, errlen};
  fprintf(f, "#include \"cellc_prelude.h\"\n\n");
  fprintf(f, "/* Elementwise kernels: a warp a row, lanes over a node's elements. bases[i]: slot i's row 0\n"
             " * (read where used: held in registers across the kernel they would spill); t: the warp's\n"
             " * temporaries. */\n\n");
  int rc = 0;
  for (int k = 0; k < pl->nkernels && rc == 0; k++) {
    char name[32];
    snprintf(name, sizeof name, "k%d", k);
    rc = emit_kernel(&e, name, pl->kernels[k].nodes, pl->kernels[k].n, &info->tmp_floats[k]);
  }
  /* the static values: params-only nodes, before the forward and after the backward's sums */
  int *nodes = xmalloc(sizeof(int) * (size_t)g->nnodes + 1);
  for (int which = 0; which < 2 && rc == 0; which++) {
    const bool *sel = which ? pl->static_bwd : pl->static_fwd;
    int n = 0;
    for (int id = 0; id < g->nnodes; id++) {
      Op op = graph_node(g, id)->op;
      if (sel[id] && op != OP_PARAM && op != OP_ACC && op != OP_CONST) nodes[n++] = id;
    }
    if (!n) continue;
    info->has_static[which] = true;
    rc = emit_kernel(&e, which ? "kstatic_bwd" : "kstatic_fwd", nodes, n, &info->static_tmp[which]);
  }
  free(nodes);
  /* sequential mode: each per-step phase as one persistent kernel */
  const Phase *steps[2] = {&pl->fwd_step, &pl->bwd_step};
  for (int which = 0; which < 2 && rc == 0; which++) {
    if (!step_phase_ok(steps[which])) continue;
    info->has_step[which] = true;
    rc = emit_step_kernel(&e, which ? "kstep_bwd" : "kstep_fwd", steps[which], which == 1, &info->step_tmp[which]);
  }
  fputs(HELPERS, f);
  fclose(f);
  free(e.tmp_off);
  if (rc) {
    free(text);
    cg_cuda_info_free(info);
    return NULL;
  }
  return text;
}

void cg_cuda_info_free(CgCudaInfo *info) {
  free(info->tmp_floats);
  memset(info, 0, sizeof *info);
}
