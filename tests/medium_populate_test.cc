// Medium::PopulateAhead: a process that opens an existing file finds its
// pages mapped, instead of taking faults as it first reads or writes them
// (measured here without population, UPFS_POPULATE=0: 256 faults reading
// the 4,096 pages of a written 16 MiB file, 4,096 writing them).
#include <fcntl.h>
#include <linux/falloc.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "medium/medium.h"

namespace upfs {
namespace {

constexpr uint64_t kFileBytes = 16u << 20;

class HostFile {
 public:
  // Small pages, allocated (an upfs file has no holes); with `written`,
  // holding data too (SEEK_DATA on tmpfs skips pages only fallocated, as
  // a pool's populating does).
  explicit HostFile(bool written = false) {
    char tmpl[] = "/dev/shm/upfs-populate-XXXXXX";
    const int fd = mkstemp(tmpl);
    path_ = tmpl;
    EXPECT_GE(fd, 0);
    EXPECT_EQ(posix_fallocate(fd, 0, off_t(kFileBytes)), 0);
    if (written) {
      const std::string mib(1 << 20, 'x');
      for (uint64_t off = 0; off < kFileBytes; off += mib.size())
        EXPECT_EQ(pwrite(fd, mib.data(), mib.size(), off_t(off)), ssize_t(mib.size()));
    }
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
__attribute__((no_sanitize("address"))) long FaultsToTouchAt(char* b, bool write, uint64_t from, uint64_t to) {
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

long FaultsToTouch(Medium* m, bool write, uint64_t from = 0, uint64_t to = kFileBytes) {
  return FaultsToTouchAt(m->base(), write, from, to);
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
  HostFile f(/*written=*/true);
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  m->PopulateAhead();
  m->Settle();  // the background population is done
  // 4,096 pages; without population (UPFS_POPULATE=0), 256 faults (the
  // kernel maps 16 written pages a read fault).
  EXPECT_LE(FaultsToTouch(m.get(), false), 8);
}

TEST(MediumPopulate, AWriterFindsEveryPageWritable) {
  HostFile f(/*written=*/true);
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/false);
  ASSERT_TRUE(m);
  m->PopulateAhead();
  m->Settle();
  // Without population, 4,096 faults.
  EXPECT_LE(FaultsToTouch(m.get(), true), 8);
}

// Whether tmpfs gives new files huge pages (then a mapping faults once per
// 2 MiB, populated or not).
bool TmpfsHugeByDefault() {
  FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (!f) return false;
  char buf[128] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string s(buf, n);
  return s.find("[always]") != std::string::npos || s.find("[force]") != std::string::npos ||
         s.find("[within_size]") != std::string::npos;
}

// Whether growth and the probes make ordinary pages here: this program
// runs with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt).
bool OrdinaryPagesAsked() {
  const char* huge = std::getenv("UPFS_HUGEPAGES");
  return huge && huge[0] == '0';
}

TEST(MediumPopulate, WithoutItReadsFault) {
  // The measure the tests above rely on: untouched, reading the mapping
  // faults (so an empty population would be caught).
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  EXPECT_GE(FaultsToTouch(m.get(), false), 64);
}

// A pool's file: only the extents that hold its data are populated, the
// first by the probe (which says the medium is in small pages), the others
// by the worker; the rest of the pool stays as it was.
TEST(MediumPopulate, OnlyTheExtentsGivenAreMapped) {
  ASSERT_TRUE(OrdinaryPagesAsked()) << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f(/*written=*/true);
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/false);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->PopulateProbe(2 * kExtentSize)) << "a small-page extent";
  m->PopulateExtents({5 * kExtentSize, 3 * kExtentSize});
  m->Settle();
  for (uint64_t e : {2, 3, 5})
    EXPECT_LE(FaultsToTouch(m.get(), false, e * kExtentSize, (e + 1) * kExtentSize), 8) << "extent " << e;
  // Unpopulated written pages fault 16 at a time (fault-around): 32.
  EXPECT_GE(FaultsToTouch(m.get(), false, 4 * kExtentSize, 5 * kExtentSize), 16) << "extent 4, not given";
}

// Holes stay holes: a pool's free space may be a hole of its file, and
// populating one (even for reading, on a shared tmpfs mapping) would
// allocate its pages (2 MiB an extent, measured with a scratch program).
TEST(MediumPopulate, HolesAreNotFilled) {
  char tmpl[] = "/dev/shm/upfs-populate-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  const std::string path = tmpl;
  ASSERT_EQ(ftruncate(fd, off_t(kFileBytes)), 0);
  // Data in the first half of extent 2 only.
  const std::string data(kExtentSize / 2, 'x');
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), off_t(2 * kExtentSize)), ssize_t(data.size()));
  struct stat before;
  ASSERT_EQ(fstat(fd, &before), 0);
  close(fd);
  {
    std::unique_ptr<Medium> m = OpenMedium(path, /*read_only=*/false);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->PopulateProbe(2 * kExtentSize), !TmpfsHugeByDefault()) << "256 small pages";
    m->PopulateExtents({3 * kExtentSize, 5 * kExtentSize});
    m->Settle();
  }
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_blocks, before.st_blocks) << "populating allocated pages in holes";
  unlink(path.c_str());
}

