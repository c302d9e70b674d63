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
// The window is address space only between calls: Warm frees the page
// before it returns. Not thread-safe; one per worker.
#pragma once

#include <cstddef>

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
  // Whether the window holds any page now (tests: it must not, between
  // calls).
  bool HoldsPages() const;

 private:
  char* raw_ = nullptr;     // the reservation, two extents long
  char* window_ = nullptr;  // its 2 MiB-aligned extent inside
};

}  // namespace upfs
