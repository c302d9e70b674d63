// Pool::FileOf(for_use) and MapAhead: a process's first data call on a pool file maps
// the pages of the file's data ahead of its reads (small pages: this
// program runs with UPFS_HUGEPAGES=0, tests/CMakeLists.txt), for files of
// 4 MiB or more, and only the file's: another file's pages are mapped as
// they are read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/sanitized.h"
#include "tests/smaps.h"
#include "upfs/upfs.h"

namespace {

constexpr size_t kFileBytes = 8u << 20;
constexpr size_t kSmallBytes = 3u << 20;
// Under ASan (and TSan) every copy out of the pool also faults in its
// shadow (a page per 32 KiB read under ASan): fault counts are then not
// the pool's (kSanitized).

long MinorFaults() {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

class PoolPopulate : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* huge = std::getenv("UPFS_HUGEPAGES");
    ASSERT_TRUE(huge && huge[0] == '0') << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
    pool_ = "/dev/shm/upfs-populate-" + std::to_string(getpid()) + ".pool";
    mnt_ = "/upfs-populate-" + std::to_string(getpid());
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
    // Two files written one after the other: their data in extents of
    // their own, written (so a reader's faults map 16 pages at once).
    std::vector<char> data(1 << 20, 'x');
    for (const char* name : {"/a", "/b", "/c"}) {
      const int fd = upfs_open((mnt_ + name).c_str(), O_CREAT | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << upfs_last_error();
      const size_t bytes = name[1] == 'c' ? kSmallBytes : kFileBytes;
      for (size_t done = 0; done < bytes; done += data.size())
        ASSERT_EQ(upfs_write(fd, data.data(), data.size()), ssize_t(data.size()));
      ASSERT_EQ(upfs_close(fd), 0);
    }
    // Attached again: a new mapping, none of its pages mapped.
    ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  }
  void TearDown() override {
    upfs_umount(mnt_.c_str());
    unlink(pool_.c_str());
  }
  // Faults this thread takes reading a file of `bytes` from offset 4 KiB on.
  long FaultsToRead(int fd, size_t bytes) {
    std::vector<char> buf(4096);
    const long before = MinorFaults();
    for (size_t off = 4096; off < bytes; off += buf.size())
      EXPECT_EQ(upfs_pread(fd, buf.data(), buf.size(), off_t(off)), ssize_t(buf.size()));
    return MinorFaults() - before;
  }
  // The resident set of this process's mappings of the pool file, KiB.
  long PoolRssKib() const {
    return upfs_test::SmapsKib([&](const char* line) { return std::strstr(line, pool_.c_str()) != nullptr; },
                               "Rss:");
  }
  std::string pool_, mnt_;
};

TEST_F(PoolPopulate, TheFirstReadMapsTheFilesPagesAndNoOthers) {
  const int a = upfs_open((mnt_ + "/a").c_str(), O_RDONLY);
  ASSERT_GE(a, 0) << upfs_last_error();
  char c;
  ASSERT_EQ(upfs_pread(a, &c, 1, 0), 1);  // the first data call: populates
  ASSERT_EQ(upfs_settle(a), 0);           // and waits for the worker
  const long faults_a = FaultsToRead(a, kFileBytes);
  // c's pages were not asked for (below 4 MiB: never populated): its
  // reads fault, 767 pages 16 at a time (fault-around).
  const int small = upfs_open((mnt_ + "/c").c_str(), O_RDONLY);
  ASSERT_GE(small, 0) << upfs_last_error();
  const long faults_c = FaultsToRead(small, kSmallBytes);
  EXPECT_EQ(upfs_close(a), 0);
  EXPECT_EQ(upfs_close(small), 0);
  if (kSanitized)
    GTEST_SKIP() << "the sanitizer's shadow faults too (a " << faults_a << ", c " << faults_c << ")";
  EXPECT_LE(faults_a, 16) << "2,047 pages mapped ahead";
  EXPECT_GE(faults_c, 32) << "767 pages not mapped ahead";
}

// A stat makes the file's engine too (its size), but is no use of the
// data: `ls -l` of a pool of big files must not map them all. Counted in
// the pool mapping's resident set (/proc/self/smaps).
TEST_F(PoolPopulate, AStatMapsNothingAhead) {
  const int b = upfs_open((mnt_ + "/b").c_str(), O_RDONLY);
  ASSERT_GE(b, 0) << upfs_last_error();
  char c;
  ASSERT_EQ(upfs_pread(b, &c, 1, 0), 1);
  ASSERT_EQ(upfs_settle(b), 0);
  const long before = PoolRssKib();
  ASSERT_GT(before, long(kFileBytes / 1024)) << "b's pages, mapped ahead";
  struct stat st;
  ASSERT_EQ(upfs_stat((mnt_ + "/a").c_str(), &st), 0) << upfs_last_error();
  ASSERT_EQ(size_t(st.st_size), kFileBytes);
  ASSERT_EQ(upfs_settle(b), 0);  // the pool's worker, had the stat asked it
  EXPECT_LT(PoolRssKib() - before, long(kFileBytes / 1024 / 4));
  EXPECT_EQ(upfs_close(b), 0);
}

}  // namespace
