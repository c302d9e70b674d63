// Block allocation: a shared bitmap (in SharedState) claimed by CAS, and per
// thread a contiguous chunk and a free list, so that an overwrite-heavy
// thread recycles its own blocks and rarely touches shared cache lines.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/shared_state.h"
#include "format/format.h"
#include "medium/medium.h"
#include "util/status.h"

namespace upfs {

// Blocks owned by one thread for one file: taken in the bitmap, referenced
// by nothing. Lost (until the next rebuild) if the process dies.
struct ThreadBlocks {
  std::vector<uint32_t> free;  // single recycled blocks
  uint64_t chunk_next = 0;     // contiguous reserved range [chunk_next, chunk_end)
  uint64_t chunk_end = 0;
};

class Allocator {
 public:
  Allocator(Medium* medium, SharedState* shared) : m_(medium), sh_(shared) {}

  // Appends runs totalling `n` blocks to *runs, as contiguous as possible.
  Status Alloc(ThreadBlocks* t, uint64_t n, std::vector<format::Run>* runs);
  Status AllocOne(ThreadBlocks* t, uint32_t* l);
  // Grows the host file, if needed, so that it has room for `blocks` blocks
  // in all (fallocate's reservation: see docs/design.md).
  Status EnsureCapacity(uint64_t blocks);
  // Gives blocks back to the thread (they must be unreachable by readers,
  // see docs/design.md on reuse).
  void Free(ThreadBlocks* t, uint32_t l, uint32_t count);
  // Gives the rest of the thread's chunk back to the shared bitmap.
  void DropChunk(ThreadBlocks* t);
  // Returns everything the thread holds to the shared bitmap.
  void ReturnAll(ThreadBlocks* t);

 private:
  Status ClaimChunk(ThreadBlocks* t, uint64_t want);
  bool TryClaim(uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count);
  void ReturnRange(uint64_t l, uint64_t count);
  static void PublishCapacity(const Medium* m, SharedState* sh);

  Medium* m_;
  SharedState* sh_;
};

}  // namespace upfs
