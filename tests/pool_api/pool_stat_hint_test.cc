// The stat hint of pool files (engine/stat_hint.h): a stat of a file with
// data that nobody in the process holds takes its size and block count
// from the hint a previous stat left, without an engine File, and only
// while nothing was committed to the file's log since. Every test checks
// the size and blocks against the file's own descriptor (the engine) and
// counts the stats the hint answered in this thread, so that each can
// fail both ways: a hint believed when stale, or never used at all.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "container/pool/pool_format.h"
#include "engine/file.h"
#include "engine/log.h"
#include "engine/log_root.h"
#include "engine/stat_hint.h"
#include "pool_attached_fixture.h"
#include "pool_test_fixture.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs::StatHintsTakenInThisThread;
using upfs_test::Scaled;

class PoolStatHint : public pool_test::PoolTest {
 protected:
  // Path stat of `rel`, checked against fstat of `fd` (the engine's view).
  void ExpectStat(const std::string& rel, int fd, off_t size, const std::string& when) {
    struct stat by_path, by_fd;
    ASSERT_EQ(upfs_stat(P(rel).c_str(), &by_path), 0) << upfs_last_error();
    ASSERT_EQ(upfs_fstat(fd, &by_fd), 0) << upfs_last_error();
    EXPECT_EQ(by_path.st_size, size) << when;
    EXPECT_EQ(by_fd.st_size, size) << when;
    EXPECT_EQ(by_path.st_blocks, by_fd.st_blocks) << when;
    EXPECT_EQ(by_path.st_mtim.tv_nsec, by_fd.st_mtim.tv_nsec) << when;
    EXPECT_EQ(by_path.st_ctim.tv_nsec, by_fd.st_ctim.tv_nsec) << when;
  }
  off_t StatSize(const std::string& rel) {
    struct stat st;
    if (upfs_stat(P(rel).c_str(), &st) != 0) return -1;
    return st.st_size;
  }
};

TEST_F(PoolStatHint, ASecondStatOfAFileWithDataTakesTheHint) {
  ASSERT_EQ(Create("f", std::string(100, 'x')), 0);
  const uint64_t before = StatHintsTakenInThisThread();
  EXPECT_EQ(StatSize("f"), 100);  // replays the log, leaves the hint
  EXPECT_EQ(StatSize("f"), 100);
  EXPECT_EQ(StatSize("f"), 100);
  EXPECT_GE(StatHintsTakenInThisThread() - before, 2u);
  // An empty file has no log: its stat never needed the engine.
  ASSERT_EQ(Create("empty"), 0);
  const uint64_t empty_before = StatHintsTakenInThisThread();
  EXPECT_EQ(StatSize("empty"), 0);
  EXPECT_EQ(StatHintsTakenInThisThread(), empty_before);
}

