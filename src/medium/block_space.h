// BlockSpace: the storage a container lends the engine. An address range of
// 4 KiB logical blocks that can grow and is never moved while in use (a
// reader holding an old base keeps a valid mapping). The engine knows it only
// through this interface: one host file per upfs file today (Medium), one
// pool file shared by many files tomorrow.
//
// The hot accessors (base, mapped_bytes, capacity) are plain loads, not
// virtual calls: every read and write of data goes through them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "util/status.h"

namespace upfs {

class BlockSpace {
 public:
  virtual ~BlockSpace() = default;

  // Base of the current mapping; valid for mapped_bytes() bytes.
  char* base() const { return base_.load(std::memory_order_acquire); }
  uint64_t mapped_bytes() const { return mapped_.load(std::memory_order_acquire); }
  // Bytes the space holds (mapped or not), as last seen.
  uint64_t capacity() const { return capacity_.load(std::memory_order_acquire); }

  // Makes sure [0, bytes) is mapped (after another process grew the
  // space). Fails if the space is smaller.
  virtual Status EnsureMapped(uint64_t bytes) = 0;
  // Grows the space to at least `bytes` and maps it. Safe to race with
  // other threads and processes.
  virtual Status Grow(uint64_t bytes) = 0;
  // Asks for growth to at least `bytes` off the caller's path. `ready(b)`
  // runs (on the worker, or in a thread in HelpGrow) each time the first
  // b bytes of the space are mapped and have their pages: during the
  // growth, as its extents get their pages from the bottom, and at its end
  // with the whole space. May do nothing.
  using ReadyFn = std::function<void(uint64_t ready_bytes)>;
  virtual void GrowAhead(uint64_t bytes, ReadyFn ready) = 0;
  // True while a GrowAhead request is being carried out.
  virtual bool GrowInFlight() const = 0;
  // Does a share of the growth in progress in the calling thread, which
  // would otherwise wait for it; false if there is nothing to share.
  virtual bool HelpGrow() = 0;
  // Threads waiting for the growth in flight (GrowthWaiter): `delta` is +1
  // as one starts, -1 as it stops. The space's background work puts growth
  // before its other work meanwhile. A space without any has nothing to do.
  virtual void CountGrowthWaiter(int delta) { (void)delta; }
  // Makes sure every page of [from, to) has memory (or media) behind it, so
  // that a store there cannot fault for want of space (medium/provide.h):
  // ENOSPC instead. Bytes past the capacity are not provided.
  virtual Status Provide(uint64_t from, uint64_t to) = 0;
  // Provide for whole 2 MiB extents taken back after a Release (from and
  // to on extent boundaries): where the space can, each one huge page.
  virtual Status ProvideExtents(uint64_t from, uint64_t to) { return Provide(from, to); }
  // Gives the memory (or media) behind [from, to) back to the host file
  // system: the bytes read as zeros after it, and nothing may be stored
  // there before a Provide. EOPNOTSUPP where the space cannot.
  virtual Status Release(uint64_t from, uint64_t to) {
    (void)from;
    (void)to;
    return Status::Error(EOPNOTSUPP, "this block space cannot give memory back");
  }
  // Re-reads the capacity (another process may have grown the space).
  virtual Status RefreshCapacity() = 0;
  // `bytes`, or the capacity if that is smaller, after a fresh look at it
  // when `bytes` lies past the last one: another process may have grown
  // the space (a pool), and what lies past the size this one saw must not
  // be cut off (left unprovided, not given back, taken for a cycle).
  uint64_t ClampToCapacity(uint64_t bytes) {
    if (bytes > capacity()) (void)RefreshCapacity();  // an error leaves the last size
    return bytes < capacity() ? bytes : capacity();
  }
  // Makes everything written to [offset, offset + bytes) durable.
  virtual Status Sync(uint64_t offset, uint64_t bytes) = 0;
  // Waits until background work (growth, huge pages) is done.
  virtual void Settle() = 0;
  // Stops background work for good; after it, no GrowAhead callback runs.
  virtual void JoinBackground() = 0;

 protected:
  BlockSpace() = default;
  BlockSpace(const BlockSpace&) = delete;
  BlockSpace& operator=(const BlockSpace&) = delete;

  // Kept by the implementation: base_ is published before mapped_ grows.
  std::atomic<char*> base_{nullptr};
  std::atomic<uint64_t> mapped_{0};
  std::atomic<uint64_t> capacity_{0};
};

// A thread waits for the growth of `space` in flight while one lives.
class GrowthWaiter {
 public:
  explicit GrowthWaiter(BlockSpace* space) : space_(space) { space_->CountGrowthWaiter(+1); }
  ~GrowthWaiter() { space_->CountGrowthWaiter(-1); }
  GrowthWaiter(const GrowthWaiter&) = delete;
  GrowthWaiter& operator=(const GrowthWaiter&) = delete;

 private:
  BlockSpace* const space_;
};

}  // namespace upfs
