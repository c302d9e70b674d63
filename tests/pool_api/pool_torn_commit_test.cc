// A commit a crash cut short, in a version 7 pool (two persistence waits a
// commit; version 8's one wait: pool_one_wait_test). The namespace log's writer leaves a record's
// last payload line to be written back together with its kApply
// (docs/design.md, "A commit's last line"), and the media promise 8-byte
// failure atomicity, not a whole line: a power failure can persist the
// kApply without some payload words of its line, which then read zero.
// Recovery must take such a record for the end of the log (it never
// returned), and only such a record: the same bytes in a pool detached
// cleanly, a flipped bit, a zero where a valid record may hold a zero, one
// outside the kApply's line, or one far from the tail are damage.
#include "pool_corruption_fixture.h"

#include "container/pool/ns_log.h"

namespace {

using upfs::NsRecord;

// A record written into work_'s log by hand.
struct Written {
  LogSlot reserve, apply;
  std::vector<uint64_t> words;  // the payload
  // Offset of payload word i.
  uint64_t Off(uint32_t i) const { return reserve.Off() + 8 + 8 * uint64_t(i); }
  // The payload words in the kApply's cache line.
  std::vector<uint32_t> InApplyLine() const {
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < words.size(); ++i)
      if (upfs::SlotLine(reserve.slot + 1 + i) == upfs::SlotLine(apply.slot)) v.push_back(i);
    return v;
  }
};

