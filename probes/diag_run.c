/* diag_run.c: what `cellc diag` measures on a run (spec/cli.md, seeds.md section 5): gate
 * histograms, gradients and state changes per step, exact step Jacobians and their products, on
 * N batches of the task's validation data; diag.json, jacobians.safetensors and the plots, written
 * into a fresh directory renamed into place once complete. docs/diagnostics.md explains them. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "model.h"
#include "probes.h"
#include "safetensors.h"
#include "support.h"
#include "tasks.h"
#include "train.h"

#define MAX_LAG 128    /* the longest lag of the Jacobian products */
#define MAX_STARTS 16  /* the start times k of the products M_{t,k} */

/* What one layer's diagnostics accumulate. */
typedef struct GateAcc {
  int64_t hist[DIAG_BINS];
  double sum, n, below, above;
  double *tok_sum, *tok_n;           /* per token (token tasks) */
  int64_t in_hist[DIAG_BINS], st_hist[DIAG_BINS]; /* sigmoid of the pre-activation's input / state part */
  double in_sum, in_sq, st_sum, st_sq, pre_n;
} GateAcc;

typedef struct LayerAcc {
  DiagLayer L;
  GateAcc *g;
  double *grad_sum;                  /* [T]: ||dL/dh_t|| summed over sequences, t = 1..T */
  double grad_n;
  double *chg_sum, *chg_n;           /* per token: ||h_t - h_{t-1}|| */
  /* Jacobians of the first sequence */
  double *J;                         /* [T, S, S] */
  double *x0;                        /* [T, in] */
  double **h00;                      /* per state part: [size] */
  double **gate0;                    /* per cell gate: [T, numel] */
  int nlags;
  double *S_med, *eff_lr, *ai, *ce;  /* per lag 1..nlags */
  double *pairs_P, *pairs_S;         /* every (start, lag) */
  double *pairs_Q;                   /* the complement's predictor: the product of 1 - c (real states) */
  int *pairs_lag;                    /* each pair's lag */
  int nseq, nstart;                  /* the sequences and the start times per sequence measured */
  int npairs;
  double *P_med, *Q_med;             /* per lag: the medians of the predictor and its complement */
  bool has_ols, has_ols_c;           /* the least-squares fits of the same points */
  double slope_ols, slope_ols_c;
  bool has_slope, has_slope_c;
  double slope_c, icept_c;
  double slope, icept;
  /* the per-sample parameter gradients of the first batch */
  int pg_samples;
  double pg_ai, pg_ce;
} LayerAcc;

struct Diag {
  DiagOptions a;
  Run *run;
  TaskShape shape;
  Arena arena;
  int T, B, nlayers, vocab;
  bool tokens;                       /* token statistics */
  LayerAcc *acc;
  cJSON *compare;                    /* --compare DIR's diag.json */
  cJSON *plots;                      /* plots.json: each figure's panels, axes and legend boxes */
};

/* ---- accumulating over batches ---- */

static void acc_init(Diag *d, LayerAcc *A) {
  DiagLayer *L = &A->L;
  int V = d->tokens ? d->vocab : 0;
  A->g = xcalloc((size_t)L->ngates + 1, sizeof(GateAcc));
  for (int i = 0; i < L->ngates; i++) A->g[i].tok_sum = xcalloc((size_t)V + 1, sizeof(double)), A->g[i].tok_n = xcalloc((size_t)V + 1, sizeof(double));
  A->grad_sum = xcalloc((size_t)d->T + 1, sizeof(double));
  A->chg_sum = xcalloc((size_t)V + 1, sizeof(double));
  A->chg_n = xcalloc((size_t)V + 1, sizeof(double));
}

static void acc_free(LayerAcc *A) {
  for (int i = 0; A->g && i < A->L.ngates; i++) free(A->g[i].tok_sum), free(A->g[i].tok_n);
  for (int q = 0; A->h00 && q < A->L.p->nsparts; q++) free(A->h00[q]);
  for (int i = 0; A->gate0 && i < A->L.ngates; i++) free(A->gate0[i]);
  free(A->g), free(A->grad_sum), free(A->chg_sum), free(A->chg_n), free(A->J), free(A->x0), free(A->h00), free(A->gate0);
  free(A->S_med), free(A->eff_lr), free(A->ai), free(A->ce), free(A->pairs_P), free(A->pairs_S), free(A->pairs_Q);
  free(A->pairs_lag), free(A->P_med), free(A->Q_med);
  diag_layer_close(&A->L);
}

static double sigmoid(double v) { return v >= 0 ? 1 / (1 + exp(-v)) : exp(v) / (1 + exp(v)); }

/* Every value of every gate, once; by the token of its row; the pre-activation parts. */
static void add_gates(LayerAcc *A, const DiagSeq *s, const int32_t *tokens) {
  DiagLayer *L = &A->L;
  size_t rows = (size_t)s->T * (size_t)s->B;
  for (int i = 0; i < L->ngates; i++) {
    GateAcc *G = &A->g[i];
    int e = diag_numel(L, i);
    for (size_t r = 0; r < rows; r++)
      for (int j = 0; j < e; j++) {
        double v = s->gates[i][r * e + j];
        diag_hist_add(G->hist, v);
        G->sum += v, G->n += 1, G->below += v < 0.1, G->above += v > 0.9;
        if (tokens) G->tok_sum[tokens[r]] += v, G->tok_n[tokens[r]] += 1;
      }
    int pin = L->pre_in[i], pst = L->pre_st[i];
    for (size_t r = 0; r < rows && (pin >= 0 || pst >= 0); r++)
      for (int j = 0; j < e; j++) {
        G->pre_n += 1;
        if (pin >= 0) {
          double v = s->gates[pin][r * diag_numel(L, pin) + (diag_numel(L, pin) == 1 ? 0 : j)];
          diag_hist_add(G->in_hist, sigmoid(v));
          G->in_sum += v, G->in_sq += v * v;
        }
        if (pst >= 0) {
          double v = s->gates[pst][r * diag_numel(L, pst) + (diag_numel(L, pst) == 1 ? 0 : j)];
          diag_hist_add(G->st_hist, sigmoid(v));
          G->st_sum += v, G->st_sq += v * v;
        }
      }
  }
}

