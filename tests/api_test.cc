// Unit tests of the POSIX-like C API (include/upfs/upfs.h): a upfs file
// must behave like a plain kernel file. Most tests run in both consistency
// modes (strict and sync), which have the same single-thread semantics.
// Opening is in api_open_test.cc; sizes, space and attributes in
// api_size_test.cc.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "api_test_fixture.h"
#include "container/perfile/inspect.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_api_test::ApiTest;
using upfs_api_test::ModeName;
using upfs_api_test::Bytes;
using upfs_test::Pattern;

// Applies a pwrite to a model of the file content.
void ModelWrite(Bytes* m, const unsigned char* data, size_t n, size_t off) {
  if (n == 0) return;
  if (m->size() < off + n) m->resize(off + n, 0);
  std::memcpy(m->data() + off, data, n);
}

UPFS_API_TEST_IN_BOTH_MODES();
TEST_P(ApiTest, AppendAlwaysWritesAtEnd) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  int afd = upfs_open(Path().c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(afd, 0) << upfs_last_error();
  Bytes model;

  ASSERT_EQ(upfs_write(afd, "hello", 5), 5);
  ModelWrite(&model, reinterpret_cast<const unsigned char*>("hello"), 5, 0);
  EXPECT_EQ(upfs_lseek(afd, 0, SEEK_CUR), 5);

  // lseek before the write does not matter.
  ASSERT_EQ(upfs_lseek(afd, 0, SEEK_SET), 0);
  ASSERT_EQ(upfs_write(afd, "world", 5), 5);
  ModelWrite(&model, reinterpret_cast<const unsigned char*>("world"), 5, 5);
  EXPECT_EQ(upfs_lseek(afd, 0, SEEK_CUR), 10);

  // Another descriptor extends the file; the next append follows it.
  Bytes p = Pattern(6000, 2);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 4000), 6000);
  ModelWrite(&model, p.data(), p.size(), 4000);
  ASSERT_EQ(upfs_lseek(afd, 3, SEEK_SET), 3);
  Bytes q = Pattern(5000, 3);
  ASSERT_EQ(upfs_write(afd, q.data(), q.size()), 5000);
  ModelWrite(&model, q.data(), q.size(), 10000);
  EXPECT_EQ(upfs_lseek(afd, 0, SEEK_CUR), 15000);

  // Appends after a shrink go to the new end.
  ASSERT_EQ(upfs_ftruncate(fd, 4097), 0);
  model.resize(4097);
  ASSERT_EQ(upfs_lseek(afd, 100000, SEEK_SET), 100000);
  ASSERT_EQ(upfs_write(afd, "tail", 4), 4);
  ModelWrite(&model, reinterpret_cast<const unsigned char*>("tail"), 4, 4097);

  // Many small appends across block boundaries.
  for (int i = 0; i < 3000; ++i) {
    unsigned char b[3] = {static_cast<unsigned char>(i), static_cast<unsigned char>(i >> 8), 0x5a};
    ASSERT_EQ(upfs_write(afd, b, 3), 3);
    ModelWrite(&model, b, 3, model.size());
  }
  EXPECT_EQ(upfs_lseek(afd, 0, SEEK_CUR), static_cast<off_t>(model.size()));
  ExpectContent(fd, model, "after appends");
  ASSERT_EQ(upfs_close(afd), 0);
  ASSERT_EQ(upfs_close(fd), 0);

  // O_APPEND | O_CREAT creates the file.
  afd = upfs_open_mode(Path("new").c_str(), O_CREAT | O_WRONLY | O_APPEND, 0644, GetParam());
  ASSERT_GE(afd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_write(afd, "a", 1), 1);
  ASSERT_EQ(upfs_write(afd, "b", 1), 1);
  EXPECT_EQ(Size(afd), 2);
  upfs_close(afd);
}

