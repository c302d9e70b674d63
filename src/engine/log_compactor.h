// LogCompactor: non-blocking garbage collection of one log (MadFS §4.5,
// with EBR for reclamation).
//
// The log is the chain head -> ... -> A -> ..., where A is the block that
// has no successor yet when GC starts. Every block before A is full and never
// changes again. GC replays those blocks into a private table, writes the
// resulting state as a short chain of fresh blocks whose last block links to
// A, and publishes it with one CAS on the log root's head. Readers and
// writers never wait: whoever still walks the old blocks keeps them alive by
// its epoch pin, and the old blocks are reused only two epochs later. Users
// whose table cursor lies in a compacted block notice it through
// LogWords::compact_seq and replay the new chain.
#pragma once

#include <cstdint>

#include "engine/block_source.h"
#include "engine/log.h"
#include "engine/log_root.h"
#include "util/status.h"

namespace upfs {

class BlockTable;
class CompactWriter;

class LogCompactor {
 public:
  LogCompactor(BlockSpace* space, BlockSource* source, const LogRoot& root)
      : access_(space), source_(source), root_(root) {}

  // Compacts the log if it is past the trigger length (with force:
  // whenever that makes it shorter), unless another GC of it is running
  // (then returns at once). The caller is pinned in `slot`; blocks come
  // from, and old ones are retired to, t.
  Status Collect(ThreadBlocks* t, uint32_t slot, bool force);
  // States encoded by the compactions of this process (each replays and
  // rewrites a whole log, published or not): for tests.
  static uint64_t StatesEncodedForTest();
  // The log blocks any compaction of `state` keeps at least: EncodeState
  // writes a two-slot flip for every paired block. A GC asked for below
  // it cannot make the log shorter (LogWriter::TakeGcRequests).
  static uint64_t FloorBlocks(const BlockTable& state) {
    return state.shadows().count() * format::kGranuleFlipSlots / format::kSlotsPerLogBlock;
  }

 private:
  struct FullBlocks;
  // The compaction itself, with the log's GC word held.
  Status Compact(ThreadBlocks* t, bool force);
  Status ReplayFullBlocks(FullBlocks* f);
  void EncodeState(const BlockTable& state, CompactWriter* w) const;
  Status Publish(ThreadBlocks* t, const FullBlocks& f, CompactWriter* w);

  BlockAccess access_;
  BlockSource* source_;
  LogRoot root_;
};

}  // namespace upfs
