// TestHook: a point in the code where a test makes a change as a racing
// thread or process would, deterministically (fn(arg) runs there; none is
// set outside tests, and the point then costs one load).
#pragma once

#include <atomic>

namespace upfs {

class TestHook {
 public:
  using Fn = void (*)(void*);
  // nullptr: nothing runs.
  void Set(Fn fn, void* arg) {
    arg_.store(arg, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_release);
  }
  void Run() const {
    if (const Fn fn = fn_.load(std::memory_order_acquire)) fn(arg_.load(std::memory_order_relaxed));
  }

 private:
  std::atomic<Fn> fn_{nullptr};
  std::atomic<void*> arg_{nullptr};
};

}  // namespace upfs
