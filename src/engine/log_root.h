// LogRoot: what the engine needs to find and coordinate one log (one upfs
// file), lent by the container: the durable words (the head of the chain and
// the times, in a per-file header today, in an inode tomorrow), the
// consistency mode, and the soft coordination words every user of the log
// shares (LogWords, in shared memory).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "format/format.h"
#include "medium/pm.h"

namespace upfs {

// Coordination of one log among its users. Soft: reset with the rest of the
// shared state when nobody uses the log.
struct LogWords {
  alignas(64) std::atomic<uint64_t> compact_seq;  // blocks with seq below were compacted
  std::atomic<uint64_t> gc_owner;                 // slot + 1 of the running GC, 0 = none
  std::atomic<uint64_t> gc_last_blocks;           // length of the log right after the last GC
  // Who may write the homes not live of the granules of virtual blocks v
  // with v % kGranuleClaims == i (granule_claim[i]): a sub-block writer
  // (File::FlipOnce) or the GC's fold home, owner pid << 32 | slot + 1, 0
  // = nobody. Waited for only briefly (64 pauses; the writer then copies
  // on write instead; the GC's fold never waits); a dead owner's is taken
  // over.
  static constexpr uint32_t kGranuleClaims = 4;
  std::atomic<uint64_t> granule_claim[kGranuleClaims];
  // Who may write the bytes past the end of file in the tail block (an
  // in-place append, or an operation about to expose them): owner pid << 32
  // | slot + 1, 0 = nobody. See File::AppendInPlace.
  alignas(64) std::atomic<uint64_t> tail_claim;
  // The size and block count as of a log position, for a stat that need
  // not replay the log (engine/stat_hint.h). A seqlock: hint_ver is odd
  // while a writer stores, 0 while there is no hint.
  std::atomic<uint64_t> hint_ver;
  std::atomic<uint64_t> hint_size;
  std::atomic<uint64_t> hint_blocks;
  std::atomic<uint64_t> hint_at;    // lblock:32 | slot:32 of the position
  std::atomic<uint64_t> hint_seq;   // that log block's seq
  std::atomic<uint64_t> hint_head;  // the log's first block then
  std::atomic<uint64_t> hint_crc;   // CRC-32C of the five words above
  void Reset() {
    compact_seq.store(0, std::memory_order_relaxed);
    gc_owner.store(0, std::memory_order_relaxed);
    gc_last_blocks.store(0, std::memory_order_relaxed);
    for (auto& g : granule_claim) g.store(0, std::memory_order_relaxed);
    tail_claim.store(0, std::memory_order_relaxed);
    hint_ver.store(0, std::memory_order_relaxed);
    hint_size.store(0, std::memory_order_relaxed);
    hint_blocks.store(0, std::memory_order_relaxed);
    hint_at.store(0, std::memory_order_relaxed);
    hint_seq.store(0, std::memory_order_relaxed);
    hint_head.store(0, std::memory_order_relaxed);
    hint_crc.store(0, std::memory_order_relaxed);
  }
};
static_assert(sizeof(LogWords) == 128);
static_assert(offsetof(LogWords, tail_claim) == 64 && offsetof(LogWords, hint_crc) == 120);
static_assert(offsetof(LogWords, granule_claim) == 24);

struct LogRoot {
  std::atomic<uint64_t>* head = nullptr;  // logical block of the first log block (durable, CAS)
  format::FileTimes* times = nullptr;     // durable
  uint64_t created_ns = 0;                // reported as mtime of a never-written file
  format::Consistency consistency = format::Consistency::kStrict;
  LogWords* words = nullptr;              // null for a read-only user, who coordinates nothing
  // The log's format admits sub-block patches (per-file format version 2,
  // pool version 2): small strict writes may commit them. Logs of older
  // versions never get one, so that older builds can still read them.
  bool patches = true;
  // It admits checked appends (kGrowTailChecked: per-file format version
  // 3, pool version 4): strict appends inside the tail block commit in one
  // persisted round. Older logs get the two-round kGrowTail.
  bool checked_appends = true;
  // It admits granule flips (per-file format version 4, pool version 5):
  // small strict writes flip granules between a block and its shadow
  // instead of becoming patches.
  bool granules = true;
  // It admits anywhere shadows (per-file format version 5, pool version
  // 6): a block's first flip takes one shadow block from anywhere.
  // Older logs pair blocks with their neighbours, copying the block.
  bool anywhere_shadows = true;
  // Its stats leave a hint in `words` for stats without the engine
  // (engine/stat_hint.h): in a pool, where such stats read it.
  bool stat_hints = false;
  // `head` may not be durable yet: a pool makes a file's first log block
  // on first use and swaps it into the inode without writing the word
  // back; each LogWriter writes it back before its first commit's fence
  // (LogWriter::CommitFence), so that no commit returns
  // before the log holding it can be found after a crash.
  bool head_persisted_by_commit = false;
  // A word of the owner's, in another cache line, that must be durable
  // before any change of the log's is: written back with `head` before the
  // first commit's fence and with every swap of `head` (a pool's version 9
  // inode: its ident line, whose fresh bit's clear the creator left
  // unwritten; container/pool/fresh_inode.h). Null: none.
  const void* persist_with_head = nullptr;
  // Writes `head` back, and persist_with_head's line; not fenced.
  void FlushHead() const {
    pm::Flush(head, sizeof(*head));
    if (persist_with_head) pm::Flush(persist_with_head, 8);
  }
};

}  // namespace upfs
