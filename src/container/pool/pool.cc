#include "container/pool/pool.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "container/ofd_lock.h"
#include "container/pool/checkpoint.h"
#include "engine/epoch_pin.h"
#include "medium/cpu_support.h"
#include "medium/pm.h"
#include "util/crc32c.h"
#include "util/time_ns.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

// The data region a pool starts with when mkfs is given no size: provisioned
// at once (on tmpfs, huge pages), so kept small; growth adds the rest.
constexpr uint64_t kDefaultInitialBytes = 8ull << 20;
// A detaching process checkpoints when its delta holds this many records,
// or a 64th of the checkpoint's entries if that is more (~Pool).
constexpr uint64_t kCheckpointAtDetachRecords = 1024;
constexpr uint64_t kDetachCheckpointEntriesPerRecord = 64;
// How long a detaching process waits for others' readers to leave the
// epoch of its retired blocks: 1000 x 200 us, 0.2 s at most.
constexpr int kDetachDrainTries = 1000;
constexpr useconds_t kDetachDrainSleepUs = 200;

}  // namespace

Status ReadSuperblock(int fd, const std::string& path, format::pool::Superblock* sb, uint64_t* file_bytes) {
  // Before the superblock's checksum runs crc32 (attach and fsck read the
  // superblock before they open the medium).
  UPFS_RETURN_IF_ERROR(CheckCpuSupport());
  struct stat st;
  if (fstat(fd, &st) != 0) return Status::FromErrno("stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error(EMEDIUMTYPE, path + ": not a regular file, not a upfs pool");
  if (uint64_t(st.st_size) < sizeof(*sb))
    return Status::Error(EMEDIUMTYPE, path + ": too short for a upfs pool");
  ssize_t r = pread(fd, sb, sizeof(*sb), 0);
  if (r < 0) return Status::FromErrno("read " + path);
  if (size_t(r) != sizeof(*sb)) return Status::Corrupt("superblock", path + ": short read");
  *file_bytes = uint64_t(st.st_size);
  return CheckSuperblockImage(*sb, *file_bytes, path);
}

Status CheckSuperblockImage(const Superblock& sb, uint64_t file_bytes, const std::string& path) {
  if (std::memcmp(sb.magic, kPoolMagic, sizeof(kPoolMagic)) != 0)
    return Status::Error(EMEDIUMTYPE, path + ": not a upfs pool (no pool magic)");
  if (sb.sb_crc != SuperblockCrc(sb))
    return Status::Corrupt("superblock", path + ": checksum mismatch");
  if (sb.version < kOldestPoolVersion || sb.version > kPoolVersion)
    return Status::Error(EPROTONOSUPPORT, path + ": pool format version " + std::to_string(sb.version) +
                                              " (this upfs reads versions " +
                                              std::to_string(kOldestPoolVersion) + " to " +
                                              std::to_string(kPoolVersion) + ")");
  if (sb.block_size != kBlockSize || sb.max_blocks != kMaxPoolBlocks ||
      sb.data_start != kDataStart || sb.flags != 0)
    return Status::Corrupt("superblock", path + ": layout fields out of range");
  if (file_bytes < (uint64_t(kDataStart) + 3) * kBlockSize || file_bytes % kBlockSize != 0)
    return Status::Corrupt("superblock", path + ": pool file truncated to " +
                                             std::to_string(file_bytes) + " bytes");
  const uint64_t blocks = file_bytes / kBlockSize;
  auto in_pool = [&](uint64_t l) { return l >= kDataStart && l < blocks; };
  if (!InodeNumberInRange(sb.root_ino) || !in_pool(sb.root_ino / kInodesPerBlock))
    return Status::Corrupt("superblock", path + ": root inode out of range");
  if (!in_pool(sb.nslog_head.load()) || !in_pool(sb.inode_chain.load()) || (sb.checkpoint.load() != 0 && !in_pool(sb.checkpoint.load())))
    return Status::Corrupt("superblock", path + ": a root pointer is out of range");
  if (sb.version >= kFirstLogReservePoolVersion)
    for (const auto& w : sb.nslog_reserve)
      if (w.load() != 0 && !in_pool(w.load()))
        return Status::Corrupt("superblock", path + ": a namespace log reserve block is out of range");
  return Status::OK();
}

// Slot liveness through OFD locks on the pool file itself.
class Pool::SlotLocks final : public SlotLiveness {
 public:
  explicit SlotLocks(int fd) : fd_(fd) {}
  bool TryLock(uint32_t s) override { return OfdLockByte(fd_, F_WRLCK, kSlotLockByteBase + s, false) == 0; }
  void Unlock(uint32_t s) override { OfdLockByte(fd_, F_UNLCK, kSlotLockByteBase + s, false); }
  bool HeldElsewhere(uint32_t s) override { return OfdByteHeldElsewhere(fd_, kSlotLockByteBase + s); }

 private:
  int fd_;
};

Status Pool::Create(const std::string& path, uint64_t size_hint) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("create pool " + path);
  auto fail = [&](Status st) {
    unlinkat(AT_FDCWD, path.c_str(), 0);
    return st;
  };
  // The header (the volatile area, the bitmap) is a hole until used. The
  // data region starts small and is provisioned the way growth provisions
  // (on tmpfs, each 2 MiB extent one huge page): left a hole, it filled
  // with small pages as blocks were first written, and the medium's
  // collapse pass, which runs at attach, had found only holes to collapse
  // there, so a pool's first 64 MiB of inodes, images and logs stayed in
  // 4 KiB pages for good (docs/design.md, "Allocation in a pool").
  const uint64_t data = std::max<uint64_t>(size_hint ? size_hint : kDefaultInitialBytes, kExtentSize);
  const uint64_t header = uint64_t(kDataStart) * kBlockSize;
  const uint64_t bytes = header + (data + kExtentSize - 1) / kExtentSize * kExtentSize;
  if (ftruncate(fd, off_t(header)) != 0) {
    close(fd);
    return fail(Status::FromErrno("size pool " + path));
  }
  std::unique_ptr<Medium> m;
  if (Status st = Medium::Open(fd, path, &m); !st.ok()) return fail(st);
  // The superblock, the shared words and the slots are stored to below and
  // at every attach: memory behind them now (medium/provide.h).
  if (Status st = m->Provide(0, uint64_t(kBitmapBlock) * kBlockSize); !st.ok()) return fail(st);
  if (Status st = m->Grow(bytes); !st.ok()) return fail(st);
  BlockAccess ba(m.get());
  // Blocks kDataStart (the root's inode block), kDataStart + 1 (the
  // namespace log's first block) and the log's reserve after it.
  const uint32_t inode_block = kDataStart, log_block = kDataStart + 1;
  char* p;
  if (Status st = ba.Addr(inode_block, &p); !st.ok()) return fail(st);
  alignas(64) static unsigned char img[kBlockSize];
  std::memset(img, 0, sizeof(img));
  reinterpret_cast<InodeBlockHeader*>(img)->magic = kInodeBlockMagic;
  auto* root = reinterpret_cast<Inode*>(img + kInodeSize);
  const uint64_t now = ClockNs(CLOCK_REALTIME_COARSE);
  root->ident.store(EncodeIdent(FileType::kDirectory, 1));
  root->mode.store(0755);
  root->owner.store(uint64_t(geteuid()) | (uint64_t(getegid()) << 32));
  root->ctime_ns.store(now);
  root->atime_ns.store(now);
  root->created_ns = now;
  root->times.mtime_ns.store(now);
  pm::CopyNT(p, img, kBlockSize);
  if (Status st = NsLog::InitBlock(&ba, log_block, 1); !st.ok()) return fail(st);

  std::memset(img, 0, sizeof(img));
  auto* sb = reinterpret_cast<Superblock*>(img);
  std::memcpy(sb->magic, kPoolMagic, sizeof(kPoolMagic));
  sb->version = kPoolVersion;
  sb->block_size = kBlockSize;
  if (getrandom(&sb->pool_id, sizeof(sb->pool_id), 0) != sizeof(sb->pool_id))
    return fail(Status::FromErrno("getrandom"));
  sb->created_ns = ClockNs(CLOCK_REALTIME);
  sb->max_blocks = kMaxPoolBlocks;
  sb->data_start = kDataStart;
  sb->root_ino = InodeNumber(inode_block, 1);
  sb->sb_crc = SuperblockCrc(*sb);
  sb->nslog_head.store(log_block);
  sb->inode_chain.store(inode_block);
  // The blocks after the log's first start its reserve (the first attach's
  // recovery marks them in use).
  for (uint32_t i = 0; i < kLogReserveBlocks; ++i) sb->nslog_reserve[i].store(log_block + 1 + i);
  sb->clean.store(0);  // the first attach builds the volatile area
  // The magic last, after everything it vouches for is durable.
  pm::Fence();
  pm::CopyNT(m->base() + sizeof(kPoolMagic), img + sizeof(kPoolMagic), kBlockSize - sizeof(kPoolMagic));
  pm::Fence();
  pm::CopyNT(m->base(), img, sizeof(kPoolMagic));
  pm::Fence();
  if (Status st = m->SyncAll(); !st.ok()) return fail(st);
  return Status::OK();
}

