// File: the upfs file engine for one open file in one process.
//
// Every operation runs in the caller's thread, without locks shared with
// other processes (docs/design.md, "Concurrency"):
//   1. pin the current reclamation epoch (so no log block or retired data
//      block it may read is reused under it);
//   2. catch the process's block table up to the log tail;
//   3. read, or prepare a write privately (new blocks, copy, persist);
//   4. validate / commit with one CAS at the log tail, re-checking entries
//      committed in between for conflicts and redoing if there are any.
// The engine knows blocks only by number, in storage a container lends it
// (FileStorage): a block space, a block source and a log root.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/per_thread.h"
#include "engine/block_source.h"
#include "engine/block_table.h"
#include "engine/epoch_pin.h"
#include "engine/log.h"
#include "engine/log_root.h"
#include "engine/log_writer.h"
#include "engine/read_ahead.h"
#include "format/format.h"
#include "medium/block_space.h"
#include "util/function_ref.h"
#include "util/status.h"

namespace upfs {

class GcWorker;

inline constexpr uint32_t kMaxThreads = 1024;
// This thread's index below kMaxThreads (reused after the thread ends).
uint32_t ThreadIndex();
// For a fork's handlers (the lock the indices are handed out under; a
// child that copied it held would wait for ever at its first use of an
// engine in a new thread, or at that thread's end).
void LockThreadIndicesForFork();
void UnlockThreadIndicesAfterFork();

struct FileStat {
  uint64_t size = 0;
  uint64_t blocks = 0;  // 4 KiB blocks held (data, including preallocated, and shadows)
  int64_t mtime_ns = 0;       // ns since the epoch
  int64_t data_ctime_ns = 0;  // last change of data or size through upfs
};

// State of one thread for one file.
struct ThreadCtx {
  uint32_t slot = kMaxSlots;  // EBR slot in the block source's domain
  uint64_t tail_claim_id = 0;  // this thread's value of LogWords::tail_claim
  ThreadBlocks blocks;
  Effect scratch;
  std::vector<format::Run> runs;
  std::vector<uint32_t> old;  // mapping displaced by the operation
  std::vector<uint32_t> old_shadow;  // the shadows of those blocks (0: none)
  PendingEntry pending;  // the payload being prepared
  ReadAhead read_ahead;  // this thread's reads of the file, if sequential
  // The block or pair a granule flip takes (FlipOnce): kept, so that a
  // block's first flip allocates no vector (with one per flip, a 128-byte
  // overwrite took 2,540 instructions against 2,324: callgrind of upfs
  // bench --filter overwrite-128 --size 64M).
  std::vector<format::Run> flip_fresh;
};

// What a container lends a File. The File borrows it: the container keeps
// it alive through the lease it hands over with it.
struct FileStorage {
  BlockSpace* space = nullptr;
  BlockSource* source = nullptr;  // null for a read-only File
  LogRoot root;
  // The space belongs to a container that outlives this File and stops its
  // background work itself (a pool): the File must not stop it on close.
  bool space_outlives_file = false;
  // For an Open that rebuilds: whether a crash may have cut the log's last
  // commit short (the container knows: a per-file file's `in_use` word).
  // If not, such a commit is damage (docs/format.md, "A commit cut short").
  bool may_have_crashed = true;
  // The space is this File's alone to give back to the host once the file
  // goes quiet (BlockSource::PunchFreeExtents): a per-file file's, not a
  // pool's, which other files share.
  bool give_back_free_space = false;
};

// The container's hold on what it lent (host file, shared memory, pool):
// opaque to the engine, destroyed right after the File has given back
// everything it took (blocks, slots).
class StorageLease {
 public:
  virtual ~StorageLease() = default;
  // Blocks the File retired (a GC's old log, blocks an overwrite replaced)
  // that could not be freed before it closed: their epochs had not passed.
  // A container whose space outlives the File takes them (emptying
  // *limbo) and frees them once the epochs have passed; left in *limbo,
  // they stay taken until the space's next rebuild.
  virtual void KeepRetired(std::vector<ThreadBlocks::Retired>* limbo) {}
};

class File {
 public:
  // Builds the engine over a log whose root the container validated. With
  // `rebuild` (the container found nobody else using the domain and reset
  // its bitmap), marks every block the log references in it; the caller
  // then checks rebuild->status().
  static Status Open(const FileStorage& storage, BlockMarker* rebuild,
                     std::unique_ptr<StorageLease> lease, std::unique_ptr<File>* out);
  // Builds a read-only engine, for a caller who may read the file but not
  // write it: no block source, nothing written. With no epoch to pin,
  // every read is validated against compaction by the log head instead
  // (docs/design.md, "Read-only opens").
  static Status OpenReadOnly(const FileStorage& storage, std::unique_ptr<StorageLease> lease,
                             std::unique_ptr<File>* out);
  bool read_only() const { return source_ == nullptr; }
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  Status Read(void* buf, size_t n, uint64_t off, size_t* done);
  // Writes at `off`, or at the end of file if `append` (then *at receives
  // the offset written at).
  Status Write(const void* buf, size_t n, uint64_t off, bool append, uint64_t* at);
  Status Truncate(uint64_t len);
  Status Fallocate(int mode, uint64_t off, uint64_t len);
  Status Sync();
  // Waits for background work on the file (growth, huge pages, a GC).
  void Settle();
  Status Stat(FileStat* st);
  // Sets the modification time (utimensat), durably.
  Status SetMtime(int64_t mtime_ns);
  Status Size(uint64_t* size);
  // SEEK_DATA (data = true) / SEEK_HOLE semantics of lseek(2).
  Status SeekDataHole(uint64_t off, bool data, uint64_t* result);
  // Compacts the log if it is past the trigger length (with force: whenever
  // that makes it shorter). Non-blocking: returns at once if another GC is
  // running.
  Status CollectGarbage(bool force);
  // For the GC worker, after a GC in its thread: frees what that thread
  // retired once two epochs have passed, and gives every block the thread
  // holds back to the shared bitmap, where writers find them. False while
  // some retired blocks must still wait.
  bool ReleaseGcBlocks();
  // For the GC worker, a while after a flip paired a block (or an open):
  // folds the pairs no flip touched for the idle age (kPairIdleMs),
  // kQuietFoldBatch at a time, and compacts the log once none is left to
  // fold (docs/design.md, "Folding pairs back"); with no pair left, gives
  // a per-file file's free extents back to the host once nothing wrote
  // it for the idle age ("Giving free space back"). Returns in how many
  // milliseconds it wants to run again, 0 for not until a flip pairs a
  // block anew.
  uint32_t FoldWhenQuiet();
  // The idle age of quiet folds (and of the GC's folds of pairs no reader
  // met), kPairIdleMs unless set here; 0 restores it. For tests.
  static void SetPairIdleMsForTest(uint32_t ms);
  // Number of log blocks in the chain from the head to the tail.
  Status LogLength(uint64_t* blocks);
  // For a container that maps a file's pages ahead of its reads
  // (Medium::PopulateExtents): the block (in the space) of the file's
  // first mapped block, 0 if none; and the extents of `extent_blocks`
  // blocks (numbered from the space's start) that hold the file's blocks
  // (and the shadows of paired ones), each once, in the order of the file
  // offsets that first reach them.
  Status FirstDataBlock(uint32_t* lblock);
  Status DataExtents(uint64_t extent_blocks, std::vector<uint64_t>* extents);
  // Compares the shared allocation bitmap with the blocks the log
  // references and this process's threads hold: *leaked counts blocks taken
  // but neither (lost until the next rebuild), *unmarked blocks referenced
  // but free (damage to the allocation state). Waits for the file's GC in
  // this process's worker and holds the worker off while it counts; exact
  // when no other thread of this process is inside a call and no other
  // process uses the file (engine/audit.cc).
  Status AuditAllocation(uint64_t* leaked, uint64_t* unmarked);

