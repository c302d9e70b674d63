// ShadowIndex: the per-process DRAM index of a file's paired blocks
// (docs/design.md, "Granule flips"): for each virtual block mapped to a
// pair [P, P + 1] by a granule flip, the mask of its granules that live in
// the shadow P + 1. The BlockTable that owns it maps the block to P.
//
// Like that table, one writer at a time (the thread applying the log) and
// lock-free readers; a reader may see a mask in the middle of a change,
// which belongs to an entry committed after its snapshot and touching the
// block, so its validation retries (File::Read). Leaves are never freed
// while the index lives.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "format/format.h"
#include "util/assert.h"

namespace upfs {

class ShadowIndex {
 public:
  ShadowIndex() = default;
  ShadowIndex(const ShadowIndex&) = delete;
  ShadowIndex& operator=(const ShadowIndex&) = delete;

  // Whether any block was ever paired (the read path's only cost for a
  // file without pairs).
  bool any() const { return any_.load(std::memory_order_acquire); }

  // Whether block v is paired, and its mask if so.
  bool Get(uint64_t v, uint32_t* mask) const {
    const uint64_t w = Word(v);
    *mask = uint32_t(w);
    return (w & kPaired) != 0;
  }
  bool Paired(uint64_t v) const { return (Word(v) & kPaired) != 0; }
  // How many blocks are paired (each holds a shadow block).
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

  // Writer side.
  void Set(uint64_t v, uint32_t mask) {
    UPFS_ASSERT(v <= format::kGranuleMaxVblock);
    std::atomic<uint64_t>* w = Slot(v);
    if (!(w->load(std::memory_order_relaxed) & kPaired)) Count(+1);
    w->store(kPaired | mask, std::memory_order_release);
  }
  // Ends the pairing of blocks [v0, v1) (mapped anew, or unmapped).
  void Clear(uint64_t v0, uint64_t v1) {
    if (!any()) return;
    v1 = std::min<uint64_t>(v1, format::kGranuleMaxVblock + 1);
    for (uint64_t v = v0; v < v1;) {
      Leaf* l = LeafOf(v);
      const uint64_t leaf_end = ((v >> kLeafBits) + 1) << kLeafBits;
      if (!l) {
        v = leaf_end;
        continue;
      }
      for (const uint64_t end = std::min(v1, leaf_end); v < end; ++v) {
        std::atomic<uint64_t>& w = l->w[v & kLeafMask];
        if (w.load(std::memory_order_relaxed)) {
          w.store(0, std::memory_order_release);
          Count(-1);
        }
      }
    }
  }
  // fn(v, mask) for every paired block, in block order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    if (!any()) return;
    for (uint64_t r = 0; r < kRootSize; ++r) {
      const Leaf* l = root_[r].load(std::memory_order_acquire);
      if (!l) continue;
      for (uint64_t i = 0; i < kLeafSize; ++i) {
        const uint64_t w = l->w[i].load(std::memory_order_acquire);
        if (w & kPaired) fn((r << kLeafBits) | i, uint32_t(w));
      }
    }
  }

 private:
  // One writer: a load and a store, not a locked add.
  void Count(int64_t d) { count_.store(count_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed); }

  static constexpr uint64_t kPaired = uint64_t{1} << 32;
  static constexpr uint32_t kLeafBits = 14;
  static constexpr uint64_t kLeafSize = uint64_t{1} << kLeafBits;
  static constexpr uint64_t kLeafMask = kLeafSize - 1;
  static constexpr uint64_t kRootSize = (format::kGranuleMaxVblock + 1) >> kLeafBits;
  struct Leaf {
    std::atomic<uint64_t> w[kLeafSize] = {};
  };

  Leaf* LeafOf(uint64_t v) const {
    if (!root_ || v > format::kGranuleMaxVblock) return nullptr;
    return root_[v >> kLeafBits].load(std::memory_order_acquire);
  }
  uint64_t Word(uint64_t v) const {
    if (!any()) return 0;
    const Leaf* l = LeafOf(v);
    return l ? l->w[v & kLeafMask].load(std::memory_order_acquire) : 0;
  }
  std::atomic<uint64_t>* Slot(uint64_t v) {
    if (!root_) root_.reset(new std::atomic<Leaf*>[kRootSize]());
    std::atomic<Leaf*>& ls = root_[v >> kLeafBits];
    Leaf* l = ls.load(std::memory_order_relaxed);
    if (!l) {
      owned_.push_back(std::make_unique<Leaf>());
      l = owned_.back().get();
      ls.store(l, std::memory_order_release);
    }
    // Readers find the root only after any_ (release) says there is one.
    any_.store(true, std::memory_order_release);
    return &l->w[v & kLeafMask];
  }

  std::atomic<bool> any_{false};
  std::atomic<uint64_t> count_{0};
  std::unique_ptr<std::atomic<Leaf*>[]> root_;
  std::vector<std::unique_ptr<Leaf>> owned_;
};

}  // namespace upfs
