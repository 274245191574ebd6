/* ops_scalar.h: the scalar meaning of every elementwise op of the table (ops.h) as a static inline
 * function of element type OPS_T, op_<OPS_SFX>_<op>(a, b), and OPS_DISPATCH(op, a, b) choosing one
 * by op. ops.h includes it twice: double (OPS_LIBM empty: exp, log1p) and float (OPS_LIBM f: expf,
 * log1pf). No include guard, on purpose; it undefines what it and its includer defined. */

#define OPS_CAT_(x, y) x##y
#define OPS_CAT(x, y) OPS_CAT_(x, y)
#define OPS_FN(name) OPS_CAT(OPS_CAT(op_, OPS_SFX), _##name)

/* the vocabulary of the meanings, in OPS_T */
#define EXP OPS_CAT(exp, OPS_LIBM)
#define LOG OPS_CAT(log, OPS_LIBM)
#define LOG1P OPS_CAT(log1p, OPS_LIBM)
#define EXPM1 OPS_CAT(expm1, OPS_LIBM)
#define POW OPS_CAT(pow, OPS_LIBM)
#define TANH OPS_CAT(tanh, OPS_LIBM)
#define ERF OPS_CAT(erf, OPS_LIBM)
#define SQRT OPS_CAT(sqrt, OPS_LIBM)
#define FABS OPS_CAT(fabs, OPS_LIBM)
#define SIN OPS_CAT(sin, OPS_LIBM)
#define COS OPS_CAT(cos, OPS_LIBM)
#define K(lit) ((OPS_T)(lit))
#define OPX(name, x) OPS_FN(name)(x, 0)

#define E(name, arity, text, where, diff, props, meaning)                                          \
  static inline OPS_T OPS_FN(name)(OPS_T a, OPS_T b) {                                             \
    (void)a, (void)b;                                                                              \
    return meaning;                                                                                \
  }
GRAPH_OPS(OPS_SKIP, E)
#undef E

static inline OPS_T OPS_DISPATCH(Op op, OPS_T a, OPS_T b) {
  switch (op) {
#define E(name, ...) case OP_##name: return OPS_FN(name)(a, b);
    GRAPH_OPS(OPS_SKIP, E)
#undef E
  default: UNREACHABLE(op_name(op));
  }
}

#undef EXP
#undef LOG
#undef LOG1P
#undef EXPM1
#undef POW
#undef TANH
#undef ERF
#undef SQRT
#undef FABS
#undef SIN
#undef COS
#undef K
#undef OPX
#undef OPS_FN
#undef OPS_CAT
#undef OPS_CAT_
#undef OPS_T
#undef OPS_SFX
#undef OPS_LIBM
#undef OPS_DISPATCH
