// The engine over the per-file container: replay and inspection of real
// files, allocation against a real medium, the shared state's rebuild,
// creation and appends in place (GC: gc_test.cc). Unit tests of single engine modules, with
// no container, are in tests/engine/.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <linux/falloc.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "container/perfile/perfile.h"
#include "engine/block_source.h"
#include "engine/block_table.h"
#include "engine/file.h"
#include "container/perfile/inspect.h"
#include "engine/log.h"
#include "container/perfile/shared_state.h"
#include "format/format.h"
#include "medium/medium.h"
#include "upfs/upfs.h"

#include "engine_file_util.h"
#include "test_util.h"

namespace upfs {
namespace {

using namespace format;

using upfs_test::TempDir;

TEST(Log, ReplayMatchesWritesAndRejectsGarbageAfterTail) {
  TempDir d;
  std::string path = d.File("f");
  {
    OpenedFile of;
    OpenEngine(path, &of);
    std::vector<char> buf(3 * kBlockSize + 17, 'x');
    uint64_t at;
    ASSERT_TRUE(of.file->Write(buf.data(), buf.size(), 100, false, &at).ok());  // payload entry
    ASSERT_TRUE(of.file->Write(buf.data(), kBlockSize, 0, false, &at).ok());     // inline entry
    ASSERT_TRUE(of.file->Truncate(5000).ok());
  }
  FileReport r;
  Status st = InspectFile(path, true, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.size, 5000u);
  EXPECT_EQ(r.log_entries, 3u);
  EXPECT_EQ(r.data_blocks, 2u);
  // Plant a nonzero word after the tail of the first log block.
  int fd = open(path.c_str(), O_RDWR);
  uint64_t junk = 0x1234;
  ASSERT_EQ(pwrite(fd, &junk, 8, kBlockSize + 16 + 8 * 400), 8);
  close(fd);
  st = InspectFile(path, true, &r);
  EXPECT_EQ(st.err(), EUCLEAN);
  EXPECT_NE(st.message().find("log block 1"), std::string::npos) << st.message();
}

// Regression (CI, ASan): the background grow's completion callback captured
// the allocator (now BlockSource) that asked for it, and ran after that
// allocator was gone.
TEST(BlockSource, BackgroundGrowOutlivesTheAllocatorThatAskedForIt) {
  TempDir d;
  OpenedFile of;
  OpenEngine(d.File("a"), &of);
  Medium* m = PerFile(*of.file)->medium();
  {
    auto alloc = std::make_unique<BlockSource>(m, of.file->source()->bitmap(),
                                               of.file->source()->epochs(), 1);
    ThreadBlocks tb;
    std::vector<format::Run> runs;
    // Claim until the allocator asks the worker to grow ahead, then drop
    // the allocator while that grow is (most likely) still running.
    for (int i = 0; i < 4096 && !m->GrowInFlight(); ++i) {
      runs.clear();
      ASSERT_TRUE(alloc->Alloc(&tb, 64, &runs).ok());
    }
    EXPECT_TRUE(m->GrowInFlight() || m->capacity() > (uint64_t{8} << 20));
  }
  while (m->GrowInFlight()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The grow still reached the shared state's published capacity.
  EXPECT_EQ(of.file->source()->bitmap()->capacity(),
            std::min<uint64_t>(m->capacity() >> kBlockShift, format::kMaxBlocks - 1));
}

// A rebuild (nobody else has the file open) frees blocks that the shared
// bitmap still shows taken by a process gone without returning them. It
// clears up to the high marks of a valid shared state, everything of an
// invalid one: both must leave no leaked bit behind.
void CheckRebuildFreesLeakedBlocks(bool invalidate_shared_state) {
  TempDir d;
  std::vector<format::Run> leaked;
  {
    OpenedFile of;
    OpenEngine(d.File("a"), &of);
    BlockSource& alloc = *of.file->source();
    ThreadBlocks tb;  // never returned, as after a crash
    ASSERT_TRUE(alloc.Alloc(&tb, 700, &leaked).ok());
    for (const format::Run& r : leaked)
      for (uint32_t i = 0; i < r.count; ++i) ASSERT_TRUE(of.file->source()->bitmap()->Test(r.lblock + i));
    if (invalidate_shared_state) PerFile(*of.file)->shared()->header()->ready.store(0);
  }
  OpenedFile of;
  OpenEngine(d.File("a"), &of);
  for (const format::Run& r : leaked)
    for (uint32_t i = 0; i < r.count; ++i)
      EXPECT_FALSE(of.file->source()->bitmap()->Test(r.lblock + i)) << "block " << r.lblock + i;
}

TEST(SharedState, RebuildFreesLeakedBlocksOfAValidState) { CheckRebuildFreesLeakedBlocks(false); }
TEST(SharedState, RebuildFreesLeakedBlocksOfAnInvalidState) { CheckRebuildFreesLeakedBlocks(true); }

// Opens the shared state named `id` (a host file of this user's, mode
// 0600), rebuilt if it asks to be (16 blocks), and lets others open it.
bool OpenTestState(const SharedState::Identity& id, std::unique_ptr<SharedState>* sh, bool* rebuild) {
  struct stat host{};
  host.st_mode = S_IFREG | 0600;
  host.st_uid = geteuid();
  host.st_gid = getegid();
  if (!SharedState::Open(id, host, sh, rebuild).ok()) return false;
  if (*rebuild) {
    (*sh)->ResetForRebuild(16);
    (*sh)->MarkReady();
  }
  (*sh)->ReleaseOpenLock();
  return true;
}

// Regression: threads of one process share the open file description that
// holds the slot locks, so the lock alone cannot keep two of them from
// claiming the same slot. Two threads on one slot share its epoch pin: one
// unpins while the other still reads a log block that GC then frees.
TEST(SharedState, ThreadsOfOneProcessNeverShareASlot) {
  // The state is named by the inode alone: one of its own per process.
  const SharedState::Identity id{0x5107c1a1c0ffeeull, 1, 0x5107c1a1ull ^ uint64_t(getpid()), 3};
  std::unique_ptr<SharedState> sh;
  bool rebuild = false;
  ASSERT_TRUE(OpenTestState(id, &sh, &rebuild));
  ASSERT_TRUE(rebuild) << "a state of a fresh identity is made anew";
  constexpr int kThreads = 8;
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> ready{0};
    std::vector<uint32_t> got(kThreads, kMaxSlots);
    std::vector<std::thread> ts;
    for (int i = 0; i < kThreads; ++i)
      ts.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        got[i] = kMaxSlots;
        if (!sh->epochs()->ClaimSlot(&got[i]).ok()) got[i] = kMaxSlots;
      });
    for (auto& t : ts) t.join();
    std::vector<uint32_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted.back() < kMaxSlots, true) << "round " << round << ": out of slots";
    ASSERT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
        << "round " << round << ": two threads claimed one slot";
    for (uint32_t s : got) sh->epochs()->ReleaseSlot(s);
  }
  sh.reset();
  SharedState::RemoveIfUnused(id);
}

