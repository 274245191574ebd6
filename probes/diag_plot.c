/* diag_plot.c: the plots of `cellc diag`, drawn by PLplot (libplplot-dev) with its `svg` and
 * `pngcairo` devices into files written through fsout (a temporary file, renamed once PLplot has finished it). */
#include "diag_stats.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <plplot/plplot.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

/* colours of PLplot's map 0 that read well on white: blue, red, green, magenta, brown, cyan */
static const int colours[] = {9, 1, 3, 13, 4, 11};

/* PLplot's `device` into the temporary file of o: 0, or -1. */
static int plot_begin_on(FsOut *o, const char *device, const char *path, int width, int height, char *err, size_t errlen) {
  if (fsout_begin(o, path, err, errlen) < 0) return -1;
  int fd = dup(o->fd);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    snprintf(err, errlen, "%s: cannot open the plot file", path);
    fsout_abort(o);
    return -1;
  }
  plsdev(device);
  plsfile(f);
  plspage(0, 0, width, height, 0, 0);
  plscolbg(255, 255, 255);
  plscol0(15, 0, 0, 0);
  plinit();
  plfontld(1);
  plschr(0, 0.8);
  return 0;
}

/* Ends PLplot's stream (which closes its FILE) and renames the file into place. */
static int plot_end(FsOut *o, char *err, size_t errlen) {
  plend();
  return fsout_commit(o, err, errlen);
}

/* Whether an axis over the values [lo, hi] is drawn in log10: all positive and a decade or more
 * apart (under a decade a log axis reads as a cliff, and linear shows the values as they are). */
static bool log_fits(double lo, double hi) { return lo > 0 && isfinite(lo) && isfinite(hi) && hi / lo >= 10; }

/* PLplot labels a log axis at every power of ten and only there: over fewer than three of them the
 * axis also gets labels at 2 and 5 times each power, over more than eight only every few powers
 * are labelled (drawn here; true when it does, and PLplot's own labels are left off). */
static bool log_labels(bool along_y, double p0, double p1, int *widest) {
  int powers = (int)(floor(p1) - ceil(p0)) + 1;
  if (powers > 8) { /* PLplot would label every power: every step-th one, at most eight */
    int step = (powers + 7) / 8;
    for (int k = (int)ceil(p0); k <= (int)floor(p1); k++) {
      if (k % step) continue;
      char text[32];
      snprintf(text, sizeof text, k == 0 ? "1" : "10#u%d#d", k);
      if (*widest < 4) *widest = 4;
      double f = (k - p0) / (p1 - p0);
      if (along_y) plmtex("lv", 0.5, f, 1.0, text);
      else plmtex("b", 1.5, f, 0.5, text);
    }
    return true;
  }
  if (powers >= 3) return false;
  static const double mult[3] = {1, 2, 5};
  for (int k = (int)floor(p0); k <= (int)ceil(p1); k++)
    for (int m = 0; m < 3; m++) {
      double v = log10(mult[m]) + k;
      if (v < p0 || v > p1) continue;
      char text[32];
      snprintf(text, sizeof text, "%g", mult[m] * pow(10, k));
      if ((int)strlen(text) > *widest) *widest = (int)strlen(text);
      double f = (v - p0) / (p1 - p0);
      if (along_y) plmtex("lv", 0.5, f, 1.0, text);
      else plmtex("b", 1.5, f, 0.5, text);
    }
  return true;
}

/* The range of the finite values of every series of p along x or y (non-positive ones left out
 * when positive_only). */
static void data_range(const DiagPlot *p, bool along_y, bool positive_only, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int s = 0; s < p->nseries; s++)
    for (int i = 0; i < p->series[s].n; i++) {
      double v = along_y ? p->series[s].y[i] : p->series[s].x[i];
      if (!isfinite(v) || (positive_only && v <= 0)) continue;
      *lo = fmin(*lo, v), *hi = fmax(*hi, v);
    }
}

