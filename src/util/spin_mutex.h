// SpinMutex: a mutex for critical sections of a few instructions, taken by
// several threads at once (a pool's durable log position). A futex mutex
// puts a waiter to sleep, and the wake-up costs 9-17 us here, a thousand
// times the section (perf of two threads creating in one directory: 6-8%
// of the create's samples in pthread_mutex_lock and its unlock). Meets
// Lockable.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace upfs {

class SpinMutex {
 public:
  void lock() {
    for (uint32_t spins = 0;; ++spins) {
      if (!locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire)) return;
      if (spins < 1024)
        __builtin_ia32_pause();
      else
        sched_yield();  // the holder may have been preempted
    }
  }
  bool try_lock() { return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace upfs
