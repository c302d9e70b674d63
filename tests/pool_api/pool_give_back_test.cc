// A pool gives the memory of its wholly free 2 MiB extents back to the host
// (docs/design.md, "Giving free space back") beyond what the next writers
// want at hand: at detach, after a checkpoint, and when recovery rebuilds
// the bitmap; every attached process takes it back before the pool grows;
// fsck tells it from leaked space.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"
#include "label_version.h"
#include "pool_api/pool_host_memory.h"
#include "upfs/upfs.h"

namespace {

namespace fp = upfs::format::pool;
using upfs::format::kBlockSize;
using upfs_test::FreeBlocksWithoutMemory;
using upfs_test::Host;
using upfs_test::HostOf;

constexpr uint64_t kMiB = 1 << 20;
constexpr int kFiles = 40;  // of 4 MiB: 160 MiB, well past what a detach keeps
constexpr uint64_t kFileBytes = 4 * kMiB;
constexpr uint64_t kKeptBytes = upfs::Pool::kKeepFreeBlocks * kBlockSize;

class PoolGiveBack : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = "/dev/shm/upfs-giveback-" + std::to_string(getpid()) + ".pool";
    mnt_ = "/upfs-giveback-" + std::to_string(getpid());
    unlink(pool_.c_str());
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
  }
  void TearDown() override {
    upfs_umount(mnt_.c_str());
    unlink(pool_.c_str());
  }
  std::string P(int i) const { return mnt_ + "/f" + std::to_string(i); }
  static char Fill(int i, int round) { return char('a' + (i + round) % 26); }
  // Files [0, n) of kFileBytes, each filled with its own byte.
  void WriteFiles(int n, int round) {
    std::string data(kFileBytes, 0);
    for (int i = 0; i < n; ++i) {
      data.assign(kFileBytes, Fill(i, round));
      const int fd = upfs_open(P(i).c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << upfs_last_error();
      ASSERT_EQ(upfs_write(fd, data.data(), data.size()), ssize_t(data.size())) << upfs_last_error();
      ASSERT_EQ(upfs_close(fd), 0);
    }
  }
  void CheckFiles(int n, int round) {
    std::string got(kFileBytes, 0);
    for (int i = 0; i < n; ++i) {
      const int fd = upfs_open(P(i).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << upfs_last_error();
      ASSERT_EQ(upfs_read(fd, got.data(), got.size()), ssize_t(got.size()));
      ASSERT_EQ(upfs_close(fd), 0);
      ASSERT_EQ(got, std::string(kFileBytes, Fill(i, round))) << "file " << i;
    }
  }
  void RemoveFiles(int n) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(upfs_unlink(P(i).c_str()), 0) << upfs_last_error();
  }
  upfs::PoolReport Check() {
    upfs::PoolReport r;
    EXPECT_TRUE(upfs::CheckPool(pool_, &r).ok());
    for (const std::string& p : r.problems) ADD_FAILURE() << p;
    return r;
  }
  // Written, removed, detached: what the detach gave back.
  void FillAndEmpty(Host* full, Host* emptied) {
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
    ASSERT_NO_FATAL_FAILURE(WriteFiles(kFiles, 0));
    *full = HostOf(pool_);
    ASSERT_NO_FATAL_FAILURE(RemoveFiles(kFiles));
    ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
    *emptied = HostOf(pool_);
  }
  std::string pool_, mnt_;
};

TEST_F(PoolGiveBack, ADetachGivesBackWhatRemovalsFreedBeyondWhatItKeeps) {
  Host full, emptied;
  ASSERT_NO_FATAL_FAILURE(FillAndEmpty(&full, &emptied));
  const uint64_t data = kFiles * kFileBytes;
  EXPECT_GE(full.bytes, data);
  // All but what a detach keeps at hand, and the header's pages in use,
  // the namespace's blocks, the free blocks of partly used extents.
  EXPECT_LE(emptied.bytes, kKeptBytes + 48 * kMiB)
      << "held " << full.bytes / kMiB << " MiB full, " << emptied.bytes / kMiB << " MiB emptied";
  const upfs::PoolReport r = Check();
  EXPECT_GE(uint64_t(r.given_back_blocks) * kBlockSize, data - kKeptBytes - 16 * kMiB);
  EXPECT_EQ(r.leaked_blocks, 0);
  EXPECT_TRUE(r.clean);
  EXPECT_EQ(FreeBlocksWithoutMemory(pool_), 0u);
}

