// Unit tests of the C API's sizes, space and attributes: ftruncate,
// fallocate, stat and fstat (with and without the file open), files past
// 4 GiB and the maximum size; in both consistency modes (api_test.cc has
// the fixture's other half: open, read, write, descriptors).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api_test_fixture.h"
#include "container/perfile/inspect.h"
#include "format/format.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_api_test::ApiTest;
using upfs_api_test::ModeName;
using upfs_api_test::Bytes;
using upfs_test::Pattern;

constexpr off_t kGiB = off_t{1} << 30;

bool TsLessEq(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec <= b.tv_nsec);
}

UPFS_API_TEST_IN_BOTH_MODES();

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

}  // namespace
