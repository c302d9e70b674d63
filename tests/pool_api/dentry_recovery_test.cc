// The next namespace's recovery of its dentries (container/pool/
// dentry_recovery.h): what is live after a crash at each point of a
// create, an unlink, a rename (over a name or not), an exchange and a
// reuse of a line, and what is damage.
#include "container/pool/dentry_recovery.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>
#include <string>

#include "pool_api/dentry_memory_store.h"
#include "pool_api/dentry_sample.h"

namespace upfs {
namespace {

using namespace format::pool;

class DentryRecoveryTest : public ::testing::Test {
 protected:
  MemoryStore store{64};
  DentryArena arena{&store};

  SampleWriter writer{&arena, &store};
  using Made = SampleWriter::Made;
  template <typename... Args>
  Made Write(Args&&... args) {
    return writer.Write(std::forward<Args>(args)...);
  }
  // The pair of dentries of exchange("a", "b") in kDir, a naming kX and b
  // kY before: each supersedes the other name's old dentry (same inode)
  // and names its partner, whose line it knows before it is written.
  void Exchange(const Made& a, const Made& b, uint64_t* h1, uint64_t* h2) {
    uint32_t g1, g2;
    ASSERT_TRUE(arena.Take(1, h1, &g1).ok());
    ASSERT_TRUE(arena.Take(1, h2, &g2).ok());
    Dentry n1 = SampleDentry("a", g1), n2 = SampleDentry("b", g2);
    n1.parent = n2.parent = b_parent_;
    n1.ino = b_ino_;
    n2.ino = a_ino_;
    n1.flags = n2.flags = kDentryRename | kDentryExchange;
    n1.source = b.ref();
    n2.source = a.ref();
    n1.partner = DentryRef(*h2, g2);
    n2.partner = DentryRef(*h1, g1);
    EncodeDentry(n1, store.Line(*h1));
    EncodeDentry(n2, store.Line(*h2));
  }
  // The live names as "parent/name->ino".
  std::set<std::string> Live(RecoveredDentries* r = nullptr) {
    RecoveredDentries mine;
    if (!r) r = &mine;
    const Status st = RecoverDentries(&store, r);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::set<std::string> out;
    for (const RecoveredDentry& d : r->live)
      out.insert(std::to_string(d.d.parent) + "/" + std::string(d.d.name) + "->" + std::to_string(d.d.ino));
    return out;
  }