TEST_F(PoolGiveBack, WritesTakeWhatWasGivenBackBeforeThePoolGrows) {
  Host full, emptied;
  ASSERT_NO_FATAL_FAILURE(FillAndEmpty(&full, &emptied));
  // Half of what filled it: past what the detach kept, and short of what
  // it gave back by more than the headroom a nearly full pool grows ahead
  // of its writers by (an eighth of it), given back or not.
  constexpr int kRefill = kFiles / 2;
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(WriteFiles(kRefill, 1));
  const Host refilled = HostOf(pool_);
  // (Against the size after the detach: a growth ahead of the first
  // writes may have still been running when `full` was taken.)
  EXPECT_EQ(refilled.size, emptied.size) << "the pool grew with free space given back";
  EXPECT_GE(refilled.bytes, kRefill * kFileBytes);
  ASSERT_NO_FATAL_FAILURE(CheckFiles(kRefill, 1));
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  const upfs::PoolReport r = Check();
  EXPECT_EQ(r.leaked_blocks, 0);
  EXPECT_EQ(FreeBlocksWithoutMemory(pool_), 0u);
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(CheckFiles(kRefill, 1));
}

// statvfs: space given back is free space of the pool, and its memory is
// the file system's to give: counted once, not in use.
TEST_F(PoolGiveBack, StatvfsCountsWhatWasGivenBackAsFree) {
  auto used = [&] {
    struct statvfs v;
    EXPECT_EQ(upfs_statvfs(mnt_.c_str(), &v), 0) << upfs_last_error();
    return uint64_t(v.f_blocks - v.f_bfree);
  };
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  const uint64_t before = used();
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  Host full, emptied;
  ASSERT_NO_FATAL_FAILURE(FillAndEmpty(&full, &emptied));
  ASSERT_GT(Check().given_back_blocks, 0);
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  // The namespace's few blocks more (its log grew), nothing of what was given back.
  EXPECT_LE(used(), before + 64) << "blocks in use: " << before << " before, " << used() << " after";
}

// A process that dies attached leaves what it freed to recovery, which
// rebuilds the bitmap (it cannot tell which free extents were given back:
// holes) and gives back what a detach would; what it keeps free, holes or
// not, gets memory: no free block is left without.
TEST_F(PoolGiveBack, RecoveryGivesBackAndLeavesNoFreeBlockWithoutMemory) {
  Host full, emptied;
  ASSERT_NO_FATAL_FAILURE(FillAndEmpty(&full, &emptied));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) _exit(2);
    std::string data(kFileBytes, 'z');
    for (int i = 0; i < kFiles / 2; ++i) {
      const int fd = upfs_open(P(i).c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd < 0 || upfs_write(fd, data.data(), data.size()) != ssize_t(data.size())) _exit(3);
      upfs_close(fd);
      if (i % 2 == 1 && upfs_unlink(P(i - 1).c_str()) != 0) _exit(4);
    }
    _exit(0);  // attached: the next attach recovers
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();  // recovers
  for (int i = 0; i < kFiles / 2; ++i) {
    struct stat st;
    EXPECT_EQ(upfs_stat(P(i).c_str(), &st), i % 2 == 1 ? 0 : -1) << i;
  }
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  const Host recovered = HostOf(pool_);
  EXPECT_LE(recovered.bytes, emptied.bytes + (kFiles / 4) * kFileBytes + 16 * kMiB)
      << "held " << recovered.bytes / kMiB << " MiB after recovery";
  const upfs::PoolReport r = Check();
  EXPECT_EQ(r.leaked_blocks, 0);
  EXPECT_GT(r.given_back_blocks, 0);
  EXPECT_EQ(FreeBlocksWithoutMemory(pool_), 0u);
}