  // Whether this process's block table stands at the end of the log, with
  // nothing committed past its cursor. For tests (quiet file, one thread):
  // true right after a write whose committer applied its own entry
  // (ApplyOwn), which a catch-up would also apply, hiding the difference.
  bool TableAtLogEndForTest() const;
  // Opens by this thread that started from an empty log without a
  // replay (StartAtEmptyLog), for tests.
  static uint64_t EmptyLogStartsInThisThreadForTest();

  format::Consistency consistency() const { return root_.consistency; }
  BlockSpace* space() const { return space_; }
  BlockSource* source() const { return source_; }
  const LogRoot& root() const { return root_; }
  StorageLease* lease() const { return lease_.get(); }

 private:
  File(const FileStorage& storage, std::unique_ptr<StorageLease> lease);

  Status Init(BlockMarker* rebuild);
  // Whether the log is one empty block (a new file's, the common case of
  // a pool file's first use); if so, sets `table` to what a live replay of
  // it would. Pinned: the block is read.
  bool StartAtEmptyLog(BlockTable* table);
  // The start of every operation: this thread's context, pinned in the
  // current epoch (for as long as the Operation lives), and the block
  // table caught up to the log.
  struct Operation {
    ThreadCtx* c = nullptr;
    std::optional<EpochPin> pin;
    BlockTable* t = nullptr;
  };
  Status Begin(Operation* op);
  EpochDomain* epochs() const { return source_ ? source_->epochs() : nullptr; }
  Status Ctx(ThreadCtx** out);
  // A context for a thread that has none yet (Ctx's slow path).
  Status NewCtx(ThreadCtx** out);
  template <typename Fn>
  Status WithTable(Fn fn);
  Status StatLocked(BlockTable* t, FileStat* st);
  Status SeekLocked(BlockTable* t, uint64_t off, bool data, uint64_t* result);
  Status LogLengthLocked(BlockTable* t, uint64_t* blocks);
  Status CatchUp(ThreadCtx* c, BlockTable** out);
  static bool StaleAfterCompaction(const BlockTable& t, const LogPos& p, uint64_t compact_seq);
  // Read-only Files: the log head (block, sequence) differs from the one t
  // was replayed from, so a GC may have reused the blocks t was read from.
  bool HeadMoved(const BlockTable* t) const;
  Status ChainHeadNow(uint32_t* head, uint64_t* seq) const;
  Status CatchUpReadOnly(ThreadCtx* c, BlockTable** out);
  // Replays the current chain into a new table, again until the head did
  // not move during the walk (a read-only File reads without a pin).
  Status ReplayValidated(std::unique_ptr<BlockTable>* table, ReplayResult* res);
  Status RebuildTableLocked();
  void FreeRetiredTablesLocked();
  Status ReplayHead(BlockTable* table, ReplayResult* res, TailRule rule);
  format::LogBlock* LogAt(uint32_t lblock) const {
    return reinterpret_cast<format::LogBlock*>(access_.AddrUnchecked(lblock));
  }

