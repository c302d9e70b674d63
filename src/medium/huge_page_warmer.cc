// HugePageWarmer (medium/huge_page_warmer.h).
#include "medium/huge_page_warmer.h"

#include <sys/mman.h>

#include "medium/medium.h"
#include "medium/mman_compat.h"

namespace upfs {

// Without a window Warm() reports false, and collapses go on cold.
HugePageWarmer::HugePageWarmer() : window_(MapExtentAligned(kExtentSize, PROT_READ | PROT_WRITE)) {}

HugePageWarmer::~HugePageWarmer() {
  if (window_) munmap(window_, kExtentSize);
}

bool HugePageWarmer::Warm() {
  if (!window_) return false;
  // One page present, so that the collapse has something to collapse; it
  // copies that page and clears the rest of the new huge page.
  if (madvise(window_, kPageSize, MADV_POPULATE_WRITE) != 0) return false;
  const bool made = madvise(window_, kExtentSize, MADV_COLLAPSE) == 0;
  // Freed either way: between calls the window holds nothing.
  madvise(window_, kExtentSize, MADV_DONTNEED);
  return made;
}

bool HugePageWarmer::HoldsPages() const { return window_ && AnyPageResident(window_, kExtentSize); }

}  // namespace upfs
