// Free space given back to the host (docs/design.md, "Giving free space
// back"), over the per-file container: once a quiet fold left no pair, the
// wholly free 2 MiB extents are punched out of the host file, which then
// holds less memory; no free block of the bitmap is ever without memory
// behind it (a store there could be a SIGBUS on a full file system); the
// file's next writes take the extents back, provided again; a reopen that
// rebuilds the allocation state adopts the holes instead of filling them;
// the audit counts nothing leaked throughout.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/perfile.h"
#include "container/perfile/shared_state.h"
#include "engine/file.h"
#include "engine/file_internal.h"
#include "engine/gc_worker.h"
#include "format/format.h"
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

constexpr uint64_t kDataBlocks = 2048;  // 8 MiB

uint64_t HostSize(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return uint64_t(st.st_size);
}

// Memory the host file holds (what du shows).
uint64_t HostBytes(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return uint64_t(st.st_blocks) * 512;
}

// Blocks the bitmap has free whose page has no memory behind it in the
// host file, where a store could be a SIGBUS on a full file system. Neither
// mincore nor SEEK_DATA tells: on tmpfs both take a page allocated ahead
// but never written for a hole. An allocation of the page does: it adds to
// st_blocks only where there was none (and the page keeps it: harmless).
uint64_t FreeBlocksWithoutMemory(Opened* f) {
  AllocationBitmap* bm = PerFile(*f->file)->shared()->bitmap();
  uint64_t n = 0;
  for (uint64_t b = 0; b < bm->capacity(); ++b) {
    if (bm->Test(b)) continue;
    struct stat before, after;
    EXPECT_EQ(fstat(f->host, &before), 0);
    EXPECT_EQ(fallocate(f->host, FALLOC_FL_KEEP_SIZE, off_t(b * kBlockSize), off_t(kBlockSize)), 0);
    EXPECT_EQ(fstat(f->host, &after), 0);
    n += after.st_blocks > before.st_blocks;
  }
  return n;
}

// kDataBlocks blocks, each then paired by a small write (a shadow each).
std::string PairedFile(Opened* f) {
  std::string model = PatchBytes(kDataBlocks * kBlockSize, 5);
  f->Write(model, 0);
  for (uint64_t v = 0; v < kDataBlocks; ++v) {
    const std::string b = PatchBytes(64, uint32_t(v));
    f->Write(b, v * kBlockSize + 512);
    model.replace(v * kBlockSize + 512, b.size(), b);
  }
  return model;
}

// The quiet runs the GC worker would make, called directly: the fold of
// every pair, then (once the shadows have left this thread's limbo) the
// look that finds none and gives the free extents back.
void FoldAndGiveBack(Opened* f) {
  f->file->Settle();  // no GC of the writes left to fold with the test's idle age
  PairIdleAge idle(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(f->file->FoldWhenQuiet(), kGiveBackAfterMs) << "every pair folded: a last look asked for";
  for (int i = 0; i < 1000 && !f->file->ReleaseGcBlocks(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(f->file->FoldWhenQuiet(), 0u) << "no pair left";
}

// A paired file folded and given back, then closed by its last user (the
// shared state goes with it: the next open rebuilds). Returns its content;
// *quiet: the host file's memory right after the give-back. `before_close`
// runs with the file still open.
std::string GaveBackAndClosed(const std::string& path, uint64_t* quiet,
                              const std::function<void(Opened&)>& before_close = {}) {
  Opened f(path);
  std::string model = PairedFile(&f);
  FoldAndGiveBack(&f);
  *quiet = HostBytes(path);
  if (before_close) before_close(f);
  return model;
}

TEST(GiveBack, AQuietFileGivesItsFreeExtentsBackAndItsWritesTakeThemAgain) {
  TempDir d;
  const std::string path = d.File("f");
  Opened f(path);
  std::string model = PairedFile(&f);
  const uint64_t paired = HostBytes(path);
  FoldAndGiveBack(&f);
  const uint64_t quiet = HostBytes(path);
  // The shadows (8 MiB) were allocated in whole extents; some of the
  // headroom the file grew ahead is given back too.
  EXPECT_LE(quiet + 6 * kPartitionBlocks / 2 * kBlockSize, paired)
      << "host file " << paired / 1024 << " KiB paired, " << quiet / 1024 << " KiB after";
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u) << "a punched extent stays taken";
  EXPECT_EQ(f.ReadAll(), model);
  ExpectAllocationExact(f.file.get());
  // Writes that need more than the free space left take the punched
  // extents back, provided again, before the file would grow.
  const uint64_t size = HostSize(path);
  const std::string more = PatchBytes(4 << 20, 9);
  f.Append(more);
  model += more;
  EXPECT_EQ(f.ReadAll(), model);
  EXPECT_EQ(HostSize(path), size) << "4 MiB written into what was given back, not past it";
  EXPECT_GT(HostBytes(path), quiet) << "with memory again";
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u);
  ExpectAllocationExact(f.file.get());
}

TEST(GiveBack, AReopenAdoptsTheHolesInsteadOfFillingThem) {
  TempDir d;
  const std::string path = d.File("f");
  uint64_t quiet = 0;
  std::string model = GaveBackAndClosed(path, &quiet);
  EXPECT_LE(HostBytes(path), quiet) << "the last close gave nothing back to fill";
  Opened f(path);  // the shared state was removed: a rebuild
  EXPECT_LE(HostBytes(path), quiet + kPartitionBlocks * kBlockSize) << "the holes adopted, not filled";
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u) << "the rebuilt bitmap hands out no hole";
  EXPECT_EQ(f.ReadAll(), model);
  ExpectAllocationExact(f.file.get());
  const std::string more = PatchBytes(2 * kDataBlocks * kBlockSize, 4);
  f.Append(more);
  model += more;
  EXPECT_EQ(f.ReadAll(), model);
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u);
  ExpectAllocationExact(f.file.get());
}

