// PersistCounter: what the persistence primitives write back, in cache
// lines: every line a non-temporal copy touches, and a flushed line only if
// it was stored to since it was last written back.
#include "medium/persist_counter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "medium/pm.h"

namespace upfs {
namespace {

struct alignas(64) Lines {
  std::atomic<uint64_t> words[64] = {};
  char* bytes() { return reinterpret_cast<char*>(words); }
};

TEST(PersistCounter, CopiesCountEveryLineTheyTouch) {
  Lines m;
  char src[256];
  std::memset(src, 7, sizeof src);
  PersistCounter c;
  pm::CopyNT(m.bytes(), src, 100);  // lines 0-1
  EXPECT_EQ(c.bytes(), 128u);
  pm::CopyNT(m.bytes() + 60, src, 136);  // 60..196: lines 0-3
  EXPECT_EQ(c.bytes(), 128u + 256u);
  pm::ZeroNT(m.bytes() + 256, 64);  // line 4
  EXPECT_EQ(c.bytes(), 128u + 256u + 64u);
  pm::CopyNT(m.bytes(), src, 0);
  EXPECT_EQ(c.bytes(), 448u);
  pm::Fence();
}

TEST(PersistCounter, FlushesCountOnlyLinesStoredTo) {
  Lines m;
  PersistCounter c;
  pm::Flush(m.bytes(), 512);  // nothing stored: nothing written back
  EXPECT_EQ(c.bytes(), 0u);
  pm::Store64(&m.words[0], 1);
  pm::Store64(&m.words[1], 2);   // the same line
  pm::Store64(&m.words[16], 3);  // line 2
  pm::Flush(m.bytes(), 512);
  EXPECT_EQ(c.bytes(), 128u);
  pm::PersistWord(&m.words[0]);  // clean again: no bytes
  EXPECT_EQ(c.bytes(), 128u);
  uint64_t expected = 0;
  ASSERT_TRUE(pm::Cas64(&m.words[24], expected, 9));  // line 3
  pm::Flush(&m.words[24], 8);
  EXPECT_EQ(c.bytes(), 192u);
  pm::Fence();
}

TEST(PersistCounter, ACopyOverAStoredLineCleansIt) {
  Lines m;
  char src[64] = {1};
  PersistCounter c;
  pm::Store64(&m.words[0], 5);
  pm::CopyNT(m.bytes(), src, 64);
  pm::Flush(m.bytes(), 64);
  EXPECT_EQ(c.bytes(), 64u);  // the copy's line, not the flush's again
  pm::Fence();
}

TEST(PersistCounter, CountsEveryThreadAndUninstallsItself) {
  std::vector<Lines> m(4);
  {
    PersistCounter c;
    EXPECT_NE(pm::g_recorder.load(), nullptr);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++) {
      ts.emplace_back([&, t] {
        char src[64] = {2};
        for (int i = 0; i < 8; i++) pm::CopyNT(m[t].bytes() + 64 * i, src, 64);
        pm::Fence();
      });
    }
    for (auto& t : ts) t.join();
    EXPECT_EQ(c.bytes(), 4u * 8 * 64);
  }
  EXPECT_EQ(pm::g_recorder.load(), nullptr);
}

// A thread may have loaded the recorder and be about to call it when the
// counter goes (the GC worker compacting during the bench's counting
// round did): the call must find nothing freed. Under ASan a counter that
// was itself the recorder fails this with a heap-use-after-free.
TEST(PersistCounter, ACallRacingTheCountersEndIsHarmless) {
  Lines m;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    char src[64] = {3};
    while (!stop.load(std::memory_order_relaxed)) {
      pm::CopyNT(m.bytes(), src, 64);
      pm::Fence();
    }
  });
  for (int i = 0; i < 100000; i++) {
    auto c = std::make_unique<PersistCounter>();  // on the heap, where ASan sees a use after free
    (void)c->bytes();
  }
  stop = true;
  writer.join();
  EXPECT_EQ(pm::g_recorder.load(), nullptr);
}

}  // namespace
}  // namespace upfs
