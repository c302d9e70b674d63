// MappingShare (src/medium/mapping_share.h): while growth is asked for,
// mapping work takes a share of each growth step, pays back what it
// overspends, banks nothing from steps that had no mapping work, and takes
// nothing while a thread waits for the growth.
#include "medium/mapping_share.h"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using upfs::MappingShare;
using std::chrono::milliseconds;
using std::chrono::microseconds;

// Mapping steps of `step` run while allowed; how many did.
int StepsWhileGrowing(MappingShare* s, MappingShare::Duration step) {
  int n = 0;
  while (s->MayMapWhileGrowing(/*growth_awaited=*/false) && n < 100000) {
    s->NoteMapping(step, /*growth_asked=*/true);
    ++n;
  }
  return n;
}

TEST(MappingShare, NothingBeforeTheFirstGrowthStep) {
  MappingShare s;
  EXPECT_FALSE(s.MayMapWhileGrowing(false));
}

// A prefill's long growth with no mapping work, then a remap: the remap
// gets one step's share, not the quarter of the whole growth.
TEST(MappingShare, AGrowthWithoutMappingWorkBanksNothing) {
  MappingShare s;
  for (int i = 0; i < 100; ++i) s.NoteGrowth(milliseconds(10));
  // 2.5 ms of share: steps of 1 ms run while something is left (3).
  EXPECT_EQ(StepsWhileGrowing(&s, milliseconds(1)), 3);
}

TEST(MappingShare, WhatMappingOverspendsIsPaidBackFromLaterSteps) {
  MappingShare s;
  s.NoteGrowth(milliseconds(4));  // 1 ms of share
  ASSERT_TRUE(s.MayMapWhileGrowing(false));
  s.NoteMapping(milliseconds(5), true);  // an extent that took 5 ms: 4 ms owed
  EXPECT_FALSE(s.MayMapWhileGrowing(false));
  for (int i = 1; i <= 4; ++i) {
    s.NoteGrowth(milliseconds(4));  // pays back 1 ms a step
    EXPECT_FALSE(s.MayMapWhileGrowing(false)) << "after " << i << " growth steps of 4 ms";
  }
  s.NoteGrowth(milliseconds(4));
  EXPECT_TRUE(s.MayMapWhileGrowing(false)) << "the debt is paid: the fifth step's share is free";
}

TEST(MappingShare, MappingWhileNoGrowthIsAskedForCostsGrowthNothing) {
  MappingShare s;
  s.NoteMapping(milliseconds(200), /*growth_asked=*/false);
  s.NoteGrowth(milliseconds(4));
  EXPECT_TRUE(s.MayMapWhileGrowing(false));
}

// A writer out of space waits for the growth: the step's share waits for
// it, and is there again once nobody waits.
TEST(MappingShare, NothingWhileAThreadWaitsForTheGrowth) {
  MappingShare s;
  s.NoteGrowth(milliseconds(40));
  EXPECT_FALSE(s.MayMapWhileGrowing(/*growth_awaited=*/true));
  EXPECT_TRUE(s.MayMapWhileGrowing(/*growth_awaited=*/false));
}

// Growth step after step with mapping work pending all along: mapping gets
// its share every step (it is never starved), and no more than the share
// over the whole run, within one step of it.
TEST(MappingShare, GrowthStepAfterStepGivesMappingItsShareAndNoMore) {
  MappingShare s;
  const auto step = microseconds(300);
  MappingShare::Duration growth{}, mapping{};
  for (int i = 0; i < 200; ++i) {
    const MappingShare::Duration t = milliseconds(2 + i % 5);
    s.NoteGrowth(t);
    growth += t;
    const int n = StepsWhileGrowing(&s, step);
    mapping += n * step;
    EXPECT_LE(n, 1 + int(t / MappingShare::kShare / step)) << "growth step " << i;
  }
  EXPECT_GE(mapping, growth / MappingShare::kShare - step);
  EXPECT_LE(mapping, growth / MappingShare::kShare + step);
}

}  // namespace
