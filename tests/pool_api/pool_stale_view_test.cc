// A commit trusts what Resolve found only while the index's view is the
// one Resolve read it in (PoolNamespace::SameView): nothing committed
// since, by this attachment or another. Another attachment of the pool
// (another process, as far as the namespace knows) changes the names
// between one attachment's Resolve and its commit; the commit must catch
// up and look again: refuse (ESTALE, EEXIST) and leave the other's names
// as they are, never apply a record checked against the older view (a
// create, link or rename would take a name that exists, silently, as the
// index's apply of a validated record does not look again).
#include <gtest/gtest.h>

#include <linux/fs.h>

#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "pool_attached_fixture.h"

namespace {

class PoolStaleView : public pool_test::TwoAttachmentsTest {
 protected:
  PoolStaleView() : TwoAttachmentsTest("staleview") {}
  // What `path` names now, seen from this attachment (0: nothing).
  uint64_t Named(const std::string& path) { return At(path).ino; }
  // The other attachment removes `path` and makes it again as another
  // inode (the inode it freed goes to a file made first: made again at
  // once, the name would lead to the same inode, and a commit there acts
  // on the name as it is at the log's tail, as the kernel's would).
  uint64_t OtherReplaces(const std::string& path) {
    EXPECT_TRUE(Other().Remove(OtherAt(path), false).ok());
    CreatedAndClosedIn(Other(), OtherAt(path + ".taker"));
    return CreatedAndClosedIn(Other(), OtherAt(path));
  }
};

TEST_F(PoolStaleView, ALinkOverANameMadeSinceItsResolveFails) {
  const uint64_t src = CreateAndClose("/src");
  const upfs::Resolved from = At("/src"), to = At("/l");
  ASSERT_EQ(to.ino, 0u);
  const uint64_t theirs = CreatedAndClosedIn(Other(), OtherAt("/l"));
  EXPECT_EQ(Ns().Link(from, to).err(), EEXIST);
  EXPECT_EQ(Named("/l"), theirs);
  EXPECT_EQ(Named("/src"), src);
}

TEST_F(PoolStaleView, ALinkOfANameRemovedSinceItsResolveFails) {
  CreateAndClose("/src");
  const upfs::Resolved from = At("/src"), to = At("/l");
  ASSERT_TRUE(Other().Remove(OtherAt("/src"), false).ok());
  EXPECT_EQ(Ns().Link(from, to).err(), ESTALE);
  EXPECT_EQ(Named("/l"), 0u);
}

TEST_F(PoolStaleView, ARenameOntoANameMadeSinceItsResolveFails) {
  const uint64_t a = CreateAndClose("/a");
  const upfs::Resolved from = At("/a"), to = At("/b");
  ASSERT_EQ(to.ino, 0u);
  const uint64_t theirs = CreatedAndClosedIn(Other(), OtherAt("/b"));
  EXPECT_EQ(Ns().Rename(from, to, 0).err(), ESTALE);
  EXPECT_EQ(Named("/a"), a);
  EXPECT_EQ(Named("/b"), theirs);
}

TEST_F(PoolStaleView, ARenameOfANameMovedSinceItsResolveFails) {
  const uint64_t a = CreateAndClose("/a");
  const upfs::Resolved from = At("/a"), to = At("/b");
  ASSERT_TRUE(Other().Rename(OtherAt("/a"), OtherAt("/c"), 0).ok());
  EXPECT_EQ(Ns().Rename(from, to, 0).err(), ESTALE);
  EXPECT_EQ(Named("/b"), 0u);
  EXPECT_EQ(Named("/c"), a);
}

TEST_F(PoolStaleView, AnExchangeWithANameReplacedSinceItsResolveFails) {
  const uint64_t a = CreateAndClose("/a");
  CreateAndClose("/b");
  const upfs::Resolved from = At("/a"), to = At("/b");
  const uint64_t theirs = OtherReplaces("/b");
  EXPECT_EQ(Ns().Rename(from, to, RENAME_EXCHANGE).err(), ESTALE);
  EXPECT_EQ(Named("/a"), a);
  EXPECT_EQ(Named("/b"), theirs);
}

TEST_F(PoolStaleView, AnUnlinkOfANameReplacedSinceItsResolveFails) {
  CreateAndClose("/a");
  const upfs::Resolved at = At("/a");
  const uint64_t theirs = OtherReplaces("/a");
  EXPECT_EQ(Ns().Remove(at, false).err(), ESTALE);
  EXPECT_EQ(Named("/a"), theirs);
}

TEST_F(PoolStaleView, ACreateOfANameMadeSinceItsResolveFails) {
  const upfs::Resolved at = At("/n");
  ASSERT_EQ(at.ino, 0u);
  const uint64_t theirs = CreatedAndClosedIn(Other(), OtherAt("/n"));
  uint64_t ino = 0;
  bool created = false;
  EXPECT_EQ(Ns().Create(at, 0644, upfs::format::Consistency::kStrict, &ino, &created).err(), EEXIST);
  EXPECT_FALSE(created);
  EXPECT_EQ(Named("/n"), theirs);
}

// The same calls with nothing committed in between: the views match, and
// each commits (the skipped lookups answer as they would have).
TEST_F(PoolStaleView, WithNoChangeInBetweenEachCommits) {
  const uint64_t a = CreateAndClose("/a");
  const uint64_t b = CreateAndClose("/b");
  ASSERT_TRUE(Ns().Link(At("/a"), At("/l")).ok());
  EXPECT_EQ(Named("/l"), a);
  ASSERT_TRUE(Ns().Rename(At("/l"), At("/m"), 0).ok());
  EXPECT_EQ(Named("/m"), a);
  EXPECT_EQ(Named("/l"), 0u);
  ASSERT_TRUE(Ns().Rename(At("/a"), At("/b"), RENAME_EXCHANGE).ok());
  EXPECT_EQ(Named("/a"), b);
  EXPECT_EQ(Named("/b"), a);
  ASSERT_TRUE(Ns().Rename(At("/a"), At("/b"), 0).ok());  // over a name of a, which keeps /m
  EXPECT_EQ(Named("/a"), 0u);
  EXPECT_EQ(Named("/b"), b);
  EXPECT_EQ(Named("/m"), a);
  ASSERT_TRUE(Ns().Remove(At("/m"), false).ok());
  EXPECT_EQ(Named("/m"), 0u);
}

}  // namespace
