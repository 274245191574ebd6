/* cg_llvm.c: fused elementwise kernels as LLVM IR. A kernel is
 *   void kN(i64 r0, i64 r1, float **bases)
 * looping over rows; per row it computes its nodes in order, each one over
 * its elements in vectors of 16 floats (JIT code on a CPU with AVX-512) or 8
 * (otherwise, and in emitted objects) with a scalar tail, reading arguments from
 * arrays (row r of a slot is bases[slot] + r * width) or row-local
 * temporaries. exp, log, tanh, sigmoid and erf are polynomial, so they
 * vectorize; the rare per-row sin and cos call libm per lane. */
#include "cg_llvm.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <math.h>
#include <string.h>

#include "support.h"


#define VW_MAX 16 /* the widest vectors, in floats */

typedef struct Cg {
  int vw; /* vector width in floats: 8, or 16 for JIT code on a CPU with AVX-512 */
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef f32, v8, i32, vi32, i64, fptr, vptr, fpp;
  LLVMValueRef fn;
  const Plan *pl;
  Graph *g;
  LLVMValueRef *rowp;   /* per node: row pointer of its values in this row (float*) */
  LLVMValueRef *basep;  /* per slot: loaded base pointer */
} Cg;

typedef struct Jit {
  LLVMOrcLLJITRef jit;
  LLVMOrcThreadSafeContextRef tsctx;
} Jit;

/* ---- small IR helpers ---- */

static LLVMValueRef kf(Cg *cg, LLVMTypeRef ty, double v) {
  LLVMValueRef c = LLVMConstReal(cg->f32, v);
  if (ty == cg->f32) return c;
  LLVMValueRef lanes[VW_MAX];
  for (int i = 0; i < cg->vw; i++) lanes[i] = c;
  return LLVMConstVector(lanes, (unsigned)cg->vw);
}

static LLVMValueRef ki(Cg *cg, LLVMTypeRef fty, long v) {
  LLVMValueRef c = LLVMConstInt(cg->i32, (unsigned long long)v, 1);
  if (fty == cg->f32) return c;
  LLVMValueRef lanes[VW_MAX];
  for (int i = 0; i < cg->vw; i++) lanes[i] = c;
  return LLVMConstVector(lanes, (unsigned)cg->vw);
}

static LLVMTypeRef ity(Cg *cg, LLVMTypeRef fty) { return fty == cg->f32 ? cg->i32 : cg->vi32; }

static LLVMValueRef intrinsic(Cg *cg, const char *name, LLVMTypeRef ty, LLVMValueRef *args, int nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  CHECK(id != 0);
  LLVMTypeRef tys[1] = {ty};
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, tys, 1);
  LLVMTypeRef fty = LLVMIntrinsicGetType(cg->ctx, id, tys, 1);
  return LLVMBuildCall2(cg->b, fty, f, args, (unsigned)nargs, "");
}

static LLVMValueRef un_intr(Cg *cg, const char *name, LLVMValueRef x) {
  return intrinsic(cg, name, LLVMTypeOf(x), &x, 1);
}

#define FADD(x_, y_) LLVMBuildFAdd(cg->b, x_, y_, "")
#define FSUB(x_, y_) LLVMBuildFSub(cg->b, x_, y_, "")
#define FMUL(x_, y_) LLVMBuildFMul(cg->b, x_, y_, "")
#define FDIV(x_, y_) LLVMBuildFDiv(cg->b, x_, y_, "")
#define SEL(c_, x_, y_) LLVMBuildSelect(cg->b, c_, x_, y_, "")
#define FCMP(p_, x_, y_) LLVMBuildFCmp(cg->b, p_, x_, y_, "")

/* a b + c, fused where the target has FMA (llvm.fmuladd): the polynomials of exp, log, tanh and
 * erf and exp's range reduction, one instruction a term instead of two. An LSTM's forward kernel
 * at H = 256: 33-36 to 28-32 ms per 32768 rows (docs/performance.md, fifth session). */
static LLVMValueRef fmuladd(Cg *cg, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return intrinsic(cg, "llvm.fmuladd", LLVMTypeOf(a), args, 3);
}

static LLVMValueRef poly(Cg *cg, LLVMValueRef x, const double *c, int n) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef y = kf(cg, ty, c[0]);
  for (int i = 1; i < n; i++) y = fmuladd(cg, y, x, kf(cg, ty, c[i]));
  return y;
}

static LLVMValueRef fmin_(Cg *cg, LLVMValueRef a, LLVMValueRef b) { return SEL(FCMP(LLVMRealOLE, a, b), a, b); }
static LLVMValueRef fmax_(Cg *cg, LLVMValueRef a, LLVMValueRef b) { return SEL(FCMP(LLVMRealOGE, a, b), a, b); }

