// A rename resolves both its paths in one hold of the index lock
// (PoolNamespace::ResolveTwo), and when both name one directory with the
// same bytes, looks up only the second path's last name there. Every case
// here runs the same rename in a pool and in a kernel tmpfs directory
// holding the same tree: the same error, and the same tree after it
// (names, types, sizes, link targets, link counts). The cases cover what
// the shortcut must leave to the full walk: a last name that is a dot
// entry, too long, or has a trailing slash, a symbolic link as the last
// name (replaced, not followed), a directory reached through a link,
// directories that differ, and a directory below the one that moves.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "pool_test_fixture.h"
#include "upfs/upfs.h"

namespace {

class PoolRenamePair : public pool_test::PoolTest {
 protected:
  void SetUp() override {
    PoolTest::SetUp();
    char tmpl[] = "/dev/shm/upfs-renamepair.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    kdir_ = tmpl;
    for (bool pool : {true, false}) {
      ASSERT_EQ(Mkdir(pool, "d"), 0);
      ASSERT_EQ(Mkdir(pool, "e"), 0);
      for (const char* f : {"d/a", "d/b", "d/h1"}) ASSERT_EQ(Make(pool, f, f), 0);
      ASSERT_EQ(Link(pool, "d/h1", "d/h2"), 0);
      for (const char* dir : {"d/sub", "d/empty", "d/full"}) ASSERT_EQ(Mkdir(pool, dir), 0);
      ASSERT_EQ(Make(pool, "d/full/f", "F"), 0);
      ASSERT_EQ(Symlink(pool, "sub", "d/sym"), 0);
      ASSERT_EQ(Symlink(pool, "nowhere", "d/dangling"), 0);
      ASSERT_EQ(Symlink(pool, "d", "l"), 0);
    }
  }
  void TearDown() override {
    const std::string cmd = "rm -rf '" + kdir_ + "'";
    EXPECT_EQ(system(cmd.c_str()), 0);
    PoolTest::TearDown();
  }

  std::string At(bool pool, const std::string& rel) const { return pool ? P(rel) : kdir_ + "/" + rel; }
  static int Err(int rc) { return rc == 0 ? 0 : errno; }
  int Mkdir(bool pool, const std::string& rel) {
    return Err(pool ? upfs_mkdir(At(true, rel).c_str(), 0755) : mkdir(At(false, rel).c_str(), 0755));
  }
  int Link(bool pool, const std::string& from, const std::string& to) {
    return Err(pool ? upfs_link(At(true, from).c_str(), At(true, to).c_str())
                    : link(At(false, from).c_str(), At(false, to).c_str()));
  }
  int Symlink(bool pool, const std::string& target, const std::string& rel) {
    return Err(pool ? upfs_symlink(target.c_str(), At(true, rel).c_str())
                    : symlink(target.c_str(), At(false, rel).c_str()));
  }
  int Make(bool pool, const std::string& rel, const std::string& data) {
    const std::string p = At(pool, rel);
    const int fd = pool ? upfs_open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644)
                        : open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return errno;
    const ssize_t n = pool ? upfs_write(fd, data.data(), data.size()) : write(fd, data.data(), data.size());
    EXPECT_EQ(n, ssize_t(data.size()));
    EXPECT_EQ(pool ? upfs_close(fd) : close(fd), 0);
    return 0;
  }
  int Rename(bool pool, const std::string& from, const std::string& to, unsigned flags) {
    const std::string a = At(pool, from), b = At(pool, to);
    return Err(pool ? upfs_renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), flags)
                    : renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), flags));
  }

  // Every name below `rel` (not following links): its type, size or link
  // target, and link count.
  void Tree(bool pool, const std::string& rel, std::map<std::string, std::string>* out) {
    const std::string p = At(pool, rel);
    std::vector<std::string> names;
    if (pool) {
      UPFS_DIR* d = upfs_opendir(p.c_str());
      ASSERT_NE(d, nullptr) << p;
      while (struct dirent* e = upfs_readdir(d)) names.push_back(e->d_name);
      upfs_closedir(d);
    } else {
      DIR* d = opendir(p.c_str());
      ASSERT_NE(d, nullptr) << p;
      while (struct dirent* e = readdir(d)) names.push_back(e->d_name);
      closedir(d);
    }
    for (const std::string& n : names) {
      if (n == "." || n == "..") continue;
      const std::string child = rel.empty() ? n : rel + "/" + n;
      struct stat st;
      ASSERT_EQ(pool ? upfs_lstat(At(true, child).c_str(), &st) : lstat(At(false, child).c_str(), &st), 0);
      std::string what;
      if (S_ISDIR(st.st_mode)) {
        what = "dir nlink " + std::to_string(st.st_nlink);
      } else if (S_ISLNK(st.st_mode)) {
        char buf[256];
        const ssize_t k = pool ? upfs_readlink(At(true, child).c_str(), buf, sizeof buf)
                               : readlink(At(false, child).c_str(), buf, sizeof buf);
        ASSERT_GT(k, 0);
        what = "link -> " + std::string(buf, size_t(k));
      } else {
        what = "file " + std::to_string(st.st_size) + " bytes nlink " + std::to_string(st.st_nlink);
      }
      (*out)[child] = what;
      if (S_ISDIR(st.st_mode)) Tree(pool, child, out);
    }
  }

  // The rename on both sides: the same error, the same trees after it.
  void Expect(const std::string& from, const std::string& to, int err, unsigned flags = 0) {
    SCOPED_TRACE(from + " -> " + to);
    EXPECT_EQ(Rename(false, from, to, flags), err) << "the kernel";
    EXPECT_EQ(Rename(true, from, to, flags), err) << "the pool";
    std::map<std::string, std::string> kernel, pool;
    Tree(false, "", &kernel);
    Tree(true, "", &pool);
    EXPECT_EQ(pool, kernel);
  }

  std::string kdir_;
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
