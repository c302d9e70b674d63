// File: writes (copy-on-write, in place in sync mode, appends in place
// under the tail claim).
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
#include "util/crc32c.h"
#include "util/optimistic_copy.h"

namespace upfs {

using namespace format;

namespace {

// Applies effect `e` to `old`, the mapping of virtual blocks [v0, v0+n), so
// that `old` tracks what the caller's commit will displace.
// `shadow` likewise tracks their shadows (a granule flip pairs its block).
void Overlay(const Effect& e, uint64_t v0, uint64_t n, uint32_t* old, uint32_t* shadow) {
  uint64_t v = e.vblock;
  for (const Run& r : e.runs) {
    uint64_t lo = std::max(v, v0), hi = std::min(v + r.count, v0 + n);
    if (e.flip) {
      uint32_t home = 0, sh = 0;
      if (lo < hi) e.FlipBlocks(old[lo - v0], &home, &sh);
      if (home) old[lo - v0] = home, shadow[lo - v0] = sh;  // a toggle changes neither
    } else if (r.lblock != kKeepBlock) {
      for (uint64_t b = lo; b < hi; ++b) {
        old[b - v0] = r.lblock ? r.lblock + uint32_t(b - v) : 0;
        shadow[b - v0] = 0;
      }
    }
    v += r.count;
  }
  if (e.size_op == Effect::kSet) {
    uint64_t keep = CeilBlocks(e.new_size);
    for (uint64_t b = std::max(keep, v0); b < v0 + n; ++b) old[b - v0] = shadow[b - v0] = 0;
  }
}

}  // namespace

Status File::CopyIntoNewBlocks(ThreadCtx* c, const BlockTable& t, const void* buf, size_t n,
                               uint64_t off, uint64_t size, uint64_t vb0) {
  const char* in = static_cast<const char*>(buf);
  const uint64_t end = off + n;
  // The block holding the new size is written only up to it: the bytes
  // past the size in the tail block are read by nobody and zeroed before
  // the size rises over them (see "The tail claim" below), so zeroing
  // them here too cost a 512-byte first write 3.5 KiB of non-temporal
  // stores.
  const uint64_t new_size = std::max(size, end);
  uint64_t v = vb0;
  for (const Run& r : c->runs) {
    char* dst = nullptr;
    UPFS_RETURN_IF_ERROR(access_.Addr(r.lblock + uint64_t(r.count) - 1, &dst));
    dst = access_.AddrUnchecked(r.lblock);
    uint64_t i = 0;
    while (i < r.count) {
      uint64_t bv = v + i;
      uint64_t bs = bv << kBlockShift;
      bool partial = bs < off || bs + kBlockSize > end;
      if (!partial) {
        // A stretch of whole blocks: one big non-temporal copy.
        uint64_t j = i;
        while (j < r.count && ((v + j) << kBlockShift) + kBlockSize <= end) ++j;
        pm::CopyNT(dst + (i << kBlockShift), in + (bs - off), (j - i) << kBlockShift);
        i = j;
        continue;
      }
      // An edge block: old bytes below the size, zeros above, new bytes
      // over both; assembled in place with non-temporal copies.
      char* nb = dst + (i << kBlockShift);
      uint32_t ol = c->old[bv - vb0];
      uint64_t valid = ol && size > bs ? std::min<uint64_t>(size - bs, kBlockSize) : 0;
      const char* ob = ol ? access_.AddrUnchecked(ol) : nullptr;
      // A patched or paired block is composed in DRAM first.
      alignas(64) char composed[kBlockSize];
      if (ol && valid && (t.patches().Count(bv) || t.shadows().Paired(bv))) {
        ComposeBlock(t, bv, ol, size, composed);
        ob = composed;
      }
      uint64_t lo = std::max(bs, off) - bs, hi = std::min(bs + kBlockSize, end) - bs;
      auto old_or_zero = [&](uint64_t from, uint64_t to) {
        if (from >= to) return;
        uint64_t mid = std::clamp(valid, from, to);
        if (mid > from) pm::CopyNT(nb + from, ob + from, mid - from);
        if (to > mid) pm::ZeroNT(nb + mid, to - mid);
      };
      old_or_zero(0, lo);
      pm::CopyNT(nb + lo, in + (bs + lo - off), hi - lo);
      old_or_zero(hi, std::min<uint64_t>(new_size - bs, kBlockSize));
      ++i;
    }
    v += r.count;
  }
  return Status::OK();
}

Status File::WriteInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                          bool* done) {
  *done = false;
  LogPos p = t->cursor();
  uint64_t size = t->size();
  uint64_t end = off + n;
  if (end > size) return Status::OK();
  // Sync-mode files get no patches; a log that has some anyway is
  // written by copy on write, which folds them.
  if (t->patches().any()) return Status::OK();
  uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end);
  c->old.resize(vb1 - vb0);
  for (uint64_t v = vb0; v < vb1; ++v) {
    c->old[v - vb0] = t->Get(v);
    if (!c->old[v - vb0]) return Status::OK();  // a hole: needs new blocks
  }
  const char* in = static_cast<const char*>(buf);
  for (uint64_t v = vb0; v < vb1; ++v) {
    uint64_t bs = v << kBlockShift;
    uint64_t lo = std::max(bs, off), hi = std::min(bs + kBlockSize, end);
    pm::CopyNT(access_.AddrUnchecked(c->old[v - vb0]) + (lo - bs), in + (lo - off), hi - lo);
  }
  pm::Fence();
  // A touch entry orders this write among the others: a concurrent
  // copy-on-write of these blocks sees it as a conflict and re-copies.
  uint64_t entry = 0;
  if (vb1 - vb0 <= kInlineMaxCount && vb0 <= kInlineMaxVblock) {
    entry = EncodeTouch(uint32_t(vb0), uint32_t(vb1 - vb0));
  } else {
    std::vector<Run> keep{Run{kKeepBlock, uint32_t(vb1 - vb0)}};
    if (vb1 - vb0 > UINT32_MAX) return Status::OK();
    UPFS_RETURN_IF_ERROR(writer_.BuildPayload(&c->blocks, &c->pending, uint32_t(vb0), keep, Effect::kNone, 0));
  }
  bool conflicted = false;
  UPFS_RETURN_IF_ERROR(writer_.Commit(&c->blocks, &c->scratch, &p, entry, c->pending, [&](const Effect& e) { return e.TouchesBlocks(vb0, vb1); }, &conflicted));
  // On conflict our bytes may have gone to a block that was replaced in the
  // meantime (it is retired, not reused, while we are pinned): redo the
  // write by copy-on-write.
  *done = !conflicted;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// The tail claim and appends in place
