/* test_safetensors.c: the safetensors reader and writer: round trips, the reference
 * layout byte for byte, every kind of malformed input, and atomic writes. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support.h"
#include "safetensors.h"

static char err[512];

/* A fresh directory under /tmp for one test. */
static char *temp_dir(void) {
  char *dir = xstrdup("/tmp/cellc_sft_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  return dir;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void remove_tree(char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *e; (e = readdir(d));)
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char *p = xasprintf("%s/%s", dir, e->d_name);
        if (unlink(p) != 0) rmdir(p);
        free(p);
      }
    closedir(d);
  }
  rmdir(dir);
  free(dir);
}

/* A safetensors image: 8-byte little-endian length, the header as given, then the data. */
static unsigned char *make_file(const char *header, const void *data, size_t dlen, size_t *len) {
  size_t h = strlen(header);
  *len = 8 + h + dlen;
  unsigned char *b = xmalloc(*len);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(b + 8, header, h);
  if (dlen) memcpy(b + 8 + h, data, dlen);
  return b;
}

/* Parses a header over `dlen` zero bytes of data; expects failure with a message containing `want`. */
static void expect_bad(const char *header, size_t dlen, const char *want) {
  unsigned char *zeros = xcalloc(dlen ? dlen : 1, 1);
  size_t len;
  unsigned char *b = make_file(header, zeros, dlen, &len);
  SftFile f;
  err[0] = 0;
  int rc = sft_parse(b, len, "bad.safetensors", &f, err, sizeof err);
  cr_assert_eq(rc, -1, "accepted: %s", header);
  cr_assert_eq(f.n, 0);
  cr_assert_null(f.tensors);
  cr_assert(strncmp(err, "bad.safetensors: ", 17) == 0, "message lacks the file name: %s", err);
  cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
  cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err);
  free(b);
  free(zeros);
}

Test(safetensors, round_trip_f32_f64_values_shapes_and_metadata) {
  char *dir = temp_dir();
  char *path = xasprintf("%s/a.safetensors", dir);
  SftWriter *w = sft_writer_new();
  float a[6] = {1.5f, -2.25f, 3e-8f, 4e20f, 0.0f, -0.0f};
  double b[4] = {M_PI, -1e-300, 1e300, 42.0};
  sft_add(w, "param.W", SFT_F32, 2, (int64_t[]){2, 3}, a);
  sft_add(w, "grad.x", SFT_F64, 3, (int64_t[]){1, 2, 2}, b);
  sft_set_meta(w, "cell", "mgu");
  sft_set_meta(w, "dims", "H=8,D=4");
  cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
  sft_writer_free(w);

  SftFile f;
  cr_assert_eq(sft_read(path, &f, err, sizeof err), 0, "%s", err);
  cr_assert_eq(f.n, 2);
  const SftTensor *ta = sft_find(&f, "param.W"), *tb = sft_find(&f, "grad.x");
  cr_assert_not_null(ta);
  cr_assert_not_null(tb);
  cr_assert_eq(ta->dtype, SFT_F32);
  cr_assert_eq(ta->ndim, 2);
  cr_assert_eq(ta->shape[0], 2);
  cr_assert_eq(ta->shape[1], 3);
  cr_assert_eq(ta->numel, 6);
  cr_assert_eq(ta->nbytes, 24);
  cr_assert_eq(memcmp(ta->data, a, sizeof a), 0);
  cr_assert_eq(sft_get(ta, 1), -2.25);
  cr_assert_eq(tb->dtype, SFT_F64);
  cr_assert_eq(tb->ndim, 3);
  cr_assert_eq(tb->shape[2], 2);
  for (int i = 0; i < 4; i++) cr_assert_eq(sft_get(tb, i), b[i]);
  cr_assert_eq(f.nmeta, 2);
  cr_assert_str_eq(sft_meta(&f, "cell"), "mgu");
  cr_assert_str_eq(sft_meta(&f, "dims"), "H=8,D=4");
  sft_free(&f);
  free(path);
  remove_tree(dir);
}

