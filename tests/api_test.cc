// Unit tests of the POSIX-like C API (include/upfs/upfs.h): a upfs file
// must behave like a plain kernel file. Most tests run in both consistency
// modes (strict and sync), which have the same single-thread semantics.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/inspect.h"
#include "format/format.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_test::TempDir;
using Bytes = std::vector<unsigned char>;

constexpr off_t kGiB = off_t{1} << 30;

using upfs_test::Pattern;

bool TsLessEq(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec <= b.tv_nsec);
}

// Applies a pwrite to a model of the file content.
void ModelWrite(Bytes* m, const unsigned char* data, size_t n, size_t off) {
  if (n == 0) return;
  if (m->size() < off + n) m->resize(off + n, 0);
  std::memcpy(m->data() + off, data, n);
}

const char* ModeName(upfs_consistency c) { return c == UPFS_STRICT ? "strict" : "sync"; }

class ApiTest : public ::testing::TestWithParam<upfs_consistency> {
 protected:
  std::string Path(const std::string& name = "f") { return dir_.File(name); }

  // Creates (or opens) a upfs file in the mode under test.
  int Create(const std::string& name = "f", int extra_flags = 0) {
    return upfs_open_mode(Path(name).c_str(), O_CREAT | O_RDWR | extra_flags, 0644, GetParam());
  }

  Bytes ReadAll(int fd) {
    Bytes b;
    EXPECT_TRUE(upfs_test::UpfsReadAll(fd, &b)) << upfs_last_error();
    return b;
  }

  off_t Size(int fd) { return upfs_test::UpfsSize(fd); }

  void ExpectContent(int fd, const Bytes& expect, const char* what = "") {
    Bytes got = ReadAll(fd);
    ASSERT_EQ(got.size(), expect.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], expect[i]) << what << ": first difference at byte " << i;
  }

  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Modes, ApiTest, ::testing::Values(UPFS_STRICT, UPFS_SYNC),
                         [](const ::testing::TestParamInfo<upfs_consistency>& i) {
                           return std::string(ModeName(i.param));
                         });

