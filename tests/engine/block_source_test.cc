// BlockSource without a File or a container: runs are contiguous, a
// thread's freed blocks come back to it first, the space grows when the
// bitmap is full, retired blocks wait for the epoch, and a PendingBlocks
// guard gives back what an operation took unless its commit kept it.
#include "engine/block_source.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/epoch_pin.h"
#include "tests/engine/memory_storage.h"

namespace upfs_engine_test {
namespace {

using FRun = format::Run;

bool AllTaken(MemoryStorage& ms, const std::vector<FRun>& runs, bool taken) {
  for (const FRun& r : runs)
    for (uint32_t i = 0; i < r.count; ++i)
      if (ms.bitmap().Test(r.lblock + i) != taken) return false;
  return true;
}

TEST(BlockSource, ClaimsContiguousRunsReusesAndGrows) {
  MemoryStorage ms(256);
  BlockSource& src = ms.source();
  ThreadBlocks t;
  std::vector<FRun> runs;
  ASSERT_TRUE(src.Alloc(&t, 100, &runs).ok());
  uint64_t total = 0;
  for (const FRun& r : runs) {
    total += r.count;
    EXPECT_GE(r.lblock, src.reserved_blocks()) << "the container's own blocks are never handed out";
  }
  EXPECT_EQ(total, 100u);
  EXPECT_LE(runs.size(), 3u);
  EXPECT_TRUE(AllTaken(ms, runs, true));
  src.Free(&t, runs[0].lblock, 1);
  uint32_t again = 0;
  ASSERT_TRUE(src.AllocOne(&t, &again).ok());
  EXPECT_EQ(again, runs[0].lblock) << "the thread's own free list first";
  std::vector<FRun> big;
  ASSERT_TRUE(src.Alloc(&t, 1000, &big).ok());  // more than the 256 blocks there are
  EXPECT_GT(ms.space().grows, 0);
  EXPECT_GE(ms.bitmap().capacity(), 1000u);
  src.FreeRuns(&t, big);
  src.ReturnAll(&t);
  EXPECT_TRUE(AllTaken(ms, big, false));
}

TEST(BlockSource, RetiredBlocksWaitUntilNoReaderCanHoldThem) {
  MemoryStorage ms;
  BlockSource& src = ms.source();
  ThreadBlocks writer;
  std::vector<FRun> runs;
  ASSERT_TRUE(src.Alloc(&writer, 1, &runs).ok());
  const uint32_t reader = ms.epochs().ClaimSlot();
  {
    EpochPin pin(&ms.epochs(), reader);  // a reader inside the epoch of the retirement
    src.Retire(&writer, runs[0].lblock, 1);
    src.DrainLimbo(&writer, true);
    EXPECT_EQ(writer.limbo.size(), 1u) << "freed under a pinned reader";
  }
  src.DrainLimbo(&writer, true);
  EXPECT_TRUE(writer.limbo.empty());
  ASSERT_FALSE(writer.free.empty());
  EXPECT_EQ(writer.free.back(), runs[0].lblock);
  ms.epochs().ReleaseSlot(reader);
}

TEST(BlockSource, PendingBlocksGiveBackWhatNoCommitKept) {
  MemoryStorage ms;
  BlockSource& src = ms.source();
  ThreadBlocks t;
  std::vector<FRun> dropped, kept;
  {
    PendingBlocks guard(&src, &t, &dropped);
    ASSERT_TRUE(src.Alloc(&t, 3, &dropped).ok());
  }
  EXPECT_EQ(t.free.size(), 3u) << "back with the thread";
  {
    PendingBlocks guard(&src, &t, &kept);
    ASSERT_TRUE(src.Alloc(&t, 2, &kept).ok());
    guard.Keep();  // the commit took them
  }
  EXPECT_EQ(t.free.size(), 3u) << "a run of two comes from the chunk, and stays taken";
  EXPECT_TRUE(AllTaken(ms, kept, true));
  for (const FRun& r : kept)
    for (uint32_t i = 0; i < r.count; ++i)
      EXPECT_EQ(std::count(t.free.begin(), t.free.end(), r.lblock + i), 0);
}

}  // namespace
}  // namespace upfs_engine_test
