/* train_sweep.c: `cellc train ... --seeds 1..5` and `--set KEY=V1,V2` (docs/cli.md, "Seeds and
 * sweeps"): the configurations of the product of the lists, each trained by a `cellc train` of
 * its own (this executable, one after another) in DIR/<name>/, then DIR/summary.json and a table
 * of the median and interquartile range of each final metric, per configuration over its seeds.
 * A process per run: each starts from a clean process (its memory, its compiled programs, its
 * signal handling) exactly as the same run started alone would. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cfg.h"
#include "cli.h"
#include "support.h"
#include "train.h"

extern char **environ;

#define MAX_VALUES 1000 /* values of one axis */
#define MAX_RUNS 10000  /* configurations of one sweep */

/* One axis of the sweep: a key and its values. */
typedef struct Axis {
  char *key;   /* "train.lr" */
  char *name;  /* its part of a run's directory name: "lr", or the key where two axes share one */
  char **vals;
  int n;
  bool seed;   /* a seed (its last component names a seed): runs that differ in seeds alone form one group */
} Axis;

static const char *const synopses[] = {"train", NULL};

static int usage(const char *msg) { return cli_command_usage("train", synopses, "%s", msg); }

/* Whether the key's own value is a list (so that a comma belongs to it): train.betas, a path, a
 * task key that is a path or a string. Unknown keys take commas as a sweep; cfg refuses them later. */
static bool list_valued(const char *key) {
  const char *dot = strchr(key, '.');
  if (!dot) return false;
  char sec[64];
  size_t len = (size_t)(dot - key);
  if (len >= sizeof sec) return false;
  memcpy(sec, key, len), sec[len] = 0;
  const char *name = dot + 1;
  if (!strcmp(sec, "optim")) { /* optim.TAG.KEY */
    const char *d2 = strchr(name, '.');
    if (!d2) return false;
    name = d2 + 1;
  }
  if (!strcmp(sec, "task")) {
    const char *const *names;
    int n = task_names(&names);
    for (int t = 0; t < n; t++) {
      const TaskDef *def = task_find(names[t]);
      int k = task_key_index(def, name);
      if (k >= 0 && (def->keys[k].type == TKEY_PATH || def->keys[k].type == TKEY_STRING)) return true;
    }
    return false;
  }
  const CfgKey *keys;
  int n = cfg_schema(sec, &keys);
  for (int k = 0; k < n; k++)
    if (!strcmp(keys[k].name, name)) return keys[k].type == CFG_REALS || keys[k].type == CFG_PATH;
  return false;
}

/* A whole number, all of s. */
static bool whole(const char *s, long long *v) {
  char *end;
  errno = 0;
  *v = strtoll(s, &end, 10);
  return *s && !*end && !errno && (isdigit((unsigned char)*s) || *s == '-');
}

/* Splits `text` at the separator outside parentheses, expanding A..B ranges, into ax; 0, or a
 * usage message in err. */
static int split_values(const char *what, const char *text, char sep, Axis *ax, char *err, size_t errlen) {
  size_t len = strlen(text);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    char c = text[i];
    if (c == '(') depth++;
    if (c == ')') depth--;
    if (c && !(c == sep && depth == 0)) continue;
    char *piece = xmalloc(i - start + 1);
    memcpy(piece, text + start, i - start), piece[i - start] = 0;
    start = i + 1;
    char *dots = strstr(piece, "..");
    long long a, b;
    if (!*piece) {
      snprintf(err, errlen, "%s: an empty value in '%s'", what, text);
      free(piece);
      return -1;
    }
    if (dots && dots != piece) {
      *dots = 0;
      bool ok = whole(piece, &a) && whole(dots + 2, &b);
      *dots = '.';
      if (ok && (b < a || b - a >= MAX_VALUES)) {
        snprintf(err, errlen, "%s: the range '%s' must go up (A..B with A <= B), at most %d values", what, piece, MAX_VALUES);
        free(piece);
        return -1;
      }
      if (ok) {
        for (long long v = a; v <= b; v++) {
          ax->vals = xrealloc(ax->vals, sizeof(char *) * (size_t)(ax->n + 1));
          ax->vals[ax->n++] = xasprintf("%lld", v);
        }
        free(piece);
        continue;
      }
    }
    ax->vals = xrealloc(ax->vals, sizeof(char *) * (size_t)(ax->n + 1));
    ax->vals[ax->n++] = piece;
    if (ax->n > MAX_VALUES) {
      snprintf(err, errlen, "%s: more than %d values", what, MAX_VALUES);
      return -1;
    }
  }
  return 0;
}

