// The open line's write-back. A reservation leaves its payload's last
// cache line to be written back with its kApply when the kApply is to
// share it ("A commit's last line", docs/design.md). If another record
// reserved and committed in between, the kApply lands past that record,
// in another line, and nothing else writes the open line back after the
// payload's words were stored: the other record's reserve and MakeDurable
// flushed it before (they ran between this reservation's CAS and its
// payload's stores), and this commit's MakeDurable starts past it. So the
// line is written back first: by NsLog::SettleFilledOpenLine before the
// index lock when the line is seen full then (PoolNamespace::Commit), else
// by TryCommit under the lock. The crash explorer's racers never run in
// that window; here the second record commits from inside the first's
// `with_payload` hook, which runs exactly there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "container/pool/namespace.h"
#include "container/pool/ns_log.h"
#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "container/pool/namespace_internal.h"
#include "engine/epoch_pin.h"
#include "label_version.h"
#include "pm_sparse_model.h"
#include "pool_api/pool_commit_steps.h"
#include "upfs/upfs.h"

namespace upfs {

struct PoolNamespaceTestAccess {
  static Status Commit(PoolNamespace& ns, const NsRecord& rec, FunctionRef<void()> with_payload) {
    const auto hook = [&](CommitFlushes*) { with_payload(); };
    FunctionRef<void(CommitFlushes*)> h;
    if (with_payload) h = hook;
    return ns.Commit(rec, [] { return Status::OK(); }, h);
  }
};

namespace {

using format::pool::FileType;
using format::pool::RecordType;

// Version 7 leaves the payload's last line open for the kApply; version 8
// writes the whole payload back with it, its lines before MakeDurable's
// range too (NsLog::FlushSegment): the racer's own write-back ran before
// the payload was stored, in both.
constexpr uint32_t kVersions[] = {7, format::pool::kPoolVersion};

// A pool with three files, attached in this process; `first` and
// `second` unlink two of them, `first`'s kApply planned in its payload's
// last line, `second`'s record long enough to run past that line.
class OpenLineScenario {
 public:
  void SetUp(uint32_t version) {
    const std::string tag = std::to_string(getpid());
    pool_ = "/dev/shm/upfs-openline-" + tag + ".pool";
    image_ = pool_ + ".image";
    const std::string mnt = "/upfs-openline-" + tag;
    unlink(pool_.c_str());
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    if (version != format::pool::kPoolVersion) {
      ASSERT_TRUE(upfs_test::RelabelPoolVersion(pool_, version));
    }
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt.c_str()), 0) << upfs_last_error();
    for (const std::string& n : {shorts_[0], shorts_[1], racer_}) {
      const int fd = upfs_open((mnt + "/" + n).c_str(), O_CREAT | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << upfs_last_error();
      ASSERT_EQ(upfs_close(fd), 0);
    }
    ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
    ASSERT_TRUE(Pool::Attach(pool_, &p_).ok());
    ASSERT_EQ(p_->log()->one_wait(), version >= format::pool::kFirstOneWaitPoolVersion);
    ns_ = std::make_unique<PoolNamespace>(p_.get(), &who_);
    // The first record's kReserve goes to the log's tail, slot s; with a
    // payload of n words its kApply is planned at s + n + 1.
    const uint32_t s = p_->log()->PosHint().slot;
    for (int i = 0; i < 2 && pick_ < 0; ++i) {
      uint64_t w[format::pool::kMaxRecordWords];
      const uint32_t n = EncodeRecord(UnlinkOf(shorts_[i]), w, p_->log()->one_wait());
      if (SlotLine(s + n + 1) == SlotLine(s + n)) pick_ = i;
    }
    ASSERT_GE(pick_, 0) << "slot " << s;
    first = UnlinkOf(shorts_[pick_]);
    second = UnlinkOf(racer_);
    p_->medium()->Settle();
    ASSERT_TRUE(model_.Reset(pool_));
    model_.Attach(p_->medium());
    pm::g_recorder.store(&model_);
  }
  // Commits `second` in another thread (its own pin and slot), as a
  // racer that reserves right after the first record's kReserve, in the
  // line the first payload will end in.
  void CommitRacer() {
    std::thread([&] { racer_st_ = PoolNamespaceTestAccess::Commit(*ns_, second, {}); }).join();
  }
  // Both commits returned: a crash now keeps both. The image keeps only
  // what was written back and fenced (no line in flight); attached, it
  // must have both records.
  void CrashAndRecover() {
    pm::g_recorder.store(nullptr);
    model_.Attach(nullptr);
    ASSERT_TRUE(racer_st_.ok()) << racer_st_.ToString();
    ASSERT_TRUE(model_.WriteImage({}, image_));
    ns_.reset();
    p_.reset();
    std::unique_ptr<Pool> q;
    const Status st = Pool::Attach(image_, &q);
    ASSERT_TRUE(st.ok()) << "recovery of the crash image: " << st.ToString();
    NsEntry e;
    EXPECT_FALSE(q->index()->Find(q->root_ino(), shorts_[pick_], &e));
    EXPECT_FALSE(q->index()->Find(q->root_ino(), racer_, &e));
  }
  ~OpenLineScenario() {
    pm::g_recorder.store(nullptr);
    model_.Attach(nullptr);
    ns_.reset();
    p_.reset();
    unlink(image_.c_str());
    unlink(pool_.c_str());
  }