Pool::Pool(std::string path, std::unique_ptr<Medium> medium, uint64_t dev)
    : path_(std::move(path)), medium_(std::move(medium)), access_(medium_.get()), dev_(dev) {
  static std::atomic<uint64_t> instances{0};
  instance_ = instances.fetch_add(1, std::memory_order_relaxed) + 1;
  for (auto& s : ns_slots_) s.store(kMaxSlots, std::memory_order_relaxed);
}

Status Pool::Attach(const std::string& path, std::unique_ptr<Pool>* out) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open pool " + path);
  alignas(64) static thread_local Superblock sb;
  uint64_t bytes;
  if (Status s = ReadSuperblock(fd, path, &sb, &bytes); !s.ok()) {
    close(fd);
    return s;
  }
  struct stat st;
  fstat(fd, &st);
  std::unique_ptr<Medium> m;
  UPFS_RETURN_IF_ERROR(Medium::Open(fd, path, &m));
  std::unique_ptr<Pool> pool(new Pool(path, std::move(m), uint64_t(st.st_dev)));
  UPFS_RETURN_IF_ERROR(pool->Join());
  *out = std::move(pool);
  return Status::OK();
}

Status Pool::Join() {
  const int fd = lock_fd();
  if (OfdLockByte(fd, F_WRLCK, kAttachLockByte, true) != 0) return Status::FromErrno("lock pool");
  const bool first = OfdLockByte(fd, F_WRLCK, kUsersLockByte, false) == 0;
  Status st = InitVolatile(first);
  if (st.ok() && first) {
    pm::Store64(&mutable_super()->clean, 0);
    pm::PersistWord(&mutable_super()->clean);
  }
  if (st.ok() && OfdLockByte(fd, F_RDLCK, kUsersLockByte, true) != 0) st = Status::FromErrno("lock pool");
  joined_ = st.ok();
  OfdLockByte(fd, F_UNLCK, kAttachLockByte, false);
  return st;
}

