// ReadAhead (src/engine/read_ahead.h): a reader whose reads follow each
// other gets the next block asked for once; any other reader gets nothing.
#include "engine/read_ahead.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using upfs::ReadAhead;
constexpr uint64_t kBlock = upfs::format::kBlockSize;

// Feeds reads of `len` bytes from `from` on, back to back, over a file of
// `blocks` blocks; returns the blocks asked for.
std::vector<uint64_t> Stream(ReadAhead* ra, uint64_t from, uint64_t len, uint64_t reads, uint64_t blocks) {
  std::vector<uint64_t> asked;
  for (uint64_t i = 0, off = from; i < reads; ++i, off += len) {
    const uint64_t b = ra->After(off, off + len, blocks);
    if (b != ReadAhead::kNone) asked.push_back(b);
  }
  return asked;
}

TEST(ReadAhead, BlockReadsInOrderAskForEachNextBlockFromTheSecondReadOn) {
  ReadAhead ra;
  // The first read is not known to be sequential; the last block has no next.
  EXPECT_EQ(Stream(&ra, 0, kBlock, 8, 8), (std::vector<uint64_t>{2, 3, 4, 5, 6, 7}));
}

TEST(ReadAhead, SmallReadsInOrderAskForEachBlockOnce) {
  ReadAhead ra;
  // 100-byte reads over three blocks: the next block once, when the
  // stream first reads in the one before it (the first read excepted).
  const std::vector<uint64_t> asked = Stream(&ra, 0, 100, 3 * kBlock / 100, 4);
  EXPECT_EQ(asked, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(ReadAhead, ReadsThatDoNotFollowEachOtherAskForNothing) {
  ReadAhead ra;
  const uint64_t offs[] = {5 * kBlock, 1 * kBlock, 9 * kBlock, 3 * kBlock, 3 * kBlock, 0};
  for (uint64_t off : offs) EXPECT_EQ(ra.After(off, off + kBlock, 64), ReadAhead::kNone) << off;
}

TEST(ReadAhead, AReadSpanningBlocksAsksForTheOneAfterItsLast) {
  ReadAhead ra;
  EXPECT_EQ(ra.After(0, 3 * kBlock, 16), ReadAhead::kNone);
  EXPECT_EQ(ra.After(3 * kBlock, 6 * kBlock + 10, 16), 7u);
  // Ending inside block 6 again: block 7 was asked for already.
  EXPECT_EQ(ra.After(6 * kBlock + 10, 6 * kBlock + 20, 16), ReadAhead::kNone);
}

TEST(ReadAhead, NothingPastTheLastBlock) {
  ReadAhead ra;
  EXPECT_EQ(ra.After(0, kBlock, 2), ReadAhead::kNone);
  EXPECT_EQ(ra.After(kBlock, 2 * kBlock, 2), ReadAhead::kNone);
}

}  // namespace
