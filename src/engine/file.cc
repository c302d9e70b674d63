// File: opening (replay, and marking a rebuild), per-thread state, catching
// the block table up to the log, and the calls that read the table (stat,
// lseek, log length). Reads, writes, resizing, times and the read-only
// variant live in file_*.cc.
#include "engine/file.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "engine/epoch_pin.h"
#include "engine/file_internal.h"
#include "engine/gc_worker.h"
#include "engine/log_compactor.h"
#include "engine/stat_hint.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/optimistic_copy.h"
#include "util/thread_held.h"

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

}  // namespace

void LockThreadIndicesForFork() { g_tid_mu.lock(); }
void UnlockThreadIndicesAfterFork() { g_tid_mu.unlock(); }

uint32_t ThreadIndex() { return ThreadHeld<ThreadIndexHolder, &ThreadIndexHolder::id>(); }

// glibc's malloc serves requests of up to 1,032 bytes from a per-thread
// cache (tcache) in a few dozen instructions; a larger one takes its
// general path, and its free too: a File of 1,080 bytes cost about 460
// instructions more in each pool file's life (callgrind of a create,
// 512-byte write, fsync, close and unlink: the allocation 358, its free
// 160). Hence one copy of the log's root (the writer's), and a flag moved
// into a hole.
constexpr size_t kFileBytesMax = 1032;
static_assert(sizeof(File) <= kFileBytesMax, "a File past glibc's tcache limit: see above");

File::File(const FileStorage& storage, std::unique_ptr<StorageLease> lease)
    : lease_(std::move(lease)),
      space_(storage.space),
      source_(storage.source),
      access_(storage.space),
      writer_(storage.space, storage.source, storage.root),
      root_(writer_.root()),
      space_outlives_file_(storage.space_outlives_file),
      give_back_free_space_(storage.give_back_free_space),
      may_have_crashed_(storage.may_have_crashed) {
  UPFS_ASSERT(space_ && root_.head && root_.times);
  UPFS_ASSERT(!source_ || (root_.words && source_->space() == space_));
}

File::~File() {
  // The worker may be compacting this log, with a context of this File.
  if (source_ && handed_to_gc_.load(std::memory_order_acquire)) GcWorker::Get().Forget(this);
  // A per-file container's growth callback publishes into this File's
  // bitmap: stopped before the File goes. A pool's outlives its files.
  if (!space_outlives_file_) space_->JoinBackground();
  ctx_.ForEach([&](ThreadCtx* c) {
    if (source_) {
      source_->DrainLimbo(&c->blocks, true);
      if (!c->blocks.limbo.empty() && lease_) lease_->KeepRetired(&c->blocks.limbo);
      source_->ReturnAtClose(&c->blocks);
      source_->epochs()->ReleaseSlot(c->slot);
    }
    if (c != &first_ctx_) delete c;
  });
  // lease_ goes last: the container's lifecycle of what it lent.
}

Status File::Open(const FileStorage& storage, BlockMarker* rebuild,
                  std::unique_ptr<StorageLease> lease, std::unique_ptr<File>* out) {
  UPFS_ASSERT(storage.source != nullptr);
  std::unique_ptr<File> f(new File(storage, std::move(lease)));
  UPFS_RETURN_IF_ERROR(f->Init(rebuild));
  // Pairs left by earlier opens: folded once this open leaves them idle;
  // and free space the file holds (a per-file file's): given back to the
  // host once the file is quiet.
  if (f->give_back_free_space_ || f->table_.load(std::memory_order_acquire)->shadows().count())
    f->AskForQuietRun();
  *out = std::move(f);
  return Status::OK();
}

Status File::OpenReadOnly(const FileStorage& storage, std::unique_ptr<StorageLease> lease,
                          std::unique_ptr<File>* out) {
  FileStorage ro = storage;
  ro.source = nullptr;
  std::unique_ptr<File> f(new File(ro, std::move(lease)));
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
    // Checked whole before anything is written: a commit a crash cut
    // short is cleared only once the rest proved sound (an open refused
    // for damage leaves the file as it was).
    UPFS_RETURN_IF_ERROR(
        ReplayHead(table.get(), &res, may_have_crashed_ ? TailRule::kCrashed : TailRule::kStrict));
    for (uint32_t l : res.log_blocks) rebuild->Mark(l, "log");
    for (const Run& r : res.overflow)
      for (uint32_t i = 0; i < r.count; ++i) rebuild->Mark(r.lblock + i, "overflow");
    table->ForEachHeld([&](uint32_t l) { rebuild->Mark(l, "data"); });
    UPFS_RETURN_IF_ERROR(rebuild->status());
    if (res.cut_short_words) {
      BlockTable again;
      ReplayResult cleared;
      UPFS_RETURN_IF_ERROR(ReplayHead(&again, &cleared, TailRule::kRecover));
    }
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
    if (!StartAtEmptyLog(table.get())) UPFS_RETURN_IF_ERROR(ReplayHead(table.get(), &res, TailRule::kLive));
  }
  if (table->size() > kMaxFileSize) return Status::Corrupt("log", "file size beyond the limit");
  tables_.push_back(std::move(table));
  table_.store(tables_.back().get(), std::memory_order_release);
  return Status::OK();
}