//
// The bytes past the end of file in the tail block (the block holding the
// size, when the size is not block-aligned) are read by nobody: reads stop
// at the size, and copy-on-write copies only the bytes below it. An append
// at the size therefore writes its first bytes there in place and commits
// only the size change (AppendInPlace): no copy of the block, no new block.
// Two such appenders would write the same bytes, so a thread must hold the
// tail claim (LogWords::tail_claim) to write past the end of file in
// place; the claim is never waited for by an appender (it copies on write
// instead), and a dead owner's claim is taken over.
//
// Those bytes may therefore hold an uncommitted append (in flight, or cut
// short by a crash), or whatever a block written by copy on write held
// before (CopyIntoNewBlocks writes a block only up to the size): they are
// not zero. Operations that raise the size
// over them without rewriting the tail block (a growing truncate or
// fallocate, a write that starts past the tail block) take the claim,
// waiting for it, and zero them first (ZeroTailForGap).

Status File::CommittedSince(ThreadCtx* c, const LogPos& p, bool* any,
                            FunctionRef<bool(const Effect&)> which) {
  *any = false;
  LogPos q = p;
  return ScanCommitted(access_, &q, &c->scratch, [&](const Effect& e) {
    *any = !which || which(e);
    return !*any;
  });
}

void File::ClaimTail(ThreadCtx* c) {
  for (uint32_t spins = 0; !TryClaimTail(c); ++spins) {
    if (spins < 64)
      _mm_pause();
    else
      sched_yield();
  }
}

// Before an operation commits a size above the snapshot's size S without
// rewriting the tail block: with the claim held (kept until the caller
// releases it), and the snapshot still current, zero the bytes past S in
// the tail block. *stale: something was committed since p; nothing done.
Status File::ZeroTailForGap(ThreadCtx* c, BlockTable* t, const LogPos& p, bool* claimed,
                            bool* stale) {
  *stale = false;
  uint64_t size = t->size();
  uint64_t in_block = size & (kBlockSize - 1);
  uint32_t last = in_block ? t->Get(size >> kBlockShift) : 0;
  // A paired block keeps zeros past the size in its live homes (its first
  // flip zeroed them: a version 5 one under this claim, a version 4 one
  // in the fresh pair's image; every flip keeps them, and no append
  // writes there in place): nothing to zero, and its homes not live are
  // the granule claim holder's to write.
  if (!last || t->shadows().Paired(size >> kBlockShift)) return Status::OK();
  if (!*claimed) {
    ClaimTail(c);
    *claimed = true;
  }
  UPFS_RETURN_IF_ERROR(CommittedSince(c, p, stale));
  if (*stale) return Status::OK();
  UPFS_ASSERT(root_.words->tail_claim.load(std::memory_order_relaxed) == c->tail_claim_id);
  char* a;
  UPFS_RETURN_IF_ERROR(access_.Addr(last, &a));
  if (ZeroPastSize(a, in_block)) pm::Fence();
  return Status::OK();
}

