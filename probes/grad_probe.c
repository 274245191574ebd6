/* grad_probe.c: the training-time probe of `[log] grad_per_step = true` (seeds.md section 5,
 * "gradient per timestep"): every log.every steps, the layers' per-step state gradients
 * ||dL/dh_t|| of the step's batch (its first GRAD_PROBE_SEQS sequences), from the model's own
 * input and output gradients of each layer, on the float64 interpreter; the largest seen for
 * each t and layer, written to grad_per_step.json and plotted in grad_per_step.svg. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "diag_layer.h"
#include "diag_stats.h"
#include "support.h"

#define GRAD_PROBE_SEQS 8

struct GradProbe {
  Arena arena;
  int nlayers, T, B;
  DiagLayer *L;
  double **max;    /* per layer [T] */
  int64_t samples; /* batches probed */
};

GradProbe *grad_probe_new(Model *m, int T, int B, char *err, size_t errlen) {
  GradProbe *g = xcalloc(1, sizeof *g);
  g->nlayers = model_nlayers(m), g->T = T, g->B = B < GRAD_PROBE_SEQS ? B : GRAD_PROBE_SEQS;
  g->L = xcalloc((size_t)g->nlayers, sizeof(DiagLayer));
  g->max = xcalloc((size_t)g->nlayers, sizeof(double *));
  for (int k = 0; k < g->nlayers; k++) {
    ModelLayerView v;
    model_layer_view(m, k, &v);
    g->max[k] = xcalloc((size_t)T, sizeof(double));
    if (diag_layer_open(&g->L[k], v.cell, &g->arena, err, errlen) < 0) {
      grad_probe_free(g);
      return NULL;
    }
  }
  return g;
}

void grad_probe_free(GradProbe *g) {
  if (!g) return;
  for (int k = 0; k < g->nlayers; k++) {
    if (g->L[k].p) diag_layer_close(&g->L[k]);
    free(g->max[k]);
  }
  free(g->L), free(g->max);
  arena_free(&g->arena);
  free(g);
}

void grad_probe_update(GradProbe *g, Model *m, int B) {
  double *norms = xcalloc((size_t)g->T * g->B + 1, sizeof(double));
  for (int k = 0; k < g->nlayers; k++) {
    DiagSeq s;
    diag_seq_alloc(&g->L[k], &s, g->T, g->B);
    diag_seq_fill(&g->L[k], &s, m, k, B);
    diag_seq_run(&g->L[k], &s, true);
    diag_grad_norms(&g->L[k], &s, norms);
    for (int t = 0; t < g->T; t++)
      for (int b = 0; b < g->B; b++) g->max[k][t] = fmax(g->max[k][t], norms[(size_t)t * g->B + b]);
    diag_seq_free(&g->L[k], &s);
  }
  free(norms);
  g->samples++;
}

int grad_probe_write(const GradProbe *g, const char *dir, char *err, size_t errlen) {
  cJSON *root = cJSON_CreateObject(), *layers = cJSON_CreateArray();
  cJSON_AddNumberToObject(root, "batches_probed", (double)g->samples);
  cJSON_AddNumberToObject(root, "sequences_per_batch", g->B);
  for (int k = 0; k < g->nlayers; k++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layer", k);
    cJSON_AddItemToObject(o, "max_grad_norm_per_step", cJSON_CreateDoubleArray(g->max[k], g->T));
    cJSON_AddItemToArray(layers, o);
  }
  cJSON_AddItemToObject(root, "layers", layers);
  char *text = cJSON_Print(root), *path = xasprintf("%s/grad_per_step.json", dir);
  cJSON_Delete(root);
  int rc = fsout_write_file(path, text, strlen(text), err, errlen);
  free(text), free(path);
  DiagSeries *ser = xcalloc((size_t)g->nlayers, sizeof(DiagSeries));
  double *t = xcalloc((size_t)g->T + 1, sizeof(double));
  for (int i = 0; i < g->T; i++) t[i] = i + 1;
  char **labels = xcalloc((size_t)g->nlayers, sizeof(char *));
  for (int k = 0; k < g->nlayers; k++) {
    labels[k] = xasprintf("layer %d", k);
    ser[k] = (DiagSeries){labels[k], t, g->max[k], g->T, false};
  }
  DiagPlot p = {"largest ||dL/dh_t|| seen during training", "time step t (steps)", "max ||dL/dh_t|| (loss per unit of state)", false, true, ser,
                g->nlayers, NULL, 0};
  path = xasprintf("%s/grad_per_step.svg", dir);
  if (!rc) rc = diag_plot(path, &p, err, errlen);
  for (int k = 0; k < g->nlayers; k++) free(labels[k]);
  free(labels), free(ser), free(t), free(path);
  return rc;
}
