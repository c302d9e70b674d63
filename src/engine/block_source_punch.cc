// BlockSource: free space given back to the host (docs/design.md, "Giving
// free space back"). Blocks a GC or a fold frees go back to the bitmap,
// where the file's next writes find them, but their memory stays the host
// file's: a per-file file that took random small writes once held three
// times its data in /dev/shm for as long as it stayed open and after.
// Wholly free 2 MiB extents are punched out of the space instead, and
// stay taken in the bitmap while they are: a block the allocator hands
// out must have memory behind it (medium/provide.h), so a punched extent
// is provided again before it is freed for use.
#include <unistd.h>

#include <algorithm>

#include "engine/block_source.h"

namespace upfs {

using namespace format;

bool BlockSource::PunchedAreOursLocked() {
  if (punched_.empty() || punched_by_ == getpid()) return true;
  punched_.clear();
  adopted_.clear();
  punched_blocks_.store(0, std::memory_order_relaxed);
  return false;
}

// Extents a rebuild adopted may hold memory yet (tmpfs shows pages
// allocated ahead but never written as holes): released now, still listed
// and taken, so nothing is stored there meanwhile (hence the lock, which
// keeps ReturnPunched from freeing one under the punch).
uint64_t BlockSource::ReleaseAdoptedLocked() {
  uint64_t released = 0;
  if (PunchedAreOursLocked())
    for (uint64_t e : adopted_)
      if (std::binary_search(punched_.begin(), punched_.end(), e) &&
          space_->Release((e * kPartitionBlocks) << kBlockShift, ((e + 1) * kPartitionBlocks) << kBlockShift).ok())
        released += kPartitionBlocks;
  adopted_.clear();
  return released;
}

uint64_t BlockSource::PunchFreeExtents() {
  uint64_t released = 0;
  {
    std::lock_guard<std::mutex> g(punch_mu_);
    released = ReleaseAdoptedLocked();
  }
  const uint64_t cap = bm_->capacity();
  std::vector<uint64_t> claimed;
  for (uint64_t e = (reserved_ + kPartitionBlocks - 1) / kPartitionBlocks; (e + 1) * kPartitionBlocks <= cap; ++e)
    if (ClaimRange(e * kPartitionBlocks, kPartitionBlocks)) claimed.push_back(e);
  // Released in runs of neighbouring extents, each one call; what the
  // space cannot release goes back free, untouched.
  uint64_t kept = 0;
  for (size_t i = 0; i < claimed.size();) {
    size_t j = i + 1;
    while (j < claimed.size() && claimed[j] == claimed[j - 1] + 1) ++j;
    const uint64_t from = claimed[i] * kPartitionBlocks, to = (claimed[j - 1] + 1) * kPartitionBlocks;
    if (!space_->Release(from << kBlockShift, to << kBlockShift).ok()) {
      for (size_t k = i; k < claimed.size(); ++k) ReturnRange(claimed[k] * kPartitionBlocks, kPartitionBlocks);
      break;
    }
    kept = j;
    i = j;
  }
  claimed.resize(kept);
  if (claimed.empty()) return released;
  std::lock_guard<std::mutex> g(punch_mu_);
  PunchedAreOursLocked();
  punched_by_ = getpid();
  std::vector<uint64_t> merged;
  merged.reserve(punched_.size() + claimed.size());
  std::merge(punched_.begin(), punched_.end(), claimed.begin(), claimed.end(), std::back_inserter(merged));
  punched_.swap(merged);
  punched_blocks_.fetch_add(claimed.size() * kPartitionBlocks, std::memory_order_relaxed);
  return released + claimed.size() * kPartitionBlocks;
}

bool BlockSource::ReturnPunched(uint64_t want, Status* st) {
  std::lock_guard<std::mutex> g(punch_mu_);
  if (!PunchedAreOursLocked() || punched_.empty()) return false;
  const uint64_t extents = want / kPartitionBlocks + (want % kPartitionBlocks != 0);  // no overflow at UINT64_MAX
  const size_t n = size_t(std::min<uint64_t>(punched_.size(), std::max<uint64_t>(1, extents)));
  for (size_t i = 0; i < n; ++i) {
    const uint64_t first = punched_[i] * kPartitionBlocks;
    *st = space_->Provide(first << kBlockShift, (first + kPartitionBlocks) << kBlockShift);
    if (!st->ok()) return false;  // the ones provided stay listed: provided twice later, harmless
  }
  for (size_t i = 0; i < n; ++i) ReturnRange(punched_[i] * kPartitionBlocks, kPartitionBlocks);
  punched_.erase(punched_.begin(), punched_.begin() + ptrdiff_t(n));
  punched_blocks_.fetch_sub(n * kPartitionBlocks, std::memory_order_relaxed);
  return true;
}

bool BlockSource::AdoptPunched(uint64_t first) {
  UPFS_ASSERT(first % kPartitionBlocks == 0);
  if (first < reserved_ || first + kPartitionBlocks > bm_->capacity() || !ClaimRange(first, kPartitionBlocks))
    return false;
  std::lock_guard<std::mutex> g(punch_mu_);
  PunchedAreOursLocked();
  punched_by_ = getpid();
  punched_.insert(std::lower_bound(punched_.begin(), punched_.end(), first / kPartitionBlocks),
                  first / kPartitionBlocks);
  adopted_.push_back(first / kPartitionBlocks);
  punched_blocks_.fetch_add(kPartitionBlocks, std::memory_order_relaxed);
  return true;
}

void BlockSource::SettlePunchedAtClose(bool last) {
  if (!last) {
    Status st;
    (void)ReturnPunched(UINT64_MAX, &st);  // every extent; on an error the rest stays taken until a rebuild
  }
  std::lock_guard<std::mutex> g(punch_mu_);
  punched_.clear();
  adopted_.clear();
  punched_blocks_.store(0, std::memory_order_relaxed);
}

}  // namespace upfs
