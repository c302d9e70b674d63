// PatchIndex and patch payloads: the refs, the per-block limits, clearing,
// decoding a kPatch payload (and refusing malformed ones), and a replay
// that applies, supersedes and refuses patches.
#include "engine/patch_index.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/block_table.h"
#include "engine/log.h"
#include "format/format.h"
#include "tests/engine/memory_storage.h"
#include "util/crc32c.h"

namespace upfs_engine_test {
namespace {

using namespace upfs;
using namespace upfs::format;

TEST(PatchIndex, RefsRoundTripAtTheirLimits) {
  for (PatchRef r : {PatchRef{1, 0, 0, 1}, PatchRef{0xffffffffu, 509, 4095, 1},
                     PatchRef{77, 3, 2048, 2048}, PatchRef{5, 100, 7, 2041}}) {
    PatchRef d = PatchRef::Decode(r.Encode());
    EXPECT_EQ(d.lblock, r.lblock);
    EXPECT_EQ(d.slot, r.slot);
    EXPECT_EQ(d.offset, r.offset);
    EXPECT_EQ(d.length, r.length);
  }
  EXPECT_EQ((PatchRef{9, 4, 13, 10}.LogByte()), 16u + 4 * 8 + 5);
}

TEST(PatchIndex, KeepsPatchesInOrderWithinTheirLimits) {
  PatchIndex x;
  EXPECT_FALSE(x.any());
  uint64_t refs[kMaxPatchesPerBlock];
  EXPECT_EQ(x.Get(7, refs), 0u);
  for (uint32_t i = 0; i < kMaxPatchesPerBlock; ++i)
    ASSERT_TRUE(x.Add(7, PatchRef{10 + i, 3, 16 * i, 16})) << i;
  EXPECT_TRUE(x.any());
  EXPECT_FALSE(x.Add(7, PatchRef{99, 3, 0, 1})) << "a ninth patch";
  ASSERT_EQ(x.Get(7, refs), kMaxPatchesPerBlock);
  for (uint32_t i = 0; i < kMaxPatchesPerBlock; ++i) EXPECT_EQ(PatchRef::Decode(refs[i]).lblock, 10 + i);
  EXPECT_EQ(x.Bytes(7), 16 * kMaxPatchesPerBlock);
  // Re-applying the last entry (a catch-up that stopped at damage and
  // started again) adds nothing.
  EXPECT_TRUE(x.Add(7, PatchRef{10 + kMaxPatchesPerBlock - 1, 3, 16 * (kMaxPatchesPerBlock - 1), 16}));
  EXPECT_EQ(x.Count(7), kMaxPatchesPerBlock);
  // The byte limit: 2048 bytes on a block, not one more.
  ASSERT_TRUE(x.Add(1u << 20, PatchRef{1, 3, 0, kPatchMaxBytes - 1}));
  EXPECT_FALSE(x.Add(1u << 20, PatchRef{2, 3, 0, 2}));
  EXPECT_TRUE(x.Add(1u << 20, PatchRef{2, 3, 0, 1}));
  EXPECT_EQ(x.Count(6), 0u);
  EXPECT_EQ(x.Count(8), 0u);
}

TEST(PatchIndex, ClearsSmallAndLargeRanges) {
  PatchIndex x;
  const std::vector<uint64_t> blocks = {0, 5, 255, 256, 1000, 70000, 0xfffffffeu};
  for (uint64_t v : blocks) ASSERT_TRUE(x.Add(v, PatchRef{1, 3, 0, 8}));
  x.Clear(5, 6);
  EXPECT_EQ(x.Count(5), 0u);
  EXPECT_EQ(x.Count(0), 1u);
  x.Clear(200, 70000);  // walks the made leaves
  EXPECT_EQ(x.Count(255), 0u);
  EXPECT_EQ(x.Count(256), 0u);
  EXPECT_EQ(x.Count(1000), 0u);
  EXPECT_EQ(x.Count(70000), 1u);
  std::vector<uint64_t> seen;
  x.ForEach([&](uint64_t v, const uint64_t*, uint32_t n) {
    EXPECT_EQ(n, 1u);
    seen.push_back(v);
  });
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 70000, 0xfffffffeu}));
  x.Clear(0, uint64_t{1} << 32);
  seen.clear();
  x.ForEach([&](uint64_t v, const uint64_t*, uint32_t) { seen.push_back(v); });
  EXPECT_TRUE(seen.empty());
  // A cleared block takes patches again from the first.
  ASSERT_TRUE(x.Add(5, PatchRef{4, 3, 0, 8}));
  EXPECT_EQ(x.Count(5), 1u);
}

