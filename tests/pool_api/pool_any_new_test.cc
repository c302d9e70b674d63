// NsLog::AnyNew, the check every lookup makes before it trusts its index
// (Pool::LockLatest): a reservation another thread or process has made and
// not yet committed is not a record, and must not send the lookup to the
// exclusive lock for a catch-up (with two threads creating it did for a
// third to a half of all lookups); a record committed behind such
// reservations must be seen. Two attachments of one pool in this process
// stand for two processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "container/pool/ns_log.h"
#include "container/pool/pool.h"
#include "engine/epoch_pin.h"
#include "medium/medium.h"
#include "pool_api/pool_commit_steps.h"
#include "upfs/upfs.h"

namespace upfs {
namespace {

using format::pool::FileType;
using format::pool::RecordType;

class PoolAnyNew : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(getpid());
    path_ = "/dev/shm/upfs-anynew-" + tag + ".pool";
    const std::string mnt = "/upfs-anynew-" + tag;
    unlink(path_.c_str());
    ASSERT_EQ(upfs_mkfs(path_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_EQ(upfs_mount(path_.c_str(), mnt.c_str()), 0) << upfs_last_error();
    for (int i = 0; i < kFiles; ++i) {
      const int fd = upfs_open((mnt + "/" + Name(i)).c_str(), O_CREAT | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << upfs_last_error();
      ASSERT_EQ(upfs_close(fd), 0);
    }
    ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
    ASSERT_TRUE(Pool::Attach(path_, &writer_).ok());
    ASSERT_TRUE(Pool::Attach(path_, &reader_).ok());
    ASSERT_TRUE(writer_->CatchUp().ok());
    ASSERT_TRUE(reader_->CatchUp().ok());
    uint32_t slot;
    ASSERT_TRUE(writer_->NamespaceSlot(&slot).ok());
    pin_.emplace(writer_->epochs(), slot);
  }
  void TearDown() override {
    pin_.reset();
    writer_.reset();
    reader_.reset();
    unlink(path_.c_str());
  }

  static constexpr int kFiles = 8;
  static std::string Name(int i) { return "f" + std::to_string(i); }
  NsRecord UnlinkOf(int i) {
    NsEntry e;
    EXPECT_TRUE(writer_->index()->Find(writer_->root_ino(), names_.emplace_back(Name(i)), &e));
    return NsRecord{RecordType::kUnlink, FileType::kRegular, e.ino, writer_->root_ino(), 0, 0, names_.back(), {}, {}};
  }
  // The writer reserves the unlink of file i and leaves it uncommitted.
  NsLog::Reservation Reserve(int i) {
    NsLog::Reservation r;
    EXPECT_TRUE(writer_->log()->Reserve(records_.emplace_back(UnlinkOf(i)), writer_->log()->PosHint(), &r).ok());
    return r;
  }
  // The writer commits a reservation of Reserve(i), as PoolNamespace::Commit does.
  void Commit(const NsLog::Reservation& r, int i) { CommitReserved(*writer_, r, UnlinkOf(i)); }
  bool ReaderFinds(int i) {
    NsEntry e;
    return reader_->index()->Find(reader_->root_ino(), Name(i), &e);
  }

  std::string path_;
  std::unique_ptr<Pool> writer_, reader_;
  std::optional<EpochPin> pin_;
  // Records point into the names, and reservations are of the records:
  // room for all up front, so that neither moves.
  std::vector<std::string> names_ = WithRoom<std::string>();
  std::vector<NsRecord> records_ = WithRoom<NsRecord>();

 private:
  template <typename T>
  static std::vector<T> WithRoom() {
    std::vector<T> v;
    v.reserve(64);
    return v;
  }
};

TEST_F(PoolAnyNew, AReservationIsNotARecordButACommitBehindItIs) {
  EXPECT_FALSE(reader_->log()->AnyNew());
  const NsLog::Reservation r0 = Reserve(0);
  const NsLog::Reservation r1 = Reserve(1);
  EXPECT_FALSE(reader_->log()->AnyNew()) << "two reservations, no record, past the reader's position";
  // The second reservation commits; its kApply lands behind both.
  ASSERT_NO_FATAL_FAILURE(Commit(r1, 1));
  EXPECT_TRUE(reader_->log()->AnyNew()) << "a record behind a reservation in flight";
  ASSERT_TRUE(reader_->CatchUp().ok());
  EXPECT_FALSE(ReaderFinds(1));
  EXPECT_TRUE(ReaderFinds(0));
  EXPECT_FALSE(reader_->log()->AnyNew());
  // The first commits at the new tail, past everything the reader read.
  ASSERT_NO_FATAL_FAILURE(Commit(r0, 0));
  EXPECT_TRUE(reader_->log()->AnyNew());
  ASSERT_TRUE(reader_->CatchUp().ok());
  EXPECT_FALSE(ReaderFinds(0));
}

// More reservations than the look reaches: "new", to be safe; the catch-up
// then steps over them, and the next look is quiet again.
TEST_F(PoolAnyNew, ManyReservationsSendTheReaderToItsCatchUp) {
  for (int i = 0; i < kFiles; ++i) (void)Reserve(i);
  EXPECT_TRUE(reader_->log()->AnyNew());
  ASSERT_TRUE(reader_->CatchUp().ok());
  EXPECT_FALSE(reader_->log()->AnyNew());
  for (int i = 0; i < kFiles; ++i) EXPECT_TRUE(ReaderFinds(i)) << Name(i);
}

// A reservation that runs past its block is damage: the look leaves it to
// the catch-up, which reports it (a look that stepped past it would have
// found the block's end and, with no next block, said "nothing new": the
// damage unseen by every lookup).
TEST_F(PoolAnyNew, AReservationPastItsBlockIsLeftToTheCatchUpToReport) {
  const NsPos tail = reader_->log()->pos();
  auto* slots = reinterpret_cast<std::atomic<uint64_t>*>(reader_->medium()->base() +
                                                          (uint64_t(tail.lblock) << format::kBlockShift) + 16);
  slots[tail.slot].store(format::EncodeReserve(511));  // 512 slots from here: past the block's 510
  EXPECT_TRUE(reader_->log()->AnyNew());
  const Status st = reader_->CatchUp();
  EXPECT_EQ(st.err(), EUCLEAN) << st.ToString();
}

}  // namespace
}  // namespace upfs
