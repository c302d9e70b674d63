// The parent cache (container/pool/parent_cache.h): a create with O_EXCL,
// a mkdir or a symbolic link in a directory the thread made a name in
// before skips the walk to it, and
// falls back to the walk whenever that could answer otherwise: the
// directory renamed, removed and made again, exchanged with a file,
// replaced by a rename over it, moved by another attachment of the pool,
// its search permission taken away, reached through a symbolic link, or
// another pool mounted where it was. Every case checks where the file
// went, not only that the call returned.
//
// The calls that remove or rename a name (unlink, rmdir, a rename's first
// path) look it up in the directory of an entry under the index lock they
// hold (PoolNamespace::FromKeptParent), and walk whenever the walk could
// answer otherwise; stats and opens always walk. Those cases check whether
// the cache answered, by ParentCache::lookups.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "container/pool/namespace.h"
#include "container/pool/parent_cache.h"
#include "container/pool/pool.h"
#include "pool_attached_fixture.h"
#include "pool_test_fixture.h"

namespace {

using upfs::ParentCache;

class PoolParentCache : public pool_test::PoolTest {
 protected:
  // O_CREAT|O_EXCL of `rel`, closed at once: 0, or the errno.
  int Excl(const std::string& rel) {
    const int fd = upfs_open(P(rel).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return errno;
    EXPECT_EQ(upfs_close(fd), 0);
    return 0;
  }
  // lstat (or stat with `follow`) of `rel`: 0 and *st, or the errno.
  int Stat(const std::string& rel, struct stat* st, bool follow = false) {
    return (follow ? upfs_stat(P(rel).c_str(), st) : upfs_lstat(P(rel).c_str(), st)) == 0 ? 0 : errno;
  }
  ino_t Ino(const std::string& rel) {
    struct stat st;
    if (upfs_lstat(P(rel).c_str(), &st) != 0) return 0;
    return st.st_ino;
  }
};

TEST_F(PoolParentCache, TheSecondCreateInADirectoryComesFromTheCache) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  const uint64_t before = ParentCache::uses();
  ASSERT_EQ(Excl("d/a"), 0);  // walks, and keeps the directory
  EXPECT_EQ(ParentCache::uses(), before);
  ASSERT_EQ(Excl("d/b"), 0);
  ASSERT_EQ(Excl("d/c"), 0);
  EXPECT_EQ(ParentCache::uses(), before + 2);
  EXPECT_EQ(Excl("d/b"), EEXIST);  // answered from the cache too
  EXPECT_EQ(ParentCache::uses(), before + 3);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "a", "b", "c"}));
  ExpectClean();
}

TEST_F(PoolParentCache, MkdirAndSymlinkUseTheCacheToo) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(upfs_mkdir(P("d/s1").c_str(), 0755), 0);  // walks, and keeps d
  const uint64_t before = ParentCache::uses();
  ASSERT_EQ(upfs_mkdir(P("d/s2").c_str(), 0755), 0);
  ASSERT_EQ(upfs_symlink("s1", P("d/l").c_str()), 0);
  ASSERT_EQ(Excl("d/f"), 0);
  EXPECT_EQ(ParentCache::uses(), before + 3);
  EXPECT_EQ(upfs_mkdir(P("d/f").c_str(), 0755), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(upfs_symlink("x", P("d/s2").c_str()), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "f", "l", "s1", "s2"}));
  char buf[16];
  EXPECT_EQ(upfs_readlink(P("d/l").c_str(), buf, sizeof(buf)), 2);
  struct stat st;
  ASSERT_EQ(upfs_stat(P("d/s2").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // A directory made from the cache is walked into as any other.
  ASSERT_EQ(Excl("d/s2/x"), 0);
  EXPECT_EQ(List("d/s2"), (std::vector<std::string>{".", "..", "x"}));
  ExpectClean();
}

TEST_F(PoolParentCache, ARenamedDirectoryIsWalkedAgain) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  ASSERT_EQ(upfs_rename(P("d").c_str(), P("e").c_str()), 0);
  EXPECT_EQ(Excl("d/b"), ENOENT);  // not into the directory now named e
  EXPECT_EQ(List("e"), (std::vector<std::string>{".", "..", "a"}));
  ASSERT_EQ(Excl("e/b"), 0);
  EXPECT_EQ(List("e"), (std::vector<std::string>{".", "..", "a", "b"}));
  ExpectClean();
}

