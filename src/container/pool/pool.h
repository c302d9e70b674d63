// Pool: one attached pool in this process. It maps the pool file, checks
// the superblock, joins the processes using it (recovering the volatile
// area when it is the first after a crash), and owns what every namespace
// operation and every file of the pool share: the block space, the block
// source (one allocation and reclamation domain for the whole pool), the
// namespace log and this process's index of it.
//
// Liveness without a daemon: every attached process holds a shared OFD lock
// on a byte of the pool file (the users byte), and each thread slot a lock
// of its own, which the kernel drops when the holder dies. The first
// process to attach when nobody holds the users byte is the only one that
// may rebuild the volatile area (docs/design.md, "Pools").
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "container/pool/inode_alloc.h"
#include "container/pool/ns_index.h"
#include "container/pool/ns_log.h"
#include "container/pool/pool_format.h"
#include "engine/alloc_bitmap.h"
#include "engine/block_source.h"
#include "engine/epoch_pin.h"
#include "engine/file.h"
#include "engine/reclamation.h"
#include "medium/medium.h"
#include "util/sharded_counter.h"
#include "util/spin_shared_mutex.h"
#include "util/status.h"

namespace upfs {

// Reads and checks the superblock of the pool file behind fd: EMEDIUMTYPE
// for a file that is not a pool, EUCLEAN (naming the superblock) for a
// damaged or truncated one, EPROTONOSUPPORT for another format version.
Status ReadSuperblock(int fd, const std::string& path, format::pool::Superblock* sb,
                      uint64_t* file_bytes);
Status CheckSuperblockImage(const format::pool::Superblock& sb, uint64_t file_bytes,
                            const std::string& path);

// The namespace log is checkpointed every this many log blocks (about
// 14,000 records of creates) at least; the log keeps at most two intervals.
inline constexpr uint64_t kCheckpointEveryBlocks = 256;
// ... and, behind an image of more than 4 x 256 blocks (about 80,000
// names), every image's blocks / this many: a checkpoint rewrites the
// whole image, so a fixed interval made each record pay for a share of
// the whole namespace (docs/design.md, "What a checkpoint costs as the
// namespace grows"); in proportion, it pays a constant share, and the log
// stays below half the image's size.
inline constexpr uint64_t kImageBlocksPerLogBlock = 4;
// The log blocks between two checkpoints behind an image of `image_words`.
// (0: no image yet).
inline constexpr uint64_t CheckpointIntervalBlocks(uint64_t image_words) {
  return std::max(kCheckpointEveryBlocks, format::CeilBlocks(image_words * 8) / kImageBlocksPerLogBlock);
}
// After a checkpoint failed: log blocks to wait before the next try.
inline constexpr uint64_t kCheckpointRetryBlocks = 32;

class Pool {
 public:
  // Makes a new pool file (EEXIST if `path` exists).
  static Status Create(const std::string& path, uint64_t size_hint);
  // Attaches to the pool file `path`.
  static Status Attach(const std::string& path, std::unique_ptr<Pool>* out);
  // Detaches; the last process to leave marks the volatile area clean.
  ~Pool();
  // Takes blocks a closing file retired whose epochs have not passed yet
  // (StorageLease::KeepRetired): freed with the pool's own retired blocks.
  void AdoptRetired(std::vector<ThreadBlocks::Retired>* limbo);
  // In a fork child: this attachment (its process and thread slots, block
  // caches, held inodes) is the parent's, so the child never uses or
  // destroys it. Closes the child's copy of the pool file's descriptor, so
  // that the parent's liveness locks end with the parent, not with the
  // last of its children; the caller then leaks the object.
  void ForgetAfterFork() { medium_->ForgetDescriptorAfterFork(); }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  const std::string& path() const { return path_; }
  Medium* medium() const { return medium_.get(); }
  BlockSource* source() const { return source_.get(); }
  EpochDomain* epochs() const { return epochs_.get(); }
  const format::pool::Superblock* super() const {
    return reinterpret_cast<const format::pool::Superblock*>(medium_->base());
  }
  format::pool::Superblock* mutable_super() const {
    return reinterpret_cast<format::pool::Superblock*>(medium_->base());
  }
  uint64_t root_ino() const { return super()->root_ino; }
  uint64_t dev() const { return dev_; }
  // A number no other attachment made by this process had: what a
  // thread's caches key this attachment by (an address may be reused).
  uint64_t instance() const { return instance_; }
  NsLog* log() { return &log_; }
  NsIndex* index() { return &index_; }
  InodeAllocator* inodes() { return &inodes_; }
  // The index's lock: shared for lookups, exclusive to apply records.
  SpinSharedMutex& index_mu() { return index_mu_; }

