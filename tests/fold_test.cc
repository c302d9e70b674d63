// Pairs folded back into single blocks (docs/design.md, "Folding pairs
// back"), over the per-file container: a forced GC folds every pair and
// the file reads, stats and audits as before; a GC folds pairs no flip
// touched for a second once readers meet their shadows (without readers,
// only pairs idle far longer), and a reader that meets granules in a
// shadow asks the GC worker for that fold; folds racing
// small writers from threads lose, tear and reorder nothing; a pair a
// fold freed can be paired again; a version 5 fold writes the granules
// its shadows held, a version 4 fold whole blocks; a file that goes quiet
// has its pairs folded by the GC worker, a batch at a time, and its log
// compacted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "container/perfile/inspect.h"
#include "engine/file.h"
#include "engine/file_internal.h"
#include "engine/gc_worker.h"
#include "format/format.h"
#include "medium/persist_counter.h"
#include "engine_file_util.h"
#include "opened_per_file.h"
#include "pair_idle_age.h"
#include "patch_test_util.h"
#include "test_util.h"

namespace upfs {
namespace {

using namespace format;
using upfs_test::Opened;
using upfs_test::PairIdleAge;
using upfs_test::PatchBytes;
using upfs_test::TempDir;

constexpr uint64_t kBlocks = 8;

uint64_t HeldBlocks(Opened* f) {
  FileStat st;
  EXPECT_TRUE(f->file->Stat(&st).ok());
  return st.blocks;
}

// A file of kBlocks blocks and a half, each block paired by small writes
// (granules in both homes), the model updated.
void PairEveryBlock(Opened* f, std::string* model) {
  *model = PatchBytes(kBlocks * kBlockSize + kBlockSize / 2, 1);
  f->Write(*model, 0);
  for (uint64_t v = 0; v <= kBlocks; ++v) {  // the last, partial one too
    for (uint32_t k = 0; k < 3; ++k) {
      const uint64_t off = v * kBlockSize + 100 + 600 * k;
      const std::string b = PatchBytes(200 + k, uint32_t(10 * v + k));
      f->Write(b, off);
      model->replace(off, b.size(), b);
    }
  }
}

// Every pair folded: the file holds its mapped blocks alone, reads as the
// model, and leaks nothing.
void ExpectAllFolded(Opened* f, const std::string& model, const char* why) {
  EXPECT_EQ(HeldBlocks(f), kBlocks + 1) << why;
  EXPECT_EQ(f->ReadAll(), model);
  ExpectAllocationExact(f->file.get());
}

void SleepPastCold() { std::this_thread::sleep_for(std::chrono::milliseconds(kPairColdMs + 100)); }

TEST(Fold, AForcedGcFoldsEveryPairAndTheFileReadsAsBefore) {
  TempDir d;
  const std::string path = d.File("f");
  std::string model;
  {
    Opened f(path);
    PairEveryBlock(&f, &model);
    const uint64_t mapped = kBlocks + 1;
    ASSERT_EQ(HeldBlocks(&f), 2 * mapped) << "each paired block holds a shadow";
    ASSERT_TRUE(f.file->CollectGarbage(true).ok());
    ExpectAllFolded(&f, model, "every pair folded");
  }
  FileReport rep;
  ASSERT_TRUE(InspectFile(path, true, &rep).ok()) << (rep.problems.empty() ? "" : rep.problems.front());
  EXPECT_EQ(rep.paired_blocks, 0u);
  Opened g(path);
  EXPECT_EQ(g.ReadAll(), model) << "after reopen (replay)";
  // A folded block pairs again at its next small write.
  g.Write(std::string(50, 'z'), 3 * kBlockSize + 7);
  model.replace(3 * kBlockSize + 7, 50, std::string(50, 'z'));
  EXPECT_EQ(HeldBlocks(&g), kBlocks + 2) << "a pair again";
  EXPECT_EQ(g.ReadAll(), model);
}

// A read that meets shadow granules (n bytes at `off`), and the GC it
// asks for done.
void ReadMeetingShadows(Opened* f, const std::string& model, uint64_t off, size_t n) {
  std::string got(n, '\0');
  size_t done = 0;
  ASSERT_TRUE(f->file->Read(got.data(), got.size(), off, &done).ok());
  EXPECT_EQ(got, model.substr(off, n));
  f->file->Settle();  // the GC worker's fold, or the read's own without one
}

TEST(Fold, AGcFoldsPairsNoFlipTouchedForASecondOnceReadsMeetShadows) {
  TempDir d;
  Opened f(d.File("f"));
  std::string model;
  PairEveryBlock(&f, &model);
  const uint64_t mapped = kBlocks + 1;
  SleepPastCold();
  // Blocks 0 and 1 flip again: hot; the others are cold now.
  const auto hot_at = std::chrono::steady_clock::now();
  for (uint64_t v = 0; v < 2; ++v) {
    f.Write(std::string(30, 'h'), v * kBlockSize + 5);
    model.replace(v * kBlockSize + 5, 30, std::string(30, 'h'));
  }
  ASSERT_TRUE(f.file->CollectGarbage(false).ok());
  EXPECT_EQ(HeldBlocks(&f), 2 * mapped) << "no reader met a shadow: a file of small writes keeps its pairs";
  // Block 2's second small write put granules in its shadow.
  ReadMeetingShadows(&f, model, 2 * kBlockSize + 700, 300);
  ASSERT_TRUE(f.file->CollectGarbage(false).ok());
  // Whether the two were still hot at the GC is a matter of time: checked
  // only if the GC came well within the second.
  if (std::chrono::steady_clock::now() - hot_at < std::chrono::milliseconds(kPairColdMs / 2)) {
    EXPECT_EQ(HeldBlocks(&f), mapped + 2) << "the cold pairs folded, the hot two kept";
  }
  EXPECT_EQ(f.ReadAll(), model);
  SleepPastCold();
  ReadMeetingShadows(&f, model, 700, 300);  // block 0's granules 5-7
  ASSERT_TRUE(f.file->CollectGarbage(false).ok());
  ExpectAllFolded(&f, model, "once cold, folded too");
}

TEST(Fold, AReaderMeetingShadowGranulesAsksForTheFold) {
  TempDir d;
  Opened f(d.File("f"));
  std::string model;
  PairEveryBlock(&f, &model);
  SleepPastCold();
  // The second and third small writes of each block put their granules in
  // its shadow: this read meets some.
  ReadMeetingShadows(&f, model, 2 * kBlockSize + 700, 300);
  ExpectAllFolded(&f, model, "the read's request folded the cold pairs");
}

// Threads writing small overlapping ranges while forced GCs fold their
// pairs (RaceSmallWriters's reader checks the order of every write).
// Folded home (version 5), a paired block's shadow granules go back into
// the block itself: the GC persists those granules and a line each, where
// a version 4 GC copies every pair whole into a fresh block. Both leave
// the same bytes, blocks and a clean file.
TEST(Fold, AVersion5FoldCopiesTheShadowsGranulesNotTheBlock) {
  TempDir d;
  uint64_t persisted[2] = {0, 0};
  for (const bool v4 : {false, true}) {
    SCOPED_TRACE(v4 ? "version 4" : "version 5");
    const std::string path = d.File(v4 ? "v4" : "v5");
    { Opened f(path); }
    if (v4) upfs_test::LabelVersion(path, kFirstAnywhereShadowVersion - 1);
    Opened f(path);
    std::string model;
    PairEveryBlock(&f, &model);
    {
      PersistCounter counter;
      ASSERT_TRUE(f.file->CollectGarbage(true).ok());
      persisted[v4] = counter.bytes();
    }
    ExpectAllFolded(&f, model, "every pair folded");
  }
  // Nine pairs: 36 KiB of blocks copied against a few granules each; the
  // compacted logs are the same.
  EXPECT_LT(persisted[0] + (kBlocks + 1) * kBlockSize / 2, persisted[1])
      << "version 5: " << persisted[0] << " bytes, version 4: " << persisted[1];
}

TEST(Fold, FoldsRacingSmallWritersLoseTearAndReorderNothing) {
  TempDir d;
  Opened f(d.File("f"));
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::thread gc([&] {
    while (!stop.load()) {
      if (!f.file->CollectGarbage(true).ok()) errors++;
      std::this_thread::yield();
    }
  });
  upfs_test::RaceSmallWriters(&f, 3, 3000, 4);
  stop = true;
  gc.join();
  EXPECT_EQ(errors.load(), 0);
  ASSERT_TRUE(f.file->CollectGarbage(true).ok());
  EXPECT_EQ(HeldBlocks(&f), 4u) << "no pair left";
  ExpectAllocationExact(f.file.get());
}

// Until f holds `blocks` blocks, or 20 s (a loaded machine's worker is
// late, never early).
bool HoldsWithin20s(Opened* f, uint64_t blocks) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HeldBlocks(f) != blocks) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Called directly, as the worker does: nothing is folded before the pairs
// are idle for the idle age, and once they are, every one is.
TEST(QuietFold, FoldsOnlyPairsIdleForTheIdleAge) {
  TempDir d;
  Opened f(d.File("f"));
  std::string model;
  PairEveryBlock(&f, &model);
  const uint64_t mapped = kBlocks + 1;
  const uint32_t again = f.file->FoldWhenQuiet();
  EXPECT_GT(again, 0u) << "pairs left: it wants to look again";
  EXPECT_LE(again, kPairIdleMs);
  EXPECT_EQ(HeldBlocks(&f), 2 * mapped) << "written just now: not quiet for 30 s";
  f.file->Settle();  // a GC the writes asked for would fold with the test's idle age
  PairIdleAge idle(50);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GT(f.file->FoldWhenQuiet(), 0u);
  ExpectAllFolded(&f, model, "idle for the idle age");
  EXPECT_EQ(f.file->FoldWhenQuiet(), 0u) << "no pair left: nothing to wait for";
}

// Two batches of pairs: each run folds a batch and asks to run again at
// once; the run after the last batch (which found nothing left to fold)
// compacts the log, which held every pairing and every unpairing, down to
// the mapping.
TEST(QuietFold, FoldsABatchAtATimeThenCompactsTheLog) {
  // No GC in the background: with the idle age at 1 ms below, one the
  // folds' commits asked for would fold every pair it finds, racing the
  // batches this test counts (seen once under TSan: 10 pairs more).
  const bool background = GcWorker::Background();
  GcWorker::SetBackground(false);
  struct Restore {
    bool on;
    ~Restore() { GcWorker::SetBackground(on); }
  } restore{background};
  TempDir d;
  Opened f(d.File("f"));
  const uint64_t blocks = 2 * kQuietFoldBatch;
  std::string model = PatchBytes(blocks * kBlockSize, 7);
  f.Write(model, 0);
  for (uint64_t v = 0; v < blocks; ++v) {
    const std::string b = PatchBytes(64, uint32_t(v));
    f.Write(b, v * kBlockSize + 1000);
    model.replace(v * kBlockSize + 1000, b.size(), b);
  }
  ASSERT_EQ(HeldBlocks(&f), 2 * blocks);
  uint64_t log_before = 0, log_after = 0;
  f.file->Settle();  // a GC the writes asked for would fold with the test's idle age
  ASSERT_TRUE(f.file->LogLength(&log_before).ok());
  PairIdleAge idle(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(f.file->FoldWhenQuiet(), 1u) << "a batch folded, more to come";
  EXPECT_EQ(HeldBlocks(&f), blocks + kQuietFoldBatch);
  EXPECT_EQ(f.file->FoldWhenQuiet(), 1u) << "the second batch";
  EXPECT_EQ(HeldBlocks(&f), blocks);
  EXPECT_EQ(f.file->FoldWhenQuiet(), 0u) << "nothing left: it compacts, and waits for a new pairing";
  ASSERT_TRUE(f.file->LogLength(&log_after).ok());
  EXPECT_LT(log_after, log_before) << "compacted";
  EXPECT_LE(log_after, 2u) << "a mapping of one run and nothing else";
  EXPECT_EQ(f.ReadAll(), model);
  ExpectAllocationExact(f.file.get());
}

// Through the GC worker: a first flip asks for the fold, and the file's
// pairs go once it is quiet; a file closed before its fold is due is
// forgotten (ASan: no use after free), and the next open, which finds the
// pairs, asks again.
TEST(QuietFold, TheWorkerFoldsAQuietFileAndAReopenedOne) {
  if (!GcWorker::Background()) GTEST_SKIP() << "UPFS_BACKGROUND_GC=0: no worker";
  TempDir d;
  const std::string path = d.File("f");
  PairIdleAge idle(200);
  std::string model;
  const uint64_t mapped = kBlocks + 1;
  {
    Opened f(path);
    PairEveryBlock(&f, &model);
    EXPECT_TRUE(HoldsWithin20s(&f, mapped)) << "still " << HeldBlocks(&f) << " blocks";
    EXPECT_EQ(f.ReadAll(), model);
    ExpectAllocationExact(f.file.get());
  }
  {
    Opened f(path);
    f.Write(std::string(40, 'q'), 2 * kBlockSize + 9);
    model.replace(2 * kBlockSize + 9, 40, std::string(40, 'q'));
    ASSERT_EQ(HeldBlocks(&f), mapped + 1);
  }  // closed within the idle age
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  Opened f(path);
  ASSERT_EQ(HeldBlocks(&f), mapped + 1) << "a closed file is not folded";
  EXPECT_TRUE(HoldsWithin20s(&f, mapped)) << "the open asked for the fold";
  EXPECT_EQ(f.ReadAll(), model);
}

}  // namespace
}  // namespace upfs
