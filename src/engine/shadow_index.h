// ShadowIndex: the per-process DRAM index of a file's paired blocks
// (docs/design.md, "Granule flips"): for each virtual block a granule flip
// paired, its shadow block (P + 1 for a block mapped to a pair [P, P + 1],
// anywhere for an anywhere shadow), the mask of its granules that live in
// the shadow, and when this process last applied a flip of it (a coarse
// millisecond stamp: the GC folds pairs no flip touched lately, "Folding
// pairs back"). The BlockTable that owns it maps the block to its home.
//
// Like that table, one writer at a time (the thread applying the log) and
// lock-free readers; a reader may see a mask in the middle of a change,
// or a shadow and a mask of two different pairings (the shadow is stored
// before the mask word that publishes it), which belong to an entry
// committed after its snapshot and touching the block, so its validation
// retries (File::Read). A shadow read is always a block some decoded entry
// named (range-checked), or 0. Nodes are never freed
// while the index lives.
#pragma once

#include <time.h>

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
  // Likewise with its shadow, loaded after the word that said it is paired
  // (ShadowIndex::Set stores it before), so never 0 when it returns true.
  // A caller that asks Paired() and Shadow() apart may see the pairing
  // end between them (another thread applying a remap or a fold) and get
  // 0: block 0, the file's header.
  bool Get(uint64_t v, uint32_t* mask, uint32_t* shadow) const {
    const Entry* e = EntryOf(v);  // one walk for both loads
    const uint64_t w = e ? e->w.load(std::memory_order_acquire) : 0;
    *mask = uint32_t(w);
    if (!(w & kPaired)) return false;
    *shadow = e->shadow.load(std::memory_order_acquire);
    UPFS_ASSERT(*shadow != 0);
    return true;
  }
  bool Paired(uint64_t v) const { return (Word(v) & kPaired) != 0; }
  // Starts loading block v's entry (a writer about to look it up, whose
  // other lookups would otherwise wait for that miss in turn).
  void Prefetch(uint64_t v) const {
    if (const Entry* e = EntryOf(v)) __builtin_prefetch(e);
  }
  // The shadow block of paired block v (meaningless if it is not paired).
  uint32_t Shadow(uint64_t v) const {
    const Entry* e = EntryOf(v);
    return e ? e->shadow.load(std::memory_order_acquire) : 0;
  }
  // How many blocks are paired (each holds a shadow block).
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

  // Stamps: milliseconds of CLOCK_MONOTONIC_COARSE (a vDSO read of a few
  // nanoseconds, 4 ms steps here), kept to 31 bits; ages are taken modulo
  // 2^31 ms (24.8 days), so a pair untouched for that long may look fresh
  // once, which only delays its fold.
  static uint32_t Now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return uint32_t((uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000) & kStampMask);
  }
  static uint32_t Age(uint32_t stamp, uint32_t now) { return (now - stamp) & kStampMask; }

  // Writer side: block v is paired with shadow block `shadow` and this
  // mask, as of `stamp`.
  void Set(uint64_t v, uint32_t shadow, uint32_t mask, uint32_t stamp) {
    UPFS_ASSERT(v <= format::kGranuleMaxVblock);
    UPFS_ASSERT(stamp <= kStampMask);
    UPFS_ASSERT(shadow != 0);
    Leaf* l = LeafFor(v);
    std::atomic<uint64_t>* w = &l->e[v & kLeafMask].w;
    if (!(w->load(std::memory_order_relaxed) & kPaired)) Count(+1);
    std::atomic<uint32_t>* s = &l->e[v & kLeafMask].shadow;
    if (s->load(std::memory_order_relaxed) != shadow) s->store(shadow, std::memory_order_release);
    w->store(uint64_t{stamp} << kStampShift | kPaired | mask, std::memory_order_release);
  }
  // Ends the pairing of blocks [v0, v1) (mapped anew, or unmapped).
  void Clear(uint64_t v0, uint64_t v1) {
    if (!any()) return;
    v1 = std::min<uint64_t>(v1, format::kGranuleMaxVblock + 1);
    for (uint64_t v = v0; v < v1;) {
      // A missing node is skipped whole: a truncate to zero clears up to
      // 2^28 blocks of a table that holds a few leaves.
      Mid* m = top_[TopOf(v)].load(std::memory_order_acquire);
      Leaf* l = m ? m->leaf[MidOf(v)].load(std::memory_order_acquire) : nullptr;
      const uint32_t span_bits = m ? kLeafBits : kLeafBits + kMidBits;
      const uint64_t span_end = ((v >> span_bits) + 1) << span_bits;
      if (!l) {
        v = span_end;
        continue;
      }
      for (const uint64_t end = std::min(v1, span_end); v < end; ++v) {
        std::atomic<uint64_t>& w = l->e[v & kLeafMask].w;
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
    ForEachStamped([&](uint64_t v, uint32_t mask, uint32_t) { fn(v, mask); });
  }
  // fn(v, mask, stamp) likewise (Shadow(v) gives the shadow).
  template <typename Fn>
  void ForEachStamped(Fn fn) const {
    if (!any()) return;
    for (uint64_t t = 0; t < kTopSize; ++t) {
      const Mid* m = top_[t].load(std::memory_order_acquire);
      if (!m) continue;
      for (uint64_t i = 0; i < kMidSize; ++i) {
        const Leaf* l = m->leaf[i].load(std::memory_order_acquire);
        if (!l) continue;
        const uint64_t base = (t << (kMidBits + kLeafBits)) | (i << kLeafBits);
        for (uint64_t j = 0; j < kLeafSize; ++j) {
          const uint64_t w = l->e[j].w.load(std::memory_order_acquire);
          if (w & kPaired) fn(base | j, uint32_t(w), uint32_t(w >> kStampShift));
        }
      }
    }
  }
  // The stamp of paired block v (0 if not paired).
  uint32_t Stamp(uint64_t v) const { return uint32_t(Word(v) >> kStampShift); }

 private:
  // One writer: a load and a store, not a locked add.
  void Count(int64_t d) { count_.store(count_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed); }

  // A word: mask in bits 0-31, paired in bit 32, stamp in bits 33-63.
  static constexpr uint64_t kPaired = uint64_t{1} << 32;
  static constexpr uint32_t kStampShift = 33;
  static constexpr uint32_t kStampMask = 0x7fffffffu;
  // Three levels of 2^10, 2^9 and 2^9 entries over the 2^28 vblocks a
  // flip can name: the first pairing of a table makes 20 KiB (its top of
  // 8 KiB, one middle node of 4 KiB, one leaf of 8 KiB). Two levels with leaves of 2^14 made
  // 256 KiB, zeroed by the kernel and again by the allocator, at every
  // replay of a file with one paired block: a pool file's unlink (its
  // release replays the log) after one overwrite of its header, as
  // SQLite's journal has, took 103-113 us, now 2.2-3.9 us.
  static constexpr uint32_t kLeafBits = 9, kMidBits = 9, kTopBits = 10;
  static_assert(kLeafBits + kMidBits + kTopBits == 28 && format::kGranuleMaxVblock == (uint64_t{1} << 28) - 1);
  static constexpr uint64_t kLeafSize = uint64_t{1} << kLeafBits;
  static constexpr uint64_t kLeafMask = kLeafSize - 1;
  static constexpr uint64_t kMidSize = uint64_t{1} << kMidBits;
  static constexpr uint64_t kTopSize = uint64_t{1} << kTopBits;
  // A block's word and its shadow side by side: a writer's or reader's
  // lookup of a random block is one cache miss, not two (the shadows in an
  // array of their own cost overwrite-128 a second miss per write).
  struct Entry {
    std::atomic<uint64_t> w{0};
    std::atomic<uint32_t> shadow{0};
  };
  static_assert(sizeof(Entry) == 16 && 64 % sizeof(Entry) == 0);
  struct Leaf {
    Entry e[kLeafSize];
  };
  struct Mid {
    std::atomic<Leaf*> leaf[kMidSize] = {};
  };
  static uint64_t TopOf(uint64_t v) { return v >> (kMidBits + kLeafBits); }
  static uint64_t MidOf(uint64_t v) { return (v >> kLeafBits) & (kMidSize - 1); }

  Leaf* LeafOf(uint64_t v) const {
    if (!top_ || v > format::kGranuleMaxVblock) return nullptr;
    const Mid* m = top_[TopOf(v)].load(std::memory_order_acquire);
    return m ? m->leaf[MidOf(v)].load(std::memory_order_acquire) : nullptr;
  }
  // Block v's entry, nullptr if its leaf was never made.
  const Entry* EntryOf(uint64_t v) const {
    if (!any()) return nullptr;
    const Leaf* l = LeafOf(v);
    return l ? &l->e[v & kLeafMask] : nullptr;
  }
  uint64_t Word(uint64_t v) const {
    const Entry* e = EntryOf(v);
    return e ? e->w.load(std::memory_order_acquire) : 0;
  }
  Leaf* LeafFor(uint64_t v) {
    if (!top_) top_.reset(new std::atomic<Mid*>[kTopSize]());
    std::atomic<Mid*>& ms = top_[TopOf(v)];
    Mid* m = ms.load(std::memory_order_relaxed);
    if (!m) {
      owned_mids_.push_back(std::make_unique<Mid>());
      m = owned_mids_.back().get();
      ms.store(m, std::memory_order_release);
    }
    std::atomic<Leaf*>& ls = m->leaf[MidOf(v)];
    Leaf* l = ls.load(std::memory_order_relaxed);
    if (!l) {
      owned_leaves_.push_back(std::make_unique<Leaf>());
      l = owned_leaves_.back().get();
      ls.store(l, std::memory_order_release);
    }
    // Readers find the top only after any_ (release) says there is one.
    // Stored once: every reader loads it, and a store at each flip would
    // take its line from their caches though the value stays the same.
    if (!any_.load(std::memory_order_relaxed)) any_.store(true, std::memory_order_release);
    return l;
  }

  std::atomic<bool> any_{false};
  std::atomic<uint64_t> count_{0};
  std::unique_ptr<std::atomic<Mid*>[]> top_;
  std::vector<std::unique_ptr<Mid>> owned_mids_;
  std::vector<std::unique_ptr<Leaf>> owned_leaves_;
};

}  // namespace upfs