  // Address of inode `ino` (checked against the mapped space and the
  // layout; EUCLEAN otherwise).
  Status InodeAt(uint64_t ino, format::pool::Inode** out) const { return inodes_.At(ino, out); }
  // The pool's blocks, checked against the mapped space.
  const BlockAccess& access() const { return access_; }
  // Brings the index up to the log's tail (cheap when nothing is new).
  // Takes the index lock exclusively when there is something to apply.
  // Pins the calling thread while it reads the log.
  Status CatchUp();
  // The same, for a caller holding the index lock exclusively and pinned.
  Status CatchUpLocked();
  // Makes the index again from the newest checkpoint and the log (index
  // lock held exclusively, pinned): after a committed record it could not
  // apply, so that it never stands for a position past a record it lacks.
  // If that fails too, the index is lost to this attachment: every later
  // call that reads it fails (EUCLEAN, naming the namespace index).
  Status ReloadIndexLocked();
  // Applies a committed record to the index (lock held exclusively) and
  // notes a new regular file's creation values: until a checkpoint holds
  // the record, the file's image may have to be made again from them.
  Status ApplyLocked(const NsRecord& r, bool validated = false);
  // Takes the index lock shared, on an index that holds every record
  // committed before the call (catching up first if the log moved). The
  // caller is pinned. One lock round trip when nothing is new.
  Status LockLatest(std::shared_lock<SpinSharedMutex>* g);
  // Pin and then LockLatest, with one store-load fence for both (the
  // common start of a namespace call; spin_shared_mutex.h).
  Status PinAndLockLatest(std::optional<EpochPin>* pin, std::shared_lock<SpinSharedMutex>* g);
  // Whether the index holds every record committed before this call and
  // can be read (index lock held shared or exclusive, pinned).
  bool IndexCurrent() const {
    return !log_.AnyNew() && !CheckpointUnseen() && !index_lost_.load(std::memory_order_relaxed);
  }
  // Whether a checkpoint newer than the one this process's index stands on
  // has been published (then log blocks before this process's position may
  // have been retired before the caller pinned: catch up first).
  bool CheckpointUnseen() const {
    return super()->checkpoint.load(std::memory_order_acquire) !=
           seen_checkpoint_.load(std::memory_order_relaxed);
  }

  // Pins this thread in the pool's epochs for as long as *pin lives: the
  // checkpoint image and the log blocks it reads stay (re-entrant).
  Status Pin(std::optional<EpochPin>* pin);
  // This thread's slot in the pool's epoch domain for namespace work
  // (reading the log, whose blocks a checkpoint retires).
  Status NamespaceSlot(uint32_t* slot);
  // Writes a checkpoint if the log has grown by CheckpointIntervalBlocks
  // since the last one and no other process is writing one (`due` is the
  // caller's reading of that, taken under the index lock).
  void MaybeCheckpoint(bool due);
  // Whether the log has grown enough for a checkpoint (index lock held).
  bool CheckpointDue() const;
  // Writes a checkpoint now (for tests; no CLI command asks for one yet), unless
  // another process is writing one (EBUSY).
  Status Checkpoint();

  // Gives the memory of wholly free 2 MiB extents back to the host, highest
  // first, keeping `keep_blocks` free blocks with memory (pool_give_back.cc;
  // docs/design.md, "Giving free space back"). Version 10 pools only: 0
  // given back otherwise. Returns the blocks given back; any process takes
  // them back (with memory again) before the pool grows.
  uint64_t GiveBackFreeSpace(uint64_t keep_blocks = kKeepFreeBlocks);
  // What a detach and a checkpoint keep free with memory: the next writes
  // of a few hundred files need no fallocate (64 MiB).
  static constexpr uint64_t kKeepFreeBlocks = 16384;
  // Blocks given back and not taken back since (0 before version 10).
  uint64_t GivenBackBlocks() const { return punched_ ? punched_->blocks() : 0; }
  // Files' blocks this process releases (ReleaseInode) between two
  // give-backs of its own: the releaser past it gives back, so that a
  // process that stays attached (a FUSE mount, a shell under the preload
  // library) and removes a tree returns its memory as it goes, not at a
  // checkpoint its few records may never reach (64 MiB).
  static constexpr uint64_t kGiveBackAfterFreedBlocks = 16384;

