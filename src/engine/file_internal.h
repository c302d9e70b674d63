// Helpers shared by the files that implement File (file*.cc).
#pragma once

#include <immintrin.h>

#include <atomic>
#include <cstdint>

#include "engine/block_table.h"
#include "format/format.h"
#include "medium/pm.h"
#include "util/status.h"

namespace upfs {

// Holds a spin lock (File::apply_lock_) for a scope.
class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag& f) : f_(f) {
    while (f_.test_and_set(std::memory_order_acquire)) {
      while (f_.test(std::memory_order_relaxed)) _mm_pause();
    }
  }
  ~SpinGuard() { f_.clear(std::memory_order_release); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  std::atomic_flag& f_;
};

// A pair is folded back into one block once no flip of it was applied for
// this long (docs/design.md, "Folding pairs back"), and a reader that met
// shadow granules asks for that at most this often per File: a block
// that takes small writes stays paired, one that stopped reads as one
// block again. Folding each pair at every GC undid itself under steady
// small writes (each fold, 4 KiB, followed by the next write's re-pairing).
inline constexpr uint32_t kPairColdMs = 1000;
// Unless readers meet shadow granules, a GC folds only pairs no flip
// touched for this long: a file that only takes small writes (a log, a
// database's pages between checkpoints) would otherwise have each GC fold
// the blocks a random write pattern had not come back to for a second,
// and the next write to each pair it again, with a fresh shadow
// (docs/design.md, "Folding pairs back"). The shadows a write-only file
// holds meanwhile are space, bounded by its blocks, until the file goes
// quiet: the GC worker then folds the pairs idle this long
// (File::FoldWhenQuiet).
inline constexpr uint32_t kPairIdleMs = 30000;
// kPairIdleMs, unless a test set another (File::SetPairIdleMsForTest).
uint32_t PairIdleMs();
// Pairs a quiet fold folds before it lets the worker's other work in
// (File::FoldWhenQuiet).
inline constexpr uint64_t kQuietFoldBatch = 4096;
// After a quiet fold left no pair, the look that gives the free space back
// to the host comes this much later, when the shadows it freed have
// waited their two epochs (File::FoldWhenQuiet).
inline constexpr uint32_t kGiveBackAfterMs = 100;

// Zeroes the bytes of a block from `valid` on (the bytes past the size in
// a tail block) with non-temporal stores, if any is not zero (reading them
// costs less than writing them). True if it wrote: durable at the
// caller's next fence.
inline bool ZeroPastSize(char* block, uint64_t valid) {
  const char* past = block + valid;
  const uint64_t n = format::kBlockSize - valid;
  bool zero = true;
  for (uint64_t i = 0; zero && i < n; ++i) zero = past[i] == 0;
  if (!zero) pm::ZeroNT(block + valid, n);
  return !zero;
}

// An operation that raises the size from a snapshot's `size` over bytes it
// does not write (a write that starts past the tail block, a growing
// fallocate) zeroes the bytes past `size` in the tail block under the tail
// claim first (File::ZeroTailForGap). Effect `e`, committed since that
// snapshot, may have put bytes that are not zero back in its way: a new
// tail block (copy on write writes one only up to the size), or a size
// raised past a block written only up to its own end. The operation must
// not commit over it.
inline bool PutsBytesPastSize(const Effect& e, uint64_t size) {
  const uint64_t tail = size >> format::kBlockShift;
  return e.TouchesBlocks(tail, tail + 1) || e.MayRaiseSizeAbove(size);
}

inline Status ReadOnlyRefusal() { return Status::Error(EBADF, "upfs file opened read-only"); }

}  // namespace upfs
