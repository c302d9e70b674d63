#include "engine/block_source.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <thread>

#include "medium/provide.h"

namespace upfs {

using format::kBlockShift;
using format::Run;

namespace {
constexpr size_t kMaxLocalFree = 4096;
constexpr uint64_t kChunkBlocks = kWordBlocks;
// Spaces smaller than this (8 MiB, four 2 MiB extents) do not grow ahead.
constexpr uint64_t kGrowAheadFromBlocks = (uint64_t{8} << 20) >> kBlockShift;
}  // namespace

namespace {
uint64_t Mask(uint64_t lo, uint64_t n) { return (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1) << lo; }
// The bits of word w that are blocks (below the capacity).
uint64_t ValidBits(uint64_t cap, uint64_t w) {
  const uint64_t base = w * 64;
  return cap <= base ? 0 : cap - base >= 64 ? ~uint64_t{0} : (uint64_t{1} << (cap - base)) - 1;
}
}  // namespace

void BlockSource::ClaimFrom(uint64_t cap, uint64_t at, uint64_t want, uint64_t* count) {
  *count = 0;
  if (at < reserved_ || at >= cap) return;
  const uint64_t w = at / 64, lo = at % 64;
  uint64_t v = bm_->bits()[w].load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t freebits = (~v & ValidBits(cap, w)) >> lo;
    if ((freebits & 1) == 0) return;
    const uint64_t len = std::min<uint64_t>(std::min<uint64_t>(uint64_t(std::countr_one(freebits)), 64 - lo), want);
    if (bm_->ClaimBits(w, v, v | Mask(lo, len))) {
      *count = len;
      break;
    }
  }
  // Reached the word's end: go on over whole free words.
  if (lo + *count == 64 && *count < want) {
    uint64_t more = 0;
    ClaimWholeWords(cap, w + 1, want - *count, &more);
    *count += more;
  }
}

bool BlockSource::ClaimWholeWords(uint64_t cap, uint64_t w, uint64_t want, uint64_t* count) {
  *count = 0;
  for (; *count < want && (w + 1) * 64 <= cap; ++w) {
    uint64_t z = 0;
    if (!bm_->ClaimBits(w, z, ~uint64_t{0})) break;
    *count += 64;
  }
  return *count > 0;
}

