// atime, mtime and ctime of a upfs file after every call, as the kernel's;
// explicit times exact and kept; upfs's own work never moves atime.
#include "semantics_util.h"

namespace upfs_semantics {
namespace {

// ---------------------------------------------------------------------------
// Times.

// Which of atime, mtime, ctime moved between two stats: "amc" with '-' for
// the unchanged ones.
std::string Moved(const struct stat& a, const struct stat& b) {
  std::string out;
  out += SameTime(a.st_atim, b.st_atim) ? '-' : 'a';
  out += SameTime(a.st_mtim, b.st_mtim) ? '-' : 'm';
  out += SameTime(a.st_ctim, b.st_ctim) ? '-' : 'c';
  return out;
}

struct TimedOp {
  const char* name;
  std::function<int(const std::string&)> plain, upfs;  // 0 on success
};

int WriteByte(const std::string& p, bool upfs) {
  int fd = upfs ? upfs_open(p.c_str(), O_WRONLY) : ::open(p.c_str(), O_WRONLY);
  if (fd < 0) return -1;
  int r = (upfs ? upfs_pwrite(fd, "t", 1, 3) : ::pwrite(fd, "t", 1, 3)) == 1 ? 0 : -1;
  upfs ? upfs_close(fd) : ::close(fd);
  return r;
}

int FtruncateTo(const std::string& p, bool upfs, off_t len) {
  int fd = upfs ? upfs_open(p.c_str(), O_RDWR) : ::open(p.c_str(), O_RDWR);
  if (fd < 0) return -1;
  int r = upfs ? upfs_ftruncate(fd, len) : ::ftruncate(fd, len);
  upfs ? upfs_close(fd) : ::close(fd);
  return r;
}

int Futimens(const std::string& p, bool upfs, const struct timespec* ts) {
  int fd = upfs ? upfs_open(p.c_str(), O_RDONLY) : ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  int r = upfs ? upfs_futimens(fd, ts) : ::futimens(fd, ts);
  upfs ? upfs_close(fd) : ::close(fd);
  return r;
}

uid_t ChownUid() { return ::geteuid() == 0 ? kOwner.uid : ::geteuid(); }
gid_t ChownGid() { return ::geteuid() == 0 ? kOwner.gid : ::getegid(); }

std::vector<TimedOp> TimedOps() {
  return {
      {"write", [](auto& p) { return WriteByte(p, false); }, [](auto& p) { return WriteByte(p, true); }},
      {"ftruncate", [](auto& p) { return FtruncateTo(p, false, 9000); },
       [](auto& p) { return FtruncateTo(p, true, 9000); }},
      {"truncate", [](auto& p) { return ::truncate(p.c_str(), 8000); },
       [](auto& p) { return upfs_truncate(p.c_str(), 8000); }},
      {"chmod", [](auto& p) { return ::chmod(p.c_str(), 0640); },
       [](auto& p) { return upfs_chmod(p.c_str(), 0640); }},
      // To the owner (a change of owner) as root; to itself otherwise.
      {"chown", [](auto& p) { return ::chown(p.c_str(), ChownUid(), ChownGid()); },
       [](auto& p) { return upfs_chown(p.c_str(), ChownUid(), ChownGid()); }},
      {"link", [](auto& p) { return ::link(p.c_str(), (p + ".2").c_str()); },
       [](auto& p) { return ::link(p.c_str(), (p + ".2").c_str()); }},
      {"unlink of the second link", [](auto& p) { return ::unlink((p + ".2").c_str()); },
       [](auto& p) { return upfs_unlink((p + ".2").c_str()); }},
      {"rename", [](auto& p) { return ::rename(p.c_str(), (p + ".r").c_str()) || ::rename((p + ".r").c_str(), p.c_str()); },
       [](auto& p) {
         return upfs_renameat2(AT_FDCWD, p.c_str(), AT_FDCWD, (p + ".r").c_str(), 0) ||
                upfs_renameat2(AT_FDCWD, (p + ".r").c_str(), AT_FDCWD, p.c_str(), 0);
       }},
      {"utimensat(times)", [](auto& p) { return ::utimensat(AT_FDCWD, p.c_str(), kSetTimes, 0); },
       [](auto& p) { return upfs_utimensat(AT_FDCWD, p.c_str(), kSetTimes, 0); }},
      {"utimensat(NULL)", [](auto& p) { return ::utimensat(AT_FDCWD, p.c_str(), nullptr, 0); },
       [](auto& p) { return upfs_utimensat(AT_FDCWD, p.c_str(), nullptr, 0); }},
      {"utimensat(OMIT, t)", [](auto& p) { return ::utimensat(AT_FDCWD, p.c_str(), kOmitAtime, 0); },
       [](auto& p) { return upfs_utimensat(AT_FDCWD, p.c_str(), kOmitAtime, 0); }},
      {"utimensat(NOW, OMIT)", [](auto& p) { return ::utimensat(AT_FDCWD, p.c_str(), kNowAtime, 0); },
       [](auto& p) { return upfs_utimensat(AT_FDCWD, p.c_str(), kNowAtime, 0); }},
      {"futimens(times)", [](auto& p) { return Futimens(p, false, kSetTimes); },
       [](auto& p) { return Futimens(p, true, kSetTimes); }},
  };
}

TEST_F(Semantics, EveryCallChangesTheTimesTheKernelChanges) {
  Pair p = MakePair(dir_, "times", 0644, ::geteuid(), ::getegid());
  for (const TimedOp& op : TimedOps()) {
    struct stat k0, u0, k1, u1;
    ASSERT_EQ(::stat(p.plain.c_str(), &k0), 0);
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &u0), 0);
    // Past the coarse clock's tick, so that a change shows.
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    ASSERT_EQ(op.plain(p.plain), 0) << op.name << ": " << std::strerror(errno);
    ASSERT_EQ(op.upfs(p.upfs), 0) << op.name << ": " << upfs_last_error();
    ASSERT_EQ(::stat(p.plain.c_str(), &k1), 0);
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &u1), 0);
    // The plain file's reads by the kernel's own write path do not touch
    // atime; a write through upfs neither (noatime).
    EXPECT_EQ(Moved(u0, u1), Moved(k0, k1)) << op.name;
    EXPECT_FALSE(u1.st_ctim.tv_sec < u0.st_ctim.tv_sec ||
                 (u1.st_ctim.tv_sec == u0.st_ctim.tv_sec && u1.st_ctim.tv_nsec < u0.st_ctim.tv_nsec))
        << op.name << ": ctime went back";
    if (std::string(op.name).find("times") != std::string::npos || op.name == std::string("utimensat(OMIT, t)")) {
      EXPECT_TRUE(SameTime(u1.st_mtim, k1.st_mtim)) << op.name << ": explicit mtime";
      EXPECT_TRUE(SameTime(u1.st_atim, k1.st_atim)) << op.name << ": explicit atime";
    }
  }
}

