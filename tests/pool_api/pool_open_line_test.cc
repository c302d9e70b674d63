// The open line's flush in NsLog::TryCommit. A reservation leaves its
// payload's last cache line to be written back with its kApply when the
// kApply is to share it ("A commit's last line", docs/design.md). If
// another record reserved and committed in between, the kApply lands past
// that record, in another line, and nothing else writes the open line back
// after the payload's words were stored: the other record's reserve and
// MakeDurable flushed it before (they ran between this reservation's CAS
// and its payload's stores), and this commit's MakeDurable starts past it.
// TryCommit flushes it first. The crash explorer's racers never run in
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
#include "pm_sparse_model.h"
#include "upfs/upfs.h"

namespace upfs {

struct PoolNamespaceTestAccess {
  static Status Commit(PoolNamespace& ns, const NsRecord& rec, FunctionRef<void()> with_payload) {
    return ns.Commit(rec, [] { return Status::OK(); }, with_payload);
  }
};

namespace {

using format::pool::FileType;
using format::pool::RecordType;

TEST(PoolOpenLine, ACommitPastARacersRecordWritesItsOpenLineBack) {
  const std::string tag = std::to_string(getpid());
  const std::string pool = "/dev/shm/upfs-openline-" + tag + ".pool", image = pool + ".image";
  const std::string mnt = "/upfs-openline-" + tag;
  // Names: a short one (one name word) and a 9-byte one (two), so that the
  // first record's kApply can be made to share its payload's last line
  // wherever the log's tail is; a 200-byte one for the racer, whose record
  // then runs past that line.
  const std::string shorts[2] = {"a", "bbbbbbbbb"}, racer(200, 'r');
  unlink(pool.c_str());
  ASSERT_EQ(upfs_mkfs(pool.c_str(), 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  for (const std::string& n : {shorts[0], shorts[1], racer}) {
    const int fd = upfs_open((mnt + "/" + n).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();

  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::Attach(pool, &p).ok());
  const Credentials who = Credentials::Current(false);
  PoolNamespace ns(p.get(), &who);
  auto unlink_of = [&](const std::string& name) {
    NsEntry e;
    EXPECT_TRUE(p->index()->Find(p->root_ino(), name, &e)) << name;
    return NsRecord{RecordType::kUnlink, FileType::kRegular, e.ino, p->root_ino(), 0, 0, name, {}};
  };
  // The first record's kReserve goes to the log's tail, slot s; with a
  // payload of n words its kApply is planned at s + n + 1.
  const uint32_t s = p->log()->PosHint().slot;
  int pick = -1;
  for (int i = 0; i < 2 && pick < 0; ++i) {
    uint64_t w[format::pool::kMaxRecordWords];
    const uint32_t n = EncodeRecord(unlink_of(shorts[i]), w);
    if (SlotLine(s + n + 1) == SlotLine(s + n)) pick = i;
  }
  ASSERT_GE(pick, 0) << "slot " << s;
  const NsRecord first = unlink_of(shorts[pick]), second = unlink_of(racer);

  p->medium()->Settle();
  crashtest::SparsePersistenceModel model;
  ASSERT_TRUE(model.Reset(pool));
  model.Attach(p->medium());
  pm::g_recorder.store(&model);
  Status racer_st;
  Status st = PoolNamespaceTestAccess::Commit(ns, first, [&] {
    // Another thread (its own pin and slot) reserves right after the first
    // record's kReserve, in the line the first payload will end in, and
    // commits; the first payload's words are not stored yet.
    std::thread([&] { racer_st = PoolNamespaceTestAccess::Commit(ns, second, {}); }).join();
  });
  pm::g_recorder.store(nullptr);
  model.Attach(nullptr);
  ASSERT_TRUE(racer_st.ok()) << racer_st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Both returned: a crash now keeps both. The image keeps only what was
  // written back and fenced (no line in flight).
  ASSERT_TRUE(model.WriteImage({}, image));
  p.reset();

  std::unique_ptr<Pool> q;
  st = Pool::Attach(image, &q);
  ASSERT_TRUE(st.ok()) << "recovery of the crash image: " << st.ToString();
  NsEntry e;
  EXPECT_FALSE(q->index()->Find(q->root_ino(), shorts[pick], &e));
  EXPECT_FALSE(q->index()->Find(q->root_ino(), racer, &e));
  q.reset();
  unlink(image.c_str());
  unlink(pool.c_str());
}

}  // namespace
}  // namespace upfs
