#include "medium/provide.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>

namespace upfs {

namespace {
constexpr uint64_t kProvidePage = 4096;
}  // namespace

Status ProvideMemory(void* addr, uint64_t len, const char* what) {
  if (len == 0) return Status::OK();
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t lo = a & ~uintptr_t(kProvidePage - 1);
  const uintptr_t hi = (a + len + kProvidePage - 1) & ~uintptr_t(kProvidePage - 1);
  int rc;
  do {
    rc = madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
  } while (rc != 0 && (errno == EINTR || errno == EAGAIN));
  if (rc == 0) return Status::OK();
  // EINVAL: a kernel without the advice; EFAULT: a page would have been a
  // SIGBUS (no memory or space behind it); ENOMEM: out of memory.
  if (errno == EINVAL) return Status::OK();
  return Status::Error(ENOSPC, std::string("no space behind the ") + what +
                                   " (is the file system holding it full?)");
}

Status ForEachHole(int fd, uint64_t from, uint64_t to, const std::string& what,
                   const std::function<Status(uint64_t, uint64_t)>& fn) {
  for (uint64_t pos = from; pos < to;) {
    const off_t hole = lseek(fd, off_t(pos), SEEK_HOLE);
    if (hole < 0) {
      if (errno == ENXIO) return Status::OK();  // pos at or past the end
      return Status::FromErrno("look for holes in " + what);
    }
    if (uint64_t(hole) >= to) return Status::OK();
    off_t data = lseek(fd, hole, SEEK_DATA);
    if (data < 0 && errno != ENXIO) return Status::FromErrno("look for data in " + what);
    const uint64_t end = data < 0 ? to : std::min<uint64_t>(uint64_t(data), to);
    if (end <= uint64_t(hole)) {  // filled meanwhile (by another process): look again past it
      pos = uint64_t(hole) + 1;
      continue;
    }
    UPFS_RETURN_IF_ERROR(fn(uint64_t(hole), end));
    pos = end;
  }
  return Status::OK();
}

Status ProvideFileRange(int fd, uint64_t from, uint64_t to, const std::string& what) {
  return ForEachHole(fd, from, to, what, [&](uint64_t hole, uint64_t end) {
    // KEEP_SIZE: a caller's `to` past the end must not grow the file.
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, off_t(hole), off_t(end - hole)) != 0) {
      if (errno == EOPNOTSUPP) return Status::OK();  // nothing better can be done there
      if (errno == ENOSPC) return Status::Error(ENOSPC, "no space to back " + what + " (the file system is full)");
      return Status::FromErrno("allocate " + what);
    }
    return Status::OK();
  });
}

}  // namespace upfs