TEST_P(ApiTest, ReadWriteLseek) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes p = Pattern(10000, 4);
  ASSERT_EQ(upfs_write(fd, p.data(), 3000), 3000);
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_CUR), 3000);
  ASSERT_EQ(upfs_write(fd, p.data() + 3000, 7000), 7000);
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_CUR), 10000);

  EXPECT_EQ(upfs_lseek(fd, 100, SEEK_SET), 100);
  Bytes buf(500);
  ASSERT_EQ(upfs_read(fd, buf.data(), 500), 500);
  EXPECT_EQ(std::memcmp(buf.data(), p.data() + 100, 500), 0);
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_CUR), 600);
  EXPECT_EQ(upfs_lseek(fd, 400, SEEK_CUR), 1000);
  EXPECT_EQ(upfs_lseek(fd, -999, SEEK_CUR), 1);
  ASSERT_EQ(upfs_read(fd, buf.data(), 10), 10);
  EXPECT_EQ(std::memcmp(buf.data(), p.data() + 1, 10), 0);
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_END), 10000);
  EXPECT_EQ(upfs_lseek(fd, -10, SEEK_END), 9990);
  ASSERT_EQ(upfs_read(fd, buf.data(), 500), 10) << "short read at the end";
  EXPECT_EQ(std::memcmp(buf.data(), p.data() + 9990, 10), 0);
  EXPECT_EQ(upfs_read(fd, buf.data(), 500), 0);

  // Seeking past the end is allowed; a write there leaves a zero gap.
  EXPECT_EQ(upfs_lseek(fd, 5000, SEEK_END), 15000);
  EXPECT_EQ(Size(fd), 10000) << "lseek alone does not change the size";
  ASSERT_EQ(upfs_write(fd, "X", 1), 1);
  EXPECT_EQ(Size(fd), 15001);
  Bytes model = p;
  model.resize(15000, 0);
  model.push_back('X');
  ExpectContent(fd, model, "after seek past end and write");

  // Errors: negative result and bad whence leave the offset alone.
  ASSERT_EQ(upfs_lseek(fd, 42, SEEK_SET), 42);
  errno = 0;
  EXPECT_EQ(upfs_lseek(fd, -1, SEEK_SET), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_lseek(fd, -43, SEEK_CUR), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_lseek(fd, -15002, SEEK_END), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_lseek(fd, 0, 42), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_lseek(fd, 0, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_CUR), 42);
  EXPECT_EQ(upfs_lseek(fd, -15001, SEEK_END), 0);
  upfs_close(fd);
}

TEST_P(ApiTest, PreadPwriteKeepOffset) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_write(fd, "0123456789", 10), 10);
  ASSERT_EQ(upfs_lseek(fd, 3, SEEK_SET), 3);
  ASSERT_EQ(upfs_pwrite(fd, "abc", 3, 7), 3);
  char buf[16] = {};
  ASSERT_EQ(upfs_pread(fd, buf, 16, 0), 10);
  EXPECT_EQ(std::string(buf, 10), "0123456abc");
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_CUR), 3);
  ASSERT_EQ(upfs_read(fd, buf, 2), 2);
  EXPECT_EQ(std::string(buf, 2), "34");
  errno = 0;
  EXPECT_EQ(upfs_pwrite(fd, "x", 1, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_pread(fd, buf, 1, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Size(fd), 10);
  upfs_close(fd);
}

TEST_P(ApiTest, ZeroLengthOperations) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(upfs_write(fd, "", 0), 0);
  EXPECT_EQ(upfs_pwrite(fd, "", 0, 100000), 0);
  EXPECT_EQ(Size(fd), 0) << "a zero-length write past the end does not extend the file";
  char c;
  EXPECT_EQ(upfs_read(fd, &c, 0), 0);
  EXPECT_EQ(upfs_pread(fd, &c, 0, 5), 0);
  ASSERT_EQ(upfs_write(fd, "ab", 2), 2);
  EXPECT_EQ(upfs_read(fd, &c, 0), 0);
  EXPECT_EQ(Size(fd), 2);
  upfs_close(fd);
}

