// Record locks through the C API (upfs_fcntl_lock): ranges given from
// SEEK_CUR and SEEK_END count from the upfs description's offset and the
// upfs file's size, not from the host descriptor's, seen from another
// process (POSIX locks never conflict within one).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "posix/preload_hooks.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_test::TempDir;

struct flock Range(short type, short whence, off_t start, off_t len) {
  struct flock l = {};
  l.l_type = type;
  l.l_whence = whence;
  l.l_start = start;
  l.l_len = len;
  return l;
}

class ApiLocksTest : public ::testing::TestWithParam<upfs_consistency> {
 protected:
  std::string Path() { return dir_.File("f"); }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Modes, ApiLocksTest, ::testing::Values(UPFS_STRICT, UPFS_SYNC),
                         [](const ::testing::TestParamInfo<upfs_consistency>& i) {
                           return std::string(i.param == UPFS_STRICT ? "strict" : "sync");
                         });

TEST_P(ApiLocksTest, RangesCountFromTheUpfsOffsetAndSize) {
  const int fd = upfs_open_mode(Path().c_str(), O_CREAT | O_RDWR, 0644, GetParam());
  ASSERT_GE(fd, 0);
  std::vector<unsigned char> data(100, 7);
  ASSERT_EQ(upfs_write(fd, data.data(), data.size()), 100);
  ASSERT_EQ(upfs_lseek(fd, 40, SEEK_SET), 40);
  struct flock cur = Range(F_WRLCK, SEEK_CUR, 0, 4);
  ASSERT_EQ(upfs_fcntl_lock(fd, F_SETLK, &cur), 0) << upfs_last_error();
  struct flock end = Range(F_WRLCK, SEEK_END, -10, 2);
  ASSERT_EQ(upfs_fcntl_lock(fd, F_SETLK, &end), 0) << upfs_last_error();
  struct flock before = Range(F_WRLCK, SEEK_CUR, -41, 1);
  EXPECT_EQ(upfs_fcntl_lock(fd, F_SETLK, &before), -1);
  EXPECT_EQ(errno, EINVAL);
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Another process: which ranges conflict. 1 bit per wrong answer.
    const int c = upfs_open(Path().c_str(), O_RDWR);
    auto held = [&](off_t start, off_t len) {
      struct flock q = Range(F_WRLCK, SEEK_SET, start, len);
      return upfs_fcntl_lock(c, F_GETLK, &q) == 0 && q.l_type == F_WRLCK;
    };
    int wrong = c < 0 ? 64 : 0;
    if (!held(40, 4)) wrong |= 1;
    if (held(0, 4)) wrong |= 2;
    if (!held(90, 2)) wrong |= 4;
    if (held(92, 8)) wrong |= 8;
    _exit(wrong);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "1: [40,44) not held, 2: [0,4) held, 4: [90,92) not held, 8: [92,100) held";
  ASSERT_EQ(upfs_close(fd), 0);
}

// A fork while another thread waits in a blocking flock: that thread
// holds its description's lock for the wait, as the kernel holds the
// description's. The child copied the lock held, without the thread that
// would let it go, and its first flock on the descriptor waited for ever.
// The child now makes its descriptions' locks anew (ReopenAfterFork).
TEST_P(ApiLocksTest, AForkWhileAThreadWaitsInFlockLeavesTheDescriptorUsable) {
  const int waiter = upfs_open_mode(Path().c_str(), O_CREAT | O_RDWR, 0644, GetParam());
  ASSERT_GE(waiter, 0) << upfs_last_error();
  const int holder = upfs_open(Path().c_str(), O_RDWR);  // a description of its own
  ASSERT_GE(holder, 0) << upfs_last_error();
  ASSERT_EQ(upfs_flock(holder, LOCK_EX), 0) << upfs_last_error();
  std::atomic<bool> waiting{false};
  std::thread t([&] {
    waiting.store(true);
    EXPECT_EQ(upfs_flock(waiter, LOCK_EX), 0) << upfs_last_error();  // until the holder lets go
  });
  while (!waiting.load()) std::this_thread::yield();
  // Inside the flock (nothing shows it from here): a tenth of a second
  // is ample, and a fork before it would pass without testing anything.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  upfs_test::ReportingChild c = upfs_test::ForkReporting("child", {}, [&](int out) {
    // The child's own copy of the description: its flock calls and
    // offset-moving calls must return.
    if (upfs_flock(waiter, LOCK_UN) != 0) {
      upfs_test::PipeWriteString(out, std::string("E flock: ") + upfs_last_error() + "\n");
      _exit(2);
    }
    if (upfs_write(waiter, "x", 1) != 1 || upfs_lseek(waiter, 0, SEEK_SET) != 0) {
      upfs_test::PipeWriteString(out, std::string("E write or lseek: ") + upfs_last_error() + "\n");
      _exit(3);
    }
    _exit(0);
  });
  ASSERT_GE(c.pid, 0);
  bool hung = false;
  std::string how;
  EXPECT_EQ(upfs_test::CollectReport(c, 20 * 1000, &how, &hung), "");
  EXPECT_FALSE(hung) << "the child waited for a lock no thread of it holds";
  if (!hung) {
    EXPECT_EQ(how, "exit 0");
  }
  ASSERT_EQ(upfs_flock(holder, LOCK_UN), 0) << upfs_last_error();
  t.join();
  EXPECT_EQ(upfs_close(holder), 0);
  EXPECT_EQ(upfs_close(waiter), 0);
}

}  // namespace
