// Names at their edges in a pool against the kernel's tmpfs: trailing
// slashes, symbolic links as the last name, "." and "..", names too long,
// flags and sizes a call refuses. Each case runs in a fresh subtree on both
// sides; its answer (errno's name) and the subtree after it (every name,
// its type, a link's target) must be the kernel's. The random differential
// test rarely makes these paths; a program (rm, mv, mkdir -p, a shell's
// completion) makes them often.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "pool_test_fixture.h"
#include "test_util.h"

namespace pool_test {
namespace {

// The calls a case makes, on the kernel's files or through upfs (a pool).
struct Side {
  bool upfs;
  std::string base;  // the case's subtree
  std::string P(const std::string& rel) const { return base + "/" + rel; }
  int Open(const std::string& rel, int flags) const {
    const std::string p = P(rel);
    const int fd = upfs ? upfs_open(p.c_str(), flags, 0644) : ::open(p.c_str(), flags, 0644);
    if (fd >= 0) upfs ? upfs_close(fd) : ::close(fd);
    return fd;
  }
  int Mkdir(const std::string& rel) const {
    return upfs ? upfs_mkdir(P(rel).c_str(), 0755) : ::mkdir(P(rel).c_str(), 0755);
  }
  int Rmdir(const std::string& rel) const { return upfs ? upfs_rmdir(P(rel).c_str()) : ::rmdir(P(rel).c_str()); }
  int Unlink(const std::string& rel) const { return upfs ? upfs_unlink(P(rel).c_str()) : ::unlink(P(rel).c_str()); }
  int Link(const std::string& a, const std::string& b) const {
    return upfs ? upfs_link(P(a).c_str(), P(b).c_str()) : ::link(P(a).c_str(), P(b).c_str());
  }
  int Symlink(const std::string& target, const std::string& rel) const {
    return upfs ? upfs_symlink(target.c_str(), P(rel).c_str()) : ::symlink(target.c_str(), P(rel).c_str());
  }
  int Rename(const std::string& a, const std::string& b, unsigned flags = 0) const {
    const std::string pa = P(a), pb = P(b);
    return upfs ? upfs_renameat2(AT_FDCWD, pa.c_str(), AT_FDCWD, pb.c_str(), flags)
                : ::renameat2(AT_FDCWD, pa.c_str(), AT_FDCWD, pb.c_str(), flags);
  }
  ssize_t Readlink(const std::string& rel, size_t size) const {
    char buf[64];
    return upfs ? upfs_readlink(P(rel).c_str(), buf, size) : ::readlink(P(rel).c_str(), buf, size);
  }
  int Stat(const std::string& rel, int flags) const {
    struct stat st;
    return upfs ? upfs_fstatat(AT_FDCWD, P(rel).c_str(), &st, flags)
                : ::fstatat(AT_FDCWD, P(rel).c_str(), &st, flags);
  }
  int Truncate(const std::string& rel) const {
    return upfs ? upfs_truncate(P(rel).c_str(), 0) : ::truncate(P(rel).c_str(), 0);
  }

  // f a file, d an empty directory, full a directory with a file in it,
  // sf and sd symbolic links to f and d, dang one to nothing, loop one to
  // itself.
  void MakeTree() const {
    ASSERT_EQ(upfs ? upfs_mkdir(base.c_str(), 0755) : ::mkdir(base.c_str(), 0755), 0) << base;
    ASSERT_GE(Open("f", O_CREAT | O_WRONLY), 0);
    ASSERT_EQ(Mkdir("d"), 0);
    ASSERT_EQ(Mkdir("full"), 0);
    ASSERT_GE(Open("full/x", O_CREAT | O_WRONLY), 0);
    ASSERT_EQ(Symlink("f", "sf"), 0);
    ASSERT_EQ(Symlink("d", "sd"), 0);
    ASSERT_EQ(Symlink("nowhere", "dang"), 0);
    ASSERT_EQ(Symlink("loop", "loop"), 0);
    ASSERT_EQ(Symlink("f/", "sfs"), 0);  // bodies that end in a slash
    ASSERT_EQ(Symlink("nowhere/", "dangs"), 0);
    ASSERT_EQ(Symlink("self/", "self"), 0);
  }