TEST_F(Semantics, ExplicitTimesAreExactAndKeptAcrossReopen) {
  Pair p = MakePair(dir_, "exact", 0644, ::geteuid(), ::getegid());
  const struct timespec cases[][2] = {
      {{1, 2}, {1700000000, 999999999}},
      {{5, 0}, {-1000000000, 7}},  // before 1970
      {{0, 0}, {0, 0}},            // the epoch itself
  };
  for (const auto& ts : cases) {
    ASSERT_EQ(upfs_utimensat(AT_FDCWD, p.upfs.c_str(), ts, 0), 0) << upfs_last_error();
    upfs_drop_closed_files();
    struct stat st;
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
    EXPECT_TRUE(SameTime(st.st_atim, ts[0])) << ts[0].tv_sec;
    EXPECT_TRUE(SameTime(st.st_mtim, ts[1])) << ts[1].tv_sec << "." << ts[1].tv_nsec;
    int fd = upfs_open(p.upfs.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(upfs_fstat(fd, &st), 0);
    EXPECT_TRUE(SameTime(st.st_mtim, ts[1])) << "fstat after reopen";
    upfs_close(fd);
  }
  // A write after an mtime in the future sets it back to now, as the kernel.
  const struct timespec future[2] = {{0, UTIME_OMIT}, {4000000000, 0}};
  ASSERT_EQ(upfs_utimensat(AT_FDCWD, p.upfs.c_str(), future, 0), 0);
  ASSERT_EQ(WriteByte(p.upfs, true), 0);
  struct stat st;
  ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
  EXPECT_LT(st.st_mtim.tv_sec, time(nullptr) + 5) << "the write did not replace a future mtime";
  EXPECT_GE(st.st_mtim.tv_sec, time(nullptr) - 5);
  // The same, on a descriptor that has just written: within one tick of
  // the coarse clock a write stores no time unless the mtime is not the
  // one this process stored (a few tries, so that most fall in one tick).
  int fd = upfs_open(p.upfs.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << upfs_last_error();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(upfs_write(fd, "x", 1), 1);
    ASSERT_EQ(upfs_futimens(fd, future), 0) << upfs_last_error();
    ASSERT_EQ(upfs_write(fd, "y", 1), 1);
    ASSERT_EQ(upfs_fstat(fd, &st), 0);
    EXPECT_LT(st.st_mtim.tv_sec, time(nullptr) + 5) << "try " << i << ": a write kept a future mtime";
  }
  upfs_close(fd);
}

// upfs's own work never changes atime (the noatime policy: reads through
// upfs do not either).
TEST_F(Semantics, OpeningStatingAndReadingDoNotChangeAtime) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "atime", 0644);
  const struct timespec old[2] = {{1000000000, 1}, {1000000000, 2}};
  ASSERT_EQ(upfs_utimensat(AT_FDCWD, p.upfs.c_str(), old, 0), 0);
  upfs_drop_closed_files();
  for (const User* u : {static_cast<const User*>(nullptr), &kOwner}) {
    struct stat before, after;
    ASSERT_EQ(::stat(p.upfs.c_str(), &before), 0);
    EXPECT_EQ(As(u, [&] {
                struct stat st;
                int fd = upfs_open(p.upfs.c_str(), O_RDONLY);
                if (fd < 0) return std::string("open failed: ") + upfs_last_error();
                char buf[100];
                bool ok = upfs_pread(fd, buf, sizeof buf, 0) == sizeof buf && upfs_fstat(fd, &st) == 0;
                upfs_close(fd);
                ok = ok && upfs_stat(p.upfs.c_str(), &st) == 0 && upfs_is_upfs_file(p.upfs.c_str()) == 1;
                return std::string(ok ? "" : "a call failed");
              }),
              "");
    ASSERT_EQ(::stat(p.upfs.c_str(), &after), 0);
    EXPECT_TRUE(SameTime(before.st_atim, after.st_atim)) << (u ? u->name : "root");
  }
}

