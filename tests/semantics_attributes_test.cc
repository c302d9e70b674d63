// chmod and chown of a upfs file: the kernel decides, and the change reaches
// what upfs keeps beside the file (its shared state, its marker).
#include "semantics_util.h"

namespace upfs_semantics {
namespace {

TEST_F(Semantics, ChmodAndChownReachTheSharedState) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "ch", 0600);
  int release = -1;
  pid_t holder = HoldOpen(kOwner, p.upfs, &release);
  ASSERT_GT(holder, 0) << "the owner could not open its file";
  auto other_writes = [&] {
    return As(&kOther, [&] {
      int k = ::open(p.plain.c_str(), O_RDWR);
      int u = upfs_open(p.upfs.c_str(), O_RDWR);
      std::string out = Errno(k) + "/" + Errno(u);
      if (u >= 0) out += upfs_pwrite(u, "z", 1, 0) == 1 ? " wrote" : " write failed";
      if (k >= 0) ::close(k);
      if (u >= 0) upfs_close(u);
      return out;
    });
  };
  EXPECT_EQ(other_writes(), std::string(std::strerror(EACCES)) + "/" + std::strerror(EACCES));
  // The owner opens the file to read and write for everybody.
  EXPECT_EQ(As(&kOwner, [&] {
              return Errno(::chmod(p.plain.c_str(), 0666)) + Errno(upfs_chmod(p.upfs.c_str(), 0666));
            }),
            "okok");
  EXPECT_EQ(other_writes(), "ok/ok wrote");
  // Root gives the file to the group member, who may then write through
  // its owner bits alone.
  ASSERT_EQ(::chmod(p.plain.c_str(), 0600), 0);
  ASSERT_EQ(::chown(p.plain.c_str(), kMember.uid, kMember.gid), 0);
  ASSERT_EQ(upfs_chmod(p.upfs.c_str(), 0600), 0);
  ASSERT_EQ(upfs_chown(p.upfs.c_str(), kMember.uid, kMember.gid), 0);
  EXPECT_EQ(As(&kMember, [&] {
              int u = upfs_open(p.upfs.c_str(), O_RDWR);
              std::string out = Errno(u);
              if (u >= 0) out += upfs_pwrite(u, "y", 1, 1) == 1 ? " wrote" : " write failed";
              if (u >= 0) upfs_close(u);
              return out;
            }),
            "ok wrote");
  EXPECT_EQ(other_writes(), std::string(std::strerror(EACCES)) + "/" + std::strerror(EACCES));
  ::close(release);
  EXPECT_EQ(upfs_test::WaitChild(holder), "exit 0");
  // The holder, the last user, removed the shared state it created (the
  // fixture checks): the object keeps its creator as owner, and an ACL
  // gives the new owner its access.
}

// ---------------------------------------------------------------------------
// chown and chgrp: root may; the owner may chgrp to a group it is in
// (supplementary groups count); and the new group's access reaches the
// shared state of a file that is open.

const User kOwnerInTwoGroups{"owner (also in group 61005)", 61001, 61001, {61005}};
const User kMemberOf5{"member of group 61005", 61006, 61006, {61005}};

struct ChownAttempt {
  const User* user;  // null: root
  uid_t uid;
  gid_t gid;
  const char* want;  // the kernel's result
  const char* what;
};

TEST_F(Semantics, TheOwnerMayChgrpOnlyToItsOwnGroups) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "chgrp", 0640);
  const uid_t keep = uid_t(-1);
  const ChownAttempt attempts[] = {
      {&kMember, keep, 61002, "EPERM", "a group member (not the owner) chgrps to its own group"},
      {&kOwnerInTwoGroups, keep, 61003, "EPERM", "the owner chgrps to a group it is not in"},
      {&kOwnerInTwoGroups, 61003, keep, "EPERM", "the owner gives the file away"},
      {&kOwnerInTwoGroups, keep, 61005, "ok", "the owner chgrps to its supplementary group"},
      {&kOwnerInTwoGroups, 61001, 61001, "ok", "the owner chowns to itself and its primary group"},
      {nullptr, 61003, 61003, "ok", "root gives the file away"},
      {&kOwnerInTwoGroups, keep, 61005, "EPERM", "the former owner chgrps"},
      {nullptr, 61001, 61005, "ok", "root gives it back"},
  };
  for (const ChownAttempt& a : attempts) {
    const std::string got = As(a.user, [&] {
      const int k = ::chown(p.plain.c_str(), a.uid, a.gid);
      const std::string ks = Err(k);
      const int u = upfs_chown(p.upfs.c_str(), a.uid, a.gid);
      return ks + "/" + Err(u);
    });
    EXPECT_EQ(got, std::string(a.want) + "/" + a.want) << a.what << " (kernel/upfs)";
    struct stat sk, su;
    ASSERT_EQ(::stat(p.plain.c_str(), &sk), 0);
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &su), 0) << upfs_last_error();
    EXPECT_EQ(su.st_uid, sk.st_uid) << a.what;
    EXPECT_EQ(su.st_gid, sk.st_gid) << a.what;
    EXPECT_EQ(Oct(su.st_mode & 07777), Oct(sk.st_mode & 07777)) << a.what;
  }
  EXPECT_EQ(UpfsHolds(p.upfs, Content()), "");
}

