// Inline part of log_writer.h: the commit loop is on every write path.
#pragma once

#include "medium/pm.h"
#include "util/crc32c.h"

namespace upfs {

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
    if (entry) {
      if (!pm::Cas64(&b->slots[s], expected, entry)) continue;
      pm::Flush(&b->slots[s], 8);
      pm::Fence();
      pos->last = s;
      pos->slot = s + 1;
      return Status::OK();
    }
    if (s + 2 + k > kSlotsPerLogBlock) {
      // The payload does not fit: pad out this block and use the next.
      if (pm::Cas64(&b->slots[s], expected, EncodeReserve(kSlotsPerLogBlock - s - 1))) {
        pm::Flush(&b->slots[s], 8);
        pm::Fence();
      }
      continue;
    }
    if (!pm::Cas64(&b->slots[s], expected, EncodeReserve(k))) continue;
    // The reservation must be durable before its payload can be, or a crash
    // could leave payload words after the end of the log.
    pm::Flush(&b->slots[s], 8);
    pm::Fence();
    pm::CopyFlush(&b->slots[s + 1], p.payload.data(), size_t(k) * 8);
    // The payload must be durable before its apply word can be. (The fence
    // that orders the apply after the entry before it did that too whenever
    // the apply's line differs; a build that relied on it saw apps_leveldb
    // find a deleted key after reopen in about 4 of 54 runs, against 0 of
    // 45 with this fence: not proven, not understood, see docs/design.md,
    // "Persistence ordering", rule 6.)
    pm::Fence();
    pos->last = s;
    pos->slot = s + 1 + k;
    // The apply entry must land in the same block as its reservation.
    for (;;) {
      uint32_t here = pos->lblock;
      UPFS_RETURN_IF_ERROR(scan());
      if (*conflicted) return Status::OK();  // the reservation stays inert
      if (pos->lblock != here || pos->slot >= kSlotsPerLogBlock) break;
      const uint32_t a = pos->slot;
      // Right after our own payload, what comes before the apply (the
      // reservation, then the payload) is durable already: both fences
      // above ordered it. Only entries of others in between need one.
      if (pos->last != s) PersistBeforeSlot(b, *pos);
      uint64_t exp2 = 0;
      if (!pm::Cas64(&b->slots[a], exp2, EncodeApply(s, crc))) continue;
      pm::Flush(&b->slots[a], 8);
      pm::Fence();
      pos->last = a;
      pos->slot = a + 1;
      p.reserve_slot = s;
      return Status::OK();
    }
  }
}

}  // namespace upfs