/* exp: Cody-Waite reduction by ln 2 and a degree-6 polynomial (Cephes expf). */
static LLVMValueRef v_exp(Cg *cg, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef xc = fmin_(cg, fmax_(cg, x, kf(cg, ty, -87.3)), kf(cg, ty, 88.3));
  LLVMValueRef n = un_intr(cg, "llvm.floor", fmuladd(cg, xc, kf(cg, ty, 1.44269504088896341), kf(cg, ty, 0.5)));
  LLVMValueRef r = fmuladd(cg, n, kf(cg, ty, -0.693359375), xc);
  r = fmuladd(cg, n, kf(cg, ty, 2.12194440e-4), r);
  static const double c[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMValueRef p = poly(cg, r, c, 6);
  p = FADD(fmuladd(cg, p, FMUL(r, r), r), kf(cg, ty, 1.0));
  LLVMValueRef ni = LLVMBuildFPToSI(cg->b, n, ity(cg, ty), "");
  LLVMValueRef bits = LLVMBuildShl(cg->b, LLVMBuildAdd(cg->b, ni, ki(cg, ty, 127), ""), ki(cg, ty, 23), "");
  LLVMValueRef scale = LLVMBuildBitCast(cg->b, bits, ty, "");
  LLVMValueRef y = FMUL(p, scale);
  /* beyond the clamp: 0 below, inf above; NaN stays NaN */
  y = SEL(FCMP(LLVMRealOLT, x, kf(cg, ty, -87.3)), kf(cg, ty, 0), y);
  y = SEL(FCMP(LLVMRealOGT, x, kf(cg, ty, 88.3)), kf(cg, ty, INFINITY), y);
  return SEL(FCMP(LLVMRealUNO, x, x), x, y);
}

/* log: exponent and mantissa from the bits, a degree-8 polynomial (Cephes logf). */
static LLVMValueRef v_log(Cg *cg, LLVMValueRef x0) {
  LLVMTypeRef ty = LLVMTypeOf(x0), it = ity(cg, ty);
  /* a subnormal input has no implicit leading bit: scale it by 2^23 into the normal range and
   * take 23 off the exponent */
  LLVMValueRef sub = FCMP(LLVMRealOLT, x0, kf(cg, ty, 1.17549435e-38));
  LLVMValueRef x = SEL(sub, FMUL(x0, kf(cg, ty, 8388608.0)), x0);
  LLVMValueRef bits = LLVMBuildBitCast(cg->b, x, it, "");
  LLVMValueRef e = LLVMBuildSub(cg->b, LLVMBuildLShr(cg->b, bits, ki(cg, ty, 23), ""), ki(cg, ty, 126), "");
  e = SEL(sub, LLVMBuildSub(cg->b, e, ki(cg, ty, 23), ""), e);
  LLVMValueRef mb = LLVMBuildOr(cg->b, LLVMBuildAnd(cg->b, bits, ki(cg, ty, 0x007fffff), ""), ki(cg, ty, 0x3f000000), "");
  LLVMValueRef m = LLVMBuildBitCast(cg->b, mb, ty, "");
  LLVMValueRef ef = LLVMBuildSIToFP(cg->b, e, ty, "");
  LLVMValueRef small = FCMP(LLVMRealOLT, m, kf(cg, ty, 0.707106781186547524));
  ef = SEL(small, FSUB(ef, kf(cg, ty, 1)), ef);
  m = SEL(small, FSUB(FADD(m, m), kf(cg, ty, 1)), FSUB(m, kf(cg, ty, 1)));
  LLVMValueRef z = FMUL(m, m);
  static const double c[] = {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
                             -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1};
  LLVMValueRef y = FMUL(FMUL(poly(cg, m, c, 9), m), z);
  y = FADD(y, FMUL(ef, kf(cg, ty, -2.12194440e-4)));
  y = FSUB(y, FMUL(z, kf(cg, ty, 0.5)));
  LLVMValueRef r = FADD(FADD(m, y), FMUL(ef, kf(cg, ty, 0.693359375)));
  r = SEL(FCMP(LLVMRealOEQ, x, kf(cg, ty, 0)), kf(cg, ty, -INFINITY), r);
  r = SEL(FCMP(LLVMRealOEQ, x, kf(cg, ty, INFINITY)), x, r);
  r = SEL(FCMP(LLVMRealULT, x, kf(cg, ty, 0)), kf(cg, ty, NAN), r);
  return r;
}

static LLVMValueRef v_sigmoid(Cg *cg, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  return FDIV(kf(cg, ty, 1), FADD(kf(cg, ty, 1), v_exp(cg, LLVMBuildFNeg(cg->b, x, ""))));
}

static LLVMValueRef v_tanh(Cg *cg, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ax = un_intr(cg, "llvm.fabs", x);
  LLVMValueRef z = FMUL(x, x);
  static const double c[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2, 1.33314422036E-1, -3.33332819422E-1};
  LLVMValueRef small = FADD(FMUL(FMUL(poly(cg, z, c, 5), z), x), x);
  LLVMValueRef s = v_exp(cg, FMUL(ax, kf(cg, ty, 2)));
  LLVMValueRef big = FSUB(kf(cg, ty, 1), FDIV(kf(cg, ty, 2), FADD(s, kf(cg, ty, 1))));
  LLVMValueRef neg = FCMP(LLVMRealOLT, x, kf(cg, ty, 0));
  big = SEL(neg, LLVMBuildFNeg(cg->b, big, ""), big);
  return SEL(FCMP(LLVMRealOLT, ax, kf(cg, ty, 0.625)), small, big);
}

/* softplus(x) = max(x, 0) + log(1 + exp(-|x|)) */
static LLVMValueRef v_softplus(Cg *cg, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef e = v_exp(cg, LLVMBuildFNeg(cg->b, un_intr(cg, "llvm.fabs", x), ""));
  /* log(1 + e) for small e loses nothing that matters at float precision: e - e^2/2 below 1e-4 */
  LLVMValueRef l = v_log(cg, FADD(kf(cg, ty, 1), e));
  l = SEL(FCMP(LLVMRealOLT, e, kf(cg, ty, 1e-4)), FSUB(e, FMUL(FMUL(e, e), kf(cg, ty, 0.5))), l);
  return FADD(fmax_(cg, x, kf(cg, ty, 0)), l);
}

/* erf: Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7) */
static LLVMValueRef v_erf(Cg *cg, LLVMValueRef x) {
  LLVMTypeRef ty = LLVMTypeOf(x);
  LLVMValueRef ax = un_intr(cg, "llvm.fabs", x);
  LLVMValueRef t = FDIV(kf(cg, ty, 1), FADD(kf(cg, ty, 1), FMUL(ax, kf(cg, ty, 0.3275911))));
  static const double c[] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592};
  LLVMValueRef p = FMUL(poly(cg, t, c, 5), t);
  LLVMValueRef y = FSUB(kf(cg, ty, 1), FMUL(p, v_exp(cg, LLVMBuildFNeg(cg->b, FMUL(x, x), ""))));
  return SEL(FCMP(LLVMRealOLT, x, kf(cg, ty, 0)), LLVMBuildFNeg(cg->b, y, ""), y);
}

/* sin, cos per lane through libm (they rarely vary per row: params make them static) */
static LLVMValueRef v_libm(Cg *cg, const char *name, LLVMValueRef x) {
  LLVMTypeRef fty = LLVMFunctionType(cg->f32, &cg->f32, 1, 0);
  LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
  if (!f) f = LLVMAddFunction(cg->mod, name, fty);
  if (LLVMTypeOf(x) == cg->f32) return LLVMBuildCall2(cg->b, fty, f, &x, 1, "");
  LLVMValueRef y = LLVMGetUndef(cg->v8);
  for (int i = 0; i < cg->vw; i++) {
    LLVMValueRef lane = LLVMConstInt(cg->i32, (unsigned long long)i, 0);
    LLVMValueRef e = LLVMBuildExtractElement(cg->b, x, lane, "");
    y = LLVMBuildInsertElement(cg->b, y, LLVMBuildCall2(cg->b, fty, f, &e, 1, ""), lane, "");
  }
  return y;
}

/* pow per lane through libm: a binary v_libm */
static LLVMValueRef v_libm2(Cg *cg, const char *name, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef args[2] = {cg->f32, cg->f32};
  LLVMTypeRef fty = LLVMFunctionType(cg->f32, args, 2, 0);
  LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
  if (!f) f = LLVMAddFunction(cg->mod, name, fty);
  if (LLVMTypeOf(x) == cg->f32) {
    LLVMValueRef xy[2] = {x, y};
    return LLVMBuildCall2(cg->b, fty, f, xy, 2, "");
  }
  LLVMValueRef r = LLVMGetUndef(cg->v8);
  for (int i = 0; i < cg->vw; i++) {
    LLVMValueRef lane = LLVMConstInt(cg->i32, (unsigned long long)i, 0);
    LLVMValueRef xy[2] = {LLVMBuildExtractElement(cg->b, x, lane, ""), LLVMBuildExtractElement(cg->b, y, lane, "")};
    r = LLVMBuildInsertElement(cg->b, r, LLVMBuildCall2(cg->b, fty, f, xy, 2, ""), lane, "");
  }
  return r;
}

static LLVMValueRef b2f(Cg *cg, LLVMValueRef cond, LLVMTypeRef ty) {
  return SEL(cond, kf(cg, ty, 1), kf(cg, ty, 0));
}

/* ---- each elementwise op on scalars or 8-wide vectors: emit_<op>, keyed by the op table ---- */

typedef LLVMValueRef (*EmitFn)(Cg *cg, LLVMValueRef a, LLVMValueRef b);

#define EMIT(name, expr)                                                                 \
  static LLVMValueRef emit_##name(Cg *cg, LLVMValueRef a, LLVMValueRef b) {             \
    LLVMTypeRef ty = LLVMTypeOf(a);                                                      \
    (void)b, (void)ty;                                                                   \
    return expr;                                                                         \
  }