// As u: opens both files O_RDWR and writes `byte` at offset 1.
// "KERNEL/UPFS" open results, then " wrote" if both writes went through.
std::string OpenRdwrAndWrite(const User* u, const Pair& p, char byte) {
  return As(u, [&] {
    const int k = ::open(p.plain.c_str(), O_RDWR);
    const std::string ks = Err(k);
    const int f = upfs_open(p.upfs.c_str(), O_RDWR);
    std::string out = ks + "/" + Err(f);
    if (k >= 0 && f >= 0)
      out += (::pwrite(k, &byte, 1, 1) == 1 && upfs_pwrite(f, &byte, 1, 1) == 1) ? " wrote" : " write failed";
    if (k >= 0) ::close(k);
    if (f >= 0) upfs_close(f);
    return out;
  });
}

TEST_F(Semantics, ChgrpGivesTheNewGroupAccessWhileTheFileIsOpen) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "newgroup", 0660);
  int release = -1;
  const pid_t holder = HoldOpen(kOwner, p.upfs, &release);
  ASSERT_GT(holder, 0) << "the owner could not open its file";
  EXPECT_EQ(OpenRdwrAndWrite(&kMemberOf5, p, 'x'), "EACCES/EACCES") << "before the chgrp";
  EXPECT_EQ(As(&kOwnerInTwoGroups, [&] {
              const int k = ::chown(p.plain.c_str(), uid_t(-1), 61005);
              const std::string ks = Err(k);
              const int u = upfs_chown(p.upfs.c_str(), uid_t(-1), 61005);
              return ks + "/" + Err(u);
            }),
            "ok/ok");
  EXPECT_EQ(OpenRdwrAndWrite(&kMemberOf5, p, 'g'), "ok/ok wrote") << "the new group, the file held open";
  EXPECT_EQ(OpenRdwrAndWrite(&kMember, p, 'm'), "EACCES/EACCES") << "the old group";
  ::close(release);
  EXPECT_EQ(upfs_test::WaitChild(holder), "exit 0");
  Bytes want = Content();
  want[1] = 'g';
  EXPECT_EQ(UpfsHolds(p.upfs, want), "");
}

// ---------------------------------------------------------------------------
// The owner's chmod grants and revokes another user's access, whether or
// not the file is open (its shared state then exists) meanwhile.

TEST_F(Semantics, TheOwnersChmodGrantsAndRevokesAnotherUsersAccess) {
  NEED_ROOT();
  for (bool held : {false, true}) {
    const std::string when = held ? "the owner holding it open" : "nobody holding it open";
    Pair p = MakePair(dir_, held ? "grant-held" : "grant", 0600);
    int release = -1;
    const pid_t holder = held ? HoldOpen(kOwner, p.upfs, &release) : 0;
    ASSERT_GE(holder, 0) << "the owner could not open its file";
    auto owner_chmod = [&](mode_t m) {
      return As(&kOwner, [&] {
        const int k = ::chmod(p.plain.c_str(), m);
        const std::string ks = Err(k);
        const int u = upfs_chmod(p.upfs.c_str(), m);
        return ks + "/" + Err(u);
      });
    };
    EXPECT_EQ(OpenRdwrAndWrite(&kOther, p, 'o'), "EACCES/EACCES") << "mode 0600, " << when;
    EXPECT_EQ(owner_chmod(0666), "ok/ok") << when;
    EXPECT_EQ(OpenRdwrAndWrite(&kOther, p, 'o'), "ok/ok wrote") << "mode 0666, " << when;
    EXPECT_EQ(owner_chmod(0600), "ok/ok") << when;
    EXPECT_EQ(OpenRdwrAndWrite(&kOther, p, 'p'), "EACCES/EACCES") << "mode 0600 again, " << when;
    if (held) {
      ::close(release);
      EXPECT_EQ(upfs_test::WaitChild(holder), "exit 0");
    }
    Bytes want = Content();
    want[1] = 'o';
    EXPECT_EQ(UpfsHolds(p.upfs, want), "") << when;
  }
}

