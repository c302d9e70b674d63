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
#include <cstring>
#include <vector>

#include "engine/epoch_pin.h"
#include "engine/file.h"
#include "engine/file_internal.h"
#include "medium/pm.h"

namespace upfs {

using namespace format;

namespace {

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
  ComposeBlock(*t, v, old, t->size(), composed);
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

}  // namespace upfs
