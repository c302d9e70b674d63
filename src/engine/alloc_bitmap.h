// The allocation bitmap of one allocation domain: one bit per logical block
// of its block space, 1 = taken, claimed by CAS. Soft state in memory the
// container lends: rebuilt from the logs whenever nobody uses the domain.
//
// A container may also lend summaries (a pool does): saturation trees over
// the bitmap's words that find a word with a free block, an empty word (a
// 256 KiB partition) or an empty 2 MiB partition in O(levels) however full
// the space is. Without them the finders scan the words from the hint.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/saturation_tree.h"
#include "util/status.h"

namespace upfs {

struct BitmapWords {
  alignas(64) std::atomic<uint64_t> capacity_blocks;  // bits valid below this
  std::atomic<uint64_t> alloc_hint;                   // bitmap word to start scanning at
  std::atomic<uint64_t> partition_hint;               // 2 MiB partition to start scanning at
  void Reset(uint64_t capacity) {
    alloc_hint.store(0, std::memory_order_relaxed);
    partition_hint.store(0, std::memory_order_relaxed);
    capacity_blocks.store(capacity, std::memory_order_relaxed);
  }
};
static_assert(sizeof(BitmapWords) == 64);

// Partition sizes, ctFS's levels in blocks (docs/design.md, "Allocation"):
// a bitmap word is an L2 partition (64 blocks, 256 KiB), eight words an L3
// partition (512 blocks, 2 MiB: one huge page).
inline constexpr uint64_t kWordBlocks = 64;
inline constexpr uint64_t kPartitionWords = 8;
inline constexpr uint64_t kPartitionBlocks = kWordBlocks * kPartitionWords;

// The summaries' memory for a domain of `max_blocks` blocks.
struct BitmapSummaryLayout {
  static constexpr uint64_t Words(uint64_t max_blocks) { return max_blocks / kWordBlocks; }
  static constexpr uint64_t Partitions(uint64_t max_blocks) { return max_blocks / kPartitionBlocks; }
  static constexpr uint64_t FullWords(uint64_t max_blocks) { return SaturationTree::WordsFor(Words(max_blocks)); }
  static constexpr uint64_t UsedWords(uint64_t max_blocks) { return SaturationTree::WordsFor(Words(max_blocks)); }
  static constexpr uint64_t PartitionTreeWords(uint64_t max_blocks) {
    return SaturationTree::WordsFor(Partitions(max_blocks));
  }
  static constexpr uint64_t TotalWords(uint64_t max_blocks) {
    return FullWords(max_blocks) + UsedWords(max_blocks) + PartitionTreeWords(max_blocks);
  }
};

class AllocationBitmap {
 public:
  AllocationBitmap(BitmapWords* words, std::atomic<uint64_t>* bits) : w_(words), bits_(bits) {}
  // With summaries in `summary` (BitmapSummaryLayout::TotalWords(max_blocks)
  // words, zero = nothing marked, valid once RebuildSummaries ran).
  AllocationBitmap(BitmapWords* words, std::atomic<uint64_t>* bits, std::atomic<uint64_t>* summary,
                   uint64_t max_blocks);

  BitmapWords* words() const { return w_; }
  std::atomic<uint64_t>* bits() const { return bits_; }
  uint64_t capacity() const { return w_->capacity_blocks.load(std::memory_order_acquire); }
  bool has_summaries() const { return summaries_; }

  bool Test(uint64_t b) const {
    return (bits_[b >> 6].load(std::memory_order_relaxed) >> (b & 63)) & 1;
  }
  // Rebuild only (the summaries follow in RebuildSummaries).
  void Set(uint64_t b) { bits_[b >> 6].fetch_or(uint64_t{1} << (b & 63), std::memory_order_relaxed); }
  void Clear(uint64_t b) { ClearBits(b >> 6, uint64_t{1} << (b & 63)); }
  // Gives back the blocks of `mask` in word w, all below the capacity (an
  // assertion: a caller freeing a number read from the medium checks it).
  void ClearBits(uint64_t w, uint64_t mask);
  void ClearRange(uint64_t first, uint64_t count);
  // Takes word w from `expected` to `desired` (a superset) by CAS; on
  // failure `expected` holds what the word is now.
  bool ClaimBits(uint64_t w, uint64_t& expected, uint64_t desired);

  // The first word at or after `from` (wrapping, below `words`) that has a
  // free block / is wholly free; the first wholly free 2 MiB partition
  // (below `partitions`). kNone when there is none. The answer is a
  // candidate: the caller's CAS decides.
  static constexpr uint64_t kNone = SaturationTree::kNone;
  uint64_t FindWordWithRoom(uint64_t from, uint64_t words);
  uint64_t FindEmptyWord(uint64_t from, uint64_t words);
  uint64_t FindEmptyPartition(uint64_t from, uint64_t partitions);

  // After a rebuild (bits set with Set, summaries zero): marks the
  // summaries from the bitmap's first `capacity_blocks` blocks.
  void RebuildSummaries(uint64_t capacity_blocks);
  // Whether the summaries hide no free space: no word with a free block
  // is marked full, no wholly free word or partition is marked used (for
  // fsck, on a quiet domain). Appends what is wrong to *problem.
  bool SummariesAgree(uint64_t capacity_blocks, std::string* problem) const;

  // fn(addr, bytes) for the memory that blocks [first, end) use: their
  // bits, the summaries' words above them, and the shared words. Provided
  // (medium/provide.h) before the blocks are handed out, since the
  // container's memory may be holes until first stored to.
  template <typename Fn>
  void ForEachSpan(uint64_t first, uint64_t end, Fn&& fn) const {
    if (first >= end) return;
    fn(static_cast<void*>(w_), sizeof(BitmapWords));
    fn(static_cast<void*>(bits_ + (first >> 6)), (((end - 1) >> 6) + 1 - (first >> 6)) * sizeof(uint64_t));
    if (!summaries_) return;
    const uint64_t w0 = first / kWordBlocks, w1 = (end - 1) / kWordBlocks + 1;
    full_.ForEachSpan(w0, w1, fn);
    used_.ForEachSpan(w0, w1, fn);
    used_2m_.ForEachSpan(first / kPartitionBlocks, (end - 1) / kPartitionBlocks + 1, fn);
  }

  // Raises the capacity to `blocks` (never lowers it).
  void RaiseCapacity(uint64_t blocks) {
    uint64_t c = w_->capacity_blocks.load();
    while (blocks > c && !w_->capacity_blocks.compare_exchange_weak(c, blocks)) {
    }
  }

 private:
  bool PartitionEmpty(uint64_t p) const;
  template <typename Pred>
  uint64_t ScanWords(uint64_t from, uint64_t n, Pred pred) const;

  BitmapWords* w_;
  std::atomic<uint64_t>* bits_;
  bool summaries_ = false;
  SaturationTree full_;      // leaf = word: all 64 blocks taken
  SaturationTree used_;      // leaf = word: some block taken
  SaturationTree used_2m_;   // leaf = 2 MiB partition: some block taken
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
    if (b >= end_) end_ = b + 1;
  }
  Status status() const { return dup_.empty() ? Status::OK() : Status::Corrupt("block map", dup_); }
  // One past the highest block marked (0: none).
  uint64_t end() const { return end_; }

 private:
  AllocationBitmap* bm_;
  std::string dup_;
  uint64_t end_ = 0;
};

}  // namespace upfs
