/* eval_node.h: one node of the real graph evaluated from its arguments' values, in the element type
 * NODE_T: the body of node_eval_f64 (the interpreter) and node_eval_f32 (the CPU back end's
 * portable evaluator). eval.c includes it once per type, with NODE_T, NODE_EVAL (the function's
 * name), NODE_MATVEC (its helper's) and NODE_SCALAR (the ops' scalar meaning in that type) set. */

/* out[o] = sum_i m(o, i) v[i], m(o, i) = m[o * so + i * si]: m @ v (so = cols, si = 1) and m^T @ v
 * (so = 1, si = cols), summed in i order. */
static void NODE_MATVEC(NODE_T *out, const NODE_T *m, const NODE_T *v, int nout, int nin, int so, int si) {
  for (int o = 0; o < nout; o++) {
    NODE_T s = 0;
    for (int i = 0; i < nin; i++) s += m[(size_t)o * (size_t)so + (size_t)i * (size_t)si] * v[i];
    out[o] = s;
  }
}

void NODE_EVAL(Graph *g, int id, NODE_T *out, const NODE_T *a, const NODE_T *b) {
  Node *n = graph_node(g, id);
  int e = node_numel(n);
  switch (n->op) {
  case OP_CONST: for (int i = 0; i < e; i++) out[i] = (NODE_T)n->k; return;
  case OP_BCAST: for (int i = 0; i < e; i++) out[i] = a[0]; return;
  case OP_SUM: {
    int na = node_numel(graph_node(g, n->a[0]));
    NODE_T s = 0;
    for (int i = 0; i < na; i++) s += a[i];
    out[0] = s;
    return;
  }
  case OP_CONCAT: {
    int na = node_numel(graph_node(g, n->a[0]));
    memcpy(out, a, sizeof(NODE_T) * (size_t)na);
    memcpy(out + na, b, sizeof(NODE_T) * (size_t)(e - na));
    return;
  }
  case OP_SLICE: memcpy(out, a + n->idx, sizeof(NODE_T) * (size_t)e); return;
  case OP_MATVEC: {
    Node *m = graph_node(g, n->a[0]);
    NODE_MATVEC(out, a, b, m->n[0], m->n[1], m->n[1], 1);
    return;
  }
  case OP_MATVEC_T: {
    Node *m = graph_node(g, n->a[0]);
    NODE_MATVEC(out, a, b, m->n[1], m->n[0], 1, m->n[1]);
    return;
  }
  case OP_OUTER:
    for (int i = 0; i < n->n[0]; i++)
      for (int j = 0; j < n->n[1]; j++) out[(size_t)i * (size_t)n->n[1] + (size_t)j] = a[i] * b[j];
    return;
  case OP_VIEW:
  case OP_VIEWT: {
    /* the view's coordinates c (VIEW: the node's, VIEWT: its argument's) against the source's
     * flat index idx + sum c_d st[d] */
    Node *v = n->op == OP_VIEW ? n : graph_node(g, n->a[0]);
    int vn[MAX_RANK] = {1, 1, 1}, st[MAX_RANK] = {0, 0, 0};
    for (int d = 0; d < v->rank; d++) vn[MAX_RANK - v->rank + d] = v->n[d], st[MAX_RANK - v->rank + d] = n->st[d];
    if (n->op == OP_VIEWT) memset(out, 0, sizeof(NODE_T) * (size_t)e);
    size_t j = 0;
    for (int c0 = 0; c0 < vn[0]; c0++)
      for (int c1 = 0; c1 < vn[1]; c1++)
        for (int c2 = 0; c2 < vn[2]; c2++, j++) {
          size_t src = (size_t)n->idx + (size_t)c0 * (size_t)st[0] + (size_t)c1 * (size_t)st[1] + (size_t)c2 * (size_t)st[2];
          if (n->op == OP_VIEW) out[j] = a[src];
          else out[src] = a[j];
        }
    return;
  }
  case OP_RSUM:
  case OP_RMAX: {
    /* a as [outer, len, inner] around the axis */
    Node *x = graph_node(g, n->a[0]);
    int outer = 1, inner = 1, len = x->n[n->idx];
    for (int d = 0; d < n->idx; d++) outer *= x->n[d];
    for (int d = n->idx + 1; d < x->rank; d++) inner *= x->n[d];
    for (int o = 0; o < outer; o++)
      for (int i = 0; i < inner; i++) {
        const NODE_T *p = a + (size_t)o * (size_t)len * (size_t)inner + (size_t)i;
        NODE_T s = p[0];
        for (int l = 1; l < len; l++) {
          NODE_T v = p[(size_t)l * (size_t)inner];
          s = n->op == OP_RSUM ? s + v : (v > s ? v : s);
        }
        out[(size_t)o * (size_t)inner + (size_t)i] = s;
      }
    return;
  }
  case OP_BMM: {
    Node *x = graph_node(g, n->a[0]);
    int nb = n->n[0], m = n->n[1], k = x->n[2], nn = n->n[2];
    for (int bi = 0; bi < nb; bi++)
      for (int i = 0; i < m; i++)
        for (int j = 0; j < nn; j++) {
          NODE_T s = 0;
          for (int l = 0; l < k; l++)
            s += a[((size_t)bi * (size_t)m + (size_t)i) * (size_t)k + (size_t)l] * b[((size_t)bi * (size_t)k + (size_t)l) * (size_t)nn + (size_t)j];
          out[((size_t)bi * (size_t)m + (size_t)i) * (size_t)nn + (size_t)j] = s;
        }
    return;
  }
  default:
    if (!op_is_elementwise(n->op)) UNREACHABLE(op_name(n->op));
    if (op_arity(n->op) == 1)
      for (int i = 0; i < e; i++) out[i] = NODE_SCALAR(n->op, a[i], 0);
    else
      for (int i = 0; i < e; i++) out[i] = NODE_SCALAR(n->op, a[i], b[i]);
  }
}
