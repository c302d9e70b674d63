// LogWriter without a File or a container: entries committed at a log's
// tail are what a replay reads, conflicts stop a commit, chains extend, and
// payloads (inline runs or overflow blocks) round-trip; what a crash can
// leave of a commit persisted in one round, and what replays make of it.
#include "engine/log_writer.h"

#include <gtest/gtest.h>

#include "engine/epoch_pin.h"
#include "tests/engine/memory_storage.h"

namespace upfs_engine_test {
namespace {

using FRun = format::Run;

struct Writer {
  explicit Writer(MemoryStorage* s)
      : ms(s), w(&s->space(), &s->source(), s->root()), pos(s->Start()) {}
  // Commits an inline mapping of vblock v to fresh block(s); returns the block.
  uint32_t Map(uint32_t v, bool* conflicted = nullptr, bool touch_conflicts = false) {
    std::vector<FRun> runs;
    EXPECT_TRUE(ms->source().Alloc(&t, 1, &runs).ok());
    uint64_t e = format::EncodeInline({v, runs[0].lblock, 1, false});
    bool c = false;
    Status st = w.Commit(&t, &scratch, &pos, e, pending,
                         [&](const Effect& eff) { return touch_conflicts && eff.TouchesBlocks(v, v + 1); },
                         &c);
    EXPECT_TRUE(st.ok()) << st.message();
    if (conflicted) *conflicted = c;
    if (c) ms->source().FreeRuns(&t, runs);
    return c ? 0 : runs[0].lblock;
  }
  MemoryStorage* ms;
  LogWriter w;
  LogPos pos;
  ThreadBlocks t;
  Effect scratch;
  PendingEntry pending;
};

TEST(LogWriter, CommittedInlineEntriesAreWhatAReplayReads) {
  MemoryStorage ms;
  Writer a(&ms);
  uint32_t l0 = a.Map(0), l7 = a.Map(7), l0b = a.Map(0);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.entries, 3u);
  EXPECT_EQ(table.Get(0), l0b);
  EXPECT_NE(l0, l0b);
  EXPECT_EQ(table.Get(7), l7);
  EXPECT_EQ(table.Get(1), 0u);
  EXPECT_EQ(res.tail.slot, 3u);
}

TEST(LogWriter, AnEntryCommittedSinceTheSnapshotStopsAConflictingCommit) {
  MemoryStorage ms;
  Writer a(&ms), b(&ms);  // both start from the same snapshot
  uint32_t mine = a.Map(5);
  bool conflicted = false;
  EXPECT_EQ(b.Map(5, &conflicted, /*touch_conflicts=*/true), 0u);
  EXPECT_TRUE(conflicted);
  EXPECT_EQ(b.pos.slot, 1u) << "the scan moved past the entry it saw";
  // Not conflicting: it lands after a's entry.
  uint32_t other = b.Map(6, &conflicted, true);
  EXPECT_FALSE(conflicted);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.entries, 2u);
  EXPECT_EQ(table.Get(5), mine);
  EXPECT_EQ(table.Get(6), other);
}

TEST(LogWriter, AFullBlockIsFollowedByANewLinkedOne) {
  MemoryStorage ms;
  Writer a(&ms);
  const uint32_t n = format::kSlotsPerLogBlock + 10;
  for (uint32_t i = 0; i < n; ++i) a.Map(i % 100);
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.entries, n);
  ASSERT_EQ(res.log_blocks.size(), 2u);
  EXPECT_EQ(res.log_blocks[0], MemoryStorage::kFirstLogBlock);
  EXPECT_TRUE(ms.bitmap().Test(res.log_blocks[1])) << "the new log block is taken";
  EXPECT_EQ(a.pos.seq, 2u);
  bool wanted, behind;
  a.w.TakeGcRequests([] { return uint64_t{0}; }, &wanted, &behind);
  EXPECT_FALSE(wanted) << "two blocks are far below the GC trigger";
  EXPECT_FALSE(behind);
}

