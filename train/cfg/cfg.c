/* cfg.c: the TASK.cfg reader: a line lexer for the INI form, the schema, --set overrides, checking
 * against the schema with located errors (the first one stops), getters and the writer. */
#include "cfg.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "support.h"
#include "init.h"
#include "pipeline.h" /* the back ends that train: train.device */

/* ---- The schema ---- */

#define INF INFINITY
#define MAX_SIZE 16777216.0          /* widths, hidden sizes, dims */
#define MAX_COUNT 1e12               /* steps and intervals */
#define MAX_EXACT 9007199254740991.0 /* 2^53 - 1: every whole number a double holds */

static const char *const optimizers[] = {"sgd", "adam", "adamw", NULL};
static const char *const schedules[] = {"constant", "cosine", "inverse_sqrt", "linear", NULL};
static const char *const modes[] = {"auto", "scan", "sequential", "chunked", NULL};
static const char *const encoders[] = {"auto", "embed", "linear", "none", NULL};
static const char *const blocks[] = {"stack", "residual", NULL};
static const char *const norms[] = {"none", "layer", "rms", "batch", NULL};
static const char *const mixers[] = {"none", "glu", "mlp", NULL};
static const char *const readouts[] = {"auto", "all", "last", "mean", NULL};
static const char *const joins[] = {"concat", "sum", NULL};
static const char *const keeps[] = {"last", "best", NULL};

/* The defaults are the values of the spec's example, except where it says "default by task"
 * (encoder, readout: `auto`, resolved by the trainer) and the cell (unset: the file's last). */
static const CfgKey model_keys[] = {
    {"cell", CFG_WORD, "", 0, 0, false, false, 0, NULL, NULL, "a cell of MODEL.cell (unset: the last one)"},
    {"layers", CFG_INT, "3", 1, 1024, false, false, 0, NULL, NULL, "recurrent layers"},
    {"width", CFG_INT, "128", 1, MAX_SIZE, false, false, 0, NULL, NULL,
     "size of each layer's input x (the embedding size for layer 0)"},
    {"hidden", CFG_INT, "128", 1, MAX_SIZE, false, false, 0, NULL, NULL, "binds dim H"},
    {"encoder", CFG_CHOICE, "auto", 0, 0, false, false, 0, encoders, NULL,
     "embed (token inputs) | linear (real-valued inputs) | none (the inputs themselves) | auto (by task)"},
    {"block", CFG_CHOICE, "stack", 0, 0, false, false, 0, blocks, NULL,
     "stack: output feeds the next layer | residual: x + mixer(cell(norm(x)))"},
    {"norm", CFG_CHOICE, "none", 0, 0, false, false, 0, norms, NULL, "none | layer | rms | batch (residual blocks)"},
    {"mixer", CFG_CHOICE, "none", 0, 0, false, false, 0, mixers, NULL, "none | glu | mlp (residual blocks)"},
    {"dropout", CFG_REAL, "0.0", 0, 1, false, true, 0, NULL, NULL, "dropout probability"},
    {"readout", CFG_CHOICE, "auto", 0, 0, false, false, 0, readouts, NULL,
     "all (per-step outputs) | last | mean | auto (by task)"},
    {"head_bias", CFG_BOOL, "true", 0, 1, false, false, 0, NULL, NULL, "false: the head is z = W x, its bias kept at 0"},
    {"chunk", CFG_INT, "-1", -1, MAX_COUNT, false, false, 0, NULL, NULL,
     "steps per chunk with states kept at chunk boundaries only: -1 the compiler's choice, 0 none"},
    /* a list of the cell's names, checked against the cell by the model (as init.PARAM is) */
    {"unfreeze", CFG_PATH, "", 0, 0, false, false, 0, NULL, NULL,
     "frozen params of the cell to train after all: a comma list (unset: none)"},
    {"bidirectional", CFG_BOOL, "false", 0, 1, false, false, 0, NULL, NULL,
     "a second cell per layer over each sequence reversed within its length (stacked layers)"},
    {"join", CFG_CHOICE, "concat", 0, 0, false, false, 0, joins, NULL, "concat | sum of the two directions' outputs"},
};

static const CfgKey train_keys[] = {
    {"steps", CFG_INT, "50000", 1, MAX_COUNT, false, false, 0, NULL, NULL, "optimizer steps"},
    {"batch", CFG_INT, "64", 1, MAX_SIZE, false, false, 0, NULL, NULL, "sequences per step"},
    {"optimizer", CFG_CHOICE, "adamw", 0, 0, false, false, 0, optimizers, NULL, "sgd | adam | adamw"},
    {"lr", CFG_REAL, "1e-4", 0, INF, true, true, 0, NULL, NULL, "peak learning rate"},
    {"momentum", CFG_REAL, "0.0", 0, 1, false, true, 0, NULL, NULL, "sgd momentum"},
    {"betas", CFG_REALS, "0.9, 0.999", 0, 1, false, true, 2, NULL, NULL, "adam(w) beta1, beta2"},
    {"eps", CFG_REAL, "1e-8", 0, INF, true, true, 0, NULL, NULL, "adam(w) epsilon"},
    {"weight_decay", CFG_REAL, "0.0", 0, INF, false, true, 0, NULL, NULL,
     "adamw: decoupled; sgd, adam: L2 added to the gradient"},
    {"schedule", CFG_CHOICE, "constant", 0, 0, false, false, 0, schedules, NULL,
     "constant | cosine | inverse_sqrt | linear"},
    {"warmup", CFG_STEPS, "0", 0, INF, false, true, 0, NULL, NULL,
     "linear warmup from min_lr: steps, or a fraction < 1 of steps"},
    {"min_lr", CFG_REAL, "0.0", 0, INF, false, true, 0, NULL, NULL, "cosine and linear end here; warmup starts here"},
    {"clip", CFG_REAL, "0.0", 0, INF, false, true, 0, NULL, NULL, "global gradient-norm clip; 0 = off"},
    {"seed", CFG_INT, "1", 0, MAX_EXACT, false, false, 0, NULL, NULL, "seed of the params and the data"},
    {"data_seed", CFG_INT, "", 0, MAX_EXACT, false, false, 0, NULL, NULL,
     "seed of the data alone (unset: train.seed)"},
    {"keep", CFG_CHOICE, "last", 0, 0, false, false, 0, keeps, NULL,
     "last | best: also keep the checkpoint of the best validation metric (best.safetensors)"},
    {"device", CFG_DEVICE, "cpu", 0, 0, false, false, 0, NULL, NULL, NULL},
    {"mode", CFG_CHOICE, "auto", 0, 0, false, false, 0, modes, NULL, "auto | scan | sequential | chunked"},
    {"bucket", CFG_BOOL, "false", 0, 1, false, false, 0, NULL, NULL,
     "batches of sequences of similar lengths (a task with lengths)"},
};

