// Decoding a file's log: checking its blocks, decoding entries into
// effects, and applying a log block to a BlockTable (engine/log.h).
#include "engine/log.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "medium/pm.h"
#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

// ---------------------------------------------------------------------------
// Decoding

Status BlockAccess::CheckRange(uint64_t l, uint64_t count, const char* what) const {
  // Without overflow: a damaged block number near 2^64 must not wrap past
  // the check (it did, and the address computed from it overflowed).
  if (l == 0 || count == 0 || l >= kMaxBlocks || count > kMaxBlocks - l)
    return Status::Corrupt(what, "block run " + std::to_string(l) + "+" + std::to_string(count) +
                                     " is invalid");
  uint64_t end = (l + count) << kBlockShift;
  if (end > m_->mapped_bytes()) {
    Status st = m_->EnsureMapped(end);
    if (!st.ok())
      return Status::Corrupt(what, "block run " + std::to_string(l) + "+" +
                                       std::to_string(count) + " lies past the end of the file");
  }
  return Status::OK();
}

Status CheckLogBlock(const BlockAccess& ba, uint32_t lblock, uint64_t seq, LogBlock** out) {
  auto name = [&] { return "log block " + std::to_string(lblock); };
  if (lblock == 0) return Status::Corrupt(name(), "points at the file header");
  Status st = ba.CheckRange(lblock, 1, "log chain");
  if (!st.ok()) return Status::Corrupt(name(), "lies past the end of the file");
  char* a;
  UPFS_RETURN_IF_ERROR(ba.Addr(lblock, &a));
  auto* b = reinterpret_cast<LogBlock*>(a);
  uint64_t w = b->next.load(std::memory_order_acquire);
  if (!NextWordValid(w)) return Status::Corrupt(name(), "bad magic");
  if (b->seq != seq)
    return Status::Corrupt(name(), "sequence number " + std::to_string(b->seq) + ", expected " +
                                     std::to_string(seq));
  *out = b;
  return Status::OK();
}

