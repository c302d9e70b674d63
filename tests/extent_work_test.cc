// ExtentWork (src/medium/extent_work.h): a growth step's extents shared by
// the growing thread and helpers, all from the bottom, and how far from
// the bottom the step is done.
#include "medium/extent_work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

using upfs::ExtentWork;

TEST(ExtentWork, TakesEachExtentOnceFromTheBottom) {
  ExtentWork w;
  w.Open(10, 13);
  uint64_t e;
  for (uint64_t want = 10; want < 13; ++want) {
    ASSERT_TRUE(w.Take(&e));
    EXPECT_EQ(e, want);
  }
  EXPECT_FALSE(w.Take(&e));
  w.Close([] {});
  EXPECT_FALSE(w.Take(&e));  // closed: nothing for a late helper
}

// The bottom of the step is reported done only as far as every extent
// below is finished, whoever finished them and in whatever order.
TEST(ExtentWork, FinishReportsTheBottomDoneSoFar) {
  ExtentWork w;
  w.Open(10, 14);
  uint64_t e;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.Take(&e));
  EXPECT_EQ(w.Finish(11), 0u);  // 10 is not done: nothing moves
  EXPECT_EQ(w.Finish(12), 0u);
  EXPECT_EQ(w.Finish(10), 13u);  // 10, 11 and 12 at once
  ASSERT_TRUE(w.Take(&e));
  EXPECT_EQ(w.Finish(13), 14u);
  w.Open(14, 16);  // a new step starts from its own bottom
  ASSERT_TRUE(w.Take(&e));
  EXPECT_EQ(w.Finish(14), 15u);
}

// Threads taking at once: every extent taken exactly once, the bottom
// reported done reaching the top, and Close returning only after the
// helpers finished what they took.
TEST(ExtentWork, RacingHelpersNeitherLoseNorRepeatAnExtent) {
  constexpr uint64_t kExtents = 20000;
  for (int round = 0; round < 20; ++round) {
    ExtentWork w;
    std::vector<std::atomic<int>> taken(kExtents);
    std::atomic<int> done_by_helpers{0};
    std::atomic<bool> start{false}, closed{false};
    std::atomic<int> late{0};
    std::atomic<uint64_t> done_to{0};
    auto finish = [&](uint64_t e) {
      const uint64_t to = w.Finish(e);
      uint64_t cur = done_to.load();
      while (to > cur && !done_to.compare_exchange_weak(cur, to)) {
      }
    };
    w.Open(0, kExtents);
    std::vector<std::thread> helpers;
    for (int h = 0; h < 3; ++h)
      helpers.emplace_back([&] {
        while (!start.load()) {
        }
        for (;;) {
          w.Enter();
          uint64_t e;
          const bool took = w.Take(&e);
          if (took) {
            taken[e].fetch_add(1);
            std::this_thread::yield();  // "works" on it
            finish(e);
            if (closed.load()) late.fetch_add(1);
            done_by_helpers.fetch_add(1);
          }
          w.Leave();
          if (!took) return;
        }
      });
    start.store(true);
    int mine = 0;
    for (uint64_t e; w.Take(&e);) {
      taken[e].fetch_add(1);
      finish(e);
      ++mine;
    }
    w.Close([] { std::this_thread::yield(); });
    closed.store(true);
    for (auto& t : helpers) t.join();
    EXPECT_EQ(late.load(), 0) << "a helper was still working after Close";
    EXPECT_EQ(mine + done_by_helpers.load(), int(kExtents));
    EXPECT_EQ(done_to.load(), kExtents);
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