/* An axis: its scale and its range in plot units (log10 of the values on a log axis), padded. */
typedef struct Axis {
  bool log;
  double lo, hi; /* the data's range, in values */
  double p0, p1; /* the drawn range, in plot units */
} Axis;

static void axis_pad(Axis *a) {
  double lo = a->log ? log10(a->lo) : a->lo, hi = a->log ? log10(a->hi) : a->hi;
  if (!(lo <= hi)) lo = 0, hi = 1;
  double pad = (hi - lo) * 0.05;
  if (pad == 0) pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
  a->p0 = lo - pad, a->p1 = hi + pad;
}

static void axis_of(const DiagPlot *p, bool along_y, Axis *a) {
  bool want = along_y ? p->logy : p->logx;
  double plo, phi;
  data_range(p, along_y, false, &a->lo, &a->hi);
  data_range(p, along_y, true, &plo, &phi);
  a->log = want && a->lo > 0 && log_fits(plo, phi);
  axis_pad(a);
}

static void draw_series(const DiagSeries *d, bool logx, bool logy, int colour) {
  PLFLT *x = xmalloc(sizeof(PLFLT) * (size_t)d->n + 8), *y = xmalloc(sizeof(PLFLT) * (size_t)d->n + 8);
  int m = 0;
  for (int i = 0; i < d->n; i++) {
    double a = d->x[i], b = d->y[i];
    if (!isfinite(a) || !isfinite(b) || (logx && a <= 0) || (logy && b <= 0)) continue;
    x[m] = logx ? log10(a) : a, y[m] = logy ? log10(b) : b, m++;
  }
  plcol0(colours[colour % 6]);
  if (d->points || m == 1) plpoin(m, x, y, d->points ? 4 : 17);
  else if (m > 0) plline(m, x, y);
  free(x), free(y);
}

/* The figure's layout in page units: panel k's data box and its legend's box below it. */
typedef struct Layout {
  int width, height, rows;
  double w, leg; /* a panel's share of the width; the legend strip's share of the height */
} Layout;

static Layout layout(const DiagPlot *panels, int n) {
  Layout L = {0};
  for (int k = 0; k < n; k++) {
    int r = 0;
    for (int s = 0; s < panels[k].nseries; s++) r += panels[k].series[s].label != NULL;
    if (r > L.rows) L.rows = r;
  }
  L.width = (n == 1 ? 640 : 460 * n), L.height = 440 + 20 * L.rows + (L.rows ? 12 : 0);
  L.w = 1.0 / n, L.leg = (20.0 * L.rows + (L.rows ? 12 : 0)) / L.height;
  return L;
}

static void panel_box(const Layout *L, int k, bool categorical, double b[4]) {
  b[0] = k * L->w + 95.0 / L->width, b[1] = (k + 1) * L->w - 25.0 / L->width;
  b[2] = L->leg + (categorical ? 70.0 : 60.0) / L->height, b[3] = 1 - 40.0 / L->height;
}

static void legend_box(const Layout *L, int k, double b[4]) {
  b[0] = k * L->w + 60.0 / L->width, b[1] = (k + 1) * L->w - 10.0 / L->width;
  b[2] = 4.0 / L->height, b[3] = L->leg;
}

