// Parked files: the last close of a upfs file keeps its engine File for a
// moment, for a reopen; what must hold meanwhile (other processes' writes
// seen, unlink and rename release it, the limit, damage refused).
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_test::Pattern;
using upfs_test::TempDir;
using upfs_test::WriteAndClose;
using Bytes = std::vector<unsigned char>;

// Parked files: the last close keeps the File for reuse (posix/file_registry.h).

// Whether the shared-state object of the file with this host identity exists
// (/dev/shm/upfs-<file id>-<dev>-<ino>).
bool SharedStateExists(const struct stat& host) {
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), "-%lx-%lx", (unsigned long)host.st_dev,
                (unsigned long)host.st_ino);
  DIR* d = opendir("/dev/shm");
  if (!d) return false;
  bool found = false;
  const size_t n = std::strlen(suffix);
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("upfs-", 0) == 0 && name.size() > n && name.compare(name.size() - n, n, suffix) == 0)
      found = true;
  }
  closedir(d);
  return found;
}

// Descriptors of this process on files under dir (deleted ones included).
int DescriptorsUnder(const std::string& dir) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (struct dirent* e = readdir(d)) {
    char link[4096];
    std::string p = std::string("/proc/self/fd/") + e->d_name;
    ssize_t len = readlink(p.c_str(), link, sizeof(link) - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    if (std::string(link).rfind(dir + "/", 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

// Parking on (the default): these tests are about it.
bool ParkingOff() {
  const char* v = getenv("UPFS_PARKED_FILES");
  return v && std::string(v) == "0";
}

// Runs fn in a forked child; how the child ended ("exit 0" if fn returned
// true there).
template <typename Fn>
std::string InChild(Fn fn) {
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) _exit(fn() ? 0 : 1);
  return upfs_test::WaitChild(pid);
}

// A parked file of the test's (the test would prove nothing without one).
void ExpectParked(const std::string& path, struct stat* host) {
  ASSERT_EQ(::stat(path.c_str(), host), 0);
  ASSERT_EQ(upfs_stat_if_open(host, nullptr), 1) << "not parked";
}

// Writes `path` (Pattern(bytes, seed)), closes it and checks that it was
// parked; *host: its host identity.
void WriteParked(const std::string& path, size_t bytes, int seed, struct stat* host) {
  ASSERT_EQ(WriteAndClose(path, Pattern(bytes, seed)), 0) << upfs_last_error();
  ASSERT_NO_FATAL_FAILURE(ExpectParked(path, host));
}

// Whether `done` holds within 20 s. Generous: the tests check that what
// they wait for happens (parking lasts a second), not how fast.
template <typename Pred>
bool Soon(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

TEST(ParkedFiles, ReopenSeesWhatAnotherProcessWroteMeanwhile) {
  if (ParkingOff()) GTEST_SKIP() << "UPFS_PARKED_FILES=0";
  TempDir d;
  const std::string path = d.File("p");
  struct stat host;
  ASSERT_NO_FATAL_FAILURE(WriteParked(path, 10000, 1, &host));
  Bytes other = Pattern(30000, 2);
  ASSERT_EQ(InChild([&] { return WriteAndClose(path, other) == 0; }), "exit 0");
  int fd = upfs_open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << upfs_last_error();
  Bytes got;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &got));
  EXPECT_TRUE(got == other) << "reopened parked file shows stale content (" << got.size() << " bytes)";
  EXPECT_EQ(upfs_close(fd), 0);
}

TEST(ParkedFiles, UnlinkAndRenameByThisProcessRemoveSharedStateAtOnce) {
  TempDir d;
  const std::string a = d.File("a"), b = d.File("b");
  for (bool rename_over : {false, true}) {
    ASSERT_EQ(WriteAndClose(a, Pattern(5000, 3)), 0) << upfs_last_error();
    struct stat host;
    ASSERT_EQ(::stat(a.c_str(), &host), 0);
    ASSERT_TRUE(SharedStateExists(host));
    if (rename_over) {
      ASSERT_EQ(WriteAndClose(b, Pattern(100, 4)), 0);
      ASSERT_EQ(upfs_renameat2(AT_FDCWD, b.c_str(), AT_FDCWD, a.c_str(), 0), 0) << upfs_last_error();
    } else {
      ASSERT_EQ(upfs_unlink(a.c_str()), 0) << upfs_last_error();
    }
    EXPECT_FALSE(SharedStateExists(host)) << (rename_over ? "rename over" : "unlink");
    if (rename_over) {
      ASSERT_EQ(upfs_unlink(a.c_str()), 0);
    }
    EXPECT_EQ(DescriptorsUnder(d.path()), 0) << "the removed file is still held";
  }
  // Unlinked while open: the shared state stays while the file is open and
  // goes with the last close (which does not park a file without links).
  int fd = upfs_open(a.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_pwrite(fd, "x", 1, 0), 1);
  struct stat host;
  ASSERT_EQ(::stat(a.c_str(), &host), 0);
  ASSERT_EQ(upfs_unlink(a.c_str()), 0) << upfs_last_error();
  EXPECT_TRUE(SharedStateExists(host)) << "removed under a user";
  char c = 0;
  EXPECT_EQ(upfs_pread(fd, &c, 1, 0), 1);
  EXPECT_EQ(c, 'x');
  ASSERT_EQ(upfs_close(fd), 0);
  EXPECT_FALSE(SharedStateExists(host)) << "left behind by the last close";
  EXPECT_EQ(DescriptorsUnder(d.path()), 0);
}

TEST(ParkedFiles, UnlinkByAnotherProcessFreesTheFileSoon) {
  if (ParkingOff()) GTEST_SKIP() << "UPFS_PARKED_FILES=0";
  TempDir d;
  const std::string path = d.File("u");
  struct stat host;
  ASSERT_NO_FATAL_FAILURE(WriteParked(path, 200000, 5, &host));
  ASSERT_EQ(DescriptorsUnder(d.path()), 1);
  ASSERT_EQ(InChild([&] { return upfs_unlink(path.c_str()) == 0; }), "exit 0");
  // Parked for at most a second: then space and shared state go, without
  // this process calling upfs again.
  Soon([&] { return DescriptorsUnder(d.path()) == 0 && !SharedStateExists(host); });
  EXPECT_EQ(DescriptorsUnder(d.path()), 0) << "the unlinked file is still held open";
  EXPECT_FALSE(SharedStateExists(host)) << "its shared state was left behind";
}

TEST(ParkedFiles, AtMostTheLimitAreKeptAndDropReleasesThem) {
  if (ParkingOff()) GTEST_SKIP() << "UPFS_PARKED_FILES=0";
  TempDir d;
  for (int i = 0; i < 40; ++i)
    ASSERT_EQ(WriteAndClose(d.File("f" + std::to_string(i)), Pattern(100, 6)), 0) << upfs_last_error();
  int held = DescriptorsUnder(d.path());
  EXPECT_GT(held, 0);
  EXPECT_LE(held, 16);
  EXPECT_EQ(upfs_drop_closed_files(), 0);
  EXPECT_EQ(DescriptorsUnder(d.path()), 0);
  // Every file reopens (freshly) with its content.
  for (int i = 0; i < 40; ++i) {
    int fd = upfs_open(d.File("f" + std::to_string(i)).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << upfs_last_error();
    Bytes got;
    ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &got));
    EXPECT_TRUE(got == Pattern(100, 6));
    upfs_close(fd);
  }
}

// Whether every File under dir is let go (its host descriptor closed)
// soon. Asked by the descriptors, not through upfs: a lookup of a parked
// File (upfs_stat_if_open) takes it and parks it anew.
bool ReleasedSoon(const std::string& dir) {
  return Soon([&] { return DescriptorsUnder(dir) == 0; });
}

// The reaper is woken only when it waits without a deadline (nothing was
// parked when it last looked): a File parked once it has gone idle is
// still let go.
TEST(ParkedFiles, AFileParkedAfterTheReaperWentIdleIsStillReleased) {
  if (ParkingOff()) GTEST_SKIP() << "UPFS_PARKED_FILES=0";
  TempDir d;
  struct stat host;
  ASSERT_NO_FATAL_FAILURE(WriteParked(d.File("a"), 5000, 8, &host));
  ASSERT_TRUE(ReleasedSoon(d.path())) << "the first parked file was never let go";
  // The reaper has nothing left: it waits without a deadline now.
  ASSERT_NO_FATAL_FAILURE(WriteParked(d.File("b"), 5000, 9, &host));
  EXPECT_TRUE(ReleasedSoon(d.path())) << "a file parked while the reaper was idle is kept for good";
}

// A program reopening one file in a loop takes the parked File at each open
// and parks it again at each close, without waking the reaper: once the
// loop stops, the File is let go all the same.
TEST(ParkedFiles, AFileReopenedInALoopIsReleasedWhenTheLoopStops) {
  if (ParkingOff()) GTEST_SKIP() << "UPFS_PARKED_FILES=0";
  TempDir d;
  const std::string path = d.File("l");
  struct stat host;
  ASSERT_NO_FATAL_FAILURE(WriteParked(path, 5000, 10, &host));
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    const int fd = upfs_open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectParked(path, &host));
  EXPECT_TRUE(ReleasedSoon(d.path())) << "a file reopened in a loop is kept for good";
}