// An epoch word that cannot be an epoch (0, a pin's "idle", or one no
// advancing reaches) makes the state invalid, as in a pool's volatile
// area: kept while another process is attached, its pins would protect
// nothing. A child process holds a slot; the state is opened again with
// its epoch damaged (rebuilt) and with it intact (kept).
TEST(SharedState, AnEpochThatCannotBeOneIsRebuiltWithAnotherProcessAttached) {
  const SharedState::Identity id{0x5107c1a1e90c4ull, 1, 0x5107c1a3ull ^ uint64_t(getpid()), 3};
  auto open = [&](std::unique_ptr<SharedState>* sh, bool* rebuild) { return OpenTestState(id, sh, rebuild); };
  std::unique_ptr<SharedState> sh;
  bool rebuild = false;
  ASSERT_TRUE(open(&sh, &rebuild));
  // The epoch stored before a second open, and whether that open must
  // rebuild; each case with a child of its own (a rebuild drops its slot).
  const std::pair<uint64_t, bool> cases[] = {
      {7, false}, {0, true}, {uint64_t{1} << 62, true}, {~uint64_t{0}, true}};
  for (const auto& [epoch, expect_rebuild] : cases) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::unique_ptr<SharedState> mine;
      bool r = false;
      uint32_t slot = kMaxSlots;
      const char ok = open(&mine, &r) && mine->epochs()->ClaimSlot(&slot).ok() ? 'y' : 'n';
      (void)!write(ready[1], &ok, 1);
      pause();
      _exit(0);
    }
    char ok = 'n';
    const bool got = read(ready[0], &ok, 1) == 1;
    close(ready[0]);
    close(ready[1]);
    if (got && ok == 'y') {
      sh->header()->epochs.epoch.store(epoch);
      std::unique_ptr<SharedState> again;
      EXPECT_TRUE(open(&again, &rebuild));
      EXPECT_EQ(rebuild, expect_rebuild) << (expect_rebuild ? "a state whose epoch cannot be one is kept"
                                                            : "a valid state with another process attached "
                                                              "is rebuilt: the test shows nothing");
      EXPECT_TRUE(sh->header()->epochs.Plausible());
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    ASSERT_TRUE(got && ok == 'y') << "the child could not attach";
  }
  sh.reset();
  SharedState::RemoveIfUnused(id);
}

