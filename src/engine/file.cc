#include "engine/file.h"

#include <sys/stat.h>

#include <immintrin.h>
#include <sched.h>
#include <x86intrin.h>
#include <linux/falloc.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "engine/epoch_pin.h"
#include "engine/log_compactor.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/crc32c.h"
#include "util/optimistic_copy.h"

namespace upfs {

using namespace format;

namespace {

// Dense per-process thread indices, recycled when threads exit, so that a
// File can keep per-thread state in a flat array.
std::mutex g_tid_mu;
std::vector<uint32_t> g_free_tids;
uint32_t g_next_tid = 0;

struct ThreadIndexHolder {
  uint32_t id;
  ThreadIndexHolder() {
    std::lock_guard<std::mutex> g(g_tid_mu);
    if (!g_free_tids.empty()) {
      id = g_free_tids.back();
      g_free_tids.pop_back();
    } else {
      id = g_next_tid++;
    }
  }
  ~ThreadIndexHolder() {
    std::lock_guard<std::mutex> g(g_tid_mu);
    g_free_tids.push_back(id);
  }
};

uint32_t ThreadIndex() {
  thread_local ThreadIndexHolder h;
  return h.id;
}

class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag& f) : f_(f) {
    while (f_.test_and_set(std::memory_order_acquire)) {
      while (f_.test(std::memory_order_relaxed)) _mm_pause();
    }
  }
  ~SpinGuard() { f_.clear(std::memory_order_release); }

 private:
  std::atomic_flag& f_;
};

Status ReadOnlyRefusal() { return Status::Error(EBADF, "upfs file opened read-only"); }

uint64_t CeilBlocks(uint64_t bytes) { return (bytes + kBlockSize - 1) >> kBlockShift; }

// Applies effect `e` to `old`, the mapping of virtual blocks [v0, v0+n), so
// that `old` tracks what the caller's commit will displace.
void Overlay(const Effect& e, uint64_t v0, uint64_t n, uint32_t* old) {
  uint64_t v = e.vblock;
  for (const Run& r : e.runs) {
    uint64_t lo = std::max(v, v0), hi = std::min(v + r.count, v0 + n);
    if (r.lblock != kKeepBlock)
      for (uint64_t b = lo; b < hi; ++b) old[b - v0] = r.lblock ? r.lblock + uint32_t(b - v) : 0;
    v += r.count;
  }
  if (e.size_op == Effect::kSet) {
    uint64_t keep = CeilBlocks(e.new_size);
    for (uint64_t b = std::max(keep, v0); b < v0 + n; ++b) old[b - v0] = 0;
  }
}

}  // namespace

File::File(const FileStorage& storage, std::unique_ptr<StorageLease> lease)
    : lease_(std::move(lease)),
      space_(storage.space),
      source_(storage.source),
      root_(storage.root),
      access_(storage.space),
      writer_(storage.space, storage.source, storage.root) {
  UPFS_ASSERT(space_ && root_.head && root_.times);
  UPFS_ASSERT(!source_ || (root_.words && source_->space() == space_));
}

File::~File() {
  space_->JoinBackground();  // its growth callback publishes into the bitmap
  for (auto& slot : ctx_) {
    ThreadCtx* c = slot.load();
    if (!c) continue;
    if (source_) {
      source_->DrainLimbo(&c->blocks, true);
      source_->ReturnAll(&c->blocks);
      source_->epochs()->ReleaseSlot(c->slot);
    }
    delete c;
  }
  // lease_ goes last: the container's lifecycle of what it lent.
}

Status File::Open(const FileStorage& storage, BlockMarker* rebuild,
                  std::unique_ptr<StorageLease> lease, std::unique_ptr<File>* out) {
  UPFS_ASSERT(storage.source != nullptr);
  std::unique_ptr<File> f(new File(storage, std::move(lease)));
  UPFS_RETURN_IF_ERROR(f->Init(rebuild));
  *out = std::move(f);
  return Status::OK();
}

Status File::OpenReadOnly(const FileStorage& storage, std::unique_ptr<StorageLease> lease,
                          std::unique_ptr<File>* out) {
  std::unique_ptr<File> f(new File(FileStorage{storage.space, nullptr, storage.root},
                                   std::move(lease)));
  UPFS_RETURN_IF_ERROR(f->Init(nullptr));
  *out = std::move(f);
  return Status::OK();
}