Status Pool::InitVolatile(bool first) {
  char* p;
  UPFS_RETURN_IF_ERROR(access_.Addr(kWordsBlock, &p));
  auto* words = reinterpret_cast<PoolWords*>(p);
  UPFS_RETURN_IF_ERROR(access_.Addr(kSlotsBlock, &p));
  auto* slots = reinterpret_cast<ReclaimSlot*>(p);
  UPFS_RETURN_IF_ERROR(access_.Addr(kBitmapBlock, &p));
  auto* bits = reinterpret_cast<std::atomic<uint64_t>*>(p);
  UPFS_RETURN_IF_ERROR(access_.Addr(kSummaryBlock, &p));
  auto* summary = reinterpret_cast<std::atomic<uint64_t>*>(p);
  slot_locks_ = std::make_unique<SlotLocks>(lock_fd());
  bitmap_ = std::make_unique<AllocationBitmap>(&words->bitmap, bits, summary, kMaxPoolBlocks);
  epochs_ = std::make_unique<EpochDomain>(&words->epochs, slots, slot_locks_.get());
  epochs_->KeepReleasedSlots();
  source_ = std::make_unique<BlockSource>(medium_.get(), bitmap_.get(), epochs_.get(), kDataStart);
  source_->ParkClosedChunks();  // returned in ~Pool
  UPFS_RETURN_IF_ERROR(SharePunchedExtents(words));
  inodes_.Init(&access_, mutable_super(), words, [this](uint32_t* l) { return AllocBlock(l); });
  log_.SetOneWait(super()->version >= kFirstOneWaitPoolVersion);  // before any thread reads the log
  log_.SetCreations(super()->version >= kFirstFreshCreatePoolVersion);
  // The epoch too (EpochWords::Plausible): a damaged one made every pin
  // look idle (fuzz_pool).
  const bool valid =
      words->magic == kVolatileMagic && words->pool_id == super()->pool_id && words->epochs.Plausible();
  // A pool file cut shorter than the capacity its volatile area records (by
  // hand, while clean) has lost blocks that area hands out: the first to
  // attach makes the area again (recovery judges what the cut took); with
  // others attached, it is damage. The capacity is read first and the
  // file's size after it: a growth publishes the capacity only once the
  // file has grown, so a growth racing this attach cannot look like a cut.
  bool cut = false;
  if (valid) {
    const uint64_t recorded = words->bitmap.capacity_blocks.load(std::memory_order_acquire);
    UPFS_RETURN_IF_ERROR(medium_->RefreshCapacity());
    cut = recorded > medium_->capacity() >> kBlockShift;
  }
  const bool recover = first && (!valid || cut || super()->clean.load() != 1);
  if (!recover && !valid)
    return Status::Corrupt("volatile area", path_ + ": in use but not initialized (or its epoch damaged)");
  if (!recover && cut)
    return Status::Corrupt("pool file", path_ + ": shorter than the capacity its attached processes use (" +
                                            std::to_string(medium_->capacity()) + " bytes; cut while in use?)");
  if (recover) UPFS_RETURN_IF_ERROR(Recover());  // resets the slots: claim ours after it
  if (Status st = epochs_->ClaimSlot(&process_slot_); !st.ok())
    return Status::Error(st.err(), path_ + ": process slot: " + st.message());
  if (recover) return Status::OK();
  // Pinned: a checkpoint in another process may retire log blocks meanwhile.
  EpochPin pin(epochs_.get(), process_slot_);
  std::unique_lock<SpinSharedMutex> g(index_mu_);
  UPFS_RETURN_IF_ERROR(LoadNamespace());
  return CatchUpLocked();
}