/* The values of a --set KEY=VALUE as an axis: `;` always separates values, `,` too unless the
 * key's value is itself a list, and A..B (whole numbers) is every number from A to B. */
static int set_axis(const char *set, Axis *ax, char *err, size_t errlen) {
  const char *eq = strchr(set, '=');
  if (!eq || eq == set) {
    snprintf(err, errlen, "--set needs KEY=VALUE, got '%s'", set);
    return -1;
  }
  ax->key = xasprintf("%.*s", (int)(eq - set), set);
  const char *val = eq + 1;
  char what[300];
  snprintf(what, sizeof what, "--set %s", ax->key);
  bool semi = strchr(val, ';') != NULL;
  return split_values(what, val, semi || list_valued(ax->key) ? ';' : ',', ax, err, errlen);
}

bool sweep_wanted(const RunOptions *a, const char *seeds) {
  if (seeds) return true;
  for (int i = 0; i < a->nsets; i++) {
    Axis ax = {0};
    char err[512];
    const char *eq = strchr(a->sets[i], '=');
    /* a list that fails to split (an empty value, a range going down) is the sweep's to report;
     * anything else without a list, such as a --set without '=', is the configuration's */
    char *key = eq ? xasprintf("%.*s", (int)(eq - a->sets[i]), a->sets[i]) : NULL;
    bool listed = eq && (strchr(eq, ';') || strstr(eq, "..") || (strchr(eq, ',') && !list_valued(key)));
    free(key);
    bool many = set_axis(a->sets[i], &ax, err, sizeof err) < 0 ? listed : ax.n > 1;
    for (int k = 0; k < ax.n; k++) free(ax.vals[k]);
    free(ax.vals), free(ax.key);
    if (many) return true; /* a bad list is the sweep's to report */
  }
  return false;
}

/* A directory name's part from a value: letters, digits and . + - kept, anything else _. */
static char *name_part(const char *name, const char *val) {
  char *s = xasprintf("%s-%s", name, val);
  for (char *p = s + strlen(name) + 1; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '+' && *p != '-') *p = '_';
  return s;
}

/* ---- the summary ---- */

/* The final metrics of a run's metrics.jsonl into obj: for each split its last row's loss and
 * accuracy ("test.accuracy", "test_best.loss", ...) and the best validation row by train.keep's rule
 * ("best_valid.accuracy", "best_valid.step"). false when the file cannot be read. */
