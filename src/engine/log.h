// Reading the log: following the chain of log blocks, decoding entries into
// Effects with full validation (a upfs file is untrusted input), and
// replaying a whole chain into a BlockTable.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_table.h"
#include "format/format.h"
#include "medium/block_space.h"
#include "util/assert.h"
#include "util/status.h"

namespace upfs {

// Bounds-checked access to logical blocks of a block space.
class BlockAccess {
 public:
  explicit BlockAccess(BlockSpace* m) : m_(m) {}
  // Address of logical block `l`; maps more of the space if another process
  // grew it. Fails (EUCLEAN) if `l` lies past the end of the space.
  Status Addr(uint64_t l, char** out) const {
    // MappedAddr's test written out: through it, the callers' code made a
    // pool create ~40 instructions longer (callgrind).
    const uint64_t end = (l + 1) << format::kBlockShift;
    if (end > m_->mapped_bytes()) UPFS_RETURN_IF_ERROR(m_->EnsureMapped(end));
    *out = m_->base() + (l << format::kBlockShift);
    return Status::OK();
  }
  // Address of logical block `l` if this process has it mapped, else null
  // (nothing is mapped): Addr's fast path, for callers that keep the rest
  // out of line. The size is read before the base (published first).
  char* MappedAddr(uint64_t l) const {
    if (((l + 1) << format::kBlockShift) > m_->mapped_bytes()) return nullptr;
    return m_->base() + (l << format::kBlockShift);
  }
  // Fast path for blocks known to be mapped (validated at decode time).
  char* AddrUnchecked(uint64_t l) const {
    UPFS_ASSERT(l != 0 && ((l + 1) << format::kBlockShift) <= m_->mapped_bytes());
    return m_->base() + (l << format::kBlockShift);
  }
  Status CheckRange(uint64_t l, uint64_t count, const char* what) const;
  BlockSpace* space() const { return m_; }

