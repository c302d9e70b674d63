#include "engine/log_writer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "medium/pm.h"
#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

void LogWriter::PersistBeforeSlot(LogBlock* b, const LogPos& pos) {
  // Entries reach media in log order: before committing in slot `pos.slot`,
  // the entry before it must be durable as a whole, or a crash could leave
  // a hole (or a cut-short commit) before an acknowledged entry. Every
  // entry before that one was made durable by its own committer before its
  // CAS (this same rule), so then everything before the slot is. A payload
  // commit persists in one round after its apply's CAS, so the entry before
  // may be an apply whose reservation and payload are not durable yet: its
  // whole span, from the reservation, is flushed. Lines that share the
  // slot's line are left to the commit's own flush after its CAS.
  const uint32_t slot = pos.slot;
  auto line = [](uint32_t s) { return (offsetof(LogBlock, slots) + 8 * s) / kCacheLine; };
  auto span_start = [](const LogBlock* lb, uint32_t entry) {
    const uint64_t e = lb->slots[entry].load(std::memory_order_relaxed);
    return KindOf(e) == EntryKind::kApply && ApplySlot(e) < entry ? ApplySlot(e) : entry;
  };
  if (slot == 0) {
    if (pos.prev == 0 || KnownDurable(pos.seq - 1, kSlotsPerLogBlock)) return;
    LogBlock* pb = LogAt(pos.prev);
    const uint32_t last = LastEntryBefore(pb, kSlotsPerLogBlock);
    const uint32_t from = last == LogPos::kNoSlot ? 0 : span_start(pb, last);
    if (last != LogPos::kNoSlot) FlushCheckedAppend(access_, pb, last);
    pm::Flush(&pb->next, 8);
    pm::Flush(&pb->slots[from], size_t(kSlotsPerLogBlock - from) * 8);
    pm::Fence();
    Durable(pos.seq - 1, kSlotsPerLogBlock);
    return;
  }
  if (KnownDurable(pos.seq, slot)) return;  // this process's own fence made it so
  const uint32_t prev_entry = pos.last != LogPos::kNoSlot ? pos.last : LastEntryBefore(b, slot);
  if (prev_entry == LogPos::kNoSlot) return;
  const uint32_t from = span_start(b, prev_entry);
  // A checked append's bytes are not in the log: written back whatever
  // line the slot is in.
  const uint64_t pe = b->slots[prev_entry].load(std::memory_order_relaxed);
  const bool checked = KindOf(pe) == EntryKind::kGrowTailChecked && !IsGranuleFlip(pe);
  if (checked) FlushCheckedAppend(access_, b, prev_entry);
  if (line(from) != line(slot)) {
    pm::Flush(&b->slots[from], size_t(slot - from) * 8);
    pm::Fence();
    Durable(pos.seq, slot);
  } else if (checked) {
    pm::Fence();
  }
}

Status LogWriter::CommitChecked(LogBlock* b, LogPos* pos, uint64_t w0, const PendingEntry& p,
                                bool* done) {
  *done = false;
  const uint32_t s = pos->slot;
  if (s % 2 != 0) {
    // Its two words take an aligned pair of slots: an inert reservation
    // pads to one (the next scan steps over it, rule 3 persists it).
    uint64_t expected = 0;
    pm::Cas64(&b->slots[s], expected, EncodeReserve(0));
    return Status::OK();
  }
  UPFS_ASSERT(s + 1 < kSlotsPerLogBlock);
  if (!pm::Cas128(&b->slots[s], 0, 0, w0, p.entry_word1)) {
    // Someone committed here first (the scan finds it), unless the slot is
    // empty and the next is not: a word past the tail, which live writers
    // never meet (recovery clears what a crash left there).
    if (b->slots[s].load(std::memory_order_acquire) == 0 &&
        b->slots[s + 1].load(std::memory_order_acquire) != 0)
      return Status::Corrupt("log block " + std::to_string(pos->lblock),
                             "entry " + std::to_string(s + 1) + " follows the end of the log");
    return Status::OK();
  }
  // One round: the bytes (stored in place before the CAS) and the entry.
  // A granule flip has none: its granules were durable before the CAS.
  if (p.bytes_len) pm::Flush(p.bytes, p.bytes_len);
  pm::Flush(&b->slots[s], kGrowTailCheckedSlots * 8);
  CommitFence();
  Durable(pos->seq, s + kGrowTailCheckedSlots);
  pos->last = s;
  pos->slot = s + kGrowTailCheckedSlots;
  *done = true;
  return Status::OK();
}

