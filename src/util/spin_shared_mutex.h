// SpinSharedMutex: a reader-writer lock of one process that spins instead
// of sleeping. A sleeping lock (std::shared_mutex, a futex) hands the lock
// over through a thread wake-up, 9-17 us here, more than the whole
// namespace operation it protects (docs/design.md, "Pools": the index
// lock). Held for a few hundred nanoseconds at a time, it is cheaper to
// spin, yielding the CPU after a while in case the holder was preempted.
//
// Readers count themselves in per-thread slots (one cache line each), not
// in one shared word: with one word every lookup of every thread did a CAS
// on the same line, which moved between cores on each call (perf: half the
// time of a two-thread create loop's commit was that CAS).
//
// The writer word is 0 (free), 1 (a writer waits for the readers to
// leave) or 2 (a writer is in). A writer takes it 0 -> 1, waits until every
// slot is empty, stores 2, and looks at every slot again: if a reader came
// in meanwhile, it goes back to 1 and waits again. A reader adds itself to
// its slot and goes in unless the word is 2 (then it takes itself out and
// waits). Each side writes and then reads the other's words, seq_cst (the
// store-load pattern), so a reader and a writer are never both in.
// Readers are preferred (a waiting writer does not stop them), as glibc's
// default rwlock prefers them, so that a thread may take the shared lock
// while it holds it: its own count keeps any writer from reaching 2.
//
// A slot is one thread's alone, but the last (kSharedSlot): threads beyond
// kSlots - 1 alive at once share it, with atomic read-modify-writes. A
// thread alone in its slot leaves with a plain release store (no locked
// instruction), and may enter with a seq_cst fence that another store-load
// protocol shares (lock_shared_sharing_fence: Pool::PinAndLockLatest makes
// one fence serve the epoch pin and this lock): a locked instruction costs
// 6-7 ns here, and a stat of a pool file made four.
// Meets the SharedMutex requirements (std::shared_lock, std::unique_lock).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "util/assert.h"
#include "util/thread_held.h"

namespace upfs {

namespace spin_lock_internal {
inline constexpr uint32_t kSlots = 64;
// The slot every thread beyond the first kSlots - 1 alive at once shares.
inline constexpr uint32_t kSharedSlot = kSlots - 1;

// This thread's reader slot: small numbers, reused after a thread exits,
// so that writers scan only as many slots as threads have lived at once.
class SlotNumbers {
 public:
  static uint32_t Mine() { return ThreadHeld<Holder, &Holder::slot>(); }
  // One past the highest slot any thread has held. seq_cst, as the slot
  // counts: a writer that reads an old value cannot miss a reader (the
  // reader raised it before its count, and both before it read the writer
  // word).
  static uint32_t High() { return high().load(); }
  // For a fork's handlers: a child that copied the numbers' lock held (a
  // thread starting or ending in the parent) would wait for ever.
  static void LockForFork() { mu().lock(); }
  static void UnlockAfterFork() { mu().unlock(); }

