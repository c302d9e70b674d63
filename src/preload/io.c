/* Reading and writing: read, write and their positioned, vectored and
 * checked forms, lseek, and the kernel copy calls, which upfs refuses. */
#include "preload_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>

/* ------------------------------------------------------------- read/write */

FD_INTERPOSER(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n), upfs_read, read)
FD_INTERPOSER(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n), upfs_write, write)
FD_INTERPOSER(ssize_t, pread, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off),
              upfs_pread, pread)
FD_INTERPOSER(ssize_t, pread64, (int fd, void *buf, size_t n, off64_t off), (fd, buf, n, off),
              upfs_pread, pread)
FD_INTERPOSER(ssize_t, pwrite, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off),
              upfs_pwrite, pwrite)
FD_INTERPOSER(ssize_t, pwrite64, (int fd, const void *buf, size_t n, off64_t off),
              (fd, buf, n, off), upfs_pwrite, pwrite)
extern void __chk_fail(void) __attribute__((noreturn));
EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}
EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread(fd, buf, n, off);
}
EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread(fd, buf, n, off);
}

/* Vectored I/O on a upfs descriptor goes through one bounce buffer so that
 * it stays a single (atomic, in strict mode) upfs call. */
static ssize_t iov_total(const struct iovec *iov, int cnt) {
  if (cnt < 0 || cnt > IOV_MAX) {
    errno = EINVAL;
    return -1;
  }
  size_t t = 0;
  for (int i = 0; i < cnt; ++i) {
    if (__builtin_add_overflow(t, iov[i].iov_len, &t) || t > SSIZE_MAX) {
      errno = EINVAL;
      return -1;
    }
  }
  return (ssize_t)t;
}

/* off < 0: at the descriptor's offset. */
static ssize_t upfs_readv_at(int fd, const struct iovec *iov, int cnt, off_t off) {
  ssize_t t = iov_total(iov, cnt);
  if (t < 0) return -1;
  if (cnt == 1) return off < 0 ? upfs_read(fd, iov[0].iov_base, iov[0].iov_len)
                               : upfs_pread(fd, iov[0].iov_base, iov[0].iov_len, off);
  char *b = malloc(t ? (size_t)t : 1);
  if (!b) {
    errno = ENOMEM;
    return -1;
  }
  ssize_t r = off < 0 ? upfs_read(fd, b, (size_t)t) : upfs_pread(fd, b, (size_t)t, off);
  if (r > 0) {
    size_t done = 0;
    for (int i = 0; i < cnt && done < (size_t)r; ++i) {
      size_t c = iov[i].iov_len < (size_t)r - done ? iov[i].iov_len : (size_t)r - done;
      memcpy(iov[i].iov_base, b + done, c);
      done += c;
    }
  }
  int err = errno;
  free(b);
  errno = err;
  return r;
}

static ssize_t upfs_writev_at(int fd, const struct iovec *iov, int cnt, off_t off) {
  ssize_t t = iov_total(iov, cnt);
  if (t < 0) return -1;
  if (cnt == 1) return off < 0 ? upfs_write(fd, iov[0].iov_base, iov[0].iov_len)
                               : upfs_pwrite(fd, iov[0].iov_base, iov[0].iov_len, off);
  char *b = malloc(t ? (size_t)t : 1);
  if (!b) {
    errno = ENOMEM;
    return -1;
  }
  size_t done = 0;
  for (int i = 0; i < cnt; ++i) {
    memcpy(b + done, iov[i].iov_base, iov[i].iov_len);
    done += iov[i].iov_len;
  }
  ssize_t r = off < 0 ? upfs_write(fd, b, (size_t)t) : upfs_pwrite(fd, b, (size_t)t, off);
  int err = errno;
  free(b);
  errno = err;
  return r;
}

/* At the descriptor's offset. */
static ssize_t readv_upfs(int fd, const struct iovec *iov, int cnt) {
  return upfs_readv_at(fd, iov, cnt, -1);
}
static ssize_t writev_upfs(int fd, const struct iovec *iov, int cnt) {
  return upfs_writev_at(fd, iov, cnt, -1);
}
FD_INTERPOSER(ssize_t, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
              readv_upfs, readv)
FD_INTERPOSER(ssize_t, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
              writev_upfs, writev)

static ssize_t checked_off(off_t off) {
  if (off < 0) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}
EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
  if (UNLIKELY(is_upfs(fd)))
    return checked_off(off) ? -1 : upfs_readv_at(fd, iov, cnt, off);
  return REAL(preadv)(fd, iov, cnt, off);
}
EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  return preadv(fd, iov, cnt, off);
}
EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
  if (UNLIKELY(is_upfs(fd)))
    return checked_off(off) ? -1 : upfs_writev_at(fd, iov, cnt, off);
  return REAL(pwritev)(fd, iov, cnt, off);
}
EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  return pwritev(fd, iov, cnt, off);
}
/* RWF_HIPRI, RWF_DSYNC and RWF_SYNC are satisfied by every upfs write;
 * RWF_NOWAIT and RWF_APPEND are not supported on upfs descriptors. */
static int rwf_ok(int flags) {
  if (flags & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC)) {
    errno = EOPNOTSUPP;
    return 0;
  }
  return 1;
}
EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
  if (UNLIKELY(is_upfs(fd))) {
    if (!rwf_ok(flags)) return -1;
    if (off < -1) return checked_off(off);
    return upfs_readv_at(fd, iov, cnt, off);
  }
  return REAL(preadv2)(fd, iov, cnt, off, flags);
}
EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
  return preadv2(fd, iov, cnt, off, flags);
}
EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
  if (UNLIKELY(is_upfs(fd))) {
    if (!rwf_ok(flags)) return -1;
    if (off < -1) return checked_off(off);
    return upfs_writev_at(fd, iov, cnt, off);
  }
  return REAL(pwritev2)(fd, iov, cnt, off, flags);
}
EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
  return pwritev2(fd, iov, cnt, off, flags);
}

FD_INTERPOSER(off_t, lseek, (int fd, off_t off, int whence), (fd, off, whence), upfs_lseek, lseek)
EXPORT off64_t lseek64(int fd, off64_t off, int whence) { return lseek(fd, off, whence); }

/* ------------------------------------------------------- kernel copy calls */

/* The kernel would copy the host bytes, metadata log included: refuse, so
 * that callers fall back to read/write. */
EXPORT ssize_t copy_file_range(int in, off64_t *inoff, int out, off64_t *outoff, size_t n,
                               unsigned int flags) {
  if (UNLIKELY(is_upfs(in) || is_upfs(out))) {
    errno = EXDEV;
    return -1;
  }
  return REAL(copy_file_range)(in, inoff, out, outoff, n, flags);
}
EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) {
  if (UNLIKELY(is_upfs(in) || is_upfs(out))) {
    errno = EINVAL;
    return -1;
  }
  return REAL(sendfile)(out, in, off, n);
}
EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n) {
  return sendfile(out, in, off, n);
}
EXPORT ssize_t splice(int in, off64_t *inoff, int out, off64_t *outoff, size_t n,
                      unsigned int flags) {
  if (UNLIKELY(is_upfs(in) || is_upfs(out))) {
    errno = EINVAL;
    return -1;
  }
  return REAL(splice)(in, inoff, out, outoff, n, flags);
}