/* ||dL/dh_t|| per sequence (states concatenated), t = 1..T; ||h_t - h_{t-1}|| by the token read
 * at step t. */
static void add_steps(LayerAcc *A, const DiagSeq *s, const int32_t *tokens) {
  const Program *p = A->L.p;
  double *g = xcalloc((size_t)s->T * s->B + 1, sizeof(double));
  diag_grad_norms(&A->L, s, g);
  for (int t = 1; t <= s->T; t++)
    for (int b = 0; b < s->B; b++) {
      A->grad_sum[t - 1] += g[(size_t)(t - 1) * s->B + b];
      if (!tokens) continue;
      double c2 = 0;
      for (int q = 0; q < p->nsparts; q++) {
        int n = p->sparts[q].size;
        const double *h = s->states[q] + ((size_t)t * s->B + b) * n, *h1 = h - (size_t)s->B * n;
        for (int j = 0; j < n; j++) c2 += (h[j] - h1[j]) * (h[j] - h1[j]);
      }
      int tok = tokens[(size_t)(t - 1) * s->B + b];
      A->chg_sum[tok] += sqrt(c2), A->chg_n[tok] += 1;
    }
  A->grad_n += s->B;
  free(g);
}

/* ---- the Jacobian products ---- */

/* The predictor's per-unit value at step t of sequence 0 (a complex coefficient: its modulus). */
static double coef_unit(const LayerAcc *A, const DiagSeq *s, int t, int b, int j) {
  const DiagLayer *L = &A->L;
  int e = diag_numel(L, L->coef[0]);
  size_t at = ((size_t)t * s->B + b) * e + (e == 1 ? 0 : j);
  double re = s->gates[L->coef[0]][at];
  if (L->coef[1] < 0) return re;
  double im = s->gates[L->coef[1]][at];
  return sqrt(re * re + im * im);
}

/* The median of the pairs' v whose lag is lag + 1 (scratch: room for every pair). */
static double lag_median(const LayerAcc *A, const double *v, int lag, double *scratch) {
  int m = 0;
  for (int i = 0; i < A->npairs; i++)
    if (A->pairs_lag[i] == lag + 1 && isfinite(v[i])) scratch[m++] = v[i];
  return diag_median(scratch, m);
}

/* M_{t,k} = J_t ... J_{k+1} from the start times k (--starts: up to 16 evenly, or every one) of
 * each of the first --sequences sequences, to lag MAX_LAG: S = sigma_max, AI_10, CE_10 per lag
 * (medians over starts and sequences), the predictors' medians per lag and the pairs (P, S) of the
 * slopes. Sequence 0's step Jacobians are A->J; the others' are computed here. */
static void products(Diag *d, LayerAcc *A, const DiagSeq *s) {
  const DiagLayer *L = &A->L;
  int T = d->T, S = L->S, nl = T < MAX_LAG ? T : MAX_LAG;
  int want = d->a.starts == -1 ? T : d->a.starts > 0 ? d->a.starts : MAX_STARTS;
  int nstart = T < want ? T : want, nseq = d->a.sequences > 0 ? d->a.sequences : 1;
  if (nseq > s->B) nseq = s->B;
  int units = L->coef[0] >= 0 ? L->p->sparts[L->p->spart_of[L->coef_state]].size : 0; /* of the predictor's state */
  size_t cap = (size_t)nl * nstart * nseq + 1;
  double *M = xcalloc((size_t)S * S, sizeof(double)), *N = xcalloc((size_t)S * S, sizeof(double));
  double *sv = xcalloc((size_t)S + 1, sizeof(double)), *prod = xcalloc((size_t)units + 1, sizeof(double));
  double *Sv = xcalloc(cap, sizeof(double)), *AIv = xcalloc(cap, sizeof(double)), *CEv = xcalloc(cap, sizeof(double));
  double *Jb = nseq > 1 ? xcalloc((size_t)T * S * S + 1, sizeof(double)) : NULL;
  int *cnt = xcalloc((size_t)nl + 1, sizeof(int));
  A->pairs_P = xcalloc(cap, sizeof(double)), A->pairs_Q = xcalloc(cap, sizeof(double));
  A->pairs_S = xcalloc(cap, sizeof(double)), A->pairs_lag = xcalloc(cap, sizeof(int));
  double *cprod = xcalloc((size_t)units + 1, sizeof(double));
  DiagSeq one;
  if (Jb) diag_seq_alloc(L, &one, 1, S);
  for (int b = 0; b < nseq; b++) {
    const double *J = A->J;
    if (b > 0) {
      for (int t = 0; t < T; t++) diag_step_jacobian(L, s, t, b, &one, Jb + (size_t)t * S * S);
      J = Jb;
    }
    for (int si = 0; si < nstart; si++) {
      int k = (int)((long)si * T / nstart);
      memset(M, 0, sizeof(double) * (size_t)S * S);
      for (int i = 0; i < S; i++) M[(size_t)i * S + i] = 1;
      for (int j = 0; j < units; j++) prod[j] = cprod[j] = 1;
      for (int t = k; t < T && t - k < nl; t++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0, J + (size_t)t * S * S, S, M, S, 0.0, N, S);
        double *tmp = M;
        M = N, N = tmp;
        int lag = t - k + 1, slot = (lag - 1) * nstart * nseq + cnt[lag - 1]++;
        if (diag_singular_values(S, M, sv) < 0) sv[0] = NAN;
        Sv[slot] = sv[0];
        diag_anisotropy(sv, S, 10, &AIv[slot], &CEv[slot]);
        double P = 0;
        double Q = 0;
        for (int j = 0; j < units; j++) {
          double c = coef_unit(A, s, t, b, j);
          prod[j] *= c, cprod[j] *= 1 - c, P += prod[j], Q += cprod[j];
        }
        if (units)
          A->pairs_P[A->npairs] = P / units, A->pairs_Q[A->npairs] = Q / units, A->pairs_S[A->npairs] = sv[0],
          A->pairs_lag[A->npairs++] = lag;
      }
    }
  }
  if (Jb) diag_seq_free(L, &one);
  A->nlags = nl, A->nseq = nseq, A->nstart = nstart;
  A->S_med = xcalloc((size_t)nl + 1, sizeof(double)), A->eff_lr = xcalloc((size_t)nl + 1, sizeof(double));
  A->ai = xcalloc((size_t)nl + 1, sizeof(double)), A->ce = xcalloc((size_t)nl + 1, sizeof(double));
  A->P_med = xcalloc((size_t)nl + 1, sizeof(double)), A->Q_med = xcalloc((size_t)nl + 1, sizeof(double));
  for (int l = 0; l < nl; l++) {
    size_t at = (size_t)l * nstart * nseq;
    A->S_med[l] = diag_median(Sv + at, cnt[l]);
    A->ai[l] = diag_median(AIv + at, cnt[l]);
    A->ce[l] = diag_median(CEv + at, cnt[l]);
    A->eff_lr[l] = A->S_med[l] / A->S_med[0];
    /* scratch: Sv's first lag (reduced above), room for any one lag's pairs */
    A->P_med[l] = units ? lag_median(A, A->pairs_P, l, Sv) : NAN;
    A->Q_med[l] = units ? lag_median(A, A->pairs_Q, l, Sv) : NAN;
  }
  A->has_slope = units && diag_loglog_slope(A->pairs_P, A->pairs_S, A->npairs, &A->slope, &A->icept) == 0;
  A->has_slope_c = units && L->coef[1] < 0 &&
                   diag_loglog_slope(A->pairs_Q, A->pairs_S, A->npairs, &A->slope_c, &A->icept_c) == 0;
  A->has_ols = units && diag_loglog_ols(A->pairs_P, A->pairs_S, A->npairs, &A->slope_ols, &(double){0}) == 0;
  A->has_ols_c = units && L->coef[1] < 0 && diag_loglog_ols(A->pairs_Q, A->pairs_S, A->npairs, &A->slope_ols_c, &(double){0}) == 0;
  free(cprod), free(Jb);
  free(M), free(N), free(sv), free(prod), free(Sv), free(AIv), free(CEv), free(cnt);
}