class PoolTornCommitTest : public PoolCorruptionTest {
 protected:
  static void SetUpTestSuite() {
    pool_version_ = 7;
    PoolCorruptionTest::SetUpTestSuite();
  }
  static void TearDownTestSuite() {
    PoolCorruptionTest::TearDownTestSuite();
    pool_version_ = 0;
  }
  // Commits `rec` at `*tail` of work_ as the writer does (kReserve, payload,
  // kApply with the payload's CRC right after it), first padding with empty
  // dead reservations until `fits` holds for the kReserve's slot; moves
  // *tail past it.
  Written Commit(const NsRecord& rec, LogSlot* tail, const std::function<bool(const Written&)>& fits) {
    uint64_t w[kMaxRecordWords];
    const bool tagged = pool_version_ == 0 || pool_version_ >= kFirstOneWaitPoolVersion;
    const uint32_t n = upfs::EncodeRecord(rec, w, tagged, Creations());
    Written r;
    r.words.assign(w, w + n);
    for (;; ++tail->slot) {
      EXPECT_LT(tail->slot + n + 2, kSlotsPerLogBlock);
      r.reserve = *tail;
      r.apply = LogSlot{tail->block, tail->slot + n + 1};
      if (fits(r)) break;
      SetWord(work_, tail->Off(), EncodeReserve(0));
    }
    SetWord(work_, r.reserve.Off(), EncodeReserve(n));
    EXPECT_TRUE(PWrite(work_, w, n * 8, r.Off(0)));
    SetWord(work_, r.apply.Off(), EncodeApply(r.reserve.slot, upfs::Crc32c(w, n * 8)));
    tail->slot = r.apply.slot + 1;
    return r;
  }
  // A record whose last word shares the kApply's line, as the writer
  // leaves it when it defers that line.
  static bool SharesLine(const Written& r) {
    return upfs::SlotLine(r.apply.slot) == upfs::SlotLine(r.apply.slot - 1);
  }
  NsRecord Create(const char* name) const {
    NsRecord rec;
    rec.type = RecordType::kCreate;
    rec.ftype = FileType::kRegular;
    rec.ino = layout_.ino_small;  // (the crashed base has the same inodes)
    rec.dir1 = layout_.sb.root_ino;
    rec.name1 = name;
    // A version 9 pool's create of a regular file carries its creation
    // values (these never apply here: every such commit is cut short or
    // refused).
    if (Creations()) rec.creation = upfs::NsCreation{true, FileType::kRegular, 1, 0644, 1, 0, 1};
    return rec;
  }
  static bool Creations() {
    return pool_version_ == 0 || pool_version_ >= upfs::format::pool::kFirstFreshCreatePoolVersion;
  }
  // "a" renamed to "b" in the root, over the big file (a nonzero victim).
  NsRecord RenameOverBig() const {
    NsRecord rename = Create("a");
    rename.type = RecordType::kRename;
    rename.dir2 = rename.dir1;
    rename.name2 = "b";
    rename.victim = layout_.ino_big;
    return rename;
  }
  // Mounts work_ and says whether `rel` exists there.
  bool Exists(const std::string& rel) {
    EXPECT_EQ(upfs_mount(work_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
    struct stat st;
    const bool there = upfs_lstat(M(rel).c_str(), &st) == 0;
    EXPECT_EQ(upfs_umount(mnt_.c_str()), 0);
    return there;
  }
  // What recovery and the checks must do with a commit cut short: CheckPool
  // and fsck name it without calling it damage and without writing; the
  // mount discards it (and `discarded` after it), leaves a consistent pool
  // that takes new records.
  void ExpectCutShort(const Written& r, const std::vector<std::string>& discarded) {
    const uint64_t before = PoolDurableHash(work_);
    upfs::PoolReport rep;
    ASSERT_TRUE(upfs::CheckPool(work_, &rep).ok());
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0];
    EXPECT_NE(rep.torn_commit.find("slot " + std::to_string(r.apply.slot) + " "), std::string::npos)
        << "CheckPool did not name the commit cut short: '" << rep.torn_commit << "'";
    std::string out;
    EXPECT_EQ(Fsck(work_, &out), 0) << out;
    EXPECT_NE(out.find("a commit a crash interrupted"), std::string::npos) << out;
    EXPECT_EQ(PoolDurableHash(work_), before) << "checking changed the pool";
    Outcome o = Try([&] {
      EXPECT_TRUE(Put("after-recovery", "new record at the tail")) << upfs_last_error();
    });
    EXPECT_TRUE(o.mounted) << o.mount_error;
    EXPECT_EQ(o.walk.errors, 0);
    EXPECT_TRUE(o.check_ok) << o.check;
    EXPECT_FALSE(o.check_problems) << o.check;
    for (const std::string& d : discarded) EXPECT_FALSE(Exists(d)) << d << " survived a commit cut short";
    EXPECT_TRUE(Exists("after-recovery"));
    EXPECT_TRUE(Exists("kept")) << "a record that returned before the crash was lost";
  }
};

TEST_F(PoolTornCommitTest, ACommitCutShortEndsTheLogAfterACrash) {
  // Each word of the kApply's line lost alone, then all of them.
  UseCrashed();
  LogSlot tail = crashed_layout_.tail;
  const Written probe = Commit(Create("torn-name"), &tail, SharesLine);
  const std::vector<uint32_t> line = probe.InApplyLine();
  ASSERT_FALSE(line.empty());
  for (size_t k = 0; k <= line.size(); ++k) {
    SCOPED_TRACE(k < line.size() ? "payload word " + std::to_string(line[k]) + " lost" : "the whole line lost");
    UseCrashed();
    tail = crashed_layout_.tail;
    const Written r = Commit(Create("torn-name"), &tail, SharesLine);
    for (size_t j = 0; j < line.size(); ++j)
      if (j == k || k == line.size()) SetWord(work_, r.Off(line[j]), 0);
    ExpectCutShort(r, {"torn-name"});
  }
}

TEST_F(PoolTornCommitTest, CommitsAfterTheCutOneGoWithIt) {
  // Later commits did not return either (one that did would have written
  // the cut line back first), and a kReserve lost in the same line ends
  // the log before its record.
  UseCrashed();
  LogSlot tail = crashed_layout_.tail;
  const Written r = Commit(Create("torn-name"), &tail, SharesLine);
  Commit(Create("later"), &tail, [](const Written&) { return true; });
  SetWord(work_, r.Off(uint32_t(r.words.size()) - 1), 0);
  ExpectCutShort(r, {"torn-name", "later"});

  UseCrashed();
  tail = crashed_layout_.tail;
  const Written s = Commit(Create("torn"), &tail, [](const Written& w) {
    return SharesLine(w) && upfs::SlotLine(w.reserve.slot) == upfs::SlotLine(w.apply.slot);
  });
  SetWord(work_, s.reserve.Off(), 0);
  Outcome o = Try();
  EXPECT_TRUE(o.mounted) << o.mount_error;
  EXPECT_TRUE(o.check_ok && !o.check_problems) << o.check;
  EXPECT_FALSE(Exists("torn"));
}

TEST_F(PoolTornCommitTest, OnlyACrashCutsACommitShort) {
  // The same bytes in a pool that was detached cleanly: damage.
  LogSlot tail = layout_.tail;
  const Written r = Commit(Create("torn-name"), &tail, SharesLine);
  SetWord(work_, r.Off(uint32_t(r.words.size()) - 1), 0);
  Outcome o = Try();
  ExpectRefused(o, kLog);
  EXPECT_TRUE(Names(o.mount_error, {"checksum"})) << o.mount_error;
}

TEST_F(PoolTornCommitTest, DamageInTheLastRecordIsNotACutCommit) {
  struct Case {
    std::string what;
    NsRecord rec;
    std::function<bool(const Written&)> fits;
    std::function<uint32_t(const Written&)> word;  // which payload word to damage
    bool zero;                                      // zero it, else flip a bit
  };
  NsRecord long_name = Create("a-name-long-enough-that-its-payload-spans-more-than-one-line");
  const std::vector<Case> cases = {
      {"a flipped bit in the kApply's line", Create("torn-name"), SharesLine,
       [](const Written& w) { return uint32_t(w.words.size()) - 1; }, false},
      {"a zero in an earlier line", long_name, SharesLine, [](const Written&) { return 5u; }, true},
      {"a zero where a rename's victim may be zero", RenameOverBig(),
       [](const Written& w) {
         return SharesLine(w) && upfs::SlotLine(w.reserve.slot + 1 + 4) == upfs::SlotLine(w.apply.slot);
       },
       [](const Written&) { return 4u; }, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    UseCrashed();
    LogSlot tail = crashed_layout_.tail;
    const Written r = Commit(c.rec, &tail, c.fits);
    const uint32_t i = c.word(r);
    ASSERT_LT(i, r.words.size());
    if (c.zero) {
      ASSERT_NE(r.words[i], 0u);
      SetWord(work_, r.Off(i), 0);
    } else {
      FlipBit(work_, r.Off(i), 5);
    }
    ExpectRefused(Try(), kLog);
  }
}

TEST_F(PoolTornCommitTest, ACutFarFromTheTailIsDamage) {
  // More records after it than commits can be in flight at once: they
  // returned, so this one was durable before them, and a zero in it is
  // damage. A crashed pool with that many records past its checkpoint's
  // continuation (a checkpoint comes every 256 log blocks).
  const std::string crashed_many = work_ + ".many";
  ASSERT_TRUE(CopySparse(base_, crashed_many));
  const uint32_t records = upfs::kMaxCommitsInFlight + 200;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (upfs_mount(crashed_many.c_str(), mnt_.c_str()) != 0) _exit(2);
    for (uint32_t i = 0; i < records; ++i)
      if (upfs_mkdir(M("m" + std::to_string(i)).c_str(), 0755) != 0) _exit(3);
    kill(getpid(), SIGKILL);
    _exit(4);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit " << WEXITSTATUS(status);
  Layout L;
  ReadLayout(crashed_many, &L);
  ASSERT_EQ(L.cont_block, layout_.cont_block) << "a checkpoint was taken: the test needs a longer log";
  // The first record after the continuation whose last word shares its
  // kApply's line (the writer's own placement).
  LogSlot at = L.delta_apply;
  uint32_t rs = L.delta_reserve.slot;
  for (;;) {
    ASSERT_LT(at.slot, kSlotsPerLogBlock) << "no record shares its kApply's line";
    const uint64_t e = Word(crashed_many, at.Off());
    ASSERT_NE(e, 0u);
    if (KindOf(e) == EntryKind::kReserve) {
      at.slot += 1 + ReserveCount(e);
      continue;
    }
    rs = ApplySlot(e);
    const uint32_t n = ReserveCount(Word(crashed_many, LogSlot{at.block, rs}.Off()));
    if (upfs::SlotLine(rs + n) == upfs::SlotLine(at.slot)) break;
    at.slot += 1;
  }
  ASSERT_TRUE(CopySparse(crashed_many, work_));
  unlink(crashed_many.c_str());
  const uint32_t n = ReserveCount(Word(work_, LogSlot{at.block, rs}.Off()));
  SetWord(work_, LogSlot{at.block, rs + n}.Off(), 0);  // its last word: a name's
  ExpectRefused(Try(), kLog);
}

// Version 8 (one persistence wait a commit): the whole payload is written
// back with the kApply, so any of its lines may be lost, and every word of
// a valid payload is nonzero (words 3 and 4 tagged), so that a zero
// anywhere in it is a lost word, where version 7 would call it damage.
class PoolOneWaitTornTest : public PoolTornCommitTest {
 protected:
  static void SetUpTestSuite() {
    pool_version_ = 0;
    PoolCorruptionTest::SetUpTestSuite();
  }
  static void TearDownTestSuite() { PoolCorruptionTest::TearDownTestSuite(); }
  static bool Anywhere(const Written&) { return true; }
};

TEST_F(PoolOneWaitTornTest, ALostWordInAnyLineCutsTheCommitShort) {
  const NsRecord long_name = Create("a-name-long-enough-that-its-payload-spans-more-than-one-line");
  for (const NsRecord& rec : {long_name, RenameOverBig()}) {
    UseCrashed();
    LogSlot tail = crashed_layout_.tail;
    const size_t words = Commit(rec, &tail, Anywhere).words.size();
    for (uint32_t i = 0; i < words; ++i) {
      SCOPED_TRACE("payload word " + std::to_string(i) + " of " + std::string(rec.name1) + " lost");
      UseCrashed();
      tail = crashed_layout_.tail;
      const Written r = Commit(rec, &tail, Anywhere);
      ASSERT_NE(r.words[i], 0u) << "a valid version 8 payload has no zero word";
      SetWord(work_, r.Off(i), 0);
      ExpectCutShort(r, {std::string(rec.type == RecordType::kRename ? rec.name2 : rec.name1)});
    }
  }
}

TEST_F(PoolOneWaitTornTest, OnlyALostWordCutsACommitShort) {
  // A flipped bit anywhere in the last record, a word stored without its
  // tag, and a lost word in a pool detached cleanly are damage.
  UseCrashed();
  LogSlot tail = crashed_layout_.tail;
  Written r = Commit(RenameOverBig(), &tail, Anywhere);
  FlipBit(work_, r.Off(4), 7);
  ExpectRefused(Try(), kLog);

  UseCrashed();
  tail = crashed_layout_.tail;
  r = Commit(Create("untagged"), &tail, Anywhere);
  std::vector<uint64_t> w = r.words;
  w[3] &= ~upfs::format::pool::kRecordWordTag;  // as version 7 wrote it, its CRC right
  ASSERT_TRUE(PWrite(work_, w.data(), w.size() * 8, r.Off(0)));
  SetWord(work_, r.apply.Off(), EncodeApply(r.reserve.slot, upfs::Crc32c(w.data(), w.size() * 8)));
  Outcome o = Try();
  ExpectRefused(o, kLog);
  EXPECT_TRUE(Names(o.mount_error, {"tag"})) << o.mount_error;

  tail = layout_.tail;
  ASSERT_TRUE(CopySparse(base_, work_));
  r = Commit(Create("torn-name"), &tail, Anywhere);
  SetWord(work_, r.Off(1), 0);
  o = Try();
  ExpectRefused(o, kLog);
  EXPECT_TRUE(Names(o.mount_error, {"checksum"})) << o.mount_error;
}

}  // namespace

namespace {

// The namespace log's tail in a block that already has a successor: a
// racer linked it on the strength of a closing reservation whose line the
// crash then lost (its fence does not persist another thread's line; the
// pool crash explorer's ns-rollover-races reaches it). Recovery leaves the
// empty successor linked, to be used in turn, and fsck of the recovered
// pool must not call that damage; a successor past the tail that holds an
// entry is damage.
class PoolTailSuccessorTest : public PoolCorruptionTest {
 protected:
  // Links a fresh, empty namespace log block after the tail's block of
  // work_ (laid out as L): the first block of 2 MiB added to the pool file
  // (as growth adds them), so that nothing else references it.
  uint32_t LinkEmptySuccessor(const Layout& L) {
    const uint32_t n = uint32_t(L.blocks);
    EXPECT_EQ(truncate(work_.c_str(), off_t(L.blocks * kB + (2u << 20))), 0);
    const uint64_t tail_block = uint64_t(L.tail.block) * kB;
    SetWord(work_, uint64_t(n) * kB, upfs::format::pool::NsNextWord(0));
    SetWord(work_, uint64_t(n) * kB + 8, Word(work_, tail_block + 8) + 1);  // seq
    SetWord(work_, tail_block, upfs::format::pool::NsNextWord(n));
    return n;
  }
};

TEST_F(PoolTailSuccessorTest, AnEmptySuccessorRecoveryLeavesIsNotDamage) {
  UseCrashed();
  LinkEmptySuccessor(crashed_layout_);
  Outcome o = Try([&] { EXPECT_TRUE(Put("after-recovery", "a record at the tail")) << upfs_last_error(); });
  ExpectHarmless(o);
}

TEST_F(PoolTailSuccessorTest, ASuccessorPastTheTailThatHoldsAnEntryIsDamage) {
  const uint32_t n = LinkEmptySuccessor(layout_);
  SetWord(work_, LogSlot{n, 3}.Off(), EncodeReserve(2));
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(work_, &r).ok());
  std::string all;
  for (const std::string& p : r.problems) all += p + "; ";
  EXPECT_NE(all.find("holds entries"), std::string::npos) << all;
}

}  // namespace
