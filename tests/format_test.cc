// Unit tests of the on-media entry encodings (src/format/format.h) and the
// CRC-32C helper (src/util/crc32c.h).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/format.h"
#include "test_util.h"
#include "util/crc32c.h"

namespace {

using namespace upfs::format;

// Bitwise reference CRC-32C (reflected, polynomial 0x82F63B78).
uint32_t RefCrc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(FormatLayout, Constants) {
  EXPECT_EQ(kBlockSize, 4096u);
  EXPECT_EQ(1u << kBlockShift, kBlockSize);
  EXPECT_EQ(kSlotsPerLogBlock, 510u);
  EXPECT_EQ(sizeof(FileHeader), 4096u);
  EXPECT_EQ(sizeof(LogBlock), 4096u);
  EXPECT_EQ(offsetof(FileHeader, header_crc), 40u);
  EXPECT_EQ(offsetof(FileHeader, log_head), 64u);
  EXPECT_EQ(offsetof(LogBlock, next), 0u);
  EXPECT_EQ(offsetof(LogBlock, slots), 16u);
  EXPECT_EQ(std::memcmp(&kLogMagic, "ULOG", 4), 0);
  EXPECT_EQ(std::memcmp(kMagic, "UPFS\x01\r\n\x1a", 8), 0);
  EXPECT_EQ(kMaxFileSize, (kMaxBlocks - 1) * kBlockSize);
  EXPECT_EQ(uint64_t(kInlineMaxVblock), (uint64_t{1} << 28) - 1);
  EXPECT_EQ(uint64_t(kInlineMaxLblock), (uint64_t{1} << 27) - 1);
  // A payload of the maximum inline run count fits in one log block with
  // its kReserve and kApply.
  EXPECT_LE(1 + kPayloadHeaderWords + kMaxInlineRuns + 1, kSlotsPerLogBlock);
}

TEST(FormatEntries, KindOfEmptyIsZero) {
  EXPECT_EQ(KindOf(0), EntryKind::kEmpty);
  EXPECT_EQ(static_cast<int>(EntryKind::kEmpty), 0);
}

TEST(FormatEntries, InlineRoundTripEdgeValues) {
  const uint32_t vblocks[] = {0, 1, 2, 63, 64, 4095, 1u << 20, uint32_t(kInlineMaxVblock) - 1,
                              uint32_t(kInlineMaxVblock)};
  const uint32_t lblocks[] = {1, 2, 3, 511, 512, 1u << 26, uint32_t(kInlineMaxLblock) - 1,
                              uint32_t(kInlineMaxLblock)};
  const uint32_t counts[] = {1, 2, 31, 32, 63, 64};
  for (uint32_t v : vblocks)
    for (uint32_t l : lblocks)
      for (uint32_t c : counts)
        for (bool ext : {false, true}) {
          ASSERT_TRUE(FitsInline(v, l, c)) << v << " " << l << " " << c;
          InlineMap m{v, l, c, ext};
          uint64_t e = EncodeInline(m);
          ASSERT_NE(e, 0u);
          ASSERT_EQ(KindOf(e), ext ? EntryKind::kMapExtend : EntryKind::kMap);
          InlineMap d = DecodeInline(e);
          ASSERT_EQ(d.vblock, v);
          ASSERT_EQ(d.lblock, l);
          ASSERT_EQ(d.count, c);
          ASSERT_EQ(d.extend, ext);
        }
}

TEST(FormatEntries, InlineRoundTripRandom) {
  uint64_t seed = upfs_test::TestSeed(0x1234);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    uint32_t v = uint32_t(rng() & kInlineMaxVblock);
    uint32_t l = uint32_t(rng() & kInlineMaxLblock);
    if (l == 0) l = 1;
    uint32_t c = uint32_t(rng() % 64) + 1;
    bool ext = rng() & 1;
    ASSERT_TRUE(FitsInline(v, l, c));
    uint64_t e = EncodeInline(InlineMap{v, l, c, ext});
    ASSERT_NE(e, 0u);
    InlineMap d = DecodeInline(e);
    ASSERT_EQ(d.vblock, v) << "seed " << seed;
    ASSERT_EQ(d.lblock, l) << "seed " << seed;
    ASSERT_EQ(d.count, c) << "seed " << seed;
    ASSERT_EQ(d.extend, ext) << "seed " << seed;
    // Distinct maps never share an encoding: flipping any field changes it.
    ASSERT_NE(EncodeInline(InlineMap{v, l, c, !ext}), e);
  }
}

