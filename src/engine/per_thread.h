// PerThread<T>: one pointer per thread of the process (indexed by
// ThreadIndex()), for objects that many threads may use but most use from
// one. The first thread to set a value gets an inline slot; the others go
// to groups made on demand, two levels, so that an object costs a few
// hundred bytes instead of kMax pointers to clear at construction and to
// scan at destruction. A File is made and destroyed for every open of a
// file in a pool: 8 KiB each time was a tenth of creating, writing and
// removing a small file, and then a group's allocation and the scan of
// the group table at close were ~3% of it (callgrind, a pool file created,
// written, closed and removed).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "util/assert.h"

namespace upfs {

template <typename T, uint32_t kMax>
class PerThread {
 public:
  PerThread() = default;
  PerThread(const PerThread&) = delete;
  PerThread& operator=(const PerThread&) = delete;
  ~PerThread() {
    if (!any_group_.load(std::memory_order_relaxed)) return;
    for (auto& g : groups_) delete g.load(std::memory_order_relaxed);
  }

  T* Get(uint32_t tid) const {
    UPFS_ASSERT(tid < kMax);
    if (first_tid_.load(std::memory_order_acquire) == tid) return first_.load(std::memory_order_acquire);
    const Group* g = groups_[tid / kGroup].load(std::memory_order_acquire);
    return g ? g->at[tid % kGroup].load(std::memory_order_acquire) : nullptr;
  }
  // Only thread `tid` sets its own value; threads may set theirs at once
  // (one CAS wins the inline slot, one a shared group).
  void Set(uint32_t tid, T* value) {
    UPFS_ASSERT(tid < kMax);
    uint32_t owner = first_tid_.load(std::memory_order_acquire);
    if (owner == kNobody && first_tid_.compare_exchange_strong(owner, tid, std::memory_order_acq_rel))
      owner = tid;
    if (owner == tid) {
      first_.store(value, std::memory_order_release);
      return;
    }
    std::atomic<Group*>& slot = groups_[tid / kGroup];
    Group* g = slot.load(std::memory_order_acquire);
    if (!g) {
      auto* fresh = new Group();
      // Before the group is published: whoever sees a value in it sees
      // the flag that makes ForEach scan the groups.
      any_group_.store(true, std::memory_order_relaxed);
      if (slot.compare_exchange_strong(g, fresh, std::memory_order_acq_rel)) {
        g = fresh;
      } else {
        delete fresh;  // g is the winner's
      }
    }
    g->at[tid % kGroup].store(value, std::memory_order_release);
  }
  // fn(value) for every value set (once each).
  template <typename Fn>
  void ForEach(Fn fn) const {
    if (T* p = first_.load(std::memory_order_acquire)) fn(p);
    if (!any_group_.load(std::memory_order_acquire)) return;
    for (const auto& slot : groups_) {
      const Group* g = slot.load(std::memory_order_acquire);
      if (!g) continue;
      for (const auto& v : g->at)
        if (T* p = v.load(std::memory_order_acquire)) fn(p);
    }
  }

 private:
  static constexpr uint32_t kGroup = 32;
  static constexpr uint32_t kNobody = ~0u;
  static_assert(kMax < kNobody);
  struct Group {
    std::array<std::atomic<T*>, kGroup> at{};
  };
  // The inline slot: its thread's value never also goes to a group.
  std::atomic<uint32_t> first_tid_{kNobody};
  std::atomic<T*> first_{nullptr};
  std::atomic<bool> any_group_{false};
  std::array<std::atomic<Group*>, (kMax + kGroup - 1) / kGroup> groups_{};
};

}  // namespace upfs
