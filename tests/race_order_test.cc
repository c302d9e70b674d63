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
  ExpectFile(kBlock + 1200, {{0, 0x11}, {kBlock + 500, 0}, {kBlock + 1000, 0x22}});
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
  ExpectFile(kThree, {{0, 0x11}, {100, 0}, {kBlock + 1000, 0x22}, {kBlock + 1200, 0}});
}

// Two flips of one block: the second finds the block's granule claim
// held, copies on write instead and commits first; the first, redone,
// keeps the second's bytes.
TEST_F(RaceOrder, AFlipMeetsAnotherWriteOfItsBlock) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, kBlock + 100, 0x11, kBlock + 1000, 200, 0x33);
  Write(kBlock + 100, 200, 0x22);
  ASSERT_TRUE(rec_.raced());
  ExpectFile(kThree, {{0, 0x11}, {kBlock + 100, 0x22}, {kBlock + 300, 0x11}, {kBlock + 1000, 0x33},
             {kBlock + 1200, 0x11}});
}

// A flip of a block already paired (it writes the homes its mask does not
// read) meets a write of the same block from another thread, which finds
// the granule claim held and copies the block on write, unpaired: redone,
// the flip pairs the new block.
TEST_F(RaceOrder, AFlipOfAPairedBlockMeetsAnotherWriteOfIt) {
  Write(0, kThree, 0x11);
  Write(kBlock + 100, 200, 0x22);  // pairs block 1
  RaceAWrite(kThree, kBlock + 1000, 0x11, kBlock + 2000, 100, 0x44);
  Write(kBlock + 1000, 200, 0x33);
  ASSERT_TRUE(rec_.raced());
  ExpectFile(kThree, {{0, 0x11}, {kBlock + 100, 0x22}, {kBlock + 300, 0x11}, {kBlock + 1000, 0x33},
             {kBlock + 1200, 0x11}, {kBlock + 2000, 0x44}, {kBlock + 2100, 0x11}});
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
  ExpectFile(s + 5000, {{0, 0x33}, {kBlock + 50, 0x11}, {s, 0x22}});
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
  ExpectFile(kThree, {{0, 0x11}, {kBlock + 100, 0x44}, {kBlock + 300, 0x11}, {kBlock + 2000, 0},
             {kBlock + 3000, 0x11}});
}

// A truncate into block 1 (a copy of the block's first bytes) meets a flip
// below the new size: redone, its copy holds the flip's bytes.
TEST_F(RaceOrder, ATruncateMeetsAFlipBelowTheNewSize) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, 0, 0x11, kBlock + 100, 200, 0x44);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(kBlock + 3000)), 0);
  ASSERT_TRUE(rec_.raced());
  ExpectFile(kBlock + 3000, {{0, 0x11}, {kBlock + 100, 0x44}, {kBlock + 300, 0x11}});
}

// A copy on write whose last block is block 1 (an edge: the rest of the
// block copied from the old one) meets a flip of that block's other
// bytes: redone, the copy keeps them.
TEST_F(RaceOrder, ACopyOnWriteMeetsAFlipInItsEdgeBlock) {
  Write(0, kThree, 0x11);
  RaceAWrite(kThree, 2000, 0x11, kBlock + 2000, 100, 0x44);
  Write(2000, kBlock, 0x55);  // [2000, 6096): blocks 0 and 1
  ASSERT_TRUE(rec_.raced());
  ExpectFile(kThree, {{0, 0x11}, {2000, 0x55}, {kBlock + 2000, 0x44}, {kBlock + 2100, 0x11}});
}

}  // namespace
}  // namespace upfs_race
