// CpuSupport (src/medium/cpu_support.h): a processor without the features
// upfs is built for gets ENOTSUP naming them, never SIGILL.
#include "medium/cpu_support.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs::CpuFeatures;
using upfs::JudgeCpu;

TEST(CpuSupport, AProcessorWithBothFeaturesIsAccepted) {
  EXPECT_TRUE(JudgeCpu(CpuFeatures{.sse42 = true, .cmpxchg16b = true}).ok());
}

TEST(CpuSupport, EachMissingFeatureIsNamedWithENOTSUP) {
  const upfs::Status no_sse = JudgeCpu(CpuFeatures{.sse42 = false, .cmpxchg16b = true});
  ASSERT_FALSE(no_sse.ok());
  EXPECT_EQ(no_sse.err(), ENOTSUP);
  EXPECT_NE(no_sse.ToString().find("SSE4.2"), std::string::npos) << no_sse.ToString();
  EXPECT_EQ(no_sse.ToString().find("CMPXCHG16B"), std::string::npos) << no_sse.ToString();

  const upfs::Status no_cas = JudgeCpu(CpuFeatures{.sse42 = true, .cmpxchg16b = false});
  ASSERT_FALSE(no_cas.ok());
  EXPECT_EQ(no_cas.err(), ENOTSUP);
  EXPECT_NE(no_cas.ToString().find("CMPXCHG16B"), std::string::npos) << no_cas.ToString();
  EXPECT_EQ(no_cas.ToString().find("SSE4.2"), std::string::npos) << no_cas.ToString();

  const upfs::Status neither = JudgeCpu(CpuFeatures{});
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.ToString().find("SSE4.2 (crc32) and CMPXCHG16B"), std::string::npos)
      << neither.ToString();
}

TEST(CpuSupport, ThisProcessorHasWhatTheTestsRunOn) {
  // The rest of the suite runs crc32 and cmpxchg16b here, so the detection
  // must find both (a detection that read the wrong bits would refuse
  // every file on a capable machine).
  const CpuFeatures f = upfs::DetectCpuFeatures();
  EXPECT_TRUE(f.sse42);
  EXPECT_TRUE(f.cmpxchg16b);
  EXPECT_TRUE(upfs::CheckCpuSupport().ok());
}

// Every way into upfs data, end to end through the C API, on a processor
// judged to lack SSE4.2 (the seam stands in for cpuid): each is refused
// with ENOTSUP naming the feature, a creation leaves no file behind, and
// what existed before is untouched and opens again once the processor is
// whole.
class CpuRefusal : public ::testing::Test {
 protected:
  void TearDown() override { upfs::ClearCpuFeaturesOverride(); }
  static bool Exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
  static void ExpectRefused(int rc, const char* what) {
    EXPECT_EQ(rc, -1) << what;
    EXPECT_EQ(errno, ENOTSUP) << what << ": " << std::strerror(errno);
    EXPECT_NE(std::string(upfs_last_error()).find("SSE4.2"), std::string::npos)
        << what << ": " << upfs_last_error();
  }
  upfs_test::TempDir dir_;
};

TEST_F(CpuRefusal, NoFileOrPoolOpensAndNoCreationLeavesAFile) {
  const std::string file = dir_.File("kept"), pool = dir_.File("pool"), mnt = dir_.path() + "/mnt";
  const char data[] = "written on a capable processor";
  // Made by another process: this one must meet the file for the first
  // time (a process keeps a closed file's engine parked for a while, and
  // a reopen of a parked file opens no medium: the processor was judged
  // when it was first opened, and a process keeps its processor).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int cfd = upfs_open(file.c_str(), O_CREAT | O_RDWR, 0644);
    const bool ok = cfd >= 0 && upfs_write(cfd, data, sizeof(data)) == ssize_t(sizeof(data)) &&
                    upfs_close(cfd) == 0 && upfs_mkfs(pool.c_str(), 0) == 0;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's setup failed";

  upfs::OverrideCpuFeaturesForTest(CpuFeatures{.sse42 = false, .cmpxchg16b = true});
  ExpectRefused(upfs_open(dir_.File("new").c_str(), O_CREAT | O_RDWR, 0644), "create a file");
  EXPECT_FALSE(Exists(dir_.File("new")));
  ExpectRefused(upfs_open(file.c_str(), O_RDWR), "open an existing file");
  ExpectRefused(upfs_mkfs(dir_.File("pool2").c_str(), 0), "mkfs");
  EXPECT_FALSE(Exists(dir_.File("pool2")));
  ExpectRefused(upfs_mount(pool.c_str(), mnt.c_str()), "mount");
  struct stat st;
  EXPECT_EQ(upfs_stat((mnt + "/x").c_str(), &st), -1);  // not mounted: a kernel path
  EXPECT_EQ(errno, ENOENT);

  upfs::ClearCpuFeaturesOverride();
  int fd = upfs_open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << upfs_last_error();
  char back[sizeof(data)] = {};
  EXPECT_EQ(upfs_read(fd, back, sizeof(back)), ssize_t(sizeof(data)));
  EXPECT_EQ(std::memcmp(back, data, sizeof(data)), 0);
  EXPECT_EQ(upfs_close(fd), 0);
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  fd = upfs_open((mnt + "/f").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_GE(fd, 0) << upfs_last_error();
  if (fd >= 0) {
    EXPECT_EQ(upfs_close(fd), 0);
  }
  EXPECT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
}

}  // namespace