Test(safetensors, round_trip_zero_dimensional_and_empty_tensors) {
  SftWriter *w = sft_writer_new();
  double s = 2.5;
  sft_add_f64_as(w, "scalar", SFT_F64, 0, NULL, &s);
  sft_add(w, "empty", SFT_F32, 2, (int64_t[]){0, 5}, NULL);
  sft_add(w, "none", SFT_F32, 1, (int64_t[]){0}, NULL);
  char *dir = temp_dir();
  char *path = xasprintf("%s/z.safetensors", dir);
  cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
  sft_writer_free(w);
  SftFile f;
  cr_assert_eq(sft_read(path, &f, err, sizeof err), 0, "%s", err);
  const SftTensor *t = sft_find(&f, "scalar");
  cr_assert_eq(t->ndim, 0);
  cr_assert_eq(t->numel, 1);
  cr_assert_eq(t->nbytes, 8);
  cr_assert_eq(sft_get(t, 0), 2.5);
  const SftTensor *e = sft_find(&f, "empty");
  cr_assert_eq(e->ndim, 2);
  cr_assert_eq(e->shape[0], 0);
  cr_assert_eq(e->shape[1], 5);
  cr_assert_eq(e->numel, 0);
  cr_assert_eq(e->nbytes, 0);
  cr_assert_eq(sft_find(&f, "none")->numel, 0);
  cr_assert_eq(f.nmeta, 0);
  sft_free(&f);
  free(path);
  remove_tree(dir);
}

Test(safetensors, add_f64_as_f32_rounds_to_float) {
  SftWriter *w = sft_writer_new();
  double v[3] = {0.1, 1e40, -3.0};
  sft_add_f64_as(w, "v", SFT_F32, 1, (int64_t[]){3}, v);
  char *dir = temp_dir();
  char *path = xasprintf("%s/v.safetensors", dir);
  cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
  sft_writer_free(w);
  SftFile f;
  cr_assert_eq(sft_read(path, &f, err, sizeof err), 0, "%s", err);
  const SftTensor *t = sft_find(&f, "v");
  cr_assert_eq(t->dtype, SFT_F32);
  cr_assert_eq(sft_get(t, 0), (double)0.1f);
  cr_assert(isinf(sft_get(t, 1)));
  cr_assert_eq(sft_get(t, 2), -3.0);
  sft_free(&f);
  free(path);
  remove_tree(dir);
}

/* The bytes Python's safetensors writes for
 *   save_file({"b": tensor([1., 2.]), "a": tensor([[7]], dtype=int64)}, metadata={"format": "pt"})
 * (with the names sorted, as this writer orders them): compact JSON, padded with spaces. */
Test(safetensors, writer_produces_reference_layout_bytes) {
  SftWriter *w = sft_writer_new();
  float bv[2] = {1.0f, 2.0f};
  int64_t av = 7;
  sft_add(w, "b", SFT_F32, 1, (int64_t[]){2}, bv);
  sft_add(w, "a", SFT_I64, 2, (int64_t[]){1, 1}, &av);
  sft_set_meta(w, "format", "pt");
  char *dir = temp_dir();
  char *path = xasprintf("%s/ref.safetensors", dir);
  cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
  sft_writer_free(w);

  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"a\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
  char header[256];
  size_t h = strlen(json);
  memcpy(header, json, h);
  while (h % 8) header[h++] = ' ';
  header[h] = 0;
  unsigned char data[16];
  memcpy(data, &av, 8);
  memcpy(data + 8, bv, 8);
  size_t want_len;
  unsigned char *want = make_file(header, data, 16, &want_len);

  size_t got_len;
  char *got = read_file(path, &got_len);
  cr_assert_not_null(got);
  cr_assert_eq(got_len, want_len);
  cr_assert_eq(memcmp(got, want, want_len), 0, "bytes differ from the reference layout");
  cr_assert_eq((8 + h) % 8, 0);
  free(got);
  free(want);
  free(path);
  remove_tree(dir);
}

Test(safetensors, writer_escapes_json_strings) {
  SftWriter *w = sft_writer_new();
  float x = 1;
  sft_add(w, "we\"ird\\name\n", SFT_F32, 0, NULL, &x);
  sft_set_meta(w, "src", "cell c {\n  \"quoted\"\t}");
  char *dir = temp_dir();
  char *path = xasprintf("%s/e.safetensors", dir);
  cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
  sft_writer_free(w);
  SftFile f;
  cr_assert_eq(sft_read(path, &f, err, sizeof err), 0, "%s", err);
  cr_assert_not_null(sft_find(&f, "we\"ird\\name\n"));
  cr_assert_str_eq(sft_meta(&f, "src"), "cell c {\n  \"quoted\"\t}");
  sft_free(&f);
  free(path);
  remove_tree(dir);
}

/* A file laid out as Python's reference writer does it (sorted by alignment, unpadded
 * tensors, header padded with spaces), with every dtype that needs converting. */
