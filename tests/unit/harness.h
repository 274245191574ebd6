/* harness.h: what the numerical unit tests share: a cell loaded and checked with its options and
 * dims ("H=4,D=3"), float64 buffers of random data shaped for a program (a SeqIO view of them),
 * relative errors, and gradients against finite differences. Header-only: each test binary includes it once. */
#ifndef CELLC_TEST_HARNESS_H
#define CELLC_TEST_HARNESS_H

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline.h"
#include "support.h"

/* A DIMS of stdlib/cells.list (stdlib_cells.h) for a test's sizes: %H -> H, %D -> D ("H=%H,D=%D"
 * -> "H=19,D=5"). Static storage: the next call overwrites it. */
static inline const char *h_dims(const char *tmpl, int H, int D) {
  static char buf[128];
  size_t n = 0;
  for (const char *t = tmpl; *t && n < sizeof buf - 16; t++) {
    if (t[0] == '%' && (t[1] == 'H' || t[1] == 'D')) n += (size_t)snprintf(buf + n, sizeof buf - n, "%d", *++t == 'H' ? H : D);
    else buf[n++] = *t;
  }
  buf[n] = 0;
  return buf;
}

/* set: one "name=value" or NULL; mode: NULL (auto), "scan", "sequential" or "chunked". */
/* Kernels compile once per cache directory (the emulator's shared objects, NVRTC's PTX): the CUDA
 * tests share one under $TMPDIR, as XDG_CACHE_HOME. */
static inline void h_use_cuda_test_cache(void) {
  const char *tmp = getenv("TMPDIR");
  char *dir = xasprintf("%s/cellc-test-cuda-cache", tmp && *tmp ? tmp : "/tmp");
  mkdir(dir, 0755);
  setenv("XDG_CACHE_HOME", dir, 1);
  free(dir);
}

static inline Cell *h_cell(Arena *a, const char *file, const char *set, const char *dims, bool training, const char *mode) {
  Module *m = check_load(a, file, "stdlib");
  cr_assert(m, "load %s", file);
  const Src *src;
  const CellAst *ast = check_find_cell(m, NULL, &src);
  cr_assert(ast, "%s has a cell", file);
  Binding setb[2], dimb[8];
  int nset = 0, ndim = 0;
  char buf[256];
  if (set) {
    snprintf(buf, sizeof buf, "%s", set);
    char *eq = strchr(buf, '=');
    *eq = 0;
    setb[nset++] = (Binding){arena_strdup(a, buf), arena_strdup(a, eq + 1)};
  }
  snprintf(buf, sizeof buf, "%s", dims);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && ndim < 8; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    *eq = 0;
    dimb[ndim++] = (Binding){arena_strdup(a, tok), arena_strdup(a, eq + 1)};
  }
  CheckOptions o = {0};
  o.sets = setb, o.nsets = nset, o.dims = dimb, o.ndims = ndim, o.need_bound = true, o.training = training;
  o.force_scan = mode && !strcmp(mode, "scan");
  o.force_sequential = mode && !strcmp(mode, "sequential");
  o.force_chunked = mode && !strcmp(mode, "chunked");
  Cell *c = check_cell(a, src, ast, &o);
  cr_assert(c, "check %s", file);
  return c;
}

/* Every buffer of one run of a program on T x B rows, float64, and its SeqIO view. */
typedef struct HBufs {
  SeqIO io;
  int T, B, np, ns, ng, nz;
  size_t *pn, *sn, *gn, *zn;      /* numel per param part, state part [B, size], gate and noise [T, B, size] */
  double *x, *dy, *y, *gx;
  double **params, **gparams, **h0, **dfinal, **final, **gh0, **gates, **noise;
} HBufs;

static inline double **h_parts(int n, const size_t *numel) {
  double **v = xcalloc((size_t)n + 1, sizeof(double *));
  for (int i = 0; i < n; i++) v[i] = xcalloc(numel[i] + 1, sizeof(double));
  return v;
}

/* Inputs drawn from seed: x and dy standard normal, params pscale N(0,1), h0 hscale N(0,1), dfinal
 * N(0,1), noise U(0,1). */
