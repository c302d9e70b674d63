// MemoryStorage: a container for engine unit tests, in this process's
// memory. It lends the engine what any container must (docs/design.md,
// "Adding a container"): a block space, a block source with its bitmap and
// epoch domain, and a log root whose first log block it writes. No host
// file, no shared memory: the engine's units run without the per-file
// container.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "engine/alloc_bitmap.h"
#include "engine/block_source.h"
#include "engine/block_table.h"
#include "engine/log.h"
#include "engine/log_root.h"
#include "engine/reclamation.h"
#include "format/format.h"
#include "medium/block_space.h"

namespace upfs_engine_test {

using namespace upfs;

// A block space in anonymous memory, reserved up front and never moved.
class MemorySpace final : public BlockSpace {
 public:
  MemorySpace(uint64_t initial_bytes, uint64_t max_bytes) : max_(max_bytes) {
    void* p = mmap(nullptr, max_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    base_.store(static_cast<char*>(p));
    capacity_.store(initial_bytes);
    mapped_.store(initial_bytes);
  }
  ~MemorySpace() override { munmap(base(), max_); }

  Status EnsureMapped(uint64_t bytes) override {
    if (bytes > capacity()) return Status::Corrupt("block pointer", "past the end of the space");
    return Status::OK();
  }
  Status Grow(uint64_t bytes) override {
    if (bytes > max_) return Status::Error(ENOSPC, "memory space full");
    uint64_t c = capacity_.load();
    while (bytes > c && !capacity_.compare_exchange_weak(c, bytes)) {
    }
    mapped_.store(capacity());
    ++grows;
    return Status::OK();
  }
  void GrowAhead(uint64_t, ReadyFn) override {}  // growth on demand only
  bool GrowInFlight() const override { return false; }
  bool HelpGrow() override { return false; }  // no background growth to share
  Status RefreshCapacity() override { return Status::OK(); }
  Status Provide(uint64_t, uint64_t) override { return Status::OK(); }  // anonymous memory
  // Gives the pages back (they read as zeros after it, as a punched hole).
  Status Release(uint64_t from, uint64_t to) override {
    if (to > capacity() || madvise(base() + from, to - from, MADV_DONTNEED) != 0)
      return Status::Error(EINVAL, "release past the space");
    released += to - from;
    return Status::OK();
  }
  Status Sync(uint64_t, uint64_t) override { return Status::OK(); }
  void Settle() override {}
  void JoinBackground() override {}

  int grows = 0;
  uint64_t released = 0;  // bytes

 private:
  uint64_t max_;
};

// A claimed slot, or kMaxSlots if the claim failed.
inline uint32_t ClaimedSlot(EpochDomain& d) {
  uint32_t s = kMaxSlots;
  return d.ClaimSlot(&s).ok() ? s : kMaxSlots;
}

// Slot liveness within this process; slots in `foreign` act as held by a
// live other process.
class TestLiveness final : public SlotLiveness {
 public:
  bool TryLock(uint32_t s) override { return foreign.count(s) == 0; }
  void Unlock(uint32_t) override {}
  bool HeldElsewhere(uint32_t s) override { return foreign.count(s) != 0; }
  std::set<uint32_t> foreign;
};

class MemoryStorage {
 public:
  static constexpr uint32_t kFirstLogBlock = 1;  // block 0: the "container's own"

  // With `summaries`, the bitmap has a pool's summaries (and its
  // partition policy); max_blocks must then be a multiple of 512.
  explicit MemoryStorage(uint64_t initial_blocks = 64, uint64_t max_blocks = 1 << 16,
                         format::Consistency mode = format::Consistency::kStrict, bool summaries = false)
      : space_(initial_blocks << format::kBlockShift, max_blocks << format::kBlockShift),
        bits_(new std::atomic<uint64_t>[(max_blocks + 63) / 64]()),
        summary_(new std::atomic<uint64_t>[BitmapSummaryLayout::TotalWords(max_blocks) + 1]()),
        slots_(new ReclaimSlot[kMaxSlots]()),
        bitmap_(summaries ? AllocationBitmap(&bitmap_words_, bits_.get(), summary_.get(), max_blocks)
                          : AllocationBitmap(&bitmap_words_, bits_.get())),
        epochs_(&epoch_words_, slots_.get(), &liveness_),
        source_(&space_, &bitmap_, &epochs_, kFirstLogBlock) {
    epoch_words_.Reset();
    log_words_.Reset();
    bitmap_words_.Reset(initial_blocks);
    bitmap_.Set(0);
    bitmap_.Set(kFirstLogBlock);
    bitmap_.RebuildSummaries(initial_blocks);
    // The first log block: empty, sequence 1.
    auto* lb = reinterpret_cast<format::LogBlock*>(space_.base() + (kFirstLogBlock << format::kBlockShift));
    lb->next.store(format::NextWord(0));
    lb->seq = 1;
    head_.store(kFirstLogBlock);
    root_.head = &head_;
    root_.times = &times_;
    root_.created_ns = 1;
    root_.consistency = mode;
    root_.words = &log_words_;
  }

  MemorySpace& space() { return space_; }
  BlockSource& source() { return source_; }
  EpochDomain& epochs() { return epochs_; }
  AllocationBitmap& bitmap() { return bitmap_; }
  TestLiveness& liveness() { return liveness_; }
  const LogRoot& root() const { return root_; }
  LogWords& words() { return log_words_; }
  uint64_t head() const { return head_.load(); }

  // Where the log's first entry goes.
  LogPos Start() const {
    LogPos p;
    p.lblock = uint32_t(head_.load());
    p.seq = reinterpret_cast<const format::LogBlock*>(space_.base() + (p.lblock << format::kBlockShift))->seq;
    return p;
  }
  // Replays the whole chain (checking what follows its end).
  Status Replay(BlockTable* table, ReplayResult* res) {
    return ReplayChain(BlockAccess(&space_), uint32_t(head_.load()), table, res, TailRule::kStrict);
  }

 private:
  MemorySpace space_;
  std::unique_ptr<std::atomic<uint64_t>[]> bits_;
  std::unique_ptr<std::atomic<uint64_t>[]> summary_;
  std::unique_ptr<ReclaimSlot[]> slots_;
  BitmapWords bitmap_words_{};
  EpochWords epoch_words_{};
  LogWords log_words_{};
  TestLiveness liveness_;
  AllocationBitmap bitmap_;
  EpochDomain epochs_;
  BlockSource source_;
  std::atomic<uint64_t> head_{0};
  format::FileTimes times_{};
  LogRoot root_;
};

}  // namespace upfs_engine_test