TEST_F(PoolParentCache, ADirectoryRemovedAndMadeAgainGetsTheNewFiles) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  ASSERT_EQ(upfs_unlink(P("d/a").c_str()), 0);
  ASSERT_EQ(upfs_rmdir(P("d").c_str()), 0);
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/b"), 0);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "b"}));
  ExpectClean();
}

// An rmdir changes no shape: the directory itself is checked, by its
// inode's ident. The removed directory's inode is made again as another
// directory (the free-inode stack gives it back first), and a new one
// takes the old name: files go to the new one, not to the inode reused,
// and removals by the old path do not reach the reused one.
TEST_F(PoolParentCache, AnInodeReusedByAnotherDirectoryIsNotTheCachedOne) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  const ino_t old_d = Ino("d");
  ASSERT_EQ(upfs_unlink(P("d/a").c_str()), 0);
  ASSERT_EQ(upfs_rmdir(P("d").c_str()), 0);
  ASSERT_EQ(upfs_mkdir(P("e").c_str(), 0755), 0);
  ASSERT_EQ(Ino("e"), old_d);  // the premise: the inode was reused
  // A removal or rename by the old path (FromKeptParent) finds nothing,
  // not the other directory's names.
  ASSERT_EQ(Excl("e/x"), 0);
  EXPECT_EQ(upfs_unlink(P("d/x").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(upfs_rename(P("d/x").c_str(), P("d/y").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(upfs_unlink(P("e/x").c_str()), 0);
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/b"), 0);
  ASSERT_EQ(upfs_mkdir(P("d/c").c_str(), 0755), 0);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "b", "c"}));
  EXPECT_EQ(List("e"), (std::vector<std::string>{".", ".."}));
  ExpectClean();
}

// A directory made and removed again and again below a cached one (a
// build's temporary directories) leaves the entry in use.
TEST_F(PoolParentCache, MkdirAndRmdirBelowACachedDirectoryKeepItsEntry) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(upfs_mkdir(P("d/t").c_str(), 0755), 0);
  ASSERT_EQ(upfs_rmdir(P("d/t").c_str()), 0);
  const uint64_t before = ParentCache::uses();
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(upfs_mkdir(P("d/t").c_str(), 0755), 0);
    ASSERT_EQ(upfs_rmdir(P("d/t").c_str()), 0);
  }
  EXPECT_EQ(ParentCache::uses(), before + 10);  // the mkdirs (an rmdir walks)
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", ".."}));
  ExpectClean();
}

TEST_F(PoolParentCache, ADirectoryExchangedWithAFileIsNoParent) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  ASSERT_EQ(Excl("f"), 0);
  ASSERT_EQ(upfs_renameat2(AT_FDCWD, P("d").c_str(), AT_FDCWD, P("f").c_str(), RENAME_EXCHANGE), 0);
  EXPECT_EQ(Excl("d/b"), ENOTDIR);
  EXPECT_EQ(List("f"), (std::vector<std::string>{".", "..", "a"}));
  ExpectClean();
}

TEST_F(PoolParentCache, ADirectoryRenamedOverTheCachedOneGetsTheNewFiles) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(upfs_mkdir(P("e").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  ASSERT_EQ(upfs_unlink(P("d/a").c_str()), 0);
  const ino_t e = Ino("e");
  ASSERT_EQ(upfs_rename(P("e").c_str(), P("d").c_str()), 0);  // over the empty d
  ASSERT_EQ(Excl("d/b"), 0);
  EXPECT_EQ(Ino("d"), e);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "b"}));
  ExpectClean();
}

