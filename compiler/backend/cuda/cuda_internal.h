/* cuda_internal.h: helpers shared by the CUDA call layer and its emulator, not by the back
 * end: subprocesses, temporary directories, the embedded headers. */
#ifndef CELLC_CUDA_INTERNAL_H
#define CELLC_CUDA_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* snprintf into err (errlen may be 0); returns -1 so callers can `return cuda_fail(...)`. */
int cuda_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Run argv[0] (searched in PATH) with stdout and stderr captured together into *output
 * (malloc'd, NUL-terminated). Returns the exit status, or -1 when it could not run or was
 * killed by a signal (*output then says why). */
int cuda_run_tool(char *const argv[], char **output);

/* A fresh private directory under $TMPDIR (else /tmp), malloc'd; NULL on failure. */
char *cuda_make_temp_dir(const char *prefix);
/* Remove a directory and the plain files directly in it. */
void cuda_remove_dir(const char *dir);

/* Open the library at path and look up every symbol of one part of the table (0 the
 * driver, 1 NVRTC, 2 cuBLAS): tests check the names against the toolkit's libraries. */
int cuda_api_probe(const char *path, int part, char *err, size_t errlen);

/* The kernel-side headers, embedded in the binary at build time (cuda_headers.c). */
extern const char cellc_cuda_prelude_h[];
extern const char cellc_emu_kernel_h[];
/* The text cuda_emit.c writes into every P.cu: the glue kernels, the launch shapes, the plan
 * table's format, the CUDA host's executor and its runtime-API operations. */
extern const char cellc_emit_kernels_h[];
extern const char cellc_launch_h[];
extern const char cellc_plan_table_h[];
extern const char cellc_exec_h[];
extern const char cellc_emit_host_h[];
extern const char cellc_train_cu[]; /* the training kernels (cuda_ops.c) */
extern const char cellc_chunk_h[], cellc_chunk_cu[]; /* the chunk op's (cuda_chunk.c) */

#endif
