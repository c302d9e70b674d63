/*
 * The libc file API on upfs files, with kernel semantics: run as
 *   upfs run --dir DIR -- preload_api_test DIR
 * (tests/CMakeLists.txt, ctest label "preload"). Every check is also made
 * with DIR's files known to be upfs files, so it fails if the library does
 * not intercept. Exit status 0 only if every check passed. The attribute
 * and time calls are in preload_api_attrs.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utime.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload_api_check.h"

extern char **environ;

int g_failures;
const char *g_dir;

char *path_of(const char *name) {
  static char buf[8][4096];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 4096, "%s/%s", g_dir, name);
  return p;
}

/* The host file's first bytes, read around the library (the raw syscall). */
int host_is_upfs(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char m[4] = {0};
  long n = syscall(SYS_pread64, fd, m, 4, 0);
  syscall(SYS_close, fd);
  return n == 4 && memcmp(m, "UPFS", 4) == 0;
}

/* The host file's mode, around the library: a upfs file keeps its marker
 * (S_ISVTX) through chmod only if the library intercepted the call. */
int host_marked(const char *path) {
  struct stat st;
  return syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) == 0 && (st.st_mode & S_ISVTX);
}

int make_file(const char *name, const char *content) {
  int fd = open(path_of(name), O_CREAT | O_TRUNC | O_RDWR, 0644);
  if (fd < 0) return -1;
  if (content && write(fd, content, strlen(content)) != (ssize_t)strlen(content)) return -1;
  return fd;
}

static void test_dup_shares_offset(void) {
  int fd = make_file("dup", "0123456789");
  CHECK("dup: file is upfs", fd >= 0 && host_is_upfs(path_of("dup")));
  int d = dup(fd);
  lseek(fd, 2, SEEK_SET);
  char c = 0;
  CHECK("dup: duplicate shares the offset", read(d, &c, 1) == 1 && c == '2');
  CHECK("dup: original sees the advance", lseek(fd, 0, SEEK_CUR) == 3);
  int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  CHECK("F_DUPFD_CLOEXEC: >= 100 and close-on-exec",
        d2 >= 100 && (fcntl(d2, F_GETFD) & FD_CLOEXEC));
  int fl = fcntl(d2, F_GETFL);
  CHECK("F_SETFL O_APPEND via a duplicate", fcntl(d2, F_SETFL, fl | O_APPEND) == 0);
  CHECK("F_GETFL of the original shows O_APPEND", fcntl(fd, F_GETFL) & O_APPEND);
  lseek(fd, 0, SEEK_SET);
  CHECK("append through the original", write(fd, "X", 1) == 1);
  struct stat st;
  CHECK("fstat size after append", fstat(fd, &st) == 0 && st.st_size == 11);
  int d3 = dup2(fd, 50);
  close(fd);
  CHECK("dup2 survives close of the original", d3 == 50 && pread(d3, &c, 1, 10) == 1 && c == 'X');
  close(d);
  close(d2);
  close(d3);
}

