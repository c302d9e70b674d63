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
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pool_test_fixture.h"
#include "test_util.h"
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

// The names a getdents64 of fd gives from where it stands, sorted.
std::string NextNames(int fd, bool upfs) {
  char buf[4096];
  const long n = upfs ? upfs_getdents64(fd, buf, sizeof buf) : syscall(SYS_getdents64, fd, buf, sizeof buf);
  if (n < 0) return strerrorname_np(errno);
  std::vector<std::string> names;
  for (long at = 0; at < n;) {
    const auto* e = reinterpret_cast<const struct dirent64*>(buf + at);
    names.push_back(e->d_name);
    at += e->d_reclen;
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& x : names) out += x + ",";
  return out;
}

// A directory's descriptor answers every call as the kernel's does for a
// tmpfs directory: the access mode refuses writes before the kind does
// (EBADF, EINVAL), and lseek goes back to the start (rewinddir's lseek, a
// new scan that sees a name made since) or to where a getdents64 stood;
// SEEK_END is EINVAL. Before 2026-12-07 each was EISDIR, so a program's
// rewinddir through the preload failed.
TEST_F(PoolTest, ADirectoryDescriptorAnswersAsTheKernelsDo) {
  upfs_test::TempDir kernel_dir;
  std::string got, want;
  for (const bool upfs : {false, true}) {
    const std::string d = upfs ? P("d") : kernel_dir.File("d");
    std::string& out = upfs ? got : want;
    const auto answer = [&](const char* what, long r) {
      out += std::string(what) + " " + (r < 0 ? strerrorname_np(errno) : std::to_string(r)) + "; ";
    };
    ASSERT_EQ(upfs ? upfs_mkdir(d.c_str(), 0755) : ::mkdir(d.c_str(), 0755), 0);
    for (const char* name : {"/a", "/b"}) {
      const int f = upfs ? upfs_open((d + name).c_str(), O_CREAT | O_WRONLY, 0644)
                         : ::open((d + name).c_str(), O_CREAT | O_WRONLY, 0644);
      ASSERT_GE(f, 0);
      upfs ? upfs_close(f) : ::close(f);
    }
    const int fd = upfs ? upfs_open(d.c_str(), O_RDONLY | O_DIRECTORY) : ::open(d.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    char c = 'x';
    answer("write", upfs ? upfs_write(fd, &c, 1) : ::write(fd, &c, 1));
    answer("pwrite", upfs ? upfs_pwrite(fd, &c, 1, 0) : ::pwrite(fd, &c, 1, 0));
    answer("read", upfs ? upfs_read(fd, &c, 1) : ::read(fd, &c, 1));
    answer("ftruncate", upfs ? upfs_ftruncate(fd, 0) : ::ftruncate(fd, 0));
    answer("fallocate", upfs ? upfs_fallocate(fd, 0, 0, 1) : ::fallocate(fd, 0, 0, 1));
    answer("lseek end", upfs ? upfs_lseek(fd, 0, SEEK_END) : ::lseek(fd, 0, SEEK_END));
    const std::string listed = NextNames(fd, upfs);
    out += "listed " + listed + " then " + NextNames(fd, upfs) + "; ";
    const int f = upfs ? upfs_open((d + "/c").c_str(), O_CREAT | O_WRONLY, 0644)
                       : ::open((d + "/c").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(f, 0);
    upfs ? upfs_close(f) : ::close(f);
    answer("lseek 0", upfs ? upfs_lseek(fd, 0, SEEK_SET) : ::lseek(fd, 0, SEEK_SET));
    out += "listed again " + NextNames(fd, upfs) + "; ";
    // Back to where the first record's d_off says, by SEEK_SET and by
    // SEEK_CUR: the rest comes again (which names, the order decides).
    answer("lseek 0 again", upfs ? upfs_lseek(fd, 0, SEEK_SET) : ::lseek(fd, 0, SEEK_SET));
    char buf[4096];
    const long n = upfs ? upfs_getdents64(fd, buf, sizeof buf) : syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n > 0) {
      size_t records = 0;
      for (long at = 0; at < n; ++records) at += reinterpret_cast<const struct dirent64*>(buf + at)->d_reclen;
      const off_t first = reinterpret_cast<const struct dirent64*>(buf)->d_off;
      const off_t to = upfs ? upfs_lseek(fd, first, SEEK_SET) : ::lseek(fd, first, SEEK_SET);
      EXPECT_EQ(to, first) << (upfs ? "upfs" : "kernel");
      const std::string rest = NextNames(fd, upfs);
      out += "records " + std::to_string(records) + ", after the first " +
             std::to_string(std::count(rest.begin(), rest.end(), ',')) + "; ";
    } else {
      answer("getdents after lseek 0", n);
    }
    // Where SEEK_CUR leads is the file system's number: whether it answers.
    answer("lseek cur -1 answers", (upfs ? upfs_lseek(fd, -1, SEEK_CUR) : ::lseek(fd, -1, SEEK_CUR)) < 0 ? -1 : 0);
    answer("lseek -1", upfs ? upfs_lseek(fd, -1, SEEK_SET) : ::lseek(fd, -1, SEEK_SET));
    upfs ? upfs_close(fd) : ::close(fd);
    answer("O_CREAT|O_DIRECTORY", upfs ? upfs_open((d + "/e").c_str(), O_CREAT | O_DIRECTORY | O_RDONLY, 0644)
                                       : ::open((d + "/e").c_str(), O_CREAT | O_DIRECTORY | O_RDONLY, 0644));
  }
  EXPECT_EQ(got, want);
  ExpectClean();
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
