// BlockSource without a File or a container: runs are contiguous, a
// thread's freed blocks come back to it first, the space grows when the
// bitmap is full, retired blocks wait for the epoch, and a PendingBlocks
// guard gives back what an operation took unless its commit kept it.
#include "engine/block_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

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
  const uint32_t reader = ClaimedSlot(ms.epochs());
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

// A pool's domain (a bitmap with summaries) allocates in ctFS's manner:
// a big file's chunk is a whole 2 MiB partition of its own, a file that
// goes on growing continues right after its last block, and the summaries
// hide no free block however fragmented the space is.
constexpr uint64_t kPoolMax = 1 << 16;
MemoryStorage PoolStorage(uint64_t initial) {
  return MemoryStorage(initial, kPoolMax, format::Consistency::kStrict, /*summaries=*/true);
}
void ExpectSummariesAgree(MemoryStorage& ms) {
  std::string why;
  EXPECT_TRUE(ms.bitmap().SummariesAgree(ms.bitmap().capacity(), &why)) << why;
}
// Takes every block of a 4,096-block PoolStorage but blocks 0 and 1 (the
// container's), and returns them in order.
std::vector<uint32_t> TakeEveryBlock(MemoryStorage& ms) {
  ThreadBlocks t;
  std::vector<FRun> all;
  EXPECT_TRUE(ms.source().Alloc(&t, 4096 - 2, &all).ok());
  ms.source().ReturnAll(&t);
  std::vector<uint32_t> blocks;
  for (const FRun& r : all)
    for (uint32_t i = 0; i < r.count; ++i) blocks.push_back(r.lblock + i);
  std::sort(blocks.begin(), blocks.end());
  return blocks;
}

TEST(BlockSourcePartitions, BigFilesTakeWholeTwoMiBPartitionsEach) {
  MemoryStorage ms = PoolStorage(8192);
  BlockSource& src = ms.source();
  ThreadBlocks a, b;
  a.file_blocks = b.file_blocks = 1000;  // both files are big
  std::vector<FRun> ra, rb;
  // Interleaved writers: each file's blocks stay in its own partition.
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(src.Alloc(&a, 8, &ra).ok());
    ASSERT_TRUE(src.Alloc(&b, 8, &rb).ok());
  }
  ASSERT_EQ(ra.size(), 1u) << "one contiguous run of 512 blocks";
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(ra[0].lblock % kPartitionBlocks, 0u) << "aligned to 2 MiB (a huge page)";
  EXPECT_EQ(rb[0].lblock % kPartitionBlocks, 0u);
  EXPECT_EQ(ra[0].count, 512u);
  // Past its partition, a file goes on in a partition of its own again
  // (the one right after it is the other file's).
  ASSERT_TRUE(src.Alloc(&a, 8, &ra).ok());
  ASSERT_EQ(ra.size(), 2u);
  EXPECT_EQ(ra[1].lblock % kPartitionBlocks, 0u);
  EXPECT_NE(ra[1].lblock / kPartitionBlocks, rb[0].lblock / kPartitionBlocks);
  ExpectSummariesAgree(ms);
  src.FreeRuns(&a, ra);
  src.FreeRuns(&b, rb);
  src.ReturnAll(&a);
  src.ReturnAll(&b);
  ExpectSummariesAgree(ms);
}

TEST(BlockSourcePartitions, ANewOpenContinuesAfterTheFilesLastBlock) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  ThreadBlocks first, other, second;
  std::vector<FRun> r1, r_other, r2;
  ASSERT_TRUE(src.Alloc(&first, 3, &r1).ok());
  src.DropChunk(&first);  // the file is closed: the rest of the chunk goes back
  ASSERT_TRUE(src.Alloc(&other, 100, &r_other).ok());  // another file meanwhile
  second.prefer = r1.back().lblock + r1.back().count;  // what the engine sets
  ASSERT_TRUE(src.Alloc(&second, 5, &r2).ok());
  EXPECT_EQ(r2[0].lblock, r1.back().lblock + r1.back().count) << "right after the file's last block";
  for (auto* t : {&first, &other, &second}) src.ReturnAll(t);
}

