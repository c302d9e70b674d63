// Who is alive in a pool, as the OFD locks on the pool file tell it
// (container/ofd_lock.h): what fsck reports of the processes attached,
// and whether another process's epoch slot counts as live. A live slot
// taken for dead would let its reader's blocks be reused under it; a pool
// checked as unattached while in use would be judged as a crash left it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>

#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "pool_attached_fixture.h"

namespace {

class PoolLivenessTest : public pool_test::AttachedPoolTest {
 protected:
  PoolLivenessTest() : AttachedPoolTest("liveness") {}
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
  int slot_pipe[2], go_pipe[2];
  ASSERT_EQ(pipe(slot_pipe), 0);
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::unique_ptr<upfs::Pool> p;
    uint32_t s = UINT32_MAX;
    if (!upfs::Pool::Attach(path_, &p).ok() || !p->epochs()->ClaimSlot(&s).ok()) s = UINT32_MAX;
    if (write(slot_pipe[1], &s, sizeof(s)) != sizeof(s)) _exit(2);
    char go;
    if (read(go_pipe[0], &go, 1) != 1) _exit(3);
    _exit(0);  // dies holding the slot: its locks go with its descriptors
  }
  uint32_t theirs = UINT32_MAX;
  ASSERT_EQ(read(slot_pipe[0], &theirs, sizeof(theirs)), ssize_t(sizeof(theirs)));
  ASSERT_NE(theirs, UINT32_MAX) << "the child could not attach or claim a slot";
  upfs::Status st = upfs::Pool::Attach(path_, &pool_);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(pool_->epochs()->SlotOwnerAlive(theirs)) << "a live process's slot taken for dead";
  EXPECT_TRUE(pool_->epochs()->AnyOtherProcessLive());
  uint32_t mine = UINT32_MAX;
  ASSERT_TRUE(pool_->epochs()->ClaimSlot(&mine).ok());
  EXPECT_NE(mine, theirs) << "a live process's slot claimed again";
  pool_->epochs()->ReleaseSlot(mine);
  ASSERT_EQ(write(go_pipe[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(pool_->epochs()->SlotOwnerAlive(theirs)) << "a dead process's slot taken for live";
  for (int fd : {slot_pipe[0], slot_pipe[1], go_pipe[0], go_pipe[1]}) close(fd);
}

}  // namespace