/* The first sequence's step Jacobians and what the file keeps of it. */
static void first_sequence(Diag *d, LayerAcc *A, const DiagSeq *s) {
  DiagLayer *L = &A->L;
  const Program *p = L->p;
  int T = d->T, S = L->S, X = p->x_size;
  A->J = xcalloc((size_t)T * S * S + 1, sizeof(double));
  DiagSeq one;
  diag_seq_alloc(L, &one, 1, S);
  for (int t = 0; t < T; t++) diag_step_jacobian(L, s, t, 0, &one, A->J + (size_t)t * S * S);
  diag_seq_free(L, &one);
  A->x0 = xcalloc((size_t)T * X + 1, sizeof(double));
  for (int t = 0; t < T; t++) memcpy(A->x0 + (size_t)t * X, s->x + (size_t)t * s->B * X, sizeof(double) * X);
  A->h00 = xcalloc((size_t)p->nsparts + 1, sizeof(double *));
  for (int q = 0; q < p->nsparts; q++) {
    A->h00[q] = xcalloc((size_t)p->sparts[q].size + 1, sizeof(double));
    memcpy(A->h00[q], s->h0[q], sizeof(double) * (size_t)p->sparts[q].size);
  }
  A->gate0 = xcalloc((size_t)L->ngates + 1, sizeof(double *));
  for (int i = 0; i < L->ngates; i++) {
    int e = diag_numel(L, i);
    A->gate0[i] = xcalloc((size_t)T * e + 1, sizeof(double));
    for (int t = 0; t < T; t++) memcpy(A->gate0[i] + (size_t)t * e, s->gates[i] + (size_t)t * s->B * e, sizeof(double) * e);
  }
  products(d, A, s);
}

/* Every layer on one batch: the model's training forward and backward (for each layer's input and
 * output gradient), then each layer on the interpreter. */
/* Anisotropy of the matrix of per-sample parameter gradients (seeds.md section 5): each sequence of
 * the batch alone through the layer's backward (its own dL/dy, zero dfinal), its gradient of every
 * param part flattened into a row; rows normalized, columns centred; the singular values from the
 * B x B Gram matrix G G^T (its eigenvalues are their squares); AI_r and CE_r with r = min(10, B - 1)
 * (centring leaves rank B - 1 at most). */
