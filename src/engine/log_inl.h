// Inline part of log.h: the scan loop is on every read and write path.
#pragma once

namespace upfs {

template <typename Fn>
Status ScanCommitted(const BlockAccess& ba, LogPos* pos, Effect* scratch, Fn fn, bool cut_short_ends) {
  using namespace format;
  char* addr;
  UPFS_RETURN_IF_ERROR(ba.Addr(pos->lblock, &addr));
  auto* b = reinterpret_cast<LogBlock*>(addr);
  for (;;) {
    if (pos->slot >= kSlotsPerLogBlock) {
      uint64_t w = b->next.load(std::memory_order_acquire);
      if (!NextWordValid(w))
        return Status::Corrupt("log block " + std::to_string(pos->lblock), "bad next word");
      uint32_t n = NextBlock(w);
      if (n == 0) return Status::OK();
      LogBlock* nb;
      UPFS_RETURN_IF_ERROR(CheckLogBlock(ba, n, pos->seq + 1, &nb));
      pos->prev = pos->lblock;
      pos->lblock = n;
      pos->slot = 0;
      pos->last = LogPos::kNoSlot;
      pos->seq += 1;
      b = nb;
      continue;
    }
    uint64_t e = b->slots[pos->slot].load(std::memory_order_acquire);
    if (e == 0) return Status::OK();
    if (KindOf(e) == EntryKind::kMap || KindOf(e) == EntryKind::kMapExtend) {
      // Fast path for inline entries, the common case.
      UPFS_RETURN_IF_ERROR(DecodeInlineEffect(ba, e, scratch));
      pos->last = pos->slot;
      pos->slot += 1;
      if (!fn(*scratch)) return Status::OK();
      continue;
    }
    bool has_effect = false;
    uint32_t next_slot = 0;
    if (Status st = DecodeEntry(ba, b, pos->lblock, pos->slot, e, scratch, &has_effect, &next_slot);
        !st.ok()) {
      if (cut_short_ends && (CutShortApply(b, pos->slot, e) || CutShortGrowTail(ba, b, pos->slot, e)))
        return Status::OK();
      return st;
    }
    if (cut_short_ends && KindOf(e) == EntryKind::kGrowTailChecked &&
        CutShortGrowTail(ba, b, pos->slot, e))
      return Status::OK();
    pos->last = pos->slot;
    pos->slot = next_slot;
    if (has_effect && !fn(*scratch)) return Status::OK();
  }
}

}  // namespace upfs