// A closed file's chunk rest, parked, is the next new small file's first
// claim, never a claim that continues a file or a big file's; beyond
// kParkedChunks it goes back to the bitmap, and ReturnParked gives back
// the rest.
TEST(BlockSourcePartitions, AClosedFilesChunkWaitsForTheNextNewFile) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  ThreadBlocks closed;
  std::vector<FRun> r1;
  ASSERT_TRUE(src.Alloc(&closed, 1, &r1).ok());
  const uint32_t rest = r1[0].lblock + 1;
  src.ParkClosedChunks();
  src.ReturnAtClose(&closed);
  EXPECT_EQ(closed.chunk_next, closed.chunk_end) << "the thread holds nothing after it";
  EXPECT_TRUE(ms.bitmap().Test(rest)) << "kept claimed while parked";
  ThreadBlocks fresh;
  std::vector<FRun> r2;
  ASSERT_TRUE(src.Alloc(&fresh, 2, &r2).ok());
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].lblock, rest) << "the parked rest, not a new claim";
  src.ReturnAtClose(&fresh);  // [rest + 2, ...) parked again
  ThreadBlocks reopened, big;
  reopened.prefer = r2[0].lblock + 2 + 1000;  // continues a file elsewhere
  big.file_blocks = 1000;
  std::vector<FRun> r3, r4;
  ASSERT_TRUE(src.Alloc(&reopened, 1, &r3).ok());
  ASSERT_TRUE(src.Alloc(&big, 1, &r4).ok());
  EXPECT_NE(r3[0].lblock, rest + 2);
  EXPECT_NE(r4[0].lblock, rest + 2);
  EXPECT_TRUE(src.ReturnParked());
  EXPECT_FALSE(ms.bitmap().Test(rest + 2)) << "given back";
  EXPECT_FALSE(src.ReturnParked()) << "nothing left";
  src.ReturnAll(&reopened);
  src.ReturnAll(&big);
  // Nine closed files, eight slots: the ninth rest goes back at once.
  ThreadBlocks nine[9];
  std::vector<uint32_t> rests;
  for (ThreadBlocks& t : nine) {  // open at once: a chunk each
    std::vector<FRun> r;
    ASSERT_TRUE(src.Alloc(&t, 1, &r).ok());
    rests.push_back(uint32_t(t.chunk_next));
  }
  for (ThreadBlocks& t : nine) src.ReturnAtClose(&t);
  EXPECT_FALSE(ms.bitmap().Test(rests.back())) << "no slot was free";
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(ms.bitmap().Test(rests[i])) << i;
  EXPECT_TRUE(src.ReturnParked());
  for (uint32_t l : rests) EXPECT_FALSE(ms.bitmap().Test(l));
  ExpectSummariesAgree(ms);
}

// A source whose owner did not ask for parking (a per-file file's, which
// goes with its file) gives a closed File's chunk rest back at once.
TEST(BlockSourcePartitions, WithoutParkingAClosedFilesChunkGoesBack) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  ThreadBlocks closed, fresh;
  std::vector<FRun> r1, r2;
  ASSERT_TRUE(src.Alloc(&closed, 1, &r1).ok());
  const uint32_t rest = r1[0].lblock + 1;
  src.ReturnAtClose(&closed);
  EXPECT_FALSE(ms.bitmap().Test(rest)) << "given back";
  EXPECT_FALSE(src.ReturnParked()) << "nothing parked";
  ASSERT_TRUE(src.Alloc(&fresh, 1, &r2).ok());
  src.ReturnAll(&fresh);
  ExpectSummariesAgree(ms);
}

// A space that cannot grow hands out what is parked before it says ENOSPC.
TEST(BlockSourcePartitions, AFullSpaceTakesBackWhatIsParked) {
  MemoryStorage ms(4096, 4096, format::Consistency::kStrict, /*summaries=*/true);
  BlockSource& src = ms.source();
  src.ParkClosedChunks();
  ThreadBlocks closed, filler;
  std::vector<FRun> r1, all;
  ASSERT_TRUE(src.Alloc(&closed, 1, &r1).ok());
  src.ReturnAtClose(&closed);
  filler.file_blocks = 1000;  // a big file: it takes nothing parked
  ASSERT_TRUE(src.Alloc(&filler, 4096 - 2 - 1, &all).ok()) << "every block but the one in use";
  EXPECT_EQ(ms.space().grows, 0);
  EXPECT_FALSE(src.ReturnParked()) << "the full space took it back";
  std::vector<FRun> none;
  EXPECT_EQ(src.Alloc(&filler, 1, &none).err(), ENOSPC);
  src.ReturnAll(&filler);
}

