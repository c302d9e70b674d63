#include "engine/reclamation.h"

#include <unistd.h>

#include <algorithm>

#include "medium/provide.h"

namespace upfs {

bool EpochDomain::SlotOwnerAlive(uint32_t s) {
  // Another process holding the lock means a live owner. Our own slots'
  // locks do not conflict with us: for those, in_use says it.
  if (live_->HeldElsewhere(s)) return true;
  return slots_[s].owner_pid.load(std::memory_order_relaxed) == uint32_t(getpid()) &&
         slots_[s].in_use.load(std::memory_order_relaxed) == 1;
}

bool EpochDomain::AnyOtherProcessLive() {
  const uint32_t me = uint32_t(getpid());
  bool any = false;
  ForEachLiveSlot(slots_, slots_high(), *live_, [&](uint32_t, const ReclaimSlot& sl) {
    any = sl.owner_pid.load(std::memory_order_relaxed) != me;
    return !any;
  });
  return any;
}

Status EpochDomain::ClaimSlot(uint32_t* out) {
  // The liveness lock is taken first: holding it proves that no live thread
  // of another process owns the slot, so a slot is never owned twice, and
  // one whose owner died is simply taken over. The mutex keeps threads of
  // this process apart (for them the lock always succeeds).
  std::lock_guard<std::mutex> g(slot_mu_);
  if (!kept_.empty()) {
    *out = kept_.back();
    kept_.pop_back();
    return Status::OK();
  }
  const uint32_t me = uint32_t(getpid());
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    ReclaimSlot& sl = slots_[i];
    if (sl.in_use.load(std::memory_order_acquire) != 0 &&
        sl.owner_pid.load(std::memory_order_relaxed) == me)
      continue;  // ours
    if (!live_->TryLock(i)) continue;
    // A slot never used may lie on a page that is still a hole.
    if (i >= w_->slots_high.load(std::memory_order_acquire)) {
      if (Status st = ProvideMemory(&sl, sizeof sl, "thread slots"); !st.ok()) {
        live_->Unlock(i);
        return st;
      }
    }
    sl.pinned.store(0, std::memory_order_relaxed);
    sl.owner_pid.store(me, std::memory_order_relaxed);
    sl.in_use.store(1, std::memory_order_release);
    uint64_t hi = w_->slots_high.load();
    while (hi < i + 1 && !w_->slots_high.compare_exchange_weak(hi, i + 1)) {
    }
    *out = i;
    return Status::OK();
  }
  return Status::Error(EAGAIN, "no free thread slot");
}

void EpochDomain::ReleaseSlot(uint32_t s) {
  std::lock_guard<std::mutex> g(slot_mu_);
  if (keep_released_) {
    slots_[s].pinned.store(0, std::memory_order_release);
    kept_.push_back(s);
    return;
  }
  slots_[s].pinned.store(0, std::memory_order_release);
  slots_[s].owner_pid.store(0, std::memory_order_relaxed);
  slots_[s].in_use.store(0, std::memory_order_release);
  live_->Unlock(s);
}

void EpochDomain::ReleaseKeptSlots() {
  std::lock_guard<std::mutex> g(slot_mu_);
  for (uint32_t s : kept_) {
    slots_[s].owner_pid.store(0, std::memory_order_relaxed);
    slots_[s].in_use.store(0, std::memory_order_release);
    live_->Unlock(s);
  }
  kept_.clear();
}

uint64_t EpochDomain::TryAdvanceEpoch() {
  uint64_t e = w_->epoch.load(std::memory_order_seq_cst);
  const uint64_t hi = std::min<uint64_t>(slots_high(), kMaxSlots);
  for (uint32_t i = 0; i < hi; ++i) {
    ReclaimSlot& sl = slots_[i];
    if (sl.in_use.load(std::memory_order_acquire) == 0) continue;
    uint64_t p = sl.pinned.load(std::memory_order_seq_cst);
    if (p == 0 || p == e) continue;
    // Pinned in an older epoch: alive means we must wait for it.
    if (SlotOwnerAlive(i)) return e;
    // Dead owner: its pin is void.
    sl.pinned.compare_exchange_strong(p, 0);
  }
  w_->epoch.compare_exchange_strong(e, e + 1, std::memory_order_seq_cst);
  return w_->epoch.load(std::memory_order_seq_cst);
}

}  // namespace upfs
