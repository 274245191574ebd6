/* cmd_plot.c: `cellc plot RUN_DIR...` (docs/cli.md): the loss, the accuracy and the learning rate
 * against the step of one or several runs of `cellc train`, as SVG and PNG (PLplot, through the
 * probes' plotting: diag_plot_panels). Each run is one colour, labelled by the configuration keys
 * that differ between the runs; its train rows a solid line, its valid rows a dashed one. A
 * directory of a sweep (summary.json) stands for its runs. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "probes.h"
#include "support.h"

static const char *const synopses[] = {"plot", NULL};

/* One run's rows: train (step, loss, accuracy, lr) and valid (step, loss, accuracy). */
typedef struct Curves {
  char *dir;
  double *ts, *tl, *ta, *tr;
  int nt;
  double *vs, *vl, *va;
  int nv;
  char **keys, **vals; /* config.cfg's "section.key" and value */
  int nkeys;
  char *label;
} Curves;

static double num_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void push(double **a, int n, double v) {
  *a = xrealloc(*a, sizeof(double) * (size_t)(n + 1));
  (*a)[n] = v;
}

/* metrics.jsonl into c; 0, or 1 after the error. */
static int read_metrics(Curves *c) {
  char *path = xasprintf("%s/metrics.jsonl", c->dir);
  size_t len;
  char *text = read_file(path, &len);
  if (!text) {
    diag_plain("%s: %s (cellc plot takes the run directories of cellc train)", path, strerror(errno));
    free(path);
    return 1;
  }
  int lineno = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    lineno++;
    cJSON *row = cJSON_Parse(line);
    const cJSON *split = row ? cJSON_GetObjectItem(row, "split") : NULL;
    if (!cJSON_IsString(split) || !isfinite(num_of(row, "step"))) {
      diag_plain("%s:%d: not a metrics row (a JSON object with step and split)", path, lineno);
      cJSON_Delete(row);
      free(text), free(path);
      return 1;
    }
    double step = num_of(row, "step");
    if (!strcmp(split->valuestring, "train")) {
      push(&c->ts, c->nt, step), push(&c->tl, c->nt, num_of(row, "loss"));
      push(&c->ta, c->nt, num_of(row, "accuracy")), push(&c->tr, c->nt, num_of(row, "lr"));
      c->nt++;
    } else if (!strcmp(split->valuestring, "valid")) {
      push(&c->vs, c->nv, step), push(&c->vl, c->nv, num_of(row, "loss")), push(&c->va, c->nv, num_of(row, "accuracy"));
      c->nv++;
    }
    cJSON_Delete(row);
  }
  free(text), free(path);
  return 0;
}

/* config.cfg's keys (a run without one has none: it is labelled by its directory). */
static void read_config(Curves *c) {
  char *path = xasprintf("%s/config.cfg", c->dir);
  size_t len;
  char *text = read_file(path, &len);
  free(path);
  if (!text) return;
  char sec[128] = "";
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    while (isspace((unsigned char)*line)) line++;
    char *end = line + strlen(line);
    while (end > line && isspace((unsigned char)end[-1])) *--end = 0;
    if (*line == '[' && end[-1] == ']') {
      snprintf(sec, sizeof sec, "%.*s", (int)(end - line - 2), line + 1);
      continue;
    }
    char *eq = strchr(line, '=');
    if (!eq) continue;
    char *k = line, *ke = eq, *v = eq + 1;
    while (ke > k && isspace((unsigned char)ke[-1])) ke--;
    while (isspace((unsigned char)*v)) v++;
    c->keys = xrealloc(c->keys, sizeof(char *) * (size_t)(c->nkeys + 1));
    c->vals = xrealloc(c->vals, sizeof(char *) * (size_t)(c->nkeys + 1));
    c->keys[c->nkeys] = xasprintf("%s.%.*s", sec, (int)(ke - k), k);
    c->vals[c->nkeys++] = xstrdup(v);
  }
  free(text);
}

static const char *value_of(const Curves *c, const char *key) {
  for (int i = 0; i < c->nkeys; i++)
    if (!strcmp(c->keys[i], key)) return c->vals[i];
  return NULL;
}

static bool same(const char *a, const char *b) { return a && b ? !strcmp(a, b) : a == b; }

/* Each run's label: its values of the keys that differ between the runs (at most 4 of them, the
 * key's last part), or its directory's name where there are none or two labels are equal. */