static void test_flock(void) {
  int a = make_file("flock", "x");
  int b = open(path_of("flock"), O_RDWR);
  CHECK("flock: both upfs", a >= 0 && b >= 0 && host_is_upfs(path_of("flock")));
  CHECK("flock LOCK_EX", flock(a, LOCK_EX) == 0);
  errno = 0;
  CHECK("flock: second description blocked (EWOULDBLOCK)",
        flock(b, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
  int a2 = dup(a);
  CHECK("flock: a duplicate shares the lock", flock(a2, LOCK_EX | LOCK_NB) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    int c = open(path_of("flock"), O_RDWR);
    _exit(flock(c, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK ? 0 : 1);
  }
  int ws;
  waitpid(pid, &ws, 0);
  CHECK("flock: another process is blocked", WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  close(a);
  close(a2);
  CHECK("flock: closing the last duplicate releases", flock(b, LOCK_EX | LOCK_NB) == 0);
  CHECK("flock LOCK_UN", flock(b, LOCK_UN) == 0);
  close(b);
}

/* POSIX record locks act on the host file; a stat or open of the path by
 * the library must not drop them (closing a descriptor would). */
static void test_record_locks(void) {
  int fd = make_file("lock", "0123456789");
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4};
  CHECK("F_SETLK write lock", fcntl(fd, F_SETLK, &fl) == 0);
  struct stat st;
  CHECK("stat of the locked file", stat(path_of("lock"), &st) == 0 && st.st_size == 10);
  pid_t pid = fork();
  if (pid == 0) {
    int c = open(path_of("lock"), O_RDWR);
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4};
    if (fcntl(c, F_GETLK, &q) != 0) _exit(2);
    if (q.l_type == F_UNLCK || q.l_pid != getppid()) _exit(3);
    struct flock t = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    _exit(fcntl(c, F_SETLK, &t) == -1 && (errno == EAGAIN || errno == EACCES) ? 0 : 4);
  }
  int ws;
  waitpid(pid, &ws, 0);
  CHECK("lock held after stat (F_GETLK and F_SETLK in a child)",
        WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  close(fd);
}

/* The kernel descriptor of a upfs file is read-only (the access mode the
 * program asked for is upfs's): a write that bypasses the library fails
 * instead of overwriting upfs structures, and the lock calls still have
 * the kernel's semantics. */
static void test_kernel_descriptor(void) {
  int fd = make_file("kd", "0123456789");
  CHECK("F_GETFL reports O_RDWR", (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
  errno = 0;
  CHECK("a raw write(2) on a upfs descriptor fails (EBADF)",
        syscall(SYS_write, fd, "XYZS", 4) == -1 && errno == EBADF);
  CHECK("a raw pwrite64(2) fails (EBADF)", syscall(SYS_pwrite64, fd, "XYZS", 4, 0) == -1 && errno == EBADF);
  CHECK("a raw ftruncate(2) fails", syscall(SYS_ftruncate, fd, 0) == -1);
  char buf[16] = {0};
  CHECK("the file is intact", pread(fd, buf, 10, 0) == 10 && memcmp(buf, "0123456789", 10) == 0);
  /* dprintf writes from inside glibc, past the interposers. */
  CHECK("dprintf (glibc-internal write) fails rather than writing raw", dprintf(fd, "raw") < 0);
  CHECK("still intact", pread(fd, buf, 10, 0) == 10 && memcmp(buf, "0123456789", 10) == 0);

  /* lockf goes through fcntl inside glibc. */
  CHECK("lockf F_TLOCK", lseek(fd, 0, SEEK_SET) == 0 && lockf(fd, F_TLOCK, 4) == 0);
  CHECK("lockf F_TEST by the owner", lockf(fd, F_TEST, 4) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    int c = open(path_of("kd"), O_RDWR);
    _exit(c >= 0 && lockf(c, F_TEST, 4) == -1 && (errno == EACCES || errno == EAGAIN) ? 0 : 1);
  }
  int ws;
  waitpid(pid, &ws, 0);
  CHECK("lockf F_TEST in another process sees the lock", WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  CHECK("lockf F_ULOCK", lockf(fd, F_ULOCK, 4) == 0);

  /* OFD locks belong to the description: two in one process conflict. */
  int other = open(path_of("kd"), O_RDWR);
  struct flock wl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
  CHECK("F_OFD_SETLK", fcntl(fd, F_OFD_SETLK, &wl) == 0);
  struct flock wl2 = wl;
  CHECK("another description's F_OFD_SETLK conflicts",
        fcntl(other, F_OFD_SETLK, &wl2) == -1 && (errno == EAGAIN || errno == EACCES));
  struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
  CHECK("F_OFD unlock", fcntl(fd, F_OFD_SETLK, &un) == 0);
  CHECK("then the other takes it", fcntl(other, F_OFD_SETLK, &wl2) == 0);
  close(other);

  int ro = open(path_of("kd"), O_RDONLY);
  struct flock w = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
  errno = 0;
  CHECK("a write lock on a read-only descriptor fails EBADF", fcntl(ro, F_SETLK, &w) == -1 && errno == EBADF);
  close(ro);
  close(fd);
}

static void test_rename_unlink(void) {
  int fd = make_file("ren.a", "aaaa");
  close(fd);
  fd = make_file("ren.b", "bbbb");
  close(fd);
  struct stat before;
  stat(path_of("ren.b"), &before);
  CHECK("rename over a upfs file", rename(path_of("ren.a"), path_of("ren.b")) == 0);
  char buf[8] = {0};
  fd = open(path_of("ren.b"), O_RDONLY);
  CHECK("renamed content", read(fd, buf, 8) == 4 && memcmp(buf, "aaaa", 4) == 0);
  close(fd);
  /* The replaced file's shared state is gone from /dev/shm. */
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "ls /dev/shm | grep -q -- '-%lx-%lx$'", (unsigned long)before.st_dev,
           (unsigned long)before.st_ino);
  CHECK("rename removed the replaced file's shared state", system(cmd) != 0);
  fd = make_file("ren.c", "cccc");
  CHECK("renameat2 RENAME_NOREPLACE onto an existing file fails EEXIST",
        renameat2(AT_FDCWD, path_of("ren.c"), AT_FDCWD, path_of("ren.b"), RENAME_NOREPLACE) == -1 &&
            errno == EEXIST);
  /* Unlink while open: the data stays readable until close. */
  CHECK("unlink of an open upfs file", unlink(path_of("ren.c")) == 0);
  CHECK("still readable after unlink", pread(fd, buf, 4, 0) == 4 && memcmp(buf, "cccc", 4) == 0);
  CHECK("still writable after unlink", pwrite(fd, "dd", 2, 4) == 2);
  close(fd);
}

static void test_mmap(void) {
  int fd = make_file("map", NULL);
  char block[8192];
  for (int i = 0; i < 8192; ++i) block[i] = (char)('a' + i % 26);
  CHECK("map: write 8 KiB", write(fd, block, sizeof(block)) == (ssize_t)sizeof(block));
  char *r = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
  CHECK("read-only shared map shows the data", r != MAP_FAILED && memcmp(r, block, 8192) == 0);
  char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 4096);
  CHECK("private map at an offset", p != MAP_FAILED && memcmp(p, block + 4096, 4096) == 0);
  munmap(p, 4096);
  char *w = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK("shared writable map", w != MAP_FAILED && memcmp(w, block, 8192) == 0);
  char *w2 = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 4096);
  CHECK("overlapping second shared writable map fails EAGAIN", w2 == MAP_FAILED && errno == EAGAIN);
  pid_t pid = fork();
  if (pid == 0) {
    int c = open(path_of("map"), O_RDWR);
    void *q = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, c, 0);
    _exit(q == MAP_FAILED && errno == EAGAIN ? 0 : 1);
  }
  int ws;
  waitpid(pid, &ws, 0);
  CHECK("another process's shared writable map fails EAGAIN",
        WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  memcpy(w + 100, "MAPPED", 6);
  CHECK("pwrite elsewhere while mapped", pwrite(fd, "WRITTEN", 7, 5000) == 7);
  CHECK("msync", msync(w, 8192, MS_SYNC) == 0);
  char buf[16] = {0};
  CHECK("msync wrote the changed bytes", pread(fd, buf, 6, 100) == 6 && memcmp(buf, "MAPPED", 6) == 0);
  CHECK("msync kept the bytes written meanwhile",
        pread(fd, buf, 7, 5000) == 7 && memcmp(buf, "WRITTEN", 7) == 0);
  memcpy(w + 8000, "TAIL", 4);
  close(fd); /* the map outlives the descriptor */
  CHECK("munmap", munmap(w, 8192) == 0);
  fd = open(path_of("map"), O_RDWR);
  CHECK("munmap wrote back after close", pread(fd, buf, 4, 8000) == 4 && memcmp(buf, "TAIL", 4) == 0);
  CHECK("read-only map is a snapshot of map time", memcmp(r + 100, block + 100, 6) == 0);
  munmap(r, 8192);
  char *g = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  char *g2 = mremap(g, 4096, 8192, MREMAP_MAYMOVE);
  CHECK("mremap grows a map with the file's bytes",
        g2 != MAP_FAILED && memcmp(g2 + 4096, block + 4096, 100) == 0 && memcmp(g2 + 100, "MAPPED", 6) == 0);
  munmap(g2, 8192);
  int ro = open(path_of("map"), O_RDONLY);
  void *bad = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
  CHECK("shared writable map of a read-only descriptor fails EACCES", bad == MAP_FAILED && errno == EACCES);
  close(ro);
  close(fd);
}

static void test_copy_calls(void) {
  int fd = make_file("copy", "hello");
  int out = open("/dev/null", O_WRONLY);
  off_t off = 0;
  CHECK("sendfile from upfs fails EINVAL (callers fall back)",
        sendfile(out, fd, &off, 5) == -1 && errno == EINVAL);
  CHECK("copy_file_range fails EXDEV",
        copy_file_range(fd, NULL, out, NULL, 5, 0) == -1 && errno == EXDEV);
  close(out);
  close(fd);
}

static void test_vectored_and_stat(void) {
  int fd = make_file("vec", NULL);
  struct iovec iov[3] = {{"abc", 3}, {"", 0}, {"defgh", 5}};
  CHECK("writev", writev(fd, iov, 3) == 8);
  char a[4] = {0}, b[8] = {0};
  struct iovec r[2] = {{a, 3}, {b, 5}};
  CHECK("preadv", preadv(fd, r, 2, 0) == 8 && memcmp(a, "abc", 3) == 0 && memcmp(b, "defgh", 5) == 0);
  CHECK("pwritev2 RWF_DSYNC", pwritev2(fd, iov, 1, 8, RWF_DSYNC) == 3);
  struct stat st;
  CHECK("fstatat reports the upfs size", fstatat(AT_FDCWD, path_of("vec"), &st, 0) == 0 && st.st_size == 11);
  struct statx sx;
  CHECK("statx reports the upfs size",
        statx(AT_FDCWD, path_of("vec"), 0, STATX_SIZE, &sx) == 0 && sx.stx_size == 11);
  CHECK("fstatat AT_EMPTY_PATH", fstatat(fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_size == 11);
  /* Kernels since 6.11 take a null path with AT_EMPTY_PATH as ""; older
   * ones fail EFAULT. Either way, no crash in the library. */
  const char *volatile no_path = NULL;
  int rc = statx(fd, no_path, AT_EMPTY_PATH, STATX_SIZE, &sx);
  CHECK("statx with a null path and AT_EMPTY_PATH", rc == 0 ? sx.stx_size == 11 : errno == EFAULT);
  rc = fstatat(fd, no_path, &st, AT_EMPTY_PATH);
  CHECK("fstatat with a null path and AT_EMPTY_PATH", rc == 0 ? st.st_size == 11 : errno == EFAULT);
  CHECK("ftruncate", ftruncate(fd, 4) == 0 && fstat(fd, &st) == 0 && st.st_size == 4);
  CHECK("fallocate extends", posix_fallocate(fd, 0, 10000) == 0 && fstat(fd, &st) == 0 &&
                                 st.st_size == 10000);
  CHECK("lseek SEEK_END", lseek(fd, 0, SEEK_END) == 10000);
  close(fd);
}

static void test_stdio(void) {
  FILE *f = fopen(path_of("stdio"), "w+");
  CHECK("fopen w+", f != NULL);
  fprintf(f, "line one\nline two\n");
  CHECK("fflush", fflush(f) == 0);
  CHECK("fopen'ed file is upfs", host_is_upfs(path_of("stdio")));
  CHECK("fseeko/ftello", fseeko(f, 5, SEEK_SET) == 0 && ftello(f) == 5);
  char line[64];
  CHECK("fgets", fgets(line, sizeof(line), f) && strcmp(line, "one\n") == 0);
  fclose(f);
  f = fopen(path_of("stdio"), "a");
  fputs("line three\n", f);
  fclose(f);
  f = fopen(path_of("stdio"), "r");
  size_t n = fread(line, 1, sizeof(line), f);
  CHECK("append mode and fread", n == 29 && memcmp(line + 18, "line three\n", 11) == 0);
  fclose(f);
  /* freopen of stdout onto a upfs file, in a child so ours stays put */
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(path_of("freopen"), "w", stdout)) _exit(1);
    printf("through stdout\n");
    fflush(stdout);
    _exit(0);
  }
  int ws;
  waitpid(pid, &ws, 0);
  f = fopen(path_of("freopen"), "r");
  CHECK("freopen stdout onto a new upfs file",
        WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && f && fgets(line, sizeof(line), f) &&
            strcmp(line, "through stdout\n") == 0 && host_is_upfs(path_of("freopen")));
  if (f) fclose(f);
}

/* stdio on descriptors 0..2 that become upfs descriptors after start-up:
 * glibc's stdout would write to the host file behind upfs's back. */
static void test_std_streams(void) {
  pid_t pid = fork();
  if (pid == 0) {
    printf("pending before dup2;");  /* buffered: goes where fd 1 points at flush */
    int fd = open(path_of("stdout-dup2"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) != 1) _exit(1);
    close(fd);
    for (int i = 0; i < 2000; ++i) printf("line %d\n", i);
    fflush(stdout);
    close(1);
    if (open(path_of("stdout-open"), O_CREAT | O_WRONLY | O_TRUNC, 0644) != 1) _exit(2);
    printf("after close and open\n");
    exit(0); /* exit flushes stdio */
  }
  int ws;
  waitpid(pid, &ws, 0);
  CHECK("child with stdout on upfs files exits 0", WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  CHECK("dup2 onto stdout: still a upfs file", host_is_upfs(path_of("stdout-dup2")));
  FILE *f = fopen(path_of("stdout-dup2"), "r");
  char line[64];
  int good = f && fgets(line, sizeof(line), f) && strcmp(line, "pending before dup2;line 0\n") == 0;
  for (int i = 1; good && i < 2000; ++i) {
    char want[32];
    snprintf(want, sizeof(want), "line %d\n", i);
    good = fgets(line, sizeof(line), f) && strcmp(line, want) == 0;
  }
  CHECK("dup2 onto stdout: printf output intact", good && fgetc(f) == EOF);
  if (f) fclose(f);
  f = fopen(path_of("stdout-open"), "r");
  CHECK("close(1) + open: printf reaches the upfs file",
        host_is_upfs(path_of("stdout-open")) && f && fgets(line, sizeof(line), f) &&
            strcmp(line, "after close and open\n") == 0);
  if (f) fclose(f);
  char tmpl[4096];
  snprintf(tmpl, sizeof(tmpl), "%s/tmp.XXXXXX", g_dir);
  int t = mkstemp(tmpl);
  CHECK("mkstemp under the directory makes a upfs file",
        t >= 0 && write(t, "t", 1) == 1 && host_is_upfs(tmpl));
  if (t >= 0) close(t);
  snprintf(tmpl, sizeof(tmpl), "%s/tmp.XXXXXX.sfx", g_dir);
  t = mkostemps(tmpl, 4, O_CLOEXEC);
  CHECK("mkostemps keeps the suffix and sets O_CLOEXEC",
        t >= 0 && strcmp(tmpl + strlen(tmpl) - 4, ".sfx") == 0 && (fcntl(t, F_GETFD) & FD_CLOEXEC));
  if (t >= 0) close(t);
}

static void test_fork_exec_spawn(void) {
  int fd = make_file("fork", NULL);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 100; ++i)
      if (pwrite(fd, "c", 1, 2 * i + 1) != 1) _exit(1);
    _exit(0);
  }
  for (int i = 0; i < 100; ++i) pwrite(fd, "p", 1, 2 * i);
  int ws;
  waitpid(pid, &ws, 0);
  char buf[200];
  int good = WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && pread(fd, buf, 200, 0) == 200;
  for (int i = 0; good && i < 100; ++i) good = buf[2 * i] == 'p' && buf[2 * i + 1] == 'c';
  CHECK("parent and child write one inherited file", good);
  /* A spawned program continues at the inherited offset. */
  lseek(fd, 0, SEEK_SET);
  lseek(fd, 10, SEEK_SET);
  int fl = fcntl(fd, F_GETFD);
  fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC);
  char fdarg[64];
  snprintf(fdarg, sizeof(fdarg), "head -c 4 <&%d > %s", fd, path_of("spawned"));
  char *argv[] = {"sh", "-c", fdarg, NULL};
  pid_t sp;
  int rc = posix_spawn(&sp, "/bin/sh", NULL, NULL, argv, environ);
  waitpid(sp, &ws, 0);
  int in = open(path_of("spawned"), O_RDONLY);
  char got[8] = {0};
  CHECK("posix_spawn: child reads from the inherited offset",
        rc == 0 && in >= 0 && read(in, got, 8) == 4 && memcmp(got, buf + 10, 4) == 0);
  close(in);
  close(fd);
}

