// ExtentWork: the extents of one growth step that still need their pages,
// shared by the thread that grows the file and threads that would
// otherwise wait for that growth (Medium::HelpGrow), all taking the
// lowest extent left: an appender that outruns the growth needs the
// bottom of the step first. Giving an extent its pages is kernel work of
// about a millisecond (allocate, zero, map) when huge pages are not to be
// had; an appender that outruns the growth does half of it instead of
// sleeping, on the other CPU. Finish reports how far from the bottom the
// step is done, so that the space can be used as it gets its pages.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "util/assert.h"

namespace upfs {

class ExtentWork {
 public:
  // Opens the step [lo, hi), in extent numbers (offset / extent size).
  // Only the growing thread, with no step open.
  void Open(uint64_t lo, uint64_t hi) {
    small_.store(false, std::memory_order_relaxed);
    rc_.store(0, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> g(done_mu_);
      first_ = ready_ = lo;
      done_.assign(hi - lo, false);
    }
    window_.store(Pack(lo, hi), std::memory_order_release);
  }
  // The lowest extent left, now the caller's (a helper's between Enter and
  // Leave); false when none is left.
  bool Take(uint64_t* e) {
    uint64_t w = window_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = w >> 32, hi = w & 0xffffffffu;
      if (lo >= hi) return false;
      if (window_.compare_exchange_weak(w, Pack(lo + 1, hi), std::memory_order_acq_rel)) {
        *e = lo;
        return true;
      }
    }
  }
  // Extent e, taken, has its pages. Returns the end (an extent number) of
  // the run of finished extents from the step's bottom if this call moved
  // it, else 0. (A mutex: a call per millisecond of kernel work.)
  uint64_t Finish(uint64_t e) {
    std::lock_guard<std::mutex> g(done_mu_);
    UPFS_ASSERT(e >= first_ && e - first_ < done_.size() && !done_[e - first_]);
    done_[e - first_] = true;
    const uint64_t before = ready_;
    while (ready_ - first_ < done_.size() && done_[ready_ - first_]) ++ready_;
    return ready_ != before ? ready_ : 0;
  }
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

  std::atomic<uint64_t> window_{0};  // lo:32 | hi:32; lo >= hi: nothing left
  std::atomic<int> helpers_{0};
  std::atomic<int> rc_{0};           // an errno of a failed extent
  std::atomic<bool> small_{false};   // an extent of the step got small pages
  std::mutex done_mu_;
  uint64_t first_ = 0;       // the step's first extent
  uint64_t ready_ = 0;       // extents [first_, ready_) are finished
  std::vector<bool> done_;   // extent first_ + i finished
};

}  // namespace upfs