TEST_P(ApiTest, CreateOpenClose) {
  int fd = Create();
  ASSERT_GE(fd, 0) << upfs_last_error();
  struct stat st;
  ASSERT_EQ(upfs_fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(upfs_close(fd), 0);

  struct stat host;
  ASSERT_EQ(::stat(Path().c_str(), &host), 0) << "the host file exists";
  EXPECT_EQ(upfs_is_upfs_file(Path().c_str()), 1);

  fd = upfs_open(Path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << upfs_last_error();
  EXPECT_EQ(Size(fd), 0);
  EXPECT_EQ(upfs_close(fd), 0);

  // The mode is recorded in the file.
  upfs::FileReport r;
  upfs::Status s = upfs::InspectFile(Path(), true, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.consistency, ModeName(GetParam()));
  EXPECT_EQ(r.size, 0u);

  errno = 0;
  EXPECT_EQ(upfs_open(Path("missing").c_str(), O_RDWR), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_NE(std::string(upfs_last_error()), "");
  EXPECT_EQ(upfs_is_upfs_file(Path("missing").c_str()), -1);
}

TEST_P(ApiTest, ExclusiveCreate) {
  int fd = Create("x", O_EXCL);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_write(fd, "abc", 3), 3);
  ASSERT_EQ(upfs_close(fd), 0);
  errno = 0;
  EXPECT_EQ(Create("x", O_EXCL), -1);
  EXPECT_EQ(errno, EEXIST);
  // The existing file is untouched.
  fd = upfs_open(Path("x").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[8] = {};
  EXPECT_EQ(upfs_pread(fd, buf, sizeof buf, 0), 3);
  EXPECT_EQ(std::memcmp(buf, "abc", 3), 0);
  upfs_close(fd);
  // O_CREAT without O_EXCL opens the existing file.
  fd = Create("x");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Size(fd), 3);
  upfs_close(fd);
}

TEST_P(ApiTest, TruncateOnOpen) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes p = Pattern(10000, 1);
  ASSERT_EQ(upfs_write(fd, p.data(), p.size()), 10000);
  ASSERT_EQ(upfs_close(fd), 0);

  fd = upfs_open(Path().c_str(), O_RDWR | O_TRUNC);
  ASSERT_GE(fd, 0) << upfs_last_error();
  EXPECT_EQ(Size(fd), 0);
  char c;
  EXPECT_EQ(upfs_read(fd, &c, 1), 0);
  // After growing again, the old content does not come back.
  ASSERT_EQ(upfs_ftruncate(fd, 10000), 0);
  ExpectContent(fd, Bytes(10000, 0), "regrown after O_TRUNC");
  ASSERT_EQ(upfs_pwrite(fd, "z", 1, 20000), 1);
  EXPECT_EQ(Size(fd), 20001);
  ASSERT_EQ(upfs_close(fd), 0);
}

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

TEST_P(ApiTest, FtruncateGrowAndShrink) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes p = Pattern(20000, 5);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 0), 20000);
  Bytes model = p;

  ASSERT_EQ(upfs_ftruncate(fd, 5000), 0);
  model.resize(5000);
  EXPECT_EQ(Size(fd), 5000);
  ExpectContent(fd, model, "after shrink to 5000");

  // Shrink then grow: the cut-off bytes read as zeros, also inside the
  // block that holds the new end.
  ASSERT_EQ(upfs_ftruncate(fd, 30000), 0);
  model.resize(30000, 0);
  ExpectContent(fd, model, "after grow to 30000");

  ASSERT_EQ(upfs_ftruncate(fd, 8192), 0);
  model.resize(8192);
  ASSERT_EQ(upfs_ftruncate(fd, 8193), 0);
  model.resize(8193, 0);
  ExpectContent(fd, model, "aligned shrink then grow by one");

  ASSERT_EQ(upfs_ftruncate(fd, 8193), 0) << "same size";
  ExpectContent(fd, model, "same size truncate");

  ASSERT_EQ(upfs_ftruncate(fd, 0), 0);
  EXPECT_EQ(Size(fd), 0);
  ASSERT_EQ(upfs_ftruncate(fd, 12345), 0);
  ExpectContent(fd, Bytes(12345, 0), "zero then grow");

  errno = 0;
  EXPECT_EQ(upfs_ftruncate(fd, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Size(fd), 12345);

  // The file offset is not changed by truncate; a write there extends.
  ASSERT_EQ(upfs_lseek(fd, 20000, SEEK_SET), 20000);
  ASSERT_EQ(upfs_ftruncate(fd, 100), 0);
  ASSERT_EQ(upfs_write(fd, "q", 1), 1);
  EXPECT_EQ(Size(fd), 20001);
  Bytes m2(20001, 0);
  m2[20000] = 'q';
  ExpectContent(fd, m2, "write at old offset after truncate");
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

// Regression: RocksDB preallocates every table file with KEEP_SIZE and then
// appends into it. Mapped zero blocks would each be displaced by the first
// write (copy on write), so each file took its size twice (12 MiB host
// files for 4 MiB tables). A preallocation grows the host file and maps
// nothing; sync mode maps holes below the size for its in-place writes.
TEST_P(ApiTest, FallocateReservesRoomWithoutDoublingSpace) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  const uint64_t kLen = 8u << 20;
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(kLen)), 0) << upfs_last_error();
  struct stat host;
  ASSERT_EQ(::stat(Path().c_str(), &host), 0);
  EXPECT_GE(static_cast<uint64_t>(host.st_size), kLen) << "the room is reserved in the host file";
  struct stat st;
  ASSERT_EQ(upfs_fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_blocks, 0) << "nothing is mapped past the size";
  Bytes model;
  for (uint64_t off = 0; off < kLen; off += 65536) {
    Bytes chunk = Pattern(65536, static_cast<int>(off >> 16));
    ASSERT_EQ(upfs_write(fd, chunk.data(), chunk.size()), 65536);
    model.insert(model.end(), chunk.begin(), chunk.end());
  }
  ExpectContent(fd, model, "appends into the preallocated range");
  ASSERT_EQ(::stat(Path().c_str(), &host), 0);
  EXPECT_LT(static_cast<uint64_t>(host.st_size), kLen + (4u << 20))
      << "the appends reused the reserved room instead of doubling the file";

  // Mode 0 over a hole inside the size: zeros either way; mapped only in sync mode.
  int g = Create("g");
  ASSERT_GE(g, 0);
  ASSERT_EQ(upfs_ftruncate(g, 1 << 20), 0);
  ASSERT_EQ(upfs_fallocate(g, 0, 0, 65536), 0) << upfs_last_error();
  ASSERT_EQ(upfs_fstat(g, &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_EQ(st.st_blocks, GetParam() == UPFS_SYNC ? 128 : 0);
  ExpectContent(g, Bytes(1 << 20, 0), "fallocate over a hole");
  EXPECT_EQ(upfs_close(g), 0);
  EXPECT_EQ(upfs_close(fd), 0);
}

// stat of a upfs file the process does not have open reads the log without
// opening it (no shared state, no locks): same answer as an open, plain
// files refused, damage reported.
TEST_P(ApiTest, StatHostFdWithoutOpening) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes p = Pattern(50001, 3);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 0), 50001);
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 8192), 0);
  struct stat want;
  ASSERT_EQ(upfs_fstat(fd, &want), 0);
  // Open in this process: answered from the open file.
  int k = open(Path().c_str(), O_RDONLY);
  ASSERT_GE(k, 0);
  struct stat got;
  ASSERT_EQ(upfs_stat_host_fd(k, &got), 0) << upfs_last_error();
  EXPECT_EQ(got.st_size, 50001);
  EXPECT_EQ(got.st_blocks, want.st_blocks);
  ASSERT_EQ(upfs_close(fd), 0);
  upfs_drop_closed_files();  // not even parked
  // Not open: read from the log.
  ASSERT_EQ(upfs_stat_if_open(&got, nullptr), 0) << "the file is still open";
  std::memset(&got, 0, sizeof(got));
  ASSERT_EQ(upfs_stat_host_fd(k, &got), 0) << upfs_last_error();
  EXPECT_EQ(got.st_size, want.st_size);
  EXPECT_EQ(got.st_blocks, want.st_blocks);
  EXPECT_EQ(got.st_mtim.tv_sec, want.st_mtim.tv_sec);
  EXPECT_EQ(got.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
  EXPECT_EQ(got.st_ino, want.st_ino);
  close(k);
  // A plain file is not a upfs file.
  std::string plain = Path("plain");
  int q = open(plain.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(q, 0);
  ASSERT_EQ(write(q, "hello", 5), 5);
  errno = 0;
  EXPECT_EQ(upfs_stat_host_fd(q, &got), -1);
  EXPECT_EQ(errno, EMEDIUMTYPE);
  close(q);
  EXPECT_EQ(upfs_stat_host_fd(-1, &got), -1);
  EXPECT_EQ(errno, EBADF);
}

// The light stat walks the log unpinned while another process writes and
// compacts it: every answer is the true size (or the call fails), never a
// size read from a reused block.
TEST_P(ApiTest, StatHostFdWhileAnotherProcessCompactsTheLog) {
  const off_t kSize = 300000;
  int fd = Create();
  ASSERT_GE(fd, 0);
  Bytes p = Pattern(size_t(kSize), 5);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 0), kSize);
  ASSERT_EQ(upfs_close(fd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int w = upfs_open(Path().c_str(), O_RDWR);
    if (w < 0) _exit(2);
    std::mt19937_64 rng(7);
    char buf[700];
    std::memset(buf, 'w', sizeof(buf));
    for (;;) {  // overwrites inside the size: a long log, compacted again and again
      off_t off = off_t(rng() % uint64_t(kSize - sizeof(buf)));
      if (upfs_pwrite(w, buf, sizeof(buf), off) != ssize_t(sizeof(buf))) _exit(3);
    }
  }
  int k = open(Path().c_str(), O_RDONLY);
  ASSERT_GE(k, 0);
  int ok = 0, failed = 0;
  std::string first_error;
  for (uint64_t i = 0; i < upfs_test::Scaled(3000, 300); ++i) {
    struct stat st;
    if (upfs_stat_host_fd(k, &st) != 0) {
      if (first_error.empty()) first_error = upfs_last_error();
      ++failed;
      continue;
    }
    ASSERT_EQ(st.st_size, kSize) << "stat " << i << " read a wrong size";
    ++ok;
  }
  close(k);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "writer child failed early, status " << status;
  EXPECT_EQ(failed, 0) << first_error;
  EXPECT_GT(ok, 0);
}

