/* images.c: sequential (and permuted) image classification: IDX files (MNIST's format) read strictly,
 * one pixel per step scaled to [0, 1], the class at the last step. */
#include <string.h>

#include "task_impl.h"

static const TaskKey images_keys[] = {
    {"path", TKEY_PATH, NULL, 0, 0, "IDX images file (magic 0x00000803), e.g. train-images-idx3-ubyte"},
    {"labels", TKEY_PATH, NULL, 0, 0, "IDX labels file (magic 0x00000801) for path"},
    {"test_path", TKEY_PATH, "", 0, 0, "IDX images of the test split (optional, with test_labels)"},
    {"test_labels", TKEY_PATH, "", 0, 0, "IDX labels of the test split"},
    {"permute", TKEY_BOOL, "false", 0, 1, "permute the pixels by one fixed permutation drawn from the seed"},
};
const TaskDef images_def = {"images", images_keys, 5, TASK_LOSS_CE, TASK_READ_LAST};

#define IDX_IMAGES 0x00000803u
#define IDX_LABELS 0x00000801u
#define MAX_PIXELS (1 << 24)

/* One IDX file: its bytes, and the dims of its header. */
typedef struct Idx {
  char *buf;
  int64_t count;       /* items */
  int rows, cols;      /* images only */
  const uint8_t *data; /* (count, rows*cols) pixels or (count) labels */
} Idx;

typedef struct ImagesData {
  Idx train, test;       /* test.buf NULL: the test split is carved from train */
  int npix;              /* rows * cols */
  int *perm;             /* (npix) step -> pixel */
  const uint8_t *pix[3]; /* (n, npix) per split, views into the files */
  const uint8_t *lab[3]; /* (n) per split */
  Idx train_labels, test_labels;
} ImagesData;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads an IDX file of unsigned bytes: images (3 dims: count, rows, cols) or labels (1 dim: count),
 * checking the magic and that the file holds exactly what its header says. */
static int idx_load(const Task *t, const char *path, uint32_t magic, Idx *out, char *err, size_t errlen) {
  bool images = magic == IDX_IMAGES;
  const char *what = images ? "images" : "labels";
  size_t len;
  memset(out, 0, sizeof *out);
  char *buf = task_read_file(t, path, &len, err, errlen);
  if (!buf)
    return -1;
  out->buf = buf;
  const unsigned char *p = (const unsigned char *)buf;
  if (len < 4)
    return task_err(t, err, errlen, "'%s' is not an IDX file (only %zu bytes)", path, len);
  uint32_t got = be32(p);
  if (got != magic)
    return task_err(t, err, errlen, "'%s' is not an IDX %s file (magic 0x%08x, expected 0x%08x)", path, what, got,
                    magic);
  size_t header = images ? 16 : 8;
  if (len < header)
    return task_err(t, err, errlen, "'%s' is truncated: its header needs %zu bytes, the file has %zu", path, header,
                    len);
  uint32_t count = be32(p + 4), rows = images ? be32(p + 8) : 1, cols = images ? be32(p + 12) : 1;
  if (count == 0)
    return task_err(t, err, errlen, "'%s' holds no %s", path, what);
  if (rows == 0 || cols == 0 || (uint64_t)rows * cols > MAX_PIXELS)
    return task_err(t, err, errlen, "'%s' has images of %ux%u pixels (between 1 and %d pixels expected)", path, rows,
                    cols, MAX_PIXELS);
  uint64_t need = (uint64_t)header + (uint64_t)count * rows * cols;
  if (len < need) {
    if (images)
      return task_err(t, err, errlen, "'%s' is truncated: %u images of %ux%u need %llu bytes, the file has %zu", path,
                      count, rows, cols, (unsigned long long)need, len);
    return task_err(t, err, errlen, "'%s' is truncated: %u labels need %llu bytes, the file has %zu", path, count,
                    (unsigned long long)need, len);
  }
  if (len > need)
    return task_err(t, err, errlen, "'%s' has %llu bytes after the %u %s its header announces", path,
                    (unsigned long long)(len - need), count, what);
  out->count = count;
  out->rows = (int)rows;
  out->cols = (int)cols;
  out->data = p + header;
  return 0;
}

