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
  EpochPin(EpochDomain* d, uint32_t slot) : slot_(Unpinned(d, slot)) {
    if (slot_) Announce(d->epoch(), d->epoch().load(std::memory_order_seq_cst));
  }
  // A pin whose store-load fence is the caller's: it stores the epoch
  // without ordering, the caller makes a std::atomic_thread_fence(seq_cst)
  // that serves other protocols too (Pool::PinAndLockLatest), and then
  // calls Confirm before reading anything the pin protects. An advance
  // that could free what the pin protects follows a seq_cst read of the
  // slot made with the epoch already past the announced one: either that
  // read sees the store, or it precedes the fence in the single order of
  // seq_cst operations, and so does the advance before it, which Confirm
  // then sees (and pins again).
  struct FenceFollows {};
  EpochPin(EpochDomain* d, uint32_t slot, FenceFollows) : slot_(Unpinned(d, slot)) {
    if (!slot_) return;
    epoch_ = &d->epoch();
    announced_ = epoch_->load(std::memory_order_relaxed);
    slot_->pinned.store(announced_, std::memory_order_relaxed);
  }
  // After the caller's fence (FenceFollows); nothing to do otherwise.
  void Confirm() {
    if (!epoch_) return;
    const uint64_t e = epoch_->load(std::memory_order_seq_cst);
    if (e != announced_) Announce(*epoch_, e);  // moved on meanwhile: pinned the usual way
    epoch_ = nullptr;
  }
  ~EpochPin() {
    UPFS_ASSERT(!epoch_);  // a FenceFollows pin is confirmed before use
    if (slot_) slot_->pinned.store(0, std::memory_order_release);
  }
  EpochPin(const EpochPin&) = delete;
  EpochPin& operator=(const EpochPin&) = delete;

  // For assertions: whether the thread owning `slot` is inside an epoch.
  static bool Pinned(EpochDomain* d, uint32_t slot) {
    return d == nullptr || d->slot(slot)->pinned.load(std::memory_order_relaxed) != 0;
  }

 private:
  // The slot to pin, or null: no domain, or the thread is pinned already.
  static ReclaimSlot* Unpinned(EpochDomain* d, uint32_t slot) {
    if (!d) return nullptr;
    UPFS_ASSERT(slot < kMaxSlots);
    ReclaimSlot* s = d->slot(slot);
    return s->pinned.load(std::memory_order_relaxed) != 0 ? nullptr : s;
  }
  // Pins epoch e, and again until the epoch stays where the pin is.
  void Announce(std::atomic<uint64_t>& ep, uint64_t e) {
    for (;;) {
      slot_->pinned.store(e, std::memory_order_seq_cst);
      const uint64_t e2 = ep.load(std::memory_order_seq_cst);
      if (e2 == e) return;
      e = e2;
    }
  }

  ReclaimSlot* slot_;
  std::atomic<uint64_t>* epoch_ = nullptr;  // a FenceFollows pin not yet confirmed
  uint64_t announced_ = 0;
};

}  // namespace upfs