Status File::Init(BlockMarker* rebuild) {
  auto table = std::make_unique<BlockTable>();
  ReplayResult res;
  if (rebuild) {
    // Nobody else uses the domain (and the container keeps it so until we
    // return): no GC can run, and the slots were reset, so no pin is needed.
    UPFS_RETURN_IF_ERROR(ReplayHead(table.get(), &res, true));
    for (uint32_t l : res.log_blocks) rebuild->Mark(l, "log");
    for (const Run& r : res.overflow)
      for (uint32_t i = 0; i < r.count; ++i) rebuild->Mark(r.lblock + i, "overflow");
    table->ForEachMapped([&](uint64_t, uint32_t l) { rebuild->Mark(l, "data"); });
    UPFS_RETURN_IF_ERROR(rebuild->status());
  }
  // Register the opening thread before the container lets other openers
  // in, so that they see this process alive and do not rebuild under it.
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  if (read_only()) {
    UPFS_RETURN_IF_ERROR(ReplayValidated(&table, &res));
  } else if (!rebuild) {
    // Other processes are live and may compact the log meanwhile: walk it
    // pinned, so that no block of the chain read here is reused under us.
    EpochPin pin(epochs(), c->slot);
    UPFS_RETURN_IF_ERROR(ReplayHead(table.get(), &res, false));
  }
  if (table->size() > kMaxFileSize) return Status::Corrupt("log", "file size beyond the limit");
  tables_.push_back(std::move(table));
  table_.store(tables_.back().get(), std::memory_order_release);
  return Status::OK();
}

Status File::ReplayHead(BlockTable* table, ReplayResult* res, bool check_tail) {
  uint64_t head = root_.head->load(std::memory_order_acquire);
  if (head == 0 || head >= kMaxBlocks) return Status::Corrupt("file header", "log head out of range");
  UPFS_RETURN_IF_ERROR(ReplayChain(access_, uint32_t(head), table, res, check_tail));
  table->set_chain(uint32_t(head), res->head_seq);
  return Status::OK();
}

Status File::ChainHeadNow(uint32_t* head, uint64_t* seq) const {
  std::atomic_thread_fence(std::memory_order_acquire);
  uint64_t h = root_.head->load(std::memory_order_acquire);
  if (h == 0 || h >= kMaxBlocks) return Status::Corrupt("file header", "log head out of range");
  char* addr;
  UPFS_RETURN_IF_ERROR(access_.Addr(h, &addr));
  *head = uint32_t(h);
  *seq = reinterpret_cast<const LogBlock*>(addr)->seq;
  return Status::OK();
}

bool File::HeadMoved(const BlockTable* t) const {
  // The same block as head again is a later chain only if its sequence
  // number moved on (GC starts a new chain past the old one's numbers).
  uint32_t head;
  uint64_t seq;
  if (!ChainHeadNow(&head, &seq).ok()) return true;  // the replay will say what is wrong
  return head != t->chain_head() || seq != t->chain_seq();
}

Status File::ReplayValidated(std::unique_ptr<BlockTable>* table, ReplayResult* res) {
  // Each try walks a chain that a GC may retire and reuse under the walk;
  // a walk is trusted only if the head did not move during it (and one
  // that failed, only then reports damage). A GC runs once the log has
  // grown by dozens of blocks, so a few tries suffice.
  constexpr int kTries = 64;
  for (int i = 0;; ++i) {
    uint32_t head;
    uint64_t seq;
    UPFS_RETURN_IF_ERROR(ChainHeadNow(&head, &seq));
    auto fresh = std::make_unique<BlockTable>();
    ReplayResult r;
    Status st = ReplayChain(access_, head, fresh.get(), &r, false);
    fresh->set_chain(head, seq);
    if (!HeadMoved(fresh.get())) {
      UPFS_RETURN_IF_ERROR(st);
      *table = std::move(fresh);
      *res = std::move(r);
      return Status::OK();
    }
    if (i == kTries) return Status::Error(EAGAIN, "log compacted during every replay");
  }
}

