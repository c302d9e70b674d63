// The bytes past the end of file in the block that holds the size are
// read by nobody, so the engine does not keep them zero: copy on write
// writes a block only up to the size, an in-place append writes there
// before its commit (docs/design.md, "The tail claim"). An operation that
// raises the size over bytes it does not write zeroes them under the tail
// claim first. These tests put each such operation against another one
// committed between its snapshot and its commit, deterministically: a
// pm::Recorder stops the first at its first fence (its data written, its
// commit not yet made) and runs the second on another thread. Bytes left
// unspecified (past the end of a fresh block's last copy) are filled with
// 0xEE, as an allocator that hands out a used block would leave them, so
// that any of them that a read returns shows.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "medium/pm.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace upfs {
namespace {

using upfs_test::TempDir;

constexpr uint64_t kBlock = 4096;
constexpr unsigned char kLeftOver = 0xEE;

// At a fence on a thread armed for it: fills what the thread's last copy
// or zeroing left of its block past its end (once per fence that follows
// such a copy), then, once, runs the race on a thread of its own and
// waits for it. Copies of other threads are not looked at.
class RaceAtFence : public pm::Recorder {
 public:
  // Fill after the copies of the calling thread.
  void FillLeftOversOfThisThread() { fill_.store(std::this_thread::get_id()); }
  // Run `race` at the calling thread's next fence.
  void RaceAtNextFenceOfThisThread(std::function<void()> race) {
    race_ = std::move(race);
    racer_.store(std::this_thread::get_id());
  }
  bool raced() const { return raced_.load(); }

  void OnCopy(void* dst, const void* /*src*/, size_t n) override { NoteData(dst, n); }
  void OnZero(void* dst, size_t n) override { NoteData(dst, n); }
  void OnStore(void*, uint64_t) override {}
  void OnStoreBytes(void*, const void*, size_t) override {}
  void OnFlush(const void*, size_t) override {}
  void OnFence() override {
    const std::thread::id me = std::this_thread::get_id();
    if (me == fill_.load() && last_end_ != nullptr) {
      const uintptr_t end = reinterpret_cast<uintptr_t>(last_end_);
      const uintptr_t block_end = (end + kBlock - 1) & ~uintptr_t(kBlock - 1);
      std::memset(last_end_, kLeftOver, block_end - end);
      last_end_ = nullptr;
    }
    if (me == racer_.load()) {
      racer_.store(std::thread::id());
      std::thread(race_).join();
      raced_.store(true);
    }
  }

 private:
  void NoteData(void* dst, size_t n) {
    if (std::this_thread::get_id() == fill_.load()) last_end_ = static_cast<char*>(dst) + n;
  }

  std::atomic<std::thread::id> fill_{};
  std::atomic<std::thread::id> racer_{};
  std::atomic<bool> raced_{false};
  std::function<void()> race_;
  char* last_end_ = nullptr;  // the filling thread's only
};

// Installs the recorder for a test's lifetime.
class TailRace : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("f");
    fd_ = upfs_open(path_.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd_, 0) << upfs_last_error();
    pm::g_recorder.store(&rec_);
  }
  void TearDown() override {
    pm::g_recorder.store(nullptr);
    if (fd_ >= 0) upfs_close(fd_);
  }

  // Writes n bytes of `byte` at off, from the calling thread.
  void Write(uint64_t off, uint64_t n, unsigned char byte) {
    std::vector<unsigned char> b(n, byte);
    ASSERT_EQ(upfs_pwrite(fd_, b.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n))
        << upfs_last_error();
  }
  // The same from a thread of its own that fills its left-overs.
  void WriteFillingLeftOvers(uint64_t off, uint64_t n, unsigned char byte) {
    std::thread([&] {
      rec_.FillLeftOversOfThisThread();
      Write(off, n, byte);
    }).join();
  }
  // From the race: the stopped operation has not committed yet (the size
  // and the byte at `at` are still as before it), so the race commits
  // between its snapshot and its commit, not after it.
  void ExpectNotCommittedYet(uint64_t size, uint64_t at, unsigned char byte) {
    struct stat st {};
    ASSERT_EQ(upfs_fstat(fd_, &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), size) << "the stopped operation committed before the race";
    unsigned char b = 0;
    ASSERT_EQ(upfs_pread(fd_, &b, 1, static_cast<off_t>(at)), 1);
    EXPECT_EQ(b, byte) << "the stopped operation committed before the race";
  }
  // Checks that [from, to) reads as zeros.
  void ExpectZeros(uint64_t from, uint64_t to) {
    std::vector<unsigned char> all;
    ASSERT_TRUE(upfs_test::UpfsReadAll(fd_, &all));
    ASSERT_GE(all.size(), to);
    for (uint64_t i = from; i < to; ++i)
      ASSERT_EQ(all[i], 0) << "byte " << i << " (block " << i / kBlock << " offset " << i % kBlock
                           << ") is past every write: it must read as zero";
  }

  TempDir dir_;
  std::string path_;
  int fd_ = -1;
  RaceAtFence rec_;
};