EMIT(NEG, LLVMBuildFNeg(cg->b, a, ""))
EMIT(ADD, FADD(a, b))
EMIT(SUB, FSUB(a, b))
EMIT(MUL, FMUL(a, b))
EMIT(DIV, FDIV(a, b))
EMIT(MIN, fmin_(cg, a, b))
EMIT(MAX, fmax_(cg, a, b))
EMIT(SIGMOID, v_sigmoid(cg, a))
EMIT(TANH, v_tanh(cg, a))
EMIT(RELU, SEL(FCMP(LLVMRealOGT, a, kf(cg, ty, 0)), a, kf(cg, ty, 0)))
EMIT(SILU, FMUL(a, v_sigmoid(cg, a)))
EMIT(GELU, FMUL(FMUL(a, kf(cg, ty, 0.5)), FADD(kf(cg, ty, 1), v_erf(cg, FMUL(a, kf(cg, ty, M_SQRT1_2))))))
EMIT(EXP, v_exp(cg, a))
EMIT(LOG, v_log(cg, a))
EMIT(SOFTPLUS, v_softplus(cg, a))
EMIT(LOGSIGMOID, LLVMBuildFNeg(cg->b, v_softplus(cg, LLVMBuildFNeg(cg->b, a, "")), ""))
EMIT(SQRT, un_intr(cg, "llvm.sqrt", a))
EMIT(ABS, un_intr(cg, "llvm.fabs", a))
EMIT(SQUARE, FMUL(a, a))
EMIT(SIN, v_libm(cg, "sinf", a))
EMIT(COS, v_libm(cg, "cosf", a))
EMIT(ERF, v_erf(cg, a))
EMIT(STEP, b2f(cg, FCMP(LLVMRealOGT, a, kf(cg, ty, 0)), ty))
EMIT(SIGN, FSUB(b2f(cg, FCMP(LLVMRealOGT, a, kf(cg, ty, 0)), ty), b2f(cg, FCMP(LLVMRealOLT, a, kf(cg, ty, 0)), ty)))
EMIT(LT, b2f(cg, FCMP(LLVMRealOLT, a, b), ty))
/* expm1 and log1p through libm: their point is accuracy near 0, which a polynomial of exp or
 * log would lose */
EMIT(EXPM1, v_libm(cg, "expm1f", a))
EMIT(LOG1P, v_libm(cg, "log1pf", a))
EMIT(POW, v_libm2(cg, "powf", a, b))
EMIT(MASK, SEL(FCMP(LLVMRealOGT, a, kf(cg, ty, 0)), b, kf(cg, ty, 0)))
#undef EMIT

/* every elementwise op of the table has its emit_<op> (a missing one fails the build) */
static const EmitFn emit_elementwise[OP_COUNT] = {
#define E(name, ...) [OP_##name] = emit_##name,
    GRAPH_OPS(OPS_SKIP, E)
#undef E
};

static LLVMValueRef emit_op(Cg *cg, Op op, LLVMValueRef a, LLVMValueRef b) {
  if (!op_is_elementwise(op)) UNREACHABLE(op_name(op));
  return emit_elementwise[op](cg, a, b);
}

/* ---- loads and stores ---- */

static LLVMValueRef elem_ptr(Cg *cg, LLVMValueRef base, LLVMValueRef j) {
  return LLVMBuildGEP2(cg->b, cg->f32, base, &j, 1, "");
}

static LLVMValueRef load_at(Cg *cg, LLVMValueRef base, LLVMValueRef j, bool vec) {
  LLVMValueRef p = elem_ptr(cg, base, j);
  if (!vec) return LLVMBuildLoad2(cg->b, cg->f32, p, "");
  LLVMValueRef vp = LLVMBuildBitCast(cg->b, p, cg->vptr, "");
  LLVMValueRef v = LLVMBuildLoad2(cg->b, cg->v8, vp, "");
  LLVMSetAlignment(v, 4);
  return v;
}

static void store_at(Cg *cg, LLVMValueRef base, LLVMValueRef j, LLVMValueRef v) {
  LLVMValueRef p = elem_ptr(cg, base, j);
  if (LLVMTypeOf(v) == cg->f32) {
    LLVMBuildStore(cg->b, v, p);
    return;
  }
  LLVMValueRef vp = LLVMBuildBitCast(cg->b, p, cg->vptr, "");
  LLVMValueRef st = LLVMBuildStore(cg->b, v, vp);
  LLVMSetAlignment(st, 4);
}

static LLVMValueRef splat(Cg *cg, LLVMValueRef s) {
  LLVMValueRef v = LLVMGetUndef(cg->v8);
  for (int i = 0; i < cg->vw; i++) v = LLVMBuildInsertElement(cg->b, v, s, LLVMConstInt(cg->i32, (unsigned long long)i, 0), "");
  return v;
}

/* Argument `id` at element offset j, as a scalar or a vector. */
static LLVMValueRef arg_at(Cg *cg, int id, LLVMValueRef j, bool vec) {
  Node *n = graph_node(cg->g, id);
  if (n->op == OP_CONST) return kf(cg, vec ? cg->v8 : cg->f32, n->k);
  CHECK(cg->rowp[id]);
  return load_at(cg, cg->rowp[id], j, vec);
}

/* A loop over j = 0, vw, 2 vw, ... < count vw: body(j) with j an i64. */
typedef void (*ChunkBody)(Cg *cg, int id, LLVMValueRef j, bool vec, void *ctx);

static void for_elements(Cg *cg, int id, int n, ChunkBody body, void *ctx) {
  int vw = cg->vw, chunks = n / vw;
  if (chunks == 1) body(cg, id, LLVMConstInt(cg->i64, 0, 0), true, ctx);
  else if (chunks > 1) {
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "chunk");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "chunk.done");
    LLVMBuildBr(cg->b, loop);
    LLVMPositionBuilderAtEnd(cg->b, loop);
    LLVMValueRef j = LLVMBuildPhi(cg->b, cg->i64, "j");
    body(cg, id, j, true, ctx);
    LLVMValueRef jn = LLVMBuildAdd(cg->b, j, LLVMConstInt(cg->i64, (unsigned long long)vw, 0), "");
    LLVMBasicBlockRef end = LLVMGetInsertBlock(cg->b);
    LLVMValueRef zero = LLVMConstInt(cg->i64, 0, 0);
    LLVMAddIncoming(j, &zero, &pre, 1);
    LLVMAddIncoming(j, &jn, &end, 1);
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, jn, LLVMConstInt(cg->i64, (unsigned long long)(chunks * vw), 0), ""), loop, done);
    LLVMPositionBuilderAtEnd(cg->b, done);
  }
  for (int k = chunks * vw; k < n; k++) body(cg, id, LLVMConstInt(cg->i64, (unsigned long long)k, 0), false, ctx);
}

static void body_bcast(Cg *cg, int id, LLVMValueRef j, bool vec, void *ctx) {
  LLVMValueRef s = ctx;
  store_at(cg, cg->rowp[id], j, vec ? splat(cg, s) : s);
}

typedef struct CopyCtx {
  LLVMValueRef src;
  long off;      /* element offset of src relative to the output */
} CopyCtx;

static void body_copy(Cg *cg, int id, LLVMValueRef j, bool vec, void *ctx) {
  CopyCtx *c = ctx;
  LLVMValueRef js = LLVMBuildAdd(cg->b, j, LLVMConstInt(cg->i64, (unsigned long long)c->off, 1), "");
  store_at(cg, cg->rowp[id], LLVMBuildAdd(cg->b, j, LLVMConstInt(cg->i64, 0, 0), ""), load_at(cg, c->src, js, vec));
}

