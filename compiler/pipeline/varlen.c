/* varlen.c: sequences of different lengths (SeqIO.lengths; pipeline.h, "Variable lengths").
 *
 * The batch runs in segments between its distinct lengths u_1 < ... < u_K: segment j covers steps
 * [u_{j-1}, u_j) of the rows still running (length >= u_j), gathered into a smaller SeqIO that the
 * back end runs as it runs any sequence. A row's final state is the final state of the segment it
 * ends in, and each later segment starts from the gathered final states of the one before. The
 * backward goes through the segments last to first, each one's forward run again from its initial
 * states (kept by a forward sweep) before its backward; a row's dfinal is the caller's in the
 * segment it ends in, else the next segment's dh0. Padding (x, dy, noise past a row's length) is
 * never read, y and grad_x past it are zeros. Every back end, mode and the chunked form run
 * unchanged, and a row's results are those of a run of that row alone, up to the order of the
 * weight gradients' sums. */
#include "pipeline.h"

#include <string.h>

#include "lower.h"

bool seq_varlen(const SeqIO *s) {
  for (int b = 0; s->lengths && b < s->B; b++) {
    CHECK(s->lengths[b] >= 1 && s->lengths[b] <= s->T); /* the edge (cellc run, the model) checks */
    if (s->lengths[b] < s->T) return true;
  }
  return false;
}

typedef struct Seg {
  int t0, t1;              /* its steps */
  int n;                   /* rows running */
  int *act;                /* [n]: the rows, in batch order */
  int *pos;                /* [n]: each row's index in the segment before (segment 0: itself) */
} Seg;

typedef struct Varlen {
  const Program *p;
  Device *dv;
  size_t es;               /* bytes of an element */
  const SeqIO *s;
  int K;
  Seg *seg;
  void **h0;               /* per segment j > 0 and state part q: h0[j * ns + q], [n_j, size] */
  /* one segment's buffers, for T B rows */
  void *x, *y, *dy, *gx;
  int32_t *ids;
  void **fin, **dfin, **gh[2], **gtmp, **gates, **noise;
} Varlen;

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void *zalloc(Varlen *v, size_t bytes) {
  void *p = v->dv->alloc(v->dv, bytes ? bytes : 1);
  v->dv->zero(v->dv, p, bytes ? bytes : 1);
  return p;
}

static void **zparts(Varlen *v, int n, const size_t *elems, size_t mul) {
  void **a = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) a[i] = zalloc(v, v->es * elems[i] * mul);
  return a;
}

static void free_parts(Varlen *v, void **a, int n) {
  for (int i = 0; a && i < n; i++) v->dv->free(v->dv, a[i]);
  free(a);
}

static size_t gate_width(const Program *p, int i) { return (size_t)node_numel(&p->g.nodes[p->gates[i].node]); }

