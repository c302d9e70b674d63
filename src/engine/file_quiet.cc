// File: what the GC worker does for a file gone quiet (docs/design.md,
// "Folding pairs back", "Giving free space back"). A flip that pairs a
// block, and an open, ask for a quiet run; the run folds the pairs no flip
// touched for the idle age, a batch at a time, compacts the log after the
// last batch, and once no pair is left and nothing wrote the file for the
// idle age gives a per-file file's free extents back to the host.
#include <algorithm>
#include <atomic>

#include "engine/epoch_pin.h"
#include "engine/file.h"
#include "engine/file_internal.h"
#include "engine/gc_worker.h"
#include "engine/log_compactor.h"
#include "util/time_ns.h"

namespace upfs {

namespace {

std::atomic<uint32_t> g_pair_idle_ms{kPairIdleMs};

}  // namespace

uint32_t PairIdleMs() { return g_pair_idle_ms.load(std::memory_order_relaxed); }

void File::SetPairIdleMsForTest(uint32_t ms) {
  g_pair_idle_ms.store(ms ? ms : kPairIdleMs, std::memory_order_relaxed);
}

void File::AskForQuietRun() {
  if (read_only() || !GcWorker::Background()) return;
  GcWorker* const w = &GcWorker::Get();
  // Sequentially consistent: after the flip's commit, against
  // FoldWhenQuiet's clearing (there).
  if (quiet_fold_worker_.load(std::memory_order_seq_cst) == w) return;
  quiet_fold_worker_.store(w, std::memory_order_relaxed);
  // Before the request: ~File asks the worker to forget only a File it
  // may hold.
  handed_to_gc_.store(true, std::memory_order_release);
  // No thread to be had: the next pairing asks again.
  if (!w->RequestQuietFold(this, PairIdleMs())) quiet_fold_worker_.store(nullptr, std::memory_order_relaxed);
}

// The unpairings shortened nothing yet: the log still encodes every pair it
// held, and each unpairing besides. Compacted once the last batch is done,
// if that makes it shorter (a file quiet for the idle age waits for no
// trigger length).
void File::CompactAfterQuietFolds(ThreadCtx* c) {
  if (!quiet_folds_uncompacted_) return;
  quiet_folds_uncompacted_ = false;
  (void)LogCompactor(space_, source_, root_).Collect(&c->blocks, c->slot, true);
}

// Unpaired: the free extents' memory back to the host, once the file is
// quiet. Not while any process writes it (every write moves the mtime, at
// most every ~0.3 ms): its writes would take the extents back at once,
// given memory again on their own path. A future mtime (utimensat) tells
// nothing: given back then.
uint32_t File::GiveBackWhenQuiet() {
  const uint64_t now = ClockNs(CLOCK_REALTIME_COARSE);
  const uint64_t written = root_.times->mtime_ns.load(std::memory_order_relaxed);
  const uint64_t idle_ns = uint64_t(PairIdleMs()) * 1000000;
  if (written <= now && now - written < idle_ns) {
    quiet_fold_worker_.store(&GcWorker::Get(), std::memory_order_relaxed);  // pending again
    return uint32_t((idle_ns - (now - written)) / 1000000) + 1;
  }
  (void)source_->PunchFreeExtents();
  return 0;
}

uint32_t File::FoldWhenQuiet() {
  // Cleared before the table is looked at, with a full fence between: a
  // flip that pairs a block commits (a locked compare-and-swap on the
  // log) before it loads the flag, so either it sees the flag clear and
  // asks again, or the catch-up below finds its entry and the pair. (A
  // pair missed all the same, its entry applied by another thread just
  // after this catch-up, waits for the next pairing or open: space, not
  // correctness.)
  quiet_fold_worker_.store(nullptr, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (read_only() || root_.consistency != format::Consistency::kStrict) return 0;
  ThreadCtx* c;
  if (!Ctx(&c).ok()) return 0;  // no slot now: the next pairing asks again
  EpochPin pin(epochs(), c->slot);
  BlockTable* t;
  // Damage is the operations' to report, as a background GC's is.
  if (!CatchUp(c, &t).ok()) return 0;
  if (t->shadows().count() == 0) {
    CompactAfterQuietFolds(c);
    return give_back_free_space_ ? GiveBackWhenQuiet() : 0;
  }
  quiet_fold_worker_.store(&GcWorker::Get(), std::memory_order_relaxed);  // pending again
  const uint32_t idle = PairIdleMs(), now = ShadowIndex::Now();
  uint64_t ripe = 0;
  uint32_t oldest_unripe = 0;
  t->shadows().ForEachStamped([&](uint64_t, uint32_t, uint32_t stamp) {
    const uint32_t age = ShadowIndex::Age(stamp, now);
    if (age >= idle)
      ++ripe;
    else
      oldest_unripe = std::max(oldest_unripe, age);
  });
  // Not sooner than an eighth of the idle age: each look walks every pair.
  const uint32_t again = std::max(idle - oldest_unripe, std::max<uint32_t>(idle / 8, 1));
  if (ripe) {
    uint64_t folded = 0;
    if (!FoldBlocks(c, false, kQuietFoldBatch, &folded).ok()) return again;
    quiet_folds_uncompacted_ |= folded != 0;
    if (folded == kQuietFoldBatch) return 1;  // more, after what else is queued
  }
  CompactAfterQuietFolds(c);
  // Nothing paired any more: once the worker has freed the shadows (two
  // epochs), a last look gives their space back.
  if (give_back_free_space_ && ripe && CatchUp(c, &t).ok() && t->shadows().count() == 0)
    return kGiveBackAfterMs;
  return again;
}

}  // namespace upfs