/* [optim.TAG]: the hyperparameters one group of params may set for itself. */
static const CfgKey optim_keys[] = {
    {"lr_scale", CFG_REAL, "1", 0, INF, false, true, 0, NULL, NULL, "the group's lr = train.lr * lr_scale"},
    {"weight_decay", CFG_REAL, NULL, 0, INF, false, true, 0, NULL, "weight_decay", "default: train.weight_decay"},
    {"momentum", CFG_REAL, NULL, 0, 1, false, true, 0, NULL, "momentum", "default: train.momentum"},
    {"betas", CFG_REALS, NULL, 0, 1, false, true, 2, NULL, "betas", "default: train.betas"},
    {"eps", CFG_REAL, NULL, 0, INF, true, true, 0, NULL, "eps", "default: train.eps"},
};

static const CfgKey eval_keys[] = {
    {"every", CFG_INT, "500", 1, MAX_COUNT, false, false, 0, NULL, NULL, "steps between evaluations"},
    {"batches", CFG_INT, "20", 1, MAX_COUNT, false, false, 0, NULL, NULL,
     "batches per evaluation (generated tasks; fixed splits are read whole)"},
};

static const CfgKey log_keys[] = {
    {"every", CFG_INT, "50", 1, MAX_COUNT, false, false, 0, NULL, NULL, "steps between log lines"},
    {"grad_per_step", CFG_BOOL, "false", 0, 1, false, false, 0, NULL, NULL,
     "keep the largest ||dL/dh_t|| per step t and layer, written to grad_per_step.json (docs/diagnostics.md)"},
    {"csv", CFG_BOOL, "false", 0, 1, false, false, 0, NULL, NULL, "metrics.csv beside metrics.jsonl, the same rows"},
};

static const CfgKey task_name_key = {"name", CFG_TASK, NULL, 0, 0, false, false, 0, NULL, NULL, "the task"};
/* Values of the dotted [model] entries. */
static const CfgKey dim_key = {"dims", CFG_INT, NULL, 1, MAX_SIZE, false, false, 0, NULL, NULL, "a dim's size"};
static const CfgKey init_key = {"init", CFG_INIT, NULL, 0, 0, false, false, 0, NULL, NULL, "an initializer"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The fixed sections, in the order they are written ("optim" stands for every [optim.TAG]). */
static const char *const section_names[] = {"task", "model", "train", "optim", "eval", "log"};

int cfg_schema(const char *section, const CfgKey **keys) {
  static const struct {
    const char *name;
    const CfgKey *keys;
    int n;
  } tab[] = {{"model", model_keys, COUNT(model_keys)},
             {"train", train_keys, COUNT(train_keys)},
             {"optim", optim_keys, COUNT(optim_keys)},
             {"eval", eval_keys, COUNT(eval_keys)},
             {"log", log_keys, COUNT(log_keys)}};
  for (int i = 0; i < COUNT(tab); i++)
    if (strcmp(tab[i].name, section) == 0) {
      *keys = tab[i].keys;
      return tab[i].n;
    }
  *keys = NULL;
  return 0;
}

/* ---- The parsed and resolved configuration ---- */

/* One `key = value` line of the file, or one --set. */
typedef struct Raw {
  const char *sec; /* "train", "optim.recurrent" */
  const char *key; /* "lr", "layer.0.option.lb" */
  const char *val; /* trimmed text */
  Loc kloc, vloc;  /* in the file; src NULL for a --set */
  const char *set; /* the --set argument as given; NULL for a line of the file */
} Raw;

/* A `[section]` header of the file. */
typedef struct Header {
  const char *name;
  Loc loc; /* of the name inside the brackets */
} Header;

/* The value of one key. */
typedef struct Val {
  const char *text; /* as written, or the default; NULL: unset */
  double num;       /* int, real, steps, bool (0/1) */
  double *list;     /* reals: (nlist) */
  int nlist;
  int raw; /* the Raw that gave it; -1: a default */
} Val;

/* A section with a value for each of its keys. */
typedef struct RSec {
  const char *name;
  const CfgKey *keys;
  int nkeys;
  Val *vals; /* (nkeys) */
} RSec;

typedef struct Resolved {
  const TaskDef *task;
  RSec *secs; /* task, model, train, optim.TAG..., eval, log */
  int nsecs;
  RSec optim_default; /* the values of a tag without a section */
  CfgEntry *entries;
  int *entry_raw; /* (nentries) */
  int nentries;
  const char **tags;
  int ntags;
} Resolved;

struct Cfg {
  Arena arena; /* every string, list and resolved table */
  Src src;     /* a copy of the file */
  Raw *raws;
  int nraws, capraws;
  Header *hdrs;
  int nhdrs, caphdrs;
  Resolved r;
  const char *unused[8], *unused_why[8]; /* cfg_mark_unused: full keys and why */
  int nunused;
};

/* ---- Small helpers ---- */

static bool is_ident(const char *s) {
  if (!(isalpha((unsigned char)*s) || *s == '_'))
    return false;
  for (s++; *s; s++)
    if (!(isalnum((unsigned char)*s) || *s == '_'))
      return false;
  return true;
}

static bool is_key_char(int ch) { return isalnum(ch) || ch == '_' || ch == '.'; }

/* A dotted name: components of [A-Za-z0-9_]+ joined by single dots. */
static bool is_dotted(const char *s) {
  if (!*s || *s == '.')
    return false;
  for (; *s; s++)
    if (*s == '.' ? (s[1] == '.' || s[1] == 0) : !is_key_char((unsigned char)*s))
      return false;
  return true;
}

static bool is_space(int ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

/* A number as "inf", a whole number without exponent, or %g. */
static const char *fmt_num(double v, char *buf, size_t n) {
  if (isinf(v))
    snprintf(buf, n, "%sinf", v < 0 ? "-" : "");
  else if (v == floor(v) && fabs(v) < 1e16)
    snprintf(buf, n, "%.0f", v);
  else
    snprintf(buf, n, "%g", v);
  return buf;
}

static void fmt_range(const CfgKey *k, char *buf, size_t n) {
  char lo[40], hi[40];
  snprintf(buf, n, "%c%s, %s%c", k->min_open ? '(' : '[', fmt_num(k->min, lo, sizeof lo),
           fmt_num(k->max, hi, sizeof hi), k->max_open ? ')' : ']');
}

static bool in_range(const CfgKey *k, double v) {
  if (k->min_open ? !(v > k->min) : !(v >= k->min))
    return false;
  if (k->max_open ? !(v < k->max) : !(v <= k->max))
    return false;
  return true;
}

/* Joins names with ", " into buf. */
static void join(const char *const *names, int n, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < n && names[i]; i++) {
    int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", names[i]);
    if (w < 0 || (size_t)w >= cap - used)
      break;
    used += (size_t)w;
  }
}

static int count_names(const char *const *names) {
  int n = 0;
  while (names[n])
    n++;
  return n;
}

/* A key's doc; a device's its choices, "cpu | cuda | cuda-emu" (static storage). */
static const char *key_doc(const CfgKey *k) {
  if (k->type != CFG_DEVICE)
    return k->doc;
  static char buf[256];
  const char *const *names = backend_device_names();
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; names[i] && used < sizeof buf; i++)
    used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? " | " : "", names[i]);
  return buf;
}