static void make_labels(Curves *cs, int n) {
  for (int r = 0; r < n; r++) {
    char buf[256] = "";
    int shown = 0, more = 0;
    for (int i = 0; i < cs[r].nkeys; i++) {
      const char *key = cs[r].keys[i];
      bool differs = false;
      for (int q = 0; q < n && !differs; q++) differs = !same(value_of(&cs[q], key), cs[r].vals[i]);
      if (!differs) continue;
      if (shown == 4) {
        more++;
        continue;
      }
      const char *dot = strrchr(key, '.');
      size_t l = strlen(buf);
      snprintf(buf + l, sizeof buf - l, "%s%s=%s", shown ? " " : "", dot ? dot + 1 : key, cs[r].vals[i]);
      shown++;
    }
    if (more) {
      size_t l = strlen(buf);
      snprintf(buf + l, sizeof buf - l, " (+%d)", more);
    }
    if (n == 1) {
      const char *cell = value_of(&cs[r], "model.cell"), *task = value_of(&cs[r], "task.name");
      if (cell && task) snprintf(buf, sizeof buf, "%s on %s", cell, task);
    }
    cs[r].label = xstrdup(*buf ? buf : cs[r].dir);
  }
  for (int r = 0; r < n; r++)
    for (int q = 0; q < r; q++)
      if (!strcmp(cs[r].label, cs[q].label)) {
        free(cs[r].label);
        cs[r].label = xstrdup(cs[r].dir);
        break;
      }
}

/* A directory of a sweep: its runs, in summary.json's order. */
static int sweep_runs(const char *dir, char ***dirs, int *n) {
  char *path = xasprintf("%s/summary.json", dir);
  size_t len;
  char *text = read_file(path, &len);
  free(path);
  if (!text) return 0;
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *run;
  int before = *n;
  const cJSON *runs = cJSON_GetObjectItem(root, "runs"); /* NULL for a NULL root */
  cJSON_ArrayForEach(run, runs) {
    const cJSON *d = cJSON_GetObjectItem(run, "dir"), *st = cJSON_GetObjectItem(run, "status");
    if (!cJSON_IsString(d) || (cJSON_IsNumber(st) && st->valueint != 0)) continue;
    *dirs = xrealloc(*dirs, sizeof(char *) * (size_t)(*n + 1));
    (*dirs)[(*n)++] = xasprintf("%s/%s", dir, d->valuestring);
  }
  cJSON_Delete(root);
  return *n - before;
}

/* --figure FIG.json: panels of numbers a script computed, drawn as cellc diag draws its plots
 * (diag_plot_fig): {"share_y": bool, "panels": [{"title", "xlabel", "ylabel", "logx", "logy",
 * "xnames": [...], "series": [{"label", "x": [...], "y": [...], "points": bool}]}]}; null in y is left
 * out; xnames names x = 0, 1, ... (a categorical axis). Writes
 * PATH.svg and PATH.png (PATH: --out, else FIG.json without its extension). 0, 1 or 3. */
static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* A panel's "xnames": a categorical x axis (x = 0, 1, ... named by the strings, as diag's token
 * plots), the names pointing into the parsed JSON. Absent: 0; anything but a list of strings: 1. */
static int figure_xnames(const char *fig, int k, const cJSON *xn, DiagPlot *pl, const char ***names) {
  if (!xn) return 0;
  int n = cJSON_GetArraySize(xn);
  if (!cJSON_IsArray(xn) || n < 1) {
    diag_plain("%s: panel %d: \"xnames\" needs a list of one or more names", fig, k);
    return 1;
  }
  *names = xcalloc((size_t)n, sizeof(const char *));
  for (int i = 0; i < n; i++) {
    const cJSON *s = cJSON_GetArrayItem(xn, i);
    if (!cJSON_IsString(s)) {
      diag_plain("%s: panel %d: \"xnames\" item %d is not a string", fig, k, i);
      return 1;
    }
    (*names)[i] = s->valuestring;
  }
  pl->xnames = *names, pl->nxnames = n;
  return 0;
}

