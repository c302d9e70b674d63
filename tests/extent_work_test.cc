// ExtentWork (src/medium/extent_work.h): a growth step's extents shared by
// the growing thread (from the bottom) and helpers (from the top).
#include "medium/extent_work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

using upfs::ExtentWork;

TEST(ExtentWork, BottomAndTopTakeEachExtentOnce) {
  ExtentWork w;
  w.Open(10, 14);
  uint64_t e;
  ASSERT_TRUE(w.TakeLow(&e));
  EXPECT_EQ(e, 10u);
  ASSERT_TRUE(w.TakeHigh(&e));
  EXPECT_EQ(e, 13u);
  ASSERT_TRUE(w.TakeHigh(&e));
  EXPECT_EQ(e, 12u);
  ASSERT_TRUE(w.TakeLow(&e));
  EXPECT_EQ(e, 11u);
  EXPECT_FALSE(w.TakeLow(&e));
  EXPECT_FALSE(w.TakeHigh(&e));
  w.Close([] {});
  EXPECT_FALSE(w.TakeHigh(&e));  // closed: nothing for a late helper
}

// Threads taking from both ends at once: every extent taken exactly once,
// and Close returns only after the helpers finished what they took.
TEST(ExtentWork, RacingHelpersNeitherLoseNorRepeatAnExtent) {
  constexpr uint64_t kExtents = 20000;
  for (int round = 0; round < 20; ++round) {
    ExtentWork w;
    std::vector<std::atomic<int>> taken(kExtents);
    std::atomic<int> done_by_helpers{0};
    std::atomic<bool> start{false}, closed{false};
    std::atomic<int> late{0};
    w.Open(0, kExtents);
    std::vector<std::thread> helpers;
    for (int h = 0; h < 3; ++h)
      helpers.emplace_back([&] {
        while (!start.load()) {
        }
        for (;;) {
          w.Enter();
          uint64_t e;
          const bool took = w.TakeHigh(&e);
          if (took) {
            taken[e].fetch_add(1);
            std::this_thread::yield();  // "works" on it
            if (closed.load()) late.fetch_add(1);
            done_by_helpers.fetch_add(1);
          }
          w.Leave();
          if (!took) return;
        }
      });
    start.store(true);
    int mine = 0;
    for (uint64_t e; w.TakeLow(&e);) {
      taken[e].fetch_add(1);
      ++mine;
    }
    w.Close([] { std::this_thread::yield(); });
    closed.store(true);
    for (auto& t : helpers) t.join();
    EXPECT_EQ(late.load(), 0) << "a helper was still working after Close";
    EXPECT_EQ(mine + done_by_helpers.load(), int(kExtents));
    for (uint64_t e = 0; e < kExtents; ++e) ASSERT_EQ(taken[e].load(), 1) << "extent " << e;
  }
}

TEST(ExtentWork, AFailureAndSmallPagesAreReportedForTheStep) {
  ExtentWork w;
  w.Open(0, 2);
  EXPECT_EQ(w.failure(), 0);
  EXPECT_FALSE(w.any_small_pages());
  w.NoteSmallPages();
  w.Fail(ENOSPC);
  EXPECT_TRUE(w.any_small_pages());
  EXPECT_EQ(w.failure(), ENOSPC);
  w.Open(2, 4);  // a new step starts clean
  EXPECT_EQ(w.failure(), 0);
  EXPECT_FALSE(w.any_small_pages());
}

}  // namespace