static void draw_fig(const DiagPlot *panels, int n, const Axis *ax, const Axis *ay, const Layout *L) {
  pladv(0);
  for (int k = 0; k < n; k++) {
    const DiagPlot *p = &panels[k];
    bool cat = p->xnames != NULL;
    double b[4];
    panel_box(L, k, cat, b);
    plvpor(b[0], b[1], b[2], b[3]);
    plwind(ax[k].p0, ax[k].p1, ay[k].p0, ay[k].p1);
    plcol0(15);
    int wx = 0, wy = 0; /* the longest tick label drawn here, in characters */
    bool own_x = !cat && ax[k].log && log_labels(false, ax[k].p0, ax[k].p1, &wx);
    bool own_y = ay[k].log && log_labels(true, ay[k].p0, ay[k].p1, &wy);
    plbox(cat ? "bc" : ax[k].log ? (own_x ? "bcstl" : "bcnstl") : "bcnst", 0, 0,
          ay[k].log ? (own_y ? "bcstvl" : "bcnstvl") : "bcnstv", 0, 0);
    const char *xl = p->xlabel, *yl = p->ylabel;
    char xbuf[256], ybuf[256];
    if (ax[k].log) snprintf(xbuf, sizeof xbuf, "%s (log scale)", xl), xl = xbuf;
    if (ay[k].log) snprintf(ybuf, sizeof ybuf, "%s (log scale)", yl), yl = ybuf;
    plmtex("t", 1.2, 0.5, 0.5, p->title);
    /* the axis name clear of the tick labels (a character is about 0.7 of its height wide) */
    plmtex("l", fmax(5.0, 1.8 + 0.7 * wy), 0.5, 0.5, yl);
    plmtex("b", cat ? 4.6 : 3.2, 0.5, 0.5, xl);
    if (cat) { /* the names as tick labels, every one while they fit, else evenly spaced */
      int every = p->nxnames <= 24 ? 1 : (p->nxnames + 23) / 24, longest = 0;
      for (int i = 0; i < p->nxnames; i++)
        if ((int)strlen(p->xnames[i]) > longest) longest = (int)strlen(p->xnames[i]);
      /* two rows, alternating, where the names side by side would run into each other (a
       * character about 7 pixels wide here) */
      double room = (b[1] - b[0]) * L->width / ((double)p->nxnames / every);
      bool stagger = p->nxnames > 12 || (longest + 1) * 7.0 > room;
      for (int i = 0; i < p->nxnames; i += every) {
        double f = (i - ax[k].p0) / (ax[k].p1 - ax[k].p0);
        PLFLT tx[2] = {i, i}, ty[2] = {ay[k].p0, ay[k].p0 + (ay[k].p1 - ay[k].p0) * 0.015};
        plline(2, tx, ty);
        plmtex("b", stagger && (i / every) % 2 ? 2.6 : 1.3, f, 0.5, p->xnames[i]);
      }
    }
    for (int s = 0; s < p->nseries; s++) draw_series(&p->series[s], ax[k].log, ay[k].log, s);
    /* the legend, below the panel: a short line (or a marker) in each series' colour, then its label */
    if (!L->rows) continue;
    legend_box(L, k, b);
    plvpor(b[0], b[1], b[2], b[3]);
    plwind(0, 1, 0, 1);
    int r = 0;
    for (int s = 0; s < p->nseries; s++) {
      if (!p->series[s].label) continue;
      double yy = 1 - (r + 0.5) / L->rows;
      PLFLT lx[2] = {0, 0.06}, ly[2] = {yy, yy}, mx = 0.03;
      plcol0(colours[s % 6]);
      if (p->series[s].points) plpoin(1, &mx, &yy, 4);
      else plwidth(2), plline(2, lx, ly), plwidth(1);
      plcol0(15);
      plptex(0.08, yy, 1, 0, 0, p->series[s].label);
      r++;
    }
  }
}

