/* The stat family and statx: a upfs file shows its upfs attributes. */
#include "preload_internal.h"

/* ------------------------------------------------------------------- stat */

FD_INTERPOSER(int, fstat, (int fd, struct stat *st), (fd, st), upfs_fstat, fstat)
EXPORT int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
/* upfs_fstatat is the kernel's stat, with the upfs attributes (size,
 * blocks, times; the marker bit hidden) for a upfs file. It costs nothing
 * more for a file that cannot be one (not regular, or not block-sized and
 * unmarked). */
API_INTERPOSER(stat, (const char *path, struct stat *st), upfs_fstatat(AT_FDCWD, path, st, 0))
EXPORT int stat64(const char *path, struct stat64 *st) { return stat(path, (struct stat *)st); }
API_INTERPOSER(lstat, (const char *path, struct stat *st),
               upfs_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW))
EXPORT int lstat64(const char *path, struct stat64 *st) { return lstat(path, (struct stat *)st); }
/* With AT_EMPTY_PATH, kernels since 6.11 take a null path as "". */
static int empty_path(const char *path, int flags) {
  return (flags & AT_EMPTY_PATH) && (!path || path[0] == 0);
}
EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags) {
  if (empty_path(path, flags) && is_upfs(dirfd)) return upfs_fstat(dirfd, st);
  if (!path) { /* the kernel decides whether that is EFAULT */
    int r = REAL(fstatat)(dirfd, path, st, flags);
    if (r != 0 || !S_ISREG(st->st_mode)) return r;
    path = "";
  }
  int saved = errno;
  return keep_errno(saved, upfs_fstatat(dirfd, path, st, flags));
}
EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags) {
  return fstatat(dirfd, path, (struct stat *)st, flags);
}
/* The pre-2.33 glibc entry points, still used by old binaries. */
EXPORT int __xstat(int ver, const char *path, struct stat *st) { return stat(path, st); }
EXPORT int __xstat64(int ver, const char *path, struct stat64 *st) { return stat64(path, st); }
EXPORT int __lxstat(int ver, const char *path, struct stat *st) { return lstat(path, st); }
EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st) { return lstat64(path, st); }
EXPORT int __fxstat(int ver, int fd, struct stat *st) { return fstat(fd, st); }
EXPORT int __fxstat64(int ver, int fd, struct stat64 *st) { return fstat64(fd, st); }
EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) {
  return fstatat(dirfd, path, st, flags);
}
EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) {
  return fstatat64(dirfd, path, st, flags);
}

static void to_statx_ts(struct statx_timestamp *t, const struct timespec *ts) {
  t->tv_sec = ts->tv_sec;
  t->tv_nsec = (uint32_t)ts->tv_nsec;
}
static void fill_statx(struct statx *stx, const struct stat *st) {
  stx->stx_mode = (uint16_t)((stx->stx_mode & ~07777) | (st->st_mode & 07777));
  stx->stx_size = (uint64_t)st->st_size;
  stx->stx_blocks = (uint64_t)st->st_blocks;
  stx->stx_blksize = (uint32_t)st->st_blksize;
  to_statx_ts(&stx->stx_mtime, &st->st_mtim);
  to_statx_ts(&stx->stx_ctime, &st->st_ctim);
}
EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx) {
  int r = REAL(statx)(dirfd, path, flags, mask, stx);
  /* Only a file that may be a upfs file costs more: regular, and marked
   * (S_ISVTX, which upfs sets on its host files) or block-sized. */
  if (r != 0 || !S_ISREG(stx->stx_mode) ||
      (!(stx->stx_mode & S_ISVTX) && (stx->stx_size < 4096 || (stx->stx_size & 4095))))
    return r;
  int saved = errno;
  struct stat st;
  if (empty_path(path, flags) && is_upfs(dirfd)) {
    if (upfs_fstat(dirfd, &st) == 0) fill_statx(stx, &st);
  } else if (upfs_fstatat(dirfd, path ? path : "", &st,
                          flags & (AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT)) == 0 &&
             S_ISREG(st.st_mode)) {
    fill_statx(stx, &st);
  }
  errno = saved;
  return r;
}
