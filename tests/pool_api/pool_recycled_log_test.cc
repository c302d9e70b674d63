// Released files' log blocks kept for new files' logs (pool_files.cc,
// docs/design.md "A file's first log block, recycled"): the next file
// created has the block the last release kept as its log from birth,
// rewritten only where the old log had entries; a create that fails gives
// it back; a log too long to be worth it is freed; the blocks kept are
// given back at detach, and a process that dies holding them leaks
// nothing the next recovery does not take back; in a pool with no free
// block they are the last ones namespace structures get.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "engine/file.h"
#include "pool_attached_fixture.h"

namespace {

namespace fp = upfs::format::pool;

class PoolRecycledLog : public pool_test::AttachedPoolTest {
 protected:
  PoolRecycledLog() : AttachedPoolTest("recycledlog") {}
  // Creates `path` as an open would, writes `writes` pieces of `piece`
  // bytes (each one commit to the file's log) and lets go as a close.
  uint64_t MakeWritten(const std::string& path, int writes, size_t piece, char fill) {
    uint64_t ino = 0;
    bool created = false;
    uint32_t gen = 0;
    upfs::Status st = Ns().Create(At(path), 0644, upfs::format::Consistency::kStrict, &ino, &created, &gen);
    EXPECT_TRUE(st.ok() && created) << st.ToString();
    std::shared_ptr<upfs::File> f;
    st = pool_->FileOf(ino, &f);
    EXPECT_TRUE(st.ok()) << st.ToString();
    const std::string data(piece, fill);
    for (int i = 0; f && i < writes; ++i) {
      uint64_t at = 0;
      st = f->Write(data.data(), data.size(), uint64_t(i) * piece, false, &at);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    f.reset();
    Ns().DropHold(ino, gen);
    return ino;
  }
  void Remove(const std::string& path) {
    upfs::Status st = Ns().Remove(At(path), false);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  uint64_t LogHead(uint64_t ino) {
    fp::Inode* in = InodeOf(ino);
    return in ? in->log_head.load() : 0;
  }
  std::string ReadAll(uint64_t ino, size_t n) {
    std::shared_ptr<upfs::File> f;
    upfs::Status st = pool_->FileOf(ino, &f);
    if (!st.ok()) return "<" + st.ToString() + ">";
    std::string out(n + 1, '\0');
    size_t done = 0;
    st = f->Read(out.data(), out.size(), 0, &done);
    if (!st.ok()) return "<" + st.ToString() + ">";
    out.resize(done);
    return out;
  }
};

TEST_F(PoolRecycledLog, AReleasedFilesLogIsTheNextFilesLog) {
  const uint64_t a = MakeWritten("/a", 3, 512, 'a');
  const uint64_t head = LogHead(a);
  ASSERT_NE(head, 0u);
  Remove("/a");
  ASSERT_EQ(pool_->RecycledLogsForTest(), 1u) << "the released file's log was not kept";
  const uint64_t b = MakeWritten("/b", 1, 100, 'b');
  EXPECT_EQ(LogHead(b), head) << "the new file's log is not the block kept";
  EXPECT_EQ(pool_->RecycledLogsForTest(), 0u);
  // Nothing of a's log shows through: b holds its 100 bytes only.
  EXPECT_EQ(ReadAll(b, 2000), std::string(100, 'b'));
  DetachAndCheck();
}

TEST_F(PoolRecycledLog, ACreateThatLosesItsNameGivesTheKeptLogBack) {
  MakeWritten("/a", 1, 512, 'a');
  MakeWritten("/b", 1, 512, 'b');
  Remove("/a");
  Remove("/b");
  ASSERT_EQ(pool_->RecycledLogsForTest(), 2u);
  const upfs::Resolved stale = At("/x");  // absent now
  MakeWritten("/x", 1, 10, 'x');           // takes one kept log
  uint64_t ino = 0;
  bool created = false;
  uint32_t gen = 0;
  upfs::Status st = Ns().Create(stale, 0644, upfs::format::Consistency::kStrict, &ino, &created, &gen);
  EXPECT_EQ(st.err(), EEXIST) << st.ToString();
  EXPECT_EQ(pool_->RecycledLogsForTest(), 0u) << "the losing create did not take the other";
  DetachAndCheck();  // ... and gave it back: nothing leaked
}

TEST_F(PoolRecycledLog, AFileWrittenInManyCommitsIsNotKept) {
  // 200 appends of 8 bytes, a commit each: past a few lines of entries,
  // rewriting them would cost what zeroing a new block does, and the
  // block is freed instead.
  MakeWritten("/p", 200, 8, 'p');
  Remove("/p");
  EXPECT_EQ(pool_->RecycledLogsForTest(), 0u) << "a log with many lines written was kept";
  DetachAndCheck();
}

TEST_F(PoolRecycledLog, DetachGivesTheKeptBlocksBack) {
  for (int i = 0; i < 40; ++i) MakeWritten("/f" + std::to_string(i), 1, 512, 'f');
  for (int i = 0; i < 40; ++i) Remove("/f" + std::to_string(i));
  EXPECT_GT(pool_->RecycledLogsForTest(), 0u);
  EXPECT_LT(pool_->RecycledLogsForTest(), 40u) << "kept without bound";
  DetachAndCheck();
}

TEST_F(PoolRecycledLog, AProcessKilledHoldingThemLeaksNothingAfterRecovery) {
  pool_.reset();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::unique_ptr<upfs::Pool> p;
    if (!upfs::Pool::Attach(path_, &p).ok()) _exit(2);
    pool_ = std::move(p);
    for (int i = 0; i < 10; ++i) MakeWritten("/k" + std::to_string(i), 1, 512, 'k');
    for (int i = 0; i < 10; ++i) Remove("/k" + std::to_string(i));
    if (pool_->RecycledLogsForTest() == 0) _exit(3);
    raise(SIGKILL);  // dies attached, holding the kept blocks
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit " << WEXITSTATUS(status);
  // The first attach after the death recovers: it rebuilds the bitmap
  // from what the pool references, and the kept blocks are free again.
  upfs::Status st = upfs::Pool::Attach(path_, &pool_);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(pool_->RecycledLogsForTest(), 0u);
  DetachAndCheck();
}

TEST_F(PoolRecycledLog, KeptBlocksAreTheLastOnesNamespaceStructuresGet) {
  for (int i = 0; i < 6; ++i) MakeWritten("/f" + std::to_string(i), 1, 512, 'f');
  for (int i = 0; i < 6; ++i) Remove("/f" + std::to_string(i));
  const size_t kept = pool_->RecycledLogsForTest();
  ASSERT_GT(kept, 0u);
  pool_->RefuseBlocksForTest();
  // Directories need inodes (15 to a block) and log records, no file log
  // (a new file would take a kept block as its log): past the inode
  // blocks there are, their blocks come from the kept ones.
  int made = 0;
  for (int i = 0; i < 60; ++i) {
    upfs::Status st = Ns().Mkdir(At("/e" + std::to_string(i)), 0755);
    if (!st.ok()) {
      EXPECT_EQ(st.err(), ENOSPC) << st.ToString();
      break;
    }
    ++made;
  }
  EXPECT_LT(pool_->RecycledLogsForTest(), kept) << "no kept block was taken (" << made << " files made)";
  EXPECT_GE(made, 16) << "the kept blocks were not handed out";
  pool_->RefuseBlocksForTest(false);
  DetachAndCheck();
}

}  // namespace
