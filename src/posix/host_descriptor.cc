#include "posix/host_descriptor.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace upfs {

namespace {

// F_SETSIG values that record an access mode (kernel signal numbers 63 and
// 64; 0, the default, records nothing).
constexpr int kWriteOnlyTag = 63;
constexpr int kReadWriteTag = 64;

}  // namespace

Status ProtectHostDescriptor(int fd, int access, bool may_reopen, bool known_read_only) {
  if (known_read_only) {
    // A new description records nothing (F_GETSIG 0): only a mode to
    // record costs a system call.
    if (access == O_RDONLY) return Status::OK();
    const int tag = access == O_WRONLY ? kWriteOnlyTag : kReadWriteTag;
    if (fcntl(fd, F_SETSIG, tag) != 0) return Status::FromErrno("F_SETSIG");
    return Status::OK();
  }
  int status = fcntl(fd, F_GETFL);
  if (status < 0) return Status::FromErrno("F_GETFL");
  if ((status & O_ACCMODE) != O_RDONLY && may_reopen) {
    int fd_flags = fcntl(fd, F_GETFD);
    if (fd_flags < 0) return Status::FromErrno("F_GETFD");
    // The file status flags (F_GETFL also reports open-time flags such as
    // O_NOFOLLOW, which must not apply to the /proc/self/fd link).
    const int keep =
        status & (O_APPEND | O_NONBLOCK | O_NOATIME | O_DSYNC | O_SYNC | O_DIRECT | O_LARGEFILE);
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    int ro = open(self.c_str(), O_RDONLY | keep | O_CLOEXEC);
    if (ro < 0 && errno == EPERM && (keep & O_NOATIME)) ro = open(self.c_str(), O_RDONLY | (keep & ~O_NOATIME) | O_CLOEXEC);
    if (ro < 0) return Status::FromErrno("open the host file read-only");
    int r = dup3(ro, fd, (fd_flags & FD_CLOEXEC) ? O_CLOEXEC : 0);
    int err = errno;
    close(ro);
    if (r < 0) return Status::Error(err, "replace the descriptor by a read-only one");
  }
  int tag = access == O_WRONLY ? kWriteOnlyTag : access == O_RDWR ? kReadWriteTag : 0;
  if (fcntl(fd, F_SETSIG, tag) != 0) return Status::FromErrno("F_SETSIG");
  return Status::OK();
}

int RecordedAccess(int fd) {
  int tag = fcntl(fd, F_GETSIG);
  if (tag == kWriteOnlyTag) return O_WRONLY;
  if (tag == kReadWriteTag) return O_RDWR;
  return -1;
}

}  // namespace upfs