Status LogWriter::ExtendChain(ThreadBlocks* t, LogPos* pos) {
  LogBlock* b = LogAt(pos->lblock);
  uint64_t w = b->next.load(std::memory_order_acquire);
  if (!NextWordValid(w))
    return Status::Corrupt("log block " + std::to_string(pos->lblock), "bad next word");
  if (NextBlock(w) == 0) {
    uint32_t nl;
    UPFS_RETURN_IF_ERROR(source_->AllocOne(t, &nl));
    char* dst = nullptr;
    UPFS_RETURN_IF_ERROR(access_.Addr(nl, &dst));
    alignas(64) static thread_local unsigned char img[kBlockSize];
    std::memset(img, 0, sizeof(img));
    auto* ib = reinterpret_cast<LogBlock*>(img);
    ib->next.store(NextWord(0), std::memory_order_relaxed);
    ib->seq = pos->seq + 1;
    pm::CopyNT(dst, img, kBlockSize);
    pm::Fence();
    uint64_t expected = NextWord(0);
    if (pm::Cas64(&b->next, expected, NextWord(nl))) {
      w = NextWord(nl);
      uint64_t head = root_.head->load(std::memory_order_acquire);
      LogBlock* hb = nullptr;
      uint64_t len = 0;
      if (head && head < kMaxBlocks && access_.CheckRange(head, 1, "log head").ok()) {
        hb = LogAt(uint32_t(head));
        len = pos->seq + 2 - hb->seq;
      }
      chain_blocks_.store(uint32_t(std::min<uint64_t>(len, UINT32_MAX)), std::memory_order_relaxed);
      const uint64_t trigger = GcTriggerBlocks(root_.words->gc_last_blocks.load(std::memory_order_relaxed));
      if (len > trigger) gc_wanted_.store(true, std::memory_order_relaxed);
      if (len > 2 * trigger) gc_behind_.store(true, std::memory_order_relaxed);
    } else {
      source_->Free(t, nl, 1);  // never published
      w = expected;
    }
  }
  pm::Flush(&b->next, 8);
  pm::Flush(&b->slots[kSlotsPerLogBlock - 1], 8);
  pm::Fence();
  LogBlock* nb;
  UPFS_RETURN_IF_ERROR(CheckLogBlock(access_, NextBlock(w), pos->seq + 1, &nb));
  pos->prev = pos->lblock;
  pos->lblock = NextBlock(w);
  pos->slot = 0;
  pos->seq += 1;
  pos->last = LogPos::kNoSlot;
  return Status::OK();
}

Status LogWriter::BuildPayload(ThreadBlocks* t, PendingEntry* p, uint32_t vblock, const std::vector<Run>& runs,
                          Effect::SizeOp op, uint64_t new_size) {
  uint16_t flags = op == Effect::kSet ? kSizeSet : op == Effect::kMax ? kSizeMax : 0;
  // The previous payload of this thread was committed or dropped.
  UPFS_ASSERT(p->overflow.empty());
  p->payload.clear();
  if (runs.size() <= kMaxInlineRuns) p->payload.reserve(2 + runs.size());  // one allocation, not three
  p->payload.push_back(new_size);
  if (runs.size() <= kMaxInlineRuns) {
    p->payload.push_back(EncodePayloadWord1(vblock, uint16_t(runs.size()), flags));
    for (const Run& r : runs) p->payload.push_back(EncodeRun(r));
    return Status::OK();
  }
  if (runs.size() > 0xffff) return Status::Error(EFBIG, "write too fragmented for one entry");
  std::vector<uint64_t> words;
  words.reserve(runs.size());
  for (const Run& r : runs) words.push_back(EncodeRun(r));
  uint64_t nblocks = CeilBlocks(words.size() * 8);
  Run overflow;
  UPFS_RETURN_IF_ERROR(source_->AllocContiguous(t, nblocks, &overflow));  // the payload names one run
  p->overflow.push_back(overflow);
  char* dst = nullptr;
  UPFS_RETURN_IF_ERROR(access_.Addr(p->overflow[0].lblock, &dst));
  UPFS_RETURN_IF_ERROR(access_.CheckRange(p->overflow[0].lblock, nblocks, "overflow"));
  pm::CopyNT(dst, words.data(), words.size() * 8);
  p->payload.push_back(
      EncodePayloadWord1(vblock, uint16_t(runs.size()), flags | kPayloadOverflow));
  p->payload.push_back(EncodeRun(p->overflow[0]));
  p->payload.push_back(Crc32c(words.data(), words.size() * 8));
  return Status::OK();
}

void LogWriter::DropPayload(ThreadBlocks* t, PendingEntry* p) {
  source_->FreeRuns(t, p->overflow);
  p->overflow.clear();
  p->payload.clear();
}

}  // namespace upfs