namespace {

// In the decoders, `where` names the entry in error messages; it is only
// called on error (decoding is on every reader's and writer's path).

// The effect of a patch payload (`words`, checksummed) whose first word is
// at slot rs + 1 of log block b_lblock.
template <typename Where>
Status DecodePatch(const Where& where, uint32_t b_lblock, uint32_t rs, const uint64_t* words,
                   uint32_t count, Effect* eff) {
  if (words[0] != 0 || uint16_t(words[1] >> 48) != kPatch || ((words[1] >> 32) & 0xffff) != 0)
    return Status::Corrupt(where(), "patch with a size change or runs");
  if (!PatchWord2WellFormed(words[2])) return Status::Corrupt(where(), "malformed patch extent");
  const uint32_t off = PatchOffset(words[2]), len = PatchLength(words[2]);
  if (count != kPatchHeaderWords + PatchDataWords(off, len))
    return Status::Corrupt(where(), "patch length does not match its payload");
  eff->vblock = uint32_t(words[1]);
  eff->nblocks = 1;
  eff->runs.push_back(Run{kKeepBlock, 1});
  eff->patch = PatchRef{b_lblock, rs + 1 + kPatchHeaderWords, off, len}.Encode();
  return Status::OK();
}

template <typename Where>
Status DecodePayload(const BlockAccess& ba, const LogBlock* b, uint32_t b_lblock, const Where& where,
                     uint32_t rs, uint32_t count, uint32_t crc, Effect* eff) {
  const std::atomic<uint64_t>* w = &b->slots[rs + 1];
  uint64_t words[kMaxPayloadWords];
  if (count < kPayloadHeaderWords || count > kMaxPayloadWords)
    return Status::Corrupt(where(), "payload of " + std::to_string(count) + " words");
  for (uint32_t i = 0; i < count; ++i) words[i] = w[i].load(std::memory_order_relaxed);
  if (Crc32c(words, count * 8) != crc) return Status::Corrupt(where(), "payload checksum mismatch");
  eff->Clear();
  uint64_t new_size = words[0];
  uint32_t vblock = uint32_t(words[1]);
  uint32_t nruns = uint32_t((words[1] >> 32) & 0xffff);
  uint16_t flags = uint16_t(words[1] >> 48);
  if (flags & ~kKnownPayloadFlags) return Status::Corrupt(where(), "unknown payload flags");
  if (flags & kPatch) return DecodePatch(where, b_lblock, rs, words, count, eff);
  if ((flags & kSizeMax) && (flags & kSizeSet))
    return Status::Corrupt(where(), "payload sets size two ways");
  if (new_size > kMaxFileSize) return Status::Corrupt(where(), "size beyond the upfs limit");
  eff->vblock = vblock;
  eff->new_size = new_size;
  eff->size_op = (flags & kSizeSet) ? Effect::kSet : (flags & kSizeMax) ? Effect::kMax : Effect::kNone;
  const uint64_t* runw = nullptr;
  std::vector<uint64_t> overflow;
  if (flags & kPayloadOverflow) {
    if (count != kPayloadHeaderWords + 2) return Status::Corrupt(where(), "bad overflow payload");
    Run ov = DecodeRun(words[2]);
    UPFS_RETURN_IF_ERROR(ba.CheckRange(ov.lblock, ov.count, "overflow block run"));
    if (uint64_t(nruns) * 8 > uint64_t(ov.count) * kBlockSize)
      return Status::Corrupt(where(), "overflow runs exceed their blocks");
    overflow.resize(nruns);
    if (nruns) std::memcpy(overflow.data(), ba.AddrUnchecked(ov.lblock), nruns * 8);
    if (Crc32c(overflow.data(), nruns * 8) != uint32_t(words[3]))
      return Status::Corrupt(where(), "overflow checksum mismatch");
    runw = overflow.data();
  } else {
    if (count != kPayloadHeaderWords + nruns || nruns > kMaxInlineRuns)
      return Status::Corrupt(where(), "payload length");
    runw = &words[kPayloadHeaderWords];
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < nruns; ++i) {
    Run r = DecodeRun(runw[i]);
    if (r.count == 0) return Status::Corrupt(where(), "empty run");
    if (r.lblock != 0 && r.lblock != kKeepBlock)
      UPFS_RETURN_IF_ERROR(ba.CheckRange(r.lblock, r.count, "payload run"));
    total += r.count;
    eff->runs.push_back(r);
  }
  if (uint64_t(vblock) + total > kMaxBlocks) return Status::Corrupt(where(), "runs beyond upfs limit");
  eff->nblocks = total;
  return Status::OK();
}

template <typename Where>
Status DecodeGranuleFlip(const BlockAccess& ba, const LogBlock* b, uint32_t slot, uint64_t e,
                         const Where& where, Effect* eff) {
  if (slot % 2 != 0) return Status::Corrupt(where(), "granule flip at an odd slot");
  const uint64_t w1 = b->slots[slot + 1].load(std::memory_order_acquire);
  if (!GranuleFlipWellFormed(e, w1)) return Status::Corrupt(where(), "malformed granule flip");
  const uint32_t named = GranuleFlipBlock(e);
  const bool anywhere = GranuleFlipAnywhere(w1);
  // A pair's set names both its blocks; an anywhere shadow names one; a
  // toggle and an unpairing name the home, whose shadow was checked when
  // it was paired.
  const bool pair = GranuleFlipSet(w1) && !anywhere;
  const char* what = anywhere && GranuleFlipSet(w1) ? "granule flip's shadow"
                     : pair                           ? "granule flip's pair"
                                                      : "granule flip's home";
  if (!ba.CheckRange(named, pair ? 2 : 1, what).ok())
    return Status::Corrupt(where(), std::string(what) + " " + std::to_string(named) +
                                        " lies past the end of the file");
  eff->SetFlip(GranuleFlipVblock(e), named, GranuleFlipMask(w1), GranuleFlipSet(w1), anywhere);
  return Status::OK();
}

}  // namespace

