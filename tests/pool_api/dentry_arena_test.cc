// The next namespace's dentry arenas (container/pool/dentry_arena.h) over
// blocks in memory: runs taken and given back, generations that rise on
// every reuse, blocks chained, and the recovery scan's answers to torn
// dentries and to damaged blocks, chains and dentries.
#include "container/pool/dentry_arena.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "pool_api/dentry_memory_store.h"
#include "pool_api/dentry_sample.h"

namespace upfs {
namespace {

using namespace format::pool;

class DentryArenaTest : public ::testing::Test {
 protected:
  MemoryStore store{64};
  DentryArena arena{&store};

  // Takes a run for `name`, writes a live dentry there: its head.
  uint64_t Write(const std::string& name, uint32_t* gen_out = nullptr) {
    uint64_t head;
    uint32_t gen;
    EXPECT_TRUE(arena.Take(DentryLines(name.size()), &head, &gen).ok());
    EncodeDentry(SampleDentry(name, gen), store.Line(head));
    if (gen_out) *gen_out = gen;
    return head;
  }
  // What a scan finds: line -> (what, name).
  std::map<uint64_t, std::pair<DentryRead, std::string>> Scan(Status* st) {
    std::map<uint64_t, std::pair<DentryRead, std::string>> out;
    *st = ScanDentries(&store, [&](uint64_t line, uint32_t, DentryRead got, const Dentry& d) {
      if (got != DentryRead::kEmpty) out[line] = {got, got == DentryRead::kValid ? std::string(d.name) : ""};
    });
    return out;
  }
};

TEST_F(DentryArenaTest, ARunGivenBackIsTakenAgainWithAGreaterGeneration) {
  uint32_t gen1, gen2;
  const uint64_t head = Write("first-name-of-twenty", &gen1);
  EXPECT_EQ(gen1, 1u);
  arena.Give(head, DentryLines(20), gen1);
  Dentry d;
  uint32_t lines;
  std::string why;
  EXPECT_EQ(ReadDentry(store.Line(head), 63, &d, &lines, &why), DentryRead::kEmpty) << "zeroed";
  uint64_t again;
  uint32_t gen;
  ASSERT_TRUE(arena.Take(DentryLines(20), &again, &gen).ok());
  EXPECT_NE(again, head) << "not before Settle: the zeroing is not durable yet";
  arena.Give(again, DentryLines(20), gen);
  const int fences = store.fences;
  arena.Settle();
  EXPECT_EQ(store.fences, fences + 1) << "one fence for every run given";
  const uint64_t third = Write("second-name-twentyyy", &gen2);
  EXPECT_TRUE(third == head || third == again);
  EXPECT_EQ(gen2, 2u) << "a reused line's dentry takes a greater generation";
}

TEST_F(DentryArenaTest, ALongRunIsSplitForShortDentries) {
  const std::string long_name(255, 'L');
  uint32_t gen;
  const uint64_t head = Write(long_name, &gen);
  arena.Give(head, 6, gen);
  arena.Settle();
  const uint64_t free_before = arena.FreeLines();
  const uint64_t a = Write("a");
  EXPECT_EQ(a, head);
  const uint64_t b = Write("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
  EXPECT_EQ(b, head + 1) << "the rest of the run";
  EXPECT_EQ(arena.FreeLines(), free_before - 1 - DentryLines(105));
  Status st;
  const auto found = Scan(&st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(found.at(a).second, "a");
  EXPECT_EQ(found.at(b).first, DentryRead::kValid);
}

TEST_F(DentryArenaTest, BlocksAreChainedAndTheScanFindsEveryDentry) {
  std::map<uint64_t, std::string> written;
  for (int i = 0; i < 300; ++i) {
    const std::string name = "name-" + std::to_string(i) + std::string(size_t(i % 70), 'x');
    written[Write(name)] = name;
  }
  Status st;
  const auto found = Scan(&st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(found.size(), written.size());
  for (const auto& [line, name] : written) {
    ASSERT_EQ(found.at(line).first, DentryRead::kValid);
    EXPECT_EQ(found.at(line).second, name);
  }
  EXPECT_GT(store.ChainHead()->load(), 2u) << "more than one block";
}

// A new block's header is durable before the chain names it: a crash
// between the two must not leave a chain whose newest block is blank.
TEST_F(DentryArenaTest, ABlocksHeaderIsDurableBeforeTheChainNamesIt) {
  Write("first");
  const uint64_t b = store.ChainHead()->load();
  const std::vector<std::string> want = {"header " + std::to_string(b), "fence, chain at 0",
                                         "fence, chain at " + std::to_string(b)};
  ASSERT_GE(store.events.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(store.events.begin(), store.events.begin() + 3), want);
}

// A dentry a crash tore is reported as torn, and the scan goes on past it.
TEST_F(DentryArenaTest, TheScanPassesTornDentries) {
  const uint64_t torn = Write("this-one-was-being-written-when-the-power-went");
  const uint64_t after = Write("after");
  store.Line(torn + 1)[3] = 0;  // a word of its second line never reached the media
  Status st;
  const auto found = Scan(&st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(found.at(torn).first, DentryRead::kTorn);
  EXPECT_EQ(found.at(after).second, "after");
}

TEST_F(DentryArenaTest, TheScanRefusesDamageAndNamesIt) {
  const uint64_t head = Write("victim-name");
  store.Line(head)[2] ^= 0x100;  // a flipped bit in the inode number
  Status st;
  Scan(&st);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("dentry at line"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();
}

TEST_F(DentryArenaTest, TheScanRefusesADamagedChain) {
  Write("x");
  const uint64_t block = store.ChainHead()->load();
  auto* h = reinterpret_cast<DentryBlockHeader*>(store.Line(block * kLinesPerBlock));
  Status st;
  h->magic ^= 1;
  Scan(&st);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("header"), std::string::npos) << st.message();
  h->magic ^= 1;
  h->next = block;  // the block names itself
  Scan(&st);
  EXPECT_NE(st.message().find("loops"), std::string::npos) << st.message();
  h->next = 1u << 20;
  Scan(&st);
  EXPECT_NE(st.message().find("outside the pool"), std::string::npos) << st.message();
}

TEST_F(DentryArenaTest, AFullStoreIsAnErrorNotACrash) {
  MemoryStore tiny(2);  // one block for dentries
  DentryArena small(&tiny);
  Status st;
  int made = 0;
  for (; made < 100; ++made) {
    uint64_t head;
    uint32_t gen;
    st = small.Take(1, &head, &gen);
    if (!st.ok()) break;
  }
  EXPECT_EQ(made, int(kDentryLinesPerBlock));
  EXPECT_EQ(st.err(), ENOSPC);
}

}  // namespace
}  // namespace upfs
