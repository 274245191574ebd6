/* chunkdev.c: the chunked form on a CUDA back end (cuda, cuda-emu): chunkrun.c's order of parts
 *   in (the back end's program) -> the chunk ops (cellc_chunk.cu: a thread block per chunk of each
 *   head and batch row, the states passed between the chunks) -> out; the backward out, the chunk
 *   ops' backward (from the forward's boundary states), in
 * with every buffer in device memory; x into out's input and the two programs' gradients summed by
 * the chunk module's column kernel. */
#include "chunkdev.h"

#include <string.h>
#include <time.h>

#include "cuda.h"

/* One buffer per part, each with room for have[i] floats */
typedef struct Kept {
  void **v;
  size_t *have;
  int n;
} Kept;

struct ChunkDev {
  Device *dv;
  CudaChunk *ck;
  /* the per-row buffers, kept between runs (a device allocation and its free cost a synchronization) */
  float *yin, *dyin, *xo, *gxo, *gxi, *bnd, *loc, *dec;
  size_t nyin, nxo, ngxi, nbnd, nloc, ndec; /* their floats (yin and dyin, xo and gxo grow together: one count a pair) */
  int T, B;                    /* the last forward's sequence, whose buffers the backward reads */
  /* the per-part buffers of a run (in's final states, the zero dfinal, each program's gradients of
     the states and params), kept between runs as the rows' */
  Kept fin, zero, ghi, gho, gpi, gpo;
};

/* *p with room for n floats (its contents not kept) */
static float *room(Device *dv, float **p, size_t *have, size_t n) {
  if (n > *have || !*p) {
    if (*p) dv->free(dv, *p);
    *p = dv->alloc(dv, sizeof(float) * (n ? n : 1)), *have = n;
  }
  return *p;
}

/* s's n buffers with room for numel[i] floats each, zeros (a device allocation and its free cost a
 * synchronization: grown only, else zeroed) */
static void **kept(Device *dv, Kept *s, int n, const size_t *numel) {
  if (!s->v) s->v = xcalloc((size_t)n + 1, sizeof(void *)), s->have = xcalloc((size_t)n + 1, sizeof(size_t)), s->n = n;
  CHECK(s->n == n); /* one form's parts */
  for (int i = 0; i < n; i++) {
    if (s->v[i] && numel[i] <= s->have[i]) {
      dv->zero(dv, s->v[i], sizeof(float) * numel[i]);
      continue;
    }
    if (s->v[i]) dv->free(dv, s->v[i]);
    s->v[i] = dv->alloc(dv, sizeof(float) * (numel[i] ? numel[i] : 1)), s->have[i] = numel[i]; /* zeroed */
  }
  return s->v;
}

static void kept_free(Device *dv, Kept *s) {
  for (int i = 0; s->v && i < s->n; i++)
    if (s->v[i]) dv->free(dv, s->v[i]);
  free(s->v), free(s->have);
}

static void die(const char *err) {
  fprintf(stderr, "cellc: the chunked form on the device failed: %s\n", err);
  exit(3);
}

/* Whether every chunked state's chunk op fits a block at chunks of L steps (why not in why) */
static bool fits(const ChunkDev *k, const ChunkLayout *lay, int nl, int L, char *why, size_t n) {
  for (int i = 0; i < nl; i++) {
    int E = lay[i].nterms + lay[i].nreads - 1;
    if (cuda_chunk_fits(k->ck, lay[i].K, lay[i].V, L * E, lay[i].per_key, lay[i].delta, why, n) != 0) return false;
  }
  return true;
}

