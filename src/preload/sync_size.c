/* Durability and size: fsync, fdatasync, sync_file_range, truncate,
 * ftruncate, fallocate, posix_fallocate, and the advice calls. */
#include "preload_internal.h"

/* ------------------------------------------------------- sync and size */

FD_INTERPOSER(int, fsync, (int fd), (fd), upfs_fsync, fsync)
FD_INTERPOSER(int, fdatasync, (int fd), (fd), upfs_fdatasync, fdatasync)
EXPORT int sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags) {
  if (UNLIKELY(is_upfs(fd))) {
    if (off < 0 || n < 0 || (flags & ~(SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                       SYNC_FILE_RANGE_WAIT_AFTER))) {
      errno = EINVAL;
      return -1;
    }
    /* Data is already in the medium; only a waiting call makes it durable
     * on page-cache media, as fdatasync would. */
    return (flags & SYNC_FILE_RANGE_WAIT_AFTER) ? upfs_fdatasync(fd) : 0;
  }
  return REAL(sync_file_range)(fd, off, n, flags);
}
FD_INTERPOSER(int, ftruncate, (int fd, off_t len), (fd, len), upfs_ftruncate, ftruncate)
EXPORT int ftruncate64(int fd, off64_t len) { return ftruncate(fd, len); }

/* upfs_truncate truncates a upfs file through upfs, anything else with the
 * kernel's truncate. */
API_INTERPOSER(truncate, (const char *path, off_t len), upfs_truncate(path, len))
EXPORT int truncate64(const char *path, off64_t len) { return truncate(path, len); }

FD_INTERPOSER(int, fallocate, (int fd, int mode, off_t off, off_t len), (fd, mode, off, len),
              upfs_fallocate, fallocate)
EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len) {
  return fallocate(fd, mode, off, len);
}
EXPORT int posix_fallocate(int fd, off_t off, off_t len) {
  if (UNLIKELY(is_upfs(fd))) {
    int saved = errno;
    int r = upfs_fallocate(fd, 0, off, len) == 0 ? 0 : errno;
    errno = saved;
    return r;
  }
  return REAL(posix_fallocate)(fd, off, len);
}
EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len) {
  return posix_fallocate(fd, off, len);
}
EXPORT int posix_fadvise(int fd, off_t off, off_t len, int advice) {
  if (UNLIKELY(is_upfs(fd))) {
    if (advice < POSIX_FADV_NORMAL || advice > POSIX_FADV_NOREUSE || len < 0) return EINVAL;
    return 0; /* advice only */
  }
  return REAL(posix_fadvise)(fd, off, len, advice);
}
EXPORT int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) {
  return posix_fadvise(fd, off, len, advice);
}
EXPORT ssize_t readahead(int fd, off64_t off, size_t n) {
  if (UNLIKELY(is_upfs(fd))) return 0; /* the file is mapped already */
  return REAL(readahead)(fd, off, n);
}