 private:
  BlockSpace* m_;
};

// Whether nothing is committed at or after `slot` of log block `b`, the
// position right after everything a reader has applied: its slot is still
// empty or, at a full block's end, the block has no successor yet.
// Entries (and reservations) enter the log only by a CAS of its first
// empty slot, so this is the whole of "no entry since".
inline bool NothingCommittedAt(const format::LogBlock* b, uint32_t slot) {
  return slot < format::kSlotsPerLogBlock ? b->slots[slot].load(std::memory_order_acquire) == 0
                                          : format::NextBlock(b->next.load(std::memory_order_acquire)) == 0;
}

// The slot of the last entry (of any kind) that starts before `end` in log
// block `b`, found by stepping from slot 0 over entries and payloads;
// kNoSlot if none. For persisting the entry before a commit when the
// position does not say which it is (a cursor from a replay, a block
// boundary).
uint32_t LastEntryBefore(const format::LogBlock* b, uint32_t end);

// The effect of an inline mapping entry (kMap, kMapExtend), into *eff.
inline void InlineEffect(const format::InlineMap& m, Effect* eff) {
  eff->Clear();
  eff->vblock = m.vblock;
  eff->nblocks = m.count;
  eff->runs.push_back(format::Run{m.lblock, m.count});
  if (m.extend) {
    eff->size_op = Effect::kMax;
    eff->new_size = (uint64_t(m.vblock) + m.count) << format::kBlockShift;
  }
}

// Decodes an inline mapping entry read from the log into *eff.
inline Status DecodeInlineEffect(const BlockAccess& ba, uint64_t e, Effect* eff) {
  format::InlineMap m = format::DecodeInline(e);
  UPFS_RETURN_IF_ERROR(ba.CheckRange(m.lblock, m.count, "log entry"));
  InlineEffect(m, eff);
  return Status::OK();
}

// Decodes the committed entry `e` found at `slot` of log block `b` (whose
// own logical block number is `b_lblock`). Sets *next_slot to the slot after
// the entry (after the payload for kReserve). Fills *eff and sets *has_effect
// for entries that change the file; kReserve has none.
Status DecodeEntry(const BlockAccess& ba, const format::LogBlock* b, uint32_t b_lblock,
                   uint32_t slot, uint64_t e, Effect* eff, bool* has_effect,
                   uint32_t* next_slot);

// Validates the header of the log block at `lblock` that should have chain
// sequence number `seq`.
Status CheckLogBlock(const BlockAccess& ba, uint32_t lblock, uint64_t seq,
                     format::LogBlock** out);

// A chain that has walked `walked` blocks is longer than the space holds
// (BlockSpace::ClampToCapacity: as it is now, which live writers or another
// process may have grown): a cycle (Corrupt, naming `what`).
Status CheckChainLength(const BlockAccess& ba, uint64_t walked, const char* what);

// A payload commit persists in one round (LogWriter::Commit), so a crash
// may keep its apply word and lose a payload line. Such an apply can only
// be the last word of the chain: whoever commits after it makes it durable
// first. True if the apply `e` at `slot` of `b` is that: well formed, its
// reservation intact, its payload not matching its checksum, and nothing
// after it in the block (the caller checks the successor).
bool CutShortApply(const format::LogBlock* b, uint32_t slot, uint64_t e);

// The same for a checked append (kGrowTailChecked) `e` at `slot`: nothing
// after it in the block, and its second word lost or its bytes failing
// their checksum.
bool CutShortGrowTail(const BlockAccess& ba, const format::LogBlock* b, uint32_t slot, uint64_t e);

// Whether the bytes a well-formed checked append names match its checksum.
bool CheckedAppendBytesMatch(const BlockAccess& ba, uint64_t w0, uint64_t w1);

// Writes back (no fence) the bytes of the checked append at `entry` of `b`,
// if that is one: they are not in the log, so flushing its lines misses
// them (rules 3 and 4 of "Persistence ordering", and the compactor).
void FlushCheckedAppend(const BlockAccess& ba, const format::LogBlock* b, uint32_t entry);

// Slots entry word `e` takes: a reservation's payload, a checked append's
// second word.
uint32_t EntrySlots(uint64_t e);

// Applies every committed entry of one log block to `table`, collecting the
// overflow runs its entries own; *end_slot receives the first empty slot
// (kSlotsPerLogBlock if the block is full). With `cut_short` non-null, an
// apply that CutShortApply says a crash cut short ends the block there
// instead of failing: *end_slot and *cut_short are its slot.
// A kGrowTail effect continues the tail block of `table` (which has every
// entry before it applied); EUCLEAN naming the entry otherwise.
Status CheckGrowTail(const BlockTable& table, const Effect& eff, uint32_t lblock, uint32_t slot);

Status ApplyLogBlock(const BlockAccess& ba, const format::LogBlock* b, uint32_t lblock,
                     BlockTable* table, std::vector<format::Run>* overflow, uint32_t* end_slot,
                     uint64_t* entries, uint32_t start_slot = 0, uint32_t* cut_short = nullptr);

// How a replay treats the end of the log (docs/design.md, "Persistence
// ordering", "After a crash").
enum class TailRule {
  kLive,      // others may be committing: stop at the first empty slot (and
              // finish a block someone linked a successor to meanwhile)
  kReadOnly,  // as kLive, for readers that write nothing and may meet a file
              // nobody recovered since a crash: a cut-short last commit is
              // not part of the log
  kStrict,    // nobody commits, no crash since the last recovery: nothing
              // may follow the first empty slot
  kCrashed,   // nobody commits, a crash since the last recovery: what a
              // cut-short last commit left is not part of the log (read only)
  kRecover,   // as kCrashed, and those words are cleared, durably (recovery)
};

struct ReplayResult {
  LogPos tail;                          // first empty slot (or past the end)
  uint64_t head_seq = 0;
  std::vector<uint32_t> log_blocks;     // chain order
  std::vector<format::Run> overflow;    // overflow runs referenced by entries
  uint64_t entries = 0;
  // Words a crash left of a commit it cut short (kReadOnly, kCrashed,
  // kRecover: not part of the log; kRecover cleared them).
  uint32_t cut_short_words = 0;
};

// Replays the chain starting at `head` into `table`, treating its end as
// `rule` says.
Status ReplayChain(const BlockAccess& ba, uint32_t head, BlockTable* table, ReplayResult* res,
                   TailRule rule);

// Follows from `pos` over committed entries, applying `fn(const Effect&)` to
// each effect, until the first empty slot, which is left in `pos` (or until
// the end of a chain whose last block is full: pos.slot ==
// kSlotsPerLogBlock). `fn` returns false to stop early (pos then points at
// the entry after the one that stopped it). With `cut_short_ends`, a
// CutShortApply (of a file nobody recovered since a crash) ends the scan
// at its slot, as kReadOnly does; writers never pass it (they would wait
// for that slot forever), and only recovery ever meets one.
template <typename Fn>
Status ScanCommitted(const BlockAccess& ba, LogPos* pos, Effect* scratch, Fn fn,
                     bool cut_short_ends = false);

}  // namespace upfs

#include "engine/log_inl.h"