// A file changed behind upfs's back while parked is judged by a fresh open,
// not served from the parked state.
TEST(ParkedFiles, ReopenOfAFileOverwrittenByOtherMeansIsRefused) {
  TempDir d;
  const std::string path = d.File("o");
  ASSERT_EQ(WriteAndClose(path, Pattern(9000, 7)), 0) << upfs_last_error();
  int h = open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(h, 0);
  ASSERT_EQ(write(h, "plain text\n", 11), 11);
  close(h);
  EXPECT_EQ(upfs_open(path.c_str(), O_RDWR), -1);
  EXPECT_EQ(errno, EMEDIUMTYPE) << upfs_last_error();
}


// A descriptor closed while another thread's call is using it is freed when
// that call ends, not at some later close: until then the file stays open
// (other processes see a user; an unlinked file keeps its space).
TEST(ParkedFiles, CloseDuringAnotherThreadsCallFreesTheFileWhenTheCallEnds) {
  TempDir d;
  for (int round = 0; round < 20; ++round) {
    const std::string path = d.File("c" + std::to_string(round));
    int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    Bytes data = Pattern(1 << 20, 9);
    ASSERT_EQ(upfs_pwrite(fd, data.data(), data.size(), 0), ssize_t(data.size()));
    std::atomic<bool> stop{false};
    std::atomic<int> reads{0};
    std::thread reader([&] {
      Bytes buf(1 << 20);
      // Reads until the descriptor is gone (EBADF) and told to stop.
      while (upfs_pread(fd, buf.data(), buf.size(), 0) >= 0 || !stop.load()) ++reads;
    });
    while (reads.load() < 3) std::this_thread::yield();
    ASSERT_EQ(upfs_close(fd), 0);
    stop = true;
    reader.join();
    // No upfs_close since: only the end of the reader's calls can have
    // freed the descriptor, and with it the File (parked, then dropped).
    upfs_drop_closed_files();
    ASSERT_EQ(DescriptorsUnder(d.path()), 0) << "round " << round << ": the closed file is still open";
  }
}

}  // namespace
