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

uint64_t BlockSource::PunchFreeExtents(uint64_t keep_free_blocks) {
  uint64_t released = 0;
  if (!shared_punched_) {
    std::lock_guard<std::mutex> g(punch_mu_);
    released = ReleaseAdoptedLocked();
  }
  // Never past the space, whatever the bitmap's capacity word says (a
  // damaged volatile area of a pool left clean is trusted), and up to the
  // space as it is now (another process may have grown it since this one
  // looked: a pool attached before a growth it did not make).
  const uint64_t cap =
      space_->ClampToCapacity(std::min(bm_->capacity(), UINT64_MAX >> kBlockShift) << kBlockShift) >> kBlockShift;
  // What stays free with memory: the next writes take it without a
  // fallocate (a whole count of the bitmap, only when something is kept).
  uint64_t free_blocks = 0;
  if (keep_free_blocks > 0)
    for (uint64_t w = 0; w < cap / 64; ++w)
      free_blocks += 64 - uint64_t(__builtin_popcountll(bm_->bits()[w].load(std::memory_order_relaxed)));
  std::vector<uint64_t> claimed;
  const uint64_t lowest = (reserved_ + kPartitionBlocks - 1) / kPartitionBlocks;
  // Highest first: the space is then given back from its end, and what is
  // kept lies where the small files' hint starts.
  for (uint64_t e = cap / kPartitionBlocks; e-- > lowest;) {
    if (keep_free_blocks > 0 && free_blocks < keep_free_blocks + kPartitionBlocks) break;
    if (!ClaimRange(e * kPartitionBlocks, kPartitionBlocks)) continue;
    claimed.push_back(e);
    free_blocks -= std::min(free_blocks, kPartitionBlocks);
  }
  std::reverse(claimed.begin(), claimed.end());
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
  RecordPunched(claimed);
  return released + claimed.size() * kPartitionBlocks;
}

void BlockSource::RecordPunched(const std::vector<uint64_t>& claimed) {
  if (shared_punched_) {
    for (uint64_t e : claimed) shared_punched_->Add(e);
    return;
  }
  std::lock_guard<std::mutex> g(punch_mu_);
  PunchedAreOursLocked();
  punched_by_ = getpid();
  std::vector<uint64_t> merged;
  merged.reserve(punched_.size() + claimed.size());
  std::merge(punched_.begin(), punched_.end(), claimed.begin(), claimed.end(), std::back_inserter(merged));
  punched_.swap(merged);
  punched_blocks_.fetch_add(claimed.size() * kPartitionBlocks, std::memory_order_relaxed);
}

bool BlockSource::ReturnPunched(uint64_t want, Status* st) {
  const uint64_t extents = want / kPartitionBlocks + (want % kPartitionBlocks != 0);  // no overflow at UINT64_MAX
  if (shared_punched_) {
    std::vector<uint64_t> taken;
    shared_punched_->Take(std::max<uint64_t>(1, extents), &taken);
    if (taken.empty()) return false;
    for (uint64_t e : taken) {
      *st = space_->ProvideExtents((e * kPartitionBlocks) << kBlockShift, ((e + 1) * kPartitionBlocks) << kBlockShift);
      if (!st->ok()) {
        // Punched again, all of them (those provided hold memory until the
        // next give-back releases it).
        for (uint64_t back : taken) shared_punched_->Add(back);
        return false;
      }
    }
    for (uint64_t e : taken) ReturnRange(e * kPartitionBlocks, kPartitionBlocks);
    return true;
  }
  std::lock_guard<std::mutex> g(punch_mu_);
  if (!PunchedAreOursLocked() || punched_.empty()) return false;
  const size_t n = size_t(std::min<uint64_t>(punched_.size(), std::max<uint64_t>(1, extents)));
  for (size_t i = 0; i < n; ++i) {
    const uint64_t first = punched_[i] * kPartitionBlocks;
    *st = space_->ProvideExtents(first << kBlockShift, (first + kPartitionBlocks) << kBlockShift);
    if (!st->ok()) return false;  // the ones provided stay listed: provided twice later, harmless
  }
  for (size_t i = 0; i < n; ++i) ReturnRange(punched_[i] * kPartitionBlocks, kPartitionBlocks);
  punched_.erase(punched_.begin(), punched_.begin() + ptrdiff_t(n));
  punched_blocks_.fetch_sub(n * kPartitionBlocks, std::memory_order_relaxed);
  return true;
}

bool BlockSource::ReturnPunchedRun(uint64_t n, Status* st) {
  *st = Status::OK();
  const uint64_t k = n / kPartitionBlocks + (n % kPartitionBlocks != 0);
  if (k == 0 || punched_blocks() < k * kPartitionBlocks) return false;
  std::vector<uint64_t> punched;
  std::unique_lock<std::mutex> g(punch_mu_, std::defer_lock);
  if (shared_punched_) {
    shared_punched_->ForEach([&](uint64_t e) { punched.push_back(e); });
  } else {
    g.lock();
    if (!PunchedAreOursLocked()) return false;
    punched = punched_;
  }
  // The lowest k neighbours (ascending lists).
  size_t from = punched.size();
  for (size_t i = 0, run = 0; i < punched.size(); ++i) {
    run = i > 0 && punched[i] == punched[i - 1] + 1 ? run + 1 : 1;
    if (run == k) {
      from = i + 1 - k;
      break;
    }
  }
  if (from == punched.size()) return false;
  std::vector<uint64_t> taken;
  for (size_t i = from; i < from + k; ++i) {
    if (shared_punched_ ? !shared_punched_->TakeOne(punched[i]) : false) break;
    taken.push_back(punched[i]);
  }
  if (!shared_punched_) {
    punched_.erase(punched_.begin() + ptrdiff_t(from), punched_.begin() + ptrdiff_t(from + k));
    punched_blocks_.fetch_sub(k * kPartitionBlocks, std::memory_order_relaxed);
  }
  // Memory before the blocks are free to anyone (a store there must not
  // fault); an extent that cannot have it is punched again.
  for (size_t i = 0; i < taken.size(); ++i) {
    const uint64_t first = taken[i] * kPartitionBlocks;
    *st = space_->ProvideExtents(first << kBlockShift, (first + kPartitionBlocks) << kBlockShift);
    if (!st->ok()) {
      if (g.owns_lock()) g.unlock();
      RecordPunched(std::vector<uint64_t>(taken.begin() + ptrdiff_t(i), taken.end()));
      taken.resize(i);
      break;
    }
  }
  for (uint64_t e : taken) ReturnRange(e * kPartitionBlocks, kPartitionBlocks);
  return st->ok() && taken.size() == k;
}

bool BlockSource::AdoptPunched(uint64_t first) {
  UPFS_ASSERT(first % kPartitionBlocks == 0 && !shared_punched_);
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
  UPFS_ASSERT(!shared_punched_);
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
