/* harness.c: a C program that links one emitted cell (P.o or libP.so; -DP=<prefix> -include P.h)
 * and runs it on the tensors tests/emit_cli.py wrote as raw float32 files into IN:
 *   IN/meta: "T B nparams nstates", then the floats of each param, then of each state ([B, ...]);
 *   IN/x, IN/dy, IN/param.<i>, IN/h0.<i>, IN/dfinal.<i>.
 * It writes y, final.<i>, grad.<i>, dx, dh0.<i> into OUT for the comparison with the interpreter,
 * and checks the API's semantics itself, one "ok NAME" or "FAIL NAME" line each: NULL h0 is zeros,
 * NULL final / dx / dh0 members are not written and change nothing else, NULL dfinal is zeros, a
 * bad call (T = 0, B = 0, NULL x, NULL work, NULL dy) returns a nonzero status with a message.
 * ABI 2: P_forward_ex and P_backward_ex on 1, 3 and all cores (threads 0) give the bits of
 * P_forward and P_backward (each thread count, its own workspace), opt NULL is ABI 1's call,
 * lengths all T give P_forward's bits, and a length outside 1..T or a negative thread count is a
 * nonzero status with a message. Where IN/lengths holds B integers (text), the forward and backward
 * with those lengths too, into OUT/len.y, len.final.<i>, len.grad.<i>, len.dx, len.dh0.<i>, on 1
 * and 2 threads (the same bits), for tests/lengths_cli.py's comparison with `cellc run --lengths`.
 * With a third argument "threads": the sequence is long enough for the workspace to serve 3
 * threads, and threads 3 must start 2 pthreads per call (counted by the pthread_create below,
 * which the object's calls bind to before libc's). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(P, x)
typedef CAT(P, _params) Params;
typedef CAT(P, _states) States;

/* -DSEED=N: a cell emitted with --set train_noise=true, whose forward takes a trailing seed */
#ifdef SEED
#define FWD(...) FN(_forward)(__VA_ARGS__, (unsigned long long)SEED)
#define FWD_EX(...) FN(_forward_ex)(__VA_ARGS__, (unsigned long long)SEED)
#else
#define FWD(...) FN(_forward)(__VA_ARGS__)
#define FWD_EX(...) FN(_forward_ex)(__VA_ARGS__)
#endif
typedef CAT(P, _options) Options;

/* pthread_create counted, then libc's */
static int created;
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
  int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) =
      (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(RTLD_NEXT, "pthread_create");
  created++;
  return real(t, a, fn, arg);
}

#define MAXN 64
static int T, B, np, ns;
static long pn[MAXN], sn[MAXN];
static long nx, ny;
static int failures;