Status DecodeEntry(const BlockAccess& ba, const LogBlock* b, uint32_t b_lblock, uint32_t slot,
                   uint64_t e, Effect* eff, bool* has_effect, uint32_t* next_slot) {
  auto where = [&] {
    return "log entry " + std::to_string(slot) + " of log block " + std::to_string(b_lblock);
  };
  *has_effect = false;
  switch (KindOf(e)) {
    case EntryKind::kMap:
    case EntryKind::kMapExtend: {
      UPFS_RETURN_IF_ERROR(DecodeInlineEffect(ba, e, eff));
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    case EntryKind::kTouch: {
      if (!TouchWellFormed(e)) return Status::Corrupt(where(), "malformed touch entry");
      InlineMap m = DecodeInline(e);
      eff->Clear();
      eff->vblock = m.vblock;
      eff->nblocks = m.count;
      eff->runs.push_back(Run{kKeepBlock, m.count});
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    case EntryKind::kGrowTail: {
      if (!GrowTailWellFormed(e)) return Status::Corrupt(where(), "malformed grow-tail entry");
      eff->SetGrowTail(GrowTailSize(e), 0, 0);
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    case EntryKind::kGrowTailChecked: {
      if (IsGranuleFlip(e)) {
        UPFS_RETURN_IF_ERROR(DecodeGranuleFlip(ba, b, slot, e, where, eff));
        *has_effect = true;
        *next_slot = slot + kGranuleFlipSlots;
        return Status::OK();
      }
      if (slot % 2 != 0) return Status::Corrupt(where(), "checked append at an odd slot");
      const uint64_t w1 = b->slots[slot + 1].load(std::memory_order_acquire);
      if (!GrowTailCheckedWellFormed(e, w1))
        return Status::Corrupt(where(), "malformed checked-append entry");
      const uint32_t l = GrowTailCheckedBlock(w1);
      if (!ba.CheckRange(l, 1, "checked append's block").ok())
        return Status::Corrupt(where(), "checked append's block " + std::to_string(l) +
                                            " lies past the end of the file");
      eff->SetGrowTail(GrowTailCheckedSize(e), l, GrowTailCheckedFrom(e));
      *has_effect = true;
      *next_slot = slot + kGrowTailCheckedSlots;
      return Status::OK();
    }
    case EntryKind::kReserve: {
      if (!ReserveWellFormed(e)) return Status::Corrupt(where(), "malformed reservation");
      uint32_t n = ReserveCount(e);
      if (slot + 1 + n > kSlotsPerLogBlock)
        return Status::Corrupt(where(), "reservation runs past the log block");
      *next_slot = slot + 1 + n;
      return Status::OK();
    }
    case EntryKind::kApply: {
      if (!ApplyWellFormed(e)) return Status::Corrupt(where(), "malformed apply entry");
      uint32_t rs = ApplySlot(e);
      if (rs >= slot) return Status::Corrupt(where(), "applies a later reservation");
      uint64_t r = b->slots[rs].load(std::memory_order_acquire);
      if (KindOf(r) != EntryKind::kReserve || !ReserveWellFormed(r))
        return Status::Corrupt(where(), "applies a slot that is not a reservation");
      uint32_t n = ReserveCount(r);
      if (rs + 1 + n > slot) return Status::Corrupt(where(), "reservation overlaps its apply");
      UPFS_RETURN_IF_ERROR(DecodePayload(ba, b, b_lblock, where, rs, n, ApplyCrc(e), eff));
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    default:
      return Status::Corrupt(where(), "unknown entry kind " + std::to_string(int(KindOf(e))));
  }
}

uint32_t LastEntryBefore(const LogBlock* b, uint32_t end) {
  uint32_t last = LogPos::kNoSlot;
  for (uint32_t s = 0; s < end && s < kSlotsPerLogBlock;) {
    const uint64_t e = b->slots[s].load(std::memory_order_acquire);
    if (e == 0) break;
    last = s;
    s += EntrySlots(e);
  }
  return last;
}

uint32_t EntrySlots(uint64_t e) {
  switch (KindOf(e)) {
    case EntryKind::kReserve: return 1 + ReserveCount(e);
    case EntryKind::kGrowTailChecked: return kGrowTailCheckedSlots;
    default: return 1;
  }
}

Status CheckGrowTail(const BlockTable& table, const Effect& eff, uint32_t lblock, uint32_t slot) {
  // Written only by an append that found this exact size and a mapped tail
  // block, with nothing committed in between (File::AppendInPlace); a
  // checked one also names that block and where the size was in it.
  const uint64_t size = table.size(), vt = size >> kBlockShift;
  if ((size & (kBlockSize - 1)) == 0 || eff.new_size <= size ||
      ((eff.new_size - 1) >> kBlockShift) != vt || table.Get(vt) == 0 ||
      (eff.tail_lblock != 0 &&
       (table.Get(vt) != eff.tail_lblock || (size & (kBlockSize - 1)) != eff.tail_from)))
    return Status::Corrupt(
        "log entry " + std::to_string(slot) + " of log block " + std::to_string(lblock),
        "in-place append to " + std::to_string(eff.new_size) +
            " does not continue the tail block at size " + std::to_string(size));
  return Status::OK();
}

Status ApplyLogBlock(const BlockAccess& ba, const LogBlock* b, uint32_t lblock, BlockTable* table,
                     std::vector<Run>* overflow, uint32_t* end_slot, uint64_t* entries,
                     uint32_t start_slot, uint32_t* cut_short) {
  Effect eff;
  uint32_t slot = start_slot;
  while (slot < kSlotsPerLogBlock) {
    uint64_t e = b->slots[slot].load(std::memory_order_acquire);
    if (e == 0) break;
    bool has = false;
    uint32_t next = 0;
    if (Status st = DecodeEntry(ba, b, lblock, slot, e, &eff, &has, &next); !st.ok()) {
      if (cut_short && (CutShortApply(b, slot, e) || CutShortGrowTail(ba, b, slot, e))) {
        *cut_short = slot;
        break;
      }
      return st;
    }
    // A checked append's bytes are checked where a crash may have cut it
    // short, and only as the chain's last entry: nothing after it made them
    // durable (rule 3).
    if (cut_short && KindOf(e) == EntryKind::kGrowTailChecked && CutShortGrowTail(ba, b, slot, e)) {
      *cut_short = slot;
      break;
    }
    if (KindOf(e) == EntryKind::kApply) {
      // DecodeEntry validated the payload, so its words are in bounds.
      uint32_t rs = ApplySlot(e);
      uint64_t w1 = b->slots[rs + 2].load(std::memory_order_relaxed);
      if (uint16_t(w1 >> 48) & kPayloadOverflow)
        overflow->push_back(DecodeRun(b->slots[rs + 3].load(std::memory_order_relaxed)));
    }
    if (has && eff.grow_tail) UPFS_RETURN_IF_ERROR(CheckGrowTail(*table, eff, lblock, slot));
    if (has) {
      UPFS_RETURN_IF_ERROR(table->Apply(eff));
      ++*entries;
    }
    slot = next;
  }
  *end_slot = slot;
  return Status::OK();
}

namespace {

// The end of a chain replayed by a rule that allows for a crash: block `b`
// (`lblock`) holds the last entry, and `slot` is the first slot past it.
// Words after it can be what a crash left of one commit cut short, its
// reservation word lost: its payload and apply, no further than that
// commit could reach; anything further is damage. The apply a replay
// stopped at (`cut`, if not kNoSlot) is such a commit's too. kRecover
// clears them, and unlinks an empty successor a committer linked after
// the cut-short apply filled the block (it is free space then).
Status EndAfterCrash(const BlockAccess& ba, LogBlock* b, uint32_t lblock, uint32_t slot, uint32_t cut,
                     TailRule rule, ReplayResult* res) {
  auto where = [&] { return "log block " + std::to_string(lblock); };
  const uint32_t reach = slot + 2 + kMaxPayloadWords;  // reservation, payload, apply
  // A cut-short apply is one word; a checked append two (its second may
  // be zero).
  const uint32_t cut_end =
      cut == LogPos::kNoSlot ? cut
                             : cut + EntrySlots(b->slots[cut].load(std::memory_order_relaxed));
  uint32_t words = cut != LogPos::kNoSlot ? 1 : 0;
  for (uint32_t s = slot; s < kSlotsPerLogBlock; ++s) {
    if (s == cut || b->slots[s].load(std::memory_order_relaxed) == 0) continue;
    if (cut != LogPos::kNoSlot && s < cut_end) {
      ++words;
      continue;
    }
    if (cut != LogPos::kNoSlot || s >= reach)
      return Status::Corrupt(where(), "entry " + std::to_string(s) + " follows the end of the log");
    ++words;
  }
  const uint32_t n = NextBlock(b->next.load(std::memory_order_acquire));
  if (n != 0) {
    LogBlock* nb;
    UPFS_RETURN_IF_ERROR(CheckLogBlock(ba, n, b->seq + 1, &nb));
    // Only a commit that filled the block can have made someone link one.
    if (b->slots[kSlotsPerLogBlock - 1].load(std::memory_order_relaxed) == 0)
      return Status::Corrupt(where(), "has a successor but is not full");
    for (uint32_t s = 0; s < kSlotsPerLogBlock; ++s)
      if (nb->slots[s].load(std::memory_order_relaxed) != 0)
        return Status::Corrupt(where(), "a commit cut short by a crash has entries after it");
  }
  res->cut_short_words = words;
  if (rule != TailRule::kRecover || (words == 0 && n == 0)) return Status::OK();
  for (uint32_t s = slot; s < kSlotsPerLogBlock; ++s)
    if (b->slots[s].load(std::memory_order_relaxed) != 0) pm::Store64(&b->slots[s], 0);
  if (n != 0) pm::Store64(&b->next, NextWord(0));
  pm::Flush(&b->slots[slot], size_t(kSlotsPerLogBlock - slot) * 8);
  pm::Flush(&b->next, 8);
  pm::Fence();
  return Status::OK();
}

}  // namespace

Status CheckChainLength(const BlockAccess& ba, uint64_t walked, const char* what) {
  const uint64_t bytes = walked << kBlockShift;  // no overflow: a walk stops one block past the capacity
  if (ba.space()->ClampToCapacity(bytes) < bytes) return Status::Corrupt("log chain", what);
  return Status::OK();
}

Status ReplayChain(const BlockAccess& ba, uint32_t head, BlockTable* table, ReplayResult* res,
                   TailRule rule) {
  const bool live = rule == TailRule::kLive || rule == TailRule::kReadOnly;
  const bool after_crash = rule == TailRule::kCrashed || rule == TailRule::kRecover;
  // A literal, not a std::string: every open and every release of a pool
  // file replays, and the name is wanted only on damage.
  constexpr const char* kHeader = "file header";
  if (head == 0) return Status::Corrupt(kHeader, "log head is zero");
  {
    Status st = ba.CheckRange(head, 1, "log head");
    if (!st.ok()) return Status::Corrupt(kHeader, "log head lies past the end of the file");
  }
  char* a;
  UPFS_RETURN_IF_ERROR(ba.Addr(head, &a));
  LogBlock* b = reinterpret_cast<LogBlock*>(a);
  // File::StartAtEmptyLog takes a one-block empty log without this replay
  // (and so checks of it what this does, up to here, and no successor and
  // an empty first slot): a change to what is checked of a head block goes
  // there too.
  if (!NextWordValid(b->next.load(std::memory_order_acquire)))
    return Status::Corrupt("log block " + std::to_string(head), "bad magic");
  uint64_t seq = b->seq;
  res->head_seq = seq;
  res->log_blocks.clear();
  res->overflow.clear();
  res->entries = 0;
  res->cut_short_words = 0;
  uint32_t lblock = head, prev = 0;
  for (;;) {
    res->log_blocks.push_back(lblock);
    UPFS_RETURN_IF_ERROR(CheckChainLength(ba, res->log_blocks.size(), "longer than the file (a cycle?)"));
    uint32_t slot = 0, cut = LogPos::kNoSlot;
    uint32_t* cut_ptr = rule == TailRule::kLive || rule == TailRule::kStrict ? nullptr : &cut;
    UPFS_RETURN_IF_ERROR(
        ApplyLogBlock(ba, b, lblock, table, &res->overflow, &slot, &res->entries, 0, cut_ptr));
    uint32_t n = NextBlock(b->next.load(std::memory_order_acquire));
    if (slot < kSlotsPerLogBlock && n != 0 && live && cut == LogPos::kNoSlot) {
      // Live replay: other processes filled this block and linked the next
      // one after we found its tail. A block is linked only when full, so
      // finish it from where we stopped.
      UPFS_RETURN_IF_ERROR(
          ApplyLogBlock(ba, b, lblock, table, &res->overflow, &slot, &res->entries, slot, cut_ptr));
    }
    if (cut != LogPos::kNoSlot) res->cut_short_words = 1;
    if (slot < kSlotsPerLogBlock || n == 0) {
      if (after_crash) {
        UPFS_RETURN_IF_ERROR(EndAfterCrash(ba, b, lblock, slot, cut, rule, res));
      } else if (cut == LogPos::kNoSlot) {
        if (slot < kSlotsPerLogBlock && rule == TailRule::kStrict) {
          for (uint32_t s = slot; s < kSlotsPerLogBlock; ++s)
            if (b->slots[s].load(std::memory_order_relaxed) != 0)
              return Status::Corrupt("log block " + std::to_string(lblock),
                                     "entry " + std::to_string(s) + " follows the end of the log");
        }
        if (slot < kSlotsPerLogBlock && n != 0)
          return Status::Corrupt("log block " + std::to_string(lblock),
                                 "has a successor but is not full");
      }
      res->tail = LogPos{lblock, slot, seq, prev, LastEntryBefore(b, slot)};
      table->set_cursor(res->tail);
      return Status::OK();
    }
    UPFS_RETURN_IF_ERROR(CheckLogBlock(ba, n, seq + 1, &b));
    prev = lblock;
    lblock = n;
    seq += 1;
  }
}

}  // namespace upfs