TEST(FormatEntries, FitsInlineBoundaries) {
  EXPECT_FALSE(FitsInline(0, 1, 0));
  EXPECT_TRUE(FitsInline(0, 1, 1));
  EXPECT_TRUE(FitsInline(0, 1, kInlineMaxCount));
  EXPECT_FALSE(FitsInline(0, 1, kInlineMaxCount + 1));
  EXPECT_TRUE(FitsInline(kInlineMaxVblock, 1, 1));
  EXPECT_FALSE(FitsInline(kInlineMaxVblock + 1, 1, 1));
  EXPECT_TRUE(FitsInline(0, kInlineMaxLblock, 1));
  EXPECT_FALSE(FitsInline(0, kInlineMaxLblock + 1, 1));
  EXPECT_FALSE(FitsInline(0, 0, 1));  // lblock 0 is "none" (the header)
  EXPECT_FALSE(FitsInline(uint64_t{1} << 32, 1, 1));
  EXPECT_FALSE(FitsInline(0, uint64_t{1} << 32, 1));
  EXPECT_FALSE(FitsInline(0, 1, uint64_t{1} << 32));
  EXPECT_TRUE(FitsInline(kInlineMaxVblock, kInlineMaxLblock, kInlineMaxCount));
}

TEST(FormatEntries, ReserveRoundTrip) {
  for (uint32_t c = 0; c < 512; ++c) {
    uint64_t e = EncodeReserve(c);
    ASSERT_NE(e, 0u);
    ASSERT_EQ(KindOf(e), EntryKind::kReserve);
    ASSERT_EQ(ReserveCount(e), c);
    ASSERT_TRUE(ReserveWellFormed(e));
  }
  // Any bit above the count field makes the entry malformed.
  for (int b = 12; b < 64; ++b) {
    uint64_t e = EncodeReserve(7) | (uint64_t{1} << b);
    EXPECT_FALSE(ReserveWellFormed(e)) << b;
  }
}

TEST(FormatEntries, ApplyRoundTrip) {
  const uint32_t crcs[] = {0, 1, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu, 0xe3069283u};
  for (uint32_t slot = 0; slot < 512; ++slot)
    for (uint32_t crc : crcs) {
      uint64_t e = EncodeApply(slot, crc);
      ASSERT_NE(e, 0u);
      ASSERT_EQ(KindOf(e), EntryKind::kApply);
      ASSERT_EQ(ApplySlot(e), slot);
      ASSERT_EQ(ApplyCrc(e), crc);
      ASSERT_TRUE(ApplyWellFormed(e));
    }
  for (int b = 12; b < 32; ++b) {
    uint64_t e = EncodeApply(3, 0xabcdef01u) | (uint64_t{1} << b);
    EXPECT_FALSE(ApplyWellFormed(e)) << b;
  }
}

TEST(FormatEntries, KindsAreDistinct) {
  uint64_t inl = EncodeInline(InlineMap{5, 6, 7, false});
  uint64_t ext = EncodeInline(InlineMap{5, 6, 7, true});
  uint64_t res = EncodeReserve(5);
  uint64_t app = EncodeApply(5, 0);
  EXPECT_EQ(KindOf(inl), EntryKind::kMap);
  EXPECT_EQ(KindOf(ext), EntryKind::kMapExtend);
  EXPECT_EQ(KindOf(res), EntryKind::kReserve);
  EXPECT_EQ(KindOf(app), EntryKind::kApply);
  // The smallest values of every encoder are still non-empty entries.
  EXPECT_NE(EncodeInline(InlineMap{0, 0, 1, false}), 0u);
  EXPECT_NE(EncodeReserve(0), 0u);
  EXPECT_NE(EncodeApply(0, 0), 0u);
  EXPECT_NE(EncodeTouch(0, 1), 0u);
  EXPECT_EQ(KindOf(EncodeTouch(5, 7)), EntryKind::kTouch);
}

