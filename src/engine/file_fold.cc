// File: the GC's fold of patched and paired blocks (docs/design.md,
// "Sub-block writes", "GC folds, then copies", "Folding pairs back"). A
// block with many patches, or a pair of a version 4 log no flip touched
// lately, is copied whole, as a reader sees it, to a fresh block, and the
// fresh block is committed in its place like a copy-on-write of the whole
// block: the patches drop out of the table and the compaction that follows
// carries none of them; the pair's two blocks go back free, side by side,
// where a later first flip can take them again. A cold paired block of a
// version 5 log is folded home: only the granules its shadow holds are
// copied, into the block itself, and the shadow goes back free.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "engine/epoch_pin.h"
#include "engine/file.h"
#include "engine/file_internal.h"
#include "engine/gc_worker.h"
#include "engine/log_compactor.h"
#include "medium/pm.h"
#include "util/time_ns.h"

namespace upfs {

using namespace format;

namespace {

std::atomic<uint32_t> g_pair_idle_ms{kPairIdleMs};

// A block is folded once its patches reach three quarters of either limit:
// past the limits a writer would fold it itself, on its own time (the write
// that would pass them copies the block whole). Folding earlier writes 4
// KiB for fewer patched bytes (docs/design.md, "Sub-block writes").
bool WorthFolding(const PatchIndex& p, uint64_t v) {
  return p.Count(v) * 4 >= kMaxPatchesPerBlock * 3 || p.Bytes(v) * 4 >= kPatchMaxBytes * 3;
}

// min_age_ms old or more (kPairColdMs or kPairIdleMs, file_internal.h);
// a forced GC folds every pair.
bool ColdPair(const ShadowIndex& s, uint64_t v, uint32_t min_age_ms, uint32_t now) {
  return s.Paired(v) && ShadowIndex::Age(s.Stamp(v), now) >= min_age_ms;
}

}  // namespace

uint32_t PairIdleMs() { return g_pair_idle_ms.load(std::memory_order_relaxed); }

void File::SetPairIdleMsForTest(uint32_t ms) {
  g_pair_idle_ms.store(ms ? ms : kPairIdleMs, std::memory_order_relaxed);
}

Status File::FoldHome(ThreadCtx* c, BlockTable* t, uint64_t v, bool* folded) {
  *folded = false;
  LogPos p = t->cursor();
  const uint32_t home = t->Get(v);
  uint32_t mask = 0, shadow = 0;
  if (home == 0 || !t->shadows().Get(v, &mask, &shadow)) return Status::OK();
  // It writes homes not live, as a flip does: under the block's granule
  // claim, never waited for (a writer holds it: the block is not cold).
  std::atomic<uint64_t>* claim = &root_.words->granule_claim[v % LogWords::kGranuleClaims];
  if (!TryClaim(claim, c)) return Status::OK();
  ClaimGuard release{this, c, true, claim};
  bool conflicted = false;
  UPFS_RETURN_IF_ERROR(CommittedSince(c, p, &conflicted, [&](const Effect& e) { return e.TouchesBlocks(v, v + 1); }));
  if (conflicted) return Status::OK();
  // Each granule the shadow holds goes to its home copy, which nobody
  // reads (the mask says the shadow) and, under the claim, nobody writes.
  char* to = access_.AddrUnchecked(home);
  const char* from = access_.AddrUnchecked(shadow);
  ForEachGranuleRun(mask, [&](uint32_t first, uint32_t end) {
    pm::CopyNT(to + first * kGranuleSize, from + first * kGranuleSize, (end - first) * kGranuleSize);
  });
  // The home copies are durable before the entry that makes them live.
  pm::Fence();
  UPFS_RETURN_IF_ERROR(CommitFlip(c, &p, v, home, EncodeGranuleFlip1(mask, false, true), &conflicted));
  if (conflicted) return Status::OK();
  // Retired through EBR if a claim is held (ours is): a reader may still
  // be copying granules from it until its validation sends it back.
  ReleaseDisplaced(c, &shadow, 1);
  *folded = true;
  return Status::OK();
}

Status File::FoldOnce(ThreadCtx* c, BlockTable* t, uint64_t v, bool* folded) {
  *folded = false;
  LogPos p = t->cursor();
  const uint32_t old = t->Get(v);
  // A paired block may be the last, partial one (its bytes past the size
  // are zero in every live home); a patched one is folded only whole.
  const bool paired = t->shadows().Paired(v);
  if (paired && root_.anywhere_shadows) return FoldHome(c, t, v, folded);
  if (old == 0 || (!paired && (t->patches().Count(v) == 0 || v >= t->size() >> kBlockShift)))
    return Status::OK();
  UPFS_ASSERT(!(paired && t->patches().Count(v)));
  c->runs.clear();
  UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &c->runs);
  AimAllocation(&c->blocks, *t, v, t->size());
  UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, 1, &c->runs));
  const uint32_t l = c->runs[0].lblock;
  char* dst = nullptr;
  UPFS_RETURN_IF_ERROR(access_.Addr(l, &dst));
  alignas(64) char composed[kBlockSize];
  ComposeBlock(*t, v, old, composed);
  pm::CopyNT(dst, composed, kBlockSize);
  pm::Fence();
  uint64_t entry = 0;
  if (FitsInline(v, l, 1))
    entry = EncodeInline({uint32_t(v), l, 1, false});
  else
    UPFS_RETURN_IF_ERROR(writer_.BuildPayload(&c->blocks, &c->pending, uint32_t(v), c->runs,
                                              Effect::kNone, 0));
  // Anything committed since the snapshot that touches the block (a patch,
  // a write, a truncate) makes the composed copy stale: no fold then, and
  // no retry (the bytes are the writers' to decide, not the GC's).
  bool conflicted = false;
  UPFS_RETURN_IF_ERROR(writer_.Commit(
      &c->blocks, &c->scratch, &p, entry, c->pending,
      [&](const Effect& e) { return e.size_op == Effect::kSet || e.TouchesBlocks(v, v + 1); },
      &conflicted));
  if (conflicted) return Status::OK();
  taken.Committed();
  // The pair's shadow goes with it (released while a granule claim is
  // held, both are retired: the claimant may be writing their homes).
  const uint32_t displaced[2] = {old, t->ShadowOf(v, old)};
  ReleaseDisplaced(c, displaced, 2);
  *folded = true;
  return Status::OK();
}