// Appends up to this long are copied with ordinary stores (see below;
// measured at 100 bytes only, the bound is a judgement).
constexpr uint64_t kShortAppendBytes = 256;

// The tail block's part of an append in place: a short append is a line
// or two written in parts, into a line the last append wrote: ordinary
// stores and a flush cost less there than non-temporal ones (append-100
// 1.80-1.83M -> 1.89-1.92M per second, three alternations of upfs bench
// with both), as for the pool's records (docs/design.md, "The namespace
// log"). A checked append's stores are written back with its entry.
void File::StoreTailBytes(const TailAppend& a, const void* buf) {
  char* to = a.tail + a.in_block;
  if (a.checked)
    pm::StoreBytes(to, buf, a.first);
  else if (a.first <= kShortAppendBytes)
    pm::CopyFlush(to, buf, a.first);
  else
    pm::CopyNT(to, buf, a.first);
}

// The entry must touch the tail block (a copy-on-write writer that
// composed it from the older size conflicts with it, instead of
// committing zeros over the appended bytes). An append that stays in the
// tail block is one kGrowTail word, which touches that block and raises
// the size (the data must be durable before its CAS: one fence, one
// commit, nothing to decode), or a checked one, whose bytes are written
// back with it. Anything longer is a payload whose first run keeps the
// tail block's mapping, and whose commit fences before the payload can
// count. *entry stays 0 for a payload.
Status File::BuildAppendEntry(ThreadCtx* c, const TailAppend& a, uint64_t* entry) {
  *entry = 0;
  if (a.checked) {
    // The checksum of the bytes as stored (the caller's buffer may change
    // under us; the block's bytes past the size are ours under the claim).
    const char* stored = a.tail + a.in_block;
    c->pending.entry_word1 = EncodeGrowTailChecked1(a.last, Crc32c(stored, a.first));
    c->pending.bytes = stored;
    c->pending.bytes_len = a.first;
    *entry = EncodeGrowTailChecked0(a.end, uint32_t(a.in_block));
    return Status::OK();
  }
  if (a.nb() == 0) {
    pm::Fence();
    *entry = EncodeGrowTail(a.end);
    return Status::OK();
  }
  c->runs.insert(c->runs.begin(), Run{kKeepBlock, 1});
  Status st = writer_.BuildPayload(&c->blocks, &c->pending, uint32_t(a.vt), c->runs, Effect::kMax, a.end);
  c->runs.erase(c->runs.begin());  // only the new blocks are ours to free
  return st;
}