ChunkDev *chunkdev_open(const Backend *be, const ChunkLayout *lay, int nl, int L, int *chosen, char *err, size_t errlen) {
  ChunkDev *k = xcalloc(1, sizeof *k);
  char why[8192];
  k->dv = device_open(be->device, why, sizeof why);
  if (k->dv) k->ck = cuda_chunk_open(be->device == DEVICE_CUDA_EMU, why, sizeof why);
  if (k->ck && L > 0 && !fits(k, lay, nl, L, why, sizeof why)) cuda_chunk_close(k->ck), k->ck = NULL;
  if (k->ck && L <= 0) { /* the default chunk, halved until the blocks fit */
    for (*chosen = CHUNK_DEFAULT; *chosen > 1 && !fits(k, lay, nl, *chosen, why, sizeof why); *chosen /= 2) {}
    if (!fits(k, lay, nl, *chosen, why, sizeof why)) cuda_chunk_close(k->ck), k->ck = NULL;
  }
  if (!k->ck) { /* no device: its own message, which names the back end */
    if (k->dv) snprintf(err, errlen, "the %s back end cannot run the chunked form: %s", be->name, why);
    else snprintf(err, errlen, "%s", why);
    chunkdev_close(k);
    return NULL;
  }
  return k;
}

void chunkdev_close(ChunkDev *k) {
  if (!k) return;
  float *bufs[8] = {k->yin, k->dyin, k->xo, k->gxo, k->gxi, k->bnd, k->loc, k->dec};
  for (int i = 0; i < 8; i++)
    if (bufs[i]) k->dv->free(k->dv, bufs[i]);
  Kept *ks[6] = {&k->fin, &k->zero, &k->ghi, &k->gho, &k->gpi, &k->gpo};
  for (int i = 0; k->dv && i < 6; i++) kept_free(k->dv, ks[i]);
  cuda_chunk_close(k->ck);
  if (k->dv) device_release(k->dv);
  free(k);
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the device's launches done, then the clock */
static double synced(ChunkDev *k) {
  char err[1024];
  if (cuda_chunk_sync(k->ck, err, sizeof err) != 0) die(err);
  return seconds();
}

static void cols(ChunkDev *k, float *dst, int ldd, const float *a, int lda, const float *b, int ldb, long long rows, int n) {
  char err[8192];
  if (cuda_chunk_cols(k->ck, dst, ldd, a, lda, b, ldb, rows, n, err, sizeof err) != 0) die(err);
}

/* A program's per-part array (its parts: the cell's but the chunked states') from the SeqIO's */
static void **mapped(const ChunkDevForm *f, const Program *p, const void *const *full) {
  void **v = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int q = 0; q < p->nsparts; q++) v[q] = (void *)full[f->full_of[p->sparts[q].state] + p->sparts[q].part];
  return v;
}

/* The kernels' arguments for chunked state i (the buffers the caller's) */
static CellcChunkArgs args_of(const ChunkDevForm *f, const ChunkLayout *l, int T, int B, int nin, int xw) {
  CellcChunkArgs a = {0};
  a.T = T, a.B = B, a.nh = l->nh, a.K = l->K, a.V = l->V;
  a.M = l->nterms, a.R = l->nreads, a.E = a.M + a.R - 1, a.L = f->L * a.E;
  a.per_key = l->per_key, a.key_last = l->key_last, a.nin = nin, a.xw = xw;
  a.q_off = chunk_q_off(l, 0), a.k_off = chunk_k_off(l, 0), a.v_off = chunk_v_off(l, 0), a.la_off = chunk_la_off(l);
  a.out_off = f->D + l->out_off;
  a.delta = l->delta, a.c_off = l->delta ? chunk_c_off(l) : 0;
  return a;
}

/* The sizes of a run of T steps of B rows: the per-part counts (pn[np], sn[ns]); per chunked state
 * its boundary states (the forward's, kept for the backward) after the states before it (bat), and
 * after them the delta rule's u (keep: CellcChunkArgs.ukeep); the scratch of the passes, the
 * largest state's (nloc, ndec) */
typedef struct Sizes {
  size_t *pn, *sn, rows, ny, nx, ng;
  size_t bat[CHUNK_LAYOUT_MAX + 1], keep[CHUNK_LAYOUT_MAX], nloc, ndec;
} Sizes;

