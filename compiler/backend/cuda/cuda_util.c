/* cuda_util.c: subprocesses and temporary directories for the CUDA
 * call layer and its emulator. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"
#include "cuda_internal.h"

extern char **environ;

int cuda_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Everything readable from fd until end of file, NUL-terminated. */
static char *read_all(int fd) {
  size_t n = 0, cap = 4096;
  char *buf = xmalloc(cap);
  for (;;) {
    if (cap - n < 2048) buf = xrealloc(buf, cap *= 2);
    ssize_t got = read(fd, buf + n, cap - n - 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    n += (size_t)got;
  }
  buf[n] = 0;
  return buf;
}

/* The environment with messages in plain ASCII (LC_ALL=C): logs read the same everywhere. */
static char **c_locale_env(void) {
  int n = 0;
  while (environ[n]) n++;
  char **env = xcalloc((size_t)n + 2, sizeof *env);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (strncmp(environ[i], "LC_ALL=", 7) && strncmp(environ[i], "LANGUAGE=", 9)) env[k++] = environ[i];
  env[k++] = "LC_ALL=C";
  return env;
}

int cuda_run_tool(char *const argv[], char **output) {
  int fds[2];
  *output = NULL;
  if (pipe(fds) != 0) {
    *output = xasprintf("%s: pipe: %s", argv[0], strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  pid_t pid;
  char **env = c_locale_env();
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
  free(env);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    *output = xasprintf("%s: cannot run: %s", argv[0], strerror(rc));
    return -1;
  }
  *output = read_all(fds[0]);
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  char *more = xasprintf("%s%s killed by signal %d", *output, argv[0], WTERMSIG(status));
  free(*output);
  *output = more;
  return -1;
}

char *cuda_make_temp_dir(const char *prefix) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  char *dir = xasprintf("%s/%s-XXXXXX", base, prefix);
  if (!mkdtemp(dir)) {
    free(dir);
    return NULL;
  }
  return dir;
}

void cuda_remove_dir(const char *dir) { fsout_remove_dir(dir); }
