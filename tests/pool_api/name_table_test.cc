// The DRAM index's hash tables (container/pool/name_table.h): DirTable,
// keyed by directory, and NameTable, keyed by name, against plain maps
// through inserts, erases and growth; NameTable's placement against names
// removed in another table's order; SameName's comparison.
#include "container/pool/name_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace upfs {
namespace {

using format::pool::FileType;

// The delta's table of directories: values stay where they were made while
// the table grows (the index hands out pointers to them), absent keys are
// absent, and every entry is visited once.
TEST(DirTable, ValuesStayPutAsTheTableGrows) {
  DirTable<std::string> t;
  EXPECT_EQ(t.Find(7), nullptr);
  std::vector<std::string*> made;
  for (uint64_t ino = 1; ino <= 5000; ++ino) {
    std::string& v = t.Get(ino * 16 + 1);
    v = std::to_string(ino);
    made.push_back(&v);
  }
  EXPECT_EQ(t.size(), 5000u);
  for (uint64_t ino = 1; ino <= 5000; ++ino) {
    ASSERT_EQ(t.Find(ino * 16 + 1), made[ino - 1]) << ino;
    EXPECT_EQ(*made[ino - 1], std::to_string(ino));
    EXPECT_FALSE(t.Contains(ino * 16 + 2));
  }
  EXPECT_EQ(&t.Get(16 + 1), made[0]);  // Get of a present key makes nothing
  EXPECT_EQ(t.size(), 5000u);
  uint64_t visited = 0, sum = 0;
  t.ForEach([&](uint64_t ino, const std::string& v) {
    ++visited;
    sum += ino;
    EXPECT_EQ(v, std::to_string((ino - 1) / 16));
  });
  EXPECT_EQ(visited, 5000u);
  EXPECT_EQ(sum, 16ull * (5000ull * 5001 / 2) + 5000);
  t.Clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Find(17), nullptr);
}


// A directory's name table against a map, through inserts, erases
// (backward shifts, arena compaction) and growth: every name it should
// hold is found with its entry, every other is not, each is listed once.
// Names of one length and prefix collide in their probe runs.
TEST(NameTable, AnswersAsAMapThroughInsertsErasesAndGrowth) {
  NameTable t;
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(5);
  auto name = [](uint64_t k) { return "name-" + std::to_string(k % 3000) + (k % 2 ? "" : "-longer-than-16-bytes"); };
  for (int step = 0; step < 40000; ++step) {
    const std::string n = name(rng() % 6000);
    const bool there = model.count(n) != 0;
    if (rng() % 3 == 0) {
      ASSERT_EQ(t.Erase(n), there) << step << " " << n;
      model.erase(n);
    } else {
      const uint64_t ino = 2 + uint64_t(step);
      ASSERT_EQ(t.Insert(n, NsEntry{ino, FileType::kRegular}), !there) << step << " " << n;
      if (!there) model[n] = ino;
    }
    if (step % 4000 != 3999) continue;
    ASSERT_EQ(t.size(), model.size()) << step;
    for (uint64_t k = 0; k < 6000; ++k) {
      const std::string m = name(k);
      const NsEntry* e = t.Find(m);
      auto it = model.find(m);
      ASSERT_EQ(e != nullptr, it != model.end()) << step << " " << m;
      if (e) {
        EXPECT_EQ(e->ino, it->second) << m;
      }
    }
    std::set<std::string> listed;
    t.ForEach([&](std::string_view m, const NsEntry&) { EXPECT_TRUE(listed.insert(std::string(m)).second) << m; });
    EXPECT_EQ(listed.size(), model.size()) << step;
  }
}


// Names that come in another table's order spread over this one: an
// `rm -rf` removes a directory's names in the order a listing gave them
// (the image's, by the hash's low bits, or an older delta table's), each
// removal a tombstone in a delta that also holds the names made since the
// checkpoint. Placed by the image's bits, the tombstones filled the low
// half of the table at the image's density, the other names over it made
// more than one name a slot there: one probe run of 9,876 slots in 16,384
// (upfs bench --pool, pool-stat-100k's removal).
TEST(NameTable, NamesInAnotherTablesOrderSpreadOverThisOne) {
  constexpr int kNames = 24000, kMadeSince = 6000;
  auto name = [](int k) { return "f" + std::to_string(k); };
  NameTable older(1);
  for (int k = 0; k < kNames; ++k) older.Insert(name(k), NsEntry{uint64_t(k) + 2, FileType::kRegular});
  std::vector<std::string> delta_order;
  older.ForEach([&](std::string_view n, const NsEntry&) { delta_order.emplace_back(n); });
  // The image's order: by the hash's low bits, over a table of 32,768
  // slots (the image's tables are up to 4/5 full).
  std::vector<std::string> image_order;
  for (int k = 0; k < kNames; ++k) image_order.push_back(name(k));
  std::stable_sort(image_order.begin(), image_order.end(), [](const std::string& a, const std::string& b) {
    return (NameHash(a) & 32767) < (NameHash(b) & 32767);
  });
  for (const auto* order : {&delta_order, &image_order}) {
    NameTable delta(2);
    for (int k = 0; k < kMadeSince; ++k) delta.Insert("g" + std::to_string(k), NsEntry{uint64_t(k) + 2, FileType::kRegular});
    // Every prefix up to half the names, as the removal goes on.
    for (size_t k = 0; k < order->size() / 2; ++k) {
      delta.Insert((*order)[k], NsEntry{0, FileType::kFree});
      // About 60-110 slots at most in a table of randomly placed names
      // three quarters full; ten times that is a pile-up.
      if (k % 1000 == 999) {
        ASSERT_LT(delta.LongestRun(), 1000u)
            << (order == &delta_order ? "older delta's order" : "image's order") << ", " << k + 1 << " removed";
      }
    }
  }
}

// SameName compares short names with overlapping word loads: every byte of
// every length counts, and no load reads past either name.
TEST(SameName, EveryByteOfEveryLengthCounts) {
  for (size_t n = 0; n <= 40; ++n) {
    // Each name at the end of its own buffer: a load past it would be
    // reported by ASan.
    std::unique_ptr<char[]> a(new char[n + 1]), b(new char[n + 1]);
    for (size_t i = 0; i < n; ++i) a[i] = b[i] = char('a' + i % 26);
    const std::string_view va(a.get(), n), vb(b.get(), n);
    EXPECT_TRUE(SameName(va, vb)) << n;
    for (size_t i = 0; i < n; ++i) {
      b[i] ^= 1;
      EXPECT_FALSE(SameName(va, vb)) << "length " << n << ", byte " << i;
      b[i] ^= 1;
    }
    if (n > 0) {
      EXPECT_FALSE(SameName(va, std::string_view(b.get(), n - 1))) << n;
    }
  }
}

}  // namespace
}  // namespace upfs
