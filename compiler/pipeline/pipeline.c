/* pipeline.c: lower -> differentiate -> a back end's compile, the back ends by name, and the cache
 * of compiled programs. */
#include "pipeline.h"

#include <string.h>

#include "cpu.h"
#include "cuda.h"
#include "interp.h"
#include "lower.h"

/* The back ends, written once: everything that lists them reads this. */
static const struct {
  const Backend *be;
  bool trains;             /* a train.device: `cellc train` runs its model on it */
} backends[] = {
    {&interp_backend, false},
    {&cpu_backend, true},
    {&cuda_backend, true},
    {&cuda_emu_backend, true},
};
#define NBACKENDS (int)(sizeof backends / sizeof backends[0])

int backend_count(void) { return NBACKENDS; }

const Backend *backend_at(int i) {
  CHECK(i >= 0 && i < NBACKENDS);
  return backends[i].be;
}

bool backend_trains(const Backend *be) {
  for (int i = 0; i < NBACKENDS; i++)
    if (backends[i].be == be) return backends[i].trains;
  return false;
}

const Backend *backend_find(const char *name) {
  for (int i = 0; i < NBACKENDS; i++)
    if (!strcmp(backends[i].be->name, name)) return backends[i].be;
  return NULL;
}

void backend_join(char *buf, size_t n, const char *sep, bool trains_only) {
  size_t len = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < NBACKENDS; i++) {
    if (trains_only && !backends[i].trains) continue;
    int k = snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? sep : "", backends[i].be->name);
    len += k > 0 ? (size_t)k : 0;
  }
}

const char *backend_names(void) {
  static char names[256];
  if (!names[0]) backend_join(names, sizeof names, ", ", false);
  return names;
}

const char *const *backend_device_names(void) {
  static const char *names[NBACKENDS + 1];
  if (!names[0]) {
    int n = 0;
    for (int i = 0; i < NBACKENDS; i++)
      if (backends[i].trains) names[n++] = backends[i].be->name;
    names[n] = NULL;
  }
  return names;
}

const Backend *backend_on_device(DeviceKind k) {
  for (int i = 0; i < NBACKENDS; i++)
    if (backends[i].trains && backends[i].be->device == k) return backends[i].be;
  CHECK(!"a device with no back end that trains on it");
  return NULL;
}

/* ---- the devices ---- */

static struct {
  Device *d;
  int refs;
} devices[DEVICE_KINDS];

Device *device_open(DeviceKind k, char *err, size_t errlen) {
  CHECK(k >= 0 && k < DEVICE_KINDS);
  if (k == DEVICE_CPU) return device_host();
  if (!devices[k].d) devices[k].d = cuda_device_open(k == DEVICE_CUDA_EMU, err, errlen);
  if (!devices[k].d) return NULL;
  devices[k].refs++;
  return devices[k].d;
}

void device_release(Device *d) {
  if (!d || device_is_host(d)) return;
  CHECK(devices[d->kind].d == d && devices[d->kind].refs > 0);
  if (--devices[d->kind].refs > 0) return;
  devices[d->kind].d = NULL;
  d->close(d);
}

bool device_kind_find(const char *name, DeviceKind *k) {
  for (int i = 0; i < NBACKENDS; i++)
    if (backends[i].trains && !strcmp(backends[i].be->name, name)) {
      *k = backends[i].be->device;
      return true;
    }
  return false;
}

/* ---- the cache ---- */

typedef struct Entry {
  uint64_t *sig;           /* the program's signature, then the back end and its options */
  size_t nsig;
  Compiled *c;
  int refs;
  struct Entry *next;
} Entry;

static Entry *cache;
static int hits;

int pipeline_cache_hits(void) { return hits; }

static uint64_t *request_signature(const Program *p, const Backend *be, const BackendOptions *o, size_t *len) {
  size_t n;
  uint64_t *sig = program_signature(p, &n);
  sig = xrealloc(sig, sizeof(uint64_t) * (n + 6));
  sig[n++] = (uint64_t)(uintptr_t)be;
  sig[n++] = o->scan, sig[n++] = o->gates, sig[n++] = o->f32, sig[n++] = (uint64_t)o->threads, sig[n++] = o->portable;
  *len = n;
  return sig;
}

