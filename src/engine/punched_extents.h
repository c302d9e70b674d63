// The 2 MiB extents of a space that were given back to the host (a hole
// punched where they were: docs/design.md, "Giving free space back"),
// kept in memory every process of the domain shares: one bit per extent
// and a count, lent by the container (a pool's volatile area). A set bit
// means the extent is taken in the allocation bitmap, referenced by
// nothing, and without memory; whoever clears the bit owns the extent
// and must give it memory before it frees it for use. All zero reads as
// "nothing punched".
//
// A per-file space keeps its punched extents in its process instead
// (BlockSource's own list): its shared state goes with its last user.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/alloc_bitmap.h"

namespace upfs {

class SharedPunchedExtents {
 public:
  // `bits` holds one bit per extent of the largest space (extents / 64
  // words); `count` the blocks punched (kPartitionBlocks an extent).
  SharedPunchedExtents(std::atomic<uint64_t>* bits, uint64_t extents, std::atomic<uint64_t>* count)
      : bits_(bits), words_((extents + 63) / 64), count_(count) {}
  SharedPunchedExtents(const SharedPunchedExtents&) = delete;
  SharedPunchedExtents& operator=(const SharedPunchedExtents&) = delete;

  // Extent e is punched now (the caller claimed it in the bitmap and
  // released its memory).
  void Add(uint64_t e);
  // Takes up to n punched extents, lowest first, each by clearing its bit
  // (so no other process takes it too), into *out (ascending).
  void Take(uint64_t n, std::vector<uint64_t>* out);
  // Takes extent e if it is punched (clears its bit): false if it is not,
  // or another process took it first.
  bool TakeOne(uint64_t e);
  // Blocks punched, for the allocator's decisions (moves as others punch
  // and take back).
  uint64_t blocks() const { return count_->load(std::memory_order_relaxed); }
  bool Test(uint64_t e) const {
    return e / 64 < words_ && (bits_[e / 64].load(std::memory_order_acquire) >> (e % 64)) & 1;
  }
  // fn(extent) for each punched extent, ascending.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (uint64_t w = 0; w < words_; ++w)
      for (uint64_t v = bits_[w].load(std::memory_order_acquire); v != 0; v &= v - 1)
        fn(w * 64 + uint64_t(__builtin_ctzll(v)));
  }

 private:
  std::atomic<uint64_t>* bits_;
  uint64_t words_;
  std::atomic<uint64_t>* count_;
};

}  // namespace upfs
