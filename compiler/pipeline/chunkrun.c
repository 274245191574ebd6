/* chunkrun.c: a cell in the chunked form (pipeline.h, "The chunked form"): two programs of the
 * back end around the chunk op (compiler/ir/chunkop.c) of each chunked state:
 *   in:  x -> the chunk op's inputs per row (q, k, v, log a per head)
 *   the chunk op, per batch row and head, over the whole sequence: the reads and the final state
 *   out: [x, the reads] -> the cell's output
 * Both programs carry every state of the cell but the chunked ones (their parts a subsequence of
 * the cell's), and the cell's params, gates and noise; the histories run in both (the same
 * values), their final states and dfinal counted in `out` only. The backward runs out, the chunk ops' backward,
 * in; the gradients of the two programs are added. */
#include "pipeline.h"

#include <omp.h>
#include <string.h>
#include <time.h>

#include "chunkdev.h"
#include "cpu.h"
#include "lower.h"

struct ChunkForm {
  Compiled *in, *out;
  Work *win, *wout;
  int L, nl;
  ChunkLayout lay[CHUNK_LAYOUT_MAX];
  int D;                       /* the cell's input size */
  int threads;                 /* the chunk ops of the heads and batch rows run on so many threads */
  int *full_of;                /* per state: its first part among the whole cell's (the SeqIO's) */
  int nfull;                   /* the whole cell's state parts (the SeqIO's) */
  double times[CHUNK_TIMES];   /* the last float32 run's seconds per part (chunkform_times) */
  double total[CHUNK_TIMES];   /* summed over the runs, for CELLC_PROFILE */
  int runs;
  size_t rows32;               /* the float32 run's per-row buffers, kept for rows32 rows (T B): */
  float *yin, *dyin, *xo, *gxo, *gxi; /* fresh pages each run cost as much as the chunk ops */
  int *full_size;              /* [nfull]: each one's numel per batch row */
  ChunkDev *dev;               /* a CUDA back end's chunk op (chunkdev.c); NULL on the host */
  float *bnd[CHUNK_LAYOUT_MAX]; /* the float32 forward's boundary states per layout (ChunkOpF32.bnd), */
  size_t nbnd[CHUNK_LAYOUT_MAX]; /* for the backward of the same sequence; their floats */
  int bnd_T, bnd_B;            /* the sequence they are of */
  Scratch *scratch;            /* [threads]: each thread's for the chunk ops, kept between runs */
};

static Compiled *compile_part(Cell *cell, const PipelineOptions *o, LowerPart part, char *err, size_t errlen) {
  const Backend *be = o->backend;
  BackendOptions bo = {0};
  bo.scan = be->scans, bo.gates = o->gates, bo.f32 = o->f32, bo.threads = o->threads, bo.portable = o->portable;
  Program *p = lower_cell_part(cell, o->training, bo.scan, part);
  ad_differentiate(p);
  const char *why = be->supports(p, &bo);
  Compiled *c = why ? NULL : be->compile(p, &bo, err, errlen);
  if (why) snprintf(err, errlen, "the %s back end cannot run cell '%s' in chunked mode: %s", be->name, cell->name, why);
  if (!c) {
    program_free(p);
    return NULL;
  }
  p->cell = NULL;
  return c;
}

ChunkForm *chunkform_compile(Cell *cell, const PipelineOptions *o, int L, char *err, size_t errlen) {
  int st;
  char why[320];
  if (chunk_mode_blocker(cell, &st, why, (int)sizeof why)) {
    snprintf(err, errlen, "cannot run cell '%s' in chunked mode: %s", cell->name, why);
    return NULL;
  }
  ChunkForm *f = xcalloc(1, sizeof *f);
  f->L = L > 0 ? L : CHUNK_DEFAULT;
  f->D = cell->input_size;
  /* the cpu's threads (PipelineOptions.threads, 0: CELLC_THREADS or every core, as the back end);
     the interpreter is the float64 reference: one thread; OpenBLAS runs single-threaded inside) */
  f->threads = o->backend->dtype == DT_F64 ? 1 : o->threads > 0 ? o->threads : support_threads();
  f->scratch = xcalloc((size_t)f->threads, sizeof(Scratch));
  f->nl = lower_chunk_layout(cell, f->lay, CHUNK_LAYOUT_MAX);
  if (o->backend->device != DEVICE_CPU && !(f->dev = chunkdev_open(o->backend, f->lay, f->nl, L, &f->L, err, errlen))) {
    chunkform_free(f);
    return NULL;
  }
  f->full_of = xcalloc((size_t)cell->nstates + 1, sizeof(int));
  for (int i = 0, q = 0; i < cell->nstates; q += cell->states[i].cplx ? 2 : 1, i++) f->full_of[i] = q;
  for (int i = 0; i < cell->nstates; i++) f->nfull += cell->states[i].cplx ? 2 : 1;
  f->full_size = xcalloc((size_t)f->nfull + 1, sizeof(int));
  for (int i = 0; i < cell->nstates; i++)
    for (int k = 0; k < (cell->states[i].cplx ? 2 : 1); k++) f->full_size[f->full_of[i] + k] = state_numel(&cell->states[i]);
  f->in = compile_part(cell, o, LOWER_CHUNK_IN, err, errlen);
  f->out = f->in ? compile_part(cell, o, LOWER_CHUNK_OUT, err, errlen) : NULL;
  if (!f->out) {
    chunkform_free(f);
    return NULL;
  }
  f->win = f->in->be->work_new(f->in), f->wout = f->out->be->work_new(f->out);
  return f;
}

