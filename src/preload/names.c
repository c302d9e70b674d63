/* Calls on names: rename, unlink and remove, which also remove the shared
 * state of a upfs file that loses its last link. */
#include "preload_internal.h"

/* ---------------------------------------------------------- unlink, remove */

/* unlink that also removes the shared state of a upfs file's last link. */
/* upfs_unlinkat and upfs_renameat2 act like the kernel calls and also
 * remove the shared state of a upfs file that loses its last link. */
static int do_unlinkat(int dirfd, const char *path) {
  int saved = errno;
  if (upfs_unlinkat(dirfd, path) != 0) return -1;
  errno = saved;
  return 0;
}
static int do_renameat2(int od, const char *op, int nd, const char *np, unsigned int flags) {
  int saved = errno;
  if (upfs_renameat2(od, op, nd, np, flags) != 0) return -1;
  errno = saved;
  return 0;
}
EXPORT int rename(const char *op, const char *np) {
  return do_renameat2(AT_FDCWD, op, AT_FDCWD, np, 0);
}
EXPORT int renameat(int od, const char *op, int nd, const char *np) {
  return do_renameat2(od, op, nd, np, 0);
}
EXPORT int renameat2(int od, const char *op, int nd, const char *np, unsigned int flags) {
  return do_renameat2(od, op, nd, np, flags);
}
EXPORT int unlink(const char *path) { return do_unlinkat(AT_FDCWD, path); }
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
