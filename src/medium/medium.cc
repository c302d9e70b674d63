#include "medium/medium.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include "medium/cpu_support.h"
#include "medium/huge_page_choice.h"
#include "medium/mman_compat.h"
#include "medium/provide.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/env_switch.h"

namespace upfs {

namespace pm {
std::atomic<Recorder*> g_recorder{nullptr};
}

namespace {

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

int64_t NsOf(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

uint64_t NextPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Growth step: below one extent a file doubles (in small pages: a journal
// or a lock file needs kilobytes, not a zeroed 2 MiB huge page) up to the
// extent boundary; from there at least one extent, and an eighth of the
// file beyond that, so that the number of fallocate calls grows with
// log(size).
uint64_t GrowthTarget(uint64_t current, uint64_t wanted) {
  if (current < kExtentSize && wanted <= kExtentSize)
    return std::min(kExtentSize, RoundUp(std::max(wanted, 2 * current), kPageSize));
  uint64_t step = std::max<uint64_t>(kExtentSize, RoundUp(current / 8, kExtentSize));
  return RoundUp(std::max(wanted, current + step), kExtentSize);
}

bool HugePagesWanted() {
  static const bool wanted = EnvSwitchOn("UPFS_HUGEPAGES");
  return wanted;
}

int64_t SteadyNs() { return NsOf(std::chrono::steady_clock::now().time_since_epoch()); }

// Process-wide, as the kernel's free memory is (huge_page_choice.h).
HugePageChoice g_huge_pages;

// What Grow allocates at the start of a fresh extent before collapsing it
// (see Grow: with one or two pages present the collapse is slow).
constexpr uint64_t kCollapseSeed = 64 * 1024;

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

Status StatRegular(int fd, const std::string& path, struct stat* st) {
  if (fstat(fd, st) != 0) return Status::FromErrno("fstat " + path);
  if (!S_ISREG(st->st_mode)) return Status::Error(EINVAL, path + ": not a regular file");
  return Status::OK();
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

void Medium::ForgetDescriptorAfterFork() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status Medium::Open(int fd, const std::string& path, std::unique_ptr<Medium>* out,
                    bool read_only) {
  // Before any CRC or 16-byte CAS runs on this medium's content.
  if (Status cpu = CheckCpuSupport(); !cpu.ok()) {
    close(fd);
    return cpu;
  }
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
    UPFS_RETURN_IF_ERROR(m->MapLocked(m->capacity(), /*populate=*/false));
  }
  // Existing extents of a large file are collapsed into huge pages in the
  // background. Not for small files: they gain little, and the thread
  // would cost more than the open (journals are opened and closed per
  // transaction).
  if (m->kind_ == MediumKind::kTmpfs && !read_only && HugePagesWanted() &&
      m->capacity() >= kCollapseAtOpenBytes) {
    std::lock_guard<std::mutex> g(m->work_mu_);
    m->StartWorkerLocked();
  }
  *out = std::move(m);
  return Status::OK();
}

Status Medium::RefreshCapacity() {
  struct stat st;
  if (fstat(fd_, &st) != 0) return Status::FromErrno("fstat " + path_);
  RaiseCapacity(uint64_t(st.st_size));
  return Status::OK();
}

Status Medium::Provide(uint64_t from, uint64_t to) {
  if (read_only_) return Status::Error(EROFS, "medium opened read-only");
  return ProvideFileRange(fd_, from, ClampToCapacity(to), path_);
}

Status Medium::ProvideExtents(uint64_t from, uint64_t to) {
  if (read_only_) return Status::Error(EROFS, "medium opened read-only");
  to = ClampToCapacity(to);
  if (kind_ != MediumKind::kTmpfs || !HugePagesWanted() || from % kExtentSize != 0 || to % kExtentSize != 0)
    return Provide(from, to);
  // A collapse needs the extent in this process's mapping (which the
  // caller's first store to it would make anyway).
  if (to > mapped_bytes() && !EnsureMapped(to).ok()) return Provide(from, to);
  for (uint64_t e = from; e < to; e += kExtentSize) {
    // The seed's pages first (ENOSPC is an error, not a SIGBUS), then the
    // collapse, which gives the rest of the extent its memory at once.
    if (const int rc = posix_fallocate(fd_, off_t(e), off_t(kCollapseSeed)); rc != 0)
      return Status::Error(rc, "provide " + path_);
    if (!TryCollapse(e)) UPFS_RETURN_IF_ERROR(Provide(e, e + kExtentSize));
  }
  return Status::OK();
}

Status Medium::Release(uint64_t from, uint64_t to) {
  if (read_only_) return Status::Error(EROFS, "medium opened read-only");
  to = std::min(to, capacity());
  if (from >= to) return Status::OK();
  if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(from), off_t(to - from)) != 0)
    return Status::FromErrno("punch a hole in " + path_);
  return Status::OK();
}

void Medium::RaiseCapacity(uint64_t bytes) {
  uint64_t cur = capacity_.load();
  while (bytes > cur && !capacity_.compare_exchange_weak(cur, bytes)) {
  }
}

namespace {
std::atomic<uint64_t> g_writer_reserve_floor{uint64_t{1} << 30};
}  // namespace

void Medium::SetWriterReserveFloor(uint64_t bytes) {
  UPFS_ASSERT(bytes >= kExtentSize && bytes % kExtentSize == 0);
  g_writer_reserve_floor.store(bytes, std::memory_order_relaxed);
}

Status Medium::Reserve(uint64_t bytes, char** out, uint64_t* len_out) {
  // Over-reserve by an extent so the base can be aligned to 2 MiB, which lets
  // the kernel back the mapping with huge pages. A writer reserves at least
  // 1 GiB so that growth rarely moves the mapping; a reader (a stat, an
  // fsck) needs only what is there, and setting up and tearing down a large
  // reservation is a good part of its cost.
  uint64_t floor = read_only_ ? kExtentSize : g_writer_reserve_floor.load(std::memory_order_relaxed);
  uint64_t len = std::max<uint64_t>(floor, NextPow2(bytes * 2));
  char* p = MapExtentAligned(len, PROT_NONE);
  if (!p) return Status::FromErrno("reserve address space");
  *out = p;
  *len_out = len;
  return Status::OK();
}

char* MapExtentAligned(uint64_t len, int prot) {
  // Over-mapped by an extent, then trimmed to the aligned part.
  void* raw = mmap(nullptr, len + kExtentSize, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  uintptr_t aligned = RoundUp(reinterpret_cast<uintptr_t>(raw), kExtentSize);
  uintptr_t head = aligned - reinterpret_cast<uintptr_t>(raw);
  if (head) munmap(raw, head);
  if (kExtentSize - head) munmap(reinterpret_cast<char*>(aligned) + len, kExtentSize - head);
  return reinterpret_cast<char*>(aligned);
}

Status Medium::MapRange(char* b, uint64_t from, uint64_t to, bool populate) {
  int flags = MAP_SHARED | MAP_FIXED;
  if (kind_ == MediumKind::kDax && !read_only_) flags = MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED;
  int prot = read_only_ ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = mmap(b + from, to - from, prot, flags, fd_, off_t(from));
  if (p == MAP_FAILED) return Status::FromErrno("mmap " + path_);
  // Fault allocated small pages in now, in one call, rather than one by
  // one on the write path. (With huge pages, Grow collapses fresh extents
  // itself, and populating here would allocate all their small pages.)
  // Not at open: there it made attaching a 1.35 GB pool take 345-434 ms
  // instead of 0.24-0.53 (UPFS_HUGEPAGES=0 against the default), every
  // page of the pool mapped before the first call returned.
  if (populate && kind_ == MediumKind::kTmpfs && !read_only_ && !HugePagesWanted())
    madvise(b + from, to - from, MADV_POPULATE_WRITE);
  return Status::OK();
}

Status Medium::MapLocked(uint64_t bytes, bool populate) {
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
    char* old = base_.load();
    // What the old reservation had mapped is mapped again by the worker,
    // from the old page table (NoteRemap), not populated here: that
    // made the caller wait for the whole file's pages, and filled its
    // holes. Only the new part is populated now, as growth populates.
    const uint64_t kept = old && PopulateUseful() ? mapped : 0;
    Status st = kept ? MapRange(nb, 0, kept, /*populate=*/false) : Status::OK();
    if (st.ok() && bytes > kept) st = MapRange(nb, kept, bytes, populate);
    if (!st.ok()) {
      munmap(nb, len);
      return st;
    }
    if (old) retired_.push_back({old, reserved_});
    reserved_ = len;
    base_.store(nb, std::memory_order_release);
    mapped_.store(bytes, std::memory_order_release);
    if (kept) NoteRemap(old, kept);
    return Status::OK();
  }
  UPFS_RETURN_IF_ERROR(MapRange(base_.load(), mapped, bytes, populate));
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

Status Medium::Grow(uint64_t bytes) { return GrowStep(bytes, nullptr); }

Status Medium::GrowStep(uint64_t bytes, const ReadyFn& ready) {
  if (read_only_) return Status::Error(EROFS, "medium opened read-only");
  if (bytes > kMaxMediumBytes) return Status::Error(EFBIG, "file would exceed upfs limit");
  std::lock_guard<std::mutex> g(grow_mu_);
  UPFS_RETURN_IF_ERROR(RefreshCapacity());
  uint64_t cur = capacity();
  if (bytes <= cur) return MapLocked(cur);
  uint64_t target = std::min<uint64_t>(GrowthTarget(cur, bytes), kMaxMediumBytes);
  // On tmpfs a fresh 2 MiB extent becomes one huge page for about 0.1 ms:
  // allocate a few pages at its start, then MADV_COLLAPSE, which fills the
  // rest with zeros. That is ~7x cheaper than allocating and mapping 512
  // small pages (fallocate + faults), and the extent is a huge page at once.
  // (Collapsing an extent with very few or all pages present costs 5-7 ms
  // on the machines measured, hence the seed size.)
  // Whole extents from `huge_from` on become huge pages; the part of a
  // small file's first extent below it stays in ordinary pages (a small
  // file jumping far, e.g. by fallocate, still gets huge pages above).
  const bool huge = kind_ == MediumKind::kTmpfs && HugePagesWanted() &&
                    target % kExtentSize == 0 && RoundUp(cur, kExtentSize) < target;
  const uint64_t huge_from = huge ? RoundUp(cur, kExtentSize) : target;
  // fallocate (never ftruncate, which could shrink a file another process
  // has grown further) is idempotent, so racing growers are fine.
  int rc = 0;
  if (cur < huge_from) rc = posix_fallocate(fd_, off_t(cur), off_t(huge_from - cur));
  if (huge) {
    for (uint64_t e = huge_from; e < target && rc == 0; e += kExtentSize)
      rc = posix_fallocate(fd_, off_t(e), off_t(kCollapseSeed));
    if (rc == 0) rc = posix_fallocate(fd_, off_t(target - kPageSize), off_t(kPageSize));
  }
  if (rc != 0) return Status::Error(rc, "grow " + path_);
  // The file is now at least `target` long (others may have grown it
  // further: the next RefreshCapacity sees that).
  RaiseCapacity(target);
  UPFS_RETURN_IF_ERROR(MapLocked(capacity()));
  if (huge) {
    // Threads that wait for this growth take extents too (HelpGrow), the
    // lowest left, as this thread does, and each publishes the bottom of
    // the step as far as it is done: an appender that outran the growth
    // goes on as soon as the next extent has its pages. (With the step
    // published at its end, a 4 KiB appender waited for each step whole:
    // up to 11.9 ms at a step of a 117 MiB file, 61-69 ms of a 96-107 ms
    // pass; docs/design.md.) A
    // collapse drains per-CPU page lists, which needs every CPU: waiters
    // that find nothing to take sleep rather than spin
    // (BlockSource::ClaimChunk).
    step_ready_.store(ready ? &ready : nullptr, std::memory_order_relaxed);
    work_.Open(huge_from / kExtentSize, target / kExtentSize);
    for (uint64_t x; work_.Take(&x);) ProvisionAndPublish(x);
    work_.Close([] { std::this_thread::sleep_for(std::chrono::microseconds(20)); });
    step_ready_.store(nullptr, std::memory_order_relaxed);  // no helper is left to read it
    if (const int failed = work_.failure()) return Status::Error(failed, "grow " + path_);
    std::lock_guard<std::mutex> wg(work_mu_);
    // Nothing left to collapse there, unless an extent got small pages.
    if (!work_.any_small_pages() && collapsed_ >= huge_from) collapsed_ = target;
  }
  return Status::OK();
}

bool Medium::TryCollapse(uint64_t e) {
  const HugePageChoice::Choice c = g_huge_pages.Now(SteadyNs());
  if (c == HugePageChoice::kSmall) return false;
  madvise(base() + e, kCollapseSeed, MADV_POPULATE_WRITE);
  const int64_t t0 = SteadyNs();
  const bool ok = madvise(base() + e, kExtentSize, MADV_COLLAPSE) == 0;
  const int64_t t1 = SteadyNs();
  g_huge_pages.NoteCollapse(c, t1 - t0, ok, t1);
  return ok;
}

bool Medium::ProvisionExtent(uint64_t e) {
  char* b = base();
  if (TryCollapse(e)) return true;
  const int64_t t0 = SteadyNs();
  if (const int rc = posix_fallocate(fd_, off_t(e), off_t(kExtentSize)); rc != 0) {
    work_.Fail(rc);
    return false;
  }
  madvise(b + e, kExtentSize, MADV_POPULATE_WRITE);
  g_huge_pages.NoteSmall(SteadyNs() - t0);
  work_.NoteSmallPages();
  return true;
}

void Medium::ProvisionAndPublish(uint64_t x) {
  // A failed extent is never finished: nothing at or above it is published
  // before the step ends (and then the growth reports the failure).
  if (!ProvisionExtent(x * kExtentSize)) return;
  const uint64_t done_to = work_.Finish(x);
  // Loaded after the take, whose acquire pairs with the step's Open (the
  // growing thread stores it before); cleared only after Close has waited
  // for helpers.
  const ReadyFn* ready = step_ready_.load(std::memory_order_relaxed);
  if (ready && done_to) (*ready)(done_to * kExtentSize);
}

bool Medium::HelpGrow() {
  work_.Enter();
  uint64_t x;
  const bool took = work_.Take(&x);
  if (took) ProvisionAndPublish(x);
  work_.Leave();
  return took;
}

void Medium::GrowAhead(uint64_t bytes, ReadyFn ready) {
  if (read_only_) return;
  std::lock_guard<std::mutex> g(work_mu_);
  if (stopping_) return;
  if (bytes > grow_target_ && bytes > capacity()) {
    grow_target_ = bytes;
    grow_ready_ = std::move(ready);
    growing_.store(true, std::memory_order_release);
  }
  StartWorkerLocked();
  work_cv_.notify_all();
}

void Medium::StartWorkerLocked() {
  if (worker_running_) return;
  if (worker_.joinable()) worker_.join();  // a finished previous worker
  worker_running_ = true;
  worker_ = std::thread([this] { WorkerLoop(); });
}

void Medium::WorkerLoop() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kQuiet = std::chrono::seconds(1);
  std::unique_lock<std::mutex> lk(work_mu_);
  for (;;) {
    if (stopping_) break;
    // Mapping work (the pages of a moved mapping, then population) runs
    // while no growth is asked for and, while it is, for a share of the
    // time the growth steps take (MappingShare): a writer whose shadows grow its
    // file asks for growth step after step, for seconds, and a remap that
    // waited for a quiet moment left it faulting all that time (seen: no
    // extent remapped in six passes of random 2 KiB writes over 1 GiB);
    // a reader's population waited so behind an appender's growth. Not
    // while a thread waits for the growth: the share is for growth asked
    // ahead of need.
    const bool awaited = growth_waiters_.load(std::memory_order_relaxed) > 0;
    if (HasMappingWorkLocked() && (!grow_target_ || mapping_share_.MayMapWhileGrowing(awaited))) {
      const Clock::time_point t0 = Clock::now();
      MappingStepLocked(lk);
      // Only this loop clears grow_target_: set before the step, it is
      // set still.
      mapping_share_.NoteMapping(Clock::now() - t0, grow_target_ != 0);
      continue;
    }
    if (grow_target_) {
      uint64_t target = grow_target_;
      ReadyFn ready = std::move(grow_ready_);
      grow_target_ = 0;
      grow_ready_ = nullptr;
      lk.unlock();
      const Clock::time_point t0 = Clock::now();
      if (GrowStep(target, ready).ok() && ready) ready(capacity());
      const Clock::time_point t1 = Clock::now();
      lk.lock();
      last_growth_ = t1;
      mapping_share_.NoteGrowth(t1 - t0);
      if (!grow_target_) growing_.store(false, std::memory_order_release);
      continue;
    }
    // Collapse mapped extents into huge pages, behind the growth frontier
    // (the last two extents, where appends land, wait until the file has
    // grown past them), once growth has been quiet for a while: a collapse
    // costs milliseconds per extent and stalls accesses to that extent.
    bool pending = kind_ == MediumKind::kTmpfs && !read_only_ && HugePagesWanted() &&
                   collapsed_ + 3 * kExtentSize <= mapped_bytes();
    if (!pending) break;
    if (!settle_ && Clock::now() - last_growth_ < kQuiet) {
      work_cv_.wait_until(lk, last_growth_ + kQuiet);
      continue;
    }
    // Paced, unless someone waits for it (Settle): a collapse copies the
    // extent's pages, and back to back they kept the second of this VM's
    // two CPUs busy for seconds, while a thread writing 128-byte pieces at
    // random over a 1 GiB file ran 2-6 times slower (docs/design.md,
    // "Background worker").
    if (!settle_ && Clock::now() < next_collapse_) {
      work_cv_.wait_until(lk, next_collapse_);
      continue;
    }
    uint64_t at = collapsed_;
    collapsed_ += kExtentSize;
    lk.unlock();
    // The extent may be in use: a thread that touches it waits for the
    // collapse, so the huge page it takes is warmed first, outside that
    // window, where that pays (huge_page_warmer.h). The pace counts both.
    if (!warmer_) warmer_ = std::make_unique<HugePageWarmer>();
    const bool warm = warmer_->WantedNow();
    const Clock::time_point t0 = Clock::now();
    const bool warmed = warm && warmer_->Warm();
    const Clock::time_point tc = Clock::now();
    madvise(base() + at, kExtentSize, MADV_COLLAPSE);
    const Clock::time_point t1 = Clock::now();
    if (warmed) warmer_->NoteWarming(NsOf(tc - t0));
    if (!warm) warmer_->NoteUnwarmedCollapse(NsOf(t1 - tc));
    lk.lock();
    next_collapse_ = t1 + (t1 - t0) * kCollapseRest;
  }
  growing_.store(false, std::memory_order_release);
  worker_running_ = false;
  work_cv_.notify_all();
}

void Medium::Settle() {
  std::unique_lock<std::mutex> lk(work_mu_);
  if (stopping_) return;
  settle_ = true;
  StartWorkerLocked();
  work_cv_.notify_all();
  work_cv_.wait(lk, [this] { return !worker_running_; });
  settle_ = false;
}

void Medium::JoinBackground() {
  {
    std::lock_guard<std::mutex> g(work_mu_);
    stopping_ = true;
    work_cv_.notify_all();
  }
  // Several threads may stop it at once (closes of a shared space):
  // std::thread::join from two threads at once is undefined.
  std::lock_guard<std::mutex> j(join_mu_);
  if (worker_.joinable()) worker_.join();
}

Status Medium::Sync(uint64_t offset, uint64_t bytes) {
  if (kind_ == MediumKind::kPageCache) {
    char* b = base();
    uint64_t end = std::min(offset + bytes, mapped_bytes());
    offset = offset / kPageSize * kPageSize;
    if (end > offset && msync(b + offset, end - offset, MS_SYNC) != 0)
      return Status::FromErrno("msync " + path_);
    return Status::OK();
  }
  pm::Fence();
  return Status::OK();
}

}  // namespace upfs