typedef struct SumCtx {
  LLVMValueRef vacc, sacc; /* allocas */
  int src;
} SumCtx;

static void body_sum(Cg *cg, int id, LLVMValueRef j, bool vec, void *ctx) {
  (void)id;
  SumCtx *s = ctx;
  LLVMValueRef x = arg_at(cg, s->src, j, vec);
  LLVMValueRef acc = vec ? s->vacc : s->sacc;
  LLVMTypeRef ty = vec ? cg->v8 : cg->f32;
  LLVMBuildStore(cg->b, FADD(LLVMBuildLoad2(cg->b, ty, acc, ""), x), acc);
}

/* n values of type ty in the function's entry block: an alloca inside a loop takes new stack on
 * every iteration (row loops run T B times), and loops may nest, so one per use. */
static LLVMValueRef entry_alloca(Cg *cg, LLVMTypeRef ty, int n) {
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(cg->b), entry = LLVMGetEntryBasicBlock(cg->fn);
  LLVMPositionBuilder(cg->b, entry, LLVMGetFirstInstruction(entry));
  LLVMValueRef acc = n == 1 ? LLVMBuildAlloca(cg->b, ty, "") : LLVMBuildArrayAlloca(cg->b, ty, LLVMConstInt(cg->i32, (unsigned long long)n, 0), "");
  LLVMPositionBuilderAtEnd(cg->b, cur);
  return acc;
}

/* A constant argument of a copy or a sum becomes a temporary filled once per row. */
static LLVMValueRef materialize_const(Cg *cg, int id) {
  Node *n = graph_node(cg->g, id);
  int e = node_numel(n);
  LLVMValueRef tmp = entry_alloca(cg, cg->f32, e);
  for (int k = 0; k < e; k++) store_at(cg, tmp, LLVMConstInt(cg->i64, (unsigned long long)k, 0), kf(cg, cg->f32, n->k));
  return tmp;
}

/* ---- products of the static values (params only, run on one row): scalar loops ---- */

typedef void (*LoopBody)(Cg *cg, LLVMValueRef i, void *ctx);

/* body(i) for i = 0 .. n-1 (n >= 1), i an i64. */
static void for_range(Cg *cg, long n, LoopBody body, void *ctx) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "range");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "range.done");
  LLVMBuildBr(cg->b, loop);
  LLVMPositionBuilderAtEnd(cg->b, loop);
  LLVMValueRef i = LLVMBuildPhi(cg->b, cg->i64, "i");
  body(cg, i, ctx);
  LLVMValueRef in = LLVMBuildAdd(cg->b, i, LLVMConstInt(cg->i64, 1, 0), "");
  LLVMBasicBlockRef end = LLVMGetInsertBlock(cg->b);
  LLVMValueRef zero = LLVMConstInt(cg->i64, 0, 0);
  LLVMAddIncoming(i, &zero, &pre, 1);
  LLVMAddIncoming(i, &in, &end, 1);
  LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, in, LLVMConstInt(cg->i64, (unsigned long long)n, 0), ""), loop, done);
  LLVMPositionBuilderAtEnd(cg->b, done);
}

/* out[o] = sum_i m[o so + i si] v[i] (MATVEC: so = cols, si = 1; MATVEC_T: so = 1, si = cols), or
 * out[o nin + i] = m[o] v[i] (OUTER). */
typedef struct ProdCtx {
  LLVMValueRef m, v, out, acc, o;
  long so, si, nout, nin;
  bool outer;
} ProdCtx;

static LLVMValueRef mul_i64(Cg *cg, LLVMValueRef a, long k) { return LLVMBuildMul(cg->b, a, LLVMConstInt(cg->i64, (unsigned long long)k, 0), ""); }

static void prod_inner(Cg *cg, LLVMValueRef i, void *ctx) {
  ProdCtx *c = ctx;
  if (c->outer) {
    LLVMValueRef at = LLVMBuildAdd(cg->b, mul_i64(cg, c->o, c->nin), i, "");
    store_at(cg, c->out, at, FMUL(load_at(cg, c->m, c->o, false), load_at(cg, c->v, i, false)));
    return;
  }
  LLVMValueRef at = LLVMBuildAdd(cg->b, mul_i64(cg, c->o, c->so), mul_i64(cg, i, c->si), "");
  LLVMValueRef t = FMUL(load_at(cg, c->m, at, false), load_at(cg, c->v, i, false));
  LLVMBuildStore(cg->b, FADD(LLVMBuildLoad2(cg->b, cg->f32, c->acc, ""), t), c->acc);
}

static void prod_outer(Cg *cg, LLVMValueRef o, void *ctx) {
  ProdCtx *c = ctx;
  c->o = o;
  if (!c->outer) LLVMBuildStore(cg->b, kf(cg, cg->f32, 0), c->acc);
  for_range(cg, c->nin, prod_inner, c);
  if (!c->outer) store_at(cg, c->out, o, LLVMBuildLoad2(cg->b, cg->f32, c->acc, ""));
}

static LLVMValueRef materialize_const(Cg *cg, int id);

static void emit_product(Cg *cg, int id) {
  Node *n = graph_node(cg->g, id), *a = graph_node(cg->g, n->a[0]);
  ProdCtx c = {.out = cg->rowp[id], .outer = n->op == OP_OUTER};
  c.m = a->op == OP_CONST ? materialize_const(cg, n->a[0]) : cg->rowp[n->a[0]];
  c.v = graph_node(cg->g, n->a[1])->op == OP_CONST ? materialize_const(cg, n->a[1]) : cg->rowp[n->a[1]];
  if (n->op == OP_MATVEC) c.nout = a->n[0], c.nin = a->n[1], c.so = a->n[1], c.si = 1;
  else if (n->op == OP_MATVEC_T) c.nout = a->n[1], c.nin = a->n[0], c.so = 1, c.si = a->n[1];
  else c.nout = n->n[0], c.nin = n->n[1];
  c.acc = entry_alloca(cg, cg->f32, 1);
  for_range(cg, c.nout, prod_outer, &c);
}

/* ---- version 2's structural ops: scalar loops with the index arithmetic of eval_node.h ---- */

static LLVMValueRef ci64(Cg *cg, long v) { return LLVMConstInt(cg->i64, (unsigned long long)v, 0); }

typedef struct ViewCtx {
  int id, src;       /* the node, and the value read (VIEW) or scattered (VIEWT) */
  int vn[MAX_RANK];  /* the view's shape, right-aligned to three dims */
  long st[MAX_RANK], off;
  bool scatter;
} ViewCtx;

/* the source index of view element j: off + sum_d c_d st[d], c the coordinates of j */
static LLVMValueRef view_index(Cg *cg, const ViewCtx *v, LLVMValueRef j) {
  LLVMValueRef s = ci64(cg, v->off);
  long in = 1;
  for (int d = MAX_RANK - 1; d >= 0; d--) {
    LLVMValueRef c = LLVMBuildURem(cg->b, LLVMBuildUDiv(cg->b, j, ci64(cg, in), ""), ci64(cg, v->vn[d]), "");
    s = LLVMBuildAdd(cg->b, s, LLVMBuildMul(cg->b, c, ci64(cg, v->st[d]), ""), "");
    in *= v->vn[d];
  }
  return s;
}

static void body_view(Cg *cg, LLVMValueRef j, void *ctx) {
  ViewCtx *v = ctx;
  LLVMValueRef k = view_index(cg, v, j);
  if (v->scatter) store_at(cg, cg->rowp[v->id], k, arg_at(cg, v->src, j, false));
  else store_at(cg, cg->rowp[v->id], j, arg_at(cg, v->src, k, false));
}