Test(safetensors, reads_reference_file_built_by_hand) {
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                     "\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[8,24]},"
                     "\"f\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[24,32]},"
                     "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[32,38]},"
                     "\"bf\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[38,42]},"
                     "\"s\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[42,44]},"
                     "\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[44,45]},"
                     "\"c\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[45,46]}}";
  char header[1024];
  size_t h = strlen(json);
  memcpy(header, json, h);
  while (h % 8) header[h++] = ' ';
  header[h] = 0;
  unsigned char data[46];
  double d = -0.5;
  int64_t iv[2] = {-3, 1LL << 40};
  float fv[2] = {0.25f, 8.0f};
  uint16_t hv[3] = {0x3c00, 0xc000, 0x0001}; /* 1, -2, the smallest subnormal 2^-24 */
  uint16_t bfv[2] = {0x3f80, 0xc0a0};        /* 1, -5 */
  int16_t sv = -1234;
  uint8_t uv = 200;
  int8_t cv = -7;
  memcpy(data, &d, 8);
  memcpy(data + 8, iv, 16);
  memcpy(data + 24, fv, 8);
  memcpy(data + 32, hv, 6);
  memcpy(data + 38, bfv, 4);
  memcpy(data + 42, &sv, 2);
  memcpy(data + 44, &uv, 1);
  memcpy(data + 45, &cv, 1);
  size_t len;
  unsigned char *b = make_file(header, data, sizeof data, &len);
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "ref", &f, err, sizeof err), 0, "%s", err);
  cr_assert_eq(f.n, 8);
  cr_assert_str_eq(f.tensors[0].name, "d"); /* header order kept */
  cr_assert_str_eq(sft_meta(&f, "format"), "pt");
  cr_assert_eq(sft_find(&f, "d")->ndim, 0);
  cr_assert_eq(sft_get(sft_find(&f, "d"), 0), -0.5);
  cr_assert_eq(sft_get(sft_find(&f, "i"), 0), -3.0);
  cr_assert_eq(sft_get(sft_find(&f, "i"), 1), 1099511627776.0);
  cr_assert_eq(sft_get(sft_find(&f, "f"), 1), 8.0);
  cr_assert_eq(sft_get(sft_find(&f, "h"), 0), 1.0);
  cr_assert_eq(sft_get(sft_find(&f, "h"), 1), -2.0);
  cr_assert_eq(sft_get(sft_find(&f, "h"), 2), ldexp(1.0, -24));
  cr_assert_eq(sft_get(sft_find(&f, "bf"), 0), 1.0);
  cr_assert_eq(sft_get(sft_find(&f, "bf"), 1), -5.0);
  cr_assert_eq(sft_get(sft_find(&f, "s"), 0), -1234.0);
  cr_assert_eq(sft_get(sft_find(&f, "u"), 0), 200.0);
  cr_assert_eq(sft_get(sft_find(&f, "c"), 0), -7.0);
  cr_assert_null(sft_find(&f, "missing"));
  cr_assert_null(sft_meta(&f, "missing"));
  sft_free(&f);
  free(b);
}

Test(safetensors, f16_special_values) {
  const char *header = "{\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}";
  uint16_t hv[4] = {0x7c00, 0xfc00, 0x7e00, 0x7bff}; /* inf, -inf, nan, 65504 */
  size_t len;
  unsigned char *b = make_file(header, hv, sizeof hv, &len);
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "h", &f, err, sizeof err), 0, "%s", err);
  const SftTensor *t = sft_find(&f, "h");
  cr_assert(isinf(sft_get(t, 0)) && sft_get(t, 0) > 0);
  cr_assert(isinf(sft_get(t, 1)) && sft_get(t, 1) < 0);
  cr_assert(isnan(sft_get(t, 2)));
  cr_assert_eq(sft_get(t, 3), 65504.0);
  sft_free(&f);
  free(b);
}

Test(safetensors, header_with_no_tensors_is_valid) {
  size_t len;
  unsigned char *b = make_file("{}      ", NULL, 0, &len);
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "empty", &f, err, sizeof err), 0, "%s", err);
  cr_assert_eq(f.n, 0);
  sft_free(&f);
  free(b);
}

Test(safetensors, rejects_truncated_header_length) {
  unsigned char b[5] = {8, 0, 0, 0, 0};
  SftFile f;
  cr_assert_eq(sft_parse(b, sizeof b, "t", &f, err, sizeof err), -1);
  cr_assert_not_null(strstr(err, "too short"), "%s", err);
}

Test(safetensors, rejects_header_length_beyond_file) {
  size_t len;
  unsigned char *b = make_file("{}", NULL, 0, &len);
  b[0] = 200;
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "t", &f, err, sizeof err), -1);
  cr_assert_not_null(strstr(err, "header length 200 exceeds"), "%s", err);
  free(b);
}

