// SpinSharedMutex and SpinMutex: a writer is alone (no reader, no other
// writer with it, readers entering with a shared fence too), readers share, a thread may take the shared lock again
// while it holds it even with a writer waiting, and try_lock fails while
// readers are in. Also run under ThreadSanitizer (label unit-concurrency).
#include "util/spin_shared_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "tests/sanitized.h"
#include "util/spin_mutex.h"

namespace upfs {
namespace {

// One lock under test, and what its holders see: a writer that finds
// anyone else in, or a reader that finds a writer, marks an overlap.
struct ExclusionCheck {
  SpinSharedMutex mu;
  std::atomic<int> readers{0}, writers{0}, max_readers{0};
  std::atomic<bool> overlap{false}, misordered{false};
  uint64_t guarded = 0;  // written only under the exclusive lock

  void Write() {
    std::unique_lock<SpinSharedMutex> g(mu);
    if (writers.fetch_add(1) != 0 || readers.load() != 0) overlap = true;
    ++guarded;
    writers.fetch_sub(1);
  }
  // `twice`: the shared lock taken again while held (counts of 2).
  // `fenced`: taken with lock_shared_sharing_fence, whose announcement and
  // confirmation each run once, in that order.
  void Read(bool twice, bool fenced = false) {
    std::shared_lock<SpinSharedMutex> g(mu, std::defer_lock);
    if (fenced) {
      int step = 0;
      mu.lock_shared_sharing_fence([&] { step = step == 0 ? 1 : -1; }, [&] { step = step == 1 ? 2 : -1; });
      if (step != 2) misordered = true;
      g = std::shared_lock<SpinSharedMutex>(mu, std::adopt_lock);
    } else {
      g.lock();
    }
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

// Readers that take the lock with a fence they share (the pool's pin and
// index lock: Pool::PinAndLockLatest) are kept out by a writer as others
// are. It is a store-load pattern: without the fence the reader's count
// can wait in its store buffer while it reads the writer word, and a
// writer that just took the word finds no reader. So a reader and a
// writer start each round together, many rounds, and a third thread
// mixes in as before.
TEST(SpinSharedMutex, ReadersSharingTheirFenceAreExcludedAsOthers) {
  ExclusionCheck c;
  const int rounds = kSanitized ? 50000 : 1000000;
  std::atomic<int> arrived[2] = {{0}, {0}};
  auto together = [&](int side, int round) {
    arrived[side].store(round, std::memory_order_release);
    while (arrived[1 - side].load(std::memory_order_acquire) < round) {
    }
  };
  std::thread writer([&] {
    for (int r = 1; r <= rounds; ++r) {
      together(0, r);
      c.Write();
    }
  });
  std::thread reader([&] {
    for (int r = 1; r <= rounds; ++r) {
      together(1, r);
      c.Read(r % 7 == 0, /*fenced=*/true);
    }
  });
  writer.join();
  reader.join();
  EXPECT_FALSE(c.overlap.load());
  EXPECT_FALSE(c.misordered.load());
  EXPECT_EQ(c.guarded, uint64_t(rounds));
  EXPECT_TRUE(c.mu.try_lock());  // every count went back to 0
  c.mu.unlock();
}

// More threads alive at once than there are slots: the last slot is
// shared, its counts stay right (atomic read-modify-writes, fenced entry
// or not), and the lock excludes all the same.
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
        else c.Read(true, /*fenced=*/i % 2 == 0);
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