static void body_zero(Cg *cg, LLVMValueRef j, void *ctx) {
  store_at(cg, cg->rowp[*(int *)ctx], j, kf(cg, cg->f32, 0));
}

static void emit_view(Cg *cg, int id) {
  Node *n = graph_node(cg->g, id);
  ViewCtx v = {.id = id, .src = n->a[0], .off = n->idx, .scatter = n->op == OP_VIEWT};
  Node *shape = v.scatter ? graph_node(cg->g, n->a[0]) : n;
  for (int d = 0; d < MAX_RANK; d++) v.vn[d] = 1, v.st[d] = 0;
  for (int d = 0; d < shape->rank; d++)
    v.vn[MAX_RANK - shape->rank + d] = shape->n[d], v.st[MAX_RANK - shape->rank + d] = n->st[d];
  if (v.scatter) for_range(cg, node_numel(n), body_zero, &v.id);
  for_range(cg, node_numel(shape), body_view, &v);
}

/* RSUM, RMAX: out[o, i] over a as [outer, len, inner]; BMM: out[b, i, j] = sum_l A[b, i, l] B[b, l, j] */
typedef struct RedCtx {
  int id;
  long outer_stride, inner, len, step; /* a's element (o, l, i) at o * outer_stride + l * step + i */
  LLVMValueRef acc, base;
  bool max, bmm;
  long m, k, nn;                        /* BMM's sizes */
  LLVMValueRef ai, bj;                  /* BMM: the row of A and the column of B being summed */
} RedCtx;

static void red_inner(Cg *cg, LLVMValueRef l, void *ctx) {
  RedCtx *r = ctx;
  Node *n = graph_node(cg->g, r->id);
  LLVMValueRef acc = LLVMBuildLoad2(cg->b, cg->f32, r->acc, "");
  LLVMValueRef v;
  if (r->bmm) {
    LLVMValueRef x = arg_at(cg, n->a[0], LLVMBuildAdd(cg->b, r->ai, l, ""), false);
    LLVMValueRef y = arg_at(cg, n->a[1], LLVMBuildAdd(cg->b, r->bj, LLVMBuildMul(cg->b, l, ci64(cg, r->nn), ""), ""), false);
    v = FADD(acc, FMUL(x, y));
  } else {
    LLVMValueRef x = arg_at(cg, n->a[0], LLVMBuildAdd(cg->b, r->base, LLVMBuildMul(cg->b, l, ci64(cg, r->step), ""), ""), false);
    v = r->max ? SEL(FCMP(LLVMRealOGT, x, acc), x, acc) : FADD(acc, x);
  }
  LLVMBuildStore(cg->b, v, r->acc);
}

static void red_outer(Cg *cg, LLVMValueRef o, void *ctx) {
  RedCtx *r = ctx;
  Node *n = graph_node(cg->g, r->id);
  if (r->bmm) { /* o = (b * m + i) * nn + j */
    LLVMValueRef j = LLVMBuildURem(cg->b, o, ci64(cg, r->nn), ""), bi = LLVMBuildUDiv(cg->b, o, ci64(cg, r->nn), "");
    LLVMValueRef b = LLVMBuildUDiv(cg->b, bi, ci64(cg, r->m), "");
    r->ai = LLVMBuildMul(cg->b, bi, ci64(cg, r->k), "");
    r->bj = LLVMBuildAdd(cg->b, LLVMBuildMul(cg->b, b, ci64(cg, r->k * r->nn), ""), j, "");
    LLVMBuildStore(cg->b, kf(cg, cg->f32, 0), r->acc);
    for_range(cg, r->k, red_inner, r);
  } else { /* o = oi * inner + i */
    LLVMValueRef i = LLVMBuildURem(cg->b, o, ci64(cg, r->inner), ""), oi = LLVMBuildUDiv(cg->b, o, ci64(cg, r->inner), "");
    r->base = LLVMBuildAdd(cg->b, LLVMBuildMul(cg->b, oi, ci64(cg, r->outer_stride), ""), i, "");
    LLVMBuildStore(cg->b, arg_at(cg, n->a[0], r->base, false), r->acc);
    if (r->len > 1) {
      /* elements 1 .. len-1: the range runs from 0, so step from base + step */
      LLVMValueRef keep = r->base;
      r->base = LLVMBuildAdd(cg->b, r->base, ci64(cg, r->step), "");
      for_range(cg, r->len - 1, red_inner, r);
      r->base = keep;
    }
  }
  store_at(cg, cg->rowp[r->id], o, LLVMBuildLoad2(cg->b, cg->f32, r->acc, ""));
}

static void emit_reduce(Cg *cg, int id) {
  Node *n = graph_node(cg->g, id), *x = graph_node(cg->g, n->a[0]);
  RedCtx r = {.id = id, .acc = entry_alloca(cg, cg->f32, 1)};
  if (n->op == OP_BMM) {
    r.bmm = true, r.m = n->n[1], r.k = x->n[2], r.nn = n->n[2];
  } else {
    r.max = n->op == OP_RMAX, r.inner = 1, r.len = x->n[n->idx];
    for (int d = n->idx + 1; d < x->rank; d++) r.inner *= x->n[d];
    r.step = r.inner, r.outer_stride = r.len * r.inner;
  }
  for_range(cg, node_numel(n), red_outer, &r);
}

static void emit_node(Cg *cg, int id) {
  Node *n = graph_node(cg->g, id);
  int e = node_numel(n);
  switch (n->op) {
  case OP_BCAST: {
    LLVMValueRef s = arg_at(cg, n->a[0], LLVMConstInt(cg->i64, 0, 0), false);
    for_elements(cg, id, e, body_bcast, s);
    return;
  }
  case OP_SUM: {
    int src = n->a[0];
    if (graph_node(cg->g, src)->op == OP_CONST) {
      store_at(cg, cg->rowp[id], LLVMConstInt(cg->i64, 0, 0), kf(cg, cg->f32, graph_node(cg->g, src)->k * node_numel(graph_node(cg->g, src))));
      return;
    }
    SumCtx s = {entry_alloca(cg, cg->v8, 1), entry_alloca(cg, cg->f32, 1), src};
    LLVMBuildStore(cg->b, kf(cg, cg->v8, 0), s.vacc);
    LLVMBuildStore(cg->b, kf(cg, cg->f32, 0), s.sacc);
    for_elements(cg, id, node_numel(graph_node(cg->g, src)), body_sum, &s);
    LLVMValueRef v = LLVMBuildLoad2(cg->b, cg->v8, s.vacc, "");
    LLVMValueRef args[2] = {kf(cg, cg->f32, 0), v};
    unsigned rid = LLVMLookupIntrinsicID("llvm.vector.reduce.fadd", strlen("llvm.vector.reduce.fadd"));
    LLVMTypeRef tys[1] = {cg->v8};
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, rid, tys, 1);
    LLVMValueRef red = LLVMBuildCall2(cg->b, LLVMIntrinsicGetType(cg->ctx, rid, tys, 1), f, args, 2, "");
    LLVMValueRef total = FADD(red, LLVMBuildLoad2(cg->b, cg->f32, s.sacc, ""));
    store_at(cg, cg->rowp[id], LLVMConstInt(cg->i64, 0, 0), total);
    return;
  }
  case OP_CONCAT: {
    int a = n->a[0], b = n->a[1];
    int na = node_numel(graph_node(cg->g, a)), nb = node_numel(graph_node(cg->g, b));
    LLVMValueRef out = cg->rowp[id];
    LLVMValueRef pa = graph_node(cg->g, a)->op == OP_CONST ? materialize_const(cg, a) : cg->rowp[a];
    LLVMValueRef pb = graph_node(cg->g, b)->op == OP_CONST ? materialize_const(cg, b) : cg->rowp[b];
    CopyCtx ca = {pa, 0};
    for_elements(cg, id, na, body_copy, &ca);
    /* the second half: write through a pointer offset by na */
    LLVMValueRef keep = cg->rowp[id];
    LLVMValueRef off = LLVMConstInt(cg->i64, (unsigned long long)na, 0);
    cg->rowp[id] = elem_ptr(cg, out, off);
    CopyCtx cb = {pb, 0};
    for_elements(cg, id, nb, body_copy, &cb);
    cg->rowp[id] = keep;
    return;
  }
  case OP_MATVEC: case OP_MATVEC_T: case OP_OUTER: /* static values only (a per-row product is a GEMM) */
    emit_product(cg, id);
    return;
  case OP_VIEW: case OP_VIEWT: emit_view(cg, id); return;
  case OP_RSUM: case OP_RMAX: case OP_BMM: emit_reduce(cg, id); return;
  case OP_SLICE: {
    LLVMValueRef src = graph_node(cg->g, n->a[0])->op == OP_CONST ? materialize_const(cg, n->a[0]) : cg->rowp[n->a[0]];
    CopyCtx c = {src, n->idx};
    for_elements(cg, id, e, body_copy, &c);
    return;
  }
  default:
    /* an elementwise op runs in emit_nodes' runs; a matrix product, an outer product or a leaf
     * never reaches a kernel */
    UNREACHABLE(op_name(n->op));
  }
}