static void record_fig(cJSON *record, const char *path, const DiagPlot *panels, int n, const Axis *ax, const Axis *ay,
                       const Layout *L) {
  cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
  const char *base = strrchr(path, '/');
  cJSON_AddStringToObject(o, "file", base ? base + 1 : path);
  for (int k = 0; k < n; k++) {
    const DiagPlot *p = &panels[k];
    cJSON *q = cJSON_CreateObject(), *labels = cJSON_CreateArray();
    double b[4];
    cJSON_AddStringToObject(q, "title", p->title);
    cJSON_AddStringToObject(q, "xlabel", p->xlabel);
    cJSON_AddStringToObject(q, "ylabel", p->ylabel);
    cJSON_AddStringToObject(q, "xscale", p->xnames ? "names" : ax[k].log ? "log" : "linear");
    cJSON_AddStringToObject(q, "yscale", ay[k].log ? "log" : "linear");
    /* the drawn ranges, in values */
    double xr[2] = {ax[k].log ? pow(10, ax[k].p0) : ax[k].p0, ax[k].log ? pow(10, ax[k].p1) : ax[k].p1};
    double yr[2] = {ay[k].log ? pow(10, ay[k].p0) : ay[k].p0, ay[k].log ? pow(10, ay[k].p1) : ay[k].p1};
    cJSON_AddItemToObject(q, "x", cJSON_CreateDoubleArray(xr, 2));
    cJSON_AddItemToObject(q, "y", cJSON_CreateDoubleArray(yr, 2));
    double yd[2] = {ay[k].lo, ay[k].hi}; /* the data's own range (over every panel when shared) */
    cJSON_AddItemToObject(q, "ydata", cJSON_CreateDoubleArray(yd, 2));
    panel_box(L, k, p->xnames != NULL, b);
    cJSON_AddItemToObject(q, "box", cJSON_CreateDoubleArray(b, 4));
    legend_box(L, k, b);
    cJSON_AddItemToObject(q, "legend_box", cJSON_CreateDoubleArray(b, 4));
    for (int s = 0; s < p->nseries; s++)
      if (p->series[s].label) cJSON_AddItemToArray(labels, cJSON_CreateString(p->series[s].label));
    cJSON_AddItemToObject(q, "legend", labels);
    if (p->xnames) {
      cJSON *names = cJSON_CreateArray();
      for (int i = 0; i < p->nxnames; i++) cJSON_AddItemToArray(names, cJSON_CreateString(p->xnames[i]));
      cJSON_AddItemToObject(q, "xnames", names);
    }
    cJSON_AddItemToArray(arr, q);
  }
  cJSON_AddItemToObject(o, "panels", arr);
  cJSON_AddItemToArray(record, o);
}

int diag_plot_fig(const char *path, const DiagPlot *panels, int n, bool share_y, cJSON *record, char *err, size_t errlen) {
  Axis *ax = xcalloc((size_t)n + 1, sizeof(Axis)), *ay = xcalloc((size_t)n + 1, sizeof(Axis));
  for (int k = 0; k < n; k++) {
    axis_of(&panels[k], false, &ax[k]);
    if (panels[k].xnames) ax[k].log = false, ax[k].p0 = -0.5, ax[k].p1 = panels[k].nxnames - 0.5;
    axis_of(&panels[k], true, &ay[k]);
  }
  if (share_y && n > 1) { /* one range over all panels, log only where every panel's data allow it */
    Axis all = {true, INFINITY, -INFINITY, 0, 0};
    double plo = INFINITY, phi = -INFINITY;
    for (int k = 0; k < n; k++) {
      double a, b;
      data_range(&panels[k], true, true, &a, &b);
      plo = fmin(plo, a), phi = fmax(phi, b);
      all.lo = fmin(all.lo, ay[k].lo), all.hi = fmax(all.hi, ay[k].hi);
      all.log = all.log && panels[k].logy;
    }
    all.log = all.log && all.lo > 0 && log_fits(plo, phi);
    axis_pad(&all);
    for (int k = 0; k < n; k++) ay[k] = all;
  }
  Layout L = layout(panels, n);
  static const char *const devs[2] = {"svg", "pngcairo"};
  size_t len = strlen(path);
  char *png = xasprintf("%.*s.png", (int)(len > 4 && !strcmp(path + len - 4, ".svg") ? len - 4 : len), path);
  int rc = 0;
  for (int d = 0; d < 2 && !rc; d++) {
    FsOut o;
    if (plot_begin_on(&o, devs[d], d ? png : path, L.width, L.height, err, errlen) < 0) {
      rc = -1;
      break;
    }
    draw_fig(panels, n, ax, ay, &L);
    rc = plot_end(&o, err, errlen);
  }
  if (!rc && record) record_fig(record, path, panels, n, ax, ay, &L);
  free(png), free(ax), free(ay);
  return rc;
}