  // Every name under the subtree, sorted, with its type and a link's target.
  std::string Tree() const { return TreeOf(base, ""); }
  std::string TreeOf(const std::string& dir, const std::string& prefix) const {
    std::vector<std::string> names;
    if (upfs) {
      UPFS_DIR* d = upfs_opendir(dir.c_str());
      if (!d) return "<cannot list " + prefix + ">";
      while (struct dirent* e = upfs_readdir(d)) names.push_back(e->d_name);
      upfs_closedir(d);
    } else {
      DIR* d = ::opendir(dir.c_str());
      if (!d) return "<cannot list " + prefix + ">";
      while (struct dirent* e = ::readdir(d)) names.push_back(e->d_name);
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    std::string out;
    for (const std::string& n : names) {
      if (n == "." || n == "..") continue;
      const std::string p = dir + "/" + n;
      struct stat st;
      if ((upfs ? upfs_lstat(p.c_str(), &st) : ::lstat(p.c_str(), &st)) != 0) {
        out += prefix + n + "?; ";
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        out += prefix + n + "/ {" + TreeOf(p, prefix + n + "/") + "} ";
      } else if (S_ISLNK(st.st_mode)) {
        char t[256];
        const ssize_t k = upfs ? upfs_readlink(p.c_str(), t, sizeof t) : ::readlink(p.c_str(), t, sizeof t);
        out += prefix + n + " -> " + (k < 0 ? "?" : std::string(t, size_t(k))) + "; ";
      } else {
        out += prefix + n + "; ";
      }
    }
    return out;
  }
};

struct Case {
  const char* name;
  std::function<long(const Side&)> call;
};

std::string Answer(long r) { return r >= 0 ? "ok" : strerrorname_np(errno); }

const std::string kLong(256, 'n');

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // Opens.
      {"open f/", [](const Side& s) { return s.Open("f/", O_RDONLY); }},
      {"open f/ O_CREAT", [](const Side& s) { return s.Open("f/", O_RDONLY | O_CREAT); }},
      {"open new/ O_CREAT", [](const Side& s) { return s.Open("new/", O_RDWR | O_CREAT); }},
      {"open sd/ O_CREAT", [](const Side& s) { return s.Open("sd/", O_RDONLY | O_CREAT); }},
      {"open dang/ O_CREAT", [](const Side& s) { return s.Open("dang/", O_RDWR | O_CREAT); }},
      {"open missing/x/ O_CREAT", [](const Side& s) { return s.Open("missing/x/", O_RDONLY | O_CREAT); }},
      {"open dang O_CREAT (makes nowhere)", [](const Side& s) { return s.Open("dang", O_RDWR | O_CREAT); }},
      {"open dang O_CREAT|O_EXCL", [](const Side& s) { return s.Open("dang", O_RDWR | O_CREAT | O_EXCL); }},
      {"open d O_CREAT", [](const Side& s) { return s.Open("d", O_RDONLY | O_CREAT); }},
      {"open d/ read-only", [](const Side& s) { return s.Open("d/", O_RDONLY); }},
      {"open sd/ O_NOFOLLOW", [](const Side& s) { return s.Open("sd/", O_RDONLY | O_NOFOLLOW); }},
      {"open sf O_NOFOLLOW", [](const Side& s) { return s.Open("sf", O_RDONLY | O_NOFOLLOW); }},
      {"open loop", [](const Side& s) { return s.Open("loop", O_RDONLY); }},
      {"open f/..", [](const Side& s) { return s.Open("f/..", O_RDONLY); }},
      {"open d/./../f", [](const Side& s) { return s.Open("d/./../f", O_RDONLY); }},
      {"open a 256-byte name", [](const Side& s) { return s.Open(kLong, O_RDWR | O_CREAT); }},
      {"open sfs (f/) O_CREAT", [](const Side& s) { return s.Open("sfs", O_RDWR | O_CREAT); }},
      {"open dangs (nowhere/) O_CREAT", [](const Side& s) { return s.Open("dangs", O_RDWR | O_CREAT); }},
      {"open self (self/) O_CREAT", [](const Side& s) { return s.Open("self", O_RDWR | O_CREAT); }},
      {"open sfs (f/)", [](const Side& s) { return s.Open("sfs", O_RDONLY); }},
      {"open f/ O_CREAT|O_EXCL", [](const Side& s) { return s.Open("f/", O_RDWR | O_CREAT | O_EXCL); }},
      // New names.
      {"mkdir m/", [](const Side& s) { return s.Mkdir("m/"); }},
      {"mkdir m//", [](const Side& s) { return s.Mkdir("m//"); }},
      {"mkdir dang", [](const Side& s) { return s.Mkdir("dang"); }},
      {"mkdir dang/", [](const Side& s) { return s.Mkdir("dang/"); }},
      {"mkdir d/..", [](const Side& s) { return s.Mkdir("d/.."); }},
      {"symlink new/", [](const Side& s) { return s.Symlink("x", "new/"); }},
      {"symlink dang/", [](const Side& s) { return s.Symlink("x", "dang/"); }},
      {"symlink to an empty target", [](const Side& s) { return s.Symlink("", "se"); }},
      {"link f new/", [](const Side& s) { return s.Link("f", "new/"); }},
      {"link f dang/", [](const Side& s) { return s.Link("f", "dang/"); }},
      {"link sd/ x", [](const Side& s) { return s.Link("sd/", "x"); }},
      {"link f/ x", [](const Side& s) { return s.Link("f/", "x"); }},
      {"link sf x (the link itself)", [](const Side& s) { return s.Link("sf", "x"); }},
      // Removals.
      {"rmdir sd/", [](const Side& s) { return s.Rmdir("sd/"); }},
      {"rmdir d/", [](const Side& s) { return s.Rmdir("d/"); }},
      {"rmdir d//", [](const Side& s) { return s.Rmdir("d//"); }},
      {"rmdir f/", [](const Side& s) { return s.Rmdir("f/"); }},
      {"rmdir missing/", [](const Side& s) { return s.Rmdir("missing/"); }},
      {"rmdir d/.", [](const Side& s) { return s.Rmdir("d/."); }},
      {"rmdir d/..", [](const Side& s) { return s.Rmdir("d/.."); }},
      {"rmdir missing/.", [](const Side& s) { return s.Rmdir("missing/."); }},
      {"rmdir f/.", [](const Side& s) { return s.Rmdir("f/."); }},
      {"rmdir sd/.", [](const Side& s) { return s.Rmdir("sd/."); }},
      {"unlink sd/", [](const Side& s) { return s.Unlink("sd/"); }},
      {"unlink dang/", [](const Side& s) { return s.Unlink("dang/"); }},
      {"unlink d/", [](const Side& s) { return s.Unlink("d/"); }},
      {"unlink f/", [](const Side& s) { return s.Unlink("f/"); }},
      {"unlink missing/", [](const Side& s) { return s.Unlink("missing/"); }},
      // Renames.
      {"rename f g/", [](const Side& s) { return s.Rename("f", "g/"); }},
      {"rename f dang/", [](const Side& s) { return s.Rename("f", "dang/"); }},
      {"rename d dang/", [](const Side& s) { return s.Rename("d", "dang/"); }},
      {"rename d sd/", [](const Side& s) { return s.Rename("d", "sd/"); }},
      {"rename sd/ z", [](const Side& s) { return s.Rename("sd/", "z"); }},
      {"rename d/ z/", [](const Side& s) { return s.Rename("d/", "z/"); }},
      {"rename d// z", [](const Side& s) { return s.Rename("d//", "z"); }},
      {"rename d/ full/", [](const Side& s) { return s.Rename("d/", "full/"); }},
      {"rename d/. z", [](const Side& s) { return s.Rename("d/.", "z"); }},
      {"rename f d/..", [](const Side& s) { return s.Rename("f", "d/.."); }},
      {"exchange f/ d", [](const Side& s) { return s.Rename("f/", "d", RENAME_EXCHANGE); }},
      {"exchange d/ full/", [](const Side& s) { return s.Rename("d/", "full/", RENAME_EXCHANGE); }},
      {"noreplace f d/.", [](const Side& s) { return s.Rename("f", "d/.", RENAME_NOREPLACE); }},
      {"noreplace missing d/.", [](const Side& s) { return s.Rename("missing", "d/.", RENAME_NOREPLACE); }},
      {"rename missing d/.", [](const Side& s) { return s.Rename("missing", "d/."); }},
      {"noreplace f f/", [](const Side& s) { return s.Rename("f", "f/", RENAME_NOREPLACE); }},
      {"noreplace f sf/", [](const Side& s) { return s.Rename("f", "sf/", RENAME_NOREPLACE); }},
      {"exchange d f/", [](const Side& s) { return s.Rename("d", "f/", RENAME_EXCHANGE); }},
      {"exchange f/ full", [](const Side& s) { return s.Rename("f/", "full", RENAME_EXCHANGE); }},
      {"both exchange and noreplace", [](const Side& s) { return s.Rename("f", "d", RENAME_EXCHANGE | RENAME_NOREPLACE); }},
      // Lookups, which follow a last symbolic link given a trailing slash.
      {"lstat sd/", [](const Side& s) { return s.Stat("sd/", AT_SYMLINK_NOFOLLOW); }},
      {"lstat sf/", [](const Side& s) { return s.Stat("sf/", AT_SYMLINK_NOFOLLOW); }},
      {"stat dang/", [](const Side& s) { return s.Stat("dang/", 0); }},
      {"stat sfs (f/)", [](const Side& s) { return s.Stat("sfs", 0); }},
      {"lstat sfs/", [](const Side& s) { return s.Stat("sfs/", AT_SYMLINK_NOFOLLOW); }},
      {"fstatat with an unknown flag", [](const Side& s) { return s.Stat("f", 0x40000000); }},
      {"readlink sd/", [](const Side& s) { return s.Readlink("sd/", 64); }},
      {"readlink sf/", [](const Side& s) { return s.Readlink("sf/", 64); }},
      {"readlink f", [](const Side& s) { return s.Readlink("f", 64); }},
      {"readlink into 0 bytes", [](const Side& s) { return s.Readlink("dang", 0); }},
      {"truncate sd", [](const Side& s) { return s.Truncate("sd"); }},
      {"truncate f/", [](const Side& s) { return s.Truncate("f/"); }},
  };
  return cases;
}

class PoolNameEdges : public PoolTest {};

TEST_F(PoolNameEdges, EveryCaseAnswersAndLeavesTheTreeAsTheKernels) {
  upfs_test::TempDir kernel_dir;
  int i = 0;
  for (const Case& c : Cases()) {
    const std::string sub = "c" + std::to_string(i++);
    const Side kernel{false, kernel_dir.File(sub)}, pool{true, P(sub)};
    kernel.MakeTree();
    pool.MakeTree();
    ASSERT_EQ(pool.Tree(), kernel.Tree()) << "before " << c.name;
    const std::string k = Answer(c.call(kernel)), u = Answer(c.call(pool));
    EXPECT_EQ(u, k) << c.name;
    EXPECT_EQ(pool.Tree(), kernel.Tree()) << "after " << c.name;
  }
  ExpectClean();
}

// Flags a call does not know, a mode's bits a mkdir drops, and a path of
// PATH_MAX bytes: each answered as the kernel's tmpfs answers.
TEST_F(PoolNameEdges, FlagsModesAndLengthsAsTheKernels) {
  upfs_test::TempDir kernel_dir;
  std::string got, want;
  ::umask(022);
  for (const bool upfs : {false, true}) {
    const Side s{upfs, upfs ? P("t") : kernel_dir.File("t")};
    s.MakeTree();
    std::string& out = upfs ? got : want;
    const auto answer = [&](const char* what, long r) { out += std::string(what) + " " + Answer(r) + "; "; };
    const std::string f = s.P("f"), sl = s.P("sf");
    answer("fchmodat, unknown flag", upfs ? upfs_fchmodat(AT_FDCWD, f.c_str(), 0600, 0x4000)
                                          : ::fchmodat(AT_FDCWD, f.c_str(), 0600, 0x4000));
    answer("fchownat, unknown flag", upfs ? upfs_fchownat(AT_FDCWD, f.c_str(), 1, 1, 0x4000)
                                          : ::fchownat(AT_FDCWD, f.c_str(), 1, 1, 0x4000));
    answer("utimensat, unknown flag", upfs ? upfs_utimensat(AT_FDCWD, f.c_str(), nullptr, 0x4000)
                                           : ::utimensat(AT_FDCWD, f.c_str(), nullptr, 0x4000));
    answer("fchmodat of a link itself", upfs ? upfs_fchmodat(AT_FDCWD, sl.c_str(), 0600, AT_SYMLINK_NOFOLLOW)
                                             : ::fchmodat(AT_FDCWD, sl.c_str(), 0600, AT_SYMLINK_NOFOLLOW));
    // mkdir keeps the permission bits and the sticky bit, not set-ID bits.
    const std::string m = s.P("mk");
    answer("mkdir mode 07777", upfs ? upfs_mkdir(m.c_str(), 07777) : ::mkdir(m.c_str(), 07777));
    struct stat st;
    if ((upfs ? upfs_stat(m.c_str(), &st) : ::stat(m.c_str(), &st)) == 0)
      out += "its mode " + std::to_string(st.st_mode & 07777) + "; ";
    // "./" repeated to PATH_MAX - 1 bytes and then to PATH_MAX.
    for (const size_t len : {size_t(PATH_MAX - 1), size_t(PATH_MAX)}) {
      std::string p = s.base + "/";
      while (p.size() + 2 < len) p += "./";
      while (p.size() < len - 1) p.insert(s.base.size() + 1, "/");
      p += "f";
      ASSERT_EQ(p.size(), len);
      out += "stat of " + std::to_string(len) + " bytes " +
             Answer(upfs ? upfs_stat(p.c_str(), &st) : ::stat(p.c_str(), &st)) + "; ";
      out += "rename to it " +
             Answer(upfs ? upfs_rename(s.P("sd").c_str(), p.c_str()) : ::rename(s.P("sd").c_str(), p.c_str())) + "; ";
    }
  }
  EXPECT_EQ(got, want);
  ExpectClean();
}

}  // namespace
}  // namespace pool_test
