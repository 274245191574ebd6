/* ptxas.c: the resource check of generated kernels (ptxas.h), a helper of the CUDA tests. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support.h"
#include "cuda_internal.h"
#include "ptxas.h"

/* $CUDA_HOME/bin/ptxas, /usr/local/cuda/bin/ptxas, else "ptxas" from PATH. */
static char *find_ptxas(void) {
  const char *home = getenv("CUDA_HOME");
  if (home && *home) {
    char *p = xasprintf("%s/bin/ptxas", home);
    if (access(p, X_OK) == 0) return p;
    free(p);
  }
  if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) return xstrdup("/usr/local/cuda/bin/ptxas");
  return xstrdup("ptxas");
}

/* The number before `unit` in line ("Used 10 registers" -> 10); 0 when absent. */
static int number_before(const char *line, const char *unit) {
  const char *u = strstr(line, unit);
  if (!u) return 0;
  const char *p = u;
  while (p > line && p[-1] == ' ') p--;
  while (p > line && p[-1] >= '0' && p[-1] <= '9') p--;
  return atoi(p);
}

/* ptxas -v reports, per kernel:
 *   ptxas info    : Compiling entry function 'saxpy' for 'sm_80'
 *       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 10 registers, 1024 bytes smem, 376 bytes cmem[0] */
static void parse_report(const char *text, CudaKernelResources **out, int *n_out) {
  int n = 0, cap = 0;
  CudaKernelResources *ks = NULL;
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char *l = xasprintf("%.*s", (int)len, line);
    const char *q = strstr(l, "Compiling entry function '");
    if (q) {
      CudaKernelResources k = {0};
      q += strlen("Compiling entry function '");
      const char *e = strchr(q, '\'');
      snprintf(k.name, sizeof k.name, "%.*s", (int)(e ? e - q : (long)strlen(q)), q);
      VEC_PUSH(ks, n, cap, k);
    } else if (n > 0 && strstr(l, "bytes stack frame")) {
      ks[n - 1].stack_bytes = number_before(l, "bytes stack frame");
      ks[n - 1].spill_store_bytes = number_before(l, "bytes spill stores");
      ks[n - 1].spill_load_bytes = number_before(l, "bytes spill loads");
    } else if (n > 0 && strstr(l, "Used ") && strstr(l, "registers")) {
      ks[n - 1].registers = number_before(l, "registers");
      ks[n - 1].shared_bytes = number_before(l, "bytes smem");
    }
    free(l);
    line = end ? end + 1 : NULL;
  }
  *out = ks;
  *n_out = n;
}

int cuda_ptxas_check(const char *ptx, const char *arch, CudaKernelResources **out, int *n_out,
                     char *err, size_t errlen) {
  *out = NULL;
  *n_out = 0;
  char *dir = cuda_make_temp_dir("cellc-ptxas");
  if (!dir) return cuda_fail(err, errlen, "ptxas: cannot make a temporary directory");
  char *file = xasprintf("%s/module.ptx", dir);
  char *arch_opt = xasprintf("-arch=%s", arch);
  char *ptxas = find_ptxas();
  int rc = -1;
  if (fsout_write_file(file, ptx, strlen(ptx), NULL, 0) != 0) {
    cuda_fail(err, errlen, "ptxas: cannot write %s", file);
  } else {
    char *argv[] = {ptxas, "-v", arch_opt, "-o", "/dev/null", file, NULL};
    char *output;
    int status = cuda_run_tool(argv, &output);
    if (status != 0) {
      cuda_fail(err, errlen, "%s %s failed (exit %d):\n%s", ptxas, arch_opt, status, output);
    } else {
      parse_report(output, out, n_out);
      rc = 0;
    }
    free(output);
  }
  free(ptxas);
  free(arch_opt);
  free(file);
  cuda_remove_dir(dir);
  free(dir);
  return rc;
}
