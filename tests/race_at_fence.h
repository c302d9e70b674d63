// Two operations in a chosen order, deterministically: a pm::Recorder
// stops the first at its first fence (its data written, its commit not
// yet made) and runs the second on another thread before letting it go
// on. Bytes a fresh block leaves unwritten past its last copy are filled
// with 0xEE, as an allocator that hands out a used block would leave
// them, so that any of them a read returns shows. Used by
// tail_race_test.cc and race_order_test.cc.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/inspect.h"
#include "medium/pm.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace upfs_race {

using upfs_test::TempDir;
namespace pm = upfs::pm;

inline constexpr uint64_t kBlock = 4096;
inline constexpr unsigned char kLeftOver = 0xEE;

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
class RaceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("f");
    fd_ = upfs_open(path_.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd_, 0) << upfs_last_error();
    pm::g_recorder.store(&rec_);
  }
  // The file's log replayed afresh (upfs inspect) must agree: a commit
  // that should have conflicted can leave the table of the process that
  // made it reading right while its log says something else.
  void TearDown() override {
    pm::g_recorder.store(nullptr);
    if (fd_ < 0) return;
    upfs_close(fd_);
    upfs::FileReport r;
    upfs::Status st = upfs::InspectFile(path_, true, &r);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::string problems;
    for (const auto& p : r.problems) problems += "  " + p + "\n";
    EXPECT_TRUE(r.problems.empty()) << problems;
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
  // Stops the calling thread's next operation at its first fence to write
  // n bytes of `byte` at off from another thread (filling that write's
  // left-overs if `fill`), after checking that the stopped operation has
  // not committed: the size is still `size` and the byte at `at` `was`.
  void RaceAWrite(uint64_t size, uint64_t at, unsigned char was, uint64_t off, uint64_t n, unsigned char byte,
                  bool fill = false) {
    rec_.RaceAtNextFenceOfThisThread([=, this] {
      ExpectNotCommittedYet(size, at, was);
      if (fill)
        WriteFillingLeftOvers(off, n, byte);
      else
        std::thread([=, this] { Write(off, n, byte); }).join();
    });
  }
  // The whole file, read from the calling thread.
  std::vector<unsigned char> ReadAll() {
    std::vector<unsigned char> all;
    EXPECT_TRUE(upfs_test::UpfsReadAll(fd_, &all));
    return all;
  }
  // Checks that [from, to) of `all` holds `byte` only.
  static void ExpectBytes(const std::vector<unsigned char>& all, uint64_t from, uint64_t to, unsigned char byte) {
    ASSERT_GE(all.size(), to);
    for (uint64_t i = from; i < to; ++i)
      ASSERT_EQ(all[i], byte) << "byte " << i << " (block " << i / kBlock << " offset " << i % kBlock << ")";
  }
  // Checks the whole file: its size, and that each run's byte fills it
  // from the run's start to the next run's (the last one's to the size).
  struct Run {
    uint64_t from;
    unsigned char byte;
  };
  void ExpectFile(uint64_t size, std::initializer_list<Run> runs) {
    const std::vector<unsigned char> all = ReadAll();
    ASSERT_EQ(all.size(), size);
    for (auto r = runs.begin(); r != runs.end(); ++r) {
      const uint64_t to = r + 1 == runs.end() ? size : (r + 1)->from;
      ASSERT_NO_FATAL_FAILURE(ExpectBytes(all, r->from, to, r->byte));
    }
  }
  // Checks that [from, to) reads as zeros.
  void ExpectZeros(uint64_t from, uint64_t to) {
    SCOPED_TRACE("past every write: it must read as zero");
    ExpectBytes(ReadAll(), from, to, 0);
  }

  TempDir dir_;
  std::string path_;
  int fd_ = -1;
  RaceAtFence rec_;
};

}  // namespace upfs_race
