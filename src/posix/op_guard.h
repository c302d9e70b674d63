// Process-local epoch-based reclamation for descriptor objects: a closed
// descriptor's state is freed only when no call that might still use it is
// running. Each call costs two stores to a thread-private cache line. What
// a call retires waits in its thread's own list and is freed when the call
// ends if no other thread's call that began before is running (no lock);
// otherwise it goes to a shared list that the end of every call drains.
#pragma once

#include <functional>

namespace upfs {

struct OpThreadRecord;

class OpGuard {
 public:
  OpGuard();
  ~OpGuard();
  OpGuard(const OpGuard&) = delete;
  OpGuard& operator=(const OpGuard&) = delete;

 private:
  OpThreadRecord* rec_;  // null when nested in another guard
};

// Runs `free_fn` once every call that began before this one has ended:
// at once if none is running, else at the end of the last of them.
void RetireAfterOps(std::function<void()> free_fn);

// In a fork child (its only thread, from the atfork child handler): the
// calls other threads were in at the fork never end here, and what waited
// for them is the parent's to free (run here, a retired descriptor would
// give back the parent's holds and blocks a second time). Forgets those
// calls and leaks what waited.
void OpGuardsAfterForkInChild();

}  // namespace upfs