static bool plain_elementwise(Cg *cg, int id) { return op_is_elementwise(graph_node(cg->g, id)->op); }

/* A run of elementwise nodes (each element from the same element of its arguments) of one size,
 * in kernel order: one loop over the row's elements
 * computes them all, each value kept in a register for the run's later nodes and stored only where
 * its home or a node after the run reads it. (Node by node, every value went through memory: a
 * store and a load back per node and vector.) The same operations in the same order, so the same
 * bits; GRU and LSTM layers at H = 256 3-8% faster (docs/performance.md, fifth session). */
typedef struct RunCtx {
  const int *nodes;
  int n;
  const bool *keep;    /* per run node: store it */
  LLVMValueRef *val;   /* per run node: its value at the current elements */
} RunCtx;

static LLVMValueRef run_arg(Cg *cg, const RunCtx *r, int upto, int id, LLVMValueRef j, bool vec) {
  for (int i = upto - 1; i >= 0; i--)
    if (r->nodes[i] == id) return r->val[i];
  return arg_at(cg, id, j, vec);
}

static void body_run(Cg *cg, int first, LLVMValueRef j, bool vec, void *ctx) {
  (void)first;
  RunCtx *r = ctx;
  for (int i = 0; i < r->n; i++) {
    Node *n = graph_node(cg->g, r->nodes[i]);
    LLVMValueRef a = run_arg(cg, r, i, n->a[0], j, vec);
    LLVMValueRef b = op_arity(n->op) > 1 ? run_arg(cg, r, i, n->a[1], j, vec) : NULL;
    r->val[i] = emit_op(cg, n->op, a, b);
    if (r->keep[i]) store_at(cg, cg->rowp[r->nodes[i]], j, r->val[i]);
  }
}

/* A kernel's nodes[0..n): runs of elementwise nodes of one size, emit_node for the others. */
static void emit_nodes(Cg *cg, const int *nodes, int n) {
  for (int i = 0; i < n;) {
    int e = node_numel(graph_node(cg->g, nodes[i])), end = i + 1;
    if (!plain_elementwise(cg, nodes[i])) {
      emit_node(cg, nodes[i]);
      i++;
      continue;
    }
    while (end < n && plain_elementwise(cg, nodes[end]) && node_numel(graph_node(cg->g, nodes[end])) == e) end++;
    bool *keep = xcalloc((size_t)(end - i), sizeof(bool));
    for (int k = i; k < end; k++) { /* a home, or a reader after the run */
      keep[k - i] = cg->pl->home[nodes[k]] >= 0;
      for (int m = end; m < n && !keep[k - i]; m++) {
        Node *u = graph_node(cg->g, nodes[m]);
        for (int a = 0; a < op_arity(u->op); a++) keep[k - i] |= u->a[a] == nodes[k];
      }
    }
    LLVMValueRef *val = xcalloc((size_t)(end - i), sizeof(LLVMValueRef));
    RunCtx r = {nodes + i, end - i, keep, val};
    for_elements(cg, nodes[i], e, body_run, &r);
    free(keep), free(val);
    i = end;
  }
}

/* ---- one kernel ---- */

/* A kernel over the nodes of plan kernel k, or (k = -1) over a static list of nodes: the static
 * values, run on row 0 only, their temporaries row-local. */
static void emit_kernel(Cg *cg, int k, const CgNodes *list, const char *name) {
  const Plan *pl = cg->pl;
  Graph *g = cg->g;
  const Kernel *K = k >= 0 ? &pl->kernels[k] : &(const Kernel){(int *)list->nodes, list->n, list->n};
  LLVMTypeRef params[3] = {cg->i64, cg->i64, cg->fpp};
  LLVMTypeRef fty = LLVMFunctionType(LLVMVoidTypeInContext(cg->ctx), params, 3, 0);
  cg->fn = LLVMAddFunction(cg->mod, name, fty);
  LLVMValueRef r0 = LLVMGetParam(cg->fn, 0), r1 = LLVMGetParam(cg->fn, 1), bases = LLVMGetParam(cg->fn, 2);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "entry");
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "row");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "exit");
  LLVMPositionBuilderAtEnd(cg->b, entry);
  /* every slot the kernel touches: its base pointer; temporaries: row-local arrays */
  int nn = g->nnodes;
  bool *uses = xcalloc((size_t)nn, sizeof(bool));
  for (int i = 0; i < K->n; i++) {
    Node *n = graph_node(g, K->nodes[i]);
    uses[K->nodes[i]] = true;
    for (int a = 0; a < op_arity(n->op); a++) uses[n->a[a]] = true;
  }
  LLVMValueRef *tmp = xcalloc((size_t)nn, sizeof(LLVMValueRef));
  for (int id = 0; id < nn; id++) {
    if (!uses[id]) continue;
    int h = pl->home[id];
    if (h >= 0) {
      LLVMValueRef idx = LLVMConstInt(cg->i64, (unsigned long long)h, 0);
      cg->basep[id] = LLVMBuildLoad2(cg->b, cg->fptr, LLVMBuildGEP2(cg->b, cg->fptr, bases, &idx, 1, ""), "");
    } else if (graph_node(g, id)->op != OP_CONST) {
      CHECK(k < 0 || pl->kernel_of[id] == k);
      tmp[id] = LLVMBuildArrayAlloca(cg->b, cg->f32, LLVMConstInt(cg->i32, (unsigned long long)node_numel(graph_node(g, id)) + cg->vw, 0), "");
    }
  }
  LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, r0, r1, ""), loop, exit);
  LLVMPositionBuilderAtEnd(cg->b, loop);
  LLVMValueRef r = LLVMBuildPhi(cg->b, cg->i64, "r");
  for (int id = 0; id < nn; id++) {
    cg->rowp[id] = NULL;
    if (!uses[id]) continue;
    int h = pl->home[id];
    if (h >= 0) {
      int width = pl->arrays[pl->slots[h].array].width;
      LLVMValueRef off = LLVMBuildMul(cg->b, r, LLVMConstInt(cg->i64, (unsigned long long)width, 0), "");
      cg->rowp[id] = width ? elem_ptr(cg, cg->basep[id], off) : cg->basep[id];
    } else if (tmp[id])
      cg->rowp[id] = tmp[id];
  }
  emit_nodes(cg, K->nodes, K->n);
  LLVMValueRef rn = LLVMBuildAdd(cg->b, r, LLVMConstInt(cg->i64, 1, 0), "");
  LLVMBasicBlockRef end = LLVMGetInsertBlock(cg->b);
  LLVMAddIncoming(r, &r0, &entry, 1);
  LLVMAddIncoming(r, &rn, &end, 1);
  LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, rn, r1, ""), loop, exit);
  LLVMPositionBuilderAtEnd(cg->b, exit);
  LLVMBuildRetVoid(cg->b);
  free(uses);
  free(tmp);
}

