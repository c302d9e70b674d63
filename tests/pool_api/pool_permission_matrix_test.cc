// Permission checks in a pool against the kernel's, as a user other than
// root and as a set-user-ID program: a differential test. Root lays out the same trees on a tmpfs
// directory and in a pool (a directory d, a file d/f, each with a mode
// from a list and an owner that is the caller, a group the caller is in,
// or neither, a symbolic link d/ln, the file owner's, and a directory e
// all may write); then a child process that is that user runs the same calls
// on both sides, through the kernel and through the C API, and every
// call's result (0 or its errno) must be the kernel's. Root passes nearly
// every check, so the tests that run as root cannot see these.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "pool_side.h"
#include "upfs/upfs.h"

namespace {

constexpr uid_t kCaller = 1001, kOtherUser = 1002;
constexpr gid_t kCallerGroup = 1001, kSharedGroup = 2000, kOtherGroup = 1002;

// Whose a directory or file is, seen from the caller.
enum class Whose { kCallers, kGroups, kOthers };
uid_t UidOf(Whose w) { return w == Whose::kCallers ? kCaller : kOtherUser; }
const char* NameOf(Whose w) {
  return w == Whose::kCallers ? "the caller's" : w == Whose::kGroups ? "its group's" : "another's";
}
gid_t GidOf(Whose w) {
  return w == Whose::kCallers ? kCallerGroup : w == Whose::kGroups ? kSharedGroup : kOtherGroup;
}

struct Tree {
  mode_t dir_mode, file_mode;
  Whose dir_owner, file_owner;
};

std::vector<Tree> Trees() {
  std::vector<Tree> out;
  for (mode_t d : {0777, 0755, 0700, 0711, 0730, 0300, 01777, 01733})
    for (mode_t f : {0666, 0644, 0600, 0464, 0246, 0200, 0000, 04766, 02766, 02676})
      for (Whose dw : {Whose::kCallers, Whose::kGroups, Whose::kOthers})
        for (Whose fw : {Whose::kCallers, Whose::kOthers}) out.push_back(Tree{d, f, dw, fw});
  return out;
}

// The calls made on each tree, in order (each side's tree changes as the
// calls succeed, the same way on both sides while they agree), on side
// `s` whose root is the tree's top directory. The results: 0 or errno,
// one per call.
std::vector<int> RunCalls(pool_test::Side s) {
  const auto r = [](int rc) { return rc == 0 ? 0 : errno; };
  const auto open_close = [&](const std::string& p, int flags) {
    const int fd = s.Open(p, flags, 0644);
    if (fd < 0) return errno;
    s.Close(fd);
    return 0;
  };
  struct stat st;
  std::vector<int> out;
  out.push_back(r(s.Stat("/d/f", &st)));
  out.push_back(r(s.Stat("/d/ln", &st)));
  out.push_back(open_close("/d/f", O_RDONLY));
  out.push_back(open_close("/d/f", O_WRONLY));
  out.push_back(open_close("/d/f", O_RDWR | O_TRUNC));
  for (int m : {R_OK, W_OK, X_OK, F_OK}) out.push_back(r(s.Access("/d/f", m)));
  out.push_back(r(s.Access("/d", W_OK | X_OK)));
  out.push_back(open_close("/d/new", O_CREAT | O_EXCL | O_WRONLY));
  out.push_back(r(s.Mkdir("/d/sub", 0755)));
  out.push_back(r(s.UtimensNow("/d/f")));
  out.push_back(open_close("/d/f", O_RDONLY | O_NOATIME));
  out.push_back(open_close("/d/ln", O_RDONLY | O_NOFOLLOW));
  char target[16];
  out.push_back(s.Readlink("/d/ln", target, sizeof(target)) >= 0 ? 0 : errno);
  out.push_back(r(s.Link("/d/ln", "/d/hardln")));
  // The mode (set-ID bits a call dropped), or -errno.
  const auto mode_of_f = [&] { return s.Stat("/d/f", &st) == 0 ? int(st.st_mode & 07777) : -errno; };
  out.push_back(r(s.Chown("/d/f", uid_t(-1), kSharedGroup)));
  out.push_back(mode_of_f());
  out.push_back(r(s.Link("/d/f", "/d/hard")));
  out.push_back(r(s.Symlink("f", "/d/soft")));
  out.push_back(open_close("/d", O_RDONLY | O_DIRECTORY));
  // Renames: a directory to another parent and back (it needs write on
  // itself for its ".."), an exchange, a rename that may not replace.
  out.push_back(r(s.Rename("/d/sub", "/e/sub", 0)));
  out.push_back(r(s.Rename("/e/sub", "/d/sub", 0)));
  out.push_back(r(s.Rename("/d/new", "/d/f", RENAME_EXCHANGE)));
  out.push_back(r(s.Rename("/d/new", "/d/f", RENAME_NOREPLACE)));
  const auto write_one = [&] {
    const int fd = s.Open("/d/f", O_WRONLY, 0);
    if (fd < 0) return errno;
    const int e = (s.pool ? upfs_write(fd, "x", 1) : write(fd, "x", 1)) == 1 ? 0 : errno;
    s.Close(fd);
    return e;
  };
  out.push_back(write_one());
  out.push_back(mode_of_f());
  out.push_back(r(s.Truncate("/d/f", 1)));
  out.push_back(mode_of_f());
  // O_RDONLY | O_TRUNC truncates (Linux), given write permission.
  out.push_back(open_close("/d/f", O_RDONLY | O_TRUNC));
  out.push_back(s.Stat("/d/f", &st) == 0 ? int(st.st_size) : -errno);
  out.push_back(r(s.Chmod("/d/f", 0640)));
  out.push_back(r(s.Rename("/d/f", "/d/g", 0)));
  out.push_back(r(s.Unlink(s.Stat("/d/g", &st) == 0 ? "/d/g" : "/d/f")));
  out.push_back(r(s.Rmdir("/d/sub")));
  out.push_back(r(s.Rmdir("/d")));
  return out;
}

const char* const kCallNames[] = {"stat f", "stat ln (follows)", "open f r", "open f w",
                                  "open f rw|trunc", "access f R", "access f W", "access f X",
                                  "access f F", "access d WX", "create d/new", "mkdir d/sub",
                                  "utimens f", "open f noatime", "open ln nofollow", "readlink ln",
                                  "link ln", "chgrp f", "mode f after chgrp", "link f hard",
                                  "symlink soft", "open d", "rename d/sub e/sub",
                                  "rename e/sub d/sub", "exchange new f", "noreplace new f",
                                  "write f", "mode f after write", "truncate f",
                                  "mode f after truncate", "open f r|trunc", "size of f", "chmod f", "rename f g", "unlink",
                                  "rmdir d/sub", "rmdir d"};

class PoolPermissionMatrix : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(getpid());
    kernel_ = "/dev/shm/upfs-permmatrix-" + tag + ".k";
    pool_ = "/dev/shm/upfs-permmatrix-" + tag + ".pool";
    mnt_ = "/upfs-permmatrix-" + tag;
    unlink(pool_.c_str());
    ASSERT_EQ(mkdir(kernel_.c_str(), 0755), 0);
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_EQ(chmod(pool_.c_str(), 0666), 0);  // the caller attaches too
  }
  void TearDown() override {
    std::system(("rm -rf '" + kernel_ + "'").c_str());
    unlink(pool_.c_str());
  }
  std::string kernel_, pool_, mnt_;
};

