/* temporal_xor.c: the temporal XOR task of the thesis (docs/training.md "Tasks"; shared/seeds.md
 * section 3): fixed, disjoint train/valid/test sets of token sequences whose label depends on two
 * informative tokens. */
#include <stdlib.h>
#include <string.h>

#include "task_impl.h"

static const TaskKey xor_keys[] = {
    {"length", TKEY_INT, "100", 2, 100000, "T, the sequence length"},
    {"vocab", TKEY_INT, "10", 3, 65536,
     "V; informative tokens first, fillers after (12 when classes = 4 and left at 10)"},
    {"easy_fraction", TKEY_REAL, "0", 0, 1,
     "fraction of (treated) training samples with both tokens in the last window"},
    {"window", TKEY_INT, "10", 2, 100000, "the last steps that hold both informative tokens of an easy sample"},
    {"classes", TKEY_INT, "2", 2, 4, "2: XOR of tokens {0,1}; 4: groups {0,1} and {2,3}, differ/equal per group"},
    {"treated", TKEY_STRING, "all", 0, 0, "groups that get easy samples: all, or one group index"},
    {"train", TKEY_INT, "2000", 1, 10000000, "training sequences (4000 when classes = 4 and left at 2000)"},
    {"valid", TKEY_INT, "400", 1, 10000000, "validation sequences (800 when classes = 4 and left at 400)"},
    {"test", TKEY_INT, "400", 1, 10000000, "test sequences (800 when classes = 4 and left at 400)"},
};
const TaskDef temporal_xor_def = {"temporal_xor", xor_keys, 9, TASK_LOSS_CE, TASK_READ_LAST};

/* A valid or test sample that collides with an earlier split is drawn again; after this many tries
 * in a row the input space is too small for disjoint splits. */
#define MAX_TRIES 100000

typedef struct XorData {
  FixedSet set; /* token inputs */
  int V, groups;
} XorData;

/* A set of sequence hashes, open addressing (0 = empty). */
typedef struct HashSet {
  uint64_t *slot;
  size_t cap; /* a power of two */
} HashSet;

static void set_init(HashSet *s, int64_t n) {
  s->cap = 16;
  while (s->cap < 2 * (size_t)n)
    s->cap *= 2;
  s->slot = xcalloc(s->cap, sizeof *s->slot);
}

static bool set_has(const HashSet *s, uint64_t h) {
  h += !h;
  for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->slot[i] == h)
      return true;
    if (!s->slot[i])
      return false;
  }
}

static void set_add(HashSet *s, uint64_t h) {
  h += !h;
  size_t i = h & (s->cap - 1);
  while (s->slot[i] && s->slot[i] != h)
    i = (i + 1) & (s->cap - 1);
  s->slot[i] = h;
}

/* Draws one sample of group g: a and b from the group; fillers everywhere else. Hard: a at step 0,
 * b at step T-1. Easy: a and b at two distinct steps of the last `window`, a first. Returns the label:
 * a XOR b for 2 classes; for 4, 2g + (a == b), i.e. (0,1),(1,0) -> 0, (0,0),(1,1) -> 1, and so on. */
static int32_t draw_sample(const XorData *d, int g, bool easy, int window, Rng *r, int32_t *tok) {
  int32_t a = 2 * g + (int32_t)rng_below(r, 2), b = 2 * g + (int32_t)rng_below(r, 2);
  int informative = 2 * d->groups, T = d->set.T;
  for (int t = 0; t < T; t++)
    tok[t] = informative + (int32_t)rng_below(r, (uint64_t)(d->V - informative));
  int p1 = 0, p2 = T - 1;
  if (easy) {
    p1 = T - window + (int)rng_below(r, (uint64_t)window);
    p2 = T - window + (int)rng_below(r, (uint64_t)window - 1);
    if (p2 >= p1)
      p2++;
    if (p1 > p2) {
      int tmp = p1;
      p1 = p2;
      p2 = tmp;
    }
  }
  tok[p1] = a;
  tok[p2] = b;
  return d->groups == 1 ? (a ^ b) : 2 * g + (a == b);
}