static inline HBufs *h_bufs_new(const Program *p, int T, int B, uint64_t seed, double pscale, double hscale) {
  HBufs *h = xcalloc(1, sizeof *h);
  size_t rows = (size_t)T * (size_t)B;
  h->T = T, h->B = B, h->np = p->npparts, h->ns = p->nsparts, h->ng = p->ngates, h->nz = p->nnoise;
  h->pn = xcalloc((size_t)h->np + 1, sizeof(size_t)), h->sn = xcalloc((size_t)h->ns + 1, sizeof(size_t));
  h->gn = xcalloc((size_t)h->ng + 1, sizeof(size_t)), h->zn = xcalloc((size_t)h->nz + 1, sizeof(size_t));
  for (int i = 0; i < h->np; i++) h->pn[i] = (size_t)p->pparts[i].numel;
  for (int i = 0; i < h->ns; i++) h->sn[i] = (size_t)B * (size_t)p->sparts[i].size;
  for (int i = 0; i < h->ng; i++) h->gn[i] = rows * (size_t)node_numel(&p->g.nodes[p->gates[i].node]);
  for (int i = 0; i < h->nz; i++) h->zn[i] = rows * (size_t)p->noise_sizes[i];
  h->x = xcalloc(rows * (size_t)p->x_size + 1, sizeof(double)), h->gx = xcalloc(rows * (size_t)p->x_size + 1, sizeof(double));
  h->dy = xcalloc(rows * (size_t)p->output_size + 1, sizeof(double));
  h->y = xcalloc(rows * (size_t)p->output_size + 1, sizeof(double));
  h->params = h_parts(h->np, h->pn), h->gparams = h_parts(h->np, h->pn);
  h->h0 = h_parts(h->ns, h->sn), h->dfinal = h_parts(h->ns, h->sn), h->final = h_parts(h->ns, h->sn), h->gh0 = h_parts(h->ns, h->sn);
  h->gates = h_parts(h->ng, h->gn), h->noise = h_parts(h->nz, h->zn);
  Rng r;
  rng_seed(&r, seed, 1);
  for (size_t i = 0; i < rows * (size_t)p->x_size; i++) h->x[i] = rng_normal(&r);
  for (size_t i = 0; i < rows * (size_t)p->output_size; i++) h->dy[i] = rng_normal(&r);
  for (int i = 0; i < h->np; i++)
    for (size_t j = 0; j < h->pn[i]; j++) h->params[i][j] = pscale * rng_normal(&r);
  for (int i = 0; i < h->ns; i++)
    for (size_t j = 0; j < h->sn[i]; j++) h->h0[i][j] = hscale * rng_normal(&r), h->dfinal[i][j] = rng_normal(&r);
  for (int i = 0; i < h->nz; i++)
    for (size_t j = 0; j < h->zn[i]; j++) h->noise[i][j] = rng_uniform_open(&r);
  SeqIO *d = &h->io;
  d->T = T, d->B = B, d->dtype = DT_F64;
  d->x = h->x, d->params = (const void **)h->params, d->h0 = (const void **)h->h0, d->dy = h->dy;
  d->dfinal = (const void **)h->dfinal, d->noise = (const void **)h->noise;
  d->y = h->y, d->final = (void **)h->final, d->gates = (void **)h->gates, d->grad_params = (void **)h->gparams;
  d->grad_x = h->gx, d->grad_h0 = (void **)h->gh0;
  return h;
}

/* A copy of src's inputs (x, dy, params, h0, dfinal, noise) into dst, of the same program. */
static inline void h_bufs_copy_inputs(HBufs *dst, const HBufs *src, const Program *p) {
  size_t rows = (size_t)src->T * (size_t)src->B;
  memcpy(dst->x, src->x, sizeof(double) * rows * (size_t)p->x_size);
  memcpy(dst->dy, src->dy, sizeof(double) * rows * (size_t)p->output_size);
  for (int i = 0; i < src->np; i++) memcpy(dst->params[i], src->params[i], sizeof(double) * src->pn[i]);
  for (int i = 0; i < src->ns; i++) {
    memcpy(dst->h0[i], src->h0[i], sizeof(double) * src->sn[i]);
    memcpy(dst->dfinal[i], src->dfinal[i], sizeof(double) * src->sn[i]);
  }
  for (int i = 0; i < src->nz; i++) memcpy(dst->noise[i], src->noise[i], sizeof(double) * src->zn[i]);
}