// Who the caller is: a user other than root, or a set-user-ID program of
// another (real ids the caller's, effective ids another user's: access()
// answers for the real ones, every other call for the effective ones).
struct Caller {
  const char* name;
  uid_t ruid, euid;
  gid_t rgid, egid;
};
constexpr Caller kCallers[] = {{"another user", kCaller, kCaller, kCallerGroup, kCallerGroup},
                               {"a set-user-ID program", kCaller, kOtherUser, kCallerGroup, kOtherGroup}};

// Root lays out tree i at <side>/<prefix><i>/d/f on both sides.
void LayOut(const std::vector<Tree>& trees, const std::string& kernel, const std::string& mnt,
            const std::string& prefix) {
  for (size_t i = 0; i < trees.size(); ++i) {
    const Tree& t = trees[i];
    for (bool pool : {false, true}) {
      pool_test::Side s{(pool ? mnt : kernel) + "/" + prefix + std::to_string(i), pool};
      ASSERT_EQ(pool ? upfs_mkdir(s.root.c_str(), 0755) : mkdir(s.root.c_str(), 0755), 0);
      ASSERT_EQ(s.Mkdir("/d", 0700), 0);
      const int fd = s.Open("/d/f", O_CREAT | O_WRONLY, 0600);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(s.Close(fd), 0);
      ASSERT_EQ(s.Chown("/d/f", UidOf(t.file_owner), GidOf(t.file_owner)), 0);
      ASSERT_EQ(s.Chmod("/d/f", t.file_mode), 0);
      // A symbolic link to f, the file owner's (protected_symlinks).
      ASSERT_EQ(s.Symlink("f", "/d/ln"), 0);
      ASSERT_EQ(s.Lchown("/d/ln", UidOf(t.file_owner), GidOf(t.file_owner)), 0);
      ASSERT_EQ(s.Chown("/d", UidOf(t.dir_owner), GidOf(t.dir_owner)), 0);
      // A second directory, writable by all, another user's.
      ASSERT_EQ(s.Mkdir("/e", 0777), 0);
      ASSERT_EQ(s.Chmod("/e", 0777), 0);
      ASSERT_EQ(s.Chown("/e", kOtherUser, kOtherGroup), 0);
      ASSERT_EQ(s.Chmod("/d", t.dir_mode), 0);
    }
  }
}

