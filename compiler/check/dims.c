/* dims.c: canonical integer polynomials over dim symbols, interned by value. */
#include "dims.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "support.h"

void dims_free(DimTable *t) {
  free(t->polys);
  memset(t, 0, sizeof *t);
}

static int mono_cmp(const Mono *a, const Mono *b) {
  if (a->nv != b->nv) return a->nv < b->nv ? -1 : 1;
  for (int i = 0; i < a->nv; i++)
    if (a->v[i] != b->v[i]) return a->v[i] < b->v[i] ? -1 : 1;
  return 0;
}

static int intern(DimTable *t, Poly *p) {
  /* canonical: sort terms, merge equal monomials, drop zeros */
  for (int i = 1; i < p->nt; i++)
    for (int j = i; j > 0 && mono_cmp(&p->t[j - 1], &p->t[j]) > 0; j--) {
      Mono m = p->t[j];
      p->t[j] = p->t[j - 1];
      p->t[j - 1] = m;
    }
  Poly q;
  memset(&q, 0, sizeof q);
  for (int i = 0; i < p->nt; i++) {
    if (q.nt && mono_cmp(&q.t[q.nt - 1], &p->t[i]) == 0) {
      if (__builtin_add_overflow(q.t[q.nt - 1].coef, p->t[i].coef, &q.t[q.nt - 1].coef)) return -1;
    } else {
      q.t[q.nt++] = p->t[i];
    }
  }
  int kept = 0;
  for (int i = 0; i < q.nt; i++)
    if (q.t[i].coef != 0) q.t[kept++] = q.t[i];
  for (int i = kept; i < q.nt; i++) memset(&q.t[i], 0, sizeof q.t[i]);
  q.nt = kept;
  for (int i = 0; i < t->n; i++)
    if (!memcmp(&t->polys[i], &q, sizeof q)) return i;
  VEC_PUSH(t->polys, t->n, t->cap, q);
  return t->n - 1;
}

int dims_const(DimTable *t, long c) {
  Poly p;
  memset(&p, 0, sizeof p);
  p.nt = 1;
  p.t[0].coef = c;
  return intern(t, &p);
}

int dims_var(DimTable *t, int sym) {
  Poly p;
  memset(&p, 0, sizeof p);
  p.nt = 1;
  p.t[0].coef = 1;
  p.t[0].nv = 1;
  p.t[0].v[0] = sym;
  return intern(t, &p);
}

static int combine(DimTable *t, int a, int b, long sign) {
  if (a < 0 || b < 0) return -1;
  Poly p;
  memset(&p, 0, sizeof p);
  Poly pa = t->polys[a], pb = t->polys[b];
  if (pa.nt + pb.nt > 2 * DIMS_MAX_TERMS) return -1;
  Mono buf[2 * DIMS_MAX_TERMS];
  int n = 0;
  for (int i = 0; i < pa.nt; i++) buf[n++] = pa.t[i];
  for (int i = 0; i < pb.nt; i++) {
    buf[n] = pb.t[i];
    if (__builtin_mul_overflow(buf[n].coef, sign, &buf[n].coef)) return -1;
    n++;
  }
  /* merge before truncating to the fixed size */
  Poly big;
  memset(&big, 0, sizeof big);
  for (int i = 0; i < n; i++) {
    int j;
    for (j = 0; j < big.nt; j++)
      if (mono_cmp(&big.t[j], &buf[i]) == 0) break;
    if (j < big.nt) {
      if (__builtin_add_overflow(big.t[j].coef, buf[i].coef, &big.t[j].coef)) return -1;
    } else {
      if (big.nt == DIMS_MAX_TERMS) return -1;
      big.t[big.nt++] = buf[i];
    }
  }
  p = big;
  return intern(t, &p);
}

int dims_add(DimTable *t, int a, int b) { return combine(t, a, b, 1); }
int dims_sub(DimTable *t, int a, int b) { return combine(t, a, b, -1); }

int dims_mul(DimTable *t, int a, int b) {
  if (a < 0 || b < 0) return -1;
  Poly pa = t->polys[a], pb = t->polys[b], p;
  memset(&p, 0, sizeof p);
  for (int i = 0; i < pa.nt; i++)
    for (int j = 0; j < pb.nt; j++) {
      Mono m;
      memset(&m, 0, sizeof m);
      if (__builtin_mul_overflow(pa.t[i].coef, pb.t[j].coef, &m.coef)) return -1;
      if (pa.t[i].nv + pb.t[j].nv > DIMS_MAX_VARS) return -1;
      for (int k = 0; k < pa.t[i].nv; k++) m.v[m.nv++] = pa.t[i].v[k];
      for (int k = 0; k < pb.t[j].nv; k++) m.v[m.nv++] = pb.t[j].v[k];
      for (int x = 1; x < m.nv; x++)
        for (int y = x; y > 0 && m.v[y - 1] > m.v[y]; y--) {
          int tmp = m.v[y];
          m.v[y] = m.v[y - 1];
          m.v[y - 1] = tmp;
        }
      int k;
      for (k = 0; k < p.nt; k++)
        if (mono_cmp(&p.t[k], &m) == 0) break;
      if (k < p.nt) {
        if (__builtin_add_overflow(p.t[k].coef, m.coef, &p.t[k].coef)) return -1;
      } else {
        if (p.nt == DIMS_MAX_TERMS) return -1;
        p.t[p.nt++] = m;
      }
    }
  return intern(t, &p);
}

bool dims_is_const(const DimTable *t, int id, long *c) {
  const Poly *p = &t->polys[id];
  if (p->nt == 0) {
    *c = 0;
    return true;
  }
  if (p->nt == 1 && p->t[0].nv == 0) {
    *c = p->t[0].coef;
    return true;
  }
  return false;
}

bool dims_eval(const DimTable *t, int id, const long *values, long *out) {
  const Poly *p = &t->polys[id];
  long sum = 0;
  for (int i = 0; i < p->nt; i++) {
    long m = p->t[i].coef;
    for (int k = 0; k < p->t[i].nv; k++) {
      long v = values[p->t[i].v[k]];
      if (v < 0) return false;
      if (__builtin_mul_overflow(m, v, &m)) return false;
    }
    if (__builtin_add_overflow(sum, m, &sum)) return false;
  }
  *out = sum;
  return true;
}

void dims_print(const DimTable *t, int id, const char *const *names, char *buf, int size) {
  const Poly *p = &t->polys[id];
  int len = 0;
  buf[0] = 0;
  if (p->nt == 0) {
    snprintf(buf, (size_t)size, "0");
    return;
  }
  for (int i = 0; i < p->nt && len < size; i++) {
    const Mono *m = &p->t[i];
    long c = m->coef;
    if (i) len += snprintf(buf + len, (size_t)(size - len), c < 0 ? " - " : " + ");
    else if (c < 0) len += snprintf(buf + len, (size_t)(size - len), "-");
    if (len >= size) break;
    unsigned long ac = c < 0 ? -(unsigned long)c : (unsigned long)c; /* LONG_MIN too */
    if (ac != 1 || m->nv == 0) len += snprintf(buf + len, (size_t)(size - len), m->nv ? "%lu*" : "%lu", ac);
    for (int k = 0; k < m->nv && len < size; k++)
      len += snprintf(buf + len, (size_t)(size - len), k ? "*%s" : "%s", names[m->v[k]]);
  }
}
