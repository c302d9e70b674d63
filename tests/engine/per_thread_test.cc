// PerThread: every thread finds the value it set and no other; ForEach
// sees each value set exactly once, whether it sits in the inline slot or
// in a group; the first thread to set a value takes the inline slot and
// makes no group. Also run under ThreadSanitizer (label unit-concurrency).
#include "engine/per_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace upfs {
namespace {

constexpr uint32_t kMax = 1024;

TEST(PerThread, OneThreadsValueIsFoundAndListedOnce) {
  PerThread<int, kMax> pt;
  int v = 7;
  EXPECT_EQ(pt.Get(5), nullptr);
  pt.Set(5, &v);
  EXPECT_EQ(pt.Get(5), &v);
  EXPECT_EQ(pt.Get(4), nullptr);
  EXPECT_EQ(pt.Get(37), nullptr);  // another group's index
  int seen = 0;
  pt.ForEach([&](int* p) {
    EXPECT_EQ(p, &v);
    ++seen;
  });
  EXPECT_EQ(seen, 1);
  // Set again by the same thread: replaced, still listed once.
  int w = 8;
  pt.Set(5, &w);
  EXPECT_EQ(pt.Get(5), &w);
  seen = 0;
  pt.ForEach([&](int*) { ++seen; });
  EXPECT_EQ(seen, 1);
}

TEST(PerThread, LaterThreadsGoToGroupsAndEveryValueIsListedOnce) {
  PerThread<int, kMax> pt;
  std::vector<int> values(kMax);
  // Indices of the inline slot's owner, its own group and other groups.
  const std::vector<uint32_t> tids = {3, 4, 31, 32, 33, 500, kMax - 1};
  for (uint32_t t : tids) pt.Set(t, &values[t]);
  for (uint32_t t : tids) EXPECT_EQ(pt.Get(t), &values[t]) << t;
  EXPECT_EQ(pt.Get(0), nullptr);
  EXPECT_EQ(pt.Get(34), nullptr);
  std::multiset<int*> listed;
  pt.ForEach([&](int* p) { listed.insert(p); });
  ASSERT_EQ(listed.size(), tids.size());
  for (uint32_t t : tids) EXPECT_EQ(listed.count(&values[t]), 1u) << t;
}

TEST(PerThread, ThreadsSettingAtOnceEachFindTheirOwn) {
  constexpr uint32_t kThreads = 8;
  for (int round = 0; round < 200; ++round) {
    PerThread<int, kMax> pt;
    std::vector<int> values(kThreads);
    std::atomic<bool> go{false};
    std::atomic<int> wrong{0};
    std::vector<std::thread> ts;
    for (uint32_t t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        while (!go.load(std::memory_order_acquire)) {
        }
        // Two per group, so that threads race for a group as well as for
        // the inline slot.
        const uint32_t tid = (t / 2) * 32 + t % 2;
        pt.Set(tid, &values[t]);
        if (pt.Get(tid) != &values[t]) wrong.fetch_add(1);
      });
    }
    go.store(true, std::memory_order_release);
    for (auto& th : ts) th.join();
    ASSERT_EQ(wrong.load(), 0);
    std::multiset<int*> listed;
    pt.ForEach([&](int* p) { listed.insert(p); });
    ASSERT_EQ(listed.size(), kThreads);
    for (uint32_t t = 0; t < kThreads; ++t) ASSERT_EQ(listed.count(&values[t]), 1u);
  }
}

}  // namespace
}  // namespace upfs