static void varlen_init(Varlen *v, const Program *p, Device *dv, const SeqIO *s) {
  memset(v, 0, sizeof *v);
  v->p = p, v->dv = dv, v->s = s;
  v->es = s->dtype == DT_F64 ? sizeof(double) : sizeof(float);
  int B = s->B, ns = p->nsparts, np = p->npparts;
  int *u = xcalloc((size_t)B + 1, sizeof(int));
  memcpy(u, s->lengths, sizeof(int) * (size_t)B);
  qsort(u, (size_t)B, sizeof(int), cmp_int);
  int K = 0;
  for (int b = 0; b < B; b++)
    if (!K || u[b] != u[K - 1]) u[K++] = u[b];
  v->K = K;
  v->seg = xcalloc((size_t)K, sizeof(Seg));
  for (int j = 0; j < K; j++) {
    Seg *g = &v->seg[j];
    g->t0 = j ? u[j - 1] : 0, g->t1 = u[j];
    g->act = xcalloc((size_t)B + 1, sizeof(int)), g->pos = xcalloc((size_t)B + 1, sizeof(int));
    int k = 0; /* index into the segment before */
    for (int b = 0; b < B; b++) {
      if (j && b == v->seg[j - 1].act[k]) k++;
      if (s->lengths[b] < g->t1) continue;
      g->pos[g->n] = j ? k - 1 : g->n;
      g->act[g->n++] = b;
    }
  }
  free(u);
  size_t rows = (size_t)s->T * (size_t)B;
  size_t *sn = xcalloc((size_t)ns + 1, sizeof(size_t)), *pn = xcalloc((size_t)np + 1, sizeof(size_t));
  size_t *gn = xcalloc((size_t)p->ngates + 1, sizeof(size_t)), *zn = xcalloc((size_t)p->nnoise + 1, sizeof(size_t));
  for (int q = 0; q < ns; q++) sn[q] = (size_t)p->sparts[q].size;
  for (int i = 0; i < np; i++) pn[i] = (size_t)p->pparts[i].numel;
  for (int i = 0; i < p->ngates; i++) gn[i] = gate_width(p, i);
  for (int i = 0; i < p->nnoise; i++) zn[i] = (size_t)p->noise_sizes[i];
  v->h0 = xcalloc((size_t)K * (size_t)ns + 1, sizeof(void *));
  for (int j = 1; j < K; j++)
    for (int q = 0; q < ns; q++) v->h0[j * ns + q] = zalloc(v, v->es * sn[q] * (size_t)v->seg[j].n);
  v->x = zalloc(v, v->es * rows * (size_t)p->x_size), v->gx = zalloc(v, v->es * rows * (size_t)p->x_size);
  v->y = zalloc(v, v->es * rows * (size_t)p->output_size), v->dy = zalloc(v, v->es * rows * (size_t)p->output_size);
  if (s->fold) v->ids = zalloc(v, sizeof(int32_t) * rows);
  v->fin = zparts(v, ns, sn, (size_t)B), v->dfin = zparts(v, ns, sn, (size_t)B);
  v->gh[0] = zparts(v, ns, sn, (size_t)B), v->gh[1] = zparts(v, ns, sn, (size_t)B);
  v->gtmp = zparts(v, np, pn, 1);
  v->gates = zparts(v, p->ngates, gn, rows), v->noise = zparts(v, p->nnoise, zn, rows);
  free(sn), free(pn), free(gn), free(zn);
}

static void varlen_free(Varlen *v) {
  const Program *p = v->p;
  int ns = p->nsparts;
  for (int j = 1; j < v->K; j++)
    for (int q = 0; q < ns; q++) v->dv->free(v->dv, v->h0[j * ns + q]);
  free(v->h0);
  for (int j = 0; j < v->K; j++) free(v->seg[j].act), free(v->seg[j].pos);
  free(v->seg);
  v->dv->free(v->dv, v->x), v->dv->free(v->dv, v->gx), v->dv->free(v->dv, v->y), v->dv->free(v->dv, v->dy);
  if (v->ids) v->dv->free(v->dv, v->ids);
  free_parts(v, v->fin, ns), free_parts(v, v->dfin, ns), free_parts(v, v->gh[0], ns), free_parts(v, v->gh[1], ns);
  free_parts(v, v->gtmp, p->npparts), free_parts(v, v->gates, p->ngates), free_parts(v, v->noise, p->nnoise);
}

/* Rows of `w` bytes: dst's row i <- src's row map[i] (gather) or dst's row map[i] <- src's row i
 * (!gather), for i < n; runs of consecutive rows as one copy. */
static void move_rows(Device *dv, void *dst, const void *src, const int *map, int n, size_t w, bool gather) {
  for (int i = 0; i < n;) {
    int e = i + 1;
    while (e < n && map[e] == map[e - 1] + 1) e++;
    size_t a = gather ? (size_t)i : (size_t)map[i], b = gather ? (size_t)map[i] : (size_t)i;
    dv->copy(dv, (char *)dst + a * w, (const char *)src + b * w, (size_t)(e - i) * w);
    i = e;
  }
}

/* A per-row array [T, B, width] of the sequence <-> segment g's [t1 - t0, n, width]. */
static void move_steps(Varlen *v, const Seg *g, void *seq, void *sub, size_t width, size_t es, bool gather) {
  size_t w = width * es, B = (size_t)v->s->B, n = (size_t)g->n;
  for (int t = g->t0; t < g->t1; t++) {
    char *a = (char *)seq + (size_t)t * B * w, *b = (char *)sub + (size_t)(t - g->t0) * n * w;
    if (gather) move_rows(v->dv, b, a, g->act, g->n, w, true);
    else move_rows(v->dv, a, b, g->act, g->n, w, false);
  }
}