Status File::Ctx(ThreadCtx** out) {
  uint32_t tid = ThreadIndex();
  if (tid >= kMaxThreads) return Status::Error(EAGAIN, "too many threads using upfs");
  ThreadCtx* c = ctx_[tid].load(std::memory_order_acquire);
  if (!c) {
    auto fresh = std::make_unique<ThreadCtx>();
    if (read_only()) {
      c = fresh.release();  // no slot: a read-only File pins nothing
      ctx_[tid].store(c, std::memory_order_release);
      *out = c;
      return Status::OK();
    }
    EpochDomain* d = source_->epochs();
    fresh->slot = d->ClaimSlot();
    if (fresh->slot >= kMaxSlots) return Status::Error(EAGAIN, "no free thread slot in shared state");
    fresh->tail_claim_id =
        (uint64_t(d->slot(fresh->slot)->owner_pid.load(std::memory_order_relaxed)) << 32) |
        (uint64_t(fresh->slot) + 1);
    c = fresh.release();
    ctx_[tid].store(c, std::memory_order_release);
  }
  *out = c;
  return Status::OK();
}

Status File::RebuildTableLocked() {
  // Called pinned (from CatchUp), or validating (read-only).
  auto table = std::make_unique<BlockTable>();
  ReplayResult res;
  if (read_only())
    UPFS_RETURN_IF_ERROR(ReplayValidated(&table, &res));
  else
    UPFS_RETURN_IF_ERROR(ReplayHead(table.get(), &res, false));
  std::lock_guard<std::mutex> g(tables_mu_);
  tables_.push_back(std::move(table));
  table_.store(tables_.back().get(), std::memory_order_release);
  return Status::OK();
}

Status File::CatchUpReadOnly(ThreadCtx* c, BlockTable** out) {
  // Without a pin, the blocks past the cursor may be reused by the time
  // they are read: what a scan finds is applied only if the head did not
  // move meanwhile (then nothing of the chain was retired).
  struct Found {
    Effect effect;
    uint32_t lblock, slot;  // where its entry is, for messages
  };
  std::vector<Found> found;
  for (int tries = 0;; ++tries) {
    SpinGuard g(apply_lock_);
    BlockTable* t = table_.load(std::memory_order_acquire);
    if (HeadMoved(t)) {
      if (tries == 64) return Status::Error(EAGAIN, "log compacted during every catch-up");
      UPFS_RETURN_IF_ERROR(RebuildTableLocked());
      continue;
    }
    LogPos p = t->cursor();
    found.clear();
    Status st = ScanCommitted(access_, &p, &c->scratch, [&](const Effect& e) {
      found.push_back(Found{e, p.lblock, p.last});  // the scan is past the entry
      return true;
    });
    if (HeadMoved(t)) continue;
    UPFS_RETURN_IF_ERROR(st);
    // As in CatchUp: a damaged entry is refused with the cursor before it.
    for (const Found& f : found) {
      if (f.effect.grow_tail) UPFS_RETURN_IF_ERROR(CheckGrowTail(*t, f.effect, f.lblock, f.slot));
      UPFS_RETURN_IF_ERROR(t->Apply(f.effect));
    }
    t->set_cursor(p);
    *out = t;
    return Status::OK();
  }
}

Status File::CatchUp(ThreadCtx* c, BlockTable** out) {
  if (read_only()) return CatchUpReadOnly(c, out);
  // Blocks past the cursor may be retired by a GC: only a pin keeps them.
  UPFS_ASSERT(EpochPin::Pinned(epochs(), c->slot));
  BlockTable* t = table_.load(std::memory_order_acquire);
  LogPos p = t->cursor();
  uint64_t compact = root_.words->compact_seq.load(std::memory_order_acquire);
  if (p.seq >= compact) {
    LogBlock* b = LogAt(p.lblock);
    bool idle = p.slot < kSlotsPerLogBlock
                    ? b->slots[p.slot].load(std::memory_order_acquire) == 0
                    : NextBlock(b->next.load(std::memory_order_acquire)) == 0;
    if (idle) {
      *out = t;
      return Status::OK();
    }
  }
  SpinGuard g(apply_lock_);
  t = table_.load(std::memory_order_acquire);
  p = t->cursor();
  if (p.seq < root_.words->compact_seq.load(std::memory_order_acquire)) {
    // GC compacted the blocks under our cursor: replay the new chain.
    UPFS_RETURN_IF_ERROR(RebuildTableLocked());
    t = table_.load(std::memory_order_acquire);
    p = t->cursor();
  }
  // A damaged entry is refused here exactly as a replay refuses it, and
  // the cursor stays before it (re-applying the entries before it again is
  // harmless: effects assign or take a maximum), so it is refused again.
  Status bad;
  Status st = ScanCommitted(access_, &p, &c->scratch, [&](const Effect& e) {
    if (e.grow_tail) {
      bad = CheckGrowTail(*t, e, p.lblock, p.last);  // the scan is past the entry
      if (!bad.ok()) return false;
    }
    t->Apply(e);
    return true;
  });
  if (!bad.ok()) return bad;
  t->set_cursor(p);
  *out = t;
  return st;
}

