// A rename resolves both its paths in one hold of the index lock
// (PoolNamespace::ResolveTwo), and when both name one directory with the
// same bytes, looks up only the second path's last name there. Every case
// here runs the same rename in a pool and in a kernel tmpfs directory
// holding the same tree: the same error, and the same tree after it
// (pool_side.h's Describe: names, modes, link counts, sizes, contents,
// link targets). The cases cover what the shortcut must leave to the full
// walk: a last name that is a dot entry, too long, or has a trailing
// slash, a symbolic link as the last name (replaced, not followed), a
// directory reached through a link, directories that differ, and a
// directory below the one that moves.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <cerrno>
#include <string>
#include <vector>

#include "pool_side.h"
#include "pool_test_fixture.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using pool_test::Describe;
using pool_test::Side;

class PoolRenamePair : public pool_test::PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    char tmpl[] = "/dev/shm/upfs-renamepair.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    kernel_.root = tmpl;
    pool_side_.root = mnt_;
    for (Side* s : {&kernel_, &pool_side_}) {
      ASSERT_EQ(s->Mkdir("/d", 0755), 0);
      ASSERT_EQ(s->Mkdir("/e", 0755), 0);
      for (const char* f : {"/d/a", "/d/b", "/d/h1"}) Make(*s, f);
      ASSERT_EQ(s->Link("/d/h1", "/d/h2"), 0);
      for (const char* dir : {"/d/sub", "/d/empty", "/d/full"}) ASSERT_EQ(s->Mkdir(dir, 0755), 0);
      Make(*s, "/d/full/f");
      ASSERT_EQ(s->Symlink("sub", "/d/sym"), 0);
      ASSERT_EQ(s->Symlink("nowhere", "/d/dangling"), 0);
      ASSERT_EQ(s->Symlink("d", "/l"), 0);
    }
  }
  void TearDown() override {
    upfs_test::RemoveTree(kernel_.root);
    PoolTest::TearDown();
  }

  // A file holding its own path.
  static void Make(Side& s, const std::string& p) {
    const int fd = s.Open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << p;
    EXPECT_EQ(s.Pwrite(fd, p.data(), p.size(), 0), ssize_t(p.size()));
    EXPECT_EQ(s.Close(fd), 0);
  }
  static int Rename(Side& s, const std::string& from, const std::string& to, unsigned flags) {
    return s.Rename("/" + from, "/" + to, flags) == 0 ? 0 : errno;
  }

  // The rename on both sides: the same error, the same trees after it.
  void Expect(const std::string& from, const std::string& to, int err, unsigned flags = 0) {
    SCOPED_TRACE(from + " -> " + to);
    EXPECT_EQ(Rename(kernel_, from, to, flags), err) << "the kernel";
    EXPECT_EQ(Rename(pool_side_, from, to, flags), err) << "the pool";
    std::vector<std::string> kernel, pool;
    Describe(kernel_, "", &kernel);
    Describe(pool_side_, "", &pool);
    EXPECT_EQ(pool, kernel);
  }

  Side kernel_{"", false}, pool_side_{"", true};
};

TEST_F(PoolRenamePair, NamesInOneDirectoryAsTheKernelResolvesThem) {
  Expect("d/a", "d/c", 0);             // to a new name
  Expect("d/c", "d/b", 0);             // over a file
  Expect("d/b", "d/sym", 0);           // over a symbolic link: replaced, not followed
  Expect("d/h1", "d/h2", 0);           // two names of one file: nothing changes
  Expect("l/h1", "l/x", 0);            // the directory reached through a link
  Expect("d/missing", "d/y", ENOENT);  // no source
  Expect("d/sub", "d/empty", 0);       // a directory over an empty one
  Expect("d/sym", "d/full", EISDIR);   // a link over a directory
  Expect("d/empty", "d/full", ENOTEMPTY);  // a directory over a full one
  Expect("d/sym", "d/" + std::string(256, 'n'), ENAMETOOLONG);
  Expect("d/sym", "d/.", EBUSY);       // a dot entry as the last name
  Expect("d/sym", "d/..", EBUSY);
  Expect("d/sym", "d/x/", ENOTDIR);    // a trailing slash on a file's new name
  Expect("d//x", "d//z", 0);           // repeated slashes, the same bytes
  Expect("d/z", "d/dangling", 0);      // over a dangling link
  Expect("d/sym", "d/dangling", EEXIST, RENAME_NOREPLACE);
  Expect("d/sym", "d/dangling", 0, RENAME_EXCHANGE);
  Expect("d/y", "d/nothing", ENOENT, RENAME_EXCHANGE);
  ExpectClean();
}

TEST_F(PoolRenamePair, NamesInDifferentDirectoriesAreWalkedEach) {
  Expect("d/a", "e/a", 0);                // across directories
  Expect("e/a", "l/a", 0);                // back, through a link
  Expect("d/full", "d/full/inner", EINVAL);  // a directory below itself
  Expect("d/sub", "d/sym/x", EINVAL);     // the same, through the link to it
  Expect("d/h1", "d/sub/h1", 0);          // into a subdirectory: same prefix bytes
  Expect("d/sub/h1", "d/h1", 0);          // and out of it
  Expect("d/a", "dd/a", ENOENT);          // a directory that does not exist
  ExpectClean();
}

}  // namespace
