// Log decoding and replay over an in-memory container: effects, and the
// validation of what a replay reads.
#include <gtest/gtest.h>

#include "engine/block_table.h"
#include "engine/log.h"
#include "format/format.h"
#include "tests/engine/memory_storage.h"

namespace upfs_engine_test {
namespace {

using namespace upfs;
using namespace upfs::format;

TEST(Log, EffectConflictPredicates) {
  Effect e;
  e.vblock = 5;
  e.nblocks = 2;
  EXPECT_TRUE(e.TouchesBlocks(6, 7));
  EXPECT_FALSE(e.TouchesBlocks(7, 9));
  EXPECT_FALSE(e.TouchesBlocks(0, 5));
  e.size_op = Effect::kSet;
  EXPECT_TRUE(e.TouchesBlocks(100, 101));  // a truncate conflicts with everything
}

// A replay checks what follows the tail: a nonzero word after the first
// empty slot is damage, named by its log block.
TEST(Log, ReplayRejectsAWordAfterTheTail) {
  MemoryStorage ms;
  auto* lb = reinterpret_cast<LogBlock*>(ms.space().base() + (MemoryStorage::kFirstLogBlock << kBlockShift));
  lb->slots[0].store(EncodeInline({0, 2, 1, true}));
  ms.bitmap().Set(2);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(table.Get(0), 2u);
  EXPECT_EQ(table.size(), kBlockSize);
  lb->slots[400].store(0x1234);
  BlockTable again;
  Status st = ms.Replay(&again, &res);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("log block 1"), std::string::npos) << st.message();
}

TEST(Log, DecodingRefusesBlocksPastTheEndOfTheSpace) {
  MemoryStorage ms(64);
  auto* lb = reinterpret_cast<LogBlock*>(ms.space().base() + (MemoryStorage::kFirstLogBlock << kBlockShift));
  lb->slots[0].store(EncodeInline({0, 1000, 1, true}));  // block 1000 of 64
  BlockTable table;
  ReplayResult res;
  EXPECT_EQ(ms.Replay(&table, &res).err(), EUCLEAN);
}

}  // namespace
}  // namespace upfs_engine_test