// A live replay of an empty log (ReplayChain) finds no entry in its block
// and allocates its lists all the same: 475 instructions of the 1,700 a
// File's open took (callgrind of a pool file's create, 512-byte write,
// fsync, close and unlink, where every first write opens one). What it
// checks of such a log is checked here, in the same order; anything else
// (an entry, a successor, damage) is left to the replay, which reports it.
namespace {
thread_local uint64_t t_empty_log_starts = 0;
}  // namespace

uint64_t File::EmptyLogStartsInThisThreadForTest() { return t_empty_log_starts; }

bool File::StartAtEmptyLog(BlockTable* table) {
  // Loaded before the head, as ReplayHead does (StaleAfterCompaction).
  if (root_.words) table->set_compact_seen(root_.words->compact_seq.load(std::memory_order_acquire));
  const uint64_t head = root_.head->load(std::memory_order_acquire);
  if (head == 0 || head >= kMaxBlocks || !access_.CheckRange(uint32_t(head), 1, "log head").ok()) return false;
  const LogBlock* b = LogAt(uint32_t(head));
  // The successor first: a block gets one only when full, and its slots
  // are written once, so an empty first slot after it means the log was
  // this one empty block then (another process's later commits are the
  // first catch-up's to find, as after any replay).
  const uint64_t next = b->next.load(std::memory_order_acquire);
  if (!NextWordValid(next) || NextBlock(next) != 0 || b->slots[0].load(std::memory_order_acquire) != 0)
    return false;
  const uint64_t seq = b->seq;
  table->set_cursor(LogPos{uint32_t(head), 0, seq, 0, LogPos::kNoSlot});
  table->set_chain(uint32_t(head), seq);
  ++t_empty_log_starts;
  return true;
}

Status File::ReplayHead(BlockTable* table, ReplayResult* res, TailRule rule) {
  // Loaded before the head: a compaction published after this load makes
  // the table stale (StaleAfterCompaction), one published before it is in
  // the chain we walk.
  if (root_.words) table->set_compact_seen(root_.words->compact_seq.load(std::memory_order_acquire));
  uint64_t head = root_.head->load(std::memory_order_acquire);
  if (head == 0 || head >= kMaxBlocks) return Status::Corrupt("file header", "log head out of range");
  UPFS_RETURN_IF_ERROR(ReplayChain(access_, uint32_t(head), table, res, rule));
  table->set_chain(uint32_t(head), res->head_seq);
  return Status::OK();
}

Status File::Ctx(ThreadCtx** out) {
  uint32_t tid = ThreadIndex();
  if (tid >= kMaxThreads) return Status::Error(EAGAIN, "too many threads using upfs");
  ThreadCtx* c = ctx_.Get(tid);
  if (!c) {
    UPFS_RETURN_IF_ERROR(NewCtx(&c));
    ctx_.Set(tid, c);
  }
  *out = c;
  return Status::OK();
}

Status File::NewCtx(ThreadCtx** out) {
  const bool first = !first_ctx_taken_.exchange(true, std::memory_order_acq_rel);
  std::unique_ptr<ThreadCtx> heap;
  ThreadCtx* c = first ? &first_ctx_ : (heap = std::make_unique<ThreadCtx>()).get();
  if (!read_only()) {  // a read-only File pins nothing: no slot
    EpochDomain* d = source_->epochs();
    if (Status s = d->ClaimSlot(&c->slot); !s.ok()) {
      c->slot = kMaxSlots;
      if (first) first_ctx_taken_.store(false, std::memory_order_release);
      return s;
    }
    c->tail_claim_id =
        (uint64_t(d->slot(c->slot)->owner_pid.load(std::memory_order_relaxed)) << 32) | (uint64_t(c->slot) + 1);
  }
  heap.release();
  *out = c;
  return Status::OK();
}