/* Parses s[0, n) as a decimal number: [+-] digits [. digits] [e [+-] digits], finite. */
static bool scan_number(const char *s, size_t n, double *out) {
  size_t i = 0, digits = 0;
  if (n == 0 || n >= 64)
    return false;
  if (s[i] == '+' || s[i] == '-')
    i++;
  while (i < n && isdigit((unsigned char)s[i]))
    i++, digits++;
  if (i < n && s[i] == '.') {
    i++;
    while (i < n && isdigit((unsigned char)s[i]))
      i++, digits++;
  }
  if (!digits)
    return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-'))
      i++;
    size_t e = 0;
    while (i < n && isdigit((unsigned char)s[i]))
      i++, e++;
    if (!e)
      return false;
  }
  if (i != n)
    return false;
  char buf[64];
  memcpy(buf, s, n);
  buf[n] = 0;
  double v = strtod(buf, NULL);
  if (!isfinite(v))
    return false;
  *out = v;
  return true;
}

/* ---- Errors ---- */

static Loc loc_shift(Loc l, int off, int len) {
  if (off >= 0) {
    l.off += off;
    l.col += off;
    l.len = len > 0 ? len : 1;
  }
  return l;
}

/* An error about a Raw: located at its key or value (off, len inside it; off -1 for all of it), or
 * naming the --set that gave it. */
