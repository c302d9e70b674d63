// An open's hold taken in its lookup (PoolNamespace::ResolveHeld): under
// the lookup's own hold of the index lock, when nothing was committed
// since. Another attachment of the pool (another process, as far as the
// namespace knows) changes the name between the lookup and the hold
// through the test hook: the hold must then not be taken on what the inode
// has become, nor leave the inode counted; with no change it is taken, and
// keeps the file until it is given back.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "pool_attached_fixture.h"

namespace {

using upfs::format::pool::FileType;

class PoolResolveHeld : public pool_test::TwoAttachmentsTest {
 protected:
  PoolResolveHeld() : TwoAttachmentsTest("resolveheld") {}
  void TearDown() override {
    upfs::PoolNamespace::BetweenLookupAndHoldForTest(nullptr, nullptr);
    TwoAttachmentsTest::TearDown();
  }
  // The other attachment's change, run by the hook.
  static void RemoveAAndMakeB(void* self) {
    auto* t = static_cast<PoolResolveHeld*>(self);
    ASSERT_TRUE(t->Other().Remove(t->OtherAt("/a"), false).ok());
    t->remade_ = CreatedAndClosedIn(t->Other(), t->OtherAt("/b"));
  }
  static void RemoveA(void* self) {
    auto* t = static_cast<PoolResolveHeld*>(self);
    ASSERT_TRUE(t->Other().Remove(t->OtherAt("/a"), false).ok());
  }
  // Makes "/a", then ResolveHeld("/a") with `change` made between its
  // lookup and its hold; returns a's inode.
  uint64_t ResolveAAcross(void (*change)(void*), upfs::Resolved* r, uint32_t* gen, bool* held) {
    const uint64_t a = CreateAndClose("/a");
    upfs::PoolNamespace::BetweenLookupAndHoldForTest(change, this);
    EXPECT_TRUE(Ns().ResolveHeld("/a", true, r, gen, held).ok());
    upfs::PoolNamespace::BetweenLookupAndHoldForTest(nullptr, nullptr);
    EXPECT_EQ(r->ino, a);
    return a;
  }

  uint64_t remade_ = 0;
};

TEST_F(PoolResolveHeld, WithNoChangeTheHoldIsTakenAndKeepsTheFile) {
  const uint64_t a = CreateAndClose("/a");
  upfs::Resolved r;
  uint32_t gen = 0;
  bool held = false;
  ASSERT_TRUE(Ns().ResolveHeld("/a", true, &r, &gen, &held).ok());
  ASSERT_EQ(r.ino, a);
  ASSERT_TRUE(held);
  EXPECT_EQ(InodeOf(a)->open_count.load(), 1u);
  // The name goes (from the other attachment): the hold keeps the file.
  ASSERT_TRUE(Other().Remove(OtherAt("/a"), false).ok());
  EXPECT_EQ(Kind(a), FileType::kRegular);
  Ns().DropHold(a, gen);  // the last holder frees it
  EXPECT_EQ(Kind(a), FileType::kFree);
}

TEST_F(PoolResolveHeld, AMissingNameTakesNoHold) {
  upfs::Resolved r;
  uint32_t gen = 0;
  bool held = true;
  ASSERT_TRUE(Ns().ResolveHeld("/nothing", true, &r, &gen, &held).ok());
  EXPECT_EQ(r.ino, 0u);
  EXPECT_FALSE(held);
}

// The lookup found "a"; before the hold, "a" went and its inode became
// "b". A hold on it would give the opener "b". Not taken, and the count
// given back: "b" is freed when its name goes.
TEST_F(PoolResolveHeld, ANameRemovedAndItsInodeMadeAgainIsNotHeld) {
  upfs::Resolved r;
  uint32_t gen = 0;
  bool held = false;
  const uint64_t a = ResolveAAcross(&RemoveAAndMakeB, &r, &gen, &held);
  if (remade_ != a) GTEST_SKIP() << "the free stack did not hand the same inode back";
  EXPECT_FALSE(held) << "a hold through \"a\" was taken on \"b\"'s inode";
  EXPECT_EQ(InodeOf(a)->open_count.load(), 0u);
  // The caller's long way (TakeHold) finds the name gone.
  EXPECT_EQ(Ns().TakeHold(r.ino, &gen, &r).err(), ENOENT);
  ASSERT_TRUE(Ns().Remove(At("/b"), false).ok());
  EXPECT_EQ(Kind(a), FileType::kFree);
}

// The lookup found "a"; before the hold, "a" went and its inode was freed
// (no holder then). Not held, and the count given back on the free inode.
TEST_F(PoolResolveHeld, ANameRemovedBeforeTheHoldIsNotHeld) {
  upfs::Resolved r;
  uint32_t gen = 0;
  bool held = false;
  const uint64_t a = ResolveAAcross(&RemoveA, &r, &gen, &held);
  EXPECT_FALSE(held);
  EXPECT_EQ(InodeOf(a)->open_count.load(), 0u);
  EXPECT_EQ(Kind(a), FileType::kFree);
}

}  // namespace
