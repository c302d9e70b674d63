// ReadAhead: which block a sequential reader will want next, so that its
// lines are requested while the current read finishes (docs/design.md,
// "Read-ahead"). A random 4 KiB read waits for its block's first line with
// nothing to overlap it; a sequential one need not, since the next block
// is known. One per file and thread (ThreadCtx): a reader's stream is its
// own, and two threads reading one file in turn are not sequential.
#pragma once

#include <cstdint>

#include "format/format.h"

namespace upfs {

class ReadAhead {
 public:
  static constexpr uint64_t kNone = ~uint64_t{0};

  // A read of [off, end) (end > off) of a file of `blocks` blocks has just
  // copied its bytes: the block to request now, or kNone. Only a read that
  // starts where this reader's last one ended is sequential, and each block
  // is asked for once (a stream of 100-byte reads asks at its first read of
  // every block).
  uint64_t After(uint64_t off, uint64_t end, uint64_t blocks) {
    const bool sequential = off == last_end_;
    last_end_ = end;
    if (!sequential) return kNone;
    const uint64_t next = ((end - 1) >> format::kBlockShift) + 1;
    if (next >= blocks || next == asked_) return kNone;
    asked_ = next;
    return next;
  }

 private:
  uint64_t last_end_ = kNone;
  uint64_t asked_ = kNone;
};

}  // namespace upfs
