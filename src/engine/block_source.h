// BlockSource: one allocation and reclamation domain, lent by the container
// (one per file today, one per pool tomorrow). Blocks are taken from the
// shared bitmap by CAS, and each thread keeps a contiguous chunk and a free
// list, so that an overwrite-heavy thread recycles its own blocks and rarely
// touches shared cache lines. Blocks that a reader may still read are
// retired, and reused only when the epoch has moved on twice (EBR).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <sys/types.h>
#include <vector>

#include "engine/alloc_bitmap.h"
#include "engine/punched_extents.h"
#include "engine/reclamation.h"
#include "format/format.h"
#include "medium/block_space.h"
#include "util/assert.h"
#include "util/status.h"

namespace upfs {

// Blocks owned by one thread for one user of a domain: taken in the bitmap,
// referenced by nothing. Lost (until the next rebuild) if the process dies.
struct ThreadBlocks {
  std::vector<uint32_t> free;  // single recycled blocks
  uint64_t chunk_next = 0;     // contiguous reserved range [chunk_next, chunk_end)
  uint64_t chunk_end = 0;
  // Set by the engine before it allocates for a file: the block a new
  // chunk should start at to continue the file's blocks (0 = none), and the
  // file's size in blocks (a big file takes whole 2 MiB partitions).
  uint64_t prefer = 0;
  uint64_t file_blocks = 0;
  struct Retired {
    uint64_t epoch;
    uint32_t lblock;
    uint32_t count;
  };
  std::vector<Retired> limbo;  // freed when the epoch has moved on twice
};

class BlockSource {
 public:
  // Blocks [0, reserved_blocks) are the container's own (a header): never
  // handed out, and marked taken by every rebuild.
  BlockSource(BlockSpace* space, AllocationBitmap* bitmap, EpochDomain* epochs,
              uint32_t reserved_blocks)
      : space_(space), bm_(bitmap), epochs_(epochs), reserved_(reserved_blocks) {}
  BlockSource(const BlockSource&) = delete;
  BlockSource& operator=(const BlockSource&) = delete;

  BlockSpace* space() const { return space_; }
  AllocationBitmap* bitmap() const { return bm_; }
  EpochDomain* epochs() const { return epochs_; }
  uint32_t reserved_blocks() const { return reserved_; }

  // Appends runs totalling `n` blocks to *runs, as contiguous as possible.
  Status Alloc(ThreadBlocks* t, uint64_t n, std::vector<format::Run>* runs);
  Status AllocOne(ThreadBlocks* t, uint32_t* l);
  // One block for a container's own structure, outside any chunk (a
  // pool's namespace log, inode and checkpoint header blocks): the first
  // free block of the first word with room from the small files' hint, so
  // that such blocks pack together instead of each starting a chunk.
  Status AllocSingle(uint32_t* l);
  // One run of exactly `n` blocks (a payload's overflow must be one): when
  // the free space is all in shorter pieces, from space grown past the end.
  Status AllocContiguous(ThreadBlocks* t, uint64_t n, format::Run* out);
  // Grows the space, if needed, so that it has room for `blocks` blocks in
  // all (fallocate's reservation: see docs/design.md).
  Status EnsureCapacity(uint64_t blocks);
  // Gives blocks back to the thread (they must be unreachable by readers,
  // see docs/design.md on reuse).
  void Free(ThreadBlocks* t, uint32_t l, uint32_t count);
  void FreeRuns(ThreadBlocks* t, const std::vector<format::Run>& runs) {
    for (const format::Run& r : runs) Free(t, r.lblock, r.count);
  }
  // Retires blocks a reader may still be reading: freed to the thread two
  // epochs later (DrainLimbo).
  void Retire(ThreadBlocks* t, uint32_t lblock, uint32_t count);
  // Frees what has waited long enough; with `force`, tries harder to move
  // the epoch on (at close).
  void DrainLimbo(ThreadBlocks* t, bool force);
  // Gives the rest of the thread's chunk back to the shared bitmap.
  void DropChunk(ThreadBlocks* t);
  // Returns everything the thread holds but its limbo to the shared bitmap.
  void ReturnAll(ThreadBlocks* t);
  // A closing File's thread state back: ReturnAll, except that in a source
  // whose owner asked for it (ParkClosedChunks: a pool, which outlives its
  // files) the rest of the chunk, while fewer than kParkedChunks are, is
  // kept claimed for the next new File's first claim (a small file's life
  // claimed a chunk from the shared bitmap and gave it back: 768 of the
  // ~23,000 instructions of creating, writing, closing and removing one).
  // The owner returns what is parked before it goes (ReturnParked); a
  // crash leaves it to recovery's rebuild of the bitmap, as a live File's
  // chunk.
  void ReturnAtClose(ThreadBlocks* t);
  void ParkClosedChunks() { parks_ = true; }
  // Every parked chunk back to the shared bitmap; whether there was one.
  bool ReturnParked();
  ~BlockSource() { UPFS_ASSERT(!AnyParked() && punched_.empty()); }

