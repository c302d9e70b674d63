// HugePageWarmer (medium/huge_page_warmer.h).
#include "medium/huge_page_warmer.h"

#include <sys/mman.h>

#include <cstdint>

#include "medium/medium.h"
#include "medium/mman_compat.h"

namespace upfs {

namespace {
constexpr size_t kReservation = 2 * kExtentSize;  // room for one aligned extent
}  // namespace

HugePageWarmer::HugePageWarmer() {
  void* p = mmap(nullptr, kReservation, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;  // Warm() reports false; collapses go on cold
  raw_ = static_cast<char*>(p);
  const uintptr_t a = reinterpret_cast<uintptr_t>(raw_);
  window_ = reinterpret_cast<char*>((a + kExtentSize - 1) & ~uintptr_t{kExtentSize - 1});
}

HugePageWarmer::~HugePageWarmer() {
  if (raw_) munmap(raw_, kReservation);
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

bool HugePageWarmer::HoldsPages() const {
  if (!window_) return false;
  unsigned char vec[kExtentSize / kPageSize];
  if (mincore(window_, kExtentSize, vec) != 0) return false;
  for (unsigned char v : vec)
    if (v & 1) return true;
  return false;
}

}  // namespace upfs