TEST_F(PoolParentCache, ADirectoryReachedThroughASymbolicLinkIsNotKept) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(upfs_symlink("d", P("l").c_str()), 0);
  const uint64_t before = ParentCache::uses();
  ASSERT_EQ(Excl("l/a"), 0);
  ASSERT_EQ(Excl("l/b"), 0);
  EXPECT_EQ(ParentCache::uses(), before);
  // The link now leads elsewhere: the walk follows it.
  ASSERT_EQ(upfs_mkdir(P("e").c_str(), 0755), 0);
  ASSERT_EQ(upfs_unlink(P("l").c_str()), 0);
  ASSERT_EQ(upfs_symlink("e", P("l").c_str()), 0);
  ASSERT_EQ(Excl("l/c"), 0);
  EXPECT_EQ(List("e"), (std::vector<std::string>{".", "..", "c"}));
  ExpectClean();
}

TEST_F(PoolParentCache, AnotherPoolMountedInThePlaceIsWalked) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  const std::string second = pool_ + ".second";
  unlink(second.c_str());
  ASSERT_EQ(upfs_mkfs(second.c_str(), 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(second.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  const uint64_t before = ParentCache::uses();
  EXPECT_EQ(Excl("d/b"), ENOENT);  // no d in this pool
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/b"), 0);
  EXPECT_EQ(ParentCache::uses(), before);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "b"}));
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  unlink(second.c_str());
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "a"}));
}

// Creators in one directory while another thread renames it back and
// forth: every create that returned made exactly one file, in that
// directory, and the pool checks clean (also run under ThreadSanitizer).
TEST_F(PoolParentCache, CreatesRaceRenamesOfTheirDirectory) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  constexpr int kThreads = 2, kPerThread = 400;
  std::atomic<bool> stop{false};
  std::atomic<int> made{0};
  std::thread renamer([&] {
    bool at_d = true;
    while (!stop.load()) {
      const std::string from = P(at_d ? "d" : "e"), to = P(at_d ? "e" : "d");
      if (upfs_rename(from.c_str(), to.c_str()) == 0) at_d = !at_d;
    }
  });
  std::vector<std::thread> creators;
  for (int t = 0; t < kThreads; ++t) {
    creators.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string name = "t" + std::to_string(t) + "-" + std::to_string(i);
        for (const char* dir : {"d/", "e/"}) {
          const int e = Excl(dir + name);
          if (e == 0) {
            made.fetch_add(1);
            break;
          }
          ASSERT_EQ(e, ENOENT) << dir << name;  // the directory had the other name
        }
      }
    });
  }
  for (std::thread& c : creators) c.join();
  stop.store(true);
  renamer.join();
  const std::string dir = Ino("d") ? "d" : "e";
  const std::vector<std::string> names = List(dir);
  EXPECT_EQ(names.size(), size_t(made.load()) + 2);
  ExpectClean();
}

TEST_F(PoolParentCache, NamesInAKeptDirectoryAreLookedUpWithoutAWalk) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);  // the walk keeps d
  ASSERT_EQ(upfs_symlink("a", P("d/l").c_str()), 0);
  const ino_t a = Ino("d/a");
  ASSERT_NE(a, 0u);
  struct stat st;
  const uint64_t before = ParentCache::lookups();
  ASSERT_EQ(Stat("d/l", &st), 0);  // a stat walks
  ASSERT_EQ(Stat("d/l", &st, /*follow=*/true), 0);
  EXPECT_EQ(st.st_ino, a);
  const int fd = upfs_open(P("d/a").c_str(), O_RDONLY);  // so does an open
  ASSERT_GE(fd, 0);
  EXPECT_EQ(upfs_close(fd), 0);
  EXPECT_EQ(ParentCache::lookups(), before);
  // A trailing slash: the name itself still decides (it is not followed),
  // looked up in the kept directory.
  EXPECT_EQ(upfs_unlink(P("d/a/").c_str()), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(ParentCache::lookups(), before + 1);
  ASSERT_EQ(upfs_rename(P("d/l").c_str(), P("d/m").c_str()), 0);  // a rename's first path
  EXPECT_EQ(ParentCache::lookups(), before + 2);
  ASSERT_EQ(Stat("d/m", &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));  // the link renamed, not what it points to
  ASSERT_EQ(upfs_unlink(P("d/missing").c_str()), -1);  // answered there
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(upfs_unlink(P("d/a").c_str()), 0);
  EXPECT_EQ(ParentCache::lookups(), before + 4);
  EXPECT_EQ(Stat("d/a", &st), ENOENT);
  ASSERT_EQ(upfs_mkdir(P("d/s").c_str(), 0755), 0);
  ASSERT_EQ(upfs_rmdir(P("d/s").c_str()), 0);
  EXPECT_EQ(ParentCache::lookups(), before + 5);
  EXPECT_EQ(List("d"), (std::vector<std::string>{".", "..", "m"}));
  ExpectClean();
}