static int plot_figure(const char *fig, const char *out) {
  size_t len;
  char *text = read_file(fig, &len);
  cJSON *root = text ? cJSON_Parse(text) : NULL, *panels = root ? cJSON_GetObjectItem(root, "panels") : NULL;
  free(text);
  int np = cJSON_GetArraySize(panels);
  if (!root || !cJSON_IsArray(panels) || np < 1) {
    diag_plain("%s: %s", fig, !root ? "not a readable JSON file" : "needs \"panels\": a list of one or more panels");
    cJSON_Delete(root);
    return 1;
  }
  DiagPlot *pl = xcalloc((size_t)np, sizeof(DiagPlot));
  DiagSeries **ser = xcalloc((size_t)np, sizeof(DiagSeries *));
  const char ***names = xcalloc((size_t)np, sizeof(const char **));
  double **bufs = NULL;
  int nbufs = 0, rc = 0;
  for (int k = 0; k < np && !rc; k++) {
    const cJSON *p = cJSON_GetArrayItem(panels, k), *series = cJSON_GetObjectItem(p, "series");
    int ns = cJSON_GetArraySize(series);
    ser[k] = xcalloc((size_t)ns + 1, sizeof(DiagSeries));
    for (int j = 0; j < ns; j++) {
      const cJSON *sj = cJSON_GetArrayItem(series, j), *x = cJSON_GetObjectItem(sj, "x"), *y = cJSON_GetObjectItem(sj, "y");
      int n = cJSON_GetArraySize(x);
      if (!cJSON_IsArray(x) || !cJSON_IsArray(y) || cJSON_GetArraySize(y) != n) {
        diag_plain("%s: panel %d series %d: needs \"x\" and \"y\", lists of one length", fig, k, j);
        rc = 1;
        break;
      }
      bufs = xrealloc(bufs, sizeof(double *) * (size_t)(nbufs + 2));
      double *xv = bufs[nbufs++] = xcalloc((size_t)n + 1, sizeof(double)), *yv = bufs[nbufs++] = xcalloc((size_t)n + 1, sizeof(double));
      for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(x, i), *b = cJSON_GetArrayItem(y, i);
        xv[i] = cJSON_IsNumber(a) ? a->valuedouble : NAN, yv[i] = cJSON_IsNumber(b) ? b->valuedouble : NAN;
      }
      const char *label = str_of(sj, "label");
      ser[k][j] = (DiagSeries){label[0] ? label : NULL, xv, yv, n, cJSON_IsTrue(cJSON_GetObjectItem(sj, "points"))};
    }
    pl[k] = (DiagPlot){str_of(p, "title"), str_of(p, "xlabel"), str_of(p, "ylabel"), cJSON_IsTrue(cJSON_GetObjectItem(p, "logx")),
                       cJSON_IsTrue(cJSON_GetObjectItem(p, "logy")), ser[k], ns, NULL, 0};
    if (!rc) rc = figure_xnames(fig, k, cJSON_GetObjectItem(p, "xnames"), &pl[k], &names[k]);
  }
  if (!rc) {
    const char *o = out ? out : fig;
    size_t ol = strlen(o);
    const char *dot = strrchr(o, '.'), *slash = strrchr(o, '/');
    if (dot && (!slash || dot > slash)) ol = (size_t)(dot - o);
    char *path = xasprintf("%.*s.svg", (int)ol, o), err[1024];
    if (diag_plot_fig(path, pl, np, cJSON_IsTrue(cJSON_GetObjectItem(root, "share_y")), NULL, err, sizeof err) < 0) {
      diag_plain("%s", err);
      rc = 3;
    } else {
      printf("wrote %s and %.*s.png\n", path, (int)ol, o);
    }
    free(path);
  }
  for (int i = 0; i < nbufs; i++) free(bufs[i]);
  for (int k = 0; k < np; k++) free(ser[k]), free(names[k]);
  free(bufs), free(ser), free(pl), free(names);
  cJSON_Delete(root);
  return rc;
}