static Sizes sizes_of(const ChunkDevForm *f, int T, int B) {
  const Program *pin = f->in->p, *pout = f->out->p;
  int np = pout->npparts, ns = pout->nsparts; /* in's parts are out's */
  Sizes z = {0};
  z.rows = (size_t)T * (size_t)B;
  z.pn = xcalloc((size_t)np + 1, sizeof(size_t)), z.sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) z.pn[i] = (size_t)pout->pparts[i].numel;
  for (int i = 0; i < ns; i++) z.sn[i] = (size_t)B * (size_t)pout->sparts[i].size;
  z.ny = z.rows * (size_t)pin->output_size, z.nx = z.rows * (size_t)pout->x_size, z.ng = z.rows * (size_t)f->D;
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    size_t E = (size_t)(l->nterms + l->nreads - 1), nc = ((size_t)T * E + (size_t)f->L * E - 1) / ((size_t)f->L * E);
    size_t heads = (size_t)B * (size_t)l->nh, kv = (size_t)l->K * (size_t)l->V;
    z.keep[i] = z.bat[i] + heads * (nc + 1) * kv;
    z.bat[i + 1] = z.keep[i] + (l->delta ? heads * (size_t)T * (size_t)l->V : 0);
    z.nloc = z.nloc > heads * nc * kv ? z.nloc : heads * nc * kv;
    z.ndec = z.ndec > heads * nc * (size_t)l->K ? z.ndec : heads * nc * (size_t)l->K;
  }
  return z;
}

static void sizes_free(Sizes *z) { free(z->pn), free(z->sn); }

/* A run's per-part pointer arrays: each program's view of the SeqIO's state parts, and in's final
 * states and dfinal (out owns the cell's: chunk_own_finals) in device buffers of their own */
typedef struct Parts {
  void **h0, **dfinal, **final, **gh0, **fin, **zero, **fin_in, **df_in; /* fin, zero: k's */
} Parts;

static Parts parts_of(ChunkDev *k, const ChunkDevForm *f, const SeqIO *d, const Sizes *z) {
  const Program *pout = f->out->p;
  int ns = pout->nsparts;
  Parts r;
  r.fin = kept(k->dv, &k->fin, ns, z->sn), r.zero = kept(k->dv, &k->zero, ns, z->sn);
  r.h0 = mapped(f, pout, d->h0), r.dfinal = mapped(f, pout, d->dfinal), r.final = mapped(f, pout, (const void *const *)d->final);
  r.gh0 = mapped(f, pout, (const void *const *)d->grad_h0);
  r.fin_in = chunk_ptrs(r.fin, ns), r.df_in = chunk_ptrs(r.zero, ns);
  chunk_own_finals(pout, r.final, r.fin_in, (const void **)r.dfinal, (const void **)r.df_in);
  return r;
}

static void parts_free(Parts *r) {
  free(r->h0), free(r->dfinal), free(r->final), free(r->gh0), free(r->fin_in), free(r->df_in);
}

