// Directory streams of pool directories (src/posix/pool_dirs.cc): a stream
// hands out its scan from a buffer of records it refills from the
// descriptor. A directory whose records fill the buffer many times over
// lists every entry once, in the scan's order (d_off 1, 2, ...), with its
// type and inode; a rewinddir in the middle starts a new scan that sees
// what changed; getdents64 on the stream's descriptor goes on where the
// stream's last refill left off, as with the kernel's streams; a stream
// shared by threads hands every entry to one of them.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pool_test_fixture.h"
#include "upfs/upfs.h"

namespace {

using pool_test::PoolTest;

// A long name, so that 2,000 of them fill a stream's 32 KiB buffer about
// eight times.
std::string LongName(int i) { return "entry-" + std::string(100, 'x') + "-" + std::to_string(i); }

TEST_F(PoolTest, AStreamListsManyBuffersOfEntriesOnceInOrder) {
  constexpr int kFiles = 2000;
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mkdir(P("d/sub").c_str(), 0755), 0);
  ASSERT_EQ(upfs_symlink("sub", P("d/link").c_str()), 0);
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(Create("d/" + LongName(i)), 0) << i;
  struct stat st;
  ASSERT_EQ(upfs_stat(P("d/sub").c_str(), &st), 0);
  const ino_t sub_ino = st.st_ino;
  UPFS_DIR* d = upfs_opendir(P("d").c_str());
  ASSERT_NE(d, nullptr) << upfs_last_error();
  std::map<std::string, int> seen;
  off_t last_off = 0;
  int n = 0;
  errno = 0;
  while (struct dirent* e = upfs_readdir(d)) {
    ++n;
    ++seen[e->d_name];
    EXPECT_EQ(e->d_off, last_off + 1) << e->d_name;
    last_off = e->d_off;
    const std::string name = e->d_name;
    if (name == "sub") {
      EXPECT_EQ(e->d_type, DT_DIR);
      EXPECT_EQ(e->d_ino, sub_ino);
    } else if (name == "link") {
      EXPECT_EQ(e->d_type, DT_LNK);
    } else if (name != "." && name != "..") {
      EXPECT_EQ(e->d_type, DT_REG) << name;
    }
  }
  EXPECT_EQ(errno, 0) << "the end of a stream sets no errno";
  EXPECT_EQ(n, kFiles + 4);
  EXPECT_EQ(seen.size(), size_t(kFiles) + 4);
  for (const auto& [name, count] : seen) EXPECT_EQ(count, 1) << name;
  EXPECT_EQ(upfs_readdir(d), nullptr) << "a stream at its end stays there";
  EXPECT_EQ(upfs_closedir(d), 0);
}

TEST_F(PoolTest, RewinddirInTheMiddleStartsANewScan) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(Create("d/" + LongName(i)), 0);
  UPFS_DIR* d = upfs_opendir(P("d").c_str());
  ASSERT_NE(d, nullptr);
  for (int i = 0; i < 10; ++i) ASSERT_NE(upfs_readdir(d), nullptr);  // the rest waits in the buffer
  ASSERT_EQ(upfs_unlink(P("d/" + LongName(999)).c_str()), 0);
  ASSERT_EQ(Create("d/new"), 0);
  upfs_rewinddir(d);
  std::set<std::string> names;
  off_t first_off = 0;
  while (struct dirent* e = upfs_readdir(d)) {
    if (!first_off) first_off = e->d_off;
    EXPECT_TRUE(names.insert(e->d_name).second) << e->d_name << " twice";
  }
  EXPECT_EQ(first_off, 1) << "the new scan starts at its first entry";
  EXPECT_EQ(names.size(), 1000u + 2);
  EXPECT_TRUE(names.count("new")) << "the new scan did not see what changed";
  EXPECT_FALSE(names.count(LongName(999))) << "the new scan listed a removed name";
  EXPECT_EQ(upfs_closedir(d), 0);
}

TEST_F(PoolTest, GetdentsGoesOnWhereTheStreamsBufferEnds) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  constexpr int kFiles = 1000;  // about 128 KiB of records: four buffers
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(Create("d/" + LongName(i)), 0);
  UPFS_DIR* d = upfs_opendir(P("d").c_str());
  ASSERT_NE(d, nullptr);
  struct dirent* first = upfs_readdir(d);
  ASSERT_NE(first, nullptr);
  std::set<std::string> names = {first->d_name};
  // The descriptor's scan stands after the stream's first buffer.
  char buf[4096];
  for (ssize_t got; (got = upfs_getdents64(upfs_dirfd(d), buf, sizeof(buf))) > 0;) {
    for (ssize_t at = 0; at < got;) {
      uint16_t reclen;
      memcpy(&reclen, buf + at + 16, 2);
      EXPECT_TRUE(names.insert(buf + at + 19).second) << buf + at + 19 << " twice";
      at += reclen;
    }
  }
  // The rest of the stream's buffer.
  while (struct dirent* e = upfs_readdir(d)) EXPECT_TRUE(names.insert(e->d_name).second) << e->d_name;
  EXPECT_EQ(names.size(), size_t(kFiles) + 2);
  EXPECT_EQ(upfs_closedir(d), 0);
}

TEST_F(PoolTest, AStreamSharedByThreadsHandsEachEntryToOne) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  constexpr int kFiles = 3000;  // about 12 refills
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(Create("d/" + LongName(i)), 0);
  for (int round = 0; round < 20; ++round) {
    UPFS_DIR* d = upfs_opendir(P("d").c_str());
    ASSERT_NE(d, nullptr);
    // Counted only: the dirent is the stream's, and the other thread's
    // next call overwrites it (as glibc's), so its name is not read here.
    std::atomic<int> got{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; ++t)
      ts.emplace_back([&] {
        while (upfs_readdir(d)) got.fetch_add(1);
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(got.load(), kFiles + 2) << "round " << round;
    EXPECT_EQ(upfs_closedir(d), 0);
  }
}

}  // namespace