// Writes `entry` into the first empty slot of the last log block of the
// (closed) upfs file at path.
void AppendRawLogEntry(const std::string& path, uint64_t entry) {
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint64_t l = 0;
  ASSERT_EQ(pread(fd, &l, 8, offsetof(FileHeader, log_head)), 8);
  for (;;) {
    uint64_t next = 0;
    ASSERT_EQ(pread(fd, &next, 8, off_t(l * kBlockSize)), 8);
    ASSERT_TRUE(NextWordValid(next));
    if (NextBlock(next) == 0) break;
    l = NextBlock(next);
  }
  for (uint32_t s = 0; s < kSlotsPerLogBlock; ++s) {
    off_t at = off_t(l * kBlockSize + offsetof(LogBlock, slots) + 8 * s);
    uint64_t w = 0;
    ASSERT_EQ(pread(fd, &w, 8, at), 8);
    if (w != 0) continue;
    ASSERT_EQ(pwrite(fd, &entry, 8, at), 8);
    close(fd);
    return;
  }
  close(fd);
  FAIL() << "last log block is full";
}

// A kGrowTail entry is only ever written by an append that found the
// current size inside a mapped tail block; one that does not continue the
// tail block is damage, reported at open (not a silently grown file): by a
// fresh open, by the reopen of a file this process parked at close, and by
// the next operation on a file open while the entry appears.
TEST(Corruption, GrowTailThatDoesNotContinueTheTailBlockIsRefused) {
  TempDir dir;
  struct Case {
    const char* what;
    uint64_t size_before;  // written first
    uint64_t grow_to;
    bool valid;
  };
  const Case cases[] = {
      {"continues the tail block", 10000, 10100, true},
      {"fills the tail block exactly", 10000, 12288, true},
      {"crosses into the next block", 10000, 12289, false},
      {"shrinks", 10000, 9000, false},
      {"from a block-aligned size", 8192, 8200, false},
      {"far past the end", 10000, uint64_t(1) << 40, false},
  };
  enum class When { kFreshOpen, kReopenParked, kWhileOpen };
  int n = 0;
  for (When when : {When::kFreshOpen, When::kReopenParked, When::kWhileOpen}) {
    for (const Case& k : cases) {
      const std::string what = std::string(k.what) + (when == When::kFreshOpen      ? " (fresh open)"
                                                      : when == When::kReopenParked ? " (parked)"
                                                                                    : " (while open)");
      std::string path = dir.File("g" + std::to_string(n++));
      int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
      ASSERT_GE(fd, 0) << upfs_last_error();
      std::vector<char> data(k.size_before, 'x');
      ASSERT_EQ(upfs_write(fd, data.data(), data.size()), ssize_t(data.size()));
      if (when != When::kWhileOpen) {
        ASSERT_EQ(upfs_close(fd), 0);
        if (when == When::kFreshOpen) upfs_drop_closed_files();
      }
      AppendRawLogEntry(path, EncodeGrowTail(k.grow_to));
      if (when != When::kWhileOpen) fd = upfs_open(path.c_str(), O_RDONLY);
      struct stat st;
      if (k.valid) {
        ASSERT_GE(fd, 0) << what << ": " << upfs_last_error();
        ASSERT_EQ(upfs_fstat(fd, &st), 0) << what << ": " << upfs_last_error();
        EXPECT_EQ(uint64_t(st.st_size), k.grow_to) << what;
        upfs_close(fd);
        continue;
      }
      if (when == When::kWhileOpen) {
        for (int again = 0; again < 2; ++again) {  // refused every time, not skipped
          EXPECT_EQ(upfs_fstat(fd, &st), -1) << what << ": grew the file to " << st.st_size;
          EXPECT_EQ(errno, EUCLEAN) << what;
          EXPECT_NE(std::string(upfs_last_error()).find("tail block"), std::string::npos)
              << what << ": " << upfs_last_error();
        }
        upfs_close(fd);
        continue;
      }
      EXPECT_LT(fd, 0) << what << ": opened a file whose log is damaged";
      if (fd >= 0) {
        upfs_close(fd);
      } else {
        EXPECT_EQ(errno, EUCLEAN) << what;
        EXPECT_NE(std::string(upfs_last_error()).find("tail block"), std::string::npos)
            << what << ": " << upfs_last_error();
      }
    }
  }
}

}  // namespace
}  // namespace upfs

