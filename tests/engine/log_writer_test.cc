// LogWriter without a File or a container: entries committed at a log's
// tail are what a replay reads, conflicts stop a commit, chains extend, and
// payloads (inline runs or overflow blocks) round-trip.
#include "engine/log_writer.h"

#include <gtest/gtest.h>

#include "engine/epoch_pin.h"
#include "tests/engine/memory_storage.h"

namespace upfs_engine_test {
namespace {

using FRun = format::Run;

struct Writer {
  explicit Writer(MemoryStorage* s)
      : ms(s), w(&s->space(), &s->source(), s->root()), pos(s->Start()) {}
  // Commits an inline mapping of vblock v to fresh block(s); returns the block.
  uint32_t Map(uint32_t v, bool* conflicted = nullptr, bool touch_conflicts = false) {
    std::vector<FRun> runs;
    EXPECT_TRUE(ms->source().Alloc(&t, 1, &runs).ok());
    uint64_t e = format::EncodeInline({v, runs[0].lblock, 1, false});
    bool c = false;
    Status st = w.Commit(&t, &scratch, &pos, e, pending,
                         [&](const Effect& eff) { return touch_conflicts && eff.TouchesBlocks(v, v + 1); },
                         &c);
    EXPECT_TRUE(st.ok()) << st.message();
    if (conflicted) *conflicted = c;
    if (c) ms->source().FreeRuns(&t, runs);
    return c ? 0 : runs[0].lblock;
  }
  MemoryStorage* ms;
  LogWriter w;
  LogPos pos;
  ThreadBlocks t;
  Effect scratch;
  PendingEntry pending;
};

TEST(LogWriter, CommittedInlineEntriesAreWhatAReplayReads) {
  MemoryStorage ms;
  Writer a(&ms);
  uint32_t l0 = a.Map(0), l7 = a.Map(7), l0b = a.Map(0);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.entries, 3u);
  EXPECT_EQ(table.Get(0), l0b);
  EXPECT_NE(l0, l0b);
  EXPECT_EQ(table.Get(7), l7);
  EXPECT_EQ(table.Get(1), 0u);
  EXPECT_EQ(res.tail.slot, 3u);
}

TEST(LogWriter, AnEntryCommittedSinceTheSnapshotStopsAConflictingCommit) {
  MemoryStorage ms;
  Writer a(&ms), b(&ms);  // both start from the same snapshot
  uint32_t mine = a.Map(5);
  bool conflicted = false;
  EXPECT_EQ(b.Map(5, &conflicted, /*touch_conflicts=*/true), 0u);
  EXPECT_TRUE(conflicted);
  EXPECT_EQ(b.pos.slot, 1u) << "the scan moved past the entry it saw";
  // Not conflicting: it lands after a's entry.
  uint32_t other = b.Map(6, &conflicted, true);
  EXPECT_FALSE(conflicted);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.entries, 2u);
  EXPECT_EQ(table.Get(5), mine);
  EXPECT_EQ(table.Get(6), other);
}

TEST(LogWriter, AFullBlockIsFollowedByANewLinkedOne) {
  MemoryStorage ms;
  Writer a(&ms);
  const uint32_t n = format::kSlotsPerLogBlock + 10;
  for (uint32_t i = 0; i < n; ++i) a.Map(i % 100);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.entries, n);
  ASSERT_EQ(res.log_blocks.size(), 2u);
  EXPECT_EQ(res.log_blocks[0], MemoryStorage::kFirstLogBlock);
  EXPECT_TRUE(ms.bitmap().Test(res.log_blocks[1])) << "the new log block is taken";
  EXPECT_EQ(a.pos.seq, 2u);
  EXPECT_FALSE(a.w.TakeGcWanted()) << "two blocks are far below the GC trigger";
}

TEST(LogWriter, PayloadsRoundTripInlineAndThroughOverflowBlocks) {
  for (size_t nruns : {size_t(3), size_t(300)}) {  // over kMaxInlineRuns: overflow
    MemoryStorage ms;
    Writer a(&ms);
    std::vector<FRun> runs;
    for (size_t i = 0; i < nruns; ++i) {
      std::vector<FRun> one;
      ASSERT_TRUE(ms.source().Alloc(&a.t, 2, &one).ok());  // 2 blocks: every run its own
      runs.push_back(FRun{one[0].lblock, 1});
      ms.source().Free(&a.t, one[0].lblock + 1, 1);  // keeps the runs apart
    }
    const uint64_t size = nruns * format::kBlockSize - 100;
    ASSERT_TRUE(a.w.BuildPayload(&a.t, &a.pending, 10, runs, Effect::kMax, 10 * format::kBlockSize + size).ok());
    EXPECT_EQ(!a.pending.overflow.empty(), nruns > format::kMaxInlineRuns);
    bool conflicted = true;
    ASSERT_TRUE(a.w.Commit(&a.t, &a.scratch, &a.pos, 0, a.pending, [](const Effect&) { return false; },
                           &conflicted).ok());
    EXPECT_FALSE(conflicted);
    BlockTable table;
    ReplayResult res;
    ASSERT_TRUE(ms.Replay(&table, &res).ok());
    EXPECT_EQ(table.size(), 10 * format::kBlockSize + size);
    for (size_t i = 0; i < nruns; ++i) ASSERT_EQ(table.Get(10 + i), runs[i].lblock) << i;
    EXPECT_EQ(res.overflow.size(), a.pending.overflow.size()) << "the log owns the overflow blocks";
  }
}

TEST(LogWriter, APayloadThatDoesNotFitPadsTheBlockAndGoesToTheNext) {
  MemoryStorage ms;
  Writer a(&ms);
  for (uint32_t i = 0; i < format::kSlotsPerLogBlock - 3; ++i) a.Map(1);
  std::vector<FRun> runs{FRun{0, 4}};  // a hole run: 4 words of payload at least
  ASSERT_TRUE(a.w.BuildPayload(&a.t, &a.pending, 0, runs, Effect::kSet, 4 * format::kBlockSize).ok());
  bool conflicted = true;
  ASSERT_TRUE(a.w.Commit(&a.t, &a.scratch, &a.pos, 0, a.pending, [](const Effect&) { return false; },
                         &conflicted).ok());
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.log_blocks.size(), 2u);
  EXPECT_EQ(table.size(), 4 * format::kBlockSize);
  EXPECT_EQ(table.Get(1), 0u) << "the size-set payload unmapped it";
}

TEST(LogWriter, DroppingAPayloadGivesItsOverflowBlocksBack) {
  MemoryStorage ms;
  Writer a(&ms);
  std::vector<FRun> runs;  // alternating kept blocks and holes: 300 runs
  for (uint32_t i = 0; i < 300; ++i) runs.push_back(FRun{i % 2 ? 0u : format::kKeepBlock, 1});
  ASSERT_TRUE(a.w.BuildPayload(&a.t, &a.pending, 0, runs, Effect::kNone, 0).ok());
  ASSERT_EQ(a.pending.overflow.size(), 1u);
  const FRun ov = a.pending.overflow[0];
  a.w.DropPayload(&a.t, &a.pending);
  EXPECT_TRUE(a.pending.overflow.empty());
  EXPECT_TRUE(a.pending.empty());
  uint32_t again = 0;
  ASSERT_TRUE(ms.source().AllocOne(&a.t, &again).ok());
  EXPECT_GE(again, ov.lblock) << "the thread's free list has them";
  EXPECT_LT(again, ov.lblock + ov.count);
}

}  // namespace
}  // namespace upfs_engine_test
