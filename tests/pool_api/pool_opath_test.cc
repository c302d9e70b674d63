// A pool descriptor opened with O_PATH only names its file, as the
// kernel's does (LookupForUse, PathOpen in src/posix/pool_api.cc): every
// call that reads, writes, seeks, syncs, locks or changes the file through
// it answers EBADF; fstat, close, dup and the *at calls work; a symbolic
// link is opened itself under O_NOFOLLOW; the flags that O_PATH ignores
// change nothing. Each call is made on a tmpfs file too and the answers
// compared.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "pool_side.h"
#include "pool_test_fixture.h"
#include "test_util.h"

namespace pool_test {
namespace {

std::string Answer(long r) { return r >= 0 ? "ok" : strerrorname_np(errno); }

TEST_F(PoolTest, AnOPathDescriptorOnlyNamesItsFile) {
  upfs_test::TempDir kernel_dir;
  std::string got, want;
  for (const bool upfs : {false, true}) {
    Side s{upfs ? P("t") : kernel_dir.File("t"), upfs};
    std::string& out = upfs ? got : want;
    const auto answer = [&](const char* what, long r) { out += std::string(what) + " " + Answer(r) + "; "; };
    ASSERT_EQ(s.Mkdir("", 0755), 0);
    const int w = s.Open("/f", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(w, 0);
    ASSERT_EQ(s.Pwrite(w, "hello", 5, 0), 5);
    s.Close(w);
    ASSERT_EQ(s.Symlink("f", "/l"), 0);
    // O_CREAT and O_TRUNC are ignored with O_PATH: nothing made, nothing cut.
    const int fd = s.Open("/f", O_PATH | O_TRUNC | O_CREAT | O_RDWR, 0644);
    answer("open", fd);
    char b[8];
    answer("read", upfs ? upfs_read(fd, b, 1) : ::read(fd, b, 1));
    answer("pread", s.Pread(fd, b, 1, 0));
    answer("write", upfs ? upfs_write(fd, "x", 1) : ::write(fd, "x", 1));
    answer("lseek", upfs ? upfs_lseek(fd, 0, SEEK_SET) : ::lseek(fd, 0, SEEK_SET));
    answer("ftruncate", s.Ftruncate(fd, 0));
    answer("fsync", upfs ? upfs_fsync(fd) : ::fsync(fd));
    answer("fchmod", upfs ? upfs_fchmod(fd, 0600) : ::fchmod(fd, 0600));
    answer("futimens", upfs ? upfs_futimens(fd, nullptr) : ::futimens(fd, nullptr));
    struct flock lk{};
    lk.l_type = F_RDLCK;
    lk.l_whence = SEEK_SET;
    answer("record lock", upfs ? upfs_fcntl_lock(fd, F_SETLK, &lk) : ::fcntl(fd, F_SETLK, &lk));
    struct stat st;
    answer("fstat", upfs ? upfs_fstat(fd, &st) : ::fstat(fd, &st));
    out += "size " + std::to_string(st.st_size) + "; ";
    answer("fstatat empty path", upfs ? upfs_fstatat(fd, "", &st, AT_EMPTY_PATH) : ::fstatat(fd, "", &st, AT_EMPTY_PATH));
    answer("close", s.Close(fd));
    // A symbolic link itself, under O_NOFOLLOW.
    const int lfd = s.Open("/l", O_PATH | O_NOFOLLOW, 0);
    answer("open link itself", lfd);
    if (lfd >= 0) {
      answer("fstat of it", upfs ? upfs_fstat(lfd, &st) : ::fstat(lfd, &st));
      out += std::string("a link: ") + (S_ISLNK(st.st_mode) ? "yes" : "no") + "; ";
      s.Close(lfd);
    }
    answer("O_DIRECTORY of a file", s.Open("/f", O_PATH | O_DIRECTORY, 0));
    // A directory's: a start for the *at calls, not for a listing.
    const int dfd = s.Open("", O_PATH | O_DIRECTORY, 0);
    answer("open directory", dfd);
    const int g = upfs ? upfs_openat(dfd, "f", O_RDONLY) : ::openat(dfd, "f", O_RDONLY);
    answer("openat through it", g);
    if (g >= 0) s.Close(g);
    char dents[256];
    answer("getdents64", upfs ? upfs_getdents64(dfd, dents, sizeof dents) : syscall(SYS_getdents64, dfd, dents, sizeof dents));
    s.Close(dfd);
    out += "content " + s.Content("/f") + "; ";
  }
  EXPECT_EQ(got, want);
  ExpectClean();
}

}  // namespace
}  // namespace pool_test