TEST_P(ApiTest, BadDescriptors) {
  char buf[16];
  struct stat st;
  for (int bad : {-1, -100, 1 << 20}) {
    errno = 0;
    EXPECT_EQ(upfs_read(bad, buf, 1), -1);
    EXPECT_EQ(errno, EBADF) << bad;
    errno = 0;
    EXPECT_EQ(upfs_write(bad, buf, 1), -1);
    EXPECT_EQ(errno, EBADF) << bad;
    errno = 0;
    EXPECT_EQ(upfs_close(bad), -1);
    EXPECT_EQ(errno, EBADF) << bad;
  }
  // A kernel descriptor that upfs did not open is not a upfs descriptor.
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  errno = 0;
  EXPECT_EQ(upfs_write(pipefd[1], "x", 1), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_fstat(pipefd[0], &st), -1);
  EXPECT_EQ(errno, EBADF);
  ::close(pipefd[0]);
  ::close(pipefd[1]);

  int fd = Create();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_close(fd), 0);
  // Every call on a closed descriptor fails with EBADF.
  errno = 0;
  EXPECT_EQ(upfs_read(fd, buf, 1), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_write(fd, buf, 1), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_pread(fd, buf, 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_pwrite(fd, buf, 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_SET), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_ftruncate(fd, 0), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_fallocate(fd, 0, 0, 4096), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_fsync(fd), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_fdatasync(fd), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_fstat(fd, &st), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_host_fd(fd), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_close(fd), -1);
  EXPECT_EQ(errno, EBADF);
}

