#include "engine/punched_extents.h"

#include "util/assert.h"

namespace upfs {

void SharedPunchedExtents::Add(uint64_t e) {
  UPFS_ASSERT(e / 64 < words_);
  const uint64_t bit = uint64_t{1} << (e % 64);
  const uint64_t was = bits_[e / 64].fetch_or(bit, std::memory_order_acq_rel);
  UPFS_ASSERT((was & bit) == 0);  // the caller claimed it: nobody else can have punched it
  (void)was;
  count_->fetch_add(kPartitionBlocks, std::memory_order_relaxed);
}

void SharedPunchedExtents::Take(uint64_t n, std::vector<uint64_t>* out) {
  if (n == 0 || blocks() == 0) return;
  for (uint64_t w = 0; w < words_ && n > 0; ++w) {
    uint64_t v = bits_[w].load(std::memory_order_acquire);
    while (v != 0 && n > 0) {
      const uint64_t bit = v & -v;
      // Whoever clears the bit owns the extent; a loser looks at what is left.
      const uint64_t was = bits_[w].fetch_and(~bit, std::memory_order_acq_rel);
      if (was & bit) {
        out->push_back(w * 64 + uint64_t(__builtin_ctzll(bit)));
        count_->fetch_sub(kPartitionBlocks, std::memory_order_relaxed);
        --n;
      }
      v = was & ~bit;
    }
  }
}

bool SharedPunchedExtents::TakeOne(uint64_t e) {
  if (e / 64 >= words_) return false;
  const uint64_t bit = uint64_t{1} << (e % 64);
  if ((bits_[e / 64].fetch_and(~bit, std::memory_order_acq_rel) & bit) == 0) return false;
  count_->fetch_sub(kPartitionBlocks, std::memory_order_relaxed);
  return true;
}

}  // namespace upfs