  // Free space given back to the host (block_source_punch.cc; docs/design.md,
  // "Giving free space back"): wholly free 2 MiB extents are claimed, highest
  // first, while more than `keep_free_blocks` blocks stay free, and their
  // memory released (BlockSpace::Release); each stays taken, recorded as
  // punched, until ReturnPunched gives it memory again. Extents a rebuild
  // adopted are released too (they may hold memory). Returns how many
  // blocks this call released (0 where the space cannot release).
  uint64_t PunchFreeExtents(uint64_t keep_free_blocks = 0);
  // Where punched extents are recorded: by default a list of this process
  // (a per-file space, whose shared state goes with its last user); a
  // space many processes share for good (a pool) lends a shared set
  // instead, so that any of them takes back what another gave back. Set
  // before any allocation.
  void SharePunched(SharedPunchedExtents* set) { shared_punched_ = set; }
  // At least `want` blocks (whole extents, lowest first) of what is
  // punched given memory again and freed; false if nothing is punched. If
  // the space cannot back them (ENOSPC), false with the error in *st and
  // nothing freed.
  bool ReturnPunched(uint64_t want, Status* st);
  // The same for a contiguous run of n blocks: the lowest ceil(n / 2 MiB)
  // neighbouring punched extents, given memory again and freed, for the
  // scan that looks for n free blocks in a row. False if no such
  // neighbours are punched (or another process took one of them first;
  // those taken are freed with memory), *st the error if providing failed.
  bool ReturnPunchedRun(uint64_t n, Status* st);
  // After a rebuild: the extent [first, first + kPartitionBlocks), a hole
  // in the space, taken and listed as punched (nothing is stored there
  // until ReturnPunched provides it) if the rebuilt bitmap has all of it
  // free; false if not (then the caller provides it). On tmpfs a hole may
  // be pages allocated ahead and never written: the next
  // PunchFreeExtents, once the file is quiet, releases them. Not for a
  // shared set (its owner punches what a rebuild finds free).
  bool AdoptPunched(uint64_t first);
  // The owner's last word on what is punched: with other users of the
  // space, each extent is provided and freed for them (an error leaves it
  // taken until the next rebuild); as its last user (`last`), it is
  // forgotten, and the next rebuild adopts the holes again. Not for a
  // shared set, which outlives the process.
  void SettlePunchedAtClose(bool last);
  uint64_t punched_blocks() const {
    return shared_punched_ ? shared_punched_->blocks() : punched_blocks_.load(std::memory_order_relaxed);
  }
  // fn(first block) for each punched extent (for an audit).
  template <typename Fn>
  void ForEachPunched(Fn fn) const {
    if (shared_punched_) {
      shared_punched_->ForEach([&](uint64_t e) { fn(e * kPartitionBlocks); });
      return;
    }
    std::lock_guard<std::mutex> g(punch_mu_);
    for (uint64_t e : punched_) fn(e * kPartitionBlocks);
  }
  // Gives memory to the bitmap's words (bits and summaries) for blocks
  // [from, to) (medium/provide.h), so that no store to them can be a SIGBUS
  // on a full file system: ENOSPC instead. PublishCapacity does it with the
  // blocks themselves; recovery before it rebuilds the bitmap.
  static Status ProvideBitmap(const AllocationBitmap& bm, uint64_t from, uint64_t to);

