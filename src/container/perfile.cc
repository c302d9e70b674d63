#include "container/perfile.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "format/header.h"
#include "medium/medium.h"
#include "medium/pm.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

namespace {

// Initial size of a new file: header, first log block, and room for a few
// data blocks; it grows from there (Medium::Grow).
constexpr uint64_t kInitialBytes = 16 * 1024;
// An interrupted creation never grew past its initial size, which was one
// extent in earlier versions.
constexpr uint64_t kMaxInterruptedCreationBytes = kExtentSize;
constexpr uint32_t kFirstLogBlock = 1;

class FlockGuard {
 public:
  FlockGuard(int fd, int op) : fd_(fd) {
    while (flock(fd_, op) != 0 && errno == EINTR) {
    }
  }
  ~FlockGuard() { Unlock(); }
  // Before the descriptor is closed: unlocking a closed number could
  // unlock a file another thread has just opened under it.
  void Unlock() {
    if (fd_ >= 0) flock(fd_, LOCK_UN);
    fd_ = -1;
  }
  // The descriptor was closed by someone else (which dropped the lock).
  void Forget() { fd_ = -1; }

 private:
  int fd_;
};

uint64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Writes header and first log block. The magic goes last, in its own
// persisted store, so an interrupted creation leaves a file whose first
// blocks are zero (recognised and initialized again by the next creator).
Status InitNewFile(Medium* m, Consistency consistency) {
  UPFS_RETURN_IF_ERROR(m->Grow(kInitialBytes));
  char* base = m->base();
  alignas(64) static thread_local unsigned char img[kBlockSize];
  std::memset(img, 0, sizeof(img));
  auto* lb = reinterpret_cast<LogBlock*>(img);
  lb->next.store(NextWord(0), std::memory_order_relaxed);
  lb->seq = 1;
  pm::CopyNT(base + kFirstLogBlock * kBlockSize, img, kBlockSize);

  std::memset(img, 0, sizeof(img));
  auto* h = reinterpret_cast<FileHeader*>(img);
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->format_version = kFormatVersion;
  h->block_size = kBlockSize;
  h->consistency = uint32_t(consistency);
  h->flags = 0;
  if (getrandom(&h->file_id, sizeof(h->file_id), 0) != sizeof(h->file_id))
    return Status::FromErrno("getrandom");
  h->created_ns = NowNs();
  h->header_crc = Crc32c(img, offsetof(FileHeader, header_crc));
  h->log_head.store(kFirstLogBlock, std::memory_order_relaxed);
  h->mtime_ns.store(h->created_ns, std::memory_order_relaxed);
  pm::CopyNT(base + sizeof(kMagic), img + sizeof(kMagic), kBlockSize - sizeof(kMagic));
  pm::Fence();
  pm::CopyNT(base, img, sizeof(kMagic));
  pm::Fence();
  return m->Sync();
}

}  // namespace

Status OpenPerFile(int host_fd, const std::string& path, bool create, Consistency consistency,
                   std::unique_ptr<File>* out) {
  // Our own read/write description of the file: the caller's may be
  // read-only or write-only, and the mapping needs both.
  std::string self = "/proc/self/fd/" + std::to_string(host_fd);
  int fd = open(self.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path + " for mapping");
  struct stat st;
  std::unique_ptr<Medium> medium;
  {
    // Creation holds the file exclusively; everybody else waits for it
    // while checking the header.
    FlockGuard lock(fd, create ? LOCK_EX : LOCK_SH);
    auto reject = [&](Status s) {
      lock.Unlock();
      close(fd);
      return s;
    };
    if (Status s = StatRegular(fd, path, &st); !s.ok()) return reject(s);
    bool fresh = st.st_size == 0;
    bool upfs = !fresh && LooksLikeUpfs(fd);
    if (!fresh && !upfs && create && uint64_t(st.st_size) <= kMaxInterruptedCreationBytes) {
      char buf[2 * kBlockSize];
      ssize_t r = pread(fd, buf, sizeof(buf), 0);
      fresh = r == ssize_t(sizeof(buf)) && IsInterruptedCreation(buf);
    }
    if (st.st_size == 0 && !create)
      return reject(Status::Error(EMEDIUMTYPE, path + ": empty file, not a upfs file"));
    if (!fresh && !upfs)
      return reject(Status::Error(EMEDIUMTYPE, path + ": not a upfs file (no upfs magic)"));
    if (Status s = Medium::Open(fd, path, &medium); !s.ok()) {
      lock.Forget();  // Medium::Open closed fd
      return s;
    }
    if (fresh) {
      if (!create) return Status::Error(EMEDIUMTYPE, path + ": not a upfs file");
      UPFS_RETURN_IF_ERROR(InitNewFile(medium.get(), consistency));
    }
    UPFS_RETURN_IF_ERROR(ValidateHeader(medium->base(), medium->capacity()));
  }
  const auto* h = reinterpret_cast<const FileHeader*>(medium->base());
  SharedState::Identity id{h->file_id, h->created_ns, uint64_t(st.st_dev), uint64_t(st.st_ino)};
  std::unique_ptr<SharedState> shared;
  bool rebuild = false;
  UPFS_RETURN_IF_ERROR(SharedState::Open(id, st.st_mode, &shared, &rebuild));
  return File::Open(std::move(medium), std::move(shared), rebuild, out);
}

}  // namespace upfs
