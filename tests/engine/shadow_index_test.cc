// ShadowIndex and granule flips in a BlockTable: pairing (pairs and
// anywhere shadows), toggles, what ends a pairing, the blocks a paired
// mapping holds, and the flips a replay refuses (a toggle of a block not
// paired with that pair, a flip past the size or of a hole, an anywhere
// shadow of a paired block or naming the block itself).
#include "engine/shadow_index.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "engine/block_table.h"
#include "format/format.h"

// Bytes allocated through operator new while counting is on (this test
// binary only): what a table's first pairing costs in memory. Not under
// ThreadSanitizer, whose runtime defines the operators itself (a second
// definition does not link); ASan's and UBSan's let a program replace them.
#if defined(__SANITIZE_THREAD__)
#define UPFS_COUNT_NEW 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UPFS_COUNT_NEW 0
#endif
#endif
#ifndef UPFS_COUNT_NEW
#define UPFS_COUNT_NEW 1
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_counted{0};
}  // namespace

#if UPFS_COUNT_NEW
// The replacement pairs malloc with free; GCC cannot see that the
// deletes below are this new's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_counted.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#endif

namespace upfs_engine_test {
namespace {

using namespace upfs;
using namespace upfs::format;

Effect Flip(uint32_t v, uint32_t pair, uint32_t mask, bool set) {
  Effect e;
  e.SetFlip(v, pair, mask, set, false);
  return e;
}

// A first flip of a version 5 log: block v keeps its home, `shadow` is its
// shadow.
Effect Anywhere(uint32_t v, uint32_t shadow, uint32_t mask) {
  Effect e;
  e.SetFlip(v, shadow, mask, true, true);
  return e;
}

Effect Map(uint32_t v, uint32_t l, uint32_t n, uint64_t size) {
  Effect e;
  e.vblock = v;
  e.nblocks = n;
  e.runs.push_back(Run{l, n});
  e.size_op = Effect::kMax;
  e.new_size = size;
  return e;
}

TEST(ShadowIndex, SetsClearsAndListsInBlockOrder) {
  ShadowIndex x;
  uint32_t mask = 7;
  EXPECT_FALSE(x.any());
  EXPECT_FALSE(x.Get(5, &mask));
  x.Set(kGranuleMaxVblock, 9, 0, 0x7fffffffu);
  x.Set(5, 77, 0x80000001u, 12);
  x.Set(1u << 20, 78, 3, 0);
  EXPECT_TRUE(x.any());
  ASSERT_TRUE(x.Get(5, &mask));
  EXPECT_EQ(mask, 0x80000001u);
  ASSERT_TRUE(x.Get(kGranuleMaxVblock, &mask));
  EXPECT_EQ(mask, 0u) << "paired with every granule in the block itself";
  EXPECT_FALSE(x.Paired(6));
  EXPECT_EQ(x.Stamp(5), 12u) << "the stamp beside the mask";
  EXPECT_EQ(x.Stamp(kGranuleMaxVblock), 0x7fffffffu) << "31 bits of stamp";
  EXPECT_EQ(x.Stamp(6), 0u);
  EXPECT_EQ(x.Shadow(5), 77u) << "the shadow beside the mask";
  EXPECT_EQ(x.Shadow(kGranuleMaxVblock), 9u);
  x.Set(5, 79, 1, 13);
  EXPECT_EQ(x.Shadow(5), 79u) << "a new pairing's shadow";
  EXPECT_EQ(x.count(), 3u) << "a pairing set again is counted once";
  std::vector<uint64_t> seen;
  x.ForEach([&](uint64_t v, uint32_t) { seen.push_back(v); });
  EXPECT_EQ(seen, (std::vector<uint64_t>{5, 1u << 20, kGranuleMaxVblock}));
  x.Clear(0, 1u << 20);
  EXPECT_FALSE(x.Paired(5));
  EXPECT_TRUE(x.Paired(1u << 20));
  x.Clear(0, UINT64_MAX);
  EXPECT_FALSE(x.Paired(kGranuleMaxVblock));
}

// Blocks on both sides of every node edge (a leaf holds 2^9 blocks, a
// middle node 2^18): set, listed in order, and cleared by ranges that
// begin and end inside nodes, across nodes never made.
TEST(ShadowIndex, ClearsAndListsAcrossNodeEdges) {
  ShadowIndex x;
  const std::vector<uint64_t> vs = {0, 511, 512, (1u << 18) - 1, 1u << 18, (1u << 27) + 3, kGranuleMaxVblock};
  for (uint64_t v : vs) x.Set(v, 1000, uint32_t(v), 1);
  EXPECT_EQ(x.count(), vs.size());
  std::vector<uint64_t> seen;
  x.ForEach([&](uint64_t v, uint32_t mask) {
    seen.push_back(v);
    EXPECT_EQ(mask, uint32_t(v));
  });
  EXPECT_EQ(seen, vs);
  x.Clear(511, 513);  // the edge of the first leaf
  EXPECT_TRUE(x.Paired(0));
  EXPECT_FALSE(x.Paired(511));
  EXPECT_FALSE(x.Paired(512));
  x.Clear(1000, (1u << 27) + 4);  // over missing leaves and middle nodes
  EXPECT_FALSE(x.Paired((1u << 18) - 1));
  EXPECT_FALSE(x.Paired(1u << 18));
  EXPECT_FALSE(x.Paired((1u << 27) + 3));
  EXPECT_TRUE(x.Paired(kGranuleMaxVblock));
  EXPECT_EQ(x.count(), 2u);
  x.Clear(0, UINT64_MAX);
  EXPECT_EQ(x.count(), 0u);
  EXPECT_FALSE(x.Paired(0));
}

// Every replay of a file with a paired block builds an index: its first
// pairing must cost little memory. It made 256 KiB, zeroed (an unlink of
// a pool file whose header had been overwritten took 103-113 us).
TEST(ShadowIndex, AFirstPairingMakesAtMost20KiB) {
  if (!UPFS_COUNT_NEW) GTEST_SKIP() << "operator new is ThreadSanitizer's here";
  ShadowIndex x;
  g_counted = 0;
  g_counting = true;
  const uint64_t v = (uint64_t{1} << 27) + 5;
  x.Set(v, 50, 1, 0);
  g_counting = false;
  EXPECT_GT(g_counted.load(), 0u);
  EXPECT_LE(g_counted.load(), 20u * 1024 + 256) << "top, one middle node, one leaf";
  g_counted = 0;
  g_counting = true;
  x.Set(v + 1, 51, 1, 0);  // the same leaf
  g_counting = false;
  EXPECT_EQ(g_counted.load(), 0u);
}

// A reader that finds a block paired gets its shadow from the same call,
// never 0, while the one writer pairs blocks for the first time, ends
// pairings and pairs them again with other shadows. Asked apart, Paired()
// and Shadow() may see a pairing end between them: FlipOnce once did,
// took block 0 (the file's header) for the shadow and wrote granules
// into it (the CI TSan stage's PoolPatch.ThreadsPatchingOneFileNeverTear-
// OrReorder aborted at the AddrUnchecked(0) assertion).
TEST(ShadowIndex, AReaderGetsTheShadowOfThePairingItSees) {
  ShadowIndex x;
  constexpr uint64_t kChurns = 1000000, kChurned = 7;
  std::atomic<uint64_t> paired_up_to{0};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t i = 0; i < kChurns; ++i) {
      if (i % 64 == 0) {  // a first pairing, of a block never paired
        x.Set(kChurned + 1 + i / 64, uint32_t(100000 + i / 64), 1, 0);
        paired_up_to.store(i / 64 + 1, std::memory_order_release);
      }
      x.Set(kChurned, uint32_t(1 + i % 50), uint32_t(i) | 1, 0);
      x.Clear(kChurned, kChurned + 1);
    }
    done.store(true, std::memory_order_release);
  });
  uint64_t seen = 0, bad = 0;
  while (!done.load(std::memory_order_acquire)) {
    uint32_t mask = 0, shadow = 0;
    if (x.Get(kChurned, &mask, &shadow)) {
      ++seen;
      bad += shadow == 0 || shadow > 50;
    }
    const uint64_t up_to = paired_up_to.load(std::memory_order_acquire);
    if (up_to == 0) continue;
    const uint64_t i = up_to - 1;
    if (!x.Get(kChurned + 1 + i, &mask, &shadow) || shadow != 100000 + i) ++bad;
  }
  writer.join();
  EXPECT_EQ(bad, 0u) << "of " << seen << " reads that found the churned block paired";
}

