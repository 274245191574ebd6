/* chunked.c: a sequence in chunks with its states kept at chunk boundaries (pipeline.h, "Chunks"). */
#include "pipeline.h"

#include <string.h>

#include "lower.h"

int chunk_length(const Cell *c, int asked) {
  if (asked >= 0) return asked;
  for (int i = 0; i < c->nstates; i++)
    if (c->states[i].rank >= 2) return CHUNK_DEFAULT;
  return 0;
}

struct Chunker {
  int L;
  Device *dv;
  const Program *p;
  size_t esize;            /* bytes of an element: the back end's dtype */
  int T, B, K;             /* the sequence the buffers are for; K chunks */
  void **bnd;              /* boundary b (after chunk b, b < K - 1), state part q: bnd[b * ns + q], [B, size] */
  void **dbuf[2];          /* per state part: the gradient handed from chunk to chunk, two in turn */
  void **fin;              /* per state part: the final states of a chunk's forward run again */
  void **gtmp;             /* per param part: one chunk's weight gradients */
  const void **h0, **dfinal;
  void **final, **grad_h0, **grads, **gates;
  const void **noise;
};

Chunker *chunker_new(Compiled *c, int L) {
  CHECK(L >= 1);
  char err[512];
  Chunker *k = xcalloc(1, sizeof *k);
  k->L = L;
  k->p = c->p;
  k->esize = c->be->dtype == DT_F64 ? sizeof(double) : sizeof(float);
  k->dv = device_open(c->be->device, err, sizeof err);
  CHECK(k->dv); /* the compiled program holds its device open */
  int ns = c->p->nsparts, np = c->p->npparts;
  k->h0 = xcalloc((size_t)ns + 1, sizeof(void *)), k->dfinal = xcalloc((size_t)ns + 1, sizeof(void *));
  k->final = xcalloc((size_t)ns + 1, sizeof(void *)), k->grad_h0 = xcalloc((size_t)ns + 1, sizeof(void *));
  k->grads = xcalloc((size_t)np + 1, sizeof(void *));
  k->gates = xcalloc((size_t)c->p->ngates + 1, sizeof(void *));
  k->noise = xcalloc((size_t)c->p->nnoise + 1, sizeof(void *));
  return k;
}

int chunker_length(const Chunker *k) { return k->L; }

static void free_parts(Device *dv, void **v, int n) {
  for (int i = 0; v && i < n; i++) dv->free(dv, v[i]);
  free(v);
}

/* The buffers that depend on the sequence's T and B. */
static void release_buffers(Chunker *k) {
  int ns = k->p->nsparts;
  free_parts(k->dv, k->bnd, k->K > 1 ? (k->K - 1) * ns : 0);
  free_parts(k->dv, k->dbuf[0], ns), free_parts(k->dv, k->dbuf[1], ns), free_parts(k->dv, k->fin, ns);
  free_parts(k->dv, k->gtmp, k->p->npparts);
  k->bnd = k->dbuf[0] = k->dbuf[1] = k->fin = k->gtmp = NULL;
  k->K = 0;
}

void chunker_free(Chunker *k) {
  if (!k) return;
  release_buffers(k);
  free(k->h0), free(k->dfinal), free(k->final), free(k->grad_h0), free(k->grads), free(k->gates), free(k->noise);
  device_release(k->dv);
  free(k);
}

static void **alloc_parts(Chunker *k, int n, const size_t *elems) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = k->dv->alloc(k->dv, k->esize * (elems[i] ? elems[i] : 1));
  return v;
}

static void ensure_buffers(Chunker *k, int T, int B) {
  if (k->T == T && k->B == B && k->K) return;
  release_buffers(k);
  const Program *p = k->p;
  int ns = p->nsparts, np = p->npparts;
  k->T = T, k->B = B, k->K = (T + k->L - 1) / k->L;
  size_t *sn = xcalloc((size_t)ns + 1, sizeof(size_t)), *pn = xcalloc((size_t)np + 1, sizeof(size_t));
  for (int q = 0; q < ns; q++) sn[q] = (size_t)B * (size_t)p->sparts[q].size;
  for (int i = 0; i < np; i++) pn[i] = (size_t)p->pparts[i].numel;
  if (k->K > 1) {
    k->bnd = xcalloc((size_t)(k->K - 1) * (size_t)ns + 1, sizeof(void *));
    for (int b = 0; b < k->K - 1; b++)
      for (int q = 0; q < ns; q++) k->bnd[b * ns + q] = k->dv->alloc(k->dv, k->esize * (sn[q] ? sn[q] : 1));
  }
  k->dbuf[0] = alloc_parts(k, ns, sn), k->dbuf[1] = alloc_parts(k, ns, sn), k->fin = alloc_parts(k, ns, sn);
  k->gtmp = alloc_parts(k, np, pn);
  free(sn), free(pn);
}