Status File::Begin(Operation* op) {
  UPFS_RETURN_IF_ERROR(Ctx(&op->c));
  op->pin.emplace(epochs(), op->c->slot);
  return CatchUp(op->c, &op->t);
}

Status File::RebuildTableLocked() {
  // Pinned (from CatchUp), or validating (read-only), and applying.
  UPFS_ASSERT(apply_lock_.test(std::memory_order_relaxed));
  auto table = std::make_unique<BlockTable>();
  ReplayResult res;
  if (read_only())
    UPFS_RETURN_IF_ERROR(ReplayValidated(&table, &res));
  else
    UPFS_RETURN_IF_ERROR(ReplayHead(table.get(), &res, TailRule::kLive));
  if (const BlockTable* old = table_.load(std::memory_order_relaxed)) table->InheritFlipStamps(*old);
  std::lock_guard<std::mutex> g(tables_mu_);
  tables_.push_back(std::move(table));
  table_.store(tables_.back().get(), std::memory_order_release);
  FreeRetiredTablesLocked();
  return Status::OK();
}

// Tables replaced by a replay are read by threads pinned before the
// replacement, so they are freed through the epochs like log blocks: two
// epochs after their retirement nobody can hold them. (A read-only File has
// no epochs; its tables live until close.) Every compaction replaces the
// table of a file with patches, so without this a long-lived process
// would keep one table per compaction.
void File::FreeRetiredTablesLocked() {
  EpochDomain* d = epochs();
  if (!d || tables_.size() < 2) return;
  const uint64_t now = d->epoch().load(std::memory_order_seq_cst);
  retired_at_.resize(tables_.size() - 1, now);  // the table just replaced retires now
  const uint64_t safe = d->TryAdvanceEpoch();
  size_t kept = 0;
  for (size_t i = 0; i + 1 < tables_.size(); ++i) {
    if (retired_at_[i] + 2 <= safe) continue;
    tables_[kept] = std::move(tables_[i]);
    retired_at_[kept++] = retired_at_[i];
  }
  tables_[kept] = std::move(tables_.back());
  tables_.resize(kept + 1);
  retired_at_.resize(kept);
}

// A table must be replayed anew after a compaction of blocks it still
// needs: the block under its cursor (its next entries), or with patches,
// any compacted block (the bytes of its patches may be there, and the
// compacted blocks are reused once every pin older than the compaction is
// gone).
bool File::StaleAfterCompaction(const BlockTable& t, const LogPos& p, uint64_t compact_seq) {
  if (p.seq < compact_seq) return true;
  return t.patches().any() && t.compact_seen() < compact_seq;
}

Status File::CatchUp(ThreadCtx* c, BlockTable** out) {
  if (read_only()) return CatchUpReadOnly(c, out);
  // Blocks past the cursor may be retired by a GC: only a pin keeps them.
  UPFS_ASSERT(EpochPin::Pinned(epochs(), c->slot));
  BlockTable* t = table_.load(std::memory_order_acquire);
  LogPos p = t->cursor();
  uint64_t compact = root_.words->compact_seq.load(std::memory_order_acquire);
  if (!StaleAfterCompaction(*t, p, compact) && NothingCommittedAt(LogAt(p.lblock), p.slot)) {
    *out = t;
    return Status::OK();
  }
  SpinGuard g(apply_lock_);
  t = table_.load(std::memory_order_acquire);
  p = t->cursor();
  if (StaleAfterCompaction(*t, p, root_.words->compact_seq.load(std::memory_order_acquire))) {
    // GC compacted the blocks under our cursor, or blocks that hold
    // patches the table points to: replay the new chain.
    UPFS_RETURN_IF_ERROR(RebuildTableLocked());
    t = table_.load(std::memory_order_acquire);
    p = t->cursor();
  }
  // A damaged entry is refused here exactly as a replay refuses it, and
  // the cursor stays before it (re-applying the entries before it again is
  // harmless: effects assign or take a maximum), so it is refused again.
  Status bad;
  if (root_.granules) t->BeginCatchUp(ShadowIndex::Now());
  Status st = ScanCommitted(access_, &p, &c->scratch, [&](const Effect& e) {
    if (e.grow_tail) {
      bad = CheckGrowTail(*t, e, p.lblock, p.last);  // the scan is past the entry
      if (!bad.ok()) return false;
    }
    bad = t->Apply(e);
    return bad.ok();
  });
  if (!bad.ok()) return bad;
  t->set_cursor(p);
  *out = t;
  return st;
}