TEST(BlockSourcePartitions, FragmentedSpaceIsFoundWithoutGrowing) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  const std::vector<uint32_t> blocks = TakeEveryBlock(ms);
  ExpectSummariesAgree(ms);
  // Free one block in every 37th: single holes spread over the space.
  std::vector<uint32_t> holes;
  for (size_t i = 0; i < blocks.size(); i += 37) {
    ms.bitmap().Clear(blocks[i]);
    holes.push_back(blocks[i]);
  }
  ExpectSummariesAgree(ms);
  const int grows = ms.space().grows;
  std::vector<uint32_t> got;
  ThreadBlocks u;
  for (size_t i = 0; i < holes.size(); ++i) {
    std::vector<FRun> r;
    ASSERT_TRUE(src.Alloc(&u, 1, &r).ok());
    got.push_back(r[0].lblock);
    src.DropChunk(&u);
  }
  EXPECT_EQ(ms.space().grows, grows) << "every hole was found before the space grew";
  std::sort(got.begin(), got.end());
  std::sort(holes.begin(), holes.end());
  EXPECT_EQ(got, holes);
  ExpectSummariesAgree(ms);
}

// A payload's overflow must be one run. With every free block alone
// between taken ones, Alloc gives single blocks; AllocContiguous grows the
// space and takes the run past the old end (before it, a write with more
// runs than a payload holds failed with ENOSPC: a pool bench's prefill in
// CI, "no contiguous overflow space").
TEST(BlockSourcePartitions, AContiguousRunComesFromPastTheEndWhenFreeSpaceIsInPieces) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  const std::vector<uint32_t> blocks = TakeEveryBlock(ms);
  for (size_t i = 0; i < blocks.size(); i += 2) ms.bitmap().Clear(blocks[i]);  // every other block
  const uint64_t cap = ms.bitmap().capacity();
  ThreadBlocks u;
  std::vector<FRun> pieces;
  ASSERT_TRUE(src.Alloc(&u, 3, &pieces).ok());
  EXPECT_GT(pieces.size(), 1u) << "the space is in pieces";
  src.FreeRuns(&u, pieces);
  FRun run{};
  ASSERT_TRUE(src.AllocContiguous(&u, 3, &run).ok());
  EXPECT_EQ(run.count, 3u);
  EXPECT_GE(run.lblock, cap) << "from the grown space";
  EXPECT_TRUE(AllTaken(ms, {run}, true));
  src.ReturnAll(&u);
  ExpectSummariesAgree(ms);
}

// The claims near the hint find only pieces, but a run that long is free
// elsewhere: it is found before the space grows (a pool's checkpoint images
// grew it by an eighth each time, to 244 MiB for 1.5 MiB of metadata).
TEST(BlockSourcePartitions, AContiguousRunAmongPiecesIsFoundBeforeTheSpaceGrows) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  for (uint32_t b : TakeEveryBlock(ms))
    if (b % 2 == 0) ms.bitmap().Clear(b);  // every other block
  // 40 free blocks in a row, across a word boundary, far from the hint.
  const uint32_t a = 3000 - 20;
  for (uint32_t b = a; b < a + 40; ++b) ms.bitmap().Clear(b);
  ExpectSummariesAgree(ms);
  const int grows = ms.space().grows;
  ThreadBlocks u;
  FRun run{};
  ASSERT_TRUE(src.AllocContiguous(&u, 40, &run).ok());
  EXPECT_EQ(ms.space().grows, grows) << "the space grew although a free run was there";
  EXPECT_EQ(run.lblock, a);
  EXPECT_EQ(run.count, 40u);
  EXPECT_TRUE(AllTaken(ms, {run}, true));
  src.ReturnAll(&u);
  ExpectSummariesAgree(ms);
  // The pieces the claims took and gave back are free again.
  uint64_t taken = 0;
  for (uint32_t b = 2; b < 4096; ++b) taken += ms.bitmap().Test(b);
  EXPECT_EQ(taken, (4096 - 2) / 2 - 20 + 40) << "blocks leaked by the attempts, or the run not taken";
}

