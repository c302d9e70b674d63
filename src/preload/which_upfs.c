/* Which descriptors are upfs descriptors (g_fd_kind), and which files are
 * upfs files: the marker, the magic, and UPFS_DIR for the files the
 * library creates. */
#include "preload_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ configuration */

static char g_dir[PATH_MAX];
HIDDEN size_t g_dir_len;
HIDDEN enum upfs_consistency g_mode = UPFS_STRICT;

HIDDEN void read_config(void) {
  const char *dir = getenv("UPFS_DIR");
  if (dir && dir[0] == '/') {
    char canon[PATH_MAX];
    const char *use = realpath(dir, canon) ? canon : dir;
    size_t n = strlen(use);
    while (n > 1 && use[n - 1] == '/') --n;
    if (n < sizeof(g_dir)) {
      memcpy(g_dir, use, n);
      g_dir[n] = 0;
      g_dir_len = n;
    }
  }
  const char *mode = getenv("UPFS_MODE");
  if (mode && strcmp(mode, "sync") == 0) g_mode = UPFS_SYNC;
}

/* ------------------------------------------------------- descriptor table */

HIDDEN unsigned char g_fd_kind[MAX_FD];

/* ------------------------------------------------------------- upfs files */

static const unsigned char kMagic[8] = {'U', 'P', 'F', 'S', 0x01, '\r', '\n', 0x1a};

static void proc_path(char *buf, size_t n, int fd) { snprintf(buf, n, "/proc/self/fd/%d", fd); }

/* A host file can only be a upfs file if it is regular and block-sized. */
HIDDEN int size_candidate(const struct stat *st) {
  return S_ISREG(st->st_mode) && st->st_size >= 4096 && (st->st_size & 4095) == 0;
}
/* The marker of a upfs host file (container/perfile/perfile.h): S_ISVTX on a
 * regular file. It tells a upfs file by fstat alone, without reading it
 * (which a caller may not be allowed to do, and which would change its
 * atime); unmarked files of earlier versions are told by their magic. */
HIDDEN int marked(const struct stat *st) {
  return (st->st_mode & S_ISVTX) != 0 && size_candidate(st);
}

/* Does the open regular file kfd carry the upfs magic? */
HIDDEN int has_magic(int kfd, int readable) {
  unsigned char m[sizeof(kMagic)];
  int saved = errno;
  int rfd = kfd;
  if (!readable) {
    char p[64];
    proc_path(p, sizeof(p), kfd);
    rfd = REAL(open)(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (rfd < 0) {
      errno = saved;
      return 0;
    }
  }
  int r = REAL(pread)(rfd, m, sizeof(m), 0) == (ssize_t)sizeof(m) &&
          memcmp(m, kMagic, sizeof(m)) == 0;
  if (rfd != kfd) REAL(close)(rfd);
  errno = saved;
  return r;
}

/* Is the file open as kfd located (physically) under UPFS_DIR? */
HIDDEN int under_dir(int kfd) {
  if (!g_dir_len) return 0;
  char p[64], target[PATH_MAX];
  proc_path(p, sizeof(p), kfd);
  ssize_t n = readlink(p, target, sizeof(target) - 1);
  if (n <= 0) return 0;
  target[n] = 0;
  if (g_dir_len == 1) return target[0] == '/';
  return (size_t)n > g_dir_len && memcmp(target, g_dir, g_dir_len) == 0 &&
         target[g_dir_len] == '/';
}

/* Makes the open host file kfd a upfs descriptor, in place: no other
 * descriptor of the file is opened and closed, which would drop the
 * process's POSIX record locks on it. kfd carries the caller's O_APPEND
 * (upfs never writes through it), so F_GETFL reports it and it survives
 * execve. */
HIDDEN int upfs_from_kfd(int kfd, int flags) {
  if (upfs_open_host_fd(kfd, flags & (O_ACCMODE | O_APPEND | O_TRUNC | O_CREAT), g_mode) < 0)
    return -1;
  mark(kfd, 1);
  return kfd;
}