void chunkdev_forward(ChunkDev *k, const ChunkDevForm *f, const SeqIO *d, double *times) {
  CHECK(d->dtype == DT_F32);
  Device *dv = k->dv;
  const Program *pin = f->in->p, *pout = f->out->p;
  int T = d->T, B = d->B, nin = pin->output_size, xw = pout->x_size, D = f->D;
  Sizes z = sizes_of(f, T, B);
  /* each written whole before it is read: by the programs, the chunk ops (dyin: every input of every
     op), the column kernel (xo's first D columns) */
  size_t hy = k->nyin, hx = k->nxo;
  float *yin = room(dv, &k->yin, &hy, z.ny);
  room(dv, &k->dyin, &k->nyin, z.ny);
  float *xo = room(dv, &k->xo, &hx, z.nx);
  room(dv, &k->gxo, &k->nxo, z.nx), room(dv, &k->gxi, &k->ngxi, z.ng);
  float *bnd = room(dv, &k->bnd, &k->nbnd, z.bat[f->nl]), *loc = room(dv, &k->loc, &k->nloc, z.nloc);
  float *dec = room(dv, &k->dec, &k->ndec, z.ndec);
  k->T = T, k->B = B;
  Parts r = parts_of(k, f, d, &z);
  int nsh = pin->chunk_shared;
  char err[8192];

  SeqIO si = *d;
  si.h0 = (const void **)r.h0, si.y = yin, si.final = r.fin_in, si.gates = NULL;
  double t0 = synced(k);
  f->in->be->forward(f->in, f->win, &si);
  double t1 = synced(k);
  cols(k, xo, xw, d->x, D, NULL, 0, (long long)z.rows, D);
  if (nsh) cols(k, xo + (xw - nsh), xw, yin + (nin - nsh), nin, NULL, 0, (long long)z.rows, nsh);
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state];
    CellcChunkArgs a = args_of(f, l, T, B, nin, xw);
    a.yin = yin, a.xo = xo, a.h0 = d->h0[q], a.final = d->final[q], a.bnd = bnd + z.bat[i], a.loc = loc, a.dec = dec;
    a.ukeep = l->delta ? bnd + z.keep[i] : NULL;
    if (cuda_chunk_forward(k->ck, &a, true, err, sizeof err) != 0) die(err);
  }
  SeqIO so = *d;
  so.x = xo, so.h0 = (const void **)r.h0, so.final = r.final;
  double t2 = synced(k);
  f->out->be->forward(f->out, f->wout, &so);
  double t3 = synced(k);
  times[0] = t1 - t0, times[1] = t2 - t1, times[2] = t3 - t2;
  parts_free(&r);
  sizes_free(&z);
}

void chunkdev_backward(ChunkDev *k, const ChunkDevForm *f, const SeqIO *d, double *times) {
  CHECK(d->dtype == DT_F32 && d->T == k->T && d->B == k->B); /* after chunkdev_forward of d */
  Device *dv = k->dv;
  const Program *pin = f->in->p, *pout = f->out->p;
  int T = d->T, B = d->B, nin = pin->output_size, xw = pout->x_size, D = f->D;
  int np = pout->npparts, ns = pout->nsparts;
  Sizes z = sizes_of(f, T, B);
  float *yin = k->yin, *dyin = k->dyin, *xo = k->xo, *gxo = k->gxo, *gxi = k->gxi;
  Parts r = parts_of(k, f, d, &z);
  void **ghi = kept(dv, &k->ghi, ns, z.sn), **gho = kept(dv, &k->gho, ns, z.sn), **gpi = kept(dv, &k->gpi, np, z.pn);
  void **gpo = kept(dv, &k->gpo, np, z.pn);
  int nsh = pin->chunk_shared;
  char err[8192];

  SeqIO so = *d;
  so.x = xo, so.h0 = (const void **)r.h0, so.final = r.final;
  so.dfinal = (const void **)r.dfinal, so.grad_x = gxo, so.grad_params = gpo, so.grad_h0 = gho, so.fold = NULL;
  double t3 = synced(k);
  f->out->be->backward(f->out, f->wout, &so);
  double t4 = synced(k);
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state];
    CellcChunkArgs a = args_of(f, l, T, B, nin, xw);
    a.yin = yin, a.dyin = dyin, a.dxo = gxo, a.h0 = d->h0[q], a.dfinal = d->dfinal[q], a.bnd = k->bnd + z.bat[i];
    a.ukeep = l->delta ? k->bnd + z.keep[i] : NULL;
    a.dh0 = d->grad_h0[q], a.loc = k->loc, a.dec = k->dec;
    if (cuda_chunk_backward(k->ck, &a, err, sizeof err) != 0) die(err);
  }
  if (nsh) cols(k, dyin + (nin - nsh), nin, gxo + (xw - nsh), xw, NULL, 0, (long long)z.rows, nsh);
  SeqIO si = *d;
  si.h0 = (const void **)r.h0, si.y = yin, si.final = r.fin_in, si.gates = NULL;
  si.dy = dyin, si.dfinal = (const void **)r.df_in, si.grad_x = gxi, si.grad_params = gpi, si.grad_h0 = ghi, si.fold = NULL;
  double t5 = synced(k);
  f->in->be->backward(f->in, f->win, &si);
  double t6 = synced(k);
  times[3] = t4 - t3, times[4] = t5 - t4, times[5] = t6 - t5;
  if (d->grad_x) cols(k, d->grad_x, D, gxo, xw, gxi, D, (long long)z.rows, D);
  for (int i = 0; i < np; i++) cols(k, d->grad_params[i], 0, gpo[i], 0, gpi[i], 0, 1, (int)z.pn[i]);
  for (int q = 0; q < ns; q++) cols(k, r.gh0[q], 0, gho[q], 0, ghi[q], 0, 1, (int)z.sn[q]);
  synced(k);
  parts_free(&r);
  sizes_free(&z);
}

