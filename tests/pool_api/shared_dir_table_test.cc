// The shared soft directory table (container/pool/shared_dir_table.h) against a
// model: names, claims by racing threads and processes, growth (also one
// whose grower dies), and listings made while others change the table.
#include "container/pool/shared_dir_table.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "util/crc32c.h"

namespace upfs {
namespace {

using namespace dir_slot;

// Every table and every dentry of a test in one shared anonymous mapping,
// so that a forked child sees the same ones (handles are offsets).
class Arena {
 public:
  explicit Arena(size_t bytes) : bytes_(bytes) {
    base_ = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    next_ = new (base_) std::atomic<uint64_t>(64);
  }
  ~Arena() { munmap(base_, bytes_); }
  // Bump allocation, never freed: a retired table stays readable, as the
  // pool's epochs keep it while a reader may hold it.
  uint64_t Take(uint64_t bytes) {
    const uint64_t at = next_->fetch_add((bytes + 63) / 64 * 64);
    return at + bytes <= bytes_ ? at : 0;
  }
  char* At(uint64_t off) const { return base_ + off; }

 private:
  size_t bytes_;
  char* base_;
  std::atomic<uint64_t>* next_;
};

thread_local uint32_t t_self = 0;

// Names and their dentries: ref r is names[r]; its owner is who made it.
struct Model : TableMemory, DentryView {
  Arena arena{size_t{256} << 20};
  // Per thread identity: alive unless marked dead (a killed thread).
  std::atomic<bool>* dead = nullptr;  // in the arena: shared with children
  std::vector<std::string> names;
  std::vector<uint32_t> owners;
  std::function<uint64_t(const std::string&)> hash_fn = [](const std::string& s) {
    const uint64_t a = Crc32c(s.data(), s.size(), 0x12345678), b = Crc32c(s.data(), s.size(), 0x9abcdef0);
    return a << 32 | b;
  };
  std::atomic<int> allocations_left{1 << 30};
  std::atomic<uint64_t> retired{0};
  std::function<bool(uint32_t)> alive_fn;

  Model() {
    dead = reinterpret_cast<std::atomic<bool>*>(arena.At(arena.Take(4096)));
    names.resize(kFirstRef);
    owners.resize(kFirstRef);
  }
  uint64_t Add(const std::string& name, uint32_t owner = 0) {
    names.push_back(name);
    owners.push_back(owner);
    return names.size() - 1;
  }
  uint64_t HashOfName(const std::string& s) const { return hash_fn(s); }

  Status Allocate(uint64_t bytes, uint64_t* handle) override {
    if (allocations_left.fetch_sub(1) <= 0) return Status::Error(ENOMEM, "test: no memory for a table");
    *handle = arena.Take(bytes);
    return *handle ? Status::OK() : Status::Error(ENOMEM, "test arena full");
  }
  char* At(uint64_t handle) const override { return arena.At(handle); }
  void Retire(uint64_t) override { retired.fetch_add(1); }
  uint32_t Self() const override { return t_self; }
  bool Alive(uint32_t owner) override { return alive_fn ? alive_fn(owner) : !dead[owner].load(); }
  uint64_t HashOf(uint64_t ref) override { return hash_fn(names[ref]); }
  uint32_t OwnerOf(uint64_t ref) override { return owners[ref]; }
};

class SharedDirTableTest : public ::testing::Test {
 public:  // for hooks' plain functions too
  Model m;
  std::atomic<uint64_t>* anchor = new (m.arena.At(m.arena.Take(64))) std::atomic<uint64_t>(0);
  SharedDirTable table{&m, &m, anchor};

