// SaturationTree: a hierarchy of bitmaps over N leaves that finds the first
// unmarked leaf at or after a position in O(levels) (at most 5 levels for
// 2^30 leaves: 64-way fan-out), shared between threads and processes.
//
// Bit i of level 0 is leaf i; bit j of level k+1 is 1 when word j of level
// k is all ones ("nothing below is unmarked"). Marks are hints kept close
// to the truth without locks: a bit of level k+1 that is 0 while its word
// is full costs one look (the search skips it); the reverse, a 1 over a
// word with a 0 bit, would hide leaves, and the protocol rules it out:
//  - Mark sets the leaf, and while a word it set becomes all ones, sets the
//    parent bit and then reads the word again; if a bit was cleared
//    meanwhile, it clears the parent bit (Unmark's path upwards).
//  - Unmark clears the leaf, then clears every ancestor bit that is set.
// Every access is seq_cst: of a Mark's "set parent, read word" and an
// Unmark's "clear child, read parent", at least one sees the other's write
// (the store-load pattern), so one of the two clears the parent.
// The caller's leaf predicate follows the same rule one level down: it
// marks after changing the data it derives the leaf from and re-checks.
//
// The memory is lent (zeroed = nothing marked): a pool keeps its trees in
// its volatile area, rebuilt by recovery.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <string>

#include "util/assert.h"

namespace upfs {

class SaturationTree {
 public:
  static constexpr uint64_t kNone = ~uint64_t{0};
  static constexpr int kMaxLevels = 8;

  // Words of memory a tree over `leaves` leaves needs.
  static constexpr uint64_t WordsFor(uint64_t leaves) {
    uint64_t total = 0;
    for (uint64_t bits = leaves;; bits = (bits + 63) / 64) {
      total += (bits + 63) / 64;
      if (bits <= 64) return total;
    }
  }

  SaturationTree() = default;
  SaturationTree(std::atomic<uint64_t>* words, uint64_t leaves) : leaves_(leaves) {
    uint64_t off = 0;
    for (uint64_t bits = leaves;; bits = (bits + 63) / 64) {
      UPFS_ASSERT(levels_ < kMaxLevels);
      level_[levels_] = words + off;
      ++levels_;
      off += (bits + 63) / 64;
      if (bits <= 64) break;
    }
  }

  uint64_t leaves() const { return leaves_; }

  // fn(addr, bytes) for the words, level by level, that leaves [first,
  // end) live in and propagate to (what must have memory behind it before
  // those leaves are marked: medium/provide.h).
  template <typename Fn>
  void ForEachSpan(uint64_t first, uint64_t end, Fn&& fn) const {
    if (end > leaves_) end = leaves_;
    if (first >= end) return;
    for (int k = 0; k < levels_; ++k) {
      // Bit j of level k+1 stands for word j of level k.
      first >>= 6;
      end = ((end - 1) >> 6) + 1;
      fn(static_cast<void*>(level_[k] + first), (end - first) * sizeof(uint64_t));
    }
  }
  bool IsMarked(uint64_t leaf) const { return TestBit(0, leaf); }

  void Mark(uint64_t leaf) {
    UPFS_ASSERT(leaf < leaves_);
    const uint64_t bit = uint64_t{1} << (leaf & 63);
    std::atomic<uint64_t>& w = level_[0][leaf >> 6];
    if (w.load() & bit) return;  // marked already: its marker propagates
    if ((w.fetch_or(bit) | bit) == ~uint64_t{0}) PropagateFull(0, leaf);
  }

  void Unmark(uint64_t leaf) {
    UPFS_ASSERT(leaf < leaves_);
    if (!TestBit(0, leaf)) return;
    ClearFrom(0, leaf);
  }

  // Whether every marked bit above the leaves covers a full word (the
  // search trusts that); on a quiet tree. *where names the first that
  // does not.
  bool ParentsAgree(std::string* where) const {
    uint64_t words = (leaves_ + 63) / 64;
    for (int k = 1; k < levels_; ++k) {
      for (uint64_t i = 0; i < words; ++i) {
        if (TestBit(k, i) && level_[k - 1][i].load() != ~uint64_t{0}) {
          *where = "level " + std::to_string(k) + " bit " + std::to_string(i);
          return false;
        }
      }
      words = (words + 63) / 64;
    }
    return true;
  }

  // The first unmarked leaf in [from, limit), or kNone.
  uint64_t FindUnmarked(uint64_t from, uint64_t limit) const {
    if (limit > leaves_) limit = leaves_;
    return Next(0, from, limit);
  }

  // The first unmarked leaf at or after `from`, wrapping round to 0 below
  // `limit`; kNone when every leaf below `limit` is marked.
  uint64_t FindUnmarkedWrapping(uint64_t from, uint64_t limit) const {
    if (limit > leaves_) limit = leaves_;
    if (from >= limit) from = 0;
    const uint64_t i = Next(0, from, limit);
    return i != kNone ? i : Next(0, 0, from);
  }

 private:
  bool TestBit(int k, uint64_t i) const { return (level_[k][i >> 6].load() >> (i & 63)) & 1; }

  // Bit i of level k is set: while its word is full, mark the word full
  // one level up and make sure it still is (an Unmark may have cleared a
  // bit before it could see the parent's).
  void PropagateFull(int k, uint64_t i) {
    for (; k + 1 < levels_; ++k, i >>= 6) {
      if (level_[k][i >> 6].load() != ~uint64_t{0}) return;
      const uint64_t up = i >> 6;
      level_[k + 1][up >> 6].fetch_or(uint64_t{1} << (up & 63));
      if (level_[k][i >> 6].load() != ~uint64_t{0}) {
        ClearFrom(k + 1, up);
        return;
      }
    }
  }

  // Clears bit i of level k and every set ancestor bit.
  void ClearFrom(int k, uint64_t i) {
    for (; k < levels_; ++k, i >>= 6) {
      const uint64_t bit = uint64_t{1} << (i & 63);
      level_[k][i >> 6].fetch_and(~bit);
      if (k + 1 == levels_) return;
      const uint64_t up = i >> 6;
      if (!TestBit(k + 1, up)) return;
    }
  }

  // The first index in [pos, lim) of level k whose bit is 0, or kNone.
  uint64_t Next(int k, uint64_t pos, uint64_t lim) const {
    while (pos < lim) {
      const uint64_t w = pos >> 6;
      const uint64_t v = level_[k][w].load(std::memory_order_acquire) | ((uint64_t{1} << (pos & 63)) - 1);
      if (v != ~uint64_t{0}) {
        const uint64_t i = (w << 6) + uint64_t(std::countr_one(v));
        return i < lim ? i : kNone;
      }
      if (k + 1 == levels_) {
        pos = (w + 1) << 6;
        continue;
      }
      // The rest of this word is marked: the level above names the next
      // word with a 0 bit (if it is stale, the loop looks again).
      const uint64_t nw = Next(k + 1, w + 1, (lim + 63) >> 6);
      if (nw == kNone) return kNone;
      pos = nw << 6;
    }
    return kNone;
  }

  std::atomic<uint64_t>* level_[kMaxLevels] = {};
  int levels_ = 0;
  uint64_t leaves_ = 0;
};

}  // namespace upfs
