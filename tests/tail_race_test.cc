// The bytes past the end of file in the block that holds the size are
// read by nobody, so the engine does not keep them zero: copy on write
// writes a block only up to the size, an in-place append writes there
// before its commit (docs/design.md, "The tail claim"). An operation that
// raises the size over bytes it does not write zeroes them under the tail
// claim first. These tests put each such operation against another one
// committed between its snapshot and its commit, deterministically: a
// pm::Recorder stops the first at its first fence (its data written, its
// commit not yet made) and runs the second on another thread. Bytes left
// unspecified (past the end of a fresh block's last copy) are filled with
// 0xEE, as an allocator that hands out a used block would leave them, so
// that any of them that a read returns shows.
#include <linux/falloc.h>

#include "race_at_fence.h"

namespace upfs_race {
namespace {

using TailRace = RaceFixture;

// The size S in block 1; a copy on write of blocks 0-1 (from its snapshot:
// block 1 written up to S) meets a write past block 1 that raises the size
// over block 1's end, committed between its snapshot and its commit: the
// copy must not commit its block 1, whose bytes past S would become
// readable (found by ConcurrencyTruncate.WritersReadersAndTruncator under
// ThreadSanitizer: a reader saw another block's bytes in a slot).
TEST_F(TailRace, ACopyOnWriteOfTheTailBlockMeetsASizeRaisedPastIt) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  rec_.FillLeftOversOfThisThread();
  RaceAWrite(s, 0, 0x11, 3 * kBlock + 10, 10, 0x22);
  Write(0, kBlock + 50, 0x33);
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 3 * kBlock + 10);
}

// A write past block 1 (its snapshot's tail block, zeroed past S under
// the tail claim) meets a copy on write of block 1 committed after that:
// the new block 1 holds anything past S, so the size must not rise over it.
TEST_F(TailRace, AWritePastTheTailBlockMeetsACopyOnWriteOfIt) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  RaceAWrite(s, 0, 0x11, 0, kBlock + 50, 0x33, true);
  Write(3 * kBlock + 10, 10, 0x22);
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 3 * kBlock + 10);
}

// Two writes past the tail block are serialized by the tail claim,
// which each holds from its zeroing to its commit, unless the tail block
// is a hole (nothing to zero, no claim): then the one that commits second
// raises the size over the other's last block, which holds anything past
// its end.
TEST_F(TailRace, AWritePastAHoleAtTheSizeMeetsAnotherOne) {
  const uint64_t s = kBlock + 100;
  Write(0, 100, 0x11);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(s)), 0);  // block 1: a hole
  RaceAWrite(s, 0, 0x11, 2 * kBlock + 10, 10, 0x44, true);
  Write(3 * kBlock + 10, 10, 0x22);
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(100, 2 * kBlock + 10);
  ExpectZeros(2 * kBlock + 20, 3 * kBlock + 10);
}

// A growing fallocate maps nothing (strict mode) and only raises the
// size: the same as a write past the tail block.
TEST_F(TailRace, AGrowingFallocateMeetsACopyOnWriteOfTheTailBlock) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  RaceAWrite(s, 0, 0x11, 0, kBlock + 50, 0x33, true);
  ASSERT_EQ(upfs_fallocate(fd_, 0, 0, static_cast<off_t>(4 * kBlock)), 0) << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 4 * kBlock);
}

TEST_F(TailRace, AGrowingFallocatePastAHoleAtTheSizeMeetsAWritePastIt) {
  const uint64_t s = kBlock + 100;
  Write(0, 100, 0x11);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(s)), 0);  // block 1: a hole
  RaceAWrite(s, 0, 0x11, 2 * kBlock + 10, 10, 0x44, true);
  ASSERT_EQ(upfs_fallocate(fd_, 0, 0, static_cast<off_t>(4 * kBlock)), 0) << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(100, 2 * kBlock + 10);
  ExpectZeros(2 * kBlock + 20, 4 * kBlock);
}

// A growing truncate conflicts with everything committed since its
// snapshot; kept here with the others so that it stays so.
TEST_F(TailRace, AGrowingTruncateMeetsACopyOnWriteOfTheTailBlock) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  RaceAWrite(s, 0, 0x11, 0, kBlock + 50, 0x33, true);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(4 * kBlock)), 0) << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 4 * kBlock);
}

// Punching a hole in the tail block copies it whole: its bytes past the
// size (anything: here a copy on write's left-overs) must not come along
// when a write past it raised the size meanwhile.
TEST_F(TailRace, APunchInTheTailBlockMeetsASizeRaisedPastIt) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  WriteFillingLeftOvers(0, kBlock + 50, 0x33);  // block 1 now holds 0xEE past S
  RaceAWrite(s, kBlock, 0x33, 3 * kBlock + 10, 10, 0x22);
  ASSERT_EQ(upfs_fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(kBlock),
                           10),
            0)
      << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(kBlock, kBlock + 10);
  ExpectZeros(s, 3 * kBlock + 10);
}

}  // namespace
}  // namespace upfs_race