bool BlockSource::ClaimPartitions(uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count) {
  const uint64_t parts = cap / kPartitionBlocks;
  BitmapWords* words = bm_->words();
  for (int tries = 0; tries < 64; ++tries) {
    const uint64_t p = bm_->FindEmptyPartition(words->partition_hint.load(std::memory_order_relaxed), parts);
    if (p == AllocationBitmap::kNone) return false;
    const uint64_t w0 = p * kPartitionWords;
    uint64_t got = 0;
    ClaimWholeWords(cap, w0, kPartitionBlocks, &got);
    if (got < kPartitionBlocks) {  // someone took a word of it meanwhile
      if (got) bm_->ClearRange(w0 * 64, got);
      continue;
    }
    // More partitions right after, while more is wanted and they are free.
    uint64_t more = 0;
    if (want > got) ClaimWholeWords(cap, w0 + kPartitionWords, want - got, &more);
    *first = w0 * 64;
    *count = got + more;
    words->partition_hint.store((*first + *count) / kPartitionBlocks, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool BlockSource::TakeWordsAt(uint64_t cap, uint64_t w, uint64_t want, uint64_t* first, uint64_t* count) {
  if (!ClaimWholeWords(cap, w, want, count)) return false;
  *first = w * 64;
  bm_->words()->alloc_hint.store((*first + *count) / 64 % (cap / 64), std::memory_order_relaxed);
  return true;
}

bool BlockSource::ClaimEmptyWords(uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count) {
  const uint64_t whole = cap / 64;
  for (int tries = 0; tries < 64; ++tries) {
    const uint64_t w = bm_->FindEmptyWord(bm_->words()->alloc_hint.load(std::memory_order_relaxed), whole);
    if (w == AllocationBitmap::kNone) return false;
    if (TakeWordsAt(cap, w, want, first, count)) return true;
  }
  return false;
}

uint64_t BlockSource::WordWithRoom(uint64_t cap) const {
  const uint64_t whole = cap / 64;
  const uint64_t w = bm_->FindWordWithRoom(bm_->words()->alloc_hint.load(std::memory_order_relaxed), whole);
  // The last word, when the capacity ends inside it, is looked at last.
  return w == AllocationBitmap::kNone && cap % 64 ? whole : w;
}

bool BlockSource::ClaimRunInWord(uint64_t cap, uint64_t want, bool whole_words, uint64_t* first,
                                 uint64_t* count) {
  const uint64_t whole = cap / 64;
  BitmapWords* bw = bm_->words();
  for (int tries = 0; tries < 64; ++tries) {
    const uint64_t w = WordWithRoom(cap);
    if (w == AllocationBitmap::kNone) return false;
    uint64_t v = bm_->bits()[w].load(std::memory_order_relaxed);
    const uint64_t freebits = ~v & ValidBits(cap, w);
    if (freebits == 0) {
      if (w == whole) return false;
      continue;  // taken meanwhile
    }
    if (whole_words && v == 0 && w < whole) {
      // A free word: taken whole, with the free words after it.
      if (TakeWordsAt(cap, w, want, first, count)) return true;
      continue;
    }
    const int lo = std::countr_zero(freebits);
    const uint64_t take = std::min<uint64_t>(uint64_t(std::countr_one(freebits >> lo)), want);
    if (!bm_->ClaimBits(w, v, v | Mask(uint64_t(lo), take))) continue;
    *first = w * 64 + uint64_t(lo);
    *count = take;
    UPFS_ASSERT(*first >= reserved_ && *first + take <= cap);
    // The hint stays on the word that had room (see ClaimSingle).
    if (whole) bw->alloc_hint.store(w % whole, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool BlockSource::TryClaim(const ThreadBlocks& t, uint64_t cap, uint64_t want, uint64_t* first,
                           uint64_t* count) {
  if (cap == 0) return false;
  // Partitions where the domain holds many files (a pool: its bitmap has
  // summaries); a per-file domain holds one file, contiguous anyway, whose
  // host file should not grow by 2 MiB for a 300 KiB file.
  const bool big = bm_->has_summaries() && (want > kWordBlocks || t.file_blocks >= kWordBlocks);
  // A big file's chunk is whole 2 MiB partitions (huge pages of its own).
  if (big) want = (std::max(want, kPartitionBlocks) + kPartitionBlocks - 1) / kPartitionBlocks * kPartitionBlocks;
  // First the blocks right after the file's (or the chunk's) last one.
  const uint64_t at = t.prefer ? t.prefer : t.chunk_end;
  if (at) {
    // Up to the end of the partition it is in, for a big file.
    const uint64_t ask = big ? std::max<uint64_t>(want, kPartitionBlocks - at % kPartitionBlocks) : want;
    ClaimFrom(cap, at, ask, count);
    if (*count) {
      *first = at;
      return true;
    }
  }
  if (big && ClaimPartitions(cap, want, first, count)) return true;
  // With summaries, a free word before a partly used one (finding one is
  // cheap); without, the first word with room from the hint, as one scan.
  if (bm_->has_summaries() && ClaimEmptyWords(cap, want, first, count)) return true;
  return ClaimRunInWord(cap, want, /*whole_words=*/true, first, count);
}

bool BlockSource::FreeAtLeast(uint64_t cap, uint64_t n) const {
  std::atomic<uint64_t>* bm = bm_->bits();
  uint64_t free = 0;
  // From the first word past the container's header (a pool's is 136
  // words, all taken: scanned, they were a thousand instructions of every
  // pool file's first write, counted by callgrind).
  for (uint64_t w = reserved_ / 64; w < cap / 64 && free < n; ++w)
    free += uint64_t(std::popcount(~bm[w].load(std::memory_order_relaxed)));
  return free >= n;
}

// First fit over the whole bitmap, a run of free bits followed across
// words: linear in the capacity (a 1 GiB pool is 4,096 words), so only for
// what would otherwise grow the space. The container's own blocks are
// taken in the bitmap (every rebuild marks them): the scan starts past
// their whole words only to skip them.
bool BlockSource::ClaimFreeRun(uint64_t cap, uint64_t n, uint64_t* first) {
  if (n == 0 || n > cap) return false;
  std::atomic<uint64_t>* bits = bm_->bits();
  uint64_t start = 0, len = 0;
  for (uint64_t w = reserved_ / 64; w * 64 < cap; ++w) {
    const uint64_t free = ~bits[w].load(std::memory_order_relaxed) & ValidBits(cap, w);
    for (uint64_t b = 0; b < 64;) {
      const uint64_t rest = free >> b;
      if ((rest & 1) == 0) {
        len = 0;
        if (rest == 0) break;
        b += uint64_t(std::countr_zero(rest));
        continue;
      }
      const uint64_t k = std::min<uint64_t>(uint64_t(std::countr_one(rest)), 64 - b);
      if (len == 0) start = w * 64 + b;
      len += k;
      b += k;
      if (len < n) continue;
      if (ClaimRange(start, n)) {
        UPFS_ASSERT(start >= reserved_ && start + n <= cap);
        *first = start;
        return true;
      }
      len = 0;  // taken meanwhile: look on from here
    }
  }
  return false;
}

bool BlockSource::ClaimRange(uint64_t a, uint64_t n) {
  for (uint64_t done = 0; done < n;) {
    const uint64_t at = a + done, w = at / 64, lo = at % 64;
    const uint64_t len = std::min<uint64_t>(64 - lo, n - done), m = Mask(lo, len);
    uint64_t v = bm_->bits()[w].load(std::memory_order_relaxed);
    bool claimed = false;
    while ((v & m) == 0 && !(claimed = bm_->ClaimBits(w, v, v | m))) {
    }
    if (!claimed) {
      if (done) bm_->ClearRange(a, done);
      return false;
    }
    done += len;
  }
  return true;
}

// Taking a chunk for each single block, as a thread without one does
// (AllocOne), left one used block in every 64-block word: after a few
// hundred thousand creates and unlinks in a pool, its log and inode
// blocks had no free run of 83 blocks between them for a checkpoint image
// among 23,730 free blocks (ClaimFreeRun scanned them all). The hint stays
// on the word that has room, so that the next single block joins it.
bool BlockSource::ClaimSingle(uint64_t cap, uint64_t* block) {
  uint64_t n;
  return ClaimRunInWord(cap, 1, /*whole_words=*/false, block, &n);
}

Status BlockSource::AllocSingle(uint32_t* l) {
  uint64_t b;
  if (ClaimSingle(bm_->words()->capacity_blocks.load(std::memory_order_acquire), &b)) {
    *l = uint32_t(b);
    return Status::OK();
  }
  // Full (or contended): the chunk path, which grows the space.
  ThreadBlocks t;
  Status st = AllocOne(&t, l);
  ReturnAll(&t);
  return st;
}

Status BlockSource::ClaimChunk(ThreadBlocks* t, uint64_t want) {
  if (t->prefer == 0 && t->chunk_next == t->chunk_end && want <= kWordBlocks &&
      t->file_blocks < kWordBlocks && TakeParked(t, want))
    return Status::OK();
  want = std::max(want, kChunkBlocks);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    uint64_t cap = bm_->words()->capacity_blocks.load(std::memory_order_acquire);
    uint64_t first, count;
    if (TryClaim(*t, cap, want, &first, &count)) {
      t->prefer = 0;
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
      // Nor while a headroom's worth is punched (given back to the host
      // while the file was quiet): the writer provides that again first.
      uint64_t headroom = cap / 8;
      if (cap >= kGrowAheadFromBlocks && first + count + headroom > cap &&
          punched_blocks() < headroom && !FreeAtLeast(cap, headroom))
        // The callback runs on the space's worker, which never outlives the
        // space and the bitmap (their owner joins the worker first).
        space_->GrowAhead((cap + 2 * headroom) << kBlockShift,
                          // On an error nothing is published: the allocator
                          // that needs the space grows it itself and gets it.
                          [space = space_, bm = bm_](uint64_t ready) {
                            (void)PublishCapacity(space, bm, ready);
                          });
      return Status::OK();
    }
    if (space_->GrowInFlight()) {
      // The background worker is already growing the file: help it (take
      // the lowest extent of its step left, which publishes the step's
      // bottom as far as it is done) rather than start the same kernel
      // work twice; go on as soon as the capacity moves, and once nothing
      // is left to take, wait for that.
      // Sleep, not spin: the kernel work it waits for (page allocation,
      // huge-page collapse) needs this CPU for its per-CPU drains.
      GrowthWaiter waiting(space_);
      while (space_->GrowInFlight() &&
             bm_->words()->capacity_blocks.load(std::memory_order_acquire) == cap) {
        if (!space_->HelpGrow()) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      continue;
    }
    // Full: what is parked first, then what was punched (given memory
    // again), else grow the space now and publish the new capacity.
    if (ReturnParked()) continue;
    Status provided;
    if (ReturnPunched(want, &provided)) continue;
    UPFS_RETURN_IF_ERROR(provided);
    UPFS_RETURN_IF_ERROR(EnsureCapacity(cap + want));
  }
  return Status::Error(ENOSPC, "no free blocks after growing the file");
}

Status BlockSource::AllocContiguous(ThreadBlocks* t, uint64_t n, Run* out) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<Run> runs;
    UPFS_RETURN_IF_ERROR(Alloc(t, n, &runs));
    if (runs.size() == 1) {
      *out = runs[0];
      return Status::OK();
    }
    FreeRuns(t, runs);
    DropChunk(t);  // the next claim looks elsewhere
    if (attempt == 0) continue;
    // The claims near the hint found the space in pieces. A run that long
    // may still be free elsewhere: a pool's checkpoint image (43-83 blocks
    // for a directory of up to 4,096 names) found none twice in a row
    // after a few hundred thousand creates and unlinks, and each time the
    // pool grew by an eighth (GrowthTarget), to 244 MiB for 1.5 MiB of
    // metadata (issue 11's create + unlink churn, one thread).
    const uint64_t cap = bm_->words()->capacity_blocks.load(std::memory_order_acquire);
    ReturnAll(t);  // the pieces just freed are the thread's: the scan must see them free
    if (uint64_t first; ClaimFreeRun(cap, n, &first)) {
      *out = Run{uint32_t(first), uint32_t(n)};
      return Status::OK();
    }
    // Space given back to the host is free space too: a run of it is
    // taken back before the space grows. (Without this, a pool whose
    // checkpoint images are each given back once the next replaces it
    // grew by an eighth for every image, and held the memory of each
    // growth: 17 GiB long, 1.6 GiB of memory and rising for 134 MiB in
    // use, 300,000 files and a create + unlink churn beside them.)
    Status provided;
    if (ReturnPunchedRun(n, &provided)) {
      if (uint64_t first; ClaimFreeRun(cap, n, &first)) {
        *out = Run{uint32_t(first), uint32_t(n)};
        return Status::OK();
      }
    }
    UPFS_RETURN_IF_ERROR(provided);
    // The free space is in pieces shorter than n (a pool after many small
    // files; CI once failed a pool bench's prefill so): take fresh space
    // at the end, where nothing is claimed yet.
    UPFS_RETURN_IF_ERROR(EnsureCapacity(cap + std::max<uint64_t>(n, kChunkBlocks)));
    t->prefer = cap;
  }
  return Status::Error(ENOSPC, "no " + std::to_string(n) + " contiguous free blocks");
}

Status BlockSource::EnsureCapacity(uint64_t blocks) {
  if (blocks > format::kMaxBlocks - 1) return Status::Error(EFBIG, "file would exceed upfs limit");
  if (bm_->words()->capacity_blocks.load(std::memory_order_acquire) >= blocks) return Status::OK();
  UPFS_RETURN_IF_ERROR(space_->Grow(blocks << kBlockShift));
  return PublishCapacity(space_, bm_);
}

Status BlockSource::PublishCapacity(BlockSpace* space, AllocationBitmap* bm, uint64_t up_to) {
  // Block 0xffffffff would read as kKeepBlock in a payload run: never hand it out.
  const uint64_t to = std::min<uint64_t>(std::min(space->capacity(), up_to) >> kBlockShift,
                                         format::kMaxBlocks - 1);
  const uint64_t from = bm->capacity();
  if (to <= from) return Status::OK();
  // The space's size may run ahead of its memory: a growth that failed
  // half-way (its file system full), or one in progress in another
  // process, leaves holes that a store would fault on.
  UPFS_RETURN_IF_ERROR(space->Provide(from << kBlockShift, to << kBlockShift));
  UPFS_RETURN_IF_ERROR(ProvideBitmap(*bm, from, to));
  bm->RaiseCapacity(to);
  return Status::OK();
}

Status BlockSource::ProvideBitmap(const AllocationBitmap& bm, uint64_t from, uint64_t to) {
  Status st;
  bm.ForEachSpan(from, to, [&](void* addr, uint64_t bytes) {
    if (st.ok()) st = ProvideMemory(addr, bytes, "allocation bitmap");
  });
  return st;
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

void BlockSource::ReturnRange(uint64_t l, uint64_t count) { bm_->ClearRange(l, count); }

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

namespace {
// A parked chunk's word: (first block << 32) | count.
uint64_t ParkedWord(uint64_t first, uint64_t count) { return (first << 32) | count; }
uint64_t ParkedFirst(uint64_t v) { return v >> 32; }
uint64_t ParkedCount(uint64_t v) { return v & 0xffffffffu; }
}  // namespace

void BlockSource::ReturnAtClose(ThreadBlocks* t) {
  if (parks_ && t->chunk_next < t->chunk_end) {
    UPFS_ASSERT(t->chunk_next != 0 && t->chunk_end <= format::kMaxBlocks);
    const uint64_t v = ParkedWord(t->chunk_next, t->chunk_end - t->chunk_next);
    for (std::atomic<uint64_t>& slot : parked_) {
      uint64_t empty = 0;
      if (slot.load(std::memory_order_relaxed) == 0 &&
          slot.compare_exchange_strong(empty, v, std::memory_order_acq_rel)) {
        t->chunk_next = t->chunk_end = 0;
        break;
      }
    }
  }
  ReturnAll(t);  // the single blocks, and the chunk if it was not parked
}

bool BlockSource::TakeParked(ThreadBlocks* t, uint64_t n) {
  for (std::atomic<uint64_t>& slot : parked_) {
    uint64_t v = slot.load(std::memory_order_relaxed);
    if (v == 0 || ParkedCount(v) < n) continue;
    if (!slot.compare_exchange_strong(v, 0, std::memory_order_acq_rel)) continue;
    t->chunk_next = ParkedFirst(v);
    t->chunk_end = t->chunk_next + ParkedCount(v);
    return true;
  }
  return false;
}

bool BlockSource::ReturnParked() {
  bool any = false;
  for (std::atomic<uint64_t>& slot : parked_) {
    if (const uint64_t v = slot.exchange(0, std::memory_order_acq_rel)) {
      ReturnRange(ParkedFirst(v), ParkedCount(v));
      any = true;
    }
  }
  return any;
}

bool BlockSource::AnyParked() const {
  for (const std::atomic<uint64_t>& slot : parked_)
    if (slot.load(std::memory_order_relaxed) != 0) return true;
  return false;
}

}  // namespace upfs
