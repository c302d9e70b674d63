// Who frees an inode that lost its last name and holder: exactly one
// releaser wins the CAS that sets the releasing bit (PoolNamespace::
// MaybeRelease; a remover and a last closer may both get there). One that
// loses it decides again on the word it lost to. The test hook changes the
// ident between the releaser's load and its CAS as a racing thread would:
// a creator clearing its fresh bit (version 9: the inode is as releasable
// as before, and must be released, not leaked until the next recovery),
// or another releaser (this one must then leave it alone). The threaded
// race (pool_fresh_race_test) hits this window too rarely to tell.
#include <gtest/gtest.h>

#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "container/pool/pool_format.h"
#include "pool_attached_fixture.h"

namespace {

using upfs::format::pool::FileType;
using upfs::format::pool::Inode;
using upfs::format::pool::kIdentFresh;
using upfs::format::pool::kIdentReleasing;
using upfs::format::pool::kIdentUnlinked;

class PoolReleaseRace : public pool_test::AttachedPoolTest {
 protected:
  PoolReleaseRace() : AttachedPoolTest("releaserace") {}
  void TearDown() override {
    upfs::PoolNamespace::BeforeReleaseCasForTest(nullptr, nullptr);
    AttachedPoolTest::TearDown();
  }
  // Removes `path`, whose inode `in` the hook `change` changes between the
  // releaser's load and its CAS (each time it is about to try).
  void RemoveAcross(const std::string& path, void (*change)(void*), Inode* in) {
    const upfs::Resolved at = At(path);
    upfs::PoolNamespace::BeforeReleaseCasForTest(change, in);
    const upfs::Status st = Ns().Remove(at, false);
    upfs::PoolNamespace::BeforeReleaseCasForTest(nullptr, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  static void ClearFresh(void* in) { static_cast<Inode*>(in)->ident.fetch_and(~kIdentFresh); }
  static void AnotherReleaserWins(void* in) { static_cast<Inode*>(in)->ident.fetch_or(kIdentReleasing); }
};

TEST_F(PoolReleaseRace, ALostCasToAClearedFreshBitStillReleases) {
  const uint64_t ino = CreateAndClose("/a");
  Inode* in = InodeOf(ino);
  // As if its creator had not cleared the bit yet (between its commit's
  // fence and its ClearFresh).
  in->ident.fetch_or(kIdentFresh);
  RemoveAcross("/a", &ClearFresh, in);
  EXPECT_EQ(Kind(ino), FileType::kFree) << "the inode was left, unlinked and unheld, for recovery to free";
}

TEST_F(PoolReleaseRace, ALostCasToAnotherReleaserLeavesTheInodeToIt) {
  const uint64_t ino = CreateAndClose("/a");
  Inode* in = InodeOf(ino);
  RemoveAcross("/a", &AnotherReleaserWins, in);
  // Still the other's to free: this one neither freed it nor cleared the bit.
  const uint64_t id = in->ident.load();
  EXPECT_EQ(Kind(ino), FileType::kRegular);
  EXPECT_TRUE(id & kIdentReleasing);
  EXPECT_TRUE(id & kIdentUnlinked);
}

TEST_F(PoolReleaseRace, WithNoChangeTheRemoverReleases) {
  const uint64_t ino = CreateAndClose("/a");
  RemoveAcross("/a", nullptr, InodeOf(ino));
  EXPECT_EQ(Kind(ino), FileType::kFree);
}

}  // namespace