TEST(MediumPopulate, AProbePastTheMappingMapsNothing) {
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->PopulateProbe(kFileBytes));
  m->PopulateExtents({kFileBytes, 2 * kFileBytes});  // skipped by the worker, no fault
  m->Settle();
}

// With ordinary pages (UPFS_HUGEPAGES=0 for this program, tests/
// CMakeLists.txt), the pages growth adds are mapped in one call as they
// are made; an open maps none (it had mapped the whole file, so that
// attaching a 1.35 GB pool took 345-434 ms, every page mapped before the
// first call returned).
TEST(MediumPopulate, OpeningMapsNoPageAndGrowthMapsItsOwn) {
  ASSERT_TRUE(OrdinaryPagesAsked()) << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f;
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/false);
  ASSERT_TRUE(m);
  EXPECT_GE(FaultsToTouch(m.get(), false), 64) << "4,096 pages the open left unmapped";
  const uint64_t grown = m->capacity();
  ASSERT_TRUE(m->Grow(grown + kFileBytes).ok());
  ASSERT_GE(m->capacity(), grown + kFileBytes);
  EXPECT_LE(FaultsToTouch(m.get(), true, grown, grown + kFileBytes), 8) << "pages growth added";
}

// A medium whose file outgrows its reservation gets a new mapping with no
// page table. The pages the old one had mapped are mapped again by the
// worker, from the old page table: before, every one of them faulted again
// as it was used (a writer of random 2 KiB pieces of a 1 GiB file, past
// its 1 GiB reservation: up to tens of thousands of faults a pass), or,
// with ordinary pages, a writer waited while the whole file was
// populated, its holes filled. A reader's reservation is twice its file,
// so a 16 MiB file moves at 32 MiB; the file grows here as another process
// would grow it, made longer behind the medium (sparse: the test allocates
// nothing), then mapped. The old mapping then drops its entries.
TEST(MediumPopulate, AMappingMovedToALargerReservationKeepsItsPages) {
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f(/*written=*/true);
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/true);
  ASSERT_TRUE(m);
  // Half the pages mapped in the old reservation, mapped only there: only
  // the move can map them in the new one.
  const uint64_t half = kFileBytes / 2;
  FaultsToTouch(m.get(), false, 0, half);
  ASSERT_LE(FaultsToTouch(m.get(), false, 0, half), 8) << "mapped by the first touch";
  char* const old_base = m->base();
  const uint64_t grown = 5 * kFileBytes / 2;
  const int fd = open(f.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t(grown)), 0);
  struct stat before;
  ASSERT_EQ(fstat(fd, &before), 0);
  ASSERT_TRUE(m->EnsureMapped(grown).ok());
  ASSERT_NE(m->base(), old_base) << "the mapping did not move: the test shows nothing";
  m->Settle();
  EXPECT_LE(FaultsToTouch(m.get(), false, 0, half), 8) << "pages the old mapping had, faulted again";
  // The old mapping has let them go (its page tables would double the
  // process's until close) and still serves a thread that uses it.
  EXPECT_GE(FaultsToTouchAt(old_base, false, 0, half), 64) << "the old mapping kept its entries";
  // Pages the old mapping never had stay unmapped (reads fault 16 at a
  // time: 128 for these 2,048 pages), and the holes past the data stay
  // holes.
  EXPECT_GE(FaultsToTouch(m.get(), false, half, kFileBytes), 64) << "mapped though never used";
  struct stat after;
  ASSERT_EQ(fstat(fd, &after), 0);
  EXPECT_EQ(after.st_blocks, before.st_blocks) << "the move allocated pages in holes";
  close(fd);
}

