/* test_fsout.c: the one way cellc writes files (runtime/fsout.c): links written through,
 * FIFOs, directories and read-only files refused and left alone, atomic replacement. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support.h"

static char *fresh_dir(void) {
  char *dir = xstrdup("/tmp/cellc_fsout_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  return dir;
}

static char *slurp(const char *path) {
  size_t n;
  char *s = read_file(path, &n);
  cr_assert_not_null(s, "cannot read %s", path);
  return s;
}

static int count_tmp(const char *dir) {
  char *cmd = xasprintf("ls -a %s | grep -c '\\.tmp'", dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  cr_assert(fscanf(p, "%d", &n) == 1);
  pclose(p);
  free(cmd);
  return n;
}

Test(fsout, replaces_a_regular_file_atomically) {
  char *d = fresh_dir(), *p = xasprintf("%s/f", d), err[512];
  cr_assert_eq(fsout_write_file(p, "old", 3, err, sizeof err), 0, "%s", err);
  cr_assert_eq(fsout_write_file(p, "new!", 4, err, sizeof err), 0, "%s", err);
  char *s = slurp(p);
  cr_assert_str_eq(s, "new!");
  cr_assert_eq(count_tmp(d), 0);
  free(s), free(p), free(d);
}

Test(fsout, writes_through_a_symlink_to_its_target) {
  char *d = fresh_dir(), *t = xasprintf("%s/target", d), *l = xasprintf("%s/link", d), err[512];
  cr_assert_eq(fsout_write_file(t, "old", 3, err, sizeof err), 0, "%s", err);
  cr_assert_eq(symlink("target", l), 0);
  cr_assert_eq(fsout_write_file(l, "new", 3, err, sizeof err), 0, "%s", err);
  struct stat st;
  cr_assert_eq(lstat(l, &st), 0);
  cr_assert(S_ISLNK(st.st_mode), "the link is still a link");
  char *s = slurp(t);
  cr_assert_str_eq(s, "new");
  free(s), free(t), free(l), free(d);
}

Test(fsout, refuses_a_fifo_a_directory_and_a_readonly_file) {
  char *d = fresh_dir(), *f = xasprintf("%s/fifo", d), *sub = xasprintf("%s/dir", d), *ro = xasprintf("%s/ro", d);
  char *lf = xasprintf("%s/linkfifo", d), err[512];
  cr_assert_eq(mkfifo(f, 0644), 0);
  cr_assert_eq(mkdir(sub, 0755), 0);
  cr_assert_eq(symlink(f, lf), 0);
  char ro_err[512];
  cr_assert_eq(fsout_write_file(ro, "old", 3, ro_err, sizeof ro_err), 0, "%s", ro_err);
  cr_assert_eq(chmod(ro, 0444), 0);
  const char *paths[] = {f, sub, ro, lf};
  for (int i = 0; i < 4; i++) {
    err[0] = 0;
    cr_assert_eq(fsout_write_file(paths[i], "x", 1, err, sizeof err), -1, "%s was written", paths[i]);
    cr_assert(strstr(err, paths[i]) != NULL, "the message names the path: %s", err);
    cr_assert_null(fsout_append(paths[i], 0, err, sizeof err), "%s was opened for appending", paths[i]);
  }
  struct stat st;
  cr_assert(lstat(f, &st) == 0 && S_ISFIFO(st.st_mode));
  cr_assert(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode));
  char *s = slurp(ro);
  cr_assert_str_eq(s, "old");
  cr_assert_eq(count_tmp(d), 0);
  free(s), free(f), free(sub), free(ro), free(lf), free(d);
}

Test(fsout, appends_through_a_link) {
  char *d = fresh_dir(), *t = xasprintf("%s/m", d), *l = xasprintf("%s/ml", d), err[512];
  cr_assert_eq(fsout_write_file(t, "a\n", 2, err, sizeof err), 0, "%s", err);
  cr_assert_eq(symlink(t, l), 0);
  FILE *f = fsout_append(l, 0, err, sizeof err);
  cr_assert_not_null(f, "%s", err);
  fputs("b\n", f);
  fclose(f);
  char *s = slurp(t);
  cr_assert_str_eq(s, "a\nb\n");
  free(s), free(t), free(l), free(d);
}

static int count_entries(const char *dir, const char *containing) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, containing) != NULL;
  closedir(d);
  return n;
}

/* A directory written whole: a fresh DIR.tmp-XXXXXX beside it (parents made), renamed to a
 * missing or empty DIR; merged file by file into an existing one only when asked. */