TEST(FormatEntries, RunRoundTrip) {
  const uint32_t vals[] = {0, 1, 2, 0x7fffffffu, 0x80000000u, 0xffffffffu};
  for (uint32_t l : vals)
    for (uint32_t c : vals) {
      uint64_t w = EncodeRun(upfs::format::Run{l, c});
      upfs::format::Run r = DecodeRun(w);
      ASSERT_EQ(r.lblock, l);
      ASSERT_EQ(r.count, c);
    }
  std::mt19937_64 rng(99);
  for (int i = 0; i < 100000; ++i) {
    uint64_t w = rng();
    upfs::format::Run r = DecodeRun(w);
    ASSERT_EQ(EncodeRun(r), w);
  }
}

TEST(FormatLog, NextWord) {
  const uint32_t blocks[] = {0, 1, 2, 4095, 0x7fffffffu, 0xfffffffeu, 0xffffffffu};
  for (uint32_t b : blocks) {
    uint64_t w = NextWord(b);
    EXPECT_TRUE(NextWordValid(w)) << b;
    EXPECT_EQ(NextBlock(w), b);
    EXPECT_EQ(uint32_t(w >> 32), kLogMagic);
  }
  // A zeroed word (a block that was never initialized) is not a log block.
  EXPECT_FALSE(NextWordValid(0));
  EXPECT_FALSE(NextWordValid(1));
  EXPECT_FALSE(NextWordValid(~uint64_t{0}));
  for (int bit = 32; bit < 64; ++bit)
    EXPECT_FALSE(NextWordValid(NextWord(5) ^ (uint64_t{1} << bit))) << bit;
}

TEST(FormatEntries, TouchEncoding) {
  const uint32_t vblocks[] = {0, 1, 4095, uint32_t(kInlineMaxVblock)};
  for (uint32_t v : vblocks)
    for (uint32_t c : {1u, 2u, 63u, 64u}) {
      uint64_t e = EncodeTouch(v, c);
      ASSERT_NE(e, 0u);
      ASSERT_EQ(KindOf(e), EntryKind::kTouch);
      ASSERT_TRUE(TouchWellFormed(e));
      // Same field layout as the inline map (vblock and count).
      InlineMap d = DecodeInline(e);
      ASSERT_EQ(d.vblock, v);
      ASSERT_EQ(d.count, c);
    }
  EXPECT_FALSE(TouchWellFormed(EncodeTouch(1, 1) | (uint64_t{1} << 37)));
  EXPECT_FALSE(TouchWellFormed(EncodeTouch(1, 1) | (uint64_t{1} << 63)));
}

TEST(FormatEntries, GrowTailEncoding) {
  const uint64_t sizes[] = {1, 100, 4095, 4096, 4097, uint64_t{1} << 32, kMaxFileSize - 1,
                            kMaxFileSize};
  for (uint64_t sz : sizes) {
    uint64_t e = EncodeGrowTail(sz);
    ASSERT_NE(e, 0u);
    ASSERT_EQ(KindOf(e), EntryKind::kGrowTail);
    ASSERT_TRUE(GrowTailWellFormed(e)) << sz;
    ASSERT_EQ(GrowTailSize(e), sz);
  }
  // A size of zero (nothing appended), one past the limit, or a set bit in
  // the zero field is damage.
  EXPECT_FALSE(GrowTailWellFormed(EncodeGrowTail(0)));
  EXPECT_FALSE(GrowTailWellFormed(EncodeGrowTail(kMaxFileSize + 1)));
  for (int bit = 3; bit < 8; ++bit)
    EXPECT_FALSE(GrowTailWellFormed(EncodeGrowTail(100) | (uint64_t{1} << bit))) << bit;
}