static bool final_metrics(const char *dir, cJSON *obj) {
  char *path = xasprintf("%s/metrics.jsonl", dir);
  size_t len;
  char *text = read_file(path, &len);
  free(path);
  if (!text) return false;
  cJSON *best = NULL;
  bool classify = false;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    cJSON *row = cJSON_Parse(line);
    if (!row) continue;
    const cJSON *split = cJSON_GetObjectItem(row, "split"), *loss = cJSON_GetObjectItem(row, "loss"),
                *acc = cJSON_GetObjectItem(row, "accuracy");
    if (!cJSON_IsString(split)) {
      cJSON_Delete(row);
      continue;
    }
    const char *fields[] = {"loss", "accuracy"};
    const cJSON *vals[] = {loss, acc};
    for (int f = 0; f < 2; f++) {
      char key[96];
      snprintf(key, sizeof key, "%s.%s", split->valuestring, fields[f]);
      cJSON_DeleteItemFromObject(obj, key);
      if (cJSON_IsNumber(vals[f])) cJSON_AddNumberToObject(obj, key, vals[f]->valuedouble);
    }
    if (!strcmp(split->valuestring, "valid") && cJSON_IsNumber(loss)) {
      classify = classify || cJSON_IsNumber(acc);
      bool better = !best;
      if (best) {
        double bl = cJSON_GetObjectItem(best, "loss")->valuedouble;
        const cJSON *ba = cJSON_GetObjectItem(best, "accuracy");
        if (classify && cJSON_IsNumber(acc) && cJSON_IsNumber(ba) && acc->valuedouble != ba->valuedouble)
          better = acc->valuedouble > ba->valuedouble;
        else better = loss->valuedouble < bl;
      }
      if (better) {
        cJSON_Delete(best);
        best = row;
        continue;
      }
    }
    cJSON_Delete(row);
  }
  if (best) {
    const char *fields[] = {"loss", "accuracy", "step"};
    for (int f = 0; f < 3; f++) {
      const cJSON *v = cJSON_GetObjectItem(best, fields[f]);
      char key[64];
      snprintf(key, sizeof key, "best_valid.%s", fields[f]);
      if (cJSON_IsNumber(v)) cJSON_AddNumberToObject(obj, key, v->valuedouble);
    }
    cJSON_Delete(best);
  }
  free(text);
  return true;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The q-quantile of sorted v[0..n), linear between order statistics (numpy's default). */
static double quantile(const double *v, int n, double q) {
  double pos = q * (n - 1);
  int lo = (int)floor(pos);
  if (lo >= n - 1) return v[n - 1];
  return v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}

/* The statistics of each metric over the runs of one group: {"n", "median", "q1", "q3", "iqr",
 * "min", "max"}, the metrics in the order the first run has them. */
static cJSON *group_stats(cJSON **finals, int n) {
  cJSON *out = cJSON_CreateObject();
  for (int r = 0; r < n; r++) {
    const cJSON *m;
    cJSON_ArrayForEach(m, finals[r]) {
      if (cJSON_GetObjectItem(out, m->string)) continue;
      double *v = xmalloc(sizeof(double) * (size_t)n);
      int k = 0;
      for (int j = 0; j < n; j++) {
        const cJSON *x = cJSON_GetObjectItem(finals[j], m->string);
        if (cJSON_IsNumber(x)) v[k++] = x->valuedouble;
      }
      qsort(v, (size_t)k, sizeof(double), cmp_double);
      cJSON *s = cJSON_AddObjectToObject(out, m->string);
      double q1 = quantile(v, k, 0.25), q3 = quantile(v, k, 0.75);
      cJSON_AddNumberToObject(s, "n", k);
      cJSON_AddNumberToObject(s, "median", quantile(v, k, 0.5));
      cJSON_AddNumberToObject(s, "q1", q1);
      cJSON_AddNumberToObject(s, "q3", q3);
      cJSON_AddNumberToObject(s, "iqr", q3 - q1);
      cJSON_AddNumberToObject(s, "min", v[0]);
      cJSON_AddNumberToObject(s, "max", v[k - 1]);
      free(v);
    }
  }
  return out;
}

/* ---- the sweep ---- */

typedef struct Sweep {
  Axis *axes;
  int naxes;
  int nruns;
  char **names;  /* per run: its directory under DIR */
  char ***sets;  /* per run: the --set arguments of its child (fixed ones and its axis values) */
  int *nsets;
  int *group;    /* per run: the index of its configuration without the seed axes */
} Sweep;

/* The value index of axis k for run r (the first axis varies slowest). */
static int value_of(const Sweep *s, int r, int k) {
  int div = 1;
  for (int j = s->naxes - 1; j > k; j--) div *= s->axes[j].n;
  return r / div % s->axes[k].n;
}

static void axis_free(Axis *ax) {
  for (int v = 0; v < ax->n; v++) free(ax->vals[v]);
  free(ax->vals), free(ax->key), free(ax->name);
}

static void sweep_free(Sweep *s) {
  for (int r = 0; s->names && r < s->nruns; r++) {
    for (int i = 0; i < s->nsets[r]; i++) free(s->sets[r][i]);
    free(s->sets[r]), free(s->names[r]);
  }
  for (int k = 0; k < s->naxes; k++) axis_free(&s->axes[k]);
  free(s->axes), free(s->names), free(s->sets), free(s->nsets), free(s->group);
}

/* The axes and the runs of the command line into s (sweep_free after, either way); 0, or -1 with
 * a usage message in err. */
static int build(Sweep *s, const RunOptions *a, const char *seeds, char *err, size_t errlen) {
  bool *fixed = xcalloc((size_t)a->nsets + 1, 1);
  for (int i = 0; i < a->nsets; i++) {
    Axis ax = {0};
    if (set_axis(a->sets[i], &ax, err, errlen) < 0) {
      axis_free(&ax);
      goto fail;
    }
    if (ax.n == 1) {
      fixed[i] = true;
      axis_free(&ax);
      continue;
    }
    for (int k = 0; k < s->naxes; k++)
      if (!strcmp(s->axes[k].key, ax.key)) {
        snprintf(err, errlen, "--set %s: two lists for one key", ax.key);
        axis_free(&ax);
        goto fail;
      }
    s->axes = xrealloc(s->axes, sizeof(Axis) * (size_t)(s->naxes + 1));
    s->axes[s->naxes++] = ax;
  }
  if (seeds) {
    s->axes = xrealloc(s->axes, sizeof(Axis) * (size_t)(s->naxes + 1));
    Axis *ax = &s->axes[s->naxes++];
    *ax = (Axis){.key = xstrdup("train.seed")};
    if (split_values("--seeds", seeds, ',', ax, err, errlen) < 0) goto fail;
    for (int k = 0; k < ax->n; k++) {
      long long v;
      if (!whole(ax->vals[k], &v) || v < 0) {
        snprintf(err, errlen, "--seeds takes whole numbers 0 or more: 1..5 or 1,3,7; got '%s'", ax->vals[k]);
        goto fail;
      }
    }
    for (int i = 0; i < a->nsets; i++)
      if (!strncmp(a->sets[i], "train.seed=", 11)) {
        snprintf(err, errlen, "--seeds sets train.seed: give it or --set train.seed, not both");
        goto fail;
      }
  }
  s->nruns = 1;
  for (int k = 0; k < s->naxes; k++) {
    Axis *ax = &s->axes[k];
    const char *dot = strrchr(ax->key, '.');
    ax->name = xstrdup(dot ? dot + 1 : ax->key);
    ax->seed = strstr(ax->name, "seed") != NULL;
    if (s->nruns > MAX_RUNS / ax->n) {
      snprintf(err, errlen, "the sweep has more than %d runs", MAX_RUNS);
      goto fail;
    }
    s->nruns *= ax->n;
  }
  for (int k = 0; k < s->naxes; k++)
    for (int j = 0; j < s->naxes; j++)
      if (j != k && !strcmp(s->axes[k].name, strrchr(s->axes[j].key, '.') ? strrchr(s->axes[j].key, '.') + 1 : s->axes[j].key))
        free(s->axes[k].name), s->axes[k].name = xstrdup(s->axes[k].key);
  s->names = xcalloc((size_t)s->nruns, sizeof(char *));
  s->sets = xcalloc((size_t)s->nruns, sizeof(char **));
  s->nsets = xcalloc((size_t)s->nruns, sizeof(int));
  s->group = xcalloc((size_t)s->nruns, sizeof(int));
  for (int r = 0; r < s->nruns; r++) {
    s->sets[r] = xcalloc((size_t)(a->nsets + s->naxes + 1), sizeof(char *));
    for (int i = 0; i < a->nsets; i++)
      if (fixed[i]) s->sets[r][s->nsets[r]++] = xstrdup(a->sets[i]);
    char *name = xstrdup("");
    int g = 0;
    for (int k = 0; k < s->naxes; k++) {
      int v = value_of(s, r, k);
      s->sets[r][s->nsets[r]++] = xasprintf("%s=%s", s->axes[k].key, s->axes[k].vals[v]);
      char *part = name_part(s->axes[k].name, s->axes[k].vals[v]), *joined = xasprintf("%s%s%s", name, *name ? "_" : "", part);
      free(name), free(part);
      name = joined;
      if (!s->axes[k].seed) g = g * s->axes[k].n + v;
    }
    /* names that sanitizing made equal get the run's number */
    for (int j = 0; j < r; j++)
      if (!strcmp(s->names[j], name)) {
        char *n2 = xasprintf("%s-%d", name, r);
        free(name);
        name = n2;
        break;
      }
    s->names[r] = name;
    s->group[r] = g;
  }
  free(fixed);
  return 0;
fail:
  free(fixed);
  return -1;
}

/* Runs `cellc train` for run r into DIR/<name>; its exit status (128 + the signal if one ended it). */
static int run_child(const char *self, const RunOptions *a, const Sweep *s, int r, const char *dir, const char *progress) {
  char *out = xasprintf("%s/%s", dir, s->names[r]), *ckpt = xasprintf("%s/checkpoint.safetensors", out);
  struct stat st;
  bool resume = a->resume && stat(ckpt, &st) == 0; /* --resume: a run not begun yet begins */
  char **argv = xcalloc((size_t)(2 * s->nsets[r] + 16), sizeof(char *));
  int k = 0;
  argv[k++] = (char *)self, argv[k++] = "train", argv[k++] = (char *)a->cell, argv[k++] = (char *)a->cfg;
  for (int i = 0; i < s->nsets[r]; i++) argv[k++] = "--set", argv[k++] = s->sets[r][i];
  argv[k++] = "--out", argv[k++] = out;
  if (resume) argv[k++] = "--resume";
  if (resume && a->allow_changed_cell) argv[k++] = "--allow-changed-cell";
  if (a->force) argv[k++] = "--force";
  if (progress) argv[k++] = "--progress", argv[k++] = (char *)progress;
  argv[k] = NULL;
  pid_t pid;
  int status = 3;
  if (posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0) {
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  } else diag_plain("cannot start %s: %s", self, strerror(errno));
  free(argv), free(out), free(ckpt);
  return status;
}

static char *default_sweep_dir(void) {
  char stamp[32];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return xasprintf("runs/sweep-%s", stamp);
}

static void print_table(cJSON *groups) {
  printf("%-28s %-22s %4s %12s %12s %12s %12s\n", "configuration", "metric", "n", "median", "q1", "q3", "iqr");
  const cJSON *g;
  cJSON_ArrayForEach(g, groups) {
    char label[256] = "";
    const cJSON *kv;
    cJSON_ArrayForEach(kv, cJSON_GetObjectItem(g, "sets")) {
      size_t l = strlen(label);
      snprintf(label + l, sizeof label - l, "%s%s=%s", l ? " " : "", kv->string, kv->valuestring);
    }
    if (!*label) snprintf(label, sizeof label, "(all runs)");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(g, "metrics")) {
      const char *f[] = {"median", "q1", "q3", "iqr"};
      printf("%-28s %-22s %4d", label, m->string, cJSON_GetObjectItem(m, "n")->valueint);
      for (int i = 0; i < 4; i++) printf(" %12.6g", cJSON_GetObjectItem(m, f[i])->valuedouble);
      printf("\n");
      label[0] = 0;
    }
  }
}