  Status AppendInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                       bool append, uint64_t* at, bool* done);
  // An append in place as AppendInPlace found it under the tail claim
  // (file_write.cc).
  struct TailAppend {
    uint64_t size = 0, end = 0;         // the size before and after
    uint64_t in_block = 0;              // the size's offset in the tail block
    uint64_t first = 0;                 // the bytes that go into the tail block
    uint64_t vt = 0;                    // the tail block's vblock
    uint32_t last = 0;                  // the tail block
    char* tail = nullptr;               // its bytes
    bool checked = false;               // one persisted round (a checked append)
    // The new blocks, [vb0(), vb1()): past the tail block, up to the end.
    uint64_t vb0() const { return vt + 1; }
    uint64_t vb1() const { return format::CeilBlocks(end); }
    uint64_t nb() const { return vb1() > vb0() ? vb1() - vb0() : 0; }
  };
  static void StoreTailBytes(const TailAppend& a, const void* buf);
  Status BuildAppendEntry(ThreadCtx* c, const TailAppend& a, uint64_t* entry);
  // Releases a claim word (the tail's by default, or a granule claim), if
  // held, at the end of a scope.
  struct ClaimGuard {
    File* f;
    ThreadCtx* c;
    bool held = false;
    std::atomic<uint64_t>* claim = &f->root_.words->tail_claim;
    ~ClaimGuard() {
      if (held) f->ReleaseClaim(claim, c);
    }
  };
  bool TryClaimTail(ThreadCtx* c) { return TryClaim(&root_.words->tail_claim, c); }
  // Takes a claim word (the tail's, a granule claim) for c's thread, or
  // takes it over from a dead owner; false if someone alive holds it.
  bool TryClaim(std::atomic<uint64_t>* claim, ThreadCtx* c);
  // TryClaim again for 64 pauses (file_flip.cc); false if still held.
  bool ClaimSoon(std::atomic<uint64_t>* claim, ThreadCtx* c);
  void ReleaseClaim(std::atomic<uint64_t>* claim, ThreadCtx* c);
  // *any: an entry was committed after p (one whose effect `which` picks,
  // if given).
  Status CommittedSince(ThreadCtx* c, const LogPos& p, bool* any,
                        FunctionRef<bool(const Effect&)> which = {});
  void ClaimTail(ThreadCtx* c);
  Status ZeroTailForGap(ThreadCtx* c, BlockTable* t, const LogPos& p, bool* claimed, bool* stale);
  static void AimAllocation(ThreadBlocks* b, const BlockTable& t, uint64_t vb0, uint64_t size);
  Status WriteOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                   bool append, uint64_t* at, bool* conflicted);
  Status WriteInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                      bool* done);
  // A small write inside one mapped block below the size, as a patch in
  // the log (file_patch.cc). *done: committed; *conflicted: something
  // touched the block since the snapshot (catch up and try again); neither:
  // not a patch (copy on write).
  Status PatchOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                   bool* done, bool* conflicted);
  // A write inside one mapped block below the size, as a granule flip
  // (file_flip.cc), in files whose format has them; *done and *conflicted
  // as for PatchOnce.
  Status FlipOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                  bool* done, bool* conflicted);
  bool AllocPair(ThreadCtx* c, std::vector<format::Run>* out);
  // A granule flip's block as FlipOnce found it under the block's claim.
  struct FlipTarget {
    uint64_t v;              // the block's number in the file
    uint32_t l;              // the block it maps to
    uint32_t lo, hi;         // the bytes [lo, hi) of it the write covers
    uint32_t valid;          // the size's offset in it, kBlockSize if past it
    uint32_t mask, shadow;   // its shadow pairing, if paired
    bool paired;
    bool copy_to_pair;       // a version 4 log's first flip: copy into a fresh pair
  };
  // Writes a flip's bytes (`in`, f.hi - f.lo of them) to the homes not
  // live, taking the fresh block or pair it needs into *fresh; sets *named
  // (the block the entry names) and *granules (those the entry makes
  // live). *staged false: no fresh block could be had, nothing was written
  // (the caller copies on write). file_flip.cc.
  Status WriteFlipHomes(ThreadCtx* c, const BlockTable& t, const FlipTarget& f, const char* in,
                        std::vector<format::Run>* fresh, uint32_t* named, uint32_t* granules,
                        bool* staged);
  // Commits the granule flip of block v naming `named` with this word 1,
  // after the data it makes live is durable; *conflicted if anything
  // touching v was committed after *p (file_flip.cc).
  Status CommitFlip(ThreadCtx* c, LogPos* p, uint64_t v, uint32_t named, uint64_t word1,
                    bool* conflicted);
  // Copies bytes [lo, hi) of block v (mapped to l) as a reader sees them
  // into out: the block, its patches, the granules its shadow holds.
  // Returns whether any of them came from a shadow.
  bool CopyBlockBytes(const BlockTable& t, uint64_t v, uint32_t l, uint64_t lo, uint64_t hi,
                      char* out) const;
  // The granules of [lo, hi) that live in the shadow of block v (paired
  // with l), over out (which holds byte lo at out[0]).
  bool CopyGranules(const BlockTable& t, uint64_t v, uint32_t l, uint64_t lo, uint64_t hi,
                    char* out) const;
  // The entry just committed (first slot `at`, ending at `after`),
  // applied by its committer when the table stands right before it and
  // nobody else is applying (file.cc): `apply` changes the table and says
  // whether it did (if not, the cursor stays before the entry, for a
  // catch-up to decode and report).
  template <typename Apply>
  void ApplyOwn(BlockTable* t, const LogPos& after, uint32_t at, Apply apply) {
    if (!BeginOwnApply(t, after, at)) return;
    if (apply()) t->set_cursor(after);
    EndOwnApply();
  }
  // The same for an entry of `slots` slots that is the last before
  // `after` (a flip, an append: nobody else's entry between them).
  template <typename Apply>
  void ApplyOwnLast(BlockTable* t, const LogPos& after, uint32_t slots, Apply apply) {
    const uint32_t at = after.last;
    if (at != LogPos::kNoSlot && at + slots == after.slot) ApplyOwn(t, after, at, apply);
  }
  // ApplyOwn of the effect `build` writes (into own_effect_), through
  // BlockTable::Apply, as a catch-up would apply it.
  void ApplyOwnEntry(BlockTable* t, const LogPos& after, uint32_t at,
                     FunctionRef<void(Effect*)> build) {
    ApplyOwn(t, after, at, [&] { return ApplyOwnEffect(t, build); });
  }
  // The effect `build` writes, applied (apply_lock_ held): whether it was.
  // It passed the same checks at commit; a failure leaves the cursor
  // before the entry, for a catch-up to decode and report.
  bool ApplyOwnEffect(BlockTable* t, FunctionRef<void(Effect*)> build);
  // Whether the committer of the entry at slot `at`, ending at `after`,
  // may apply it; if so, apply_lock_ is held until EndOwnApply.
  bool BeginOwnApply(BlockTable* t, const LogPos& after, uint32_t at);
  // Whether nothing but an alignment pad lies between the cursor and `at`.
  bool OnlyPadBefore(const LogPos& cur, uint32_t at) const;
  // Whether a table at `cur` stands right before the entry at slot `at`
  // that ends at `after` (nothing but a pad between them).
  bool StandsBefore(const LogPos& cur, const LogPos& after, uint32_t at) const;
  void EndOwnApply() { apply_lock_.clear(std::memory_order_release); }
  void ApplyOwnPatch(BlockTable* t, const LogPos& after, uint32_t rs, uint32_t words, uint64_t v,
                     uint32_t in, uint32_t n);
  // Copies bytes [lo, hi) of block v's patches in t over out (which holds
  // byte lo of the block at out[0]), in log order.
  void CopyPatches(const BlockTable& t, uint64_t v, uint64_t lo, uint64_t hi, char* out) const;
  // The whole block v (mapped to l) with its patches, into out.
  // Past `size` (the caller's snapshot's) it holds zeros, as a reader
  // sees it: what the block stores there may be anything (see "The tail
  // claim", file_write.cc), and a copy that kept it would show it once a
  // raise the copy does not conflict with lifts the size over it.
  void ComposeBlock(const BlockTable& t, uint64_t v, uint32_t l, uint64_t size, char* out) const;
  Status CopyIntoNewBlocks(ThreadCtx* c, const BlockTable& t, const void* buf, size_t n,
                           uint64_t off, uint64_t size, uint64_t vb0);
  Status PunchHole(ThreadCtx* c, BlockTable* t, uint64_t off, uint64_t end);
  Status CommitRangeChange(ThreadCtx* c, BlockTable** t, LogPos* p, uint64_t vb0, uint64_t vb1,
                           const std::vector<format::Run>& runs, Effect::SizeOp op,
                           uint64_t new_size, UncommittedBlocks* taken,
                           const uint32_t* displaced, size_t ndisplaced, bool* retry);
  Status MapZeroedHoles(ThreadCtx* c, BlockTable* t, uint64_t vb0, uint64_t map_end,
                        std::vector<format::Run>* fresh, bool* changes);
  void ReleaseDisplaced(ThreadCtx* c, const uint32_t* blocks, size_t n);
  // The GC's fold (file_fold.cc): block v of t (patched or paired) copied
  // whole as a reader sees it to a fresh block committed in its place
  // (releasing the pair), unless anything touched the block since t's
  // cursor (then *folded is false, no retry).
  Status FoldOnce(ThreadCtx* c, BlockTable* t, uint64_t v, bool* folded);
  // The fold of a paired block in a version 5 log (file_fold.cc): the
  // granules its shadow holds copied into their home copies, then an
  // unpairing committed, freeing the shadow; nothing if the granule claim
  // is held or anything touched the block since t's cursor.
  Status FoldHome(ThreadCtx* c, BlockTable* t, uint64_t v, bool* folded);
  // Folds every block whose patches reach three quarters of a limit, and
  // every pair no flip touched for the age ReadsMetShadows says (all_pairs:
  // every pair), at most `limit` blocks; pinned.
  Status FoldBlocks(ThreadCtx* c, bool all_pairs, uint64_t limit, uint64_t* folded);
  // A flip paired a block, or an open found pairs or free space it may
  // give back: asks the GC worker for a quiet run (FoldWhenQuiet), unless
  // one is pending.
  void AskForQuietRun();
  // FoldWhenQuiet's parts (file_quiet.cc): the compaction after its last
  // batch of folds, and, with no pair left, the give-back to the host
  // (returns the delay until it may give back, 0 once it did).
  void CompactAfterQuietFolds(ThreadCtx* c);
  uint32_t GiveBackWhenQuiet();
  // A read met granules in a shadow: asks the GC to fold cold pairs, at
  // most once a second per File.
  void NoteShadowRead();
  // Whether a reader asked for a fold lately (within two kPairColdMs of
  // `now`): the GC then folds pairs cold for kPairColdMs, else only those
  // idle for PairIdleMs() (file_internal.h).
  bool ReadsMetShadows(uint32_t now) const;
  void TouchMtime();
  void MaybeCollectGarbage(ThreadCtx* c);
  // Hands this File's GC to the process's worker; false if there is none
  // (UPFS_BACKGROUND_GC=0) or it could not start.
  bool RequestBackgroundGc();

  // Declared first, destroyed last: the container's hold on the storage.
  std::unique_ptr<StorageLease> lease_;
  BlockSpace* space_;
  BlockSource* source_;
  BlockAccess access_;
  LogWriter writer_;
  const LogRoot& root_;  // the writer's: one copy (see kFileBytesMax, file.cc)
  const bool space_outlives_file_;
  const bool give_back_free_space_;  // FileStorage::give_back_free_space
  // FileStorage::may_have_crashed: whether the rebuild's replay, and a
  // read-only File's, may meet a commit a crash cut short.
  const bool may_have_crashed_;

  std::atomic<BlockTable*> table_{nullptr};
  // The current table (last) and retired ones, freed two epochs after
  // their retirement (retired_at_[i] for tables_[i]) or at close.
  std::vector<std::unique_ptr<BlockTable>> tables_;
  std::vector<uint64_t> retired_at_;
  std::atomic_flag apply_lock_ = ATOMIC_FLAG_INIT;
  Effect own_effect_;  // an own entry's effect (ApplyOwnEntry, a version 4 first flip), under apply_lock_
  std::mutex tables_mu_;

  PerThread<ThreadCtx, kMaxThreads> ctx_;
  // The first thread's context, inside the File: most Files of a pool are
  // used by one thread from open to close, and its context's allocation
  // was one of the 22 a small file's life made. Taken once (the flag); the
  // other threads' contexts come from the heap.
  ThreadCtx first_ctx_;
  std::atomic<bool> first_ctx_taken_{false};
  std::atomic<uint64_t> last_mtime_stored_{0};  // the mtime this process last stored
  // ShadowIndex::Now() + 1 of the last fold request by a reader (0: none).
  std::atomic<uint32_t> last_fold_request_{0};
  // Whether the GC worker was ever asked to run for this File (only then
  // may it hold it in a list when the File goes).
  std::atomic<bool> handed_to_gc_{false};
  // Whether quiet folds folded pairs since the log's last compaction by
  // one (only the worker's thread runs them).
  bool quiet_folds_uncompacted_ = false;
  // The worker a quiet fold of this File is pending with (nullptr: none;
  // after a fork, the parent's, which the child does not have).
  std::atomic<GcWorker*> quiet_fold_worker_{nullptr};
};

}  // namespace upfs