namespace upfs {
namespace {

TEST(Create, InterruptedCreationIsRedoneOnlyWithOCreat) {
  TempDir d;
  std::string path = d.File("ic");
  int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(upfs_close(fd), 0);
  // Wipe the magic and the marker: what a crash between header body and
  // magic leaves (the marker is set after the magic).
  int h = open(path.c_str(), O_RDWR);
  char zero[8] = {};
  ASSERT_EQ(pwrite(h, zero, 8, 0), 8);
  ASSERT_EQ(fchmod(h, 0644), 0);
  close(h);
  EXPECT_EQ(upfs_open(path.c_str(), O_RDWR), -1);
  EXPECT_EQ(errno, EMEDIUMTYPE);
  fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  EXPECT_EQ(upfs_pwrite(fd, "x", 1, 0), 1);
  ASSERT_EQ(upfs_close(fd), 0);
  // A foreign file of the same size is never taken over, even with O_CREAT.
  std::string foreign = d.File("foreign");
  h = open(foreign.c_str(), O_RDWR | O_CREAT, 0644);
  std::vector<char> junk(2 * kBlockSize, 'j');
  std::memset(junk.data(), 0, 8);
  ASSERT_EQ(pwrite(h, junk.data(), junk.size(), 0), ssize_t(junk.size()));
  close(h);
  EXPECT_EQ(upfs_open(foreign.c_str(), O_CREAT | O_RDWR, 0644), -1);
  EXPECT_EQ(errno, EMEDIUMTYPE);
}

}  // namespace
}  // namespace upfs