Program *pipeline_derive(Cell *c) {
  Program *p = lower_cell(c, false, false);
  ad_differentiate(p);
  return p;
}

/* The back end's options from the pipeline's, and the program lowered (in scan form when the back
 * end runs the cell's scan mode) and differentiated. */
static Program *lower_for(Cell *cell, const PipelineOptions *o, BackendOptions *bo) {
  const Backend *be = o->backend;
  CHECK(be);
  memset(bo, 0, sizeof *bo);
  bo->scan = be->scans && cell->mode == MODE_SCAN;
  bo->gates = o->gates, bo->f32 = o->f32, bo->threads = o->threads, bo->portable = o->portable;
  Program *p = lower_cell(cell, o->training, bo->scan);
  ad_differentiate(p);
  return p;
}

int pipeline_emit(Cell *cell, const PipelineOptions *o, const EmitOptions *eo, char *err, size_t errlen) {
  const Backend *be = o->backend;
  CHECK(be);
  if (!be->emit) {
    snprintf(err, errlen, "the %s back end cannot emit code in this build", be->name);
    return -1;
  }
  BackendOptions bo;
  Program *p = lower_for(cell, o, &bo);
  const char *why = be->supports(p, &bo);
  int rc = why ? -1 : be->emit(p, &bo, eo, err, errlen);
  if (why) snprintf(err, errlen, "the %s back end cannot run cell '%s': %s", be->name, cell->name, why);
  program_free(p);
  return rc;
}

Compiled *pipeline_compile(Cell *cell, const PipelineOptions *o, char *err, size_t errlen) {
  const Backend *be = o->backend;
  BackendOptions bo;
  Program *p = lower_for(cell, o, &bo);
  size_t nsig;
  uint64_t *sig = request_signature(p, be, &bo, &nsig);
  for (Entry *e = cache; e; e = e->next)
    if (e->nsig == nsig && !memcmp(e->sig, sig, sizeof(uint64_t) * nsig)) {
      free(sig);
      program_free(p);
      e->refs++;
      hits++;
      return e->c;
    }
  const char *why = be->supports(p, &bo);
  Compiled *c = why ? NULL : be->compile(p, &bo, err, errlen);
  if (why) snprintf(err, errlen, "the %s back end cannot run cell '%s': %s", be->name, cell->name, why);
  if (!c) {
    free(sig);
    program_free(p);
    return NULL;
  }
  p->cell = NULL; /* the cell may go before the compiled program does */
  Entry *e = xcalloc(1, sizeof *e);
  e->sig = sig, e->nsig = nsig, e->c = c, e->refs = 1;
  e->next = cache;
  cache = e;
  return c;
}

void pipeline_release(Compiled *c) {
  if (!c) return;
  for (Entry **pp = &cache; *pp; pp = &(*pp)->next) {
    Entry *e = *pp;
    if (e->c != c) continue;
    if (--e->refs > 0) return;
    *pp = e->next;
    Program *p = c->p;
    c->be->free(c);
    program_free(p);
    free(e->sig);
    free(e);
    return;
  }
  UNREACHABLE("pipeline_release of a program the pipeline did not compile");
}

/* ---- running on float64 buffers ---- */

static float *f32_copy(const void *v, size_t n) {
  float *f = memuse_aligned(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) f[i] = (float)((const double *)v)[i];
  return f;
}

static void f64_from(void *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
}

/* An array of n per-part float32 copies of d's float64 arrays (in) or fresh buffers (!in). */
static void **f32_parts(const void **d, int n, const size_t *numel, bool in) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = in ? f32_copy(d[i], numel[i]) : memuse_aligned(sizeof(float) * numel[i]);
  return v;
}

static void parts_free(void **v, int n) {
  for (int i = 0; v && i < n; i++) memuse_free(v[i]);
  free(v);
}

/* ---- device memory: a SeqIO of float32 host buffers mirrored on the device ---- */

