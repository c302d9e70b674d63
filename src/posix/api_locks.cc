// The C API's locks: flock (on the container's lock object, per open file
// description), record locks (POSIX and OFD, on the host file, with the
// kernel's access checks), and the one-process lock of a shared writable map.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>

#include "container/container.h"
#include "posix/api_internal.h"
#include "posix/descriptor_table.h"
#include "posix/op_guard.h"
#include "posix/preload_hooks.h"
#include "upfs/upfs.h"

using namespace upfs;

extern "C" {

int upfs_map_guard(int fd) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EACCES, "a shared writable map needs a descriptor open for writing");
  int lock_fd = HostFileContainer().LockForSharedMap(*of->d->file);
  if (lock_fd < 0 && errno == EAGAIN)
    return FailErrno(EAGAIN, "another process has a shared writable map of the file");
  if (lock_fd < 0) return FailErrno(errno, "lock the file for a shared writable map");
  return lock_fd;
}

int upfs_flock(int fd, int op) {
  std::shared_ptr<Description> d;
  {
    OpGuard g(DescriptorUse::Only(fd));
    OpenFile* of = LookupForUse(fd);
    if (!of) return FailErrno(EBADF, "not a upfs descriptor");
    d = of->d;
  }
  // flock locks belong to the open file description: each description
  // locks through a description of its own of the file's lock object
  // (Container::Flock). The description's lock is held meanwhile:
  // a blocking flock holds it while waiting, as the kernel holds the
  // description's; d keeps everything alive.
  std::lock_guard<std::mutex> g(d->flock_mu);
  if (HostFileContainer().Flock(HostIdentity{d->dev, d->ino}, &d->flock_fd, op) != 0)
    return FailErrno(errno, "flock failed");
  return 0;
}

int upfs_fcntl_lock(int fd, int cmd, struct flock* lock) {
  if (!lock) return FailErrno(EFAULT, "null lock");
  std::shared_ptr<Description> d;
  {
    OpGuard g(DescriptorUse::Only(fd));
    OpenFile* of = LookupForUse(fd);
    if (!of) return FailErrno(EBADF, "not a upfs descriptor");
    d = of->d;
  }
  if (d->pool) return FailErrno(ENOTSUP, "record locks on files in a pool are not supported yet");
  const int acc = d->flags & O_ACCMODE;
  const bool set = cmd != F_GETLK && cmd != F_OFD_GETLK;
  if (set && lock->l_type == F_WRLCK && acc == O_RDONLY)
    return FailErrno(EBADF, "a write lock needs a descriptor open for writing");
  if (set && lock->l_type == F_RDLCK && acc == O_WRONLY)
    return FailErrno(EBADF, "a read lock needs a descriptor open for reading");
  int lock_fd;
  if (cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK) {
    // OFD locks belong to the open file description: a description of the
    // host file of our own per upfs description, with the File's access.
    std::lock_guard<std::mutex> g(d->ofd_mu);
    if (d->ofd_fd < 0) {
      const std::string self =
          "/proc/self/fd/" + std::to_string(HostFileContainer().HostFd(*d->file));
      d->ofd_fd = open(self.c_str(), (d->file->read_only() ? O_RDONLY : O_RDWR) | O_CLOEXEC);
      if (d->ofd_fd < 0) return FailErrno(errno, "open the host file for its locks");
    }
    lock_fd = d->ofd_fd;
  } else {
    // POSIX record locks belong to the process: any descriptor of the file
    // takes them, and the File's own one may write.
    lock_fd = HostFileContainer().HostFd(*d->file);
  }
  // The kernel would read SEEK_CUR against the host descriptor's offset
  // and SEEK_END against the host file's size, neither of which is the
  // upfs file's: the range is made absolute first, as the kernel makes it
  // from its own offset and size.
  struct flock abs = *lock;
  if (lock->l_whence == SEEK_CUR || lock->l_whence == SEEK_END) {
    int64_t base;
    if (lock->l_whence == SEEK_CUR) {
      std::lock_guard<std::mutex> pl(d->pos_mu);
      base = int64_t(d->pos);
    } else {
      uint64_t size;
      if (Status st = d->file->Size(&size); !st.ok()) return Fail(st);
      base = int64_t(size);
    }
    int64_t start;
    if (__builtin_add_overflow(base, int64_t(lock->l_start), &start) || start < 0)
      return FailErrno(EINVAL, "lock range starts before the file or overflows");
    abs.l_whence = SEEK_SET;
    abs.l_start = off_t(start);
  }
  // d keeps lock_fd open while we may block on it.
  int r;
  do {
    r = fcntl(lock_fd, cmd, &abs);
  } while (r != 0 && errno == EINTR && cmd != F_SETLKW && cmd != F_OFD_SETLKW);
  if (r != 0) return FailErrno(errno, "fcntl lock failed");
  // A query reports the conflicting lock (absolute), or F_UNLCK alone.
  if (!set) {
    if (abs.l_type == F_UNLCK) lock->l_type = F_UNLCK;
    else *lock = abs;
  }
  return 0;
}

}  // extern "C"