 private:
  struct Holder {
    uint32_t slot;
    Holder() {
      std::lock_guard<std::mutex> g(mu());
      if (!free().empty()) {
        slot = free().back();
        free().pop_back();
        return;
      }
      slot = next() < kSharedSlot ? next()++ : kSharedSlot;
      uint32_t h = high().load(std::memory_order_relaxed);
      if (slot + 1 > h) high().store(slot + 1);
    }
    ~Holder() {
      std::lock_guard<std::mutex> g(mu());
      if (slot != kSharedSlot) free().push_back(slot);
    }
  };
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<uint32_t>& free() {
    static std::vector<uint32_t> f;
    return f;
  }
  static uint32_t& next() {
    static uint32_t n = 0;
    return n;
  }
  static std::atomic<uint32_t>& high() {
    static std::atomic<uint32_t> h{0};
    return h;
  }
};
}  // namespace spin_lock_internal

class SpinSharedMutex {
 public:
  void lock() {
    for (uint32_t spins = 0;; ++spins) {
      uint32_t w = 0;
      if (writer_.load(std::memory_order_relaxed) == 0 && writer_.compare_exchange_weak(w, 1)) break;
      Pause(spins);
    }
    for (uint32_t spins = 0;; ++spins) {
      if (ReadersInside()) {
        Pause(spins);
        continue;
      }
      writer_.store(2);
      if (!ReadersInside()) return;
      writer_.store(1);  // a reader came in before it could see the 2
    }
  }
  bool try_lock() {
    uint32_t w = 0;
    if (!writer_.compare_exchange_strong(w, 1)) return false;
    if (!ReadersInside()) {
      writer_.store(2);
      if (!ReadersInside()) return true;
    }
    writer_.store(0, std::memory_order_release);
    return false;
  }
  void unlock() {
    UPFS_ASSERT(writer_.load(std::memory_order_relaxed) == 2);
    writer_.store(0, std::memory_order_release);
  }
  void lock_shared() {
    std::atomic<uint32_t>& mine = MySlot();
    for (uint32_t spins = 0;; ++spins) {
      mine.fetch_add(1);
      if (writer_.load() != 2) return;
      mine.fetch_sub(1, std::memory_order_release);
      while (writer_.load(std::memory_order_relaxed) == 2) Pause(spins++);
    }
  }
  bool try_lock_shared() {
    std::atomic<uint32_t>& mine = MySlot();
    mine.fetch_add(1);
    if (writer_.load() != 2) return true;
    mine.fetch_sub(1, std::memory_order_release);
    return false;
  }
  void unlock_shared() {
    const uint32_t s = spin_lock_internal::SlotNumbers::Mine();
    std::atomic<uint32_t>& mine = slots_[s].readers;
    if (s == spin_lock_internal::kSharedSlot) {
      const uint32_t was = mine.fetch_sub(1, std::memory_order_release);
      UPFS_ASSERT(was != 0);
      (void)was;
      return;
    }
    // This thread's slot alone: nobody else writes it.
    const uint32_t was = mine.load(std::memory_order_relaxed);
    UPFS_ASSERT(was != 0);
    mine.store(was - 1, std::memory_order_release);
  }
  // lock_shared with one std::atomic_thread_fence(seq_cst) that another
  // store-load protocol shares (see above): announce() makes that
  // protocol's stores, before the fence; confirm() its loads, after it.
  // Both run exactly once, whether or not the thread has a slot alone.
  template <typename Announce, typename Confirm>
  void lock_shared_sharing_fence(Announce&& announce, Confirm&& confirm) {
    const uint32_t s = spin_lock_internal::SlotNumbers::Mine();
    std::atomic<uint32_t>& mine = slots_[s].readers;
    const bool alone = s != spin_lock_internal::kSharedSlot;
    // The count, unordered: the fence below orders it before the look at
    // the writer word, as a writer's seq_cst store of 2 is before its look
    // at the slots; so a writer that could come in sees it.
    if (alone) mine.store(mine.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    announce();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    confirm();
    if (!alone) {
      lock_shared();
    } else if (writer_.load(std::memory_order_acquire) == 2) {
      unlock_shared();  // a writer is in: out again, and wait as lock_shared does
      lock_shared();
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint32_t> readers{0};
  };

  std::atomic<uint32_t>& MySlot() { return slots_[spin_lock_internal::SlotNumbers::Mine()].readers; }
  bool ReadersInside() const {
    const uint32_t high = spin_lock_internal::SlotNumbers::High();
    for (uint32_t i = 0; i < high; ++i)
      if (slots_[i].readers.load() != 0) return true;
    return false;
  }

  static void Pause(uint32_t spins) {
    if (spins < 256) {
      __builtin_ia32_pause();
    } else {
      sched_yield();  // the holder may have been preempted
    }
  }

  alignas(64) std::atomic<uint32_t> writer_{0};
  Slot slots_[spin_lock_internal::kSlots];
};

}  // namespace upfs
