// File: the GC's fold of patched blocks (docs/design.md, "Sub-block
// writes", "GC folds, then copies"). A block with many patches is copied whole, with
// its patches applied, to a fresh block, and the fresh block is committed
// in its place like a copy-on-write of the whole block: the patches drop
// out of the table, and the compaction that follows carries none of them.
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

}  // namespace

Status File::FoldOnce(ThreadCtx* c, BlockTable* t, uint64_t v, bool* folded) {
  *folded = false;
  LogPos p = t->cursor();
  uint32_t old = t->Get(v);
  if (old == 0 || t->patches().Count(v) == 0 || v >= t->size() >> kBlockShift) return Status::OK();
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
  ReleaseDisplaced(c, &old, 1);
  *folded = true;
  return Status::OK();
}

Status File::FoldPatches(ThreadCtx* c, uint64_t* folded) {
  *folded = 0;
  UPFS_ASSERT(EpochPin::Pinned(epochs(), c->slot));
  BlockTable* t;
  UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  if (!t->patches().any()) return Status::OK();
  // The table's applier (CatchUp, ApplyOwnPatch) changes the index under
  // apply_lock_: the candidates are listed under it, folded after.
  std::vector<uint64_t> blocks;
  {
    SpinGuard g(apply_lock_);
    t = table_.load(std::memory_order_acquire);
    t->patches().ForEach([&](uint64_t v, const uint64_t*, uint32_t) {
      if (WorthFolding(t->patches(), v)) blocks.push_back(v);
    });
  }
  for (uint64_t v : blocks) {
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
    if (!WorthFolding(t->patches(), v)) continue;  // folded or rewritten meanwhile
    bool done = false;
    UPFS_RETURN_IF_ERROR(FoldOnce(c, t, v, &done));
    *folded += done;
  }
  return Status::OK();
}

}  // namespace upfs