// ---------------------------------------------------------------------------
// Commit

// ---------------------------------------------------------------------------
// Reclamation

void File::ReleaseDisplaced(ThreadCtx* c, const uint32_t* blocks, size_t n) {
  // Strict mode: readers validate against the log, so a displaced block may
  // be reused at once. Sync mode writes in place, so a displaced block may
  // still be a target of an in-place write: retire it through EBR. So must
  // strict mode while someone holds the tail claim: the displaced block may
  // be the tail block it writes past the end of file (see TryClaimTail).
  bool immediate = root_.consistency == Consistency::kStrict;
  if (immediate) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    immediate = root_.words->tail_claim.load(std::memory_order_relaxed) == 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!blocks[i]) continue;
    if (immediate)
      source_->Free(&c->blocks, blocks[i], 1);
    else
      source_->Retire(&c->blocks, blocks[i], 1);
  }
}

void File::TouchMtime() {
  // The clock is read at most every ~2^20 cycles (about 0.3 ms): mtime
  // needs no finer grain than the coarse clock gives, and this keeps the
  // shared header line out of the write path. A value this process did not
  // store (utimensat, here or elsewhere) is replaced at once, as the
  // kernel's write replaces any mtime by the current time.
  uint64_t tsc = __rdtsc();
  uint64_t last = last_mtime_tick_.load(std::memory_order_relaxed);
  uint64_t m = root_.times->mtime_ns.load(std::memory_order_relaxed);
  if (tsc - last < (uint64_t{1} << 20) && m == last_mtime_stored_.load(std::memory_order_relaxed))
    return;
  last_mtime_tick_.store(tsc, std::memory_order_relaxed);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  if (m != now) pm::Store64(&root_.times->mtime_ns, now);
  if (root_.times->data_ctime_ns.load(std::memory_order_relaxed) != now)
    pm::Store64(&root_.times->data_ctime_ns, now);
  last_mtime_stored_.store(now, std::memory_order_relaxed);
}

Status File::SetMtime(int64_t mtime_ns) {
  if (read_only()) return ReadOnlyRefusal();
  // A zero data_ctime_ns marks a file from before it existed, where a zero
  // mtime means "never written": give it a value so that an mtime of
  // exactly the epoch is reported as such.
  if (root_.times->data_ctime_ns.load(std::memory_order_relaxed) == 0)
    pm::Store64(&root_.times->data_ctime_ns, std::max<uint64_t>(uint64_t(ReportedDataCtime(*root_.times, root_.created_ns)), 1));
  pm::Store64(&root_.times->mtime_ns, uint64_t(mtime_ns));
  pm::Flush(root_.times, sizeof(FileTimes));
  pm::Fence();
  return Status::OK();
}

Status File::CollectGarbage(bool force) {
  if (read_only()) return ReadOnlyRefusal();
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  return LogCompactor(space_, source_, root_).Collect(&c->blocks, c->slot, force);
}

void File::MaybeCollectGarbage(ThreadCtx* c) {
  if (!c->blocks.limbo.empty()) source_->DrainLimbo(&c->blocks, false);
  if (!writer_.TakeGcWanted()) return;
  (void)CollectGarbage(false);  // best effort: the log just stays longer
}

// ---------------------------------------------------------------------------
// Read