// A read or write with a negative offset, or one whose end would pass the
// largest offset, fails as the kernel's does on a plain file, in the
// kernel's order: a negative offset is EINVAL before the descriptor is
// looked at, an end past the largest offset EINVAL after the access mode.
TEST_P(ApiTest, OffsetErrorsAsTheKernelsInItsOrder) {
  const std::string plain = Path("plain");
  ASSERT_TRUE(upfs_test::WriteHostFile(plain, "0123456789", 10));
  int fd = Create();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_pwrite(fd, "0123456789", 10, 0), 10);
  ASSERT_EQ(upfs_close(fd), 0);
  const auto err = [](ssize_t r) { return r >= 0 ? std::string("ok") : std::string(strerrorname_np(errno)); };
  // Every call once on each side: "what kernel/upfs; ".
  std::string got, want;
  const auto both = [&](const char* what, int flags, const std::function<ssize_t(int, bool)>& call) {
    const int k = ::open(plain.c_str(), flags);
    const int u = upfs_open(Path().c_str(), flags);
    ASSERT_GE(k, 0);
    ASSERT_GE(u, 0) << upfs_last_error();
    const std::string ks = err(call(k, false)), us = err(call(u, true));
    got += std::string(what) + " " + ks + "/" + us + "; ";
    want += std::string(what) + " " + ks + "/" + ks + "; ";
    ::close(k);
    upfs_close(u);
  };
  char buf[4];
  constexpr off_t kMax = std::numeric_limits<off_t>::max();
  const auto pread_at = [&](off_t at, size_t n) {
    return [&, at, n](int fd, bool up) { return up ? upfs_pread(fd, buf, n, at) : ::pread(fd, buf, n, at); };
  };
  const auto pwrite_at = [&](off_t at, size_t n) {
    return [&, at, n](int fd, bool up) { return up ? upfs_pwrite(fd, "ab", n, at) : ::pwrite(fd, "ab", n, at); };
  };
  both("pread -1 on a write-only descriptor", O_WRONLY, pread_at(-1, 1));
  both("pwrite -1 on a read-only descriptor", O_RDONLY, pwrite_at(-1, 1));
  both("pwrite at the largest offset", O_RDWR, pwrite_at(kMax, 1));
  both("pwrite of 2 ending past it", O_RDWR, pwrite_at(kMax - 1, 2));
  both("pwrite of 2 past it, O_APPEND", O_RDWR | O_APPEND, pwrite_at(kMax - 1, 2));
  both("pread of 2 ending past it", O_RDONLY, pread_at(kMax - 1, 2));
  both("pread past it, write-only", O_WRONLY, pread_at(kMax - 1, 2));
  const auto at_end_of_offsets = [&](bool write) {
    return [&, write](int fd, bool up) -> ssize_t {
      if ((up ? upfs_lseek(fd, kMax, SEEK_SET) : ::lseek(fd, kMax, SEEK_SET)) != kMax) return -1;
      if (write) return up ? upfs_write(fd, "a", 1) : ::write(fd, "a", 1);
      return up ? upfs_read(fd, buf, 1) : ::read(fd, buf, 1);
    };
  };
  both("write at the largest position", O_RDWR, at_end_of_offsets(true));
  both("read at the largest position", O_RDWR, at_end_of_offsets(false));
  EXPECT_EQ(got, want);
  // A negative offset is refused even on a descriptor that is not open.
  errno = 0;
  EXPECT_EQ(upfs_pread(1 << 20, buf, 1, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  fd = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ExpectContent(fd, Bytes{'0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}, "after the refused calls");
  upfs_close(fd);
}

// A descriptor opened with O_PATH names its file and refuses every call
// that reads, writes, seeks, syncs or changes it (EBADF), as the kernel's;
// fstat reports the upfs file (its size, not the host file's). The flags
// O_PATH ignores change nothing (O_TRUNC here).
TEST_P(ApiTest, AnOPathDescriptorOnlyNamesItsFile) {
  const std::string plain = Path("plain");
  ASSERT_TRUE(upfs_test::WriteHostFile(plain, "hello", 5));
  int fd = Create();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_pwrite(fd, "hello", 5, 0), 5);
  ASSERT_EQ(upfs_close(fd), 0);
  std::string got, want;
  for (const bool upfs : {false, true}) {
    std::string& out = upfs ? got : want;
    const auto answer = [&](const char* what, long r) {
      out += std::string(what) + " " + (r >= 0 ? "ok" : strerrorname_np(errno)) + "; ";
    };
    const int p = upfs ? upfs_open(Path().c_str(), O_PATH | O_TRUNC | O_RDWR) : ::open(plain.c_str(), O_PATH | O_TRUNC | O_RDWR);
    answer("open", p);
    char b[8];
    answer("read", upfs ? upfs_read(p, b, 1) : ::read(p, b, 1));
    answer("pwrite", upfs ? upfs_pwrite(p, "x", 1, 0) : ::pwrite(p, "x", 1, 0));
    answer("lseek", upfs ? upfs_lseek(p, 0, SEEK_SET) : ::lseek(p, 0, SEEK_SET));
    answer("ftruncate", upfs ? upfs_ftruncate(p, 0) : ::ftruncate(p, 0));
    answer("fallocate", upfs ? upfs_fallocate(p, 0, 0, 10) : ::fallocate(p, 0, 0, 10));
    answer("fsync", upfs ? upfs_fsync(p) : ::fsync(p));
    answer("fchmod", upfs ? upfs_fchmod(p, 0600) : ::fchmod(p, 0600));
    struct stat st{};
    answer("fstat", upfs ? upfs_fstat(p, &st) : ::fstat(p, &st));
    out += "size " + std::to_string(st.st_size) + "; ";
    answer("close", upfs ? upfs_close(p) : ::close(p));
  }
  EXPECT_EQ(got, want);
  fd = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ExpectContent(fd, Bytes{'h', 'e', 'l', 'l', 'o'}, "after the O_PATH descriptor's calls");
  upfs_close(fd);
}

TEST_P(ApiTest, HostFd) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  int h = upfs_host_fd(fd);
  ASSERT_GE(h, 0);
  struct stat hs, ps;
  ASSERT_EQ(::fstat(h, &hs), 0);
  ASSERT_EQ(::stat(Path().c_str(), &ps), 0);
  EXPECT_EQ(hs.st_ino, ps.st_ino);
  EXPECT_EQ(hs.st_dev, ps.st_dev);
  upfs_close(fd);
}

TEST_P(ApiTest, UnalignedWritesAcrossBlocks) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes model;
  struct W {
    size_t off, len;
  };
  const W writes[] = {{0, 1},        {4095, 2},      {4090, 10000}, {8191, 1},     {12000, 4097},
                      {1, 4094},     {4096, 4096},   {3, 3},        {16383, 4098}, {20480, 1},
                      {24575, 8194}, {100, 30000},   {7, 65536},    {65535, 3},    {40000, 1},
                      {4095, 4097},  {131071, 4099}, {2, 131070}};
  uint32_t seed = 10;
  for (const W& w : writes) {
    Bytes p = Pattern(w.len, seed++);
    ASSERT_EQ(upfs_pwrite(fd, p.data(), w.len, static_cast<off_t>(w.off)), static_cast<ssize_t>(w.len));
    ModelWrite(&model, p.data(), w.len, w.off);
    ASSERT_NO_FATAL_FAILURE(ExpectContent(fd, model, ("after write at " + std::to_string(w.off)).c_str()));
  }
  // Unaligned reads of every kind.
  for (size_t off : {0ul, 1ul, 4095ul, 4096ul, 5000ul, 12287ul}) {
    for (size_t len : {1ul, 2ul, 4095ul, 4096ul, 4097ul, 10000ul}) {
      Bytes buf(len);
      ssize_t r = upfs_pread(fd, buf.data(), len, static_cast<off_t>(off));
      ASSERT_EQ(r, static_cast<ssize_t>(len));
      ASSERT_EQ(std::memcmp(buf.data(), model.data() + off, len), 0) << off << " " << len;
    }
  }
  upfs_close(fd);
}