TEST_F(PoolParentCache, ADirectoryMovedIsWalkedAgain) {
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(Excl("d/a"), 0);
  const ino_t a = Ino("d/a");
  ASSERT_EQ(upfs_rename(P("d").c_str(), P("e").c_str()), 0);
  EXPECT_EQ(upfs_unlink(P("d/a").c_str()), -1);  // not in the directory now named e
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(upfs_rename(P("d/a").c_str(), P("d/b").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(Ino("e/a"), a);
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  EXPECT_EQ(upfs_unlink(P("d/a").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  ExpectClean();
}

// Another attachment of the pool (another process, as far as the
// namespace knows) moves the directory: the create from this attachment's
// cache sees it at the log's tail and falls back to the walk.
class PoolParentCacheAttached : public pool_test::TwoAttachmentsTest {
 protected:
  PoolParentCacheAttached() : TwoAttachmentsTest("parentcache") {}
  // A namespace whose resolutions use and keep parent cache entries, as a
  // removal's or a rename's.
  upfs::PoolNamespace Keeping(const upfs::Credentials& who) {
    upfs::PoolNamespace ns(pool_.get(), &who);
    ns.KeepParents();
    return ns;
  }
  // Creates `path` by the walk, which keeps its directory.
  uint64_t CreateTraced(upfs::PoolNamespace ns, const std::string& path) {
    ns.KeepParents();
    return CreatedAndClosedIn(ns, ResolvedIn(ns, path));
  }
  // A create of `path` as `who` at the cache's answer, as an open with
  // O_EXCL makes it: whether the cache answered for the walk, and st.
  bool Cached(const upfs::Credentials& who, const std::string& path, upfs::Status* st) {
    upfs::PoolNamespace ns(pool_.get(), &who);
    upfs::Resolved at;
    if (!ns.CachedParent(path, &at)) return false;
    uint64_t ino = 0;
    uint32_t gen = 0;
    bool created = false;
    *st = ns.Create(at, 0644, upfs::format::Consistency::kStrict, &ino, &created, &gen);
    if (st->ok()) ns.DropHold(ino, gen);
    return ns.CacheAnswered(path, *st);
  }
};

TEST_F(PoolParentCacheAttached, AMoveByAnotherAttachmentIsSeenAtTheTail) {
  ASSERT_TRUE(Ns().Mkdir(At("/d"), 0755).ok());
  CreateTraced(Ns(), "/d/a");
  upfs::Status st;
  ASSERT_TRUE(Cached(who_, "/d/b", &st));
  ASSERT_TRUE(st.ok()) << st.ToString();
  upfs::PoolNamespace other(other_.get(), &who_);
  ASSERT_TRUE(other.Rename(ResolvedIn(other, "/d"), ResolvedIn(other, "/e"), 0).ok());
  EXPECT_FALSE(Cached(who_, "/d/c", &st));  // walk again: /d is gone
  upfs::Resolved r;
  EXPECT_EQ(Ns().Resolve("/d/c", false, &r).err(), ENOENT);
  ASSERT_TRUE(Ns().Resolve("/e/c", false, &r).ok());
  EXPECT_EQ(r.ino, 0u);
}

TEST_F(PoolParentCacheAttached, SearchPermissionIsCheckedAtEveryUse) {
  ASSERT_TRUE(Ns().Mkdir(At("/d"), 0755).ok());
  const uint64_t d = At("/d").ino;
  ASSERT_TRUE(Ns().Chmod(d, 0777).ok());  // past the umask
  upfs::Credentials user;
  user.uid = 4321;
  user.gid = 4321;
  user.umask = 022;
  CreateTraced(upfs::PoolNamespace(pool_.get(), &user), "/d/a");
  upfs::Status st;
  ASSERT_TRUE(Cached(user, "/d/b", &st));
  ASSERT_TRUE(st.ok()) << st.ToString();
  upfs::Resolved r;
  const uint64_t before = ParentCache::lookups();
  ASSERT_TRUE(Keeping(user).Resolve("/d/a", false, &r).ok());  // a removal's lookup
  EXPECT_NE(r.ino, 0u);
  EXPECT_EQ(ParentCache::lookups(), before + 1);
  // No search permission on /d for others: no create from the cache; the
  // walk refuses it.
  ASSERT_TRUE(Ns().Chmod(d, 0776).ok());
  EXPECT_FALSE(Cached(user, "/d/c", &st));
  EXPECT_EQ(upfs::PoolNamespace(pool_.get(), &user).Resolve("/d/c", false, &r).err(), EACCES);
  EXPECT_EQ(Keeping(user).Resolve("/d/a", false, &r).err(), EACCES);
  EXPECT_EQ(ParentCache::lookups(), before + 1);
  // Search but no write permission: the walk answers, EACCES for a new
  // name and EEXIST for one that exists, in the kernel's order.
  ASSERT_TRUE(Ns().Chmod(d, 0775).ok());
  EXPECT_FALSE(Cached(user, "/d/c", &st));
  EXPECT_EQ(st.err(), EACCES);
  EXPECT_FALSE(Cached(user, "/d/a", &st));
  upfs::PoolNamespace as_user(pool_.get(), &user);
  ASSERT_TRUE(as_user.Resolve("/d/a", false, &r).ok());
  EXPECT_NE(r.ino, 0u);  // the walk finds it: the open's EEXIST
}

// Another attachment (another process) moves the directory: the lookup's
// catch-up under the index lock sees the move, and the walk answers.
TEST_F(PoolParentCacheAttached, AMoveByAnotherAttachmentIsSeen) {
  ASSERT_TRUE(Ns().Mkdir(At("/d"), 0755).ok());
  CreateTraced(Ns(), "/d/a");
  upfs::PoolNamespace other(other_.get(), &who_);
  ASSERT_TRUE(other.Rename(ResolvedIn(other, "/d"), ResolvedIn(other, "/e"), 0).ok());
  upfs::Resolved r;
  const uint64_t before = ParentCache::lookups();
  EXPECT_EQ(Keeping(who_).Resolve("/d/a", false, &r).err(), ENOENT);
  EXPECT_EQ(ParentCache::lookups(), before);
  ASSERT_TRUE(Keeping(who_).Resolve("/e/a", false, &r).ok());
  EXPECT_NE(r.ino, 0u);
}

// A resolution that follows a last symbolic link (none of the calls that
// use entries today) walks: the entry holds no link's target.
TEST_F(PoolParentCacheAttached, ALinkToFollowIsWalked) {
  ASSERT_TRUE(Ns().Mkdir(At("/d"), 0755).ok());
  CreateTraced(Ns(), "/d/a");
  ASSERT_TRUE(Ns().Symlink(ResolvedIn(Ns(), "/d/l"), "a").ok());
  upfs::Resolved link, target;
  ASSERT_TRUE(Keeping(who_).Resolve("/d/l", false, &link).ok());
  ASSERT_TRUE(Keeping(who_).Resolve("/d/l", true, &target).ok());
  EXPECT_EQ(link.type, upfs::format::pool::FileType::kSymlink);
  EXPECT_EQ(target.type, upfs::format::pool::FileType::kRegular);
  EXPECT_EQ(target.ino, At("/d/a").ino);
}

}  // namespace