  // One block for namespace structures (log and inode blocks), and back.
  Status AllocBlock(uint32_t* l);
  void FreeBlock(uint32_t l);
  // The namespace log's next block (NsLog::AllocBlock): when none is free,
  // a removal's record takes one of the log's reserve blocks; a block had
  // the ordinary way refills the reserve (pool_log_reserve.cc).
  Status AllocLogBlock(uint32_t* l, bool removal);
  // From now on AllocBlock finds no free block but those kept for new
  // files' logs, and a checkpoint no room for its image, as in a full pool
  // (for tests of removals and checkpoints in a full pool; this process
  // only).
  void RefuseBlocksForTest(bool refuse = true) { refuse_blocks_for_test_.store(refuse, std::memory_order_relaxed); }
  // A checkpoint's image alone finds no room (free space too fragmented):
  // every checkpoint fails while the log grows.
  void RefuseCheckpointImagesForTest(bool refuse = true) {
    refuse_images_for_test_.store(refuse, std::memory_order_relaxed);
  }
  // How many checkpoints this attachment began (claims won), for tests.
  uint64_t CheckpointsBegunForTest() const { return checkpoints_begun_.load(std::memory_order_relaxed); }
  // Gives back inode `ino` and every block its file holds: the last name
  // is gone and no descriptor of any process has it open.
  Status ReleaseInode(uint64_t ino);

  // The engine File of regular file `ino` in this process (opened, and its
  // first log block made, on first use); shared by every descriptor of it.
  // `for_use`: asked for a descriptor's first data call, not for a stat;
  // the first such ask in this attachment also maps the pages of the
  // file's data ahead of its reads, in the background, when the pool is
  // in small pages (MapAhead, pool_files.cc).
  Status FileOf(uint64_t ino, std::shared_ptr<File>* out, bool for_use = false);
  // The size, block count and data times of regular file `ino` from its
  // log's stat hint (engine/stat_hint.h), without an engine File; false if
  // the hint is missing or no longer true, or if the inode's ident is not
  // `ident` before and after (freed or made again meanwhile). The caller
  // is pinned.
  bool StatFromHint(uint64_t ino, uint64_t ident, FileStat* out);
  // A released file's log block this process kept (RecycleFileLog) made an
  // empty file log again: its lines are written back but not fenced (the
  // create's fence for its inode persists them before the inode that names
  // the block can be reached); nothing is written if the released file left
  // them so. False if none is kept. The caller frees it
  // (FreeBlock) if the create fails. *addr, if asked: the block's address.
  // `stored_lines`, if given: the lines are only stored, and how many (0:
  // none written) for the caller to write back (a version 9 create, whose
  // image is fresh and whose record names no log: fresh_inode.h).
  bool TakeRecycledLog(uint32_t* l, char** addr = nullptr, uint32_t* stored_lines = nullptr);
  // Entries of the map FileOf keeps, live or not yet swept (for tests).
  size_t FileEntriesForTest();
  // Released files' log blocks kept for new files' logs (for tests).
  size_t RecycledLogsForTest();

  // The descriptors and directory streams of this pool in this process:
  // AddUser(+1) as one is made, AddUser(-1) as it goes.
  void AddUser(int64_t delta) { users_.Add(ThreadIndex(), delta); }
  int64_t Users() const { return users_.Read(); }

