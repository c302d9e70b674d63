// HugePageWarmer: touches a free huge page just before a background
// collapse takes one, so that the collapse itself is short.
//
// A collapse of an extent in use (MADV_COLLAPSE of a tmpfs extent in small
// pages) unmaps its pages while it copies them into a new huge page, and a
// thread that touches the extent meanwhile waits for it. On a virtual
// machine that hands free 2 MiB blocks back to its host (free page
// reporting), a free huge page is cold: its first touch makes the host
// back it, and a collapse that copied into one took 5.2-5.6 ms, all of it
// a stall for a thread writing at random over the file (docs/design.md,
// "Background worker"). Taking a huge page first for an anonymous window,
// touching it whole, and freeing it again leaves it warm on this CPU's
// free list, where the collapse that follows finds it: 0.7-0.9 ms a
// collapse after 4.4-5.4 ms of warming, which stalls nobody.
//
// Where free memory is warm (a machine that does not hand it back, or
// memory freed moments ago) a warming costs 0.61-0.68 ms for nothing: a
// collapse took 0.60-0.69 ms with or without one, and the worker's pace,
// which counts both, would make the file's collapses take about twice as
// long (arithmetic on those figures).
// So the worker warms only while it pays (WantedNow): until warmings
// find memory warm (kCheapToStop in a row under kWarmNs), and again once a collapse
// made without one was slow (over kSlowCollapseNs): one slow collapse per
// turn of the memory to cold. Times are passed in, so that tests can
// drive it.
//
// The window is address space only between calls: Warm frees the page
// before it returns. Not thread-safe; one per worker.
#pragma once

#include <cstddef>
#include <cstdint>

namespace upfs {

class HugePageWarmer {
 public:
  HugePageWarmer();
  ~HugePageWarmer();
  HugePageWarmer(const HugePageWarmer&) = delete;
  HugePageWarmer& operator=(const HugePageWarmer&) = delete;

  // Makes one huge page in the window (MADV_COLLAPSE of a seeded window:
  // the kernel clears the rest, so all of it is touched) and frees it.
  // False if no huge page could be made (no window, THP not available,
  // no memory): the caller collapses anyway, as before.
  bool Warm();
  // Whether the window holds any page now, or that cannot be told
  // (tests: it must not, between calls).
  bool HoldsPages() const;

  // Whether the next collapse is worth a warming first.
  bool WantedNow() const { return wanted_; }
  // A warming took `ns`.
  void NoteWarming(int64_t ns) {
    cheap_in_a_row_ = ns < kWarmNs ? cheap_in_a_row_ + 1 : 0;
    if (cheap_in_a_row_ >= kCheapToStop) wanted_ = false;
  }
  // A collapse made without a warming took `ns`.
  void NoteUnwarmedCollapse(int64_t ns) {
    if (ns > kSlowCollapseNs) {
      wanted_ = true;
      cheap_in_a_row_ = 0;
    }
  }
  // Measured here: a warming 4.4-5.4 ms on cold memory, 0.61-0.68 on
  // warm; a collapse 5.2-5.6 ms cold, 0.60-0.91 warm or warmed.
  static constexpr int64_t kWarmNs = 1'500'000;
  static constexpr int64_t kSlowCollapseNs = 2'000'000;
  // Cheap warmings in a row that stop them. Stopped by one, a random
  // 1 KiB writer over a fresh 1 GiB file met more writes over 1 ms on the
  // VM measured (60-208 a run against 69-96 warming always, three runs
  // each): read as a warm page now and then among cold ones, not traced.
  static constexpr int kCheapToStop = 4;

 private:
  bool wanted_ = true;      // until warmings find memory warm
  int cheap_in_a_row_ = 0;  // warmings under kWarmNs since the last slow one
  char* const window_;      // an extent, aligned (nullptr: not mapped)
};

}  // namespace upfs