static void raw_error(const Raw *r, bool at_value, int off, int len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void raw_error(const Raw *r, bool at_value, int off, int len, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (r->set)
    diag_plain("--set %s: %s", r->set, msg);
  else
    diag_error(loc_shift(at_value ? r->vloc : r->kloc, off, len), "%s", msg);
}

/* A bad value: "train.lr = -1: out of range (0, inf)" in the file, "--set train.lr=-1: ..." else. */
static void value_error(const Raw *r, int off, int len, const char *why) {
  if (r->set)
    raw_error(r, true, off, len, "%s", why);
  else
    raw_error(r, true, off, len, "%s.%s = %s: %s", r->sec, r->key, r->val, why);
}

/* ---- Values ---- */


/* Parses `s` as a value of key k. On failure returns -1 with the reason in why and the offending span
 * (off, len inside s; off -1: all of it). */
static int parse_value(Arena *a, const CfgKey *k, const char *s, Val *v, char *why, size_t n, int *off, int *len) {
  char range[96];
  size_t slen = strlen(s);
  *off = -1, *len = 0;
  v->text = s;
  v->num = 0;
  v->list = NULL;
  v->nlist = 0;
  switch (k->type) {
  case CFG_INT:
  case CFG_REAL:
  case CFG_STEPS: {
    double x;
    if (!scan_number(s, slen, &x)) {
      snprintf(why, n, "expected %s", k->type == CFG_INT ? "a whole number" : "a number");
      return -1;
    }
    if (k->type == CFG_INT && (x != floor(x) || fabs(x) > MAX_EXACT)) {
      snprintf(why, n, "expected a whole number");
      return -1;
    }
    if (!in_range(k, x)) {
      fmt_range(k, range, sizeof range);
      snprintf(why, n, "out of range %s", range);
      return -1;
    }
    if (k->type == CFG_STEPS && x >= 1 && x != floor(x)) {
      snprintf(why, n, "expected a number of steps (a whole number) or a fraction < 1 of the steps");
      return -1;
    }
    v->num = x;
    return 0;
  }
  case CFG_BOOL:
    if (strcmp(s, "true") && strcmp(s, "false")) {
      snprintf(why, n, "expected true or false");
      return -1;
    }
    v->num = strcmp(s, "true") == 0;
    return 0;
  case CFG_CHOICE:
  case CFG_DEVICE:
  case CFG_TASK: {
    const char *const *names = k->type == CFG_DEVICE ? backend_device_names() : k->choices;
    int nn = 0;
    if (k->type == CFG_TASK)
      nn = task_names(&names);
    else
      nn = count_names(names);
    for (int i = 0; i < nn; i++)
      if (strcmp(names[i], s) == 0)
        return 0;
    char list[512];
    join(names, nn, list, sizeof list);
    const char *near = edit_nearest(s, names, nn);
    const char *what = k->type == CFG_TASK ? "unknown task; the tasks are" : "expected one of";
    if (near)
      snprintf(why, n, "%s %s; did you mean %s?", what, list, near);
    else
      snprintf(why, n, "%s %s", what, list);
    return -1;
  }
  case CFG_WORD:
    for (size_t i = 0; i < slen; i++)
      if (!(isalnum((unsigned char)s[i]) || strchr("_.+-", s[i]))) {
        *off = (int)i, *len = 1;
        snprintf(why, n, "expected one word (letters, digits, _ . + -)");
        return -1;
      }
    return 0;
  case CFG_REALS: {
    int cap = 1;
    for (size_t i = 0; i < slen; i++)
      cap += s[i] == ',';
    v->list = arena_alloc(a, sizeof(double) * (size_t)cap);
    size_t start = 0;
    for (;;) {
      size_t end = start;
      while (end < slen && s[end] != ',')
        end++;
      size_t b = start, e = end;
      while (b < e && is_space((unsigned char)s[b]))
        b++;
      while (e > b && is_space((unsigned char)s[e - 1]))
        e--;
      double x;
      if (!scan_number(s + b, e - b, &x)) {
        *off = (int)b, *len = (int)(e > b ? e - b : 1);
        snprintf(why, n, "expected a comma list of numbers");
        return -1;
      }
      if (!in_range(k, x)) {
        *off = (int)b, *len = (int)(e - b);
        fmt_range(k, range, sizeof range);
        snprintf(why, n, "%.*s is out of range %s", (int)(e - b), s + b, range);
        return -1;
      }
      v->list[v->nlist++] = x;
      if (end == slen)
        break;
      start = end + 1;
    }
    if (k->count && v->nlist != k->count) {
      snprintf(why, n, "expected %d numbers, not %d", k->count, v->nlist);
      return -1;
    }
    return 0;
  }
  case CFG_INIT: {
    InitText it;
    return init_parse(s, &it, why, n, off, len);
  }
  case CFG_PATH:
    return 0;
  default:
    UNREACHABLE("cfg key type");
  }
}

/* ---- Lexing the file ---- */

static void add_header(Cfg *c, const char *name, Loc loc) {
  Header h = {name, loc};
  VEC_PUSH(c->hdrs, c->nhdrs, c->caphdrs, h);
}

static int find_header(const Cfg *c, const char *name) {
  for (int i = 0; i < c->nhdrs; i++)
    if (strcmp(c->hdrs[i].name, name) == 0)
      return i;
  return -1;
}

static int find_raw(const Cfg *c, const char *sec, const char *key) {
  for (int i = 0; i < c->nraws; i++)
    if (strcmp(c->raws[i].sec, sec) == 0 && strcmp(c->raws[i].key, key) == 0)
      return i;
  return -1;
}

/* Why a section name is not one: NULL when it is (task, model, train, eval, log, optim.TAG). */
static const char *section_problem(const char *name, char *why, size_t n) {
  for (int i = 0; i < COUNT(section_names); i++)
    if (strcmp(section_names[i], name) == 0 && strcmp(name, "optim") != 0)
      return NULL;
  if (strcmp(name, "optim") == 0) {
    snprintf(why, n, "[optim] needs a tag: [optim.TAG], TAG a tag of the cell's params, e.g. [optim.recurrent]");
    return why;
  }
  if (strncmp(name, "optim.", 6) == 0) {
    if (is_ident(name + 6))
      return NULL;
    snprintf(why, n, "bad tag '%s' in [%s]: a tag is a name (letters, digits, _)", name + 6, name);
    return why;
  }
  const char *cands[COUNT(section_names) + 1];
  for (int i = 0; i < COUNT(section_names); i++)
    cands[i] = section_names[i];
  const char *dot = strchr(name, '.');
  char alt[256];
  snprintf(alt, sizeof alt, "optim%s", dot ? dot : "");
  cands[COUNT(section_names)] = alt;
  const char *near = edit_nearest(name, cands, COUNT(cands));
  if (near && strcmp(near, "optim") != 0)
    snprintf(why, n, "unknown section [%s]; did you mean [%s]?", name, near);
  else
    snprintf(why, n, "unknown section [%s]; the sections are [task], [model], [train], [optim.TAG], [eval], [log]",
             name);
  return why;
}

typedef struct Lexer {
  Cfg *c;
  const char *text;
  int len;
  int line, bol; /* current line number and the offset of its start */
} Lexer;

static Loc lx_loc(const Lexer *lx, int off, int len) {
  Loc l = {&lx->c->src, off, lx->line, off - lx->bol + 1, len > 0 ? len : 1};
  return l;
}

/* Splits the file into headers and `key = value` lines; every syntax error, unknown section and
 * duplicate is found here. Returns 0, or -1 after the first error. */
static int lex(Cfg *c) {
  Lexer lx = {c, c->src.text, (int)c->src.len, 1, 0};
  const char *t = lx.text;
  const char *sec = NULL;
  char why[512];
  for (int p = 0; p <= lx.len; lx.line++) {
    lx.bol = p;
    int eol = p;
    while (eol < lx.len && t[eol] != '\n')
      eol++;
    int i = p;
    while (i < eol && is_space((unsigned char)t[i]))
      i++;
    if (i == eol || t[i] == '#')
      goto next;
    if (t[i] == '[') {
      /* header = "[" NAME "]" [comment] */
      int s = i + 1;
      while (s < eol && is_space((unsigned char)t[s]))
        s++;
      int e = s;
      while (e < eol && is_key_char((unsigned char)t[e]))
        e++;
      if (e == s) {
        diag_error(lx_loc(&lx, s, 1), "expected a section name after '['");
        return -1;
      }
      int q = e;
      while (q < eol && is_space((unsigned char)t[q]))
        q++;
      if (q == eol || t[q] != ']') {
        diag_error(lx_loc(&lx, q, 1), "expected ']' after the section name");
        return -1;
      }
      int r = q + 1;
      while (r < eol && is_space((unsigned char)t[r]))
        r++;
      if (r < eol && t[r] != '#') {
        diag_error(lx_loc(&lx, r, 1), "unexpected text after the section header");
        return -1;
      }
      char *name = arena_strndup(&c->arena, t + s, (size_t)(e - s));
      Loc nloc = lx_loc(&lx, s, e - s);
      if (!is_dotted(name)) {
        diag_error(nloc, "malformed section name '%s'", name);
        return -1;
      }
      if (section_problem(name, why, sizeof why)) {
        diag_error(nloc, "%s", why);
        return -1;
      }
      int prev = find_header(c, name);
      if (prev >= 0) {
        diag_error(nloc, "duplicate section [%s]", name);
        diag_note(c->hdrs[prev].loc, "[%s] first appears here", name);
        return -1;
      }
      add_header(c, name, nloc);
      sec = name;
      goto next;
    }
    {
      /* line = KEY "=" VALUE [comment] */
      int ks = i, ke = i;
      while (ke < eol && is_key_char((unsigned char)t[ke]))
        ke++;
      if (ke == ks) {
        diag_error(lx_loc(&lx, ks, 1), "expected a key, a [section] or a # comment");
        return -1;
      }
      char *key = arena_strndup(&c->arena, t + ks, (size_t)(ke - ks));
      Loc kloc = lx_loc(&lx, ks, ke - ks);
      int q = ke;
      while (q < eol && is_space((unsigned char)t[q]))
        q++;
      if (q == eol || t[q] != '=') {
        diag_error(lx_loc(&lx, q, 1), "expected '=' after the key '%s'", key);
        return -1;
      }
      if (!is_dotted(key)) {
        diag_error(kloc, "malformed key '%s'", key);
        return -1;
      }
      int vs = q + 1;
      while (vs < eol && is_space((unsigned char)t[vs]))
        vs++;
      int ve = vs;
      while (ve < eol && t[ve] != '#')
        ve++;
      while (ve > vs && is_space((unsigned char)t[ve - 1]))
        ve--;
      if (ve == vs) {
        diag_error(lx_loc(&lx, vs, 1), "missing value for the key '%s'", key);
        return -1;
      }
      for (int k = vs; k < ve; k++) {
        unsigned char ch = (unsigned char)t[k];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
          diag_error(lx_loc(&lx, k, 1), "unexpected control character 0x%02x in the value", ch);
          return -1;
        }
      }
      if (!sec) {
        diag_error(kloc, "the key '%s' comes before any [section]", key);
        return -1;
      }
      int prev = find_raw(c, sec, key);
      if (prev >= 0) {
        diag_error(kloc, "duplicate key '%s' in [%s]", key, sec);
        diag_note(c->raws[prev].kloc, "first set here");
        return -1;
      }
      Raw r = {sec, key, arena_strndup(&c->arena, t + vs, (size_t)(ve - vs)), kloc, lx_loc(&lx, vs, ve - vs), NULL};
      VEC_PUSH(c->raws, c->nraws, c->capraws, r);
    }
  next:
    p = eol + 1;
  }
  return 0;
}