// ---------------------------------------------------------------------------
// The descriptor and *at forms, symlinks, and S_ISVTX.

TEST_F(Semantics, DescriptorAndAtFormsActAsThePathForms) {
  Pair p = MakePair(dir_, "forms", 0644, ::geteuid(), ::getegid());
  const int dfd = ::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  const int k = ::open(p.plain.c_str(), O_RDWR);
  const int u = upfs_open(p.upfs.c_str(), O_RDWR);
  ASSERT_GE(k, 0);
  ASSERT_GE(u, 0) << upfs_last_error();
  // Each call on both files, then the attributes compared every way upfs reads them.
  auto check = [&](const char* what, int kr, int ur) {
    EXPECT_EQ(ur, kr) << what << ": " << upfs_last_error();
    struct stat sk, s1, s2, s3, s4;
    ASSERT_EQ(::fstat(k, &sk), 0);
    ASSERT_EQ(upfs_fstat(u, &s1), 0) << what;
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &s2), 0) << what;
    ASSERT_EQ(upfs_fstatat(dfd, "forms.upfs", &s3, 0), 0) << what;
    ASSERT_EQ(upfs_fstatat(u, "", &s4, AT_EMPTY_PATH), 0) << what << ": AT_EMPTY_PATH on a upfs descriptor";
    for (const struct stat* s : {&s1, &s2, &s3, &s4}) {
      EXPECT_EQ(Oct(s->st_mode), Oct(sk.st_mode)) << what;
      EXPECT_EQ(s->st_uid, sk.st_uid) << what;
      EXPECT_EQ(s->st_gid, sk.st_gid) << what;
      EXPECT_EQ(s->st_size, off_t(Content().size())) << what << ": the upfs size";
    }
  };
  check("fchmod", ::fchmod(k, 0604), upfs_fchmod(u, 0604));
  check("fchmodat", ::fchmodat(dfd, "forms.plain", 0640, 0), upfs_fchmodat(dfd, "forms.upfs", 0640, 0));
  if (::geteuid() == 0) {
    check("fchown", ::fchown(k, 61001, 61001), upfs_fchown(u, 61001, 61001));
    check("fchownat", ::fchownat(dfd, "forms.plain", 61003, uid_t(-1), 0),
          upfs_fchownat(dfd, "forms.upfs", 61003, uid_t(-1), 0));
    check("lchown", ::lchown(p.plain.c_str(), 0, 0), upfs_lchown(p.upfs.c_str(), 0, 0));
  }
  ::close(k);
  upfs_close(u);
  ::close(dfd);
}

