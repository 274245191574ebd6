/* safetensors.h: read and write safetensors files (8-byte little-endian header
 * length, a JSON header, then the raw little-endian data), for `cellc run` and checkpoints. */
#ifndef CELLC_SAFETENSORS_H
#define CELLC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { SFT_F32, SFT_F64, SFT_I32, SFT_I64, SFT_U8, SFT_U16, SFT_I8, SFT_I16, SFT_F16, SFT_BF16 } SftDtype;

#define SFT_MAX_DIMS 8

typedef struct SftTensor {
  char *name;
  SftDtype dtype;
  int ndim;                      /* 0 .. SFT_MAX_DIMS */
  int64_t shape[SFT_MAX_DIMS];   /* (ndim) */
  int64_t numel;                 /* product of shape; 1 for a 0-dimensional tensor */
  size_t nbytes;                 /* numel * dtype size */
  void *data;                    /* (numel) elements of dtype, owned, suitably aligned */
} SftTensor;

typedef struct SftFile {
  SftTensor *tensors;            /* (n), in header order */
  int n;
  char **meta_keys, **meta_vals; /* (nmeta): the header's "__metadata__" */
  int nmeta;
} SftFile;

/* 0 on success; otherwise -1 with a one-line message in err and *out left empty.
 * Never reads outside the input, whatever the input. */
int sft_read(const char *path, SftFile *out, char *err, size_t errlen);
/* The same, from memory; `what` names the input in messages. */
int sft_parse(const void *bytes, size_t len, const char *what, SftFile *out, char *err, size_t errlen);
const SftTensor *sft_find(const SftFile *f, const char *name); /* NULL if absent */
const char *sft_meta(const SftFile *f, const char *key);       /* NULL if absent */
double sft_get(const SftTensor *t, int64_t i); /* element i (0 <= i < numel) as a double */
void sft_free(SftFile *f);
const char *sft_dtype_name(SftDtype d); /* "F32", "F64", ... */
size_t sft_dtype_size(SftDtype d);      /* bytes per element */

typedef struct SftWriter SftWriter;
SftWriter *sft_writer_new(void);
/* Adds a tensor; the data is copied. Names are unique (a duplicate is a CHECK failure). */
void sft_add(SftWriter *w, const char *name, SftDtype dtype, int ndim, const int64_t *shape, const void *data);
/* Adds doubles converted to dtype, which must be SFT_F32 or SFT_F64. */
void sft_add_f64_as(SftWriter *w, const char *name, SftDtype dtype, int ndim, const int64_t *shape,
                    const double *data);
void sft_set_meta(SftWriter *w, const char *key, const char *value); /* replaces an existing key */
/* Writes atomically through fsout (a temporary file next to PATH's target, fsync, rename; a
 * symbolic link is written through, a path that is not a regular file is refused). Tensors
 * sorted by name, header padded with spaces to a multiple of 8. 0 ok; -1 with a message in err,
 * and then nothing is left at PATH (an earlier file there is untouched) and the temporary file
 * is removed. */
int sft_write(SftWriter *w, const char *path, char *err, size_t errlen);
void sft_writer_free(SftWriter *w);

#endif