TEST(LogWriter, PayloadsRoundTripInlineAndThroughOverflowBlocks) {
  for (size_t nruns : {size_t(3), size_t(300)}) {  // over kMaxInlineRuns: overflow
    MemoryStorage ms;
    Writer a(&ms);
    std::vector<FRun> runs;
    for (size_t i = 0; i < nruns; ++i) {
      std::vector<FRun> one;
      ASSERT_TRUE(ms.source().Alloc(&a.t, 2, &one).ok());  // 2 blocks: every run its own
      runs.push_back(FRun{one[0].lblock, 1});
      ms.source().Free(&a.t, one[0].lblock + 1, 1);  // keeps the runs apart
    }
    const uint64_t size = nruns * format::kBlockSize - 100;
    ASSERT_TRUE(a.w.BuildPayload(&a.t, &a.pending, 10, runs, Effect::kMax, 10 * format::kBlockSize + size).ok());
    EXPECT_EQ(!a.pending.overflow.empty(), nruns > format::kMaxInlineRuns);
    bool conflicted = true;
    ASSERT_TRUE(a.w.Commit(&a.t, &a.scratch, &a.pos, 0, a.pending, [](const Effect&) { return false; },
                           &conflicted).ok());
    EXPECT_FALSE(conflicted);
    BlockTable table;
    ReplayResult res;
    ASSERT_TRUE(ms.Replay(&table, &res).ok());
    EXPECT_EQ(table.size(), 10 * format::kBlockSize + size);
    for (size_t i = 0; i < nruns; ++i) ASSERT_EQ(table.Get(10 + i), runs[i].lblock) << i;
    EXPECT_EQ(res.overflow.size(), a.pending.overflow.size()) << "the log owns the overflow blocks";
  }
}

TEST(LogWriter, APayloadThatDoesNotFitPadsTheBlockAndGoesToTheNext) {
  MemoryStorage ms;
  Writer a(&ms);
  for (uint32_t i = 0; i < format::kSlotsPerLogBlock - 3; ++i) a.Map(1);
  std::vector<FRun> runs{FRun{0, 4}};  // a hole run: 4 words of payload at least
  ASSERT_TRUE(a.w.BuildPayload(&a.t, &a.pending, 0, runs, Effect::kSet, 4 * format::kBlockSize).ok());
  bool conflicted = true;
  ASSERT_TRUE(a.w.Commit(&a.t, &a.scratch, &a.pos, 0, a.pending, [](const Effect&) { return false; },
                         &conflicted).ok());
  BlockTable table;
  ReplayResult res;
  ASSERT_TRUE(ms.Replay(&table, &res).ok());
  EXPECT_EQ(res.log_blocks.size(), 2u);
  EXPECT_EQ(table.size(), 4 * format::kBlockSize);
  EXPECT_EQ(table.Get(1), 0u) << "the size-set payload unmapped it";
}

TEST(LogWriter, DroppingAPayloadGivesItsOverflowBlocksBack) {
  MemoryStorage ms;
  Writer a(&ms);
  std::vector<FRun> runs;  // alternating kept blocks and holes: 300 runs
  for (uint32_t i = 0; i < 300; ++i) runs.push_back(FRun{i % 2 ? 0u : format::kKeepBlock, 1});
  ASSERT_TRUE(a.w.BuildPayload(&a.t, &a.pending, 0, runs, Effect::kNone, 0).ok());
  ASSERT_EQ(a.pending.overflow.size(), 1u);
  const FRun ov = a.pending.overflow[0];
  a.w.DropPayload(&a.t, &a.pending);
  EXPECT_TRUE(a.pending.overflow.empty());
  EXPECT_TRUE(a.pending.empty());
  uint32_t again = 0;
  ASSERT_TRUE(ms.source().AllocOne(&a.t, &again).ok());
  EXPECT_GE(again, ov.lblock) << "the thread's free list has them";
  EXPECT_LT(again, ov.lblock + ov.count);
}

// A payload commit persists in one round, so a crash can leave what no
// clean log holds: an apply whose payload lines did not reach media, or
// payload words whose reservation did not. Only a replay that allows for a
// crash reads past them, and only recovery clears them; anything of the
// kind that is not the log's last commit, or that a crash cannot have
// left (a word that did not reach media holds zero), is damage.
constexpr uint64_t kB = format::kBlockSize;
constexpr uint64_t kRefused = ~uint64_t{0};
constexpr uint32_t kRuns = 40;  // a payload of 42 words: its span crosses lines

