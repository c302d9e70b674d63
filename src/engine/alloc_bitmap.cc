#include "engine/alloc_bitmap.h"

#include <algorithm>

#include "util/assert.h"

namespace upfs {

namespace {
constexpr uint64_t kAll = ~uint64_t{0};
}  // namespace

AllocationBitmap::AllocationBitmap(BitmapWords* words, std::atomic<uint64_t>* bits,
                                   std::atomic<uint64_t>* summary, uint64_t max_blocks)
    : w_(words), bits_(bits), summaries_(true) {
  using L = BitmapSummaryLayout;
  full_ = SaturationTree(summary, L::Words(max_blocks));
  used_ = SaturationTree(summary + L::FullWords(max_blocks), L::Words(max_blocks));
  used_2m_ = SaturationTree(summary + L::FullWords(max_blocks) + L::UsedWords(max_blocks),
                            L::Partitions(max_blocks));
}

bool AllocationBitmap::PartitionEmpty(uint64_t p) const {
  for (uint64_t i = 0; i < kPartitionWords; ++i)
    if (bits_[p * kPartitionWords + i].load() != 0) return false;
  return true;
}

// Every summary leaf follows the rule of SaturationTree one level down: the
// claimer marks after its CAS and re-reads the data; the freer changes the
// data first and unmarks after. Of a claimer's "mark, re-read" and a
// freer's "clear, unmark", one sees the other (all seq_cst), so a mark
// never stays over data that no longer has what it says.
bool AllocationBitmap::ClaimBits(uint64_t w, uint64_t& expected, uint64_t desired) {
  if (!bits_[w].compare_exchange_strong(expected, desired)) return false;
  if (!summaries_) return true;
  if (expected == 0 && desired != 0) {
    used_.Mark(w);
    if (bits_[w].load() == 0) used_.Unmark(w);
    used_2m_.Mark(w / kPartitionWords);
    if (PartitionEmpty(w / kPartitionWords)) used_2m_.Unmark(w / kPartitionWords);
  }
  if (desired == kAll) {
    full_.Mark(w);
    if (bits_[w].load() != kAll) full_.Unmark(w);
  }
  return true;
}

void AllocationBitmap::ClearBits(uint64_t w, uint64_t mask) {
  // Only what was handed out comes back, and the capacity never shrinks: a
  // block at or past it is a number read from damaged media that its
  // reader did not check, and the store below would land outside the bits
  // in use (or outside the bitmap's memory: fuzz_pool-crash-3838a727fd12).
  UPFS_ASSERT(mask != 0 && (w << 6) + (63 - uint64_t(__builtin_clzll(mask))) < capacity());
  const uint64_t old = bits_[w].fetch_and(~mask, std::memory_order_seq_cst);
  if (!summaries_ || (old & mask) == 0) return;
  if (old == kAll) full_.Unmark(w);
  if ((old & ~mask) == 0) {
    used_.Unmark(w);
    if (PartitionEmpty(w / kPartitionWords)) used_2m_.Unmark(w / kPartitionWords);
  }
}

void AllocationBitmap::ClearRange(uint64_t first, uint64_t count) {
  while (count > 0) {
    const uint64_t w = first >> 6, lo = first & 63, n = std::min<uint64_t>(count, 64 - lo);
    const uint64_t mask = (n == 64 ? kAll : ((uint64_t{1} << n) - 1)) << lo;
    ClearBits(w, mask);
    first += n;
    count -= n;
  }
}

template <typename Pred>
uint64_t AllocationBitmap::ScanWords(uint64_t from, uint64_t n, Pred pred) const {
  if (n == 0) return kNone;
  from %= n;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t w = (from + i) % n;
    if (pred(w)) return w;
  }
  return kNone;
}

// The trees give candidates; a candidate whose data says otherwise is a
// leaf the tree has not caught up with (a claim between its CAS and its
// mark, or a mark's re-check racing a free): marked here, with the same
// re-check, and the search goes on after it. Each correction marks a leaf,
// so the loop ends.
uint64_t AllocationBitmap::FindWordWithRoom(uint64_t from, uint64_t words) {
  if (!summaries_) return ScanWords(from, words, [&](uint64_t w) { return bits_[w].load() != kAll; });
  for (uint64_t at = from, tries = 0; tries <= words; ++tries) {
    const uint64_t w = full_.FindUnmarkedWrapping(at, words);
    if (w == kNone || bits_[w].load() != kAll) return w;
    full_.Mark(w);
    if (bits_[w].load() != kAll) full_.Unmark(w);
    at = w + 1;
  }
  return kNone;
}

uint64_t AllocationBitmap::FindEmptyWord(uint64_t from, uint64_t words) {
  if (!summaries_) return ScanWords(from, words, [&](uint64_t w) { return bits_[w].load() == 0; });
  for (uint64_t at = from, tries = 0; tries <= words; ++tries) {
    const uint64_t w = used_.FindUnmarkedWrapping(at, words);
    if (w == kNone || bits_[w].load() == 0) return w;
    used_.Mark(w);
    if (bits_[w].load() == 0) used_.Unmark(w);
    at = w + 1;
  }
  return kNone;
}

uint64_t AllocationBitmap::FindEmptyPartition(uint64_t from, uint64_t partitions) {
  if (!summaries_) return ScanWords(from, partitions, [&](uint64_t p) { return PartitionEmpty(p); });
  for (uint64_t at = from, tries = 0; tries <= partitions; ++tries) {
    const uint64_t p = used_2m_.FindUnmarkedWrapping(at, partitions);
    if (p == kNone || PartitionEmpty(p)) return p;
    used_2m_.Mark(p);
    if (PartitionEmpty(p)) used_2m_.Unmark(p);
    at = p + 1;
  }
  return kNone;
}

void AllocationBitmap::RebuildSummaries(uint64_t capacity_blocks) {
  if (!summaries_) return;
  const uint64_t words = std::min((capacity_blocks + 63) / 64, full_.leaves());
  for (uint64_t w = 0; w < words; ++w) {
    const uint64_t v = bits_[w].load(std::memory_order_relaxed);
    if (v == kAll) full_.Mark(w);
    if (v != 0) {
      used_.Mark(w);
      used_2m_.Mark(w / kPartitionWords);
    }
  }
}

bool AllocationBitmap::SummariesAgree(uint64_t capacity_blocks, std::string* problem) const {
  if (!summaries_) return true;
  const uint64_t words = std::min(capacity_blocks / 64, full_.leaves());
  for (uint64_t w = 0; w < words; ++w) {
    const uint64_t v = bits_[w].load();
    const char* what = nullptr;
    if (v != kAll && full_.IsMarked(w)) what = " has a free block but is summarized as full";
    else if (v == 0 && used_.IsMarked(w)) what = " is free but summarized as in use";
    else if (w % kPartitionWords == 0 && w + kPartitionWords <= words && PartitionEmpty(w / kPartitionWords) &&
             used_2m_.IsMarked(w / kPartitionWords))
      what = " starts a free 2 MiB partition summarized as in use";
    if (what) {
      *problem = "allocation bitmap word " + std::to_string(w) + what;
      return false;
    }
  }
  std::string where;
  if (!full_.ParentsAgree(&where) || !used_.ParentsAgree(&where) || !used_2m_.ParentsAgree(&where)) {
    *problem = "allocation bitmap summary: " + where + " is marked over a word that is not";
    return false;
  }
  return true;
}

}  // namespace upfs
