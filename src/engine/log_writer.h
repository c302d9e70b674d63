// LogWriter: commits entries at the tail of one log (MadFS §4.3), for any
// caller that prepared its data: a File's operations today, a transaction
// committing to several logs tomorrow.
//
// An entry is one word (an inline mapping, a touch, a tail growth) or a
// payload: a reservation word, the payload words, and an apply word that
// carries the payload's checksum, all in one log block. Before its CAS, a
// commit scans what was committed since the caller's snapshot (`pos`) and
// asks `conflict` about each effect: a conflicting commit is not made, and
// the caller redoes its work on the new state. Entries reach media in log
// order (PersistBeforeSlot), so a crash never leaves a hole before an
// acknowledged entry.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/block_source.h"
#include "engine/block_table.h"
#include "engine/log.h"
#include "engine/log_root.h"
#include "format/format.h"
#include "medium/pm.h"
#include "util/function_ref.h"
#include "util/status.h"

namespace upfs {

// GC runs when a new log block makes the chain longer than this plus twice
// the length the last compaction produced.
inline constexpr uint64_t kGcSlackBlocks = 32;
// The chain length past which a GC is asked for, when a compaction leaves
// `kept` blocks.
constexpr uint64_t GcTriggerBlocks(uint64_t kept) { return kGcSlackBlocks + 2 * kept; }

// A payload entry being prepared, and the overflow blocks it owns until
// its commit (for runs that do not fit in the log block).
struct PendingEntry {
  std::vector<uint64_t> payload;
  std::vector<format::Run> overflow;
  // Set by a successful commit: the slot of the payload's reservation (the
  // payload's first word is the slot after it).
  uint32_t reserve_slot = 0;
  // A checked append (format::kGrowTailChecked): the entry's second word,
  // and the bytes it commits, stored in place and not yet written back
  // (the commit writes them back with the entry, after its CAS).
  uint64_t entry_word1 = 0;
  const void* bytes = nullptr;
  size_t bytes_len = 0;
  bool empty() const { return payload.empty(); }
};

class LogWriter {
 public:
  LogWriter(BlockSpace* space, BlockSource* source, const LogRoot& root)
      : access_(space), source_(source), root_(root), head_durable_(!root.head_persisted_by_commit) {}
  const LogRoot& root() const { return root_; }

  // Encodes a change of the mapping of virtual blocks [vblock, vblock + n)
  // to `runs` and of the size, as a payload in *p (with overflow blocks
  // taken from t if the runs do not fit inline).
  Status BuildPayload(ThreadBlocks* t, PendingEntry* p, uint32_t vblock,
                      const std::vector<format::Run>& runs, Effect::SizeOp op, uint64_t new_size);
  // Gives back what BuildPayload took, after a conflict or an error.
  void DropPayload(ThreadBlocks* t, PendingEntry* p);

  // Commits `entry` (one word; two with p.entry_word1), or the payload in
  // `p` if entry is 0, at the
  // tail of the log at or after `pos`, unless an entry committed since `pos`
  // conflicts (then *conflicted, nothing committed, pos past that entry).
  // On success pos is past the new entry; the payload's overflow blocks
  // belong to the log (p->overflow may be cleared).
  template <typename Conflict>
  Status Commit(ThreadBlocks* t, Effect* scratch, LogPos* pos, uint64_t entry,
                PendingEntry& p, Conflict conflict, bool* conflicted);

  BlockSource* source() const { return source_; }

  // What new log blocks asked of GC since the last call: *wanted, a chain
  // past the trigger (GcTriggerBlocks of the length the last GC left);
  // *behind, past twice that: a GC in the background is not keeping up,
  // and writers wait for it. Both also against `floor()`, the blocks any
  // compaction keeps as the caller knows them, called only when a block
  // asked for something: a GC cannot make the log shorter than that, and
  // a first pass of small writes over a big file, each a block's first
  // flip, grows it as fast as the log (docs/design.md, "Garbage
  // collection"). Inline: every write asks.
  void TakeGcRequests(FunctionRef<uint64_t()> floor, bool* wanted, bool* behind) {
    *wanted = TakeFlag(&gc_wanted_);
    *behind = TakeFlag(&gc_behind_);
    if (!*wanted && !*behind) return;
    const uint64_t trigger = GcTriggerBlocks(floor());
    const uint64_t len = chain_blocks_.load(std::memory_order_relaxed);
    *wanted = *wanted && len > trigger;
    *behind = *behind && len > 2 * trigger;
  }