// Whether every page of [addr, addr + len) has a page table entry (the
// present bit of /proc/self/pagemap), read without touching the pages.
bool AllPresent(const char* addr, uint64_t len) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  std::vector<uint64_t> entries(len / kPageSize);
  const off_t where = off_t(reinterpret_cast<uintptr_t>(addr) / kPageSize * sizeof(uint64_t));
  const ssize_t got = pread(fd, entries.data(), entries.size() * sizeof(uint64_t), where);
  close(fd);
  EXPECT_EQ(got, ssize_t(entries.size() * sizeof(uint64_t)));
  for (uint64_t e : entries)
    if (!(e & (uint64_t{1} << 63))) return false;
  return true;
}

// Growth step after step, as a file asks for it when its shadows or its
// appends grow it: each step asks for the next from its own end (its
// ready callback), so that growth is asked for all the time, up to
// `limit` bytes (small pages: about 0.5-1 ms a step).
class GrowthChain {
 public:
  GrowthChain(Medium* m, uint64_t limit) : m_(m), limit_(limit) {
    next_ = [this](uint64_t) {
      steps_.fetch_add(1);
      if (!stop_.load() && m_->capacity() < limit_) {
        m_->GrowAhead(m_->capacity() + 1, next_);
      } else {
        ended_.store(true);
      }
    };
    m_->GrowAhead(m_->capacity() + 1, next_);
    while (steps_.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Whether `done()` held at some moment before the growth ended, polled.
  template <typename Done>
  bool HoldsWhileGrowing(Done done) {
    while (!ended_.load()) {
      if (done()) return !ended_.load();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }
  ~GrowthChain() { Stop(); }  // the worker must not call next_ after
  // Asks for no more steps and waits for the worker to finish.
  void Stop() {
    stop_.store(true);
    m_->Settle();
  }
  int steps() const { return steps_.load(); }

 private:
  Medium* const m_;
  const uint64_t limit_;
  std::atomic<bool> stop_{false}, ended_{false};
  std::atomic<int> steps_{0};
  BlockSpace::ReadyFn next_;
};

// Population is not starved by growth: a file that grows step after step
// kept the worker from populating for as long as that lasted, the extents
// handed to it too, and a reader of the file's old part took a fault per
// page meanwhile. The extents must be mapped before the growth ends.
TEST(MediumPopulate, GrowthStepAfterStepDoesNotStarvePopulation) {
  ASSERT_TRUE(OrdinaryPagesAsked()) << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f(/*written=*/true);
  std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/false);
  ASSERT_TRUE(m);
  GrowthChain growth(m.get(), 8 * kFileBytes);
  const std::vector<uint64_t> given = {2 * kExtentSize, 3 * kExtentSize, 5 * kExtentSize};
  m->PopulateExtents(given);
  auto populated = [&] {
    for (uint64_t e : given)
      if (!AllPresent(m->base() + e, kExtentSize)) return false;
    return true;
  };
  const bool during_growth = growth.HoldsWhileGrowing(populated);
  const int steps = growth.steps();
  growth.Stop();
  EXPECT_TRUE(populated()) << "not even after the growth";
  EXPECT_TRUE(during_growth) << "nothing populated in " << steps << " growth steps, " << (m->capacity() >> 20)
                             << " MiB";
}

// A writer's medium of a written file whose first half has pages, opened
// with a small floor of address space, so that its first growth past
// twice the file's size moves its mapping.
struct MovableWriter {
  MovableWriter() {
    Medium::SetWriterReserveFloor(kExtentSize);
    m = OpenMedium(f.path(), /*read_only=*/false);
    Medium::SetWriterReserveFloor(uint64_t{1} << 30);
    if (!m) return;
    FaultsToTouch(m.get(), true, 0, half);
    first_base = m->base();
  }
  bool moved() const { return m->base() != first_base; }
  HostFile f{/*written=*/true};
  std::unique_ptr<Medium> m;
  const uint64_t half = kFileBytes / 2;
  char* first_base = nullptr;
};

// The same for a writer's mapping moved by its own growth: the pages the
// old mapping had are mapped again while the growth goes on (53c2e19;
// before, none in six passes of random 2 KiB writes over a 1 GiB file,
// whose shadows grew it step after step). The writer's floor of address
// space is made small for the open, so that the 16 MiB file reserves only
// twice its size and its growth moves it once, at 34 MiB (into a
// reservation of the usual 1 GiB floor: a debug print).
TEST(MediumPopulate, AMappingMovedByGrowthGetsItsPagesWhileItGrows) {
  ASSERT_TRUE(OrdinaryPagesAsked()) << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  MovableWriter w;
  ASSERT_TRUE(w.m);
  Medium* const m = w.m.get();
  GrowthChain growth(m, 8 * kFileBytes);
  auto moved_and_mapped = [&] { return w.moved() && AllPresent(m->base(), w.half); };
  const bool during_growth = growth.HoldsWhileGrowing(moved_and_mapped);
  const int steps = growth.steps();
  growth.Stop();
  ASSERT_TRUE(w.moved()) << "the mapping did not move: the test shows nothing";
  EXPECT_TRUE(AllPresent(m->base(), w.half)) << "not even after the growth";
  EXPECT_TRUE(during_growth) << "the moved mapping had no pages in " << steps << " growth steps, "
                             << (m->capacity() >> 20) << " MiB";
}

// But not while a thread waits for the growth (a GrowthWaiter, as a writer
// out of space makes one): the remap then comes after the growth. A
// step's share of mapping work spent while a writer waited for space was
// that writer's wait: 22-47 ms stalls of random 128-byte writes over a
// fresh 1 GiB file, two or three a first pass (docs/design.md,
// "Background worker").
TEST(MediumPopulate, AThreadWaitingForGrowthDoesNotWaitForARemap) {
  ASSERT_TRUE(OrdinaryPagesAsked()) << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  MovableWriter w;
  ASSERT_TRUE(w.m);
  Medium* const m = w.m.get();
  std::atomic<bool> waiting{true}, counted_in{false};
  std::thread waiter([&] {  // as BlockSource::ClaimChunk waits
    GrowthWaiter counted(m);
    counted_in.store(true);
    while (waiting.load())
      if (!m->HelpGrow()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  });
  // The growth starts once the waiter counts: a thread not yet scheduled
  // when the first steps ran let them remap (3 extents, once, in a CI's
  // ASan stage), which is not what the test is about.
  while (!counted_in.load()) std::this_thread::yield();
  int most = 0;  // extents of the moved mapping remapped, the most seen during the growth
  GrowthChain growth(m, 8 * kFileBytes);
  (void)growth.HoldsWhileGrowing([&] {
    char* const b = m->base();
    int n = 0;
    for (uint64_t e = 0; w.moved() && e < w.half; e += kExtentSize)
      n += AllPresent(b + e, kExtentSize);
    most = std::max(most, n);
    return false;
  });
  const int steps = growth.steps();
  waiting.store(false);
  waiter.join();
  growth.Stop();
  ASSERT_TRUE(w.moved()) << "the mapping did not move: the test shows nothing";
  EXPECT_LE(most, 1) << most << " extents remapped in " << steps
                     << " growth steps while a thread waited for them";
  EXPECT_TRUE(AllPresent(m->base(), w.half)) << "not remapped after the growth";
}

// A writer's population maps its pages writable, which fills what it maps:
// an extent the file gave back (punched out, docs/design.md "Giving free
// space back") must stay a hole, or a reopened file holds that memory
// again until its next give-back.
TEST(MediumPopulate, AWritersPopulationLeavesGivenBackExtentsHoles) {
  if (TmpfsHugeByDefault()) GTEST_SKIP() << "tmpfs makes huge pages here: few faults either way";
  HostFile f(/*written=*/true);
  const int fd = open(f.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  for (uint64_t e : {1, 3, 6})  // 1: the extent the probe would try first
    ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(e * kExtentSize), off_t(kExtentSize)), 0);
  struct stat before;
  ASSERT_EQ(fstat(fd, &before), 0);
  ASSERT_EQ(uint64_t(before.st_blocks) * 512, kFileBytes - 3 * kExtentSize);
  {
    std::unique_ptr<Medium> m = OpenMedium(f.path(), /*read_only=*/false);
    ASSERT_TRUE(m);
    m->PopulateAhead();
    m->Settle();
    EXPECT_LE(FaultsToTouch(m.get(), true, 4 * kExtentSize, 6 * kExtentSize), 8) << "the data around was mapped";
  }
  struct stat after;
  ASSERT_EQ(fstat(fd, &after), 0);
  EXPECT_EQ(after.st_blocks, before.st_blocks) << "population filled given-back extents";
  close(fd);
}

}  // namespace
}  // namespace upfs
