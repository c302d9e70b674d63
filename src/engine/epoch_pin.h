// EpochPin: while alive, nothing the thread may read (a log block retired by
// GC, a data block retired by a sync-mode write) is reused. Re-entrant: an
// operation that is already pinned stays pinned.
#pragma once

#include <atomic>

#include "engine/reclamation.h"
#include "util/assert.h"

namespace upfs {

class EpochPin {
 public:
  // A read-only File has no domain (null): it validates instead
  // (File::HeadMoved).
  EpochPin(EpochDomain* d, uint32_t slot) : slot_(d ? d->slot(slot) : nullptr) {
    if (!slot_) return;
    UPFS_ASSERT(slot < kMaxSlots);
    if (slot_->pinned.load(std::memory_order_relaxed) != 0) {
      slot_ = nullptr;
      return;
    }
    std::atomic<uint64_t>& ep = d->epoch();
    uint64_t e = ep.load(std::memory_order_seq_cst);
    for (;;) {
      slot_->pinned.store(e, std::memory_order_seq_cst);
      uint64_t e2 = ep.load(std::memory_order_seq_cst);
      if (e2 == e) break;
      e = e2;
    }
  }
  ~EpochPin() {
    if (slot_) slot_->pinned.store(0, std::memory_order_release);
  }
  EpochPin(const EpochPin&) = delete;
  EpochPin& operator=(const EpochPin&) = delete;

  // For assertions: whether the thread owning `slot` is inside an epoch.
  static bool Pinned(EpochDomain* d, uint32_t slot) {
    return d == nullptr || d->slot(slot)->pinned.load(std::memory_order_relaxed) != 0;
  }

 private:
  ReclaimSlot* slot_;
};

}  // namespace upfs