TEST(ShadowIndex, AgesAreTakenModuloTheStampsWidth) {
  EXPECT_EQ(ShadowIndex::Age(100, 1100), 1000u);
  EXPECT_EQ(ShadowIndex::Age(0x7fffff00u, 0x100), 0x200u) << "across the wrap";
  EXPECT_LE(ShadowIndex::Now(), 0x7fffffffu);
}

TEST(ShadowIndex, AFlipIsStampedWithTheCatchUpBeforeTheOneThatAppliesIt) {
  BlockTable t;
  ASSERT_TRUE(t.Apply(Map(0, 10, 4, 4 * kBlockSize)).ok());
  const uint32_t made = ShadowIndex::Now();
  ASSERT_TRUE(t.Apply(Flip(1, 40, 0, true)).ok());
  EXPECT_LE(ShadowIndex::Age(t.shadows().Stamp(1), made), 10000u) << "a fresh table's: when it was made";
  t.BeginCatchUp(100);
  t.BeginCatchUp(250);
  ASSERT_TRUE(t.Apply(Flip(1, 40, 0b11, false)).ok());
  EXPECT_EQ(t.shadows().Stamp(1), 100u) << "committed after the catch-up at 100";
  t.BeginCatchUp(400);
  ASSERT_TRUE(t.Apply(Flip(2, 50, 0, true)).ok());
  EXPECT_EQ(t.shadows().Stamp(2), 250u);
  EXPECT_EQ(t.shadows().Stamp(1), 100u);
}

