// Process-local epoch-based reclamation for descriptor objects and mounts:
// a closed descriptor's state is freed only when no call that might still
// use it is running. Each call costs two stores to a thread-private cache
// line. A call says which descriptor slots it may read (none, one, any),
// so that closing a descriptor waits only for calls that may hold it: in a
// program whose threads each create, use and close their own files, a
// close frees at once, touching no shared line. What must wait goes to the
// retiring thread's own list (freed when its call ends, no lock), else to
// a shared list that the end of every call drains.
#pragma once

#include <cstdint>
#include <functional>

namespace upfs {

struct OpThreadRecord;

// Which descriptor slots a call may load (descriptor_table.h's Lookup).
class DescriptorUse {
 public:
  static constexpr DescriptorUse None() { return DescriptorUse(kNone); }
  static constexpr DescriptorUse Any() { return DescriptorUse(kAny); }
  // Only fd's slot (any other fd, e.g. negative, reads no slot: None).
  static constexpr DescriptorUse Only(int fd) {
    return fd >= 0 && fd < kMaxFd ? DescriptorUse(uint32_t(fd) + kFirstFd) : DescriptorUse(kNone);
  }
  constexpr uint32_t tag() const { return tag_; }
  // Whether a call with this use may hold what a slot with use `slot` held.
  constexpr bool Overlaps(DescriptorUse slot) const {
    return tag_ == kAny || slot.tag_ == kAny || (tag_ != kNone && tag_ == slot.tag_);
  }
  static constexpr int kTagBits = 22;
  static constexpr int kMaxFd = (1 << 21);  // descriptor_table.h: up to 2^20

 private:
  static constexpr uint32_t kNone = 0, kAny = 1, kFirstFd = 2;
  constexpr explicit DescriptorUse(uint32_t t) : tag_(t) {}
  friend struct OpThreadRecord;
  uint32_t tag_;
};
static_assert(DescriptorUse::kMaxFd + 2 <= (1 << DescriptorUse::kTagBits));

class OpGuard {
 public:
  // A call that may look up any descriptor (the default: always safe).
  OpGuard() : OpGuard(DescriptorUse::Any()) {}
  explicit OpGuard(DescriptorUse use);
  ~OpGuard();
  OpGuard(const OpGuard&) = delete;
  OpGuard& operator=(const OpGuard&) = delete;

 private:
  OpThreadRecord* rec_;  // null when nested in another guard
};

// Runs `free_fn` once every call that began before this one has ended:
// at once if none is running, else at the end of the last of them.
void RetireAfterOps(std::function<void()> free_fn);
// The same for what descriptor fd's slot held (the slot already emptied or
// replaced): waits only for the calls that may have loaded that slot.
void RetireDescriptor(int fd, std::function<void()> free_fn);

// Runs now what waited only for calls that have ended. The end of a call
// does so too, but one ending just as another thread retired something
// for it to free may miss it (no fence on that path); a caller about to
// count what is still open (an unmount) calls this first.
void ReclaimEndedCalls();

// For assertions: whether the calling thread's current call declared that
// it may look up fd (true outside any call).
bool OpGuardCovers(int fd);

// In a fork child (its only thread, from the atfork child handler): the
// calls other threads were in at the fork never end here, and what waited
// for them is the parent's to free (run here, a retired descriptor would
// give back the parent's holds and blocks a second time). Forgets those
// calls and leaks what waited.
void OpGuardsAfterForkInChild();

}  // namespace upfs