// One writer adds and clears while readers read: a reader never sees more
// than the limit, nor a ref that was never added (ThreadSanitizer checks
// the accesses).
TEST(PatchIndex, ReadersRaceOneWriter) {
  PatchIndex x;
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  std::atomic<uint64_t> bad{0};
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&] {
      uint64_t refs[kMaxPatchesPerBlock];
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint64_t v = 0; v < 4; ++v) {
          uint32_t n = x.Get(v, refs);
          if (n > kMaxPatchesPerBlock) bad.fetch_add(1);
          for (uint32_t i = 0; i < n; ++i)
            if (PatchRef::Decode(refs[i]).lblock != 1000 + v) bad.fetch_add(1);
        }
      }
    });
  for (int round = 0; round < 20000; ++round) {
    uint64_t v = round % 4;
    if (!x.Add(v, PatchRef{uint32_t(1000 + v), uint32_t(round % 500), 0, 8})) x.Clear(v, v + 1);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
}

// ---------------------------------------------------------------------------
// Payloads in a log

class PatchLog : public ::testing::Test {
 protected:
  LogBlock* lb() {
    return reinterpret_cast<LogBlock*>(ms_.space().base() + (MemoryStorage::kFirstLogBlock << kBlockShift));
  }
  // Writes a payload (reserve, words, apply) at slot_ and moves past it.
  void Payload(const std::vector<uint64_t>& w) {
    lb()->slots[slot_].store(EncodeReserve(uint32_t(w.size())));
    for (size_t i = 0; i < w.size(); ++i) lb()->slots[slot_ + 1 + i].store(w[i]);
    lb()->slots[slot_ + 1 + w.size()].store(EncodeApply(slot_, Crc32c(w.data(), w.size() * 8)));
    slot_ += uint32_t(w.size()) + 2;
  }
  static std::vector<uint64_t> Patch(uint32_t v, uint32_t off, const std::string& bytes) {
    std::vector<uint64_t> w(kPatchHeaderWords + PatchDataWords(off, uint32_t(bytes.size())), 0);
    w[1] = EncodePayloadWord1(v, 0, kPatch);
    w[2] = EncodePatchWord2(off, uint32_t(bytes.size()));
    std::memcpy(reinterpret_cast<char*>(&w[kPatchHeaderWords]) + (off & 7), bytes.data(), bytes.size());
    return w;
  }
  void ClearLog() {
    for (auto& w : lb()->slots) w.store(0);
    slot_ = 0;
  }
  void Map(uint32_t v, uint32_t l, bool extend) {
    ms_.bitmap().Set(l);
    lb()->slots[slot_++].store(EncodeInline({v, l, 1, extend}));
  }
  Status Replay(BlockTable* t) {
    ReplayResult res;
    return ms_.Replay(t, &res);
  }
  // The bytes of block v as a reader composes them.
  std::string Read(const BlockTable& t, uint64_t v) {
    std::string b(ms_.space().base() + (uint64_t(t.Get(v)) << kBlockShift), kBlockSize);
    uint64_t refs[kMaxPatchesPerBlock];
    uint32_t n = t.patches().Get(v, refs);
    for (uint32_t i = 0; i < n; ++i) {
      PatchRef r = PatchRef::Decode(refs[i]);
      std::memcpy(&b[r.offset], ms_.space().base() + (uint64_t(r.lblock) << kBlockShift) + r.LogByte(), r.length);
    }
    return b;
  }
  MemoryStorage ms_;
  uint32_t slot_ = 0;
};

