// Sub-block writes in files of a pool, through the C API: a small write
// persists its bytes and a few lines of log, not its block; thousands of
// small writes of every size and alignment, with truncations into patched
// blocks, read back as a model says, before and after a remount, and leave
// a pool fsck finds consistent with nothing leaked; threads patching overlapping ranges of one
// pool file never see a write torn, undone or reordered; cold pairs fold
// back after a read meets them.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "container/pool/pool_format.h"
#include "engine/file.h"
#include "engine/file_internal.h"
#include "engine/gc_worker.h"
#include "format/format.h"
#include "medium/persist_counter.h"
#include "label_version.h"
#include "pair_idle_age.h"
#include "patch_test_util.h"
#include "pool_concurrency_util.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs::format::kBlockSize;
using upfs::format::kCacheLine;
using upfs_test::PatchBytes;

// A fresh pool, mounted (PoolConcurrencyTest: names of its own per test,
// Umount/Mount, CheckDetached).
class PoolPatch : public pool_conc::PoolConcurrencyTest {
 protected:
  void Remount() {
    Umount();
    Mount();
  }
  // A new, empty pool labelled `version` as the build of that version
  // would have made it (made again: records this build logged are not in
  // that version's format).
  void Relabel(uint32_t version) {
    Umount();
    ASSERT_EQ(unlink(pool_.c_str()), 0);
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_TRUE(upfs_test::RelabelPoolVersion(pool_, version));
    Mount();
  }
  // Small writes of every size, truncations and remounts against a model,
  // then a pool fsck finds nothing wrong or leaked.
  void SmallWritesMatchAModel(uint64_t seed);
  std::string ReadAll(int fd) {
    struct stat st;
    EXPECT_EQ(upfs_fstat(fd, &st), 0);
    std::string out(size_t(st.st_size), '\0');
    EXPECT_EQ(upfs_pread(fd, out.data(), out.size(), 0), ssize_t(out.size())) << upfs_last_error();
    return out;
  }
};

// Where the first difference is, for a readable failure.
std::string FirstDifference(const std::string& want, const std::string& got) {
  if (want.size() != got.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) return "byte " + std::to_string(i) + " differs";
  return "equal";
}

