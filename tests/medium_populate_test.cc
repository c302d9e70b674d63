// Medium::PopulateAhead (and PopulateRangeAhead, for part of the file): a
// process that opens an existing file finds its pages mapped, instead of
// taking faults as it first reads or writes them
// (measured here without population: 4,096 faults reading the 4,096
// pages of this fallocated file, 1,024 writing them).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "medium/medium.h"
#include "test_util.h"

namespace upfs {
namespace {

constexpr uint64_t kFileBytes = 16u << 20;

class HostFile {
 public:
  HostFile() {
    char tmpl[] = "/dev/shm/upfs-populate-XXXXXX";
    const int fd = mkstemp(tmpl);
    path_ = tmpl;
    EXPECT_GE(fd, 0);
    // Small pages, written (an upfs file has no holes).
    EXPECT_EQ(posix_fallocate(fd, 0, off_t(kFileBytes)), 0);
    close(fd);
  }
  ~HostFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

long MinorFaults() {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

// Faults taken while touching every page of the mapping. Not instrumented
// by ASan: its checks would fault in the shadow of the mapping, a page per
// 32 KiB touched, and those faults would count.
__attribute__((no_sanitize("address"))) long FaultsToTouch(Medium* m, bool write, uint64_t from = 0,
                                                            uint64_t to = kFileBytes) {
  char* b = m->base();
  const long before = MinorFaults();
  uint64_t sum = 0;
  for (uint64_t off = from; off < to; off += kPageSize) {
    if (write) {
      reinterpret_cast<volatile char*>(b)[off] = 1;
    } else {
      sum += reinterpret_cast<volatile char*>(b)[off];
    }
  }
  EXPECT_GE(sum, 0u);
  return MinorFaults() - before;
}

std::unique_ptr<Medium> OpenMedium(const std::string& path, bool read_only) {
  const int fd = open(path.c_str(), read_only ? O_RDONLY : O_RDWR);
  EXPECT_GE(fd, 0);
  std::unique_ptr<Medium> m;
  Status st = Medium::Open(fd, path, &m, read_only);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return m;
}

TEST(MediumPopulate, AReaderFindsEveryPageMapped) {
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  m->PopulateAhead();
  m->Settle();  // the background population is done
  // 4,096 pages; without population, 4,096 faults.
  EXPECT_LE(FaultsToTouch(m.get(), false), 8);
}

TEST(MediumPopulate, AWriterFindsEveryPageWritable) {
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/false);
  ASSERT_TRUE(m);
  m->PopulateAhead();
  m->Settle();
  // Without population, 1,024 faults.
  EXPECT_LE(FaultsToTouch(m.get(), true), 8);
}

TEST(MediumPopulate, WithoutItReadsFault) {
  // The measure the tests above rely on: untouched, reading the mapping
  // faults (so an empty population would be caught).
  if (upfs_test::TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  EXPECT_GE(FaultsToTouch(m.get(), false), 64);
}

// PopulateRangeAhead (a pool's file: part of the host file): the range is
// mapped, and only the range.
TEST(MediumPopulate, ARangeIsMappedAndNothingElse) {
  if (upfs_test::TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  constexpr uint64_t kFrom = 3u << 20, kTo = 11u << 20;  // not extent-aligned: 1.5 MiB steps at the ends
  m->PopulateRangeAhead(kFrom, kTo - kFrom);
  m->Settle();
  EXPECT_LE(FaultsToTouch(m.get(), false, kFrom, kTo), 8) << "2,048 pages in the range";
  EXPECT_GE(FaultsToTouch(m.get(), false, kTo, kFileBytes), 64) << "past the range: not populated";
}

}  // namespace
}  // namespace upfs