Status Pool::LoadNamespace() {
  auto alloc = [this](uint32_t* l, bool removal) { return AllocLogBlock(l, removal); };
  auto free = [this](uint32_t l) { FreeBlock(l); };
  const uint64_t ck = super()->checkpoint.load(std::memory_order_acquire);
  seen_checkpoint_.store(ck, std::memory_order_release);
  creations_.clear();  // the index's records start after the checkpoint again
  if (ck == 0) {
    index_.Rebase(root_ino(), nullptr);
    return log_.Init(&access_, uint32_t(super()->nslog_head.load()), alloc, free);
  }
  const CheckpointHeader* h;
  UPFS_RETURN_IF_ERROR(ReadCheckpointHeader(access_, ck, super()->version, &h));
  auto base = std::make_unique<BaseImage>();
  UPFS_RETURN_IF_ERROR(base->Open(access_, *h, ck));
  index_.Rebase(root_ino(), std::move(base));
  return log_.InitAt(&access_, NsPos{h->cont_lblock, h->cont_slot, h->cont_seq}, alloc, free);
}

Status Pool::AllocBlock(uint32_t* l) {
  Status st = refuse_blocks_for_test_.load(std::memory_order_relaxed)
                  ? Status::Error(ENOSPC, "no free block (refused for a test)")
                  : source_->AllocSingle(l);
  // Blocks kept for new files' logs are the last free ones.
  if (!st.ok() && (st.err() != ENOSPC || !TakeRecycledBlock(l))) return st;
  // Mapped for the caller: the block may lie in space another process grew
  // (a long symbolic link's target is copied to it unchecked).
  st = access_.CheckRange(*l, 1, "new block");
  if (!st.ok()) FreeBlock(*l);
  return st;
}

