/* diag_plot.c: the plots of `cellc diag`, drawn by PLplot (libplplot-dev) with its `svg` device
 * into files written through fsout (a temporary file, renamed once PLplot has finished it). */
#include "diag_stats.h"

#include <math.h>
#include <plplot/plplot.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

/* colours of PLplot's map 0 that read well on white: blue, red, green, magenta, brown, cyan */
static const int colours[] = {9, 1, 3, 13, 4, 11};

/* PLplot's `device` into the temporary file of o: 0, or -1. */
static int plot_begin_on(FsOut *o, const char *device, const char *path, int width, int height, char *err, size_t errlen);

static int plot_begin(FsOut *o, const char *path, int width, int height, char *err, size_t errlen) {
  return plot_begin_on(o, "svg", path, width, height, err, errlen);
}

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

/* The range of the finite (positive, on a log axis) values of every series along x or y. */
static void range(const DiagPlot *p, bool along_y, double *lo, double *hi) {
  bool logv = along_y ? p->logy : p->logx;
  *lo = INFINITY, *hi = -INFINITY;
  for (int s = 0; s < p->nseries; s++)
    for (int i = 0; i < p->series[s].n; i++) {
      double v = along_y ? p->series[s].y[i] : p->series[s].x[i];
      if (!isfinite(v) || (logv && v <= 0)) continue;
      v = logv ? log10(v) : v;
      if (v < *lo) *lo = v;
      if (v > *hi) *hi = v;
    }
  if (!(*lo <= *hi)) *lo = 0, *hi = 1;
  double pad = (*hi - *lo) * 0.05;
  if (pad == 0) pad = logv ? 0.5 : (fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1);
  *lo -= pad, *hi += pad;
}

static void draw_series(const DiagPlot *p, int s) {
  const DiagSeries *d = &p->series[s];
  PLFLT *x = xmalloc(sizeof(PLFLT) * (size_t)d->n + 8), *y = xmalloc(sizeof(PLFLT) * (size_t)d->n + 8);
  int m = 0;
  for (int i = 0; i < d->n; i++) {
    double a = d->x[i], b = d->y[i];
    if (!isfinite(a) || !isfinite(b) || (p->logx && a <= 0) || (p->logy && b <= 0)) continue;
    x[m] = p->logx ? log10(a) : a, y[m] = p->logy ? log10(b) : b, m++;
  }
  plcol0(colours[s % 6]);
  if (d->points) plpoin(m, x, y, 1);
  else if (m > 0) plline(m, x, y);
  if (d->label) plmtex("rv", -1.0, 0.96 - 0.06 * s, 1.0, d->label);
  free(x), free(y);
}

int diag_plot(const char *path, const DiagPlot *p, char *err, size_t errlen) {
  FsOut o;
  if (plot_begin(&o, path, 720, 540, err, errlen) < 0) return -1;
  double x0, x1, y0, y1;
  range(p, false, &x0, &x1);
  range(p, true, &y0, &y1);
  plcol0(15);
  plenv(x0, x1, y0, y1, 0, (p->logx ? 10 : 0) + (p->logy ? 20 : 0));
  pllab(p->xlabel, p->ylabel, p->title);
  for (int s = 0; s < p->nseries; s++) draw_series(p, s);
  return plot_end(&o, err, errlen);
}

/* One panel: each histogram as a step line of its fractions per bin. */
static void hist_panel(const DiagHistPanel *h) {
  double ymax = 0;
  for (int k = 0; k < h->nhist; k++) {
    double tot = 0;
    for (int i = 0; i < DIAG_BINS; i++) tot += (double)h->hist[k][i];
    for (int i = 0; i < DIAG_BINS && tot > 0; i++) ymax = fmax(ymax, (double)h->hist[k][i] / tot);
  }
  plcol0(15);
  plenv(0, 1, 0, ymax > 0 ? ymax * 1.1 : 1, 0, 0);
  pllab("gate value", "fraction of values", h->title);
  for (int k = 0; k < h->nhist; k++) {
    double tot = 0;
    for (int i = 0; i < DIAG_BINS; i++) tot += (double)h->hist[k][i];
    PLFLT x[2 * DIAG_BINS], y[2 * DIAG_BINS];
    for (int i = 0; i < DIAG_BINS; i++) {
      double f = tot > 0 ? (double)h->hist[k][i] / tot : 0;
      x[2 * i] = (double)i / DIAG_BINS, x[2 * i + 1] = (double)(i + 1) / DIAG_BINS;
      y[2 * i] = y[2 * i + 1] = f;
    }
    plcol0(colours[k % 6]);
    plline(2 * DIAG_BINS, x, y);
    if (h->labels[k]) plmtex("rv", -1.0, 0.96 - 0.07 * k, 1.0, h->labels[k]);
  }
}

int diag_plot_hists(const char *path, const DiagHistPanel *panels, int npanels, char *err, size_t errlen) {
  FsOut o;
  int cols = npanels < 1 ? 1 : npanels;
  if (plot_begin(&o, path, 420 * cols, 420, err, errlen) < 0) return -1;
  plssub(cols, 1);
  for (int i = 0; i < npanels; i++) hist_panel(&panels[i]); /* plenv moves to the next panel */
  return plot_end(&o, err, errlen);
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
    plbox("bcnst", 0, 0, logy ? "bcnstvl" : "bcnstv", 0, 0);
    pllab(p->xlabel, p->ylabel, p->title);
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
