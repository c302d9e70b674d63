/* The open family: which files it opens become upfs descriptors, and
 * which files it creates become upfs files. */
#include "preload_internal.h"

#include <stdint.h>
#include <string.h>
#include <sys/random.h>

/* The mode the kernel would have given a file created with `mode`, when it
 * was created with owner read and write added (st: its attributes then;
 * umask and default ACLs applied), plus `extra` (the upfs marker). */
static void fix_new_mode(int kfd, const struct stat *st, mode_t mode, mode_t extra) {
  const mode_t added = (S_IRUSR | S_IWUSR) & ~mode;
  if (!added) return;
  REAL(fchmod)(kfd, ((st->st_mode & 07777) & ~added) | extra);
}

/* Closes kfd, keeping errno: an open that fails after the kernel's. */
static int close_failed(int kfd) {
  int err = errno;
  REAL(close)(kfd);
  errno = err;
  return -1;
}

/* The kernel's open of the host file, without O_TRUNC (it would drop a upfs
 * file's metadata) and O_DIRECT (it would make the magic unreadable), which
 * are applied once the file is known. *created: the call created the file;
 * under UPFS_DIR that is decided with O_EXCL. */
static int open_host(int dirfd, const char *path, int flags, mode_t mode, int *created) {
  int kflags = flags & ~(O_TRUNC | O_DIRECT);
  /* A new file is created with owner read and write, so that upfs can map
   * it whatever mode was asked for (the kernel lets a creator write the
   * file it creates); the mode is then put right (fix_new_mode). */
  const mode_t cmode = mode | S_IRUSR | S_IWUSR;
  *created = 0;
  if (!(flags & O_CREAT) || !g_dir_len) return REAL(openat)(dirfd, path, kflags, mode);
  int kfd;
  if (flags & O_EXCL) {
    kfd = REAL(openat)(dirfd, path, kflags, cmode);
    *created = kfd >= 0;
    return kfd;
  }
  kfd = REAL(openat)(dirfd, path, kflags & ~O_CREAT, mode);
  if (kfd >= 0 || errno != ENOENT) return kfd;
  kfd = REAL(openat)(dirfd, path, kflags | O_EXCL, cmode);
  if (kfd >= 0)
    *created = 1;
  else if (errno == EEXIST) /* a race, or a dangling symlink */
    kfd = REAL(openat)(dirfd, path, kflags, mode);
  return kfd;
}

/* kfd is a plain regular file (st): applies the O_DIRECT and O_TRUNC that
 * open_host held back. */
static int finish_plain(int kfd, const struct stat *st, int dirfd, const char *path, int flags,
                        mode_t mode, int saved) {
  if ((flags & O_DIRECT) && REAL(fcntl)(kfd, F_SETFL, REAL(fcntl)(kfd, F_GETFL) | O_DIRECT) != 0)
    return close_failed(kfd);
  if ((flags & O_TRUNC) && st->st_size > 0) {
    if ((flags & O_ACCMODE) == O_RDONLY) {
      REAL(close)(kfd);
      return REAL(openat)(dirfd, path, flags, mode);
    }
    if (REAL(ftruncate)(kfd, 0) != 0) return close_failed(kfd);
  }
  errno = saved;
  return kfd;
}

static int do_open_fd(int dirfd, const char *path, int flags, mode_t mode) {
  if (!path || (flags & (O_PATH | O_DIRECTORY)) || (flags & __O_TMPFILE) == __O_TMPFILE)
    return REAL(openat)(dirfd, path, flags, mode);
  int saved = errno;
  int created;
  int kfd = open_host(dirfd, path, flags, mode, &created);
  if (kfd < 0) return -1;
  struct stat st;
  if (REAL(fstat)(kfd, &st) != 0 || !S_ISREG(st.st_mode)) {
    errno = saved;
    return kfd;
  }
  if (created && st.st_size == 0 && under_dir(kfd)) {
    if (upfs_from_kfd(kfd, (flags & ~O_TRUNC) | O_CREAT) < 0) {
      int err = errno;
      REAL(close)(kfd);
      REAL(unlinkat)(dirfd, path, 0);
      errno = err;
      return -1;
    }
    fix_new_mode(kfd, &st, mode, S_ISVTX);
    errno = saved;
    return kfd;
  }
  if (created) fix_new_mode(kfd, &st, mode, 0);
  /* A marked file is used as a upfs file or refused (never written as
   * plain bytes), whatever the caller may read. */
  if (marked(&st) || (size_candidate(&st) && (upfs_stat_if_open(&st, NULL) == 1 ||
                                              has_magic(kfd, (flags & O_ACCMODE) != O_WRONLY)))) {
    if (upfs_from_kfd(kfd, flags & ~O_CREAT) < 0) return close_failed(kfd);
    errno = saved;
    return kfd;
  }
  return finish_plain(kfd, &st, dirfd, path, flags, mode, saved);
}

