// PerThread<T>: one pointer per thread of the process (indexed by
// ThreadIndex()), for objects that many threads may use but most use from
// one or two. Two levels, so that an object costs a few hundred bytes
// instead of kMax pointers to clear at construction and to scan at
// destruction (a File is made and destroyed for every open of a file in a
// pool: 8 KiB each time was a tenth of creating, writing and removing a
// small file).
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
    for (auto& g : groups_) delete g.load(std::memory_order_relaxed);
  }

  T* Get(uint32_t tid) const {
    UPFS_ASSERT(tid < kMax);
    const Group* g = groups_[tid / kGroup].load(std::memory_order_acquire);
    return g ? g->at[tid % kGroup].load(std::memory_order_acquire) : nullptr;
  }
  // Only thread `tid` sets its own value; threads sharing a group may make
  // it at once (one CAS wins).
  void Set(uint32_t tid, T* value) {
    UPFS_ASSERT(tid < kMax);
    std::atomic<Group*>& slot = groups_[tid / kGroup];
    Group* g = slot.load(std::memory_order_acquire);
    if (!g) {
      auto* fresh = new Group();
      if (slot.compare_exchange_strong(g, fresh, std::memory_order_acq_rel)) {
        g = fresh;
      } else {
        delete fresh;  // g is the winner's
      }
    }
    g->at[tid % kGroup].store(value, std::memory_order_release);
  }
  // fn(value) for every value set.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& slot : groups_) {
      const Group* g = slot.load(std::memory_order_acquire);
      if (!g) continue;
      for (const auto& v : g->at)
        if (T* p = v.load(std::memory_order_acquire)) fn(p);
    }
  }

 private:
  static constexpr uint32_t kGroup = 32;
  struct Group {
    std::array<std::atomic<T*>, kGroup> at{};
  };
  std::array<std::atomic<Group*>, (kMax + kGroup - 1) / kGroup> groups_{};
};

}  // namespace upfs