Status File::Read(void* buf, size_t n, uint64_t off, size_t* done) {
  *done = 0;
  if (n == 0) return Status::OK();
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  BlockTable* t;
  UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  for (;;) {
    LogPos p = t->cursor();
    uint64_t size = t->size();
    if (off >= size) return Status::OK();
    uint64_t len = std::min<uint64_t>(n, size - off);
    uint64_t end = off + len;
    uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end);
    char* out = static_cast<char*>(buf);
    for (uint64_t v = vb0; v < vb1; ++v) {
      uint64_t bs = v << kBlockShift;
      uint64_t lo = std::max(bs, off), hi = std::min(bs + kBlockSize, end);
      uint32_t l = t->Get(v);
      if (l)
        OptimisticCopy(out + (lo - off), access_.AddrUnchecked(l) + (lo - bs), hi - lo);
      else
        std::memset(out + (lo - off), 0, hi - lo);
    }
    // Validate: nothing committed since the snapshot may touch what we read.
    bool stale = false;
    std::atomic_thread_fence(std::memory_order_acquire);
    Status scan = ScanCommitted(access_, &p, &c->scratch, [&](const Effect& e) {
      if (e.TouchesBlocks(vb0, vb1)) {
        stale = true;
        return false;
      }
      return true;
    });
    // Read-only: the blocks read (log and data) were live only if no GC
    // retired them; if one did, what the scan found does not count either.
    if (read_only() && HeadMoved(t)) {
      stale = true;
    } else {
      UPFS_RETURN_IF_ERROR(scan);
    }
    if (!stale) {
      *done = len;
      return Status::OK();
    }
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  }
}

// ---------------------------------------------------------------------------
// Write

