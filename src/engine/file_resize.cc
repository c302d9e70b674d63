// File: truncate and fallocate (allocation, and punching holes).
#include "engine/file.h"

#include <immintrin.h>
#include <sched.h>
#include <linux/falloc.h>

#include <algorithm>
#include <cstring>

#include "engine/epoch_pin.h"
#include "engine/file_internal.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/optimistic_copy.h"

namespace upfs {

using namespace format;

Status File::Truncate(uint64_t len) {
  if (read_only()) return ReadOnlyRefusal();
  if (len > kMaxFileSize) return Status::Error(EFBIG, "length past the upfs limit");
  Operation op;
  UPFS_RETURN_IF_ERROR(Begin(&op));
  ThreadCtx* c = op.c;
  BlockTable* t = op.t;
  for (;;) {
    LogPos p = t->cursor();
    uint64_t size = t->size();
    if (len == size) break;
    uint64_t keep = CeilBlocks(len);
    c->runs.clear();
    c->old.clear();
    UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &c->runs);
    ClaimGuard claim{this, c};
    if (len > size) {
      bool stale = false;
      UPFS_RETURN_IF_ERROR(ZeroTailForGap(c, t, p, &claim.held, &stale));
      if (stale) {
        UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
        continue;
      }
    }
    uint32_t last = 0;
    if (len < size && (len & (kBlockSize - 1)) && (last = t->Get(len >> kBlockShift)) != 0) {
      // The new last block keeps [0, len % 4096), written up to the end of
      // its last line only: past the size, a tail block may hold anything
      // (what the allocator left there), and it is zeroed under the tail
      // claim before the size rises over it (ZeroTailForGap), as for a new
      // tail block a write makes (CopyIntoNewBlocks).
      UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, 1, &c->runs));
      alignas(64) unsigned char tmp[kBlockSize];
      const uint64_t valid = len & (kBlockSize - 1);
      const uint64_t written = (valid + kCacheLine - 1) & ~uint64_t(kCacheLine - 1);
      CopyBlockBytes(*t, len >> kBlockShift, last, 0, valid, reinterpret_cast<char*>(tmp));
      std::memset(tmp + valid, 0, written - valid);
      char* dst = nullptr;
      UPFS_RETURN_IF_ERROR(access_.Addr(c->runs[0].lblock, &dst));
      pm::CopyNT(dst, tmp, written);
      pm::Fence();
      c->old.push_back(last);
      c->old.push_back(t->ShadowOf(len >> kBlockShift, last));
    }
    t->ForEachHeld([&](uint32_t l) { c->old.push_back(l); }, keep);
    uint32_t vfirst = c->runs.empty() ? 0 : uint32_t(len >> kBlockShift);
    UPFS_RETURN_IF_ERROR(
        writer_.BuildPayload(&c->blocks, &c->pending, vfirst, c->runs, Effect::kSet, len));
    bool conflicted = false;
    UPFS_RETURN_IF_ERROR(writer_.Commit(&c->blocks, &c->scratch, &p, 0, c->pending,
                                        [](const Effect&) { return true; }, &conflicted));
    if (conflicted) {
      UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
      continue;
    }
    taken.Committed();
    ReleaseDisplaced(c, c->old.data(), c->old.size());
    break;
  }
  TouchMtime();
  MaybeCollectGarbage(c);
  return Status::OK();
}

// Publishes a block-range change prepared in `runs` (fresh blocks already
// written): one payload, committed unless an entry touching [vb0, vb1) or a
// truncate came in between. On success the displaced blocks are released;
// on a conflict the table is caught up and *retry set (what `taken` holds
// goes back when the caller lets go of it).
Status File::CommitRangeChange(ThreadCtx* c, BlockTable** t, LogPos* p, uint64_t vb0, uint64_t vb1,
                               const std::vector<Run>& runs, Effect::SizeOp op, uint64_t new_size,
                               UncommittedBlocks* taken, const uint32_t* displaced,
                               size_t ndisplaced, bool* retry) {
  *retry = false;
  pm::Fence();
  UPFS_RETURN_IF_ERROR(
      writer_.BuildPayload(&c->blocks, &c->pending, uint32_t(vb0), runs, op, new_size));
  // A growing fallocate raises the size over bytes it does not write.
  const uint64_t size = (*t)->size();
  const bool raises = op == Effect::kMax && new_size > size;
  bool conflicted = false;
  UPFS_RETURN_IF_ERROR(writer_.Commit(
      &c->blocks, &c->scratch, p, 0, c->pending,
      [&](const Effect& e) {
        return e.size_op == Effect::kSet || e.TouchesBlocks(vb0, vb1) || (raises && PutsBytesPastSize(e, size));
      },
      &conflicted));
  if (conflicted) {
    *retry = true;
    return CatchUp(c, t);
  }
  taken->Committed();
  ReleaseDisplaced(c, displaced, ndisplaced);
  return Status::OK();
}

