// Descriptor-level extensions of the C API used by the LD_PRELOAD layer:
// duplication (dup/dup2/dup3/F_DUPFD), the O_APPEND status flag, the
// access mode of an inherited descriptor, and the host descriptor.
#include <fcntl.h>

#include <mutex>

#include "posix/api_internal.h"
#include "posix/descriptor_table.h"
#include "posix/file_registry.h"
#include "posix/host_descriptor.h"
#include "posix/op_guard.h"
#include "posix/preload_hooks.h"
#include "upfs/upfs.h"

namespace upfs {

int ApiAdoptDuplicate(int oldfd, int newfd) {
  OpGuard g;  // two descriptors: any
  OpenFile* old = Lookup(oldfd);
  if (!old) return FailErrno(EBADF, "not a upfs descriptor");
  std::atomic<OpenFile*>* slot = FdSlot(newfd, true);
  if (!slot) return FailErrno(EMFILE, "descriptor number too large for upfs");
  auto* of = new OpenFile();
  of->fd = newfd;
  of->d = old->d;
  OpenFile* prev = slot->exchange(of, std::memory_order_seq_cst);
  if (prev) RetireDescriptor(newfd, [prev] { delete prev; });
  return newfd;
}

int ApiSetAppend(int fd, bool on) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  std::lock_guard<std::mutex> pl(of->d->pos_mu);
  of->d->flags = (of->d->flags & ~O_APPEND) | (on ? O_APPEND : 0);
  return 0;
}

std::shared_ptr<File> ApiFileOf(int fd, int* flags) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return nullptr;
  if (flags) *flags = of->d->flags;
  return of->d->file;
}

int ApiGetFlags(int fd) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  return of->d->flags;
}

}  // namespace upfs


using namespace upfs;

extern "C" {

int upfs_adopt_dup(int oldfd, int newfd) { return upfs::ApiAdoptDuplicate(oldfd, newfd); }

int upfs_set_append(int fd, int on) { return upfs::ApiSetAppend(fd, on != 0); }

int upfs_get_flags(int fd) { return upfs::ApiGetFlags(fd); }

void upfs_before_exit(void) { upfs::LeaveFilesBeforeExit(); }

int upfs_inherited_flags(int host_fd) {
  int status = fcntl(host_fd, F_GETFL);
  if (status < 0) return FailErrno(errno, "F_GETFL failed");
  int acc = RecordedAccess(host_fd);
  if (acc < 0) acc = status & O_ACCMODE;
  return acc | (status & O_APPEND);
}

int upfs_host_fd(int fd) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  return of->fd;
}

}  // extern "C"