// The size S in block 1; a copy on write of blocks 0-1 (from its snapshot:
// block 1 written up to S) meets a write past block 1 that raises the size
// over block 1's end, committed between its snapshot and its commit: the
// copy must not commit its block 1, whose bytes past S would become
// readable (found by ConcurrencyTruncate.WritersReadersAndTruncator under
// ThreadSanitizer: a reader saw another block's bytes in a slot).
TEST_F(TailRace, ACopyOnWriteOfTheTailBlockMeetsASizeRaisedPastIt) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  rec_.FillLeftOversOfThisThread();
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, 0, 0x11);
    Write(3 * kBlock + 10, 10, 0x22);
  });
  Write(0, kBlock + 50, 0x33);
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 3 * kBlock + 10);
}

// A write past block 1 (its snapshot's tail block, zeroed past S under
// the tail claim) meets a copy on write of block 1 committed after that:
// the new block 1 holds anything past S, so the size must not rise over it.
TEST_F(TailRace, AWritePastTheTailBlockMeetsACopyOnWriteOfIt) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, 0, 0x11);
    WriteFillingLeftOvers(0, kBlock + 50, 0x33);
  });
  Write(3 * kBlock + 10, 10, 0x22);
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 3 * kBlock + 10);
}

// Two writes past the tail block are serialized by the tail claim,
// which each holds from its zeroing to its commit, unless the tail block
// is a hole (nothing to zero, no claim): then the one that commits second
// raises the size over the other's last block, which holds anything past
// its end.
TEST_F(TailRace, AWritePastAHoleAtTheSizeMeetsAnotherOne) {
  const uint64_t s = kBlock + 100;
  Write(0, 100, 0x11);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(s)), 0);  // block 1: a hole
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, 0, 0x11);
    WriteFillingLeftOvers(2 * kBlock + 10, 10, 0x44);
  });
  Write(3 * kBlock + 10, 10, 0x22);
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(100, 2 * kBlock + 10);
  ExpectZeros(2 * kBlock + 20, 3 * kBlock + 10);
}

// A growing fallocate maps nothing (strict mode) and only raises the
// size: the same as a write past the tail block.
TEST_F(TailRace, AGrowingFallocateMeetsACopyOnWriteOfTheTailBlock) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, 0, 0x11);
    WriteFillingLeftOvers(0, kBlock + 50, 0x33);
  });
  ASSERT_EQ(upfs_fallocate(fd_, 0, 0, static_cast<off_t>(4 * kBlock)), 0) << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 4 * kBlock);
}

TEST_F(TailRace, AGrowingFallocatePastAHoleAtTheSizeMeetsAWritePastIt) {
  const uint64_t s = kBlock + 100;
  Write(0, 100, 0x11);
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(s)), 0);  // block 1: a hole
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, 0, 0x11);
    WriteFillingLeftOvers(2 * kBlock + 10, 10, 0x44);
  });
  ASSERT_EQ(upfs_fallocate(fd_, 0, 0, static_cast<off_t>(4 * kBlock)), 0) << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(100, 2 * kBlock + 10);
  ExpectZeros(2 * kBlock + 20, 4 * kBlock);
}

// A growing truncate conflicts with everything committed since its
// snapshot; kept here with the others so that it stays so.
TEST_F(TailRace, AGrowingTruncateMeetsACopyOnWriteOfTheTailBlock) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, 0, 0x11);
    WriteFillingLeftOvers(0, kBlock + 50, 0x33);
  });
  ASSERT_EQ(upfs_ftruncate(fd_, static_cast<off_t>(4 * kBlock)), 0) << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(s, 4 * kBlock);
}

// Punching a hole in the tail block copies it whole: its bytes past the
// size (anything: here a copy on write's left-overs) must not come along
// when a write past it raised the size meanwhile.
TEST_F(TailRace, APunchInTheTailBlockMeetsASizeRaisedPastIt) {
  const uint64_t s = kBlock + 100;
  Write(0, s, 0x11);
  WriteFillingLeftOvers(0, kBlock + 50, 0x33);  // block 1 now holds 0xEE past S
  rec_.RaceAtNextFenceOfThisThread([&] {
    ExpectNotCommittedYet(s, kBlock, 0x33);
    Write(3 * kBlock + 10, 10, 0x22);
  });
  ASSERT_EQ(upfs_fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(kBlock),
                           10),
            0)
      << upfs_last_error();
  ASSERT_TRUE(rec_.raced());
  ExpectZeros(kBlock, kBlock + 10);
  ExpectZeros(s, 3 * kBlock + 10);
}

}  // namespace
}  // namespace upfs