void chunkform_free(ChunkForm *f) {
  if (!f) return;
  bool prof = tuning()->profile != TUNING_PROFILE_OFF;
  if (prof && f->runs) { /* CELLC_PROFILE: the parts' times (the float32 runs), then each program's own profile */
    const double *t = f->total;
    fprintf(stderr, "profile: chunked form, %d run%s: in %.4f s (forward %.4f, backward %.4f), chunk ops %.4f s (forward %.4f, "
                    "backward %.4f), out %.4f s (forward %.4f, backward %.4f)\n",
            f->runs, f->runs == 1 ? "" : "s", t[0] + t[5], t[0], t[5], t[1] + t[4], t[1], t[4], t[2] + t[3], t[2], t[3]);
  }
  for (int i = 0; i < 2; i++) {
    Compiled *c = i ? f->out : f->in;
    Work *w = i ? f->wout : f->win;
    if (!c) continue;
    if (w && prof) fprintf(stderr, "profile: chunked form, the %s program:\n", i ? "out" : "in");
    if (w) c->be->work_free(w);
    Program *p = c->p;
    c->be->free(c);
    program_free(p);
  }
  for (int i = 0; f->scratch && i < f->threads; i++) scratch_free(&f->scratch[i]);
  free(f->scratch), free(f->full_of), free(f->full_size);
  free(f->yin), free(f->dyin), free(f->xo), free(f->gxo), free(f->gxi);
  for (int i = 0; i < CHUNK_LAYOUT_MAX; i++) free(f->bnd[i]);
  chunkdev_close(f->dev);
  free(f);
}

int chunkform_length(const ChunkForm *f) { return f->L; }

DeviceKind chunkform_device(const ChunkForm *f) { return f->in->be->device; }

void chunkform_times(const ChunkForm *f, double *t) { memcpy(t, f->times, sizeof f->times); }

