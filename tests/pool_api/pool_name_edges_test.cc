// Names at their edges in a pool against the kernel's tmpfs: trailing
// slashes, symbolic links as the last name, "." and "..", names too long,
// flags and sizes a call refuses. Each case runs in a fresh subtree on both
// sides (pool_side.h's Side); its answer (errno's name) and the subtree
// after it (Describe: every name, its type, mode, links, size, content, a
// link's target) must be the kernel's. The random differential test makes
// such paths now and then; here each is made on purpose, as programs (rm,
// mv, mkdir -p, a shell's completion) make them.
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

#include "pool_side.h"
#include "pool_test_fixture.h"
#include "test_util.h"

namespace pool_test {
namespace {

// The calls pool_side.h's Side lacks, on a path under its root.
int OpenClose(Side& s, const std::string& p, int flags) {
  const int fd = s.Open(p, flags, 0644);
  if (fd >= 0) s.Close(fd);
  return fd;
}
int Fstatat(Side& s, const std::string& p, int flags) {
  struct stat st;
  const std::string at = s.root + p;
  return s.pool ? upfs_fstatat(AT_FDCWD, at.c_str(), &st, flags) : ::fstatat(AT_FDCWD, at.c_str(), &st, flags);
}
ssize_t ReadlinkInto(Side& s, const std::string& p, size_t size) {
  char buf[64];
  return s.Readlink(p, buf, size);
}

// A case's subtree: f a file, d an empty directory, full a directory with
// a file in it, sf and sd symbolic links to f and d, dang one to nothing,
// loop one to itself, and three whose bodies end in a slash.
void MakeTree(Side& s) {
  ASSERT_EQ(s.Mkdir("", 0755), 0) << s.root;
  ASSERT_GE(OpenClose(s, "/f", O_CREAT | O_WRONLY), 0);
  ASSERT_EQ(s.Mkdir("/d", 0755), 0);
  ASSERT_EQ(s.Mkdir("/full", 0755), 0);
  ASSERT_GE(OpenClose(s, "/full/x", O_CREAT | O_WRONLY), 0);
  ASSERT_EQ(s.Symlink("f", "//sf"), 0);
  ASSERT_EQ(s.Symlink("d", "//sd"), 0);
  ASSERT_EQ(s.Symlink("nowhere", "//dang"), 0);
  ASSERT_EQ(s.Symlink("loop", "//loop"), 0);
  ASSERT_EQ(s.Symlink("f/", "//sfs"), 0);
  ASSERT_EQ(s.Symlink("nowhere/", "//dangs"), 0);
  ASSERT_EQ(s.Symlink("self/", "//self"), 0);
}

// Every entry of the subtree (Describe: type, mode, links, size, content,
// a link's target), one string.
std::string Tree(Side& s) {
  std::vector<std::string> lines;
  Describe(s, "", &lines);
  std::string out;
  for (const std::string& l : lines) out += l + "; ";
  return out;
}

struct Case {
  const char* name;
  std::function<long(Side&)> call;
};

std::string Answer(long r) { return r >= 0 ? "ok" : strerrorname_np(errno); }

const std::string kLong(256, 'n');

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // Opens.
      {"open f/", [](Side& s) { return OpenClose(s, "/f/", O_RDONLY); }},
      {"open f/ O_CREAT", [](Side& s) { return OpenClose(s, "/f/", O_RDONLY | O_CREAT); }},
      {"open new/ O_CREAT", [](Side& s) { return OpenClose(s, "/new/", O_RDWR | O_CREAT); }},
      {"open sd/ O_CREAT", [](Side& s) { return OpenClose(s, "/sd/", O_RDONLY | O_CREAT); }},
      {"open dang/ O_CREAT", [](Side& s) { return OpenClose(s, "/dang/", O_RDWR | O_CREAT); }},
      {"open missing/x/ O_CREAT", [](Side& s) { return OpenClose(s, "/missing/x/", O_RDONLY | O_CREAT); }},
      {"open dang O_CREAT (makes nowhere)", [](Side& s) { return OpenClose(s, "/dang", O_RDWR | O_CREAT); }},
      {"open dang O_CREAT|O_EXCL", [](Side& s) { return OpenClose(s, "/dang", O_RDWR | O_CREAT | O_EXCL); }},
      {"open d O_CREAT", [](Side& s) { return OpenClose(s, "/d", O_RDONLY | O_CREAT); }},
      {"open d/ read-only", [](Side& s) { return OpenClose(s, "/d/", O_RDONLY); }},
      {"open sd/ O_NOFOLLOW", [](Side& s) { return OpenClose(s, "/sd/", O_RDONLY | O_NOFOLLOW); }},
      {"open sf O_NOFOLLOW", [](Side& s) { return OpenClose(s, "/sf", O_RDONLY | O_NOFOLLOW); }},
      {"open loop", [](Side& s) { return OpenClose(s, "/loop", O_RDONLY); }},
      {"open f/..", [](Side& s) { return OpenClose(s, "/f/..", O_RDONLY); }},
      {"open d/./../f", [](Side& s) { return OpenClose(s, "/d/./../f", O_RDONLY); }},
      {"open a 256-byte name", [](Side& s) { return OpenClose(s, "/" + kLong, O_RDWR | O_CREAT); }},
      {"open sfs (f/) O_CREAT", [](Side& s) { return OpenClose(s, "/sfs", O_RDWR | O_CREAT); }},
      {"open dangs (nowhere/) O_CREAT", [](Side& s) { return OpenClose(s, "/dangs", O_RDWR | O_CREAT); }},
      {"open self (self/) O_CREAT", [](Side& s) { return OpenClose(s, "/self", O_RDWR | O_CREAT); }},
      {"open sfs (f/)", [](Side& s) { return OpenClose(s, "/sfs", O_RDONLY); }},
      {"open f/ O_CREAT|O_EXCL", [](Side& s) { return OpenClose(s, "/f/", O_RDWR | O_CREAT | O_EXCL); }},
      // New names.
      {"mkdir m/", [](Side& s) { return s.Mkdir("/m/", 0755); }},
      {"mkdir m//", [](Side& s) { return s.Mkdir("/m//", 0755); }},
      {"mkdir dang", [](Side& s) { return s.Mkdir("/dang", 0755); }},
      {"mkdir dang/", [](Side& s) { return s.Mkdir("/dang/", 0755); }},
      {"mkdir d/..", [](Side& s) { return s.Mkdir("/d/..", 0755); }},
      {"symlink new/", [](Side& s) { return s.Symlink("x", "/new/"); }},
      {"symlink dang/", [](Side& s) { return s.Symlink("x", "/dang/"); }},
      {"symlink to an empty target", [](Side& s) { return s.Symlink("", "/se"); }},
      {"link f new/", [](Side& s) { return s.Link("/f", "/new/"); }},
      {"link f dang/", [](Side& s) { return s.Link("/f", "/dang/"); }},
      {"link sd/ x", [](Side& s) { return s.Link("/sd/", "/x"); }},
      {"link f/ x", [](Side& s) { return s.Link("/f/", "/x"); }},
      {"link sf x (the link itself)", [](Side& s) { return s.Link("/sf", "/x"); }},
      // Removals.
      {"rmdir sd/", [](Side& s) { return s.Rmdir("/sd/"); }},
      {"rmdir d/", [](Side& s) { return s.Rmdir("/d/"); }},
      {"rmdir d//", [](Side& s) { return s.Rmdir("/d//"); }},
      {"rmdir f/", [](Side& s) { return s.Rmdir("/f/"); }},
      {"rmdir missing/", [](Side& s) { return s.Rmdir("/missing/"); }},
      {"rmdir d/.", [](Side& s) { return s.Rmdir("/d/."); }},
      {"rmdir d/..", [](Side& s) { return s.Rmdir("/d/.."); }},
      {"rmdir missing/.", [](Side& s) { return s.Rmdir("/missing/."); }},
      {"rmdir f/.", [](Side& s) { return s.Rmdir("/f/."); }},
      {"rmdir sd/.", [](Side& s) { return s.Rmdir("/sd/."); }},
      {"unlink sd/", [](Side& s) { return s.Unlink("/sd/"); }},
      {"unlink dang/", [](Side& s) { return s.Unlink("/dang/"); }},
      {"unlink d/", [](Side& s) { return s.Unlink("/d/"); }},
      {"unlink f/", [](Side& s) { return s.Unlink("/f/"); }},
      {"unlink missing/", [](Side& s) { return s.Unlink("/missing/"); }},
      // Renames.
      {"rename f g/", [](Side& s) { return s.Rename("//f", "//g/", 0); }},
      {"rename f dang/", [](Side& s) { return s.Rename("//f", "//dang/", 0); }},
      {"rename d dang/", [](Side& s) { return s.Rename("//d", "//dang/", 0); }},
      {"rename d sd/", [](Side& s) { return s.Rename("//d", "//sd/", 0); }},
      {"rename sd/ z", [](Side& s) { return s.Rename("//sd/", "//z", 0); }},
      {"rename d/ z/", [](Side& s) { return s.Rename("//d/", "//z/", 0); }},
      {"rename d// z", [](Side& s) { return s.Rename("//d//", "//z", 0); }},
      {"rename d/ full/", [](Side& s) { return s.Rename("//d/", "//full/", 0); }},
      {"rename d/. z", [](Side& s) { return s.Rename("//d/.", "//z", 0); }},
      {"rename f d/..", [](Side& s) { return s.Rename("//f", "//d/..", 0); }},
      {"exchange f/ d", [](Side& s) { return s.Rename("/f/", "/d", RENAME_EXCHANGE); }},
      {"exchange d/ full/", [](Side& s) { return s.Rename("/d/", "/full/", RENAME_EXCHANGE); }},
      {"noreplace f d/.", [](Side& s) { return s.Rename("/f", "/d/.", RENAME_NOREPLACE); }},
      {"noreplace missing d/.", [](Side& s) { return s.Rename("/missing", "/d/.", RENAME_NOREPLACE); }},
      {"rename missing d/.", [](Side& s) { return s.Rename("//missing", "//d/.", 0); }},
      {"noreplace f f/", [](Side& s) { return s.Rename("/f", "/f/", RENAME_NOREPLACE); }},
      {"noreplace f sf/", [](Side& s) { return s.Rename("/f", "/sf/", RENAME_NOREPLACE); }},
      {"exchange d f/", [](Side& s) { return s.Rename("/d", "/f/", RENAME_EXCHANGE); }},
      {"exchange f/ full", [](Side& s) { return s.Rename("/f/", "/full", RENAME_EXCHANGE); }},
      {"both exchange and noreplace", [](Side& s) { return s.Rename("/f", "/d", RENAME_EXCHANGE | RENAME_NOREPLACE); }},
      // Lookups, which follow a last symbolic link given a trailing slash.
      {"lstat sd/", [](Side& s) { return Fstatat(s, "/sd/", AT_SYMLINK_NOFOLLOW); }},
      {"lstat sf/", [](Side& s) { return Fstatat(s, "/sf/", AT_SYMLINK_NOFOLLOW); }},
      {"stat dang/", [](Side& s) { return Fstatat(s, "/dang/", 0); }},
      {"stat sfs (f/)", [](Side& s) { return Fstatat(s, "/sfs", 0); }},
      {"lstat sfs/", [](Side& s) { return Fstatat(s, "/sfs/", AT_SYMLINK_NOFOLLOW); }},
      {"fstatat with an unknown flag", [](Side& s) { return Fstatat(s, "/f", 0x40000000); }},
      {"readlink sd/", [](Side& s) { return ReadlinkInto(s, "/sd/", 64); }},
      {"readlink sf/", [](Side& s) { return ReadlinkInto(s, "/sf/", 64); }},
      {"readlink f", [](Side& s) { return ReadlinkInto(s, "/f", 64); }},
      {"readlink into 0 bytes", [](Side& s) { return ReadlinkInto(s, "/dang", 0); }},
      {"truncate sd", [](Side& s) { return s.Truncate("/sd", 0); }},
      {"truncate f/", [](Side& s) { return s.Truncate("/f/", 0); }},
  };
  return cases;
}