// Log slots by cache line (a block's 16-byte header comes first).
uint32_t LineOf(uint32_t slot) { return (16 + 8 * slot) / 64; }
uint32_t FirstSlotOf(uint32_t line) { return line == 0 ? 0 : (64 * line - 16) / 8; }

struct CrashTail {
  MemoryStorage ms;
  Writer a{&ms};
  format::LogBlock* lb = reinterpret_cast<format::LogBlock*>(
      ms.space().base() + (MemoryStorage::kFirstLogBlock << format::kBlockShift));
  void SetSize(Writer* wr, uint64_t size, uint32_t nruns = 1) {
    std::vector<FRun> runs(nruns, FRun{0, 1});  // holes
    ASSERT_TRUE(wr->w.BuildPayload(&wr->t, &wr->pending, 0, runs, Effect::kSet, size).ok());
    bool conflicted = true;
    ASSERT_TRUE(wr->w.Commit(&wr->t, &wr->scratch, &wr->pos, 0, wr->pending,
                             [](const Effect&) { return false; }, &conflicted).ok());
    ASSERT_FALSE(conflicted);
  }
  // The payload line two lines after the reservation's did not reach media
  // (any of its words would do: media tear lines word by word).
  void TearPayload(uint32_t rs) {
    const uint32_t line = LineOf(rs) + 2;
    for (uint32_t s = FirstSlotOf(line); s < FirstSlotOf(line + 1); ++s) lb->slots[s].store(0);
  }
  Status Replay(TailRule rule, BlockTable* t, ReplayResult* res) {
    return ReplayChain(BlockAccess(&ms.space()), uint32_t(ms.head()), t, res, rule);
  }
  // 3 KiB, then the commit under test (5 KiB, a payload across lines):
  // sets apply and rs, its apply's and its reservation's slots.
  void TwoCommits() {
    SetSize(&a, 3 * kB);
    SetSize(&a, 5 * kB, kRuns);
    apply = a.pos.last;
    rs = format::ApplySlot(lb->slots[apply].load());
  }
  // Every replay that allows for a crash refuses the log as damage, and
  // clears nothing.
  void RefusedAsDamage() {
    for (TailRule rule : {TailRule::kReadOnly, TailRule::kCrashed, TailRule::kRecover}) {
      std::string why;
      EXPECT_EQ(SizeAfter(rule, nullptr, &why), kRefused) << int(rule);
      EXPECT_NE(why.find("payload checksum mismatch"), std::string::npos) << why;
    }
    EXPECT_NE(lb->slots[apply].load(), 0u) << "damage is never cleared";
  }
  uint32_t apply = 0, rs = 0;
  // Replays with `rule`; the size it reads, or kRefused.
  uint64_t SizeAfter(TailRule rule, ReplayResult* res = nullptr, std::string* why = nullptr) {
    BlockTable t;
    ReplayResult r;
    Status st = Replay(rule, &t, &r);
    if (res) *res = r;
    if (why) *why = st.message();
    return st.ok() ? t.size() : kRefused;
  }
};

TEST(LogWriter, ACommitCutShortByACrashEndsTheLogOnlyAfterACrash) {
  CrashTail c;
  c.a.Map(0);
  c.SetSize(&c.a, 3 * kB);
  c.SetSize(&c.a, 5 * kB, kRuns);
  const uint32_t apply = c.a.pos.last;
  const uint32_t rs = format::ApplySlot(c.lb->slots[apply].load());
  c.TearPayload(rs);
  std::string why;
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict, nullptr, &why), kRefused);
  EXPECT_NE(why.find("payload checksum mismatch"), std::string::npos) << why;
  EXPECT_EQ(c.SizeAfter(TailRule::kLive), kRefused);
  EXPECT_EQ(c.SizeAfter(TailRule::kReadOnly), 3 * kB);
  ReplayResult res;
  EXPECT_EQ(c.SizeAfter(TailRule::kCrashed, &res), 3 * kB);
  EXPECT_EQ(res.cut_short_words, 1u);
  EXPECT_NE(c.lb->slots[apply].load(), 0u) << "a check after a crash writes nothing";
  EXPECT_EQ(c.SizeAfter(TailRule::kRecover, &res), 3 * kB);
  EXPECT_EQ(c.lb->slots[apply].load(), 0u);
  EXPECT_EQ(res.tail.slot, apply);
  EXPECT_EQ(res.tail.last, rs) << "the reservation stays, inert";
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict), 3 * kB) << "recovered: a clean log";
  Writer b(&c.ms);
  b.pos = res.tail;
  c.SetSize(&b, 9 * kB);
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict), 9 * kB) << "commits go on where the log now ends";
}

