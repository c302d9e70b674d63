// HugePageWarmer (medium/huge_page_warmer.h): it holds no memory between
// calls, a huge page it reports was made, it warms only while that pays,
// and the background worker's collapses, which warm a page first, still
// make the file's extents huge pages.
#include "medium/huge_page_warmer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "medium/medium.h"
#include "medium/mman_compat.h"
#include "test_util.h"
#include "smaps.h"

namespace upfs {
namespace {

// A counter of /proc/vmstat (0 if absent).
uint64_t VmStat(const std::string& name) {
  std::ifstream in("/proc/vmstat");
  std::string key;
  uint64_t value;
  while (in >> key >> value)
    if (key == name) return value;
  return 0;
}

TEST(HugePageWarmer, HoldsNoPageBetweenCalls) {
  HugePageWarmer w;
  EXPECT_FALSE(w.HoldsPages());
  for (int i = 0; i < 3; ++i) {
    w.Warm();
    EXPECT_FALSE(w.HoldsPages()) << "after call " << i;
  }
}

TEST(HugePageWarmer, AWarmingItReportsMadeAHugePage) {
  HugePageWarmer w;
  const uint64_t before = VmStat("thp_collapse_alloc");
  if (!w.Warm()) GTEST_SKIP() << "no huge page could be made here (MADV_COLLAPSE of anonymous memory)";
  EXPECT_GT(VmStat("thp_collapse_alloc"), before);
}

constexpr int64_t kMs = 1'000'000;

TEST(HugePageWarmer, WarmsUntilMemoryIsFoundWarmAndAgainAfterASlowCollapse) {
  HugePageWarmer w;
  EXPECT_TRUE(w.WantedNow()) << "memory is taken for cold until a warming says otherwise";
  w.NoteWarming(5 * kMs);  // cold: the host backed the page
  EXPECT_TRUE(w.WantedNow());
  for (int i = 1; i < HugePageWarmer::kCheapToStop; ++i) {
    w.NoteWarming(kMs / 2);  // one lucky warm page among cold ones
    EXPECT_TRUE(w.WantedNow()) << "after " << i << " cheap warmings";
  }
  w.NoteWarming(5 * kMs);  // cold again: the count starts over
  for (int i = 0; i < HugePageWarmer::kCheapToStop; ++i) w.NoteWarming(kMs / 2);
  EXPECT_FALSE(w.WantedNow()) << "warm memory: a warming would buy nothing";
  w.NoteUnwarmedCollapse(kMs * 7 / 10);  // warm collapses keep it off
  EXPECT_FALSE(w.WantedNow());
  w.NoteUnwarmedCollapse(5 * kMs);  // memory went cold
  EXPECT_TRUE(w.WantedNow());
}

// kB of huge pages mapping [addr, addr + len) in this process (the
// mappings that start inside the range).
uint64_t PmdMappedKb(const char* addr, uint64_t len) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  auto inside = [&](const char* line) {
    uintptr_t lo;
    return std::sscanf(line, "%lx-", &lo) == 1 && lo >= a && lo < a + len;
  };
  const long shmem = upfs_test::SmapsKib(inside, "ShmemPmdMapped:");
  const long file = upfs_test::SmapsKib(inside, "FilePmdMapped:");
  EXPECT_GE(shmem, 0) << "/proc/self/smaps";
  return uint64_t(std::max(shmem, 0L) + std::max(file, 0L));
}

bool HugePagesOff() {
  const char* v = std::getenv("UPFS_HUGEPAGES");
  return v && v[0] == '0';
}

// A file of kCollapseAtOpenBytes written in small pages (tmpfs's default),
// opened: the worker collapses its extents (Settle waits for them,
// unpaced), the first after a warming.
TEST(HugePageWarmer, TheWorkersCollapsesStillMakeHugePages) {
  if (HugePagesOff()) GTEST_SKIP() << "UPFS_HUGEPAGES=0";
  if (!HugePageWarmer().Warm()) GTEST_SKIP() << "no huge page can be made here";
  upfs_test::TempDir dir;
  const std::string path = dir.File("small-pages");
  const uint64_t bytes = kCollapseAtOpenBytes;
  {
    const int fd = open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    std::vector<char> mib(1u << 20, 'x');
    for (uint64_t off = 0; off < bytes; off += mib.size())
      ASSERT_EQ(pwrite(fd, mib.data(), mib.size(), off_t(off)), ssize_t(mib.size()));
    close(fd);
  }
  // Counted from before the open: the worker starts collapsing at once.
  const uint64_t allocs_before = VmStat("thp_collapse_alloc");
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::unique_ptr<Medium> m;
  Status st = Medium::Open(fd, path, &m);
  ASSERT_TRUE(st.ok()) << st.ToString();
  if (m->kind() != MediumKind::kTmpfs) GTEST_SKIP() << "not tmpfs: nothing is collapsed";
  m->Settle();
  const uint64_t allocs = VmStat("thp_collapse_alloc") - allocs_before;
  // The collapses made the file's pages huge; mapped now, they map so.
  ASSERT_EQ(madvise(m->base(), bytes, MADV_POPULATE_READ), 0);
  const uint64_t huge_kb = PmdMappedKb(m->base(), bytes);
  m->JoinBackground();
  // The worker leaves the last two extents (where appends land).
  const uint64_t extents = bytes / kExtentSize - 2;
  EXPECT_GE(huge_kb, extents * kExtentSize / 1024) << "kB of the file in huge pages, of " << bytes / 1024;
  // Each collapse took a huge page, and so did at least the first
  // warming (later ones only while memory is found cold; other
  // processes' collapses can only add to the count).
  EXPECT_GE(allocs, extents + 1) << "huge pages allocated by collapses for " << extents << " extents";
}

}  // namespace
}  // namespace upfs