/* ---- module, optimization, JIT, object files ---- */

struct CgModule {
  LLVMOrcThreadSafeContextRef tsctx; /* owns the context the module lives in */
  LLVMModuleRef mod;
  int nkernels;
};

struct CgJit {
  LLVMOrcLLJITRef jit;
};

static int fail_err(LLVMErrorRef e, const char *what, char *err, size_t errlen) {
  char *msg = LLVMGetErrorMessage(e);
  snprintf(err, errlen, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return -1;
}

static void init_llvm(void) {
  static int initialized;
  if (initialized) return;
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeAsmParser(); /* the emitted executor's inline asm (CPUID, XGETBV) */
  initialized = 1;
}

/* A target machine for the host (cpu NULL) or a named CPU of the host's architecture. */
static LLVMTargetMachineRef target_machine(const char *cpu_name, LLVMRelocMode reloc, LLVMCodeModel model, char *err,
                                          size_t errlen) {
  char *triple = LLVMGetDefaultTargetTriple();
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    snprintf(err, errlen, "LLVM: no target for %s: %s", triple, msg ? msg : "");
    LLVMDisposeMessage(msg);
    LLVMDisposeMessage(triple);
    return NULL;
  }
  char *cpu = cpu_name ? NULL : LLVMGetHostCPUName(), *features = cpu_name ? NULL : LLVMGetHostCPUFeatures();
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, cpu_name ? cpu_name : cpu, cpu_name ? "" : features,
                                                    LLVMCodeGenLevelAggressive, reloc, model);
  LLVMDisposeMessage(triple);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(features);
  return tm;
}

static CgModule *build(const Plan *pl, const CgNodes *extra, int nextra, int vw, char *err, size_t errlen);

/* For this CPU: 16-wide vectors where it has AVX-512 (and the OS saves its registers). */
CgModule *cg_llvm_build(const Plan *pl, char *err, size_t errlen) {
  CpuFeatures f = cpu_features_host();
  return build(pl, NULL, 0, f.avx512f && f.os_zmm ? 16 : 8, err, errlen);
}

/* For an object that runs on any x86-64-v3 CPU or later: 8-wide vectors. */
CgModule *cg_llvm_build_with(const Plan *pl, const CgNodes *extra, int nextra, char *err, size_t errlen) {
  return build(pl, extra, nextra, 8, err, errlen);
}

static CgModule *build(const Plan *pl, const CgNodes *extra, int nextra, int vw, char *err, size_t errlen) {
  init_llvm();
  CgModule *m = xcalloc(1, sizeof *m);
  m->tsctx = LLVMOrcCreateNewThreadSafeContext();
  m->nkernels = pl->nkernels;
  Cg cg = {0};
  cg.ctx = LLVMOrcThreadSafeContextGetContext(m->tsctx);
  cg.mod = m->mod = LLVMModuleCreateWithNameInContext("cellc", cg.ctx);
  cg.b = LLVMCreateBuilderInContext(cg.ctx);
  cg.f32 = LLVMFloatTypeInContext(cg.ctx);
  cg.vw = vw;
  cg.v8 = LLVMVectorType(cg.f32, (unsigned)vw);
  cg.i32 = LLVMInt32TypeInContext(cg.ctx);
  cg.vi32 = LLVMVectorType(cg.i32, (unsigned)vw);
  cg.i64 = LLVMInt64TypeInContext(cg.ctx);
  cg.fptr = LLVMPointerType(cg.f32, 0);
  cg.vptr = LLVMPointerType(cg.v8, 0);
  cg.fpp = LLVMPointerType(cg.fptr, 0);
  cg.pl = pl, cg.g = &pl->p->g;
  cg.rowp = xcalloc((size_t)cg.g->nnodes, sizeof(LLVMValueRef));
  cg.basep = xcalloc((size_t)cg.g->nnodes, sizeof(LLVMValueRef));
  char name[32];
  for (int k = 0; k < pl->nkernels; k++) {
    snprintf(name, sizeof name, "k%d", k);
    emit_kernel(&cg, k, NULL, name);
  }
  for (int i = 0; i < nextra; i++) emit_kernel(&cg, -1, &extra[i], extra[i].name);
  free(cg.rowp);
  free(cg.basep);
  LLVMDisposeBuilder(cg.b);
  char *msg = NULL;
  if (LLVMVerifyModule(m->mod, LLVMReturnStatusAction, &msg)) {
    snprintf(err, errlen, "internal: the generated module does not verify: %.400s", msg);
    LLVMDisposeMessage(msg);
    cg_llvm_module_free(m);
    return NULL;
  }
  LLVMDisposeMessage(msg);
  return m;
}

void cg_llvm_module_free(CgModule *m) {
  if (!m) return;
  if (m->mod) LLVMDisposeModule(m->mod);
  LLVMOrcDisposeThreadSafeContext(m->tsctx);
  free(m);
}

/* Sets the module's layout and triple for tm and runs the O3 pipeline with vectorization. */
static int optimize(CgModule *m, LLVMTargetMachineRef tm, char *err, size_t errlen) {
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(m->mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(m->mod, triple);
  LLVMDisposeMessage(triple);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
  LLVMErrorRef e = LLVMRunPasses(m->mod, "default<O3>", tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (e) return fail_err(e, "LLVM passes", err, errlen);
  if (tuning()->dump_ir) LLVMDumpModule(m->mod);
  return 0;
}

CgJit *cg_llvm_jit(CgModule *m, KernelFn *fns, char *err, size_t errlen) {
  CgJit *J = xcalloc(1, sizeof *J);
  int nk = m->nkernels;
  if (nk == 0) {
    cg_llvm_module_free(m);
    return J;
  }
  LLVMTargetMachineRef tm = target_machine(NULL, LLVMRelocDefault, LLVMCodeModelJITDefault, err, errlen);
  if (!tm || optimize(m, tm, err, errlen) < 0) {
    if (tm) LLVMDisposeTargetMachine(tm);
    cg_llvm_module_free(m);
    free(J);
    return NULL;
  }
  /* the JIT builder takes the target machine, the JIT the module and its context */
  LLVMOrcJITTargetMachineBuilderRef jtmb = LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm);
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, jtmb);
  LLVMErrorRef e;
  int rc = 0;
  if ((e = LLVMOrcCreateLLJIT(&J->jit, jb))) rc = fail_err(e, "LLVM JIT", err, errlen);
  LLVMOrcDefinitionGeneratorRef gen;
  if (!rc && (e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(J->jit), NULL, NULL)))
    rc = fail_err(e, "LLVM JIT symbols", err, errlen);
  if (!rc) {
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(J->jit);
    LLVMOrcJITDylibAddGenerator(jd, gen);
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(m->mod, m->tsctx);
    m->mod = NULL;
    if ((e = LLVMOrcLLJITAddLLVMIRModule(J->jit, jd, tsm))) rc = fail_err(e, "LLVM JIT module", err, errlen);
  }
  char name[32];
  for (int k = 0; k < nk && !rc; k++) {
    LLVMOrcExecutorAddress addr;
    snprintf(name, sizeof name, "k%d", k);
    if ((e = LLVMOrcLLJITLookup(J->jit, &addr, name))) rc = fail_err(e, "LLVM JIT lookup", err, errlen);
    else fns[k] = (KernelFn)(uintptr_t)addr;
  }
  cg_llvm_module_free(m); /* the thread-safe module holds its own reference to the context */
  if (rc) {
    cg_llvm_jit_free(J);
    return NULL;
  }
  return J;
}

