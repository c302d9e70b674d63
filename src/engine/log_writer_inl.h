// Inline part of log_writer.h: the commit loop is on every write path.
#pragma once

#include "medium/pm.h"
#include "util/crc32c.h"

namespace upfs {

inline bool LogWriter::CommitWord(format::LogBlock* b, LogPos* pos, uint64_t entry) {
  const uint32_t s = pos->slot;
  uint64_t expected = 0;
  if (!pm::Cas64(&b->slots[s], expected, entry)) return false;
  pm::Flush(&b->slots[s], 8);
  CommitFence();
  Durable(pos->seq, s + 1);
  pos->last = s;
  pos->slot = s + 1;
  return true;
}

inline void LogWriter::PadOutBlock(format::LogBlock* b, const LogPos& pos) {
  using namespace format;
  const uint32_t s = pos.slot;
  uint64_t expected = 0;
  if (pm::Cas64(&b->slots[s], expected, EncodeReserve(kSlotsPerLogBlock - s - 1))) {
    pm::Flush(&b->slots[s], 8);
    pm::Fence();
    Durable(pos.seq, kSlotsPerLogBlock);
  }
}

template <typename Conflict>
Status LogWriter::Commit(ThreadBlocks* t, Effect* scratch, LogPos* pos, uint64_t entry,
                         PendingEntry& p, Conflict conflict, bool* conflicted) {
  using namespace format;
  *conflicted = false;
  auto scan = [&]() {
    return ScanCommitted(access_, pos, scratch, [&](const Effect& e) {
      if (conflict(e)) {
        *conflicted = true;
        return false;
      }
      return true;
    });
  };
  const uint32_t k = entry ? 0 : uint32_t(p.payload.size());
  const uint32_t crc = entry ? 0 : Crc32c(p.payload.data(), size_t(k) * 8);
  for (;;) {
    UPFS_RETURN_IF_ERROR(scan());
    if (*conflicted) return Status::OK();
    if (pos->slot >= kSlotsPerLogBlock) {
      UPFS_RETURN_IF_ERROR(ExtendChain(t, pos));
      continue;
    }
    LogBlock* b = LogAt(pos->lblock);
    const uint32_t s = pos->slot;
    PersistBeforeSlot(b, *pos);
    uint64_t expected = 0;
    if (entry && p.entry_word1) {
      bool done = false;
      UPFS_RETURN_IF_ERROR(CommitChecked(b, pos, entry, p, &done));
      if (done) return Status::OK();
      continue;
    }
    if (entry) {
      if (CommitWord(b, pos, entry)) return Status::OK();
      continue;
    }
    if (s + 2 + k > kSlotsPerLogBlock) {
      PadOutBlock(b, *pos);
      continue;
    }
    // The caller's data (fresh blocks written with non-temporal stores, or
    // nothing for a patch, whose bytes are its payload) must be durable
    // before the entry can be (rule 1). With nothing outstanding the fence
    // costs next to nothing.
    pm::Fence();
    if (!pm::Cas64(&b->slots[s], expected, EncodeReserve(k))) continue;
    // One persisted round for the whole entry: the payload is stored now
    // and written back with its reservation and apply after the apply's CAS
    // (docs/design.md, "Persistence ordering"). A crash before that fence
    // may keep any of their lines and lose others: recovery tells such a
    // commit by its checksum or by words past the end (TailRule), and
    // nothing committed after it can be durable without it (rule 3).
    pm::StoreWords(&b->slots[s + 1], p.payload.data(), k);
    pos->last = s;
    pos->slot = s + 1 + k;
    // The apply entry must land in the same block as its reservation.
    for (;;) {
      uint32_t here = pos->lblock;
      UPFS_RETURN_IF_ERROR(scan());
      if (*conflicted) return Status::OK();  // the reservation stays inert
      if (pos->lblock != here || pos->slot >= kSlotsPerLogBlock) break;
      const uint32_t a = pos->slot;
      // Right after our own payload, the flush below persists what comes
      // before the apply (the reservation, then the payload) with it. Entries
      // of others in between must be durable before it (rule 3).
      if (pos->last != s) PersistBeforeSlot(b, *pos);
      uint64_t exp2 = 0;
      if (!pm::Cas64(&b->slots[a], exp2, EncodeApply(s, crc))) continue;
      pm::Flush(&b->slots[s], size_t(a - s + 1) * 8);
      CommitFence();
      Durable(pos->seq, a + 1);
      pos->last = a;
      pos->slot = a + 1;
      p.reserve_slot = s;
      return Status::OK();
    }
  }
}

}  // namespace upfs