static float *load(const char *dir, const char *name, long n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  float *v = calloc((size_t)n + 1, sizeof(float));
  if (!f || fread(v, sizeof(float), (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  fclose(f);
  return v;
}

static void save(const char *dir, const char *name, const float *v, long n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(v, sizeof(float), (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

static void check(const char *name, int ok) {
  printf("%s %s\n", ok ? "ok" : "FAIL", name);
  if (!ok) failures++;
}

static int same(const float *a, const float *b, long n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

static float *fresh(long n) {
  float *v = malloc(sizeof(float) * (size_t)(n + 1));
  for (long i = 0; i <= n; i++) v[i] = NAN; /* a value never written stays NaN */
  return v;
}

static int untouched(const float *v, long n) {
  for (long i = 0; i < n; i++)
    if (!isnan(v[i])) return 0;
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) return fprintf(stderr, "usage: harness IN OUT [threads]\n"), 2;
  int expect_threads = argc == 4 && !strcmp(argv[3], "threads");
  const char *in = argv[1], *out = argv[2];
  char path[4096];
  snprintf(path, sizeof path, "%s/meta", in);
  FILE *m = fopen(path, "r");
  if (!m || fscanf(m, "%d %d %d %d %ld %ld", &T, &B, &np, &ns, &nx, &ny) != 6 || np > MAXN || ns > MAXN) return 2;
  for (int i = 0; i < np; i++)
    if (fscanf(m, "%ld", &pn[i]) != 1) return 2;
  for (int i = 0; i < ns; i++)
    if (fscanf(m, "%ld", &sn[i]) != 1) return 2;
  fclose(m);
  check("abi", FN(_ABI) == 2 && sizeof(Params) == sizeof(float *) * (size_t)(np ? np : 1) &&
                   sizeof(States) == sizeof(float *) * (size_t)(ns ? ns : 1));
  float *w[MAXN], *h0[MAXN], *df[MAXN], *fin[MAXN], *g[MAXN], *dh0[MAXN], *zeros[MAXN];
  char name[64];
  for (int i = 0; i < np; i++) snprintf(name, sizeof name, "param.%d", i), w[i] = load(in, name, pn[i]);
  for (int i = 0; i < ns; i++) {
    snprintf(name, sizeof name, "h0.%d", i), h0[i] = load(in, name, sn[i]);
    snprintf(name, sizeof name, "dfinal.%d", i), df[i] = load(in, name, sn[i]);
    fin[i] = fresh(sn[i]), dh0[i] = fresh(sn[i]), zeros[i] = calloc((size_t)sn[i] + 1, sizeof(float));
  }
  for (int i = 0; i < np; i++) g[i] = fresh(pn[i]);
  float *x = load(in, "x", nx), *dy = load(in, "dy", ny), *y = fresh(ny), *dx = fresh(nx);
  size_t wsb = FN(_workspace_bytes)(T, B);
  void *work = malloc(wsb + 1);
  const Params *W = (const Params *)(void *)w;

  /* the main run: every input given, every output asked for */
  int rc = FWD(W, T, B, x, (const States *)(void *)h0, y, (States *)(void *)fin, work);
  check("forward status", rc == 0);
  rc = FN(_backward)(W, T, B, x, (const States *)(void *)h0, dy, (const States *)(void *)df, work, (Params *)(void *)g, dx,
                     (States *)(void *)dh0);
  check("backward status", rc == 0);
  save(out, "y", y, ny), save(out, "dx", dx, nx);
  for (int i = 0; i < ns; i++) {
    snprintf(name, sizeof name, "final.%d", i), save(out, name, fin[i], sn[i]);
    snprintf(name, sizeof name, "dh0.%d", i), save(out, name, dh0[i], sn[i]);
  }
  for (int i = 0; i < np; i++) snprintf(name, sizeof name, "grad.%d", i), save(out, name, g[i], pn[i]);

  /* ABI 2: every thread count gives the main run's bits */
  int counts[3] = {1, 3, 0};
  for (int c = 0; c < 3; c++) {
    Options o = {NULL, counts[c]};
    void *wk = malloc(wsb + 1);
    float *yt = fresh(ny), *dxt = fresh(nx), *ft[MAXN], *gt[MAXN], *dht[MAXN];
    for (int i = 0; i < ns; i++) ft[i] = fresh(sn[i]), dht[i] = fresh(sn[i]);
    for (int i = 0; i < np; i++) gt[i] = fresh(pn[i]);
    int before = created;
    int r1 = FWD_EX(W, T, B, x, (const States *)(void *)h0, yt, (States *)(void *)ft, wk, &o);
    int r2 = FN(_backward_ex)(W, T, B, x, (const States *)(void *)h0, dy, (const States *)(void *)df, wk, &o,
                              (Params *)(void *)gt, dxt, (States *)(void *)dht);
    int ok = r1 == 0 && r2 == 0 && same(yt, y, ny) && same(dxt, dx, nx);
    for (int i = 0; i < ns; i++) ok = ok && same(ft[i], fin[i], sn[i]) && same(dht[i], dh0[i], sn[i]);
    for (int i = 0; i < np; i++) ok = ok && same(gt[i], g[i], pn[i]);
    snprintf(name, sizeof name, "threads %d: the bits of P_forward and P_backward", counts[c]);
    check(name, ok);
    if (counts[c] == 1 || (expect_threads && counts[c] == 3)) {
      snprintf(name, sizeof name, "threads %d: %d pthreads started by the forward and backward", counts[c], created - before);
      check(name, created - before == (counts[c] == 1 ? 0 : 4));
    }
    free(wk), free(yt), free(dxt);
    for (int i = 0; i < ns; i++) free(ft[i]), free(dht[i]);
    for (int i = 0; i < np; i++) free(gt[i]);
  }

  /* ABI 2 with lengths from IN/lengths */
  snprintf(path, sizeof path, "%s/lengths", in);
  FILE *lf = fopen(path, "r");
  if (lf) {
    int *len = calloc((size_t)B + 1, sizeof(int));
    for (int b = 0; b < B; b++)
      if (fscanf(lf, "%d", &len[b]) != 1) return fprintf(stderr, "cannot read %s\n", path), 2;
    fclose(lf);
    float *yl[2], *dxl[2], *fl[2][MAXN], *gl[2][MAXN], *dhl[2][MAXN];
    int ok = 1;
    for (int k = 0; k < 2; k++) {
      Options o = {len, k + 1};
      yl[k] = fresh(ny), dxl[k] = fresh(nx);
      for (int i = 0; i < ns; i++) fl[k][i] = fresh(sn[i]), dhl[k][i] = fresh(sn[i]);
      for (int i = 0; i < np; i++) gl[k][i] = fresh(pn[i]);
      int r1 = FWD_EX(W, T, B, x, (const States *)(void *)h0, yl[k], (States *)(void *)fl[k], work, &o);
      int r2 = FN(_backward_ex)(W, T, B, x, (const States *)(void *)h0, dy, (const States *)(void *)df, work, &o,
                                (Params *)(void *)gl[k], dxl[k], (States *)(void *)dhl[k]);
      snprintf(name, sizeof name, "lengths, threads %d: status 0 (%d, %d)", k + 1, r1, r2);
      check(name, r1 == 0 && r2 == 0);
      if (k) {
        ok = same(yl[0], yl[1], ny) && same(dxl[0], dxl[1], nx);
        for (int i = 0; i < ns; i++) ok = ok && same(fl[0][i], fl[1][i], sn[i]) && same(dhl[0][i], dhl[1][i], sn[i]);
        for (int i = 0; i < np; i++) ok = ok && same(gl[0][i], gl[1][i], pn[i]);
      }
    }
    check("lengths: 1 and 2 threads give the same bits", ok);
    save(out, "len.y", yl[0], ny), save(out, "len.dx", dxl[0], nx);
    for (int i = 0; i < ns; i++) {
      snprintf(name, sizeof name, "len.final.%d", i), save(out, name, fl[0][i], sn[i]);
      snprintf(name, sizeof name, "len.dh0.%d", i), save(out, name, dhl[0][i], sn[i]);
    }
    for (int i = 0; i < np; i++) snprintf(name, sizeof name, "len.grad.%d", i), save(out, name, gl[0][i], pn[i]);
    free(len);
  }

  /* NULL h0 is zeros; NULL final is not written */
  float *y2 = fresh(ny), *y3 = fresh(ny), *fz[MAXN];
  for (int i = 0; i < ns; i++) fz[i] = fresh(sn[i]);
  FWD(W, T, B, x, (const States *)(void *)zeros, y2, (States *)(void *)fz, work);
  rc = FWD(W, T, B, x, NULL, y3, NULL, work);
  check("h0 NULL is zeros, final NULL", rc == 0 && same(y2, y3, ny));
  if (ns) {
    fin[0] = fresh(sn[0]);
    float *keep = fin[0];
    States *fs = (States *)(void *)fin;
    fin[0] = NULL; /* a NULL member: not written */
    rc = FWD(W, T, B, x, (const States *)(void *)zeros, y3, fs, work);
    fin[0] = keep;
    check("a NULL member of final", rc == 0 && untouched(keep, sn[0]) && same(y2, y3, ny));
  }
  /* dx and dh0 NULL: not computed, the param gradients unchanged; dfinal NULL is zeros */
  float *gz[MAXN], *gn[MAXN], *dxz = fresh(nx), *dhz[MAXN];
  for (int i = 0; i < np; i++) gz[i] = fresh(pn[i]), gn[i] = fresh(pn[i]);
  for (int i = 0; i < ns; i++) dhz[i] = fresh(sn[i]);
  FWD(W, T, B, x, (const States *)(void *)h0, y3, NULL, work);
  FN(_backward)(W, T, B, x, (const States *)(void *)h0, dy, (const States *)(void *)zeros, work, (Params *)(void *)gz, dxz,
                (States *)(void *)dhz);
  rc = FN(_backward)(W, T, B, x, (const States *)(void *)h0, dy, NULL, work, (Params *)(void *)gn, NULL, NULL);
  int ok = rc == 0;
  for (int i = 0; i < np; i++) ok = ok && same(gz[i], gn[i], pn[i]);
  check("dfinal NULL is zeros, dx and dh0 NULL", ok);
  if (ns) {
    float *keep = dhz[0];
    dhz[0] = NULL;
    float *dxa = fresh(nx);
    rc = FN(_backward)(W, T, B, x, (const States *)(void *)h0, dy, (const States *)(void *)zeros, work, (Params *)(void *)gn, dxa,
                       (States *)(void *)dhz);
    dhz[0] = keep;
    check("a NULL member of dh0", rc == 0 && same(dxa, dxz, nx));
    free(dxa);
  }
  /* bad calls: nonzero status, a message, nothing else */
  int bad[5] = {FWD(W, 0, B, x, NULL, y3, NULL, work), FWD(W, T, 0, x, NULL, y3, NULL, work),
                FWD(W, T, B, NULL, NULL, y3, NULL, work), FWD(W, T, B, x, NULL, y3, NULL, NULL),
                FN(_backward)(W, T, B, x, NULL, NULL, NULL, work, (Params *)(void *)gn, NULL, NULL)};
  const char *what[5] = {"T = 0", "B = 0", "x NULL", "work NULL", "dy NULL"};
  for (int i = 0; i < 5; i++) {
    const char *msg = FN(_strerror)(bad[i]);
    snprintf(name, sizeof name, "bad call %s: status %d (%s)", what[i], bad[i], msg ? msg : "NULL");
    check(name, bad[i] != 0 && msg && strlen(msg) > 3);
  }
  check("workspace of T = 0 is 0", FN(_workspace_bytes)(0, B) == 0);

  /* ABI 2: opt NULL; lengths all T as none; a length outside 1..T and negative threads refused */
  {
    float *yt = fresh(ny);
    rc = FWD_EX(W, T, B, x, (const States *)(void *)h0, yt, NULL, work, NULL);
    check("opt NULL: the forward of ABI 1", rc == 0 && same(yt, y, ny));
    int *lengths = calloc((size_t)B + 1, sizeof(int));
    for (int b = 0; b < B; b++) lengths[b] = T;
    Options lo = {lengths, 0}, neg = {NULL, -1};
    float *yl = fresh(ny);
    rc = FWD_EX(W, T, B, x, (const States *)(void *)h0, yl, NULL, work, &lo);
    check("lengths all T: the forward of ABI 1, bit for bit", rc == 0 && same(yl, y, ny));
    lengths[B - 1] = T + 1;
    int bad2[4] = {FWD_EX(W, T, B, x, NULL, yt, NULL, work, &lo),
                   FN(_backward_ex)(W, T, B, x, NULL, dy, NULL, work, &lo, (Params *)(void *)gn, NULL, NULL), 0,
                   FWD_EX(W, T, B, x, NULL, yt, NULL, work, &neg)};
    lengths[B - 1] = 0;
    bad2[2] = FWD_EX(W, T, B, x, NULL, yt, NULL, work, &lo);
    const char *msg = FN(_strerror)(bad2[0]);
    check("a length T + 1 or 0: a nonzero status, \"a length is outside 1..T\"",
          bad2[0] != 0 && bad2[1] == bad2[0] && bad2[2] == bad2[0] && msg && strstr(msg, "outside 1..T"));
    check("threads -1: a nonzero status with a message", bad2[3] != 0 && strlen(FN(_strerror)(bad2[3])) > 3);
    free(yt), free(yl), free(lengths);
  }
  printf("%s\n", failures ? "harness: FAILED" : "harness: all ok");
  return failures ? 1 : 0;
}