/* Whether the shared state of the upfs file `path` exists (its name:
 * /dev/shm/upfs-DEV-INO in hexadecimal, docs/format.md). */
static int shared_state_exists(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  char name[128];
  snprintf(name, sizeof(name), "/dev/shm/upfs-%llx-%llx", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino);
  return syscall(SYS_newfstatat, AT_FDCWD, name, &st, 0) == 0;
}

/* _exit skips atexit: the library leaves the files there (exit.c), except
 * in a vfork child, which shares the parent's memory: what it would remove
 * the parent still uses. */
static void test_exit_paths(void) {
  /* Closed, the file is parked for reuse (for a second): its shared state
   * stays with this process, and exit would remove it. */
  int fd = make_file("kept", "kept by the parent");
  CHECK("a closed file keeps its shared state while parked",
        fd >= 0 && close(fd) == 0 && shared_state_exists(path_of("kept")));
  pid_t pid = vfork();
  if (pid == 0) _exit(0);
  int ws;
  waitpid(pid, &ws, 0);
  CHECK("a vfork child's _exit leaves the parent's shared state",
        shared_state_exists(path_of("kept")));
  /* A forked child that made and closed a file leaves its state with it. */
  pid = fork();
  if (pid == 0) {
    int cfd = make_file("child-made", "made by a child that leaves by _exit");
    if (cfd < 0 || close(cfd) != 0) _exit(1);
    _exit(0);
  }
  waitpid(pid, &ws, 0);
  CHECK("a forked child's _exit removes the shared state of the file it closed",
        WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && !shared_state_exists(path_of("child-made")));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: upfs run --dir DIR -- preload_api_test DIR\n");
    return 2;
  }
  g_dir = argv[1];
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_dup_shares_offset();
  test_flock();
  test_record_locks();
  test_kernel_descriptor();
  test_rename_unlink();
  test_mmap();
  test_copy_calls();
  test_vectored_and_stat();
  test_stdio();
  test_std_streams();
  test_fork_exec_spawn();
  test_exit_paths();
  test_attributes();
  if (g_failures) {
    printf("preload_api_test: %d failure(s)\n", g_failures);
    return 1;
  }
  printf("preload_api_test: all passed\n");
  return 0;
}