  uint64_t Find(const std::string& name) {
    return table.Find(m.HashOfName(name), [&](uint64_t r) { return m.names[r] == name; });
  }
  // Claims and publishes: the ref made, or 0 if the name exists.
  uint64_t Create(const std::string& name, uint32_t owner = 0) {
    const uint64_t ref = m.Add(name, owner);
    bool claimed;
    uint64_t existing;
    EXPECT_TRUE(table.Claim(m.HashOfName(name), ref, [&](uint64_t r) { return m.names[r] == name; }, &claimed,
                            &existing)
                    .ok());
    if (!claimed) return 0;
    table.Publish(m.HashOfName(name), ref);
    return ref;
  }
  bool Remove(const std::string& name) {
    const uint64_t ref = Find(name);
    return ref && table.Remove(m.HashOfName(name), ref);
  }
  // A whole listing in calls that each take at most `batch` hashes.
  std::vector<uint64_t> List(size_t batch, std::vector<uint64_t>* hashes = nullptr) {
    std::vector<uint64_t> out;
    uint64_t cookie = 0;
    bool first = true;
    for (;;) {
      size_t took = 0;
      table.Scan(cookie, first, [&](uint64_t h, const uint64_t* refs, size_t n) {
        if (took == batch) return false;
        if (hashes) hashes->push_back(h);
        out.insert(out.end(), refs, refs + n);
        cookie = h;
        ++took;
        return true;
      });
      first = false;
      if (took < batch) return out;
    }
  }
};

TEST_F(SharedDirTableTest, ANameIsFoundOnlyOnceLiveAndUntilRemoved) {
  EXPECT_EQ(Find("a"), 0u);
  const uint64_t ref = m.Add("a");
  const uint64_t h = m.HashOfName("a");
  bool claimed;
  uint64_t existing;
  ASSERT_TRUE(table.Claim(h, ref, [&](uint64_t r) { return m.names[r] == "a"; }, &claimed, &existing).ok());
  ASSERT_TRUE(claimed);
  EXPECT_EQ(Find("a"), 0u) << "a pending claim is not a name";
  EXPECT_EQ(table.Entries(), 0);
  table.Publish(h, ref);
  EXPECT_EQ(Find("a"), ref);
  EXPECT_EQ(table.Entries(), 1);
  EXPECT_EQ(Create("a"), 0u) << "a second claim of a live name";
  EXPECT_TRUE(Remove("a"));
  EXPECT_EQ(Find("a"), 0u);
  EXPECT_FALSE(Remove("a"));
  EXPECT_EQ(table.Entries(), 0);
  EXPECT_NE(Create("a"), 0u) << "a removed name can be made again";
}

TEST_F(SharedDirTableTest, AnAbandonedClaimLeavesNoName) {
  const uint64_t ref = m.Add("x");
  bool claimed;
  uint64_t existing;
  ASSERT_TRUE(
      table.Claim(m.HashOfName("x"), ref, [&](uint64_t r) { return m.names[r] == "x"; }, &claimed, &existing).ok());
  ASSERT_TRUE(claimed);
  table.Abandon(m.HashOfName("x"), ref);
  EXPECT_EQ(Find("x"), 0u);
  EXPECT_NE(Create("x"), 0u);
}

TEST_F(SharedDirTableTest, GrowsFromSixteenSlotsAndKeepsEveryName) {
  constexpr int kNames = 20000;
  for (int i = 0; i < kNames; ++i) ASSERT_NE(Create("f" + std::to_string(i)), 0u) << i;
  EXPECT_EQ(table.Entries(), kNames);
  EXPECT_GE(table.SlotCount(), uint64_t{2} * kNames);
  EXPECT_GT(m.retired.load(), 5u) << "each growth retires the table it replaced";
  for (int i = 0; i < kNames; i += 2) ASSERT_TRUE(Remove("f" + std::to_string(i)));
  for (int i = 0; i < kNames; ++i) EXPECT_EQ(Find("f" + std::to_string(i)) != 0, i % 2 == 1) << i;
  EXPECT_EQ(table.Entries(), kNames / 2);
}

TEST_F(SharedDirTableTest, TombstonesOfChurnDoNotFillTheTable) {
  // Creating and removing new names forever: the slots ever used grow, and
  // a growth copies only the live names, so the table stays small.
  for (int i = 0; i < 50000; ++i) {
    ASSERT_NE(Create("c" + std::to_string(i)), 0u);
    ASSERT_TRUE(Remove("c" + std::to_string(i)));
  }
  EXPECT_EQ(table.Entries(), 0);
  EXPECT_LE(table.SlotCount(), 64u);
}

TEST_F(SharedDirTableTest, NamesOfEqualHashesAreToldApartAndListedTogether) {
  m.hash_fn = [](const std::string& s) { return uint64_t(s.size()) << 58 | 12345; };  // by length only
  const std::vector<std::string> names = {"a", "b", "c", "dd", "ee", "fff"};
  for (const auto& n : names) ASSERT_NE(Create(n), 0u);
  for (const auto& n : names) EXPECT_EQ(m.names[Find(n)], n);
  EXPECT_TRUE(Remove("b"));
  EXPECT_EQ(Find("b"), 0u);
  EXPECT_EQ(m.names[Find("c")], "c") << "a tombstone does not end the probe run";
  std::vector<uint64_t> hashes;
  const std::vector<uint64_t> listed = List(1, &hashes);  // one hash a call
  EXPECT_EQ(listed.size(), 5u);
  EXPECT_EQ(hashes.size(), 3u) << "names of one hash come in one call";
  EXPECT_TRUE(std::is_sorted(hashes.begin(), hashes.end()));
}

TEST_F(SharedDirTableTest, AListingInBatchesIsInHashOrderAndComplete) {
  std::set<uint64_t> live;
  for (int i = 0; i < 3000; ++i) live.insert(Create("n" + std::to_string(i)));
  for (size_t batch : {1, 7, 100, 100000}) {
    std::vector<uint64_t> hashes;
    const std::vector<uint64_t> listed = List(batch, &hashes);
    EXPECT_EQ(std::set<uint64_t>(listed.begin(), listed.end()), live) << batch;
    EXPECT_EQ(listed.size(), live.size()) << batch;
    EXPECT_TRUE(std::adjacent_find(hashes.begin(), hashes.end(), std::greater_equal<uint64_t>()) ==
                hashes.end())
        << "strictly increasing hashes, batch " << batch;
  }
}

TEST_F(SharedDirTableTest, NamesPlacedPastTheTableEndAreListedLastAndFound) {
  // Homes in the last slots of any table: the probe runs wrap to slot 0.
  m.hash_fn = [](const std::string& s) { return ~uint64_t{0} - Crc32c(s.data(), s.size(), 7); };
  std::set<uint64_t> live;
  for (int i = 0; i < 12; ++i) live.insert(Create("w" + std::to_string(i)));
  ASSERT_EQ(table.SlotCount(), 64u);  // 12 names: one growth, no more
  for (int i = 0; i < 12; ++i) EXPECT_NE(Find("w" + std::to_string(i)), 0u);
  for (size_t batch : {1, 3, 100}) {
    std::vector<uint64_t> hashes;
    const std::vector<uint64_t> listed = List(batch, &hashes);
    EXPECT_EQ(std::set<uint64_t>(listed.begin(), listed.end()), live) << batch;
    EXPECT_TRUE(std::is_sorted(hashes.begin(), hashes.end())) << batch;
  }
}

TEST_F(SharedDirTableTest, AListingContinuedAfterAGrowthGoesOnFromItsCookie) {
  std::set<uint64_t> first;
  for (int i = 0; i < 10; ++i) first.insert(Create("g" + std::to_string(i)));
  uint64_t cookie = 0;
  std::set<uint64_t> seen;
  table.Scan(0, true, [&](uint64_t h, const uint64_t* refs, size_t n) {
    if (seen.size() == 4) return false;
    seen.insert(refs, refs + n);
    cookie = h;
    return true;
  });
  const uint64_t slots = table.SlotCount();
  for (int i = 0; i < 2000; ++i) Create("later" + std::to_string(i));
  ASSERT_GT(table.SlotCount(), slots);
  table.Scan(cookie, false, [&](uint64_t, const uint64_t* refs, size_t n) {
    for (size_t i = 0; i < n; ++i) EXPECT_TRUE(seen.insert(refs[i]).second) << "listed twice";
    return true;
  });
  for (uint64_t r : first) EXPECT_TRUE(seen.count(r)) << m.names[r];
}

TEST_F(SharedDirTableTest, AFailedGrowthLeavesTheTableAsItWas) {
  for (int i = 0; i < 8; ++i) ASSERT_NE(Create("k" + std::to_string(i)), 0u);
  m.allocations_left = 0;
  Status st;
  for (int i = 8; i < 200 && st.ok(); ++i) {
    const std::string name = "k" + std::to_string(i);
    bool claimed;
    uint64_t existing;
    st = table.Claim(m.HashOfName(name), m.Add(name), [&](uint64_t r) { return m.names[r] == name; }, &claimed,
                     &existing);
    if (st.ok()) table.Publish(m.HashOfName(name), m.names.size() - 1);
  }
  EXPECT_EQ(st.err(), ENOMEM);
  for (int i = 0; i < 8; ++i) EXPECT_NE(Find("k" + std::to_string(i)), 0u);
  EXPECT_TRUE(Remove("k0")) << "a thawed table takes changes again";
  m.allocations_left = 1 << 30;
  EXPECT_NE(Create("k-after"), 0u);
}

// A claim that chose its free slot, and before its CAS there another
// claim of the same name took an earlier one (a tombstone made meanwhile)
// and went live: the first must see it and lose, or the name is twice.
TEST_F(SharedDirTableTest, AClaimBeatenToAnEarlierFreeSlotLoses) {
  m.hash_fn = [](const std::string& s) { return uint64_t(Crc32c(s.data(), s.size(), 3)) << 8; };  // home 0
  for (const char* n : {"x0", "x1", "x2"}) ASSERT_NE(Create(n), 0u);
  struct Race {
    SharedDirTableTest* test;
    std::atomic<bool> fired{false};
    uint64_t other = 0;
  } race{this};
  SharedDirTable::BeforeClaimCasForTest(
      [](void* arg) {
        auto* r = static_cast<Race*>(arg);
        if (r->fired.exchange(true)) return;
        EXPECT_TRUE(r->test->Remove("x0"));  // slot 0 free again
        r->other = r->test->Create("n");  // takes slot 0, goes live
      },
      &race);
  const uint64_t mine = Create("n");
  SharedDirTable::BeforeClaimCasForTest(nullptr, nullptr);
  ASSERT_NE(race.other, 0u);
  EXPECT_EQ(mine, 0u) << "the name was made twice";
  EXPECT_EQ(List(100).size(), 3u);
  EXPECT_EQ(Find("n"), race.other);
}

// Threads claim the same names at once, in the same order, round after
// round: every name ends with exactly one winner and one live slot, through
// the table's growths (each round starts from an emptied table's tombstones).
TEST_F(SharedDirTableTest, ThreadsRacingForTheSameNamesLeaveOneWinnerEach) {
  // Every name's home in the first slots: one long probe run that all
  // share, where each thread also removes and makes a name of its own
  // between claims, so that the threads find different free slots.
  m.hash_fn = [](const std::string& s) { return uint64_t(Crc32c(s.data(), s.size(), 3)) << 8; };
  constexpr int kThreads = 4, kNames = 24;
  const int rounds = int(upfs_test::Scaled(1500, 100));
  const uint64_t base = m.names.size();
  for (int r = 0; r < rounds; ++r)
    for (int t = 0; t < kThreads; ++t)
      for (int i = 0; i < kNames; ++i) m.Add("s" + std::to_string(i), uint32_t(t + 1));
  auto ref_of = [&](int r, int t, int i) { return base + (uint64_t(r) * kThreads + t) * kNames + i; };
  std::vector<uint64_t> own;  // a name of each thread's, remade between claims
  for (int t = 0; t < kThreads; ++t) own.push_back(Create("own" + std::to_string(t), uint32_t(t + 1)));
  std::vector<std::atomic<int>> wins(kNames);
  std::barrier start(kThreads + 1), done(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      t_self = uint32_t(t + 1);
      for (int r = 0; r < rounds; ++r) {
        start.arrive_and_wait();
        for (int i = 0; i < kNames; ++i) {
          const uint64_t ref = ref_of(r, t, i);
          const std::string& name = m.names[ref];
          bool claimed;
          uint64_t existing;
          // EXPECT, not ASSERT: a thread that left would leave the others
          // at the barrier.
          EXPECT_TRUE(table.Claim(m.HashOfName(name), ref, [&](uint64_t x) { return m.names[x] == name; },
                                  &claimed, &existing)
                          .ok());
          if (claimed) {
            table.Publish(m.HashOfName(name), ref);
            wins[i].fetch_add(1);
          } else {
            EXPECT_EQ(m.names[existing], name);
          }
          const uint64_t oh = m.HashOfName(m.names[own[t]]);
          EXPECT_TRUE(table.Remove(oh, own[t]));
          EXPECT_TRUE(table.Claim(oh, own[t], [&](uint64_t x) { return x == own[t]; }, &claimed, &existing).ok());
          table.Publish(oh, own[t]);
        }
        done.arrive_and_wait();
      }
    });
  }
  int bad_rounds = 0;
  for (int r = 0; r < rounds; ++r) {
    for (auto& w : wins) w = 0;
    start.arrive_and_wait();
    done.arrive_and_wait();
    bool bad = table.Entries() != kNames + kThreads || List(1000).size() != size_t(kNames + kThreads);
    for (int i = 0; i < kNames; ++i) {
      if (wins[i].load() != 1 && bad_rounds == 0)
        ADD_FAILURE() << "round " << r << ": name s" << i << " won " << wins[i].load() << " times";
      bad |= wins[i].load() != 1;
      while (Remove("s" + std::to_string(i))) {
      }
    }
    bad_rounds += bad;
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad_rounds, 0) << "of " << rounds << " rounds";
}