TEST(FormatEntries, GrowTailCheckedEncoding) {
  struct Case {
    uint64_t size;
    uint32_t from;
  };
  const Case cases[] = {{2, 1}, {4096, 4095}, {4096, 1}, {4097 + 99, 1}, {(uint64_t{1} << 32) + 5, 4},
                        {kMaxFileSize, 100}, {kMaxFileSize - 4096 + 4000, 3999}};
  const uint32_t blocks[] = {1, 0xffffffffu};
  const uint32_t crcs[] = {0, 0xffffffffu, 0x12345678u};
  for (const Case& c : cases)
    for (uint32_t l : blocks)
      for (uint32_t crc : crcs) {
        const uint64_t w0 = EncodeGrowTailChecked0(c.size, c.from);
        const uint64_t w1 = EncodeGrowTailChecked1(l, crc);
        ASSERT_EQ(KindOf(w0), EntryKind::kGrowTailChecked);
        ASSERT_NE(w1, 0u);
        ASSERT_TRUE(GrowTailCheckedWellFormed(w0, w1)) << c.size << " " << c.from;
        ASSERT_EQ(GrowTailCheckedSize(w0), c.size);
        ASSERT_EQ(GrowTailCheckedFrom(w0), c.from);
        ASSERT_EQ(GrowTailCheckedBlock(w1), l);
        ASSERT_EQ(GrowTailCheckedCrc(w1), crc);
        ASSERT_EQ(GrowTailCheckedEnd(w0), uint32_t((c.size - 1) % kBlockSize) + 1);
      }
  const uint64_t w1 = EncodeGrowTailChecked1(5, 0);
  // Damage: the zero bit set; a size of zero or past the limit; a start of
  // zero (an append in place never starts a block) or at or past the end;
  // block 0 (the header).
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(200, 100) | 8, w1));
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(0, 100), w1));
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(kMaxFileSize + 1, 100), w1));
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(200, 0), w1));
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(200, 200), w1));
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(4096 + 10, 100), w1));
  EXPECT_FALSE(GrowTailCheckedWellFormed(EncodeGrowTailChecked0(200, 100), EncodeGrowTailChecked1(0, 7)));
}

TEST(FormatEntries, GranuleFlipEncoding) {
  const uint32_t vblocks[] = {0, 1, uint32_t(kGranuleMaxVblock)};
  const uint32_t pairs[] = {1, 0x12345678u, uint32_t(kMaxBlocks - 3)};
  const uint32_t masks[] = {1, 0x80000000u, 0xffffffffu};
  for (uint32_t v : vblocks)
    for (uint32_t p : pairs)
      for (uint32_t m : masks)
        for (int form : {0, 1, 2, 3}) {  // toggle, pair, anywhere shadow, unpairing
          const bool set = form == 1 || form == 2, anywhere = form >= 2;
          const uint64_t w0 = EncodeGranuleFlip0(v, p), w1 = EncodeGranuleFlip1(m, set, anywhere);
          ASSERT_EQ(KindOf(w0), EntryKind::kGrowTailChecked);
          ASSERT_TRUE(IsGranuleFlip(w0));
          ASSERT_TRUE(GranuleFlipWellFormed(w0, w1));
          ASSERT_FALSE(GrowTailCheckedWellFormed(w0, w1)) << "never taken for a checked append";
          ASSERT_EQ(GranuleFlipVblock(w0), v);
          ASSERT_EQ(GranuleFlipBlock(w0), p);
          ASSERT_EQ(GranuleFlipMask(w1), m);
          ASSERT_EQ(GranuleFlipSet(w1), set);
          ASSERT_EQ(GranuleFlipAnywhere(w1), anywhere);
        }
  EXPECT_FALSE(IsGranuleFlip(EncodeGrowTailChecked0(200, 100)));
  EXPECT_NE(EncodeGranuleFlip1(0, true), 0u) << "a set of mask 0 still has a nonzero word 1";
  // Damage: block 0 or past the block limit; a reserved bit set; a toggle
  // of no granule; a lost word 1. (An unpairing of mask 0 is well formed:
  // a pairing whose granules all live at home.)
  EXPECT_FALSE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, 0), EncodeGranuleFlip1(1, false)));
  EXPECT_FALSE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, uint32_t(kMaxBlocks - 2)), EncodeGranuleFlip1(1, false)));
  EXPECT_FALSE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, 9), EncodeGranuleFlip1(1, true) | (uint64_t{1} << 34)));
  EXPECT_TRUE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, 9), EncodeGranuleFlip1(0, false, true)));
  EXPECT_FALSE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, 9), uint64_t{1} << 63));
  EXPECT_FALSE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, 9), EncodeGranuleFlip1(0, false)));
  EXPECT_FALSE(GranuleFlipWellFormed(EncodeGranuleFlip0(3, 9), 0));
  // The granules of byte ranges.
  EXPECT_EQ(GranuleRange(0, 1), 1u);
  EXPECT_EQ(GranuleRange(127, 129), 3u);
  EXPECT_EQ(GranuleRange(128, 256), 2u);
  EXPECT_EQ(GranuleRange(0, kBlockSize), 0xffffffffu);
  EXPECT_EQ(GranuleRange(kBlockSize - 1, kBlockSize), 0x80000000u);
}