 private:
  static constexpr uint64_t b_parent_ = 139265, a_ino_ = 139300, b_ino_ = 139301;
};

constexpr uint64_t kDir = 139265, kOther = 139266, kX = 139300, kY = 139301;

TEST_F(DentryRecoveryTest, OnlyLiveDentriesAreNamesAndTheRestIsFreed) {
  Write("live", kDir, kX);
  Write("pending", kDir, kY, kDentryStatePending);
  Write("dead", kDir, kY, kDentryStateDead);
  const Made torn = Write("torn-in-the-crash", kDir, kY);
  store.Line(torn.line + 1)[5] = 0;
  RecoveredDentries r;
  EXPECT_EQ(Live(&r), std::set<std::string>{"139265/live->139300"});
  EXPECT_EQ(r.free.size(), 3u);
  EXPECT_EQ(r.links.at(kX), 1u);
  EXPECT_EQ(r.links.count(kY), 0u) << "an inode no live name names: an orphan";
}

// A rename's dentry is its commit point: before it is durable the old
// names stand, after it the new one does, whatever else reached the media.
TEST_F(DentryRecoveryTest, ARenameIsAllThereOrNotAtAll) {
  const Made a = Write("a", kDir, kX);
  const Made b = Write("b", kOther, kY);
  // rename("a", "other/b"): the new dentry supersedes a (its source, same
  // inode) and b (replaced: same directory and name).
  const Made n = Write("b", kOther, kX, kDentryStateLive, kDentryRename, a.ref(), b.ref());
  RecoveredDentries r;
  EXPECT_EQ(Live(&r), std::set<std::string>{"139266/b->139300"});
  EXPECT_EQ(r.superseded.size(), 2u);
  EXPECT_EQ(r.links.count(kY), 0u);
  // The same crash an instant earlier: the rename's dentry torn.
  store.Line(n.line)[4] = 0;
  EXPECT_EQ(Live(), (std::set<std::string>{"139265/a->139300", "139266/b->139301"}));
}

TEST_F(DentryRecoveryTest, AChainOfRenamesLeavesTheLastName) {
  const Made a = Write("a", kDir, kX);
  const Made b = Write("b", kDir, kX, kDentryStateLive, kDentryRename, a.ref());
  Write("c", kDir, kX, kDentryStateLive, kDentryRename, b.ref());
  EXPECT_EQ(Live(), std::set<std::string>{"139265/c->139300"});
}

TEST_F(DentryRecoveryTest, AnExchangeNeedsBothItsDentries) {
  const Made a = Write("a", kDir, kX);
  const Made b = Write("b", kDir, kY);
  uint64_t h1, h2;
  Exchange(a, b, &h1, &h2);
  EXPECT_EQ(Live(), (std::set<std::string>{"139265/a->139301", "139265/b->139300"}));
  store.Line(h2)[6] = 0;  // the second of the pair never reached the media
  EXPECT_EQ(Live(), (std::set<std::string>{"139265/a->139300", "139265/b->139301"}));
}

// An exchange once whole stays, when one of its pair is later removed and
// its run reused: its old dentries were set dead after the commit.
TEST_F(DentryRecoveryTest, AnExchangeStaysWhenOneOfItsPairIsRemovedLater) {
  const Made a = Write("a", kDir, kX);
  const Made b = Write("b", kDir, kY);
  uint64_t h1, h2;
  Exchange(a, b, &h1, &h2);
  RecoveredDentries r;
  Live(&r);
  ApplyRecovery(&store, r);  // a and b dead and freed, as after the commit
  store.Line(h2)[0] = WithDentryState(store.Line(h2)[0], kDentryStateDead);  // unlink("b")
  EXPECT_EQ(Live(&r), std::set<std::string>{"139265/a->139301"});
  ApplyRecovery(&store, r);  // b's dentry freed too: a's partner is gone
  EXPECT_EQ(Live(), std::set<std::string>{"139265/a->139301"});
}

// A claim names a line and its generation: a line reused since holds a
// dentry the claim does not name.
TEST_F(DentryRecoveryTest, AClaimDoesNotReachADentryMadeOnTheLineSince) {
  const Made a = Write("a", kDir, kX);
  const Made n = Write("b", kDir, kX, kDentryStateLive, kDentryRename, a.ref());
  // a is set dead and its line given back and reused for another name of
  // the same inode (a hard link made later), while n still claims a.
  store.Line(a.line)[0] = WithDentryState(store.Line(a.line)[0], kDentryStateDead);
  arena.Give(a.line, 1, a.gen);
  arena.Settle();
  const Made c = Write("c", kDir, kX);
  ASSERT_EQ(c.line, a.line);
  ASSERT_GT(c.gen, a.gen);
  (void)n;
  EXPECT_EQ(Live(), (std::set<std::string>{"139265/b->139300", "139265/c->139300"}));
}

TEST_F(DentryRecoveryTest, TwoLiveNamesOfOneNameAreDamage) {
  Write("same", kDir, kX);
  Write("same", kDir, kY);
  RecoveredDentries r;
  const Status st = RecoverDentries(&store, &r);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("both live, one name \"same\""), std::string::npos) << st.message();
}

TEST_F(DentryRecoveryTest, ADirectoryWithTwoLiveNamesIsDamage) {
  Write("d1", kDir, kX, kDentryStateLive, 0, kDentryNone, kDentryNone, kDentryNone, 2);
  Write("d2", kOther, kX, kDentryStateLive, 0, kDentryNone, kDentryNone, kDentryNone, 2);
  RecoveredDentries r;
  const Status st = RecoverDentries(&store, &r);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("two live names"), std::string::npos) << st.message();
}

// Applied, a recovery leaves nothing to do for the next one: the
// superseded are dead, every freed run reads empty and keeps its
// generation, and the live names are the same.
TEST_F(DentryRecoveryTest, ARecoveryAppliedLeavesNothingForTheNext) {
  const Made a = Write("a", kDir, kX);
  const Made n = Write("b-with-a-longer-name-than-eight", kDir, kX, kDentryStateLive, kDentryRename, a.ref());
  Write("pending", kDir, kY, kDentryStatePending);
  RecoveredDentries first;
  const std::set<std::string> live = Live(&first);
  ApplyRecovery(&store, first);
  RecoveredDentries second;
  EXPECT_EQ(Live(&second), live);
  EXPECT_TRUE(second.superseded.empty());
  EXPECT_TRUE(second.free.empty());
  EXPECT_EQ(DentryLineGen(store.Line(a.line)[0]), a.gen) << "a freed line keeps its generation";
  (void)n;
}

TEST_F(DentryRecoveryTest, ALineTakesAGenerationAboveAnyItsRunHeld) {
  const Made longer = Write(std::string(200, 'l'), kDir, kX);  // 5 lines, gen 1
  store.Line(longer.line)[0] = WithDentryState(store.Line(longer.line)[0], kDentryStateDead);
  arena.Give(longer.line, DentryLines(200), 9);  // as if its generation were 9
  arena.Settle();
  uint64_t h;
  uint32_t g;
  ASSERT_TRUE(arena.Take(3, &h, &g).ok());
  EXPECT_EQ(g, 10u);
  ASSERT_TRUE(arena.Take(2, &h, &g).ok());
  EXPECT_EQ(g, 10u) << "the run's rest, split off, also rises";
}

}  // namespace
}  // namespace upfs
