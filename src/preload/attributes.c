/* Changing attributes: chmod, chown, and the time calls (utimensat and
 * glibc's older forms). */
#include "preload_internal.h"

#include <sys/time.h>
#include <utime.h>

/* ------------------------------------------------------------ attributes */

/* The upfs_* attribute calls apply the kernel's call to the host file, and
 * for a upfs file also bring what upfs keeps beside it (shared state,
 * mtime) into step; for anything else they are the kernel's call. */
API_INTERPOSER(chmod, (const char *path, mode_t mode), upfs_chmod(path, mode))
API_INTERPOSER(fchmod, (int fd, mode_t mode), upfs_fchmod(fd, mode))
API_INTERPOSER(fchmodat, (int dirfd, const char *path, mode_t mode, int flags),
               upfs_fchmodat(dirfd, path, mode, flags))
/* glibc's lchmod is fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW). */
API_INTERPOSER(lchmod, (const char *path, mode_t mode),
               upfs_fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW))
API_INTERPOSER(chown, (const char *path, uid_t owner, gid_t group), upfs_chown(path, owner, group))
API_INTERPOSER(lchown, (const char *path, uid_t owner, gid_t group),
               upfs_lchown(path, owner, group))
API_INTERPOSER(fchown, (int fd, uid_t owner, gid_t group), upfs_fchown(fd, owner, group))
API_INTERPOSER(fchownat, (int dirfd, const char *path, uid_t owner, gid_t group, int flags),
               upfs_fchownat(dirfd, path, owner, group, flags))

/* The utimensat system call, as glibc's time calls use it: a null path
 * means dirfd itself (futimens, futimes, futimesat(fd, NULL, ...)). */
static int do_utimens(int dirfd, const char *path, const struct timespec *ts, int flags) {
  int saved = errno;
  if (!path) {
    if (dirfd == AT_FDCWD) {
      errno = EFAULT;
      return -1;
    }
    if (flags) {
      errno = EINVAL;
      return -1;
    }
    return keep_errno(saved, upfs_futimens(dirfd, ts));
  }
  return keep_errno(saved, upfs_utimensat(dirfd, path, ts, flags));
}
/* glibc's conversion: NULL stays NULL (both times now); microseconds are
 * not range-checked here (the kernel checks the nanoseconds). */
static const struct timespec *tv_to_ts(const struct timeval *tv, struct timespec ts[2]) {
  if (!tv) return NULL;
  for (int i = 0; i < 2; ++i) {
    ts[i].tv_sec = tv[i].tv_sec;
    ts[i].tv_nsec = tv[i].tv_usec * 1000;
  }
  return ts;
}
EXPORT int utimensat(int dirfd, const char *path, const struct timespec times[2], int flags) {
  if (!path) { /* glibc refuses what the system call would take as futimens */
    errno = EINVAL;
    return -1;
  }
  return do_utimens(dirfd, path, times, flags);
}
EXPORT int futimens(int fd, const struct timespec times[2]) {
  if (fd < 0) {
    errno = EBADF;
    return -1;
  }
  return do_utimens(fd, NULL, times, 0);
}
EXPORT int utime(const char *path, const struct utimbuf *times) {
  struct timespec ts[2];
  if (times) {
    ts[0].tv_sec = times->actime;
    ts[0].tv_nsec = 0;
    ts[1].tv_sec = times->modtime;
    ts[1].tv_nsec = 0;
  }
  return do_utimens(AT_FDCWD, path, times ? ts : NULL, 0);
}
EXPORT int utimes(const char *path, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(AT_FDCWD, path, tv_to_ts(tv, ts), 0);
}
EXPORT int lutimes(const char *path, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(AT_FDCWD, path, tv_to_ts(tv, ts), AT_SYMLINK_NOFOLLOW);
}
EXPORT int futimes(int fd, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(fd, NULL, tv_to_ts(tv, ts), 0);
}
EXPORT int futimesat(int dirfd, const char *path, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(dirfd, path, tv_to_ts(tv, ts), 0);
}
