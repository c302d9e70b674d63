/* Calls on names: rename, unlink and remove, which also remove the shared
 * state of a upfs file that loses its last link. */
#include "preload_internal.h"

/* ---------------------------------------------------------- unlink, remove */

/* upfs_unlinkat and upfs_renameat2 act like the kernel calls and also
 * remove the shared state of a upfs file that loses its last link. */
API_INTERPOSER(rename, (const char *op, const char *np),
               upfs_renameat2(AT_FDCWD, op, AT_FDCWD, np, 0))
API_INTERPOSER(renameat, (int od, const char *op, int nd, const char *np),
               upfs_renameat2(od, op, nd, np, 0))
API_INTERPOSER(renameat2, (int od, const char *op, int nd, const char *np, unsigned int flags),
               upfs_renameat2(od, op, nd, np, flags))
API_INTERPOSER(unlink, (const char *path), upfs_unlinkat(AT_FDCWD, path, 0))

static int do_unlinkat(int dirfd, const char *path) {
  int saved = errno;
  return keep_errno(saved, upfs_unlinkat(dirfd, path, 0));
}
EXPORT int unlinkat(int dirfd, const char *path, int flags) {
  if (flags & AT_REMOVEDIR) return REAL(unlinkat)(dirfd, path, flags);
  if (flags) {
    errno = EINVAL;
    return -1;
  }
  return do_unlinkat(dirfd, path);
}
EXPORT int remove(const char *path) {
  int saved = errno;
  int r = do_unlinkat(AT_FDCWD, path);
  if (r != 0 && errno == EISDIR) {
    errno = saved;
    return REAL(rmdir)(path);
  }
  return r;
}