TEST_P(ApiTest, WritePastEofLeavesZeroGap) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_pwrite(fd, "0123456789", 10, 0), 10);
  ASSERT_EQ(upfs_pwrite(fd, "abc", 3, 50), 3);  // gap inside the first block
  ASSERT_EQ(upfs_pwrite(fd, "xyz", 3, 100000), 3);  // gap over many blocks
  Bytes model(100003, 0);
  std::memcpy(model.data(), "0123456789", 10);
  std::memcpy(model.data() + 50, "abc", 3);
  std::memcpy(model.data() + 100000, "xyz", 3);
  ExpectContent(fd, model, "gaps");
  // Gap after a shrink inside a block: the stale bytes must not reappear.
  Bytes p = Pattern(8192, 20);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 200000), 8192);
  ASSERT_EQ(upfs_ftruncate(fd, 201000), 0);
  ASSERT_EQ(upfs_pwrite(fd, "!", 1, 210000), 1);
  model.resize(200000, 0);
  model.insert(model.end(), p.begin(), p.begin() + 1000);
  model.resize(210000, 0);
  model.push_back('!');
  ExpectContent(fd, model, "gap after shrink");
  upfs_close(fd);
}

TEST_P(ApiTest, FsyncAndFdatasync) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(upfs_fsync(fd), 0) << upfs_last_error();
  EXPECT_EQ(upfs_fdatasync(fd), 0) << upfs_last_error();
  ASSERT_EQ(upfs_write(fd, "data", 4), 4);
  EXPECT_EQ(upfs_fsync(fd), 0);
  EXPECT_EQ(upfs_fdatasync(fd), 0);
  int rfd = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0);
  EXPECT_EQ(upfs_fsync(rfd), 0) << "fsync works on a read-only descriptor";
  EXPECT_EQ(upfs_fdatasync(rfd), 0);
  upfs_close(rfd);
  upfs_close(fd);
}

TEST_P(ApiTest, ReopenPersistence) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes model;
  std::mt19937 rng(24);
  for (int i = 0; i < 200; ++i) {
    size_t len = rng() % 9000 + 1, off = rng() % 300000;
    Bytes p = Pattern(len, rng());
    ASSERT_EQ(upfs_pwrite(fd, p.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
    ModelWrite(&model, p.data(), len, off);
    if (i == 150) {
      ASSERT_EQ(upfs_ftruncate(fd, 123457), 0);
      model.resize(123457);
    }
  }
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 50000), 0);
  std::fill(model.begin() + 1000, model.begin() + 51000, 0);
  ExpectContent(fd, model, "before close");
  ASSERT_EQ(upfs_close(fd), 0);

  for (int round = 0; round < 3; ++round) {
    fd = upfs_open(Path().c_str(), round == 0 ? O_RDONLY : O_RDWR);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ExpectContent(fd, model, "after reopen");
    if (round > 0) {
      Bytes p = Pattern(5000, 100 + round);
      ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 4000), 5000);
      ModelWrite(&model, p.data(), p.size(), 4000);
    }
    ASSERT_EQ(upfs_close(fd), 0);
  }
  upfs::FileReport r;
  upfs::Status s = upfs::InspectFile(Path(), true, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.size, model.size());
  EXPECT_EQ(r.consistency, ModeName(GetParam()));
}

TEST_P(ApiTest, ReadAtAndAfterEof) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  char buf[8192];
  EXPECT_EQ(upfs_read(fd, buf, sizeof buf), 0) << "empty file";
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 0), 0);
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 1 << 20), 0);
  ASSERT_EQ(upfs_write(fd, "abcdef", 6), 6);
  EXPECT_EQ(upfs_read(fd, buf, sizeof buf), 0) << "offset at EOF";
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 6), 0);
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 7), 0);
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 4), 2);
  EXPECT_EQ(upfs_lseek(fd, 100, SEEK_SET), 100);
  EXPECT_EQ(upfs_read(fd, buf, sizeof buf), 0);
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_CUR), 100) << "a read at EOF does not move the offset";
  // After a shrink, reads at the old end return 0.
  ASSERT_EQ(upfs_pwrite(fd, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof buf));
  ASSERT_EQ(upfs_ftruncate(fd, 3), 0);
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 5000), 0);
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 0), 3);
  upfs_close(fd);
}