/* The element counts of every buffer of a SeqIO of program p, T and B. */
typedef struct IoSizes {
  size_t x, y, *pn, *sn, *gn, *zn;
} IoSizes;

static void *dev_copy(Device *dv, const void *src, size_t floats) {
  void *d = dv->alloc(dv, sizeof(float) * floats);
  if (src) dv->upload(dv, d, src, sizeof(float) * floats);
  return d;
}

static void **dev_parts(Device *dv, const void **src, int n, const size_t *numel) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = dev_copy(dv, src ? src[i] : NULL, numel[i]);
  return v;
}

static void dev_parts_down(Device *dv, void **host, void **dev, int n, const size_t *numel, bool free_only) {
  for (int i = 0; i < n; i++) {
    if (!free_only) dv->download(dv, host[i], dev[i], sizeof(float) * numel[i]);
    dv->free(dv, dev[i]);
  }
  free(dev);
}

/* Forward and backward of a back end on a device on float32 host buffers: every buffer uploaded
 * (inputs) or allocated (outputs) in the device's memory, the outputs downloaded. */
static void run_on_device(Compiled *c, Work *w, const SeqIO *h, const IoSizes *z, Chunker *k) {
  const Program *p = c->p;
  int np = p->npparts, ns = p->nsparts, ng = p->ngates, nz = p->nnoise;
  char err[1024];
  Device *dv = device_open(c->be->device, err, sizeof err);
  CHECK(dv); /* the compiled program holds the device open */
  SeqIO d = *h;
  d.x = dev_copy(dv, h->x, z->x), d.dy = dev_copy(dv, h->dy, z->y);
  d.y = dev_copy(dv, NULL, z->y), d.grad_x = dev_copy(dv, NULL, z->x);
  d.params = (const void **)dev_parts(dv, h->params, np, z->pn);
  d.h0 = (const void **)dev_parts(dv, h->h0, ns, z->sn);
  d.dfinal = (const void **)dev_parts(dv, h->dfinal, ns, z->sn);
  d.noise = (const void **)dev_parts(dv, h->noise, nz, z->zn);
  d.final = dev_parts(dv, NULL, ns, z->sn), d.grad_h0 = dev_parts(dv, NULL, ns, z->sn);
  d.grad_params = dev_parts(dv, NULL, np, z->pn), d.gates = dev_parts(dv, NULL, ng, z->gn);
  chunked_forward(c, w, &d, k);
  chunked_backward(c, w, &d, k);
  dv->download(dv, h->y, d.y, sizeof(float) * z->y);
  dv->download(dv, h->grad_x, d.grad_x, sizeof(float) * z->x);
  dev_parts_down(dv, h->final, d.final, ns, z->sn, false);
  dev_parts_down(dv, h->grad_h0, d.grad_h0, ns, z->sn, false);
  dev_parts_down(dv, h->grad_params, d.grad_params, np, z->pn, false);
  dev_parts_down(dv, h->gates, d.gates, ng, z->gn, false);
  dev_parts_down(dv, NULL, (void **)d.params, np, z->pn, true);
  dev_parts_down(dv, NULL, (void **)d.h0, ns, z->sn, true);
  dev_parts_down(dv, NULL, (void **)d.dfinal, ns, z->sn, true);
  dev_parts_down(dv, NULL, (void **)d.noise, nz, z->zn, true);
  dv->free(dv, (void *)d.x), dv->free(dv, (void *)d.dy);
  dv->free(dv, d.y), dv->free(dv, d.grad_x);
  device_release(dv);
}

/* Forward and backward on w (in chunks with k), then w freed (its profile into *prof when given). */
static void run_and_free(Compiled *c, Work *w, const SeqIO *d, Profile *prof, Chunker *k) {
  chunked_forward(c, w, d, k);
  chunked_backward(c, w, d, k);
  if (prof) *prof = w->prof;
  c->be->work_free(w);
}