int sweep_train(const RunOptions *a, const char *seeds, const char *progress) {
  Sweep s = {0};
  char err[1024];
  /* each rank would start every run: the runs of a sweep are one-process runs */
  if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) return usage("a sweep (--seeds, a --set list) runs as one process, not under mpirun");
  if (build(&s, a, seeds, err, sizeof err) < 0) {
    sweep_free(&s);
    return usage(err);
  }
  /* every configuration checked before the first run: a typo in the last value fails now */
  for (int r = 0; r < s.nruns; r++) {
    Cfg *c = cfg_load(a->cfg, (const char *const *)s.sets[r], s.nsets[r]);
    if (!c) {
      fprintf(stderr, "cellc train: in the configuration of %s\n", s.names[r]);
      sweep_free(&s);
      return 1;
    }
    cfg_free(c);
  }
  /* this executable, named once: a rebuild replacing the file during the sweep leaves the path
   * naming the new one, where /proc/self/exe would name the deleted one */
  char self[PATH_MAX];
  ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sn <= 0) {
    diag_plain("cannot find this executable (/proc/self/exe): %s", strerror(errno));
    sweep_free(&s);
    return 3;
  }
  self[sn] = 0;
  char *dir = a->out ? xstrdup(a->out) : default_sweep_dir();
  printf("cellc train: a sweep of %d runs into %s\n", s.nruns, dir);
  if (a->dry_run) {
    for (int r = 0; r < s.nruns; r++) {
      printf("%s/%s:", dir, s.names[r]);
      for (int i = 0; i < s.nsets[r]; i++) printf(" --set %s", s.sets[r][i]);
      printf("\n");
    }
    printf("dry run: nothing trained, nothing written\n");
    free(dir);
    sweep_free(&s);
    return 0;
  }
  if (fsout_make_dirs(dir, err, sizeof err) < 0) {
    diag_plain("%s", err);
    free(dir);
    sweep_free(&s);
    return 3;
  }
  fflush(stdout);
  /* Ctrl-C reaches the run in progress (the same process group): it writes its checkpoint and
   * exits 130, and the sweep stops after it, writing the summary of the runs that finished */
  struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_term;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGTERM, &ign, &old_term);
  int *status = xcalloc((size_t)s.nruns, sizeof(int)), rc = 0, done = 0;
  for (int r = 0; r < s.nruns; r++) {
    printf("== run %d/%d: %s/%s\n", r + 1, s.nruns, dir, s.names[r]);
    fflush(stdout);
    status[r] = run_child(self, a, &s, r, dir, progress);
    done = r + 1;
    if (status[r] && !rc) rc = status[r];
    if (status[r] == 130 || status[r] == 128 + SIGINT || status[r] == 128 + SIGTERM) {
      rc = 130;
      break;
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  /* the summary: per configuration without its seeds, the runs that finished (status 0) */
  cJSON *root = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(root, "runs");
  cJSON *groups = cJSON_AddArrayToObject(root, "groups");
  cJSON_AddStringToObject(root, "quantiles", "linear between order statistics (numpy's default); iqr = q3 - q1");
  cJSON **finals = xcalloc((size_t)s.nruns, sizeof(cJSON *));
  int ngroups = 0;
  for (int r = 0; r < s.nruns; r++) ngroups = s.group[r] + 1 > ngroups ? s.group[r] + 1 : ngroups;
  for (int r = 0; r < done; r++) {
    cJSON *run = cJSON_CreateObject();
    cJSON_AddStringToObject(run, "dir", s.names[r]);
    cJSON_AddNumberToObject(run, "status", status[r]);
    cJSON *sets = cJSON_AddObjectToObject(run, "sets");
    for (int k = 0; k < s.naxes; k++) cJSON_AddStringToObject(sets, s.axes[k].key, s.axes[k].vals[value_of(&s, r, k)]);
    finals[r] = cJSON_CreateObject();
    char *rdir = xasprintf("%s/%s", dir, s.names[r]);
    if (status[r] == 0) final_metrics(rdir, finals[r]);
    free(rdir);
    cJSON_AddItemToObject(run, "final", cJSON_Duplicate(finals[r], true));
    cJSON_AddItemToArray(runs, run);
  }
  for (int g = 0; g < ngroups; g++) {
    cJSON **mine = xcalloc((size_t)s.nruns, sizeof(cJSON *));
    int n = 0, first = -1;
    for (int r = 0; r < s.nruns; r++)
      if (s.group[r] == g) {
        if (first < 0) first = r;
        if (r < done && status[r] == 0) mine[n++] = finals[r];
      }
    if (first < 0) {
      free(mine);
      continue;
    }
    cJSON *grp = cJSON_CreateObject(), *sets = cJSON_AddObjectToObject(grp, "sets"), *dirs = cJSON_AddArrayToObject(grp, "runs");
    for (int k = 0; k < s.naxes; k++)
      if (!s.axes[k].seed) cJSON_AddStringToObject(sets, s.axes[k].key, s.axes[k].vals[value_of(&s, first, k)]);
    for (int r = 0; r < done; r++)
      if (s.group[r] == g && status[r] == 0) cJSON_AddItemToArray(dirs, cJSON_CreateString(s.names[r]));
    cJSON_AddItemToObject(grp, "metrics", group_stats(mine, n));
    cJSON_AddItemToArray(groups, grp);
    free(mine);
  }
  char *text = cJSON_Print(root), *path = xasprintf("%s/summary.json", dir);
  size_t tl = strlen(text);
  text = xrealloc(text, tl + 2);
  text[tl] = '\n', text[tl + 1] = 0;
  if (fsout_write_file(path, text, tl + 1, err, sizeof err) < 0) {
    diag_plain("%s", err);
    if (!rc) rc = 3;
  }
  int failed = 0;
  for (int r = 0; r < done; r++) failed += status[r] != 0;
  printf("\nsummary of %d run%s in %s (%s)%s\n", done - failed, done - failed == 1 ? "" : "s", dir, path,
         failed ? "; failed runs are left out" : "");
  print_table(groups);
  fflush(stdout);
  if (failed && rc != 130) diag_plain("%d of the %d runs failed (status in %s)", failed, done, path);
  for (int r = 0; r < s.nruns; r++) cJSON_Delete(finals[r]);
  sweep_free(&s);
  free(finals), free(status), free(text), free(path), free(dir);
  cJSON_Delete(root);
  return rc;
}