TEST_F(Semantics, AnOwnerWhoMayNotWriteMaySetTimes) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "ro-owner", 0444);
  EXPECT_EQ(As(&kOwner, [&] {
              return Errno(::utimensat(AT_FDCWD, p.plain.c_str(), kSetTimes, 0)) +
                     Errno(upfs_utimensat(AT_FDCWD, p.upfs.c_str(), kSetTimes, 0));
            }),
            "okok");
  struct stat st;
  ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
  EXPECT_TRUE(SameTime(st.st_mtim, kSetTimes[1]));
  EXPECT_TRUE(SameTime(st.st_atim, kSetTimes[0]));
  EXPECT_EQ(st.st_mode & 07777, 0444u) << "the mode is back";
  EXPECT_EQ(As(&kOther, [&] { return Errno(upfs_utimensat(AT_FDCWD, p.upfs.c_str(), kSetTimes, 0)); }),
            std::strerror(EPERM))
      << "another user may not";
}

// ---------------------------------------------------------------------------
// Times set through a descriptor are exact on it, by path, and after
// the file was closed, let go and reopened.

TEST_F(Semantics, FutimensTimesAreExactOnTheDescriptorByPathAndAfterReopen) {
  Pair p = MakePair(dir_, "futimens", 0644, ::geteuid(), ::getegid());
  const struct timespec cases[][2] = {
      {{1, 2}, {1700000000, 999999999}},
      {{-86400, 500}, {-1000000000, 7}},  // before 1970
      {{0, 0}, {0, 0}},                   // the epoch itself
  };
  for (const auto& ts : cases) {
    const std::string name = std::to_string(ts[1].tv_sec);
    const int fd = upfs_open(p.upfs.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_futimens(fd, ts), 0) << upfs_last_error();
    struct stat st;
    ASSERT_EQ(upfs_fstat(fd, &st), 0);
    EXPECT_EQ(TimesAre(st, ts[0], ts[1]), "") << name << ": upfs_fstat on the descriptor";
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
    EXPECT_EQ(TimesAre(st, ts[0], ts[1]), "") << name << ": upfs_stat while open";
    ASSERT_EQ(upfs_close(fd), 0);
    upfs_drop_closed_files();
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
    EXPECT_EQ(TimesAre(st, ts[0], ts[1]), "") << name << ": upfs_stat after close";
    const int again = upfs_open(p.upfs.c_str(), O_RDONLY);
    ASSERT_GE(again, 0) << upfs_last_error();
    ASSERT_EQ(upfs_fstat(again, &st), 0);
    EXPECT_EQ(TimesAre(st, ts[0], ts[1]), "") << name << ": upfs_fstat after reopen";
    upfs_close(again);
  }
}

// ---------------------------------------------------------------------------
// Times after every call, made by the owner rather than root.

// The same calls as EveryCallChangesTheTimesTheKernelChanges, as a report
// of the differences ("" if none), for running in another user's process.
std::string TimesReport(const Pair& p) {
  std::string out;
  for (const TimedOp& op : TimedOps()) {
    struct stat k0, u0, k1, u1;
    if (::stat(p.plain.c_str(), &k0) != 0 || upfs_stat(p.upfs.c_str(), &u0) != 0) return out + "stat failed";
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    const int kr = op.plain(p.plain);
    const std::string ks = Err(kr);
    const int ur = op.upfs(p.upfs);
    const std::string us = Err(ur);
    if (ks != "ok" || us != "ok") {
      out += std::string(op.name) + ": kernel " + ks + ", upfs " + us + "; ";
      continue;
    }
    if (::stat(p.plain.c_str(), &k1) != 0 || upfs_stat(p.upfs.c_str(), &u1) != 0) return out + "stat failed";
    if (Moved(u0, u1) != Moved(k0, k1))
      out += std::string(op.name) + ": kernel moved " + Moved(k0, k1) + ", upfs " + Moved(u0, u1) + "; ";
    if (u1.st_ctim.tv_sec < u0.st_ctim.tv_sec ||
        (u1.st_ctim.tv_sec == u0.st_ctim.tv_sec && u1.st_ctim.tv_nsec < u0.st_ctim.tv_nsec))
      out += std::string(op.name) + ": ctime went back; ";
  }
  return out;
}

TEST_F(Semantics, EveryCallByTheOwnerChangesTheTimesTheKernelChanges) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "owner-times", 0644);
  EXPECT_EQ(As(&kOwner, [&] { return TimesReport(p); }), "");
}

}  // namespace
}  // namespace upfs_semantics