TEST(ShadowIndex, FlipsPairToggleAndEndWithARemap) {
  BlockTable t;
  ASSERT_TRUE(t.Apply(Map(0, 10, 4, 4 * kBlockSize)).ok());
  ASSERT_TRUE(t.Apply(Flip(2, 40, 0, true)).ok());
  EXPECT_EQ(t.Get(2), 40u);
  EXPECT_EQ(t.ShadowOf(2, 40), 41u);
  EXPECT_EQ(t.mapped_blocks(), 4u);
  EXPECT_EQ(t.shadows().count(), 1u);
  ASSERT_TRUE(t.Apply(Flip(2, 40, 0b101, false)).ok());
  ASSERT_TRUE(t.Apply(Flip(2, 40, 0b110, false)).ok());
  uint32_t mask = 0;
  ASSERT_TRUE(t.shadows().Get(2, &mask));
  EXPECT_EQ(mask, 0b011u);
  std::vector<uint32_t> held;
  t.ForEachHeld([&](uint32_t l) { held.push_back(l); });
  EXPECT_EQ(held, (std::vector<uint32_t>{10, 11, 40, 41, 13}));
  // A set maps anew (the compacted state): the mask is what it says.
  ASSERT_TRUE(t.Apply(Flip(2, 40, 0xf0, true)).ok());
  ASSERT_TRUE(t.shadows().Get(2, &mask));
  EXPECT_EQ(mask, 0xf0u);
  // A copy on write of the block ends the pairing.
  ASSERT_TRUE(t.Apply(Map(2, 60, 1, 0)).ok());
  EXPECT_EQ(t.ShadowOf(2, 60), 0u);
  EXPECT_EQ(t.shadows().count(), 0u);
  EXPECT_FALSE(t.Apply(Flip(2, 40, 1, false)).ok()) << "a toggle of a pair no longer mapped";
}

