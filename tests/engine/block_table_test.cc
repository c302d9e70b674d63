// BlockTable: applying effects, growth, the cursor.
#include <gtest/gtest.h>

#include "engine/block_table.h"
#include "engine/log.h"
#include "format/format.h"

namespace upfs_engine_test {
namespace {

using namespace upfs;
using namespace upfs::format;

TEST(BlockTable, AppliesInlineAndPayloadEffects) {
  BlockTable t;
  Effect e;
  e.vblock = 10;
  e.nblocks = 3;
  e.runs = {format::Run{100, 3}};
  e.size_op = Effect::kMax;
  e.new_size = 13 * kBlockSize;
  ASSERT_TRUE(t.Apply(e).ok());
  EXPECT_EQ(t.Get(10), 100u);
  EXPECT_EQ(t.Get(12), 102u);
  EXPECT_EQ(t.Get(13), 0u);
  EXPECT_EQ(t.size(), 13 * kBlockSize);
  EXPECT_EQ(t.mapped_blocks(), 3u);
  // kMax never shrinks.
  e.new_size = 5;
  ASSERT_TRUE(t.Apply(e).ok());
  EXPECT_EQ(t.size(), 13 * kBlockSize);
  // A keep run leaves the mapping, a hole run unmaps.
  Effect k;
  k.vblock = 10;
  k.nblocks = 3;
  k.runs = {format::Run{kKeepBlock, 1}, format::Run{0, 1}, format::Run{kKeepBlock, 1}};
  ASSERT_TRUE(t.Apply(k).ok());
  EXPECT_EQ(t.Get(10), 100u);
  EXPECT_EQ(t.Get(11), 0u);
  EXPECT_EQ(t.Get(12), 102u);
  EXPECT_EQ(t.mapped_blocks(), 2u);
  // kSet truncates and unmaps everything past the new size.
  Effect s;
  s.size_op = Effect::kSet;
  s.new_size = 10 * kBlockSize + 1;
  ASSERT_TRUE(t.Apply(s).ok());
  EXPECT_EQ(t.size(), 10 * kBlockSize + 1);
  EXPECT_EQ(t.Get(10), 100u);
  EXPECT_EQ(t.Get(12), 0u);
  EXPECT_EQ(t.mapped_blocks(), 1u);
}

TEST(BlockTable, GrowsWithoutLosingEntries) {
  BlockTable t;
  for (uint32_t v = 0; v < 100000; v += 7) t.Set(v, v + 1);
  for (uint32_t v = 0; v < 100000; v += 7) ASSERT_EQ(t.Get(v), v + 1);
  EXPECT_EQ(t.Get(1), 0u);
}

TEST(BlockTable, CursorIsConsistentTriple) {
  BlockTable t;
  t.set_cursor(LogPos{7, 509, 123456789012ull, 0});
  LogPos p = t.cursor();
  EXPECT_EQ(p.lblock, 7u);
  EXPECT_EQ(p.slot, 509u);
  EXPECT_EQ(p.seq, 123456789012ull);
}

}  // namespace
}  // namespace upfs_engine_test