Profile chunkform_profile(ChunkForm *f, bool on) {
  Profile p = f->win->prof, q = f->wout->prof;
  p.elem_s += q.elem_s, p.gemm_s += q.gemm_s, p.scan_s += q.scan_s, p.rscan_s += q.rscan_s, p.other_s += q.other_s;
  p.elem_bytes += q.elem_bytes, p.gemm_flops += q.gemm_flops;
  for (int i = 0; i < GEMM_KINDS; i++) p.kind_s[i] += q.kind_s[i], p.kind_flops[i] += q.kind_flops[i];
  f->win->profiling = f->wout->profiling = on || tuning()->profile != TUNING_PROFILE_OFF;
  memset(&f->win->prof, 0, sizeof f->win->prof), memset(&f->wout->prof, 0, sizeof f->wout->prof);
  return p;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One head of one batch row: the state's [K, V] from (or into) its layout in a state part's row
 * ([V, K] per head where the key axis is the last). */
/* Where entry (k, v) of head h lies in a state part's row */
static size_t state_at(const ChunkLayout *l, int h, int k, int v) {
  size_t base = (size_t)h * (size_t)l->K * (size_t)l->V;
  return base + (l->key_last ? (size_t)v * l->K + k : (size_t)k * l->V + v);
}

static void state_get(const ChunkLayout *l, const double *row, int h, double *kv) {
  for (int k = 0; k < l->K; k++)
    for (int v = 0; v < l->V; v++) kv[(size_t)k * l->V + v] = row[state_at(l, h, k, v)];
}

static void state_put(const ChunkLayout *l, double *row, int h, const double *kv) {
  for (int k = 0; k < l->K; k++)
    for (int v = 0; v < l->V; v++) row[state_at(l, h, k, v)] = kv[(size_t)k * l->V + v];
}

/* One head of one batch row as the chunk op's sequence, contiguous. A step with M terms and R reads
 * is E = M + R - 1 sub-steps: sub-step m < M adds term m (the decay on sub-step 0 only, log a = 0
 * after), the read r is taken at sub-step M - 1 + r (the reads after M - 1 add nothing): the op's
 * one term and one read a sub-step give the cell's step, in chunks of L E sub-steps. */
typedef struct Sub {
  ChunkOp c;
  ChunkDelta d;                /* the delta rule's (ChunkLayout.delta; E = 1): c's and the c below */
  int E, M, R, w;
  double *q, *k, *v, *la, *cf; /* [T E, K], [T E, K], [T E, V], [T E, w], the delta rule's c [T] (its gradient in a gradient Sub) */
} Sub;

static Sub sub_new(const ChunkForm *f, const ChunkLayout *l, int T) {
  Sub s = {.M = l->nterms, .R = l->nreads, .w = l->per_key ? l->K : 1};
  s.E = s.M + s.R - 1;
  size_t n = (size_t)T * (size_t)s.E;
  s.q = xcalloc(n * (size_t)l->K + 1, sizeof(double)), s.k = xcalloc(n * (size_t)l->K + 1, sizeof(double));
  s.v = xcalloc(n * (size_t)l->V + 1, sizeof(double)), s.la = xcalloc(n * (size_t)s.w + 1, sizeof(double));
  s.c = (ChunkOp){T * s.E, l->K, l->V, f->L * s.E, l->per_key, s.q, s.k, s.v, s.la, l->K, l->K, l->V, s.w};
  if (l->delta) {
    CHECK(s.E == 1 && !l->per_key);
    s.cf = xcalloc((size_t)T + 1, sizeof(double));
    s.d = (ChunkDelta){T, l->K, l->V, f->L, s.q, s.k, s.v, s.la, s.cf, l->K, l->K, l->V, 1, 1};
  }
  return s;
}

static void sub_free(Sub *s) { free(s->q), free(s->k), free(s->v), free(s->la), free(s->cf); }

/* Row t of P_in's output for batch row b: its chunked state's vectors of head h */
static const double *in_row(const double *yin, int nin, int B, int t, int b) { return yin + ((size_t)t * (size_t)B + (size_t)b) * (size_t)nin; }

/* s's sequence from P_in's rows (yin), or (back) P_in's rows' gradient from s's (dyin) */
static void sub_move(const ChunkLayout *l, Sub *s, const double *yin, double *dyin, int nin, int T, int B, int b, int h) {
  int K = l->K, V = l->V, w = s->w, E = s->E;
  for (int t = 0; t < T; t++) {
    double *row = (double *)(yin ? in_row(yin, nin, B, t, b) : in_row(dyin, nin, B, t, b));
    for (int r = 0; r < s->R; r++) {
      double *x = row + chunk_q_off(l, r) + h * K, *y = s->q + ((size_t)t * E + (size_t)(s->M - 1 + r)) * K;
      for (int i = 0; i < K; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
    }
    for (int m = 0; m < s->M; m++) {
      double *x = row + chunk_k_off(l, m) + h * K, *y = s->k + ((size_t)t * E + (size_t)m) * K;
      for (int i = 0; i < K; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
      x = row + chunk_v_off(l, m) + h * V, y = s->v + ((size_t)t * E + (size_t)m) * V;
      for (int i = 0; i < V; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
    }
    double *x = row + chunk_la_off(l) + h * w, *y = s->la + (size_t)t * E * w; /* sub-step 0's */
    for (int i = 0; i < w; i++) yin ? (void)(y[i] = x[i]) : (void)(x[i] = y[i]);
    if (l->delta) yin ? (void)(s->cf[t] = row[chunk_c_off(l) + h]) : (void)(row[chunk_c_off(l) + h] = s->cf[t]);
  }
}

/* ---- the float64 back end (interp): the float64 chunk op (the reference) ---- */

static double **parts(int n, const size_t *numel) {
  double **v = xcalloc((size_t)n + 1, sizeof(double *));
  for (int i = 0; i < n; i++) v[i] = xcalloc(numel[i] + 1, sizeof(double));
  return v;
}

static void parts_free(double **v, int n) {
  for (int i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

/* A program's per-part array (its parts: the cell's but the chunked states') from the SeqIO's */
static void **mapped(const ChunkForm *f, const Program *p, const void *const *full) {
  void **v = xcalloc((size_t)p->nsparts + 1, sizeof(void *));
  for (int q = 0; q < p->nsparts; q++) v[q] = (void *)full[f->full_of[p->sparts[q].state] + p->sparts[q].part];
  return v;
}


/* The values IN passes to OUT (lower.h, Program.chunk_shared): the tails of IN's rows (nin wide)
 * copied into the tails of OUT's input rows (xw wide), or (back) OUT's input gradient's tails into
 * IN's output gradient's */
static void pass_shared(size_t rows, int n, size_t esize, const void *from, int wfrom, void *to, int wto) {
  for (size_t r = 0; n && r < rows; r++)
    memcpy((char *)to + (r * (size_t)wto + (size_t)(wto - n)) * esize, (const char *)from + (r * (size_t)wfrom + (size_t)(wfrom - n)) * esize,
           (size_t)n * esize);
}

void chunk_own_finals(const Program *pout, void **fin_out, void **fin_in, const void **df_out, const void **df_in) {
  for (int q = 0; q < pout->nsparts; q++) {
    if (pout->sparts[q].next != pout->sparts[q].prev) continue;
    void *f = fin_out[q];
    const void *d = df_out[q];
    fin_out[q] = fin_in[q], fin_in[q] = f, df_out[q] = df_in[q], df_in[q] = d;
  }
}

void **chunk_ptrs(void *const *v, int n) {
  void **c = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) c[i] = v[i];
  return c;
}

/* ---- a float32 back end (cpu): float32 buffers throughout, the cpu's chunk op (its products
 * through sgemm) on views of P_in's rows ---- */

static void state_get32(const ChunkLayout *l, const float *row, int h, float *kv) {
  for (int k = 0; k < l->K; k++)
    for (int v = 0; v < l->V; v++) kv[(size_t)k * l->V + v] = row[state_at(l, h, k, v)];
}

static void state_put32(const ChunkLayout *l, float *row, int h, const float *kv) {
  for (int k = 0; k < l->K; k++)
    for (int v = 0; v < l->V; v++) row[state_at(l, h, k, v)] = kv[(size_t)k * l->V + v];
}

/* One head h of batch row b as the chunk op's sequence (Sub's sub-steps). Where a step is one
 * sub-step (one term, one read: the stdlib cells) the op reads P_in's rows in place (row stride B
 * nin) and writes the reads into out's input (stride B xw); else the rows are gathered. */
typedef struct Sub32 {
  ChunkOpF32 c;
  ChunkDeltaF32 d;             /* the delta rule's (ChunkLayout.delta; always views) */
  int E, M, R, w;
  float *buf;                  /* the gathered q, k, v, la; NULL for views */
} Sub32;

static Sub32 sub32_new(const ChunkForm *f, const ChunkLayout *l, const float *yin, int nin, int T, int B, int b, int h) {
  Sub32 s = {.M = l->nterms, .R = l->nreads, .w = l->per_key ? l->K : 1};
  s.E = s.M + s.R - 1;
  int K = l->K, V = l->V, w = s.w, E = s.E;
  if (E == 1) {
    const float *r = yin + (size_t)b * (size_t)nin;
    int ld = B * nin;
    s.c = (ChunkOpF32){T, K, V, f->L, l->per_key, r + chunk_q_off(l, 0) + h * K, r + chunk_k_off(l, 0) + h * K,
                       r + chunk_v_off(l, 0) + h * V, r + chunk_la_off(l) + h * w, ld, ld, ld, ld, NULL, NULL};
    if (l->delta) s.d = (ChunkDeltaF32){T, K, V, f->L, s.c.q, s.c.k, s.c.v, s.c.la, r + chunk_c_off(l) + h, ld, ld, ld, ld, ld, NULL, NULL};
    return s;
  }
  CHECK(!l->delta);
  size_t n = (size_t)T * (size_t)E;
  s.buf = xcalloc(n * (size_t)(2 * K + V + w) + 1, sizeof(float));
  float *q = s.buf, *k = q + n * K, *v = k + n * K, *la = v + n * V;
  s.c = (ChunkOpF32){T * E, K, V, f->L * E, l->per_key, q, k, v, la, K, K, V, w, NULL, NULL};
  for (int t = 0; t < T; t++) {
    const float *row = yin + ((size_t)t * (size_t)B + (size_t)b) * (size_t)nin;
    for (int r = 0; r < s.R; r++) memcpy(q + ((size_t)t * E + (size_t)(s.M - 1 + r)) * K, row + chunk_q_off(l, r) + h * K, sizeof(float) * K);
    for (int m = 0; m < s.M; m++) {
      memcpy(k + ((size_t)t * E + (size_t)m) * K, row + chunk_k_off(l, m) + h * K, sizeof(float) * K);
      memcpy(v + ((size_t)t * E + (size_t)m) * V, row + chunk_v_off(l, m) + h * V, sizeof(float) * V);
    }
    memcpy(la + (size_t)t * E * w, row + chunk_la_off(l) + h * w, sizeof(float) * w); /* sub-step 0's */
  }
  return s;
}

/* The gradient buffers of s's inputs: in place in dyin for views, else gathered (scattered back by
 * sub32_scatter) */
static float *sub32_grads(const Sub32 *s, const ChunkLayout *l, float *dyin, int nin, int b, int h, float **dq, float **dk,
                          float **dv, float **dla, float **dc) {
  int K = l->K, V = l->V, w = s->w;
  if (!s->buf) {
    float *r = dyin + (size_t)b * (size_t)nin;
    *dq = r + chunk_q_off(l, 0) + h * K, *dk = r + chunk_k_off(l, 0) + h * K, *dv = r + chunk_v_off(l, 0) + h * V;
    *dla = r + chunk_la_off(l) + h * w, *dc = l->delta ? r + chunk_c_off(l) + h : NULL;
    return NULL;
  }
  size_t n = (size_t)s->c.T;
  float *g = xcalloc(n * (size_t)(2 * K + V + w) + 1, sizeof(float));
  *dc = NULL;
  *dq = g, *dk = g + n * K, *dv = *dk + n * K, *dla = *dv + n * V;
  return g;
}

static void sub32_scatter(const Sub32 *s, const ChunkLayout *l, const float *g, float *dyin, int nin, int T, int B, int b, int h) {
  int K = l->K, V = l->V, w = s->w, E = s->E;
  size_t n = (size_t)s->c.T;
  const float *dq = g, *dk = g + n * K, *dv = dk + n * K, *dla = dv + n * V;
  for (int t = 0; t < T; t++) {
    float *row = dyin + ((size_t)t * (size_t)B + (size_t)b) * (size_t)nin;
    for (int r = 0; r < s->R; r++) memcpy(row + chunk_q_off(l, r) + h * K, dq + ((size_t)t * E + (size_t)(s->M - 1 + r)) * K, sizeof(float) * K);
    for (int m = 0; m < s->M; m++) {
      memcpy(row + chunk_k_off(l, m) + h * K, dk + ((size_t)t * E + (size_t)m) * K, sizeof(float) * K);
      memcpy(row + chunk_v_off(l, m) + h * V, dv + ((size_t)t * E + (size_t)m) * V, sizeof(float) * V);
    }
    memcpy(row + chunk_la_off(l) + h * w, dla + (size_t)t * E * w, sizeof(float) * w);
  }
}

static float *zeros32(size_t n) { return xcalloc(n + 1, sizeof(float)); }

static float **parts32(int n, const size_t *numel) {
  float **v = xcalloc((size_t)n + 1, sizeof(float *));
  for (int i = 0; i < n; i++) v[i] = zeros32(numel[i]);
  return v;
}

static void parts32_free(float **v, int n) {
  for (int i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

void chunkform_run_f32(ChunkForm *f, const SeqIO *d) {
  CHECK(d->dtype == DT_F32 && f->in->be->dtype == DT_F32);
  chunkform_forward_f32(f, d);
  chunkform_backward_f32(f, d);
}

/* A float64 SeqIO on a float32 back end: float32 copies of its buffers (the cell's layout), one
 * float32 run, the results back. */
static float *f32_copy(const void *src, size_t n) {
  float *v = zeros32(n);
  for (size_t i = 0; src && i < n; i++) v[i] = (float)((const double *)src)[i];
  return v;
}

static void **f32_copies(const void *const *src, int n, const size_t *numel) {
  void **v = xcalloc((size_t)n + 1, sizeof(void *));
  for (int i = 0; i < n; i++) v[i] = f32_copy(src ? src[i] : NULL, numel[i]);
  return v;
}

static void f64_back(void *dst, const void *src, size_t n) {
  for (size_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)src)[i];
}

static void run_f32(void *f, const SeqIO *d) { chunkform_run_f32(f, d); }

static void run_f64_on_f32(ChunkForm *f, const SeqIO *d) {
  const Program *pout = f->out->p;
  int np = pout->npparts, ns = f->nfull, nz = pout->nnoise, ng = pout->ngates;
  size_t rows = (size_t)d->T * (size_t)d->B, nx = rows * (size_t)f->D, ny = rows * (size_t)pout->output_size;
  size_t *pn = xcalloc((size_t)np + 1, sizeof(size_t)), *sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  size_t *zn = xcalloc((size_t)nz + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) pn[i] = (size_t)pout->pparts[i].numel;
  for (int i = 0; i < ns; i++) sn[i] = (size_t)d->B * (size_t)f->full_size[i];
  for (int i = 0; i < nz; i++) zn[i] = rows * (size_t)pout->noise_sizes[i];
  size_t *gn = xcalloc((size_t)ng + 1, sizeof(size_t)); /* the gates: out's (chunkform_run_f32) */
  for (int i = 0; i < ng; i++) gn[i] = rows * (size_t)node_numel(&pout->g.nodes[pout->gates[i].node]);
  SeqIO s = {0};
  s.T = d->T, s.B = d->B, s.dtype = DT_F32;
  s.x = f32_copy(d->x, nx), s.grad_x = zeros32(nx), s.y = zeros32(ny), s.dy = f32_copy(d->dy, ny);
  s.params = (const void **)f32_copies(d->params, np, pn), s.grad_params = f32_copies(NULL, np, pn);
  s.h0 = (const void **)f32_copies(d->h0, ns, sn), s.grad_h0 = f32_copies(NULL, ns, sn);
  s.final = f32_copies(NULL, ns, sn), s.dfinal = (const void **)f32_copies(d->dfinal, ns, sn);
  s.noise = d->noise ? (const void **)f32_copies(d->noise, nz, zn) : NULL;
  s.gates = d->gates ? f32_copies(NULL, ng, gn) : NULL;
  if (f->dev) chunkdev_on_device(f->dev, &s, &(ChunkDevSizes){nx, ny, np, ns, nz, ng, pn, sn, zn, gn}, run_f32, f);
  else chunkform_run_f32(f, &s);
  for (int i = 0; d->gates && i < ng; i++) f64_back(d->gates[i], s.gates[i], gn[i]);
  f64_back(d->y, s.y, ny), f64_back(d->grad_x, s.grad_x, nx);
  for (int i = 0; i < np; i++) f64_back(d->grad_params[i], s.grad_params[i], pn[i]);
  for (int i = 0; i < ns; i++) f64_back(d->final[i], s.final[i], sn[i]), f64_back(d->grad_h0[i], s.grad_h0[i], sn[i]);
  free((void *)s.x), free(s.grad_x), free(s.y), free((void *)s.dy);
  parts32_free((float **)s.params, np), parts32_free((float **)s.grad_params, np);
  parts32_free((float **)s.h0, ns), parts32_free((float **)s.grad_h0, ns), parts32_free((float **)s.final, ns);
  parts32_free((float **)s.dfinal, ns), parts32_free((float **)s.noise, s.noise ? nz : 0);
  parts32_free((float **)s.gates, s.gates ? ng : 0);
  free(pn), free(sn), free(zn), free(gn);
}

void chunkform_run_f64(ChunkForm *f, const SeqIO *d) {
  CHECK(d->dtype == DT_F64);
  if (f->in->be->dtype == DT_F32) {
    run_f64_on_f32(f, d);
    return;
  }
  const Program *pin = f->in->p, *pout = f->out->p;
  int T = d->T, B = d->B, nin = pin->output_size, xw = pout->x_size, D = f->D;
  int np = pout->npparts, ns = pout->nsparts; /* in's parts are out's */
  size_t rows = (size_t)T * (size_t)B;
  size_t *pn = xcalloc((size_t)np + 1, sizeof(size_t)), *sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) pn[i] = (size_t)pout->pparts[i].numel;
  for (int i = 0; i < ns; i++) sn[i] = (size_t)B * (size_t)pout->sparts[i].size;
  double *yin = xcalloc(rows * (size_t)nin + 1, sizeof(double)), *dyin = xcalloc(rows * (size_t)nin + 1, sizeof(double));
  double *xo = xcalloc(rows * (size_t)xw + 1, sizeof(double)), *gxo = xcalloc(rows * (size_t)xw + 1, sizeof(double));
  double *gxi = xcalloc(rows * (size_t)D + 1, sizeof(double));
  double **fin = parts(ns, sn), **zero = parts(ns, sn), **ghi = parts(ns, sn), **gho = parts(ns, sn);
  double **gpi = parts(np, pn), **gpo = parts(np, pn);
  void **h0 = mapped(f, pout, d->h0), **dfinal = mapped(f, pout, d->dfinal), **final = mapped(f, pout, (const void *const *)d->final);
  void **gh0 = mapped(f, pout, (const void *const *)d->grad_h0);
  void **fin_in = chunk_ptrs((void *const *)fin, ns), **df_in = chunk_ptrs((void *const *)zero, ns);
  chunk_own_finals(pout, final, fin_in, (const void **)dfinal, (const void **)df_in);

  /* forward: in, the chunk ops, out */
  SeqIO si = *d;
  si.h0 = (const void **)h0, si.y = yin, si.final = fin_in, si.gates = NULL;
  f->in->be->forward(f->in, f->win, &si);
  for (size_t r = 0; r < rows; r++) memcpy(xo + r * (size_t)xw, (const double *)d->x + r * (size_t)D, sizeof(double) * (size_t)D);
  pass_shared(rows, pin->chunk_shared, sizeof(double), yin, nin, xo, xw);
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state], sz = l->nh * l->K * l->V;
    /* every head of every batch row on its own: in parallel, each writing its own rows */
#pragma omp parallel for schedule(dynamic) num_threads(f->threads) if (f->threads > 1)
    for (int bh = 0; bh < B * l->nh; bh++) {
      int b = bh / l->nh, h = bh % l->nh;
      double *s0 = xmalloc(sizeof(double) * (size_t)l->K * (size_t)l->V), *s1 = xmalloc(sizeof(double) * (size_t)l->K * (size_t)l->V);
      Sub u = sub_new(f, l, T);
      sub_move(l, &u, yin, NULL, nin, T, B, b, h);
      double *o = xcalloc((size_t)u.c.T * (size_t)l->V + 1, sizeof(double));
      state_get(l, (const double *)d->h0[q] + (size_t)b * (size_t)sz, h, s0);
      if (l->delta) chunkdelta_forward(&u.d, s0, o, l->V, s1);
      else chunkop_forward(&u.c, s0, o, l->V, s1);
      for (int t = 0; t < T; t++)
        for (int r = 0; r < u.R; r++)
          memcpy(xo + ((size_t)t * B + b) * (size_t)xw + (size_t)(D + l->out_off + (r * l->nh + h) * l->V),
                 o + ((size_t)t * u.E + (size_t)(u.M - 1 + r)) * l->V, sizeof(double) * (size_t)l->V);
      state_put(l, (double *)d->final[q] + (size_t)b * (size_t)sz, h, s1);
      free(s0), free(s1), free(o);
      sub_free(&u);
    }
  }
  SeqIO so = *d;
  so.x = xo, so.h0 = (const void **)h0, so.final = final;
  f->out->be->forward(f->out, f->wout, &so);

  /* backward: out, the chunk ops, in */
  so.dfinal = (const void **)dfinal, so.grad_x = gxo, so.grad_params = (void **)gpo, so.grad_h0 = (void **)gho, so.fold = NULL;
  f->out->be->backward(f->out, f->wout, &so);
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state], sz = l->nh * l->K * l->V;
    size_t kv = (size_t)l->K * (size_t)l->V;
#pragma omp parallel for schedule(dynamic) num_threads(f->threads) if (f->threads > 1)
    for (int bh = 0; bh < B * l->nh; bh++) {
      int b = bh / l->nh, h = bh % l->nh;
      double *s0 = xmalloc(sizeof(double) * kv), *ds = xmalloc(sizeof(double) * kv), *ds0 = xmalloc(sizeof(double) * kv);
      Sub u = sub_new(f, l, T), gu = sub_new(f, l, T);
      sub_move(l, &u, yin, NULL, nin, T, B, b, h);
      double *dout = xcalloc((size_t)u.c.T * (size_t)l->V + 1, sizeof(double)); /* 0 but at the reads */
      for (int t = 0; t < T; t++)
        for (int r = 0; r < u.R; r++)
          memcpy(dout + ((size_t)t * u.E + (size_t)(u.M - 1 + r)) * l->V,
                 gxo + ((size_t)t * B + b) * (size_t)xw + (size_t)(D + l->out_off + (r * l->nh + h) * l->V), sizeof(double) * (size_t)l->V);
      state_get(l, (const double *)d->h0[q] + (size_t)b * (size_t)sz, h, s0);
      state_get(l, (const double *)d->dfinal[q] + (size_t)b * (size_t)sz, h, ds);
      if (l->delta) chunkdelta_backward(&u.d, s0, dout, l->V, ds, gu.q, gu.k, gu.v, gu.la, gu.cf, ds0);
      else chunkop_backward(&u.c, s0, dout, l->V, ds, gu.q, gu.k, gu.v, gu.la, ds0);
      sub_move(l, &gu, NULL, dyin, nin, T, B, b, h);
      state_put(l, (double *)d->grad_h0[q] + (size_t)b * (size_t)sz, h, ds0);
      free(s0), free(ds), free(ds0), free(dout);
      sub_free(&u), sub_free(&gu);
    }
  }
  pass_shared(rows, pin->chunk_shared, sizeof(double), gxo, xw, dyin, nin);
  si.dy = dyin, si.dfinal = (const void **)df_in, si.grad_x = gxi, si.grad_params = (void **)gpi, si.grad_h0 = (void **)ghi;
  si.fold = NULL;
  f->in->be->backward(f->in, f->win, &si);
  for (size_t r = 0; r < rows; r++)
    for (int j = 0; j < D; j++) ((double *)d->grad_x)[r * (size_t)D + (size_t)j] = gxo[r * (size_t)xw + (size_t)j] + gxi[r * (size_t)D + (size_t)j];
  for (int i = 0; i < np; i++)
    for (size_t j = 0; j < pn[i]; j++) ((double *)d->grad_params[i])[j] = gpo[i][j] + gpi[i][j];
  for (int q = 0; q < ns; q++)
    for (size_t j = 0; j < sn[q]; j++) ((double *)gh0[q])[j] = gho[q][j] + ghi[q][j];
  free(yin), free(dyin), free(xo), free(gxo), free(gxi), free(pn), free(sn);
  free(h0), free(dfinal), free(final), free(gh0), free(fin_in), free(df_in);
  parts_free(fin, ns), parts_free(zero, ns), parts_free(ghi, ns), parts_free(gho, ns), parts_free(gpi, np), parts_free(gpo, np);
}

/* ---- the float32 forward and backward apart, as a back end's (cellc train's layers; one after
 * the other: chunkform_run_f32), the backward after the forward of the same sequence (its P_in
 * rows and out's input kept in the form, each program's steps in its work) ---- */

static void grow32(ChunkForm *f, size_t rows, int nin, int xw) {
  if (rows <= f->rows32) return;
  free(f->yin), free(f->dyin), free(f->xo), free(f->gxo), free(f->gxi);
  f->yin = zeros32(rows * (size_t)nin), f->dyin = zeros32(rows * (size_t)nin);
  f->xo = zeros32(rows * (size_t)xw), f->gxo = zeros32(rows * (size_t)xw), f->gxi = zeros32(rows * (size_t)f->D);
  f->rows32 = rows;
}

/* What layout i's forward keeps for the backward of batch row b, head h: the boundary states
 * (ChunkOpF32.bnd), the delta rule's per-chunk values (ChunkDeltaF32.keep); grown for T and B by
 * the forward (grow), read by the backward */
static float *bnd_of(ChunkForm *f, int i, int T, int B, int b, int h, bool grow) {
  const ChunkLayout *l = &f->lay[i];
  size_t per = l->delta ? cpu_chunkdelta_keep_floats(T, l->K, l->V, f->L)
                        : (size_t)((T + f->L - 1) / f->L + 1) * (size_t)l->K * (size_t)l->V;
  size_t need = per * (size_t)B * (size_t)l->nh;
  if (grow && need > f->nbnd[i]) free(f->bnd[i]), f->bnd[i] = xaligned(64, sizeof(float) * need), f->nbnd[i] = need;
  CHECK(need <= f->nbnd[i]);
  return f->bnd[i] + per * ((size_t)b * (size_t)l->nh + (size_t)h);
}

/* What a CUDA back end's chunk op (chunkdev.c) needs of f */
static ChunkDevForm dev_form(const ChunkForm *f) {
  return (ChunkDevForm){f->in, f->out, f->win, f->wout, f->L, f->nl, f->D, f->lay, f->full_of};
}

void chunkform_forward_f32(ChunkForm *f, const SeqIO *d) {
  CHECK(d->dtype == DT_F32 && f->in->be->dtype == DT_F32);
  if (f->dev) { /* a CUDA back end: d in device memory */
    ChunkDevForm df = dev_form(f);
    chunkdev_forward(f->dev, &df, d, f->times);
    for (int i = 0; i < 3; i++) f->total[i] += f->times[i];
    return;
  }
  const Program *pin = f->in->p, *pout = f->out->p;
  int T = d->T, B = d->B, nin = pin->output_size, xw = pout->x_size, D = f->D, ns = pout->nsparts;
  size_t rows = (size_t)T * (size_t)B;
  size_t *sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  for (int i = 0; i < ns; i++) sn[i] = (size_t)B * (size_t)pout->sparts[i].size;
  grow32(f, rows, nin, xw);
  float *yin = f->yin, *xo = f->xo;
  float **fin = parts32(ns, sn), **zero = parts32(ns, sn); /* in's final states: out's are the cell's */
  void **h0 = mapped(f, pout, d->h0), **final = mapped(f, pout, (const void *const *)d->final);
  void **dfinal = mapped(f, pout, d->dfinal), **fin_in = chunk_ptrs((void *const *)fin, ns), **df_in = chunk_ptrs((void *const *)zero, ns);
  chunk_own_finals(pout, final, fin_in, (const void **)dfinal, (const void **)df_in);
  SeqIO si = *d;
  si.h0 = (const void **)h0, si.y = yin, si.final = fin_in, si.gates = NULL;
  double t0 = seconds();
  f->in->be->forward(f->in, f->win, &si);
  double t1 = seconds();
  /* out's input rows: x, then what in passes (16 MB of rows at D = 256: on every thread) */
  int nsh = pin->chunk_shared;
#pragma omp parallel for schedule(static) num_threads(f->threads) if (f->threads > 1)
  for (size_t r = 0; r < rows; r++) {
    memcpy(xo + r * (size_t)xw, (const float *)d->x + r * (size_t)D, sizeof(float) * (size_t)D);
    pass_shared(1, nsh, sizeof(float), yin + r * (size_t)nin, nin, xo + r * (size_t)xw, xw);
  }
  f->bnd_T = T, f->bnd_B = B;
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state], sz = l->nh * l->K * l->V;
    size_t kv = (size_t)l->K * (size_t)l->V;
    bnd_of(f, i, T, B, 0, 0, true);
#pragma omp parallel for schedule(dynamic) num_threads(f->threads) if (f->threads > 1)
    for (int bh = 0; bh < B * l->nh; bh++) {
      int b = bh / l->nh, h = bh % l->nh;
      float *s0 = zeros32(kv), *s1 = zeros32(kv);
      Sub32 u = sub32_new(f, l, yin, nin, T, B, b, h);
      if (l->delta) u.d.keep = bnd_of(f, i, T, B, b, h, false);
      else u.c.bnd = bnd_of(f, i, T, B, b, h, false);
      u.c.scratch = u.d.scratch = &f->scratch[omp_get_thread_num()];
      float *o = xo + (size_t)b * (size_t)xw + (size_t)(D + l->out_off + h * l->V);
      int ldo = B * xw;
      if (u.buf) o = zeros32((size_t)u.c.T * (size_t)l->V), ldo = l->V;
      state_get32(l, (const float *)d->h0[q] + (size_t)b * (size_t)sz, h, s0);
      if (l->delta) cpu_chunkdelta_forward(&u.d, s0, o, ldo, s1);
      else cpu_chunkop_forward(&u.c, s0, o, ldo, s1);
      for (int t = 0; u.buf && t < T; t++)
        for (int r = 0; r < u.R; r++)
          memcpy(xo + ((size_t)t * B + b) * (size_t)xw + (size_t)(D + l->out_off + (r * l->nh + h) * l->V),
                 o + ((size_t)t * u.E + (size_t)(u.M - 1 + r)) * l->V, sizeof(float) * (size_t)l->V);
      state_put32(l, (float *)d->final[q] + (size_t)b * (size_t)sz, h, s1);
      if (u.buf) free(o);
      free(s0), free(s1), free(u.buf);
    }
  }
  SeqIO so = *d;
  so.x = xo, so.h0 = (const void **)h0, so.final = final;
  double t2 = seconds();
  f->out->be->forward(f->out, f->wout, &so);
  double t3 = seconds();
  f->times[0] = t1 - t0, f->times[1] = t2 - t1, f->times[2] = t3 - t2;
  for (int i = 0; i < 3; i++) f->total[i] += f->times[i];
  free(sn), free(h0), free(final), free(dfinal), free(fin_in), free(df_in);
  parts32_free(fin, ns), parts32_free(zero, ns);
}

