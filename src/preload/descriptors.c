/* Calls on descriptors as such: close, dup, fcntl (status flags, record
 * locks), lockf, flock. */
#include "preload_internal.h"

#include <string.h>
#include <sys/file.h>

/* ------------------------------------------------------------------ close */

HIDDEN int close_upfs(int fd) {
  mark(fd, 0);
  return upfs_close(fd);
}

FD_INTERPOSER(int, close, (int fd), (fd), close_upfs, close)

/* ------------------------------------------------------------- dup, fcntl */

/* newfd, a kernel duplicate of the upfs descriptor oldfd, becomes one too. */
static int adopt(int oldfd, int newfd) {
  if (newfd < 0) return newfd;
  if (upfs_adopt_dup(oldfd, newfd) < 0) {
    int err = errno;
    REAL(close)(newfd);
    errno = err;
    return -1;
  }
  mark(newfd, 1);
  return follow_std(newfd);
}

EXPORT int dup(int fd) {
  if (UNLIKELY(is_upfs(fd))) return adopt(fd, REAL(dup)(fd));
  return follow_std(REAL(dup)(fd));
}
/* dup2/dup3 onto a upfs descriptor close it the upfs way first. */
HIDDEN int do_dup3(int oldfd, int newfd, int flags, int is_dup2) {
  if (oldfd == newfd) return is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
  if (UNLIKELY(is_upfs(newfd))) {
    if (REAL(fcntl)(oldfd, F_GETFD) < 0) return -1; /* EBADF, newfd untouched */
    close_upfs(newfd);
  }
  int r = is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
  if (r >= 0 && UNLIKELY(is_upfs(oldfd))) return adopt(oldfd, r);
  return follow_std(r);
}
EXPORT int dup2(int oldfd, int newfd) { return do_dup3(oldfd, newfd, 0, 1); }
EXPORT int dup3(int oldfd, int newfd, int flags) { return do_dup3(oldfd, newfd, flags, 0); }

HIDDEN int do_fcntl(int fd, int cmd, void *arg) {
  if (LIKELY(!is_upfs(fd))) return REAL(fcntl)(fd, cmd, arg);
  switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      return adopt(fd, REAL(fcntl)(fd, cmd, arg));
    case F_SETFL: {
      int fl = (int)(intptr_t)arg;
      /* O_APPEND goes to upfs (mirrored on the kernel descriptor);
       * O_DIRECT means nothing for a mapped file. */
      int r = REAL(fcntl)(fd, F_SETFL, (void *)(intptr_t)(fl & ~O_DIRECT));
      if (r != 0) return r;
      return upfs_set_append(fd, fl & O_APPEND);
    }
    case F_GETFL: {
      /* The kernel descriptor is read-only (posix/host_descriptor.h): the
       * access mode is upfs's; O_APPEND and the rest are mirrored. */
      int kfl = REAL(fcntl)(fd, F_GETFL);
      int ufl = upfs_get_flags(fd);
      if (kfl < 0 || ufl < 0) return -1;
      return (kfl & ~O_ACCMODE) | (ufl & O_ACCMODE);
    }
    case F_SETLK:
    case F_SETLKW:
    case F_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
    case F_OFD_GETLK: {
      int saved = errno;
      return keep_errno(saved, upfs_fcntl_lock(fd, cmd, (struct flock *)arg));
    }
    case F_GETSIG:
      return 0; /* the kernel's holds the access mode; no signal-driven I/O */
    case F_SETSIG:
      errno = EINVAL; /* signal-driven I/O is not offered on upfs files */
      return -1;
    default:
      /* F_GETFD/F_SETFD and the rest act on the host file, with kernel
       * semantics. */
      return REAL(fcntl)(fd, cmd, arg);
  }
}

/* glibc's lockf calls fcntl from inside libc, past the interposer. */
static int do_lockf(int fd, int cmd, off_t len) {
  if (LIKELY(!is_upfs(fd))) return REAL(lockf)(fd, cmd, len);
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_whence = SEEK_CUR;
  fl.l_len = len;
  switch (cmd) {
    case F_TEST:
      fl.l_type = F_RDLCK;
      if (do_fcntl(fd, F_GETLK, &fl) != 0) return -1;
      if (fl.l_type == F_UNLCK || fl.l_pid == getpid()) return 0;
      errno = EACCES;
      return -1;
    case F_ULOCK:
      fl.l_type = F_UNLCK;
      return do_fcntl(fd, F_SETLK, &fl);
    case F_LOCK:
      fl.l_type = F_WRLCK;
      return do_fcntl(fd, F_SETLKW, &fl);
    case F_TLOCK:
      fl.l_type = F_WRLCK;
      return do_fcntl(fd, F_SETLK, &fl);
    default:
      errno = EINVAL;
      return -1;
  }
}
EXPORT int lockf(int fd, int cmd, off_t len) { return do_lockf(fd, cmd, len); }
EXPORT int lockf64(int fd, int cmd, off_t len) { return do_lockf(fd, cmd, len); }
EXPORT int fcntl(int fd, int cmd, ...) { return do_fcntl(fd, cmd, VA_FCNTL_ARG(cmd)); }
EXPORT int fcntl64(int fd, int cmd, ...) { return do_fcntl(fd, cmd, VA_FCNTL_ARG(cmd)); }

/* ------------------------------------------------------------------ flock */

static int flock_upfs(int fd, int op) {
  int saved = errno;
  return keep_errno(saved, upfs_flock(fd, op));
}
FD_INTERPOSER(int, flock, (int fd, int op), (fd, op), flock_upfs, flock)