/* Segment j as a SeqIO over the segment buffers: x and noise gathered, the rest to the caller. */
static SeqIO segment_io(Varlen *v, int j, SeqFold *fold) {
  const Program *p = v->p;
  const SeqIO *s = v->s;
  const Seg *g = &v->seg[j];
  SeqIO c = *s;
  c.lengths = NULL;
  c.T = g->t1 - g->t0, c.B = g->n;
  move_steps(v, g, (void *)s->x, v->x, (size_t)p->x_size, v->es, true);
  c.x = v->x, c.y = v->y, c.dy = v->dy, c.grad_x = v->gx;
  c.final = v->fin, c.dfinal = (const void **)v->dfin, c.grad_params = v->gtmp, c.grad_h0 = v->gh[0];
  c.h0 = j ? (const void **)v->h0 + (size_t)j * (size_t)p->nsparts : s->h0; /* segment 0 runs every row */
  c.gates = s->gates ? v->gates : NULL;
  if (s->noise) {
    for (int i = 0; i < p->nnoise; i++) move_steps(v, g, (void *)s->noise[i], v->noise[i], (size_t)p->noise_sizes[i], v->es, true);
    c.noise = (const void **)v->noise;
  }
  if (s->fold) {
    *fold = *s->fold;
    move_steps(v, g, (void *)s->fold->ids, v->ids, 1, sizeof(int32_t), true);
    fold->ids = v->ids;
    c.fold = fold, c.grad_x = NULL;
  }
  return c;
}

/* The forward sweep: each segment's initial states kept; the sequence's outputs written when
 * `outputs`. */
static void sweep_forward(Varlen *v, VarlenRun run, void *ctx, bool outputs) {
  const Program *p = v->p;
  const SeqIO *s = v->s;
  int ns = p->nsparts;
  size_t rows = (size_t)s->T * (size_t)s->B;
  if (outputs) {
    v->dv->zero(v->dv, s->y, v->es * rows * (size_t)p->output_size);
    for (int i = 0; s->gates && i < p->ngates; i++) v->dv->zero(v->dv, s->gates[i], v->es * rows * gate_width(p, i));
  }
  v->dv->zero(v->dv, v->dy, v->es * rows * (size_t)p->output_size);
  for (int q = 0; q < ns; q++) v->dv->zero(v->dv, v->dfin[q], v->es * (size_t)s->B * (size_t)p->sparts[q].size);
  for (int j = 0; j < v->K; j++) {
    const Seg *g = &v->seg[j];
    SeqFold fold;
    SeqIO c = segment_io(v, j, &fold);
    if (!outputs) c.gates = NULL;
    run(ctx, &c, false);
    if (outputs) {
      move_steps(v, g, s->y, v->y, (size_t)p->output_size, v->es, false);
      for (int i = 0; s->gates && i < p->ngates; i++) move_steps(v, g, s->gates[i], v->gates[i], gate_width(p, i), v->es, false);
    }
    for (int q = 0; q < ns; q++) {
      size_t w = v->es * (size_t)p->sparts[q].size;
      for (int i = 0; i < g->n; i++) {
        if (outputs && s->lengths[g->act[i]] == g->t1)
          v->dv->copy(v->dv, (char *)s->final[q] + (size_t)g->act[i] * w, (char *)v->fin[q] + (size_t)i * w, w);
      }
      if (j + 1 < v->K) move_rows(v->dv, v->h0[(j + 1) * ns + q], v->fin[q], v->seg[j + 1].pos, v->seg[j + 1].n, w, true);
    }
  }
}

/* y += x over n elements */
static void acc(Varlen *v, void *y, const void *x, size_t n) {
  if (v->es == sizeof(float)) {
    v->dv->acc(v->dv, y, x, n);
    return;
  }
  double *yd = y; /* float64: the interpreter's, in host memory */
  const double *xd = x;
  for (size_t i = 0; i < n; i++) yd[i] += xd[i];
}

static void sweep_backward(Varlen *v, VarlenRun run, void *ctx) {
  const Program *p = v->p;
  const SeqIO *s = v->s;
  int ns = p->nsparts, np = p->npparts;
  size_t rows = (size_t)s->T * (size_t)s->B;
  if (s->grad_x) v->dv->zero(v->dv, s->grad_x, v->es * rows * (size_t)p->x_size);
  for (int j = v->K - 1; j >= 0; j--) {
    const Seg *g = &v->seg[j];
    SeqFold fold;
    SeqIO c = segment_io(v, j, &fold);
    c.gates = NULL;
    move_steps(v, g, (void *)s->dy, v->dy, (size_t)p->output_size, v->es, true);
    void **dnext = v->gh[(j + 1) % 2];
    for (int q = 0; q < ns; q++) {
      size_t w = v->es * (size_t)p->sparts[q].size;
      int k = 0; /* index into the next segment's rows */
      for (int i = 0; i < g->n; i++) {
        int b = g->act[i];
        char *dst = (char *)v->dfin[q] + (size_t)i * w;
        if (s->lengths[b] == g->t1) v->dv->copy(v->dv, dst, (const char *)s->dfinal[q] + (size_t)b * w, w);
        else v->dv->copy(v->dv, dst, (char *)dnext[q] + (size_t)k++ * w, w);
      }
    }
    c.grad_h0 = j ? v->gh[j % 2] : s->grad_h0;
    c.grad_params = j == v->K - 1 ? s->grad_params : v->gtmp;
    run(ctx, &c, true);
    if (s->grad_x) move_steps(v, g, s->grad_x, v->gx, (size_t)p->x_size, v->es, false);
    if (j < v->K - 1)
      for (int i = 0; i < np; i++) acc(v, s->grad_params[i], v->gtmp[i], (size_t)p->pparts[i].numel);
  }
}