/* ---- Overrides ---- */

/* Applies "SECTION.KEY=VALUE" to the raw lines: replaces the line of that key or adds one.
 * Returns 0, or -1 after an error naming the --set. */
static int apply_set(Cfg *c, const char *assign) {
  const char *eq = strchr(assign, '=');
  if (!eq) {
    diag_plain("--set %s: expected SECTION.KEY=VALUE, e.g. --set train.lr=3e-4", assign);
    return -1;
  }
  const char *ks = assign, *ke = eq;
  while (ks < ke && is_space((unsigned char)*ks))
    ks++;
  while (ke > ks && is_space((unsigned char)ke[-1]))
    ke--;
  const char *vs = eq + 1, *ve = eq + strlen(eq);
  while (vs < ve && is_space((unsigned char)*vs))
    vs++;
  while (ve > vs && is_space((unsigned char)ve[-1]))
    ve--;
  char *full = arena_strndup(&c->arena, ks, (size_t)(ke - ks));
  if (!is_dotted(full)) {
    diag_plain("--set %s: malformed key '%s': expected SECTION.KEY, e.g. train.lr", assign, full);
    return -1;
  }
  char *dot = strchr(full, '.');
  if (!dot) {
    diag_plain("--set %s: '%s' names no section: expected SECTION.KEY, e.g. train.lr", assign, full);
    return -1;
  }
  if (strncmp(full, "optim.", 6) == 0) {
    dot = strchr(full + 6, '.');
    if (!dot) {
      diag_plain("--set %s: an [optim.TAG] key is optim.TAG.KEY, e.g. optim.recurrent.lr_scale", assign);
      return -1;
    }
  }
  char *sec = arena_strndup(&c->arena, full, (size_t)(dot - full));
  const char *key = dot + 1;
  char why[512];
  if (section_problem(sec, why, sizeof why)) {
    diag_plain("--set %s: %s", assign, why);
    return -1;
  }
  if (vs == ve) {
    diag_plain("--set %s: missing value", assign);
    return -1;
  }
  for (const char *p = vs; p < ve; p++) {
    unsigned char ch = (unsigned char)*p;
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f || ch == '#') {
      diag_plain("--set %s: a value cannot hold '#' or a control character", assign);
      return -1;
    }
  }
  Raw r = {sec, key, arena_strndup(&c->arena, vs, (size_t)(ve - vs)), {0}, {0}, arena_strdup(&c->arena, assign)};
  int i = find_raw(c, sec, key);
  if (i >= 0)
    c->raws[i] = r;
  else
    VEC_PUSH(c->raws, c->nraws, c->capraws, r);
  return 0;
}

/* ---- Resolving: every key checked, defaults filled ---- */

static RSec *find_rsec(Resolved *r, const char *name) {
  for (int i = 0; i < r->nsecs; i++)
    if (strcmp(r->secs[i].name, name) == 0)
      return &r->secs[i];
  return NULL;
}

static int key_index(const RSec *s, const char *key) {
  for (int i = 0; i < s->nkeys; i++)
    if (strcmp(s->keys[i].name, key) == 0)
      return i;
  return -1;
}

static void init_rsec(Arena *a, RSec *s, const char *name, const CfgKey *keys, int nkeys) {
  s->name = name;
  s->keys = keys;
  s->nkeys = nkeys;
  s->vals = arena_alloc(a, sizeof(Val) * (size_t)(nkeys ? nkeys : 1));
  for (int i = 0; i < nkeys; i++)
    s->vals[i].raw = -1;
}

/* A task key in the schema's terms. */
static CfgKey from_task_key(const TaskKey *tk) {
  CfgKey k = {tk->name, CFG_PATH, tk->def, tk->min, tk->max, false, false, 0, NULL, NULL, tk->doc};
  switch (tk->type) {
  case TKEY_INT:
    k.type = CFG_INT;
    break;
  case TKEY_REAL:
    k.type = CFG_REAL;
    break;
  case TKEY_BOOL:
    k.type = CFG_BOOL;
    break;
  case TKEY_STRING:
    k.type = CFG_WORD;
    break;
  case TKEY_PATH:
    k.type = CFG_PATH;
    break;
  default:
    UNREACHABLE("task key type");
  }
  return k;
}

/* Parses a dotted [model] key into e (kind, layer, name); -1 when it is none of the forms. */
static int parse_entry_key(const char *key, CfgEntry *e) {
  char buf[256];
  if (strlen(key) >= sizeof buf)
    return -1;
  strcpy(buf, key);
  char *comp[6];
  int n = 0;
  for (char *p = strtok(buf, "."); p; p = strtok(NULL, ".")) {
    if (n == 6)
      return -1;
    comp[n++] = p;
  }
  e->layer = -1;
  int k = 0;
  if (n == 4 && strcmp(comp[0], "layer") == 0) {
    size_t len = strlen(comp[1]);
    if (len == 0 || len > 6 || strspn(comp[1], "0123456789") != len)
      return -1;
    e->layer = atoi(comp[1]);
    k = 2;
    if (strcmp(comp[2], "option") && strcmp(comp[2], "init"))
      return -1;
  } else if (n != 2) {
    return -1;
  }
  if (strcmp(comp[k], "option") == 0)
    e->kind = CFG_ENTRY_OPTION;
  else if (strcmp(comp[k], "init") == 0)
    e->kind = CFG_ENTRY_INIT;
  else if (strcmp(comp[k], "dims") == 0 && e->layer < 0)
    e->kind = CFG_ENTRY_DIM;
  else
    return -1;
  if (!is_ident(comp[k + 1]))
    return -1;
  return 0;
}

/* The unknown-key error, with the nearest key of the section. */
static void unknown_key(Resolved *r, const RSec *s, const Raw *raw) {
  const char *cands[64];
  int n = 0;
  for (int i = 0; i < s->nkeys && n < 56; i++)
    cands[n++] = s->keys[i].name;
  char alt[5][300];
  int nalt = 0;
  if (strcmp(s->name, "model") == 0) {
    /* Near misses of the dotted forms: "options.see_h" -> "option.see_h". */
    const char *dot = strchr(raw->key, '.');
    const char *last = strrchr(raw->key, '.');
    if (dot) {
      snprintf(alt[nalt++], sizeof alt[0], "option%s", dot);
      snprintf(alt[nalt++], sizeof alt[0], "init%s", dot);
      snprintf(alt[nalt++], sizeof alt[0], "dims%s", dot);
      const char *d2 = strchr(dot + 1, '.');
      if (d2 && last != d2) {
        snprintf(alt[nalt++], sizeof alt[0], "layer%.*s.option%s", (int)(d2 - dot), dot, last);
        snprintf(alt[nalt++], sizeof alt[0], "layer%.*s.init%s", (int)(d2 - dot), dot, last);
      }
    }
    for (int i = 0; i < nalt; i++)
      cands[n++] = alt[i];
  }
  const char *near = edit_nearest(raw->key, cands, n);
  char task[96] = "";
  if (strcmp(s->name, "task") == 0)
    snprintf(task, sizeof task, " (task %s)", r->task->name);
  char list[1024] = "";
  if (!near) {
    join(cands, s->nkeys, list, sizeof list);
    if (strcmp(s->name, "model") == 0)
      strncat(list, ", option.NAME, layer.K.option.NAME, init.PARAM, layer.K.init.PARAM, dims.NAME",
              sizeof list - strlen(list) - 1);
  }
  if (near)
    raw_error(raw, false, -1, 0, "unknown key '%s' in [%s]%s; did you mean '%s'?", raw->key, s->name, task, near);
  else
    raw_error(raw, false, -1, 0, "unknown key '%s' in [%s]%s; the keys are %s", raw->key, s->name, task, list);
}