// A hole a rebuild adopts may be pages allocated ahead and never written
// (tmpfs shows those as holes too; here the whole host file is allocated
// again behind the engine's back): the quiet run gives them back as well.
TEST(GiveBack, WhatAReopenAdoptedIsGivenBackOnceQuiet) {
  TempDir d;
  const std::string path = d.File("f");
  uint64_t quiet = 0;
  const std::string model = GaveBackAndClosed(path, &quiet, [&](Opened& f) {
    ASSERT_EQ(fallocate(f.host, FALLOC_FL_KEEP_SIZE, 0, off_t(HostSize(path))), 0);
  });
  const uint64_t allocated = HostBytes(path);
  ASSERT_GE(allocated, quiet + (4 << 20));
  Opened f(path);  // a rebuild: every free extent looks like a hole
  EXPECT_EQ(HostBytes(path), allocated);
  PairIdleAge idle(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(f.file->FoldWhenQuiet(), 0u);
  EXPECT_LE(HostBytes(path), quiet + kPartitionBlocks * kBlockSize)
      << HostBytes(path) / 1024 << " KiB held, " << quiet / 1024 << " after the first give-back";
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u);
  EXPECT_EQ(f.ReadAll(), model);
  ExpectAllocationExact(f.file.get());
}

// A file with no pair at all (whole-block writes, then a truncate that
// frees most of it) gives nothing back while it is being written, and all
// of it once nothing wrote it for the idle age.
TEST(GiveBack, NothingIsGivenBackWhileTheFileIsWritten) {
  TempDir d;
  const std::string path = d.File("f");
  Opened f(path);
  const std::string data = PatchBytes(16 << 20, 3);
  f.Write(data, 0);
  ASSERT_TRUE(f.file->Truncate(kBlockSize).ok());
  f.file->Settle();
  // The blocks the truncate freed, from this thread's limbo and free
  // list to the bitmap (a writer thread keeps up to 4,096 for itself).
  for (int i = 0; i < 1000 && !f.file->ReleaseGcBlocks(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const uint64_t held = HostBytes(path);
  PairIdleAge idle(2000);
  EXPECT_GT(f.file->FoldWhenQuiet(), 0u) << "written just now: look again later";
  EXPECT_EQ(HostBytes(path), held) << "nothing given back yet";
  idle.Set(50);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(f.file->FoldWhenQuiet(), 0u);
  EXPECT_LE(HostBytes(path) + (8 << 20), held) << HostBytes(path) / 1024 << " KiB after, " << held / 1024 << " before";
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u);
  ExpectAllocationExact(f.file.get());
}

// Through the GC worker: an open asks for a quiet run, which gives the
// free space back once the file is quiet.
TEST(GiveBack, TheWorkerGivesBackWhatAnOpenFound) {
  if (!GcWorker::Background()) GTEST_SKIP() << "UPFS_BACKGROUND_GC=0: no worker";
  TempDir d;
  const std::string path = d.File("f");
  {
    Opened f(path);
    f.Write(PatchBytes(16 << 20, 3), 0);
    ASSERT_TRUE(f.file->Truncate(kBlockSize).ok());
  }
  const uint64_t held = HostBytes(path);
  PairIdleAge idle(200);
  Opened f(path);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HostBytes(path) + (8 << 20) > held && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LE(HostBytes(path) + (8 << 20), held) << HostBytes(path) / 1024 << " KiB after, " << held / 1024 << " before";
  EXPECT_EQ(FreeBlocksWithoutMemory(&f), 0u);
  ExpectAllocationExact(f.file.get());
}

}  // namespace
}  // namespace upfs