int temporal_xor_new(Task *t, char *err, size_t errlen) {
  int T = task_int(t, "length"), V = task_int(t, "vocab"), window = task_int(t, "window");
  int classes = task_int(t, "classes");
  double easy_fraction = task_num(t, "easy_fraction");
  int64_t n[3] = {task_int(t, "train"), task_int(t, "valid"), task_int(t, "test")};
  if (classes != 2 && classes != 4)
    return task_err(t, err, errlen, "classes must be 2 or 4, not %d", classes);
  if (classes == 4) {
    /* The multi-class variant's own defaults (V = 12, 4000/800/800) replace keys left at the binary ones. */
    if (V == 10)
      V = 12;
    if (n[0] == 2000)
      n[0] = 4000;
    if (n[1] == 400)
      n[1] = 800;
    if (n[2] == 400)
      n[2] = 800;
  }
  int groups = classes / 2;
  if (V < 2 * groups + 1)
    return task_err(t, err, errlen, "vocab %d leaves no filler token (classes %d use tokens 0..%d)", V, classes,
                    2 * groups - 1);
  if (window > T)
    return task_err(t, err, errlen, "window %d exceeds length %d", window, T);
  const char *treated_s = task_str(t, "treated");
  int treated = -1; /* -1 = all groups */
  if (strcmp(treated_s, "all") != 0) {
    char *end;
    long v = strtol(treated_s, &end, 10);
    if (end == treated_s || *end || v < 0 || v >= groups)
      return task_err(t, err, errlen, "treated must be 'all' or a group index 0..%d, not '%s'", groups - 1, treated_s);
    treated = (int)v;
  }

  XorData *d = xcalloc(1, sizeof *d);
  t->data = d;
  t->free = task_set_free;
  d->set.T = T;
  d->V = V;
  d->groups = groups;
  for (int s = 0; s < 3; s++) {
    d->set.tok[s] = xmalloc((size_t)n[s] * (size_t)T * sizeof(int32_t));
    d->set.label[s] = xmalloc((size_t)n[s] * sizeof(int32_t));
  }

  /* Train: a group per sample, then exactly round(easy_fraction * eligible) easy samples among the
   * samples of the treated groups, chosen at random. */
  Rng r;
  task_rng(t, "train", TASK_TRAIN, 0, &r);
  int *group = xmalloc((size_t)n[0] * sizeof *group);
  bool *easy = xcalloc((size_t)n[0], sizeof *easy);
  int64_t *eligible = xmalloc((size_t)n[0] * sizeof *eligible), ne = 0;
  for (int64_t i = 0; i < n[0]; i++) {
    group[i] = (int)rng_below(&r, (uint64_t)groups);
    if (treated < 0 || group[i] == treated)
      eligible[ne++] = i;
  }
  int64_t neasy = (int64_t)(easy_fraction * (double)ne + 0.5);
  for (int64_t i = 0; i < neasy; i++) { /* partial Fisher-Yates */
    int64_t j = i + (int64_t)rng_below(&r, (uint64_t)(ne - i)), tmp = eligible[i];
    eligible[i] = eligible[j];
    eligible[j] = tmp;
    easy[eligible[i]] = true;
  }
  HashSet seen;
  set_init(&seen, n[0] + n[1] + n[2]);
  uint64_t key = rng_next(&r);
  for (int64_t i = 0; i < n[0]; i++) {
    int32_t *tok = d->set.tok[0] + (size_t)i * T;
    d->set.label[0][i] = draw_sample(d, group[i], easy[i], window, &r, tok);
    set_add(&seen, task_hash(tok, (size_t)T * sizeof(int32_t), key));
  }
  free(group);
  free(easy);
  free(eligible);

  /* Valid, then test: hard samples only, drawn again while they equal a sequence of an earlier split. */
  int rc = 0;
  for (int s = 1; s < 3 && rc == 0; s++) {
    task_rng(t, s == 1 ? "valid" : "test", (TaskSplit)s, 0, &r);
    uint64_t *h = xmalloc((size_t)n[s] * sizeof *h);
    for (int64_t i = 0; i < n[s] && rc == 0; i++) {
      int32_t *tok = d->set.tok[s] + (size_t)i * T;
      int tries = 0;
      do {
        d->set.label[s][i] = draw_sample(d, (int)rng_below(&r, (uint64_t)groups), false, window, &r, tok);
        h[i] = task_hash(tok, (size_t)T * sizeof(int32_t), key);
      } while (set_has(&seen, h[i]) && ++tries < MAX_TRIES);
      if (tries == MAX_TRIES)
        rc = task_err(t, err, errlen,
                      "cannot draw %lld %s sequences apart from the other splits: length %d with %d filler tokens "
                      "gives too few distinct sequences",
                      (long long)n[s], s == 1 ? "valid" : "test", T, V - 2 * groups);
    }
    for (int64_t i = 0; i < n[s] && rc == 0; i++)
      set_add(&seen, h[i]);
    free(h);
  }
  free(seen.slot);
  if (rc)
    return rc;

  t->shape.token_input = true;
  t->shape.vocab = V;
  t->shape.out_dim = classes;
  t->shape.length = T;
  for (int s = 0; s < 3; s++)
    t->shape.split_size[s] = n[s];
  t->batch = task_set_batch;
  return 0;
}