Test(safetensors, rejects_huge_header_length) {
  size_t len;
  unsigned char *b = make_file("{}", NULL, 0, &len);
  memset(b, 0xff, 8);
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "t", &f, err, sizeof err), -1);
  cr_assert_not_null(strstr(err, "exceeds"), "%s", err);
  free(b);
}

Test(safetensors, rejects_invalid_json) { expect_bad("{\"a\": {\"dtype\": ", 0, "not valid JSON"); }

Test(safetensors, rejects_trailing_bytes_after_json) { expect_bad("{} x", 0, "after its JSON value"); }

Test(safetensors, rejects_nul_in_header) {
  size_t len;
  unsigned char *b = make_file("{}  ", NULL, 0, &len);
  b[10] = 0;
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "t", &f, err, sizeof err), -1);
  cr_assert_not_null(strstr(err, "NUL"), "%s", err);
  free(b);
}

Test(safetensors, rejects_header_that_is_an_array) { expect_bad("[1, 2]", 0, "not a JSON object"); }

Test(safetensors, rejects_tensor_entry_that_is_not_an_object) {
  expect_bad("{\"x\": [1, 2]}", 0, "tensor 'x': entry is not a JSON object");
}

Test(safetensors, rejects_missing_fields) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing \"data_offsets\"");
}

Test(safetensors, rejects_data_offsets_past_the_end) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "run past the end of the data");
}

Test(safetensors, rejects_backwards_data_offsets) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "run backwards");
}

Test(safetensors, rejects_size_mismatch_with_shape) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 12,
             "tensor 'x': data_offsets [0, 12] do not match dtype F32 and shape [2, 3] (24 bytes)");
}

Test(safetensors, rejects_unknown_dtype) {
  expect_bad("{\"x\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16, "unknown dtype 'F128'");
}

Test(safetensors, rejects_dtype_of_wrong_type) {
  expect_bad("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype is not a string");
}

Test(safetensors, rejects_duplicate_tensor_name) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8, "duplicate tensor name 'x'");
}

Test(safetensors, rejects_negative_shape) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "shape entry 0 is negative");
}

Test(safetensors, rejects_fractional_shape) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "not a non-negative integer");
}

Test(safetensors, rejects_overflowing_shape) {
  expect_bad("{\"x\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0, "overflows");
}

Test(safetensors, rejects_too_many_dimensions) {
  expect_bad("{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "9 dimensions");
}

Test(safetensors, rejects_overlapping_data) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8, "overlaps");
}

Test(safetensors, rejects_gap_in_data) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             12, "gap");
}

Test(safetensors, rejects_trailing_data) {
  expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover 4 bytes of data but the file holds 8");
}

Test(safetensors, rejects_metadata_that_is_not_strings) {
  expect_bad("{\"__metadata__\":{\"step\":3}}", 0, "__metadata__ value of 'step' is not a string");
}

Test(safetensors, rejects_metadata_that_is_not_an_object) { expect_bad("{\"__metadata__\":\"x\"}", 0, "__metadata__ is not"); }

Test(safetensors, message_escapes_odd_names) {
  expect_bad("{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "tensor 'a\\x0ab'");
}

/* Every prefix of a valid file is rejected cleanly (ASan checks that nothing is read past it). */
Test(safetensors, rejects_every_truncation) {
  const char *header = "{\"__metadata__\":{\"k\":\"v\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  float v[2] = {1, 2};
  size_t len;
  unsigned char *b = make_file(header, v, sizeof v, &len);
  SftFile f;
  cr_assert_eq(sft_parse(b, len, "t", &f, err, sizeof err), 0, "%s", err);
  sft_free(&f);
  for (size_t n = 0; n < len; n++) {
    unsigned char *cut = xmalloc(n ? n : 1);
    memcpy(cut, b, n);
    err[0] = 0;
    cr_assert_eq(sft_parse(cut, n, "t", &f, err, sizeof err), -1, "accepted a prefix of %zu bytes", n);
    cr_assert_neq(err[0], 0);
    free(cut);
  }
  free(b);
}

/* Random corruption never crashes or reads out of bounds; results are either clean or -1. */
Test(safetensors, survives_random_byte_corruption) {
  const char *header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}";
  unsigned char data[12] = {0};
  size_t len;
  unsigned char *b = make_file(header, data, sizeof data, &len);
  uint64_t x = 12345;
  for (int trial = 0; trial < 3000; trial++) {
    unsigned char *c = xmalloc(len);
    memcpy(c, b, len);
    for (int k = 0; k < 3; k++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      c[(x >> 33) % len] = (unsigned char)(x >> 20);
    }
    SftFile f;
    if (sft_parse(c, len, "t", &f, err, sizeof err) == 0) {
      for (int i = 0; i < f.n; i++)
        for (int64_t j = 0; j < f.tensors[i].numel; j++) (void)sft_get(&f.tensors[i], j);
      sft_free(&f);
    } else cr_assert_neq(err[0], 0);
    free(c);
  }
  free(b);
}