static void param_gradients(Diag *d, LayerAcc *A, const DiagSeq *s) {
  const Program *p = A->L.p;
  int B = s->B, T = s->T, xs = p->x_size, os = p->output_size;
  size_t P = 0;
  for (int i = 0; i < p->npparts; i++) P += (size_t)p->pparts[i].numel;
  if (B < 2 || P == 0) return;
  double *G = xcalloc((size_t)B * P, sizeof(double));
  DiagSeq one;
  diag_seq_alloc(&A->L, &one, T, 1);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      memcpy(one.x + (size_t)t * xs, s->x + ((size_t)t * B + b) * xs, sizeof(double) * (size_t)xs);
      memcpy(one.dy + (size_t)t * os, s->dy + ((size_t)t * B + b) * os, sizeof(double) * (size_t)os);
    }
    for (int i = 0; i < p->npparts; i++) memcpy(one.params[i], s->params[i], sizeof(double) * (size_t)p->pparts[i].numel);
    for (int q = 0; q < p->nsparts; q++) {
      int n = p->sparts[q].size;
      memcpy(one.h0[q], s->h0[q] + (size_t)b * n, sizeof(double) * (size_t)n);
      memset(one.dfinal[q], 0, sizeof(double) * (size_t)n);
    }
    diag_seq_run(&A->L, &one, true);
    double *row = G + (size_t)b * P, norm = 0;
    size_t j = 0;
    for (int i = 0; i < p->npparts; i++)
      for (int e = 0; e < p->pparts[i].numel; e++, j++) row[j] = one.gparams[i][e], norm += row[j] * row[j];
    if (norm > 0)
      for (j = 0; j < P; j++) row[j] /= sqrt(norm);
  }
  diag_seq_free(&A->L, &one);
  for (size_t j = 0; j < P; j++) {
    double mean = 0;
    for (int b = 0; b < B; b++) mean += G[(size_t)b * P + j];
    mean /= B;
    for (int b = 0; b < B; b++) G[(size_t)b * P + j] -= mean;
  }
  double *gram = xcalloc((size_t)B * B, sizeof(double)), *sv = xcalloc((size_t)B, sizeof(double));
  for (int a = 0; a < B; a++)
    for (int b = 0; b <= a; b++) {
      double dot = 0;
      for (size_t j = 0; j < P; j++) dot += G[(size_t)a * P + j] * G[(size_t)b * P + j];
      gram[(size_t)a * B + b] = gram[(size_t)b * B + a] = dot;
    }
  if (diag_singular_values(B, gram, sv) == 0) {
    for (int i = 0; i < B; i++) sv[i] = sqrt(fmax(sv[i], 0.0));
    int r = B - 1 < 10 ? B - 1 : 10;
    diag_anisotropy(sv, B - 1, r, &A->pg_ai, &A->pg_ce);
    A->pg_samples = B;
  }
  free(G), free(gram), free(sv);
  (void)d;
}

void diag_batch(Diag *d, int64_t index) {
  TaskBatch b = {0};
  task_batch(d->run->task, TASK_VALID, index, d->B, &b);
  model_batch(d->run->model, &b, true, 0, d->B);
  for (int k = 0; k < d->nlayers; k++) {
    LayerAcc *A = &d->acc[k];
    DiagSeq s;
    diag_seq_alloc(&A->L, &s, d->T, d->B);
    diag_seq_fill(&A->L, &s, d->run->model, k, d->B);
    diag_seq_run(&A->L, &s, true);
    const int32_t *tok = d->tokens ? b.tokens : NULL;
    add_gates(A, &s, tok);
    add_steps(A, &s, tok);
    if (index == 0) first_sequence(d, A, &s), param_gradients(d, A, &s);
    diag_seq_free(&A->L, &s);
  }
  task_batch_free(&b);
}

/* ---- diag.json ---- */

static cJSON *num(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static cJSON *nums(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, num(v[i]));
  return a;
}

static cJSON *counts(const int64_t *h) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < DIAG_BINS; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)h[i]));
  return a;
}

static cJSON *by_token(const double *sum, const double *n, int V) {
  cJSON *o = cJSON_CreateObject();
  for (int t = 0; t < V; t++) {
    if (!n[t]) continue;
    char key[32];
    snprintf(key, sizeof key, "%d", t);
    cJSON_AddItemToObject(o, key, num(sum[t] / n[t]));
  }
  return o;
}

static cJSON *gate_json(Diag *d, const LayerAcc *A, int i) {
  const GateAcc *G = &A->g[i];
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", A->L.cell->gates[i].name);
  cJSON_AddItemToObject(o, "hist", counts(G->hist));
  cJSON_AddItemToObject(o, "mean", num(G->sum / G->n));
  cJSON_AddItemToObject(o, "below_0.1", num(G->below / G->n));
  cJSON_AddItemToObject(o, "above_0.9", num(G->above / G->n));
  if (d->tokens) cJSON_AddItemToObject(o, "by_token", by_token(G->tok_sum, G->tok_n, d->vocab));
  return o;
}

/* The extra key "preact": the input and state parts of each sigmoid gate's pre-activation. */
static cJSON *preact_json(const LayerAcc *A) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < A->L.ngates; i++) {
    const GateAcc *G = &A->g[i];
    if (A->L.pre_in[i] < 0 && A->L.pre_st[i] < 0) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", A->L.cell->gates[i].name);
    const char *keys[2] = {"input", "state"};
    for (int part = 0; part < 2; part++) {
      if ((part ? A->L.pre_st[i] : A->L.pre_in[i]) < 0) {
        cJSON_AddNullToObject(o, keys[part]);
        continue;
      }
      double s = part ? G->st_sum : G->in_sum, q = part ? G->st_sq : G->in_sq, m = s / G->pre_n;
      cJSON *p = cJSON_CreateObject();
      cJSON_AddItemToObject(p, "mean", num(m));
      cJSON_AddItemToObject(p, "std", num(sqrt(fmax(0, q / G->pre_n - m * m))));
      cJSON_AddItemToObject(p, "sigmoid_hist", counts(part ? G->st_hist : G->in_hist));
      cJSON_AddItemToObject(o, keys[part], p);
    }
    cJSON_AddItemToArray(a, o);
  }
  return a;
}

