// File: sub-block writes as granule flips (docs/design.md, "Granule
// flips"; MGSP's two homes per granule): a block that takes small writes
// lives in two blocks, its home and a shadow, each 128-byte granule in one
// of them, and a write puts its granules into the homes not live and
// commits the new mask. What every reader of a block's bytes needs of
// pairs is here too.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/file.h"
#include "engine/file_internal.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/optimistic_copy.h"

namespace upfs {

using namespace format;

bool File::CopyGranules(const BlockTable& t, uint64_t v, uint32_t l, uint64_t lo, uint64_t hi,
                        char* out) const {
  uint32_t mask = 0, s = 0;
  if (!t.shadows().Get(v, &mask, &s) || mask == 0) return false;
  const char* shadow = access_.AddrUnchecked(s);
  mask &= GranuleRange(uint32_t(lo), uint32_t(hi));
  ForEachGranuleRun(mask, [&](uint32_t first, uint32_t end) {
    const uint64_t a = std::max<uint64_t>(lo, first * kGranuleSize);
    const uint64_t b = std::min<uint64_t>(hi, end * kGranuleSize);
    OptimisticCopy(out + (a - lo), shadow + a, b - a);
  });
  return mask != 0;
}

bool File::CopyBlockBytes(const BlockTable& t, uint64_t v, uint32_t l, uint64_t lo, uint64_t hi,
                          char* out) const {
  OptimisticCopy(out, access_.AddrUnchecked(l) + lo, hi - lo);
  if (t.patches().any()) CopyPatches(t, v, lo, hi, out);
  return t.shadows().any() && CopyGranules(t, v, l, lo, hi, out);
}

bool File::TryClaim(std::atomic<uint64_t>* claim, ThreadCtx* c) {
  uint64_t cur = 0;
  if (!claim->compare_exchange_strong(cur, c->tail_claim_id)) {
    const uint64_t slot = (cur & 0xffffffffu) - 1;
    const uint32_t pid = uint32_t(cur >> 32);
    EpochDomain* d = source_->epochs();
    const bool dead = slot >= kMaxSlots || !d->SlotOwnerAlive(uint32_t(slot)) ||
                      d->slot(uint32_t(slot))->owner_pid.load(std::memory_order_relaxed) != pid;
    if (!dead || !claim->compare_exchange_strong(cur, c->tail_claim_id)) return false;
  }
  // Pairs with the fence in ReleaseDisplaced: either a committer that
  // displaces a block the claimant will write sees the claim (and retires
  // the block through EBR instead of reusing it at once), or the
  // claimant's check of the log sees that commit (and writes nothing).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return true;
}

// A granule claim is held for about a microsecond (a flip's granules and
// commit, the GC's fold home), and the GC folds claim after claim: a
// writer that gave up at once copied 4 KiB on write for about 1% of
// random 128-byte overwrites of a 1 GiB file. So 64 pauses before giving
// up; never longer, as the holder may be descheduled or dead (TryClaim
// takes a dead owner's over).
bool File::ClaimSoon(std::atomic<uint64_t>* claim, ThreadCtx* c) {
  for (int i = 0; i < 64; ++i) {
    _mm_pause();
    if (claim->load(std::memory_order_relaxed) == 0 && TryClaim(claim, c)) return true;
  }
  return false;
}

void File::ReleaseClaim(std::atomic<uint64_t>* claim, ThreadCtx* c) {
  uint64_t mine = c->tail_claim_id;
  claim->compare_exchange_strong(mine, 0, std::memory_order_release);
}

// Two adjacent free blocks from the thread's chunk (a second try when the
// first straddled the chunk's end). Unlike AllocContiguous, never grows
// the space to find them: where free space is in single blocks (a file
// that appends and overwrites, such as a SQLite WAL), the write copies on
// write instead (growing the file for every pair made a WAL grow without
// bound).
bool File::AllocPair(ThreadCtx* c, std::vector<Run>* out) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    out->clear();
    if (!source_->Alloc(&c->blocks, 2, out).ok()) {
      source_->FreeRuns(&c->blocks, *out);
      out->clear();
      return false;
    }
    if (out->size() == 1) return true;
    source_->FreeRuns(&c->blocks, *out);
  }
  out->clear();
  return false;
}