Status File::CopyIntoNewBlocks(ThreadCtx* c, const void* buf, size_t n, uint64_t off,
                               uint64_t size, uint64_t vb0) {
  const char* in = static_cast<const char*>(buf);
  const uint64_t end = off + n;
  uint64_t v = vb0;
  for (const Run& r : c->runs) {
    char* dst;
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
      uint64_t lo = std::max(bs, off) - bs, hi = std::min(bs + kBlockSize, end) - bs;
      auto old_or_zero = [&](uint64_t from, uint64_t to) {
        if (from >= to) return;
        uint64_t mid = std::clamp(valid, from, to);
        if (mid > from) pm::CopyNT(nb + from, ob + from, mid - from);
        if (to > mid) pm::ZeroNT(nb + mid, to - mid);
      };
      old_or_zero(0, lo);
      pm::CopyNT(nb + lo, in + (bs + lo - off), hi - lo);
      old_or_zero(hi, kBlockSize);
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
// tail claim (ShmHeader::tail_claim) to write past the end of file in
// place; the claim is never waited for by an appender (it copies on write
// instead), and a dead owner's claim is taken over.
//
// Those bytes may therefore hold an uncommitted append (in flight, or cut
// short by a crash): they are not zero. Operations that raise the size
// over them without rewriting the tail block (a growing truncate or
// fallocate, a write that starts past the tail block) take the claim,
// waiting for it, and zero them first (ZeroTailForGap).

Status File::CommittedSince(ThreadCtx* c, const LogPos& p, bool* any) {
  *any = false;
  LogPos q = p;
  return ScanCommitted(access_, &q, &c->scratch, [&](const Effect&) {
    *any = true;
    return false;
  });
}

bool File::TryClaimTail(ThreadCtx* c) {
  std::atomic<uint64_t>& claim = root_.words->tail_claim;
  uint64_t cur = 0;
  if (!claim.compare_exchange_strong(cur, c->tail_claim_id)) {
    uint64_t slot = (cur & 0xffffffffu) - 1;
    uint32_t pid = uint32_t(cur >> 32);
    EpochDomain* d = source_->epochs();
    bool dead = slot >= kMaxSlots || !d->SlotOwnerAlive(uint32_t(slot)) ||
                d->slot(uint32_t(slot))->owner_pid.load(std::memory_order_relaxed) != pid;
    if (!dead || !claim.compare_exchange_strong(cur, c->tail_claim_id)) return false;
  }
  // Pairs with the fence in ReleaseDisplaced: either a committer that
  // displaces the tail block sees this claim (and retires the block through
  // EBR instead of reusing it at once), or the claimant's check of the log
  // sees that commit (and writes nothing).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return true;
}

void File::ClaimTail(ThreadCtx* c) {
  for (uint32_t spins = 0; !TryClaimTail(c); ++spins) {
    if (spins < 64)
      _mm_pause();
    else
      sched_yield();
  }
}

void File::ReleaseTail(ThreadCtx* c) {
  uint64_t mine = c->tail_claim_id;
  root_.words->tail_claim.compare_exchange_strong(mine, 0, std::memory_order_release);
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
  if (!last) return Status::OK();
  if (!*claimed) {
    ClaimTail(c);
    *claimed = true;
  }
  UPFS_RETURN_IF_ERROR(CommittedSince(c, p, stale));
  if (*stale) return Status::OK();
  char* a;
  UPFS_RETURN_IF_ERROR(access_.Addr(last, &a));
  const char* past = a + in_block;
  bool zero = true;
  for (uint64_t i = 0; zero && i < kBlockSize - in_block; ++i) zero = past[i] == 0;
  if (!zero) {
    pm::ZeroNT(a + in_block, kBlockSize - in_block);
    pm::Fence();
  }
  return Status::OK();
}

Status File::AppendInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                           bool append, uint64_t* at, bool* done) {
  *done = false;
  LogPos p = t->cursor();
  const uint64_t size = t->size();
  const uint64_t in_block = size & (kBlockSize - 1);
  if ((!append && off != size) || in_block == 0) return Status::OK();
  const uint64_t end = size + n;
  if (end > kMaxFileSize || end < size) return Status::OK();  // WriteOnce reports it
  const uint64_t vt = size >> kBlockShift;
  const uint32_t last = t->Get(vt);
  if (!last || !TryClaimTail(c)) return Status::OK();
  TailClaimGuard claim{this, c, true};
  // Under the claim no other in-place append can commit; an append that
  // committed before we took it would be overwritten: the snapshot must
  // still be current.
  bool stale = false;
  UPFS_RETURN_IF_ERROR(CommittedSince(c, p, &stale));
  if (stale) return Status::OK();

  char* tail;
  UPFS_RETURN_IF_ERROR(access_.Addr(last, &tail));
  const uint64_t first = std::min<uint64_t>(n, kBlockSize - in_block);
  pm::CopyNT(tail + in_block, buf, first);
  // What does not fit goes to new blocks, as a copy-on-write write would.
  const uint64_t vb0 = vt + 1, vb1 = CeilBlocks(end), nb = vb1 > vb0 ? vb1 - vb0 : 0;
  c->runs.clear();
  c->old.assign(nb, 0);
  UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &c->runs);
  if (nb) {
    UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, nb, &c->runs));
    for (uint64_t i = 0; i < nb; ++i) c->old[i] = t->Get(vb0 + i);
    UPFS_RETURN_IF_ERROR(CopyIntoNewBlocks(c, static_cast<const char*>(buf) + first, n - first,
                                           vb0 << kBlockShift, size, vb0));
  }
  // The entry must touch the tail block (a copy-on-write writer that
  // composed it from the older size conflicts with it, instead of
  // committing zeros over the appended bytes). An append that stays in the
  // tail block is one kGrowTail word, which touches that block and raises
  // the size (the data must be durable before its CAS: one fence, one
  // commit, nothing to decode). Anything longer is a payload whose first
  // run keeps the tail block's mapping, and whose commit fences before the
  // payload can count.
  uint64_t entry = 0;
  if (nb == 0) {
    pm::Fence();
    entry = EncodeGrowTail(end);
  } else {
    c->runs.insert(c->runs.begin(), Run{kKeepBlock, 1});
    Status st =
        writer_.BuildPayload(&c->blocks, &c->pending, uint32_t(vt), c->runs, Effect::kMax, end);
    c->runs.erase(c->runs.begin());  // only the new blocks are ours to free
    UPFS_RETURN_IF_ERROR(st);
  }
  bool conflicted = false;
  UPFS_RETURN_IF_ERROR(writer_.Commit(
      &c->blocks, &c->scratch, &p, entry, c->pending,
      [&](const Effect& e) { return e.ChangesSize() || e.TouchesBlocks(vt, std::max(vb1, vt + 1)); },
      &conflicted));
  if (conflicted) return Status::OK();
  taken.Committed();
  if (nb) ReleaseDisplaced(c, c->old.data(), nb);
  *at = size;
  *done = true;
  return Status::OK();
}