 private:
  // A regular file's creation as a record in the log carries it.
  struct NotedCreation {
    uint64_t ino;
    NsCreation creation;
  };
  Pool(std::string path, std::unique_ptr<Medium> medium, uint64_t dev);
  Status Join();
  // pool_recover.cc: Recover and its steps.
  Status Recover();
  // Recovery of a version 10 pool, its bitmap rebuilt: every wholly free
  // extent given back (those given back before a crash are holes again),
  // and whatever of [from, to) the space could not give back provided, so
  // that every free block has memory (pool_give_back.cc).
  Status GiveBackAfterRebuild(uint64_t from, uint64_t to);
  // Resets the words processes share (the header's fixed part, the thread
  // slots, the bitmap and its summaries); *words: the pool's words.
  Status ResetSharedWords(uint64_t capacity, format::pool::PoolWords** words);
  // Marks the checkpoint's blocks, the whole kept namespace log (each link
  // checked before it is followed) and the log's reserve.
  Status MarkNamespaceBlocks(BlockMarker* marker);
  // Marks the inode blocks and what each inode in `linked` references,
  // checking every inode's kind; logs a crash cut short go to *cut.
  Status MarkInodeBlocks(const std::unordered_set<uint64_t>& linked, BlockMarker* marker,
                         std::vector<uint32_t>* cut,
                         const std::unordered_map<uint64_t, NsCreation>& from_records);
  // The linked inodes whose image a crash may have lost: their create
  // records (in the log after the checkpoint) made them, and their ident
  // is not that life's, or still fresh (fresh_inode.h).
  std::unordered_map<uint64_t, NsCreation> ImagesFromRecords(const std::unordered_set<uint64_t>& linked);
  Status CheckSuperblock() const;
  Status InitVolatile(bool first);
  // Loads the index from the newest checkpoint (or the empty root) and
  // moves the log to where it ends (index lock held, pinned).
  Status LoadNamespace();
  Status WriteCheckpoint();
  // Writes the image of `frozen` (the index frozen at log position `at`),
  // publishes it and swaps it in for the frozen layer.
  // `sealed`: how many of creations_ the frozen index holds (their images
  // are written back before the checkpoint is published, and they leave
  // creations_ with it).
  Status WriteImageOf(const NsIndex& frozen, NsPos at, size_t sealed, format::pool::CheckpointHeader* h,
                      std::vector<uint64_t>* image);
  // Writes back the images of the first `n` noted creations that may not
  // be durable yet (their fresh bit still set); not fenced.
  void WriteBackFreshImages(const std::vector<NotedCreation>& noted, size_t n);
  // Takes blocks for a checkpoint (*header_block, then *image_runs; all of
  // them in *runs) and copies the image into them; gives them back on
  // failure.
  Status PlaceImage(const std::vector<uint64_t>& image, std::vector<format::Run>* runs,
                    uint32_t* header_block, std::vector<format::Run>* image_runs);
  // n blocks into *runs (one run if the pool can be grown for it), split
  // as PlaceImage's.
  Status AllocImageBlocks(uint64_t n, std::vector<format::Run>* runs, uint32_t* header_block,
                          std::vector<format::Run>* image_runs);
  // Retires the log blocks from the head up to keep_lblock (exclusive)
  // and makes keep_lblock the head.
  void RetireOldLog(uint32_t keep_lblock);
  bool AnySlotInUse() const;
  class SlotLocks;

