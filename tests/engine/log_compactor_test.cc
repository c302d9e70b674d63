// LogCompactor without a File or a container: compaction keeps the state a
// replay reads and shortens the chain, retires the old blocks under EBR,
// waits for its trigger unless forced, and leaves a log to the live GC that
// owns it (but takes over from a dead one).
#include "engine/log_compactor.h"

#include <gtest/gtest.h>

#include "engine/epoch_pin.h"
#include "engine/log_writer.h"
#include "tests/engine/memory_storage.h"

namespace upfs_engine_test {
namespace {

using FRun = format::Run;

// Overwrites vblocks [0, 50) round-robin until the log holds `blocks` log
// blocks: most entries are dead after compaction.
void GrowLog(MemoryStorage* ms, ThreadBlocks* t, uint64_t blocks) {
  LogWriter w(&ms->space(), &ms->source(), ms->root());
  LogPos pos = ms->Start();
  Effect scratch;
  PendingEntry none;
  for (uint32_t i = 0; pos.seq < blocks || pos.slot == 0; ++i) {
    std::vector<FRun> runs;
    ASSERT_TRUE(ms->source().Alloc(t, 1, &runs).ok());
    bool conflicted = false;
    ASSERT_TRUE(w.Commit(t, &scratch, &pos, format::EncodeInline({i % 50, runs[0].lblock, 1, false}),
                         none, [](const Effect&) { return false; }, &conflicted)
                    .ok());
    ASSERT_FALSE(conflicted);
  }
}

struct Snapshot {
  std::vector<uint32_t> map;
  uint64_t size, log_blocks;
};

Snapshot Take(MemoryStorage* ms) {
  BlockTable table;
  ReplayResult res;
  Status st = ms->Replay(&table, &res);
  EXPECT_TRUE(st.ok()) << st.message();
  Snapshot s{{}, table.size(), res.log_blocks.size()};
  for (uint64_t v = 0; v < 64; ++v) s.map.push_back(table.Get(v));
  return s;
}

TEST(LogCompactor, ForcedCompactionKeepsTheStateAndShortensTheChain) {
  MemoryStorage ms(4096);
  ThreadBlocks t;
  GrowLog(&ms, &t, 6);
  const Snapshot before = Take(&ms);
  ASSERT_EQ(before.log_blocks, 6u);
  const uint64_t old_head = ms.head();
  uint32_t slot = ClaimedSlot(ms.epochs());
  {
    EpochPin pin(&ms.epochs(), slot);
    ASSERT_TRUE(LogCompactor(&ms.space(), &ms.source(), ms.root()).Collect(&t, slot, true).ok());
  }
  const Snapshot after = Take(&ms);
  EXPECT_EQ(after.map, before.map);
  EXPECT_EQ(after.size, before.size);
  EXPECT_LT(after.log_blocks, before.log_blocks);
  EXPECT_NE(ms.head(), old_head);
  EXPECT_EQ(ms.words().compact_seq.load(), 6u) << "cursors in blocks below the active one are stale";
  EXPECT_EQ(ms.words().gc_owner.load(), 0u);
  // The five full blocks before the active one wait in limbo for two epochs.
  uint64_t retired = 0;
  for (const ThreadBlocks::Retired& r : t.limbo) retired += r.count;
  EXPECT_EQ(retired, 5u);
  EXPECT_TRUE(ms.bitmap().Test(old_head)) << "not reusable while a reader may be in it";
  ms.source().DrainLimbo(&t, true);
  EXPECT_TRUE(t.limbo.empty()) << "nobody pinned: the epoch moved on";
  ms.epochs().ReleaseSlot(slot);
}

TEST(LogCompactor, WaitsForItsTriggerUnlessForced) {
  MemoryStorage ms(4096);
  ThreadBlocks t;
  GrowLog(&ms, &t, 4);  // below kGcSlackBlocks
  const uint64_t head = ms.head();
  uint32_t slot = ClaimedSlot(ms.epochs());
  EpochPin pin(&ms.epochs(), slot);
  ASSERT_TRUE(LogCompactor(&ms.space(), &ms.source(), ms.root()).Collect(&t, slot, false).ok());
  EXPECT_EQ(ms.head(), head);
  EXPECT_TRUE(t.limbo.empty());
}

TEST(LogCompactor, LeavesTheLogToALiveGcAndTakesOverFromADeadOne) {
  MemoryStorage ms(4096);
  ThreadBlocks t;
  GrowLog(&ms, &t, 6);
  const uint64_t head = ms.head();
  uint32_t slot = ClaimedSlot(ms.epochs());
  EpochPin pin(&ms.epochs(), slot);
  LogCompactor gc(&ms.space(), &ms.source(), ms.root());
  // Slot 77 belongs to a live GC in another process.
  ms.epochs().slot(77)->in_use.store(1);
  ms.liveness().foreign.insert(77);
  ms.words().gc_owner.store(77 + 1);
  ASSERT_TRUE(gc.Collect(&t, slot, true).ok());
  EXPECT_EQ(ms.head(), head) << "compacted under a live GC";
  EXPECT_EQ(ms.words().gc_owner.load(), 78u);
  // Its process dies: the lock goes, and the next GC takes the log over.
  ms.liveness().foreign.erase(77);
  ASSERT_TRUE(gc.Collect(&t, slot, true).ok());
  EXPECT_NE(ms.head(), head);
  EXPECT_EQ(ms.words().gc_owner.load(), 0u);
}

}  // namespace
}  // namespace upfs_engine_test