 private:
  Status ClaimChunk(ThreadBlocks* t, uint64_t want);
  // A parked chunk of at least n blocks made the thread's, for a claim that
  // continues nothing (a new small file's first blocks).
  bool TakeParked(ThreadBlocks* t, uint64_t n);
  bool AnyParked() const;
  // The claim policy (docs/design.md, "Allocation"): continue the file,
  // else whole 2 MiB partitions for a big file, else whole words, else a
  // run in a partly used word. Sets [*first, *first + *count).
  bool TryClaim(const ThreadBlocks& t, uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count);
  // Takes the free blocks from `at` on, as many as are contiguous (up to
  // `want`); *count = 0 when block `at` is taken.
  void ClaimFrom(uint64_t cap, uint64_t at, uint64_t want, uint64_t* count);
  // Whole free words (or 2 MiB partitions) from word w on, up to `want` blocks.
  bool ClaimWholeWords(uint64_t cap, uint64_t w, uint64_t want, uint64_t* count);
  // ClaimWholeWords from word w, and the small files' hint moved past them.
  bool TakeWordsAt(uint64_t cap, uint64_t w, uint64_t want, uint64_t* first, uint64_t* count);
  bool ClaimPartitions(uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count);
  bool ClaimEmptyWords(uint64_t cap, uint64_t want, uint64_t* first, uint64_t* count);
  // The first word with room from the hint: whole (and the free words
  // after it) if it is free and `whole_words`, else its first run of free
  // blocks, up to `want`.
  bool ClaimRunInWord(uint64_t cap, uint64_t want, bool whole_words, uint64_t* first,
                      uint64_t* count);
  // The first word with room from the small files' hint (the last, partial
  // word last), or kNone: a candidate, the caller's CAS decides.
  uint64_t WordWithRoom(uint64_t cap) const;
  // Whether at least n of the first `cap` blocks are free (a scan of the
  // bitmap that stops as soon as it has seen n).
  bool FreeAtLeast(uint64_t cap, uint64_t n) const;
  // The first run of n free blocks below `cap`, claimed; false if the scan
  // of the bitmap found none it could claim.
  bool ClaimFreeRun(uint64_t cap, uint64_t n, uint64_t* first);
  // Blocks [a, a + n), claimed if all of them are free (else none).
  bool ClaimRange(uint64_t a, uint64_t n);
  // AllocSingle's claim; false if no word has room (or the tries lost).
  bool ClaimSingle(uint64_t cap, uint64_t* block);
  void ReturnRange(uint64_t l, uint64_t count);
  // Raises the bitmap's capacity to the space's (at most its first
  // `up_to` bytes), once it gave the new blocks memory; on an error
  // nothing is published.
  static Status PublishCapacity(BlockSpace* space, AllocationBitmap* bm,
                                uint64_t up_to = UINT64_MAX);

  BlockSpace* space_;
  AllocationBitmap* bm_;
  EpochDomain* epochs_;
  uint32_t reserved_;
  // Parked chunks, each (first block << 32) | count, 0 when empty (block 0
  // is the container's header, never in a chunk).
  static constexpr uint32_t kParkedChunks = 8;
  bool parks_ = false;  // set before any File uses the source
  std::array<std::atomic<uint64_t>, kParkedChunks> parked_{};
  // The list is the process's that punched (a fork child's copy names
  // extents its parent may return and reuse: dropped, never returned).
  bool PunchedAreOursLocked();
  mutable std::mutex punch_mu_;
  std::vector<uint64_t> punched_;  // extent numbers, ascending, under punch_mu_
  std::vector<uint64_t> adopted_;  // of those, adopted by a rebuild and not released since
  uint64_t ReleaseAdoptedLocked();
  pid_t punched_by_ = 0;           // under punch_mu_
  std::atomic<uint64_t> punched_blocks_{0};  // punched_.size() blocks, for ClaimChunk without the lock
  SharedPunchedExtents* shared_punched_ = nullptr;  // instead of the list (SharePunched)
  // The claimed extents (ascending) recorded as punched.
  void RecordPunched(const std::vector<uint64_t>& extents);
};

// Blocks taken for one operation: given back when the guard goes out of
// scope unless the commit that publishes them took them (Keep).
class PendingBlocks {
 public:
  PendingBlocks(BlockSource* src, ThreadBlocks* t, std::vector<format::Run>* runs)
      : src_(src), t_(t), runs_(runs) {}
  ~PendingBlocks() {
    if (runs_) src_->FreeRuns(t_, *runs_);
  }
  PendingBlocks(const PendingBlocks&) = delete;
  PendingBlocks& operator=(const PendingBlocks&) = delete;
  // The log now owns them.
  void Keep() { runs_ = nullptr; }

 private:
  BlockSource* src_;
  ThreadBlocks* t_;
  std::vector<format::Run>* runs_;
};

}  // namespace upfs
