/* fsout.h: the one way cellc writes a file (run --out, checkpoints, metrics, config): an
 * existing symbolic link is written through to its target; an existing path that is not a
 * regular file (a directory, FIFO, device, socket) or is read-only is refused and left alone
 * (the caller exits 3); a whole file is replaced atomically: a temporary file in the target's
 * own directory, fsync, rename over the target. A command creates the missing directories of
 * the output it is asked for (run, train, diag, emit --out) with fsout_make_dirs or
 * fsout_make_parents, as `mkdir -p` does: one rule for every command. Below that, a missing
 * directory is an error (a run directory removed under a running train is not made again). */
#ifndef CELLC_FSOUT_H
#define CELLC_FSOUT_H

#include <stddef.h>
#include <stdio.h>
#include <signal.h>
#include <sys/types.h>

/* A file being written: bytes go to `fd` (the temporary file) until fsout_commit. */
typedef struct FsOut {
  char *path;   /* as named by the user, for messages */
  char *target; /* the file replaced: `path`, or the file its links lead to */
  char *tmp;    /* the temporary file, in target's directory */
  int fd;
  sigset_t held; /* the signal mask before fsout_begin: SIGINT and SIGTERM wait until the end */
} FsOut;

/* `dir` and every missing directory above it, created as `mkdir -p` does (mode 0777 less the
 * umask; an existing directory, or a link to one, is fine): 0, or -1 with "DIR: cannot create
 * directory 'A': ..." in err, naming the one that failed (a file in the way: "not a directory").
 * Directories created before a failure stay, as with mkdir -p. */
int fsout_make_dirs(const char *dir, char *err, size_t errlen);
/* The same for the directories above `path` (its parent and up), not `path` itself. */
int fsout_make_parents(const char *path, char *err, size_t errlen);
/* The file that writing `path` would replace (symbolic links followed; it need not exist):
 * a malloc'd path, or NULL with "PATH: ..." in err when the path is refused. */
char *fsout_target(const char *path, char *err, size_t errlen);
/* Opens the temporary file: 0, or -1 with "PATH: ..." in err (nothing created). From here to
 * fsout_commit or fsout_abort, SIGINT and SIGTERM are held back: a signal cannot leave a
 * temporary file behind (it is delivered after). */
int fsout_begin(FsOut *o, const char *path, char *err, size_t errlen);
/* fsync, close and rename over the target: 0, or -1 with a message in err, and then the
 * temporary file is removed and the target untouched. Frees `o` either way. */
int fsout_commit(FsOut *o, char *err, size_t errlen);
/* Removes the temporary file; the target is untouched. */
void fsout_abort(FsOut *o);
/* write(2) of all n bytes, through EINTR: 0, or -1 with errno. */
int fsout_write_all(int fd, const void *p, size_t n);
/* The whole of `data` as the new contents of `path`, atomically. */
int fsout_write_file(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* A directory written whole (emit --out, diag --out): fsout_dir_begin makes a fresh private
 * directory `DIR.tmp-XXXXXX` beside `dir` (the missing directories above `dir` created first)
 * and returns it (malloc'd; NULL with a message in err); the caller writes its files there;
 * fsout_dir_commit puts them in place: a rename of the whole directory to `dir` when `dir` does
 * not exist (or, without `merge`, is an empty directory), else (`merge`, and `dir` a directory)
 * each file renamed into `dir`, replacing its old version whole and leaving other files alone.
 * `dir` gets mkdir's mode (0777 less the umask). 0, or -1 with a message in err: `dir` is not a
 * directory, or not empty without `merge`, or a rename failed.
 * The temporary directory is gone after a commit that renamed it; fsout_remove_dir removes it
 * otherwise. */
char *fsout_dir_begin(const char *dir, char *err, size_t errlen);
int fsout_dir_commit(const char *tmp, const char *dir, int merge, char *err, size_t errlen);
/* Removes a directory and the plain files directly in it (a temporary directory's cleanup);
 * no message. */
void fsout_remove_dir(const char *dir);
/* `path` opened for appending (created when absent; truncated first when `truncate`), with the
 * same refusals; NULL with a message in err. */
FILE *fsout_append(const char *path, int truncate, char *err, size_t errlen);

#endif