TEST_F(PoolPatch, ASmallWriteInAPoolFilePersistsItsBytesNotItsBlock) {
  const int fd = upfs_open(P("f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const std::string base = PatchBytes(64 * kBlockSize, 1);
  ASSERT_EQ(upfs_pwrite(fd, base.data(), base.size(), 0), ssize_t(base.size()));
  const std::string small = PatchBytes(128, 2);
  uint64_t persisted;
  // The block's first small write pairs it (a copy of the block into a
  // pair of blocks: tests/flip_test.cc); the next ones persist their
  // granules and the flip's line.
  {
    upfs::PersistCounter counter;
    ASSERT_EQ(upfs_pwrite(fd, small.data(), small.size(), 5 * kBlockSize + 1024), 128);
    EXPECT_LE(counter.bytes(), kBlockSize + 8 * kCacheLine) << "pairing a block";
  }
  {
    upfs::PersistCounter counter;
    ASSERT_EQ(upfs_pwrite(fd, small.data(), small.size(), 5 * kBlockSize + 640), 128);
    persisted = counter.bytes();
  }
  // The granule's two lines, the flip's line (and the inode's times,
  // which a pool keeps in one word of its own).
  EXPECT_LE(persisted, 4 * kCacheLine) << "a 128-byte write in a pool file";
  // A write across a block's end is not a patch: it copies both blocks.
  {
    upfs::PersistCounter counter;
    ASSERT_EQ(upfs_pwrite(fd, small.data(), small.size(), 7 * kBlockSize - 64), 128);
    persisted = counter.bytes();
  }
  EXPECT_GE(persisted, 2 * kBlockSize) << "a write across a block edge";
  std::string want = base;
  std::memcpy(&want[5 * kBlockSize + 1024], small.data(), small.size());
  want.replace(5 * kBlockSize + 640, 128, small);
  want.replace(7 * kBlockSize - 64, 128, small);
  EXPECT_EQ(ReadAll(fd), want);
  ASSERT_EQ(upfs_close(fd), 0);
}

TEST_F(PoolPatch, SmallWritesOfEverySizeMatchAModelAcrossRemounts) {
  SmallWritesMatchAModel(upfs_test::TestSeed(20261127));
}

// A pool of version 4 (before granule flips): its files' small writes are
// patches, as the builds that made it wrote them.
TEST_F(PoolPatch, AVersion4PoolsFilesGetPatchesThatMatchAModel) {
  Relabel(upfs::format::pool::kFirstGranulePoolVersion - 1);
  const int fd = upfs_open(P("v4").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const std::string base = PatchBytes(8 * kBlockSize, 1), small = PatchBytes(128, 2);
  ASSERT_EQ(upfs_pwrite(fd, base.data(), base.size(), 0), ssize_t(base.size()));
  {
    upfs::PersistCounter counter;
    ASSERT_EQ(upfs_pwrite(fd, small.data(), small.size(), 3 * kBlockSize + 640), 128);
    EXPECT_LE(counter.bytes(), 8 * kCacheLine) << "a patch: no block copied, no pair made";
  }
  ASSERT_EQ(upfs_close(fd), 0);
  ASSERT_EQ(upfs_unlink(P("v4").c_str()), 0);
  SmallWritesMatchAModel(upfs_test::TestSeed(20261130));
}

// A pool of version 5 (before anywhere shadows): a block's first small
// write copies it into a pair of neighbours, as the builds that made it
// did; later ones persist their granules. A version 6 pool's first small
// write persists its granule and a line of log.
TEST_F(PoolPatch, AVersion5PoolsFilesKeepPairsOfNeighbours) {
  for (const bool old : {false, true}) {  // the fresh pool, then labelled 5
    SCOPED_TRACE(old ? "version 5" : "version 6");
    if (old) Relabel(upfs::format::pool::kFirstAnywhereShadowPoolVersion - 1);
    const std::string name = P(old ? "v5" : "v6");
    const int fd = upfs_open(name.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    const std::string base = PatchBytes(8 * kBlockSize, 1), small = PatchBytes(128, 2);
    ASSERT_EQ(upfs_pwrite(fd, base.data(), base.size(), 0), ssize_t(base.size()));
    {  // one counter at a time
      upfs::PersistCounter first;
      ASSERT_EQ(upfs_pwrite(fd, small.data(), small.size(), 3 * kBlockSize + 640), 128);
      if (old)
        EXPECT_GE(first.bytes(), kBlockSize) << "the block copied into a pair";
      else
        EXPECT_LE(first.bytes(), 3 * kCacheLine) << "its granule and the flip's line";
    }
    {
      upfs::PersistCounter second;
      ASSERT_EQ(upfs_pwrite(fd, small.data(), small.size(), 3 * kBlockSize + 1024), 128);
      EXPECT_LE(second.bytes(), 3 * kCacheLine);
    }
    std::string model = base;
    model.replace(3 * kBlockSize + 640, 128, small);
    model.replace(3 * kBlockSize + 1024, 128, small);
    struct stat st;
    ASSERT_EQ(upfs_fstat(fd, &st), 0);
    EXPECT_EQ(st.st_blocks, 9 * 8) << "eight blocks and a shadow";
    ASSERT_EQ(upfs_close(fd), 0);
    Remount();
    const int again = upfs_open(name.c_str(), O_RDONLY, 0);
    ASSERT_GE(again, 0) << upfs_last_error();
    EXPECT_EQ(ReadAll(again), model);
    ASSERT_EQ(upfs_close(again), 0);
    ASSERT_EQ(upfs_unlink(name.c_str()), 0);
  }
  CheckDetached(0, 1);
}

void PoolPatch::SmallWritesMatchAModel(uint64_t seed) {
  const int steps = int(upfs_test::Scaled(20000, 3000));
  std::printf("seed %llu, %d steps\n", (unsigned long long)seed, steps);
  std::mt19937_64 r(seed);
  int fd = upfs_open(P("m").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  std::string model = PatchBytes(48 * kBlockSize + 100, uint32_t(seed));
  ASSERT_EQ(upfs_pwrite(fd, model.data(), model.size(), 0), ssize_t(model.size()));
  for (int step = 0; step < steps; ++step) {
    const uint64_t pick = r() % 100;
    if (pick < 2) {
      // Truncate, often into a patched block (then grow again below).
      const uint64_t len = r() % (model.size() + 1);
      ASSERT_EQ(upfs_ftruncate(fd, off_t(len)), 0) << upfs_last_error();
      model.resize(len);
      continue;
    }
    if (pick < 3) {
      // The same file in a fresh mount: what the next process replays.
      ASSERT_EQ(upfs_close(fd), 0);
      Remount();
      fd = upfs_open(P("m").c_str(), O_RDWR, 0);
      ASSERT_GE(fd, 0) << upfs_last_error();
      const std::string got = ReadAll(fd);
      ASSERT_EQ(got, model) << "after a remount at step " << step << ": " << FirstDifference(model, got);
      continue;
    }
    // Mostly patch-sized writes (1-128 or 1-600 bytes) anywhere, some past
    // the end (they grow the file and are not patches).
    const uint64_t n = 1 + r() % (pick < 70 ? 128 : 600);
    const uint64_t off = r() % (model.size() + 64);
    const std::string b = PatchBytes(n, uint32_t(r()));
    ASSERT_EQ(upfs_pwrite(fd, b.data(), n, off_t(off)), ssize_t(n)) << upfs_last_error();
    if (model.size() < off + n) model.resize(off + n, '\0');
    model.replace(off, n, b);
    if (step % 500 == 0) {
      const std::string got = ReadAll(fd);
      ASSERT_EQ(got, model) << "step " << step << ": " << FirstDifference(model, got);
    }
  }
  const std::string got = ReadAll(fd);
  ASSERT_EQ(got, model) << FirstDifference(model, got);
  ASSERT_EQ(upfs_close(fd), 0);
  CheckDetached(1, 1);  // the file and the root: no problem, orphan or leaked block
  Mount();
  fd = upfs_open(P("m").c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadAll(fd), model);
  upfs_close(fd);
}

// A pool file's pairs (granule flips) fold back into single blocks once
// cold: a read that meets granules in a shadow asks the GC worker, which
// folds pairs no flip touched for a second; the pool then holds the file's
// blocks alone, and fsck finds nothing leaked.
TEST_F(PoolPatch, ColdPairsInAPoolFileFoldBackAfterARead) {
  int fd = upfs_open(P("fold").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  std::string model = PatchBytes(6 * kBlockSize, 3);
  ASSERT_EQ(upfs_pwrite(fd, model.data(), model.size(), 0), ssize_t(model.size()));
  for (uint64_t v = 0; v < 6; ++v) {
    for (uint32_t k = 0; k < 3; ++k) {  // the first and third leave granules in the shadow
      const std::string b = PatchBytes(100, uint32_t(10 * v + k));
      ASSERT_EQ(upfs_pwrite(fd, b.data(), b.size(), off_t(v * kBlockSize + 300 + 10 * k)), 100);
      model.replace(v * kBlockSize + 300 + 10 * k, 100, b);
    }
  }
  struct stat st;
  ASSERT_EQ(upfs_fstat(fd, &st), 0);
  EXPECT_EQ(st.st_blocks, 12 * 8) << "six blocks, each with a shadow";
  std::this_thread::sleep_for(std::chrono::milliseconds(upfs::kPairColdMs + 100));
  char b[200];
  ASSERT_EQ(upfs_pread(fd, b, sizeof b, off_t(2 * kBlockSize + 250)), ssize_t(sizeof b));
  EXPECT_EQ(std::string(b, sizeof b), model.substr(2 * kBlockSize + 250, sizeof b));
  ASSERT_EQ(upfs_settle(fd), 0);
  ASSERT_EQ(upfs_fstat(fd, &st), 0);
  EXPECT_EQ(st.st_blocks, 6 * 8) << "the pairs folded";
  EXPECT_EQ(ReadAll(fd), model);
  ASSERT_EQ(upfs_close(fd), 0);
  CheckDetached(1, 1);
}

// A pool file that goes quiet has its pairs folded by the GC worker with
// no read asking for it, and the shadows go back to the pool: its free
// blocks grow by as many, and fsck finds nothing leaked.
TEST_F(PoolPatch, AQuietPoolFilesPairsFoldAndTheirShadowsReturnToThePool) {
  if (!upfs::GcWorker::Background()) GTEST_SKIP() << "UPFS_BACKGROUND_GC=0: no worker";
  upfs_test::PairIdleAge idle(200);
  int fd = upfs_open(P("quiet").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  std::string model = PatchBytes(6 * kBlockSize, 4);
  ASSERT_EQ(upfs_pwrite(fd, model.data(), model.size(), 0), ssize_t(model.size()));
  for (uint64_t v = 0; v < 6; ++v) {
    const std::string b = PatchBytes(100, uint32_t(v));
    ASSERT_EQ(upfs_pwrite(fd, b.data(), b.size(), off_t(v * kBlockSize + 500)), 100);
    model.replace(v * kBlockSize + 500, 100, b);
  }
  struct stat st;
  ASSERT_EQ(upfs_fstat(fd, &st), 0);
  EXPECT_EQ(st.st_blocks, 12 * 8) << "six blocks, each with a shadow";
  struct statvfs paired;
  ASSERT_EQ(upfs_statvfs(P("").c_str(), &paired), 0);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (upfs_fstat(fd, &st) == 0 && st.st_blocks != 6 * 8 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(st.st_blocks, 6 * 8) << "the pairs folded with no reader asking";
  EXPECT_EQ(ReadAll(fd), model);
  ASSERT_EQ(upfs_settle(fd), 0);  // the blocks the fold retired back in the pool
  struct statvfs after;
  ASSERT_EQ(upfs_statvfs(P("").c_str(), &after), 0);
  // Blocks the pool's bitmap holds (the file system's free space, in both
  // counts, changes with other programs).
  EXPECT_LE(after.f_blocks - after.f_bfree + 6, paired.f_blocks - paired.f_bfree) << "the six shadows back in the pool";
  ASSERT_EQ(upfs_close(fd), 0);
  CheckDetached(1, 1);
}

// As the per-file test (tests/patch_test.cc), through the C API on one
// descriptor; the rule the reader checks is PatchOrderCheck's.
TEST_F(PoolPatch, ThreadsPatchingOneFileNeverTearOrReorder) {
  constexpr uint64_t kBlocks = 3, kWords = kBlockSize / 8;
  constexpr int kThreads = 3, kWrites = 3000;
  const int fd = upfs_open(P("t").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const std::string zeros(kBlocks * kBlockSize, '\0');
  ASSERT_EQ(upfs_pwrite(fd, zeros.data(), zeros.size(), 0), ssize_t(zeros.size()));
  const int errors = upfs_test::RacePatchWriters(
      kThreads, kWrites, kBlocks, kWords,
      [&](const void* b, size_t n, uint64_t off) { return upfs_pwrite(fd, b, n, off_t(off)) == ssize_t(n); },
      [&](void* b, size_t n) { return upfs_pread(fd, b, n, 0) == ssize_t(n); });
  EXPECT_EQ(errors, 0);
  const std::string now = ReadAll(fd);
  ASSERT_EQ(upfs_close(fd), 0);
  Remount();
  const int again = upfs_open(P("t").c_str(), O_RDONLY, 0);
  ASSERT_GE(again, 0);
  EXPECT_EQ(ReadAll(again), now);
  upfs_close(again);
}

// Files patched long enough for the GC worker to compact their logs, then
// closed and removed at once, by two threads: the worker may be compacting
// or waiting to free a file's retired blocks when the file goes. Nothing
// may use the File after it is gone (the worker once kept a forgotten file
// on its retry list: SIGSEGV in 5 of 6 runs of this workload), and the
// blocks it could not free yet go to the pool (before, they were dropped
// with the File and stayed taken in a pool marked clean: 384-1,967 blocks).
TEST_F(PoolPatch, PatchedFilesClosedWhileTheGcWorkerRunsLeaveNothingBehind) {
  const int files = int(upfs_test::Scaled(30, 4));
  const std::string base = PatchBytes(64 * kBlockSize, 3);
  const std::string small = PatchBytes(128, 4);
  std::atomic<int> failures{0};
  auto worker = [&](int t) {
    std::mt19937_64 rng(uint64_t(t) * 7919);
    for (int i = 0; i < files; ++i) {
      const std::string name = P("f" + std::to_string(t) + "-" + std::to_string(i));
      const int fd = upfs_open(name.c_str(), O_CREAT | O_RDWR, 0644);
      if (fd < 0 || upfs_pwrite(fd, base.data(), base.size(), 0) != ssize_t(base.size())) {
        failures++;
        return;
      }
      const int writes = 3000 + int(rng() % 30000);  // past the GC trigger, a few times
      for (int w = 0; w < writes; ++w)
        if (upfs_pwrite(fd, small.data(), small.size(), off_t(rng() % (base.size() / 128)) * 128) != 128)
          failures++;
      if (upfs_close(fd) != 0 || upfs_unlink(name.c_str()) != 0) failures++;
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0) << upfs_last_error();
  CheckDetached(0, 1);
  // The worker retries its list every millisecond: a file left on it would
  // be touched now, with its pool unmapped (in the release build a crash;
  // under ASan a use after free as soon as it happens).
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
}

}  // namespace