Status File::WriteOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                       bool append, uint64_t* at, bool* conflicted) {
  LogPos p = t->cursor();
  uint64_t size = t->size();
  if (append) off = size;
  uint64_t end = off + n;
  if (end > kMaxFileSize || end < off) return Status::Error(EFBIG, "write past the upfs limit");
  // A write starting past the tail block exposes the bytes past the size.
  TailClaimGuard claim{this, c};
  if ((off >> kBlockShift) > (size >> kBlockShift)) {
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
  UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, nb, &c->runs));
  c->old.resize(nb);
  for (uint64_t i = 0; i < nb; ++i) c->old[i] = t->Get(vb0 + i);
  UPFS_RETURN_IF_ERROR(CopyIntoNewBlocks(c, buf, n, off, size, vb0));
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
  uint32_t* old = c->old.data();
  UPFS_RETURN_IF_ERROR(writer_.Commit(
      &c->blocks, &c->scratch, &p, entry, c->pending,
      [&](const Effect& e) {
        if (e.size_op == Effect::kSet) return true;
        if (append && e.ChangesSize()) return true;
        if (head_edge && e.TouchesBlocks(vb0, vb0 + 1)) return true;
        if (tail_edge && e.TouchesBlocks(vb1 - 1, vb1)) return true;
        Overlay(e, vb0, nb, old);
        return false;
      },
      conflicted));
  if (*conflicted) return Status::OK();
  taken.Committed();
  ReleaseDisplaced(c, c->old.data(), nb);
  *at = off;
  return Status::OK();
}

