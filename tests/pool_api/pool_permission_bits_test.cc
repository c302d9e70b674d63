// What users other than root may do in a pool, as the kernel has it on
// tmpfs. Directory bits: a sticky directory lets only a name's file owner,
// the directory's owner or root remove or replace the name; a
// set-group-ID directory gives new names its group, and new directories
// its set-group-ID bit, and a new file keeps S_ISGID only for a member of
// its group. Attributes: only the owner changes the mode (S_ISGID dropped
// for a non-member), the owner gives the file only to a group it is in
// and never to another user, and another user with write permission may
// set both times to now and nothing else; the system's link protections
// (protected_symlinks, protected_hardlinks, protected_regular) as the
// kernel applies them, to root too for symbolic links and O_CREAT; a write by anyone but root
// drops S_ISUID, and S_ISGID unless the file is not group-executable and
// the writer is in its group. The tests run as root (CI), so
// other callers are Credentials made up for the namespace; every
// expectation was checked against the kernel on tmpfs by a script that
// switched users.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "pool_attached_fixture.h"
#include "posix/pool_mounts.h"
#include "upfs/upfs.h"

namespace {

upfs::Credentials User(uid_t uid, gid_t gid) {
  upfs::Credentials c;
  c.uid = uid;
  c.gid = gid;
  c.groups = {gid};
  c.umask = 022;
  return c;
}

class PoolPermissionBitsTest : public pool_test::AttachedPoolTest {
 protected:
  PoolPermissionBitsTest() : AttachedPoolTest("permbits") {}
  upfs::PoolNamespace As(const upfs::Credentials& c) { return upfs::PoolNamespace(pool_.get(), &c); }
  // Creates `path` as `c` would (an open with O_CREAT, then its close).
  static upfs::Status CreateAs(upfs::PoolNamespace ns, const std::string& path, mode_t mode) {
    upfs::Resolved at;
    UPFS_RETURN_IF_ERROR(ns.Resolve(path, true, &at));
    uint64_t ino = 0;
    bool created = false;
    uint32_t gen = 0;
    UPFS_RETURN_IF_ERROR(ns.Create(at, mode, upfs::format::Consistency::kStrict, &ino, &created, &gen));
    ns.DropHold(ino, gen);
    return created ? upfs::Status::OK() : upfs::Status::Error(EEXIST, "file exists");
  }
  static upfs::Status RemoveAs(upfs::PoolNamespace ns, const std::string& path) {
    upfs::Resolved at;
    UPFS_RETURN_IF_ERROR(ns.Resolve(path, false, &at));
    return ns.Remove(at, false);
  }
  static upfs::Status RenameAs(upfs::PoolNamespace ns, const std::string& from, const std::string& to) {
    upfs::Resolved a, b;
    UPFS_RETURN_IF_ERROR(ns.Resolve(from, false, &a));
    UPFS_RETURN_IF_ERROR(ns.Resolve(to, false, &b));
    return ns.Rename(a, b, 0);
  }
  struct stat StatOf(const std::string& path) {
    struct stat st {};
    const upfs::Status s = Ns().StatPath(path, false, &st);
    EXPECT_TRUE(s.ok()) << path << ": " << s.ToString();
    return st;
  }
  // A directory made by root with exactly `mode` (chmod after the umask).
  uint64_t RootDir(const std::string& path, mode_t mode) {
    EXPECT_TRUE(Ns().Mkdir(At(path), 0777).ok());
    const uint64_t ino = At(path).ino;
    EXPECT_TRUE(Ns().Chmod(ino, mode).ok());
    return ino;
  }
};

constexpr uid_t kAlice = 1001, kBob = 1002, kCarol = 1003;

TEST_F(PoolPermissionBitsTest, AStickyDirectoryKeepsOthersFromRemovingOrReplacingNames) {
  const uint64_t t = RootDir("/t", 01777);
  const upfs::Credentials alice = User(kAlice, kAlice), bob = User(kBob, kBob), carol = User(kCarol, kCarol);
  ASSERT_TRUE(CreateAs(As(alice), "/t/a", 0644).ok());
  ASSERT_TRUE(CreateAs(As(bob), "/t/b", 0644).ok());
  EXPECT_EQ(RemoveAs(As(bob), "/t/a").err(), EPERM);
  EXPECT_EQ(RenameAs(As(bob), "/t/a", "/t/x").err(), EPERM);
  EXPECT_EQ(RenameAs(As(bob), "/t/b", "/t/a").err(), EPERM) << "another's name replaced";
  EXPECT_TRUE(StatOf("/t/a").st_uid == kAlice && StatOf("/t/b").st_uid == kBob) << "a refused call changed names";
  // The file's owner may; so may the directory's owner.
  EXPECT_TRUE(RenameAs(As(alice), "/t/a", "/t/a2").ok());
  ASSERT_TRUE(Ns().Chown(t, kCarol, kCarol).ok());
  EXPECT_TRUE(RemoveAs(As(carol), "/t/b").ok()) << "the directory's owner refused";
  // Without the bit, write permission on the directory is all it takes.
  ASSERT_TRUE(Ns().Chmod(t, 0777).ok());
  EXPECT_TRUE(RemoveAs(As(bob), "/t/a2").ok());
  DetachAndCheck();
}

TEST_F(PoolPermissionBitsTest, ASetGroupIdDirectoryGivesItsGroupAndItsBit) {
  constexpr gid_t kStaff = 2000;
  const uint64_t g = RootDir("/g", 0777);
  ASSERT_TRUE(Ns().Chown(g, 0, kStaff).ok());
  ASSERT_TRUE(Ns().Chmod(g, 02777).ok());
  const upfs::Credentials alice = User(kAlice, kAlice);
  upfs::Credentials staff_alice = alice;
  staff_alice.groups.push_back(kStaff);
  ASSERT_TRUE(CreateAs(As(alice), "/g/f", 0644).ok());
  EXPECT_EQ(StatOf("/g/f").st_gid, kStaff) << "a new file's group is not the directory's";
  ASSERT_TRUE(As(alice).Mkdir(ResolvedIn(As(alice), "/g/sub"), 0755).ok());
  const struct stat sub = StatOf("/g/sub");
  EXPECT_EQ(sub.st_gid, kStaff);
  EXPECT_TRUE(sub.st_mode & S_ISGID) << "a new directory lost the set-group-ID bit";
  // S_ISGID asked for a new file of a group its maker is not in: dropped,
  // as the kernel drops it; kept for a member.
  ASSERT_TRUE(CreateAs(As(alice), "/g/h", 02755).ok());
  EXPECT_FALSE(StatOf("/g/h").st_mode & S_ISGID);
  ASSERT_TRUE(CreateAs(As(staff_alice), "/g/m", 02755).ok());
  EXPECT_TRUE(StatOf("/g/m").st_mode & S_ISGID);
  // Without the bit, a new name takes its maker's group.
  ASSERT_TRUE(Ns().Chmod(g, 0777).ok());
  ASSERT_TRUE(CreateAs(As(alice), "/g/plain", 0644).ok());
  EXPECT_EQ(StatOf("/g/plain").st_gid, kAlice);
  DetachAndCheck();
}

TEST_F(PoolPermissionBitsTest, ModeOwnerAndTimesChangeOnlyAsTheKernelAllows) {
  constexpr gid_t kStaff = 2000, kOther = 3000, kAlices = 3001;
  ASSERT_TRUE(CreateAs(Ns(), "/f", 0644).ok());
  const uint64_t f = At("/f").ino;
  ASSERT_TRUE(Ns().Chown(f, kAlice, kStaff).ok());
  ASSERT_TRUE(Ns().Chmod(f, 0666).ok());
  upfs::Credentials alice = User(kAlice, kAlice);
  alice.groups.push_back(kAlices);
  const upfs::Credentials bob = User(kBob, kBob);
  EXPECT_EQ(As(bob).Chmod(f, 0600).err(), EPERM);
  EXPECT_TRUE(As(alice).Chmod(f, 02644).ok());
  EXPECT_EQ(StatOf("/f").st_mode, mode_t(S_IFREG | 0644)) << "S_ISGID kept for a non-member of the group";
  EXPECT_EQ(As(alice).Chown(f, kBob, gid_t(-1)).err(), EPERM) << "a file given to another user";
  EXPECT_EQ(As(alice).Chown(f, uid_t(-1), kOther).err(), EPERM) << "a file given to a group its owner is not in";
  EXPECT_EQ(As(bob).Chown(f, uid_t(-1), kBob).err(), EPERM);
  EXPECT_TRUE(As(alice).Chown(f, uid_t(-1), kAlices).ok());
  EXPECT_TRUE(StatOf("/f").st_uid == kAlice && StatOf("/f").st_gid == kAlices);
  // Times: another user with write permission, now and only now.
  ASSERT_TRUE(Ns().Chmod(f, 0666).ok());
  const struct timespec explicit_times[2] = {{1, 5}, {1, 5}};
  const struct timespec bad_nanoseconds[2] = {{1, 2000000000}, {1, 5}};
  EXPECT_TRUE(As(bob).Utimens(f, nullptr).ok());
  EXPECT_EQ(As(bob).Utimens(f, explicit_times).err(), EPERM);
  EXPECT_EQ(As(bob).Utimens(f, bad_nanoseconds).err(), EINVAL) << "the kernel checks them before permission";
  EXPECT_NE(StatOf("/f").st_mtim.tv_sec, 1) << "a refused call set the times";
  EXPECT_TRUE(As(alice).Utimens(f, explicit_times).ok());
  EXPECT_EQ(StatOf("/f").st_mtim.tv_sec, 1);
  ASSERT_TRUE(Ns().Chmod(f, 0644).ok());
  EXPECT_EQ(As(bob).Utimens(f, nullptr).err(), EACCES);
  DetachAndCheck();
}

// protected_symlinks, as the kernel applies it (checked with the switch
// set on this VM for a moment): in a sticky world-writable directory, a
// symbolic link is followed only by its owner, or if the directory's
// owner owns it too; root is no exception.
TEST_F(PoolPermissionBitsTest, ProtectedSymlinksRefuseOthersLinksInStickyDirectories) {
  const upfs::Credentials alice_plain = User(kAlice, kAlice);
  upfs::Credentials alice = alice_plain, root;
  alice.protected_symlinks = root.protected_symlinks = true;
  for (uid_t dir_owner : {kAlice, kCarol}) {
    const std::string d = "/d" + std::to_string(dir_owner);
    const uint64_t dir = RootDir(d, 01777);
    ASSERT_TRUE(Ns().Chown(dir, dir_owner, dir_owner).ok());
    ASSERT_TRUE(CreateAs(Ns(), d + "/f", 0644).ok());
    for (uid_t link_owner : {kBob, kAlice, dir_owner}) {
      const std::string l = d + "/l" + std::to_string(link_owner);
      if (Ns().Symlink(At(l), "f").err() == EEXIST) continue;
      upfs::Resolved link;  // the link itself, not what it leads to
      ASSERT_TRUE(Ns().Resolve(l, /*follow=*/false, &link).ok());
      ASSERT_TRUE(Ns().Chown(link.ino, link_owner, link_owner).ok());
    }
  }
  struct stat st;
  const auto follow = [&](const upfs::Credentials& who, const std::string& p) {
    return As(who).StatPath(p, true, &st).err();
  };
  EXPECT_EQ(follow(alice, "/d1001/l1002"), EACCES) << "another's link in her own sticky directory";
  EXPECT_EQ(follow(alice, "/d1001/l1001"), 0);
  EXPECT_EQ(follow(alice, "/d1003/l1002"), EACCES);
  EXPECT_EQ(follow(alice, "/d1003/l1001"), 0) << "her own link";
  EXPECT_EQ(follow(alice, "/d1003/l1003"), 0) << "the directory owner's link";
  EXPECT_EQ(follow(root, "/d1003/l1002"), EACCES) << "root is no exception";
  EXPECT_EQ(follow(alice, "/d1003/l1002/"), EACCES) << "followed as a directory";
  EXPECT_EQ(As(alice).StatPath("/d1003/l1002", false, &st).err(), 0) << "not followed: no check";
  EXPECT_EQ(follow(alice_plain, "/d1003/l1002"), 0) << "with the switch off";
  ASSERT_TRUE(Ns().Chmod(At("/d1003").ino, 0777).ok());
  EXPECT_EQ(follow(alice, "/d1003/l1002"), 0) << "a directory that is not sticky";
  DetachAndCheck();
}

// protected_hardlinks, as the kernel's may_linkat: the file's owner and
// root may link it; anyone else only a regular file that is neither
// set-user-ID nor executable set-group-ID and that they may read and
// write. The kernel's answers for these cases are pool_permission_matrix_test's.
TEST_F(PoolPermissionBitsTest, ProtectedHardlinksRefuseLinksToOthersFiles) {
  RootDir("/t", 0777);
  upfs::Credentials alice = User(kAlice, kAlice), root;
  alice.protected_hardlinks = root.protected_hardlinks = true;
  const upfs::Credentials alice_plain = User(kAlice, kAlice);
  const auto make = [&](const std::string& n, uid_t owner, mode_t mode) {
    ASSERT_TRUE(CreateAs(Ns(), n, 0644).ok());
    ASSERT_TRUE(Ns().Chown(At(n).ino, owner, owner).ok());
    ASSERT_TRUE(Ns().Chmod(At(n).ino, mode).ok());
  };
  make("/t/bobs-rw", kBob, 0666);
  make("/t/bobs-r", kBob, 0644);
  make("/t/bobs-suid", kBob, 04666);
  make("/t/bobs-sgid-x", kBob, 02676);
  make("/t/alices", kAlice, 0600);
  const auto link = [&](const upfs::Credentials& who, const std::string& from, const std::string& to) {
    return As(who).Link(ResolvedIn(As(who), from), ResolvedIn(As(who), to)).err();
  };
  EXPECT_EQ(link(alice, "/t/bobs-rw", "/t/1"), 0) << "a safe source";
  EXPECT_EQ(link(alice, "/t/bobs-r", "/t/2"), EPERM) << "one she may not write";
  EXPECT_EQ(link(alice, "/t/bobs-suid", "/t/3"), EPERM);
  EXPECT_EQ(link(alice, "/t/bobs-sgid-x", "/t/4"), EPERM);
  EXPECT_EQ(link(alice, "/t/alices", "/t/5"), 0) << "her own";
  EXPECT_EQ(link(root, "/t/bobs-r", "/t/6"), 0) << "root";
  EXPECT_EQ(link(alice_plain, "/t/bobs-r", "/t/7"), 0) << "with the switch off";
  DetachAndCheck();
}

// protected_regular, as the kernel's may_create_in_sticky (checked with
// the switch at 1 and at 2 on this VM for a moment): an open with O_CREAT
// of an existing file of another user in a sticky directory that is
// world-writable (or, at 2, group-writable) is refused, unless the
// directory's owner owns the file; root included.
TEST_F(PoolPermissionBitsTest, ProtectedRegularRefusesCreatingOverOthersFilesInStickyDirectories) {
  upfs::Credentials alice = User(kAlice, kAlice), root;
  alice.groups.push_back(2000);
  for (const char* d : {"/w", "/g", "/own", "/plain"}) {
    const std::string dir(d);
    const mode_t mode = dir == "/w" || dir == "/own" ? 01777 : dir == "/g" ? 01770 : 0777;
    const uint64_t ino = RootDir(dir, mode);
    ASSERT_TRUE(Ns().Chown(ino, dir == "/own" ? kAlice : kCarol, 2000).ok());
    for (uid_t owner : {kBob, kAlice, kCarol}) {
      const std::string f = dir + "/f" + std::to_string(owner);
      ASSERT_TRUE(CreateAs(Ns(), f, 0666).ok());
      ASSERT_TRUE(Ns().Chown(At(f).ino, owner, owner).ok());
    }
  }
  const auto creat_over = [&](const upfs::Credentials& who, const std::string& f) {
    const upfs::Resolved r = ResolvedIn(As(who), f);
    return As(who).MayCreateOver(r.dir, r.ino).err();
  };
  for (int level : {1, 2}) {
    alice.protected_regular = root.protected_regular = level;
    EXPECT_EQ(creat_over(alice, "/w/f1002"), EACCES) << level;
    EXPECT_EQ(creat_over(alice, "/w/f1001"), 0) << "her own file";
    EXPECT_EQ(creat_over(alice, "/w/f1003"), 0) << "the directory owner's";
    EXPECT_EQ(creat_over(alice, "/g/f1002"), level == 2 ? EACCES : 0) << "group-writable, level " << level;
    EXPECT_EQ(creat_over(alice, "/own/f1002"), EACCES) << "in her own directory";
    EXPECT_EQ(creat_over(alice, "/plain/f1002"), 0) << "not sticky";
    EXPECT_EQ(creat_over(root, "/w/f1002"), EACCES) << "root is no exception";
  }
  alice.protected_regular = 0;
  EXPECT_EQ(creat_over(alice, "/w/f1002"), 0) << "with the switch off";
  // Through the C API, as root (whom the rule does not spare): the open
  // asks it, with the switch the mount read (set here by hand: this
  // machine's may be 0).
  pool_.reset();
  const std::string mnt = "/upfs-permbits-" + std::to_string(getpid());
  ASSERT_EQ(upfs_mount(path_.c_str(), mnt.c_str()), 0) << upfs_last_error();
  {
    upfs::PoolPath pp;  // holds the mount while it lives
    ASSERT_TRUE(upfs::InPool(AT_FDCWD, mnt.c_str(), &pp));
    pp.mount->effective.protected_regular = 1;
  }
  errno = 0;
  EXPECT_EQ(upfs_open((mnt + "/w/f1002").c_str(), O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, EACCES);
  const int fd = upfs_open((mnt + "/w/f1002").c_str(), O_WRONLY);
  EXPECT_GE(fd, 0) << "refused without O_CREAT";
  if (fd >= 0) upfs_close(fd);
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0);
  DetachAndCheck();
}

// Through the C API in a child that is another user (the writer's rights
// are the process's own), writing files it does not own. The kernel
// (tmpfs, Linux 6.18, checked the same way) leaves 04666 at 0666, 02676 at
// 0676, 02666 at 0666 for a writer outside the group and at 02666 for one
// inside it. Before, the pool asked the writer to own the file (a chmod),
// and every such write failed with EPERM.
TEST_F(PoolPermissionBitsTest, AWriteByAnotherUserDropsTheSetIdBitsAsTheKernelDoes) {
  if (geteuid() != 0) GTEST_SKIP() << "becomes another user: needs root";
  constexpr gid_t kGroup = 2000;
  const struct {
    const char* name;
    mode_t mode, outsider, member;
  } cases[] = {{"/suid", 04666, 0666, 0666}, {"/sgid-x", 02676, 0676, 0676}, {"/sgid", 02666, 0666, 02666}};
  for (const auto& c : cases) {
    for (const char* who : {"-out", "-in"}) {
      const std::string n = std::string(c.name) + who;
      ASSERT_TRUE(CreateAs(Ns(), n, 0644).ok());
      ASSERT_TRUE(Ns().Chown(At(n).ino, kCarol, kGroup).ok());
      ASSERT_TRUE(Ns().Chmod(At(n).ino, c.mode).ok());
    }
  }
  pool_.reset();
  ASSERT_EQ(chmod(path_.c_str(), 0666), 0);  // the writer attaches too
  // One child a writer, outside the group or in it (a process that gave up
  // root cannot change its groups again).
  const auto write_as = [&](const char* suffix, bool member) {
    const std::string mnt = "/upfs-permbits-" + std::to_string(getpid());
    const pid_t child = fork();
    if (child == 0) {
      const gid_t groups[] = {kAlice, kGroup};
      if (setgroups(member ? 2 : 1, groups) != 0 || setgid(kAlice) != 0 || setuid(kAlice) != 0) _exit(2);
      if (upfs_mount(path_.c_str(), mnt.c_str()) != 0) _exit(3);
      for (const auto& c : cases) {
        const int fd = upfs_open((mnt + c.name + suffix).c_str(), O_WRONLY);
        if (fd < 0) _exit(4);
        if (upfs_write(fd, "x", 1) != 1) _exit(5);  // EPERM here before
        upfs_close(fd);
      }
      _exit(upfs_umount(mnt.c_str()) == 0 ? 0 : 6);
    }
    int status = 0;
    return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(write_as("-out", false), 0) << "the outsider's child failed at that step";
  ASSERT_EQ(write_as("-in", true), 0) << "the member's child failed at that step";
  // Root (this process: CAP_FSETID) writes a set-user-ID file of its own
  // and keeps the bit, as with the kernel.
  {
    const std::string mnt = "/upfs-permbits-root-" + std::to_string(getpid());
    ASSERT_EQ(upfs_mount(path_.c_str(), mnt.c_str()), 0) << upfs_last_error();
    const int fd = upfs_open((mnt + "/suid-out").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(upfs_fchmod(fd, 04666), 0);
    ASSERT_EQ(upfs_pwrite(fd, "y", 1, 0), 1);
    upfs_close(fd);
    ASSERT_EQ(upfs_umount(mnt.c_str()), 0);
  }
  ASSERT_TRUE(upfs::Pool::Attach(path_, &pool_).ok());
  EXPECT_EQ(StatOf("/suid-out").st_mode & 07777, 04666u) << "root's write dropped S_ISUID";
  ASSERT_TRUE(Ns().Chmod(At("/suid-out").ino, 0666).ok());
  for (const auto& c : cases) {
    EXPECT_EQ(StatOf(std::string(c.name) + "-out").st_mode & 07777, c.outsider) << c.name << ", a writer outside the group";
    EXPECT_EQ(StatOf(std::string(c.name) + "-in").st_mode & 07777, c.member) << c.name << ", a writer in the group";
    EXPECT_EQ(StatOf(std::string(c.name) + "-in").st_size, 1);
  }
  DetachAndCheck();
}

}  // namespace
