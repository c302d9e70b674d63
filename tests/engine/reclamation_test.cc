// EpochDomain without a container: the epoch waits for live pinned
// threads, not for dead ones, and for a pin confirmed after its caller's
// fence; a slot is never owned twice; the live-slot scan sees only slots
// held by others.
#include "engine/reclamation.h"

#include <gtest/gtest.h>

#include <atomic>

#include "engine/epoch_pin.h"
#include "tests/engine/memory_storage.h"

namespace upfs_engine_test {
namespace {

TEST(Reclamation, TheEpochWaitsForALivePinnedThreadOnly) {
  MemoryStorage ms;
  EpochDomain& d = ms.epochs();
  const uint64_t e0 = d.epoch().load();
  for (int i = 0; i < 10; ++i) ClaimedSlot(d);  // slots 0..9
  // Slot 9: a thread of another live process, pinned in the current epoch.
  d.slot(9)->owner_pid.store(1);
  d.slot(9)->pinned.store(e0);
  ms.liveness().foreign.insert(9);
  EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 1) << "a pin in the current epoch does not hold it";
  EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 1) << "now slot 9 is an epoch behind: wait for it";
  // Its process dies: the pin is void.
  ms.liveness().foreign.erase(9);
  EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 2);
  EXPECT_EQ(d.slot(9)->pinned.load(), 0u);
}

// A pin whose fence is its caller's (EpochPin::FenceFollows) holds the
// epoch it confirms: if the epoch moved between its unordered store and
// the caller's fence, Confirm pins the new one, so that an older pin never
// survives an advance it did not stop.
TEST(Reclamation, APinConfirmedAfterAnAdvancePinsTheNewEpoch) {
  MemoryStorage ms;
  EpochDomain& d = ms.epochs();
  const uint32_t s = ClaimedSlot(d);
  const uint64_t e0 = d.epoch().load();
  {
    EpochPin pin(&d, s, EpochPin::FenceFollows{});
    EXPECT_EQ(d.slot(s)->pinned.load(), e0);
    // An advance that raced the announcement: it saw the pin (in the
    // current epoch, which does not hold it) or came before it.
    EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    pin.Confirm();
    EXPECT_EQ(d.slot(s)->pinned.load(), e0 + 1) << "the pin stayed in the epoch the advance left";
    EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 2) << "a pin in the current epoch does not hold it";
    EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 2) << "the confirmed pin holds the epoch after";
    // Nested: the thread is pinned already, the inner pin is nothing.
    EpochPin inner(&d, s, EpochPin::FenceFollows{});
    inner.Confirm();
    EXPECT_EQ(d.slot(s)->pinned.load(), e0 + 1);
  }
  EXPECT_EQ(d.slot(s)->pinned.load(), 0u);
  EXPECT_EQ(d.TryAdvanceEpoch(), e0 + 3);
}

TEST(Reclamation, ClaimedSlotsAreDistinctAndReusedAfterRelease) {
  MemoryStorage ms;
  EpochDomain& d = ms.epochs();
  ms.liveness().foreign.insert(0);  // held by another process
  const uint32_t a = ClaimedSlot(d), b = ClaimedSlot(d);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_GE(d.slots_high(), std::max(a, b) + 1);
  d.ReleaseSlot(a);
  EXPECT_EQ(ClaimedSlot(d), a);
}

TEST(Reclamation, TheLiveSlotScanSeesOnlyOthersSlots) {
  MemoryStorage ms;
  EpochDomain& d = ms.epochs();
  uint32_t mine = 0;
  for (int i = 0; i < 6; ++i) mine = ClaimedSlot(d);  // slots 0..5
  d.slot(5)->owner_pid.store(1);  // slot 5: another process's
  ms.liveness().foreign.insert(5);
  mine = 0;
  std::vector<uint32_t> seen;
  ForEachLiveSlot(d.slot(0), 4096, ms.liveness(), [&](uint32_t i, const ReclaimSlot&) {
    seen.push_back(i);
    return true;
  });
  EXPECT_EQ(seen, std::vector<uint32_t>{5});
  EXPECT_TRUE(d.AnyOtherProcessLive());
  ms.liveness().foreign.erase(5);
  EXPECT_FALSE(d.AnyOtherProcessLive()) << "slot " << mine << " is ours";
}

}  // namespace
}  // namespace upfs_engine_test