// What one process gave back, another attached all along takes back: the
// record is the pool's, not the process's.
TEST_F(PoolGiveBack, AnotherAttachedProcessTakesBackWhatOneGaveBack) {
  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c = 0;
    if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) _exit(2);
    if (write(done[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(3);
    const Host before = HostOf(pool_);
    std::string data(kFileBytes, 'q');
    for (int i = 0; i < kFiles / 2; ++i) {
      const int fd = upfs_open(P(i).c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd < 0 || upfs_write(fd, data.data(), data.size()) != ssize_t(data.size())) _exit(4);
      upfs_close(fd);
    }
    if (HostOf(pool_).size != before.size) _exit(5);  // grew past what was given back
    _exit(upfs_umount(mnt_.c_str()) == 0 ? 0 : 6);
  }
  char c;
  ASSERT_EQ(read(done[0], &c, 1), 1);
  Host full, emptied;
  ASSERT_NO_FATAL_FAILURE(FillAndEmpty(&full, &emptied));
  EXPECT_LT(emptied.bytes + kKeptBytes, full.bytes);
  ASSERT_EQ(write(go[1], &c, 1), 1);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : {go[0], go[1], done[0], done[1]}) close(fd);
  EXPECT_EQ(Check().leaked_blocks, 0);
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  std::string got(kFileBytes, 0);
  const int fd = upfs_open(P(kFiles / 2 - 1).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_read(fd, got.data(), got.size()), ssize_t(got.size()));
  upfs_close(fd);
  EXPECT_EQ(got, std::string(kFileBytes, 'q'));
}

// A process that stays attached gives back what its removals freed once
// they pass Pool::kGiveBackAfterFreedBlocks, in the releasing thread: its
// few records would reach no checkpoint, and it may never detach (a FUSE
// mount, a shell under the preload library). What it released since its
// last give-back, less than that, it still holds.
TEST_F(PoolGiveBack, AnAttachmentThatStaysGivesBackWhatItsRemovalsFreed) {
  constexpr int kMany = 2 * kFiles;  // 320 MiB
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(WriteFiles(kMany, 0));
  const Host full = HostOf(pool_);
  ASSERT_NO_FATAL_FAILURE(RemoveFiles(kMany));
  const Host emptied = HostOf(pool_);
  const uint64_t threshold = upfs::Pool::kGiveBackAfterFreedBlocks * kBlockSize;
  EXPECT_GE(full.bytes - std::min(full.bytes, emptied.bytes), kMany * kFileBytes - kKeptBytes - threshold - 16 * kMiB)
      << "held " << full.bytes / kMiB << " MiB full, " << emptied.bytes / kMiB << " MiB emptied";
  // What it gave back, it takes back (its memory again), and the files read
  // back as written.
  ASSERT_NO_FATAL_FAILURE(WriteFiles(kMany, 1));
  ASSERT_NO_FATAL_FAILURE(CheckFiles(kMany, 1));
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  EXPECT_EQ(Check().leaked_blocks, 0);
  EXPECT_EQ(FreeBlocksWithoutMemory(pool_), 0u);
}