// Punching a hole: the partial blocks at either end are copied with the
// punched bytes zeroed, everything in between becomes one hole run. Work is
// proportional to what is mapped, not to the length of the range.
Status File::PunchHole(ThreadCtx* c, BlockTable* t, uint64_t off, uint64_t end) {
  const uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end);
  const uint64_t full0 = CeilBlocks(off), full1 = end >> kBlockShift;  // whole blocks
  for (;;) {
    LogPos p = t->cursor();
    const uint64_t size = t->size();
    std::vector<Run> runs, fresh;
    UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &fresh);
    std::vector<uint32_t> displaced;
    Status st;
    // A partial block: a copy with [lo, hi) zeroed, or left alone if a hole.
    auto edge = [&](uint64_t v) {
      uint32_t l = t->Get(v);
      if (!l) {
        runs.push_back(Run{kKeepBlock, 1});
        return;
      }
      std::vector<Run> one;
      st = source_->Alloc(&c->blocks, 1, &one);
      if (!st.ok()) return;
      fresh.push_back(one[0]);
      alignas(64) unsigned char tmp[kBlockSize];
      ComposeBlock(*t, v, l, size, reinterpret_cast<char*>(tmp));
      uint64_t bs = v << kBlockShift;
      uint64_t lo = std::max(bs, off), hi = std::min(bs + kBlockSize, end);
      std::memset(tmp + (lo - bs), 0, hi - lo);
      char* dst = nullptr;
      st = access_.Addr(one[0].lblock, &dst);
      if (!st.ok()) return;
      pm::CopyNT(dst, tmp, kBlockSize);
      displaced.push_back(l);
      displaced.push_back(t->ShadowOf(v, l));
      runs.push_back(Run{one[0].lblock, 1});
    };
    if (vb0 < full0 || (full0 >= full1 && vb0 < vb1)) edge(vb0);  // head (or the only block)
    if (st.ok() && full0 < full1) {
      for (uint64_t v = full0; v < full1; v += std::min<uint64_t>(full1 - v, UINT32_MAX))
        runs.push_back(Run{0, uint32_t(std::min<uint64_t>(full1 - v, UINT32_MAX))});
      t->ForEachHeld([&](uint32_t l) { displaced.push_back(l); }, full0, full1);
    }
    if (st.ok() && full1 >= full0 && full1 < vb1 && full1 > vb0) edge(full1);  // tail
    UPFS_RETURN_IF_ERROR(st);
    if (displaced.empty()) return Status::OK();  // nothing mapped: nothing to punch
    bool retry = false;
    UPFS_RETURN_IF_ERROR(CommitRangeChange(c, &t, &p, vb0, vb1, runs, Effect::kNone, 0, &taken,
                                           displaced.data(), displaced.size(), &retry));
    if (!retry) return Status::OK();
  }
}