// ---------------------------------------------------------------------------
// Commit

// A two-word entry (a flip, a checked append) takes an even slot, and an
// odd tail is first padded with an inert reservation (LogWriter::
// CommitChecked): a table right before that pad stands right before the
// entry too, since a catch-up steps over the pad and changes nothing.
// Without this, every such entry that needed a pad was left to the next
// catch-up (OwnApply.FlipsAndAppendsAreAppliedByTheirCommitter).
bool File::OnlyPadBefore(const LogPos& cur, uint32_t at) const {
  if (cur.slot == at) return true;
  return cur.slot + 1 == at &&
         LogAt(cur.lblock)->slots[cur.slot].load(std::memory_order_acquire) == format::EncodeReserve(0);
}

// In `after`'s block, or at the very end of the block before it when the
// entry opens its block (the commit linked it: `after` came from the
// block the cursor is in). Left to a catch-up, an entry that opened a
// block kept the table at the end of the block before, and a GC that the
// write then waited for (LogWriter's gc_behind_) compacted that block
// under the cursor: the next call replayed the whole log, 11 ms for a
// 1 GiB file of random small writes (docs/design.md, "Garbage collection").
bool File::StandsBefore(const LogPos& cur, const LogPos& after, uint32_t at) const {
  if (cur.lblock == after.lblock) return OnlyPadBefore(cur, at);
  // The end: the last slot, or a pad that fills the block (a two-word
  // entry that did not fit, LogWriter::CommitChecked).
  if (!OnlyPadBefore(cur, format::kSlotsPerLogBlock) || after.prev != cur.lblock || after.seq != cur.seq + 1)
    return false;
  return OnlyPadBefore(LogPos{after.lblock, 0}, at);
}

// The next catch-up would decode the entry just committed to apply it.
// When the table stands right before it (at its first slot `at`, or at
// the pad before it; nothing committed before it that the table lacks)
// and nobody else is applying,
// the committer applies it itself, from what it knows: `build` writes its
// effect.
bool File::BeginOwnApply(BlockTable* t, const LogPos& after, uint32_t at) {
  if (apply_lock_.test_and_set(std::memory_order_acquire)) return false;  // someone is applying
  const LogPos cur = t->cursor();
  if (t == table_.load(std::memory_order_relaxed) && StandsBefore(cur, after, at) &&
      !StaleAfterCompaction(*t, cur, root_.words->compact_seq.load(std::memory_order_acquire))) {
    // Entries the next catch-up finds were committed after this one.
    if (root_.granules) t->BeginOwnApply(ShadowIndex::Now());
    return true;
  }
  EndOwnApply();
  return false;
}

bool File::TableAtLogEndForTest() const {
  const LogPos p = table_.load(std::memory_order_acquire)->cursor();
  return NothingCommittedAt(LogAt(p.lblock), p.slot);
}

bool File::ApplyOwnEffect(BlockTable* t, FunctionRef<void(Effect*)> build) {
  build(&own_effect_);
  return t->Apply(own_effect_).ok();
}

// ---------------------------------------------------------------------------
// Reclamation

void File::ReleaseDisplaced(ThreadCtx* c, const uint32_t* blocks, size_t n) {
  // Strict mode: readers validate against the log, so a displaced block may
  // be reused at once. Sync mode writes in place, so a displaced block may
  // still be a target of an in-place write: retire it through EBR. So must
  // strict mode while someone holds the tail claim: the displaced block may
  // be the tail block it writes past the end of file (see TryClaimTail),
  // and while someone holds a granule claim: the block may be a pair whose
  // homes it writes (FlipOnce).
  bool immediate = root_.consistency == Consistency::kStrict;
  if (immediate) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    immediate = root_.words->tail_claim.load(std::memory_order_relaxed) == 0;
    for (const auto& g : root_.words->granule_claim)
      immediate = immediate && g.load(std::memory_order_relaxed) == 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!blocks[i]) continue;
    if (immediate)
      source_->Free(&c->blocks, blocks[i], 1);
    else
      source_->Retire(&c->blocks, blocks[i], 1);
  }
}

