// OpGuard: what a retirement waits for. A descriptor's state waits only for
// running calls that may have looked its slot up (declared Any, or Only that
// descriptor, or widened to Any by a nested guard); a mount (RetireAfterOps)
// waits for every running call. Each case parks a call in another thread and
// looks at whether the retired object was freed.
#include "posix/op_guard.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <thread>

namespace upfs {
namespace {

// A call running in a thread of its own until Finish(): the guard is made
// by `enter`, inside the thread, before Started() returns.
class ParkedCall {
 public:
  static ParkedCall* Start(DescriptorUse use, std::function<void()> inside = {}) {
    auto* c = new ParkedCall(use, std::move(inside));
    c->started_.get_future().wait();
    return c;
  }
  // Ends the call and waits until its guard is gone.
  void Finish() {
    finish_.set_value();
    done_.get_future().wait();
    thread_.join();
  }

 private:
  ParkedCall(DescriptorUse use, std::function<void()> inside) : use_(use) {
    thread_ = std::thread([this, inside] {
      {
        OpGuard g(use_);
        if (inside) inside();
        started_.set_value();
        finish_.get_future().wait();
      }
      done_.set_value();
    });
  }
  DescriptorUse use_ = DescriptorUse::Any();
  std::promise<void> started_, finish_, done_;
  std::thread thread_;
};

TEST(OpGuard, ADescriptorWaitsOnlyForCallsThatMayHoldIt) {
  std::atomic<int> freed{0};
  std::unique_ptr<ParkedCall> on7(ParkedCall::Start(DescriptorUse::Only(7)));
  std::unique_ptr<ParkedCall> by_path(ParkedCall::Start(DescriptorUse::None()));
  RetireDescriptor(5, [&] { freed |= 1; });
  EXPECT_EQ(freed.load(), 1) << "no running call may hold descriptor 5: freed at once";
  RetireDescriptor(7, [&] { freed |= 2; });
  EXPECT_EQ(freed.load(), 1) << "a call on descriptor 7 is running";
  by_path->Finish();
  EXPECT_EQ(freed.load(), 1);
  on7->Finish();  // the end of that call frees it
  EXPECT_EQ(freed.load(), 3);
}

TEST(OpGuard, ACallThatMayUseAnyDescriptorHoldsThemAll) {
  std::atomic<int> freed{0};
  std::unique_ptr<ParkedCall> any(ParkedCall::Start(DescriptorUse::Any()));
  RetireDescriptor(3, [&] { freed |= 1; });
  RetireDescriptor(900000, [&] { freed |= 2; });
  EXPECT_EQ(freed.load(), 0);
  any->Finish();
  EXPECT_EQ(freed.load(), 3);
}

TEST(OpGuard, AMountWaitsForEveryCall) {
  std::atomic<int> freed{0};
  std::unique_ptr<ParkedCall> by_path(ParkedCall::Start(DescriptorUse::None()));
  RetireAfterOps([&] { freed = 1; });
  EXPECT_EQ(freed.load(), 0) << "a path call may be using the mount";
  by_path->Finish();
  EXPECT_EQ(freed.load(), 1);
}

TEST(OpGuard, ANestedGuardWidensTheOuterCall) {
  std::atomic<int> freed{0};
  std::atomic<bool> covered_before{true}, covered_after{false};
  std::unique_ptr<ParkedCall> call(ParkedCall::Start(DescriptorUse::None(), [&] {
    covered_before = OpGuardCovers(4);
    OpGuard inner(DescriptorUse::Only(4));
    covered_after = OpGuardCovers(4);
  }));
  EXPECT_FALSE(covered_before.load());
  EXPECT_TRUE(covered_after.load());
  // The inner guard is gone, the outer call still runs, declared wider.
  RetireDescriptor(4, [&] { freed = 1; });
  EXPECT_EQ(freed.load(), 0);
  call->Finish();
  EXPECT_EQ(freed.load(), 1);
}

TEST(OpGuard, ARetirementInsideACallWaitsForOlderCallsOnly) {
  std::atomic<int> freed{0};
  std::unique_ptr<ParkedCall> on9(ParkedCall::Start(DescriptorUse::Only(9)));
  {
    OpGuard mine(DescriptorUse::Only(9));
    RetireDescriptor(9, [&] { freed |= 1; });
    RetireDescriptor(8, [&] { freed |= 2; });
    EXPECT_EQ(freed.load(), 0) << "freed when the retiring call ends, not before";
  }
  EXPECT_EQ(freed.load(), 2) << "descriptor 9 waits for the older call on it";
  // A call begun after the retirement does not hold it back.
  std::unique_ptr<ParkedCall> later(ParkedCall::Start(DescriptorUse::Only(9)));
  on9->Finish();
  EXPECT_EQ(freed.load(), 3);
  later->Finish();
}

// A retirement inside a call takes the epoch that call began in, without
// moving it on (a shared line every close would write): a call that begins
// while the retiring call runs is counted as one that may hold it. Once
// something waits, the epoch moves on, so that no later call holds it.
TEST(OpGuard, ACallBegunDuringTheRetiringCallHoldsItOnlyUntilItEnds) {
  std::atomic<int> freed{0};
  std::unique_ptr<ParkedCall> during;
  {
    OpGuard mine(DescriptorUse::Only(6));
    RetireDescriptor(6, [&] { freed = 1; });
    during.reset(ParkedCall::Start(DescriptorUse::Only(6)));
  }
  EXPECT_EQ(freed.load(), 0) << "a call that may hold it began before the retiring call ended";
  std::unique_ptr<ParkedCall> later(ParkedCall::Start(DescriptorUse::Only(6)));
  during->Finish();
  EXPECT_EQ(freed.load(), 1) << "a call begun after the retiring call ended held it back";
  later->Finish();
}

TEST(OpGuard, CoversWhatACallDeclared) {
  EXPECT_TRUE(OpGuardCovers(12)) << "outside any call";
  {
    OpGuard g(DescriptorUse::Only(12));
    EXPECT_TRUE(OpGuardCovers(12));
    EXPECT_FALSE(OpGuardCovers(13));
  }
  {
    OpGuard g;
    EXPECT_TRUE(OpGuardCovers(13));
  }
}

}  // namespace
}  // namespace upfs