void varlen_forward(const Program *p, Device *dv, const SeqIO *s, VarlenRun run, void *ctx) {
  Varlen v;
  varlen_init(&v, p, dv, s);
  sweep_forward(&v, run, ctx, true);
  varlen_free(&v);
}

void varlen_backward(const Program *p, Device *dv, const SeqIO *s, VarlenRun run, void *ctx) {
  Varlen v;
  varlen_init(&v, p, dv, s);
  sweep_forward(&v, run, ctx, false);
  sweep_backward(&v, run, ctx);
  varlen_free(&v);
}

/* ---- the runners: a back end (in chunks), the chunked form ---- */

typedef struct BackendRun {
  Compiled *c;
  Work *w;
  Chunker *k;
} BackendRun;

static void backend_run(void *ctx, const SeqIO *s, bool backward) {
  BackendRun *r = ctx;
  chunked_forward(r->c, r->w, s, r->k);
  if (backward) chunked_backward(r->c, r->w, s, r->k);
}

void varlen_backend_forward(Compiled *c, Work *w, const SeqIO *s, Chunker *k) {
  char err[512];
  Device *dv = device_open(c->be->device, err, sizeof err);
  CHECK(dv); /* the compiled program holds its device open */
  BackendRun r = {c, w, k};
  varlen_forward(c->p, dv, s, backend_run, &r);
  device_release(dv);
}

void varlen_backend_backward(Compiled *c, Work *w, const SeqIO *s, Chunker *k) {
  char err[512];
  Device *dv = device_open(c->be->device, err, sizeof err);
  CHECK(dv);
  BackendRun r = {c, w, k};
  varlen_backward(c->p, dv, s, backend_run, &r);
  device_release(dv);
}

static void chunkform_run(void *ctx, const SeqIO *s, bool backward) {
  (void)backward; /* the chunked form's run is forward and backward at once */
  chunkform_run_f64(ctx, s);
}

void chunkform_run_f64_lengths(ChunkForm *f, const Program *p, const SeqIO *d) {
  if (!seq_varlen(d)) {
    SeqIO e = *d;
    e.lengths = NULL;
    chunkform_run_f64(f, &e);
    return;
  }
  char err[512];
  Device *dv = device_open(DEVICE_CPU, err, sizeof err);
  CHECK(dv);
  Varlen v;
  varlen_init(&v, p, dv, d);
  sweep_forward(&v, chunkform_run, f, true);
  sweep_backward(&v, chunkform_run, f);
  varlen_free(&v);
  device_release(dv);
}

/* The float32 forward and backward apart (cellc train's layers), lengths or not */
static void chunkform_run32(void *ctx, const SeqIO *s, bool backward) {
  chunkform_forward_f32(ctx, s);
  if (backward) chunkform_backward_f32(ctx, s);
}

void chunkform_forward_lengths(ChunkForm *f, const Program *p, const SeqIO *d) {
  if (!seq_varlen(d)) {
    chunkform_forward_f32(f, d);
    return;
  }
  char err[512];
  Device *dv = device_open(chunkform_device(f), err, sizeof err);
  CHECK(dv);
  varlen_forward(p, dv, d, chunkform_run32, f);
  device_release(dv);
}

void chunkform_backward_lengths(ChunkForm *f, const Program *p, const SeqIO *d) {
  if (!seq_varlen(d)) {
    chunkform_backward_f32(f, d);
    return;
  }
  char err[512];
  Device *dv = device_open(chunkform_device(f), err, sizeof err);
  CHECK(dv);
  varlen_backward(p, dv, d, chunkform_run32, f);
  device_release(dv);
}
