#include "medium/medium.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "medium/pm.h"

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace upfs {

namespace pm {
std::atomic<Recorder*> g_recorder{nullptr};
}

namespace {

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t NextPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Growth step: at least one extent, and an eighth of the file beyond that,
// so that the number of fallocate calls grows with log(size).
uint64_t GrowthTarget(uint64_t current, uint64_t wanted) {
  uint64_t step = std::max<uint64_t>(kExtentSize, RoundUp(current / 8, kExtentSize));
  return RoundUp(std::max(wanted, current + step), kExtentSize);
}

bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* v = getenv("UPFS_HUGEPAGES");
    return !(v && v[0] == '0');
  }();
  return wanted;
}

}  // namespace

const char* MediumKindName(MediumKind k) {
  switch (k) {
    case MediumKind::kDax:
      return "dax";
    case MediumKind::kTmpfs:
      return "tmpfs";
    case MediumKind::kPageCache:
      return "page-cache";
  }
  return "unknown";
}

const char* MediumDurability(MediumKind k) {
  switch (k) {
    case MediumKind::kDax:
      return "persistent memory: every completed operation survives process crashes and "
             "power loss";
    case MediumKind::kTmpfs:
      return "memory (tmpfs): completed operations survive process crashes; everything is "
             "lost at power loss or reboot";
    case MediumKind::kPageCache:
      return "page cache: completed operations survive process crashes; only data made "
             "durable by fsync/fdatasync survives power loss";
  }
  return "unknown";
}