void Pool::FreeBlock(uint32_t l) { bitmap_->Clear(l); }

Status Pool::NamespaceSlot(uint32_t* slot) {
  const uint32_t t = ThreadIndex();
  if (t >= kMaxThreads) return Status::Error(EAGAIN, "too many threads using upfs");
  uint32_t s = ns_slots_[t].load(std::memory_order_acquire);
  if (s >= kMaxSlots) {
    if (Status st = epochs_->ClaimSlot(&s); !st.ok())
      return Status::Error(st.err(), path_ + ": thread slot: " + st.message());
    ns_slots_[t].store(s, std::memory_order_release);
  }
  *slot = s;
  return Status::OK();
}

Status Pool::Pin(std::optional<EpochPin>* pin) {
  uint32_t slot;
  UPFS_RETURN_IF_ERROR(NamespaceSlot(&slot));
  pin->emplace(epochs_.get(), slot);
  return Status::OK();
}

Status Pool::CatchUpLocked() {
  if (index_lost_.load(std::memory_order_relaxed)) return IndexLost();
  // A new checkpoint: a new base, and an empty delta from where it ends
  // (the old image is retired; the log from its end on is kept).
  if (CheckpointUnseen()) UPFS_RETURN_IF_ERROR(LoadNamespace());
  return log_.ReadNew([this](const NsRecord& r) { return ApplyLocked(r); });
}

Status Pool::ApplyLocked(const NsRecord& r, bool validated) {
  UPFS_RETURN_IF_ERROR(index_.Apply(r, validated));
  // Any record that makes an inode: one without creation values (a
  // symbolic link, an older pool's file or directory) ends what an earlier
  // life's record could say about the inode.
  if (r.type == RecordType::kCreate || r.type == RecordType::kMkdir)
    creations_.push_back(NotedCreation{r.ino, r.creation});
  return Status::OK();
}

Status Pool::ReloadIndexLocked() {
  Status st = LoadNamespace();
  if (st.ok()) st = CatchUpLocked();  // the checkpoint is the newest now: only the log after it
  if (!st.ok()) {
    // Damage on damage: the index may stand past a record it lacks, and a
    // checkpoint written from it would drop that record from the pool.
    // Nothing of this attachment uses it again (every call fails, loudly).
    index_lost_.store(true, std::memory_order_relaxed);
    lost_why_ = st.message();
  }
  return st;
}

Status Pool::IndexLost() const {
  return Status::Corrupt("namespace index", path_ + ": this process could not make its index of the pool again (" +
                                                lost_why_ + "); detach, check (upfs fsck) and attach again");
}

Status Pool::LockLatest(std::shared_lock<SpinSharedMutex>* g) {
  return Latest(std::shared_lock<SpinSharedMutex>(index_mu_), g);
}

