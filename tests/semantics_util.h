// Shared by the semantics tests (issue 9): upfs files against plain files
// on the same medium, as root and as other users (forked children that drop
// to test uids and gids, which need no /etc/passwd entry). Tests that need
// other users skip when not run as root. Each test binary covers one
// concept: semantics_access_test (who may open, create, truncate),
// semantics_attributes_test (chmod, chown and what reaches the shared
// state), semantics_setid_test (S_ISUID/S_ISGID), semantics_times_test,
// semantics_damage_test (never written as plain bytes), semantics_leaks_test
// (nothing left in /dev/shm).
//
// Differences from the kernel that are by design are stated where they are
// checked: write permission without read permission is refused (EACCES);
// reads through upfs do not update atime (noatime).
#pragma once

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sanitized.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace upfs_semantics {


using upfs_test::TempDir;
using Bytes = std::vector<unsigned char>;

// ---------------------------------------------------------------------------
// Users, and running code as one of them.

struct User {
  const char* name;
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;  // supplementary
};

const User kOwner{"owner", 61001, 61001, {}};
const User kMember{"group member", 61002, 61002, {61001}};  // in the owner's group
const User kOther{"other", 61003, 61003, {}};
const User kDirOwner{"directory owner", 61004, 61004, {}};

// Runs fn in a child as `u` (or as root, with u null); returns what fn
// returned, or a description of how the child failed.
std::string As(const User* u, const std::function<std::string()>& fn) {
  // No File of the parent's busy in another thread (a parked File's worker,
  // its destruction by the reaper) while it forks: clang 14's ASan
  // allocator is not fork-safe against a thread inside it.
  upfs_drop_closed_files();
  int p[2];
  if (::pipe(p) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(p[0]);
    std::string out;
    if (u && (::setgroups(u->groups.size(), u->groups.data()) != 0 ||
              ::setresgid(u->gid, u->gid, u->gid) != 0 || ::setresuid(u->uid, u->uid, u->uid) != 0))
      out = std::string("cannot become ") + u->name + ": " + std::strerror(errno);
    else
      out = fn();
    upfs_test::PipeWriteString(p[1], out);
    // What a program's exit() does for the files it closed (parked), done
    // here: exit() itself in a fork child of a multithreaded test process
    // can hang under clang 14's sanitizers. (tests/preload_test.sh checks
    // a real program's exit with an unlinked file open.)
    upfs_drop_closed_files();
    ::_exit(0);
  }
  ::close(p[1]);
  bool timed_out = false;
  std::string out = upfs_test::DrainFd(p[0], 60 * 1000, &timed_out);
  ::close(p[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  std::string how = upfs_test::WaitChild(pid);
  if (how != "exit 0") out += " (child: " + how + ")";
  return out;
}

#define NEED_ROOT()                                                      \
  do {                                                                   \
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other users"; \
  } while (0)

std::string Errno(int r) { return r >= 0 ? "ok" : std::string(std::strerror(errno)); }

// ---------------------------------------------------------------------------
// A plain file and a upfs file with the same bytes, owner and mode.

const Bytes& Content() {
  static const Bytes b = [] {
    Bytes v(10000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 7 + 3);
    return v;
  }();
  return b;
}

struct Pair {
  std::string plain, upfs;
};

// Makes dir/name.plain and dir/name.upfs owned by owner:group with `mode`.
Pair MakePair(const TempDir& d, const std::string& name, mode_t mode, uid_t owner = kOwner.uid,
              gid_t group = kOwner.gid) {
  Pair p{d.File(name + ".plain"), d.File(name + ".upfs")};
  EXPECT_TRUE(upfs_test::WriteHostFile(p.plain, Content().data(), Content().size()));
  int fd = upfs_open(p.upfs.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
  EXPECT_GE(fd, 0) << upfs_last_error();
  EXPECT_TRUE(upfs_test::UpfsPwriteFull(fd, Content().data(), Content().size(), 0));
  EXPECT_EQ(upfs_close(fd), 0);
  EXPECT_EQ(::chown(p.plain.c_str(), owner, group), 0);
  EXPECT_EQ(::chmod(p.plain.c_str(), mode), 0);
  EXPECT_EQ(upfs_chown(p.upfs.c_str(), owner, group), 0) << upfs_last_error();
  EXPECT_EQ(upfs_chmod(p.upfs.c_str(), mode), 0) << upfs_last_error();
  return p;
}

// "" if the upfs file at path (read as root) still holds `want`.
std::string UpfsHolds(const std::string& path, const Bytes& want) {
  upfs_drop_closed_files();
  int fd = upfs_open(path.c_str(), O_RDONLY);
  if (fd < 0) return "not usable as a upfs file: " + std::string(upfs_last_error());
  Bytes got;
  bool ok = upfs_test::UpfsReadAll(fd, &got);
  upfs_close(fd);
  if (!ok || got != want) return "content changed";
  return "";
}

// Whether a /dev/shm name is a per-file file's object: "upfs-DEV-INO"
// (shared state) or "upfs-DEV-INO.lock" (flock), DEV and INO in
// hexadecimal. Other tests running beside these (ctest -j) make pools
// there, "upfs-poolconc-PID-0.pool" and the like, which are not this
// test's to count.
bool PerFileObjectName(const char* name) {
  if (std::strncmp(name, "upfs-", 5) != 0) return false;
  const char* p = name + 5;
  for (int part = 0; part < 2; ++part) {
    const char* start = p;
    while (std::isxdigit(static_cast<unsigned char>(*p))) ++p;
    if (p == start) return false;
    if (part == 0 && *p++ != '-') return false;
  }
  return *p == '\0' || std::strcmp(p, ".lock") == 0;
}

// The per-file objects in /dev/shm (shared state and flock objects).
std::set<std::string> ShmObjects() {
  std::set<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (struct dirent* e = ::readdir(d))
      if (PerFileObjectName(e->d_name)) out.insert(e->d_name);
    ::closedir(d);
  }
  return out;
}

// Every test leaves /dev/shm as it found it.
class Semantics : public ::testing::Test {
 protected:
  void SetUp() override {
    upfs_drop_closed_files();
    before_ = ShmObjects();
    ::chmod(dir_.path().c_str(), 0777);
  }
  void TearDown() override {
    upfs_drop_closed_files();
    std::set<std::string> after = ShmObjects();
    for (const std::string& n : after)
      EXPECT_TRUE(before_.count(n)) << "left in /dev/shm: " << n;
  }
  TempDir dir_;
  std::set<std::string> before_;
};

// ---------------------------------------------------------------------------
// Other processes with the file: one that holds it open, one that dies
// with it open.

// A process that holds the file open for writing (so that its shared state
// exists) until `release` is closed.
pid_t HoldOpen(const User& u, const std::string& path, int* release) {
  upfs_drop_closed_files();  // see As()
  int ready[2], rel[2];
  if (::pipe(ready) != 0 || ::pipe(rel) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::close(rel[1]);
    if (::setgroups(u.groups.size(), u.groups.data()) != 0 || ::setresgid(u.gid, u.gid, u.gid) != 0 ||
        ::setresuid(u.uid, u.uid, u.uid) != 0)
      ::_exit(1);
    int fd = upfs_open(path.c_str(), O_RDWR);
    upfs_test::PipeWriteString(ready[1], fd >= 0 ? "y" : "n");
    char c;
    while (::read(rel[0], &c, 1) > 0) {
    }
    if (fd >= 0) upfs_close(fd);
    upfs_drop_closed_files();  // see As()
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(rel[0]);
  char c = 'n';
  if (::read(ready[0], &c, 1) != 1 || c != 'y') {
    ::close(rel[1]);
    upfs_test::WaitChild(pid);
    pid = -1;
  }
  ::close(ready[0]);
  *release = rel[1];
  return pid;
}

void LeaveTheStateOfAKilledWriter(const std::string& f) {
  int fd = upfs_open(f.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_close(fd), 0);
  upfs_drop_closed_files();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int c = upfs_open(f.c_str(), O_RDWR);
    ::kill(::getpid(), c >= 0 ? SIGKILL : SIGTERM);
  }
  ASSERT_EQ(upfs_test::WaitChild(pid).rfind("signal 9", 0), 0u);
}

// `upfs rm` (upfs_unlink) of a file whose header a program overwrote
// removes the shared state a killed process left for it: it is named by
// the inode, not by anything in the damaged header.

// ---------------------------------------------------------------------------
// Caller classes, modes and how results are reported.

// "ok", or the name of errno (call it right after the call that returned r).
std::string Err(long r) {
  if (r >= 0) return "ok";
  const int e = errno;
  const char* n = strerrorname_np(e);
  return n ? n : "errno " + std::to_string(e);
}

std::string Oct(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "0%04o", unsigned(m));
  return b;
}

// A class of caller (the owner, a member of the file's group through a
// supplementary group, another user) and where its bits sit in the mode.
struct CallerClass {
  const User* user;
  int shift;
};
const CallerClass kCallerClasses[] = {{&kOwner, 6}, {&kMember, 3}, {&kOther, 0}};

// The mode that gives class c `bits` and the other classes the complement,
// so that only this class's bits can decide.
mode_t ModeFor(const CallerClass& c, unsigned bits) {
  mode_t mode = 0;
  for (int s : {6, 3, 0}) mode |= (s == c.shift ? bits : 7 - bits) << s;
  return mode;
}

std::string Scenario(const CallerClass& c, unsigned bits) {
  return std::string(c.user->name) + ", its bits " + std::to_string(bits) + ", mode " + Oct(ModeFor(c, bits));
}

// The documented difference: a caller who may write a upfs file but not
// read it is refused (EACCES) where the kernel lets it write.
bool WriteWithoutRead(unsigned bits) { return (bits & 2) && !(bits & 4); }

bool Writable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }
bool Readable(int flags) { return (flags & O_ACCMODE) != O_WRONLY; }


// ---------------------------------------------------------------------------
// Times and open flags.

bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

const struct timespec kSetTimes[2] = {{1234567890, 123456789}, {1300000000, 987654321}};
const struct timespec kOmitAtime[2] = {{0, UTIME_OMIT}, {1400000000, 5}};
const struct timespec kNowAtime[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};

// "" if st carries atime a and mtime m to the nanosecond.
std::string TimesAre(const struct stat& st, const struct timespec& a, const struct timespec& m) {
  if (SameTime(st.st_atim, a) && SameTime(st.st_mtim, m)) return "";
  char b[200];
  std::snprintf(b, sizeof b, "atime %lld.%09ld mtime %lld.%09ld, want %lld.%09ld and %lld.%09ld",
                (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec, (long long)st.st_mtim.tv_sec,
                st.st_mtim.tv_nsec, (long long)a.tv_sec, a.tv_nsec, (long long)m.tv_sec, m.tv_nsec);
  return b;
}


struct Flag {
  const char* name;
  int flags;
};

}  // namespace upfs_semantics