TEST_P(ApiTest, LargeWritesRoundTrip) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  const size_t n = 8 << 20;  // 2048 blocks
  Bytes p = Pattern(n, 25);
  ASSERT_EQ(upfs_write(fd, p.data(), n), static_cast<ssize_t>(n)) << upfs_last_error();
  EXPECT_EQ(Size(fd), static_cast<off_t>(n));
  Bytes got(n);
  ASSERT_EQ(upfs_pread(fd, got.data(), n, 0), static_cast<ssize_t>(n));
  EXPECT_TRUE(got == p);
  // Read back in odd-sized pieces.
  ASSERT_EQ(upfs_lseek(fd, 0, SEEK_SET), 0);
  size_t pos = 0;
  while (pos < n) {
    ssize_t r = upfs_read(fd, got.data() + pos, 99991);
    ASSERT_GT(r, 0);
    pos += static_cast<size_t>(r);
  }
  EXPECT_TRUE(got == p);
  // An unaligned large overwrite spanning > 64 blocks (an extended entry).
  Bytes q = Pattern(3 << 20, 26);
  ASSERT_EQ(upfs_pwrite(fd, q.data(), q.size(), 123), static_cast<ssize_t>(q.size()));
  Bytes model = p;
  ModelWrite(&model, q.data(), q.size(), 123);
  // And one that extends the file.
  Bytes r2 = Pattern(1 << 20, 27);
  ASSERT_EQ(upfs_pwrite(fd, r2.data(), r2.size(), static_cast<off_t>(n - 7)), static_cast<ssize_t>(r2.size()));
  ModelWrite(&model, r2.data(), r2.size(), n - 7);
  ExpectContent(fd, model, "after large overwrites");
  upfs_close(fd);
  fd = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ExpectContent(fd, model, "after reopen");
  upfs_close(fd);
  upfs::FileReport rep;
  upfs::Status s = upfs::InspectFile(Path(), true, &rep);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_P(ApiTest, DescriptorsShareTheFile) {
  int a = Create();
  ASSERT_GE(a, 0);
  int b = upfs_open(Path().c_str(), O_RDWR);
  ASSERT_GE(b, 0);
  ASSERT_EQ(upfs_write(a, "first", 5), 5);
  char buf[16] = {};
  EXPECT_EQ(upfs_pread(b, buf, 16, 0), 5);
  EXPECT_EQ(std::string(buf, 5), "first");
  EXPECT_EQ(upfs_lseek(b, 0, SEEK_CUR), 0) << "offsets are per descriptor";
  ASSERT_EQ(upfs_write(b, "SE", 2), 2);
  EXPECT_EQ(upfs_pread(a, buf, 16, 0), 5);
  EXPECT_EQ(std::string(buf, 5), "SErst");
  ASSERT_EQ(upfs_ftruncate(b, 2), 0);
  EXPECT_EQ(Size(a), 2);
  EXPECT_EQ(upfs_close(a), 0);
  EXPECT_EQ(upfs_pread(b, buf, 16, 0), 2) << "closing one descriptor leaves the other";
  EXPECT_EQ(upfs_close(b), 0);
}

TEST_P(ApiTest, ManyFilesAndDescriptors) {
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    int fd = Create("m" + std::to_string(i));
    ASSERT_GE(fd, 0) << upfs_last_error();
    std::string s = "file " + std::to_string(i);
    ASSERT_EQ(upfs_write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
    fds.push_back(fd);
  }
  for (int i = 0; i < 20; ++i) {
    char buf[32] = {};
    std::string s = "file " + std::to_string(i);
    ASSERT_EQ(upfs_pread(fds[i], buf, sizeof buf, 0), static_cast<ssize_t>(s.size()));
    EXPECT_EQ(std::string(buf, s.size()), s);
    EXPECT_EQ(upfs_close(fds[i]), 0);
  }
}

}  // namespace