Status File::CollectGarbage(bool force) {
  if (read_only()) return ReadOnlyRefusal();
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  // Patched blocks and cold pairs first, so that the compacted log carries
  // fewer patches and reads find whole blocks (docs/design.md, "GC folds,
  // then copies", "Folding pairs back"). Sync-mode logs hold neither. A
  // forced GC folds every pair.
  if (root_.consistency == Consistency::kStrict) {
    uint64_t folded = 0;
    UPFS_RETURN_IF_ERROR(FoldBlocks(c, force, UINT64_MAX, &folded));
  }
  return LogCompactor(space_, source_, root_).Collect(&c->blocks, c->slot, force);
}

bool File::ReleaseGcBlocks() {
  ThreadCtx* c;
  if (!Ctx(&c).ok()) return true;
  source_->DrainLimbo(&c->blocks, true);
  source_->ReturnAll(&c->blocks);
  return c->blocks.limbo.empty();
}

bool File::RequestBackgroundGc() {
  if (!GcWorker::Background()) return false;
  // Before the request: ~File asks the worker to forget only a File it
  // may hold (its mutex and two list scans were a sixth of closing a
  // small file).
  handed_to_gc_.store(true, std::memory_order_release);
  return GcWorker::Get().Request(this);
}

void File::MaybeCollectGarbage(ThreadCtx* c) {
  if (!c->blocks.limbo.empty()) source_->DrainLimbo(&c->blocks, false);
  bool wanted, behind;
  // The floor from this process's table, as pinned as the write is.
  writer_.TakeGcRequests([&] { return LogCompactor::FloorBlocks(*table_.load(std::memory_order_acquire)); },
                         &wanted, &behind);
  if (!wanted && !behind) return;
  if (RequestBackgroundGc()) {
    // Writers outpacing the worker would grow the log without bound:
    // past twice the trigger, the write that notices waits for the GC.
    if (behind) GcWorker::Get().Wait(this);
    return;
  }
  (void)CollectGarbage(false);  // best effort: the log just stays longer
}

bool File::ReadsMetShadows(uint32_t now) const {
  const uint32_t asked = last_fold_request_.load(std::memory_order_relaxed);
  return asked != 0 && ShadowIndex::Age(asked - 1, now) < 2 * kPairColdMs;
}

void File::NoteShadowRead() {
  if (read_only() || root_.consistency != Consistency::kStrict) return;
  const uint32_t now = ShadowIndex::Now() + 1;  // 0 stays "never"
  uint32_t last = last_fold_request_.load(std::memory_order_relaxed);
  if (last && ShadowIndex::Age(last, now) < kPairColdMs) return;
  if (!last_fold_request_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  if (RequestBackgroundGc()) return;
  (void)CollectGarbage(false);  // best effort, as a write's GC
}

void File::Settle() {
  if (source_) GcWorker::Get().Wait(this);
  space_->Settle();  // after the GC: its allocations may have grown the file
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
  return WithTable([&](BlockTable* t) {
    // The cursor before the size: a size read after it is that of the
    // cursor or of entries applied since, which the hint's reader finds
    // committed at the cursor (stat_hint.h).
    const LogPos at = t->cursor();
    UPFS_RETURN_IF_ERROR(StatLocked(t, st));
    if (root_.stat_hints && root_.words && !read_only())
      PublishStatHint(root_.words, root_.head->load(std::memory_order_acquire), at, st->size, st->blocks);
    return Status::OK();
  });
}

Status File::StatLocked(BlockTable* t, FileStat* st) {
  st->size = t->size();
  st->blocks = t->mapped_blocks() + t->shadows().count();  // a pair takes two
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

Status File::FirstDataBlock(uint32_t* lblock) {
  return WithTable([&](BlockTable* t) {
    const uint64_t v = t->NextMapped(0, t->high_water(), /*mapped=*/true);
    *lblock = v < t->high_water() ? t->Get(v) : 0;
    return Status::OK();
  });
}

Status File::DataExtents(uint64_t extent_blocks, std::vector<uint64_t>* extents) {
  UPFS_ASSERT(extent_blocks > 0);
  extents->clear();
  return WithTable([&](BlockTable* t) {
    // A file's blocks mostly run on (ctFS-style partitions): the last
    // extent seen answers most blocks, the set the rest.
    std::unordered_set<uint64_t> seen;
    uint64_t last = UINT64_MAX;
    // Shadows too: a read of a granule that lives there faults otherwise.
    t->ForEachHeld([&](uint32_t l) {
      const uint64_t e = l / extent_blocks;
      if (e == last) return;
      last = e;
      if (seen.insert(e).second) extents->push_back(e);
    });
    return Status::OK();
  });
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