static void *up(Device *dv, const void *src, size_t floats) {
  void *p = dv->alloc(dv, sizeof(float) * floats);
  if (src) dv->upload(dv, p, src, sizeof(float) * floats);
  return p;
}

static void **ups(Device *dv, const void *const *src, int n, const size_t *numel) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = up(dv, src ? src[i] : NULL, numel[i]);
  return v;
}

/* each part downloaded into host (when not NULL), then freed */
static void downs(Device *dv, void **host, void **dev, int n, const size_t *numel) {
  for (int i = 0; dev && i < n; i++) {
    if (host) dv->download(dv, host[i], dev[i], sizeof(float) * numel[i]);
    dv->free(dv, dev[i]);
  }
  free(dev);
}

void chunkdev_on_device(ChunkDev *k, const SeqIO *h, const ChunkDevSizes *z, void (*run)(void *f, const SeqIO *d), void *f) {
  Device *dv = k->dv;
  SeqIO d = *h;
  d.x = up(dv, h->x, z->x), d.dy = up(dv, h->dy, z->y), d.y = up(dv, NULL, z->y), d.grad_x = up(dv, NULL, z->x);
  d.params = (const void **)ups(dv, h->params, z->np, z->pn), d.grad_params = ups(dv, NULL, z->np, z->pn);
  d.h0 = (const void **)ups(dv, h->h0, z->ns, z->sn), d.dfinal = (const void **)ups(dv, h->dfinal, z->ns, z->sn);
  d.final = ups(dv, NULL, z->ns, z->sn), d.grad_h0 = ups(dv, NULL, z->ns, z->sn);
  d.noise = h->noise ? (const void **)ups(dv, h->noise, z->nz, z->zn) : NULL;
  d.gates = h->gates ? ups(dv, NULL, z->ng, z->gn) : NULL;
  run(f, &d);
  dv->download(dv, h->y, d.y, sizeof(float) * z->y), dv->download(dv, h->grad_x, d.grad_x, sizeof(float) * z->x);
  dv->free(dv, (void *)d.x), dv->free(dv, (void *)d.dy), dv->free(dv, d.y), dv->free(dv, d.grad_x);
  downs(dv, NULL, (void **)d.params, z->np, z->pn), downs(dv, h->grad_params, d.grad_params, z->np, z->pn);
  downs(dv, NULL, (void **)d.h0, z->ns, z->sn), downs(dv, NULL, (void **)d.dfinal, z->ns, z->sn);
  downs(dv, h->final, d.final, z->ns, z->sn), downs(dv, h->grad_h0, d.grad_h0, z->ns, z->sn);
  downs(dv, NULL, (void **)d.noise, d.noise ? z->nz : 0, z->zn), downs(dv, h->gates, d.gates, d.gates ? z->ng : 0, z->gn);
}
