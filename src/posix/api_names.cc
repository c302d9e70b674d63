// The C API's calls on names: whether a path is a upfs file, unlink and
// rename (which tell the container when a file lost its last name), and
// sweeping what killed processes left.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "container/container.h"
#include "posix/api_internal.h"
#include "posix/pool_api.h"
#include "posix/pool_escape.h"
#include "posix/file_registry.h"
#include "posix/preload_hooks.h"
#include "upfs/upfs.h"

namespace upfs {
namespace {

// The identity of the file at dirfd/path if it may be a upfs file with a
// single link (its shared state goes with that link). The shared state is
// named by inode, so a file whose header is damaged is covered too.
bool LastLinkIdentity(int dirfd, const char* path, HostIdentity* id) {
  struct stat st;
  if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0 || !MaybeUpfs(st) || st.st_nlink != 1)
    return false;
  *id = HostIdentity{uint64_t(st.st_dev), uint64_t(st.st_ino)};
  return true;
}


}  // namespace
}  // namespace upfs

using namespace upfs;

extern "C" {

int upfs_is_upfs_file(const char* path) {
  struct stat st;
  if (!path) return FailErrno(EFAULT, "null path");
  if (fstatat(AT_FDCWD, path, &st, 0) != 0) return FailErrno(errno, "stat failed");
  if (!S_ISREG(st.st_mode)) return 0;
  // The marker answers for callers that may not read the file.
  if (HostFileContainer().Marked(st)) return 1;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == EACCES ? 0 : FailErrno(errno, "open failed");
  int r = HostFileContainer().Holds(fd) ? 1 : 0;
  close(fd);
  return r;
}

int upfs_unlinkat(int dirfd, const char* path, int flags) {
  if (!path) return FailErrno(EFAULT, "null path");
  if (flags & ~AT_REMOVEDIR) return FailErrno(EINVAL, "bad unlinkat flags");
  if (PoolPath p; InPool(dirfd, path, &p))
    return FollowEscape({&p}, [&] { return PoolUnlink(p, flags & AT_REMOVEDIR); },
                        [&](const std::string& to, int) { return upfs_unlinkat(AT_FDCWD, to.c_str(), flags); });
  if (flags & AT_REMOVEDIR) return unlinkat(dirfd, path, flags) == 0 ? 0 : FailErrno(errno, "rmdir failed");
  HostIdentity id{};
  bool last_link = LastLinkIdentity(dirfd, path, &id);
  if (unlinkat(dirfd, path, 0) != 0) return FailErrno(errno, "unlink failed");
  // A parked File of it would keep its space and shared state; destroying
  // it removes the shared state if nobody else uses the file.
  if (last_link && !DropParkedFile(dev_t(id.dev), ino_t(id.ino))) HostFileContainer().Unlinked(id);
  return 0;
}

int upfs_unlink(const char* path) { return upfs_unlinkat(AT_FDCWD, path, 0); }

int upfs_sweep(unsigned* removed, unsigned* in_use) {
  uint32_t r = 0, u = 0;
  Status st = HostFileContainer().Sweep(&r, &u);
  if (!st.ok()) return Fail(st);
  if (removed) *removed = r;
  if (in_use) *in_use = u;
  return 0;
}

int upfs_drop_closed_files(void) {
  DropAllParkedFiles();
  return 0;
}

int upfs_renameat2(int olddirfd, const char* oldpath, int newdirfd, const char* newpath,
                   unsigned int flags) {
  if (!oldpath || !newpath) return FailErrno(EFAULT, "null path");
  PoolPath po, pn;
  const bool in_old = InPool(olddirfd, oldpath, &po), in_new = InPool(newdirfd, newpath, &pn);
  if (in_old && in_new) {
    return FollowEscape({&po, &pn}, [&] { return PoolRename(po, pn, flags); },
                        [&](const std::string& to, int which) {
                          return which == 0 ? upfs_renameat2(AT_FDCWD, to.c_str(), newdirfd, newpath, flags)
                                            : upfs_renameat2(olddirfd, oldpath, AT_FDCWD, to.c_str(), flags);
                        });
  }
  if (in_old || in_new) {
    if (PathTooLong(oldpath) || PathTooLong(newpath)) return FailErrno(ENAMETOOLONG, "path too long");
    return FailErrno(EXDEV, "rename between a pool and anything else");
  }
  // The file replaced by the rename loses its last link, unless it is the
  // renamed file itself (two links to one inode) or they are exchanged.
  HostIdentity id{};
  bool replaced = !(flags & RENAME_EXCHANGE) && LastLinkIdentity(newdirfd, newpath, &id);
  if (replaced) {
    struct stat src;
    if (fstatat(olddirfd, oldpath, &src, AT_SYMLINK_NOFOLLOW) == 0 && src.st_dev == id.dev &&
        src.st_ino == id.ino)
      replaced = false;
  }
  if (renameat2(olddirfd, oldpath, newdirfd, newpath, flags) != 0)
    return FailErrno(errno, "rename failed");
  if (replaced && !DropParkedFile(dev_t(id.dev), ino_t(id.ino))) HostFileContainer().Unlinked(id);
  return 0;
}

}  // extern "C"