Status File::FoldBlocks(ThreadCtx* c, bool all_pairs, uint64_t limit, uint64_t* folded) {
  *folded = 0;
  UPFS_ASSERT(EpochPin::Pinned(epochs(), c->slot));
  BlockTable* t;
  UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  if (!t->patches().any() && !t->shadows().any()) return Status::OK();
  const uint32_t now = ShadowIndex::Now();
  const uint32_t min_age = all_pairs ? 0 : ReadsMetShadows(now) ? kPairColdMs : PairIdleMs();
  auto worth = [&](const BlockTable& t, uint64_t v) {
    return WorthFolding(t.patches(), v) || ColdPair(t.shadows(), v, min_age, now);
  };
  // Candidates only: each is judged again after the catch-up below. The
  // patch index's list of leaves is a vector its applier (CatchUp,
  // ApplyOwnPatch) may grow, so its walk holds apply_lock_; the shadow
  // index is read lock-free (its leaves are never freed while the table
  // lives, and the pin keeps the table), so the walk of every pair, the
  // long one in a file of small writes, no longer keeps writers from
  // applying their own commits.
  std::vector<uint64_t> blocks;
  if (t->patches().any()) {
    SpinGuard g(apply_lock_);
    t->patches().ForEach([&](uint64_t v, const uint64_t*, uint32_t) {
      if (WorthFolding(t->patches(), v)) blocks.push_back(v);
    });
  }
  t->shadows().ForEachStamped([&](uint64_t v, uint32_t, uint32_t stamp) {
    if (ShadowIndex::Age(stamp, now) >= min_age) blocks.push_back(v);
  });
  for (uint64_t v : blocks) {
    if (*folded >= limit) break;
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
    if (!worth(*t, v)) continue;  // folded, flipped or rewritten meanwhile
    bool done = false;
    UPFS_RETURN_IF_ERROR(FoldOnce(c, t, v, &done));
    *folded += done;
  }
  return Status::OK();
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
  if (read_only() || root_.consistency != Consistency::kStrict) return 0;
  ThreadCtx* c;
  if (!Ctx(&c).ok()) return 0;  // no slot now: the next pairing asks again
  EpochPin pin(epochs(), c->slot);
  BlockTable* t;
  // Damage is the operations' to report, as a background GC's is.
  if (!CatchUp(c, &t).ok()) return 0;
  // The unpairings shortened nothing yet: the log still encodes every
  // pair it held, and each unpairing besides. Compacted once the last
  // batch is done, if that makes it shorter (a file quiet for the idle
  // age waits for no trigger length).
  auto compact = [&] {
    if (!quiet_folds_uncompacted_) return;
    quiet_folds_uncompacted_ = false;
    (void)LogCompactor(space_, source_, root_).Collect(&c->blocks, c->slot, true);
  };
  if (t->shadows().count() == 0) {
    compact();
    if (!give_back_free_space_) return 0;
    // Unpaired: the free extents' memory back to the host (the shadows
    // the last batch freed have left the limbo by now), once the file is
    // quiet. Not while any process writes it (every write moves the
    // mtime, at most every ~0.3 ms): its writes would take the extents
    // back at once, given memory again on their own path. A future mtime
    // (utimensat) tells nothing: given back then.
    const uint64_t now = ClockNs(CLOCK_REALTIME_COARSE);
    const uint64_t written = root_.times->mtime_ns.load(std::memory_order_relaxed);
    const uint64_t idle_ns = uint64_t(PairIdleMs()) * 1000000;
    if (written <= now && now - written < idle_ns) {
      quiet_fold_worker_.store(&GcWorker::Get(), std::memory_order_relaxed);
      return uint32_t((idle_ns - (now - written)) / 1000000) + 1;
    }
    (void)source_->PunchFreeExtents();
    return 0;
  }
  quiet_fold_worker_.store(&GcWorker::Get(), std::memory_order_relaxed);
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
  compact();
  // Nothing paired any more: once the worker has freed the shadows (two
  // epochs), a last look gives their space back.
  if (give_back_free_space_ && ripe && CatchUp(c, &t).ok() && t->shadows().count() == 0)
    return kGiveBackAfterMs;
  return again;
}

}  // namespace upfs