Status Pool::PinAndLockLatest(std::optional<EpochPin>* pin, std::shared_lock<SpinSharedMutex>* g) {
  uint32_t slot;
  UPFS_RETURN_IF_ERROR(NamespaceSlot(&slot));
  index_mu_.lock_shared_sharing_fence([&] { pin->emplace(epochs_.get(), slot, EpochPin::FenceFollows{}); },
                                      [&] { (*pin)->Confirm(); });
  return Latest(std::shared_lock<SpinSharedMutex>(index_mu_, std::adopt_lock), g);
}

Status Pool::Latest(std::shared_lock<SpinSharedMutex> s, std::shared_lock<SpinSharedMutex>* g) {
  if (IndexCurrent()) {
    *g = std::move(s);
    return Status::OK();
  }
  s.unlock();
  {
    std::unique_lock<SpinSharedMutex> u(index_mu_);
    UPFS_RETURN_IF_ERROR(CatchUpLocked());
  }
  // Records committed after the catch-up began are concurrent with the
  // caller: they need not be seen, and others' catch-ups only add to it.
  *g = std::shared_lock<SpinSharedMutex>(index_mu_);
  return Status::OK();
}

Status Pool::CatchUp() {
  uint32_t slot;
  UPFS_RETURN_IF_ERROR(NamespaceSlot(&slot));
  EpochPin pin(epochs_.get(), slot);
  std::shared_lock<SpinSharedMutex> g;
  return LockLatest(&g);
}

bool Pool::AnySlotInUse() const {
  const uint64_t hi = std::min<uint64_t>(epochs_->slots_high(), kMaxSlots);
  for (uint32_t i = 0; i < hi; ++i)
    if (epochs_->slot(i)->in_use.load(std::memory_order_acquire) != 0) return true;
  return false;
}

namespace {
// Gives back a kept list's memory once it grew past a small file's.
template <typename T>
void DropIfBig(std::vector<T>* v) {
  constexpr size_t kKeptEntries = 4096;
  if (v->capacity() > kKeptEntries) std::vector<T>().swap(*v);
}
}  // namespace

Status Pool::ReleaseInode(uint64_t ino) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(InodeAt(ino, &in));
  // Collected first, freed after: a damaged log frees nothing. The lists
  // are this thread's, kept from one release to the next: a removed small
  // file's block list and its replay's log list were two allocations of
  // the 15 in a pool file's create, write, close and unlink (callgrind).
  // (The replay sets its own lists; they are read only after one.)
  static thread_local std::vector<uint32_t> blocks;
  static thread_local ReplayResult res;
  blocks.clear();
  const uint64_t target = in->target_block.load(std::memory_order_acquire);
  const uint64_t head = in->log_head.load(std::memory_order_acquire);
  // Every block checked before any is freed (a damaged inode or log frees
  // nothing): a number past the bitmap would be a store outside it. The
  // target is a 64-bit word, checked before it is narrowed.
  const uint64_t cap = bitmap_->capacity();
  const auto outside = [&](uint64_t l) {
    return Status::Corrupt("inode " + std::to_string(ino),
                           "names block " + std::to_string(l) + ", outside the pool's " + std::to_string(cap));
  };
  if (target != 0) {
    if (target >= cap) return outside(target);
    blocks.push_back(uint32_t(target));
  }
  if (head != 0) {
    BlockTable table;
    UPFS_RETURN_IF_ERROR(ReplayChain(access_, uint32_t(head), &table, &res, TailRule::kLive));
    blocks.insert(blocks.end(), res.log_blocks.begin(), res.log_blocks.end());
    for (const Run& r : res.overflow)
      for (uint32_t i = 0; i < r.count; ++i) blocks.push_back(r.lblock + i);
    table.ForEachHeld([&](uint32_t l) { blocks.push_back(l); });
  }
  for (uint32_t l : blocks)
    if (l == 0 || l >= cap) return outside(l);
  pm::Store64(&in->log_head, 0);
  pm::Store64(&in->target_block, 0);
  UPFS_RETURN_IF_ERROR(inodes_.Free(ino));
  const bool kept = head != 0 && RecycleFileLog(res);  // its one log block, if so
  for (uint32_t l : blocks)
    if (!kept || l != res.log_blocks[0]) bitmap_->Clear(l);
  NoteReleased(blocks.size());
  // A big file's lists are not kept for the thread's life.
  DropIfBig(&blocks);
  DropIfBig(&res.log_blocks);
  DropIfBig(&res.overflow);
  return Status::OK();
}