// Sync-mode preallocation: c->runs becomes the mapping of [vb0, map_end),
// mapped blocks kept and holes given fresh zeroed blocks (appended to
// *fresh); *changes if there was a hole.
Status File::MapZeroedHoles(ThreadCtx* c, BlockTable* t, uint64_t vb0, uint64_t map_end,
                            std::vector<Run>* fresh, bool* changes) {
  c->runs.clear();
  auto push = [&](uint32_t l, uint32_t count) {
    if (!c->runs.empty()) {
      Run& b = c->runs.back();
      bool both_keep = b.lblock == kKeepBlock && l == kKeepBlock;
      bool contiguous = b.lblock != kKeepBlock && l != kKeepBlock && b.lblock + b.count == l;
      if (both_keep || contiguous) {
        b.count += count;
        return;
      }
    }
    c->runs.push_back(Run{l, count});
  };
  *changes = false;
  for (uint64_t v = vb0; v < map_end; ++v) {
    if (t->Get(v)) {
      push(kKeepBlock, 1);
      continue;
    }
    const size_t before = fresh->size();
    UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, 1, fresh));
    UPFS_ASSERT(fresh->size() == before + 1 || fresh->back().count > 1);
    const uint32_t l = fresh->size() == before + 1 ? fresh->back().lblock
                                                   : fresh->back().lblock + fresh->back().count - 1;
    char* dst = nullptr;
    UPFS_RETURN_IF_ERROR(access_.Addr(l, &dst));
    pm::ZeroNT(dst, kBlockSize);
    push(l, 1);
    *changes = true;
  }
  return Status::OK();
}

Status File::Fallocate(int mode, uint64_t off, uint64_t len) {
  if (read_only()) return ReadOnlyRefusal();
  const bool keep_size = mode & FALLOC_FL_KEEP_SIZE;
  const bool punch = mode & FALLOC_FL_PUNCH_HOLE;
  if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
    return Status::Error(EOPNOTSUPP, "fallocate mode not supported by upfs");
  if (punch && !keep_size) return Status::Error(EOPNOTSUPP, "punch hole needs KEEP_SIZE");
  if (len == 0) return Status::Error(EINVAL, "fallocate of zero length");
  uint64_t end = off + len;
  if (end > kMaxFileSize || end < off) return Status::Error(EFBIG, "past the upfs limit");
  Operation op;
  UPFS_RETURN_IF_ERROR(Begin(&op));
  ThreadCtx* c = op.c;
  BlockTable* t = op.t;
  const uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end);
  if (punch) {
    UPFS_RETURN_IF_ERROR(PunchHole(c, t, off, end));
    TouchMtime();
    MaybeCollectGarbage(c);
    return Status::OK();
  }
  // Allocation reserves room in the block space for every hole in the range
  // and maps nothing: the first write into a mapped zero block would copy
  // on write and displace it, so a mapped preallocation only doubles the
  // space (RocksDB preallocates every table file). Holes read as zeros.
  // Sync mode is the exception: its in-place overwrites need mapped blocks,
  // so there holes below the (new) size get zeroed blocks.
  for (;;) {
    LogPos p = t->cursor();
    uint64_t size = t->size();
    const bool grows = !keep_size && end > size;
    uint64_t holes = 0;
    for (uint64_t v = vb0; v < vb1;) {
      uint64_t m = t->NextMapped(v, vb1, true);
      holes += m - v;
      v = m < vb1 ? t->NextMapped(m, vb1, false) : vb1;
    }
    UPFS_RETURN_IF_ERROR(source_->EnsureCapacity(t->mapped_blocks() + holes + 2));
    const uint64_t map_end = root_.consistency == Consistency::kSync
                                 ? std::min(vb1, CeilBlocks(grows ? end : size))
                                 : vb0;
    std::vector<Run> fresh;  // blocks this call allocates
    UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &fresh);
    bool changes = false;
    UPFS_RETURN_IF_ERROR(MapZeroedHoles(c, t, vb0, map_end, &fresh, &changes));
    if (!changes && !grows) break;
    if (!changes) c->runs.clear();  // only the size: a payload without runs
    const uint64_t range_end = changes ? map_end : vb0;
    ClaimGuard claim{this, c};
    if (grows) {
      bool stale = false;
      UPFS_RETURN_IF_ERROR(ZeroTailForGap(c, t, p, &claim.held, &stale));
      if (stale) {
        UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
        continue;
      }
    }
    bool retry = false;
    // Mapped blocks are kept and holes get fresh ones: nothing is displaced.
    UPFS_RETURN_IF_ERROR(CommitRangeChange(c, &t, &p, vb0, range_end, c->runs,
                                           grows ? Effect::kMax : Effect::kNone, grows ? end : 0,
                                           &taken, nullptr, 0, &retry));
    if (!retry) break;
  }
  TouchMtime();
  MaybeCollectGarbage(c);
  return Status::OK();
}

}  // namespace upfs
