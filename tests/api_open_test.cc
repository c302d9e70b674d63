// Unit tests of opening upfs files through the C API: create, O_EXCL,
// O_TRUNC, access modes, the mode fixed at creation, foreign files
// refused, the default consistency; most in both consistency modes
// (api_test.cc has reads, writes and descriptors).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
using upfs_test::TempDir;

UPFS_API_TEST_IN_BOTH_MODES();

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