TEST(LogWriter, ADamagedLastCommitIsNotTakenForACrash) {
  CrashTail c;
  c.TwoCommits();
  // A flipped bit leaves no zero word: no crash leaves that.
  c.lb->slots[c.rs + 20].store(c.lb->slots[c.rs + 20].load() ^ 4);
  c.RefusedAsDamage();
}

TEST(LogWriter, OnlyTheLastCommitCanBeCutShort) {
  CrashTail c;
  c.TwoCommits();
  c.a.Map(1);  // committed after it
  c.TearPayload(c.rs);
  c.RefusedAsDamage();
}

TEST(LogWriter, WordsOfACommitWhoseReservationWasLostAreClearedByRecoveryAlone) {
  CrashTail c;
  c.TwoCommits();
  const uint32_t apply = c.apply, rs = c.rs;
  const uint32_t next_line = FirstSlotOf(LineOf(rs) + 1);
  for (uint32_t s = rs; s < next_line; ++s) c.lb->slots[s].store(0);  // its line never reached media
  std::string why;
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict, nullptr, &why), kRefused);
  EXPECT_NE(why.find("follows the end of the log"), std::string::npos) << why;
  // Beyond what one commit can reach, a word is damage even after a crash.
  c.lb->slots[400].store(0x1234);
  EXPECT_EQ(c.SizeAfter(TailRule::kCrashed), kRefused);
  EXPECT_EQ(c.SizeAfter(TailRule::kRecover), kRefused);
  EXPECT_EQ(c.lb->slots[400].load(), 0x1234u);
  c.lb->slots[400].store(0);
  ReplayResult res;
  EXPECT_EQ(c.SizeAfter(TailRule::kCrashed, &res), 3 * kB);
  EXPECT_EQ(res.cut_short_words, apply + 1 - next_line);
  EXPECT_EQ(c.SizeAfter(TailRule::kRecover, &res), 3 * kB);
  for (uint32_t s = rs; s < format::kSlotsPerLogBlock; ++s) EXPECT_EQ(c.lb->slots[s].load(), 0u) << s;
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict), 3 * kB);
}

// A commit after an apply in a block's last slot links a successor; a
// crash can keep the link and lose the apply's payload. Recovery unlinks
// the (empty) successor: the block ends the chain again.
TEST(LogWriter, ACutShortApplyThatFilledItsBlockMayHaveAnEmptySuccessor) {
  CrashTail c;
  c.SetSize(&c.a, 3 * kB);
  while (c.a.pos.slot < format::kSlotsPerLogBlock - (kRuns + 4)) c.a.Map(1);
  c.SetSize(&c.a, 5 * kB, kRuns);  // its apply in the last slot
  ASSERT_EQ(c.a.pos.last, format::kSlotsPerLogBlock - 1);
  const uint32_t rs = format::ApplySlot(c.lb->slots[c.a.pos.last].load());
  c.a.Map(2);  // links the successor
  const uint32_t next = format::NextBlock(c.lb->next.load());
  ASSERT_NE(next, 0u);
  auto* nb = reinterpret_cast<format::LogBlock*>(c.ms.space().base() + (uint64_t(next) << format::kBlockShift));
  nb->slots[0].store(0);  // that commit never reached media
  c.TearPayload(rs);
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict), kRefused);
  ReplayResult res;
  EXPECT_EQ(c.SizeAfter(TailRule::kCrashed, &res), 3 * kB);
  EXPECT_EQ(c.lb->next.load(), format::NextWord(next));
  EXPECT_EQ(c.SizeAfter(TailRule::kRecover, &res), 3 * kB);
  EXPECT_EQ(c.lb->next.load(), format::NextWord(0));
  EXPECT_EQ(res.log_blocks.size(), 1u);
  EXPECT_EQ(c.SizeAfter(TailRule::kStrict), 3 * kB);
}

}  // namespace
}  // namespace upfs_engine_test