void chunkform_backward_f32(ChunkForm *f, const SeqIO *d) {
  CHECK(d->dtype == DT_F32 && f->in->be->dtype == DT_F32);
  if (f->dev) {
    ChunkDevForm df = dev_form(f);
    chunkdev_backward(f->dev, &df, d, f->times);
    for (int i = 3; i < CHUNK_TIMES; i++) f->total[i] += f->times[i];
    f->runs++;
    return;
  }
  const Program *pin = f->in->p, *pout = f->out->p;
  int T = d->T, B = d->B, nin = pin->output_size, xw = pout->x_size, D = f->D;
  int np = pout->npparts, ns = pout->nsparts;
  size_t rows = (size_t)T * (size_t)B;
  CHECK(rows <= f->rows32 && T == f->bnd_T && B == f->bnd_B); /* after chunkform_forward_f32 of d */
  size_t *pn = xcalloc((size_t)np + 1, sizeof(size_t)), *sn = xcalloc((size_t)ns + 1, sizeof(size_t));
  for (int i = 0; i < np; i++) pn[i] = (size_t)pout->pparts[i].numel;
  for (int i = 0; i < ns; i++) sn[i] = (size_t)B * (size_t)pout->sparts[i].size;
  float *yin = f->yin, *dyin = f->dyin, *xo = f->xo, *gxo = f->gxo, *gxi = f->gxi;
  float **fin = parts32(ns, sn), **zero = parts32(ns, sn), **ghi = parts32(ns, sn), **gho = parts32(ns, sn);
  float **gpi = parts32(np, pn), **gpo = parts32(np, pn);
  void **h0 = mapped(f, pout, d->h0), **dfinal = mapped(f, pout, d->dfinal), **final = mapped(f, pout, (const void *const *)d->final);
  void **gh0 = mapped(f, pout, (const void *const *)d->grad_h0);
  void **fin_in = chunk_ptrs((void *const *)fin, ns), **df_in = chunk_ptrs((void *const *)zero, ns);
  chunk_own_finals(pout, final, fin_in, (const void **)dfinal, (const void **)df_in);
  SeqIO so = *d;
  so.x = xo, so.h0 = (const void **)h0, so.final = final;
  so.dfinal = (const void **)dfinal, so.grad_x = gxo, so.grad_params = (void **)gpo, so.grad_h0 = (void **)gho, so.fold = NULL;
  double t3 = seconds();
  f->out->be->backward(f->out, f->wout, &so);
  double t4 = seconds();
  for (int i = 0; i < f->nl; i++) {
    const ChunkLayout *l = &f->lay[i];
    int q = f->full_of[l->state], sz = l->nh * l->K * l->V;
    size_t kv = (size_t)l->K * (size_t)l->V;
#pragma omp parallel for schedule(dynamic) num_threads(f->threads) if (f->threads > 1)
    for (int bh = 0; bh < B * l->nh; bh++) {
      int b = bh / l->nh, h = bh % l->nh;
      float *s0 = zeros32(kv), *ds = zeros32(kv), *ds0 = zeros32(kv), *dq, *dk, *dv, *dla, *dc;
      Sub32 u = sub32_new(f, l, yin, nin, T, B, b, h);
      if (l->delta) u.d.keep = bnd_of(f, i, T, B, b, h, false);
      else u.c.bnd = bnd_of(f, i, T, B, b, h, false);
      u.c.scratch = u.d.scratch = &f->scratch[omp_get_thread_num()];
      float *g = sub32_grads(&u, l, dyin, nin, b, h, &dq, &dk, &dv, &dla, &dc);
      const float *dout = gxo + (size_t)b * (size_t)xw + (size_t)(D + l->out_off + h * l->V);
      int lddo = B * xw;
      float *dbuf = NULL;
      if (u.buf) { /* 0 but at the reads */
        dout = dbuf = zeros32((size_t)u.c.T * (size_t)l->V), lddo = l->V;
        for (int t = 0; t < T; t++)
          for (int r = 0; r < u.R; r++)
            memcpy(dbuf + ((size_t)t * u.E + (size_t)(u.M - 1 + r)) * l->V,
                   gxo + ((size_t)t * B + b) * (size_t)xw + (size_t)(D + l->out_off + (r * l->nh + h) * l->V), sizeof(float) * (size_t)l->V);
      }
      state_get32(l, (const float *)d->h0[q] + (size_t)b * (size_t)sz, h, s0);
      state_get32(l, (const float *)d->dfinal[q] + (size_t)b * (size_t)sz, h, ds);
      if (l->delta) cpu_chunkdelta_backward(&u.d, s0, dout, lddo, ds, dq, dk, dv, dla, dc, ds0);
      else cpu_chunkop_backward(&u.c, s0, dout, lddo, ds, dq, dk, dv, dla, ds0);
      if (g) sub32_scatter(&u, l, g, dyin, nin, T, B, b, h);
      state_put32(l, (float *)d->grad_h0[q] + (size_t)b * (size_t)sz, h, ds0);
      free(s0), free(ds), free(ds0), free(g), free(dbuf), free(u.buf);
    }
  }
  int nsh = pin->chunk_shared;
#pragma omp parallel for schedule(static) num_threads(f->threads) if (f->threads > 1)
  for (size_t r = 0; r < rows; r++) pass_shared(1, nsh, sizeof(float), gxo + r * (size_t)xw, xw, dyin + r * (size_t)nin, nin);
  SeqIO si = *d;
  si.h0 = (const void **)h0, si.y = yin, si.final = fin_in, si.gates = NULL;
  si.dy = dyin, si.dfinal = (const void **)df_in, si.grad_x = gxi, si.grad_params = (void **)gpi, si.grad_h0 = (void **)ghi;
  si.fold = NULL;
  double t5 = seconds();
  f->in->be->backward(f->in, f->win, &si);
  double t6 = seconds();
  f->times[3] = t4 - t3, f->times[4] = t5 - t4, f->times[5] = t6 - t5;
  for (int i = 3; i < CHUNK_TIMES; i++) f->total[i] += f->times[i];
  f->runs++;
  float *gx = d->grad_x;
#pragma omp parallel for schedule(static) num_threads(f->threads) if (f->threads > 1 && gx)
  for (size_t r = 0; r < (gx ? rows : 0); r++)
    for (int j = 0; j < D; j++) gx[r * (size_t)D + (size_t)j] = gxo[r * (size_t)xw + (size_t)j] + gxi[r * (size_t)D + (size_t)j];
  for (int i = 0; i < np; i++)
    for (size_t j = 0; j < pn[i]; j++) ((float *)d->grad_params[i])[j] = gpo[i][j] + gpi[i][j];
  for (int q = 0; q < ns; q++)
    for (size_t j = 0; j < sn[q]; j++) ((float *)gh0[q])[j] = gho[q][j] + ghi[q][j];
  free(pn), free(sn);
  free(h0), free(dfinal), free(final), free(gh0), free(fin_in), free(df_in);
  parts32_free(fin, ns), parts32_free(zero, ns), parts32_free(ghi, ns), parts32_free(gho, ns), parts32_free(gpi, np), parts32_free(gpo, np);
}