static cJSON *jacobian_json(const LayerAcc *A) {
  cJSON *o = cJSON_CreateObject();
  cJSON *lags = cJSON_CreateArray();
  for (int l = 1; l <= A->nlags; l++) cJSON_AddItemToArray(lags, cJSON_CreateNumber(l));
  cJSON_AddItemToObject(o, "lags", lags);
  cJSON_AddItemToObject(o, "S_median", nums(A->S_med, A->nlags));
  cJSON_AddItemToObject(o, "eff_lr", nums(A->eff_lr, A->nlags));
  cJSON_AddItemToObject(o, "AI10", nums(A->ai, A->nlags));
  cJSON_AddItemToObject(o, "CE10", nums(A->ce, A->nlags));
  cJSON_AddItemToObject(o, "predictor", A->L.predictor ? cJSON_CreateString(A->L.predictor) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "slope", A->has_slope ? num(A->slope) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "intercept", A->has_slope ? num(A->icept) : cJSON_CreateNull());
  /* extra keys: the same fit against the product of 1 - c (seeds.md's alpha^{t-k} and prod g) */
  const char *pc = A->L.predictor && A->L.coef[1] < 0
                       ? (!strncmp(A->L.predictor, "1-", 2) ? A->L.predictor + 2 : NULL)
                       : NULL;
  char buf[160];
  if (A->L.predictor && A->L.coef[1] < 0 && !pc) snprintf(buf, sizeof buf, "1-%s", A->L.predictor), pc = buf;
  cJSON_AddItemToObject(o, "predictor_complement", pc ? cJSON_CreateString(pc) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "slope_complement", A->has_slope_c ? num(A->slope_c) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "slope_ols", A->has_ols ? num(A->slope_ols) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "slope_complement_ols", A->has_ols_c ? num(A->slope_ols_c) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "P_median", A->P_med ? nums(A->P_med, A->nlags) : cJSON_CreateArray());
  cJSON_AddItemToObject(o, "P_complement_median", A->P_med && A->L.coef[1] < 0 ? nums(A->Q_med, A->nlags) : cJSON_CreateNull());
  cJSON_AddNumberToObject(o, "sequences", A->nseq);
  cJSON_AddNumberToObject(o, "starts", A->nstart);
  return o;
}

static char *diag_json(Diag *d) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "cell", model_cell_name(d->run->model));
  cJSON_AddStringToObject(root, "task", cfg_word(d->run->cfg, "task.name"));
  cJSON_AddItemToObject(root, "checkpoint", d->run->a.checkpoint ? cJSON_CreateString(d->run->a.checkpoint) : cJSON_CreateNull());
  cJSON_AddNumberToObject(root, "step", (double)d->run->step);
  cJSON_AddNumberToObject(root, "batches", d->a.batches);
  cJSON *layers = cJSON_CreateArray();
  for (int k = 0; k < d->nlayers; k++) {
    LayerAcc *A = &d->acc[k];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layer", k);
    cJSON *gates = cJSON_CreateArray();
    for (int i = 0; i < A->L.ngates; i++) cJSON_AddItemToArray(gates, gate_json(d, A, i));
    cJSON_AddItemToObject(o, "gates", gates);
    double *g = xcalloc((size_t)d->T + 1, sizeof(double));
    for (int t = 0; t < d->T; t++) g[t] = A->grad_sum[t] / A->grad_n;
    cJSON_AddItemToObject(o, "grad_norm_per_step", nums(g, d->T));
    free(g);
    if (d->tokens) cJSON_AddItemToObject(o, "state_change_by_token", by_token(A->chg_sum, A->chg_n, d->vocab));
    cJSON_AddItemToObject(o, "jacobian", jacobian_json(A));
    cJSON_AddItemToObject(o, "preact", preact_json(A));
    if (A->pg_samples) {
      cJSON *pg = cJSON_CreateObject();
      cJSON_AddNumberToObject(pg, "samples", A->pg_samples);
      cJSON_AddItemToObject(pg, "AI10", num(A->pg_ai));
      cJSON_AddItemToObject(pg, "CE10", num(A->pg_ce));
      cJSON_AddItemToObject(o, "param_grad", pg);
    }
    cJSON_AddItemToArray(layers, o);
  }
  cJSON_AddItemToObject(root, "layers", layers);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

/* ---- jacobians.safetensors ---- */

static int write_jacobians(Diag *d, const char *path, char *err, size_t errlen) {
  SftWriter *w = sft_writer_new();
  sft_set_meta(w, "format", "cellc-diag-jacobians-1");
  for (int k = 0; k < d->nlayers; k++) {
    LayerAcc *A = &d->acc[k];
    const Program *p = A->L.p;
    const Cell *c = A->L.cell;
    char name[256];
    int64_t sh[3] = {d->T, p->x_size, 0};
    snprintf(name, sizeof name, "layer.%d.x", k);
    sft_add(w, name, SFT_F64, 2, sh, A->x0);
    for (int s = 0; s < c->nstates; s++) {
      int q = p->spart_of[s], n = p->sparts[q].size, parts = c->states[s].cplx ? 2 : 1;
      double *v = xcalloc((size_t)n * parts + 1, sizeof(double));
      for (int j = 0; j < n; j++)
        for (int part = 0; part < parts; part++) v[j * parts + part] = A->h00[q + part][j];
      int64_t hs[2] = {n, 2};
      snprintf(name, sizeof name, "layer.%d.h0.%s", k, c->states[s].name);
      sft_add(w, name, SFT_F64, parts == 2 ? 2 : 1, hs, v);
      free(v);
    }
    int64_t js[3] = {d->T, A->L.S, A->L.S};
    snprintf(name, sizeof name, "layer.%d.J", k);
    sft_add(w, name, SFT_F64, 3, js, A->J);
    for (int i = 0; i < A->L.ngates; i++) {
      int64_t gs[2] = {d->T, diag_numel(&A->L, i)};
      snprintf(name, sizeof name, "layer.%d.gate.%s", k, c->gates[i].name);
      sft_add(w, name, SFT_F64, 2, gs, A->gate0[i]);
    }
  }
  int rc = sft_write(w, path, err, errlen);
  sft_writer_free(w);
  return rc;
}

/* ---- the plots ---- */

/* The gate histograms of layer k in the diag.json of --compare DIR (NULL when it has none). */
static cJSON *compare_layer(cJSON *cmp, int k) {
  cJSON *layers = cmp ? cJSON_GetObjectItem(cmp, "layers") : NULL;
  return layers ? cJSON_GetArrayItem(layers, k) : NULL;
}

