// HugePageChoice (src/medium/huge_page_choice.h): huge pages while
// collapses cost less than small pages, judged on the median, and off at
// once after one very slow collapse; slow probes back off.
#include "medium/huge_page_choice.h"

#include <gtest/gtest.h>

#include <algorithm>

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
  h.NoteCollapse(HugePageChoice::kProbe, 5 * kMs, true, now);  // still slow: twice as long off
  EXPECT_EQ(h.Now(now), HugePageChoice::kSmall);
  EXPECT_EQ(h.Now(now + 2 * HugePageChoice::kHugeOffFor - 1), HugePageChoice::kSmall);
  now += 2 * HugePageChoice::kHugeOffFor;
  ASSERT_EQ(h.Now(now), HugePageChoice::kProbe);
  h.NoteCollapse(HugePageChoice::kProbe, kMs / 5, true, now);  // memory compacted meanwhile
  EXPECT_EQ(h.Now(now), HugePageChoice::kHuge);
  h.NoteCollapse(HugePageChoice::kHuge, kMs / 5, true, now);
  EXPECT_EQ(h.Now(now), HugePageChoice::kHuge);
}

// A freshly booted VM's memory, which its host had not backed yet: single
// collapses took up to 36 ms on the appending thread, and four of them
// passed before the median turned huge pages off.
TEST(HugePageChoice, AVerySlowCollapseTurnsHugePagesOffAtOnce) {
  HugePageChoice h;
  h.NoteCollapse(HugePageChoice::kHuge, 36 * kMs, true, 0);
  EXPECT_EQ(h.Now(0), HugePageChoice::kSmall);
  EXPECT_EQ(h.Now(HugePageChoice::kHugeOffFor), HugePageChoice::kProbe);
  // Just under the bound, one collapse is an outlier the median judges.
  HugePageChoice g;
  g.NoteCollapse(HugePageChoice::kHuge, HugePageChoice::kVerySlow * kMs, true, 0);
  EXPECT_EQ(g.Now(0), HugePageChoice::kHuge);
}

// Each probe that finds collapses still slow costs one on someone's path:
// the off period doubles, up to kHugeOffMax, and starts again at
// kHugeOffFor once huge pages are back.
TEST(HugePageChoice, SlowProbesBackOffAndACheapOneStartsOver) {
  HugePageChoice h;
  int64_t now = 0;
  h.NoteCollapse(HugePageChoice::kHuge, 36 * kMs, true, now);
  int64_t expect = HugePageChoice::kHugeOffFor;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(h.Now(now + expect - 1), HugePageChoice::kSmall) << "probe " << i;
    now += expect;
    ASSERT_EQ(h.Now(now), HugePageChoice::kProbe) << "probe " << i;
    h.NoteCollapse(HugePageChoice::kProbe, 36 * kMs, true, now);
    expect = std::min(2 * expect, HugePageChoice::kHugeOffMax);
  }
  EXPECT_EQ(expect, HugePageChoice::kHugeOffMax);
  now += expect;
  ASSERT_EQ(h.Now(now), HugePageChoice::kProbe);
  h.NoteCollapse(HugePageChoice::kProbe, kMs / 5, true, now);
  EXPECT_EQ(h.Now(now), HugePageChoice::kHuge);
  h.NoteCollapse(HugePageChoice::kHuge, 36 * kMs, true, now);
  EXPECT_EQ(h.Now(now + HugePageChoice::kHugeOffFor - 1), HugePageChoice::kSmall);
  EXPECT_EQ(h.Now(now + HugePageChoice::kHugeOffFor), HugePageChoice::kProbe);
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