// Free space given back to the host (punched extents, taken in the bitmap)
// is taken back for a contiguous run before the space grows, as
// neighbouring extents (the lowest given-back ones, which a claim takes
// back when it finds nothing free, need not be neighbours). Before, a
// pool's checkpoint image, placed in one run, grew the pool by an eighth
// every time the previous image's extents had been given back: a churn of
// creates and unlinks beside 300,000 files made a pool 17 GiB long, its
// memory rising past 1.6 GiB for 134 MiB in use.
TEST(BlockSourcePartitions, AContiguousRunIsTakenBackFromGivenBackSpaceBeforeTheSpaceGrows) {
  for (const bool shared : {false, true}) {
    MemoryStorage ms = PoolStorage(4096);
    BlockSource& src = ms.source();
    std::vector<std::atomic<uint64_t>> bits(kPoolMax / kPartitionBlocks / 64 + 1);
    std::atomic<uint64_t> count{0};
    SharedPunchedExtents set(bits.data(), kPoolMax / kPartitionBlocks, &count);
    if (shared) src.SharePunched(&set);
    // Extents 1, 3, 5, 6 and 7 free, then given back (2 and 4 stay in
    // use: the lowest given-back extents are not neighbours); extent 0
    // free in pieces (every other block).
    const std::vector<uint32_t> blocks = TakeEveryBlock(ms);
    for (uint32_t b : blocks) {
      const uint64_t e = b / kPartitionBlocks;
      if (e != 0 && e != 2 && e != 4) ms.bitmap().Clear(b);
    }
    const uint64_t given = src.PunchFreeExtents(0);
    ASSERT_EQ(given, 5 * kPartitionBlocks) << "shared " << shared;
    for (uint32_t b : blocks)
      if (b < kPartitionBlocks && b % 2 == 0) ms.bitmap().Clear(b);
    EXPECT_EQ(src.punched_blocks(), given);
    const int grows = ms.space().grows;
    const uint64_t cap = ms.bitmap().capacity();
    ThreadBlocks u;
    FRun run{};
    ASSERT_TRUE(src.AllocContiguous(&u, kPartitionBlocks + 100, &run).ok()) << "shared " << shared;
    EXPECT_EQ(ms.space().grows, grows) << "shared " << shared << ": grew although given-back space was there";
    EXPECT_LE(run.lblock + run.count, cap);
    EXPECT_EQ(run.count, kPartitionBlocks + 100);
    EXPECT_TRUE(AllTaken(ms, {run}, true));
    EXPECT_GE(run.lblock, 5 * kPartitionBlocks) << "the neighbours 5 and 6";
    src.ReturnAll(&u);
    ExpectSummariesAgree(ms);
    // Given back again, so that the source ends with nothing taken back.
    src.FreeRuns(&u, {run});
    src.ReturnAll(&u);
    std::vector<uint64_t> all;
    if (shared) set.Take(UINT64_MAX, &all);
    else while (src.punched_blocks() != 0) {
      Status st;
      if (!src.ReturnPunched(kPartitionBlocks, &st)) break;
    }
  }
}