Status File::Write(const void* buf, size_t n, uint64_t off, bool append, uint64_t* at) {
  if (read_only()) return ReadOnlyRefusal();
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  {
    EpochPin pin(epochs(), c->slot);
    BlockTable* t;
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
    if (n == 0) {
      *at = append ? t->size() : off;
      return Status::OK();
    }
    bool in_place = root_.consistency == Consistency::kSync && !append;
    for (;;) {
      bool appended = false;
      UPFS_RETURN_IF_ERROR(AppendInPlace(c, t, buf, n, off, append, at, &appended));
      if (appended) break;
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
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Truncate, fallocate

Status File::Truncate(uint64_t len) {
  if (read_only()) return ReadOnlyRefusal();
  if (len > kMaxFileSize) return Status::Error(EFBIG, "length past the upfs limit");
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  BlockTable* t;
  UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  for (;;) {
    LogPos p = t->cursor();
    uint64_t size = t->size();
    if (len == size) break;
    uint64_t keep = CeilBlocks(len);
    c->runs.clear();
    c->old.clear();
    UncommittedBlocks taken(&writer_, &c->blocks, &c->pending, &c->runs);
    TailClaimGuard claim{this, c};
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
      // The new last block keeps [0, len % 4096) and is zero beyond.
      UPFS_RETURN_IF_ERROR(source_->Alloc(&c->blocks, 1, &c->runs));
      alignas(64) unsigned char tmp[kBlockSize];
      uint64_t valid = len & (kBlockSize - 1);
      OptimisticCopy(tmp, access_.AddrUnchecked(last), valid);
      std::memset(tmp + valid, 0, kBlockSize - valid);
      char* dst;
      UPFS_RETURN_IF_ERROR(access_.Addr(c->runs[0].lblock, &dst));
      pm::CopyNT(dst, tmp, kBlockSize);
      pm::Fence();
      c->old.push_back(last);
    }
    t->ForEachMapped([&](uint64_t, uint32_t l) { c->old.push_back(l); }, keep);
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
  bool conflicted = false;
  UPFS_RETURN_IF_ERROR(writer_.Commit(
      &c->blocks, &c->scratch, p, 0, c->pending,
      [&](const Effect& e) { return e.size_op == Effect::kSet || e.TouchesBlocks(vb0, vb1); },
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
      OptimisticCopy(tmp, access_.AddrUnchecked(l), kBlockSize);
      uint64_t bs = v << kBlockShift;
      uint64_t lo = std::max(bs, off), hi = std::min(bs + kBlockSize, end);
      std::memset(tmp + (lo - bs), 0, hi - lo);
      char* dst;
      st = access_.Addr(one[0].lblock, &dst);
      if (!st.ok()) return;
      pm::CopyNT(dst, tmp, kBlockSize);
      displaced.push_back(l);
      runs.push_back(Run{one[0].lblock, 1});
    };
    if (vb0 < full0 || (full0 >= full1 && vb0 < vb1)) edge(vb0);  // head (or the only block)
    if (st.ok() && full0 < full1) {
      for (uint64_t v = full0; v < full1; v += std::min<uint64_t>(full1 - v, UINT32_MAX))
        runs.push_back(Run{0, uint32_t(std::min<uint64_t>(full1 - v, UINT32_MAX))});
      t->ForEachMapped([&](uint64_t, uint32_t l) { displaced.push_back(l); }, full0, full1);
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
    char* dst;
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
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  BlockTable* t;
  UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  const uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end);
  if (punch) {
    UPFS_RETURN_IF_ERROR(PunchHole(c, t, off, end));
    TouchMtime();
    MaybeCollectGarbage(c);
    return Status::OK();
  }
  // Allocation reserves room in the host file for every hole in the range
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
    TailClaimGuard claim{this, c};
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

// ---------------------------------------------------------------------------
// Metadata

// Runs fn(table) on a caught-up table, pinned.
template <typename Fn>
Status File::WithTable(Fn fn) {
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  for (;;) {
    BlockTable* t;
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
    Status st = fn(t);
    // Read-only: fn read the log (LogLength) or a table that a GC may have
    // made stale meanwhile; do it again on the new chain.
    if (!read_only() || !HeadMoved(t)) return st;
  }
}

Status File::Size(uint64_t* size) {
  return WithTable([&](BlockTable* t) {
    *size = t->size();
    return Status::OK();
  });
}

Status File::Stat(FileStat* st) {
  return WithTable([&](BlockTable* t) { return StatLocked(t, st); });
}

Status File::StatLocked(BlockTable* t, FileStat* st) {
  st->size = t->size();
  st->blocks = t->mapped_blocks();
  st->mtime_ns = ReportedMtime(*root_.times, root_.created_ns);
  st->data_ctime_ns = ReportedDataCtime(*root_.times, root_.created_ns);
  return Status::OK();
}

Status File::SeekDataHole(uint64_t off, bool data, uint64_t* result) {
  return WithTable([&](BlockTable* t) { return SeekLocked(t, off, data, result); });
}

Status File::SeekLocked(BlockTable* t, uint64_t off, bool data, uint64_t* result) {
  uint64_t size = t->size();
  if (off >= size) return Status::Error(ENXIO, "offset at or past the end of file");
  uint64_t vend = CeilBlocks(size);
  uint64_t v = t->NextMapped(off >> kBlockShift, vend, data);
  if (v < vend) {
    *result = std::min(std::max(off, v << kBlockShift), size);
    return Status::OK();
  }
  if (data) return Status::Error(ENXIO, "no data past the offset");
  *result = size;
  return Status::OK();
}

Status File::Sync() {
  if (read_only()) return Status::OK();  // it wrote nothing
  pm::Flush(root_.times, sizeof(FileTimes));
  pm::Fence();
  return space_->Sync(0, space_->capacity());
}

Status File::LogLength(uint64_t* blocks) {
  return WithTable([&](BlockTable* t) { return LogLengthLocked(t, blocks); });
}

Status File::LogLengthLocked(BlockTable* t, uint64_t* blocks) {
  uint64_t head = root_.head->load(std::memory_order_acquire);
  if (head == 0 || head >= kMaxBlocks) return Status::Corrupt("file header", "bad log head");
  UPFS_RETURN_IF_ERROR(access_.CheckRange(head, 1, "log head"));
  LogPos p = t->cursor();
  *blocks = p.seq + 1 - LogAt(uint32_t(head))->seq;
  return Status::OK();
}

}  // namespace upfs
