// Medium::GrowAhead: a growth step is published from its bottom as its
// extents get their pages, by the worker and by threads that help it
// (HelpGrow), never past an extent without pages. (With the step published
// at its end, a 4 KiB appender that outran it waited for the step whole.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "medium/medium.h"
#include "test_util.h"

namespace upfs {
namespace {

class Grown {
 public:
  Grown() : path_(dir_.File("growth")) {
    const int fd = open(path_.c_str(), O_CREAT | O_RDWR, 0644);
    EXPECT_GE(fd, 0);
    Status st = Medium::Open(fd, path_, &m_, /*read_only=*/false);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  ~Grown() {
    if (m_) m_->JoinBackground();
    m_.reset();
  }
  Medium* m() { return m_.get(); }

  // Called for each report of the step: records it, and checks that every
  // page below it has memory (mincore: resident in the file's cache).
  void Ready(uint64_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    reports_.push_back(bytes);
    const uint64_t pages = bytes / kPageSize;
    std::vector<unsigned char> v(pages);
    if (mincore(m_->base(), bytes, v.data()) != 0) {
      ++failed_;
      return;
    }
    for (uint64_t p = 0; p < pages; ++p)
      if (!(v[p] & 1)) {
        ++without_pages_;
        break;
      }
  }
  std::vector<uint64_t> reports() {
    std::lock_guard<std::mutex> g(mu_);
    return reports_;
  }
  int without_pages() {
    std::lock_guard<std::mutex> g(mu_);
    return without_pages_;
  }
  int failed() {
    std::lock_guard<std::mutex> g(mu_);
    return failed_;
  }
  // Grows the file to 8 MiB (past the first, small-page extent), then asks
  // the worker to grow it to `want`, its reports going to Ready.
  void StartStep(uint64_t want) {
    ASSERT_TRUE(m_->Grow(8u << 20).ok());
    m_->GrowAhead(want, [this](uint64_t b) { Ready(b); });
  }

 private:
  upfs_test::TempDir dir_;
  std::string path_;
  std::unique_ptr<Medium> m_;
  std::mutex mu_;
  std::vector<uint64_t> reports_;
  int without_pages_ = 0;
  int failed_ = 0;
};

// Growth where the medium gives extents their pages one by one: tmpfs,
// huge pages not switched off.
bool ExtentsProvided(Medium* m) {
  const char* huge = std::getenv("UPFS_HUGEPAGES");
  return m->kind() == MediumKind::kTmpfs && !(huge && huge[0] == '0');
}

TEST(MediumGrowth, AStepIsPublishedFromItsBottomAsItsExtentsGetPages) {
  Grown g;
  ASSERT_TRUE(g.m());
  if (!ExtentsProvided(g.m())) GTEST_SKIP() << "growth here is one fallocate, reported at its end";
  const uint64_t want = 72u << 20;
  ASSERT_NO_FATAL_FAILURE(g.StartStep(want));
  g.m()->Settle();
  const std::vector<uint64_t> r = g.reports();
  ASSERT_GE(r.size(), 2u) << "reported only at the end";
  for (size_t i = 0; i + 1 < r.size(); ++i) {
    EXPECT_EQ(r[i] % kExtentSize, 0u) << "report " << i;
    EXPECT_LE(r[i], r[i + 1]) << "report " << i;
  }
  EXPECT_EQ(r.back(), g.m()->capacity());
  EXPECT_GE(r.back(), want);
  EXPECT_EQ(g.failed(), 0);
  EXPECT_EQ(g.without_pages(), 0) << "a report reached past an extent without pages";
}

// A thread that waits for the growth gives extents their pages too, the
// lowest left, and reports the bottom done as far as it reaches: every
// report is still backed by pages, however the two interleave.
TEST(MediumGrowth, AHelperReportsTheBottomItFinished) {
  for (int round = 0; round < 4; ++round) {
    Grown g;
    ASSERT_TRUE(g.m());
    if (!ExtentsProvided(g.m())) GTEST_SKIP() << "growth here is one fallocate, reported at its end";
    const uint64_t want = 136u << 20;
    ASSERT_NO_FATAL_FAILURE(g.StartStep(want));
    std::thread helper([&] {
      while (g.m()->GrowInFlight()) g.m()->HelpGrow();
    });
    helper.join();
    g.m()->Settle();
    const std::vector<uint64_t> r = g.reports();
    ASSERT_FALSE(r.empty());
    EXPECT_GE(r.back(), want);
    EXPECT_EQ(g.failed(), 0);
    EXPECT_EQ(g.without_pages(), 0) << "round " << round << ": a report past an extent without pages";
  }
}

// Another process grew the file: a Provide (or ProvideExtents) past the
// size this medium last saw gives that range memory instead of stopping at
// the old size. (A pool's take-back of an extent another process's growth
// added stopped there: the blocks it then handed out had no memory.)
TEST(MediumGrowth, ProvideReachesPastASizeAnotherProcessGrew) {
  upfs_test::TempDir dir;
  for (const bool extents : {false, true}) {
    SCOPED_TRACE(extents ? "ProvideExtents" : "Provide");
    const std::string path = dir.File(extents ? "grown-extents" : "grown");
    const int fd = open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 2 << 20), 0);
    std::unique_ptr<Medium> m;
    Status st = Medium::Open(fd, path, &m, /*read_only=*/false);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const int other = open(path.c_str(), O_RDWR);  // the other process
    ASSERT_GE(other, 0);
    ASSERT_EQ(ftruncate(other, 8 << 20), 0);
    close(other);
    constexpr uint64_t kFrom = 4 << 20, kTo = 6 << 20;
    st = extents ? m->ProvideExtents(kFrom, kTo) : m->Provide(kFrom, kTo);
    ASSERT_TRUE(st.ok()) << st.ToString();
    struct stat sb;
    ASSERT_EQ(fstat(m->fd(), &sb), 0);
    EXPECT_GE(uint64_t(sb.st_blocks) * 512, kTo - kFrom);
    m->JoinBackground();
  }
}

}  // namespace
}  // namespace upfs