/* Checks one Raw against its section and stores its value. */
static int resolve_raw(Cfg *c, Resolved *r, int ri) {
  const Raw *raw = &c->raws[ri];
  RSec *s = find_rsec(r, raw->sec);
  CHECK(s); /* sections were checked by lex and apply_set */
  char why[1024];
  int off, len;
  if (strcmp(s->name, "model") == 0 && strchr(raw->key, '.')) {
    CfgEntry e = {0};
    if (parse_entry_key(raw->key, &e)) {
      unknown_key(r, s, raw);
      return -1;
    }
    e.key = arena_printf(&c->arena, "model.%s", raw->key);
    e.name = strrchr(e.key, '.') + 1;
    e.text = raw->val;
    Val v;
    if (e.kind == CFG_ENTRY_OPTION) {
      if (strcmp(raw->val, "true") == 0 || strcmp(raw->val, "false") == 0) {
        e.is_bool = true;
        e.num = strcmp(raw->val, "true") == 0;
      } else if (!scan_number(raw->val, strlen(raw->val), &e.num)) {
        value_error(raw, -1, 0, "expected a number or true/false");
        return -1;
      }
    } else if (parse_value(&c->arena, e.kind == CFG_ENTRY_DIM ? &dim_key : &init_key, raw->val, &v, why, sizeof why,
                           &off, &len)) {
      value_error(raw, off, len, why);
      return -1;
    } else {
      e.num = v.num;
    }
    r->entries[r->nentries] = e;
    r->entry_raw[r->nentries++] = ri;
    return 0;
  }
  int k = key_index(s, raw->key);
  if (k < 0) {
    unknown_key(r, s, raw);
    return -1;
  }
  Val v;
  if (parse_value(&c->arena, &s->keys[k], raw->val, &v, why, sizeof why, &off, &len)) {
    value_error(raw, off, len, why);
    return -1;
  }
  v.raw = ri;
  s->vals[k] = v;
  return 0;
}

static const Val *rsec_val(const RSec *s, const char *key) {
  int k = key_index(s, key);
  CHECK(k >= 0);
  return &s->vals[k];
}

/* Fills the keys nobody gave: defaults, inherited [train] values; a missing required key is an error. */
static int fill_defaults(Cfg *c, Resolved *r, RSec *s) {
  RSec *train = find_rsec(r, "train");
  for (int i = 0; i < s->nkeys; i++) {
    const CfgKey *k = &s->keys[i];
    Val *v = &s->vals[i];
    if (v->raw >= 0)
      continue;
    if (k->inherit) {
      *v = *rsec_val(train, k->inherit);
      v->raw = -1;
      continue;
    }
    if (!k->def) {
      int h = find_header(c, s->name);
      if (h >= 0)
        diag_error(c->hdrs[h].loc, "[%s] %s needs the key '%s' (%s)", s->name, r->task->name, k->name, key_doc(k));
      else
        diag_plain("[%s] %s needs the key '%s' (%s)", s->name, r->task->name, k->name, key_doc(k));
      return -1;
    }
    if (!*k->def && (k->type == CFG_WORD || k->type == CFG_PATH || k->type == CFG_INT)) {
      v->text = NULL;
      continue;
    }
    char why[512];
    int off, len;
    if (parse_value(&c->arena, k, k->def, v, why, sizeof why, &off, &len))
      UNREACHABLE("a default fails its own key");
    v->raw = -1;
  }
  return 0;
}

/* Checks everything against the schema into a fresh Resolved. Returns 0, or -1 after the first error. */
static int resolve(Cfg *c, Resolved *out) {
  Arena *a = &c->arena;
  Resolved r = {0};
  char why[1024], list[512];
  int off, len;
  const char *const *names;
  int ntasks = task_names(&names);
  join(names, ntasks, list, sizeof list);

  /* The task first: its keys are part of the schema. */
  int ni = find_raw(c, "task", "name");
  if (ni < 0) {
    int h = find_header(c, "task");
    if (h >= 0)
      diag_error(c->hdrs[h].loc, "[task] needs the key 'name': one of %s", list);
    else
      diag_plain("%s: no task: add a [task] section with name = one of %s", c->src.path, list);
    return -1;
  }
  Val name;
  if (parse_value(a, &task_name_key, c->raws[ni].val, &name, why, sizeof why, &off, &len)) {
    value_error(&c->raws[ni], off, len, why);
    return -1;
  }
  r.task = task_find(name.text);
  CHECK(r.task);
  int ntk = r.task->nkeys;
  CfgKey *tkeys = arena_alloc(a, sizeof(CfgKey) * (size_t)(ntk + 1));
  tkeys[0] = task_name_key;
  for (int i = 0; i < ntk; i++)
    tkeys[i + 1] = from_task_key(&r.task->keys[i]);

  /* The tags, from the headers, then the --sets. */
  r.tags = arena_alloc(a, sizeof(char *) * (size_t)(c->nhdrs + c->nraws + 1));
  for (int i = 0; i < c->nhdrs + c->nraws; i++) {
    const char *sec = i < c->nhdrs ? c->hdrs[i].name : c->raws[i - c->nhdrs].sec;
    if (strncmp(sec, "optim.", 6))
      continue;
    bool seen = false;
    for (int j = 0; j < r.ntags; j++)
      seen |= strcmp(r.tags[j], sec + 6) == 0;
    if (!seen)
      r.tags[r.ntags++] = sec + 6;
  }

  r.secs = arena_alloc(a, sizeof(RSec) * (size_t)(5 + r.ntags));
  init_rsec(a, &r.secs[r.nsecs++], "task", tkeys, ntk + 1);
  init_rsec(a, &r.secs[r.nsecs++], "model", model_keys, COUNT(model_keys));
  init_rsec(a, &r.secs[r.nsecs++], "train", train_keys, COUNT(train_keys));
  for (int i = 0; i < r.ntags; i++)
    init_rsec(a, &r.secs[r.nsecs++], arena_printf(a, "optim.%s", r.tags[i]), optim_keys, COUNT(optim_keys));
  init_rsec(a, &r.secs[r.nsecs++], "eval", eval_keys, COUNT(eval_keys));
  init_rsec(a, &r.secs[r.nsecs++], "log", log_keys, COUNT(log_keys));
  init_rsec(a, &r.optim_default, "optim", optim_keys, COUNT(optim_keys));
  r.entries = arena_alloc(a, sizeof(CfgEntry) * (size_t)(c->nraws + 1));
  r.entry_raw = arena_alloc(a, sizeof(int) * (size_t)(c->nraws + 1));

  for (int i = 0; i < c->nraws; i++)
    if (resolve_raw(c, &r, i))
      return -1;
  for (int i = 0; i < r.nsecs; i++)
    if (fill_defaults(c, &r, &r.secs[i]))
      return -1;
  if (fill_defaults(c, &r, &r.optim_default))
    return -1;

  /* Checks across keys. */
  RSec *model = find_rsec(&r, "model"), *train = find_rsec(&r, "train");
  int layers = (int)rsec_val(model, "layers")->num;
  for (int i = 0; i < r.nentries; i++) {
    const CfgEntry *e = &r.entries[i];
    if (e->layer >= layers) {
      const Raw *raw = &c->raws[r.entry_raw[i]];
      raw_error(raw, false, 6, (int)strcspn(raw->key + 6, "."), "no layer %d: model.layers = %d (layers 0 to %d)",
                e->layer, layers, layers - 1);
      return -1;
    }
  }
  const Val *warm = rsec_val(train, "warmup"), *steps = rsec_val(train, "steps");
  if (warm->raw >= 0 && warm->num >= 1 && warm->num > steps->num) {
    char num[40];
    snprintf(why, sizeof why, "more warmup steps than train.steps = %s", fmt_num(steps->num, num, sizeof num));
    value_error(&c->raws[warm->raw], -1, 0, why);
    return -1;
  }
  *out = r;
  return 0;
}