TEST_F(Semantics, SymlinksAreFollowedOrNotAsTheFlagsSay) {
  Pair p = MakePair(dir_, "target", 0644, ::geteuid(), ::getegid());
  const std::string link = dir_.File("link");
  ASSERT_EQ(::symlink(p.upfs.c_str(), link.c_str()), 0);
  struct stat st;
  ASSERT_EQ(upfs_stat(link.c_str(), &st), 0) << upfs_last_error();
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "upfs_stat follows the link";
  EXPECT_EQ(st.st_size, off_t(Content().size())) << "the upfs size of the target";
  ASSERT_EQ(upfs_lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "upfs_lstat";
  ASSERT_EQ(upfs_fstatat(AT_FDCWD, link.c_str(), &st, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "upfs_fstatat(AT_SYMLINK_NOFOLLOW)";
  // Times through the link reach the target; with AT_SYMLINK_NOFOLLOW only the link.
  ASSERT_EQ(upfs_utimensat(AT_FDCWD, link.c_str(), kSetTimes, 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
  EXPECT_EQ(TimesAre(st, kSetTimes[0], kSetTimes[1]), "") << "utimensat through a link";
  const struct timespec link_times[2] = {{2000000000, 1}, {2000000000, 2}};
  ASSERT_EQ(upfs_utimensat(AT_FDCWD, link.c_str(), link_times, AT_SYMLINK_NOFOLLOW), 0) << upfs_last_error();
  ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
  EXPECT_EQ(TimesAre(st, kSetTimes[0], kSetTimes[1]), "") << "AT_SYMLINK_NOFOLLOW changed the target";
  ASSERT_EQ(upfs_lstat(link.c_str(), &st), 0);
  EXPECT_EQ(TimesAre(st, link_times[0], link_times[1]), "") << "the link's own times";
  if (::geteuid() == 0) {
    ASSERT_EQ(upfs_lchown(link.c_str(), 61004, 61004), 0) << upfs_last_error();
    ASSERT_EQ(upfs_lstat(link.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 61004u) << "lchown changes the link";
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, ::geteuid()) << "lchown changed the target";
    ASSERT_EQ(upfs_chown(link.c_str(), 61005, 61005), 0) << upfs_last_error();
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 61005u) << "chown follows the link";
  }
  EXPECT_EQ(UpfsHolds(p.upfs, Content()), "");
}

// What another user may not do to a file it can read: the kernel's answers.
TEST_F(Semantics, AnotherUserMayNotChangeAttributesThroughADescriptor) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "notmine", 0644);
  const std::string got = As(&kOther, [&] {
    const int k = ::open(p.plain.c_str(), O_RDONLY);
    const int u = upfs_open(p.upfs.c_str(), O_RDONLY);
    if (k < 0 || u < 0) return std::string("open failed");
    std::string out;
    int r = ::fchmod(k, 0666);
    out += "fchmod " + Err(r);
    r = upfs_fchmod(u, 0666);
    out += "/" + Err(r);
    r = ::fchown(k, uid_t(-1), 61003);
    out += " fchown " + Err(r);
    r = upfs_fchown(u, uid_t(-1), 61003);
    out += "/" + Err(r);
    r = ::futimens(k, kSetTimes);
    out += " futimens(times) " + Err(r);
    r = upfs_futimens(u, kSetTimes);
    out += "/" + Err(r);
    r = ::futimens(k, nullptr);
    out += " futimens(NULL) " + Err(r);
    r = upfs_futimens(u, nullptr);
    out += "/" + Err(r);
    ::close(k);
    upfs_close(u);
    return out;
  });
  EXPECT_EQ(got, "fchmod EPERM/EPERM fchown EPERM/EPERM futimens(times) EPERM/EPERM futimens(NULL) EACCES/EACCES");
  struct stat st;
  ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
  EXPECT_EQ(Oct(st.st_mode & 07777), "00644");
  EXPECT_EQ(st.st_gid, kOwner.gid);
}

// S_ISVTX is the host file's upfs marker: a chmod through upfs neither keeps
// the bit (documented) nor clears the marker, so every caller still
// recognises the file, also one that may not read it.
TEST_F(Semantics, ChmodWithOrWithoutStickyBitKeepsTheFileAUpfsFile) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "vtx", 0644);
  for (mode_t m : {mode_t(01644), mode_t(0600), mode_t(0)}) {
    ASSERT_EQ(upfs_chmod(p.upfs.c_str(), m), 0) << Oct(m) << ": " << upfs_last_error();
    struct stat st;
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &st), 0);
    EXPECT_EQ(Oct(st.st_mode & 07777), Oct(m & 0777)) << "after upfs_chmod " << Oct(m);
    EXPECT_EQ(upfs_is_upfs_file(p.upfs.c_str()), 1) << "after upfs_chmod " << Oct(m);
    EXPECT_EQ(As(&kOther, [&] {
                return std::to_string(upfs_is_upfs_file(p.upfs.c_str())) + " " +
                       std::to_string(upfs_is_upfs_file(p.plain.c_str()));
              }),
              "1 0")
        << "another user, after upfs_chmod " << Oct(m);
  }
  EXPECT_EQ(UpfsHolds(p.upfs, Content()), "");
}

// The write-only case of the issue for every class: recognised without
// read permission, refused, intact.

}  // namespace
}  // namespace upfs_semantics