namespace upfs {
namespace {

// Regressions of fuzzer findings: work proportional to the virtual size
// instead of to what is mapped (a hang on a hostile or very sparse file).
TEST(Regression, HugeHoleRunsAndSeeksOnSparseFiles) {
  TempDir d;
  OpenedFile of;
  OpenEngine(d.File("sparse"), &of);
  const uint64_t far = uint64_t{15} << 40;  // 15 TiB
  uint64_t at;
  ASSERT_TRUE(of.file->Write("x", 1, far, false, &at).ok());
  // A punched hole over everything below: one payload, not 2^32 steps.
  ASSERT_TRUE(of.file->Fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, far).ok());
  uint64_t r = 0;
  ASSERT_TRUE(of.file->SeekDataHole(0, true, &r).ok());
  EXPECT_EQ(r, far / kBlockSize * kBlockSize);  // the block holding the byte
  ASSERT_TRUE(of.file->SeekDataHole(0, false, &r).ok());
  EXPECT_EQ(r, 0u);
  ASSERT_TRUE(of.file->Truncate(far - 10).ok());
  EXPECT_EQ(of.file->SeekDataHole(0, true, &r).err(), ENXIO);
  ASSERT_TRUE(of.file->SeekDataHole(4096, false, &r).ok());
  EXPECT_EQ(r, 4096u);
}

// Appends in place (File::AppendInPlace): the bytes past the end of file in
// the tail block may hold an uncommitted append. Every operation that raises
// the size over them must show zeros there, not those bytes.
char* TailBlockHolding(OpenedFile* of, const char* marker, size_t len) {
  Medium* m = PerFile(*of->file)->medium();
  for (uint64_t b = 1; b < m->capacity() / kBlockSize; ++b) {
    char* a = m->base() + b * kBlockSize;
    if (std::memcmp(a, marker, len) == 0) return a;
  }
  return nullptr;
}


TEST(AppendInPlace, UncommittedBytesPastTheEndNeverShow) {
  TempDir d;
  const char marker[] = "tail-block-marker";
  const uint64_t n = sizeof(marker) - 1;
  struct Case {
    const char* name;
    std::function<Status(upfs::File*)> op;
    uint64_t new_size;
  };
  std::vector<Case> cases = {
      {"truncate up", [](upfs::File* f) { return f->Truncate(3 * kBlockSize + 5); },
       3 * kBlockSize + 5},
      {"fallocate up", [](upfs::File* f) { return f->Fallocate(0, 0, 2 * kBlockSize); },
       2 * kBlockSize},
      {"write past the tail block",
       [](upfs::File* f) {
         uint64_t at;
         return f->Write("Z", 1, 2 * kBlockSize + 7, false, &at);
       },
       2 * kBlockSize + 8},
      // A small overwrite pairs the tail block without copying it (its
      // first granule flip): the bytes past the size must not survive
      // into the pair, whose tail ZeroTailForGap leaves alone.
      {"truncate up after a first granule flip",
       [&marker](upfs::File* f) {
         uint64_t at;
         Status st = f->Write(marker, 1, 0, false, &at);
         return st.ok() ? f->Truncate(3 * kBlockSize + 5) : st;
       },
       3 * kBlockSize + 5},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE(c.name);
    std::string path = d.File("tail-" + std::to_string(k));
    {
      OpenedFile of;
      OpenEngine(path, &of);
      uint64_t at;
      ASSERT_TRUE(of.file->Write(marker, n, 0, true, &at).ok());
      char* tail = TailBlockHolding(&of, marker, n);
      ASSERT_NE(tail, nullptr);
      // What an interrupted in-place append leaves behind.
      std::memset(tail + n, 0x77, kBlockSize - n);
      ASSERT_TRUE(c.op(of.file.get()).ok());
      uint64_t size;
      ASSERT_TRUE(of.file->Size(&size).ok());
      ASSERT_EQ(size, c.new_size);
      std::vector<char> got(size);
      size_t done;
      ASSERT_TRUE(of.file->Read(got.data(), size, 0, &done).ok());
      ASSERT_EQ(done, size);
      EXPECT_EQ(std::memcmp(got.data(), marker, n), 0);
      for (uint64_t i = n; i < size; ++i) {
        if (got[i] == 'Z') continue;  // the written byte
        ASSERT_EQ(got[i], 0) << "byte " << i << " past the old end of file";
      }
      ExpectAllocationExact(of.file.get());
    }
    ReportIsClean(path);
  }
}

TEST(AppendInPlace, AppendsAfterLeftoverBytesAndDeadClaimsAreExact) {
  TempDir d;
  std::string path = d.File("appends");
  std::string expect = "first-record;";
  {
    OpenedFile of;
    OpenEngine(path, &of);
    uint64_t at;
    ASSERT_TRUE(of.file->Write(expect.data(), expect.size(), 0, true, &at).ok());
    char* tail = TailBlockHolding(&of, expect.data(), expect.size());
    ASSERT_NE(tail, nullptr);
    std::memset(tail + expect.size(), 0x77, 100);  // leftover of an interrupted append
    // A claim left by a thread that died holding it is taken over.
    of.file->root().words->tail_claim.store((uint64_t{0x7ffffffe} << 32) | 7);
    for (int i = 0; i < 3000; ++i) {  // crosses into new blocks many times
      std::string rec = "rec" + std::to_string(i) + ";";
      ASSERT_TRUE(of.file->Write(rec.data(), rec.size(), 0, true, &at).ok());
      ASSERT_EQ(at, expect.size());
      expect += rec;
    }
    // A positional write at the end of file takes the same path.
    ASSERT_TRUE(of.file->Write("END", 3, expect.size(), false, &at).ok());
    expect += "END";
    EXPECT_EQ(of.file->root().words->tail_claim.load(), 0u);
    std::vector<char> got(expect.size() + 10);
    size_t done;
    ASSERT_TRUE(of.file->Read(got.data(), got.size(), 0, &done).ok());
    EXPECT_EQ(std::string(got.data(), done), expect);
    ExpectAllocationExact(of.file.get());
  }
  ReportIsClean(path);
  // Replay from the media gives the same bytes.
  OpenedFile again;
  OpenEngine(path, &again);
  std::vector<char> got(expect.size() + 10);
  size_t done;
  ASSERT_TRUE(again.file->Read(got.data(), got.size(), 0, &done).ok());
  EXPECT_EQ(std::string(got.data(), done), expect);
}

TEST(AppendInPlace, ConcurrentAppendersAndGrowers) {
  TempDir d;
  std::string path = d.File("race");
  OpenedFile of;
  OpenEngine(path, &of);
  constexpr int kThreads = 3, kRecords = 2000;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kRecords; ++i) {
        char rec[24];
        int len = snprintf(rec, sizeof(rec), "<%d:%05d>", t, i);
        uint64_t at;
        if (!of.file->Write(rec, size_t(len), 0, true, &at).ok()) ++failures;
      }
    });
  }
  // Growing the file (fallocate past the end: it never shrinks, unlike a
  // truncate to a size read earlier) exposes zeros, never an appender's
  // bytes in flight.
  std::thread grower([&] {
    while (!stop.load()) {
      uint64_t size;
      if (!of.file->Size(&size).ok() || !of.file->Fallocate(0, size, 3).ok()) ++failures;
      std::this_thread::yield();
    }
  });
  for (auto& t : ts) t.join();
  stop = true;
  grower.join();
  ASSERT_EQ(failures.load(), 0);
  uint64_t size;
  ASSERT_TRUE(of.file->Size(&size).ok());
  std::vector<char> got(size + 1, 0);
  size_t done;
  ASSERT_TRUE(of.file->Read(got.data(), size, 0, &done).ok());
  // Every record appears exactly once, whole; everything else is zero.
  std::vector<int> seen(kThreads * kRecords, 0);
  for (uint64_t i = 0; i < size;) {
    if (got[i] == 0) {
      ++i;
      continue;
    }
    ASSERT_EQ(got[i], '<') << "stray byte at " << i;
    int t = -1, r = -1;
    ASSERT_EQ(sscanf(&got[i], "<%d:%05d>", &t, &r), 2)
        << "torn record at " << i << ": " << ::testing::PrintToString(std::string(&got[i > 20 ? i - 20 : 0], 50));
    ASSERT_TRUE(t >= 0 && t < kThreads && r >= 0 && r < kRecords);
    ++seen[t * kRecords + r];
    i += 9;
  }
  for (int v : seen) ASSERT_EQ(v, 1);
}