static bool compare_hist(cJSON *layer, const char *gate, int64_t *out) {
  cJSON *gates = layer ? cJSON_GetObjectItem(layer, "gates") : NULL, *g;
  cJSON_ArrayForEach(g, gates) {
    cJSON *name = cJSON_GetObjectItem(g, "name"), *h = cJSON_GetObjectItem(g, "hist");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, gate) || cJSON_GetArraySize(h) != DIAG_BINS) continue;
    for (int i = 0; i < DIAG_BINS; i++) out[i] = (int64_t)cJSON_GetArrayItem(h, i)->valuedouble;
    return true;
  }
  return false;
}

/* Gate histograms per layer: one panel per gate, the --compare run's next to this one's. */
static int plot_gates(Diag *d, cJSON *cmp, int k, const char *dir, char *err, size_t errlen) {
  LayerAcc *A = &d->acc[k];
  int n = A->L.ngates;
  if (!n) return 0;
  DiagHistPanel *pan = xcalloc((size_t)n * 2, sizeof(DiagHistPanel));
  int64_t *before = xcalloc((size_t)n * DIAG_BINS, sizeof(int64_t));
  int np = 0;
  const char *when = d->run->a.checkpoint ? arena_printf(&d->arena, "step %lld", (long long)d->run->step) : "at initialization";
  const char *other = d->a.compare ? strrchr(d->a.compare, '/') : NULL;
  other = other && other[1] ? other + 1 : d->a.compare; /* the directory's own name, for the title */
  for (int i = 0; i < n; i++) {
    const char *g = A->L.cell->gates[i].name;
    if (cmp && compare_hist(compare_layer(cmp, k), g, before + (size_t)i * DIAG_BINS)) {
      pan[np].title = arena_printf(&d->arena, "layer %d gate %s: %s", k, g, other);
      pan[np].hist[0] = before + (size_t)i * DIAG_BINS, pan[np].nhist = 1, np++;
    }
    pan[np].title = arena_printf(&d->arena, "layer %d gate %s: %s", k, g, when);
    pan[np].hist[0] = A->g[i].hist, pan[np].nhist = 1, np++;
  }
  char *path = xasprintf("%s/gates_layer%d.svg", dir, k);
  int rc = diag_plot_hists(path, pan, np, d->plots, err, errlen);
  free(path), free(pan), free(before);
  return rc;
}

/* The pre-activation split: sigmoid of the input part and of the state part, per gate. */
static int plot_preact(Diag *d, int k, const char *dir, char *err, size_t errlen) {
  LayerAcc *A = &d->acc[k];
  DiagHistPanel *pan = xcalloc((size_t)A->L.ngates + 1, sizeof(DiagHistPanel));
  int np = 0;
  for (int i = 0; i < A->L.ngates; i++) {
    if (A->L.pre_in[i] < 0 && A->L.pre_st[i] < 0) continue;
    DiagHistPanel *p = &pan[np++];
    p->title = arena_printf(&d->arena, "layer %d gate %s: sigmoid of each part", k, A->L.cell->gates[i].name);
    if (A->L.pre_in[i] >= 0) p->labels[p->nhist] = "sigmoid(W x + b)", p->hist[p->nhist++] = A->g[i].in_hist;
    if (A->L.pre_st[i] >= 0) p->labels[p->nhist] = "sigmoid(U h)", p->hist[p->nhist++] = A->g[i].st_hist;
  }
  int rc = 0;
  if (np) {
    char *path = xasprintf("%s/preact_layer%d.svg", dir, k);
    rc = diag_plot_hists(path, pan, np, d->plots, err, errlen);
    free(path);
  }
  free(pan);
  return rc;
}

static int plot_one(Diag *d, const char *dir, const char *file, int k, const DiagPlot *p, int n, char *err, size_t errlen) {
  char *path = xasprintf("%s/%s_layer%d.svg", dir, file, k);
  int rc = diag_plot_fig(path, p, n, false, d->plots, err, errlen);
  free(path);
  return rc;
}

/* Gradient per step, S against P with the fit, effective learning rate, AI and CE by lag (one
 * quantity per axis: AI_10 and CE_10 in panels of their own). */