Status DetectMedium(int fd, MediumKind* kind) {
  struct statfs sfs;
  if (fstatfs(fd, &sfs) != 0) return Status::FromErrno("fstatfs");
  if (sfs.f_type == TMPFS_MAGIC) {
    *kind = MediumKind::kTmpfs;
    return Status::OK();
  }
  // A MAP_SYNC mapping only succeeds on a DAX file: the proof of real PM.
  void* p = mmap(nullptr, kPageSize, PROT_READ, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
  if (p != MAP_FAILED) {
    munmap(p, kPageSize);
    *kind = MediumKind::kDax;
    return Status::OK();
  }
  *kind = MediumKind::kPageCache;
  return Status::OK();
}

Medium::Medium(int fd, std::string path, MediumKind kind, bool read_only)
    : fd_(fd), path_(std::move(path)), kind_(kind), read_only_(read_only) {}

Medium::~Medium() {
  JoinBackground();
  char* b = base_.load();
  if (b) munmap(b, reserved_);
  for (const Region& r : retired_) munmap(r.addr, r.len);
  if (fd_ >= 0) close(fd_);
}

Status Medium::Open(int fd, const std::string& path, std::unique_ptr<Medium>* out,
                    bool read_only) {
  MediumKind kind;
  Status st = DetectMedium(fd, &kind);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  std::unique_ptr<Medium> m(new Medium(fd, path, kind, read_only));
  UPFS_RETURN_IF_ERROR(m->RefreshCapacity());
  {
    std::lock_guard<std::mutex> g(m->grow_mu_);
    UPFS_RETURN_IF_ERROR(m->MapLocked(m->capacity()));
  }
  if (m->kind_ == MediumKind::kTmpfs && !read_only && HugePagesWanted() &&
      m->capacity() >= 3 * kExtentSize) {
    std::lock_guard<std::mutex> g(m->work_mu_);
    m->StartWorkerLocked();
  }
  *out = std::move(m);
  return Status::OK();
}

Status Medium::RefreshCapacity() {
  struct stat st;
  if (fstat(fd_, &st) != 0) return Status::FromErrno("fstat " + path_);
  uint64_t cur = capacity_.load();
  while (uint64_t(st.st_size) > cur &&
         !capacity_.compare_exchange_weak(cur, uint64_t(st.st_size))) {
  }
  return Status::OK();
}

Status Medium::Reserve(uint64_t bytes, char** out, uint64_t* len_out) {
  // Over-reserve by an extent so the base can be aligned to 2 MiB, which lets
  // the kernel back the mapping with huge pages.
  uint64_t len = std::max<uint64_t>(uint64_t{1} << 30, NextPow2(bytes * 2));
  void* raw = mmap(nullptr, len + kExtentSize, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return Status::FromErrno("reserve address space");
  uintptr_t aligned = RoundUp(reinterpret_cast<uintptr_t>(raw), kExtentSize);
  uintptr_t head = aligned - reinterpret_cast<uintptr_t>(raw);
  if (head) munmap(raw, head);
  if (kExtentSize - head) munmap(reinterpret_cast<char*>(aligned) + len, kExtentSize - head);
  *out = reinterpret_cast<char*>(aligned);
  *len_out = len;
  return Status::OK();
}

Status Medium::MapRange(char* b, uint64_t from, uint64_t to) {
  int flags = MAP_SHARED | MAP_FIXED;
  if (kind_ == MediumKind::kDax && !read_only_) flags = MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED;
  int prot = read_only_ ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = mmap(b + from, to - from, prot, flags, fd_, off_t(from));
  if (p == MAP_FAILED) return Status::FromErrno("mmap " + path_);
  // Fault the new pages in now, in one call, rather than one by one on the
  // write path (huge pages come later, from the background worker).
  if (kind_ == MediumKind::kTmpfs && !read_only_) madvise(b + from, to - from, MADV_POPULATE_WRITE);
  return Status::OK();
}

Status Medium::MapLocked(uint64_t bytes) {
  bytes = RoundUp(bytes, kPageSize);
  uint64_t mapped = mapped_.load();
  if (bytes <= mapped) return Status::OK();
  if (base_.load() == nullptr || bytes > reserved_) {
    // A new, larger reservation, fully mapped before it is published; the
    // old one stays valid (readers may hold its base) until close. Readers
    // load mapped_ before base_, and base_ is stored first, so a reader
    // never pairs the old base with the new length.
    char* nb;
    uint64_t len;
    UPFS_RETURN_IF_ERROR(Reserve(bytes, &nb, &len));
    Status st = MapRange(nb, 0, bytes);
    if (!st.ok()) {
      munmap(nb, len);
      return st;
    }
    char* old = base_.load();
    if (old) retired_.push_back({old, reserved_});
    reserved_ = len;
    base_.store(nb, std::memory_order_release);
    mapped_.store(bytes, std::memory_order_release);
    return Status::OK();
  }
  UPFS_RETURN_IF_ERROR(MapRange(base_.load(), mapped, bytes));
  mapped_.store(bytes, std::memory_order_release);
  return Status::OK();
}

Status Medium::EnsureMapped(uint64_t bytes) {
  if (bytes <= mapped_.load(std::memory_order_acquire)) return Status::OK();
  UPFS_RETURN_IF_ERROR(RefreshCapacity());
  if (bytes > capacity()) {
    return Status::Corrupt("block pointer",
                           "refers past the end of the host file (" + std::to_string(bytes) +
                               " > " + std::to_string(capacity()) + " bytes)");
  }
  std::lock_guard<std::mutex> g(grow_mu_);
  return MapLocked(capacity());
}

Status Medium::Grow(uint64_t bytes) {
  if (read_only_) return Status::Error(EROFS, "medium opened read-only");
  if (bytes > kMaxMediumBytes) return Status::Error(EFBIG, "file would exceed upfs limit");
  std::lock_guard<std::mutex> g(grow_mu_);
  UPFS_RETURN_IF_ERROR(RefreshCapacity());
  uint64_t cur = capacity();
  if (bytes > cur) {
    uint64_t target = std::min<uint64_t>(GrowthTarget(cur, bytes), kMaxMediumBytes);
    // fallocate is idempotent, so racing growers in other processes are fine.
    int rc = posix_fallocate(fd_, off_t(cur), off_t(target - cur));
    if (rc != 0) return Status::Error(rc, "grow " + path_);
    UPFS_RETURN_IF_ERROR(RefreshCapacity());
  }
  return MapLocked(capacity());
}

void Medium::GrowAhead(uint64_t bytes, std::function<void()> done) {
  if (read_only_) return;
  std::lock_guard<std::mutex> g(work_mu_);
  if (stopping_) return;
  if (bytes > grow_target_ && bytes > capacity()) {
    grow_target_ = bytes;
    grow_done_ = std::move(done);
    growing_.store(true, std::memory_order_release);
  }
  StartWorkerLocked();
}

void Medium::StartWorkerLocked() {
  if (worker_running_) return;
  if (worker_.joinable()) worker_.join();  // a finished previous worker
  worker_running_ = true;
  worker_ = std::thread([this] { WorkerLoop(); });
}

void Medium::WorkerLoop() {
  for (;;) {
    uint64_t target = 0;
    std::function<void()> done;
    {
      std::lock_guard<std::mutex> g(work_mu_);
      if (stopping_) break;
      target = grow_target_;
      grow_target_ = 0;
      done = std::move(grow_done_);
      grow_done_ = nullptr;
      if (!target) growing_.store(false, std::memory_order_release);
    }
    if (target) {
      if (Grow(target).ok() && done) done();
      continue;
    }
    // Idle: collapse one extent behind the frontier (the last two extents,
    // where appends land, are left until the file has grown past them).
    char* b = base();
    uint64_t mapped = mapped_bytes();
    bool collapse = kind_ == MediumKind::kTmpfs && HugePagesWanted() &&
                    collapsed_ + 3 * kExtentSize <= mapped;
    if (!collapse) break;
    madvise(b + collapsed_, kExtentSize, MADV_COLLAPSE);
    collapsed_ += kExtentSize;
  }
  std::lock_guard<std::mutex> g(work_mu_);
  growing_.store(false, std::memory_order_release);
  worker_running_ = false;
}

void Medium::JoinBackground() {
  {
    std::lock_guard<std::mutex> g(work_mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

Status Medium::Sync() {
  if (kind_ == MediumKind::kPageCache) {
    char* b = base();
    uint64_t n = mapped_bytes();
    if (n && msync(b, n, MS_SYNC) != 0) return Status::FromErrno("msync " + path_);
    return Status::OK();
  }
  pm::Fence();
  return Status::OK();
}

}  // namespace upfs