// A version 5 first flip pairs the block where it is with a shadow from
// anywhere; toggles flip its granules; a remap ends it, and a replay
// refuses such a flip of a hole, of a paired block, or naming the block.
TEST(ShadowIndex, AnywhereShadowsPairTheBlockWhereItIs) {
  BlockTable t;
  ASSERT_TRUE(t.Apply(Map(0, 10, 4, 4 * kBlockSize)).ok());
  ASSERT_TRUE(t.Apply(Anywhere(2, 90, 0b100)).ok());
  EXPECT_EQ(t.Get(2), 12u) << "the block stays where it was";
  EXPECT_EQ(t.ShadowOf(2, 12), 90u);
  EXPECT_EQ(t.shadows().count(), 1u);
  ASSERT_TRUE(t.Apply(Flip(2, 12, 0b110, false)).ok()) << "a toggle names the home";
  uint32_t mask = 0;
  ASSERT_TRUE(t.shadows().Get(2, &mask));
  EXPECT_EQ(mask, 0b010u);
  EXPECT_EQ(t.ShadowOf(2, 12), 90u) << "a toggle keeps the shadow";
  std::vector<uint32_t> held;
  t.ForEachHeld([&](uint32_t l) { held.push_back(l); });
  EXPECT_EQ(held, (std::vector<uint32_t>{10, 11, 12, 90, 13}));
  EXPECT_FALSE(t.Apply(Anywhere(2, 91, 1)).ok()) << "a second shadow for a paired block";
  EXPECT_FALSE(t.Apply(Flip(2, 90, 1, false)).ok()) << "a toggle naming the shadow";
  EXPECT_FALSE(t.Apply(Anywhere(1, 11, 1)).ok()) << "the shadow is the block itself";
  ASSERT_TRUE(t.Apply(Map(2, 60, 1, 0)).ok());
  EXPECT_EQ(t.ShadowOf(2, 60), 0u) << "a copy on write ends the pairing";
  EXPECT_EQ(t.shadows().count(), 0u);
  Effect cut;
  cut.size_op = Effect::kSet;
  cut.new_size = 3 * kBlockSize;
  ASSERT_TRUE(t.Apply(cut).ok());
  EXPECT_FALSE(t.Apply(Anywhere(3, 95, 1)).ok()) << "a hole (past the size too)";
  Effect punch = Map(1, 0, 1, 0);
  ASSERT_TRUE(t.Apply(punch).ok());
  EXPECT_FALSE(t.Apply(Anywhere(1, 95, 1)).ok()) << "a hole has no home to keep";
}

// The GC's fold in place: an unpairing that brings the block's whole mask
// home ends the pairing; one with another mask, of a block not paired, or
// naming another block is refused.
TEST(ShadowIndex, AnUnpairingEndsAPairingWithItsWholeMask) {
  BlockTable t;
  ASSERT_TRUE(t.Apply(Map(0, 10, 4, 4 * kBlockSize)).ok());
  ASSERT_TRUE(t.Apply(Anywhere(1, 90, 0b1010)).ok());
  Effect wrong_mask, wrong_block, whole, again;
  wrong_mask.SetFlip(1, 11, 0b0010, false, true);
  wrong_block.SetFlip(1, 90, 0b1010, false, true);
  whole.SetFlip(1, 11, 0b1010, false, true);
  again = whole;
  EXPECT_FALSE(t.Apply(wrong_mask).ok()) << "a granule left in the shadow";
  EXPECT_FALSE(t.Apply(wrong_block).ok()) << "naming the shadow, not the home";
  ASSERT_TRUE(t.Apply(whole).ok());
  EXPECT_EQ(t.ShadowOf(1, 11), 0u);
  EXPECT_EQ(t.Get(1), 11u) << "the block stays home";
  EXPECT_EQ(t.shadows().count(), 0u);
  EXPECT_FALSE(t.Apply(again).ok()) << "a block not paired";
  uint32_t home = 0, shadow = 7;
  whole.FlipBlocks(11, &home, &shadow);
  EXPECT_EQ(home, 11u);
  EXPECT_EQ(shadow, 0u) << "a copy on write tracking it releases no shadow";
}