/* Loads an images file and its labels file and checks that they match. */
static int load_pair(const Task *t, const char *ipath, const char *lpath, Idx *img, Idx *lab, char *err,
                     size_t errlen) {
  if (idx_load(t, ipath, IDX_IMAGES, img, err, errlen))
    return -1;
  if (idx_load(t, lpath, IDX_LABELS, lab, err, errlen))
    return -1;
  if (lab->count != img->count)
    return task_err(t, err, errlen, "'%s' has %lld labels for the %lld images of '%s'", lpath, (long long)lab->count,
                    (long long)img->count, ipath);
  return 0;
}

static void images_item(Task *t, TaskSplit split, int64_t item, int b, TaskBatch *out) {
  ImagesData *d = t->data;
  const uint8_t *pix = d->pix[split] + (size_t)item * d->npix;
  for (int s = 0; s < d->npix; s++)
    out->x[(size_t)s * out->B + b] = pix[d->perm[s]] / 255.0f;
  out->cls[b] = d->lab[split][item];
}

static void images_batch(Task *t, TaskSplit split, int64_t index, TaskBatch *out) {
  task_fixed_batch(t, split, index, out, images_item);
}

static void images_free(Task *t) {
  ImagesData *d = t->data;
  free(d->train.buf);
  free(d->test.buf);
  free(d->train_labels.buf);
  free(d->test_labels.buf);
  free(d->perm);
  free(d);
}

/* Splits: with test files, train is the first 90% of `path` and valid its last 10%; without, train,
 * valid and test are its first 80%, next 10% and last 10%. Classes: the largest label + 1. */
int images_new(Task *t, char *err, size_t errlen) {
  const char *test_path = task_str(t, "test_path"), *test_labels = task_str(t, "test_labels");
  if (!test_path != !test_labels)
    return task_err(t, err, errlen, "test_path and test_labels go together; %s is missing",
                    test_path ? "test_labels" : "test_path");
  ImagesData *d = xcalloc(1, sizeof *d);
  t->data = d;
  t->free = images_free;
  if (load_pair(t, task_str(t, "path"), task_str(t, "labels"), &d->train, &d->train_labels, err, errlen))
    return -1;
  if (test_path && load_pair(t, test_path, test_labels, &d->test, &d->test_labels, err, errlen))
    return -1;
  if (test_path && (d->test.rows != d->train.rows || d->test.cols != d->train.cols))
    return task_err(t, err, errlen, "'%s' holds %dx%d images, '%s' holds %dx%d", test_path, d->test.rows, d->test.cols,
                    task_str(t, "path"), d->train.rows, d->train.cols);
  int64_t n = d->train.count, nv = n / 10;
  if (nv < 1)
    return task_err(t, err, errlen, "'%s' holds %lld images, too few to carve a valid split (at least 10)",
                    task_str(t, "path"), (long long)n);
  d->npix = d->train.rows * d->train.cols;
  int64_t size[3] = {n - nv - (test_path ? 0 : nv), nv, test_path ? d->test.count : nv};
  for (int s = 0; s < 3; s++) {
    int64_t first = s == TASK_TRAIN ? 0 : s == TASK_VALID ? size[0] : size[0] + size[1];
    bool from_test = s == TASK_TEST && test_path;
    d->pix[s] = (from_test ? d->test.data : d->train.data + (size_t)first * d->npix);
    d->lab[s] = (from_test ? d->test_labels.data : d->train_labels.data + first);
    t->shape.split_size[s] = size[s];
  }
  int classes = 0;
  for (int64_t i = 0; i < n; i++)
    classes = d->train_labels.data[i] + 1 > classes ? d->train_labels.data[i] + 1 : classes;
  for (int64_t i = 0; test_path && i < d->test.count; i++)
    classes = d->test_labels.data[i] + 1 > classes ? d->test_labels.data[i] + 1 : classes;
  d->perm = xmalloc((size_t)d->npix * sizeof *d->perm);
  for (int i = 0; i < d->npix; i++)
    d->perm[i] = i;
  if (task_num(t, "permute") != 0) {
    Rng r;
    task_rng(t, "permute", TASK_TRAIN, 0, &r);
    for (int i = d->npix - 1; i > 0; i--) {
      int j = (int)rng_below(&r, (uint64_t)i + 1), tmp = d->perm[i];
      d->perm[i] = d->perm[j];
      d->perm[j] = tmp;
    }
  }
  t->shape.in_dim = 1;
  t->shape.out_dim = classes;
  t->shape.length = d->npix;
  t->batch = images_batch;
  return 0;
}