int cmd_plot(int argc, char **argv) {
  const char *out = NULL, *title = NULL, *first = NULL, *figure = NULL;
  char **dirs = NULL;
  int n = 0, given = 0, rc = 0;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--out") || !strcmp(s, "--title") || !strcmp(s, "--figure")) {
      if (i + 1 >= argc || !argv[i + 1][0]) {
        for (int r = 0; r < n; r++) free(dirs[r]);
        free(dirs);
        return cli_command_usage("plot", synopses, "%s needs a value", s);
      }
      *(!strcmp(s, "--out") ? &out : !strcmp(s, "--title") ? &title : &figure) = argv[++i];
    } else if (s[0] == '-' && s[1]) {
      for (int r = 0; r < n; r++) free(dirs[r]);
      free(dirs);
      return cli_command_usage("plot", synopses, "unknown flag '%s'", s);
    } else {
      if (!given++) first = s;
      char *m = xasprintf("%s/metrics.jsonl", s);
      struct stat st;
      bool run = stat(m, &st) == 0;
      free(m);
      if (run || !sweep_runs(s, &dirs, &n)) {
        dirs = xrealloc(dirs, sizeof(char *) * (size_t)(n + 1));
        dirs[n++] = xstrdup(s);
      }
    }
  }
  if (figure) {
    for (int r = 0; r < n; r++) free(dirs[r]);
    free(dirs);
    if (given || title) return cli_command_usage("plot", synopses, "%s", "--figure FIG.json takes no RUN_DIR and no --title");
    return plot_figure(figure, out);
  }
  if (!given || (!out && given > 1)) {
    for (int r = 0; r < n; r++) free(dirs[r]);
    free(dirs);
    return cli_command_usage("plot", synopses, "%s", !given ? "needs one or more RUN_DIRs" : "several RUN_DIRs need --out PATH");
  }
  /* PATH.svg and PATH.png; PATH may be given with either extension */
  char *base = out ? xstrdup(out) : xasprintf("%s/curves", first);
  size_t bl = strlen(base);
  if (bl > 4 && (!strcmp(base + bl - 4, ".svg") || !strcmp(base + bl - 4, ".png"))) base[bl - 4] = 0;
  Curves *cs = xcalloc((size_t)n, sizeof(Curves));
  for (int r = 0; r < n && !rc; r++) {
    cs[r].dir = dirs[r];
    rc = read_metrics(&cs[r]);
    if (!rc) read_config(&cs[r]);
  }
  if (!rc) {
    make_labels(cs, n);
    DiagLine *loss = xcalloc((size_t)(2 * n), sizeof(DiagLine)), *acc = xcalloc((size_t)(2 * n), sizeof(DiagLine));
    DiagLine *lr = xcalloc((size_t)n, sizeof(DiagLine));
    const char **labels = xcalloc((size_t)n, sizeof(char *));
    bool any_acc = false;
    for (int r = 0; r < n; r++) {
      Curves *c = &cs[r];
      labels[r] = c->label;
      loss[2 * r] = (DiagLine){c->ts, c->tl, c->nt, false, r};
      loss[2 * r + 1] = (DiagLine){c->vs, c->vl, c->nv, true, r};
      acc[2 * r] = (DiagLine){c->ts, c->ta, c->nt, false, r};
      acc[2 * r + 1] = (DiagLine){c->vs, c->va, c->nv, true, r};
      lr[r] = (DiagLine){c->ts, c->tr, c->nt, false, r};
      for (int i = 0; i < c->nt; i++) any_acc = any_acc || isfinite(c->ta[i]);
      for (int i = 0; i < c->nv; i++) any_acc = any_acc || isfinite(c->va[i]);
    }
    DiagPanel panels[3];
    int np = 0;
    panels[np++] = (DiagPanel){title ? title : "loss", "step", "loss", true, loss, 2 * n};
    if (any_acc) panels[np++] = (DiagPanel){"accuracy", "step", "accuracy", false, acc, 2 * n};
    panels[np++] = (DiagPanel){"learning rate", "step", "lr", true, lr, n};
    const char *note = "solid: train (mean over the log interval); dashed: valid";
    const char *devs[2] = {"svg", "pngcairo"}, *exts[2] = {"svg", "png"};
    for (int d = 0; d < 2 && !rc; d++) {
      char *path = xasprintf("%s.%s", base, exts[d]), err[1024];
      if (diag_plot_panels(path, devs[d], panels, np, labels, n, note, err, sizeof err) < 0) {
        diag_plain("%s", err);
        rc = 3;
      } else printf("wrote %s\n", path);
      free(path);
    }
    free(loss), free(acc), free(lr), free(labels);
  }
  for (int r = 0; r < n; r++) {
    Curves *c = &cs[r];
    free(c->ts), free(c->tl), free(c->ta), free(c->tr), free(c->vs), free(c->vl), free(c->va), free(c->label);
    for (int i = 0; i < c->nkeys; i++) free(c->keys[i]), free(c->vals[i]);
    free(c->keys), free(c->vals);
  }
  for (int r = 0; r < n; r++) free(dirs[r]);
  free(cs), free(dirs), free(base);
  return rc;
}