/* A byte offset into a per-row array of width w from row t0 * B on (NULL stays NULL). */
static const void *at(const Chunker *k, const void *base, int t0, int B, int w) {
  return base ? (const char *)base + k->esize * (size_t)t0 * (size_t)B * (size_t)w : NULL;
}

/* Chunk j of s: its steps, the per-row arrays offset, the per-part arrays left to the caller. */
static SeqIO chunk_of(Chunker *k, const SeqIO *s, int j, SeqFold *fold) {
  const Program *p = k->p;
  int t0 = j * k->L, B = s->B;
  SeqIO c = *s;
  c.T = s->T - t0 < k->L ? s->T - t0 : k->L;
  c.x = at(k, s->x, t0, B, p->x_size), c.y = (void *)at(k, s->y, t0, B, p->output_size);
  c.dy = at(k, s->dy, t0, B, p->output_size), c.grad_x = (void *)at(k, s->grad_x, t0, B, p->x_size);
  if (s->noise) {
    for (int i = 0; i < p->nnoise; i++) k->noise[i] = at(k, s->noise[i], t0, B, p->noise_sizes[i]);
    c.noise = k->noise;
  }
  if (s->gates) {
    for (int i = 0; i < p->ngates; i++)
      k->gates[i] = (void *)at(k, s->gates[i], t0, B, node_numel(&p->g.nodes[p->gates[i].node]));
    c.gates = k->gates;
  }
  if (s->fold) {
    *fold = *s->fold;
    fold->ids = s->fold->ids + (size_t)t0 * (size_t)B;
    c.fold = fold;
  }
  return c;
}

/* Chunk j's initial states: the sequence's, or the boundary before it. */
static void chunk_h0(Chunker *k, const SeqIO *s, int j) {
  int ns = k->p->nsparts;
  for (int q = 0; q < ns; q++) k->h0[q] = j == 0 ? s->h0[q] : k->bnd[(j - 1) * ns + q];
}

void chunked_forward(Compiled *c, Work *w, const SeqIO *s, Chunker *k) {
  if (seq_varlen(s)) {
    varlen_backend_forward(c, w, s, k);
    return;
  }
  if (!k || k->L >= s->T) {
    c->be->forward(c, w, s);
    return;
  }
  ensure_buffers(k, s->T, s->B);
  int ns = k->p->nsparts;
  for (int j = 0; j < k->K; j++) {
    SeqFold fold;
    SeqIO cs = chunk_of(k, s, j, &fold);
    chunk_h0(k, s, j);
    for (int q = 0; q < ns; q++) k->final[q] = j == k->K - 1 ? s->final[q] : k->bnd[j * ns + q];
    cs.h0 = k->h0, cs.final = k->final;
    c->be->forward(c, w, &cs);
  }
}

/* y += x over n elements of the chunker's dtype */
static void acc(Chunker *k, void *y, const void *x, size_t n) {
  if (k->esize == sizeof(float)) {
    k->dv->acc(k->dv, y, x, n);
    return;
  }
  double *yd = y; /* float64: the interpreter's, in host memory */
  const double *xd = x;
  for (size_t i = 0; i < n; i++) yd[i] += xd[i];
}

void chunked_backward(Compiled *c, Work *w, const SeqIO *s, Chunker *k) {
  if (seq_varlen(s)) {
    varlen_backend_backward(c, w, s, k);
    return;
  }
  if (!k || k->L >= s->T) {
    c->be->backward(c, w, s);
    return;
  }
  CHECK(k->T == s->T && k->B == s->B); /* after chunked_forward of this sequence */
  const Program *p = k->p;
  int ns = p->nsparts, np = p->npparts;
  const void *const *dnext = s->dfinal;
  for (int j = k->K - 1; j >= 0; j--) {
    SeqFold fold;
    SeqIO cs = chunk_of(k, s, j, &fold);
    chunk_h0(k, s, j);
    cs.h0 = k->h0;
    if (j < k->K - 1) { /* the last chunk's forward is the work's already */
      for (int q = 0; q < ns; q++) k->final[q] = k->fin[q];
      cs.final = k->final;
      SeqIO fw = cs;
      fw.gates = NULL; /* recorded by the first forward */
      c->be->forward(c, w, &fw);
    }
    for (int q = 0; q < ns; q++) {
      k->dfinal[q] = dnext[q];
      k->grad_h0[q] = j == 0 ? s->grad_h0[q] : k->dbuf[j % 2][q];
    }
    for (int i = 0; i < np; i++) k->grads[i] = j == k->K - 1 ? s->grad_params[i] : k->gtmp[i];
    cs.dfinal = k->dfinal, cs.grad_h0 = k->grad_h0, cs.grad_params = k->grads;
    c->be->backward(c, w, &cs);
    if (j < k->K - 1)
      for (int i = 0; i < np; i++) acc(k, s->grad_params[i], k->gtmp[i], (size_t)p->pparts[i].numel);
    dnext = (const void *const *)k->dbuf[j % 2];
  }
}