TEST_P(ApiTest, FallocateModes) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  // Mode 0 extends the size; the new range reads as zeros.
  ASSERT_EQ(upfs_fallocate(fd, 0, 0, 10000), 0) << upfs_last_error();
  EXPECT_EQ(Size(fd), 10000);
  ExpectContent(fd, Bytes(10000, 0), "fallocate mode 0");
  // KEEP_SIZE does not.
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 50000), 0) << upfs_last_error();
  EXPECT_EQ(Size(fd), 10000);
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_KEEP_SIZE, 100000, 4096), 0);
  EXPECT_EQ(Size(fd), 10000);
  // Mode 0 inside the file changes nothing visible.
  Bytes p = Pattern(40000, 21);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 0), 40000);
  ASSERT_EQ(upfs_fallocate(fd, 0, 100, 30000), 0);
  EXPECT_EQ(Size(fd), 40000);
  ExpectContent(fd, p, "fallocate inside the file");
  // Mode 0 past the end, unaligned.
  ASSERT_EQ(upfs_fallocate(fd, 0, 39000, 3333), 0);
  EXPECT_EQ(Size(fd), 42333);
  Bytes model = p;
  model.resize(42333, 0);
  ExpectContent(fd, model, "fallocate across the end");
  // Writes into a KEEP_SIZE preallocated range beyond the end.
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_KEEP_SIZE, 42333, 20000), 0);
  EXPECT_EQ(Size(fd), 42333);
  ASSERT_EQ(upfs_pwrite(fd, "pre", 3, 50000), 3);
  model.resize(50000, 0);
  model.insert(model.end(), {'p', 'r', 'e'});
  ExpectContent(fd, model, "write into preallocated range");

  // Punch hole (with KEEP_SIZE): zeroes the range and keeps the size.
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 5000, 10000), 0)
      << upfs_last_error();
  std::fill(model.begin() + 5000, model.begin() + 15000, 0);
  EXPECT_EQ(Size(fd), static_cast<off_t>(model.size()));
  ExpectContent(fd, model, "unaligned punch");
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 16384, 8192), 0);
  std::fill(model.begin() + 16384, model.begin() + 24576, 0);
  ExpectContent(fd, model, "aligned punch");
  // Punching past the end changes nothing.
  ASSERT_EQ(upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 49000, 100000), 0);
  std::fill(model.begin() + 49000, model.end(), 0);
  EXPECT_EQ(Size(fd), static_cast<off_t>(model.size()));
  ExpectContent(fd, model, "punch across the end");
  // A write into a punched range.
  ASSERT_EQ(upfs_pwrite(fd, "hole", 4, 6000), 4);
  std::memcpy(model.data() + 6000, "hole", 4);
  ExpectContent(fd, model, "write into hole");

  // Unsupported modes.
  const int unsupported[] = {FALLOC_FL_PUNCH_HOLE,
                             FALLOC_FL_ZERO_RANGE,
                             FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                             FALLOC_FL_COLLAPSE_RANGE,
                             FALLOC_FL_INSERT_RANGE,
                             FALLOC_FL_UNSHARE_RANGE};
  for (int mode : unsupported) {
    errno = 0;
    EXPECT_EQ(upfs_fallocate(fd, mode, 0, 4096), -1) << "mode " << mode;
    EXPECT_EQ(errno, EOPNOTSUPP) << "mode " << mode;
  }
  ExpectContent(fd, model, "after unsupported modes");
  // Bad ranges.
  errno = 0;
  EXPECT_EQ(upfs_fallocate(fd, 0, 0, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_fallocate(fd, 0, -1, 10), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_fallocate(fd, 0, 0, -5), -1);
  EXPECT_EQ(errno, EINVAL);
  upfs_close(fd);
}

