// Medium: mapping a file's pages ahead of a first read, so that a
// program reading a file it did not write does not take a page fault per
// 4 KiB block (docs/design.md, "The medium"): the probes that tell huge
// pages from small ones, the extents handed to the worker, and the pages
// mapped again after the mapping moved to a larger reservation.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "medium/medium.h"
#include "medium/mman_compat.h"
#include "util/assert.h"
#include "util/env_switch.h"

namespace upfs {

namespace {

bool PopulateWanted() {
  static const bool wanted = EnvSwitchOn("UPFS_POPULATE");
  return wanted;
}

// Mapping an extent of huge pages takes a fault or two (the huge page,
// the page-table page); one of small pages, a fault per page (512
// counted).
constexpr long kHugeExtentFaults = 8;

// Calls map(i, j) for each run [i, j) of pages in [0, pages) that
// `present(i)` says are there, in order; false as soon as a map is.
template <typename Present, typename Map>
bool ForEachPresentRun(uint64_t pages, Present present, Map map) {
  for (uint64_t i = 0; i < pages;) {
    if (!present(i)) {
      ++i;
      continue;
    }
    uint64_t j = i;
    while (j < pages && present(j)) ++j;
    if (!map(i, j)) return false;
    i = j;
  }
  return true;
}

long MinorFaults() {
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  return ru.ru_minflt;
}

}  // namespace

int Medium::PopulateAdvice() const {
  return read_only_ ? MADV_POPULATE_READ : MADV_POPULATE_WRITE;
}

bool Medium::PopulateUseful() const {
  return kind_ != MediumKind::kPageCache && PopulateWanted();
}

bool Medium::PopulateData(uint64_t at, uint64_t len, int advice) {
  UPFS_ASSERT(at % kPageSize == 0);
  const uint64_t end = std::min(at + len, mapped_bytes());
  if (end <= at) return true;
  // Which pages the file has (mincore: in the page cache; a hole is not).
  // Not lseek(SEEK_HOLE): on tmpfs it walks on to the next hole, to the
  // end of a pool file without any (a first read populated so ran slower
  // than without populating).
  const uint64_t pages = (end - at + kPageSize - 1) / kPageSize;
  std::vector<unsigned char> has(pages);
  if (mincore(base() + at, end - at, has.data()) != 0) return false;
  return ForEachPresentRun(
      pages, [&](uint64_t i) { return (has[i] & 1) != 0; },
      [&](uint64_t i, uint64_t j) {
        const uint64_t from = at + i * kPageSize, to = std::min(at + j * kPageSize, end);
        return madvise(base() + from, to - from, advice) == 0;
      });
}

bool Medium::ExtentHasPages(uint64_t at, uint64_t len) {
  UPFS_ASSERT(at % kPageSize == 0);
  return AnyPageResident(base() + at, len);
}

bool AnyPageResident(const char* addr, uint64_t len) {
  UPFS_ASSERT(len <= kExtentSize);
  unsigned char has[kExtentSize / kPageSize];
  if (mincore(const_cast<char*>(addr), len, has) != 0) return true;  // not known: as if resident
  for (uint64_t i = 0; i < (len + kPageSize - 1) / kPageSize; ++i)
    if (has[i] & 1) return true;
  return false;
}

bool Medium::ProbeSmallPages(uint64_t at, int advice, bool data_only) {
  if (at >= mapped_bytes()) return false;
  const long before = MinorFaults();
  const uint64_t len = std::min(kExtentSize, mapped_bytes() - at);
  const bool ok = data_only ? PopulateData(at, len, advice) : madvise(base() + at, len, advice) == 0;
  if (!ok) return false;  // e.g. a kernel before 5.14
  return MinorFaults() - before > kHugeExtentFaults;
}

void Medium::PopulateAhead() {
  if (!PopulateUseful() || mapped_bytes() < kPopulateAtOpenBytes) return;
  // Probe the second extent (the first holds the header and log, and may
  // be in small pages while the rest is not): mapping an extent of huge
  // pages is a fault or two (at most 8 counted), the reader's own faults
  // are as few, and nothing more is done; one of small pages is 512 faults
  // (the population's own, counted as this thread's minor faults), and
  // then the worker maps the rest. For small-page files that took
  // read-seq-4k-cold from 1.15-1.51x to 1.55-2.14x the kernel; for
  // huge-page files a populating worker measured 2.84x, 3.46x and 4.80x
  // against 4.23x, 3.97x and 2.64x without, no gain within the noise, so
  // it is not started for them. Faults are counted, not the call timed: a
  // 40 us threshold judged small pages huge in an ASan build. An extent
  // the file gave back (no page) tells nothing and would be filled: the
  // first with pages among the next kProbeTries is probed instead (none:
  // nothing is populated).
  constexpr uint64_t kProbeTries = 64;
  auto given_back = [&](uint64_t at) {
    return at < mapped_bytes() && !ExtentHasPages(at, std::min(kExtentSize, mapped_bytes() - at));
  };
  uint64_t probe = kExtentSize;
  while (given_back(probe)) {
    probe += kExtentSize;
    if (probe >= kProbeTries * kExtentSize) return;
  }
  if (!ProbeSmallPages(probe, PopulateAdvice(), /*data_only=*/false)) return;
  std::lock_guard<std::mutex> g(work_mu_);
  if (stopping_) return;
  populate_to_ = std::max(populate_to_, mapped_bytes());
  StartWorkerLocked();
  work_cv_.notify_all();
}

bool Medium::PopulateProbe(uint64_t at) {
  UPFS_ASSERT(at % kExtentSize == 0);
  return PopulateUseful() && ProbeSmallPages(at, MADV_POPULATE_READ, /*data_only=*/true);
}

void Medium::PopulateExtents(std::vector<uint64_t> extents) {
  if (!PopulateUseful() || extents.empty()) return;
  for (uint64_t e : extents) UPFS_ASSERT(e % kExtentSize == 0);
  std::lock_guard<std::mutex> g(work_mu_);
  if (stopping_) return;
  populate_extents_.insert(populate_extents_.end(), extents.begin(), extents.end());
  StartWorkerLocked();
  work_cv_.notify_all();
}

bool Medium::HasMappingWorkLocked() const {
  return !remapped_.empty() || populated_ < populate_to_ || !populate_extents_.empty();
}

// One step of mapping work, with work_mu_ (held by `lk`) released while it
// maps: first a moved mapping's pages (RemapExtent), then population, which
// is what a reader waits for and costs ~0.15 ms per small-page extent
// where a collapse costs milliseconds. A step maps at most one extent, so
// that a stop (a close) waits for little.
void Medium::MappingStepLocked(std::unique_lock<std::mutex>& lk) {
  if (!remapped_.empty()) {
    Remapped& r = remapped_.front();
    char* const old = r.old_base;
    const uint64_t at = r.done, len = std::min(kExtentSize, r.bytes - at);
    r.done += len;
    if (r.done >= r.bytes) remapped_.pop_front();
    lk.unlock();
    const bool ok = RemapExtent(old, at, len);
    lk.lock();
    if (!ok) remapped_.clear();  // no page table to read: the pages fault in as used
    return;
  }
  if (populated_ < populate_to_) {
    const uint64_t at = populated_;
    const uint64_t len = std::min(kExtentSize, populate_to_ - at);
    populated_ += len;
    lk.unlock();
    // (The probed extent is walked again: its pages are present.) A
    // whole extent with no page is one the file gave back: writable
    // population would fill it, and the file would hold that memory again
    // until its next give-back (test
    // AWritersPopulationLeavesGivenBackExtentsHoles). Other extents are
    // mapped whole: their pages fallocated and not yet written are free
    // blocks the writer will take (see ProbeSmallPages).
    if (ExtentHasPages(at, len)) madvise(base() + at, len, PopulateAdvice());
    lk.lock();
    return;
  }
  UPFS_ASSERT(!populate_extents_.empty());
  const uint64_t at = populate_extents_.front();
  populate_extents_.pop_front();
  lk.unlock();
  // Read-only page table entries, whatever the mapping: in small pages
  // a pool file's first read measured 2.01-2.25x the kernel so, and
  // 0.96-1.01x with writable ones (about 1.5x not populated): the
  // reader's own faults map 16 written pages at once (fault-around),
  // a writable population maps each page dirty, one by one.
  PopulateData(at, kExtentSize, MADV_POPULATE_READ);
  lk.lock();
}

void Medium::NoteRemap(char* old_base, uint64_t bytes) {
  UPFS_ASSERT(bytes % kPageSize == 0);
  std::lock_guard<std::mutex> g(work_mu_);
  if (stopping_) return;
  remapped_.push_back(Remapped{old_base, bytes, 0});
  StartWorkerLocked();
  work_cv_.notify_all();
}

bool Medium::RemapExtent(char* old_base, uint64_t at, uint64_t len) {
  constexpr uint64_t kPresent = uint64_t{1} << 63;  // a pagemap entry's bit (Linux's pagemap.rst)
  UPFS_ASSERT(at % kPageSize == 0 && len % kPageSize == 0 && len <= kExtentSize);
  // Opened for each extent: an open /proc/self/pagemap keeps describing
  // the process that opened it, which a fork child is not.
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return false;
  uint64_t entries[kExtentSize / kPageSize];
  const uint64_t pages = len / kPageSize;
  const off_t where = off_t(reinterpret_cast<uintptr_t>(old_base + at) / kPageSize * sizeof(uint64_t));
  const ssize_t got = pread(pagemap, entries, pages * sizeof(uint64_t), where);
  close(pagemap);
  if (got != ssize_t(pages * sizeof(uint64_t))) return false;
  // For reading: on tmpfs the entries of a shared writable mapping so
  // populated take stores without a fault (measured), and fault-around
  // maps them 16 at a time; on DAX, where a first store may have metadata
  // to make durable (MAP_SYNC), it is left to the store, as a page the old
  // mapping had only read would have been.
  constexpr int kAdvice = MADV_POPULATE_READ;
  char* const b = base();
  ForEachPresentRun(
      pages, [&](uint64_t i) { return (entries[i] & kPresent) != 0; },
      [&](uint64_t i, uint64_t j) {
        // A failure maps nothing and costs nothing later: the pages fault
        // in when used, as they would have. The other runs go on.
        (void)madvise(b + at + i * kPageSize, (j - i) * kPageSize, kAdvice);
        return true;
      });
  // The old entries go: their pages are the new mapping's now (the same
  // file pages), and kept they doubled the page tables and the resident
  // size until close. The old mapping stays, shared: a thread still using
  // its base faults the pages in again.
  (void)madvise(old_base + at, len, MADV_DONTNEED);
  return true;
}

}  // namespace upfs
