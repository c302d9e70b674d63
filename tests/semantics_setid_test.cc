// S_ISUID and S_ISGID after a write or truncate through upfs, as the kernel
// clears them.
#include "semantics_util.h"

namespace upfs_semantics {
namespace {

// ---------------------------------------------------------------------------
// S_ISUID and S_ISGID after a write or truncate.

TEST_F(Semantics, WritesAndTruncatesClearSetIdBitsAsTheKernelDoes) {
  NEED_ROOT();
  const mode_t modes[] = {06777, 04777, 02777, 02767, 06766};
  int n = 0;
  for (const User* writer : {&kOther, &kMember, &kOwner, static_cast<const User*>(nullptr)}) {
    for (mode_t mode : modes) {
      for (bool truncate : {false, true}) {
        Pair p = MakePair(dir_, "s" + std::to_string(n++), mode);
        std::string got = As(writer, [&] {
          int k = ::open(p.plain.c_str(), O_RDWR);
          int u = upfs_open(p.upfs.c_str(), O_RDWR);
          if (k < 0 || u < 0) return std::string("open failed: ") + upfs_last_error();
          bool ok = truncate ? ::ftruncate(k, 5) == 0 && upfs_ftruncate(u, 5) == 0
                             : ::pwrite(k, "w", 1, 0) == 1 && upfs_pwrite(u, "w", 1, 0) == 1;
          ::close(k);
          upfs_close(u);
          return std::string(ok ? "" : "write failed");
        });
        EXPECT_EQ(got, "");
        struct stat sk, su;
        ASSERT_EQ(::stat(p.plain.c_str(), &sk), 0);
        ASSERT_EQ(upfs_stat(p.upfs.c_str(), &su), 0);
        EXPECT_EQ(su.st_mode & 07777, sk.st_mode & 07777)
            << (writer ? writer->name : "root") << (truncate ? " truncates" : " writes") << " mode "
            << std::oct << mode;
      }
    }
  }
}

// A chmod through upfs while a writer has the file open is seen by the
// writer's next write (the kernel looks at every write; upfs at the first
// one of a description and after every chmod through upfs).
TEST_F(Semantics, SetIdBitsAddedWhileOpenAreClearedByTheNextWrite) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "late", 0666);
  upfs_drop_closed_files();  // see As()
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(go[1]);
    ::close(done[0]);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kOther.gid, kOther.gid, kOther.gid) != 0 ||
        ::setresuid(kOther.uid, kOther.uid, kOther.uid) != 0)
      ::_exit(2);
    int k = ::open(p.plain.c_str(), O_RDWR);
    int u = upfs_open(p.upfs.c_str(), O_RDWR);
    bool ok = k >= 0 && u >= 0 && ::pwrite(k, "a", 1, 0) == 1 && upfs_pwrite(u, "a", 1, 0) == 1;
    upfs_test::PipeWriteString(done[1], "1");
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(3);
    ok = ok && ::pwrite(k, "b", 1, 0) == 1 && upfs_pwrite(u, "b", 1, 0) == 1;
    ::close(k);
    upfs_close(u);
    upfs_drop_closed_files();  // see As()
    ::_exit(ok ? 0 : 1);
  }
  ::close(go[0]);
  ::close(done[1]);
  char c;
  ASSERT_EQ(::read(done[0], &c, 1), 1);
  ASSERT_EQ(::chmod(p.plain.c_str(), 04666), 0);
  ASSERT_EQ(upfs_chmod(p.upfs.c_str(), 04666), 0) << upfs_last_error();
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  EXPECT_EQ(upfs_test::WaitChild(pid), "exit 0");
  ::close(go[1]);
  ::close(done[0]);
  struct stat sk, su;
  ASSERT_EQ(::stat(p.plain.c_str(), &sk), 0);
  ASSERT_EQ(upfs_stat(p.upfs.c_str(), &su), 0);
  EXPECT_EQ(sk.st_mode & 07777, 0666u) << "the kernel's rule changed?";
  EXPECT_EQ(su.st_mode & 07777, sk.st_mode & 07777);
}

}  // namespace
}  // namespace upfs_semantics