static int plot_curves(Diag *d, int k, const char *dir, char *err, size_t errlen) {
  LayerAcc *A = &d->acc[k];
  int T = d->T, nl = A->nlags;
  double *t = xcalloc((size_t)T + 1, sizeof(double)), *g = xcalloc((size_t)T + 1, sizeof(double));
  double *lag = xcalloc((size_t)nl + 1, sizeof(double));
  for (int i = 0; i < T; i++) t[i] = i + 1, g[i] = A->grad_sum[i] / A->grad_n;
  for (int i = 0; i < nl; i++) lag[i] = i + 1;
  char *title = arena_printf(&d->arena, "layer %d: mean ||dL/dh_t|| over the batch", k);
  DiagSeries gs = {"||dL/dh_t||, mean over the batch", t, g, T, false};
  DiagPlot gp = {title, "time step t (steps)", "||dL/dh_t|| (loss per unit of state)", false, true, &gs, 1, NULL, 0};
  int rc = plot_one(d, dir, "grad_per_step", k, &gp, 1, err, errlen);
  DiagSeries es = {"median S(lag) / median S(1)", lag, A->eff_lr, nl, false};
  DiagPlot ep = {arena_printf(&d->arena, "layer %d: effective learning rate by lag", k), "lag t - k (steps)",
                 "effective learning rate (ratio, 1 at lag 1)", false, true, &es, 1, NULL, 0};
  if (!rc) rc = plot_one(d, dir, "eff_lr", k, &ep, 1, err, errlen);
  DiagSeries as[2] = {{"AI_10 = s_1 / s_10, median over starts", lag, A->ai, nl, false},
                      {"CE_10 = energy in the top 10 singular values", lag, A->ce, nl, false}};
  DiagPlot ap[2] = {{arena_printf(&d->arena, "layer %d: anisotropy index of M(t,k)", k), "lag t - k (steps)",
                     "AI_10 (ratio of singular values)", false, true, &as[0], 1, NULL, 0},
                    {arena_printf(&d->arena, "layer %d: captured energy of M(t,k)", k), "lag t - k (steps)",
                     "CE_10 (fraction of the energy, 0 to 1)", false, false, &as[1], 1, NULL, 0}};
  if (!rc) rc = plot_one(d, dir, "anisotropy", k, ap, 2, err, errlen);
  if (!rc && A->npairs) {
    double fx[2], fy[2];
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < A->npairs; i++)
      if (A->pairs_P[i] > 0) lo = fmin(lo, A->pairs_P[i]), hi = fmax(hi, A->pairs_P[i]);
    fx[0] = lo, fx[1] = hi;
    for (int i = 0; i < 2; i++) fy[i] = A->has_slope ? exp(A->icept + A->slope * log(fx[i])) : NAN;
    DiagSeries ss[2] = {{"(P, S) per start and lag", A->pairs_P, A->pairs_S, A->npairs, true},
                        {A->has_slope ? arena_printf(&d->arena, "fit: slope %.3f", A->slope) : "no fit", fx, fy, 2, false}};
    DiagPlot sp = {arena_printf(&d->arena, "layer %d: sensitivity S = sigma_max(M) against P", k),
                   arena_printf(&d->arena, "P = product of %s over the lag (ratio)", A->L.predictor),
                   "S = sigma_max(M(t,k)) (ratio)", true, true, ss, 2, NULL, 0};
    rc = plot_one(d, dir, "S_vs_predictor", k, &sp, 1, err, errlen);
  }
  free(t), free(g), free(lag);
  return rc;
}

/* The name of token `id` of the task, for the token plots' axis (the ids' roles of
 * docs/training.md "Tasks": copying's blank and marker, temporal_xor's informative tokens and
 * fillers, a text file's bytes). */
static const char *token_name(Diag *d, int id) {
  const char *task = cfg_word(d->run->cfg, "task.name");
  int V = d->vocab;
  if (!strcmp(task, "copying") || !strcmp(task, "selective_copying"))
    return id == 0 ? "blank" : id == V - 1 ? "marker" : arena_printf(&d->arena, "%d", id);
  if (!strcmp(task, "temporal_xor")) {
    int informative = cfg_int(d->run->cfg, "task.classes") == 4 ? 4 : 2;
    return id < informative ? arena_printf(&d->arena, "%d", id) : arena_printf(&d->arena, "fill %d", id);
  }
  if (!strcmp(task, "text")) {
    /* PLplot reads '#' as its escape: that byte by its code */
    if (id > 32 && id < 127 && id != '#') return arena_printf(&d->arena, "'%c'", id);
    return id == ' ' ? "space" : id == '\n' ? "newline" : arena_printf(&d->arena, "0x%02x", id);
  }
  return arena_printf(&d->arena, "%d", id);
}

/* The token probes: each gate's mean (0 to 1) and, in a panel of its own, the mean ||h_t - h_{t-1}||,
 * by the step's input token, named. */
static int plot_tokens(Diag *d, int k, const char *dir, char *err, size_t errlen) {
  LayerAcc *A = &d->acc[k];
  int V = d->vocab, n = A->L.ngates < 5 ? A->L.ngates : 5, ns = 0;
  double *tok = xcalloc((size_t)(n + 1) * V + 1, sizeof(double)), *vals = xcalloc((size_t)(n + 1) * V + 1, sizeof(double));
  const char **names = arena_alloc(&d->arena, sizeof(char *) * (size_t)(V + 1));
  for (int t = 0; t < V; t++) names[t] = token_name(d, t);
  DiagSeries ser[6];
  for (int s = 0; s <= n; s++) {
    double *v = vals + (size_t)s * V, *x = tok + (size_t)s * V;
    int m = 0;
    for (int t = 0; t < V; t++) {
      double sum = s < n ? A->g[s].tok_sum[t] : A->chg_sum[t], cnt = s < n ? A->g[s].tok_n[t] : A->chg_n[t];
      if (cnt > 0) x[m] = t, v[m++] = sum / cnt;
    }
    const char *label = s < n ? arena_printf(&d->arena, "mean of gate %s", A->L.cell->gates[s].name) : "mean ||h_t - h_t-1||";
    ser[ns++] = (DiagSeries){label, x, v, m, true};
  }
  DiagPlot p[2] = {{arena_printf(&d->arena, "layer %d: gate means by input token", k), "input token",
                    "gate mean (0 to 1)", false, false, ser, n, names, V},
                   {arena_printf(&d->arena, "layer %d: state change by input token", k), "input token",
                    "mean ||h_t - h_t-1|| (state units)", false, false, ser + n, 1, names, V}};
  int rc = n ? plot_one(d, dir, "tokens", k, p, 2, err, errlen) : plot_one(d, dir, "tokens", k, p + 1, 1, err, errlen);
  free(tok), free(vals);
  return rc;
}

static cJSON *read_compare(Diag *d) {
  if (!d->a.compare) return NULL;
  char *path = xasprintf("%s/diag.json", d->a.compare);
  size_t len;
  char *text = read_file(path, &len);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text), free(path);
  return j;
}

/* Every plot (an SVG and a PNG each) and plots.json, what each figure's panels show: titles, axis
 * labels, scales and ranges, the boxes of the data and of the legends on the page. */