// Single blocks for a container's own structures pack into words that
// have room: each used to take a chunk (a whole word, the rest given
// back), one used block in every word the hint passed. Every free block,
// behind the hint too, is taken before the space grows.
TEST(BlockSourcePartitions, SingleBlocksPackTogetherAndFillEveryHoleBeforeGrowing) {
  MemoryStorage ms = PoolStorage(4096);
  BlockSource& src = ms.source();
  std::vector<uint32_t> got;
  for (int i = 0; i < 200; ++i) {
    uint32_t l = 0;
    ASSERT_TRUE(src.AllocSingle(&l).ok());
    ASSERT_GE(l, src.reserved_blocks());
    got.push_back(l);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << "a block handed out twice";
  EXPECT_LT(got.back() - got.front(), 200u + 64u) << "spread over " << got.back() - got.front() << " blocks";
  for (size_t i = 0; i < got.size(); i += 2) ms.bitmap().Clear(got[i]);  // holes behind the hint
  const uint64_t cap = ms.bitmap().capacity();
  uint64_t free = 0;
  for (uint64_t b = src.reserved_blocks(); b < cap; ++b) free += !ms.bitmap().Test(b);
  const int grows = ms.space().grows;
  for (uint64_t i = 0; i < free; ++i) {
    uint32_t l = 0;
    ASSERT_TRUE(src.AllocSingle(&l).ok());
    ASSERT_LT(l, cap) << "past the end after " << i << " of " << free << " free blocks";
  }
  EXPECT_EQ(ms.space().grows, grows);
  for (uint64_t b = src.reserved_blocks(); b < cap; ++b) ASSERT_TRUE(ms.bitmap().Test(b)) << b;
  uint32_t l = 0;
  ASSERT_TRUE(src.AllocSingle(&l).ok()) << "a full space grows for one more";
  EXPECT_GE(l, cap);
  EXPECT_GT(ms.space().grows, grows);
  ExpectSummariesAgree(ms);
}

// Chunks, a container's single blocks and runs that must be one, claimed
// and given back by threads at once.
TEST(BlockSourcePartitions, ThreadsClaimingAndFreeingNeverShareABlock) {
  MemoryStorage ms = PoolStorage(16384);
  BlockSource& src = ms.source();
  constexpr int kThreads = 4;
  std::vector<std::vector<FRun>> held(kThreads);
  std::vector<std::thread> ts;
  std::atomic<bool> failed{false};
  for (int k = 0; k < kThreads; ++k) {
    ts.emplace_back([&, k] {
      ThreadBlocks t;
      t.file_blocks = k % 2 ? 1000 : 0;  // big and small files
      std::vector<FRun>& mine = held[k];
      for (int step = 0; step < 30000; ++step) {
        std::vector<FRun> r;
        if (!src.Alloc(&t, 1 + uint64_t(step % 7) * (k % 2 ? 40 : 3), &r).ok()) {
          failed = true;
          return;
        }
        mine.insert(mine.end(), r.begin(), r.end());
        // A container's single blocks, and runs that must be one, beside.
        uint32_t one = 0;
        FRun run{};
        if ((step % 5 == 0 && !src.AllocSingle(&one).ok()) ||
            (step % 101 == 0 && !src.AllocContiguous(&t, 70, &run).ok())) {
          failed = true;
          return;
        }
        if (one) mine.push_back(FRun{one, 1});
        if (run.count) mine.push_back(run);
        if (step % 3 == 0) src.DropChunk(&t);
        if (mine.size() > 40) {  // give the older half back to the bitmap
          for (size_t i = 0; i < mine.size() / 2; ++i) ms.bitmap().ClearRange(mine[i].lblock, mine[i].count);
          mine.erase(mine.begin(), mine.begin() + long(mine.size() / 2));
        }
      }
      src.ReturnAll(&t);
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_FALSE(failed);
  std::vector<int> owner(ms.bitmap().capacity(), -1);
  for (int k = 0; k < kThreads; ++k)
    for (const FRun& r : held[k])
      for (uint32_t i = 0; i < r.count; ++i) {
        ASSERT_EQ(owner[r.lblock + i], -1) << "block " << r.lblock + i << " handed out twice";
        owner[r.lblock + i] = k;
        ASSERT_TRUE(ms.bitmap().Test(r.lblock + i));
      }
  // Nothing else is taken but the storage's own two blocks.
  uint64_t taken = 0;
  for (uint64_t b = 0; b < ms.bitmap().capacity(); ++b) taken += ms.bitmap().Test(b);
  uint64_t held_blocks = 0;
  for (auto& h : held)
    for (const FRun& r : h) held_blocks += r.count;
  EXPECT_EQ(taken, held_blocks + 2);
  ExpectSummariesAgree(ms);
}

}  // namespace
}  // namespace upfs_engine_test
