// A File opened on an empty log starts there without replaying it
// (File::StartAtEmptyLog): a pool file's first use, whose log its
// FileOf or its create made a moment before. What another attachment
// (another process, as far as the pool knows) commits after that start is
// the File's first catch-up's to find; a log with an entry is replayed.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "engine/file.h"
#include "pool_attached_fixture.h"

namespace {

class PoolEmptyLogOpen : public pool_test::TwoAttachmentsTest {
 protected:
  PoolEmptyLogOpen() : TwoAttachmentsTest("emptylogopen") {}
  std::shared_ptr<upfs::File> FileIn(upfs::Pool* p, uint64_t ino) {
    std::shared_ptr<upfs::File> f;
    upfs::Status st = p->FileOf(ino, &f);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return f;
  }
  static void WriteAt(upfs::File* f, const std::string& s, uint64_t off) {
    uint64_t at = 0;
    upfs::Status st = f->Write(s.data(), s.size(), off, false, &at);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  static std::string ReadAll(upfs::File* f) {
    uint64_t size = 0;
    upfs::Status st = f->Size(&size);
    if (!st.ok()) return "<" + st.ToString() + ">";
    std::string out(size, '\0');
    size_t done = 0;
    st = f->Read(out.data(), out.size(), 0, &done);
    if (!st.ok()) return "<" + st.ToString() + ">";
    out.resize(done);
    return out;
  }
  static uint64_t Starts() { return upfs::File::EmptyLogStartsInThisThreadForTest(); }
};

// The other attachment's commits land in the slots from the first on,
// after this attachment's File started at the first: its reads find them.
TEST_F(PoolEmptyLogOpen, WhatAnotherAttachmentCommitsAfterTheStartIsFound) {
  const uint64_t ino = CreateAndClose("/f");
  const uint64_t before = Starts();
  std::shared_ptr<upfs::File> mine = FileIn(pool_.get(), ino);  // makes the log, starts on it
  ASSERT_TRUE(mine);
  EXPECT_EQ(Starts(), before + 1);
  std::shared_ptr<upfs::File> theirs = FileIn(other_.get(), ino);
  ASSERT_TRUE(theirs);
  WriteAt(theirs.get(), "hello", 0);  // the log's first entry
  EXPECT_EQ(ReadAll(mine.get()), "hello");
  WriteAt(theirs.get(), std::string(5000, 'x'), 5);  // and more entries
  EXPECT_EQ(ReadAll(mine.get()), "hello" + std::string(5000, 'x'));
  // And this File's own commits go after them.
  WriteAt(mine.get(), "HE", 0);
  EXPECT_EQ(ReadAll(theirs.get()).substr(0, 6), "HEllox");
  mine.reset();
  theirs.reset();
  DetachAndCheck();
}

// A log with an entry is replayed: the bytes are there before any
// catch-up, and the start was not taken. A file made again from a
// released file's log (kept by the process) starts empty again.
TEST_F(PoolEmptyLogOpen, AWrittenLogIsReplayedAndAKeptLogStartsEmpty) {
  const uint64_t ino = CreateAndClose("/w");
  {
    std::shared_ptr<upfs::File> f = FileIn(pool_.get(), ino);
    ASSERT_TRUE(f);
    WriteAt(f.get(), "abc", 0);
  }  // the File goes with the last reference
  const uint64_t before = Starts();
  std::shared_ptr<upfs::File> again = FileIn(pool_.get(), ino);
  ASSERT_TRUE(again);
  EXPECT_EQ(Starts(), before);
  EXPECT_EQ(ReadAll(again.get()), "abc");
  again.reset();
  // Removed, its log is kept for the next file made here, which has it
  // from birth, rewritten empty.
  ASSERT_TRUE(Ns().Remove(At("/w"), false).ok());
  const uint64_t next = CreateAndClose("/n");
  std::shared_ptr<upfs::File> fresh = FileIn(pool_.get(), next);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(Starts(), before + 1);
  EXPECT_EQ(ReadAll(fresh.get()), "");
  WriteAt(fresh.get(), "new", 0);
  EXPECT_EQ(ReadAll(fresh.get()), "new");
  fresh.reset();
  DetachAndCheck();
}

}  // namespace