// A child that becomes `c`, mounts the pool and makes the calls on every
// tree of `prefix`, both sides, writing each side's results as a line to
// `fd`. Its exit status: 0, or the step that failed.
pid_t CallAs(const Caller& c, size_t trees, const std::string& kernel, const std::string& pool,
             const std::string& mnt, const std::string& prefix, int fd) {
  const pid_t child = fork();
  if (child != 0) return child;
  const gid_t groups[] = {kCallerGroup, kSharedGroup};
  if (setgroups(2, groups) != 0 || setresgid(c.rgid, c.egid, c.egid) != 0 || setresuid(c.ruid, c.euid, c.euid) != 0)
    _exit(2);
  umask(022);
  if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) _exit(3);
  FILE* w = fdopen(fd, "w");
  for (size_t i = 0; i < trees; ++i) {
    for (bool in_pool : {false, true}) {
      for (int e : RunCalls({(in_pool ? mnt : kernel) + "/" + prefix + std::to_string(i), in_pool}))
        std::fprintf(w, "%d ", e);
      std::fprintf(w, "\n");
    }
  }
  std::fclose(w);
  _exit(upfs_umount(mnt.c_str()) == 0 ? 0 : 4);
}

// Reads a child's lines; reports each tree whose two sides differ (the
// first call that does, named). The kernel's different answers go to
// `kernel_answers`.
int Disagreements(FILE* rd, const std::vector<Tree>& trees, const Caller& c, std::set<std::string>* kernel_answers) {
  char line[2][512];
  int disagreements = 0;
  for (size_t i = 0; i < trees.size(); ++i) {
    if (!std::fgets(line[0], sizeof(line[0]), rd) || !std::fgets(line[1], sizeof(line[1]), rd)) {
      ADD_FAILURE() << c.name << ": the child stopped at tree " << i;
      return disagreements + 1;
    }
    kernel_answers->insert(line[0]);
    if (std::string(line[0]) == line[1]) continue;
    const Tree& t = trees[i];
    std::vector<int> k, p;
    for (int s = 0; s < 2; ++s) {
      int v, n = 0;
      for (const char* at = line[s]; std::sscanf(at, "%d%n", &v, &n) == 1; at += n) (s ? p : k).push_back(v);
    }
    size_t j = 0;
    while (j < k.size() && j < p.size() && k[j] == p[j]) ++j;
    if (++disagreements <= 20)
      ADD_FAILURE() << c.name << ": d " << std::oct << t.dir_mode << " " << NameOf(t.dir_owner) << ", f "
                    << t.file_mode << " " << NameOf(t.file_owner) << std::dec << ": "
                    << (j < std::size(kCallNames) ? kCallNames[j] : "?") << ": kernel " << (j < k.size() ? k[j] : -1)
                    << ", pool " << (j < p.size() ? p[j] : -1);
  }
  return disagreements;
}

TEST_F(PoolPermissionMatrix, EveryCallAsAnotherUserGetsTheKernelsAnswer) {
  if (geteuid() != 0) GTEST_SKIP() << "lays out other users' files and becomes another user: needs root";
  const std::vector<Tree> trees = Trees();
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  for (size_t c = 0; c < std::size(kCallers); ++c) LayOut(trees, kernel_, mnt_, "t" + std::to_string(c) + "-");
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  if (HasFatalFailure()) return;
  for (size_t c = 0; c < std::size(kCallers); ++c) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t child = CallAs(kCallers[c], trees.size(), kernel_, pool_, mnt_, "t" + std::to_string(c) + "-", out[1]);
    ASSERT_GT(child, 0);
    close(out[1]);
    FILE* rd = fdopen(out[0], "r");
    std::set<std::string> kernel_answers;  // a test whose calls all failed alike would prove nothing
    const int disagreements = Disagreements(rd, trees, kCallers[c], &kernel_answers);
    std::fclose(rd);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << kCallers[c].name << ": the child failed at step " << WEXITSTATUS(status);
    EXPECT_EQ(disagreements, 0) << kCallers[c].name << ", of " << trees.size() << " trees";
    if (std::getenv("UPFS_TEST_VERBOSE"))
      for (const std::string& a : kernel_answers) std::printf("%s", a.c_str());
    EXPECT_GE(kernel_answers.size(), 12u) << "the trees hardly differ: are the calls reaching them?";
    std::printf("%s: %zu trees, %zu different answers of the kernel, %d disagreements\n", kCallers[c].name,
                trees.size(), kernel_answers.size(), disagreements);
  }
}

}  // namespace
