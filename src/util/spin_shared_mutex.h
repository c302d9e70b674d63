// SpinSharedMutex: a reader-writer lock of one process that spins instead
// of sleeping. A sleeping lock (std::shared_mutex, a futex) hands the lock
// over through a thread wake-up, 9-17 us here, more than the whole
// namespace operation it protects (docs/design.md, "Pools": the index
// lock). Held for a few hundred nanoseconds at a time, it is cheaper to
// spin, yielding the CPU after a while in case the holder was preempted.
// Readers are preferred, as glibc's default rwlock prefers them, so that a
// thread may take the shared lock while it holds it.
// Meets the SharedMutex requirements (std::shared_lock, std::unique_lock).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "util/assert.h"

namespace upfs {

class SpinSharedMutex {
 public:
  void lock() {
    for (uint32_t spins = 0;; ++spins) {
      uint32_t s = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(s, kWriter, std::memory_order_acquire))
        return;
      Pause(spins);
    }
  }
  bool try_lock() {
    uint32_t s = 0;
    return state_.compare_exchange_strong(s, kWriter, std::memory_order_acquire);
  }
  void unlock() {
    UPFS_ASSERT(state_.load(std::memory_order_relaxed) == kWriter);
    state_.store(0, std::memory_order_release);
  }
  void lock_shared() {
    for (uint32_t spins = 0;; ++spins) {
      uint32_t s = state_.load(std::memory_order_relaxed);
      if (!(s & kWriter) && state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) return;
      Pause(spins);
    }
  }
  bool try_lock_shared() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    return !(s & kWriter) && state_.compare_exchange_strong(s, s + 1, std::memory_order_acquire);
  }
  void unlock_shared() {
    const uint32_t was = state_.fetch_sub(1, std::memory_order_release);
    UPFS_ASSERT((was & ~kWriter) != 0);
    (void)was;
  }

 private:
  static constexpr uint32_t kWriter = 1u << 31;

  static void Pause(uint32_t spins) {
    if (spins < 256) {
      __builtin_ia32_pause();
    } else {
      sched_yield();  // the holder may have been preempted
    }
  }

  std::atomic<uint32_t> state_{0};
};

}  // namespace upfs