namespace {

// Granule g of the block as it will read after the write: the live bytes
// (`live`, the whole block's address for granule g's home, or a composed
// image), the written ones over them, zeros from `valid` (the size's
// offset in the block, kBlockSize if past it) on.
void ComposeGranule(const char* live, const char* in, uint32_t lo, uint32_t hi, uint32_t valid,
                    uint32_t g, char* out) {
  const uint32_t gs = g * kGranuleSize, ge = gs + kGranuleSize;
  OptimisticCopy(out, live + gs, kGranuleSize);
  const uint32_t a = std::max(lo, gs), b = std::min(hi, ge);
  if (a < b) std::memcpy(out + (a - gs), in + (a - lo), b - a);
  if (valid < ge) std::memset(out + (std::max(valid, gs) - gs), 0, ge - std::max(valid, gs));
}

// Each granule of `granules` (a write of [lo, hi) of the block, bytes
// `in`) goes to its home not live under `mask`. A granule the write covers
// only in part, or that reaches past `valid`, is completed from its live
// home first; whole granules go straight from `in`, one copy for each run
// of them bound for the same home (a copy per granule: random 1 KiB
// overwrites of a paired 64 MiB file took a median 1,140-1,342 ns a
// write, against 838-1,114 with runs; docs/design.md, "A toggle").
void WriteGranules(char* const home[2], uint32_t mask, uint32_t granules, const char* in, uint32_t lo,
                   uint32_t hi, uint32_t valid, char* img) {
  const uint32_t a = (lo + kGranuleSize - 1) / kGranuleSize * kGranuleSize;
  const uint32_t b = std::min(hi, valid) / kGranuleSize * kGranuleSize;
  const uint32_t whole = a < b ? GranuleRange(a, b) : 0;
  for (uint32_t rest = granules & ~whole; rest != 0; rest &= rest - 1) {
    const uint32_t g = uint32_t(__builtin_ctz(rest));
    const uint32_t live = mask >> g & 1;
    ComposeGranule(home[live], in, lo, hi, valid, g, img);
    pm::CopyNT(home[live ^ 1] + g * kGranuleSize, img, kGranuleSize);
  }
  for (const uint32_t live : {0u, 1u}) {
    ForEachGranuleRun(whole & (live ? mask : ~mask), [&](uint32_t first, uint32_t end) {
      pm::CopyNT(home[live ^ 1] + first * kGranuleSize, in + (first * kGranuleSize - lo),
                 (end - first) * kGranuleSize);
    });
  }
}

}  // namespace

Status File::FlipOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                      bool* done, bool* conflicted) {
  *done = false;
  *conflicted = false;
  LogPos p = t->cursor();
  const uint64_t size = t->size();
  const uint64_t v = off >> kBlockShift;
  const uint32_t lo = uint32_t(off & (kBlockSize - 1));
  if (n >= kBlockSize || lo + n > kBlockSize || off + n > size || v > kGranuleMaxVblock)
    return Status::OK();
  const uint32_t hi = lo + uint32_t(n);
  // Two lookups of a random block, each a cache miss in a big file: the
  // pairing's starts before the mapping's, not after.
  t->shadows().Prefetch(v);
  const uint32_t l = t->Get(v);
  if (l == 0 || t->patches().Count(v)) return Status::OK();
  // Two writers must not write the same homes at once: the claim of the
  // block's granules, waited for only briefly (then the write copies on
  // write instead).
  std::atomic<uint64_t>* claim = &root_.words->granule_claim[v % LogWords::kGranuleClaims];
  if (!TryClaim(claim, c) && !ClaimSoon(claim, c)) return Status::OK();
  ClaimGuard release{this, c, true, claim};
  // The homes not live are those of the snapshot only if nothing touching
  // the block was committed since: a writer that held the claim before us
  // made some of them live.
  const uint32_t valid = uint32_t(std::min<uint64_t>(size - (v << kBlockShift), kBlockSize));
  uint32_t mask = 0, shadow = 0;
  const bool paired = t->shadows().Get(v, &mask, &shadow);
  // A first flip of a version 4 log copies the block into a fresh pair.
  const bool copy_to_pair = !paired && !root_.anywhere_shadows;
  // The first anywhere flip of the tail block keeps the block, whose
  // bytes past the size may hold anything (an append's, a copy on
  // write's leftovers): it zeroes them, which needs the tail claim (an
  // appender may be writing there), tried once: if held, copy on write.
  ClaimGuard tail{this, c};
  const bool zero_past_size = !paired && !copy_to_pair && valid < kBlockSize;
  if (zero_past_size && !(tail.held = TryClaimTail(c))) return Status::OK();
  UPFS_RETURN_IF_ERROR(CommittedSince(c, p, conflicted, [&](const Effect& e) { return e.TouchesBlocks(v, v + 1); }));
  if (*conflicted) return Status::OK();
  // Homes are ours to write only under the claim.
  UPFS_ASSERT(claim->load(std::memory_order_relaxed) == c->tail_claim_id);
  if (zero_past_size) ZeroPastSize(access_.AddrUnchecked(l), valid);
  const char* in = static_cast<const char*>(buf);
  std::vector<Run>& fresh = c->flip_fresh;
  fresh.clear();
  UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &fresh);
  uint32_t named, granules;
  bool staged;
  UPFS_RETURN_IF_ERROR(WriteFlipHomes(c, *t, FlipTarget{v, l, lo, hi, valid, mask, shadow, paired, copy_to_pair},
                                      in, &fresh, &named, &granules, &staged));
  if (!staged) return Status::OK();  // copy on write
  // The granules are durable before the entry that makes them live can be.
  pm::Fence();
  const bool anywhere = !paired && !copy_to_pair;
  UPFS_RETURN_IF_ERROR(CommitFlip(c, &p, v, named, EncodeGranuleFlip1(granules, !paired, anywhere), conflicted));
  if (*conflicted) return Status::OK();
  taken.Committed();
  // Applied by its committer where it can be: an ApplyFlip and its
  // decoding in the next catch-up were 8% of a toggle's samples.
  if (copy_to_pair) {
    uint32_t old = l;
    ReleaseDisplaced(c, &old, 1);
    ApplyOwnLast(t, p, kGranuleFlipSlots, [&] {
      return ApplyOwnEffect(t, [&](Effect* e) { e->SetFlip(uint32_t(v), named, granules, true, false); });
    });
  } else {
    // Not through an Effect and BlockTable::Apply, which would decode the
    // entry's meaning again and load the block's mapping and pairing a
    // second time: in random 128-byte overwrites of a 1 GiB file those
    // two loads missed the cache again and took 9% of the process's
    // samples. Nothing touching the block was committed since the
    // snapshot (the commit's scan), so its pairing is still as seen.
    ApplyOwnLast(t, p, kGranuleFlipSlots, [&] {
      t->ApplyOwnFlip(v, l, paired, paired ? shadow : named, paired ? mask ^ granules : granules);
      return true;
    });
  }
  // A new pair holds a second block until a fold: one when the file goes
  // quiet, if no GC comes first.
  if (!paired) AskForQuietRun();
  *done = true;
  return Status::OK();
}