class PoolNameEdges : public PoolTest {};

TEST_F(PoolNameEdges, EveryCaseAnswersAndLeavesTheTreeAsTheKernels) {
  upfs_test::TempDir kernel_dir;
  int i = 0;
  for (const Case& c : Cases()) {
    const std::string sub = "c" + std::to_string(i++);
    Side kernel{kernel_dir.File(sub), false}, pool{P(sub), true};
    MakeTree(kernel);
    MakeTree(pool);
    ASSERT_EQ(Tree(pool), Tree(kernel)) << "before " << c.name;
    const std::string k = Answer(c.call(kernel)), u = Answer(c.call(pool));
    EXPECT_EQ(u, k) << c.name;
    EXPECT_EQ(Tree(pool), Tree(kernel)) << "after " << c.name;
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
    Side s{upfs ? P("t") : kernel_dir.File("t"), upfs};
    MakeTree(s);
    std::string& out = upfs ? got : want;
    const auto answer = [&](const char* what, long r) { out += std::string(what) + " " + Answer(r) + "; "; };
    const std::string f = s.root + "/f", sl = s.root + "/sf";
    answer("fchmodat, unknown flag", upfs ? upfs_fchmodat(AT_FDCWD, f.c_str(), 0600, 0x4000)
                                          : ::fchmodat(AT_FDCWD, f.c_str(), 0600, 0x4000));
    answer("fchownat, unknown flag", upfs ? upfs_fchownat(AT_FDCWD, f.c_str(), 1, 1, 0x4000)
                                          : ::fchownat(AT_FDCWD, f.c_str(), 1, 1, 0x4000));
    answer("utimensat, unknown flag", upfs ? upfs_utimensat(AT_FDCWD, f.c_str(), nullptr, 0x4000)
                                           : ::utimensat(AT_FDCWD, f.c_str(), nullptr, 0x4000));
    answer("fchmodat of a link itself", upfs ? upfs_fchmodat(AT_FDCWD, sl.c_str(), 0600, AT_SYMLINK_NOFOLLOW)
                                             : ::fchmodat(AT_FDCWD, sl.c_str(), 0600, AT_SYMLINK_NOFOLLOW));
    // mkdir keeps the permission bits and the sticky bit, not set-ID bits.
    const std::string m = s.root + "/mk";
    answer("mkdir mode 07777", upfs ? upfs_mkdir(m.c_str(), 07777) : ::mkdir(m.c_str(), 07777));
    struct stat st;
    if ((upfs ? upfs_stat(m.c_str(), &st) : ::stat(m.c_str(), &st)) == 0)
      out += "its mode " + std::to_string(st.st_mode & 07777) + "; ";
    // A symbolic link's blocks: none for a body the inode holds, one page
    // for a longer one. (At exactly 128 bytes they differ: a pool's inode
    // holds 128, tmpfs's 127 and the NUL; each reports what it stores.)
    for (const size_t body : {size_t(127), size_t(129), size_t(4000)}) {
      const std::string link = "/long" + std::to_string(body);
      if (s.Symlink(std::string(body, 'x'), link) == 0 && s.Lstat(link, &st) == 0)
        out += "blocks of a " + std::to_string(body) + "-byte link " + std::to_string(st.st_blocks) + "; ";
    }
    // "./" repeated to PATH_MAX - 1 bytes and then to PATH_MAX.
    for (const size_t len : {size_t(PATH_MAX - 1), size_t(PATH_MAX)}) {
      std::string p = s.root + "/";
      while (p.size() + 2 < len) p += "./";
      while (p.size() < len - 1) p.insert(s.root.size() + 1, "/");
      p += "f";
      ASSERT_EQ(p.size(), len);
      out += "stat of " + std::to_string(len) + " bytes " +
             Answer(upfs ? upfs_stat(p.c_str(), &st) : ::stat(p.c_str(), &st)) + "; ";
      out += "rename to it " +
             Answer(s.Rename("/sd", p.substr(s.root.size()), 0)) + "; ";
    }
  }
  EXPECT_EQ(got, want);
  ExpectClean();
}

}  // namespace
}  // namespace pool_test
