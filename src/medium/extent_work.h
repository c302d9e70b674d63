// ExtentWork: the extents of one growth step that still need their pages,
// shared by the thread that grows the file, which takes them from the
// bottom, and threads that would otherwise wait for that growth, which
// take them from the top (Medium::HelpGrow). Giving an extent its pages is
// kernel work of about a millisecond (allocate, zero, map) when huge pages
// are not to be had; an appender that outruns the growth does half of it
// instead of sleeping, on the other CPU.
#pragma once

#include <atomic>
#include <cstdint>

namespace upfs {

class ExtentWork {
 public:
  // Opens the step [lo, hi), in extent numbers (offset / extent size).
  // Only the growing thread, with no step open.
  void Open(uint64_t lo, uint64_t hi) {
    small_.store(false, std::memory_order_relaxed);
    rc_.store(0, std::memory_order_relaxed);
    window_.store(Pack(lo, hi), std::memory_order_release);
  }
  // The lowest extent left, now the caller's; false when none is left.
  bool TakeLow(uint64_t* e) { return Take(e, /*low=*/true); }
  // The highest extent left, for a helper between Enter and Leave.
  bool TakeHigh(uint64_t* e) { return Take(e, /*low=*/false); }
  void Enter() { helpers_.fetch_add(1, std::memory_order_seq_cst); }
  void Leave() { helpers_.fetch_sub(1, std::memory_order_release); }
  // After the growing thread took its last extent: waits until every
  // helper has finished the extent it took, then closes the step.
  template <typename Wait>
  void Close(Wait wait) {
    window_.store(0, std::memory_order_seq_cst);  // nothing more to take
    while (helpers_.load(std::memory_order_acquire) != 0) wait();
  }
  void Fail(int rc) { rc_.store(rc, std::memory_order_relaxed); }
  int failure() const { return rc_.load(std::memory_order_acquire); }
  void NoteSmallPages() { small_.store(true, std::memory_order_relaxed); }
  bool any_small_pages() const { return small_.load(std::memory_order_acquire); }

 private:
  static uint64_t Pack(uint64_t lo, uint64_t hi) { return lo << 32 | hi; }
  bool Take(uint64_t* e, bool low) {
    uint64_t w = window_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = w >> 32, hi = w & 0xffffffffu;
      if (lo >= hi) return false;
      const uint64_t next = low ? Pack(lo + 1, hi) : Pack(lo, hi - 1);
      if (window_.compare_exchange_weak(w, next, std::memory_order_acq_rel)) {
        *e = low ? lo : hi - 1;
        return true;
      }
    }
  }

  std::atomic<uint64_t> window_{0};  // lo:32 | hi:32; lo >= hi: nothing left
  std::atomic<int> helpers_{0};
  std::atomic<int> rc_{0};           // an errno of a failed extent
  std::atomic<bool> small_{false};   // an extent of the step got small pages
};

}  // namespace upfs
