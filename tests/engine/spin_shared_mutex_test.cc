// SpinSharedMutex and SpinMutex: a writer is alone (no reader, no other
// writer with it), readers share, a thread may take the shared lock again
// while it holds it even with a writer waiting, and try_lock fails while
// readers are in. Also run under ThreadSanitizer (label unit-concurrency).
#include "util/spin_shared_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "util/spin_mutex.h"

namespace upfs {
namespace {

// One lock under test, and what its holders see: a writer that finds
// anyone else in, or a reader that finds a writer, marks an overlap.
struct ExclusionCheck {
  SpinSharedMutex mu;
  std::atomic<int> readers{0}, writers{0}, max_readers{0};
  std::atomic<bool> overlap{false};
  uint64_t guarded = 0;  // written only under the exclusive lock

  void Write() {
    std::unique_lock<SpinSharedMutex> g(mu);
    if (writers.fetch_add(1) != 0 || readers.load() != 0) overlap = true;
    ++guarded;
    writers.fetch_sub(1);
  }
  // `twice`: the shared lock taken again while held (counts of 2).
  void Read(bool twice) {
    std::shared_lock<SpinSharedMutex> g(mu);
    std::shared_lock<SpinSharedMutex> again(mu, std::defer_lock);
    if (twice) again.lock();
    const int r = readers.fetch_add(1) + 1;
    if (writers.load() != 0) overlap = true;
    int m = max_readers.load();
    while (r > m && !max_readers.compare_exchange_weak(m, r)) {
    }
    volatile uint64_t seen = guarded;  // a read the writers race with, if the lock fails
    (void)seen;
    readers.fetch_sub(1);
  }
};

TEST(SpinSharedMutex, WritersAreAloneAndReadersShare) {
  ExclusionCheck c;
  constexpr int kThreads = 4, kIters = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        if ((i + t) % 4 == 0) c.Write();
        else c.Read(false);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(c.overlap.load());
  EXPECT_EQ(c.guarded, uint64_t(kThreads) * kIters / 4);
  std::printf("most readers in at once: %d\n", c.max_readers.load());
}

// More threads alive at once than there are slots: threads share slots,
// their counts stay right, and the lock excludes all the same.
TEST(SpinSharedMutex, ThreadsBeyondTheSlotsShareThemAndStillExclude) {
  ExclusionCheck c;
  constexpr int kThreads = int(spin_lock_internal::kSlots) + 16, kIters = 400;
  std::atomic<int> started{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      // Every thread takes its slot before any ends (a slot is reused once
      // its thread has ended).
      c.mu.lock_shared();
      c.mu.unlock_shared();
      started.fetch_add(1);
      while (started.load() < kThreads) std::this_thread::yield();
      // The threads that started last (sharing slots with the first, most
      // likely) go on longest: their counts race with the others'.
      const int iters = t >= kThreads - 24 ? 50 * kIters : kIters;
      for (int i = 0; i < iters; ++i) {
        if (i < kIters && (i + t) % 8 == 0) c.Write();
        else c.Read(true);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(c.overlap.load());
  EXPECT_EQ(c.guarded, uint64_t(kThreads) * kIters / 8);
  EXPECT_TRUE(c.mu.try_lock());  // every count went back to 0
  c.mu.unlock();
}

TEST(SpinSharedMutex, ASharedHolderGetsInAgainWhileAWriterWaits) {
  SpinSharedMutex mu;
  mu.lock_shared();
  std::atomic<bool> writer_in{false};
  std::thread w([&] {
    std::unique_lock<SpinSharedMutex> g(mu);
    writer_in = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the writer now waits
  EXPECT_FALSE(writer_in.load());
  mu.lock_shared();  // would deadlock if a waiting writer kept readers out
  EXPECT_FALSE(mu.try_lock());
  mu.unlock_shared();
  EXPECT_FALSE(writer_in.load());
  mu.unlock_shared();
  w.join();
  EXPECT_TRUE(writer_in.load());
  EXPECT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock_shared());
  mu.unlock();
  EXPECT_TRUE(mu.try_lock_shared());
  mu.unlock_shared();
}

TEST(SpinMutex, ExcludesAndCounts) {
  SpinMutex mu;
  uint64_t n = 0;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) {
        std::lock_guard<SpinMutex> g(mu);
        ++n;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(n, 200000u);
}

}  // namespace
}  // namespace upfs