// Each change of size or of the block map, by a descriptor this thread
// holds open, then two stats by path: the first must not take the old
// hint, the second may take the one the first left.
TEST_F(PoolStatHint, EveryChangeIsSeenByTheNextStat) {
  ASSERT_EQ(Create("f", "hello"), 0);
  ASSERT_EQ(StatSize("f"), 5);
  const int fd = upfs_open(P("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << upfs_last_error();
  auto twice = [&](off_t size, const char* what) {
    ExpectStat("f", fd, size, std::string("first stat after ") + what);
    ExpectStat("f", fd, size, std::string("second stat after ") + what);
  };
  ASSERT_EQ(upfs_pwrite(fd, "!", 1, 5), 1);
  twice(6, "a one-byte append");
  ASSERT_EQ(upfs_pwrite(fd, std::string(10000, 'y').data(), 10000, 6), 10000);
  twice(10006, "an append of new blocks");
  ASSERT_EQ(upfs_pwrite(fd, "z", 1, 3), 1);
  twice(10006, "an overwrite inside the size");
  ASSERT_EQ(upfs_ftruncate(fd, 4096), 0);
  twice(4096, "a truncate down");
  ASSERT_EQ(upfs_ftruncate(fd, 1 << 20), 0);
  twice(1 << 20, "a truncate up");
  ASSERT_EQ(upfs_fallocate(fd, 0, 0, 2 << 20), 0);
  twice(2 << 20, "a fallocate past the size");
  ASSERT_EQ(upfs_pwrite(fd, "end", 3, (3 << 20) + 7), 3);
  twice((3 << 20) + 10, "a write past the end");
  ASSERT_EQ(upfs_ftruncate(fd, 0), 0);
  twice(0, "a truncate to zero");
  ASSERT_EQ(upfs_close(fd), 0);
  EXPECT_EQ(StatSize("f"), 0);
}

// Small overwrites fill the log with patches until the GC compacts it
// (its full blocks replaced, the tail block kept): stats between the
// batches and after the last compaction agree with the engine. (A hint
// into a block a compaction retired: PoolStatHintSteps below.)
TEST_F(PoolStatHint, AHintDoesNotOutliveACompactionOfTheLog) {
  const size_t size = 64 * 1024;
  ASSERT_EQ(Create("f", std::string(size, 'a')), 0);
  const int fd = upfs_open(P("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const uint64_t rounds = Scaled(20, 4);
  for (uint64_t r = 0; r < rounds; ++r) {
    ExpectStat("f", fd, off_t(size), "round " + std::to_string(r));
    for (int i = 0; i < 2000; ++i) {
      const char c = char('a' + (i + r) % 26);
      ASSERT_EQ(upfs_pwrite(fd, std::string(128, c).data(), 128, off_t((i * 4099) % (size - 128))), 128);
    }
    ASSERT_EQ(upfs_settle(fd), 0);  // the compaction this process asked for is done
  }
  ExpectStat("f", fd, off_t(size), "after the last compaction");
  ASSERT_EQ(upfs_close(fd), 0);
}

// Another process appends: this process's hint (left by its stat) is
// stale, and the commit in the shared log says so.
TEST_F(PoolStatHint, AnotherProcessesAppendIsSeen) {
  ASSERT_EQ(Create("f", "12345"), 0);
  ASSERT_EQ(StatSize("f"), 5);
  ASSERT_EQ(StatSize("f"), 5);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = upfs_open(P("f").c_str(), O_WRONLY | O_APPEND);
    _exit(fd >= 0 && upfs_write(fd, "678", 3) == 3 && upfs_close(fd) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(StatSize("f"), 8);
  EXPECT_EQ(StatSize("f"), 8);
  EXPECT_EQ(Read("f"), "12345678");
}

// A writer appends a byte at a time while this thread stats: every size
// seen lies between what was written before the stat began and after it
// returned (the hint, taken or not, is never behind a finished append).
TEST_F(PoolStatHint, StatsRacingAppendsSeeNoSizeFromThePast) {
  ASSERT_EQ(Create("f", "x"), 0);
  const int fd = upfs_open(P("f").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const uint64_t appends = Scaled(20000, 2000);
  std::atomic<uint64_t> done{1};  // bytes whose append has returned
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    for (uint64_t i = 0; i < appends; ++i) {
      if (upfs_write(fd, "y", 1) != 1) {
        failed = true;
        break;
      }
      done.store(i + 2, std::memory_order_release);
    }
  });
  uint64_t stats = 0, bad = 0;
  std::string first_bad;
  for (;;) {
    const uint64_t low = done.load(std::memory_order_acquire);
    const off_t got = StatSize("f");
    const uint64_t high = done.load(std::memory_order_acquire) + 1;  // one in flight
    ++stats;
    if (got < off_t(low) || got > off_t(high)) {
      if (bad++ == 0) first_bad = std::to_string(got) + " not in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
    }
    if (low == appends + 1 || failed) break;
  }
  writer.join();
  ASSERT_FALSE(failed) << upfs_last_error();
  EXPECT_EQ(bad, 0u) << first_bad << " (of " << stats << " stats)";
  EXPECT_EQ(StatSize("f"), off_t(appends + 1));
  ASSERT_EQ(upfs_close(fd), 0);
}

// The hint's words live in the pool file (a clean pool keeps them): one
// damaged there is refused by its checksum, and a position past the
// pool's end by its bounds, each answered by the engine instead.
TEST_F(PoolStatHint, DamagedHintWordsAreNotBelieved) {
  ASSERT_EQ(Create("f", std::string(3000, 'd')), 0);
  struct stat st;
  ASSERT_EQ(upfs_stat(P("f").c_str(), &st), 0);
  ASSERT_EQ(StatSize("f"), 3000);  // the hint is there, and taken
  const int pfd = open(pool_.c_str(), O_RDWR);
  ASSERT_GE(pfd, 0);
  const size_t at = size_t(upfs::format::pool::InodeOffset(st.st_ino)) + offsetof(upfs::format::pool::Inode, words);
  const size_t page = at & ~size_t(4095);
  void* map = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, off_t(page));
  ASSERT_NE(map, MAP_FAILED);
  auto* w = reinterpret_cast<upfs::LogWords*>(static_cast<char*>(map) + (at - page));
  const uint64_t good_size = w->hint_size.load(), good_at = w->hint_at.load();
  ASSERT_EQ(good_size, 3000u);
  uint64_t before = StatHintsTakenInThisThread();
  w->hint_size.store(good_size ^ 0x400);  // a flipped bit
  EXPECT_EQ(StatSize("f"), 3000);
  EXPECT_EQ(StatHintsTakenInThisThread(), before) << "a hint that fails its checksum was taken";
  // The engine's stat left a good hint again.
  EXPECT_EQ(w->hint_size.load(), 3000u);
  EXPECT_EQ(w->hint_at.load(), good_at);
  before = StatHintsTakenInThisThread();
  EXPECT_EQ(StatSize("f"), 3000);
  EXPECT_EQ(StatHintsTakenInThisThread(), before + 1);
  // A position far past the pool's end, with a checksum that matches it
  // (only a writer of the words could make one): refused, no fault.
  w->hint_at.store(0xfffffff0ull);
  const uint64_t words[5] = {w->hint_size.load(), w->hint_blocks.load(), w->hint_at.load(),
                             w->hint_seq.load(), w->hint_head.load()};
  w->hint_crc.store(upfs::Crc32c(words, sizeof(words)));
  before = StatHintsTakenInThisThread();
  EXPECT_EQ(StatSize("f"), 3000);
  EXPECT_EQ(StatHintsTakenInThisThread(), before);
  munmap(map, 8192);
  close(pfd);
  ExpectClean();
}

// A hint whose block the log left behind, in one thread: the stat leaves
// its hint in the tail block; writes fill that block and go on; a
// compaction replaces the full blocks (the tail block it keeps) and
// retires the hinted one; the block is then reused (here: zeroed through
// the pool file, as another file's data would), so the hinted slot reads
// empty again. The next stat must not take the hint: the log's head moved,
// and the block's seq is not the hint's (either check alone refuses it).
class PoolStatHintSteps : public pool_test::AttachedPoolTest {
 protected:
  PoolStatHintSteps() : AttachedPoolTest("hintsteps") {}
  off_t StatSize(const char* path) {
    struct stat st;
    upfs::Status s = Ns().StatPath(path, true, &st);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? st.st_size : -1;
  }
};

TEST_F(PoolStatHintSteps, AHintIntoARetiredBlockIsNotTaken) {
  upfs::Resolved r;
  ASSERT_TRUE(Ns().Resolve("/f", true, &r).ok());
  uint64_t ino = 0;
  bool created = false;
  uint32_t gen = 0;
  ASSERT_TRUE(Ns().Create(r, 0644, upfs::format::Consistency::kStrict, &ino, &created, &gen).ok());
  std::shared_ptr<upfs::File> f;
  ASSERT_TRUE(pool_->FileOf(ino, &f).ok());
  uint64_t at = 0;
  ASSERT_TRUE(f->Write(std::string(4096, 'a').data(), 4096, 0, false, &at).ok());
  ASSERT_EQ(StatSize("/f"), 4096);  // the hint, in the log's first block
  upfs::format::pool::Inode* in = nullptr;
  ASSERT_TRUE(pool_->InodeAt(ino, &in).ok());
  const uint32_t hinted = uint32_t(in->words.hint_at.load());
  ASSERT_NE(hinted, 0u);
  // Small overwrites (patches) until the hinted block is full and others follow.
  for (int i = 0; i < 600; ++i) ASSERT_TRUE(f->Write("b", 1, uint64_t(i % 4096), false, &at).ok());
  ASSERT_EQ(uint32_t(in->words.hint_at.load()), hinted) << "a write left a hint";
  upfs::Status gc = f->CollectGarbage(/*force=*/true);
  ASSERT_TRUE(gc.ok()) << gc.ToString();
  ASSERT_NE(in->log_head.load(), hinted) << "the compaction kept the hinted block";
  char* block = nullptr;
  ASSERT_TRUE(upfs::BlockAccess(pool_->medium()).Addr(hinted, &block).ok());
  std::memset(block, 0, upfs::format::kBlockSize);  // reused: the hinted slot reads empty
  ASSERT_TRUE(f->Write("c", 1, 0, /*append=*/true, &at).ok());
  EXPECT_EQ(StatSize("/f"), 4097);
  f.reset();
  Ns().DropHold(ino, gen);
}

}  // namespace
