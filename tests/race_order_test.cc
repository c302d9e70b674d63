// Writes, flips, appends, punches and truncates against one another, each
// pair in the order the engine finds hardest: the second committed between
// the first's snapshot and its commit (race_at_fence.h). The first must
// notice and redo its work over the second's result, as if it had come
// after it: every byte of the file is then what that order gives.
#include <linux/falloc.h>

#include "race_at_fence.h"

namespace upfs_race {
namespace {

using RaceOrder = RaceFixture;

constexpr uint64_t kThree = 3 * kBlock;

// A granule flip inside block 1 meets a truncate into that block, below
// the flip's bytes: redone after it, the write extends the file again.
TEST_F(RaceOrder, AFlipMeetsATruncateIntoItsBlock) {
  Write(0, kThree, 0x11);
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(kThree, kBlock + 1000, 0x11);
    ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(kBlock + 500)), 0);
  });
  Write(kBlock + 1000, 200, 0x22);
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), kBlock + 1200);
  ExpectBytes(all, 0, kBlock + 500, 0x11);
  ExpectBytes(all, kBlock + 500, kBlock + 1000, 0);
  ExpectBytes(all, kBlock + 1000, kBlock + 1200, 0x22);
}

// The same, the truncate going below the block and back: block 1 is a
// hole when the flip is redone.
TEST_F(RaceOrder, AFlipMeetsATruncateBelowItsBlockAndBack) {
  Write(0, kThree, 0x11);
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(kThree, kBlock + 1000, 0x11);
    ASSERT_EQ(upfs_ftruncate(fd_, 100), 0);
    ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(kThree)), 0);
  });
  Write(kBlock + 1000, 200, 0x22);
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), kThree);
  ExpectBytes(all, 0, 100, 0x11);
  ExpectBytes(all, 100, kBlock + 1000, 0);
  ExpectBytes(all, kBlock + 1000, kBlock + 1200, 0x22);
  ExpectBytes(all, kBlock + 1200, kThree, 0);
}

// Two flips of one block: the second finds the block's granule claim
// held, copies on write instead and commits first; the first, redone,
// keeps the second's bytes.
TEST_F(RaceOrder, AFlipMeetsAnotherWriteOfItsBlock) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, kBlock + 100, 0x11, kBlock + 1000, 200, 0x33);
  Write(kBlock + 100, 200, 0x22);
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), kThree);
  ExpectBytes(all, 0, kBlock + 100, 0x11);
  ExpectBytes(all, kBlock + 100, kBlock + 300, 0x22);
  ExpectBytes(all, kBlock + 300, kBlock + 1000, 0x11);
  ExpectBytes(all, kBlock + 1000, kBlock + 1200, 0x33);
  ExpectBytes(all, kBlock + 1200, kThree, 0x11);
}

// An append that spills past its tail block (bytes in place under the
// tail claim, the rest in a new block) meets a copy on write of the tail
// block: redone, it writes its bytes into the new tail block.
TEST_F(RaceOrder, AnAppendInPlaceMeetsACopyOnWriteOfItsBlock) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  RaceAWrite(s, 0, 0x11, 0, kBlock + 50, 0x33, true);
  Write(s, 5000, 0x22);
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), s + 5000);
  ExpectBytes(all, 0, kBlock + 50, 0x33);
  ExpectBytes(all, kBlock + 50, s, 0x11);
  ExpectBytes(all, s, s + 5000, 0x22);
}

// A punched hole in block 1 meets a flip elsewhere in the block: redone,
// the punch copies the flip's bytes.
TEST_F(RaceOrder, APunchMeetsAFlipInItsBlock) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, kBlock + 2000, 0x11, kBlock + 100, 200, 0x44);
  ASSERT_EQ(upfs_fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(kBlock + 2000),
                           1000),
            0)
      << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), kThree);
  ExpectBytes(all, 0, kBlock + 100, 0x11);
  ExpectBytes(all, kBlock + 100, kBlock + 300, 0x44);
  ExpectBytes(all, kBlock + 300, kBlock + 2000, 0x11);
  ExpectBytes(all, kBlock + 2000, kBlock + 3000, 0);
  ExpectBytes(all, kBlock + 3000, kThree, 0x11);
}

// A truncate into block 1 (a copy of the block's first bytes) meets a flip
// below the new size: redone, its copy holds the flip's bytes.
TEST_F(RaceOrder, ATruncateMeetsAFlipBelowTheNewSize) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, 0, 0x11, kBlock + 100, 200, 0x44);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(kBlock + 3000)), 0);
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), kBlock + 3000);
  ExpectBytes(all, 0, kBlock + 100, 0x11);
  ExpectBytes(all, kBlock + 100, kBlock + 300, 0x44);
  ExpectBytes(all, kBlock + 300, kBlock + 3000, 0x11);
}

// A copy on write whose last block is block 1 (an edge: the rest of the
// block copied from the old one) meets a flip of that block's other
// bytes: redone, the copy keeps them.
TEST_F(RaceOrder, ACopyOnWriteMeetsAFlipInItsEdgeBlock) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, 2000, 0x11, kBlock + 2000, 100, 0x44);
  Write(2000, kBlock, 0x55);  // [2000, 6096): blocks 0 and 1
  ASSERT_TRUE(rec_.raced());
  const auto all = ReadAll();
  ASSERT_EQ(all.size(), kThree);
  ExpectBytes(all, 0, 2000, 0x11);
  ExpectBytes(all, 2000, kBlock + 2000, 0x55);
  ExpectBytes(all, kBlock + 2000, kBlock + 2100, 0x44);
  ExpectBytes(all, kBlock + 2100, kThree, 0x11);
}

}  // namespace
}  // namespace upfs_race