Test(safetensors, read_of_missing_file_fails_with_message) {
  SftFile f;
  cr_assert_eq(sft_read("/nonexistent/dir/x.safetensors", &f, err, sizeof err), -1);
  cr_assert_not_null(strstr(err, "/nonexistent/dir/x.safetensors: cannot read"), "%s", err);
}

Test(safetensors, atomic_write_leaves_no_temporary_file) {
  char *dir = temp_dir();
  char *path = xasprintf("%s/ck.safetensors", dir);
  for (int round = 0; round < 2; round++) { /* the second write replaces the first */
    SftWriter *w = sft_writer_new();
    float v = (float)round;
    sft_add(w, "v", SFT_F32, 0, NULL, &v);
    cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
    sft_writer_free(w);
  }
  cr_assert_eq(count_entries(dir), 1);
  SftFile f;
  cr_assert_eq(sft_read(path, &f, err, sizeof err), 0, "%s", err);
  cr_assert_eq(sft_get(sft_find(&f, "v"), 0), 1.0);
  sft_free(&f);
  free(path);
  remove_tree(dir);
}

Test(safetensors, failed_write_leaves_nothing) {
  char *dir = temp_dir();
  char *path = xasprintf("%s/missing/ck.safetensors", dir);
  SftWriter *w = sft_writer_new();
  float v = 1;
  sft_add(w, "v", SFT_F32, 0, NULL, &v);
  cr_assert_eq(sft_write(w, path, err, sizeof err), -1);
  sft_writer_free(w);
  cr_assert_not_null(strstr(err, path), "%s", err);
  cr_assert_not_null(strstr(err, "No such file or directory"), "%s", err);
  struct stat st;
  cr_assert_neq(stat(path, &st), 0);
  cr_assert_eq(count_entries(dir), 0);
  free(path);
  remove_tree(dir);
}

Test(safetensors, failed_rename_removes_the_temporary_file) {
  char *dir = temp_dir();
  char *path = xasprintf("%s/target", dir);
  cr_assert_eq(mkdir(path, 0755), 0); /* a non-empty directory cannot be renamed over */
  char *inner = xasprintf("%s/keep", path);
  FILE *fp = fopen(inner, "w");
  cr_assert_not_null(fp);
  fclose(fp);
  SftWriter *w = sft_writer_new();
  float v = 1;
  sft_add(w, "v", SFT_F32, 0, NULL, &v);
  cr_assert_eq(sft_write(w, path, err, sizeof err), -1);
  sft_writer_free(w);
  cr_assert_eq(count_entries(dir), 1); /* only the directory itself */
  unlink(inner);
  free(inner);
  free(path);
  remove_tree(dir);
}

Test(safetensors, set_meta_replaces_an_existing_key) {
  SftWriter *w = sft_writer_new();
  sft_set_meta(w, "k", "old");
  sft_set_meta(w, "k", "new");
  char *dir = temp_dir();
  char *path = xasprintf("%s/m.safetensors", dir);
  cr_assert_eq(sft_write(w, path, err, sizeof err), 0, "%s", err);
  sft_writer_free(w);
  SftFile f;
  cr_assert_eq(sft_read(path, &f, err, sizeof err), 0, "%s", err);
  cr_assert_eq(f.nmeta, 1);
  cr_assert_str_eq(sft_meta(&f, "k"), "new");
  sft_free(&f);
  free(path);
  remove_tree(dir);
}

Test(safetensors, adding_a_duplicate_name_is_an_internal_error, .exit_code = 70) {
  SftWriter *w = sft_writer_new();
  float v = 1;
  sft_add(w, "v", SFT_F32, 0, NULL, &v);
  sft_add(w, "v", SFT_F32, 0, NULL, &v);
}

Test(safetensors, dtype_names) {
  cr_assert_str_eq(sft_dtype_name(SFT_F32), "F32");
  cr_assert_str_eq(sft_dtype_name(SFT_F64), "F64");
  cr_assert_str_eq(sft_dtype_name(SFT_BF16), "BF16");
  cr_assert_str_eq(sft_dtype_name(SFT_U16), "U16");
  cr_assert_eq(sft_dtype_size(SFT_F16), 2);
  cr_assert_eq(sft_dtype_size(SFT_I64), 8);
}