Status File::AppendInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                           bool append, uint64_t* at, bool* done) {
  *done = false;
  LogPos p = t->cursor();
  TailAppend a;
  a.size = t->size();
  a.in_block = a.size & (kBlockSize - 1);
  if ((!append && off != a.size) || a.in_block == 0) return Status::OK();
  a.end = a.size + n;
  if (a.end > kMaxFileSize || a.end < a.size) return Status::OK();  // WriteOnce reports it
  a.vt = a.size >> kBlockShift;
  a.last = t->Get(a.vt);
  // A paired tail block holds some granules in its shadow: copy on write
  // (which ends the pairing) rather than append beside them.
  if (!a.last || t->shadows().Paired(a.vt) || !TryClaimTail(c)) return Status::OK();
  ClaimGuard claim{this, c, true};
  // Under the claim no other in-place append can commit; an append that
  // committed before we took it would be overwritten: the snapshot must
  // still be current.
  bool stale = false;
  UPFS_RETURN_IF_ERROR(CommittedSince(c, p, &stale));
  if (stale) return Status::OK();

  UPFS_RETURN_IF_ERROR(access_.Addr(a.last, &a.tail));
  a.first = std::min<uint64_t>(n, kBlockSize - a.in_block);
  // An append that stays in the tail block of a strict file commits in one
  // persisted round: its bytes are stored and written back with its entry
  // after the CAS, which carries their checksum (docs/design.md, "Checked
  // appends"). Sync-mode files overwrite in place, which would make the
  // checksum of an earlier append fail after a crash: they keep two rounds.
  a.checked = a.nb() == 0 && root_.checked_appends && root_.consistency == Consistency::kStrict;
  // Past the end of file in place: only under the tail claim.
  UPFS_ASSERT(root_.words->tail_claim.load(std::memory_order_relaxed) == c->tail_claim_id);
  StoreTailBytes(a, buf);
  // What does not fit goes to new blocks, as a copy-on-write write would.
  c->runs.clear();
  UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &c->runs);
  if (a.nb()) {
    c->old.assign(a.nb(), 0);
    AimAllocation(&c->blocks, *t, a.vb0(), a.size);
    UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, a.nb(), &c->runs));
    for (uint64_t i = 0; i < a.nb(); ++i) c->old[i] = t->Get(a.vb0() + i);
    UPFS_RETURN_IF_ERROR(CopyIntoNewBlocks(c, *t, static_cast<const char*>(buf) + a.first, n - a.first,
                                           a.vb0() << kBlockShift, a.size, a.vb0()));
  }
  uint64_t entry;
  UPFS_RETURN_IF_ERROR(BuildAppendEntry(c, a, &entry));
  bool conflicted = false;
  Status st = writer_.Commit(
      &c->blocks, &c->scratch, &p, entry, c->pending,
      [&](const Effect& e) { return e.ChangesSize() || e.TouchesBlocks(a.vt, std::max(a.vb1(), a.vt + 1)); },
      &conflicted);
  c->pending.entry_word1 = 0;  // the thread's next commit is not one
  c->pending.bytes = nullptr;
  c->pending.bytes_len = 0;
  UPFS_RETURN_IF_ERROR(st);
  if (conflicted) return Status::OK();
  taken.Committed();
  if (a.nb()) {
    ReleaseDisplaced(c, c->old.data(), a.nb());
  } else {
    // Applied by its committer where it can be, with the effect
    // DecodeEntry gives its entry: the next call's catch-up decoded it,
    // checked it against the table and applied it (CatchUp and
    // DecodeEntry were 12% of an append-100 loop's samples).
    // CheckGrowTail's conditions hold: the append found this size and tail
    // block under the claim, and the table stands right before its entry.
    // Its effect (Effect::SetGrowTail) only raises the size: set
    // directly, not through an Effect and BlockTable::Apply.
    ApplyOwnLast(t, p, a.checked ? kGrowTailCheckedSlots : 1, [&] {
      t->RaiseSize(a.end);
      return true;
    });
  }
  *at = a.size;
  *done = true;
  return Status::OK();
}

// Where a new chunk should start, if the write needs one: right after the
// block that holds the file's bytes just before the write (a sequential
// writer's file stays contiguous across chunks and opens), and how big the
// file is (docs/design.md, "Allocation").
void File::AimAllocation(ThreadBlocks* b, const BlockTable& t, uint64_t vb0, uint64_t size) {
  b->file_blocks = CeilBlocks(size);
  const uint32_t before = vb0 ? t.Get(vb0 - 1) : 0;
  b->prefer = before && before != kKeepBlock ? uint64_t(before) + 1 : 0;
}