/* The open protocol shared by every open variant. */
HIDDEN int do_open(int dirfd, const char *path, int flags, mode_t mode) {
  return follow_std(do_open_fd(dirfd, path, flags, mode));
}

/* ------------------------------------------------------------------- open */

EXPORT int open(const char *path, int flags, ...) {
  return do_open(AT_FDCWD, path, flags, VA_OPEN_MODE(flags));
}
EXPORT int open64(const char *path, int flags, ...) {
  return do_open(AT_FDCWD, path, flags | O_LARGEFILE, VA_OPEN_MODE(flags));
}
EXPORT int openat(int dirfd, const char *path, int flags, ...) {
  return do_open(dirfd, path, flags, VA_OPEN_MODE(flags));
}
EXPORT int openat64(int dirfd, const char *path, int flags, ...) {
  return do_open(dirfd, path, flags | O_LARGEFILE, VA_OPEN_MODE(flags));
}
EXPORT int __open_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
EXPORT int __open64_2(const char *path, int flags) {
  return do_open(AT_FDCWD, path, flags | O_LARGEFILE, 0);
}
EXPORT int __openat_2(int dirfd, const char *path, int flags) {
  return do_open(dirfd, path, flags, 0);
}
EXPORT int __openat64_2(int dirfd, const char *path, int flags) {
  return do_open(dirfd, path, flags | O_LARGEFILE, 0);
}
EXPORT int creat(const char *path, mode_t mode) {
  return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}
EXPORT int creat64(const char *path, mode_t mode) {
  return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC | O_LARGEFILE, mode);
}

/* glibc's mkstemp family opens its file from inside libc, past the
 * interposers: done here instead, so a temporary file made under UPFS_DIR
 * (sed -i, sort, editors' atomic saves) is a upfs file like any other. */
static int do_mkstemp(char *tmpl, int suffixlen, int flags) {
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  size_t len = tmpl ? strlen(tmpl) : 0;
  if (suffixlen < 0 || len < (size_t)suffixlen + 6 ||
      memcmp(tmpl + len - (size_t)suffixlen - 6, "XXXXXX", 6) != 0 ||
      (flags & ~(O_APPEND | O_CLOEXEC | O_DIRECT | O_DSYNC | O_LARGEFILE | O_NOATIME | O_NOCTTY |
                 O_NONBLOCK | O_SYNC))) {
    errno = EINVAL;
    return -1;
  }
  char *x = tmpl + len - (size_t)suffixlen - 6;
  for (int attempt = 0; attempt < 62 * 62 * 62; ++attempt) {
    uint64_t r;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
      r = __builtin_ia32_rdtsc() * 0x9e3779b97f4a7c15ull + (uint64_t)attempt;
    for (int i = 0; i < 6; ++i, r /= 62) x[i] = letters[r % 62];
    int fd = do_open(AT_FDCWD, tmpl, O_RDWR | O_CREAT | O_EXCL | flags, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}
EXPORT int mkstemp(char *tmpl) { return do_mkstemp(tmpl, 0, 0); }
EXPORT int mkstemp64(char *tmpl) { return do_mkstemp(tmpl, 0, 0); }
EXPORT int mkostemp(char *tmpl, int flags) { return do_mkstemp(tmpl, 0, flags); }
EXPORT int mkostemp64(char *tmpl, int flags) { return do_mkstemp(tmpl, 0, flags); }
EXPORT int mkstemps(char *tmpl, int suffixlen) { return do_mkstemp(tmpl, suffixlen, 0); }
EXPORT int mkstemps64(char *tmpl, int suffixlen) { return do_mkstemp(tmpl, suffixlen, 0); }
EXPORT int mkostemps(char *tmpl, int suffixlen, int flags) {
  return do_mkstemp(tmpl, suffixlen, flags);
}
EXPORT int mkostemps64(char *tmpl, int suffixlen, int flags) {
  return do_mkstemp(tmpl, suffixlen, flags);
}
