/* diag_stats.h: the numerical parts of `cellc diag` (seeds.md section 5) that do not depend on a model:
 * histograms of gate values, medians and quantiles, singular values through LAPACK, the robust
 * log-log slope of the Jacobian sensitivity against the gate-product predictor, and the plots
 * (diag_plot.c, PLplot). docs/diagnostics.md says what each number means. */
#ifndef CELLC_DIAG_STATS_H
#define CELLC_DIAG_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIAG_BINS 50

/* Counts v into one of DIAG_BINS equal bins of (0, 1) (0 and 1 themselves into the end bins);
 * a NaN is not counted. */
void diag_hist_add(int64_t *hist, double v);
/* The median of v[0..n) (sorts v in place); NaN for n = 0. */
double diag_median(double *v, int n);
/* The q-quantile (0 <= q <= 1) of sorted[0..n), linearly interpolated. */
double diag_quantile(const double *sorted, int n, double q);
/* The singular values of the n x n matrix m (row-major), largest first, by LAPACK's dgesvd.
 * 0, or -1 when LAPACK reports a failure. */
int diag_singular_values(int n, const double *m, double *sv);
/* AI_r = sv[0] / sv[r-1] and CE_r = sum_{i<r} sv_i^2 / sum_i sv_i^2 of n singular values (r is
 * capped at n). */
void diag_anisotropy(const double *sv, int n, int r, double *ai, double *ce);
/* The robust fit log S = a + s log P over the pairs whose P lies within the 1%..99% quantile range
 * of P (pairs with P or S not positive and finite are dropped): the Theil-Sen estimate, the median
 * of the slopes between pairs of points (on at most 2000 points, taken evenly when there are
 * more). 0 with *slope and *icept, or -1 when fewer than 3 points or one distinct log P remain. */
int diag_loglog_slope(const double *P, const double *S, int n, double *slope, double *icept);
/* The same fit by ordinary least squares over the same points (the alternative to Theil-Sen's
 * robustness that the time-scale study shows its slope against). 0, or -1 as above. */
int diag_loglog_ols(const double *P, const double *S, int n, double *slope, double *icept);

/* ---- plots (diag_plot.c): SVG files through PLplot's svg device, each with a PNG beside it ---- */

typedef struct DiagSeries {
  const char *label;      /* legend text (drawn below the panel, outside the data) */
  const double *x, *y;
  int n;
  bool points;            /* markers instead of a line */
} DiagSeries;

/* One panel: one quantity on its y axis, named with its unit in ylabel. */
typedef struct DiagPlot {
  const char *title, *xlabel, *ylabel;
  bool logx, logy;        /* log10 axes asked for: taken only where the values are positive and span
                           * a decade or more (else linear); labelled at 1, 2 and 5 times the powers
                           * of ten where fewer than three powers show; the label says "(log scale)" */
  const DiagSeries *series;
  int nseries;
  const char *const *xnames; /* categorical x: the name of x = 0, 1, ... drawn as its tick label, or NULL */
  int nxnames;
} DiagPlot;

/* The figure of npanels panels side by side, into path (".svg") and the same name with ".png"
 * (each written to a temporary file, then renamed). share_y: every panel on the same y range.
 * record, when not NULL (a cJSON array): an object per figure appended to it with each panel's
 * title, axis labels, ranges, scales and the page boxes of its data and its legend (plots.json).
 * 0, or -1 with a message in err. */
struct cJSON;
int diag_plot_fig(const char *path, const DiagPlot *panels, int npanels, bool share_y, struct cJSON *record, char *err,
                  size_t errlen);
/* One panel. */
int diag_plot(const char *path, const DiagPlot *p, char *err, size_t errlen);
/* Histograms of DIAG_BINS counts on (0, 1), side by side: one panel each, with its title and up to
 * 4 histograms drawn over each other (as fractions of their totals), all panels on one y range. */
typedef struct DiagHistPanel {
  const char *title;
  const char *labels[4];
  const int64_t *hist[4];
  int nhist;
} DiagHistPanel;
/* Line plots side by side (cellc plot) over a legend below them, outside the data. */
typedef struct DiagLine {
  const double *x, *y;
  int n;
  bool dashed;
  int entry;              /* the legend entry whose colour it takes */
} DiagLine;

typedef struct DiagPanel {
  const char *title, *xlabel, *ylabel;
  bool logy;              /* log10 y, taken only where the values are positive and span a decade or
                           * more; labelled as DiagPlot's axes */
  const DiagLine *lines;
  int nlines;
} DiagPanel;

/* The panels, the legend's entries in their colours and `note` (how the line styles read) after
 * them; `device`: "svg" or "pngcairo". 0, or -1 with a message in err. */
int diag_plot_panels(const char *path, const char *device, const DiagPanel *panels, int npanels, const char *const *legend,
                     int nlegend, const char *note, char *err, size_t errlen);
int diag_plot_hists(const char *path, const DiagHistPanel *panels, int npanels, struct cJSON *record, char *err,
                    size_t errlen);

#endif
