#include "engine/block_source.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <thread>

namespace upfs {

using format::kBlockShift;
using format::Run;

namespace {
constexpr size_t kMaxLocalFree = 4096;
constexpr uint64_t kChunkBlocks = 64;
// Spaces smaller than this (8 MiB, four 2 MiB extents) do not grow ahead.
constexpr uint64_t kGrowAheadFromBlocks = (uint64_t{8} << 20) >> kBlockShift;
}  // namespace

bool BlockSource::TryClaim(uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count) {
  std::atomic<uint64_t>* bm = bm_->bits();
  uint64_t words = (cap + 63) / 64;
  if (words == 0) return false;
  uint64_t hint = bm_->words()->alloc_hint.load(std::memory_order_relaxed) % words;
  for (uint64_t i = 0; i < words; ++i) {
    uint64_t w = (hint + i) % words;
    uint64_t base = w * 64;
    // Bits at or past the capacity are not blocks: treat them as taken.
    uint64_t valid = cap - base >= 64 ? ~uint64_t{0} : (uint64_t{1} << (cap - base)) - 1;
    uint64_t v = bm[w].load(std::memory_order_relaxed);
    uint64_t freebits = ~v & valid;
    if (freebits == 0) continue;
    if (v == 0 && valid == ~uint64_t{0}) {
      if (!bm[w].compare_exchange_strong(v, ~uint64_t{0})) {
        --i;  // look at the same word again
        continue;
      }
      *first = base;
      *count = 64;
      // Extend with following whole words while more is wanted.
      uint64_t nw = w + 1;
      while (*count < want && nw < words && cap - nw * 64 >= 64) {
        uint64_t z = 0;
        if (!bm[nw].compare_exchange_strong(z, ~uint64_t{0})) break;
        *count += 64;
        ++nw;
      }
      bm_->words()->alloc_hint.store(nw % words, std::memory_order_relaxed);
      return true;
    }
    // A run of free bits inside a partly used word.
    int lo = std::countr_zero(freebits);
    uint64_t shifted = freebits >> lo;
    int len = shifted == ~uint64_t{0} ? 64 - lo : std::countr_one(shifted);
    uint64_t take = std::min<uint64_t>(uint64_t(len), want);
    uint64_t mask = (take == 64 ? ~uint64_t{0} : ((uint64_t{1} << take) - 1)) << lo;
    if (!bm[w].compare_exchange_strong(v, v | mask)) {
      --i;
      continue;
    }
    *first = base + uint64_t(lo);
    *count = take;
    bm_->words()->alloc_hint.store(w, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool BlockSource::FreeAtLeast(uint64_t cap, uint64_t n) const {
  std::atomic<uint64_t>* bm = bm_->bits();
  uint64_t free = 0;
  for (uint64_t w = 0; w < cap / 64 && free < n; ++w)
    free += uint64_t(std::popcount(~bm[w].load(std::memory_order_relaxed)));
  return free >= n;
}

Status BlockSource::ClaimChunk(ThreadBlocks* t, uint64_t want) {
  want = std::max(want, kChunkBlocks);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    uint64_t cap = bm_->words()->capacity_blocks.load(std::memory_order_acquire);
    uint64_t first, count;
    if (TryClaim(cap, want, &first, &count)) {
      if (t->chunk_next < t->chunk_end) ReturnRange(t->chunk_next, t->chunk_end - t->chunk_next);
      t->chunk_next = first;
      t->chunk_end = first + count;
      // Close to the end of a file of some size: grow it in the background
      // now, so that appends do not wait for the kernel later. Small files
      // grow on demand, an extent at a time: growing ahead would multiply
      // a journal's size and start a thread for it. The headroom bounds
      // what a growing file holds beyond its data: a quarter made RocksDB's
      // tables and logs half again their size.
      // Not while a headroom's worth of blocks is free behind the hint
      // (freed by overwrites, truncates or, in a pool, deleted files): the
      // hint wraps round to them instead of the space growing for ever.
      uint64_t headroom = cap / 8;
      if (cap >= kGrowAheadFromBlocks && first + count + headroom > cap &&
          !FreeAtLeast(cap, headroom))
        // The callback runs on the space's worker, which never outlives the
        // space and the bitmap (their owner joins the worker first).
        space_->GrowAhead((cap + 2 * headroom) << kBlockShift,
                          [space = space_, bm = bm_] { PublishCapacity(space, bm); });
      return Status::OK();
    }
    if (space_->GrowInFlight()) {
      // The background worker is already growing the file: wait for it
      // rather than doing the same kernel work twice.
      // Sleep, not spin: the kernel work it waits for (page allocation,
      // huge-page collapse) needs this CPU for its per-CPU drains.
      while (space_->GrowInFlight() &&
             bm_->words()->capacity_blocks.load(std::memory_order_acquire) == cap)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    // Full: grow the space now and publish the new capacity.
    UPFS_RETURN_IF_ERROR(EnsureCapacity(cap + want));
  }
  return Status::Error(ENOSPC, "no free blocks after growing the file");
}

Status BlockSource::EnsureCapacity(uint64_t blocks) {
  if (blocks > format::kMaxBlocks - 1) return Status::Error(EFBIG, "file would exceed upfs limit");
  if (bm_->words()->capacity_blocks.load(std::memory_order_acquire) >= blocks) return Status::OK();
  UPFS_RETURN_IF_ERROR(space_->Grow(blocks << kBlockShift));
  PublishCapacity(space_, bm_);
  return Status::OK();
}

void BlockSource::PublishCapacity(const BlockSpace* space, AllocationBitmap* bm) {
  // Block 0xffffffff would read as kKeepBlock in a payload run: never hand it out.
  bm->RaiseCapacity(std::min<uint64_t>(space->capacity() >> kBlockShift, format::kMaxBlocks - 1));
}

Status BlockSource::Alloc(ThreadBlocks* t, uint64_t n, std::vector<Run>* runs) {
  while (n > 0) {
    if (t->chunk_next == t->chunk_end) {
      if (n == 1 && !t->free.empty()) {
        runs->push_back(Run{t->free.back(), 1});
        t->free.pop_back();
        return Status::OK();
      }
      UPFS_RETURN_IF_ERROR(ClaimChunk(t, n));
    }
    uint64_t take = std::min(n, t->chunk_end - t->chunk_next);
    if (!runs->empty() && uint64_t(runs->back().lblock) + runs->back().count == t->chunk_next &&
        runs->back().lblock != 0) {
      runs->back().count += uint32_t(take);
    } else {
      runs->push_back(Run{uint32_t(t->chunk_next), uint32_t(take)});
    }
    t->chunk_next += take;
    n -= take;
  }
  return Status::OK();
}

Status BlockSource::AllocOne(ThreadBlocks* t, uint32_t* l) {
  if (!t->free.empty()) {
    *l = t->free.back();
    t->free.pop_back();
    return Status::OK();
  }
  std::vector<Run> r;
  UPFS_RETURN_IF_ERROR(Alloc(t, 1, &r));
  *l = r[0].lblock;
  return Status::OK();
}

void BlockSource::Free(ThreadBlocks* t, uint32_t l, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) t->free.push_back(l + i);
  if (t->free.size() > kMaxLocalFree) {
    size_t keep = kMaxLocalFree / 2;
    for (size_t i = keep; i < t->free.size(); ++i) bm_->Clear(t->free[i]);
    t->free.resize(keep);
  }
}

void BlockSource::ReturnRange(uint64_t l, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) bm_->Clear(l + i);
}

void BlockSource::DropChunk(ThreadBlocks* t) {
  if (t->chunk_next < t->chunk_end) ReturnRange(t->chunk_next, t->chunk_end - t->chunk_next);
  t->chunk_next = t->chunk_end = 0;
}

void BlockSource::Retire(ThreadBlocks* t, uint32_t lblock, uint32_t count) {
  uint64_t e = epochs_->epoch().load(std::memory_order_seq_cst);
  t->limbo.push_back({e, lblock, count});
}

void BlockSource::DrainLimbo(ThreadBlocks* t, bool force) {
  if (t->limbo.empty()) return;
  uint64_t e = epochs_->epoch().load(std::memory_order_acquire);
  // With force, aim at everything (the newest retirement), not only the
  // oldest: a close or a detach leaves nothing behind that it could free.
  const uint64_t want = (force ? t->limbo.back().epoch : t->limbo.front().epoch) + 2;
  for (int i = 0; i < (force ? 3 : 1) && want > e; ++i) e = epochs_->TryAdvanceEpoch();
  size_t kept = 0;
  for (const auto& r : t->limbo) {
    if (r.epoch + 2 <= e)
      Free(t, r.lblock, r.count);
    else
      t->limbo[kept++] = r;
  }
  t->limbo.resize(kept);
}

void BlockSource::ReturnAll(ThreadBlocks* t) {
  for (uint32_t l : t->free) bm_->Clear(l);
  t->free.clear();
  if (t->chunk_next < t->chunk_end) ReturnRange(t->chunk_next, t->chunk_end - t->chunk_next);
  t->chunk_next = t->chunk_end = 0;
}

}  // namespace upfs