void cg_llvm_jit_free(CgJit *J) {
  if (!J) return;
  if (J->jit) LLVMOrcDisposeLLJIT(J->jit);
  free(J);
}

int cg_llvm_emit_object(CgModule *m, const char *cpu, const char *path, char *err, size_t errlen) {
  LLVMTargetMachineRef tm = target_machine(cpu, LLVMRelocPIC, LLVMCodeModelDefault, err, errlen);
  if (!tm) return -1;
  int rc = optimize(m, tm, err, errlen);
  char *msg = NULL;
  if (!rc && LLVMTargetMachineEmitToFile(tm, m->mod, (char *)path, LLVMObjectFile, &msg)) {
    snprintf(err, errlen, "cannot write %s: %s", path, msg ? msg : "LLVM failed");
    rc = -1;
  }
  LLVMDisposeMessage(msg);
  LLVMDisposeTargetMachine(tm);
  return rc;
}

/* ---- a library: the executor's bitcode linked with the kernels ---- */

/* The executor was compiled for a generic x86-64: its functions take the target machine's CPU,
 * except the GEMM kernels compiled for AVX2 or AVX-512 (gemm_core.c's target attributes), which keep
 * their features (the executor picks them at run time from CPUID). */
static void drop_cpu_attributes(LLVMModuleRef mod) {
  static const char *const keys[] = {"target-cpu", "target-features", "tune-cpu"};
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    LLVMAttributeRef feat = LLVMGetStringAttributeAtIndex(f, LLVMAttributeFunctionIndex, keys[1], (unsigned)strlen(keys[1]));
    unsigned len = 0;
    const char *v = feat ? LLVMGetStringAttributeValue(feat, &len) : NULL;
    bool wide = v && (memmem(v, len, "+avx512f", 8) || memmem(v, len, "+avx2", 5));
    for (int i = 0; i < 3; i++)
      if (!(wide && i == 1)) LLVMRemoveStringAttributeAtIndex(f, LLVMAttributeFunctionIndex, keys[i], (unsigned)strlen(keys[i]));
  }
}

/* cellc_table (the bytes of the plan table) and cellc_kernels (the kernels by number). */
static int add_tables(CgModule *m, const CgLibrary *lib, char *err, size_t errlen) {
  LLVMContextRef ctx = LLVMGetModuleContext(m->mod);
  LLVMValueRef tab = LLVMConstStringInContext(ctx, lib->table, (unsigned)lib->table_len, 1);
  LLVMValueRef g = LLVMAddGlobal(m->mod, LLVMTypeOf(tab), "cellc_table");
  LLVMSetInitializer(g, tab);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetAlignment(g, 16);
  LLVMValueRef *fns = xcalloc((size_t)lib->nkernels + 1, sizeof(LLVMValueRef));
  LLVMTypeRef fty = NULL;
  for (int i = 0; i < lib->nkernels; i++) {
    fns[i] = LLVMGetNamedFunction(m->mod, lib->kernels[i]);
    if (!fns[i]) {
      snprintf(err, errlen, "internal: no kernel %s in the module", lib->kernels[i]);
      free(fns);
      return -1;
    }
    fty = LLVMTypeOf(fns[i]);
  }
  if (!fty) fty = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
  LLVMValueRef arr = LLVMConstArray(fty, fns, (unsigned)lib->nkernels);
  LLVMValueRef k = LLVMAddGlobal(m->mod, LLVMTypeOf(arr), "cellc_kernels");
  LLVMSetInitializer(k, arr);
  LLVMSetGlobalConstant(k, 1);
  free(fns);
  return 0;
}

static bool is_export(const CgLibrary *lib, const char *name) {
  for (int i = 0; i < lib->nexports; i++)
    if (!strcmp(lib->exports[2 * i + 1], name)) return true;
  return false;
}

/* Renames the executor's entry points and makes every other definition internal. */
static int keep_exports(CgModule *m, const CgLibrary *lib, char *err, size_t errlen) {
  for (int i = 0; i < lib->nexports; i++) {
    LLVMValueRef f = LLVMGetNamedFunction(m->mod, lib->exports[2 * i]);
    if (!f) {
      snprintf(err, errlen, "internal: the executor has no %s", lib->exports[2 * i]);
      return -1;
    }
    LLVMSetValueName2(f, lib->exports[2 * i + 1], strlen(lib->exports[2 * i + 1]));
  }
  for (LLVMValueRef f = LLVMGetFirstFunction(m->mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    if (!LLVMIsDeclaration(f) && !is_export(lib, LLVMGetValueName2(f, &len))) LLVMSetLinkage(f, LLVMInternalLinkage);
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(m->mod); g; g = LLVMGetNextGlobal(g))
    if (!LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
  return 0;
}

int cg_llvm_emit_library(CgModule *m, const CgLibrary *lib, char *err, size_t errlen) {
  LLVMContextRef ctx = LLVMGetModuleContext(m->mod);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(lib->bitcode, lib->bitcode_len, "executor");
  LLVMModuleRef exec = NULL;
  if (LLVMParseBitcodeInContext2(ctx, buf, &exec)) {
    LLVMDisposeMemoryBuffer(buf);
    snprintf(err, errlen, "internal: the embedded executor bitcode does not parse");
    return -1;
  }
  LLVMDisposeMemoryBuffer(buf);
  drop_cpu_attributes(exec);
  LLVMSetTarget(m->mod, LLVMGetTarget(exec));
  LLVMSetDataLayout(m->mod, LLVMGetDataLayoutStr(exec));
  if (add_tables(m, lib, err, errlen) < 0) {
    LLVMDisposeModule(exec);
    return -1;
  }
  if (LLVMLinkModules2(m->mod, exec)) { /* exec is consumed either way */
    snprintf(err, errlen, "internal: linking the executor into the kernels failed");
    return -1;
  }
  if (keep_exports(m, lib, err, errlen) < 0) return -1;
  char *msg = NULL;
  if (LLVMVerifyModule(m->mod, LLVMReturnStatusAction, &msg)) {
    snprintf(err, errlen, "internal: the linked module does not verify: %.400s", msg);
    LLVMDisposeMessage(msg);
    return -1;
  }
  LLVMDisposeMessage(msg);
  return cg_llvm_emit_object(m, lib->cpu, lib->path, err, errlen);
}
