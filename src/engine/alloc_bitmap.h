// The allocation bitmap of one allocation domain: one bit per logical block
// of its block space, 1 = taken, claimed by CAS. Soft state in memory the
// container lends: rebuilt from the logs whenever nobody uses the domain.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace upfs {

struct BitmapWords {
  alignas(64) std::atomic<uint64_t> capacity_blocks;  // bits valid below this
  std::atomic<uint64_t> alloc_hint;                   // bitmap word to start scanning at
  void Reset(uint64_t capacity) {
    alloc_hint.store(0, std::memory_order_relaxed);
    capacity_blocks.store(capacity, std::memory_order_relaxed);
  }
};
static_assert(sizeof(BitmapWords) == 64);

class AllocationBitmap {
 public:
  AllocationBitmap(BitmapWords* words, std::atomic<uint64_t>* bits) : w_(words), bits_(bits) {}

  BitmapWords* words() const { return w_; }
  std::atomic<uint64_t>* bits() const { return bits_; }
  uint64_t capacity() const { return w_->capacity_blocks.load(std::memory_order_acquire); }

  bool Test(uint64_t b) const {
    return (bits_[b >> 6].load(std::memory_order_relaxed) >> (b & 63)) & 1;
  }
  void Set(uint64_t b) { bits_[b >> 6].fetch_or(uint64_t{1} << (b & 63), std::memory_order_relaxed); }
  void Clear(uint64_t b) {
    bits_[b >> 6].fetch_and(~(uint64_t{1} << (b & 63)), std::memory_order_release);
  }
  // Raises the capacity to `blocks` (never lowers it).
  void RaiseCapacity(uint64_t blocks) {
    uint64_t c = w_->capacity_blocks.load();
    while (blocks > c && !w_->capacity_blocks.compare_exchange_weak(c, blocks)) {
    }
  }

 private:
  BitmapWords* w_;
  std::atomic<uint64_t>* bits_;
};

// Rebuilding a bitmap from what the logs reference: every referenced block
// is marked once; a second reference is damage, reported by status().
class BlockMarker {
 public:
  explicit BlockMarker(AllocationBitmap* bm) : bm_(bm) {}
  void Mark(uint64_t b, const char* what) {
    if (!dup_.empty()) return;
    if (bm_->Test(b)) {
      dup_ = std::string(what) + " block " + std::to_string(b) + " is referenced twice";
      return;
    }
    bm_->Set(b);
  }
  Status status() const { return dup_.empty() ? Status::OK() : Status::Corrupt("block map", dup_); }

 private:
  AllocationBitmap* bm_;
  std::string dup_;
};

}  // namespace upfs