// A removal and a publish made while a grower has frozen the table wait
// for it, and land in the successor: made in the old table after its copy,
// they would be lost.
TEST_F(SharedDirTableTest, ChangesMadeDuringAGrowthLandInTheSuccessor) {
  ASSERT_NE(Create("a"), 0u);
  const uint64_t c = m.Add("c");
  bool claimed;
  uint64_t existing;
  ASSERT_TRUE(table.Claim(m.HashOf(c), c, [&](uint64_t x) { return x == c; }, &claimed, &existing).ok());
  ASSERT_TRUE(claimed);
  std::vector<uint64_t> fill;
  for (int i = 0; i < 64; ++i) fill.push_back(m.Add("fill" + std::to_string(i), 3));
  static std::atomic<int> stage;
  stage = 0;
  SharedDirTable::BeforeSwitchForTest(
      [](void*) {
        int first = 0;
        if (t_self != 3 || !stage.compare_exchange_strong(first, 1)) return;
        while (stage != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      nullptr);
  std::thread grower([&] {
    t_self = 3;
    for (uint64_t f : fill) {
      EXPECT_TRUE(table.Claim(m.HashOf(f), f, [&](uint64_t x) { return x == f; }, &claimed, &existing).ok());
      table.Publish(m.HashOf(f), f);
    }
  });
  while (stage != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const uint64_t slots = table.SlotCount();
  std::thread writer([&] {
    t_self = 4;
    EXPECT_TRUE(Remove("a"));
    table.Publish(m.HashOf(c), c);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the writer reaches the frozen table
  stage = 2;
  writer.join();
  grower.join();
  SharedDirTable::BeforeSwitchForTest(nullptr, nullptr);
  EXPECT_GT(table.SlotCount(), slots);
  EXPECT_EQ(Find("a"), 0u) << "a removal lost in the growth";
  EXPECT_EQ(Find("c"), c) << "a publish lost in the growth";
  EXPECT_EQ(table.Entries(), 65);
}

// Threads making and removing names of their own while the table grows
// under them, round after round from a new table of 16 slots: no claim,
// publish or removal made during a growth is lost.
TEST_F(SharedDirTableTest, ChangesMadeWhileTheTableGrowsAreKept) {
  constexpr int kThreads = 3, kPerThread = 1500;
  const int rounds = int(upfs_test::Scaled(30, 5));
  std::vector<std::vector<uint64_t>> refs(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i)
      refs[t].push_back(m.Add("t" + std::to_string(t) + "-" + std::to_string(i), uint32_t(t + 1)));
  for (int r = 0; r < rounds; ++r) {
    auto* a = new (m.arena.At(m.arena.Take(64))) std::atomic<uint64_t>(0);
    SharedDirTable d(&m, &m, a);
    const uint64_t retired_before = m.retired.load();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        t_self = uint32_t(t + 1);
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t ref = refs[t][i];
          const uint64_t h = m.HashOf(ref);
          bool claimed;
          uint64_t existing;
          EXPECT_TRUE(d.Claim(h, ref, [&](uint64_t x) { return x == ref; }, &claimed, &existing).ok());
          EXPECT_TRUE(claimed);
          d.Publish(h, ref);
          if (i % 3 == 1) {  // a third of the names go again at once
            const uint64_t prev = refs[t][i - 1];
            EXPECT_TRUE(d.Remove(m.HashOf(prev), prev)) << m.names[prev];
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    int64_t expected = 0;
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t ref = refs[t][i];
        const bool live = i % 3 != 0 || i == kPerThread - 1;
        expected += live;
        ASSERT_EQ(d.Find(m.HashOf(ref), [&](uint64_t x) { return x == ref; }) == ref, live)
            << m.names[ref] << " round " << r;
      }
    }
    ASSERT_EQ(d.Entries(), expected) << "round " << r;
    ASSERT_GE(m.retired.load() - retired_before, 4u) << "growths under the writers";
  }
}

// Names live for the whole listing are listed once each, however the
// others change the table meanwhile (claims, removals, growths).
TEST_F(SharedDirTableTest, AListingMadeWhileOthersChangeTheTableSeesStableNamesOnce) {
  constexpr int kStable = 500, kChurn = 4000;
  std::set<uint64_t> stable;
  for (int i = 0; i < kStable; ++i) stable.insert(Create("stable" + std::to_string(i)));
  std::vector<uint64_t> churn_refs;
  for (int i = 0; i < kChurn; ++i) churn_refs.push_back(m.Add("churn" + std::to_string(i), 9));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    t_self = 9;
    for (int pass = 0; !stop; ++pass) {
      for (int i = 0; i < kChurn; ++i) {
        const uint64_t ref = churn_refs[i];
        const std::string& name = m.names[ref];
        const uint64_t h = m.HashOfName(name);
        if (pass % 2 == 0) {
          bool claimed;
          uint64_t existing;
          ASSERT_TRUE(table.Claim(h, ref, [&](uint64_t x) { return m.names[x] == name; }, &claimed, &existing).ok());
          if (claimed) table.Publish(h, ref);
        } else {
          table.Remove(h, ref);
        }
      }
    }
  });
  for (int scan = 0; scan < 60; ++scan) {
    const std::vector<uint64_t> listed = List(size_t(1 + scan % 50));
    std::map<uint64_t, int> count;
    for (uint64_t r : listed) count[r]++;
    for (const auto& [r, c] : count) ASSERT_EQ(c, 1) << "listed twice: " << m.names[r];
    for (uint64_t r : stable) ASSERT_EQ(count.count(r), 1u) << "missed: " << m.names[r] << " scan " << scan;
  }
  stop = true;
  writer.join();
}

// A claimer that dies before it publishes or abandons: a thread claiming
// the same name waits, asks whether the claimer lives, and takes the name.
TEST_F(SharedDirTableTest, AClaimWhoseClaimerDiedEndsWithoutIt) {
  const uint64_t dead_ref = m.Add("d", 5);
  const uint64_t h = m.HashOfName("d");
  bool claimed;
  uint64_t existing;
  t_self = 5;
  ASSERT_TRUE(table.Claim(h, dead_ref, [&](uint64_t r) { return m.names[r] == "d"; }, &claimed, &existing).ok());
  ASSERT_TRUE(claimed);
  m.dead[5] = true;  // killed here
  t_self = 6;
  const uint64_t ref = Create("d", 6);
  EXPECT_NE(ref, 0u);
  EXPECT_EQ(Find("d"), ref);
}

// A grower that dies after it froze and copied the table, before its
// switch: the others' writes wait for it, find it dead, and do its growth
// over (its copy given back); nothing is lost.
TEST_F(SharedDirTableTest, AGrowthWhoseGrowerDiedIsTakenOver) {
  for (int i = 0; i < 8; ++i) ASSERT_NE(Create("p" + std::to_string(i)), 0u);
  static std::atomic<int> stage{0};
  static Model* model;
  model = &m;  // this run's (a static's initializer runs once)
  stage = 0;
  SharedDirTable::BeforeSwitchForTest([](void*) {
    int first = 0;
    if (t_self != 7 || !stage.compare_exchange_strong(first, 1)) return;  // its first growth only
    model->dead[7] = true;  // killed here, the table frozen and copied
    while (stage != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }, nullptr);
  std::vector<uint64_t> refs;
  for (int i = 0; i < 200; ++i) refs.push_back(m.Add("q" + std::to_string(i), 7));
  const uint64_t late_ref = m.Add("late", 8);
  std::thread grower([&] {
    t_self = 7;
    for (uint64_t ref : refs) {
      const std::string& name = m.names[ref];
      bool claimed;
      uint64_t existing;
      ASSERT_TRUE(table.Claim(m.HashOfName(name), ref, [&](uint64_t x) { return m.names[x] == name; }, &claimed,
                              &existing)
                      .ok());
      table.Publish(m.HashOfName(name), ref);
    }
  });
  while (stage != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread other([&] {
    t_self = 8;
    bool claimed;
    uint64_t existing;
    ASSERT_TRUE(table.Claim(m.HashOfName("late"), late_ref, [&](uint64_t x) { return m.names[x] == "late"; },
                            &claimed, &existing)
                    .ok());
    ASSERT_TRUE(claimed);
    table.Publish(m.HashOfName("late"), late_ref);
  });
  other.join();  // finishes while the grower still sleeps in its hook
  EXPECT_EQ(Find("late"), late_ref);
  for (int i = 0; i < 8; ++i) EXPECT_NE(Find("p" + std::to_string(i)), 0u);
  m.dead[7] = false;  // let the "dead" thread finish its loop for the test's end
  stage = 2;
  grower.join();
  SharedDirTable::BeforeSwitchForTest(nullptr, nullptr);
  for (uint64_t ref : refs) EXPECT_EQ(Find(m.names[ref]), ref);
  EXPECT_EQ(table.Entries(), 8 + 200 + 1);
}

// Two processes claim the same names in one table; one is killed with a
// claim it never ended, and the other still takes that name.
TEST_F(SharedDirTableTest, ProcessesShareATableAndAKilledOneBlocksNobody) {
  constexpr int kNames = 2000;
  for (int i = 0; i < kNames; ++i) {
    m.Add("m" + std::to_string(i), 1);
    m.Add("m" + std::to_string(i), 2);
  }
  const uint64_t stuck_ref = m.Add("stuck", 1);
  std::atomic<int>* wins = new (m.arena.At(m.arena.Take(sizeof(std::atomic<int>) * kNames)))
      std::atomic<int>[kNames]();
  std::atomic<int>* child_ready = new (m.arena.At(m.arena.Take(64))) std::atomic<int>(0);
  auto run = [&](uint32_t self) {
    t_self = self;
    for (int i = 0; i < kNames; ++i) {
      const uint64_t ref = kFirstRef + 2 * uint64_t(i) + (self - 1);
      const std::string& name = m.names[ref];
      bool claimed;
      uint64_t existing;
      if (!table.Claim(m.HashOfName(name), ref, [&](uint64_t x) { return m.names[x] == name; }, &claimed, &existing)
               .ok())
        return false;
      if (claimed) {
        table.Publish(m.HashOfName(name), ref);
        wins[i].fetch_add(1);
      }
    }
    return true;
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool ok = run(1);
    bool claimed;
    uint64_t existing;
    table.Claim(m.HashOfName("stuck"), stuck_ref, [&](uint64_t x) { return m.names[x] == "stuck"; }, &claimed,
                &existing);
    child_ready->store(ok && claimed ? 1 : 2);
    pause();  // killed here, its claim of "stuck" never ended
    _exit(0);
  }
  m.alive_fn = [&](uint32_t owner) { return owner != 1 || kill(child, 0) == 0; };
  EXPECT_TRUE(run(2));
  while (child_ready->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(child_ready->load(), 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  for (int i = 0; i < kNames; ++i) ASSERT_EQ(wins[i].load(), 1) << i;
  t_self = 2;
  EXPECT_NE(Create("stuck", 2), 0u) << "the killed process's claim ended by the survivor";
  EXPECT_EQ(table.Entries(), kNames + 1);
}

}  // namespace
}  // namespace upfs