static int diag_write_plots(Diag *d, cJSON *cmp, const char *dir, char *err, size_t errlen) {
  int rc = 0;
  d->plots = cJSON_CreateArray();
  for (int k = 0; k < d->nlayers && !rc; k++)
    rc = plot_gates(d, cmp, k, dir, err, errlen) < 0 || plot_preact(d, k, dir, err, errlen) < 0 ||
         plot_curves(d, k, dir, err, errlen) < 0 || (d->tokens && plot_tokens(d, k, dir, err, errlen) < 0) ? -1 : 0;
  if (!rc) {
    char *text = cJSON_Print(d->plots), *path = xasprintf("%s/plots.json", dir);
    rc = fsout_write_file(path, text, strlen(text), err, errlen);
    free(text), free(path);
  }
  cJSON_Delete(d->plots);
  d->plots = NULL;
  return rc;
}

/* ---- the command ---- */

static void summary(Diag *d, const char *dir) {
  printf("cellc diag: %s; task %s, T=%d, %d batch%s of %d; %s\n", model_summary(d->run->model), cfg_word(d->run->cfg, "task.name"),
         d->T, d->a.batches, d->a.batches == 1 ? "" : "es", d->B, d->run->a.checkpoint ? d->run->a.checkpoint : "at initialization");
  for (int k = 0; k < d->nlayers; k++) {
    LayerAcc *A = &d->acc[k];
    printf("layer %d:", k);
    for (int i = 0; i < A->L.ngates; i++)
      printf(" gate %s mean %.3f (<0.1: %.2f, >0.9: %.2f);", A->L.cell->gates[i].name, A->g[i].sum / A->g[i].n,
             A->g[i].below / A->g[i].n, A->g[i].above / A->g[i].n);
    printf(" |dL/dh| t=1 %.3g, t=T %.3g;", A->grad_sum[0] / A->grad_n, A->grad_sum[d->T - 1] / A->grad_n);
    int l10 = A->nlags >= 10 ? 9 : A->nlags - 1;
    printf(" S lag 1 %.3g, eff_lr lag %d %.3g", A->S_med[0], l10 + 1, A->eff_lr[l10]);
    if (A->has_slope) printf("; slope vs %s %.3f", A->L.predictor, A->slope);
    printf("\n");
  }
  printf("wrote %s\n", dir);
}

/* The output directory: runs/diag-<cell>-<task>-<time> unless --out. */
static char *out_dir(Diag *d) {
  if (d->a.out) return xstrdup(d->a.out);
  char stamp[32];
  time_t now = time(NULL);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
  return xasprintf("runs/diag-%s-%s-%s", model_cell_name(d->run->model), cfg_word(d->run->cfg, "task.name"), stamp);
}

/* Every file into a fresh directory next to dir, renamed to dir at the end. 0 or 3 (130 when
 * interrupted: nothing written). */
static int write_all(Diag *d, const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0 && (!S_ISDIR(st.st_mode) || rmdir(dir) != 0)) {
    diag_plain("%s: exists and is not an empty directory: cellc diag writes a new one (remove it, or give another --out)", dir);
    return 3;
  }
  char err[1024];
  char *tmp = fsout_dir_begin(dir, err, sizeof err); /* the missing parents too, as every command makes them */
  if (!tmp) {
    diag_plain("%s", err);
    return 3;
  }
  char *text = diag_json(d), *jp = xasprintf("%s/diag.json", tmp), *sp = xasprintf("%s/jacobians.safetensors", tmp);
  int rc = fsout_write_file(jp, text, strlen(text), err, sizeof err) < 0 || write_jacobians(d, sp, err, sizeof err) < 0 ||
           diag_write_plots(d, d->compare, tmp, err, sizeof err) < 0 ? 3 : 0;
  if (!rc && run_interrupted) snprintf(err, sizeof err, "interrupted: nothing written to %s", dir), rc = 130;
  if (!rc && fsout_dir_commit(tmp, dir, false, err, sizeof err) < 0) rc = 3;
  if (rc) {
    diag_plain("%s", err);
    fsout_remove_dir(tmp);
  }
  free(text), free(jp), free(sp), free(tmp);
  return rc;
}

int diag_open(Diag **out, Run *run, const DiagOptions *o) {
  Diag *d = *out = xcalloc(1, sizeof *d);
  d->a = *o, d->run = run;
  d->shape = task_shape(d->run->task);
  d->T = d->shape.length, d->B = d->run->B, d->nlayers = model_nlayers(d->run->model), d->vocab = d->shape.vocab;
  d->tokens = d->shape.token_input;
  if (d->a.by_token && !d->tokens) {
    diag_plain("%s: --by-token: task '%s' takes real-valued inputs, not tokens: there are no token statistics to give",
               d->run->a.cfg, cfg_word(d->run->cfg, "task.name"));
    return 1;
  }
  d->compare = read_compare(d);
  if (d->a.compare && !d->compare) {
    diag_plain("--compare %s: no readable diag.json there (give a directory cellc diag wrote)", d->a.compare);
    return 1;
  }
  d->acc = xcalloc((size_t)d->nlayers, sizeof(LayerAcc));
  for (int k = 0; k < d->nlayers; k++) {
    ModelLayerView v;
    model_layer_view(d->run->model, k, &v);
    char err[512];
    if (diag_layer_open(&d->acc[k].L, v.cell, &d->arena, err, sizeof err) < 0) {
      diag_plain("cannot compile layer %d for diagnostics: %s", k, err);
      return 1;
    }
    acc_init(d, &d->acc[k]);
  }
  if (!d->acc[0].L.ngates)
    fprintf(stderr, "cellc diag: note: cell '%s' has no gates: no gate histograms (gates: [])\n", model_cell_name(d->run->model));
  return 0;
}

int diag_write(Diag *d) {
  char *dir = out_dir(d);
  int rc = write_all(d, dir);
  if (!rc) summary(d, dir);
  free(dir);
  return rc;
}

void diag_close(Diag *d) {
  if (!d) return;
  for (int k = 0; d->acc && k < d->nlayers; k++) acc_free(&d->acc[k]);
  free(d->acc);
  cJSON_Delete(d->compare);
  arena_free(&d->arena);
  free(d);
}