  std::string path_;
  int lock_fd() const { return medium_->fd(); }
  // Marks what the file of `in` references; a log whose last commit a
  // crash cut short is added to *cut (its head), to be cleared once the
  // whole pool proved sound.
  Status MarkFileBlocks(format::pool::Inode* in, BlockMarker* m, std::vector<uint32_t>* cut);
  // The namespace log's reserve (Superblock::nslog_reserve), kept from pool
  // version 7 on: refilled from free blocks while there are any, marked in
  // use at recovery.
  bool KeepsLogReserve() const;
  void RefillLogReserve();
  Status MarkLogReserve(BlockMarker* m) const;
  Status CheckReserveBlock(uint64_t l) const;
  std::unique_ptr<Medium> medium_;
  BlockAccess access_;
  uint64_t dev_;
  uint64_t instance_;
  std::unique_ptr<SlotLocks> slot_locks_;
  std::unique_ptr<AllocationBitmap> bitmap_;
  std::unique_ptr<EpochDomain> epochs_;
  std::unique_ptr<BlockSource> source_;
  std::unique_ptr<SharedPunchedExtents> punched_;  // version 10 (kPunchedBlock), lent to source_
  // Version 10: the punched set's memory, and source_ told to use it.
  Status SharePunchedExtents(format::pool::PoolWords* words);
  NsLog log_;
  NsIndex index_;
  InodeAllocator inodes_;
  SpinSharedMutex index_mu_;  // spins: see util/spin_shared_mutex.h
  std::mutex files_mu_;
  struct FileEntry {
    std::weak_ptr<File> file;
    // Whether to map its pages ahead was decided (a first use, or a file
    // without data): once per attachment, since the pages stay mapped
    // while the pool is attached, whatever File comes next.
    bool mapped = false;
  };
  std::unordered_map<uint64_t, FileEntry> files_;
  Status FileOfLocked(uint64_t ino, std::shared_ptr<File>* out, FileEntry** entry);  // files_mu_ held
  // A file's first log block, durable and empty: a kept one if this
  // process has any, else a new one (docs/design.md, "A file's first log
  // block, recycled").
  Status NewFileLogBlock(uint32_t* l);
  // Keeps the log of a file being released for a new file's, if it is one
  // block with few lines written: true if it did (then the caller must not
  // free that block). `res` is the replay of the released file's log.
  bool RecycleFileLog(const ReplayResult& res);
  // A kept block, when the pool has no free block (AllocBlock's last resort).
  bool TakeRecycledBlock(uint32_t* l);
  // Frees every kept block (detach: before the pool may be marked clean).
  void FreeRecycledLogs();
  struct RecycledLog {
    uint32_t block;
    uint32_t dirty_lines;  // lines [0, dirty_lines) may hold entries; the rest are zero
  };
  bool PopRecycled(RecycledLog* r);
  std::mutex recycled_mu_;
  // Taken in the bitmap and referenced by nothing, as a thread's chunk is:
  // lost to a process that dies until the next recovery rebuilds the bitmap.
  std::vector<RecycledLog> recycled_;
  // recycled_.size(), written under recycled_mu_ and read without it, so
  // that a create finds the list empty without taking the mutex (whose
  // line every create wrote, in every thread).
  std::atomic<uint32_t> recycled_count_{0};
  void MapAhead(File* f);
  // files_ is swept of the entries of closed files when it reaches this
  // size (then twice what is left, at least kFileSweepMin): amortized O(1)
  // per engine made, and bounded by twice the files open at once.
  size_t next_file_sweep_ = 0;
  ShardedCounter<64> users_;
  bool joined_ = false;
  // This process's own slot while attached: a process that dies attached
  // leaves it in use, which tells the last process to leave that the
  // volatile area holds leaks only a recovery takes back.
  uint32_t process_slot_ = kMaxSlots;
  // Set once ReloadIndexLocked failed (index lock held; read with it).
  std::atomic<bool> index_lost_{false};
  std::atomic<bool> refuse_blocks_for_test_{false};
  std::atomic<bool> refuse_images_for_test_{false};
  std::atomic<uint64_t> checkpoints_begun_{0};
  // Blocks released since this process last gave back, and whether one of
  // its threads is giving back now (NoteReleased).
  // (A line of its own: every release of every thread adds to it.)
  alignas(64) std::atomic<uint64_t> released_since_give_back_{0};
  std::atomic<bool> giving_back_{false};
  // Counts `blocks` a release freed; past kGiveBackAfterFreedBlocks, gives
  // back in the calling thread (one thread of the process at a time).
  void NoteReleased(uint64_t blocks);
  std::string lost_why_;
  Status IndexLost() const;
  // LockLatest's work once `s` holds the lock shared.
  Status Latest(std::shared_lock<SpinSharedMutex> s, std::shared_lock<SpinSharedMutex>* g);
  // The checkpoint this process last saw (its header block, 0 = none).
  std::atomic<uint64_t> seen_checkpoint_{0};
  // No checkpoint is tried before the log reaches this sequence number
  // (set after one failed: MaybeCheckpoint).
  std::atomic<uint64_t> checkpoint_retry_seq_{0};
  std::array<std::atomic<uint32_t>, kMaxThreads> ns_slots_;
  // Blocks of old checkpoints and of the log before them, retired under
  // the pool's epochs and freed when no reader can still be in them.
  std::mutex retired_mu_;
  ThreadBlocks retired_;
  // The last checkpoint image built here, kept so that the next one does
  // not fault its memory in again (5 MB for 100,000 short names).
  std::vector<uint64_t> image_buf_;
  // The creations of regular files applied to the index since its base
  // checkpoint, in log order (index lock held exclusively to add; emptied
  // when the index gets a new base). A checkpoint writes back the images
  // of those it holds before it publishes (their records leave what
  // recovery reads); recovery makes lost ones again from them.
  std::vector<NotedCreation> creations_;
  std::vector<NotedCreation> noted_buf_;  // the checkpoint owner's copy of it
};

}  // namespace upfs