int diag_plot(const char *path, const DiagPlot *p, char *err, size_t errlen) {
  return diag_plot_fig(path, p, 1, false, NULL, err, errlen);
}

/* Each histogram as a step line of its fractions per bin; every panel on one y range, so that a
 * --compare run's panel reads against this one's. */
int diag_plot_hists(const char *path, const DiagHistPanel *panels, int npanels, cJSON *record, char *err, size_t errlen) {
  int n = npanels < 1 ? 1 : npanels;
  DiagPlot *pl = xcalloc((size_t)n, sizeof(DiagPlot));
  DiagSeries *ser = xcalloc((size_t)n * 4, sizeof(DiagSeries));
  double *xs = xcalloc((size_t)n * 4 * 2 * DIAG_BINS, sizeof(double)), *ys = xcalloc((size_t)n * 4 * 2 * DIAG_BINS, sizeof(double));
  for (int k = 0; k < npanels; k++) {
    const DiagHistPanel *h = &panels[k];
    for (int j = 0; j < h->nhist; j++) {
      double tot = 0, *x = xs + ((size_t)k * 4 + j) * 2 * DIAG_BINS, *y = ys + ((size_t)k * 4 + j) * 2 * DIAG_BINS;
      for (int i = 0; i < DIAG_BINS; i++) tot += (double)h->hist[j][i];
      for (int i = 0; i < DIAG_BINS; i++) {
        x[2 * i] = (double)i / DIAG_BINS, x[2 * i + 1] = (double)(i + 1) / DIAG_BINS;
        y[2 * i] = y[2 * i + 1] = tot > 0 ? (double)h->hist[j][i] / tot : 0;
      }
      ser[k * 4 + j] = (DiagSeries){h->labels[j], x, y, 2 * DIAG_BINS, false};
    }
    pl[k] = (DiagPlot){h->title, "gate value (0 to 1)", "fraction of the values per bin", false, false, ser + k * 4, h->nhist,
                       NULL, 0};
  }
  int rc = diag_plot_fig(path, pl, npanels, true, record, err, errlen);
  free(pl), free(ser), free(xs), free(ys);
  return rc;
}

/* ---- cellc plot: panels over a legend ---- */

/* The colour of legend entry i of n: map 0's six while they last, else evenly along map 1. */
static void entry_colour(int i, int n) {
  if (n <= 6) plcol0(colours[i % 6]);
  else plcol1(n > 1 ? (double)i / (double)(n - 1) : 0);
}

/* Whether the panel's y values are all positive (the finite ones) and span a decade or more. */
static bool wants_log(const DiagPanel *p) {
  double lo = INFINITY, hi = -INFINITY;
  for (int s = 0; s < p->nlines; s++)
    for (int i = 0; i < p->lines[s].n; i++) {
      double v = p->lines[s].y[i];
      if (!isfinite(v)) continue;
      if (v <= 0) return false;
      lo = fmin(lo, v), hi = fmax(hi, v);
    }
  return lo < hi && hi / lo >= 10;
}

/* The range of the finite values of every line along x or y (log10 of y when logy), padded. */
static void panel_range(const DiagPanel *p, bool along_y, bool logy, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int s = 0; s < p->nlines; s++)
    for (int i = 0; i < p->lines[s].n; i++) {
      double v = along_y ? p->lines[s].y[i] : p->lines[s].x[i];
      if (!isfinite(v) || !isfinite(along_y ? p->lines[s].x[i] : p->lines[s].y[i])) continue;
      v = along_y && logy ? log10(v) : v;
      *lo = fmin(*lo, v), *hi = fmax(*hi, v);
    }
  if (!(*lo <= *hi)) *lo = 0, *hi = 1;
  double pad = (*hi - *lo) * 0.05;
  if (pad == 0) pad = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1;
  *lo -= pad, *hi += pad;
}