TEST_P(ApiTest, FstatBlocksAndMtime) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  struct stat s0, s1, s2, s3;
  ASSERT_EQ(upfs_fstat(fd, &s0), 0);
  EXPECT_EQ(s0.st_size, 0);
  EXPECT_TRUE(S_ISREG(s0.st_mode));
  EXPECT_GT(s0.st_blksize, 0);
  EXPECT_GE(s0.st_nlink, 1u);

  Bytes p = Pattern(256 * 1024, 22);
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), 0), static_cast<ssize_t>(p.size()));
  ASSERT_EQ(upfs_fstat(fd, &s1), 0);
  EXPECT_EQ(s1.st_size, 256 * 1024);
  EXPECT_GT(s1.st_blocks, s0.st_blocks) << "st_blocks grows with data";
  EXPECT_GE(s1.st_blocks, 256 * 1024 / 512) << "st_blocks covers the data (512-byte units)";
  EXPECT_TRUE(TsLessEq(s0.st_mtim, s1.st_mtim)) << "mtime does not go back after a write";

  ASSERT_EQ(upfs_ftruncate(fd, 4096), 0);
  ASSERT_EQ(upfs_fstat(fd, &s2), 0);
  EXPECT_EQ(s2.st_size, 4096);
  EXPECT_LT(s2.st_blocks, s1.st_blocks) << "st_blocks shrinks after truncate";
  EXPECT_TRUE(TsLessEq(s1.st_mtim, s2.st_mtim));

  // A sparse extension does not allocate.
  ASSERT_EQ(upfs_ftruncate(fd, 64 << 20), 0);
  ASSERT_EQ(upfs_fstat(fd, &s3), 0);
  EXPECT_EQ(s3.st_size, 64 << 20);
  EXPECT_LT(s3.st_blocks, s1.st_blocks) << "holes are not counted";

  // A second descriptor sees the same attributes.
  int fd2 = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(fd2, 0);
  struct stat s4;
  ASSERT_EQ(upfs_fstat(fd2, &s4), 0);
  EXPECT_EQ(s4.st_size, s3.st_size);
  upfs_close(fd2);
  upfs_close(fd);

  // mtime survives a reopen and does not go back.
  fd = upfs_open(Path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  struct stat s5;
  ASSERT_EQ(upfs_fstat(fd, &s5), 0);
  EXPECT_EQ(s5.st_size, 64 << 20);
  ASSERT_EQ(upfs_pwrite(fd, "m", 1, 0), 1);
  struct stat s6;
  ASSERT_EQ(upfs_fstat(fd, &s6), 0);
  EXPECT_TRUE(TsLessEq(s5.st_mtim, s6.st_mtim));
  EXPECT_TRUE(TsLessEq(s1.st_mtim, s6.st_mtim));
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

TEST_P(ApiTest, FileLargerThan4GiB) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  const off_t at = 5 * kGiB;
  const char msg[] = "five gibibytes in";
  ASSERT_EQ(upfs_pwrite(fd, msg, sizeof msg, at), static_cast<ssize_t>(sizeof msg)) << upfs_last_error();
  EXPECT_EQ(Size(fd), at + static_cast<off_t>(sizeof msg));
  char buf[64] = {};
  ASSERT_EQ(upfs_pread(fd, buf, sizeof msg, at), static_cast<ssize_t>(sizeof msg));
  EXPECT_EQ(std::memcmp(buf, msg, sizeof msg), 0);
  // Around the 4 GiB boundary (32-bit offsets would wrap here).
  Bytes p = Pattern(10000, 23);
  const off_t b4 = 4 * kGiB - 5000;
  ASSERT_EQ(upfs_pwrite(fd, p.data(), p.size(), b4), 10000);
  Bytes got(10000);
  ASSERT_EQ(upfs_pread(fd, got.data(), got.size(), b4), 10000);
  EXPECT_EQ(got, p);
  // The low offsets that 32-bit truncation would hit are still holes.
  Bytes z(10000, 0xee);
  ASSERT_EQ(upfs_pread(fd, z.data(), z.size(), 0), 10000);
  EXPECT_TRUE(upfs_test::AllZero(z.data(), z.size()));
  ASSERT_EQ(upfs_pread(fd, z.data(), z.size(), at & 0xffffffff), 10000);
  EXPECT_TRUE(upfs_test::AllZero(z.data(), z.size()));
  ASSERT_EQ(upfs_pread(fd, z.data(), z.size(), 3 * kGiB), 10000);
  EXPECT_TRUE(upfs_test::AllZero(z.data(), z.size()));

  struct stat st;
  ASSERT_EQ(upfs_fstat(fd, &st), 0);
  EXPECT_LT(st.st_blocks, 1 << 20) << "the sparse file is not allocated";
  EXPECT_EQ(upfs_lseek(fd, 0, SEEK_END), at + static_cast<off_t>(sizeof msg));
  EXPECT_EQ(upfs_lseek(fd, 6 * kGiB, SEEK_SET), 6 * kGiB);
  ASSERT_EQ(upfs_write(fd, "6", 1), 1);
  EXPECT_EQ(Size(fd), 6 * kGiB + 1);
  ASSERT_EQ(upfs_close(fd), 0);

  fd = upfs_open(Path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << upfs_last_error();
  EXPECT_EQ(Size(fd), 6 * kGiB + 1);
  ASSERT_EQ(upfs_pread(fd, buf, sizeof msg, at), static_cast<ssize_t>(sizeof msg));
  EXPECT_EQ(std::memcmp(buf, msg, sizeof msg), 0);
  ASSERT_EQ(upfs_pread(fd, got.data(), got.size(), b4), 10000);
  EXPECT_EQ(got, p);
  ASSERT_EQ(upfs_ftruncate(fd, 4 * kGiB), 0);
  EXPECT_EQ(Size(fd), 4 * kGiB);
  ASSERT_EQ(upfs_pread(fd, got.data(), got.size(), b4), 5000);
  EXPECT_EQ(std::memcmp(got.data(), p.data(), 5000), 0);
  ASSERT_EQ(upfs_ftruncate(fd, 5 * kGiB + 100), 0);
  ASSERT_EQ(upfs_pread(fd, buf, sizeof msg, at), static_cast<ssize_t>(sizeof msg));
  EXPECT_TRUE(upfs_test::AllZero(reinterpret_cast<unsigned char*>(buf), sizeof msg))
      << "truncated data does not come back";
  upfs_close(fd);

  upfs::FileReport r;
  upfs::Status s = upfs::InspectFile(Path(), true, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  EXPECT_EQ(r.size, uint64_t(5 * kGiB + 100));
}

TEST_P(ApiTest, BeyondMaximumSize) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  const off_t max = static_cast<off_t>(upfs::format::kMaxFileSize);
  errno = 0;
  EXPECT_EQ(upfs_pwrite(fd, "x", 1, max), -1);
  EXPECT_EQ(errno, EFBIG);
  errno = 0;
  EXPECT_EQ(upfs_ftruncate(fd, max + 1), -1);
  EXPECT_TRUE(errno == EFBIG || errno == EINVAL) << upfs_test::ErrnoText(errno);
  errno = 0;
  EXPECT_EQ(upfs_fallocate(fd, 0, max, 4096), -1);
  EXPECT_TRUE(errno == EFBIG || errno == EINVAL) << upfs_test::ErrnoText(errno);
  EXPECT_EQ(Size(fd), 0);
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

TEST_P(ApiTest, ModeIsFixedAtCreation) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  upfs_close(fd);
  upfs_consistency other = GetParam() == UPFS_STRICT ? UPFS_SYNC : UPFS_STRICT;
  fd = upfs_open_mode(Path().c_str(), O_RDWR | O_CREAT, 0644, other);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_write(fd, "abc", 3), 3);
  upfs_close(fd);
  upfs::FileReport r;
  ASSERT_TRUE(upfs::InspectFile(Path(), false, &r).ok());
  EXPECT_EQ(r.consistency, ModeName(GetParam()));
}