static void run_f64(Compiled *c, const SeqIO *d, Profile *prof, int chunk) {
  CHECK(d->dtype == DT_F64);
  const Backend *be = c->be;
  Work *w = be->work_new(c);
  if (prof) w->profiling = true;
  Chunker *k = chunk > 0 ? chunker_new(c, chunk) : NULL;
  if (be->dtype == DT_F64) {
    run_and_free(c, w, d, prof, k);
    chunker_free(k);
    return;
  }
  Program *p = c->p;
  size_t rows = (size_t)d->T * (size_t)d->B;
  int np = p->npparts, ns = p->nsparts, ng = p->ngates, nz = p->nnoise;
  size_t *pn = xcalloc((size_t)np + 1, sizeof(size_t)), *sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  size_t *gn = xcalloc((size_t)ng + 1, sizeof(size_t)), *zn = xcalloc((size_t)nz + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) pn[i] = (size_t)p->pparts[i].numel;
  for (int i = 0; i < ns; i++) sn[i] = (size_t)d->B * (size_t)p->sparts[i].size;
  for (int i = 0; i < ng; i++) gn[i] = rows * (size_t)node_numel(graph_node(&p->g, p->gates[i].node));
  for (int i = 0; i < nz; i++) zn[i] = rows * (size_t)p->noise_sizes[i];
  SeqIO s = {0};
  s.T = d->T, s.B = d->B, s.dtype = DT_F32;
  s.lengths = d->lengths;
  s.x = f32_copy(d->x, rows * (size_t)p->x_size);
  s.dy = f32_copy(d->dy, rows * (size_t)p->output_size);
  s.params = (const void **)f32_parts(d->params, np, pn, true);
  s.h0 = (const void **)f32_parts(d->h0, ns, sn, true);
  s.dfinal = (const void **)f32_parts(d->dfinal, ns, sn, true);
  s.noise = (const void **)f32_parts(d->noise, nz, zn, true);
  s.final = f32_parts(NULL, ns, sn, false), s.grad_h0 = f32_parts(NULL, ns, sn, false);
  s.grad_params = f32_parts(NULL, np, pn, false), s.gates = f32_parts(NULL, ng, gn, false);
  s.y = memuse_aligned(sizeof(float) * rows * (size_t)p->output_size);
  s.grad_x = memuse_aligned(sizeof(float) * rows * (size_t)p->x_size);
  if (be->device != DEVICE_CPU) {
    IoSizes z = {rows * (size_t)p->x_size, rows * (size_t)p->output_size, pn, sn, gn, zn};
    run_on_device(c, w, &s, &z, k);
    if (prof) *prof = w->prof;
    be->work_free(w);
  } else
    run_and_free(c, w, &s, prof, k);
  chunker_free(k);
  f64_from(d->y, s.y, rows * (size_t)p->output_size);
  f64_from(d->grad_x, s.grad_x, rows * (size_t)p->x_size);
  for (int i = 0; i < np; i++) f64_from(d->grad_params[i], s.grad_params[i], pn[i]);
  for (int i = 0; i < ns; i++) f64_from(d->final[i], s.final[i], sn[i]), f64_from(d->grad_h0[i], s.grad_h0[i], sn[i]);
  for (int i = 0; i < ng; i++) f64_from(d->gates[i], s.gates[i], gn[i]);
  parts_free((void **)s.params, np), parts_free(s.grad_params, np);
  parts_free((void **)s.h0, ns), parts_free((void **)s.dfinal, ns), parts_free(s.final, ns), parts_free(s.grad_h0, ns);
  parts_free((void **)s.noise, nz), parts_free(s.gates, ng);
  memuse_free((void *)s.x), memuse_free((void *)s.dy), memuse_free(s.y), memuse_free(s.grad_x);
  free(pn), free(sn), free(gn), free(zn);
}

void pipeline_run_f64(Compiled *c, const SeqIO *d) { run_f64(c, d, NULL, 0); }

void pipeline_run_f64_chunked(Compiled *c, const SeqIO *d, int chunk) { run_f64(c, d, NULL, chunk); }

void pipeline_run_f64_profiled(Compiled *c, const SeqIO *d, Profile *prof) { run_f64(c, d, prof, 0); }