Pool::~Pool() {
  files_.clear();
  // The closed files' chunk rests (BlockSource::ReturnAtClose) go back first: what
  // follows may mark the pool clean, and its bitmap must then be exact.
  if (source_) source_->ReturnParked();
  if (!joined_) return;
  FreeRecycledLogs();
  // A long delta costs every later attach its replay: leave a checkpoint
  // instead (at most one interval of records, written once), when that
  // pays. A checkpoint rewrites the whole image: 32-37 ms for 300,000
  // names, which a process that made 1,100 files there paid at every
  // detach; a record replays in 0.6-0.9 us in a fresh process
  // (docs/design.md, "Attach time"). So only a delta of a 64th of the
  // image's entries or more: up to about 4,700 records (3-4 ms) more for
  // an attach of 300,000 names, 1,562 instead of 1,024 for 100,000.
  const BaseImage* base = index_.base();
  const uint64_t entries = base ? base->header().entries : 0;
  if (index_.delta_records() >= std::max(kCheckpointAtDetachRecords, entries / kDetachCheckpointEntriesPerRecord))
    (void)Checkpoint();
  bool left_blocks = false;
  {
    std::lock_guard<std::mutex> g(retired_mu_);
    // Retired log and image blocks are freed once every process has moved
    // past their epoch; a reader of another process holds it for the
    // length of one call, so wait a little for it (bounded: it may have
    // died pinned).
    for (int i = 0; i < kDetachDrainTries && !retired_.limbo.empty(); ++i) {
      source_->DrainLimbo(&retired_, true);
      if (!retired_.limbo.empty()) usleep(kDetachDrainSleepUs);
    }
    left_blocks = !retired_.limbo.empty();
    source_->ReturnAll(&retired_);
  }
  // What this process freed and nobody uses: its memory goes back to the
  // host beyond what the next writers want at hand. The background growth
  // stops first: one still running would add memory after the count.
  medium_->JoinBackground();
  GiveBackFreeSpace();
  for (auto& s : ns_slots_)
    if (const uint32_t v = s.load(); v < kMaxSlots) epochs_->ReleaseSlot(v);
  // Blocks still retired are lost to this process's memory: its slot stays
  // claimed, as a dead process's would, so that no one marks the pool
  // clean and the next recovery (which rebuilds the bitmap) frees them.
  if (!left_blocks) epochs_->ReleaseSlot(process_slot_);
  epochs_->ReleaseKeptSlots();
  const int fd = lock_fd();
  if (OfdLockByte(fd, F_WRLCK, kAttachLockByte, true) == 0) {
    // Not clean if this process leaves holds behind (descriptors still
    // open at exit) or some process died attached: recovery frees them.
    if (OfdLockByte(fd, F_WRLCK, kUsersLockByte, false) == 0 && users_.Read() == 0 && !AnySlotInUse() &&
        medium_->SyncAll().ok()) {
      // The last to leave: the volatile area is consistent (every thread
      // of every process has left it), so the next attach need not rebuild.
      pm::Store64(&mutable_super()->clean, 1);
      pm::PersistWord(&mutable_super()->clean);
    }
    OfdLockByte(fd, F_UNLCK, kUsersLockByte, false);
    OfdLockByte(fd, F_UNLCK, kAttachLockByte, false);
  }
  medium_->JoinBackground();
}

}  // namespace upfs