Status File::WriteFlipHomes(ThreadCtx* c, const BlockTable& t, const FlipTarget& f, const char* in,
                            std::vector<Run>* fresh, uint32_t* named, uint32_t* granules, bool* staged) {
  *staged = false;
  *named = f.l;  // the block the entry names (format.h)
  *granules = 0;
  alignas(64) char img[kBlockSize];
  if (f.copy_to_pair) {
    // The block with the write, copied into a fresh pair whose shadow
    // holds nothing live yet (mask 0). Later writes to it copy only their
    // granules.
    if (!AllocPair(c, fresh)) return Status::OK();
    *named = (*fresh)[0].lblock;
    ComposeBlock(t, f.v, f.l, (f.v << kBlockShift) + f.valid, img);
    std::memcpy(img + f.lo, in, f.hi - f.lo);  // below valid: a flip stays inside the size
    UPFS_RETURN_IF_ERROR(access_.CheckRange(*named, 2, "granule pair"));  // maps both
    pm::CopyNT(access_.AddrUnchecked(*named), img, kBlockSize);
    *staged = true;
    return Status::OK();
  }
  uint32_t shadow = f.shadow;
  if (!f.paired) {
    // The block's first flip: a shadow from anywhere, holding nothing
    // live yet (mask 0); the block stays where it is.
    if (!source_->Alloc(&c->blocks, 1, fresh).ok()) {
      source_->FreeRuns(&c->blocks, *fresh);
      fresh->clear();
      return Status::OK();  // copy on write, which says why if it fails too
    }
    shadow = *named = (*fresh)[0].lblock;
    UPFS_RETURN_IF_ERROR(access_.CheckRange(shadow, 1, "granule shadow"));  // maps it
  }
  *granules = GranuleRange(f.lo, f.hi);
  char* const home[2] = {access_.AddrUnchecked(f.l), access_.AddrUnchecked(shadow)};
  WriteGranules(home, f.mask, *granules, in, f.lo, f.hi, f.valid, img);
  *staged = true;
  return Status::OK();
}

Status File::CommitFlip(ThreadCtx* c, LogPos* p, uint64_t v, uint32_t named, uint64_t word1,
                        bool* conflicted) {
  c->pending.entry_word1 = word1;
  Status st = writer_.Commit(&c->blocks, &c->scratch, p, EncodeGranuleFlip0(uint32_t(v), named),
                             c->pending, [&](const Effect& e) { return e.TouchesBlocks(v, v + 1); },
                             conflicted);
  c->pending.entry_word1 = 0;
  return st;
}

}  // namespace upfs
