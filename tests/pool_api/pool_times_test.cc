// Times in a pool through the C API against what the kernel does: which
// of atime, mtime and ctime each call moves (noatime), and that a call
// that fails moves none.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pool_test_fixture.h"
#include "upfs/upfs.h"
#include "util/time_ns.h"

namespace {

using pool_test::PoolTest;

// A call that fails changes nothing, the directory's times included, as
// in the kernel: an rmdir of a directory not empty, a mkdir or an
// exclusive create of a name that exists (resolved through the parent
// cache, the name is found to exist only at the commit), a link over an existing
// name, a rename of a directory into its own subtree. Until 2026-12-05 the
// times were stored with the record's reservation, before the checks at
// the commit, and the first three moved the parent's mtime and ctime.
TEST_F(PoolTest, FailedCallsLeaveTheDirectorysTimes) {
  // mtime and ctime, in ns.
  auto mc = [&](const std::string& rel) {
    struct stat st;
    EXPECT_EQ(upfs_stat(P(rel).c_str(), &st), 0) << rel;
    return std::pair{upfs::TimespecNs(st.st_mtim), upfs::TimespecNs(st.st_ctim)};
  };
  auto tick = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  ASSERT_EQ(upfs_mkdir(P("e").c_str(), 0755), 0);
  ASSERT_EQ(upfs_mkdir(P("e/d").c_str(), 0755), 0);
  ASSERT_EQ(Create("e/d/f"), 0);
  ASSERT_EQ(Create("e/g"), 0);
  // Creates in e first, so that its path is in the parent cache.
  ASSERT_EQ(Create("e/warm"), 0);
  struct Failing {
    const char* what;
    std::function<int()> call;
    int err;
  };
  const std::vector<Failing> calls = {
      {"rmdir of a directory not empty", [&] { return upfs_rmdir(P("e/d").c_str()); }, ENOTEMPTY},
      {"mkdir of an existing name", [&] { return upfs_mkdir(P("e/d").c_str(), 0755); }, EEXIST},
      {"exclusive create of an existing name",
       [&] { return upfs_open(P("e/g").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644); }, EEXIST},
      {"link over an existing name", [&] { return upfs_link(P("e/g").c_str(), P("e/d/f").c_str()); }, EEXIST},
      {"rename into its own subtree", [&] { return upfs_rename(P("e").c_str(), P("e/d/x").c_str()); }, EINVAL},
  };
  for (const Failing& f : calls) {
    const auto e0 = mc("e"), d0 = mc("e/d");
    tick();
    errno = 0;
    EXPECT_EQ(f.call(), -1) << f.what;
    EXPECT_EQ(errno, f.err) << f.what;
    EXPECT_EQ(mc("e"), e0) << f.what << ": the parent's times moved";
    EXPECT_EQ(mc("e/d"), d0) << f.what << ": the directory's times moved";
  }
}

// Which of a file's times a call moves, as the kernel keeps them on tmpfs
// (docs/design.md, "Times in a pool"; atime: noatime). Times come from the
// coarse clock, so each step waits past a tick first: a time that should
// move must be later, one that should not must be equal.
TEST_F(PoolTest, TimesMoveAsTheKernelMovesThem) {
  struct Times {
    int64_t a = 0, m = 0, c = 0;
  };
  auto times = [&](const std::string& rel) {
    struct stat st;
    Times t;
    if (upfs_stat(P(rel).c_str(), &st) != 0) {
      ADD_FAILURE() << "stat " << rel << ": " << upfs_last_error();
      return t;
    }
    auto ns = [](const struct timespec& ts) { return int64_t(upfs::TimespecNs(ts)); };
    return Times{ns(st.st_atim), ns(st.st_mtim), ns(st.st_ctim)};
  };
  auto tick = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  // What moved between two readings, as "amc" letters.
  auto moved = [](const Times& was, const Times& now) {
    std::string out;
    if (now.a != was.a) out += 'a';
    if (now.m != was.m) out += 'm';
    if (now.c != was.c) out += 'c';
    return out;
  };
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  Times d = times("d");
  tick();
  ASSERT_EQ(Create("d/f"), 0);
  EXPECT_EQ(moved(d, times("d")), "mc") << "create";
  Times f = times("d/f");
  EXPECT_EQ(f.a, f.m);
  EXPECT_EQ(f.m, f.c);
  EXPECT_GT(f.m, d.m);

  // A second create in the same directory, a tick later, moves its times
  // again (they are not written when they would not change).
  d = times("d");
  tick();
  ASSERT_EQ(Create("d/f2"), 0);
  EXPECT_EQ(moved(d, times("d")), "mc") << "second create";

  // Runs `call` a tick after reading the times of `file` and of d, and
  // checks what moved (`file_after`: the file's name after the call).
  auto step = [&](const char* what, const std::function<int()>& call, const std::string& file,
                  const std::string& file_after, const char* want_file, const char* want_dir) {
    const Times d0 = times("d"), f0 = times(file);
    tick();
    ASSERT_EQ(call(), 0) << what << ": " << upfs_last_error();
    EXPECT_EQ(moved(f0, times(file_after)), want_file) << what;
    EXPECT_EQ(moved(d0, times("d")), want_dir) << what << ", the directory";
  };
  step("write", [&] {
    const int fd = upfs_open(P("d/f").c_str(), O_WRONLY);
    return fd < 0 || upfs_write(fd, "data", 4) != 4 ? -1 : upfs_close(fd);
  }, "d/f", "d/f", "mc", "");
  step("read (noatime)", [&] { return Read("d/f") == "data" ? 0 : -1; }, "d/f", "d/f", "", "");
  // An open with O_TRUNC of a file that was never written (it has no log,
  // nothing to cut): a truncate all the same (until 2026-12-07 nothing
  // moved; the kernel moves mtime and ctime).
  step("O_TRUNC of an empty file", [&] {
    const int fd = upfs_open(P("d/f2").c_str(), O_WRONLY | O_TRUNC);
    return fd < 0 ? -1 : upfs_close(fd);
  }, "d/f2", "d/f2", "mc", "");
  step("chmod", [&] { return upfs_chmod(P("d/f").c_str(), 0600); }, "d/f", "d/f", "c", "");
  step("link", [&] { return upfs_link(P("d/f").c_str(), P("d/g").c_str()); }, "d/f", "d/f", "c", "mc");
  step("unlink of another name", [&] { return upfs_unlink(P("d/g").c_str()); }, "d/f", "d/f", "c", "mc");
  step("rename", [&] { return upfs_rename(P("d/f").c_str(), P("d/h").c_str()); }, "d/f", "d/h", "c", "mc");

  ASSERT_EQ(upfs_mkdir(P("e").c_str(), 0755), 0);
  Times e = times("e");
  d = times("d"), f = times("d/h");
  tick();
  ASSERT_EQ(upfs_rename(P("d/h").c_str(), P("e/h").c_str()), 0);
  EXPECT_EQ(moved(d, times("d")), "mc") << "rename out of d";
  EXPECT_EQ(moved(e, times("e")), "mc") << "rename into e";
  EXPECT_EQ(moved(f, times("e/h")), "c") << "rename across directories";

  d = times("d");
  tick();
  ASSERT_EQ(upfs_mkdir(P("d/sub").c_str(), 0755), 0);
  EXPECT_EQ(moved(d, times("d")), "mc") << "mkdir";
  d = times("d");
  tick();
  ASSERT_EQ(upfs_rmdir(P("d/sub").c_str()), 0);
  EXPECT_EQ(moved(d, times("d")), "mc") << "rmdir";

  const struct timespec set[2] = {{1000, 1}, {2000, 2}};
  f = times("e/h");
  ASSERT_EQ(upfs_utimensat(AT_FDCWD, P("e/h").c_str(), set, 0), 0);
  const Times u = times("e/h");
  EXPECT_EQ(u.a, 1000 * 1000000000LL + 1);
  EXPECT_EQ(u.m, 2000 * 1000000000LL + 2);
  EXPECT_GE(u.c, f.c) << "utimensat moves ctime to now";

  // A rename over a name of a file that keeps another name moves that
  // file's ctime too (it lost a name); an exchange moves both files'.
  ASSERT_EQ(Create("e/v"), 0);
  ASSERT_EQ(upfs_link(P("e/v").c_str(), P("e/w").c_str()), 0);
  ASSERT_EQ(Create("e/x"), 0);
  Times v = times("e/v"), x = times("e/x");
  tick();
  ASSERT_EQ(upfs_rename(P("e/x").c_str(), P("e/w").c_str()), 0);
  EXPECT_EQ(moved(v, times("e/v")), "c") << "a rename over another name of it";
  EXPECT_EQ(moved(x, times("e/w")), "c") << "the file renamed over it";
  v = times("e/v");
  const Times h = times("e/h");
  tick();
  ASSERT_EQ(upfs_renameat2(AT_FDCWD, P("e/v").c_str(), AT_FDCWD, P("e/h").c_str(), RENAME_EXCHANGE), 0);
  EXPECT_EQ(moved(v, times("e/h")), "c") << "an exchange, its source";
  EXPECT_EQ(moved(h, times("e/v")), "c") << "an exchange, its target";
  ExpectClean();
}

}  // namespace
