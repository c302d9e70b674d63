// Epoch-based reclamation (EBR) over one reclamation domain: a block that a
// reader may still be reading (a log block retired by GC, a data block
// retired by a sync-mode write) is reused only after every thread that was
// inside an operation when it was retired has left it.
//
// The words and slots live in memory the container lends (shared by every
// process using the domain: one file's shared state today, a pool's
// tomorrow); whether a slot's owner is alive is the container's to tell
// (SlotLiveness), so that a crashed process never blocks anybody.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "util/status.h"

namespace upfs {

inline constexpr uint32_t kMaxSlots = 4096;

// One thread's slot.
struct ReclaimSlot {
  std::atomic<uint64_t> pinned;     // epoch this thread is inside, 0 = idle
  std::atomic<uint32_t> owner_pid;  // informational, and tells our own slots apart
  std::atomic<uint32_t> in_use;     // 1 while a thread owns the slot
  unsigned char pad[48];
};
static_assert(sizeof(ReclaimSlot) == 64);

// The domain's words.
struct EpochWords {
  alignas(64) std::atomic<uint64_t> epoch;
  std::atomic<uint64_t> slots_high;  // slots at or above are unused
  // Whether the epoch can be one: a pin stores it as "inside", and 0 is
  // "idle", so an epoch of 0 is damage (pins would protect nothing), and
  // so is one of 2^62 or more, which no advancing reaches (advances start
  // from 1, one at a time: 2^62 of them at one a microsecond would take
  // about 146,000 years) and whose advancing could wrap to 0. Both
  // containers count a state whose epoch is not plausible as invalid.
  bool Plausible() const {
    const uint64_t e = epoch.load(std::memory_order_relaxed);
    return e != 0 && e < (uint64_t{1} << 62);
  }
  // After a rebuild: nobody is inside anything.
  void Reset() {
    epoch.store(1, std::memory_order_relaxed);
    slots_high.store(0, std::memory_order_relaxed);
  }
};
static_assert(sizeof(EpochWords) == 64);

// Liveness of slot owners: a lock per slot that the kernel drops when its
// holder dies (the container's: OFD locks on its shared-state object).
class SlotLiveness {
 public:
  // Locks slot s for this process; false if another live process holds it.
  virtual bool TryLock(uint32_t s) = 0;
  virtual void Unlock(uint32_t s) = 0;
  // Whether another process holds slot s's lock (unknown counts as held).
  virtual bool HeldElsewhere(uint32_t s) = 0;

 protected:
  ~SlotLiveness() = default;
};

// The one scan over live slots: fn(i, slot) for each slot below slots_high
// that is in use and whose lock another process holds; `fn` returns false to
// stop. Works on any copy of the slots (mapped, or read into a buffer).
template <typename Fn>
void ForEachLiveSlot(const ReclaimSlot* slots, uint64_t slots_high, SlotLiveness& live, Fn fn) {
  const uint64_t hi = slots_high < kMaxSlots ? slots_high : kMaxSlots;
  for (uint32_t i = 0; i < hi; ++i) {
    if (slots[i].in_use.load(std::memory_order_acquire) == 0) continue;
    if (!live.HeldElsewhere(i)) continue;
    if (!fn(i, slots[i])) return;
  }
}

class EpochDomain {
 public:
  EpochDomain(EpochWords* words, ReclaimSlot* slots, SlotLiveness* live)
      : w_(words), slots_(slots), live_(live) {}
  EpochDomain(const EpochDomain&) = delete;
  EpochDomain& operator=(const EpochDomain&) = delete;

  std::atomic<uint64_t>& epoch() const { return w_->epoch; }
  ReclaimSlot* slot(uint32_t i) const { return &slots_[i]; }
  uint64_t slots_high() const { return w_->slots_high.load(std::memory_order_acquire); }

  // Claims a free slot for a thread of this process and locks its
  // liveness into *out. EAGAIN if none is free; ENOSPC if the slot's page,
  // never used before, cannot be given memory (medium/provide.h).
  Status ClaimSlot(uint32_t* out);
  void ReleaseSlot(uint32_t s);
  // A domain many Files share (a pool's): released slots stay claimed by
  // this process, idle, and the next claim takes one of them without a
  // system call. ReleaseKeptSlots gives them back (at detach).
  void KeepReleasedSlots() { keep_released_ = true; }
  void ReleaseKeptSlots();
  // True if the thread owning slot s (of any process) is alive.
  bool SlotOwnerAlive(uint32_t s);
  // True if some other process holds a live slot.
  bool AnyOtherProcessLive();
  // Tries to move the epoch forward; returns the (possibly new) epoch.
  uint64_t TryAdvanceEpoch();

 private:
  EpochWords* w_;
  ReclaimSlot* slots_;
  SlotLiveness* live_;
  // Threads of this process lock slots through one liveness owner, where
  // the locks do not conflict: claims within the process serialize here.
  std::mutex slot_mu_;
  bool keep_released_ = false;
  std::vector<uint32_t> kept_;  // idle slots this process still holds (under slot_mu_)
};

}  // namespace upfs