/* ---- Public: parse, set, free ---- */

Cfg *cfg_parse(const Src *src, const char *const *sets, int nsets) {
  Cfg *c = xcalloc(1, sizeof *c);
  c->src.path = arena_strdup(&c->arena, src->path ? src->path : "<cfg>");
  char *text = arena_alloc(&c->arena, src->len + 1);
  memcpy(text, src->text, src->len);
  c->src.text = text;
  c->src.len = src->len;
  if (lex(c))
    goto fail;
  for (int i = 0; i < nsets; i++)
    if (apply_set(c, sets[i]))
      goto fail;
  if (resolve(c, &c->r))
    goto fail;
  return c;
fail:
  cfg_free(c);
  return NULL;
}

Cfg *cfg_load(const char *path, const char *const *sets, int nsets) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) {
    diag_plain("cannot read '%s': %s", path, errno == ENODEV ? "it is a device, not a file" : strerror(errno));
    return NULL;
  }
  Src src = {path, text, len};
  Cfg *c = cfg_parse(&src, sets, nsets);
  free(text);
  return c;
}

int cfg_set(Cfg *c, const char *assign) {
  int nraws = c->nraws;
  Raw *saved = xmalloc(sizeof(Raw) * (size_t)(nraws ? nraws : 1));
  memcpy(saved, c->raws, sizeof(Raw) * (size_t)nraws);
  Resolved r;
  int rc = apply_set(c, assign) || resolve(c, &r) ? -1 : 0;
  if (rc == 0) {
    c->r = r;
  } else {
    memcpy(c->raws, saved, sizeof(Raw) * (size_t)nraws);
    c->nraws = nraws;
  }
  free(saved);
  return rc;
}

void cfg_free(Cfg *c) {
  if (!c)
    return;
  free(c->raws);
  free(c->hdrs);
  arena_free(&c->arena);
  free(c);
}

/* ---- Getters ---- */

/* The value of a full key, with its schema key; or the dotted [model] entry (*ep). NULL if none. */
static const Val *lookup(const Cfg *c, const char *key, const CfgKey **kp, const CfgEntry **ep, int *rawp) {
  *kp = NULL;
  if (ep)
    *ep = NULL;
  if (rawp)
    *rawp = -1;
  const char *dot = strchr(key, '.');
  if (!dot)
    return NULL;
  if (strncmp(key, "optim.", 6) == 0)
    dot = strchr(key + 6, '.');
  if (!dot)
    return NULL;
  char sec[256];
  if ((size_t)(dot - key) >= sizeof sec)
    return NULL;
  memcpy(sec, key, (size_t)(dot - key));
  sec[dot - key] = 0;
  const char *k = dot + 1;
  Resolved *r = (Resolved *)&c->r;
  if (strcmp(sec, "model") == 0 && strchr(k, '.')) {
    for (int i = 0; i < r->nentries; i++)
      if (strcmp(r->entries[i].key, key) == 0) {
        if (ep)
          *ep = &r->entries[i];
        if (rawp)
          *rawp = r->entry_raw[i];
        return NULL;
      }
    return NULL;
  }
  RSec *s = find_rsec(r, sec);
  if (!s && strncmp(sec, "optim.", 6) == 0 && is_ident(sec + 6))
    s = &r->optim_default;
  if (!s)
    return NULL;
  int i = key_index(s, k);
  if (i < 0)
    return NULL;
  *kp = &s->keys[i];
  if (rawp)
    *rawp = s->vals[i].raw;
  return &s->vals[i];
}

static const Val *get(const Cfg *c, const char *key, const CfgKey **kp) {
  const Val *v = lookup(c, key, kp, NULL, NULL);
  if (!v)
    base_fail(__FILE__, __LINE__, xasprintf("no configuration key '%s'", key));
  return v;
}

static const CfgEntry *get_entry(const Cfg *c, const char *key) {
  const CfgKey *k;
  const CfgEntry *e;
  lookup(c, key, &k, &e, NULL);
  if (!e)
    base_fail(__FILE__, __LINE__, xasprintf("no configuration entry '%s'", key));
  return e;
}

static bool is_entry_key(const char *key) { return strncmp(key, "model.", 6) == 0 && strchr(key + 6, '.'); }

int64_t cfg_int(const Cfg *c, const char *key) {
  if (is_entry_key(key)) {
    const CfgEntry *e = get_entry(c, key);
    CHECK(e->kind == CFG_ENTRY_DIM);
    return (int64_t)e->num;
  }
  const CfgKey *k;
  const Val *v = get(c, key, &k);
  CHECK(k->type == CFG_INT);
  return (int64_t)v->num;
}