TEST_P(ApiTest, AccessModes) {
  int fd = Create();
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_write(fd, "0123456789", 10), 10);
  upfs_close(fd);

  int rfd = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0);
  errno = 0;
  EXPECT_EQ(upfs_write(rfd, "x", 1), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_pwrite(rfd, "x", 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_ftruncate(rfd, 0), -1);
  EXPECT_TRUE(errno == EINVAL || errno == EBADF) << upfs_test::ErrnoText(errno);
  errno = 0;
  EXPECT_EQ(upfs_fallocate(rfd, 0, 0, 100000), -1);
  EXPECT_EQ(errno, EBADF);
  char buf[16];
  EXPECT_EQ(upfs_read(rfd, buf, 16), 10);
  upfs_close(rfd);

  int wfd = upfs_open(Path().c_str(), O_WRONLY);
  ASSERT_GE(wfd, 0);
  errno = 0;
  EXPECT_EQ(upfs_read(wfd, buf, 1), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(upfs_pread(wfd, buf, 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(upfs_pwrite(wfd, "ab", 2, 0), 2);
  struct stat st;
  EXPECT_EQ(upfs_fstat(wfd, &st), 0);
  upfs_close(wfd);

  rfd = upfs_open(Path().c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0);
  EXPECT_EQ(upfs_read(rfd, buf, 16), 10);
  EXPECT_EQ(std::string(buf, 10), "ab23456789");
  upfs_close(rfd);
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

// ---------------------------------------------------------------------------
// Mode-independent tests.

class ApiPlainTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(ApiPlainTest, ForeignFilesAreRefused) {
  const std::string text = dir_.File("notes.txt");
  const std::string content = "just some text\nnot a upfs file\n";
  ASSERT_TRUE(upfs_test::WriteHostFile(text, content.data(), content.size()));
  for (int flags : {O_RDWR, O_RDONLY, O_WRONLY, O_RDWR | O_CREAT, O_RDWR | O_APPEND}) {
    errno = 0;
    EXPECT_EQ(upfs_open(text.c_str(), flags, 0644), -1) << "flags " << flags;
    EXPECT_EQ(errno, EMEDIUMTYPE) << "flags " << flags << ": " << upfs_test::ErrnoText(errno);
    EXPECT_NE(std::string(upfs_last_error()), "");
  }
  EXPECT_EQ(upfs_is_upfs_file(text.c_str()), 0);
  std::vector<unsigned char> after;
  ASSERT_TRUE(upfs_test::ReadHostFile(text, &after));
  EXPECT_EQ(std::string(after.begin(), after.end()), content) << "a foreign file is never modified";

  // A zero-length file opened without O_CREAT is not a upfs file.
  const std::string empty = dir_.File("empty");
  ASSERT_TRUE(upfs_test::WriteHostFile(empty, "", 0));
  for (int flags : {O_RDWR, O_RDONLY}) {
    errno = 0;
    EXPECT_EQ(upfs_open(empty.c_str(), flags), -1);
    EXPECT_EQ(errno, EMEDIUMTYPE) << upfs_test::ErrnoText(errno);
  }
  EXPECT_EQ(upfs_is_upfs_file(empty.c_str()), 0);
  struct stat st;
  ASSERT_EQ(::stat(empty.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);

  // A block of zeros (no magic) is not one either.
  const std::string zeros = dir_.File("zeros");
  std::vector<unsigned char> z(3 * 4096, 0);
  ASSERT_TRUE(upfs_test::WriteHostFile(zeros, z.data(), z.size()));
  errno = 0;
  EXPECT_EQ(upfs_open(zeros.c_str(), O_RDWR), -1);
  EXPECT_EQ(errno, EMEDIUMTYPE) << upfs_test::ErrnoText(errno);
  EXPECT_EQ(upfs_is_upfs_file(zeros.c_str()), 0);

  // Directories are not files.
  errno = 0;
  EXPECT_EQ(upfs_open(dir_.path().c_str(), O_RDONLY), -1);
  EXPECT_NE(errno, 0);
  EXPECT_NE(upfs_is_upfs_file(dir_.path().c_str()), 1);
}

TEST_F(ApiPlainTest, DefaultConsistency) {
  const std::string a = dir_.File("a"), b = dir_.File("b");
  ASSERT_EQ(upfs_set_default_consistency(UPFS_SYNC), 0);
  int fd = upfs_open(a.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_EQ(upfs_set_default_consistency(UPFS_STRICT), 0);
  ASSERT_GE(fd, 0);
  upfs_close(fd);
  fd = upfs_open(b.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  upfs_close(fd);
  upfs::FileReport ra, rb;
  ASSERT_TRUE(upfs::InspectFile(a, false, &ra).ok());
  ASSERT_TRUE(upfs::InspectFile(b, false, &rb).ok());
  EXPECT_EQ(ra.consistency, "sync");
  EXPECT_EQ(rb.consistency, "strict");
  errno = 0;
  // 3 is invalid but inside the value range of the enum (no C++ UB).
  EXPECT_EQ(upfs_set_default_consistency(static_cast<upfs_consistency>(3)), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(upfs_open_mode(dir_.File("c").c_str(), O_CREAT | O_RDWR, 0644, static_cast<upfs_consistency>(0)), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(ApiPlainTest, CreateHonoursMode) {
  const std::string a = dir_.File("a");
  mode_t old = ::umask(0);
  int fd = upfs_open(a.c_str(), O_CREAT | O_RDWR, 0640);
  ::umask(old);
  ASSERT_GE(fd, 0);
  upfs_close(fd);
  struct stat st;
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}


}  // namespace