  NsRecord first, second;
  PoolNamespace& ns() { return *ns_; }
  Pool& pool() { return *p_; }

 private:
  NsRecord UnlinkOf(const std::string& name) {
    NsEntry e;
    EXPECT_TRUE(p_->index()->Find(p_->root_ino(), name, &e)) << name;
    return NsRecord{RecordType::kUnlink, FileType::kRegular, e.ino, p_->root_ino(), 0, 0, name, {}, {}};
  }
  // Names: a short one (one name word) and a 9-byte one (two), so that the
  // first record's kApply can be made to share its payload's last line
  // wherever the log's tail is; a 200-byte one for the racer, whose record
  // then runs past that line.
  const std::string shorts_[2] = {"a", "bbbbbbbbb"}, racer_ = std::string(200, 'r');
  std::string pool_, image_;
  std::unique_ptr<Pool> p_;
  const Credentials who_ = Credentials::Current(false);
  std::unique_ptr<PoolNamespace> ns_;
  int pick_ = -1;
  crashtest::SparsePersistenceModel model_;
  Status racer_st_;
};

// Through PoolNamespace::Commit: the racer has filled the open line before
// the commit takes the index lock, so SettleFilledOpenLine writes it back
// (without that write-back: "recovery of the crash image: namespace log:
// record checksum mismatch"). Version 8: MakeDurable writes the payload
// back (without NsLog::FlushSegment's write-back before its range, the
// record is taken for a commit cut short and the returned unlink is lost).
TEST(PoolOpenLine, ACommitPastARacersRecordWritesItsOpenLineBack) {
  for (const uint32_t version : kVersions) {
    SCOPED_TRACE("pool version " + std::to_string(version));
    OpenLineScenario sc;
    ASSERT_NO_FATAL_FAILURE(sc.SetUp(version));
    const Status st = PoolNamespaceTestAccess::Commit(sc.ns(), sc.first, [&] { sc.CommitRacer(); });
    ASSERT_TRUE(st.ok()) << st.ToString();
    sc.CrashAndRecover();
  }
}

// The same race with the line seen open before the lock (the racer fills
// it after that look): the commit's own steps, without the settle, so
// that TryCommit's write-back under the lock is what keeps the line.
TEST(PoolOpenLine, TryCommitWritesBackAnOpenLineFilledAfterTheLastLook) {
  for (const uint32_t version : kVersions) {
    SCOPED_TRACE("pool version " + std::to_string(version));
    OpenLineScenario sc;
    ASSERT_NO_FATAL_FAILURE(sc.SetUp(version));
    {
      Pool& p = sc.pool();
      uint32_t slot;
      ASSERT_TRUE(p.NamespaceSlot(&slot).ok());
      EpochPin pin(p.epochs(), slot);  // ends before the pool does
      NsLog::Reservation r;
      ASSERT_TRUE(p.log()->Reserve(sc.first, p.log()->PosHint(), &r, [&] { sc.CommitRacer(); }).ok());
      ASSERT_NO_FATAL_FAILURE(CommitReserved(p, r, sc.first));
    }
    sc.CrashAndRecover();
  }
}

}  // namespace
}  // namespace upfs
