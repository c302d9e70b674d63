#include "posix/pool_fd_numbers.h"

#include <atomic>
#include <bit>

#include "engine/file.h"
#include "util/assert.h"

namespace upfs {

namespace {

// Pool descriptors: numbers from 1 << 19, below the table's 1 << 20, and
// never kernel descriptors (a pool file has no host file of its own).
constexpr int kPoolFdBase = 1 << 19;
constexpr int kPoolFdEnd = 1 << 20;

// A bit per number (set: taken), changed by one atomic operation each, so
// that a fork child inherits a consistent map whatever the other threads
// were doing. A thread searches from the word it last took a number in,
// first from a region of its own (by ThreadIndex), so that threads that
// open and close files each touch their own words (a mutex over a list of
// free numbers was taken by every open and every close, in whatever thread).
constexpr uint32_t kNumberWords = (kPoolFdEnd - kPoolFdBase) / 64;
static_assert(kNumberWords % kMaxThreads == 0);
std::atomic<uint64_t> g_taken[kNumberWords];
thread_local uint32_t t_number_word = UINT32_MAX;  // constant-initialized: no guard

}  // namespace

int TakePoolFdNumber() {
  uint32_t w = t_number_word;
  // (Thread indices are dense but not bounded: past kMaxThreads live
  // threads, regions are shared.)
  if (w >= kNumberWords) w = ThreadIndex() % kMaxThreads * (kNumberWords / kMaxThreads);
  for (uint32_t tried = 0; tried < kNumberWords; ++tried, w = (w + 1) % kNumberWords) {
    uint64_t v = g_taken[w].load(std::memory_order_relaxed);
    while (v != ~uint64_t{0}) {
      const uint64_t bit = ~v & (v + 1);  // the lowest clear one
      if (g_taken[w].compare_exchange_weak(v, v | bit, std::memory_order_acq_rel)) {
        t_number_word = w;
        return kPoolFdBase + int(w * 64 + uint32_t(std::countr_zero(bit)));
      }
    }
  }
  return -1;
}

void GivePoolFdNumber(int n) {
  UPFS_ASSERT(n >= kPoolFdBase && n < kPoolFdEnd);
  const uint32_t i = uint32_t(n - kPoolFdBase);
  const uint64_t was = g_taken[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_acq_rel);
  UPFS_ASSERT(was & (uint64_t{1} << (i % 64)));  // given back once
  (void)was;
}

}  // namespace upfs