// A process attached before another grew the pool (a long-lived one: a
// FUSE mount, a shell under the preload library) gives back what that
// growth added once it is free, at its checkpoints and its detach: it looks
// at the pool's size anew, not at the size it mapped (it gave back nothing
// of the 160 MiB freed here before it did). The files are cut to
// nothing rather than removed: a removal's own give-back would leave it
// little to find.
TEST_F(PoolGiveBack, AnAttachmentThatDidNotGrowThePoolGivesBackWhatTheGrowthAdded) {
  std::unique_ptr<upfs::Pool> early;
  ASSERT_TRUE(upfs::Pool::Attach(pool_, &early).ok());
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(WriteFiles(kFiles, 0));
  const Host full = HostOf(pool_);
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(upfs_truncate(P(i).c_str(), 0), 0) << upfs_last_error();
  const uint64_t given = early->GiveBackFreeSpace(upfs::Pool::kKeepFreeBlocks);
  const uint64_t data = kFiles * kFileBytes;
  EXPECT_GE(given * kBlockSize, data - kKeptBytes - 16 * kMiB) << "of " << data / kMiB << " MiB freed";
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  early.reset();
  EXPECT_LE(HostOf(pool_).bytes, kKeptBytes + 48 * kMiB) << "held " << full.bytes / kMiB << " MiB full";
  EXPECT_EQ(Check().leaked_blocks, 0);
  EXPECT_EQ(FreeBlocksWithoutMemory(pool_), 0u);
}

// statvfs in a process whose mapping is older than the pool's growth
// counts the blocks that growth added: two mounts of the pool, one of
// which grew it, say the same of its use (f_blocks - f_bfree: what is
// taken less what is given back, whatever the host has free meanwhile).
TEST_F(PoolGiveBack, StatvfsOfAMountThatDidNotGrowThePoolCountsTheGrowth) {
  const std::string early_mnt = mnt_ + "-early";
  ASSERT_EQ(upfs_mount(pool_.c_str(), early_mnt.c_str()), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  struct statvfs grower, early;
  // The names first, and the early mount's index brought up to them: the
  // writes that grow the pool then leave it no record to catch up on
  // (reading one in new blocks would have it look at the size again).
  for (int i = 0; i < kFiles; ++i) {
    const int fd = upfs_open(P(i).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
  ASSERT_EQ(upfs_statvfs(early_mnt.c_str(), &early), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(WriteFiles(kFiles, 0));
  ASSERT_EQ(upfs_statvfs(mnt_.c_str(), &grower), 0) << upfs_last_error();
  ASSERT_EQ(upfs_statvfs(early_mnt.c_str(), &early), 0) << upfs_last_error();
  EXPECT_GE((grower.f_blocks - grower.f_bfree) * kBlockSize, kFiles * kFileBytes);
  EXPECT_EQ(early.f_blocks - early.f_bfree, grower.f_blocks - grower.f_bfree);
  ASSERT_EQ(upfs_umount(early_mnt.c_str()), 0) << upfs_last_error();
}

// fsck: an extent recorded as given back must be taken and unused, and the
// count must match the record.
TEST_F(PoolGiveBack, FsckRefusesAGivenBackExtentInUse) {
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(WriteFiles(1, 0));
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_TRUE(Check().problems.empty());
  // The first data extent holds the file (and the namespace's blocks).
  const int fd = open(pool_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t e = fp::kDataStart / upfs::kPartitionBlocks, one = uint64_t{1} << (e % 64);
  const off_t at = off_t(fp::kPunchedBlock) * kBlockSize + off_t(e / 64 * 8);
  ASSERT_EQ(pwrite(fd, &one, 8, at), 8);
  close(fd);
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool_, &r).ok());
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems[0].find("in an extent given back to the host but is"), std::string::npos) << r.problems[0];
}

// Builds before version 10 would hand out a given-back extent without
// memory: an older pool gives nothing back.
TEST_F(PoolGiveBack, AVersion9PoolGivesNothingBack) {
  ASSERT_TRUE(upfs_test::RelabelPoolVersion(pool_, fp::kFirstGiveBackPoolVersion - 1));
  Host full, emptied;
  ASSERT_NO_FATAL_FAILURE(FillAndEmpty(&full, &emptied));
  EXPECT_GE(emptied.bytes + 8 * kMiB, full.bytes);
  const upfs::PoolReport r = Check();
  EXPECT_LE(r.given_back_blocks, 0);
  EXPECT_EQ(r.leaked_blocks, 0);
}

}  // namespace