static inline void h_parts_free(double **v, int n) {
  for (int i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

static inline void h_bufs_free(HBufs *h) {
  if (!h) return;
  h_parts_free(h->params, h->np), h_parts_free(h->gparams, h->np);
  h_parts_free(h->h0, h->ns), h_parts_free(h->dfinal, h->ns), h_parts_free(h->final, h->ns), h_parts_free(h->gh0, h->ns);
  h_parts_free(h->gates, h->ng), h_parts_free(h->noise, h->nz);
  free(h->x), free(h->dy), free(h->y), free(h->gx);
  free(h->pn), free(h->sn), free(h->gn), free(h->zn);
  free(h);
}

/* max |ref - got| / max |ref| (infinite when got holds a NaN). */
static inline double h_rel_err(const double *ref, const double *got, size_t n) {
  double maxd = 0, maxr = 1e-30;
  for (size_t i = 0; i < n; i++) {
    if (isnan(got[i])) return INFINITY;
    maxd = fmax(maxd, fabs(ref[i] - got[i]));
    maxr = fmax(maxr, fabs(ref[i]));
  }
  return maxd / maxr;
}

/* Every output of two runs of the same program compared: y, grad.x, final, grad.h0, grad.params,
 * gates. The worst relative error; *what names it. */
static inline double h_compare(const HBufs *ref, const HBufs *got, const Program *p, const char **what) {
  size_t rows = (size_t)ref->T * (size_t)ref->B;
  double worst = h_rel_err(ref->y, got->y, rows * (size_t)p->output_size), e;
  *what = "y";
#define H_WORSE(expr, name) \
  if ((e = (expr)) > worst || isnan(e)) worst = e, *what = name
  H_WORSE(h_rel_err(ref->gx, got->gx, rows * (size_t)p->x_size), "grad.x");
  for (int i = 0; i < ref->ns; i++) {
    H_WORSE(h_rel_err(ref->final[i], got->final[i], ref->sn[i]), "final");
    H_WORSE(h_rel_err(ref->gh0[i], got->gh0[i], ref->sn[i]), "grad.h0");
  }
  for (int i = 0; i < ref->np; i++) H_WORSE(h_rel_err(ref->gparams[i], got->gparams[i], ref->pn[i]), "grad.param");
  for (int i = 0; i < ref->ng; i++) H_WORSE(h_rel_err(ref->gates[i], got->gates[i], ref->gn[i]), "gate");
#undef H_WORSE
  return worst;
}

/* L = sum(y * dy) + sum(final * dfinal) after a forward and backward of c on h's buffers (the
 * gradients the backward leaves in h are L's). */
static inline double h_loss(Compiled *c, HBufs *h) {
  const Program *p = c->p;
  pipeline_run_f64(c, &h->io);
  size_t rows = (size_t)h->T * (size_t)h->B;
  double L = 0;
  for (size_t i = 0; i < rows * (size_t)p->output_size; i++) L += h->y[i] * h->dy[i];
  for (int i = 0; i < h->ns; i++)
    for (size_t j = 0; j < h->sn[i]; j++) L += h->final[i][j] * h->dfinal[i][j];
  return L;
}

/* max |fd - analytic| / max |analytic| over the n values v[] of one input, fd the central difference
 * of h_loss with step 1e-6 */
static inline double h_fd_error(Compiled *c, HBufs *h, double *v, size_t n, const double *analytic) {
  double eps = 1e-6, maxerr = 0, maxg = 1e-12;
  for (size_t i = 0; i < n; i++) {
    double keep = v[i];
    v[i] = keep + eps;
    double lp = h_loss(c, h);
    v[i] = keep - eps;
    double lm = h_loss(c, h);
    v[i] = keep;
    double fd = (lp - lm) / (2 * eps);
    maxerr = fmax(maxerr, fabs(fd - analytic[i]));
    maxg = fmax(maxg, fabs(analytic[i]));
  }
  return maxerr / maxg;
}

static inline double *h_dup(const double *v, size_t n) {
  double *d = xmalloc(sizeof(double) * (n + 1));
  memcpy(d, v, sizeof(double) * n);
  return d;
}

/* The gradients of c (a float64 back end) on h's inputs against central finite differences: every
 * param part, x and every h0 part. The worst relative error; `what` names it ("param part 2"). A
 * buffer's or frozen param's part has no gradient: it must come back exactly zero (infinite error
 * otherwise). */
static inline double h_fd_worst(Compiled *c, HBufs *h, char *what, size_t len) {
  const Program *p = c->p;
  size_t nx = (size_t)h->T * (size_t)h->B * (size_t)p->x_size;
  h_loss(c, h);
  double **gp = xcalloc((size_t)h->np + 1, sizeof(double *)), **gh = xcalloc((size_t)h->ns + 1, sizeof(double *));
  for (int i = 0; i < h->np; i++) gp[i] = h_dup(h->gparams[i], h->pn[i]);
  for (int i = 0; i < h->ns; i++) gh[i] = h_dup(h->gh0[i], h->sn[i]);
  double *gx = h_dup(h->gx, nx), worst = h_fd_error(c, h, h->x, nx, gx), e;
  snprintf(what, len, "x");
  for (int i = 0; i < h->np; i++) {
    if (p->pparts[i].no_grad) {
      for (size_t j = 0; j < h->pn[i]; j++)
        if (gp[i][j] != 0) worst = INFINITY, snprintf(what, len, "param part %d (no gradient) not zero", i);
      continue;
    }
    if ((e = h_fd_error(c, h, h->params[i], h->pn[i], gp[i])) > worst || isnan(e)) worst = e, snprintf(what, len, "param part %d", i);
  }
  for (int i = 0; i < h->ns; i++)
    if ((e = h_fd_error(c, h, h->h0[i], h->sn[i], gh[i])) > worst || isnan(e)) worst = e, snprintf(what, len, "h0 part %d", i);
  h_parts_free(gp, h->np), h_parts_free(gh, h->ns);
  free(gx);
  return worst;
}

#endif
