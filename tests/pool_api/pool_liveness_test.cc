// Who is alive in a pool, as the OFD locks on the pool file tell it
// (container/ofd_lock.h): what fsck reports of the processes attached,
// whether another process's epoch slot counts as live, and whose claim to
// write a checkpoint stands. A live slot taken for dead would let its
// reader's blocks be reused under it; a pool checked as unattached while in
// use would be judged as a crash left it; a dead writer's claim kept would
// stop checkpoints (and bound the log no more) for good.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"
#include "pool_attached_fixture.h"

namespace {

// A child process attached to the pool at `path` that claims an epoch slot
// (and, if asked, the right to write a checkpoint), reports the slot, and
// dies holding both when told to go.
class SlotHolder {
 public:
  SlotHolder(const std::string& path, bool claim_checkpoint) {
    if (pipe(slot_pipe_) != 0 || pipe(go_pipe_) != 0) return;
    pid_ = fork();
    if (pid_ != 0) return;
    std::unique_ptr<upfs::Pool> p;
    uint32_t s = UINT32_MAX;
    if (!upfs::Pool::Attach(path, &p).ok() || !p->epochs()->ClaimSlot(&s).ok()) s = UINT32_MAX;
    if (s != UINT32_MAX && claim_checkpoint) {
      uint64_t none = 0;
      if (!Words(*p)->checkpoint_owner.compare_exchange_strong(none, uint64_t(s) + 1)) s = UINT32_MAX;
    }
    if (write(slot_pipe_[1], &s, sizeof(s)) != sizeof(s)) _exit(2);
    char go;
    if (read(go_pipe_[0], &go, 1) != 1) _exit(3);
    _exit(0);  // dies holding the slot: its locks go with its descriptors
  }
  ~SlotHolder() {
    if (pid_ > 0 && !gone_) Die();
    for (int fd : {slot_pipe_[0], slot_pipe_[1], go_pipe_[0], go_pipe_[1]}) close(fd);
  }
  // The child's slot, UINT32_MAX if it failed.
  uint32_t Slot() {
    uint32_t s = UINT32_MAX;
    if (pid_ <= 0 || read(slot_pipe_[0], &s, sizeof(s)) != ssize_t(sizeof(s))) return UINT32_MAX;
    return s;
  }
  // Lets the child die; whether it exited as it should.
  bool Die() {
    gone_ = true;
    if (write(go_pipe_[1], "g", 1) != 1) return false;
    int status = 0;
    return waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  static upfs::format::pool::PoolWords* Words(const upfs::Pool& p) {
    char* w = nullptr;
    EXPECT_TRUE(p.access().Addr(upfs::format::pool::kWordsBlock, &w).ok());
    return reinterpret_cast<upfs::format::pool::PoolWords*>(w);
  }

 private:
  int slot_pipe_[2] = {-1, -1}, go_pipe_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool gone_ = false;
};

class PoolLivenessTest : public pool_test::AttachedPoolTest {
 protected:
  PoolLivenessTest() : AttachedPoolTest("liveness") {}
  // This process detaches, `child` attaches and claims (its slot in
  // *theirs), and this process attaches again beside it.
  void AttachBeside(SlotHolder* child, uint32_t* theirs) {
    *theirs = child->Slot();
    ASSERT_NE(*theirs, UINT32_MAX) << "the child could not attach or claim";
    upfs::Status st = upfs::Pool::Attach(path_, &pool_);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
};

TEST_F(PoolLivenessTest, CheckSeesTheAttachedProcessAndNoneOnceItLeaves) {
  upfs::PoolReport attached;
  ASSERT_TRUE(upfs::CheckPool(path_, &attached).ok());
  EXPECT_EQ(attached.attached_processes, 1u);
  pool_.reset();
  upfs::PoolReport after;
  ASSERT_TRUE(upfs::CheckPool(path_, &after).ok());
  EXPECT_EQ(after.attached_processes, 0u);
}

// A child attaches and claims an epoch slot; this process, attached on
// its own, must see the slot's owner alive while the child lives (its pid
// differs, so only the slot's lock can say so) and dead once it is gone.
TEST_F(PoolLivenessTest, AnotherProcessesSlotIsLiveUntilItDies) {
  pool_.reset();
  SlotHolder child(path_, /*claim_checkpoint=*/false);
  uint32_t theirs;
  ASSERT_NO_FATAL_FAILURE(AttachBeside(&child, &theirs));
  EXPECT_TRUE(pool_->epochs()->SlotOwnerAlive(theirs)) << "a live process's slot taken for dead";
  EXPECT_TRUE(pool_->epochs()->AnyOtherProcessLive());
  uint32_t mine = UINT32_MAX;
  ASSERT_TRUE(pool_->epochs()->ClaimSlot(&mine).ok());
  EXPECT_NE(mine, theirs) << "a live process's slot claimed again";
  pool_->epochs()->ReleaseSlot(mine);
  ASSERT_TRUE(child.Die());
  EXPECT_FALSE(pool_->epochs()->SlotOwnerAlive(theirs)) << "a dead process's slot taken for live";
}

// One process at a time writes a checkpoint (PoolWords::checkpoint_owner).
// While the claimant lives, another's checkpoint is refused and changes
// nothing; once it died mid-way, the next one takes its claim over.
TEST_F(PoolLivenessTest, ACheckpointClaimStandsWhileItsProcessLivesAndNotAfter) {
  for (int i = 0; i < 50; ++i) CreateAndClose("/f" + std::to_string(i));
  pool_.reset();
  SlotHolder child(path_, /*claim_checkpoint=*/true);
  uint32_t theirs;
  ASSERT_NO_FATAL_FAILURE(AttachBeside(&child, &theirs));
  const uint64_t before = pool_->super()->checkpoint.load();
  upfs::Status st = pool_->Checkpoint();
  EXPECT_EQ(st.err(), EBUSY) << st.ToString();
  EXPECT_EQ(pool_->super()->checkpoint.load(), before) << "a checkpoint written under a live claim";
  EXPECT_EQ(SlotHolder::Words(*pool_)->checkpoint_owner.load(), uint64_t(theirs) + 1);
  ASSERT_TRUE(child.Die());
  st = pool_->Checkpoint();
  ASSERT_TRUE(st.ok()) << "a dead claimant's claim kept: " << st.ToString();
  EXPECT_NE(pool_->super()->checkpoint.load(), before);
  EXPECT_EQ(SlotHolder::Words(*pool_)->checkpoint_owner.load(), 0u) << "the claim not given up";
  pool_.reset();
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(path_, &r).ok());
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  EXPECT_EQ(r.files, 50u);
}

}  // namespace