double cfg_real(const Cfg *c, const char *key) {
  if (is_entry_key(key)) {
    const CfgEntry *e = get_entry(c, key);
    CHECK(e->kind != CFG_ENTRY_INIT);
    return e->num;
  }
  const CfgKey *k;
  const Val *v = get(c, key, &k);
  CHECK(k->type == CFG_INT || k->type == CFG_REAL || k->type == CFG_STEPS);
  return v->num;
}

bool cfg_bool(const Cfg *c, const char *key) {
  if (is_entry_key(key)) {
    const CfgEntry *e = get_entry(c, key);
    CHECK(e->kind == CFG_ENTRY_OPTION && e->is_bool);
    return e->num != 0;
  }
  const CfgKey *k;
  const Val *v = get(c, key, &k);
  CHECK(k->type == CFG_BOOL);
  return v->num != 0;
}

const char *cfg_word(const Cfg *c, const char *key) {
  if (is_entry_key(key)) {
    const CfgEntry *e = get_entry(c, key);
    CHECK(e->kind == CFG_ENTRY_INIT);
    return e->text;
  }
  const CfgKey *k;
  const Val *v = get(c, key, &k);
  CHECK(k->type == CFG_CHOICE || k->type == CFG_DEVICE || k->type == CFG_TASK || k->type == CFG_WORD || k->type == CFG_INIT ||
        k->type == CFG_PATH);
  return v->text;
}

int cfg_reals(const Cfg *c, const char *key, const double **vals) {
  const CfgKey *k;
  const Val *v = get(c, key, &k);
  CHECK(k->type == CFG_REALS);
  *vals = v->list;
  return v->nlist;
}

const char *cfg_text(const Cfg *c, const char *key) {
  if (is_entry_key(key))
    return get_entry(c, key)->text;
  const CfgKey *k;
  return get(c, key, &k)->text;
}

bool cfg_has(const Cfg *c, const char *key) {
  const CfgKey *k;
  const CfgEntry *e;
  return lookup(c, key, &k, &e, NULL) || e;
}

bool cfg_is_set(const Cfg *c, const char *key) {
  const CfgKey *k;
  const CfgEntry *e;
  int raw;
  lookup(c, key, &k, &e, &raw);
  return raw >= 0;
}

const TaskDef *cfg_task(const Cfg *c) { return c->r.task; }

void cfg_task_values(const Cfg *c, double *num, const char **str) {
  const RSec *s = &c->r.secs[0];
  for (int i = 0; i < c->r.task->nkeys; i++) {
    const Val *v = &s->vals[i + 1];
    CfgType t = s->keys[i + 1].type;
    bool number = t == CFG_INT || t == CFG_REAL || t == CFG_BOOL;
    if (num)
      num[i] = number ? v->num : NAN;
    if (str)
      str[i] = number ? NULL : v->text;
  }
}

int cfg_entries(const Cfg *c, const CfgEntry **entries) {
  *entries = c->r.entries;
  return c->r.nentries;
}

int cfg_optim_tags(const Cfg *c, const char *const **tags) {
  *tags = (const char *const *)c->r.tags;
  return c->r.ntags;
}

void cfg_error(const Cfg *c, const char *key, bool at_value, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const CfgKey *k;
  const CfgEntry *e;
  int raw;
  const Val *v = lookup(c, key, &k, &e, &raw);
  if (raw >= 0) {
    raw_error(&c->raws[raw], at_value, -1, 0, "%s", msg);
    return;
  }
  int h = find_header(c, key);
  if (h >= 0) {
    diag_error(c->hdrs[h].loc, "%s", msg);
    return;
  }
  if (v && v->text)
    diag_plain("%s = %s (default): %s", key, v->text, msg);
  else
    diag_plain("%s: %s", key, msg);
}

void cfg_mark_unused(Cfg *c, const char *key, const char *why) {
  const CfgKey *k;
  CHECK(lookup(c, key, &k, NULL, NULL) && !cfg_is_set(c, key));
  for (int i = 0; i < c->nunused; i++)
    if (!strcmp(c->unused[i], key)) return;
  CHECK(c->nunused < COUNT(c->unused));
  c->unused[c->nunused] = arena_strdup(&c->arena, key);
  c->unused_why[c->nunused++] = arena_strdup(&c->arena, why);
}

/* ---- Writing ---- */

/* Why the key of section sec is marked unused, or NULL. */
static const char *unused_why(const Cfg *c, const char *sec, const char *key) {
  size_t n = strlen(sec);
  for (int i = 0; i < c->nunused; i++)
    if (!strncmp(c->unused[i], sec, n) && c->unused[i][n] == '.' && !strcmp(c->unused[i] + n + 1, key))
      return c->unused_why[i];
  return NULL;
}

static void write_line(FILE *f, const char *key, int width, const char *text, const char *doc) {
  char line[1024];
  int n = snprintf(line, sizeof line, "%-*s = %s", width, key, text);
  if (doc && n >= 0 && n < 40)
    fprintf(f, "%-40s # %s\n", line, doc);
  else if (doc)
    fprintf(f, "%s  # %s\n", line, doc);
  else
    fprintf(f, "%s\n", line);
}

void cfg_write(const Cfg *c, FILE *f) {
  const Resolved *r = &c->r;
  fprintf(f, "# the resolved configuration: every key, defaults written out\n");
  for (int i = 0; i < r->nsecs; i++) {
    const RSec *s = &r->secs[i];
    bool model = strcmp(s->name, "model") == 0;
    size_t width = 0;
    for (int k = 0; k < s->nkeys; k++)
      if (strlen(s->keys[k].name) > width)
        width = strlen(s->keys[k].name);
    if (model)
      for (int j = 0; j < r->nentries; j++)
        if (strlen(r->entries[j].key + 6) > width)
          width = strlen(r->entries[j].key + 6);
    fprintf(f, "%s[%s]\n", i ? "\n" : "", s->name);
    for (int k = 0; k < s->nkeys; k++) {
      const Val *v = &s->vals[k];
      const char *why = unused_why(c, s->name, s->keys[k].name);
      if (why && v->text)
        fprintf(f, "# %s = %s: unused (%s)\n", s->keys[k].name, v->text, why);
      else if (why)
        fprintf(f, "# %s: unused (%s)\n", s->keys[k].name, why);
      else if (v->text)
        write_line(f, s->keys[k].name, (int)width, v->text, key_doc(&s->keys[k]));
      else
        fprintf(f, "# %s: unset (%s)\n", s->keys[k].name, key_doc(&s->keys[k]));
    }
    if (model)
      for (int j = 0; j < r->nentries; j++)
        write_line(f, r->entries[j].key + 6, (int)width, r->entries[j].text, NULL);
  }
}

char *cfg_write_string(const Cfg *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cfg_write(c, f);
  fclose(f);
  return buf;
}