Test(fsout, a_directory_written_whole) {
  char err[512];
  char *dir = fresh_dir(), *out = xasprintf("%s/a/b/out", dir);
  char *tmp = fsout_dir_begin(out, err, sizeof err);
  cr_assert_not_null(tmp, "%s", err);
  cr_assert(strstr(tmp, "/a/b/out.tmp-") != NULL, "%s", tmp);
  char *f = xasprintf("%s/one.txt", tmp);
  cr_assert_eq(fsout_write_file(f, "1", 1, err, sizeof err), 0, "%s", err);
  cr_assert_eq(fsout_dir_commit(tmp, out, 0, err, sizeof err), 0, "%s", err);
  char *got = xasprintf("%s/one.txt", out), *text = slurp(got);
  cr_assert_str_eq(text, "1");
  mode_t mask = umask(0);
  umask(mask);
  struct stat st;
  cr_assert_eq(stat(out, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0777 & ~mask, "mode %o: mkdir's, not mkdtemp's 0700", st.st_mode & 0777);
  char *parent = xasprintf("%s/a/b", dir);
  cr_assert_eq(count_entries(parent, ".tmp-"), 0, "the temporary directory is gone");
  free(text), free(f), free(tmp);

  /* again into the existing directory: refused without merge, nothing touched */
  tmp = fsout_dir_begin(out, err, sizeof err);
  f = xasprintf("%s/one.txt", tmp);
  cr_assert_eq(fsout_write_file(f, "2", 1, err, sizeof err), 0, "%s", err);
  char *g = xasprintf("%s/two.txt", tmp);
  cr_assert_eq(fsout_write_file(g, "3", 1, err, sizeof err), 0, "%s", err);
  cr_assert_eq(fsout_dir_commit(tmp, out, 0, err, sizeof err), -1);
  cr_assert(strstr(err, "not an empty directory") != NULL, "%s", err);
  text = slurp(got);
  cr_assert_str_eq(text, "1");
  free(text);
  /* merged: each file replaced, the others kept */
  char *keep = xasprintf("%s/keep.txt", out);
  cr_assert_eq(fsout_write_file(keep, "k", 1, err, sizeof err), 0, "%s", err);
  cr_assert_eq(fsout_dir_commit(tmp, out, 1, err, sizeof err), 0, "%s", err);
  fsout_remove_dir(tmp);
  cr_assert_eq(count_entries(parent, ".tmp-"), 0, "the temporary directory is removed");
  text = slurp(got);
  cr_assert_str_eq(text, "2");
  free(text);
  char *two = xasprintf("%s/two.txt", out);
  text = slurp(two);
  cr_assert_str_eq(text, "3");
  free(text);
  text = slurp(keep);
  cr_assert_str_eq(text, "k");
  free(text);

  /* an existing file where the directory goes: refused, the file untouched */
  char *file = xasprintf("%s/afile", dir);
  cr_assert_eq(fsout_write_file(file, "x", 1, err, sizeof err), 0, "%s", err);
  char *t2 = fsout_dir_begin(file, err, sizeof err);
  cr_assert_not_null(t2, "%s", err);
  cr_assert_eq(fsout_dir_commit(t2, file, 1, err, sizeof err), -1);
  cr_assert(strstr(err, "not a directory") != NULL, "%s", err);
  fsout_remove_dir(t2);
  text = slurp(file);
  cr_assert_str_eq(text, "x");
  free(text);
  cr_assert_eq(count_entries(dir, ".tmp-"), 0);

  /* merged into an empty directory: the directory stays (a link to one is written through) */
  char *kept = xasprintf("%s/kept", dir);
  cr_assert_eq(mkdir(kept, 0700), 0);
  struct stat before, after;
  cr_assert_eq(stat(kept, &before), 0);
  char *t4 = fsout_dir_begin(kept, err, sizeof err);
  char *k4 = xasprintf("%s/k.txt", t4);
  cr_assert_eq(fsout_write_file(k4, "k", 1, err, sizeof err), 0, "%s", err);
  cr_assert_eq(fsout_dir_commit(t4, kept, 1, err, sizeof err), 0, "%s", err);
  fsout_remove_dir(t4);
  cr_assert_eq(stat(kept, &after), 0);
  cr_assert(before.st_ino == after.st_ino && (after.st_mode & 0777) == 0700, "the directory was replaced");
  free(kept), free(t4), free(k4);

  /* without merge, an empty directory is replaced whole */
  char *empty = xasprintf("%s/empty", dir);
  cr_assert_eq(mkdir(empty, 0777), 0);
  char *t3 = fsout_dir_begin(empty, err, sizeof err);
  char *h = xasprintf("%s/h.txt", t3);
  cr_assert_eq(fsout_write_file(h, "h", 1, err, sizeof err), 0, "%s", err);
  cr_assert_eq(fsout_dir_commit(t3, empty, 0, err, sizeof err), 0, "%s", err);
  char *hh = xasprintf("%s/h.txt", empty);
  text = slurp(hh);
  cr_assert_str_eq(text, "h");
  free(text);
  free(t2), free(t3), free(h), free(hh), free(empty), free(file), free(two), free(keep), free(g), free(f), free(tmp);
  free(parent), free(got), free(out), free(dir);
}