 private:
  format::LogBlock* LogAt(uint32_t lblock) const {
    return reinterpret_cast<format::LogBlock*>(access_.AddrUnchecked(lblock));
  }
  // Moves pos into the next log block, linking a new one if there is none.
  Status ExtendChain(ThreadBlocks* t, LogPos* pos);
  void PersistBeforeSlot(format::LogBlock* b, const LogPos& pos);
  // Commits the two words of a checked append at an even slot.
  Status CommitChecked(format::LogBlock* b, LogPos* pos, uint64_t w0, const PendingEntry& p,
                       bool* done);
  // Commits a one-word entry at pos's slot: its CAS, write-back and fence.
  // False if another entry took the slot first.
  bool CommitWord(format::LogBlock* b, LogPos* pos, uint64_t entry);
  // A payload that does not fit from pos's slot on: the rest of block b
  // becomes one reservation (unless someone took the slot), so that the
  // next try starts in the next block.
  void PadOutBlock(format::LogBlock* b, const LogPos& pos);
  // The durable prefix this process knows of (rule 3 of "Persistence
  // ordering" skips what lies inside it): every slot of the tail blocks
  // before (seq, slot) is durable, because one of this process's fences
  // made it so. Tail blocks are the only ones committed to, and their seq
  // numbers only grow, so the pair names a position for good.
  static uint64_t DurableKey(uint64_t seq, uint32_t slot) { return (seq << 10) | slot; }
  bool KnownDurable(uint64_t seq, uint32_t slot) const {
    return durable_.load(std::memory_order_acquire) >= DurableKey(seq, slot);
  }
  void Durable(uint64_t seq, uint32_t slot) {
    const uint64_t k = DurableKey(seq, slot);
    uint64_t cur = durable_.load(std::memory_order_relaxed);
    while (cur < k && !durable_.compare_exchange_weak(cur, k, std::memory_order_release)) {
    }
  }

  // A commit's last fence, after its entry's write-back. Until one has
  // been made, the head word is written back before it too (see
  // LogRoot::head_persisted_by_commit). A second thread committing
  // meanwhile writes it back as well; one that sees head_durable_ set
  // knows a fence after the write-back was made.
  void CommitFence() {
    const bool head = !head_durable_.load(std::memory_order_acquire);
    if (head) root_.FlushHead();
    pm::Fence();
    if (head) head_durable_.store(true, std::memory_order_release);
  }

  static bool TakeFlag(std::atomic<bool>* f) {
    return f->load(std::memory_order_relaxed) && f->exchange(false, std::memory_order_relaxed);
  }

  BlockAccess access_;
  BlockSource* source_;
  LogRoot root_;
  std::atomic<bool> gc_wanted_{false};
  std::atomic<bool> gc_behind_{false};
  // The chain's length in blocks when this writer last linked one (in
  // what was padding: a File is kept within glibc's tcache limit).
  std::atomic<uint32_t> chain_blocks_{0};
  std::atomic<uint64_t> durable_{0};
  std::atomic<bool> head_durable_;  // set from the start unless the root says otherwise
};

// What one operation took for a commit: its fresh blocks (`fresh`, may be
// null) and its payload's overflow blocks. Given back on every way out of
// the operation but a commit, which hands them to the log (Committed).
class UncommittedBlocks {
 public:
  UncommittedBlocks(LogWriter* w, ThreadBlocks* t, PendingEntry* p,
                    const std::vector<format::Run>* fresh)
      : w_(w), t_(t), p_(p), fresh_(fresh) {}
  ~UncommittedBlocks() {
    if (committed_) return;
    if (fresh_) w_->source()->FreeRuns(t_, *fresh_);
    w_->DropPayload(t_, p_);
  }
  UncommittedBlocks(const UncommittedBlocks&) = delete;
  UncommittedBlocks& operator=(const UncommittedBlocks&) = delete;
  void Committed() {
    committed_ = true;
    p_->overflow.clear();  // the log's now
  }

 private:
  LogWriter* w_;
  ThreadBlocks* t_;
  PendingEntry* p_;
  const std::vector<format::Run>* fresh_;
  bool committed_ = false;
};

}  // namespace upfs

#include "engine/log_writer_inl.h"
