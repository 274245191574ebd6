/* fsout.c: writing output files without clobbering what is not ours (see fsout.h). */
#include "fsout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

static void fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/* mkdir -p of the first `len` bytes of `path` (messages name `path`). */
static int make_dirs_n(const char *path, size_t len, char *err, size_t errlen) {
  while (len > 1 && path[len - 1] == '/') len--;
  char *p = xmalloc(len + 1);
  memcpy(p, path, len);
  p[len] = 0;
  int rc = 0;
  for (size_t i = 1; i <= len && rc == 0; i++) {
    if (i < len && (p[i] != '/' || p[i - 1] == '/')) continue; /* each prefix ending a component, once */
    char keep = p[i];
    p[i] = 0;
    struct stat st;
    if (stat(p, &st) != 0 && errno == ENOENT && mkdir(p, 0777) != 0 && errno != EEXIST)
      rc = (fail(err, errlen, "%s: cannot create directory '%s': %s", path, p, strerror(errno)), -1);
    else if (stat(p, &st) != 0)
      rc = (fail(err, errlen, "%s: cannot create directory '%s': %s", path, p, strerror(errno)), -1);
    else if (!S_ISDIR(st.st_mode))
      rc = (fail(err, errlen, "%s: cannot create directory '%s': it is %s, not a directory", path, p,
                 S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode)), -1);
    p[i] = keep;
  }
  free(p);
  return rc;
}

int fsout_make_dirs(const char *dir, char *err, size_t errlen) { return make_dirs_n(dir, strlen(dir), err, errlen); }

int fsout_make_parents(const char *path, char *err, size_t errlen) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;  /* "a/b/" names b, whose parent is a */
  while (n > 0 && path[n - 1] != '/') n--;  /* the last component */
  return n == 0 ? 0 : make_dirs_n(path, n, err, errlen);
}

char *fsout_target(const char *path, char *err, size_t errlen) {
  char *cur = xstrdup(path);
  for (int hops = 0;; hops++) {
    struct stat st;
    if (lstat(cur, &st) != 0) {
      /* a new file: a missing directory, or a file where one should be, fails at open (and a
       * command's fsout_make_parents names it first) */
      if (errno == ENOENT || errno == ENOTDIR) return cur;
      fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
      free(cur);
      return NULL;
    }
    if (S_ISLNK(st.st_mode)) {
      char link[PATH_MAX];
      ssize_t n = hops < 40 ? readlink(cur, link, sizeof link - 1) : -1;
      if (n < 0) {
        fail(err, errlen, "%s: cannot write: %s", path, hops < 40 ? strerror(errno) : "too many levels of symbolic links");
        free(cur);
        return NULL;
      }
      link[n] = 0;
      const char *slash = strrchr(cur, '/');
      char *next = link[0] == '/' || !slash ? xstrdup(link) : xasprintf("%.*s/%s", (int)(slash - cur), cur, link);
      free(cur);
      cur = next;
      continue;
    }
    const char *why = NULL;
    if (!S_ISREG(st.st_mode)) why = kind_of(st.st_mode);
    else if (!(st.st_mode & 0222) || access(cur, W_OK) != 0) why = "a read-only file";
    if (!why) return cur;
    if (hops) fail(err, errlen, "%s: cannot write: it links to %s, %s; left as it is", path, cur, why);
    else if (S_ISREG(st.st_mode)) fail(err, errlen, "%s: cannot write: it is %s; left as it is", path, why);
    else fail(err, errlen, "%s: cannot write: it is %s, not a regular file; left as it is", path, why);
    free(cur);
    return NULL;
  }
}

int fsout_begin(FsOut *o, const char *path, char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  o->fd = -1;
  o->target = fsout_target(path, err, errlen);
  if (!o->target) return -1;
  o->path = xstrdup(path);
  o->tmp = xasprintf("%s.tmp.XXXXXX", o->target);
  sigset_t hold;
  sigemptyset(&hold);
  sigaddset(&hold, SIGINT);
  sigaddset(&hold, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &hold, &o->held);
  o->fd = mkostemp(o->tmp, O_CLOEXEC);
  if (o->fd < 0) {
    fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    pthread_sigmask(SIG_SETMASK, &o->held, NULL);
    free(o->tmp), free(o->target), free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    return -1;
  }
  /* the new file keeps the mode of the one it replaces (0644 for a new one, less the umask) */
  struct stat st;
  mode_t mode = 0644;
  if (stat(o->target, &st) == 0) mode = st.st_mode & 07777;
  else {
    mode_t mask = umask(0);
    umask(mask);
    mode &= ~mask;
  }
  (void)fchmod(o->fd, mode);
  return 0;
}

static void fsout_free(FsOut *o) {
  pthread_sigmask(SIG_SETMASK, &o->held, NULL);
  free(o->path), free(o->target), free(o->tmp);
  memset(o, 0, sizeof *o);
  o->fd = -1;
}