Status File::WriteOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                       bool append, uint64_t* at, bool* conflicted) {
  LogPos p = t->cursor();
  uint64_t size = t->size();
  if (append) off = size;
  uint64_t end = off + n;
  if (end > kMaxFileSize || end < off) return Status::Error(EFBIG, "write past the upfs limit");
  // A write starting past the tail block exposes the bytes past the size.
  ClaimGuard claim{this, c};
  const bool past_tail = (off >> kBlockShift) > (size >> kBlockShift);
  if (past_tail) {
    bool stale = false;
    UPFS_RETURN_IF_ERROR(ZeroTailForGap(c, t, p, &claim.held, &stale));
    if (stale) {
      *conflicted = true;
      return Status::OK();
    }
  }
  uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end), nb = vb1 - vb0;
  c->runs.clear();
  UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &c->runs);
  AimAllocation(&c->blocks, *t, vb0, size);
  UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, nb, &c->runs));
  c->old.resize(nb);
  c->old_shadow.resize(nb);
  for (uint64_t i = 0; i < nb; ++i) {
    c->old[i] = t->Get(vb0 + i);
    c->old_shadow[i] = t->ShadowOf(vb0 + i, c->old[i]);
  }
  UPFS_RETURN_IF_ERROR(CopyIntoNewBlocks(c, *t, buf, n, off, size, vb0));
  pm::Fence();
  uint64_t entry = 0;
  if (c->runs.size() == 1 && FitsInline(vb0, c->runs[0].lblock, nb)) {
    if (end <= size)
      entry = EncodeInline({uint32_t(vb0), c->runs[0].lblock, uint32_t(nb), false});
    else if ((end & (kBlockSize - 1)) == 0)
      entry = EncodeInline({uint32_t(vb0), c->runs[0].lblock, uint32_t(nb), true});
  }
  if (!entry)
    UPFS_RETURN_IF_ERROR(writer_.BuildPayload(&c->blocks, &c->pending, uint32_t(vb0), c->runs,
                                              Effect::kMax, end));
  const bool head_edge = off & (kBlockSize - 1);
  const bool tail_edge = end & (kBlockSize - 1);
  // The block that will hold the size is written only up to it
  // (CopyIntoNewBlocks): if a size raised past it was committed since the
  // snapshot, the rest of it would be read.
  const uint64_t new_size = std::max(size, end);
  const uint64_t size_block = new_size >> kBlockShift;
  const bool written_to_size =
      (new_size & (kBlockSize - 1)) && size_block >= vb0 && size_block < vb1;
  uint32_t* old = c->old.data();
  uint32_t* old_shadow = c->old_shadow.data();
  UPFS_RETURN_IF_ERROR(writer_.Commit(
      &c->blocks, &c->scratch, &p, entry, c->pending,
      [&](const Effect& e) {
        if (e.size_op == Effect::kSet) return true;
        if (append && e.ChangesSize()) return true;
        if (written_to_size && e.MayRaiseSizeAbove(new_size)) return true;
        if (past_tail && PutsBytesPastSize(e, size)) return true;
        if (head_edge && e.TouchesBlocks(vb0, vb0 + 1)) return true;
        if (tail_edge && e.TouchesBlocks(vb1 - 1, vb1)) return true;
        Overlay(e, vb0, nb, old, old_shadow);
        return false;
      },
      conflicted));
  if (*conflicted) return Status::OK();
  taken.Committed();
  ReleaseDisplaced(c, c->old.data(), nb);
  ReleaseDisplaced(c, c->old_shadow.data(), nb);
  // An inline entry is applied by its committer where it can be, with the
  // effect a catch-up would decode from it (a payload's is left to the
  // catch-up): the catch-up's scan and decoding are saved, the apply only
  // moves here (docs/design.md, "Write (copy-on-write)").
  if (entry)
    ApplyOwnLast(t, p, 1, [&] {
      return ApplyOwnEffect(t, [&](Effect* e) { InlineEffect(DecodeInline(entry), e); });
    });
  *at = off;
  return Status::OK();
}

Status File::Write(const void* buf, size_t n, uint64_t off, bool append, uint64_t* at) {
  if (read_only()) return ReadOnlyRefusal();
  Operation op;
  UPFS_RETURN_IF_ERROR(Begin(&op));
  ThreadCtx* c = op.c;
  BlockTable* t = op.t;
  if (n == 0) {
    *at = append ? t->size() : off;
    return Status::OK();
  }
  bool in_place = root_.consistency == Consistency::kSync && !append;
  // Small strict writes flip granules (format version 4 and 5) or, in older
  // files, become patches.
  const bool small = root_.consistency == Consistency::kStrict && !append;
  const bool flip = small && root_.granules;
  const bool patch = small && root_.patches && !root_.granules;
  for (;;) {
    bool appended = false;
    UPFS_RETURN_IF_ERROR(AppendInPlace(c, t, buf, n, off, append, at, &appended));
    if (appended) break;
    if (flip || patch) {
      bool done = false, conflicted = false;
      UPFS_RETURN_IF_ERROR(flip ? FlipOnce(c, t, buf, n, off, &done, &conflicted)
                                : PatchOnce(c, t, buf, n, off, &done, &conflicted));
      if (done) {
        *at = off;
        break;
      }
      if (conflicted) {
        UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
        continue;
      }
    }
    if (in_place) {
      bool done = false;
      UPFS_RETURN_IF_ERROR(WriteInPlace(c, t, buf, n, off, &done));
      if (done) {
        *at = off;
        break;
      }
      in_place = false;
      UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
    }
    bool conflicted = false;
    UPFS_RETURN_IF_ERROR(WriteOnce(c, t, buf, n, off, append, at, &conflicted));
    if (!conflicted) break;
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  }
  TouchMtime();
  MaybeCollectGarbage(c);
  return Status::OK();
}

}  // namespace upfs
