// Sub-block writes as patches, over the per-file container: in a file of
// format version 2 or 3 (version 4 files flip granules instead:
// tests/flip_test.cc), a small strict write persists its bytes and a few
// lines of log, not its block; reads, folds, GC, reopen and truncation see
// exactly the bytes written; version 1 files never get a patch; threads
// patching the same blocks lose nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/inspect.h"
#include "container/perfile/perfile.h"
#include "engine/file.h"
#include "format/format.h"
#include "medium/persist_counter.h"
#include "upfs/upfs.h"
#include "patch_test_util.h"
#include "opened_per_file.h"
#include "test_util.h"
#include "util/crc32c.h"

namespace upfs {
namespace {

using namespace format;

using upfs_test::PatchBytes;
using upfs_test::TempDir;

using upfs_test::Opened;

// A new, empty file of format version 3, the last whose small writes
// become patches (as a build of that version made it).
std::string PatchFile(const TempDir& d, const std::string& name) {
  const std::string path = d.File(name);
  { Opened f(path); }
  upfs_test::LabelVersion(path, kFirstGranuleVersion - 1);
  return path;
}

uint64_t Persisted(Opened* f, const std::string& b, uint64_t off) {
  PersistCounter counter;
  f->Write(b, off);
  return counter.bytes();
}

TEST(Patch, ASmallWritePersistsItsBytesNotItsBlock) {
  TempDir d;
  Opened f(PatchFile(d, "a"));
  f.Write(PatchBytes(64 * kBlockSize, 1), 0);
  // 128 bytes: a reservation line, the payload's lines, the apply line.
  const uint64_t p128 = Persisted(&f, PatchBytes(128, 2), 5 * kBlockSize + 640);
  EXPECT_LE(p128, 6 * kCacheLine) << "a 128-byte patch";
  // A write across a block edge is copied on write (two blocks).
  const uint64_t cross = Persisted(&f, PatchBytes(128, 3), 7 * kBlockSize - 64);
  EXPECT_GE(cross, 2 * kBlockSize);
  // Writes up to 512 bytes are patches (file_patch.cc); one more byte is not.
  EXPECT_LT(Persisted(&f, PatchBytes(512, 4), 20 * kBlockSize), kBlockSize);
  EXPECT_GE(Persisted(&f, PatchBytes(513, 5), 30 * kBlockSize), kBlockSize);
}

// Damage to a committed patch is refused at open, naming its entry (the
// payload's checksum), never read as data.
TEST(Patch, ADamagedPatchIsRefusedAtOpen) {
  TempDir d;
  const std::string path = PatchFile(d, "dmg");
  const std::string marker(100, '\x5a');
  {
    Opened f(path);
    f.Write(PatchBytes(4 * kBlockSize, 1), 0);
    f.Write(marker, kBlockSize + 8);
  }
  // Find the patch's bytes in the host file (only the log holds them:
  // the block under them keeps its old bytes) and flip one.
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::string all(lseek(fd, 0, SEEK_END), '\0');
  ASSERT_EQ(pread(fd, all.data(), all.size(), 0), ssize_t(all.size()));
  size_t at = all.find(marker);
  ASSERT_NE(at, std::string::npos);
  char c = 0x5b;
  ASSERT_EQ(pwrite(fd, &c, 1, off_t(at + 50)), 1);
  close(fd);
  int host = open(path.c_str(), O_RDWR);
  std::unique_ptr<upfs::File> file;
  Status st = OpenPerFile(host, path, false, Consistency::kStrict, nullptr, &file);
  close(host);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();
}

// The same image, but left by a crash (the file was in use: `in_use` is
// still 1) and torn as a crash tears (a payload word that did not reach
// media reads as zero): the patch is a commit the crash cut short. fsck
// says so without calling the file damaged, and the next open discards it
// and reads the bytes from before it; with `in_use` 0 it is damage.
TEST(Patch, APatchACrashCutShortIsDiscardedOnlyAfterACrash) {
  TempDir d;
  const std::string path = PatchFile(d, "cut");
  const std::string before = PatchBytes(4 * kBlockSize, 1);
  const std::string marker(100, '\x5a');
  {
    Opened f(path);
    f.Write(before, 0);
    f.Write(marker, kBlockSize + 8);
  }
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::string all(lseek(fd, 0, SEEK_END), '\0');
  ASSERT_EQ(pread(fd, all.data(), all.size(), 0), ssize_t(all.size()));
  const size_t at = all.find(marker);
  ASSERT_NE(at, std::string::npos);
  const uint64_t zero = 0;
  ASSERT_EQ(pwrite(fd, &zero, 8, off_t((at + 40) / 8 * 8)), 8);  // one payload word lost
  close(fd);
  upfs_test::ExpectCutShortOnlyAfterACrash(path);
  Opened f(path);
  ASSERT_TRUE(f.file);
  EXPECT_EQ(f.ReadAll(), before);
  f.Write(marker, kBlockSize + 8);  // the log goes on after the discarded commit
  std::string want = before;
  want.replace(kBlockSize + 8, marker.size(), marker);
  EXPECT_EQ(f.ReadAll(), want);
}

TEST(Patch, EverySizeAndAlignmentReadsBackAcrossFoldsGcAndReopen) {
  TempDir d;
  const std::string path = PatchFile(d, "b");
  std::string model = PatchBytes(16 * kBlockSize + 1000, 7);
  {
    Opened f(path);
    f.Write(model, 0);
    std::mt19937 r(11);
    for (int i = 0; i < 3000; ++i) {
      uint64_t len = 1 + r() % (i % 3 == 0 ? kPatchMaxBytes : 64);
      uint64_t off = r() % (model.size() - len);
      std::string b = PatchBytes(len, 100 + i);
      f.Write(b, off);
      model.replace(off, len, b);
      if (i % 500 == 0) {
        ASSERT_TRUE(f.file->CollectGarbage(true).ok());
      }
      if (i % 97 == 0) {
        ASSERT_EQ(f.ReadAll(), model) << "after write " << i;
      }
    }
    ASSERT_EQ(f.ReadAll(), model);
    ASSERT_TRUE(f.file->CollectGarbage(true).ok());
    ASSERT_EQ(f.ReadAll(), model);
    // Shrinking into a patched block keeps the patched bytes below the
    // new size; growing again exposes zeros.
    ASSERT_TRUE(f.file->Truncate(5 * kBlockSize + 77).ok());
    model.resize(5 * kBlockSize + 77);
    ASSERT_EQ(f.ReadAll(), model);
    ASSERT_TRUE(f.file->Truncate(7 * kBlockSize).ok());
    model.resize(7 * kBlockSize, '\0');
    ASSERT_EQ(f.ReadAll(), model);
    f.Write(PatchBytes(300, 9), 5 * kBlockSize + 10);
    model.replace(5 * kBlockSize + 10, 300, PatchBytes(300, 9));
    ASSERT_EQ(f.ReadAll(), model);
  }
  Opened g(path);
  EXPECT_EQ(g.ReadAll(), model) << "after reopen (replay)";
  FileReport rep;
  g.file.reset();
  ASSERT_TRUE(InspectFile(path, true, &rep).ok());
  EXPECT_TRUE(rep.problems.empty()) << rep.problems.front();
  EXPECT_GT(rep.patch_count, 0u) << "fsck sees the live patches";
  EXPECT_GE(rep.patch_bytes, rep.patch_count);
  EXPECT_LE(rep.patch_bytes, rep.patched_blocks * kPatchMaxBytes);
}

TEST(Patch, PunchingAPatchedBlockKeepsItsOtherPatchedBytes) {
  TempDir d;
  Opened f(PatchFile(d, "p"));
  std::string model = PatchBytes(4 * kBlockSize, 1);
  f.Write(model, 0);
  f.Write(std::string(100, 'P'), kBlockSize + 50);
  f.Write(std::string(100, 'Q'), kBlockSize + 3000);
  model.replace(kBlockSize + 50, 100, std::string(100, 'P'));
  model.replace(kBlockSize + 3000, 100, std::string(100, 'Q'));
  ASSERT_TRUE(f.file->Fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kBlockSize + 1000, 1000).ok());
  model.replace(kBlockSize + 1000, 1000, std::string(1000, '\0'));
  EXPECT_EQ(f.ReadAll(), model);
}

TEST(Patch, VersionOneFilesGetNoPatches) {
  TempDir d;
  const std::string path = d.File("v1");
  {
    Opened f(path);
    f.Write(PatchBytes(8 * kBlockSize, 1), 0);
  }
  // Label the file version 1 (as a build before patches made it).
  upfs_test::LabelVersion(path, 1);
  Opened f(path);
  EXPECT_GE(Persisted(&f, PatchBytes(128, 2), kBlockSize + 100), kBlockSize) << "copied on write";
}

TEST(Patch, SyncModeWritesInPlace) {
  TempDir d;
  Opened f(d.File("s"), Consistency::kSync);
  f.Write(PatchBytes(8 * kBlockSize, 1), 0);
  // In place: the 128 bytes, the touch entry's line.
  EXPECT_LE(Persisted(&f, PatchBytes(128, 2), kBlockSize + 100), 4 * kCacheLine);
}

// Threads patching overlapping ranges of the same blocks while a thread
// reads; the rule the reader checks is PatchOrderCheck's.
TEST(Patch, ThreadsPatchingTheSameBlocksNeverTearOrReorder) {
  TempDir d;
  Opened f(PatchFile(d, "t"));
  upfs_test::RaceSmallWriters(&f, 3, 3000, 3);
}

// A GC folds a block whose patches reach three quarters of a limit (6
// patches, or 1,536 bytes): it is copied whole, its patches applied, and
// leaves the log; a block with fewer stays patched. Every byte reads the same, before and
// after a reopen, and the compacted log carries only the other block's.
TEST(Patch, AGcFoldsBlocksWithManyPatchesBackIntoBlocks) {
  TempDir d;
  const std::string path = PatchFile(d, "fold");
  std::string model = PatchBytes(4 * kBlockSize, 1);
  auto put = [&](Opened& f, uint64_t off, uint64_t len, uint32_t seed) {
    const std::string b = PatchBytes(len, seed);
    f.Write(b, off);
    model.replace(off, len, b);
  };
  {
    Opened f(path);
    f.Write(model, 0);
    for (uint32_t i = 0; i < 6; ++i) put(f, kBlockSize + 100 + 300 * i, 64, 10 + i);  // block 1: 6 patches
    put(f, 2 * kBlockSize + 8, 40, 20);                                               // block 2: 1
    for (uint32_t i = 0; i < 3; ++i) put(f, 3 * kBlockSize + 1024 * i, 512, 30 + i);  // block 3: 3 x 512
    FileReport r;
    ASSERT_TRUE(InspectFile(path, true, &r).ok());
    EXPECT_EQ(r.patched_blocks, 3u);
    EXPECT_EQ(r.patch_count, 10u);
    ASSERT_TRUE(f.file->CollectGarbage(true).ok());
    ASSERT_TRUE(InspectFile(path, true, &r).ok());
    EXPECT_EQ(r.patched_blocks, 1u) << "blocks 1 and 3 folded, block 2 kept";
    EXPECT_EQ(r.patch_count, 1u);
    EXPECT_EQ(f.ReadAll(), model);
    put(f, 2 * kBlockSize + 100, 30, 40);  // patches go on after the fold
  }
  Opened f(path);
  EXPECT_EQ(f.ReadAll(), model);
}

}  // namespace
}  // namespace upfs