TEST(FormatEntries, PayloadWord1) {
  uint64_t w = EncodePayloadWord1(0xfffffffeu, 256, kSizeMax | kPayloadOverflow);
  EXPECT_EQ(uint32_t(w), 0xfffffffeu);
  EXPECT_EQ(uint16_t(w >> 32), 256);
  EXPECT_EQ(uint16_t(w >> 48), kSizeMax | kPayloadOverflow);
  EXPECT_EQ(kKnownPayloadFlags, 15);
}

// ---------------------------------------------------------------------------
// CRC-32C.

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(upfs::Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(upfs::Crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  unsigned char buf[32];
  std::memset(buf, 0, sizeof buf);
  EXPECT_EQ(upfs::Crc32c(buf, 32), 0x8A9136AAu);
  std::memset(buf, 0xff, sizeof buf);
  EXPECT_EQ(upfs::Crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(upfs::Crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(upfs::Crc32c(buf, 32), 0x113FDB5Cu);
  EXPECT_EQ(upfs::Crc32c("a", 1), 0xC1D04330u);
}

TEST(Crc32c, MatchesReferenceAtAllLengthsAndAlignments) {
  std::mt19937 rng(7);
  std::vector<unsigned char> data(4200);
  for (auto& c : data) c = static_cast<unsigned char>(rng());
  for (size_t align = 0; align < 8; ++align)
    for (size_t n = 0; n <= 300; ++n)
      ASSERT_EQ(upfs::Crc32c(data.data() + align, n), RefCrc32c(data.data() + align, n))
          << "align " << align << " n " << n;
  EXPECT_EQ(upfs::Crc32c(data.data(), 4096), RefCrc32c(data.data(), 4096));
  EXPECT_EQ(upfs::Crc32c(data.data() + 3, 4197), RefCrc32c(data.data() + 3, 4197));
}

// The two paths Crc32c takes (the inline loop below kCrc32cLibraryFrom,
// ISA-L from it on) give the same value for every length and seed, so a
// checksum never depends on which one wrote it, and a chain may cross from
// one to the other.
TEST(Crc32c, BothPathsAgreeWithSeedsAndAcrossTheThreshold) {
  std::mt19937_64 rng(11);
  std::vector<unsigned char> data(3 << 20);
  for (auto& c : data) c = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths = {0, 1, 7, 8, 9, 63, 64, 65, 4096, 4097, size_t(3) << 20};
  for (size_t n = upfs::kCrc32cLibraryFrom - 20; n < upfs::kCrc32cLibraryFrom + 20; ++n) lengths.push_back(n);
  for (size_t n : lengths) {
    for (uint32_t seed : {0u, 1u, 0xffffffffu, uint32_t(rng())}) {
      const size_t off = n == data.size() ? 0 : size_t(rng() % 8);
      const uint32_t in = upfs::Crc32cInline(data.data() + off, n, seed);
      ASSERT_EQ(upfs::Crc32cLibrary(data.data() + off, n, seed), in) << "n " << n << " seed " << seed;
      ASSERT_EQ(upfs::Crc32c(data.data() + off, n, seed), in) << "n " << n << " seed " << seed;
    }
  }
  // A chain whose first part takes the loop and second the library.
  const uint32_t whole = upfs::Crc32c(data.data(), 1000);
  EXPECT_EQ(whole, RefCrc32c(data.data(), 1000));
  EXPECT_EQ(upfs::Crc32c(data.data() + 100, 900, upfs::Crc32c(data.data(), 100)), whole);
  EXPECT_EQ(upfs::Crc32c(data.data() + 700, 300, upfs::Crc32c(data.data(), 700)), whole);
}

TEST(Crc32c, SeedChains) {
  const char* s = "The quick brown fox jumps over the lazy dog";
  size_t n = std::strlen(s);
  uint32_t whole = upfs::Crc32c(s, n);
  EXPECT_EQ(whole, 0x22620404u);
  for (size_t cut = 0; cut <= n; ++cut) {
    uint32_t a = upfs::Crc32c(s, cut);
    EXPECT_EQ(upfs::Crc32c(s + cut, n - cut, a), whole) << cut;
  }
}

TEST(Crc32c, DetectsSingleBitFlips) {
  std::vector<unsigned char> data(64, 0x5a);
  uint32_t base = upfs::Crc32c(data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    ASSERT_NE(upfs::Crc32c(data.data(), data.size()), base) << bit;
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
}

// The test records themselves (test_util.h): a region check must accept a
// whole write and reject a mix of two.
TEST(TestRecords, ClassifyRegion) {
  using namespace upfs_test;
  WriteId a{1, 10, 1000, 5000}, b{2, 20, 1000, 5000};
  auto da = MakePositional(a), db = MakePositional(b);
  RegionClass c = ClassifyRegion(da.data(), a.off, a.len);
  ASSERT_EQ(c.kind, RegionClass::kWhole) << c.error;
  EXPECT_EQ(c.w, a);
  std::vector<unsigned char> mix = da;
  std::memcpy(mix.data() + 4000, db.data() + 4000, 1000);
  EXPECT_EQ(ClassifyRegion(mix.data(), a.off, a.len).kind, RegionClass::kBad);
  mix = da;
  mix[4999] ^= 1;
  EXPECT_EQ(ClassifyRegion(mix.data(), a.off, a.len).kind, RegionClass::kBad);
  mix = da;
  mix[0] ^= 1;
  EXPECT_EQ(ClassifyRegion(mix.data(), a.off, a.len).kind, RegionClass::kBad);
  std::vector<unsigned char> z(5000, 0);
  EXPECT_EQ(ClassifyRegion(z.data(), a.off, a.len).kind, RegionClass::kZero);
  // A sub-range of a write is classified as that write.
  c = ClassifyRegion(da.data() + 100, a.off + 100, 300);
  ASSERT_EQ(c.kind, RegionClass::kWhole) << c.error;
  EXPECT_EQ(c.w, a);
  // Appends parse back.
  WriteId p{3, 4, 0, 96};
  std::vector<unsigned char> app(96 * 2);
  FillAppend(p, app.data());
  p.seq = 5;
  FillAppend(p, app.data() + 96);
  int count = 0;
  EXPECT_EQ(ParseAppends(app.data(), app.size(), [&](const WriteId& w) {
              EXPECT_EQ(w.seq, uint32_t(4 + count));
              ++count;
            }),
            "");
  EXPECT_EQ(count, 2);
  app[100] ^= 1;
  EXPECT_NE(ParseAppends(app.data(), app.size(), [](const WriteId&) {}), "");
}

}  // namespace
