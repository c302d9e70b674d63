// Checked appends (format::kGrowTailChecked) through LogWriter alone: an
// append inside the tail block commits two words by one 16-byte CAS and
// persists with them in one round; what a crash can leave of one (its
// bytes or its second word lost), which replays end the log before it,
// and what is damage whatever happened (docs/design.md, "Checked appends").
#include <gtest/gtest.h>

#include <string>

#include "engine/log_writer.h"
#include "medium/pm.h"
#include "tests/engine/memory_storage.h"
#include "util/crc32c.h"

namespace upfs_engine_test {
namespace {

namespace fmt = format;
constexpr uint64_t kRefused = ~uint64_t{0};

struct Log {
  MemoryStorage ms;
  LogWriter w{&ms.space(), &ms.source(), ms.root()};
  LogPos pos = ms.Start();
  ThreadBlocks t;
  Effect scratch;
  PendingEntry pending;
  fmt::LogBlock* lb = Block(MemoryStorage::kFirstLogBlock);
  uint32_t tail_block = 0;  // block 0's mapping

  fmt::LogBlock* Block(uint32_t l) {
    return reinterpret_cast<fmt::LogBlock*>(ms.space().base() + (uint64_t(l) << fmt::kBlockShift));
  }
  char* Bytes(uint32_t l) { return ms.space().base() + (uint64_t(l) << fmt::kBlockShift); }
  void Commit(uint64_t entry) {
    bool conflicted = true;
    Status st = w.Commit(&t, &scratch, &pos, entry, pending, [](const Effect&) { return false; },
                         &conflicted);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_FALSE(conflicted);
  }
  // Maps block 0 to a fresh block and sets the size.
  void Start(uint64_t size) {
    std::vector<fmt::Run> runs;
    ASSERT_TRUE(ms.source().Alloc(&t, 1, &runs).ok());
    tail_block = runs[0].lblock;
    Commit(fmt::EncodeInline({0, tail_block, 1, false}));
    ASSERT_TRUE(w.BuildPayload(&t, &pending, 0, {}, Effect::kSet, size).ok());
    Commit(0);
  }
  // Appends `n` bytes of `fill` at `size` in place, as File::AppendInPlace
  // does; returns the entry's slot.
  uint32_t Append(uint64_t size, uint32_t n, char fill) {
    const uint32_t from = uint32_t(size % fmt::kBlockSize);
    std::string data(n, fill);
    char* at = Bytes(tail_block) + from;
    pm::StoreBytes(at, data.data(), n);
    pending.entry_word1 = fmt::EncodeGrowTailChecked1(tail_block, Crc32c(at, n));
    pending.bytes = at;
    pending.bytes_len = n;
    Commit(fmt::EncodeGrowTailChecked0(size + n, from));
    pending.entry_word1 = 0;
    pending.bytes = nullptr;
    pending.bytes_len = 0;
    return pos.last;
  }
  void Map(uint32_t v) {
    std::vector<fmt::Run> runs;
    ASSERT_TRUE(ms.source().Alloc(&t, 1, &runs).ok());
    Commit(fmt::EncodeInline({v, runs[0].lblock, 1, false}));
  }
  // Replays with `rule`; the size it reads, or kRefused.
  uint64_t SizeAfter(TailRule rule, ReplayResult* res = nullptr, std::string* why = nullptr) {
    BlockTable table;
    ReplayResult r;
    Status st = ReplayChain(BlockAccess(&ms.space()), uint32_t(ms.head()), &table, &r, rule);
    if (res) *res = r;
    if (why) *why = st.message();
    return st.ok() ? table.size() : kRefused;
  }
};

TEST(CheckedAppend, TakesAnAlignedPairOfSlotsAndReplaysAsTheSizeItRaises) {
  Log g;
  g.Start(100);  // two entries: the payload's reservation, payload and apply end at an odd slot
  const uint32_t first_free = g.pos.slot;
  const uint32_t s = g.Append(100, 50, 'a');
  EXPECT_EQ(s % 2, 0u);
  EXPECT_EQ(s, first_free + first_free % 2) << "an odd slot is padded past";
  EXPECT_EQ(g.pos.slot, s + 2);
  const uint32_t s2 = g.Append(150, 3000, 'b');
  EXPECT_EQ(s2, s + 2);
  for (TailRule rule : {TailRule::kStrict, TailRule::kLive, TailRule::kReadOnly, TailRule::kCrashed})
    EXPECT_EQ(g.SizeAfter(rule), 3150u) << int(rule);
  EXPECT_EQ(g.Bytes(g.tail_block)[149], 'a');
  EXPECT_EQ(g.Bytes(g.tail_block)[150], 'b');
}

TEST(CheckedAppend, BytesThatMissedMediaEndTheLogOnlyAfterACrash) {
  Log g;
  g.Start(100);
  g.Append(100, 50, 'a');
  const uint32_t s = g.Append(150, 200, 'b');
  g.Bytes(g.tail_block)[300] = 0;  // a line of its bytes never reached media
  // A file left clean has no crash to blame: its data bytes are not checked
  // (as no data byte below the size is).
  EXPECT_EQ(g.SizeAfter(TailRule::kStrict), 350u);
  EXPECT_EQ(g.SizeAfter(TailRule::kReadOnly), 150u);
  ReplayResult res;
  EXPECT_EQ(g.SizeAfter(TailRule::kCrashed, &res), 150u);
  EXPECT_EQ(res.cut_short_words, 2u);
  EXPECT_NE(g.lb->slots[s].load(), 0u) << "a check after a crash writes nothing";
  EXPECT_EQ(g.SizeAfter(TailRule::kRecover, &res), 150u);
  EXPECT_EQ(g.lb->slots[s].load(), 0u);
  EXPECT_EQ(g.lb->slots[s + 1].load(), 0u);
  EXPECT_EQ(res.tail.slot, s);
  EXPECT_EQ(g.SizeAfter(TailRule::kStrict), 150u) << "recovered: a clean log";
  g.pos = res.tail;
  g.Append(150, 10, 'c');
  EXPECT_EQ(g.SizeAfter(TailRule::kStrict), 160u) << "appends go on where the log now ends";
}

TEST(CheckedAppend, ALostSecondWordIsACommitCutShort) {
  Log g;
  g.Start(100);
  const uint32_t s = g.Append(100, 50, 'a');
  g.lb->slots[s + 1].store(0);  // media keep 8 bytes at a time
  std::string why;
  EXPECT_EQ(g.SizeAfter(TailRule::kStrict, nullptr, &why), kRefused);
  EXPECT_NE(why.find("malformed checked-append entry"), std::string::npos) << why;
  ReplayResult res;
  EXPECT_EQ(g.SizeAfter(TailRule::kCrashed, &res), 100u);
  EXPECT_EQ(res.cut_short_words, 1u);
  EXPECT_EQ(g.SizeAfter(TailRule::kRecover), 100u);
  EXPECT_EQ(g.lb->slots[s].load(), 0u);
  // Its second word alone (the first lost) is a word past the tail.
  g.pos = g.ms.Start();
  g.SizeAfter(TailRule::kStrict);
  g.lb->slots[s + 1].store(fmt::EncodeGrowTailChecked1(g.tail_block, 7));
  EXPECT_EQ(g.SizeAfter(TailRule::kStrict), kRefused);
  EXPECT_EQ(g.SizeAfter(TailRule::kCrashed), 100u);
}

TEST(CheckedAppend, OnlyTheLastEntryCanBeCutShort) {
  // Whoever commits after a checked append writes its bytes back first
  // (rule 3): bytes that changed under an earlier one (a truncate, then an
  // append over them) are no crash's doing, and the log stands.
  Log g;
  g.Start(100);
  g.Append(100, 50, 'a');
  g.Map(1);
  g.Bytes(g.tail_block)[120] = 'x';
  EXPECT_EQ(g.SizeAfter(TailRule::kCrashed), 150u);
  EXPECT_EQ(g.SizeAfter(TailRule::kReadOnly), 150u);
}

TEST(CheckedAppend, OneThatEndsAFullBlockIsFollowedInTheNext) {
  // The torture test's case: the entry fills its block and the next block
  // holds later entries; its bytes changed since.
  Log g;
  g.Start(100);
  while (g.pos.slot < fmt::kSlotsPerLogBlock - 2) g.Map(1);
  const uint32_t s = g.Append(100, 50, 'a');
  ASSERT_EQ(s, fmt::kSlotsPerLogBlock - 2);
  g.Map(2);  // in the successor
  ASSERT_NE(fmt::NextBlock(g.lb->next.load()), 0u);
  g.Bytes(g.tail_block)[120] = 'x';
  EXPECT_EQ(g.SizeAfter(TailRule::kCrashed), 150u);
  // With nothing in the successor (its commit lost), it is the last entry.
  fmt::LogBlock* nb = g.Block(fmt::NextBlock(g.lb->next.load()));
  nb->slots[0].store(0);
  ReplayResult res;
  EXPECT_EQ(g.SizeAfter(TailRule::kCrashed, &res), 100u);
  EXPECT_EQ(g.SizeAfter(TailRule::kRecover, &res), 100u);
  EXPECT_EQ(g.lb->next.load(), fmt::NextWord(0)) << "the empty successor is unlinked";
}

TEST(CheckedAppend, AnEntryThatDoesNotContinueTheTailIsDamage) {
  struct Case {
    const char* what;
    std::function<void(Log*, uint32_t)> spoil;
    const char* why;
  };
  const Case cases[] = {
      {"another block", [](Log* g, uint32_t s) {
         g->lb->slots[s + 1].store(fmt::EncodeGrowTailChecked1(g->tail_block + 1, 0));
       }, "does not continue the tail block"},
      {"another start", [](Log* g, uint32_t s) {
         g->lb->slots[s].store(fmt::EncodeGrowTailChecked0(150, 99));
       }, "does not continue the tail block"},
      {"a start past its end", [](Log* g, uint32_t s) {
         g->lb->slots[s].store(fmt::EncodeGrowTailChecked0(150, 150));
       }, "malformed checked-append entry"},
      {"a block past the file", [](Log* g, uint32_t s) {
         g->lb->slots[s + 1].store(fmt::EncodeGrowTailChecked1(1u << 30, 0));
       }, "lies past the end of the file"},
      {"an odd slot", [](Log* g, uint32_t s) {
         g->lb->slots[s + 1].store(g->lb->slots[s].load());
         g->lb->slots[s].store(fmt::EncodeReserve(0));
       }, "checked append at an odd slot"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Log g;
    g.Start(100);
    const uint32_t s = g.Append(100, 50, 'a');
    g.Map(1);  // not the last entry: no crash can explain it
    c.spoil(&g, s);
    for (TailRule rule : {TailRule::kStrict, TailRule::kCrashed, TailRule::kRecover}) {
      std::string why;
      EXPECT_EQ(g.SizeAfter(rule, nullptr, &why), kRefused) << int(rule);
      EXPECT_NE(why.find(c.why), std::string::npos) << why;
    }
  }
}

// Records the flushes made while it is installed.
struct FlushRecorder : pm::Recorder {
  FlushRecorder() { pm::g_recorder.store(this); }
  ~FlushRecorder() override { pm::g_recorder.store(nullptr); }
  void OnCopy(void*, const void*, size_t) override {}
  void OnZero(void*, size_t) override {}
  void OnStore(void*, uint64_t) override {}
  void OnStoreBytes(void*, const void*, size_t) override {}
  void OnFlush(const void* addr, size_t n) override {
    flushes.emplace_back(reinterpret_cast<uintptr_t>(addr), n);
  }
  void OnFence() override {}
  bool Flushed(const void* addr, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(addr);
    for (const auto& [at, len] : flushes)
      if (at <= a && a + n <= at + len) return true;
    return false;
  }
  std::vector<std::pair<uintptr_t, size_t>> flushes;
};

TEST(CheckedAppend, ACommitAfterOneWritesItsBytesBack) {
  // Rule 3: the bytes are not in the log, so the next committer's flush of
  // the entry's line would not cover them. The appender's own next commit
  // skips them (its fence made them durable: the durable prefix).
  for (bool same_writer : {true, false}) {
    SCOPED_TRACE(same_writer ? "the appender" : "another process");
    Log g;
    g.Start(100);
    g.Append(100, 50, 'a');
    LogWriter other(&g.ms.space(), &g.ms.source(), g.ms.root());
    LogWriter* w = same_writer ? &g.w : &other;
    std::vector<fmt::Run> runs;
    ASSERT_TRUE(g.ms.source().Alloc(&g.t, 1, &runs).ok());
    FlushRecorder rec;
    bool conflicted = true;
    ASSERT_TRUE(w->Commit(&g.t, &g.scratch, &g.pos, fmt::EncodeInline({1, runs[0].lblock, 1, false}),
                          g.pending, [](const Effect&) { return false; }, &conflicted)
                    .ok());
    ASSERT_FALSE(conflicted);
    EXPECT_EQ(rec.Flushed(g.Bytes(g.tail_block) + 100, 50), !same_writer);
  }
}

}  // namespace
}  // namespace upfs_engine_test