void fsout_abort(FsOut *o) {
  if (o->fd >= 0) close(o->fd);
  if (o->tmp) unlink(o->tmp);
  fsout_free(o);
}

/* After the rename, make the directory entry durable too (best effort). */
static void fsync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? xasprintf("%.*s", (int)(slash - path + 1), path) : xstrdup(".");
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(dir);
}

int fsout_commit(FsOut *o, char *err, size_t errlen) {
  int rc = 0;
  while (fsync(o->fd) != 0 && rc == 0)
    if (errno != EINTR) rc = (fail(err, errlen, "%s: cannot write (fsync): %s", o->path, strerror(errno)), -1);
  if (close(o->fd) != 0 && rc == 0 && errno != EINTR)
    rc = (fail(err, errlen, "%s: cannot write (close): %s", o->path, strerror(errno)), -1);
  o->fd = -1;
  /* the target may have become something else since fsout_begin looked at it */
  if (rc == 0) {
    char *again = fsout_target(o->target, err, errlen);
    if (!again) rc = -1;
    free(again);
  }
  if (rc == 0 && rename(o->tmp, o->target) != 0)
    rc = (fail(err, errlen, "%s: cannot write (rename): %s", o->path, strerror(errno)), -1);
  if (rc != 0) unlink(o->tmp);
  else fsync_dir_of(o->target);
  fsout_free(o);
  return rc;
}

int fsout_write_all(int fd, const void *p, size_t n) {
  const char *s = p;
  while (n) {
    ssize_t k = write(fd, s, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    s += k;
    n -= (size_t)k;
  }
  return 0;
}

int fsout_write_file(const char *path, const void *data, size_t n, char *err, size_t errlen) {
  FsOut o;
  if (fsout_begin(&o, path, err, errlen) < 0) return -1;
  if (fsout_write_all(o.fd, data, n) < 0) {
    fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    fsout_abort(&o);
    return -1;
  }
  return fsout_commit(&o, err, errlen);
}

FILE *fsout_append(const char *path, int truncate, char *err, size_t errlen) {
  char *target = fsout_target(path, err, errlen);
  if (!target) return NULL;
  /* O_NOFOLLOW and O_NONBLOCK: what appeared there since the check is neither followed nor
   * waited on; fstat then confirms a regular file */
  int fd = open(target, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd < 0) fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    else fail(err, errlen, "%s: cannot write: it is %s, not a regular file; left as it is", path, kind_of(st.st_mode));
    if (fd >= 0) close(fd);
    free(target);
    return NULL;
  }
  free(target);
  fcntl(fd, F_SETFL, O_APPEND);
  if (truncate && ftruncate(fd, 0) != 0) {
    fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "a");
  if (!f) {
    fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

char *fsout_dir_begin(const char *dir, char *err, size_t errlen) {
  if (fsout_make_parents(dir, err, errlen) < 0) return NULL;
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  char *tmp = xasprintf("%.*s.tmp-XXXXXX", (int)n, dir);
  if (!mkdtemp(tmp)) {
    fail(err, errlen, "%s: cannot create a directory beside it: %s", dir, strerror(errno));
    free(tmp);
    return NULL;
  }
  /* it becomes `dir`: the mode mkdir(2) gives (0777 less the umask), not mkdtemp's 0700 */
  mode_t mask = umask(0);
  umask(mask);
  (void)chmod(tmp, 0777 & ~mask);
  return tmp;
}

int fsout_dir_commit(const char *tmp, const char *dir, int merge, char *err, size_t errlen) {
  struct stat st, lst;
  bool exists = lstat(dir, &lst) == 0;
  if (exists && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
    return fail(err, errlen, "%s: exists and is not a directory", dir), -1;
  /* a missing directory is the temporary one renamed; without merge, so is an empty one (not a
   * link to one): rename(2) replaces an empty directory and refuses a full one */
  if (!exists || (!merge && S_ISDIR(lst.st_mode))) {
    if (rename(tmp, dir) == 0) return 0;
    if (!exists || (errno != ENOTEMPTY && errno != EEXIST))
      return fail(err, errlen, "%s: cannot rename into place: %s", dir, strerror(errno)), -1;
  }
  if (!merge) return fail(err, errlen, "%s: exists and is not an empty directory", dir), -1;
  DIR *d = opendir(tmp);
  if (!d) return fail(err, errlen, "%s: cannot read: %s", tmp, strerror(errno)), -1;
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *from = xasprintf("%s/%s", tmp, e->d_name), *to = xasprintf("%s/%s", dir, e->d_name);
    if (rename(from, to) < 0) rc = (fail(err, errlen, "%s: cannot write: %s", to, strerror(errno)), -1);
    free(from), free(to);
  }
  closedir(d);
  return rc;
}

void fsout_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char *p = xasprintf("%s/%s", dir, e->d_name);
      unlink(p);
      free(p);
    }
    closedir(d);
  }
  rmdir(dir);
}
