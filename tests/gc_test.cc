// GC of real per-file files: the log stays bounded under overwrites, with
// GC inline (as the crash explorer runs it) and in the process's GC worker;
// a forced compaction keeps the content and leaves the file clean; GC
// racing writers and readers tears nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine/gc_worker.h"
#include "engine/log_compactor.h"
#include "engine/log_writer.h"
#include "engine_file_util.h"
#include "format/format.h"
#include "test_util.h"

namespace upfs {
namespace {

using namespace format;
using upfs_test::TempDir;

// GC run where the workload triggers it (as the crash explorer runs it),
// or by the process's worker; restored after the test.
class GcMode {
 public:
  explicit GcMode(bool background) : was_(GcWorker::Background()) { GcWorker::SetBackground(background); }
  ~GcMode() { GcWorker::SetBackground(was_); }

 private:
  bool was_;
};

// 200,000 overwrites of three blocks (393 log blocks without GC; the
// trigger is 32 + 2 x 2 blocks here): the log never grows past
// `bound_while_writing` blocks, and is below 64 once the GC asked for last
// is done.
void ExpectOverwritesKeepTheLogBounded(bool background, uint64_t bound_while_writing) {
  GcMode mode(background);
  TempDir d;
  OpenedFile of;
  OpenEngine(d.File("g"), &of);
  File* f = of.file.get();
  std::vector<char> b(kBlockSize);
  uint64_t at, len = 0, max_len = 0;
  for (int i = 0; i < 200000; ++i) {
    std::memset(b.data(), i & 0xff, b.size());
    ASSERT_TRUE(f->Write(b.data(), b.size(), kBlockSize * (i % 3), false, &at).ok());
    if (i % 1000 == 0) {
      ASSERT_TRUE(f->LogLength(&len).ok());
      max_len = std::max(max_len, len);
    }
  }
  EXPECT_LT(max_len, bound_while_writing);
  f->Settle();
  ASSERT_TRUE(f->LogLength(&len).ok());
  EXPECT_LT(len, 64u);
  std::vector<char> r(kBlockSize);
  size_t done;
  ASSERT_TRUE(f->Read(r.data(), r.size(), kBlockSize * (199999 % 3), &done).ok());
  EXPECT_EQ(r[0], char(199999 & 0xff));
}

TEST(Gc, TenThousandsOfOverwritesKeepTheLogBounded) { ExpectOverwritesKeepTheLogBounded(false, 64); }

// Writers go on while the worker compacts, and wait for it only past
// twice the trigger (72 blocks here).
TEST(Gc, ABackgroundGcKeepsTheLogBoundedToo) { ExpectOverwritesKeepTheLogBounded(true, 128); }

// Small writes over a big file, each its block's first flip: a compaction
// keeps an entry for every pair, so the state grows as fast as the log
// and a GC cannot make the log shorter than that (the floor). None is
// asked for in that first pass (each replayed and rewrote the whole
// log for nothing, and a writer past twice the trigger waited for one:
// 11-18 ms in random 128-byte writes over a fresh 1 GiB file). Once the
// blocks are paired, toggles grow the log alone, and GC bounds it as ever.
TEST(Gc, AFirstPassOfFirstFlipsAsksForNoGcAndTogglesStayBounded) {
  GcMode mode(false);  // inline: every GC the writes ask for is done by then
  TempDir d;
  OpenedFile of;
  OpenEngine(d.File("first"), &of);
  File* f = of.file.get();
  constexpr uint64_t kBlocks = 24576;  // 96 MiB
  constexpr uint64_t kFirst = 20000;   // first flips: about 78 log blocks
  std::vector<char> big(1 << 20, 'f');
  uint64_t at;
  for (uint64_t i = 0; i < kBlocks * kBlockSize; i += big.size())
    ASSERT_TRUE(f->Write(big.data(), big.size(), i, false, &at).ok());
  uint64_t len;
  ASSERT_TRUE(f->LogLength(&len).ok());
  ASSERT_LT(len, GcTriggerBlocks(0)) << "the fill alone asks for a GC: the test shows nothing";
  char b[128];
  const uint64_t before = LogCompactor::StatesEncodedForTest();
  for (uint64_t i = 0; i < kFirst; ++i) {  // blocks 0, 1, 2, ... in a scattered order
    std::memset(b, int(i), sizeof b);
    const uint64_t v = (i * 7919) % kBlocks;
    ASSERT_TRUE(f->Write(b, sizeof b, v * kBlockSize + 128 * (i % 32), false, &at).ok());
  }
  ASSERT_TRUE(f->LogLength(&len).ok());
  ASSERT_GT(len, 2 * GcTriggerBlocks(0)) << "past twice the trigger of an empty state";
  EXPECT_EQ(LogCompactor::StatesEncodedForTest(), before) << "GCs for nothing in a first pass";
  // Toggles of those blocks: 200,000 slots, 392 log blocks if nothing
  // were compacted; the trigger is 32 + 2 x 78 blocks.
  uint64_t max_len = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    std::memset(b, int(i), sizeof b);
    const uint64_t v = ((i % kFirst) * 7919) % kBlocks;
    ASSERT_TRUE(f->Write(b, sizeof b, v * kBlockSize + 128 * (i % 32), false, &at).ok());
    if (i % 1000 == 0) {
      ASSERT_TRUE(f->LogLength(&len).ok());
      max_len = std::max(max_len, len);
    }
  }
  EXPECT_GT(LogCompactor::StatesEncodedForTest(), before) << "toggles asked for no GC";
  EXPECT_LE(max_len, 2 * GcTriggerBlocks(79) + 1);
}

TEST(Gc, ForcedCompactionPreservesContentAndIsClean) {
  TempDir d;
  std::string path = d.File("c");
  std::vector<char> expect(300 * kBlockSize, 0);
  {
    OpenedFile of;
    OpenEngine(path, &of);
    std::mt19937 rng(7);
    uint64_t at;
    for (int i = 0; i < 5000; ++i) {
      uint64_t off = rng() % (expect.size() - 9000);
      uint64_t n = 1 + rng() % 9000;
      std::vector<char> b(n, char('a' + i % 26));
      ASSERT_TRUE(of.file->Write(b.data(), n, off, false, &at).ok());
      std::memcpy(&expect[off], b.data(), n);
    }
    uint64_t before, after;
    ASSERT_TRUE(of.file->LogLength(&before).ok());
    ASSERT_TRUE(of.file->CollectGarbage(true).ok());
    ASSERT_TRUE(of.file->LogLength(&after).ok());
    EXPECT_LE(after, before);
    std::vector<char> got(expect.size());
    size_t done;
    ASSERT_TRUE(of.file->Read(got.data(), got.size(), 0, &done).ok());
    uint64_t size;
    ASSERT_TRUE(of.file->Size(&size).ok());
    ASSERT_EQ(std::memcmp(got.data(), expect.data(), size), 0);
    ExpectAllocationExact(of.file.get());
  }
  ReportIsClean(path);
}

TEST(Gc, ConcurrentWithWritersAndReaders) {
  TempDir d;
  OpenedFile of;
  OpenEngine(d.File("cc"), &of);
  constexpr int kSlots = 16;
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  auto writer = [&](int id) {
    std::vector<uint64_t> b(kBlockSize / 8);
    uint64_t at;
    for (uint64_t i = 1; i < 20000; ++i) {
      std::fill(b.begin(), b.end(), (uint64_t(id) << 32) | i);
      if (!of.file->Write(b.data(), kBlockSize, kBlockSize * ((i * 7 + id) % kSlots), false, &at).ok())
        errors++;
    }
  };
  auto reader = [&] {
    std::vector<uint64_t> b(kBlockSize / 8);
    size_t done;
    while (!stop.load()) {
      for (int s = 0; s < kSlots; ++s) {
        if (!of.file->Read(b.data(), kBlockSize, kBlockSize * s, &done).ok()) errors++;
        if (done == kBlockSize && std::any_of(b.begin(), b.end(), [&](uint64_t w) { return w != b[0]; }))
          errors++;  // torn
      }
    }
  };
  auto gc = [&] {
    while (!stop.load())
      if (!of.file->CollectGarbage(true).ok()) errors++;
  };
  std::thread w1(writer, 1), w2(writer, 2), r(reader), g(gc);
  w1.join();
  w2.join();
  stop = true;
  r.join();
  g.join();
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace
}  // namespace upfs