// An append in place changes the tail block's bytes without copying it, so
// its commit must count as touching that block: a copy-on-write writer that
// composed the tail block from an older size would otherwise commit zeros
// over the appended bytes.
TEST(AppendInPlace, RewritesOfTheTailBlockNeverLoseAppends) {
  TempDir d;
  std::string path = d.File("rewrite");
  OpenedFile of;
  OpenEngine(path, &of);
  constexpr int kRecords = 20000;
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread appender([&] {
    for (int i = 0; i < kRecords; ++i) {
      char rec[16];
      int len = snprintf(rec, sizeof(rec), "<%06d>", i);
      uint64_t at;
      if (!of.file->Write(rec, size_t(len), 0, true, &at).ok()) ++failures;
    }
    done = true;
  });
  // Rewrites the last bytes below the size with what they already hold: the
  // content must not change, whatever the interleaving.
  std::thread rewriter([&] {
    char buf[64];
    while (!done.load()) {
      uint64_t size;
      if (!of.file->Size(&size).ok()) ++failures;
      if (size < sizeof(buf)) continue;
      size_t got;
      uint64_t off = size - sizeof(buf);
      if (!of.file->Read(buf, sizeof(buf), off, &got).ok() || got != sizeof(buf)) ++failures;
      uint64_t at;
      if (!of.file->Write(buf, sizeof(buf), off, false, &at).ok()) ++failures;
    }
  });
  appender.join();
  rewriter.join();
  ASSERT_EQ(failures.load(), 0);
  uint64_t size;
  ASSERT_TRUE(of.file->Size(&size).ok());
  ASSERT_EQ(size, uint64_t(kRecords) * 8);
  std::vector<char> got(size);
  size_t n;
  ASSERT_TRUE(of.file->Read(got.data(), size, 0, &n).ok());
  for (int i = 0; i < kRecords; ++i) {
    char rec[16];
    snprintf(rec, sizeof(rec), "<%06d>", i);
    ASSERT_EQ(std::memcmp(&got[size_t(i) * 8], rec, 8), 0) << "record " << i << " lost";
  }
}

}  // namespace
}  // namespace upfs