int diag_plot_panels(const char *path, const char *device, const DiagPanel *panels, int npanels, const char *const *legend,
                     int nlegend, const char *note, char *err, size_t errlen) {
  int cols = nlegend < 3 ? (nlegend < 1 ? 1 : nlegend) : 3, rows = (nlegend + cols - 1) / cols + 1; /* + the note */
  int width = 460 * (npanels < 1 ? 1 : npanels), height = 420 + 22 * rows;
  double leg = (22.0 * rows + 16) / height; /* the legend's share of the page, at the bottom */
  FsOut o;
  if (plot_begin_on(&o, device, path, width, height, err, errlen) < 0) return -1;
  /* more entries than map 0's six colours: hues around the wheel at one lightness (map 1's
   * default runs through black) */
  PLFLT pos[2] = {0, 1}, hue[2] = {0, 300}, light[2] = {0.45, 0.45}, sat[2] = {0.95, 0.95};
  plscmap1n(256);
  plscmap1l(0, 2, pos, hue, light, sat, NULL);
  pladv(0);
  for (int k = 0; k < npanels; k++) {
    const DiagPanel *p = &panels[k];
    bool logy = p->logy && wants_log(p);
    double x0, x1, y0, y1;
    panel_range(p, false, false, &x0, &x1);
    panel_range(p, true, logy, &y0, &y1);
    double w = 1.0 / npanels;
    /* room in pixels: the y tick labels and label on the left, the axis' exponent above */
    plvpor(k * w + 95.0 / width, (k + 1) * w - 25.0 / width, leg + 60.0 / height, 1 - 45.0 / height);
    plwind(x0, x1, y0, y1);
    plcol0(15);
    int wy = 0;
    bool own = logy && log_labels(true, y0, y1, &wy);
    plbox("bcnst", 0, 0, logy ? (own ? "bcstvl" : "bcnstvl") : "bcnstv", 0, 0);
    plmtex("t", 2.0, 0.5, 0.5, p->title);
    plmtex("b", 3.2, 0.5, 0.5, p->xlabel);
    plmtex("l", fmax(5.0, 1.8 + 0.7 * wy), 0.5, 0.5, p->ylabel); /* clear of the tick labels, as in draw_fig */
    for (int s = 0; s < p->nlines; s++) {
      const DiagLine *d = &p->lines[s];
      PLFLT *x = xmalloc(sizeof(PLFLT) * (size_t)d->n + 8), *y = xmalloc(sizeof(PLFLT) * (size_t)d->n + 8);
      int m = 0;
      for (int i = 0; i < d->n; i++)
        if (isfinite(d->x[i]) && isfinite(d->y[i]) && (!logy || d->y[i] > 0))
          x[m] = d->x[i], y[m] = logy ? log10(d->y[i]) : d->y[i], m++;
      entry_colour(d->entry, nlegend);
      pllsty(d->dashed ? 2 : 1);
      if (m == 1) plpoin(m, x, y, 1);
      else if (m > 1) plline(m, x, y);
      pllsty(1);
      free(x), free(y);
    }
  }
  /* the legend: a short line in each entry's colour, then its text */
  plvpor(0.02, 0.98, 0.01, leg);
  plwind(0, 1, 0, 1);
  for (int i = 0; i <= nlegend; i++) {
    int r = i / cols, c = i % cols;
    double yy = 1 - (r + 0.5) / rows, xx = (double)c / cols;
    if (i == nlegend) {
      plcol0(15);
      if (note) plptex(0, 1 - (rows - 0.5) / rows, 1, 0, 0, note);
      break;
    }
    PLFLT lx[2] = {xx, xx + 0.04}, ly[2] = {yy, yy};
    entry_colour(i, nlegend);
    plwidth(2);
    plline(2, lx, ly);
    plwidth(1);
    plcol0(15);
    plptex(xx + 0.05, yy, 1, 0, 0, legend[i]);
  }
  return plot_end(&o, err, errlen);
}