TEST_F(PatchLog, ReplayAppliesPatchesInOrderUntilTheBlockIsMappedAnew) {
  Map(0, 10, true);
  Map(1, 11, true);
  Payload(Patch(0, 100, "hello"));
  Payload(Patch(0, 102, "LL"));
  Payload(Patch(1, 4090, "tail!!"));
  BlockTable t;
  ASSERT_TRUE(Replay(&t).ok());
  EXPECT_EQ(t.patches().Count(0), 2u);
  EXPECT_EQ(Read(t, 0).substr(100, 5), "heLLo");
  EXPECT_EQ(Read(t, 1).substr(4090, 6), "tail!!");
  Map(0, 12, false);  // a copy-on-write of block 0 supersedes its patches
  BlockTable u;
  ASSERT_TRUE(Replay(&u).ok());
  EXPECT_EQ(u.patches().Count(0), 0u);
  EXPECT_EQ(u.patches().Count(1), 1u);
}

TEST_F(PatchLog, ReplayRefusesPatchesUpfsDoesNotWrite) {
  auto refused = [&](const char* why) {
    BlockTable t;
    Status st = Replay(&t);
    EXPECT_EQ(st.err(), EUCLEAN) << why;
    return st.message();
  };
  Map(0, 10, false);  // mapped, but the size is 0
  Payload(Patch(0, 0, "x"));
  EXPECT_NE(refused("past the size").find("past the size"), std::string::npos);
  ClearLog();
  Map(0, 10, true);
  Payload(Patch(3, 0, "x"));
  EXPECT_NE(refused("unmapped").find("not mapped"), std::string::npos);
  ClearLog();
  Map(0, 10, true);
  for (uint32_t i = 0; i <= kMaxPatchesPerBlock; ++i) Payload(Patch(0, i, "y"));
  EXPECT_NE(refused("nine patches").find("more than"), std::string::npos);
}

TEST_F(PatchLog, DecodingRefusesMalformedPatchPayloads) {
  struct Case {
    const char* name;
    void (*damage)(std::vector<uint64_t>*);
  };
  const Case cases[] = {
      {"size word", [](std::vector<uint64_t>* w) { (*w)[0] = 5; }},
      {"runs", [](std::vector<uint64_t>* w) { (*w)[1] = EncodePayloadWord1(0, 1, kPatch); }},
      {"size flag", [](std::vector<uint64_t>* w) { (*w)[1] = EncodePayloadWord1(0, 0, kPatch | kSizeMax); }},
      {"length 0", [](std::vector<uint64_t>* w) { (*w)[2] = EncodePatchWord2(0, 0); }},
      {"past the block", [](std::vector<uint64_t>* w) { (*w)[2] = EncodePatchWord2(4090, 8); }},
      {"too long", [](std::vector<uint64_t>* w) { (*w)[2] = EncodePatchWord2(0, kPatchMaxBytes + 1); }},
      {"high bits", [](std::vector<uint64_t>* w) { (*w)[2] |= uint64_t{1} << 40; }},
      {"words", [](std::vector<uint64_t>* w) { w->push_back(0); }},
  };
  for (const Case& c : cases) {
    ClearLog();
    Map(0, 10, true);
    std::vector<uint64_t> w = Patch(0, 8, "01234567");
    c.damage(&w);
    Payload(w);
    BlockTable t;
    Status st = Replay(&t);
    EXPECT_EQ(st.err(), EUCLEAN) << c.name;
    EXPECT_NE(st.message().find("log entry"), std::string::npos) << c.name << ": " << st.message();
  }
}

}  // namespace
}  // namespace upfs_engine_test
