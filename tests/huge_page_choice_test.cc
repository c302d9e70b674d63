// HugePageChoice (src/medium/huge_page_choice.h): huge pages while
// collapses cost less than small pages, judged on the median.
#include "medium/huge_page_choice.h"

#include <gtest/gtest.h>

namespace {

using upfs::HugePageChoice;
constexpr int64_t kMs = 1'000'000;

TEST(HugePageChoice, CheapCollapsesKeepHugePagesAndAnOutlierDoesNotTurnThemOff) {
  HugePageChoice h;
  int64_t now = 10 * kMs;
  EXPECT_EQ(h.Now(now), HugePageChoice::kHuge);
  for (int i = 0; i < 40; ++i) {
    // One collapse in eight takes 5 ms (outliers as measured), the rest 0.2.
    h.NoteCollapse(HugePageChoice::kHuge, i % 8 == 3 ? 5 * kMs : kMs / 5, true, now);
    EXPECT_EQ(h.Now(now), HugePageChoice::kHuge) << "after collapse " << i;
    now += kMs;
  }
}

TEST(HugePageChoice, SlowCollapsesTurnToSmallPagesAndACheapProbeBack) {
  HugePageChoice h;
  int64_t now = 0;
  int n = 0;
  while (h.Now(now) == HugePageChoice::kHuge && n < 20) {
    h.NoteCollapse(HugePageChoice::kHuge, 5 * kMs, true, now);  // compaction every time
    ++n;
  }
  EXPECT_EQ(h.Now(now), HugePageChoice::kSmall);
  EXPECT_EQ(n, HugePageChoice::kSamples / 2) << "turned off once half the recent collapses were slow";
  h.NoteSmall(kMs);
  EXPECT_EQ(h.Now(now + HugePageChoice::kHugeOffFor - 1), HugePageChoice::kSmall);
  now += HugePageChoice::kHugeOffFor;
  ASSERT_EQ(h.Now(now), HugePageChoice::kProbe);
  h.NoteCollapse(HugePageChoice::kProbe, 5 * kMs, true, now);  // still slow: another second off
  EXPECT_EQ(h.Now(now), HugePageChoice::kSmall);
  now += HugePageChoice::kHugeOffFor;
  ASSERT_EQ(h.Now(now), HugePageChoice::kProbe);
  h.NoteCollapse(HugePageChoice::kProbe, kMs / 5, true, now);  // memory compacted meanwhile
  EXPECT_EQ(h.Now(now), HugePageChoice::kHuge);
  h.NoteCollapse(HugePageChoice::kHuge, kMs / 5, true, now);
  EXPECT_EQ(h.Now(now), HugePageChoice::kHuge);
}

TEST(HugePageChoice, FailedCollapsesCountAsEndless) {
  HugePageChoice h;
  for (int i = 0; i < HugePageChoice::kSamples / 2; ++i) h.NoteCollapse(HugePageChoice::kHuge, 0, false, 0);
  EXPECT_EQ(h.Now(0), HugePageChoice::kSmall);
}

TEST(HugePageChoice, ThePriceOfSmallPagesIsLearned) {
  HugePageChoice h;
  // Small pages that cost 6 ms make 5 ms collapses worth it.
  for (int i = 0; i < 20; ++i) h.NoteSmall(6 * kMs);
  for (int i = 0; i < 20; ++i) h.NoteCollapse(HugePageChoice::kHuge, 5 * kMs, true, 0);
  EXPECT_EQ(h.Now(0), HugePageChoice::kHuge);
}

}  // namespace