// A table replayed after a compaction keeps the stamps of the pairs the
// table it replaces knew as they are; pairs changed since are stamped with
// that table's last catch-up (they were flipped after it).
TEST(ShadowIndex, AReplayedTableInheritsTheStampsOfUnchangedPairs) {
  BlockTable old;
  ASSERT_TRUE(old.Apply(Map(0, 10, 4, 4 * kBlockSize)).ok());
  old.BeginCatchUp(100);
  old.BeginCatchUp(200);  // flips applied now are stamped 100
  ASSERT_TRUE(old.Apply(Flip(0, 40, 0, true)).ok());
  ASSERT_TRUE(old.Apply(Flip(1, 50, 0, true)).ok());
  ASSERT_TRUE(old.Apply(Flip(2, 60, 0, true)).ok());
  old.BeginCatchUp(300);  // old's last catch-up
  BlockTable fresh;  // the compacted state, and flips committed after old's cursor
  ASSERT_TRUE(fresh.Apply(Map(0, 10, 4, 4 * kBlockSize)).ok());
  ASSERT_TRUE(fresh.Apply(Flip(0, 40, 0, true)).ok());
  ASSERT_TRUE(fresh.Apply(Flip(1, 50, 0b1, true)).ok());  // toggled since
  ASSERT_TRUE(fresh.Apply(Flip(2, 70, 0, true)).ok());    // paired anew since
  ASSERT_TRUE(fresh.Apply(Flip(3, 80, 0, true)).ok());    // paired since
  fresh.InheritFlipStamps(old);
  // Anywhere shadows: one unchanged, one paired anew with another shadow.
  ASSERT_TRUE(old.Apply(Map(4, 20, 2, 6 * kBlockSize)).ok());
  old.BeginCatchUp(400);
  old.BeginCatchUp(500);  // stamped 400
  ASSERT_TRUE(old.Apply(Anywhere(4, 91, 1)).ok());
  ASSERT_TRUE(old.Apply(Anywhere(5, 92, 1)).ok());
  old.BeginCatchUp(600);
  BlockTable fresh2;
  ASSERT_TRUE(fresh2.Apply(Map(4, 20, 2, 6 * kBlockSize)).ok());
  ASSERT_TRUE(fresh2.Apply(Anywhere(4, 91, 1)).ok());
  ASSERT_TRUE(fresh2.Apply(Anywhere(5, 93, 1)).ok());
  fresh2.InheritFlipStamps(old);
  EXPECT_EQ(fresh2.shadows().Stamp(4), 400u) << "same home, shadow and mask";
  EXPECT_EQ(fresh2.shadows().Stamp(5), 600u) << "another shadow: changed";
  EXPECT_EQ(fresh2.ShadowOf(5, 21), 93u);
  EXPECT_EQ(fresh.shadows().Stamp(0), 100u) << "unchanged: old's stamp";
  EXPECT_EQ(fresh.shadows().Stamp(1), 300u) << "changed: old's last catch-up";
  EXPECT_EQ(fresh.shadows().Stamp(2), 300u);
  EXPECT_EQ(fresh.shadows().Stamp(3), 300u);
  uint32_t mask = 0;
  ASSERT_TRUE(fresh.shadows().Get(1, &mask));
  EXPECT_EQ(mask, 0b1u) << "the masks are the fresh table's";
}

TEST(ShadowIndex, AReplayRefusesFlipsThatDoNotFit) {
  BlockTable t;
  ASSERT_TRUE(t.Apply(Map(0, 10, 2, 2 * kBlockSize - 100)).ok());
  EXPECT_FALSE(t.Apply(Flip(1, 20, 1, false)).ok()) << "a toggle of an unpaired block";
  EXPECT_FALSE(t.Apply(Flip(2, 20, 0, true)).ok()) << "past the size";
  EXPECT_TRUE(t.Apply(Flip(1, 20, 0, true)).ok()) << "the last, partial block";
  EXPECT_FALSE(t.Apply(Flip(1, 30, 1, false)).ok()) << "a toggle naming another pair";
  // A truncate that unmaps the block ends its pairing.
  Effect cut;
  cut.size_op = Effect::kSet;
  cut.new_size = kBlockSize;
  ASSERT_TRUE(t.Apply(cut).ok());
  EXPECT_FALSE(t.shadows().Paired(1));
  EXPECT_FALSE(t.Apply(Flip(1, 20, 1, false)).ok()) << "a toggle after the truncate";
}

}  // namespace
}  // namespace upfs_engine_test
